/* SPDX-License-Identifier: MIT */
/*
 * service.c - systemd integration (see service.h).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/socket.h>

#include "batchd-build.h"
#include "service.h"

#if BATCHD_HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>

void bd_service_notify(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	sd_notify(0, msg);
}

uint64_t bd_service_watchdog_usec(void)
{
	uint64_t usec = 0;

	return sd_watchdog_enabled(0, &usec) > 0 ? usec : 0;
}

int bd_service_listen_fd(void)
{
	int n = sd_listen_fds(1);

	if (n <= 0)
		return -1;
	if (n != 1 || sd_is_socket_unix(SD_LISTEN_FDS_START, SOCK_SEQPACKET, 1, NULL, 0) <= 0)
		return -EINVAL;
	return SD_LISTEN_FDS_START;
}
#else
void bd_service_notify(const char *fmt, ...)
{
	(void)fmt;
}

uint64_t bd_service_watchdog_usec(void)
{
	return 0;
}

int bd_service_listen_fd(void)
{
	return -1;
}
#endif
