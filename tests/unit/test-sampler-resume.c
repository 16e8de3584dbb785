/* SPDX-License-Identifier: MIT */
/*
 * test-sampler-resume.c - resuming daemon/session/sampler.c's orders: a
 * freshly initialised sampler (a restarted daemon) deals the same ids as
 * one walked position by position, in any call order; a start position
 * splits the rest of an epoch by the striped rule; resuming at the same
 * world and batch is continuing, batch for batch; and resuming at another
 * world size (elastic) deals every id once plus exactly the padding, with
 * the epoch after a fresh run's.
 *
 * Its own program because resume is its own contract (what a checkpoint
 * may rely on), and its loops over worlds, batches and steps are the
 * longest of the sampler's; the helpers are sampler-testlib.c's.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "sampler-testlib.h"

/* ---- resume ----------------------------------------------------------- */

/*
 * A reference stream for one rank, built by walking positions one by one,
 * cut into batches by batch_len; bd_sampler_batch(e, b) from a freshly
 * initialised sampler (a restarted daemon) must hit the same ids, in any
 * call order.
 */
START_TEST(test_resume)
{
	enum bp_shuffle mode = st_all_modes[_i];
	bd_sampler_cfg c = st_cfg_of(1003, mode, 77);
	uint64_t stream[3][1003 / 3 + 1], ids[16];
	bd_sampler s, fresh;
	uint64_t nb;

	c.world = 3;
	c.rank = 2;
	c.batch_size = 16;
	c.chunk = 16;
	c.window = 3;
	st_init_ok(&s, &c);
	nb = bd_sampler_batches_per_epoch(&s);
	for (uint64_t e = 0; e < 3; e++) {
		uint64_t k = 0;

		for (uint64_t b = 0; b < nb; b++) {
			uint32_t len = bd_sampler_batch_len(&s, b);

			for (uint32_t i = 0; i < len; i++, k++)
				stream[e][k] = bd_sampler_order(&s, e, st_striped(0, b, 16, 3, 2, len, i));
		}
		ck_assert_uint_eq(k, bd_sampler_samples_per_rank(&s));
	}

	st_init_ok(&fresh, &c);
	/* Backwards over epochs and batches: nothing depends on earlier calls. */
	for (uint64_t e = 3; e-- > 0;)
		for (uint64_t b = nb; b-- > 0;) {
			uint32_t len = bd_sampler_batch_len(&fresh, b);

			bd_sampler_batch(&fresh, e, b, ids);
			for (uint32_t i = 0; i < len; i++)
				expect_eq(ids[i], stream[e][b * 16 + i]);
		}
	/* Out-of-range batch writes nothing. */
	ids[0] = 12345;
	bd_sampler_batch(&fresh, 0, nb, ids);
	ck_assert_uint_eq(ids[0], 12345);
}
END_TEST

/* ---- striping and elastic resume ------------------------------------------ */

/* The ids of (epoch, batch) for cfg c at rank r; @return the batch's length. */
static uint32_t batch_of(bd_sampler_cfg c, uint32_t r, uint64_t epoch, uint64_t batch,
			 uint64_t *ids)
{
	bd_sampler s;

	c.rank = r;
	st_init_ok(&s, &c);
	bd_sampler_batch(&s, epoch, batch, ids);
	return bd_sampler_epoch_batch_len(&s, epoch, batch);
}

/* Unshuffled, ids are positions: the striped rule by explicit example (n = 10, world 3). */
START_TEST(test_striped_positions)
{
	static const struct {
		uint32_t B;
		bool drop;
		uint64_t start;
		uint64_t batches;
		uint32_t last;           /* the final batch's length */
		uint64_t want[3][2][3];  /* [rank][batch][i] */
	} cases[] = {
		/* per_rank 4: one full step, then a final step of 1 with the wrap 10 -> 0, 11 -> 1. */
		{ 3, false, 0, 2, 1, { { { 0, 1, 2 }, { 9 } }, { { 3, 4, 5 }, { 0 } },
				    { { 6, 7, 8 }, { 1 } } } },
		/* drop_last: per_rank 3, one step, position 9 dropped. */
		{ 3, true, 0, 1, 3, { { { 0, 1, 2 } }, { { 3, 4, 5 } }, { { 6, 7, 8 } } } },
		/* From 4: 6 left, per_rank 2, one final batch of 2 each. */
		{ 3, false, 4, 1, 2, { { { 4, 5 } }, { { 6, 7 } }, { { 8, 9 } } } },
		/* From 5, batch 1: 5 left, per_rank 2; the tail wraps 10 -> 0. */
		{ 1, false, 5, 2, 1, { { { 5 }, { 8 } }, { { 6 }, { 9 } }, { { 7 }, { 0 } } } },
		/* From 5 with drop_last: per_rank 1; 8 and 9 dropped. */
		{ 1, true, 5, 1, 1, { { { 5 } }, { { 6 } }, { { 7 } } } },
	};

	for (size_t k = 0; k < ARRAY_SIZE(cases); k++) {
		bd_sampler_cfg c = st_cfg_of(10, BP_SHUFFLE_NONE, 1);
		uint64_t ids[3];

		c.world = 3;
		c.batch_size = cases[k].B;
		c.drop_last = cases[k].drop;
		c.start_epoch = 4;
		c.start_sample = cases[k].start;
		for (uint32_t r = 0; r < 3; r++) {
			bd_sampler s;

			c.rank = r;
			st_init_ok(&s, &c);
			ck_assert_uint_eq(bd_sampler_epoch_batches(&s, 4), cases[k].batches);
			for (uint64_t b = 0; b < cases[k].batches; b++) {
				uint32_t len = bd_sampler_epoch_batch_len(&s, 4, b);

				ck_assert_uint_eq(len, b + 1 < cases[k].batches ? cases[k].B
							       : cases[k].last);
				bd_sampler_batch(&s, 4, b, ids);
				for (uint32_t i = 0; i < len; i++)
					ck_assert_msg(ids[i] == cases[k].want[r][b][i], "case %zu rank %u "
						      "batch %" PRIu64 " [%u]: %" PRIu64 " != %" PRIu64, k,
						      r, b, i, ids[i], cases[k].want[r][b][i]);
			}
			/* Epoch 5 starts at 0 again: rank r's first batch begins at r * B. */
			bd_sampler_batch(&s, 5, 0, ids);
			ck_assert_uint_eq(ids[0], (uint64_t)r * cases[k].B);
		}
	}
}
END_TEST

/* g counts batches from (start_epoch, 0); a start epoch of none starts with the next. */
START_TEST(test_locate)
{
	bd_sampler_cfg c = st_cfg_of(10, BP_SHUFFLE_GLOBAL, 1);
	uint64_t e, b;
	bd_sampler s;

	c.world = 3;
	c.batch_size = 1;
	c.start_epoch = 7;
	c.start_sample = 5;      /* 2 batches, then 4 a full epoch */
	st_init_ok(&s, &c);
	ck_assert_uint_eq(bd_sampler_epoch_batches(&s, 7), 2);
	ck_assert_uint_eq(bd_sampler_epoch_batches(&s, 8), 4);
	bd_sampler_locate(&s, 1, &e, &b);
	ck_assert(e == 7 && b == 1);
	bd_sampler_locate(&s, 2, &e, &b);
	ck_assert(e == 8 && b == 0);
	bd_sampler_locate(&s, 2 + 4 * 3 + 3, &e, &b);
	ck_assert(e == 11 && b == 3);

	c.drop_last = true;
	c.start_sample = 8;      /* 2 left for 3 ranks: no batch in epoch 7 */
	st_init_ok(&s, &c);
	ck_assert_uint_eq(bd_sampler_epoch_batches(&s, 7), 0);
	ck_assert_uint_eq(bd_sampler_epoch_batches(&s, 8), 3);
	bd_sampler_locate(&s, 0, &e, &b);
	ck_assert(e == 8 && b == 0);
	bd_sampler_locate(&s, 4, &e, &b);
	ck_assert(e == 9 && b == 1);
}
END_TEST

/* Resuming with S + k*B*W at the same world and batch is continuing, batch for batch. */
START_TEST(test_same_world_resume)
{
	enum bp_shuffle mode = st_all_modes[_i];
	const uint64_t ks[] = { 1, 7, 20 };
	uint64_t a[16], b[16];

	for (int drop = 0; drop < 2; drop++)
		for (size_t x = 0; x < ARRAY_SIZE(ks); x++)
			for (uint32_t r = 0; r < 3; r++) {
				bd_sampler_cfg c = st_cfg_of(1003, mode, 5);
				bd_sampler whole, rest;

				c.world = 3, c.rank = r, c.batch_size = 16, c.drop_last = drop;
				c.start_epoch = 2;
				st_init_ok(&whole, &c);
				c.start_sample = ks[x] * 16 * 3;
				st_init_ok(&rest, &c);
				ck_assert_uint_eq(bd_sampler_epoch_batches(&rest, 2) + ks[x],
						  bd_sampler_epoch_batches(&whole, 2));
				for (uint64_t j = 0; j < bd_sampler_epoch_batches(&rest, 2); j++) {
					uint32_t len = bd_sampler_epoch_batch_len(&rest, 2, j);

					ck_assert_uint_eq(len, bd_sampler_epoch_batch_len(&whole, 2,
											  ks[x] + j));
					bd_sampler_batch(&rest, 2, j, a);
					bd_sampler_batch(&whole, 2, ks[x] + j, b);
					for (uint32_t i = 0; i < len; i++)
						expect_eq(a[i], b[i]);
				}
				/* And the epochs after are the same. */
				for (uint64_t j = 0; j < bd_sampler_batches_per_epoch(&rest); j++) {
					bd_sampler_batch(&rest, 3, j, a);
					bd_sampler_batch(&whole, 3, j, b);
					for (uint32_t i = 0; i < bd_sampler_batch_len(&rest, j); i++)
						expect_eq(a[i], b[i]);
				}
			}
}
END_TEST

/* World w1 (batch b1) for k steps, then world w2 (batch b2) from there. */
typedef struct elastic {
	uint32_t w1, b1, w2, b2;
} elastic;

static const elastic elastic_cases[] = {
	{ 2, 12, 3, 8 },     /* b2 = b1 * w1 / w2 */
	{ 4, 6, 1, 24 },
	{ 3, 8, 8, 3 },      /* 24 / 8 */
	{ 2, 12, 3, 5 },     /* another b2 */
};

/*
 * Count every id the old part (k steps of w1) and the new part (the rest
 * of the epoch at w2 from S = k*b1*w1) deal, then check: without
 * drop_last every id once plus exactly the padding (the ids at positions
 * p - n for the positions p >= n the new part ends at), with drop_last at
 * most once and exactly the kept count. The epoch after equals a fresh
 * w2 run's.
 */
static void check_elastic(enum bp_shuffle mode, const elastic *x, bool drop, uint64_t k)
{
	const uint64_t n = 1003, epoch = 6;
	uint64_t S = k * x->b1 * x->w1, total = 0, rem = n - S, ids[64], ref[64];
	uint64_t per = drop ? rem / x->w2 : (rem + x->w2 - 1) / x->w2;
	uint32_t *count = calloc(n, sizeof(*count));
	bd_sampler_cfg c = st_cfg_of(n, mode, 99);
	bd_sampler s, fresh;

	ck_assert_ptr_nonnull(count);
	c.chunk = 7, c.window = 3, c.drop_last = drop, c.start_epoch = epoch;
	c.world = x->w1, c.batch_size = x->b1;
	for (uint32_t r = 0; r < x->w1; r++)
		for (uint64_t j = 0; j < k; j++) {
			ck_assert_uint_eq(batch_of(c, r, epoch, j, ids), x->b1);
			for (uint32_t i = 0; i < x->b1; i++, total++)
				count[ids[i]]++;
		}
	c.world = x->w2, c.batch_size = x->b2, c.start_sample = S;
	for (uint32_t r = 0; r < x->w2; r++) {
		c.rank = r;
		st_init_ok(&s, &c);
		for (uint64_t j = 0; j < bd_sampler_epoch_batches(&s, epoch); j++) {
			uint32_t len = batch_of(c, r, epoch, j, ids);

			for (uint32_t i = 0; i < len; i++, total++)
				count[ids[i]]++;
		}
		/* The epoch after is a fresh w2 run's. */
		c.start_sample = 0;
		st_init_ok(&fresh, &c);
		c.start_sample = S;
		for (uint64_t j = 0; j < bd_sampler_batches_per_epoch(&fresh); j++) {
			uint32_t len = bd_sampler_epoch_batch_len(&s, epoch + 1, j);

			ck_assert_uint_eq(len, bd_sampler_batch_len(&fresh, j));
			bd_sampler_batch(&s, epoch + 1, j, ids);
			bd_sampler_batch(&fresh, epoch + 1, j, ref);
			for (uint32_t i = 0; i < len; i++)
				expect_eq(ids[i], ref[i]);
		}
	}
	if (drop) {
		uint64_t kept = (per / x->b2) * x->b2 * x->w2;

		expect_eq(total, S + kept);
		for (uint64_t id = 0; id < n; id++)
			expect(count[id] <= 1, "mode %d %u->%u k %" PRIu64 ": id %" PRIu64 " %u times",
			       (int)mode, x->w1, x->w2, k, id, count[id]);
	} else {
		uint64_t end = S + per * x->w2;

		expect_eq(total, end);
		/* The padding: positions n .. end-1 hold the ids at 0 .. end-n-1. */
		for (uint64_t p = n; p < end; p++)
			count[bd_sampler_order(&s, epoch, p - n)]--;
		for (uint64_t id = 0; id < n; id++)
			expect(count[id] == 1, "mode %d %u->%u k %" PRIu64 ": id %" PRIu64 " %u times "
			       "(padding aside)", (int)mode, x->w1, x->w2, k, id, count[id]);
	}
	free(count);
}

START_TEST(test_elastic_resume)
{
	enum bp_shuffle mode = st_all_modes[_i % 3];
	const elastic *x = &elastic_cases[_i / 3];
	uint64_t steps = 1003 / x->w1 / x->b1;   /* full steps of the drop_last schedule */
	const uint64_t ks[] = { 1, steps / 3, steps / 2, steps - 1 };

	for (int drop = 0; drop < 2; drop++)
		for (size_t i = 0; i < ARRAY_SIZE(ks); i++)
			check_elastic(mode, x, drop, ks[i]);
}
END_TEST

static Suite *sampler_resume_suite(void)
{
	Suite *s = suite_create("sampler-resume");
	TCase *tc;

	tc = tcase_create("striped");
	tcase_add_test(tc, test_striped_positions);
	tcase_add_test(tc, test_locate);
	tcase_add_loop_test(tc, test_same_world_resume, 0, ARRAY_SIZE(st_all_modes));
	tcase_add_loop_test(tc, test_elastic_resume, 0, ARRAY_SIZE(elastic_cases) * 3);
	suite_add_tcase(s, tc);

	tc = tcase_create("resume");
	tcase_add_loop_test(tc, test_resume, 0, ARRAY_SIZE(st_all_modes));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(sampler_resume_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
