/* SPDX-License-Identifier: MIT */
/*
 * bench_decode.c - `batchd-bench decode`: how fast this machine's cores
 * turn a pack's stored blocks back into samples.
 *
 * Why: batchd's delivered bandwidth is the slower of the disk and the
 * decode pool, so a user needs the second number next to the first. The
 * blocks are read into memory first, untimed, and then decoded by N
 * threads exactly as the daemon's decode workers do it: one ZSTD_DCtx per
 * thread set up by bp_pack_dctx_init, bp_pack_block_decode checking the
 * stored hash, the frame and the raw hash. Only the decode is timed.
 *
 * Threads take blocks, not samples: the frames of a framed sample (PACK.md
 * §Frames) are blocks of their own and so spread over every thread, as in
 * the daemon; the report says how many samples came in frames.
 *
 * A dataset larger than --round-size (default ROUND_BYTES) of stored
 * bytes, or of more than ROUND_BLOCKS blocks, is processed in rounds (read
 * a slice, decode it, next slice); one that fits is read once and decoded
 * as many passes as --seconds asks for (default: one pass).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zstd.h>

#include "bench.h"
#include "cli.h"
#include "pack_file.h"
#include "progress.h"
#include "units.h"

#define ROUND_BYTES (UINT64_C(256) << 20)      /* default --round-size */
#define MAX_ROUND_BYTES (UINT64_C(1) << 40)
#define ROUND_BLOCKS (UINT64_C(1) << 20)
#define MAX_THREADS 1024u

typedef struct dec_block {
	const bp_shard *shard;
	bp_pack_block b;
	uint64_t index;          /* block index in its shard */
	size_t at;               /* offset of its stored bytes in the round buffer */
} dec_block;

typedef struct dec_job {
	const bp_dataset *ds;
	uint64_t round_bytes;    /* stored bytes per round at most (unless one block is larger) */
	/* the current round */
	dec_block *blocks;
	size_t nblocks;
	uint8_t *data;
	size_t data_cap;
	_Atomic size_t next;
	_Atomic int err;         /* first failure */
	size_t err_block;
	bp_pack_fault fault;
	pthread_mutex_t err_mu;

	pthread_barrier_t start, end;
	bool quit;
} dec_job;

typedef struct dec_worker {
	dec_job *job;
	pthread_t tid;
	ZSTD_DCtx *dctx;
	uint8_t *out;
	size_t out_cap;
} dec_worker;

static void *worker_main(void *arg)
{
	dec_worker *w = arg;
	dec_job *j = w->job;

	for (;;) {
		pthread_barrier_wait(&j->start);
		if (j->quit)
			return NULL;
		for (;;) {
			size_t i = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
			const dec_block *d;
			bp_pack_fault fault = { .block = -1 };
			int r;

			if (i >= j->nblocks || atomic_load_explicit(&j->err, memory_order_relaxed))
				break;
			d = &j->blocks[i];
			r = bp_pack_block_decode(&d->b, j->data + d->at, w->dctx, d->shard->ddict,
						 w->out, w->out_cap, &fault);
			if (r < 0) {
				pthread_mutex_lock(&j->err_mu);
				if (!atomic_load(&j->err)) {
					j->err_block = i;
					j->fault = fault;
					atomic_store(&j->err, r);
				}
				pthread_mutex_unlock(&j->err_mu);
			}
		}
		pthread_barrier_wait(&j->end);
	}
}

/* Where the next round starts: shard s, block b of that shard. */
typedef struct dec_cursor {
	size_t shard;
	uint64_t block;
} dec_cursor;

/* Reads len bytes of sh at off into buf. @return 0, or -errno with err set. */
static int read_range(const bp_shard *sh, uint8_t *buf, uint64_t len, uint64_t off, char *err,
		      size_t errlen)
{
	int r = bp_pread_full(sh->fd, buf, (size_t)len, off);

	if (r < 0)
		snprintf(err, errlen, "%s: reading at byte %" PRIu64 ": %s", sh->name, off,
			 r == -ENODATA ? "unexpected end of file" : strerror(-r));
	return r == -ENODATA ? -EIO : r;
}

/*
 * Reads the next slice of blocks (at most j->round_bytes stored bytes and
 * ROUND_BLOCKS blocks, at least one block) into j->data. Blocks of a shard
 * tile its data region in order, so each shard's part of the slice is one
 * range, read with pread in one go. The slice ends at the first block
 * that does not fit, wherever it lies: a shard may hold a block that is
 * refused before any of its blocks is taken. @return the blocks read (0 at
 * the end), or -errno.
 */
static int64_t read_round(dec_job *j, dec_cursor *c, char *err, size_t errlen)
{
	uint64_t bytes = 0;
	size_t n = 0;
	bool full = false;

	j->nblocks = 0;
	while (!full && c->shard < bp_dataset_shard_count(j->ds) && n < ROUND_BLOCKS) {
		const bp_shard *sh = bp_dataset_shard(j->ds, c->shard);
		size_t first = n;
		int r;

		for (; c->block < sh->index.block_count && n < ROUND_BLOCKS; c->block++) {
			bp_pack_block b;

			bp_pack_index_block(&sh->index, c->block, &b);
			if (n > 0 && bytes + b.stored_size > j->round_bytes) {
				full = true;
				break;
			}
			j->blocks[n++] = (dec_block){ .shard = sh, .b = b, .index = c->block,
						      .at = (size_t)bytes };
			bytes += b.stored_size;
		}
		if (c->block >= sh->index.block_count) {
			c->shard++;
			c->block = 0;
		}
		if (n == first)
			continue;
		r = bp_buf_reserve(&j->data, &j->data_cap, (size_t)bytes);
		if (r < 0)
			snprintf(err, errlen, "out of memory for a round of %" PRIu64 " bytes (lower "
				 "--round-size)", bytes);
		if (r == 0)
			r = read_range(sh, j->data + j->blocks[first].at, bytes - j->blocks[first].at,
				       j->blocks[first].b.offset, err, errlen);
		if (r < 0)
			return r;
	}
	j->nblocks = n;
	return (int64_t)n;
}

/* Decodes the current round on all workers. @return its wall time in seconds. */
static double decode_round(dec_job *j)
{
	double t0;

	atomic_store(&j->next, 0);
	t0 = bench_now();
	pthread_barrier_wait(&j->start);
	pthread_barrier_wait(&j->end);
	return bench_now() - t0;
}

typedef struct dec_result {
	uint64_t blocks, raw, stored, passes;
	uint64_t samples, framed; /* the dataset's samples, and those stored as frames */
	uint64_t rounds;         /* slices one pass reads the dataset in */
	double seconds;
} dec_result;

static int run_decode(dec_job *j, double min_seconds, bool show, dec_result *res,
		      char *err, size_t errlen)
{
	bool one_round = bp_dataset_stored_bytes(j->ds) <= j->round_bytes &&
			 bp_dataset_blocks(j->ds) <= ROUND_BLOCKS;
	progress p;
	int r = 0;

	memset(res, 0, sizeof(*res));
	res->samples = bp_dataset_samples(j->ds);
	res->framed = bp_dataset_framed(j->ds);
	progress_start(&p, "decoding", min_seconds > 0 ? 0 : bp_dataset_raw_bytes(j->ds));
	p.enabled = p.enabled && show;
	do {
		dec_cursor c = { 0, 0 };

		for (;;) {
			int64_t n;

			if (!one_round || res->passes == 0) {
				n = read_round(j, &c, err, errlen);
				if (n < 0) {
					r = (int)n;
					goto out;
				}
				if (n == 0)
					break;
			}
			res->seconds += decode_round(j);
			if (atomic_load(&j->err)) {
				const dec_block *d = &j->blocks[j->err_block];

				snprintf(err, errlen, "%s: block %" PRIu64 " at byte %" PRIu64 ": %s",
					 d->shard->name, d->index,
					 d->b.offset, j->fault.what ? j->fault.what : "decode failed");
				r = atomic_load(&j->err);
				goto out;
			}
			for (size_t i = 0; i < j->nblocks; i++) {
				res->raw += j->blocks[i].b.raw_size;
				res->stored += j->blocks[i].b.stored_size;
			}
			res->blocks += j->nblocks;
			res->rounds += res->passes == 0;
			progress_update(&p, res->raw, false);
			if (one_round)
				break;
		}
		res->passes++;
	} while (res->seconds < min_seconds);
out:
	progress_end(&p);
	return r;
}

/* What `decode` was asked for. */
typedef struct dec_args {
	const char *path;
	unsigned threads;
	double seconds;
	uint64_t round_bytes;
	bool json;
} dec_args;

static void print_result(const dec_args *a, const dec_result *r)
{
	double s = r->seconds > 0 ? r->seconds : 1e-9;
	unsigned threads = a->threads;
	char raw[32], stored[32], round[32];

	if (a->json) {
		fputs("{\"mode\": \"decode\", \"dataset\": ", stdout);
		bench_json_string(stdout, a->path);
		printf(", \"threads\": %u, \"passes\": %" PRIu64 ", \"rounds\": %" PRIu64
		       ", \"round_bytes\": %" PRIu64 ", \"blocks\": %" PRIu64 ", \"samples\": %" PRIu64
		       ", \"framed_samples\": %" PRIu64 ", \"raw_bytes\": %" PRIu64
		       ", \"stored_bytes\": %" PRIu64 ", \"seconds\": %.6f"
		       ", \"raw_bytes_per_s\": %.0f, \"stored_bytes_per_s\": %.0f, \"blocks_per_s\": %.1f"
		       ", \"raw_mb_per_s\": %.1f, \"raw_mb_per_s_per_thread\": %.1f}\n",
		       threads, r->passes, r->rounds, a->round_bytes, r->blocks, r->samples, r->framed,
		       r->raw, r->stored,
		       r->seconds,
		       (double)r->raw / s, (double)r->stored / s, (double)r->blocks / s,
		       (double)r->raw / s / 1e6, (double)r->raw / s / 1e6 / threads);
		return;
	}
	printf("decode: %s: %" PRIu64 " blocks, %s raw from %s stored (%.2fx), %u thread%s, "
	       "%" PRIu64 " pass%s",
	       a->path, r->blocks, bp_format_size(r->raw, raw, sizeof(raw)),
	       bp_format_size(r->stored, stored, sizeof(stored)),
	       r->stored ? (double)r->raw / (double)r->stored : 0, threads, threads == 1 ? "" : "s",
	       r->passes, r->passes == 1 ? "" : "es");
	if (r->rounds > 1)
		printf(" of %" PRIu64 " rounds (up to %s each)", r->rounds,
		       bp_format_size(a->round_bytes, round, sizeof(round)));
	if (r->framed)
		printf("; %" PRIu64 " of %" PRIu64 " samples in frames", r->framed, r->samples);
	putchar('\n');
	printf("  %.1f MB/s raw (%.1f MB/s per thread), %.1f MB/s stored, %.0f blocks/s, "
	       "in %.3f s\n",
	       (double)r->raw / s / 1e6, (double)r->raw / s / 1e6 / threads,
	       (double)r->stored / s / 1e6, (double)r->blocks / s, r->seconds);
}

/* argv into a. @return 0, or the usage exit status. */
static int parse_args(int argc, char **argv, dec_args *a)
{
	enum { O_THREADS = 256, O_SECONDS, O_ROUND, O_JSON };
	static const struct option opts[] = {
		{ "threads", required_argument, NULL, O_THREADS },
		{ "seconds", required_argument, NULL, O_SECONDS },
		{ "round-size", required_argument, NULL, O_ROUND },
		{ "json", no_argument, NULL, O_JSON },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t v;
	int ch;

	*a = (dec_args){ .threads = bench_ncpus(), .round_bytes = ROUND_BYTES };
	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "-:", opts, NULL)) != -1) {
		switch (ch) {
		case 1:
			if (a->path)
				return cli_usage("decode: unexpected argument '%s'", optarg);
			a->path = optarg;
			break;
		case O_THREADS:
			if (cli_parse_u64(optarg, &v) < 0 || v == 0 || v > MAX_THREADS)
				return cli_usage("--threads: '%s' is not a number from 1 to %u", optarg,
						 MAX_THREADS);
			a->threads = (unsigned)v;
			break;
		case O_SECONDS:
			if (bench_parse_seconds(optarg, &a->seconds) < 0)
				return cli_usage("--seconds: '%s' is not a duration", optarg);
			break;
		case O_ROUND:
			if (bp_parse_size(optarg, &v) < 0 || v == 0 || v > MAX_ROUND_BYTES)
				return cli_usage("--round-size: '%s' is not a size from 1 byte to 1T (" BP_SIZE_FORMS ")",
						 optarg);
			a->round_bytes = v;
			break;
		case O_JSON:
			a->json = true;
			break;
		case ':':
			return cli_usage("decode: '%s' needs a value", argv[optind - 1]);
		default:
			return cli_usage("decode: unknown option '%s'", argv[optind - 1]);
		}
	}
	if (!a->path)
		return cli_usage("decode: missing DATASET");
	return 0;
}

/* @return 0, or -1 after saying why the dataset does not open. */
static int open_dataset(const char *path, bp_dataset **ret)
{
	bp_dataset_fault fault;
	char err[512];
	int r;

	memset(&fault, 0, sizeof(fault));
	r = bp_dataset_openat(AT_FDCWD, path, ret, &fault);
	if (r < 0) {
		bp_dataset_fault_format(&fault, err, sizeof(err));
		fprintf(stderr, "batchd-bench: %s: %s%s%s\n", path, strerror(-r),
			fault.pack.what ? ": " : "", fault.pack.what ? err : "");
		return -1;
	}
	return 0;
}

/* Give each of the threads workers its output buffer and context. @return 0 or -ENOMEM. */
static int workers_init(dec_job *j, dec_worker *w, unsigned threads)
{
	for (unsigned i = 0; i < threads; i++) {
		w[i].job = j;
		w[i].out_cap = (size_t)bp_dataset_max_block(j->ds);
		w[i].out = malloc(w[i].out_cap ? w[i].out_cap : 1);
		w[i].dctx = ZSTD_createDCtx();
		if (!w[i].out || !w[i].dctx || bp_pack_dctx_init(w[i].dctx) < 0)
			return -ENOMEM;
	}
	return 0;
}

/* Start the worker threads. @return how many started (all, unless it said why not). */
static unsigned workers_start(dec_worker *w, unsigned threads)
{
	for (unsigned started = 0; started < threads; started++)
		if (pthread_create(&w[started].tid, NULL, worker_main, &w[started]) != 0) {
			fprintf(stderr, "batchd-bench: cannot start thread %u\n", started);
			return started;
		}
	return threads;
}

/* Stop and join the workers, free them and the job's buffers. */
static void workers_stop(dec_job *j, dec_worker *w, unsigned threads, unsigned started)
{
	if (started == threads) {
		j->quit = true;
		pthread_barrier_wait(&j->start);
		for (unsigned i = 0; i < threads; i++)
			pthread_join(w[i].tid, NULL);
	} else if (started) {
		/* Some never started: the rest wait at a barrier that cannot fill. */
		fprintf(stderr, "batchd-bench: giving up\n");
		_exit(1);
	}
	for (unsigned i = 0; w && i < threads; i++) {
		ZSTD_freeDCtx(w[i].dctx);
		free(w[i].out);
	}
	free(w);
	free(j->blocks);
	free(j->data);
	pthread_barrier_destroy(&j->start);
	pthread_barrier_destroy(&j->end);
	pthread_mutex_destroy(&j->err_mu);
}

int bench_cmd_decode(int argc, char **argv)
{
	unsigned started = 0;
	bp_dataset *ds = NULL;
	dec_worker *w = NULL;
	dec_result res;
	dec_args a;
	dec_job j;
	char err[512];
	int r, rc = parse_args(argc, argv, &a);

	if (rc)
		return rc;
	if (open_dataset(a.path, &ds) < 0)
		return 1;
	rc = 1;
	memset(&j, 0, sizeof(j));
	j.ds = ds;
	j.round_bytes = a.round_bytes;
	pthread_mutex_init(&j.err_mu, NULL);
	pthread_barrier_init(&j.start, NULL, a.threads + 1);
	pthread_barrier_init(&j.end, NULL, a.threads + 1);
	j.blocks = calloc(bp_dataset_blocks(j.ds) < ROUND_BLOCKS ? bp_dataset_blocks(j.ds) + 1
								 : ROUND_BLOCKS,
			  sizeof(*j.blocks));
	w = calloc(a.threads, sizeof(*w));
	if (!j.blocks || !w || workers_init(&j, w, a.threads) < 0) {
		fprintf(stderr, "batchd-bench: out of memory\n");
		goto out;
	}
	started = workers_start(w, a.threads);
	if (started < a.threads)
		goto out;
	r = run_decode(&j, a.seconds, !a.json, &res, err, sizeof(err));
	if (r < 0)
		fprintf(stderr, "batchd-bench: %s\n", err);
	else
		print_result(&a, &res);
	rc = r < 0 ? 1 : 0;
out:
	workers_stop(&j, w, a.threads, started);
	bp_dataset_close(ds);
	return rc;
}
