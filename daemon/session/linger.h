/* SPDX-License-Identifier: MIT */
/*
 * linger.h - shared memory a client keeps after its session ended stays
 * charged until its pages are really gone.
 *
 * A session's memfds are handed to the client, which may keep a
 * descriptor or a mapping after it closed the session or was cut off. The
 * data memfd is sealed against writes (F_SEAL_FUTURE_WRITE), so the daemon
 * cannot punch its pages out either: they live exactly as long as the
 * last descriptor or mapping of the memfd in any process. Until then they
 * count against the memory budget and the uid's memory_per_uid, as if the
 * session were still open.
 *
 * How the end is seen: an inotify watch for IN_DELETE_SELF on
 * /proc/self/fd/N, added while the daemon still holds descriptor N,
 * fires when the memfd's inode dies, i.e. when the last descriptor and
 * the last mapping in any process are gone and the pages are freed. The
 * inotify descriptor is watched from the loop; bd_linger_drain() reads it
 * at once, so a memfd the client had already let go is uncharged the
 * moment the daemon closes its own descriptor.
 *
 * Limits: at most min(4096, fs.inotify.max_queued_events / 2 - 64)
 * memfds linger at once (each delivers two events, and a lost event would
 * keep its bytes charged for ever); past that, and when inotify is not
 * available or fs.inotify.max_user_watches is reached, a memfd is
 * uncharged at once, as if its client had let go, with one warning. A
 * queue overflow (which the limit rules out) uncharges everything.
 *
 * Thread rules: everything here on the loop thread.
 */
#ifndef BATCHD_DAEMON_LINGER_H
#define BATCHD_DAEMON_LINGER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

#include "budget.h"

typedef struct bd_linger bd_linger;

/* No uid: bytes that count for the budget only. */
#define BD_LINGER_NO_UID ((uid_t)-1)

/*
 * The tracker, watched from loop. Without inotify it still works, as a
 * tracker that keeps nothing (logged once). @return 0 or -ENOMEM.
 */
int bd_linger_new(uv_loop_t *loop, bd_linger **ret);

/*
 * Uncharge everything still lingering and close the tracker (its handle
 * closes through the loop, which must run once more). NULL is fine.
 */
void bd_linger_free(bd_linger *l);

/*
 * Keep `bytes` charged to budget (as sessions', budget.h) and to uid
 * until the last descriptor and mapping of memfd `fd` are gone. Call
 * while fd is still open (before the daemon's own close and unmap), then
 * bd_linger_drain() after them. @return true when the bytes linger (the
 * tracker gives them back to budget later); false when the caller must
 * give them back now (no tracker, no inotify, or a limit reached: see
 * above).
 */
bool bd_linger_add(bd_linger *l, int fd, uint64_t bytes, uid_t uid, bd_budget *budget);

/* Take in the memfds that died since the last look, now. NULL is fine. */
void bd_linger_drain(bd_linger *l);

/* Bytes lingering for uid; for all uids (bd_linger_bytes). 0 for a NULL tracker. */
uint64_t bd_linger_uid_bytes(const bd_linger *l, uid_t uid);
uint64_t bd_linger_bytes(const bd_linger *l);

/* How many memfds linger now. */
uint32_t bd_linger_count(const bd_linger *l);

#endif
