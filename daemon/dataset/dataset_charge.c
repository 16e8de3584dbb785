/* SPDX-License-Identifier: MIT */
/*
 * dataset_charge.c - what a dataset version costs in memory, charged to
 * the memory budget before it is spent (dataset.h, "Memory").
 *
 * A version's index, dictionaries, lookup tables and field sections live
 * in the daemon's heap for as long as the version does, however many
 * sessions share it; an index alone is 56 bytes a block and 16 a sample,
 * so a pack of millions of tiny samples holds more than any session's
 * shared memory. The pack reader says what it is about to allocate
 * (bp_shard_charge_fn) from the headers and footers before it reads an
 * index, and from each section table before it reads the sections; each
 * is taken from the budget then, evicting unused versions to make room,
 * and the load stops with a refusal naming the figures when it does not
 * fit. Once loaded, the exact figure replaces the bounds before the
 * version is cached or handed to a session.
 *
 * Thread rules: on the worker loading the version (bd_dataset_get).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "dataset_priv.h"
#include "units.h"

/*
 * The heap bytes version d holds: the pack reader's (index, dictionaries,
 * lookup tables, field sections: bp_dataset_held_bytes) and its own
 * records of the shards. What keeping it costs.
 */
static uint64_t held_bytes(const bd_dataset *d)
{
	uint64_t n = bp_dataset_shard_count(d->ds);

	return bp_dataset_held_bytes(d->ds) + sizeof(*d) + strlen(d->name) + 1 +
	       (d->place ? strlen(d->place) + 1 : 0) + sizeof(*d->disk) +
	       n * (sizeof(d->disk->shards[0]) + sizeof(*d->read_fd) + sizeof(*d->align)) +
	       (d->robj ? n * sizeof(*d->robj) : 0);
}

/* Take bytes for a dataset version, evicting unused versions while that makes room. */
static bool take(bd_budget *b, uint64_t bytes)
{
	while (!bd_budget_take(b, BD_BUDGET_DATASETS, bytes))
		if (!bd_dataset_cache_evict_one())
			return false;
	return true;
}

/* How a refusal ends: what makes an index smaller. */
#define REPACK "or repack it with larger blocks (batchd-pack create --block-size: an index " \
	       "takes 56 bytes a block and 16 a sample)"

static void budget_refusal(const bd__charge *ch, uint64_t need)
{
	bd_budget_view v;
	uint64_t used, left;
	char a[32], b[32], c[32], d[32], e[32], f[32], fix[192];

	bd_budget_get(ch->rp->budget, &v);
	used = bd_budget_used(&v);
	left = v.total > used ? v.total - used : 0;
	snprintf(ch->err, ch->errlen, "memory budget: dataset %s: its index and tables need %s in "
		 "memory (%s of index in %zu shard%s; %s) and %s of the budget is left (datasets "
		 "and sessions may use %s; sessions hold %s, other dataset versions %s): close "
		 "sessions, %s, " REPACK, ch->path, bp_format_size(need, a, sizeof(a)),
		 bp_format_size(ch->index, b, sizeof(b)), ch->shards, ch->shards == 1 ? "" : "s",
		 ch->when, bp_format_size(left, c, sizeof(c)), bp_format_size(v.total, d, sizeof(d)),
		 bp_format_size(v.held[BD_BUDGET_SESSIONS], e, sizeof(e)),
		 bp_format_size(v.held[BD_BUDGET_DATASETS] - ch->taken, f, sizeof(f)),
		 bd_budget_remedy(&v, fix, sizeof(fix)));
}

static void uid_refusal(const bd__charge *ch, uint64_t need)
{
	const bd_read_policy *rp = ch->rp;
	char a[32], b[32], c[32], d[32];

	snprintf(ch->err, ch->errlen, "memory limit per user: dataset %s: its index and tables need "
		 "%s in memory (%s of index in %zu shard%s; %s); uid %u holds %s of the %s [limits] "
		 "memory_per_uid allows: close one of its sessions, raise [limits] memory_per_uid, "
		 REPACK, ch->path, bp_format_size(need, a, sizeof(a)),
		 bp_format_size(ch->index, b, sizeof(b)), ch->shards, ch->shards == 1 ? "" : "s",
		 ch->when, (unsigned)rp->uid, bp_format_size(rp->uid_held, c, sizeof(c)),
		 bp_format_size(rp->uid_limit, d, sizeof(d)));
}

int bd__charge_load(void *ctx, uint64_t bytes, uint64_t index)
{
	bd__charge *ch = ctx;
	const bd_read_policy *rp = ch->rp;
	uint64_t need = ch->taken + bytes;

	ch->index += index;
	if (!rp->budget)
		return 0;
	if (rp->uid_limit && need > (rp->uid_limit > rp->uid_held ? rp->uid_limit - rp->uid_held : 0)) {
		uid_refusal(ch, need);
		ch->refused = true;
		return -ENOMEM;
	}
	if (!take(rp->budget, bytes)) {
		budget_refusal(ch, need);
		ch->refused = true;
		return -ENOMEM;
	}
	ch->taken = need;
	ch->when = "counted from its section tables";
	return 0;
}

int bd__charge_loaded(bd_dataset *d, bd__charge *ch)
{
	uint64_t bytes = held_bytes(d);
	int r;

	ch->when = "counted once loaded";
	if (bytes > ch->taken && (r = bd__charge_load(ch, bytes - ch->taken, 0)) < 0)
		return r;
	if (ch->rp->budget && ch->taken > bytes)
		bd_budget_give(ch->rp->budget, BD_BUDGET_DATASETS, ch->taken - bytes);
	d->bytes = bytes;
	d->budget = ch->rp->budget;
	ch->taken = 0;
	return 0;
}

void bd__charge_drop(bd__charge *ch)
{
	if (ch->taken && ch->rp->budget)
		bd_budget_give(ch->rp->budget, BD_BUDGET_DATASETS, ch->taken);
	ch->taken = 0;
}
