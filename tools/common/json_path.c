/* SPDX-License-Identifier: MIT */
/*
 * json_path.c - a value of a json-c document by a dotted path (see
 * json_path.h).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_path.h"

/* One step: key in an object, or a decimal index in an array. */
static json_object *child(json_object *o, const char *key)
{
	json_object *v;
	char *end;
	unsigned long i;

	if (json_object_is_type(o, json_type_array)) {
		if (!isdigit((unsigned char)key[0]))
			return NULL;
		i = strtoul(key, &end, 10);
		return *end || i >= json_object_array_length(o) ? NULL :
			json_object_array_get_idx(o, i);
	}
	return json_object_object_get_ex(o, key, &v) ? v : NULL;
}

json_object *json_path_get(json_object *o, const char *path)
{
	char key[64];
	const char *dot;

	while (o && (dot = strchr(path, '.'))) {
		snprintf(key, sizeof(key), "%.*s", (int)(dot - path), path);
		o = child(o, key);
		path = dot + 1;
	}
	return o ? child(o, path) : NULL;
}
