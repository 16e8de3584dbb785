/* SPDX-License-Identifier: MIT */
/*
 * sampler.c - the deterministic sampler (see sampler.h for the contract).
 *
 * Everything derives from one 64-bit mixer, the splitmix64 finalizer, used
 * both to absorb inputs into keys and as the Feistel round function. Only
 * 64-bit unsigned arithmetic is used (wrapping multiplies, shifts, xors), so
 * the orders are bit-identical on every C11 compiler and machine. Changing
 * any constant, the round count or the key schedule changes every order and
 * breaks resumed sessions: tests/unit/test-sampler.c pins known outputs.
 *
 * Key schedule (all values uint64_t, absorb(h, v) = mix(h + mix(v + GOLDEN))):
 *   base   = absorb(absorb(TAG, fingerprint), seed)        once, in init
 *   ek     = absorb(base, epoch)
 *   global permutation key   = absorb(ek, 1)
 *   block: chunk permutation = absorb(ek, 2)
 *          window w          = absorb(absorb(ek, 3), w)
 *   round key i of a permutation keyed k = mix(k + (i + 1) * GOLDEN)
 */
#include "sampler.h"

#include <errno.h>
#include <stddef.h>

#define GOLDEN  UINT64_C(0x9e3779b97f4a7c15)
#define TAG     UINT64_C(0x626473616d706c31)   /* "bdsampl1" */
#define ROUNDS  8

enum {
	PURPOSE_GLOBAL = 1,
	PURPOSE_CHUNKS = 2,
	PURPOSE_WINDOW = 3,
};

/* splitmix64's finalizer: a bijection on 64 bits with full avalanche. */
static uint64_t mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static uint64_t absorb(uint64_t h, uint64_t v)
{
	return mix(h + mix(v + GOLDEN));
}

/*
 * Half width in bits of the smallest balanced Feistel domain (2^(2*half),
 * half >= 1) holding [0, n). The domain is < 4n, which bounds the expected
 * cycle-walking steps by 4.
 */
static uint32_t half_bits(uint64_t n)
{
	uint64_t m = n - 1;
	uint32_t bits = 0;

	while (m) {
		bits++;
		m >>= 1;
	}
	if (bits < 2)
		bits = 2;
	return (bits + 1) / 2;
}

/* ---- keyed bijection on [0, n) ---------------------------------------- */

typedef struct perm {
	uint64_t n;
	uint64_t mask;     /* half-width mask */
	uint32_t half;
	uint64_t k[ROUNDS];
} perm;

static void perm_init(perm *p, uint64_t n, uint32_t half, uint64_t key)
{
	p->n = n;
	p->half = half;
	p->mask = (UINT64_C(1) << half) - 1;
	for (int i = 0; i < ROUNDS; i++) {
		key += GOLDEN;
		p->k[i] = mix(key);
	}
}

static uint64_t feistel(const perm *p, uint64_t x)
{
	uint64_t l = x >> p->half, r = x & p->mask;

	for (int i = 0; i < ROUNDS; i++) {
		uint64_t t = l ^ (mix(r ^ p->k[i]) & p->mask);
		l = r;
		r = t;
	}
	return (l << p->half) | r;
}

static uint64_t feistel_inv(const perm *p, uint64_t x)
{
	uint64_t l = x >> p->half, r = x & p->mask;

	for (int i = ROUNDS - 1; i >= 0; i--) {
		uint64_t t = r ^ (mix(l ^ p->k[i]) & p->mask);
		r = l;
		l = t;
	}
	return (l << p->half) | r;
}

/*
 * Cycle walking: x < n lies on a cycle of the domain permutation, and that
 * cycle returns to x, so walking forward from x meets a value < n before
 * it comes back round. The result is a bijection on [0, n) whose inverse is
 * the same walk with the inverse network.
 */
static uint64_t perm_fwd(const perm *p, uint64_t x)
{
	if (p->n <= 1)
		return 0;
	do
		x = feistel(p, x);
	while (x >= p->n);
	return x;
}

static uint64_t perm_inv(const perm *p, uint64_t x)
{
	if (p->n <= 1)
		return 0;
	do
		x = feistel_inv(p, x);
	while (x >= p->n);
	return x;
}

/* ---- one epoch's keys ---------------------------------------------------- */

/*
 * Everything an epoch needs, derived once per call of bd_sampler_batch (or
 * order/position) so a batch pays the key schedule once, plus one window
 * permutation cached by window index.
 */
typedef struct epoch_state {
	const bd_sampler *s;
	perm main;       /* global: the permutation; block: the chunk permutation */
	uint64_t wkey;       /* block: absorb(ek, WINDOW) */
	uint64_t win;        /* the window wperm is keyed for; UINT64_MAX: none yet */
	perm wperm;
} epoch_state;

static void epoch_init(epoch_state *e, const bd_sampler *s, uint64_t epoch)
{
	uint64_t ek = absorb(s->key, epoch);

	e->s = s;
	e->win = UINT64_MAX;
	if (s->mode == BP_SHUFFLE_GLOBAL) {
		perm_init(&e->main, s->n, s->global_half,
			      absorb(ek, PURPOSE_GLOBAL));
	} else if (s->mode == BP_SHUFFLE_BLOCK && s->full_chunks > 0) {
		perm_init(&e->main, s->full_chunks, s->chunk_half,
			      absorb(ek, PURPOSE_CHUNKS));
		e->wkey = absorb(ek, PURPOSE_WINDOW);
	}
}

static const perm *epoch_window(epoch_state *e, uint64_t w)
{
	const bd_sampler *s = e->s;

	if (e->win != w) {
		bool last = w == s->windows - 1;

		perm_init(&e->wperm, last ? s->last_win_span : s->win_span,
			      last ? s->last_win_half : s->win_half,
			      absorb(e->wkey, w));
		e->win = w;
	}
	return &e->wperm;
}

/* pos < n */
static uint64_t epoch_order(epoch_state *e, uint64_t pos)
{
	const bd_sampler *s = e->s;
	uint64_t w, q, slot;

	switch (s->mode) {
	case BP_SHUFFLE_GLOBAL:
		return perm_fwd(&e->main, pos);
	case BP_SHUFFLE_BLOCK:
		/* The partial chunk, if any, ends the epoch in id order. */
		if (pos >= s->full_chunks * s->chunk)
			return pos;
		w = pos / s->win_span;
		q = perm_fwd(epoch_window(e, w), pos - w * s->win_span);
		slot = w * s->win_chunks + q / s->chunk;
		return perm_fwd(&e->main, slot) * s->chunk + q % s->chunk;
	case BP_SHUFFLE_NONE:
	default:
		return pos;
	}
}

/* id < n */
static uint64_t epoch_position(epoch_state *e, uint64_t id)
{
	const bd_sampler *s = e->s;
	uint64_t w, q, slot;

	switch (s->mode) {
	case BP_SHUFFLE_GLOBAL:
		return perm_inv(&e->main, id);
	case BP_SHUFFLE_BLOCK:
		if (id >= s->full_chunks * s->chunk)
			return id;
		slot = perm_inv(&e->main, id / s->chunk);
		w = slot / s->win_chunks;
		q = (slot - w * s->win_chunks) * s->chunk + id % s->chunk;
		return w * s->win_span + perm_inv(epoch_window(e, w), q);
	case BP_SHUFFLE_NONE:
	default:
		return id;
	}
}

/* ---- public ------------------------------------------------------------ */

int bd_sampler_init(bd_sampler *s, const bd_sampler_cfg *cfg)
{
	bd_sampler t = { 0 };
	uint64_t n = cfg->samples, window;

	if (n == 0 || n > BD_SAMPLER_MAX_SAMPLES || cfg->world == 0 ||
	    cfg->rank >= cfg->world || cfg->batch_size == 0)
		return -EINVAL;
	switch (cfg->mode) {
	case BP_SHUFFLE_NONE:
	case BP_SHUFFLE_GLOBAL:
		break;
	case BP_SHUFFLE_BLOCK:
		if (cfg->chunk == 0)
			return -EINVAL;
		break;
	default:
		return -EINVAL;
	}

	t.n = n;
	t.mode = cfg->mode;
	t.key = absorb(absorb(TAG, cfg->fingerprint), cfg->seed);

	if (bp_schedule_init(&t.full, n, 0, cfg->world, cfg->batch_size, cfg->drop_last) < 0 ||
	    bp_schedule_init(&t.first, n, cfg->start_sample, cfg->world, cfg->batch_size,
			     cfg->drop_last) < 0)
		return -EINVAL;
	if (t.full.batches == 0)
		return -ERANGE;
	t.start_epoch = cfg->start_epoch;
	t.rank = cfg->rank;

	if (t.mode == BP_SHUFFLE_GLOBAL)
		t.global_half = half_bits(n);
	if (t.mode == BP_SHUFFLE_BLOCK) {
		window = cfg->window ? cfg->window : BD_SAMPLER_DEFAULT_WINDOW;
		t.chunk = cfg->chunk;
		t.full_chunks = n / cfg->chunk;
		if (t.full_chunks > 0) {
			/* win_chunks <= full_chunks keeps every span <= n. */
			t.win_chunks = window < t.full_chunks ? window : t.full_chunks;
			t.win_span = t.win_chunks * t.chunk;
			t.windows = (t.full_chunks + t.win_chunks - 1) / t.win_chunks;
			t.last_win_span = (t.full_chunks - (t.windows - 1) * t.win_chunks) * t.chunk;
			t.chunk_half = half_bits(t.full_chunks);
			t.win_half = half_bits(t.win_span);
			t.last_win_half = half_bits(t.last_win_span);
		}
	}
	*s = t;
	return 0;
}

static const bp_schedule *epoch_schedule(const bd_sampler *s, uint64_t epoch)
{
	return epoch == s->start_epoch ? &s->first : &s->full;
}

uint64_t bd_sampler_batches_per_epoch(const bd_sampler *s)
{
	return s->full.batches;
}

uint64_t bd_sampler_epoch_batches(const bd_sampler *s, uint64_t epoch)
{
	return epoch_schedule(s, epoch)->batches;
}

uint64_t bd_sampler_samples_per_rank(const bd_sampler *s)
{
	return s->full.per_rank;
}

uint32_t bd_sampler_batch_len(const bd_sampler *s, uint64_t batch)
{
	return bp_schedule_batch_len(&s->full, batch);
}

uint32_t bd_sampler_epoch_batch_len(const bd_sampler *s, uint64_t epoch, uint64_t batch)
{
	return bp_schedule_batch_len(epoch_schedule(s, epoch), batch);
}

void bd_sampler_locate(const bd_sampler *s, uint64_t g, uint64_t *ret_epoch, uint64_t *ret_batch)
{
	bp_schedule_locate(s->start_epoch, s->first.batches, s->full.batches, g, ret_epoch,
			   ret_batch);
}

void bd_sampler_batch(const bd_sampler *s, uint64_t epoch, uint64_t batch, uint64_t *ids)
{
	const bp_schedule *p = epoch_schedule(s, epoch);
	uint32_t len = bp_schedule_batch_len(p, batch);
	uint64_t pos;
	epoch_state e;

	if (len == 0)
		return;
	epoch_init(&e, s, epoch);
	/* The run of len positions lies below n + world * per_rank < 2^64 (schedule.c). */
	pos = bp_schedule_batch_first(p, s->rank, batch);
	for (uint32_t i = 0; i < len; i++, pos++)
		ids[i] = epoch_order(&e, pos < s->n ? pos : pos % s->n);
}

uint64_t bd_sampler_order(const bd_sampler *s, uint64_t epoch, uint64_t pos)
{
	epoch_state e;

	epoch_init(&e, s, epoch);
	return epoch_order(&e, pos < s->n ? pos : pos % s->n);
}

uint64_t bd_sampler_position(const bd_sampler *s, uint64_t epoch, uint64_t id)
{
	epoch_state e;

	epoch_init(&e, s, epoch);
	return epoch_position(&e, id < s->n ? id : id % s->n);
}
