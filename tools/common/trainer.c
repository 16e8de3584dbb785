/* SPDX-License-Identifier: MIT */
/*
 * trainer.c - the trainer-side rules batchctl consume and batchd-bench
 * pipeline share (see trainer.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "cli.h"
#include "protocol.h"
#include "trainer.h"

int trainer_opt_shuffle(const char *arg, bc_stream_opts *so)
{
	enum bp_shuffle m;

	if (bp_shuffle_parse(arg, &m) < 0)
		return cli_usage("--shuffle: '%s' is not none, global or block", arg);
	so->shuffle = (enum bc_shuffle)m;
	return 0;
}

int trainer_opt_device(const char *arg, uint64_t v, bc_stream_opts *so)
{
	if (v > 255)
		return cli_usage("--device: '%s' is not a CUDA device number", arg);
	so->device = (int)v;
	return 0;
}

bool trainer_stream_over(int r)
{
	return r == -ESHUTDOWN || r == -EPIPE || r == -EPROTO || r == -ENOBUFS;
}

bool trainer_last_epoch_done(bc_stream *s, const bc_stream_opts *so, uint64_t ep)
{
	uint64_t e, bi;

	bc_stream_position(s, &e, &bi);
	return bi == 0 && e > so->start_epoch + ep;
}

/* @return 0, or -1 when clock id cannot be read here. */
static int clock_ns(clockid_t id, uint64_t *ret_ns)
{
	struct timespec ts;

	if (clock_gettime(id, &ts) < 0)
		return -1;
	*ret_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	return 0;
}

void trainer_burn_cpu_ms(uint64_t ms)
{
	clockid_t id = CLOCK_THREAD_CPUTIME_ID;
	uint64_t t0 = 0, now, want = ms * 1000000u;
	volatile uint64_t x = 0;

	if (!ms)
		return;
	if (clock_ns(id, &t0) < 0) {
		id = CLOCK_MONOTONIC;
		clock_ns(id, &t0);
	}
	/* The thread's CPU clock is a system call, not a vDSO read: look at it
	 * every few microseconds of arithmetic, not on every turn. */
	do {
		for (int i = 0; i < 4096; i++)
			x = x * 6364136223846793005u + 1442695040888963407u;
	} while (clock_ns(id, &now) == 0 && now - t0 < want);
}

double trainer_cpu_s(void)
{
	uint64_t ns;

	return clock_ns(CLOCK_PROCESS_CPUTIME_ID, &ns) < 0 ? 0 : (double)ns / 1e9;
}

int trainer_waits_add(trainer_waits *w, double secs)
{
	if (w->n == w->cap) {
		size_t cap = w->cap ? 2 * w->cap : 1024;
		double *v = realloc(w->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		w->v = v;
		w->cap = cap;
	}
	w->v[w->n++] = secs;
	w->sum += secs;
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

double trainer_percentile(const double *sorted, size_t n, double p)
{
	double want;
	size_t rank;

	if (!n)
		return 0;
	if (p <= 0)
		return sorted[0];
	if (p >= 100)
		return sorted[n - 1];
	/* ceil(p % of n), at least 1, without libm (batchctl does not link it);
	 * the epsilon keeps 99 % of 100 at rank 99. */
	want = p / 100.0 * (double)n - 1e-9;
	rank = (size_t)want;
	if ((double)rank < want)
		rank++;
	if (rank < 1)
		rank = 1;
	return sorted[(rank > n ? n : rank) - 1];
}

void trainer_waits_stats(trainer_waits *w, trainer_wait_stats *ret)
{
	trainer_wait_stats st = { .n = w->n };

	if (w->n) {
		qsort(w->v, w->n, sizeof(*w->v), cmp_double);
		st.mean = w->sum / (double)w->n;
		st.p50 = trainer_percentile(w->v, w->n, 50);
		st.p99 = trainer_percentile(w->v, w->n, 99);
		st.max = w->v[w->n - 1];
	}
	*ret = st;
}

void trainer_waits_free(trainer_waits *w)
{
	if (!w)
		return;
	free(w->v);
	*w = (trainer_waits){ 0 };
}
