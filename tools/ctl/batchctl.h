/* SPDX-License-Identifier: MIT */
/*
 * batchctl.h - what batchctl's files share: batchctl.c operates the
 * daemon (status, stats, sessions, metrics, top) and dispatches;
 * batchctl_consume.c is the trainer-like `consume`.
 *
 * Thread rules: batchctl is single-threaded.
 */
#ifndef BATCHD_TOOLS_BATCHCTL_H
#define BATCHD_TOOLS_BATCHCTL_H

#include "batchclient.h"

/*
 * Connect to batchd at sock (NULL: the default socket).
 * @return 0 with *c set, or bc_connect's negative errno after saying why.
 */
int batchctl_connect(const char *sock, bc_client **c);

/* `batchctl consume`, argv from the word "consume" on. @return the exit status. */
int batchctl_consume(const char *sock, int argc, char **argv);

#endif
