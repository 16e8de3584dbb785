/* SPDX-License-Identifier: MIT */
/*
 * json_path.h - one value of a json-c document by a dotted path
 * ("cuda.device_memory"), as batchctl and the tests read batchd's status
 * document. Why a file of its own: batchctl, test-service and test-gpu all
 * walk the same nested objects, and one walker keeps their reading alike.
 *
 * Thread rules: any thread, on a document no other thread changes.
 */
#ifndef BATCHD_TOOLS_JSON_PATH_H
#define BATCHD_TOOLS_JSON_PATH_H

#include <json-c/json.h>

/*
 * The value at path: steps separated by '.' (each under 64 bytes),
 * followed from o; a step is an object's key, or a decimal index into an
 * array ("sessions.0.gpu.pinned"). @return it (borrowed: o owns it), or
 * NULL when o is NULL or a step along the way is missing (no such key, an
 * index past the end, a key into an array or into a scalar).
 */
json_object *json_path_get(json_object *o, const char *path);

#endif
