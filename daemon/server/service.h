/* SPDX-License-Identifier: MIT */
/*
 * service.h - batchd as a systemd service: readiness and status
 * notifications, the watchdog, and socket activation (libsystemd).
 *
 * Every function is a no-op (or says "not activated") when batchd runs
 * outside systemd or was built without libsystemd, so the daemon calls
 * them unconditionally.
 *
 * Thread rules: loop thread.
 */
#ifndef BATCHD_DAEMON_SERVICE_H
#define BATCHD_DAEMON_SERVICE_H

#include <stdbool.h>
#include <stdint.h>

/* sd_notify(3) with a printf format ("READY=1\nSTATUS=..."). */
__attribute__((format(printf, 1, 2)))
void bd_service_notify(const char *fmt, ...);

/* The watchdog interval systemd asked for, in microseconds; 0 when none. */
uint64_t bd_service_watchdog_usec(void);

/*
 * The listening socket systemd passed (socket activation), checked to be
 * a listening AF_UNIX SOCK_SEQPACKET socket; -1 when there is none.
 * @return the fd, -1, or -EINVAL for a passed socket of the wrong kind.
 */
int bd_service_listen_fd(void);

#endif
