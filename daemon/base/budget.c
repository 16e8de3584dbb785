/* SPDX-License-Identifier: MIT */
/*
 * budget.c - the memory budget's ledger (see budget.h): a lock and a few
 * sums, so that sessions admitted on the loop thread and dataset versions
 * admitted on the workers take room from one place.
 */
#include <stdio.h>

#include "budget.h"
#include "units.h"

void bd_budget_init(bd_budget *b)
{
	pthread_mutex_init(&b->mu, NULL);
	b->v = (bd_budget_view){ 0 };
}

void bd_budget_destroy(bd_budget *b)
{
	pthread_mutex_destroy(&b->mu);
}

void bd_budget_set(bd_budget *b, uint64_t memory, uint64_t cache, bool automatic)
{
	pthread_mutex_lock(&b->mu);
	b->v.memory = memory;
	b->v.total = memory > cache ? memory - cache : 0;
	b->v.automatic = automatic;
	pthread_mutex_unlock(&b->mu);
}

uint64_t bd_budget_used(const bd_budget_view *v)
{
	uint64_t n = 0;

	for (int k = 0; k < BD_BUDGET_KINDS; k++)
		n += v->held[k];
	return n;
}

bool bd_budget_take(bd_budget *b, bd_budget_kind k, uint64_t bytes)
{
	uint64_t used;
	bool fits;

	if (!bytes)
		return true;
	pthread_mutex_lock(&b->mu);
	used = bd_budget_used(&b->v);
	fits = used <= b->v.total && bytes <= b->v.total - used;
	if (fits)
		b->v.held[k] += bytes;
	pthread_mutex_unlock(&b->mu);
	return fits;
}

void bd_budget_give(bd_budget *b, bd_budget_kind k, uint64_t bytes)
{
	if (!b || !bytes)
		return;
	pthread_mutex_lock(&b->mu);
	b->v.held[k] -= bytes < b->v.held[k] ? bytes : b->v.held[k];
	pthread_mutex_unlock(&b->mu);
}

void bd_budget_get(bd_budget *b, bd_budget_view *ret)
{
	pthread_mutex_lock(&b->mu);
	*ret = b->v;
	pthread_mutex_unlock(&b->mu);
}

const char *bd_budget_remedy(const bd_budget_view *v, char *buf, size_t len)
{
	const char *how = v->automatic ? ", auto: half the memory available" : "";
	uint64_t cache = v->memory > v->total ? v->memory - v->total : 0;
	char a[32], c[32];

	bp_format_size(v->memory, a, sizeof(a));
	if (cache)
		snprintf(buf, len, "raise [memory] budget (%s%s, of which the block cache, [memory] "
			 "cache, takes %s) or lower [memory] cache", a, how,
			 bp_format_size(cache, c, sizeof(c)));
	else
		snprintf(buf, len, "raise [memory] budget (%s%s; no block cache)", a, how);
	return buf;
}
