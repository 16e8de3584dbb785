/* SPDX-License-Identifier: MIT */
/*
 * batchctl.h - what batchctl's files share: batchctl.c operates the
 * daemon (status, stats, sessions, metrics, top) and dispatches;
 * batchctl_consume.c is the trainer-like `consume`; batchctl_doctor.c
 * says whether a trainer waits on data and why.
 *
 * Thread rules: batchctl is single-threaded.
 */
#ifndef BATCHD_TOOLS_BATCHCTL_H
#define BATCHD_TOOLS_BATCHCTL_H

#include <json-c/json.h>

#include "batchclient.h"

/*
 * Connect to batchd at sock (NULL: the default socket).
 * @return 0 with *c set, or bc_connect's negative errno after saying why.
 */
int batchctl_connect(const char *sock, bc_client **c);

/* `batchctl consume`, argv from the word "consume" on. @return the exit status. */
int batchctl_consume(const char *sock, int argc, char **argv);

/* `batchctl doctor`, argv from the word "doctor" on. @return the exit status. */
int batchctl_doctor(const char *sock, int argc, char **argv);

/* The daemon's status document (NULL after saying why); its values by dotted path, 0 or "" when absent. */
json_object *status_of(const char *sock);
uint64_t get_u64(json_object *o, const char *path);
double get_f64(json_object *o, const char *path);
const char *get_str(json_object *o, const char *path);
/* The price of a GPU-hour the daemon charges stall at (0: none set), and GPUs a trainer holds. */
double gpu_hour_price(json_object *o);
double gpus_per_session(json_object *o);
/* Session id of a status's "sessions" array, or NULL. */
json_object *find_session(json_object *sessions, uint64_t id);

#endif
