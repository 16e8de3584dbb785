/* SPDX-License-Identifier: MIT */
/*
 * test-sampler.c - the Check suite for daemon/session/sampler.c: epoch orders are
 * bijections, ranks split an epoch exactly once (plus documented padding),
 * orders are pinned bit for bit, huge datasets cost nothing, block mode
 * stays local, and bad configurations are refused with the documented
 * errno. Resuming (a restarted daemon, a later start, another world size)
 * is test-sampler-resume.c's; the helpers both use are sampler-testlib.c's.
 *
 * The sampler is the only thing standing between a training job and a
 * silently skewed dataset, so every TCase asserts ids and counts directly
 * rather than statistics.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "sampler-testlib.h"

/* A small deterministic generator for picking test positions. */
static uint64_t t_next(uint64_t *x)
{
	uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/*
 * Assert that epoch `epoch` of s is a permutation of [0, n) and that
 * bd_sampler_position inverts it. @return true when it is not the identity.
 */
static bool assert_bijection(const bd_sampler *s, uint64_t n, uint64_t epoch)
{
	uint8_t *seen = calloc(n, 1);
	bool moved = false;

	ck_assert_ptr_nonnull(seen);
	for (uint64_t p = 0; p < n; p++) {
		uint64_t id = bd_sampler_order(s, epoch, p);

		expect(id < n, "n=%" PRIu64 " pos %" PRIu64 " -> %" PRIu64, n, p, id);
		expect(!seen[id], "n=%" PRIu64 " id %" PRIu64 " twice", n, id);
		seen[id] = 1;
		expect_eq(bd_sampler_position(s, epoch, id), p);
		moved |= id != p;
	}
	free(seen);
	return moved;
}

/* ---- bijection ------------------------------------------------------- */

static const uint64_t bij_sizes[] = { 1, 2, 3, 7, 64, 1000, 4097, 100003 };
static const uint64_t bij_seeds[] = { 0, 1, UINT64_C(0xdeadbeefcafef00d) };

START_TEST(test_bijection)
{
	/* _i: mode. Block mode cycles through chunk/window shapes, including
	 * chunk > n (no full chunk), chunk 1, and a window wider than the data. */
	static const struct { uint64_t chunk; uint32_t window; } shapes[] = {
		{ 1, 0 }, { 3, 5 }, { 64, 1 }, { 7, 16 }, { 1000, 3 }, { 5, 100000 },
	};
	enum bp_shuffle mode = st_all_modes[_i];
	unsigned k = 0;

	for (size_t i = 0; i < ARRAY_SIZE(bij_sizes); i++)
		for (size_t j = 0; j < ARRAY_SIZE(bij_seeds); j++, k++) {
			bd_sampler_cfg c = st_cfg_of(bij_sizes[i], mode, bij_seeds[j]);
			bd_sampler s;
			bool moved;

			c.chunk = shapes[k % ARRAY_SIZE(shapes)].chunk;
			c.window = shapes[k % ARRAY_SIZE(shapes)].window;
			st_init_ok(&s, &c);
			moved = assert_bijection(&s, c.samples, j + 3);
			if (mode == BP_SHUFFLE_NONE)
				ck_assert(!moved);
			else if (mode == BP_SHUFFLE_GLOBAL && c.samples >= 64)
				ck_assert(moved);
		}
}
END_TEST

/* ---- ranks: exactly once, padding, equal batches -------------------- */

static const uint64_t rank_sizes[] = { 1, 7, 10, 64, 1000, 1003 };
static const uint32_t rank_worlds[] = { 1, 2, 3, 8 };
static const uint32_t rank_batches[] = { 1, 4, 7 };

/*
 * Run every rank of one configuration over one epoch and check the union:
 * without drop_last each id occurs once plus the padding, which is exactly
 * the epoch order's positions world*per_rank-n ... wrapped; with drop_last
 * each id at most once and exactly the kept positions.
 */
static void check_split(uint64_t n, enum bp_shuffle mode, uint32_t world, uint32_t B, bool drop)
{
	const uint64_t epoch = 5;
	uint32_t *count = calloc(n, sizeof(*count));
	uint64_t *ids = calloc(B, sizeof(*ids));
	uint64_t per_rank = drop ? n / world : (n + world - 1) / world;
	uint64_t batches = drop ? per_rank / B : (per_rank + B - 1) / B;
	uint64_t total = 0;
	bd_sampler s;

	ck_assert(count && ids);
	for (uint32_t r = 0; r < world; r++) {
		bd_sampler_cfg c = st_cfg_of(n, mode, 42);
		int rc;

		c.world = world;
		c.rank = r;
		c.batch_size = B;
		c.drop_last = drop;
		c.chunk = 3;
		c.window = 2;
		rc = bd_sampler_init(&s, &c);
		if (drop && n < (uint64_t)world * B) {
			ck_assert_int_eq(rc, -ERANGE);
			goto out;
		}
		ck_assert_int_eq(rc, 0);
		ck_assert_uint_eq(bd_sampler_samples_per_rank(&s), per_rank);
		ck_assert_uint_eq(bd_sampler_batches_per_epoch(&s), batches);
		ck_assert_uint_eq(bd_sampler_batch_len(&s, batches), 0);

		for (uint64_t b = 0; b < batches; b++) {
			uint32_t len = bd_sampler_batch_len(&s, b);
			uint64_t want = b + 1 < batches || drop ? B : per_rank - (batches - 1) * B;

			ck_assert_uint_eq(len, want);
			bd_sampler_batch(&s, epoch, b, ids);
			for (uint32_t i = 0; i < len; i++) {
				uint64_t pos = st_striped(0, b, B, world, r, len, i);

				expect(ids[i] < n, "id %" PRIu64 " >= n", ids[i]);
				/* Positions past the end wrap to the epoch's first samples. */
				expect_eq(ids[i], bd_sampler_order(&s, epoch, pos % n));
				count[ids[i]]++;
				total++;
			}
		}
	}

	if (drop) {
		ck_assert_uint_eq(total, (uint64_t)world * batches * B);
		for (uint64_t id = 0; id < n; id++)
			expect(count[id] <= 1, "id %" PRIu64 " %u times", id, count[id]);
	} else {
		uint64_t padding = (uint64_t)world * per_rank - n, extra = 0;

		ck_assert_uint_eq(total, (uint64_t)world * per_rank);
		ck_assert_uint_lt(padding, world);
		for (uint64_t id = 0; id < n; id++) {
			expect(count[id] >= 1, "id %" PRIu64 " missing", id);
			extra += count[id] - 1;
		}
		ck_assert_uint_eq(extra, padding);
		/*
		 * The padding is the epoch's first samples, wrapped as often as
		 * needed: the id at epoch position p is dealt once for each of
		 * p, p + n, p + 2n, ... below world * per_rank.
		 */
		for (uint64_t id = 0; id < n; id++) {
			uint64_t p = bd_sampler_position(&s, epoch, id);

			expect_eq(count[id], ((uint64_t)world * per_rank - 1 - p) / n + 1);
		}
	}
out:
	free(ids);
	free(count);
}

START_TEST(test_ranks_exactly_once)
{
	enum bp_shuffle mode = st_all_modes[_i];

	for (size_t i = 0; i < ARRAY_SIZE(rank_sizes); i++)
		for (size_t w = 0; w < ARRAY_SIZE(rank_worlds); w++)
			for (size_t b = 0; b < ARRAY_SIZE(rank_batches); b++) {
				check_split(rank_sizes[i], mode, rank_worlds[w], rank_batches[b], false);
				check_split(rank_sizes[i], mode, rank_worlds[w], rank_batches[b], true);
			}
}
END_TEST

/* Explicit padding and wrap-around: n = 10, world = 3, B = 3, global. */
START_TEST(test_padding_wraps)
{
	bd_sampler_cfg c = st_cfg_of(10, BP_SHUFFLE_GLOBAL, 7);
	uint64_t ids[3];
	bd_sampler s;

	c.world = 3;
	c.rank = 2;
	c.batch_size = 3;
	st_init_ok(&s, &c);
	/*
	 * per_rank = 4, striped: step 0 deals positions 0-2, 3-5, 6-8 to ranks
	 * 0, 1, 2; the final step (1 sample each) 9, 10 -> 0, 11 -> 1.
	 */
	ck_assert_uint_eq(bd_sampler_samples_per_rank(&s), 4);
	ck_assert_uint_eq(bd_sampler_batches_per_epoch(&s), 2);
	ck_assert_uint_eq(bd_sampler_batch_len(&s, 0), 3);
	ck_assert_uint_eq(bd_sampler_batch_len(&s, 1), 1);
	bd_sampler_batch(&s, 1, 0, ids);
	ck_assert_uint_eq(ids[0], bd_sampler_order(&s, 1, 6));
	ck_assert_uint_eq(ids[1], bd_sampler_order(&s, 1, 7));
	ck_assert_uint_eq(ids[2], bd_sampler_order(&s, 1, 8));
	bd_sampler_batch(&s, 1, 1, ids);
	ck_assert_uint_eq(ids[0], bd_sampler_order(&s, 1, 1));
	ck_assert_uint_eq(bd_sampler_order(&s, 1, 11), bd_sampler_order(&s, 1, 1));
	c.rank = 1;
	st_init_ok(&s, &c);
	bd_sampler_batch(&s, 1, 1, ids);
	ck_assert_uint_eq(ids[0], bd_sampler_order(&s, 1, 0));
	ck_assert_uint_eq(bd_sampler_order(&s, 1, 10), bd_sampler_order(&s, 1, 0));

	/* world > n: one sample, eight ranks, each gets it once. */
	c = st_cfg_of(1, BP_SHUFFLE_GLOBAL, 7);
	c.world = 8;
	for (uint32_t r = 0; r < 8; r++) {
		c.rank = r;
		st_init_ok(&s, &c);
		ck_assert_uint_eq(bd_sampler_batches_per_epoch(&s), 1);
		ids[0] = 99;
		bd_sampler_batch(&s, 0, 0, ids);
		ck_assert_uint_eq(ids[0], 0);
	}
}
END_TEST

START_TEST(test_equal_batches)
{
	static const struct {
		uint64_t n;
		uint32_t world, B;
		bool drop;
		uint64_t per_rank, batches;
		uint32_t last;
	} cases[] = {
		{ 10, 3, 2, false, 4, 2, 2 },
		{ 10, 3, 2, true, 3, 1, 2 },
		{ 10, 3, 3, false, 4, 2, 1 },
		{ 10, 3, 3, true, 3, 1, 3 },
		{ 1003, 8, 16, false, 126, 8, 14 },
		{ 1003, 8, 16, true, 125, 7, 16 },
		{ 7, 8, 1, false, 1, 1, 1 },
		{ 1, 1, 100, false, 1, 1, 1 },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
		for (uint32_t r = 0; r < cases[i].world; r++) {
			bd_sampler_cfg c = st_cfg_of(cases[i].n, BP_SHUFFLE_BLOCK, 3);
			bd_sampler s;

			c.world = cases[i].world;
			c.rank = r;
			c.batch_size = cases[i].B;
			c.drop_last = cases[i].drop;
			st_init_ok(&s, &c);
			ck_assert_uint_eq(bd_sampler_samples_per_rank(&s), cases[i].per_rank);
			ck_assert_uint_eq(bd_sampler_batches_per_epoch(&s), cases[i].batches);
			for (uint64_t b = 0; b + 1 < cases[i].batches; b++)
				ck_assert_uint_eq(bd_sampler_batch_len(&s, b), cases[i].B);
			ck_assert_uint_eq(bd_sampler_batch_len(&s, cases[i].batches - 1),
					  cases[i].last);
		}
}
END_TEST

/* ---- determinism ------------------------------------------------------ */

/*
 * Pinned outputs. A change here means every order changed: sessions saved
 * at (epoch, batch) would resume onto different data. Only update with a
 * format note, never to make a test pass. check_pinned: batch 0 of epoch 3
 * (8 ids) of the configuration c must be exactly want.
 */
static void check_pinned(bd_sampler_cfg c, const uint64_t want[8], const char *what)
{
	uint64_t ids[8];
	bd_sampler s;

	c.batch_size = 8;
	st_init_ok(&s, &c);
	bd_sampler_batch(&s, 3, 0, ids);
	for (int i = 0; i < 8; i++)
		ck_assert_msg(ids[i] == want[i], "%s id %d: %" PRIu64 " != %" PRIu64,
			      what, i, ids[i], want[i]);
}

START_TEST(test_pinned_global)
{
	static const uint64_t want[8] = {
		781079, 221934, 783734, 536946, 627701, 503126, 126097, 748415,
	};

	check_pinned(st_cfg_of(1000000, BP_SHUFFLE_GLOBAL, 2024), want, "global");
}
END_TEST

START_TEST(test_pinned_block)
{
	static const uint64_t want[8] = {
		168967, 861400, 652708, 144361, 168958, 53334, 861415, 960300,
	};
	bd_sampler_cfg c = st_cfg_of(1000000, BP_SHUFFLE_BLOCK, 2024);

	c.chunk = 100;
	c.window = 16;
	check_pinned(c, want, "block");
}
END_TEST

START_TEST(test_pinned_huge)
{
	static const uint64_t want[4] = {
		UINT64_C(3184999041626979735), UINT64_C(3751578073587755594),
		UINT64_C(1366423735026151694), UINT64_C(364628687668373403),
	};
	bd_sampler_cfg c = st_cfg_of((UINT64_C(1) << 62) + 3, BP_SHUFFLE_GLOBAL, 99);
	bd_sampler s;

	st_init_ok(&s, &c);
	for (int i = 0; i < 4; i++) {
		uint64_t id = bd_sampler_order(&s, 0, (uint64_t)i * UINT64_C(1000000007));

		ck_assert_msg(id == want[i], "huge id %d: %" PRIu64 " != %" PRIu64, i, id, want[i]);
	}
}
END_TEST

/*
 * Two samplers from equal configs agree, whatever their memory held before
 * init, and repeated calls agree: the struct holds no hidden state.
 */
START_TEST(test_repeatable)
{
	bd_sampler_cfg c = st_cfg_of(4097, st_all_modes[_i], 11);
	bd_sampler a, b;

	memset(&a, 0x00, sizeof(a));
	memset(&b, 0xff, sizeof(b));
	st_init_ok(&a, &c);
	st_init_ok(&b, &c);
	for (uint64_t p = 0; p < 4097; p++)
		expect_eq(bd_sampler_order(&a, 2, p), bd_sampler_order(&b, 2, p));
	/* a, used for other epochs meanwhile and walked backwards, still agrees with b. */
	(void)bd_sampler_order(&a, 7, 123);
	(void)bd_sampler_position(&a, 0, 4096);
	for (uint64_t p = 4097; p-- > 0;)
		expect_eq(bd_sampler_order(&a, 2, p), bd_sampler_order(&b, 2, p));
}
END_TEST

/* ---- orders differ ---------------------------------------------------- */

/* Positions (of n) at which two orders agree. */
static uint64_t agreements(const bd_sampler *a, uint64_t ea, const bd_sampler *b, uint64_t eb,
			   uint64_t n)
{
	uint64_t same = 0;

	for (uint64_t p = 0; p < n; p++)
		same += bd_sampler_order(a, ea, p) == bd_sampler_order(b, eb, p);
	return same;
}

START_TEST(test_epochs_differ)
{
	/* _i: 0 global, 1 block */
	bd_sampler_cfg c = st_cfg_of(1000, _i ? BP_SHUFFLE_BLOCK : BP_SHUFFLE_GLOBAL, 5);
	bd_sampler s;

	c.chunk = 10;
	c.window = 4;
	st_init_ok(&s, &c);
	for (uint64_t e1 = 0; e1 < 6; e1++)
		for (uint64_t e2 = e1 + 1; e2 < 6; e2++)
			/* A random pair of permutations agrees at ~1 place; allow 10%. */
			ck_assert_uint_lt(agreements(&s, e1, &s, e2, 1000), 100);
	/* Epoch numbers far apart too. */
	ck_assert_uint_lt(agreements(&s, 0, &s, UINT64_MAX, 1000), 100);

	if (_i) {
		/* The chunk order itself changes: first window's chunks differ. */
		uint64_t first0 = bd_sampler_order(&s, 0, 0) / 10;
		int differ = 0;

		for (uint64_t e = 1; e < 8; e++) {
			bool found = false;

			for (uint64_t p = 0; p < 40; p++)
				found |= bd_sampler_order(&s, e, p) / 10 == first0;
			differ += !found;
		}
		ck_assert_int_gt(differ, 0);
	}
}
END_TEST

START_TEST(test_seeds_differ)
{
	enum bp_shuffle mode = _i ? BP_SHUFFLE_BLOCK : BP_SHUFFLE_GLOBAL;
	bd_sampler_cfg c = st_cfg_of(1000, mode, 0);
	bd_sampler s[4];

	c.chunk = 10;
	for (int i = 0; i < 3; i++) {
		c.seed = (uint64_t)i;
		st_init_ok(&s[i], &c);
	}
	c.seed = 0;
	c.fingerprint ^= 1;
	st_init_ok(&s[3], &c);
	for (int i = 0; i < 4; i++)
		for (int j = i + 1; j < 4; j++)
			ck_assert_uint_lt(agreements(&s[i], 1, &s[j], 1, 1000), 100);
}
END_TEST

START_TEST(test_none_identity)
{
	bd_sampler_cfg c = st_cfg_of(1000, BP_SHUFFLE_NONE, 9);
	uint64_t ids[64];
	bd_sampler s;

	c.world = 3;
	c.rank = 1;
	c.batch_size = 64;
	st_init_ok(&s, &c);
	/* Striped: rank 1's batch 2 starts at 2 steps of 3 * 64 plus rank 0's 64. */
	bd_sampler_batch(&s, 17, 2, ids);
	for (uint64_t i = 0; i < 64; i++)
		ck_assert_uint_eq(ids[i], 2 * 3 * 64 + 64 + i);
}
END_TEST

/* ---- huge datasets ---------------------------------------------------- */

static void check_huge(uint64_t n, enum bp_shuffle mode, uint64_t chunk)
{
	bd_sampler_cfg c = st_cfg_of(n, mode, 1);
	uint64_t x = n, probes[] = { 0, 1, 2, n / 2, n - 3, n - 2, n - 1 };
	bd_sampler s;

	c.chunk = chunk;
	c.window = 16;
	st_init_ok(&s, &c);
	for (size_t i = 0; i < ARRAY_SIZE(probes) + 2000; i++) {
		uint64_t p = i < ARRAY_SIZE(probes) ? probes[i] : t_next(&x) % n;
		uint64_t id = bd_sampler_order(&s, 4, p);

		expect(id < n, "n=%" PRIu64 " pos %" PRIu64 " -> %" PRIu64, n, p, id);
		expect_eq(bd_sampler_position(&s, 4, id), p);
		/* And the other way round, from an id. */
		expect_eq(bd_sampler_order(&s, 4, bd_sampler_position(&s, 4, p)), p);
	}
	if (mode == BP_SHUFFLE_BLOCK && n % chunk) {
		/* The partial chunk ends the epoch in id order. */
		ck_assert_uint_eq(bd_sampler_order(&s, 4, n - 1), n - 1);
	}
	/* Neighbouring positions do not map to neighbouring ids (global). */
	if (mode == BP_SHUFFLE_GLOBAL)
		ck_assert_uint_ne(bd_sampler_order(&s, 4, 1), bd_sampler_order(&s, 4, 0) + 1);
}

START_TEST(test_huge)
{
	const uint64_t sizes[] = {
		UINT64_C(1) << 40, (UINT64_C(1) << 62) + 3, BD_SAMPLER_MAX_SAMPLES,
	};

	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		check_huge(sizes[i], BP_SHUFFLE_GLOBAL, 1);
		check_huge(sizes[i], BP_SHUFFLE_BLOCK, 1000);
		check_huge(sizes[i], BP_SHUFFLE_BLOCK, (UINT64_C(1) << 20) + 7);
		check_huge(sizes[i], BP_SHUFFLE_BLOCK, 1);
	}
}
END_TEST

/* Rank arithmetic near 2^63 does not overflow. */
START_TEST(test_huge_ranks)
{
	/* 2^63 = 7 * per_rank - 6: six padded positions on the last rank. */
	const uint64_t n = BD_SAMPLER_MAX_SAMPLES;
	uint64_t ids[1000];

	for (uint32_t r = 0; r < 7; r++) {
		bd_sampler_cfg c = st_cfg_of(n, BP_SHUFFLE_GLOBAL, 1);
		uint64_t per_rank = n / 7 + 1, nb;
		uint32_t len;
		bd_sampler s;

		c.world = 7;
		c.rank = r;
		c.batch_size = 1000;
		st_init_ok(&s, &c);
		ck_assert_uint_eq(bd_sampler_samples_per_rank(&s), per_rank);
		nb = bd_sampler_batches_per_epoch(&s);
		ck_assert_uint_eq(nb, (per_rank + 999) / 1000);
		len = bd_sampler_batch_len(&s, nb - 1);
		ck_assert_uint_eq(len, per_rank - (nb - 1) * 1000);
		bd_sampler_batch(&s, 0, nb - 1, ids);
		for (uint32_t i = 0; i < len; i++) {
			uint64_t pos = st_striped(0, nb - 1, 1000, 7, r, len, i);

			expect(ids[i] < n, "id %" PRIu64 " >= n", ids[i]);
			expect_eq(ids[i], bd_sampler_order(&s, 0, pos % n));
		}
		if (r == 6) {
			/*
			 * 7 * per_rank - n = 6 padded positions, the final step's
			 * last: the epoch's first.
			 */
			ck_assert_uint_eq(ids[len - 1], bd_sampler_order(&s, 0, 5));
		}
	}

	/* 2^63 samples, one sample per batch: 2^63 batches. */
	{
		bd_sampler_cfg c = st_cfg_of(BD_SAMPLER_MAX_SAMPLES, BP_SHUFFLE_BLOCK, 1);
		bd_sampler s;

		c.chunk = 4096;
		st_init_ok(&s, &c);
		ck_assert_uint_eq(bd_sampler_batches_per_epoch(&s), BD_SAMPLER_MAX_SAMPLES);
		bd_sampler_batch(&s, 9, BD_SAMPLER_MAX_SAMPLES - 1, ids);
		ck_assert_uint_lt(ids[0], BD_SAMPLER_MAX_SAMPLES);
		ck_assert_uint_eq(ids[0], bd_sampler_order(&s, 9, BD_SAMPLER_MAX_SAMPLES - 1));
	}
}
END_TEST

/* ---- block mode locality ---------------------------------------------- */

static void check_locality(uint64_t n, uint64_t chunk, uint32_t window)
{
	bd_sampler_cfg c = st_cfg_of(n, BP_SHUFFLE_BLOCK, 8);
	uint32_t w = window ? window : BD_SAMPLER_DEFAULT_WINDOW;
	uint64_t span = (uint64_t)w * chunk, body = n / chunk * chunk;
	uint64_t *seen = malloc((w + 1) * sizeof(*seen));
	bd_sampler s;

	ck_assert_ptr_nonnull(seen);
	c.chunk = chunk;
	c.window = window;
	st_init_ok(&s, &c);
	for (uint64_t epoch = 0; epoch < 2; epoch++)
		for (uint64_t start = 0; start < n; start += span) {
			uint64_t end = start + span < n ? start + span : n;
			uint32_t distinct = 0;

			for (uint64_t p = start; p < end; p++) {
				uint64_t id = bd_sampler_order(&s, epoch, p), ch = id / chunk;
				uint32_t k;

				if (p >= body)
					expect_eq(id, p);
				for (k = 0; k < distinct && seen[k] != ch; k++)
					;
				if (k == distinct) {
					/* +1: the final window may end in the tail. */
					expect(distinct < w + (end > body),
						      "n=%" PRIu64 " chunk=%" PRIu64 " window=%u: "
						      "more than %u chunks in [%" PRIu64 ", %" PRIu64 ")",
						      n, chunk, w, w, start, end);
					seen[distinct++] = ch;
				}
			}
			/* A full window reads exactly `w` whole chunks. */
			if (end <= body && end - start == span)
				ck_assert_uint_eq(distinct, w);
		}
	free(seen);
}

START_TEST(test_block_locality)
{
	check_locality(1000, 7, 4);
	check_locality(1000, 64, 1);
	check_locality(4097, 64, 0);
	check_locality(100003, 100, 16);
	check_locality(100003, 7, 3);
	check_locality(50, 100, 4);   /* no full chunk: identity */
}
END_TEST

/* Block mode does shuffle inside a window and changes the chunk order. */
START_TEST(test_block_shuffles)
{
	bd_sampler_cfg c = st_cfg_of(1600, BP_SHUFFLE_BLOCK, 8);
	uint64_t sequential = 0;
	bd_sampler s;

	c.chunk = 100;
	c.window = 4;
	st_init_ok(&s, &c);
	for (uint64_t p = 1; p < 1600; p++)
		sequential += bd_sampler_order(&s, 0, p) == bd_sampler_order(&s, 0, p - 1) + 1;
	ck_assert_uint_lt(sequential, 100);
}
END_TEST

/* ---- invalid configurations ------------------------------------------- */

START_TEST(test_invalid)
{
	bd_sampler_cfg good = st_cfg_of(100, BP_SHUFFLE_BLOCK, 1), c;
	bd_sampler s, before;

	memset(&s, 0xa5, sizeof(s));
	before = s;

	c = good; c.world = 0;                         ck_assert_int_eq(bd_sampler_init(&s, &c), -EINVAL);
	c = good; c.world = 4; c.rank = 4;             ck_assert_int_eq(bd_sampler_init(&s, &c), -EINVAL);
	c = good; c.world = 4; c.rank = UINT32_MAX;    ck_assert_int_eq(bd_sampler_init(&s, &c), -EINVAL);
	c = good; c.batch_size = 0;                    ck_assert_int_eq(bd_sampler_init(&s, &c), -EINVAL);
	c = good; c.samples = 0;                       ck_assert_int_eq(bd_sampler_init(&s, &c), -EINVAL);
	c = good; c.samples = BD_SAMPLER_MAX_SAMPLES + 1; ck_assert_int_eq(bd_sampler_init(&s, &c), -EINVAL);
	c = good; c.samples = UINT64_MAX;              ck_assert_int_eq(bd_sampler_init(&s, &c), -EINVAL);
	c = good; c.chunk = 0;                         ck_assert_int_eq(bd_sampler_init(&s, &c), -EINVAL);
	c = good; c.mode = (enum bp_shuffle)3;              ck_assert_int_eq(bd_sampler_init(&s, &c), -EINVAL);
	c = good; c.start_sample = 100;                ck_assert_int_eq(bd_sampler_init(&s, &c), -EINVAL);
	c = good; c.start_sample = UINT64_MAX;         ck_assert_int_eq(bd_sampler_init(&s, &c), -EINVAL);
	/* EINVAL wins over ERANGE. */
	c = good; c.world = 0; c.drop_last = true; c.batch_size = 1000;
	ck_assert_int_eq(bd_sampler_init(&s, &c), -EINVAL);

	/* drop_last leaving no batch: n < world * batch_size. */
	c = good; c.drop_last = true; c.batch_size = 101;
	ck_assert_int_eq(bd_sampler_init(&s, &c), -ERANGE);
	c = good; c.drop_last = true; c.world = 8; c.batch_size = 13;   /* 8*13 = 104 > 100 */
	ck_assert_int_eq(bd_sampler_init(&s, &c), -ERANGE);
	c = good; c.drop_last = true; c.world = 101;
	ck_assert_int_eq(bd_sampler_init(&s, &c), -ERANGE);
	/* Failure leaves the output untouched. */
	ck_assert_int_eq(memcmp(&s, &before, sizeof(s)), 0);

	/* The boundaries themselves are fine. */
	c = good; c.drop_last = true; c.world = 4; c.batch_size = 25;
	ck_assert_int_eq(bd_sampler_init(&s, &c), 0);
	ck_assert_uint_eq(bd_sampler_batches_per_epoch(&s), 1);
	c = good; c.batch_size = 1000;                 /* without drop_last: one short batch */
	ck_assert_int_eq(bd_sampler_init(&s, &c), 0);
	ck_assert_uint_eq(bd_sampler_batch_len(&s, 0), 100);
	c = good; c.mode = BP_SHUFFLE_GLOBAL; c.chunk = 0;   /* chunk only matters for block */
	ck_assert_int_eq(bd_sampler_init(&s, &c), 0);
	c = good; c.samples = BD_SAMPLER_MAX_SAMPLES;
	ck_assert_int_eq(bd_sampler_init(&s, &c), 0);
	/* The last position is a fine start; drop_last may leave it no batch (not -ERANGE). */
	c = good; c.start_sample = 99;
	ck_assert_int_eq(bd_sampler_init(&s, &c), 0);
	ck_assert_uint_eq(bd_sampler_epoch_batches(&s, 0), 1);
	c = good; c.start_sample = 99; c.drop_last = true; c.world = 2;
	ck_assert_int_eq(bd_sampler_init(&s, &c), 0);
	ck_assert_uint_eq(bd_sampler_epoch_batches(&s, 0), 0);
	ck_assert_uint_eq(bd_sampler_epoch_batches(&s, 1), 50);
}
END_TEST

static Suite *sampler_suite(void)
{
	Suite *s = suite_create("sampler");
	TCase *tc;

	tc = tcase_create("bijection");
	tcase_add_loop_test(tc, test_bijection, 0, ARRAY_SIZE(st_all_modes));
	suite_add_tcase(s, tc);

	tc = tcase_create("ranks_exactly_once");
	tcase_add_loop_test(tc, test_ranks_exactly_once, 0, ARRAY_SIZE(st_all_modes));
	tcase_add_test(tc, test_padding_wraps);
	suite_add_tcase(s, tc);

	tc = tcase_create("equal_batches");
	tcase_add_test(tc, test_equal_batches);
	suite_add_tcase(s, tc);

	tc = tcase_create("determinism");
	tcase_add_test(tc, test_pinned_global);
	tcase_add_test(tc, test_pinned_block);
	tcase_add_test(tc, test_pinned_huge);
	tcase_add_loop_test(tc, test_repeatable, 0, ARRAY_SIZE(st_all_modes));
	suite_add_tcase(s, tc);

	tc = tcase_create("orders_differ");
	tcase_add_loop_test(tc, test_epochs_differ, 0, 2);
	tcase_add_loop_test(tc, test_seeds_differ, 0, 2);
	tcase_add_test(tc, test_none_identity);
	suite_add_tcase(s, tc);

	tc = tcase_create("huge");
	tcase_add_test(tc, test_huge);
	tcase_add_test(tc, test_huge_ranks);
	suite_add_tcase(s, tc);

	tc = tcase_create("block_locality");
	tcase_add_test(tc, test_block_locality);
	tcase_add_test(tc, test_block_shuffles);
	suite_add_tcase(s, tc);

	tc = tcase_create("invalid");
	tcase_add_test(tc, test_invalid);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(sampler_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
