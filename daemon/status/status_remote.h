/* SPDX-License-Identifier: MIT */
/*
 * status_remote.h - the remote cache's part of the status reply and the
 * metrics (status_remote.c). Loop thread, as the rest of status.c.
 */
#ifndef BATCHD_DAEMON_STATUS_REMOTE_H
#define BATCHD_DAEMON_STATUS_REMOTE_H

#include "util.h"

/* "remote": {...}, (or null without remote datasets), a comma after. */
void bd__status_remote(bd_text *t);
/* The batchd_remote_* and batchd_cache_disk_* series; nothing without remote datasets. */
void bd__metrics_remote(bd_text *t);

#endif
