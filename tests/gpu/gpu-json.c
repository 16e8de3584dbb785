/* SPDX-License-Identifier: MIT */
/*
 * gpu-json.c - one value of a JSON file by a dotted path, for
 * tests/gpu/run.sh.
 *
 * Why: run.sh reads the figures batchd-bench and batchctl write as JSON,
 * on GPU machines that may have no Python and no jq; the bundle carries
 * this instead (json-c and tools/common/json_path.c, as batchctl reads status).
 *
 *   gpu-json FILE PATH        the value: a string as it is, anything else
 *                             as JSON (true, 12.5, {...}); "n/a" and exit 1
 *                             when FILE does not parse or PATH is missing
 *   gpu-json --len FILE PATH  the length of the array at PATH
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#include "json_path.h"

int main(int argc, char **argv)
{
	bool len = argc == 4 && !strcmp(argv[1], "--len");
	json_object *doc, *v;
	int rc = 1;

	if (argc != 3 && !len) {
		fprintf(stderr, "usage: gpu-json [--len] FILE PATH\n");
		return 2;
	}
	doc = json_object_from_file(argv[len ? 2 : 1]);
	v = doc ? json_path_get(doc, argv[len ? 3 : 2]) : NULL;
	if (v && len && json_object_is_type(v, json_type_array)) {
		printf("%zu\n", json_object_array_length(v));
		rc = 0;
	} else if (v && !len) {
		puts(json_object_is_type(v, json_type_string) ? json_object_get_string(v) :
		     json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
		rc = 0;
	} else {
		puts("n/a");
	}
	json_object_put(doc);
	return rc;
}
