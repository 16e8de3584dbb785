/* SPDX-License-Identifier: MIT */
/*
 * bench_pipeline.c - `batchd-bench pipeline`: batchd end to end, with N
 * trainer processes consuming from it.
 *
 * Why: the disk and decode modes measure the parts; this measures what a
 * trainer actually gets. It starts its own batchd on a temporary socket
 * (root: the dataset's directory) unless --socket names a running one,
 * then forks N client processes, ranks 0..N-1 of a world of N, that each
 * take batches through libbatchclient and "train" on each: --step-cpu-ms
 * of CPU time burnt on the client's own core (a step computing on the
 * host), then --step-ms asleep (a step waiting on a GPU). Every client
 * measures how long it was blocked in bc_next (the stall a GPU would see),
 * its first-batch latency, its wait distribution, each epoch's time and
 * its own CPU time, and writes them into a shared anonymous mapping the
 * parent reads once the client has exited.
 *
 * --in-memory is the baseline a loader is judged against: each client
 * first takes one epoch of its batches and copies them into its own
 * memory (untimed), closes its stream so the daemon has nothing left to
 * do, and then runs the same loop over those copies, epoch after epoch.
 * The ratio of the two epoch times is what the loader costs a trainer
 * whose cores it shares.
 *
 * All clients are released at the same instant (they block on a pipe the
 * parent closes), so their runs overlap completely.
 *
 * With --device N the clients open GPU streams on CUDA device N and
 * consume as a trainer does: each makes its own CUDA stream wait for every
 * batch's copy (a GPU-side wait) before releasing it, so the daemon reuses
 * a device slot only once the copy into it has been waited for, and the
 * clock stops only after the last copy has landed: the rate is what
 * reached device memory. --touch also copies every batch back and
 * compares it with the host staging copy (slower; a check, not a figure).
 * The parent never touches CUDA: the clients are forked, and a process may
 * use CUDA after fork() only if its parent had not.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "batchclient.h"
#include "bench.h"
#include "bench_daemon.h"
#include "batchd-build.h"
#include "bench_stats.h"
#include "bench_svg.h"
#include "cli.h"
#include "gpucheck.h"
#include "progress.h"
#include "protocol.h"
#include "trainer.h"
#include "units.h"

#define MAX_CLIENTS 256u
#define BATCH_TIMEOUT_MS 60000   /* a batch slower than this is a hang, not a stall */
#define PL_SKIP 77               /* --device without a CUDA device: cannot run here */
#define MAX_EPOCH_TIMES 64u      /* epochs whose times a client reports */

typedef struct pl_opts {
	const char *dataset;
	const char *svg;         /* --svg: the waits' distribution chart, or NULL */
	const char *socket;      /* a running batchd, or NULL: start one */
	const char *batchd;      /* the binary to start */
	const char *memory;      /* --memory for our batchd */
	unsigned clients;
	bc_stream_opts so;       /* dataset, batch size, shuffle, seed, prefetch */
	uint64_t step_ms;        /* asleep per step */
	uint64_t step_cpu_ms;    /* CPU time burnt per step, before the sleep */
	double seconds;          /* 0 with epochs */
	uint64_t epochs;
	bool touch;              /* GPU: copy every batch back and compare */
	bool json;
	bool in_memory;          /* the baseline: the loop over one epoch held in memory */
} pl_opts;

/* One client's results, in memory shared with the parent. */
typedef struct pl_client {
	_Atomic uint64_t live_bytes;   /* for the progress line */
	int rc;                        /* 0 ok, else an errno */
	char msg[640];                 /* room for bc_connect's whole explanation */
	uint64_t batches, samples, bytes, failed;
	uint64_t mismatches;           /* --touch: batches whose device bytes differ */
	double wall, waited, first_batch;
	double cpu;                    /* this process's CPU seconds in its loop */
	double epoch_t0;               /* when the current epoch began */
	uint64_t nepochs;              /* epochs finished; the first MAX_EPOCH_TIMES timed */
	double epoch_s[MAX_EPOCH_TIMES];
	bench_hist wait;               /* ns blocked in bc_next, per batch taken */
} pl_client;

/* One batch of the in-memory baseline: a copy of what the daemon delivered. */
typedef struct pl_held {
	void *data;
	size_t len;
	uint32_t count;
} pl_held;

/* ---- one client ---------------------------------------------------------------------- */

/*
 * Connect and open rank's stream and, for --device, the CUDA side.
 * @return 0, or -1 with out's error set.
 */
static int client_open(const pl_opts *o, const char *sock, unsigned rank, pl_client *out,
		       bc_client **ret_c, bc_stream **ret_s, gpucheck **ret_gpu)
{
	bc_stream_opts so = o->so;
	gpucheck *gpu = NULL;
	bc_client *c = NULL;
	bc_stream *s = NULL;
	char why[200];
	int r;

	so.rank = rank;
	so.world = o->clients;
	r = bc_connect(sock, &c);
	if (r < 0) {
		out->rc = -r;
		snprintf(out->msg, sizeof(out->msg), "%s", bc_client_error(NULL));
		return -1;
	}
	r = bc_open(c, &so, &s);
	if (r < 0) {
		out->rc = -r;
		snprintf(out->msg, sizeof(out->msg), "open %s: %s", so.dataset,
			 bc_client_error(c)[0] ? bc_client_error(c) : bc_strerror(r));
		bc_disconnect(c);
		return -1;
	}
	if (so.device != BC_HOST) {
		r = gpucheck_new(so.device, &gpu, why, sizeof(why));
		if (r < 0) {
			out->rc = -r;
			snprintf(out->msg, sizeof(out->msg), "CUDA device %d: %s", so.device, why);
			bc_close(s);
			bc_disconnect(c);
			return -1;
		}
	}
	*ret_c = c;
	*ret_s = s;
	*ret_gpu = gpu;
	return 0;
}

/* A bc_next error. @return true when it ends the client's run (out says why). */
static bool client_next_failed(pl_client *out, bc_stream *s, int r)
{
	if (r == -ETIMEDOUT) {
		out->rc = ETIMEDOUT;
		snprintf(out->msg, sizeof(out->msg), "no batch for %d s", BATCH_TIMEOUT_MS / 1000);
		return true;
	}
	if (trainer_stream_over(r)) {
		out->rc = -r;
		snprintf(out->msg, sizeof(out->msg), "%s: %s", bc_strerror(r), bc_stream_error(s));
		return true;
	}
	out->failed++;   /* a batch the daemon could not build; the stream goes on */
	return false;
}

/* Count a batch of count samples, len bytes (t0: the start of the first-batch latency). */
static void client_count(pl_client *out, uint32_t count, size_t len, double t0)
{
	if (out->first_batch < 0)
		out->first_batch = bench_now() - t0;
	out->batches++;
	out->samples += count;
	out->bytes += len;
	atomic_store_explicit(&out->live_bytes, out->bytes, memory_order_relaxed);
}

/* "Train": compute on this core, then wait (for a GPU). */
static void client_step(const pl_opts *o)
{
	trainer_burn_cpu_ms(o->step_cpu_ms);
	if (o->step_ms)
		cli_sleep_ms(o->step_ms);
}

static void client_epoch_done(pl_client *out)
{
	double now = bench_now();

	if (out->nepochs < MAX_EPOCH_TIMES)
		out->epoch_s[out->nepochs] = now - out->epoch_t0;
	out->nepochs++;
	out->epoch_t0 = now;
}

/*
 * Count one batch (t0: when the client started, for the first-batch
 * latency), check it on the GPU, "train" on it and release it. @return 0, or -1 when a CUDA error ends the run.
 */
static int client_batch(const pl_opts *o, unsigned rank, pl_client *out, gpucheck *gpu,
			bc_batch *b, double t0)
{
	char why[200];
	size_t len;
	int r;

	bc_batch_data(b, &len);
	client_count(out, bc_batch_count(b), len, t0);
	if (gpu) {
		r = gpucheck_take(gpu, b, o->touch, why, sizeof(why));
		if (r < 0) {
			out->rc = EIO;
			snprintf(out->msg, sizeof(out->msg), "CUDA: %s", why);
			bc_release(b);
			return -1;
		}
		if (r > 0 && !out->mismatches++)
			fprintf(stderr, "batchd-bench: client %u: MISMATCH: %s\n", rank, why);
	}
	client_step(o);
	bc_release(b);
	return 0;
}

/* Take batches until the epochs are done, the time is up or the stream fails. */
static void client_loop(const pl_opts *o, unsigned rank, pl_client *out, bc_stream *s,
			gpucheck *gpu, double t0)
{
	double deadline = t0 + o->seconds;
	uint64_t ep = 0;

	for (;;) {
		bc_batch *b;
		uint64_t tw = bench_now_ns(), waited;
		int r = bc_next(s, &b, BATCH_TIMEOUT_MS);

		waited = bench_now_ns() - tw;
		out->waited += (double)waited / 1e9;
		if (r == BC_EPOCH_END) {
			client_epoch_done(out);
			if (o->epochs && ++ep == o->epochs)
				break;
			continue;
		}
		if (r < 0) {
			if (client_next_failed(out, s, r))
				break;
			continue;
		}
		bench_hist_record(&out->wait, waited);
		if (client_batch(o, rank, out, gpu, b, t0) < 0)
			break;
		/* The last epoch ends with its last batch: do not wait for the marker. */
		if (o->epochs && ep + 1 == o->epochs && trainer_last_epoch_done(s, &o->so, ep)) {
			client_epoch_done(out);
			break;
		}
		if (!o->epochs && bench_now() >= deadline)
			break;
	}
}

static void held_free(pl_held *held, size_t n)
{
	for (size_t i = 0; held && i < n; i++)
		free(held[i].data);
	free(held);
}

/* Copy batch b to the end of *held (n of *cap used). @return 0, or -ENOMEM. */
static int hold_one(pl_held **held, size_t *n, size_t *cap, const bc_batch *b)
{
	const void *p;
	size_t len;

	if (*n == *cap) {
		size_t nc = *cap ? 2 * *cap : 256;
		pl_held *h = realloc(*held, nc * sizeof(*h));

		if (!h)
			return -ENOMEM;
		*held = h;
		*cap = nc;
	}
	p = bc_batch_data(b, &len);
	(*held)[*n].data = malloc(len ? len : 1);
	if (!(*held)[*n].data)
		return -ENOMEM;
	memcpy((*held)[*n].data, p, len);
	(*held)[*n].len = len;
	(*held)[*n].count = bc_batch_count(b);
	(*n)++;
	return 0;
}

/*
 * The in-memory baseline's data: the first epoch of this client's batches,
 * copied. @return 0 and *ret_held (n batches, free with held_free), or -1
 * with out's error set.
 */
static int client_hold(const pl_opts *o, pl_client *out, bc_stream *s, pl_held **ret_held,
		       size_t *ret_n)
{
	pl_held *held = NULL;
	size_t n = 0, cap = 0;

	for (;;) {
		bc_batch *b;
		int r = bc_next(s, &b, BATCH_TIMEOUT_MS);

		if (r == BC_EPOCH_END)
			break;
		if (r < 0) {
			if (client_next_failed(out, s, r))
				goto fail;
			continue;
		}
		r = hold_one(&held, &n, &cap, b);
		bc_release(b);
		if (r < 0) {
			out->rc = ENOMEM;
			snprintf(out->msg, sizeof(out->msg), "--in-memory: no memory for batch %zu "
				 "of the epoch (the dataset must fit in RAM)", n);
			goto fail;
		}
		if (trainer_last_epoch_done(s, &o->so, 0))
			break;
	}
	if (!n) {
		out->rc = ENODATA;
		snprintf(out->msg, sizeof(out->msg), "--in-memory: the first epoch had no batches");
		goto fail;
	}
	*ret_held = held;
	*ret_n = n;
	return 0;
fail:
	held_free(held, n);
	return -1;
}

/* The pipeline's loop over the held batches: no wait but picking the next. */
static void client_mem_loop(const pl_opts *o, pl_client *out, const pl_held *held, size_t n,
			    double t0)
{
	double deadline = t0 + o->seconds;
	uint64_t ep = 0;

	for (size_t i = 0;; i = (i + 1) % n) {
		uint64_t tw = bench_now_ns(), waited;
		const pl_held *h = &held[i];

		waited = bench_now_ns() - tw;
		out->waited += (double)waited / 1e9;
		bench_hist_record(&out->wait, waited);
		client_count(out, h->count, h->len, t0);
		client_step(o);
		if (i + 1 == n) {
			client_epoch_done(out);
			if (o->epochs && ++ep == o->epochs)
				return;
		}
		if (!o->epochs && bench_now() >= deadline)
			return;
	}
}

/* --in-memory: take an epoch, let the daemon go, time the loop over the copies. */
static void client_run_memory(const pl_opts *o, pl_client *out, bc_client *c, bc_stream *s)
{
	double t_loop, cpu0;
	pl_held *held;
	size_t n;
	int r = client_hold(o, out, s, &held, &n);

	/* From here on the daemon has nothing to do for this client. */
	bc_close(s);
	bc_disconnect(c);
	if (r < 0)
		return;
	t_loop = bench_now();
	cpu0 = trainer_cpu_s();
	out->first_batch = -1;
	out->epoch_t0 = t_loop;
	client_mem_loop(o, out, held, n, t_loop);
	out->wall = bench_now() - t_loop;
	out->cpu = trainer_cpu_s() - cpu0;
	held_free(held, n);
}

static void client_run(const pl_opts *o, const char *sock, unsigned rank, pl_client *out)
{
	double t0 = bench_now(), t_loop, cpu0;
	gpucheck *gpu;
	bc_client *c;
	bc_stream *s;
	char why[200];

	if (client_open(o, sock, rank, out, &c, &s, &gpu) < 0)
		return;
	if (o->in_memory) {
		client_run_memory(o, out, c, s);
		return;
	}
	t_loop = bench_now();
	cpu0 = trainer_cpu_s();
	out->first_batch = -1;
	out->epoch_t0 = t_loop;
	client_loop(o, rank, out, s, gpu, t0);
	/* Delivered means landed: the last copies finish before the clock stops. */
	if (gpu && gpucheck_sync(gpu, why, sizeof(why)) < 0 && !out->rc) {
		out->rc = EIO;
		snprintf(out->msg, sizeof(out->msg), "CUDA: %s", why);
	}
	out->wall = bench_now() - t_loop;
	out->cpu = trainer_cpu_s() - cpu0;
	if (out->first_batch < 0)
		out->first_batch = 0;
	bc_close(s);
	bc_disconnect(c);
	gpucheck_free(gpu);
}

/* ---- report ------------------------------------------------------------------------------ */

/* The clients' results together. */
typedef struct pl_total {
	uint64_t samples, bytes, batches, failed, mismatches;
	double wall, stall, first;   /* the longest wall and first batch; the mean stall % */
	double cpu;                  /* all clients' CPU seconds */
	uint64_t nepochs;            /* epochs every client finished (at most MAX_EPOCH_TIMES) */
	double epoch_s[MAX_EPOCH_TIMES];   /* each epoch's slowest client */
	bench_hist all;
} pl_total;

static void total_sum(const pl_opts *o, const pl_client *cl, pl_total *t)
{
	memset(t, 0, offsetof(pl_total, all));
	bench_hist_init(&t->all);
	t->nepochs = MAX_EPOCH_TIMES;
	for (unsigned i = 0; i < o->clients; i++) {
		t->cpu += cl[i].cpu;
		if (cl[i].nepochs < t->nepochs)
			t->nepochs = cl[i].nepochs;
	}
	for (uint64_t e = 0; e < t->nepochs; e++)
		for (unsigned i = 0; i < o->clients; i++)
			if (cl[i].epoch_s[e] > t->epoch_s[e])
				t->epoch_s[e] = cl[i].epoch_s[e];
	for (unsigned i = 0; i < o->clients; i++) {
		t->samples += cl[i].samples;
		t->bytes += cl[i].bytes;
		t->batches += cl[i].batches;
		t->failed += cl[i].failed;
		t->mismatches += cl[i].mismatches;
		if (cl[i].wall > t->wall)
			t->wall = cl[i].wall;
		if (cl[i].first_batch > t->first)
			t->first = cl[i].first_batch;
		t->stall += cl[i].wall > 0 ? 100 * cl[i].waited / cl[i].wall : 0;
		bench_hist_merge(&t->all, &cl[i].wait);
	}
	t->stall /= o->clients;
	if (t->wall <= 0)
		t->wall = 1e-9;
}

/* `, "cpu_s": C, "epoch_s": [...]`: CPU seconds and the first n epochs' times. */
static void json_times(double cpu, const double *epoch_s, uint64_t n)
{
	printf(", \"cpu_s\": %.6f, \"epoch_s\": [", cpu);
	for (uint64_t e = 0; e < n && e < MAX_EPOCH_TIMES; e++)
		printf("%s%.6f", e ? ", " : "", epoch_s[e]);
	putchar(']');
}

static void report_json_client(unsigned i, const pl_client *c)
{
	double w = c->wall > 0 ? c->wall : 1e-9;

	printf("%s{\"rank\": %u, \"batches\": %" PRIu64 ", \"samples\": %" PRIu64
	       ", \"bytes\": %" PRIu64 ", \"failed\": %" PRIu64 ", \"wall_s\": %.6f, "
	       "\"samples_per_s\": %.1f, \"mb_per_s\": %.3f, \"stall_pct\": %.3f, "
	       "\"first_batch_ms\": %.3f, \"wait_p99_ms\": %.3f, \"epochs_done\": %" PRIu64,
	       i ? ", " : "", i, c->batches, c->samples, c->bytes, c->failed, c->wall,
	       (double)c->samples / w, (double)c->bytes / w / 1e6, 100 * c->waited / w,
	       c->first_batch * 1e3, (double)bench_hist_percentile(&c->wait, 99) / 1e6,
	       c->nepochs);
	json_times(c->cpu, c->epoch_s, c->nepochs);
	putchar('}');
}

static void report_json(const pl_opts *o, const pl_client *cl, const pl_total *t, bool own)
{
	double wall = t->wall;

	fputs("{\"mode\": \"pipeline\", \"dataset\": ", stdout);
	bench_json_string(stdout, o->dataset);
	if (o->so.device != BC_HOST)
		printf(", \"device\": %d, \"touch\": %s", o->so.device, o->touch ? "true" : "false");
	printf(", \"clients\": %u, \"batch_size\": %u, \"shuffle\": \"%s\", \"step_ms\": %" PRIu64
	       ", \"step_cpu_ms\": %" PRIu64 ", \"in_memory\": %s, \"seconds\": %.3f, \"epochs\": %"
	       PRIu64 ", \"own_daemon\": %s, \"total\": "
	       "{\"batches\": %" PRIu64 ", \"samples\": %" PRIu64 ", \"bytes\": %" PRIu64
	       ", \"failed\": %" PRIu64 ", \"wall_s\": %.6f, \"samples_per_s\": %.1f, "
	       "\"bytes_per_s\": %.0f, \"mb_per_s\": %.3f, \"stall_pct\": %.3f, "
	       "\"first_batch_ms\": %.3f, \"epochs_done\": %" PRIu64,
	       o->clients, o->so.batch_size, bp_shuffle_name(o->so.shuffle), o->step_ms,
	       o->step_cpu_ms, o->in_memory ? "true" : "false", o->seconds, o->epochs,
	       own ? "true" : "false", t->batches, t->samples, t->bytes, t->failed, wall,
	       (double)t->samples / wall, (double)t->bytes / wall, (double)t->bytes / wall / 1e6,
	       t->stall, t->first * 1e3, t->nepochs);
	json_times(t->cpu, t->epoch_s, t->nepochs);
	fputs(", \"wait_ns\": ", stdout);
	bench_hist_json(&t->all, stdout);
	if (o->so.device != BC_HOST)
		printf(", \"gb_per_s\": %.3f, \"mismatches\": %" PRIu64,
		       (double)t->bytes / wall / 1e9, t->mismatches);
	fputs("}, \"per_client\": [", stdout);
	for (unsigned i = 0; i < o->clients; i++)
		report_json_client(i, &cl[i]);
	puts("]}");
}

static void report_text_header(const pl_opts *o, bool own)
{
	printf("pipeline%s: %s, %u client%s, batch %u, %s shuffle, step %" PRIu64 " ms",
	       o->in_memory ? " (in-memory baseline)" : "", o->dataset, o->clients,
	       o->clients == 1 ? "" : "s", o->so.batch_size, bp_shuffle_name(o->so.shuffle),
	       o->step_ms);
	if (o->step_cpu_ms)
		printf(" + %" PRIu64 " ms CPU", o->step_cpu_ms);
	fputs(", ", stdout);
	if (o->epochs)
		printf("%" PRIu64 " epoch%s", o->epochs, o->epochs == 1 ? "" : "s");
	else
		printf("%.3g s", o->seconds);
	if (o->so.device != BC_HOST)
		printf(", to CUDA device %d%s", o->so.device, o->touch ? " (touched)" : "");
	printf("%s\n", own ? " (own batchd)" : "");
}

static void report_text(const pl_opts *o, const pl_client *cl, const pl_total *t, bool own)
{
	double wall = t->wall;

	report_text_header(o, own);
	printf("%6s %10s %12s %10s %8s %14s %12s\n", "client", "batches", "samples/s", "MB/s",
	       "stall%", "first batch ms", "p99 wait ms");
	for (unsigned i = 0; i < o->clients; i++) {
		const pl_client *c = &cl[i];
		double w = c->wall > 0 ? c->wall : 1e-9;

		printf("%6u %10" PRIu64 " %12.1f %10.1f %8.1f %14.1f %12.3f\n", i, c->batches,
		       (double)c->samples / w, (double)c->bytes / w / 1e6, 100 * c->waited / w,
		       c->first_batch * 1e3, (double)bench_hist_percentile(&c->wait, 99) / 1e6);
	}
	printf("%6s %10" PRIu64 " %12.1f %10.1f %8.1f %14.1f %12.3f\n", "total", t->batches,
	       (double)t->samples / wall, (double)t->bytes / wall / 1e6, t->stall, t->first * 1e3,
	       (double)bench_hist_percentile(&t->all, 99) / 1e6);
	if (t->nepochs) {
		fputs("epoch s:", stdout);
		for (uint64_t e = 0; e < t->nepochs; e++)
			printf(" %.3f", t->epoch_s[e]);
		printf("; client CPU %.2f s\n", t->cpu);
	}
	/* With no step, the clients do nothing but wait: the stall is the whole run, by design. */
	if (!o->step_ms && !o->step_cpu_ms)
		printf("stall%% is 100 by design with no --step-ms or --step-cpu-ms: the clients only "
		       "wait for batches (what counts is samples/s and the waits); give a step to see "
		       "how much of a trainer's time batchd would leave it waiting\n");
	if (t->failed)
		printf("%" PRIu64 " batches FAILED\n", t->failed);
	if (o->so.device != BC_HOST)
		printf("delivered to device %d: %.2f GB/s%s\n", o->so.device,
		       (double)t->bytes / wall / 1e9,
		       !o->touch ? " (not copied back)"
		       : t->mismatches ? ", copied back: some batches MISMATCHED"
		       : ", copied back: every byte matched");
}

/* --svg: each client's waits in bc_next and all of them, as distributions (bench_svg.h). */
static void write_svg(const pl_opts *o, const pl_client *cl, const pl_total *t)
{
	bench_svg_series s[1 + 7];
	char title[256], names[7][32];
	size_t n = 0;
	int r;

	s[n++] = (bench_svg_series){ .name = "all clients", .h = &t->all };
	for (unsigned i = 0; o->clients > 1 && i < o->clients && n < 8; i++) {
		snprintf(names[n - 1], sizeof(names[0]), "client %u", i);
		s[n] = (bench_svg_series){ .name = names[n - 1], .h = &cl[i].wait };
		n++;
	}
	snprintf(title, sizeof(title), "batchd-bench pipeline: %s, %u client%s, batch %u, step %"
		 PRIu64 " ms", o->dataset, o->clients, o->clients == 1 ? "" : "s",
		 o->so.batch_size, o->step_ms);
	r = bench_svg_cdf(o->svg, title, "wait for a batch in bc_next", s, n);
	if (r < 0)
		fprintf(stderr, "batchd-bench: %s: %s\n", o->svg,
			r == -ENODATA ? "no batch was waited for: no chart" : strerror(-r));
}

static void report(const pl_opts *o, pl_client *cl, bool own)
{
	pl_total *t = malloc(sizeof(*t));   /* the merged histogram is large */

	if (!t)
		return;
	total_sum(o, cl, t);
	if (o->json)
		report_json(o, cl, t, own);
	else
		report_text(o, cl, t, own);
	if (o->svg)
		write_svg(o, cl, t);
	free(t);
}

/* ---- the command ---------------------------------------------------------------------- */

static void watch(const pl_opts *o, pl_client *cl, pid_t *pids, unsigned *running)
{
	progress p;

	progress_start(&p, "pipeline", 0);
	p.enabled = p.enabled && !o->json;
	while (*running) {
		uint64_t bytes = 0;
		int st;

		for (unsigned i = 0; i < o->clients; i++) {
			if (pids[i] > 0 && waitpid(pids[i], &st, WNOHANG) == pids[i]) {
				pids[i] = 0;
				(*running)--;
				if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) && !cl[i].rc) {
					cl[i].rc = EIO;
					snprintf(cl[i].msg, sizeof(cl[i].msg), "client died (status %d)",
						 WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
				}
			}
			bytes += atomic_load_explicit(&cl[i].live_bytes, memory_order_relaxed);
		}
		progress_update(&p, bytes, false);
		if (*running)
			cli_sleep_ms(20);
	}
	progress_end(&p);
}

static int run_clients(const pl_opts *o, const char *sock, bool own)
{
	size_t map_len = o->clients * sizeof(pl_client);
	pid_t pids[MAX_CLIENTS];
	unsigned running = 0;
	pl_client *cl;
	int go[2], rc = 0;

	cl = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (cl == MAP_FAILED || pipe2(go, O_CLOEXEC) < 0) {
		fprintf(stderr, "batchd-bench: %s\n", strerror(errno));
		return 1;
	}
	for (unsigned i = 0; i < o->clients; i++) {
		atomic_init(&cl[i].live_bytes, 0);
		bench_hist_init(&cl[i].wait);
	}
	fflush(NULL);
	for (unsigned i = 0; i < o->clients; i++) {
		pids[i] = fork();
		if (pids[i] < 0) {
			fprintf(stderr, "batchd-bench: fork: %s\n", strerror(errno));
			rc = 1;
			break;
		}
		if (pids[i] == 0) {
			char c;

			prctl(PR_SET_PDEATHSIG, SIGKILL);
			close(go[1]);
			/* Blocks until the parent closes its end: everyone starts at once. */
			while (read(go[0], &c, 1) < 0 && errno == EINTR)
				;
			client_run(o, sock, i, &cl[i]);
			_exit(cl[i].rc ? 1 : 0);
		}
		running++;
	}
	close(go[0]);
	close(go[1]);
	for (unsigned i = running; i < o->clients; i++)
		pids[i] = 0;
	watch(o, cl, pids, &running);

	for (unsigned i = 0; i < o->clients; i++)
		if (cl[i].rc) {
			fprintf(stderr, "batchd-bench: client %u: %s\n", i, cl[i].msg);
			/* No CUDA device here (the daemon's or ours): cannot run, not failed. */
			rc = cl[i].rc == ENODEV && (rc == 0 || rc == PL_SKIP) ? PL_SKIP : 1;
		}
	if (rc == 0) {
		report(o, cl, own);
		for (unsigned i = 0; i < o->clients; i++)
			if (cl[i].mismatches)
				rc = 1;
	}
	munmap(cl, map_len);
	return rc;
}

enum { O_CLIENTS = 256, O_BATCH, O_STEP, O_SHUFFLE, O_SECONDS, O_EPOCHS, O_PREFETCH,
       O_SEED, O_SOCKET, O_BATCHD, O_MEMORY, O_JSON, O_DEVICE, O_TOUCH, O_STEP_CPU,
       O_IN_MEMORY, O_SVG };

static const struct option pl_options[] = {
	{ "clients", required_argument, NULL, O_CLIENTS },
	{ "batch-size", required_argument, NULL, O_BATCH },
	{ "step-ms", required_argument, NULL, O_STEP },
	{ "shuffle", required_argument, NULL, O_SHUFFLE },
	{ "seconds", required_argument, NULL, O_SECONDS },
	{ "epochs", required_argument, NULL, O_EPOCHS },
	{ "prefetch", required_argument, NULL, O_PREFETCH },
	{ "seed", required_argument, NULL, O_SEED },
	{ "socket", required_argument, NULL, O_SOCKET },
	{ "batchd", required_argument, NULL, O_BATCHD },
	{ "memory", required_argument, NULL, O_MEMORY },
	{ "json", no_argument, NULL, O_JSON },
	{ "device", required_argument, NULL, O_DEVICE },
	{ "touch", no_argument, NULL, O_TOUCH },
	{ "step-cpu-ms", required_argument, NULL, O_STEP_CPU },
	{ "in-memory", no_argument, NULL, O_IN_MEMORY },
	{ "svg", required_argument, NULL, O_SVG },
	{ NULL, 0, NULL, 0 },
};

/* A numeric option (named by pl_options[ch - O_CLIENTS]). @return 0, or the usage exit status. */
static int parse_number(pl_opts *o, int ch, const char *arg)
{
	uint64_t v;

	if (cli_parse_u64(arg, &v) < 0)
		return cli_usage("--%s: '%s' is not a number", pl_options[ch - O_CLIENTS].name, arg);
	switch (ch) {
	case O_CLIENTS:
		if (v == 0 || v > MAX_CLIENTS)
			return cli_usage("--clients: '%s' is not a number from 1 to %u", arg,
					 MAX_CLIENTS);
		o->clients = (unsigned)v;
		break;
	case O_BATCH:
		if (v == 0 || v > UINT32_MAX)
			return cli_usage("--batch-size: '%s' is not a number from 1", arg);
		o->so.batch_size = (uint32_t)v;
		break;
	case O_STEP:
	case O_STEP_CPU:
		if (v > TRAINER_MAX_STEP_MS)
			return cli_usage("--%s: '%s' is over an hour", pl_options[ch - O_CLIENTS].name,
					 arg);
		*(ch == O_STEP ? &o->step_ms : &o->step_cpu_ms) = v;
		break;
	case O_EPOCHS:
		if (v == 0)
			return cli_usage("--epochs: '%s' is not a number from 1", arg);
		o->epochs = v;
		break;
	case O_PREFETCH:
		o->so.prefetch = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
		break;
	case O_SEED:
		o->so.seed = v;
		break;
	case O_DEVICE:
		return trainer_opt_device(arg, v, &o->so);
	}
	return 0;
}

/*
 * An option that is not a plain number, or the dataset (ch 1).
 * @return 0, or the usage exit status.
 */
static int parse_other(pl_opts *o, int ch, const char *arg, char **argv, bool *seconds_given)
{
	uint64_t v;

	switch (ch) {
	case 1:
		if (o->dataset)
			return cli_usage("pipeline: unexpected argument '%s'", arg);
		o->dataset = arg;
		return 0;
	case O_SHUFFLE:
		return trainer_opt_shuffle(arg, &o->so);
	case O_SECONDS:
		if (bench_parse_seconds(arg, &o->seconds) < 0 || o->seconds <= 0)
			return cli_usage("--seconds: '%s' is not a duration above 0", arg);
		*seconds_given = true;
		return 0;
	case O_SOCKET:
		o->socket = arg;
		return 0;
	case O_BATCHD:
		o->batchd = arg;
		return 0;
	case O_MEMORY:
		if (bp_parse_size(arg, &v) < 0)
			return cli_usage("--memory: '%s' is not a size (" BP_SIZE_FORMS ")", arg);
		o->memory = arg;
		return 0;
	case O_JSON:
		o->json = true;
		return 0;
	case O_SVG:
		o->svg = arg;
		return 0;
	case O_TOUCH:
		o->touch = true;
		return 0;
	case O_IN_MEMORY:
		o->in_memory = true;
		return 0;
	case ':':
		return cli_usage("pipeline: '%s' needs a value", argv[optind - 1]);
	case '?':
		return cli_usage("pipeline: unknown option '%s'", argv[optind - 1]);
	}
	return parse_number(o, ch, arg);
}

/* argv into o, defaults first. @return 0, or the exit status after saying why. */
static int parse_args(int argc, char **argv, pl_opts *o)
{
	bool seconds_given = false;
	int ch, r;

	memset(o, 0, sizeof(*o));
	bc_stream_opts_init(&o->so);
	o->clients = 1;
	o->so.batch_size = 32;
	o->so.shuffle = BC_SHUFFLE_GLOBAL;
	o->seconds = 10;
	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "-:", pl_options, NULL)) != -1)
		if ((r = parse_other(o, ch, optarg, argv, &seconds_given)))
			return r;
	if (!o->dataset)
		return cli_usage("pipeline: missing DATASET");
	if (o->epochs && seconds_given)
		return cli_usage("pipeline: --seconds and --epochs exclude each other");
	if (o->epochs)
		o->seconds = 0;
	if (o->touch && o->so.device == BC_HOST)
		return cli_usage("pipeline: --touch needs --device");
	if (o->in_memory && o->so.device != BC_HOST)
		return cli_usage("pipeline: --in-memory holds batches in host memory; drop --device");
	if (o->so.device != BC_HOST && !BATCHD_HAVE_CUDA) {
		fprintf(stderr, "batchd-bench: pipeline --device: this batchd-bench was built "
			"without CUDA\n");
		return PL_SKIP;
	}
	return 0;
}

/*
 * The name a running daemon gets for what the user typed. The daemon takes
 * a name relative to one of its roots, or an absolute path under one, and
 * resolves a relative name against its roots, never our directory: so a
 * relative path that names a file or directory here is made absolute (the
 * user meant that one), and anything else goes as written, a name under
 * the daemon's roots.
 */
static const char *dataset_name(const char *arg, char *buf, size_t len)
{
	char cwd[PATH_MAX];

	if (arg[0] == '/' || access(arg, F_OK) != 0 || !getcwd(cwd, sizeof(cwd)))
		return arg;
	if (snprintf(buf, len, "%s/%s", cwd, arg) >= (int)len)
		return arg;
	return buf;
}

/* Start our own batchd on the dataset's directory, run the clients, stop it. */
static int run_own_daemon(pl_opts *o)
{
	char abs[PATH_MAX], root[PATH_MAX];
	bench_daemon d = { .pid = 0 };
	int rc;

	/* The clients name the dataset absolutely. */
	if (!realpath(o->dataset, abs)) {
		fprintf(stderr, "batchd-bench: %s: %s\n", o->dataset, strerror(errno));
		return 1;
	}
	memcpy(root, abs, sizeof(root));
	o->so.dataset = abs;
	if (bench_daemon_start(&d, o->batchd, o->memory, dirname(root)) < 0) {
		bench_daemon_stop(&d, false);
		return 1;
	}
	rc = run_clients(o, d.sock, true);
	if (bench_daemon_stop(&d, rc != 0 && rc != PL_SKIP) != 0 && rc == 0) {
		fprintf(stderr, "batchd-bench: batchd did not stop cleanly\n");
		rc = 1;
	}
	return rc;
}

int bench_cmd_pipeline(int argc, char **argv)
{
	pl_opts o;
	int rc = parse_args(argc, argv, &o);

	if (rc)
		return rc;
	if (o.socket) {
		char abs[PATH_MAX];

		o.so.dataset = dataset_name(o.dataset, abs, sizeof(abs));
		return run_clients(&o, o.socket, false);
	}
	return run_own_daemon(&o);
}
