/* SPDX-License-Identifier: MIT */
/*
 * batchctl_doctor.c - `batchctl doctor [SESSION] [--seconds S]`: is this
 * trainer's GPU waiting on data, what that costs, where the time goes and
 * what to change, on one screen, from the daemon's own counters.
 *
 * Two status documents S seconds apart: the session's stall over that
 * time (the seconds its trainer spent in bc_next), its batches, and the
 * daemon's side of them: the decode workers' busy time against the ones
 * running, the block reads' mean latency and how many were in flight
 * against the queue depth, the cache's hits. The verdict takes the first
 * that holds:
 *   - stall under 5%: the trainer is the bottleneck, not its data;
 *   - decode workers 85% busy or more: decode-bound (more threads, or less
 *     work per sample);
 *   - reads at 80% of the queue depth, or 20 ms a read or more:
 *     storage-bound;
 *   - nothing staged ahead and the pipeline not full: the prefetch is too
 *     short for the trainer's bursts;
 *   - else the trainer takes batches faster than one session is served:
 *     the daemon's figures are printed for a person to read.
 * The figures are daemon-wide where the daemon keeps them so (decode,
 * reads, cache): with other sessions busy they are theirs too, said so.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batchctl.h"
#include "cli.h"
#include "json_path.h"

#define STALL_OK        0.05   /* a trainer waiting less than this is not starving */
#define DECODE_BUSY     0.85
#define READS_FULL      0.80
#define READ_SLOW_S     0.020

typedef struct doctor_opts {
	uint64_t session;       /* 0: the visible session that waited most */
	double seconds;
} doctor_opts;

/* The session that waited the longest of sessions (none: NULL). */
static json_object *most_waiting(json_object *sessions)
{
	json_object *best = NULL;

	for (size_t i = 0; sessions && i < json_object_array_length(sessions); i++) {
		json_object *se = json_object_array_get_idx(sessions, i);

		if (!best || get_f64(se, "wait_s") > get_f64(best, "wait_s"))
			best = se;
	}
	return best;
}

static int doctor_parse(int argc, char **argv, doctor_opts *o)
{
	*o = (doctor_opts){ .seconds = 3 };
	for (int i = 1; i < argc; i++) {
		char *end;

		if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
			o->seconds = strtod(argv[++i], &end);
			if (*end || !(o->seconds >= 0.5 && o->seconds <= 3600))
				return cli_usage("doctor: --seconds '%s' is not 0.5 .. 3600", argv[i]);
		} else if (argv[i][0] != '-' && !o->session) {
			o->session = strtoull(argv[i], &end, 10);
			if (*end || !o->session)
				return cli_usage("doctor: '%s' is not a session id (batchctl sessions "
						 "lists them)", argv[i]);
		} else {
			return cli_usage("doctor: unexpected argument '%s'", argv[i]);
		}
	}
	return 0;
}

/* A delta of a counter between the two documents. */
static double d_f64(json_object *a, json_object *b, const char *path)
{
	return get_f64(b, path) - get_f64(a, path);
}

static double d_u64(json_object *a, json_object *b, const char *path)
{
	return (double)(get_u64(b, path) - get_u64(a, path));
}

/* The reading of one interval. */
typedef struct reading {
	double dt, stall, batches, samples;
	double decode_busy, decode_active, decode_threads, queued;
	double read_ms, reads, read_mbs, inflight, depth;
	double hit, ahead, slots, inflight_jobs;
	unsigned sessions;
} reading;

static void measure(json_object *a, json_object *b, json_object *sa, json_object *sb, double dt,
		    reading *r)
{
	double hits = d_u64(a, b, "cache.hits"), misses = d_u64(a, b, "cache.misses");

	*r = (reading){ .dt = dt };
	r->stall = d_f64(sa, sb, "wait_s") / dt;
	r->batches = d_u64(sa, sb, "delivered");
	r->samples = r->batches * (double)get_u64(sb, "batch_size");
	r->decode_active = (double)get_u64(b, "threads.decode_active");
	r->decode_threads = (double)get_u64(b, "threads.decode");
	r->decode_busy = r->decode_active > 0
			 ? d_f64(a, b, "pipeline.decode_busy_s") / (dt * r->decode_active) : 0;
	r->queued = (double)get_u64(b, "pipeline.decode_queued");
	r->reads = d_u64(a, b, "pipeline.reads");
	r->read_ms = r->reads > 0 ? 1e3 * d_f64(a, b, "pipeline.read_s") / r->reads : 0;
	r->read_mbs = d_u64(a, b, "pipeline.bytes_read") / dt / 1e6;
	/* Reads in flight on average: their summed latency over the time (Little's law). */
	r->inflight = d_f64(a, b, "pipeline.read_s") / dt;
	r->depth = (double)get_u64(b, "pipeline.queue_depth");
	r->hit = hits + misses > 0 ? hits / (hits + misses) : -1;
	r->ahead = (double)get_u64(sb, "ahead");
	r->slots = (double)get_u64(sb, "slots");
	r->inflight_jobs = (double)get_u64(sb, "inflight");
	r->sessions = (unsigned)json_object_array_length(json_path_get(b, "sessions"));
}

static void print_verdict(const reading *r, json_object *b)
{
	double price = gpu_hour_price(b), gpus = gpus_per_session(b);

	printf("waiting on data:  %s: the trainer waited %.1f%% of the last %.1f s\n",
	       r->stall < STALL_OK ? "no" : "YES", 100 * r->stall, r->dt);
	if (price > 0)
		printf("what it costs:    %.4f an hour at gpu_hour_price %.4f x %.0f GPU%s\n",
		       r->stall * price * gpus, price, gpus, gpus == 1 ? "" : "s");
	else
		printf("what it costs:    %.1f GPU-seconds lost an hour (%.0f GPU%s; set [metrics] "
		       "gpu_hour_price for money)\n", r->stall * 3600 * gpus, gpus, gpus == 1 ? "" : "s");
	printf("where time goes:  trainer  %.1f batches/s (%.0f samples/s); %.0f of %.0f slots staged "
	       "ahead, %.0f batches in the pipeline\n", r->batches / r->dt, r->samples / r->dt,
	       r->ahead, r->slots, r->inflight_jobs);
	printf("                  decode   %.0f%% busy, %.0f of %.0f workers running, %.0f tasks "
	       "queued\n", 100 * r->decode_busy, r->decode_active, r->decode_threads, r->queued);
	printf("                  storage  %.1f ms a read, %.1f in flight of %.0f, %.1f MB/s; ",
	       r->read_ms, r->inflight, r->depth, r->read_mbs);
	if (r->hit < 0)
		printf("no block looked up in the cache\n");
	else
		printf("%.0f%% of blocks from the cache\n", 100 * r->hit);
	if (r->sessions > 1)
		printf("                  (decode, reads and cache are the daemon's: %u sessions "
		       "share them)\n", r->sessions);
	fputs("what to change:   ", stdout);
	if (r->stall < STALL_OK)
		printf("nothing on batchd's side: the trainer's own step is the bottleneck, and "
		       "batchd keeps %.0f batch%s staged ahead of it\n", r->ahead,
		       r->ahead == 1 ? "" : "es");
	else if (r->decode_busy >= DECODE_BUSY)
		printf("decode-bound: give batchd more cores ([decode] threads, %.0f now; a trainer "
		       "on the same cores competes for them) or less work a sample (batchd-pack "
		       "--level 1, images packed with --max-side, a smaller decode size)\n",
		       r->decode_threads);
	else if ((r->depth > 0 && r->inflight >= READS_FULL * r->depth) ||
		 r->read_ms >= 1e3 * READ_SLOW_S)
		printf("storage-bound: reads take %.1f ms at %.1f MB/s with %.1f in flight: a "
		       "faster disk, a dataset that fits the block cache ([memory] cache), larger "
		       "blocks with --shuffle block, or [io] queue_depth for a disk that takes "
		       "more\n", r->read_ms, r->read_mbs, r->inflight);
	else if (r->ahead < 1 && r->inflight_jobs < r->slots)
		printf("prefetch: nothing was staged ahead of the trainer; open with a larger "
		       "prefetch (Loader(prefetch=N), bc_stream_opts.prefetch, [session] "
		       "prefetch)\n");
	else
		printf("no one stage is saturated: the trainer takes batches as fast as one "
		       "session is built; more DataLoader workers (batch_stride) or a smaller "
		       "batch spread the work\n");
}

int batchctl_doctor(const char *sock, int argc, char **argv)
{
	json_object *a, *b, *sa, *sb;
	doctor_opts o;
	reading r;
	int rc;

	if ((rc = doctor_parse(argc, argv, &o)))
		return rc;
	if (!(a = status_of(sock)))
		return 1;
	sa = o.session ? find_session(json_path_get(a, "sessions"), o.session)
		       : most_waiting(json_path_get(a, "sessions"));
	if (!sa) {
		fprintf(stderr, "batchctl: doctor: %s\n", o.session
			? "no such session of yours open (batchctl sessions lists them)"
			: "no session of yours is open: start the trainer, then ask again");
		json_object_put(a);
		return 1;
	}
	o.session = get_u64(sa, "id");
	printf("session %" PRIu64 ": %s, pid %" PRIu64 ", batch %" PRIu64 "; watching %.1f s\n",
	       o.session, get_str(sa, "dataset"), get_u64(sa, "pid"), get_u64(sa, "batch_size"),
	       o.seconds);
	fflush(stdout);
	cli_sleep_ms((uint64_t)(o.seconds * 1000));
	if (!(b = status_of(sock))) {
		json_object_put(a);
		return 1;
	}
	sb = find_session(json_path_get(b, "sessions"), o.session);
	if (!sb) {
		fprintf(stderr, "batchctl: doctor: session %" PRIu64 " ended while watched\n",
			o.session);
		json_object_put(a);
		json_object_put(b);
		return 1;
	}
	measure(a, b, sa, sb, get_f64(b, "uptime_s") > get_f64(a, "uptime_s")
			      ? get_f64(b, "uptime_s") - get_f64(a, "uptime_s") : o.seconds, &r);
	print_verdict(&r, b);
	json_object_put(a);
	json_object_put(b);
	return 0;
}
