/* SPDX-License-Identifier: MIT */
/*
 * batchctl_consume.c - `batchctl consume`: take batches from batchd
 * through libbatchclient as a trainer would, and say how long it waited.
 *
 * It "trains" on each batch, --step-cpu-ms of CPU time burnt on its own
 * core and then --step-ms asleep, and measures every wait in bc_next
 * (mean, p50, p99 and max, exact from every wait: trainer.h), the first
 * batch's latency and its own CPU time. The stall share (time in bc_next
 * over the run) is printed only for a run with a step: without one the
 * run does nothing but wait, and its stall says nothing about a trainer's.
 * With --device N
 * the stream is a GPU stream: this process's own CUDA stream waits for
 * each batch's copy (gpucheck.h), the batch is copied back and compared
 * with the host staging copy, and any mismatch fails the run.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "batchclient.h"
#include "batchctl.h"
#include "batchd-build.h"
#include "cli.h"
#include "gpucheck.h"
#include "trainer.h"

/* What `consume` was asked for. */
typedef struct consume_opts {
	bc_stream_opts so;
	uint64_t epochs, step_ms, step_cpu_ms;
	bool print, json;
	bool skip_bad;           /* --skip-bad: so.decode.skip_bad once --decode is read */
	char decode_field[65];   /* --decode: the field's name, so.decode.field points here */
	bc_source source[64];    /* --source PATH:WEIGHT, so.sources points here */
} consume_opts;

/* What a `consume` run measured. */
typedef struct consume_run {
	uint64_t batches, samples, bytes, failed, mismatches;
	uint64_t skipped;        /* bad images left out (--skip-bad) */
	trainer_waits waits;     /* seconds blocked in bc_next, per batch taken */
	double t0, t_first, waited, secs;
	double cpu0, cpu;        /* this process's CPU seconds: at the start, used */
	bool have_batch;
	int rc;                  /* the exit status so far */
	const bc_stream *s;      /* the stream (--print-samples reads its schema) */
} consume_run;

enum { O_BATCH = 256, O_EPOCHS, O_SHUFFLE, O_SEED, O_RANK, O_WORLD, O_DROP, O_SEPOCH,
       O_SBATCH, O_PREFETCH, O_STEP, O_PRINT, O_JSON, O_WINDOW, O_DEVICE, O_STEP_CPU, O_FIELDS,
       O_KEYS, O_SSAMPLE, O_STRIDE, O_DECODE, O_SKIP_BAD, O_SEQ_LEN, O_SEQUENCES, O_SOURCE };

static const struct option consume_options[] = {
	{ "batch-size", required_argument, NULL, O_BATCH },
	{ "epochs", required_argument, NULL, O_EPOCHS },
	{ "shuffle", required_argument, NULL, O_SHUFFLE },
	{ "seed", required_argument, NULL, O_SEED },
	{ "rank", required_argument, NULL, O_RANK },
	{ "world", required_argument, NULL, O_WORLD },
	{ "drop-last", no_argument, NULL, O_DROP },
	{ "start-epoch", required_argument, NULL, O_SEPOCH },
	{ "start-batch", required_argument, NULL, O_SBATCH },
	{ "prefetch", required_argument, NULL, O_PREFETCH },
	{ "step-ms", required_argument, NULL, O_STEP },
	{ "print-samples", no_argument, NULL, O_PRINT },
	{ "json", no_argument, NULL, O_JSON },
	/* In enum order: a bad number is named by consume_options[ch - O_BATCH]. */
	{ "window", required_argument, NULL, O_WINDOW },
	{ "device", required_argument, NULL, O_DEVICE },
	{ "step-cpu-ms", required_argument, NULL, O_STEP_CPU },
	{ "fields", required_argument, NULL, O_FIELDS },
	{ "keys", no_argument, NULL, O_KEYS },
	{ "start-sample", required_argument, NULL, O_SSAMPLE },
	{ "batch-stride", required_argument, NULL, O_STRIDE },
	{ "decode", required_argument, NULL, O_DECODE },
	{ "skip-bad", no_argument, NULL, O_SKIP_BAD },
	{ "seq-len", required_argument, NULL, O_SEQ_LEN },
	{ "sequences", required_argument, NULL, O_SEQUENCES },
	{ "source", required_argument, NULL, O_SOURCE },
	{ NULL, 0, NULL, 0 },
};

/* A numeric option. @return 0, or the usage exit status. */
static int consume_number(consume_opts *co, int ch, const char *arg)
{
	bc_stream_opts *o = &co->so;
	uint64_t v;

	if (cli_parse_u64(arg, &v) < 0)
		return cli_usage("--%s: '%s' is not a number", consume_options[ch - O_BATCH].name, arg);
	switch (ch) {
	case O_BATCH: o->batch_size = v > UINT32_MAX ? 0 : (uint32_t)v; break;
	case O_EPOCHS: co->epochs = v; break;
	case O_SEED: o->seed = v; break;
	case O_RANK: o->rank = (uint32_t)v; break;
	case O_WORLD: o->world = (uint32_t)v; break;
	case O_SEPOCH: o->start_epoch = v; break;
	case O_SBATCH: o->start_batch = v; break;
	case O_SSAMPLE: o->start_sample = v; break;
	/* Over 4096 is bc_open's to refuse, with the range in its message. */
	case O_STRIDE: o->batch_stride = v > UINT32_MAX ? 0 : (uint32_t)v; break;
	case O_PREFETCH: o->prefetch = (uint32_t)v; break;
	case O_WINDOW: o->window = (uint32_t)v; break;
	/* Over 2^20 is bc_open's to refuse, with the range in its message. */
	case O_SEQ_LEN:
		o->seq_len = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
		if (!o->sequences)
			o->sequences = BC_SEQUENCES_WINDOWS;
		break;
	case O_STEP:
	case O_STEP_CPU:
		if (v > TRAINER_MAX_STEP_MS)
			return cli_usage("--%s: '%s' is over an hour",
					 consume_options[ch - O_BATCH].name, arg);
		*(ch == O_STEP ? &co->step_ms : &co->step_cpu_ms) = v;
		break;
	case O_DEVICE: return trainer_opt_device(arg, v, o);
	}
	return 0;
}

/*
 * --decode FIELD=KIND:SIZE:CROP[:RESIZE]: KIND jpeg, png, webp or image
 * (the kind is told by each sample's bytes: all four mean the same), SIZE
 * N or HxW, CROP random-resized (flipped half the time) or center (after
 * a Resize of the short side to RESIZE). @return 0, or the usage exit
 * status.
 */
static int consume_decode(consume_opts *co, const char *arg)
{
	bc_decode *d = &co->so.decode;
	char kind[16], crop[32];
	unsigned h = 0, w = 0, resize = 0;
	const char *eq = strchr(arg, '=');
	int n = 0;

	if (!eq || eq == arg || (size_t)(eq - arg) >= sizeof(co->decode_field))
		return cli_usage("--decode: '%s' is not FIELD=KIND:SIZE:CROP[:RESIZE]", arg);
	snprintf(co->decode_field, sizeof(co->decode_field), "%.*s", (int)(eq - arg), arg);
	if (sscanf(eq + 1, "%15[a-z]:%ux%u:%31[a-z-]%n", kind, &h, &w, crop, &n) != 4) {
		n = 0;
		if (sscanf(eq + 1, "%15[a-z]:%u:%31[a-z-]%n", kind, &h, crop, &n) != 3)
			return cli_usage("--decode: '%s' is not FIELD=KIND:SIZE:CROP[:RESIZE] (e.g. "
					 "data=jpeg:224:random-resized)", arg);
		w = h;
	}
	if (eq[1 + n] == ':' && sscanf(eq + 2 + n, "%u", &resize) != 1)
		return cli_usage("--decode: '%s': RESIZE is not a number", arg);
	if (strcmp(kind, "jpeg") && strcmp(kind, "png") && strcmp(kind, "webp") &&
	    strcmp(kind, "image"))
		return cli_usage("--decode: kind '%s' is not jpeg, png, webp or image", kind);
	if (strcmp(crop, "random-resized") && strcmp(crop, "center"))
		return cli_usage("--decode: crop '%s' is not random-resized or center", crop);
	*d = (bc_decode){ .field = co->decode_field, .height = h, .width = w,
			  .crop = strcmp(crop, "center") ? BC_CROP_RANDOM_RESIZED : BC_CROP_CENTER,
			  .resize = resize, .flip = strcmp(crop, "center") ? 0.5f : 0.0f };
	return 0;
}

/* --source PATH:WEIGHT, one more source of a mixture. @return 0, or the usage exit status. */
static int consume_source(consume_opts *co, char *arg)
{
	char *colon = strrchr(arg, ':'), *end;
	double w;

	if (co->so.nsources == sizeof(co->source) / sizeof(co->source[0]))
		return cli_usage("--source: a mixture has at most 64 sources");
	if (!colon || colon == arg || !colon[1])
		return cli_usage("--source: '%s' is not PATH:WEIGHT (web.bpk:0.7)", arg);
	errno = 0;
	w = strtod(colon + 1, &end);
	if (*end || errno)
		return cli_usage("--source %s: the weight '%s' is not a number", arg, colon + 1);
	/* The weight's range is bc_open's to judge, with the rule in its message. */
	*colon = '\0';
	co->source[co->so.nsources++] = (bc_source){ .dataset = arg, .weight = w };
	co->so.sources = co->source;
	return 0;
}

/* Read argv into co. @return 0, or the usage exit status. */
static int consume_parse(int argc, char **argv, consume_opts *co)
{
	int ch, r;

	memset(co, 0, sizeof(*co));
	bc_stream_opts_init(&co->so);
	co->so.batch_size = 0;
	co->epochs = 1;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "-", consume_options, NULL)) != -1) {
		switch (ch) {
		case 1:
			if (co->so.dataset)
				return cli_usage("consume: unexpected argument '%s'", optarg);
			co->so.dataset = optarg;
			continue;
		case O_DROP: co->so.drop_last = true; continue;
		case O_FIELDS: co->so.fields = optarg; continue;
		case O_KEYS: co->so.keys = true; continue;
		case O_SKIP_BAD: co->skip_bad = true; continue;
		case O_PRINT: co->print = true; continue;
		case O_JSON: co->json = true; continue;
		case O_SHUFFLE: r = trainer_opt_shuffle(optarg, &co->so); break;
		case O_DECODE: r = consume_decode(co, optarg); break;
		case O_SOURCE: r = consume_source(co, optarg); break;
		case O_SEQUENCES:
			if (strcmp(optarg, "windows") && strcmp(optarg, "packed"))
				return cli_usage("--sequences: '%s' is not windows or packed", optarg);
			co->so.sequences = optarg[0] == 'w' ? BC_SEQUENCES_WINDOWS
							    : BC_SEQUENCES_PACKED;
			continue;
		default:
			if (ch == '?' || ch < 256)
				return cli_usage(NULL);
			r = consume_number(co, ch, optarg);
			break;
		}
		if (r)
			return r;
	}
	return 0;
}

/* @return 0, or the exit status after saying what is missing or wrong. */
static int consume_validate(const consume_opts *co)
{
	const bc_stream_opts *o = &co->so;

	if (!o->dataset && !o->nsources)
		return cli_usage("consume: missing DATASET (or --source PATH:WEIGHT ...)");
	if (o->dataset && o->nsources)
		return cli_usage("consume: a mixture names its datasets with --source: drop DATASET "
				 "'%s'", o->dataset);
	if (co->skip_bad && !o->decode.field)
		return cli_usage("consume: --skip-bad applies to --decode's images: add --decode");
	if (o->batch_size == 0)
		return cli_usage("consume: --batch-size N (N >= 1) is required");
	if (o->world == 0)
		return cli_usage("consume: --world 0: give the number of ranks (processes) sharing "
				 "the epoch, 1 or more");
	if (o->rank >= o->world)
		return cli_usage("consume: --rank %u is not below --world %u: ranks are 0 .. %u",
				 o->rank, o->world, o->world - 1);
	if (o->device != BC_HOST && !BATCHD_HAVE_CUDA) {
		fprintf(stderr, "batchctl: consume --device: this batchctl was built without CUDA\n");
		return 1;
	}
	return 0;
}

/*
 * Connect, open the stream and, for --device, the CUDA side; the run's clock
 * starts before the open. @return 0, or -1 after saying why.
 */
static int consume_open(const char *sock, const consume_opts *co, consume_run *run,
			bc_client **ret_c, bc_stream **ret_s, gpucheck **ret_gpu)
{
	const bc_stream_opts *o = &co->so;
	gpucheck *gpu = NULL;
	char why[512];
	bc_client *c;
	bc_stream *s;
	int r;

	if (batchctl_connect(sock, &c) < 0)
		return -1;
	run->t0 = cli_now();
	run->cpu0 = trainer_cpu_s();
	r = bc_open(c, o, &s);
	if (r < 0) {
		const char *said = bc_client_error(c)[0] ? bc_client_error(c) : bc_strerror(r);
		const char *what = o->dataset ? o->dataset : "the mixture";
		bool named = strstr(said, what);

		/* The daemon's reason names the dataset itself, mostly: once is enough. */
		fprintf(stderr, "batchctl: open%s%s%s: %s\n", named ? "" : " ",
			named ? "" : what, o->device == BC_HOST ? "" : " on a GPU", said);
		bc_disconnect(c);
		return -1;
	}
	/* After the open, so that a daemon without CUDA is what the user hears about. */
	if (o->device != BC_HOST && gpucheck_new(o->device, &gpu, why, sizeof(why)) < 0) {
		fprintf(stderr, "batchctl: CUDA device %d: %s\n", o->device, why);
		bc_close(s);
		bc_disconnect(c);
		return -1;
	}
	*ret_c = c;
	*ret_s = s;
	*ret_gpu = gpu;
	run->s = s;
	return 0;
}

/* " name=value" for field f of sample i, a scalar one (a label also by its class name). */
static void print_scalar(const bc_batch *b, const bc_field_info *fi, uint32_t f, uint32_t i)
{
	const void *p;
	size_t len;
	int64_t v;
	double d;
	float x;

	if (bc_batch_field_sample(b, f, i, &p, &len) < 0)
		return;
	switch (fi->type) {
	case BC_FIELD_INT64:
		memcpy(&v, p, sizeof(v));
		printf(" %s=%" PRId64, fi->name, v);
		if (v >= 0 && (uint64_t)v < fi->class_count)
			printf(":%s", fi->classes[v]);
		break;
	case BC_FIELD_FLOAT32:
		memcpy(&x, p, sizeof(x));
		printf(" %s=%.9g", fi->name, (double)x);
		break;
	case BC_FIELD_FLOAT64:
		memcpy(&d, p, sizeof(d));
		printf(" %s=%.17g", fi->name, d);
		break;
	}
}

/*
 * EPOCH BATCH SAMPLE_ID XXH3 (of the first selected bytes field) per
 * sample, then its selected scalar fields as name=value and, with --keys,
 * key=KEY (bytes outside printable ASCII shown as '?').
 */
static void print_samples(const bc_stream *s, const bc_batch *b)
{
	uint32_t nf = 0;
	const bc_field_info *fi = bc_stream_schema(s, &nf);

	for (uint32_t i = 0; i < bc_batch_count(b); i++) {
		const char *key;
		const void *p;
		size_t len;

		bc_batch_sample(b, i, &p, &len);
		printf("%" PRIu64 " %" PRIu64 " %" PRIu64 " %016llx", bc_batch_epoch(b),
		       bc_batch_index(b), bc_batch_sample_id(b, i),
		       (unsigned long long)XXH3_64bits(p, len));
		for (uint32_t f = 0; f < nf; f++)
			if (fi[f].selected)
				print_scalar(b, &fi[f], f, i);
		if (bc_batch_sample_key(b, i, &key, &len) == 0) {
			printf(" key=");
			for (size_t k = 0; k < len; k++)
				putchar(key[k] > 0x20 && key[k] < 0x7f ? key[k] : '?');
		}
		putchar('\n');
	}
}

/* Note how long the batch was waited for. @return 0, or -ENOMEM after saying so. */
static int record_wait(consume_run *run, double wait)
{
	if (trainer_waits_add(&run->waits, wait) < 0) {
		fprintf(stderr, "batchctl: out of memory\n");
		return -ENOMEM;
	}
	return 0;
}

/*
 * Count, print, check on the GPU and "train" on one batch taken at time tw,
 * then release it. @return 0; 1 when the run must stop (a CUDA error, said);
 * -ENOMEM.
 */
static int consume_batch(consume_run *run, const consume_opts *co, gpucheck *gpu, bc_batch *b,
			 double tw)
{
	char why[512];
	size_t len;
	int r;

	if (record_wait(run, cli_now() - tw) < 0)
		return -ENOMEM;
	if (run->t_first < 0)
		run->t_first = cli_now() - run->t0;
	run->have_batch = true;
	run->batches++;
	run->samples += bc_batch_count(b);
	run->skipped += bc_batch_skipped(b, NULL);
	if (co->print)
		print_samples(run->s, b);
	bc_batch_data(b, &len);
	run->bytes += len;
	r = gpu ? gpucheck_take(gpu, b, true, why, sizeof(why)) : 0;
	if (r < 0) {
		fprintf(stderr, "batchctl: CUDA: %s\n", why);
		bc_release(b);
		run->rc = 1;
		return 1;
	}
	if (r > 0) {
		fprintf(stderr, "batchctl: MISMATCH: %s\n", why);
		run->mismatches++;
		run->rc = 1;
	}
	trainer_burn_cpu_ms(co->step_cpu_ms);
	if (co->step_ms)
		cli_sleep_ms(co->step_ms);
	bc_release(b);
	return 0;
}

/* Run `epochs` whole epochs from the start position. @return 0, or -ENOMEM. */
/* SIGTERM or SIGINT while consuming: the run stops and still reports what it measured. */
static volatile sig_atomic_t stop_signal;

static void on_stop(int sig)
{
	stop_signal = sig;
}

/* Wait for the next batch a quarter second at a time, so that a stop is seen. */
static int next_or_stop(bc_stream *s, bc_batch **b)
{
	int r;

	do
		r = bc_next(s, b, 250);
	while (r == -ETIMEDOUT && !stop_signal);
	return r;
}

static int consume_loop(consume_run *run, const consume_opts *co, bc_stream *s, gpucheck *gpu)
{
	struct sigaction sa = { .sa_handler = on_stop };

	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	for (uint64_t ep = 0; ep < co->epochs && !stop_signal;) {
		bc_batch *b;
		double tw = cli_now();
		int r = next_or_stop(s, &b);

		run->waited += cli_now() - tw;
		if (r == -ETIMEDOUT && stop_signal)
			break;
		if (r == BC_EPOCH_END) {
			ep++;
			continue;
		}
		if (r < 0 && !trainer_stream_over(r)) {
			fprintf(stderr, "batchctl: batch failed: %s: %s\n", bc_strerror(r),
				bc_stream_error(s));
			run->failed++;
			run->rc = 1;
			continue;
		}
		if (r < 0) {
			fprintf(stderr, "batchctl: %s: %s\n", bc_strerror(r), bc_stream_error(s));
			run->rc = 1;
			break;
		}
		r = consume_batch(run, co, gpu, b, tw);
		if (r < 0)
			return r;
		if (r > 0)
			break;
		/* The last epoch ends when its last batch is taken: do not wait for the next. */
		if (ep + 1 == co->epochs && trainer_last_epoch_done(s, &co->so, ep))
			break;
	}
	return 0;
}

/* secs as "12.3 us", "4.56 ms" or "1.23 s": waits span microseconds to seconds. */
static const char *fmt_secs(double secs, char *buf, size_t len)
{
	if (secs < 1e-3)
		snprintf(buf, len, "%.1f us", secs * 1e6);
	else if (secs < 1)
		snprintf(buf, len, "%.2f ms", secs * 1e3);
	else
		snprintf(buf, len, "%.2f s", secs);
	return buf;
}

static void report_json(const consume_run *run, const consume_opts *co,
			const trainer_wait_stats *w)
{
	double secs = run->secs;

	printf("{\"batches\": %" PRIu64 ", \"samples\": %" PRIu64 ", \"bytes\": %" PRIu64
	       ", \"failed\": %" PRIu64 ", \"seconds\": %.6f, \"mb_per_s\": %.3f, "
	       "\"wait_us_mean\": %.1f, \"wait_us_p50\": %.1f, \"wait_us_p99\": %.1f, "
	       "\"wait_us_max\": %.1f, \"stall_pct\": %.3f, \"first_batch_ms\": %.3f, "
	       "\"cpu_s\": %.6f, \"skipped\": %" PRIu64,
	       run->batches, run->samples, run->bytes, run->failed, secs,
	       secs > 0 ? (double)run->bytes / secs / 1e6 : 0, w->mean * 1e6, w->p50 * 1e6,
	       w->p99 * 1e6, w->max * 1e6, secs > 0 ? 100.0 * run->waited / secs : 0,
	       run->have_batch ? run->t_first * 1e3 : 0, run->cpu, run->skipped);
	if (co->so.device != BC_HOST)
		printf(", \"device\": %d, \"gb_per_s\": %.3f, \"mismatches\": %" PRIu64,
		       co->so.device, secs > 0 ? (double)run->bytes / secs / 1e9 : 0,
		       run->mismatches);
	printf("}\n");
}

static void consume_report(consume_run *run, const consume_opts *co)
{
	double secs = run->secs;
	uint64_t bytes = run->bytes, mismatches = run->mismatches;
	int device = co->so.device;
	FILE *out = co->print ? stderr : stdout;
	char p50[32], p99[32], max[32], mean[32], stall[64] = "";
	trainer_wait_stats w;

	trainer_waits_stats(&run->waits, &w);
	if (co->json) {
		report_json(run, co, &w);
		return;
	}
	if (co->step_ms || co->step_cpu_ms)
		snprintf(stall, sizeof(stall), ", stall %.1f%% of the run",
			 secs > 0 ? 100.0 * run->waited / secs : 0);
	fprintf(out, "%" PRIu64 " batches, %" PRIu64 " samples, %.1f MB in %.2f s: %.1f MB/s, "
		"%.0f samples/s; wait p50 %s, p99 %s, max %s, mean %s%s; first batch "
		"after %.1f ms; CPU %.2f s%s\n",
		run->batches, run->samples, (double)bytes / 1e6, secs,
		secs > 0 ? (double)bytes / secs / 1e6 : 0,
		secs > 0 ? (double)run->samples / secs : 0, fmt_secs(w.p50, p50, sizeof(p50)),
		fmt_secs(w.p99, p99, sizeof(p99)), fmt_secs(w.max, max, sizeof(max)),
		fmt_secs(w.mean, mean, sizeof(mean)), stall,
		run->have_batch ? run->t_first * 1e3 : 0, run->cpu,
		run->failed ? "; some batches FAILED" : "");
	if (run->skipped)
		fprintf(out, "%" PRIu64 " bad image%s left out (--skip-bad)\n", run->skipped,
			run->skipped == 1 ? "" : "s");
	if (device != BC_HOST)
		fprintf(out, "device %d: %.2f GB/s delivered, copied back and compared: %" PRIu64
			" mismatching batch%s%s\n", device, secs > 0 ? (double)bytes / secs / 1e9 : 0,
			mismatches, mismatches == 1 ? "" : "es", mismatches ? " (FAILED)" : "");
}

int batchctl_consume(const char *sock, int argc, char **argv)
{
	consume_run run = { .t_first = -1 };
	consume_opts co;
	gpucheck *gpu;
	char why[512];
	bc_client *c;
	bc_stream *s;
	int r;

	if ((r = consume_parse(argc, argv, &co)) || (r = consume_validate(&co)))
		return r;
	co.so.decode.skip_bad = co.skip_bad;
	if (consume_open(sock, &co, &run, &c, &s, &gpu) < 0)
		return 1;
	r = consume_loop(&run, &co, s, gpu);
	/* Every copy this run queued has landed before the clock stops. */
	if (r == 0 && gpu && gpucheck_sync(gpu, why, sizeof(why)) < 0) {
		fprintf(stderr, "batchctl: CUDA: %s\n", why);
		run.rc = 1;
	}
	run.secs = cli_now() - run.t0;
	run.cpu = trainer_cpu_s() - run.cpu0;
	if (stop_signal) {
		fprintf(stderr, "batchctl: stopped by %s after %" PRIu64 " batches\n",
			stop_signal == SIGINT ? "SIGINT" : "SIGTERM", run.batches);
		run.rc = 128 + stop_signal;
	}
	bc_close(s);
	bc_disconnect(c);
	gpucheck_free(gpu);
	if (r == 0)
		consume_report(&run, &co);
	trainer_waits_free(&run.waits);
	return r < 0 ? 1 : run.rc;
}
