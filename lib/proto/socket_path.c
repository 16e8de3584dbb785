/* SPDX-License-Identifier: MIT */
/*
 * socket_path.c - the socket a client looks for by default (socket_path.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "socket_path.h"

int bp_socket_default(char *buf, size_t len)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");

	if (access(BP_SOCKET_SYSTEM, F_OK) == 0 || !xdg || !*xdg)
		return snprintf(buf, len, "%s", BP_SOCKET_SYSTEM) < (int)len ? BP_SOCKET_IS_SYSTEM
									   : -ENAMETOOLONG;
	return snprintf(buf, len, "%s/batchd.sock", xdg) < (int)len ? BP_SOCKET_IS_XDG
								    : -ENAMETOOLONG;
}
