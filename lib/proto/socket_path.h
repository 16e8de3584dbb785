/* SPDX-License-Identifier: MIT */
/*
 * socket_path.h - where a client looks for batchd when it is not told:
 * libbatchclient's bc_connect(NULL) after $BATCHD_SOCKET, and batchd, which
 * says how its clients will find a socket they would not look in.
 */
#ifndef BATCHD_PROTO_SOCKET_PATH_H
#define BATCHD_PROTO_SOCKET_PATH_H

#include <stddef.h>

/* The system socket, where batchd.service (and a root batchd by hand) listens. */
#define BP_SOCKET_SYSTEM "/run/batchd/batchd.sock"

enum bp_socket_where { BP_SOCKET_IS_SYSTEM = 0, BP_SOCKET_IS_XDG = 1 };

/*
 * The system socket when it exists or $XDG_RUNTIME_DIR is unset, else
 * $XDG_RUNTIME_DIR/batchd.sock (a user's batchd), into buf. $BATCHD_SOCKET
 * is the caller's to look at first. @return enum bp_socket_where, or
 * -ENAMETOOLONG.
 */
int bp_socket_default(char *buf, size_t len);

#endif
