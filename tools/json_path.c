/* SPDX-License-Identifier: MIT */
/*
 * json_path.c - a value of a json-c document by a dotted path (see
 * json_path.h).
 */
#include <stdio.h>
#include <string.h>

#include "json_path.h"

json_object *json_path_get(json_object *o, const char *path)
{
	char key[64];
	const char *dot;

	while (o && (dot = strchr(path, '.'))) {
		snprintf(key, sizeof(key), "%.*s", (int)(dot - path), path);
		if (!json_object_object_get_ex(o, key, &o))
			return NULL;
		path = dot + 1;
	}
	return o && json_object_object_get_ex(o, path, &o) ? o : NULL;
}
