/* SPDX-License-Identifier: MIT */
/*
 * linger.c - memfds a client still holds after its session ended, charged
 * until inotify says their inode is gone (see linger.h).
 *
 * The entries are an array in the order they were added; events name
 * them by watch descriptor, and the array is short (see the limit), so a
 * linear search is all it takes.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "linger.h"
#include "log.h"
#include "util.h"

#define MAX_ENTRIES 4096u

typedef struct entry {
	int wd;
	uid_t uid;
	uint64_t bytes;
	bd_budget *budget;
} entry;

struct bd_linger {
	uv_poll_t poll;
	int ifd;                    /* -1: no inotify, nothing lingers */
	bool polling;
	bool warned;
	uint32_t max;               /* entries at most (see linger.h) */
	entry *e;
	uint32_t n, cap;
};

/* Say once why memory a client keeps is no longer charged. */
static void warn_once(bd_linger *l, const char *why)
{
	if (l->warned)
		return;
	l->warned = true;
	bd_log(LOG_WARNING, "%s: shared memory a client keeps after its session ended is no longer "
	       "charged to the memory budget and memory_per_uid", why);
}

/* min(MAX_ENTRIES, max_queued_events / 2 - 64): two events each must fit the queue. */
static uint32_t entry_limit(void)
{
	FILE *f = fopen("/proc/sys/fs/inotify/max_queued_events", "re");
	unsigned long q = 0;

	if (f) {
		if (fscanf(f, "%lu", &q) != 1)
			q = 0;
		fclose(f);
	}
	if (!q)
		return MAX_ENTRIES / 4; /* unknown: the smallest queue seen in practice (2048) */
	if (q / 2 <= 64)
		return 0;
	return q / 2 - 64 < MAX_ENTRIES ? (uint32_t)(q / 2 - 64) : MAX_ENTRIES;
}

static void uncharge(entry *x)
{
	bd_budget_give(x->budget, BD_BUDGET_SESSIONS, x->bytes);
}

/* Entry i's memfd is gone (or can no longer be watched): its bytes go back. */
static void release(bd_linger *l, uint32_t i)
{
	bd_log(LOG_DEBUG, "shared memory of an ended session let go: %" PRIu64 " bytes uncharged",
	       l->e[i].bytes);
	uncharge(&l->e[i]);
	memmove(&l->e[i], &l->e[i + 1], (l->n - i - 1) * sizeof(*l->e));
	l->n--;
}

static void release_wd(bd_linger *l, int wd)
{
	for (uint32_t i = 0; i < l->n; i++)
		if (l->e[i].wd == wd) {
			release(l, i);
			return;
		}
}

static void release_all(bd_linger *l)
{
	while (l->n)
		release(l, l->n - 1);
}

/* One buffer of events. IN_IGNORED follows IN_DELETE_SELF; either ends a watch. */
static void handle_events(bd_linger *l, const uint8_t *buf, ssize_t len)
{
	for (ssize_t off = 0; off + (ssize_t)sizeof(struct inotify_event) <= len;) {
		const struct inotify_event *ev = (const struct inotify_event *)(buf + off);

		if (ev->mask & IN_Q_OVERFLOW) {
			bd_log(LOG_WARNING, "inotify queue overflow (fs.inotify.max_queued_events): "
			       "uncharging the shared memory of %u ended sessions", l->n);
			release_all(l);
		} else if (ev->mask & (IN_DELETE_SELF | IN_IGNORED)) {
			release_wd(l, ev->wd);
		}
		off += (ssize_t)sizeof(*ev) + ev->len;
	}
}

void bd_linger_drain(bd_linger *l)
{
	uint8_t buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	ssize_t len;

	if (!l || l->ifd < 0)
		return;
	while ((len = read(l->ifd, buf, sizeof(buf))) > 0)
		handle_events(l, buf, len);
}

static void on_readable(uv_poll_t *h, int status, int events)
{
	(void)status;
	(void)events;
	bd_linger_drain(h->data);
}

int bd_linger_new(uv_loop_t *loop, bd_linger **ret)
{
	bd_linger *l = bd_calloc(1, sizeof(*l));

	if (!l)
		return -ENOMEM;
	l->max = entry_limit();
	l->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (l->ifd < 0) {
		warn_once(l, "no inotify (fs.inotify.max_user_instances?)");
	} else if (uv_poll_init(loop, &l->poll, l->ifd) < 0 ||
		   uv_poll_start(&l->poll, UV_READABLE, on_readable) < 0) {
		/* uv_poll_init cannot fail for an inotify fd; were it to, nothing lingers. */
		close(l->ifd);
		l->ifd = -1;
		warn_once(l, "cannot watch the inotify descriptor");
	} else {
		l->polling = true;
		l->poll.data = l;
	}
	*ret = l;
	return 0;
}

static void on_closed(uv_handle_t *h)
{
	bd_linger *l = h->data;

	close(l->ifd);
	free(l->e);
	free(l);
}

void bd_linger_free(bd_linger *l)
{
	if (!l)
		return;
	release_all(l);
	if (!l->polling) {
		free(l->e);
		free(l);
		return;
	}
	uv_close((uv_handle_t *)&l->poll, on_closed);
}

/* Room for one more entry. @return false when out of memory. */
static bool grow(bd_linger *l)
{
	uint32_t cap = l->cap ? 2 * l->cap : 16;
	entry *e;

	if (l->n < l->cap)
		return true;
	e = bd_realloc(l->e, cap * sizeof(*e));
	if (!e)
		return false;
	l->e = e;
	l->cap = cap;
	return true;
}

bool bd_linger_add(bd_linger *l, int fd, uint64_t bytes, uid_t uid, bd_budget *budget)
{
	char path[32];
	int wd;

	if (!l || l->ifd < 0 || !bytes)
		return false;
	if (l->n >= l->max) {
		warn_once(l, "too many ended sessions' memory to track (fs.inotify.max_queued_events)");
		return false;
	}
	if (!grow(l))
		return false;
	/* Events of dead watches first: their descriptors may be handed out again. */
	bd_linger_drain(l);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	wd = inotify_add_watch(l->ifd, path, IN_DELETE_SELF);
	if (wd < 0) {
		warn_once(l, errno == ENOSPC ? "inotify watch limit reached (fs.inotify.max_user_watches)"
			  : "cannot watch a session's memfd with inotify");
		return false;
	}
	/* A watch descriptor still in the table was reused: its memfd is gone. */
	release_wd(l, wd);
	l->e[l->n++] = (entry){ .wd = wd, .uid = uid, .bytes = bytes, .budget = budget };
	bd_log(LOG_DEBUG, "shared memory of an ended session: %" PRIu64 " bytes stay charged until "
	       "its client lets go", bytes);
	return true;
}

uint64_t bd_linger_uid_bytes(const bd_linger *l, uid_t uid)
{
	uint64_t sum = 0;

	for (uint32_t i = 0; l && i < l->n; i++)
		if (l->e[i].uid == uid)
			sum += l->e[i].bytes;
	return sum;
}

uint64_t bd_linger_bytes(const bd_linger *l)
{
	uint64_t sum = 0;

	for (uint32_t i = 0; l && i < l->n; i++)
		sum += l->e[i].bytes;
	return sum;
}

uint32_t bd_linger_count(const bd_linger *l)
{
	return l ? l->n : 0;
}
