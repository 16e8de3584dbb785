/* SPDX-License-Identifier: MIT */
/*
 * log.h - the daemon's log: one line per event on stderr.
 *
 * Under journald (JOURNAL_STREAM names our stderr) each line carries a
 * syslog priority prefix ("<3>") so the journal files it at the right
 * level; elsewhere lines are plain with a level word. Lines are formatted
 * whole and written with one write(2), so threads never interleave.
 *
 * Thread rules: any thread.
 */
#ifndef BATCHD_DAEMON_LOG_H
#define BATCHD_DAEMON_LOG_H

#include <syslog.h>

void bd_log_init(int max_level);
void bd_log_set_level(int max_level);
int bd_log_level(void);

__attribute__((format(printf, 2, 3)))
void bd_log(int prio, const char *fmt, ...);

/* Log at `prio` and evaluate to `err`: `return bd_log_ret(LOG_ERR, r, "...")`. */
#define bd_log_ret(prio, err, ...) (bd_log((prio), __VA_ARGS__), (err))

/* Parse "err", "warning", "notice", "info", "debug". @return level or -EINVAL. */
int bd_log_parse_level(const char *s);

/* The name of a level from LOG_ERR to LOG_DEBUG, "?" for any other. */
const char *bd_log_level_name(int level);

#endif
