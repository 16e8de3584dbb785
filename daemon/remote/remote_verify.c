/* SPDX-License-Identifier: MIT */
/*
 * remote_verify.c - chunks found in the cache directory at start are
 * checked against their map before they are served.
 *
 * The cache directory is not trusted more than the bucket: whoever may
 * write it can swap a data file for another object's, or another valid
 * pack of the same size, whose own checksums all hold. So a map records
 * each present chunk's XXH3-64 as its bytes came from the bucket, and a
 * chunk adopted from a map stays "unverified" until the first read that
 * needs it: the fetcher then reads the chunk back and compares. A match
 * is served from then on with no further cost; a mismatch is logged and
 * the chunk fetched again, the waiting reader none the wiser. Each
 * chunk is read once more than it would be, once per daemon start.
 *
 * Checks run on the fetcher thread outside R.mu, like its file writes.
 */
#include <errno.h>
#include <stdlib.h>
#include <xxhash.h>

#include "log.h"
#include "pack_file.h"
#include "remote_priv.h"

int bd__verify_queue(bd_robj *o, uint32_t i, uint32_t uid)
{
	bd_fetch *f = bd__fetch_new(o, i);

	if (!f)
		return -ENOMEM;
	f->uid = uid;
	f->next = R.verify;
	R.verify = f;
	/* Off the LRU already (pinned by the acquire); still counted in cache_bytes. */
	bd__chunk_if(o, i)->state = BD_CHUNK_FETCHING;
	return 0;
}

/* f's chunk checked: 0 (its bytes match), -EBADMSG (they do not, or cannot be read), -ENOMEM. */
static int check(const bd_fetch *f)
{
	const bd_chunk *c = bd__chunk_if(f->obj, f->idx);

	if (!R.verify_buf && !(R.verify_buf = malloc(R.chunk)))
		return -ENOMEM;
	/* c->hash was written under R.mu before the check was queued, and not since. */
	if (bp_pread_full(f->obj->fd, R.verify_buf, f->len, f->off) < 0 ||
	    XXH3_64bits(R.verify_buf, f->len) != c->hash)
		return -EBADMSG;
	return 0;
}

/* Settle f after check() said r. Under R.mu. @return whether its chunk is to be fetched. */
static bool settle(bd_fetch *f, int r, struct waiter **done)
{
	bd_robj *o = f->obj;
	bd_chunk *c = bd__chunk_if(o, f->idx);
	bool refetch = r == -EBADMSG;

	if (r == 0)
		c->unverified = false;
	if (r == 0 || r == -ENOMEM) {
		/* Out of memory: still on disk, checked by a later read. */
		c->state = BD_CHUNK_PRESENT;
		bd__settle_waiters(c, r, r ? "remote cache: out of memory" : "", done);
	} else {
		bd_log(LOG_WARNING, "remote cache %s: %s: chunk %u on disk is not the bytes fetched "
		       "for it (its file was changed or replaced): fetched again", R.dir, o->name,
		       f->idx);
		/* Its bytes leave the cache; the fetch writes over them. */
		c->state = BD_CHUNK_ABSENT;
		c->unverified = false;
		R.cache_bytes -= f->len;
		R.stats.errors++;
		o->dirty = true;
		if (bd__queue_fetch(o, f->idx, f->uid) < 0)
			bd__settle_waiters(c, -ENOMEM, "remote cache: out of memory", done);
	}
	bd__robj_unref(o);
	free(f);
	return refetch;
}

void bd__verify_run(struct waiter **done)
{
	bd_fetch *list;
	bool requeued = false;

	pthread_mutex_lock(&R.mu);
	list = R.verify;
	R.verify = NULL;
	pthread_mutex_unlock(&R.mu);
	while (list) {
		bd_fetch *f = list;
		int r = check(f);

		list = f->next;
		pthread_mutex_lock(&R.mu);
		requeued |= settle(f, r, done);
		pthread_mutex_unlock(&R.mu);
	}
	if (requeued)
		bd__remote_wake();
}

void bd__verify_cancel(const char *why, struct waiter **done)
{
	while (R.verify) {
		bd_fetch *f = R.verify;
		bd_chunk *c = bd__chunk_if(f->obj, f->idx);

		R.verify = f->next;
		/* Still on disk, still to be checked by a later start. */
		c->state = BD_CHUNK_PRESENT;
		bd__settle_waiters(c, -ECANCELED, why, done);
		bd__robj_unref(f->obj);
		free(f);
	}
}
