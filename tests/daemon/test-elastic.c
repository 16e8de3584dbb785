/* SPDX-License-Identifier: MIT */
/*
 * test-elastic.c - elastic resume and batch strides, end to end: a real
 * batchd on a temporary socket, real libbatchclient streams, checked by
 * sample id and by each sample's bytes against the pack on disk.
 *
 * Why a suite of its own: a job on spot GPUs saves one number mid-epoch
 * (the samples all ranks consumed) and resumes at another world size, and
 * its DataLoader workers each read every N-th batch of their rank. If
 * either lost or repeated a sample, training would be silently skewed, so
 * every TCase asserts the exactly-once union directly: W streams read k
 * batches each, W' streams resume from start_sample = k*B*W to the epoch
 * end, and the positions they cover are one epoch's order with nothing
 * missing or twice (plus exactly the documented padding); the epoch after
 * is what a fresh W' job reads; N strided streams together are one stream
 * of stride 1, batch for batch. The pack's samples are distinct random
 * bytes (asserted), so a checksum names its sample. Also here: every
 * -EINVAL bc_open returns carries its reason.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>
#include <xxhash.h>

#include "daemon-testlib.h"
#include "pack-testlib.h"

static dt_daemon D;

#define expect dt_expect

#define EL "el.bpk"
#define EL_N 997u               /* prime: every world pads */
#define EL_PER_BLOCK 8u         /* block mode's chunk */
#define EL_EPOCH 2u             /* the epoch the jobs save in */

/* The pack's sample hashes by id (what each sample's bytes must hash to). */
static uint64_t pack_hash[EL_N];

/* ---- fixtures --------------------------------------------------------------- */

/* EL into the daemon's root: EL_N samples of 24 .. 300 random bytes, 8 a block. */
static void setup(void)
{
	char path[PATH_MAX];
	pt_samples s;
	dt_ref ref;
	int fd;

	dt_setup_dir();
	pt_samples_make(&s, EL_N, 24, 300, PT_RANDOM, 0xe1a57c);
	dt_root_path(&D, EL, path, sizeof(path));
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ck_assert_msg(fd >= 0, "create %s: %s", path, strerror(errno));
	ck_assert_int_eq(pt_pack_write(fd, &s, EL_PER_BLOCK, NULL, 0, 1, NULL), 0);
	ck_assert_int_eq(close(fd), 0);
	pt_samples_free(&s);

	ck_assert_int_eq(dt_ref_open(&ref, path), 0);
	for (uint64_t id = 0; id < EL_N; id++) {
		bp_dataset_fault fault;
		const uint8_t *p;
		uint64_t size;

		ck_assert_int_eq(bp_sample_reader_get(ref.r, id, &p, &size, &fault), 0);
		pack_hash[id] = XXH64(p, size, 0);
		for (uint64_t j = 0; j < id; j++)
			ck_assert_msg(pack_hash[j] != pack_hash[id], "samples %" PRIu64 " and %"
				      PRIu64 " are equal", j, id);
	}
	dt_ref_close(&ref);
	ck_assert_msg(dt_daemon_start(&D) == 0, "batchd did not start");
}

/* ---- helpers ---------------------------------------------------------------- */

static void ref_ok(dt_ref *ref)
{
	char path[PATH_MAX];

	ck_assert_int_eq(dt_ref_open(ref, dt_root_path(&D, EL, path, sizeof(path))), 0);
}

static void el_opts(bc_stream_opts *o, enum bc_shuffle mode, uint32_t batch, uint32_t rank,
		    uint32_t world, bool drop)
{
	dt_opts(o, EL, batch, mode, 4242);
	o->rank = rank;
	o->world = world;
	o->drop_last = drop;
	o->start_epoch = EL_EPOCH;
}

/* The run's batch events (not the epoch ends), in order, into ev (cap entries). @return how many. */
static size_t batches_of(const dt_run *run, const dt_event **ev, size_t cap)
{
	size_t n = 0;

	for (size_t k = 0; k < run->nev && n < cap; k++)
		if (run->ev[k].result == 0)
			ev[n++] = &run->ev[k];
	return n;
}

/* Every sample the run delivered hashes to the pack's sample of its id. */
static void expect_bytes(const dt_run *run, const char *what)
{
	for (size_t i = 0; i < run->nids; i++) {
		expect(run->ids[i] < EL_N, "%s: id %" PRIu64 " out of range", what, run->ids[i]);
		expect(run->hashes[i] == pack_hash[run->ids[i]], "%s: sample %" PRIu64 "'s bytes "
		       "are not the pack's", what, run->ids[i]);
	}
}

/* The schedule's arithmetic, restated from docs/architecture.md "Plan". */
static uint64_t per_rank(uint64_t rem, uint32_t world, bool drop)
{
	return drop ? rem / world : (rem + world - 1) / world;
}

static uint64_t batches(uint64_t per, uint32_t batch, bool drop)
{
	return drop ? per / batch : (per + batch - 1) / batch;
}

/* One elastic case: W ranks of batch B save after k steps; W2 ranks of batch B2 resume. */
typedef struct el_case {
	uint32_t w, b, w2, b2;
} el_case;

static const el_case el_cases[] = {
	{ 2, 12, 3, 8 },     /* B2 = B*W/W2 */
	{ 4, 6, 1, 24 },
	{ 3, 8, 8, 3 },      /* 24 / 8 */
	{ 2, 12, 3, 5 },     /* another B2 */
};

/* Positions an epoch of world w covers at most: n + w (padding) for any start. */
#define POS_CAP (EL_N + 16u)

typedef struct cover {
	uint64_t id[POS_CAP];
	bool set[POS_CAP];
} cover;

/* Record that global position p held id; a position twice is a failure. */
static void cover_put(cover *cv, uint64_t p, uint64_t id, const char *what)
{
	expect(p < POS_CAP, "%s: position %" PRIu64 " past the epoch", what, p);
	expect(!cv->set[p], "%s: position %" PRIu64 " delivered twice", what, p);
	cv->set[p] = true;
	cv->id[p] = id;
}

/* The first k steps of W ranks of batch B, into cv. */
static void old_part(const el_case *c, enum bc_shuffle mode, bool drop, uint64_t k, cover *cv,
		     dt_ref *ref, bc_client *cl, const char *what)
{
	for (uint32_t r = 0; r < c->w; r++) {
		const dt_event *ev[64];
		dt_run run = { 0 };
		bc_stream_opts o;
		bc_stream *s;
		size_t nb;

		el_opts(&o, mode, c->b, r, c->w, drop);
		s = dt_open_ok(cl, &o);
		dt_consume_ok(s, ref, k, 0, &run, what);
		nb = batches_of(&run, ev, 64);
		expect(nb == k, "%s: rank %u took %zu batches, not %" PRIu64, what, r, nb, k);
		for (size_t j = 0; j < nb; j++) {
			expect(ev[j]->epoch == EL_EPOCH && ev[j]->batch == j && ev[j]->count == c->b,
			       "%s: old rank %u batch %zu is (%" PRIu64 ", %" PRIu64 ") of %u", what,
			       r, j, ev[j]->epoch, ev[j]->batch, ev[j]->count);
			for (uint32_t i = 0; i < c->b; i++)
				cover_put(cv, j * c->b * c->w + r * c->b + i,
					  run.ids[ev[j]->first + i], what);
		}
		expect_bytes(&run, what);
		dt_run_free(&run);
		ck_assert_int_eq(bc_close(s), 0);
	}
}

/*
 * Rank r of W2 resumed at start_sample S: the rest of the epoch into cv,
 * then the next epoch into *next (its batches), the stream closed.
 */
static void new_rank(const el_case *c, enum bc_shuffle mode, bool drop, uint64_t S, uint32_t r,
		     cover *cv, dt_run *next, dt_ref *ref, bc_client *cl, const char *what)
{
	uint64_t per = per_rank(EL_N - S, c->w2, drop), b0 = batches(per, c->b2, drop);
	uint64_t full = batches(per_rank(EL_N, c->w2, drop), c->b2, drop), e, b;
	const dt_event *ev[POS_CAP];
	dt_run run = { 0 };
	bc_stream_opts o;
	bc_stream *s;
	size_t nb;

	el_opts(&o, mode, c->b2, r, c->w2, drop);
	o.start_sample = S;
	s = dt_open_ok(cl, &o);
	expect(bc_stream_epoch_batches(s, EL_EPOCH) == b0 &&
	       bc_stream_epoch_batches(s, EL_EPOCH + 1) == full &&
	       bc_stream_epoch_batches(s, EL_EPOCH - 1) == 0 &&
	       bc_stream_batches_per_epoch(s) == full,
	       "%s: rank %u: epoch batches %" PRIu64 "/%" PRIu64 ", expected %" PRIu64 "/%" PRIu64,
	       what, r, bc_stream_epoch_batches(s, EL_EPOCH),
	       bc_stream_epoch_batches(s, EL_EPOCH + 1), b0, full);
	bc_stream_position(s, &e, &b);
	expect(b0 ? e == EL_EPOCH && b == 0 : e == EL_EPOCH + 1 && b == 0,
	       "%s: rank %u starts at (%" PRIu64 ", %" PRIu64 ")", what, r, e, b);
	if (b0) {
		dt_consume_ok(s, ref, b0 + 1, DT_STOP_EPOCH_END, &run, what);
		nb = batches_of(&run, ev, POS_CAP);
		expect(nb == b0, "%s: rank %u took %zu batches to the epoch end, not %" PRIu64,
		       what, r, nb, b0);
		for (size_t j = 0; j < nb; j++) {
			uint32_t len = drop || j + 1 < b0 ? c->b2 : (uint32_t)(per - (b0 - 1) * c->b2);

			expect(ev[j]->epoch == EL_EPOCH && ev[j]->batch == j && ev[j]->count == len,
			       "%s: new rank %u batch %zu is (%" PRIu64 ", %" PRIu64 ") of %u, not "
			       "of %u", what, r, j, ev[j]->epoch, ev[j]->batch, ev[j]->count, len);
			for (uint32_t i = 0; i < len; i++)
				cover_put(cv, S + j * c->b2 * c->w2 + r * len + i,
					  run.ids[ev[j]->first + i], what);
		}
		expect_bytes(&run, what);
		dt_run_free(&run);
	}
	dt_consume_ok(s, ref, full + 1, DT_STOP_EPOCH_END, next, what);
	expect_bytes(next, what);
	ck_assert_int_eq(bc_close(s), 0);
}

/*
 * cv must be one epoch's order: without drop_last every position below n
 * exactly once, every id once among them, positions from n on (up to
 * `end`) the head again; with drop_last positions [0, end) each once and
 * no id twice. Unshuffled, position p holds id p.
 */
static void expect_once(const cover *cv, uint64_t end, bool drop, enum bc_shuffle mode,
			const char *what)
{
	static bool seen[EL_N];

	memset(seen, 0, sizeof(seen));
	for (uint64_t p = 0; p < POS_CAP; p++) {
		bool want = p < end;

		expect(cv->set[p] == want, "%s: position %" PRIu64 " %s", what, p,
		       want ? "missing" : "delivered past the end");
		if (!want)
			continue;
		if (p >= EL_N) {
			expect(cv->id[p] == cv->id[p - EL_N], "%s: padding at %" PRIu64 " is id %"
			       PRIu64 ", not the head's %" PRIu64, what, p, cv->id[p],
			       cv->id[p - EL_N]);
			continue;
		}
		expect(!seen[cv->id[p]], "%s: id %" PRIu64 " twice", what, cv->id[p]);
		seen[cv->id[p]] = true;
		expect(mode != BC_SHUFFLE_NONE || cv->id[p] == p, "%s: unshuffled position %"
		       PRIu64 " holds id %" PRIu64, what, p, cv->id[p]);
	}
	if (!drop)
		expect(end >= EL_N, "%s: the epoch ends at %" PRIu64, what, end);
}

/* The next epoch of the resumed streams is a fresh W2 job's. */
static void expect_fresh(const el_case *c, enum bc_shuffle mode, bool drop, dt_run *next,
			 dt_ref *ref, bc_client *cl, const char *what)
{
	for (uint32_t r = 0; r < c->w2; r++) {
		const dt_event *a[POS_CAP], *f[POS_CAP];
		dt_run fresh = { 0 };
		bc_stream_opts o;
		bc_stream *s;
		size_t na, nf;

		el_opts(&o, mode, c->b2, r, c->w2, drop);
		o.start_epoch = EL_EPOCH + 1;
		s = dt_open_ok(cl, &o);
		dt_consume_ok(s, ref, bc_stream_batches_per_epoch(s) + 1, DT_STOP_EPOCH_END, &fresh,
			      what);
		ck_assert_int_eq(bc_close(s), 0);
		na = batches_of(&next[r], a, POS_CAP);
		nf = batches_of(&fresh, f, POS_CAP);
		expect(na == nf, "%s: rank %u's next epoch has %zu batches, a fresh run's %zu", what,
		       r, na, nf);
		for (size_t j = 0; j < na; j++) {
			expect(a[j]->epoch == EL_EPOCH + 1 && f[j]->epoch == EL_EPOCH + 1 &&
			       a[j]->batch == f[j]->batch && a[j]->count == f[j]->count,
			       "%s: rank %u next-epoch batch %zu differs from a fresh run's", what, r,
			       j);
			for (uint32_t i = 0; i < a[j]->count; i++)
				expect(next[r].ids[a[j]->first + i] == fresh.ids[f[j]->first + i] &&
				       next[r].hashes[a[j]->first + i] == fresh.hashes[f[j]->first + i],
				       "%s: rank %u next-epoch batch %zu sample %u differs from a fresh "
				       "run's", what, r, j, i);
		}
		dt_run_free(&fresh);
	}
}

static void check_elastic(const el_case *c, enum bc_shuffle mode, bool drop, uint64_t k,
			  bc_client *cl, dt_ref *ref)
{
	uint64_t S = k * c->b * c->w, per = per_rank(EL_N - S, c->w2, drop);
	uint64_t b0 = batches(per, c->b2, drop), end;
	cover *cv = calloc(1, sizeof(*cv));
	dt_run next[8];
	char what[160];

	ck_assert_ptr_nonnull(cv);
	memset(next, 0, sizeof(next));
	snprintf(what, sizeof(what), "%s, world %u batch %u -> world %u batch %u after %" PRIu64
		 " steps (start_sample %" PRIu64 ")%s", bp_shuffle_name(mode), c->w, c->b, c->w2,
		 c->b2, k, S, drop ? ", drop_last" : "");
	old_part(c, mode, drop, k, cv, ref, cl, what);
	for (uint32_t r = 0; r < c->w2; r++)
		new_rank(c, mode, drop, S, r, cv, &next[r], ref, cl, what);
	/* Without drop_last the resumed ranks end at S + W2 * per_rank: the padding's end. */
	end = drop ? S + c->w2 * b0 * c->b2 : S + c->w2 * per;
	expect_once(cv, end, drop, mode, what);
	expect_fresh(c, mode, drop, next, ref, cl, what);
	for (uint32_t r = 0; r < c->w2; r++)
		dt_run_free(&next[r]);
	free(cv);
}

/* ---- 1. resume at another world size covers the epoch exactly once --------------------- */

START_TEST(test_elastic)
{
	const el_case *c = &el_cases[_i / 3];
	enum bc_shuffle mode = (enum bc_shuffle)(_i % 3);
	uint64_t steps = batches(per_rank(EL_N, c->w, true), c->b, true);
	const uint64_t ks[] = { 1, steps / 2, steps - 1 };
	bc_client *cl = dt_connect_ok();
	dt_ref ref;

	ref_ok(&ref);
	for (int drop = 0; drop < 2; drop++)
		for (size_t i = 0; i < ARRAY_SIZE(ks); i++)
			check_elastic(c, mode, drop, ks[i], cl, &ref);
	dt_ref_close(&ref);
	bc_disconnect(cl);
}
END_TEST

/* ---- 2. resuming at the same world and batch is continuing ------------------------------ */

START_TEST(test_same_world)
{
	enum bc_shuffle mode = (enum bc_shuffle)_i;
	bc_client *cl = dt_connect_ok();
	const uint32_t W = 3, B = 16;
	const uint64_t k = 5;
	dt_ref ref;

	ref_ok(&ref);
	for (uint32_t r = 0; r < W; r++) {
		const dt_event *a[64], *f[64];
		dt_run whole = { 0 }, rest = { 0 };
		bc_stream_opts o;
		bc_stream *s;
		size_t na, nf;

		el_opts(&o, mode, B, r, W, false);
		s = dt_open_ok(cl, &o);
		dt_consume_ok(s, &ref, 64, DT_STOP_EPOCH_END, &whole, "continuing");
		ck_assert_int_eq(bc_close(s), 0);
		o.start_sample = k * B * W;
		s = dt_open_ok(cl, &o);
		dt_consume_ok(s, &ref, 64, DT_STOP_EPOCH_END, &rest, "resumed");
		ck_assert_int_eq(bc_close(s), 0);
		na = batches_of(&whole, a, 64);
		nf = batches_of(&rest, f, 64);
		expect(na == nf + k, "rank %u: %zu batches resumed after %" PRIu64 " of %zu", r, nf,
		       k, na);
		for (size_t j = 0; j < nf; j++) {
			/* Batch j of the resumed schedule is batch k + j of the whole one. */
			expect(f[j]->batch == j && a[k + j]->count == f[j]->count,
			       "rank %u: resumed batch %zu is %" PRIu64 " of %u", r, j, f[j]->batch,
			       f[j]->count);
			for (uint32_t i = 0; i < f[j]->count; i++)
				expect(whole.ids[a[k + j]->first + i] == rest.ids[f[j]->first + i],
				       "rank %u: resumed batch %zu sample %u differs", r, j, i);
		}
		expect_bytes(&rest, "resumed");
		dt_run_free(&whole);
		dt_run_free(&rest);
	}
	dt_ref_close(&ref);
	bc_disconnect(cl);
}
END_TEST

/* ---- 3. N strided streams are one stream ------------------------------------------------ */

/* Start samples for the stride test: a full epoch, and one resumed mid-epoch. */
static const uint64_t stride_starts[] = { 0, 130 };

START_TEST(test_stride)
{
	enum bc_shuffle mode = (enum bc_shuffle)(_i % 3);
	uint64_t S = stride_starts[_i / 3], e, b;
	const uint32_t N = 3, B = 10;
	bc_client *cl = dt_connect_ok();
	const dt_event *ref_ev[256];
	dt_run one = { 0 };
	bc_stream_opts o;
	size_t total, nref;
	bc_stream *s;
	dt_ref ref;

	ref_ok(&ref);
	/* Rank 1 of 2: the stride-1 stream across the start epoch's end and into the next. */
	el_opts(&o, mode, B, 1, 2, false);
	o.start_sample = S;
	s = dt_open_ok(cl, &o);
	total = bc_stream_epoch_batches(s, EL_EPOCH) + 7;
	dt_consume_ok(s, &ref, total, 0, &one, "stride 1");
	ck_assert_int_eq(bc_close(s), 0);
	nref = batches_of(&one, ref_ev, 256);
	ck_assert_uint_eq(nref, total);
	ck_assert(ref_ev[total - 1]->epoch == EL_EPOCH + 1);

	for (uint32_t k = 0; k < N; k++) {
		size_t want = (total - k + N - 1) / N, n;
		const dt_event *ev[256];
		dt_run run = { 0 };
		char what[64];

		snprintf(what, sizeof(what), "%s, stride %u from batch %u", bp_shuffle_name(mode), N, k);
		o.start_batch = k;
		o.batch_stride = N;
		s = dt_open_ok(cl, &o);
		bc_stream_position(s, &e, &b);
		expect(e == ref_ev[k]->epoch && b == ref_ev[k]->batch, "%s: starts at (%" PRIu64
		       ", %" PRIu64 ")", what, e, b);
		dt_consume_ok(s, &ref, want, 0, &run, what);
		n = batches_of(&run, ev, 256);
		expect(n == want, "%s: %zu batches, not %zu", what, n, want);
		for (size_t j = 0; j < n; j++) {
			const dt_event *x = ref_ev[k + j * N];

			expect(ev[j]->epoch == x->epoch && ev[j]->batch == x->batch &&
			       ev[j]->count == x->count, "%s: batch %zu is (%" PRIu64 ", %" PRIu64
			       ") of %u, stride 1 has (%" PRIu64 ", %" PRIu64 ") of %u", what, j,
			       ev[j]->epoch, ev[j]->batch, ev[j]->count, x->epoch, x->batch, x->count);
			for (uint32_t i = 0; i < x->count; i++)
				expect(run.ids[ev[j]->first + i] == one.ids[x->first + i] &&
				       run.hashes[ev[j]->first + i] == one.hashes[x->first + i],
				       "%s: batch %zu sample %u differs from stride 1's", what, j, i);
		}
		/* The next batch it would deliver is stride 1's batch k + n*N. */
		bc_stream_position(s, &e, &b);
		if (k + n * N < nref)
			expect(e == ref_ev[k + n * N]->epoch && b == ref_ev[k + n * N]->batch,
			       "%s: position (%" PRIu64 ", %" PRIu64 ") after %zu batches", what, e,
			       b, n);
		expect_bytes(&run, what);
		dt_run_free(&run);
		ck_assert_int_eq(bc_close(s), 0);
	}
	dt_run_free(&one);
	dt_ref_close(&ref);
	bc_disconnect(cl);
}
END_TEST

/* drop_last leaving the resumed epoch no batch: the stream begins with the next epoch. */
START_TEST(test_drop_tail)
{
	bc_client *cl = dt_connect_ok();
	const dt_event *ev[256];
	dt_run run = { 0 };
	bc_stream_opts o;
	uint64_t e, b;
	bc_stream *s;
	dt_ref ref;

	ref_ok(&ref);
	el_opts(&o, BC_SHUFFLE_GLOBAL, 10, 1, 4, true);
	o.start_sample = EL_N - 30;   /* 30 samples left: 7 a rank, under a batch */
	s = dt_open_ok(cl, &o);
	ck_assert_uint_eq(bc_stream_epoch_batches(s, EL_EPOCH), 0);
	ck_assert_uint_eq(bc_stream_epoch_batches(s, EL_EPOCH + 1), EL_N / 4 / 10);
	bc_stream_position(s, &e, &b);
	ck_assert_uint_eq(e, EL_EPOCH + 1);
	ck_assert_uint_eq(b, 0);
	dt_consume_ok(s, &ref, 3, 0, &run, "drop_last tail");
	/* No epoch end before the first batch: the stream's first epoch is the next one. */
	ck_assert_uint_eq(batches_of(&run, ev, 256), 3);
	ck_assert_uint_eq(run.epoch_ends, 0);
	for (size_t j = 0; j < 3; j++)
		expect(ev[j]->epoch == EL_EPOCH + 1 && ev[j]->batch == j && ev[j]->count == 10,
		       "batch %zu is (%" PRIu64 ", %" PRIu64 ")", j, ev[j]->epoch, ev[j]->batch);
	expect_bytes(&run, "drop_last tail");
	dt_run_free(&run);
	ck_assert_int_eq(bc_close(s), 0);
	dt_ref_close(&ref);
	bc_disconnect(cl);
}
END_TEST

/* ---- 4. every -EINVAL from bc_open says why ----------------------------------------------- */

static char long_fields[BP_FIELD_LIST_MAX + 2];

START_TEST(test_open_messages)
{
	static const struct {
		const char *mention;
	} want[] = {
		{ "no dataset" },
		{ "batch_size 0" },
		{ "world 0" },
		{ "rank 3 is not below world 2" },
		{ "shuffle 7 is not" },
		{ "device -2 is neither" },
		{ "device 256 is neither" },
		{ "field list of 4160 bytes" },
		{ "batch_stride 0 must be 1 .. 4096" },
		{ "batch_stride 4097 must be 1 .. 4096" },
		{ "batch_size 1048577 must be 1 .. 1048576" },
		{ "batch size 65537 is over the limit of 65536" },
		{ "start_sample 997 is past the end of the epoch (997 samples): resume at the next "
		  "epoch with start_sample 0" },
		{ "start batch 2 is past the end of an epoch (2 batches from start_sample)" },
		{ "bc_stream_opts.struct_size 8 is too small" },
	};
	bc_client *cl = dt_connect_ok();

	memset(long_fields, 'a', sizeof(long_fields) - 1);
	for (size_t i = 0; i < ARRAY_SIZE(want); i++) {
		bc_stream_opts o;
		const char *msg;

		el_opts(&o, BC_SHUFFLE_NONE, 10, 0, 1, false);
		switch (i) {
		case 0: o.dataset = NULL; break;
		case 1: o.batch_size = 0; break;
		case 2: o.world = 0; break;
		case 3: o.rank = 3, o.world = 2; break;
		case 4: o.shuffle = (enum bc_shuffle)7; break;
		case 5: o.device = -2; break;
		case 6: o.device = 256; break;
		case 7: o.fields = long_fields; break;
		case 8: o.batch_stride = 0; break;
		case 9: o.batch_stride = 4097; break;
		case 10: o.batch_size = (1u << 20) + 1; break;
		case 11: o.batch_size = 65537; break;
		case 12: o.start_sample = EL_N; break;
		/* 997 - 977 = 20 samples left: 2 batches of 10, so start_batch 2 is past them. */
		case 13: o.start_sample = EL_N - 20, o.start_batch = 2; break;
		case 14: o.struct_size = 8; break;
		}
		if (i == 0 || i == 14) {
			bc_stream *s = NULL;

			ck_assert_int_eq(bc_open(cl, &o, &s), -EINVAL);
			msg = bc_client_error(cl);
		} else {
			msg = dt_open_fails(cl, &o, -EINVAL);
		}
		expect(strstr(msg, want[i].mention), "case %zu: \"%s\" does not say \"%s\"", i, msg,
		       want[i].mention);
	}
	bc_disconnect(cl);
}
END_TEST

/* ---- the suite ------------------------------------------------------------------------ */

static Suite *elastic_suite(void)
{
	Suite *s = suite_create("elastic");

	tcase_add_loop_test(dt_tcase(s, "elastic", setup), test_elastic, 0,
			    (int)ARRAY_SIZE(el_cases) * 3);
	tcase_add_loop_test(dt_tcase(s, "same_world", setup), test_same_world, 0, 3);
	tcase_add_loop_test(dt_tcase(s, "stride", setup), test_stride, 0,
			    (int)ARRAY_SIZE(stride_starts) * 3);
	tcase_add_test(dt_tcase(s, "drop_tail", setup), test_drop_tail);
	tcase_add_test(dt_tcase(s, "open_messages", setup), test_open_messages);
	return s;
}

int main(void)
{
	return dt_check_main(&D, elastic_suite);
}
