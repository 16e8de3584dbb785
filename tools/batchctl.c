/* SPDX-License-Identifier: MIT */
/*
 * batchctl - operate batchd and consume from it like a trainer would.
 *
 *   batchctl [-s SOCKET] status [--json]
 *   batchctl [-s SOCKET] consume DATASET --batch-size N [--epochs E]
 *            [--shuffle none|global|block] [--seed S] [--rank R --world W]
 *            [--drop-last] [--start-epoch E --start-batch B] [--prefetch P]
 *            [--step-ms T] [--print-samples] [--device N] [--json]
 *
 * `consume` is a real client through libbatchclient: it takes batches,
 * optionally "trains" for T ms on each, and measures how long it waited.
 * With --device N it opens a GPU stream on CUDA device N and, like a
 * trainer, makes its own CUDA stream wait for each batch's copy; then it
 * copies the batch back from device memory and compares it byte for byte
 * with the host staging copy, counting mismatches (any fails the run).
 * Exit status: 0 success, 1 failure, 2 usage error.
 */
#include <errno.h>
#include <signal.h>
#include <unistd.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>
#include <xxhash.h>

#include "batchclient.h"
#include "cli.h"
#include "batchd-build.h"
#include "gpucheck.h"
#include "json_path.h"
#include "protocol.h"
#include "trainer.h"
#include "units.h"

static const char usage_text[] =
	"usage: batchctl [-s SOCKET] status|stats|sessions [--json]\n"
	"       batchctl [-s SOCKET] metrics\n"
	"       batchctl [-s SOCKET] top [--interval-ms MS] [--count N]\n"
	"       batchctl [-s SOCKET] consume DATASET --batch-size N [--epochs E]\n"
	"                [--shuffle none|global|block] [--seed S] [--rank R --world W]\n"
	"                [--drop-last] [--start-epoch E --start-batch B] [--prefetch P]\n"
	"                [--step-ms T] [--print-samples] [--device N] [--json]\n";

static int connect_or_say(const char *sock, bc_client **c)
{
	int r = bc_connect(sock, c);

	if (r < 0)
		fprintf(stderr, "batchctl: cannot reach batchd at %s: %s%s\n",
			sock ? sock : "the default socket", bc_strerror(r),
			r == -EPROTONOSUPPORT ? " (batchd and batchctl speak different protocol versions)"
			: r == -ESHUTDOWN ? " (batchd is stopping)" : "");
	return r;
}

/* ---- status, stats, sessions, metrics, top ------------------------------------- */

/* Fetch the status document as a json-c object (caller puts it). */
static json_object *fetch_status(bc_client *c)
{
	json_object *o;
	char *text;
	int r = bc_status(c, &text);

	if (r < 0) {
		fprintf(stderr, "batchctl: status: %s\n", bc_strerror(r));
		return NULL;
	}
	o = json_tokener_parse(text);
	if (!o)
		fprintf(stderr, "batchctl: status: the daemon's reply is not JSON\n");
	free(text);
	return o;
}

static uint64_t get_u64(json_object *o, const char *path)
{
	json_object *v = json_path_get(o, path);

	return v ? (uint64_t)json_object_get_int64(v) : 0;
}

static double get_f64(json_object *o, const char *path)
{
	json_object *v = json_path_get(o, path);

	return v ? json_object_get_double(v) : 0;
}

static const char *get_str(json_object *o, const char *path)
{
	json_object *v = json_path_get(o, path);

	return v ? json_object_get_string(v) : "";
}

/* The CUDA lines of `status`: the devices, or why there are none. */
static void print_cuda(json_object *o)
{
	json_object *list = json_path_get(o, "cuda.device_list");
	char a[32], b[32];
	uint64_t drv = get_u64(o, "cuda.driver_version");

	if (!json_path_get(o, "cuda.available") ||
	    !json_object_get_boolean(json_path_get(o, "cuda.available"))) {
		printf("%-22s unavailable, host sessions only: %s\n", "CUDA",
		       get_str(o, "cuda.reason"));
		return;
	}
	printf("%-22s driver %" PRIu64 ".%" PRIu64 ", %" PRIu64 " GPU session%s holding %s of "
	       "device memory, %" PRIu64 " staging unpinned\n", "CUDA", drv / 1000, drv % 1000 / 10,
	       get_u64(o, "cuda.gpu_sessions"), get_u64(o, "cuda.gpu_sessions") == 1 ? "" : "s",
	       bp_format_size(get_u64(o, "cuda.device_memory"), a, sizeof(a)),
	       get_u64(o, "cuda.unpinned_sessions"));
	for (size_t i = 0; list && i < json_object_array_length(list); i++) {
		json_object *d = json_object_array_get_idx(list, i);
		char label[32];

		snprintf(label, sizeof(label), "  device %" PRIu64, get_u64(d, "ordinal"));
		printf("%-22s %s, %s, %s%s\n", label, get_str(d, "name"),
		       bp_format_size(get_u64(d, "memory"), b, sizeof(b)), get_str(d, "uuid"),
		       json_object_get_boolean(json_path_get(d, "shareable")) ? ""
		       : " (cannot export memory: no GPU sessions)");
	}
}

/* Connect, fetch the status document, disconnect. NULL after saying why. */
static json_object *status_of(const char *sock)
{
	json_object *o;
	bc_client *c;

	if (connect_or_say(sock, &c) < 0)
		return NULL;
	o = fetch_status(c);
	bc_disconnect(c);
	return o;
}

static bool want_json(int argc, char **argv, const char *cmd, int *ret)
{
	if (argc > 2 || (argc == 2 && strcmp(argv[1], "--json"))) {
		*ret = cli_usage("%s: unexpected argument '%s'", cmd, argv[1]);
		return false;
	}
	*ret = argc == 2;
	return true;
}

static int cmd_status(const char *sock, int argc, char **argv)
{
	json_object *o;
	int json;

	if (!want_json(argc, argv, "status", &json))
		return json;
	if (!(o = status_of(sock)))
		return 1;
	printf("%s\n", json_object_to_json_string_ext(o, json ? JSON_C_TO_STRING_PLAIN
							    : JSON_C_TO_STRING_PRETTY));
	json_object_put(o);
	return 0;
}

/* Totals over the ended sessions and the live ones. */
typedef struct stats_totals {
	uint64_t batches, bytes, sessions, hits, misses;
} stats_totals;

static void stats_sum(json_object *o, stats_totals *t)
{
	json_object *sessions = NULL;

	t->batches = get_u64(o, "ended.batches");
	t->bytes = get_u64(o, "ended.bytes");
	t->sessions = 0;
	if (json_object_object_get_ex(o, "sessions", &sessions)) {
		t->sessions = json_object_array_length(sessions);
		for (size_t i = 0; i < t->sessions; i++) {
			json_object *se = json_object_array_get_idx(sessions, i);

			t->batches += get_u64(se, "delivered");
			t->bytes += get_u64(se, "delivered_bytes");
		}
	}
	t->hits = get_u64(o, "cache.hits");
	t->misses = get_u64(o, "cache.misses");
}

static void stats_json(json_object *o, const stats_totals *t)
{
	/* Counters copied as they are: (key in the output, path in the status). */
	static const char *const copied[][2] = {
		{ "clients", "clients" },
		{ "memory_used", "memory.used" },
		{ "memory_budget", "memory.budget" },
		{ "blocks_read", "pipeline.blocks_read" },
		{ "bytes_read", "pipeline.bytes_read" },
		{ "failures", "pipeline.failures" },
		{ "protocol_violations", "protocol_violations" },
	};
	uint64_t looked = t->hits + t->misses;
	json_object *out = json_object_new_object();

	json_object_object_add(out, "version", json_object_new_string(get_str(o, "version")));
	json_object_object_add(out, "uptime_s", json_object_new_double(get_f64(o, "uptime_s")));
	json_object_object_add(out, "io_engine", json_object_new_string(get_str(o, "io_engine")));
	json_object_object_add(out, "sessions", json_object_new_int64((int64_t)t->sessions));
	json_object_object_add(out, "batches_delivered", json_object_new_int64((int64_t)t->batches));
	json_object_object_add(out, "bytes_delivered", json_object_new_int64((int64_t)t->bytes));
	json_object_object_add(out, "cache_hit_ratio",
			       json_object_new_double(looked ? (double)t->hits / (double)looked : 0));
	for (size_t i = 0; i < sizeof(copied) / sizeof(copied[0]); i++)
		json_object_object_add(out, copied[i][0],
				       json_object_new_int64((int64_t)get_u64(o, copied[i][1])));
	printf("%s\n", json_object_to_json_string_ext(out, JSON_C_TO_STRING_PLAIN));
	json_object_put(out);
}

/* The pipeline's and the refusals' lines of `stats`. */
static void stats_text_pipeline(json_object *o)
{
	char a[32];

	printf("%-22s %" PRIu64 " blocks, %s; %" PRIu64 " in flight\n", "read",
	       get_u64(o, "pipeline.blocks_read"),
	       bp_format_size(get_u64(o, "pipeline.bytes_read"), a, sizeof(a)),
	       get_u64(o, "pipeline.reads_inflight"));
	printf("%-22s %" PRIu64 " blocks, %s raw, %" PRIu64 " straight into batches\n", "decoded",
	       get_u64(o, "pipeline.blocks_decoded"),
	       bp_format_size(get_u64(o, "pipeline.raw_bytes"), a, sizeof(a)),
	       get_u64(o, "pipeline.direct_decodes"));
	printf("%-22s %" PRIu64 " failed blocks, %" PRIu64 " protocol violations, %" PRIu64
	       " ring violations, %" PRIu64 " denied\n", "errors", get_u64(o, "pipeline.failures"),
	       get_u64(o, "protocol_violations"), get_u64(o, "ring_violations"),
	       get_u64(o, "denied"));
	printf("%-22s not found %" PRIu64 ", access %" PRIu64 ", invalid %" PRIu64 ", memory %"
	       PRIu64 ", limit %" PRIu64 ", corrupt %" PRIu64 ", device %" PRIu64 "\n",
	       "refused opens", get_u64(o, "refused.not_found"), get_u64(o, "refused.access"),
	       get_u64(o, "refused.invalid"), get_u64(o, "refused.memory"),
	       get_u64(o, "refused.limit"), get_u64(o, "refused.corrupt"),
	       get_u64(o, "refused.device"));
}

static void stats_text(json_object *o, const stats_totals *t)
{
	uint64_t looked = t->hits + t->misses;
	char a[32], b[32];

	printf("%-22s %s (up %.0f s, pid %" PRIu64 ")\n", "batchd", get_str(o, "version"),
	       get_f64(o, "uptime_s"), get_u64(o, "pid"));
	printf("%-22s %s, O_DIRECT %s\n", "I/O engine", get_str(o, "io_engine"), get_str(o, "direct"));
	print_cuda(o);
	printf("%-22s %" PRIu64 " sessions, %" PRIu64 " clients\n", "serving", t->sessions,
	       get_u64(o, "clients"));
	printf("%-22s %" PRIu64 " batches, %s\n", "delivered", t->batches,
	       bp_format_size(t->bytes, a, sizeof(a)));
	printf("%-22s %s of %s\n", "memory", bp_format_size(get_u64(o, "memory.used"), a, sizeof(a)),
	       bp_format_size(get_u64(o, "memory.budget"), b, sizeof(b)));
	printf("%-22s %" PRIu64 " hits, %" PRIu64 " misses (%.1f%%), %s cached\n", "block cache",
	       t->hits, t->misses, looked ? 100.0 * (double)t->hits / (double)looked : 0,
	       bp_format_size(get_u64(o, "cache.bytes"), a, sizeof(a)));
	stats_text_pipeline(o);
}

static int cmd_stats(const char *sock, int argc, char **argv)
{
	stats_totals t;
	json_object *o;
	int json;

	if (!want_json(argc, argv, "stats", &json))
		return json;
	if (!(o = status_of(sock)))
		return 1;
	stats_sum(o, &t);
	if (json)
		stats_json(o, &t);
	else
		stats_text(o, &t);
	json_object_put(o);
	return 0;
}

/* Per-session rates: over the last interval when prev is given, else over the session's life. */
static void session_rates(json_object *se, json_object *prev, double dt, double *ret_mbs,
			  double *ret_stall)
{
	double bytes = (double)get_u64(se, "delivered_bytes"), wait = get_f64(se, "wait_s");
	double span = get_f64(se, "age_s");

	if (prev && dt > 0) {
		bytes -= (double)get_u64(prev, "delivered_bytes");
		wait -= get_f64(prev, "wait_s");
		span = dt;
	}
	*ret_mbs = span > 0 ? bytes / span / 1e6 : 0;
	*ret_stall = span > 0 ? 100.0 * wait / span : 0;
	if (*ret_stall > 100)
		*ret_stall = 100;
}

static json_object *find_session(json_object *sessions, uint64_t id)
{
	for (size_t i = 0; sessions && i < json_object_array_length(sessions); i++) {
		json_object *se = json_object_array_get_idx(sessions, i);

		if (get_u64(se, "id") == id)
			return se;
	}
	return NULL;
}

static void print_sessions(json_object *sessions, json_object *prev_sessions, double dt)
{
	printf("%6s %6s %8s %-28s %-6s %9s %-8s %6s %8s %9s %6s\n", "ID", "UID", "PID", "DATASET",
	       "MODE", "RANK", "TO", "EPOCH", "BATCH", "MB/s", "STALL%");
	for (size_t i = 0; i < json_object_array_length(sessions); i++) {
		json_object *se = json_object_array_get_idx(sessions, i);
		double mbs, stall;
		json_object *gpu = json_path_get(se, "gpu");
		char rank[24], to[24];

		session_rates(se, find_session(prev_sessions, get_u64(se, "id")), dt, &mbs, &stall);
		snprintf(rank, sizeof(rank), "%" PRIu64 "/%" PRIu64, get_u64(se, "rank"),
			 get_u64(se, "world"));
		/* GPU sessions: "cuda:N", and a "!" when staging could not be pinned. */
		if (gpu)
			snprintf(to, sizeof(to), "cuda:%" PRIu64 "%s", get_u64(gpu, "device"),
				 json_object_get_boolean(json_path_get(gpu, "pinned")) ? "" : "!");
		else
			snprintf(to, sizeof(to), "host");
		printf("%6" PRIu64 " %6" PRIu64 " %8" PRIu64 " %-28.28s %-6s %9s %-8s %6" PRIu64 " %8"
		       PRIu64 " %9.1f %6.1f\n", get_u64(se, "id"), get_u64(se, "uid"), get_u64(se, "pid"),
		       get_str(se, "dataset"), get_str(se, "shuffle"), rank, to, get_u64(se, "epoch"),
		       get_u64(se, "batch"), mbs, stall);
	}
}

static int cmd_sessions(const char *sock, int argc, char **argv)
{
	json_object *o, *sessions;
	int json;

	if (!want_json(argc, argv, "sessions", &json))
		return json;
	if (!(o = status_of(sock)))
		return 1;
	if (!json_object_object_get_ex(o, "sessions", &sessions)) {
		json_object_put(o);
		return 1;
	}
	if (json) {
		for (size_t i = 0; i < json_object_array_length(sessions); i++) {
			json_object *se = json_object_array_get_idx(sessions, i);
			double mbs, stall;

			session_rates(se, NULL, 0, &mbs, &stall);
			json_object_object_add(se, "mb_per_s", json_object_new_double(mbs));
			json_object_object_add(se, "stall_pct", json_object_new_double(stall));
		}
		printf("%s\n", json_object_to_json_string_ext(sessions, JSON_C_TO_STRING_PLAIN));
	} else {
		print_sessions(sessions, NULL, 0);
	}
	json_object_put(o);
	return 0;
}

static int cmd_metrics(const char *sock, int argc, char **argv)
{
	bc_client *c;
	char *text;
	int r;

	if (argc > 1)
		return cli_usage("metrics: unexpected argument '%s'", argv[1]);
	if (connect_or_say(sock, &c) < 0)
		return 1;
	r = bc_metrics(c, &text);
	bc_disconnect(c);
	if (r < 0) {
		fprintf(stderr, "batchctl: metrics: %s\n", bc_strerror(r));
		return 1;
	}
	fputs(text, stdout);
	free(text);
	return 0;
}

static volatile sig_atomic_t top_stop;

static void on_top_signal(int sig)
{
	top_stop = sig;
}

/* A live view: sessions with their rates over each interval, refreshed in place on a TTY. */
static int cmd_top(const char *sock, int argc, char **argv)
{
	uint64_t interval_ms = 1000, count = 0, v;
	json_object *prev = NULL;
	bool tty = isatty(STDOUT_FILENO);
	double t_prev = 0;
	bc_client *c;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--interval-ms") && i + 1 < argc && cli_parse_u64(argv[i + 1], &v) == 0 && v) {
			interval_ms = v;
			i++;
		} else if (!strcmp(argv[i], "--count") && i + 1 < argc && cli_parse_u64(argv[i + 1], &v) == 0) {
			count = v;
			i++;
		} else {
			return cli_usage("top: unexpected argument '%s'", argv[i]);
		}
	}
	if (connect_or_say(sock, &c) < 0)
		return 1;
	signal(SIGINT, on_top_signal);
	signal(SIGTERM, on_top_signal);
	for (uint64_t n = 0; !top_stop && (!count || n < count); n++) {
		json_object *o = fetch_status(c), *sessions = NULL, *prev_sessions = NULL;
		double t = cli_now();
		char a[32], b[32];

		if (!o)
			break;
		json_object_object_get_ex(o, "sessions", &sessions);
		if (prev)
			json_object_object_get_ex(prev, "sessions", &prev_sessions);
		if (tty)
			printf("\033[H\033[2J");
		printf("batchd %s  up %.0f s  %s  sessions %zu  clients %" PRIu64 "  memory %s / %s  "
		       "cache %s\n\n", get_str(o, "version"), get_f64(o, "uptime_s"),
		       get_str(o, "io_engine"), sessions ? json_object_array_length(sessions) : 0,
		       get_u64(o, "clients"), bp_format_size(get_u64(o, "memory.used"), a, sizeof(a)),
		       bp_format_size(get_u64(o, "memory.budget"), b, sizeof(b)),
		       bp_format_size(get_u64(o, "cache.bytes"), a, sizeof(a)));
		if (sessions)
			print_sessions(sessions, prev_sessions, prev ? t - t_prev : 0);
		if (!tty)
			printf("\n");
		fflush(stdout);
		json_object_put(prev);
		prev = o;
		t_prev = t;
		if (count && n + 1 == count)
			break;
		{
			struct timespec ts = { .tv_sec = (time_t)(interval_ms / 1000),
					       .tv_nsec = (long)(interval_ms % 1000) * 1000000L };

			nanosleep(&ts, NULL);
		}
	}
	json_object_put(prev);
	bc_disconnect(c);
	return 0;
}

/* ---- consume ------------------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* What `consume` was asked for. */
typedef struct consume_opts {
	bc_stream_opts so;
	uint64_t epochs, step_ms;
	bool print, json;
} consume_opts;

/* What a `consume` run measured. */
typedef struct consume_run {
	uint64_t batches, samples, bytes, failed, mismatches;
	double *waits;           /* seconds blocked in bc_next, per batch taken */
	size_t nwaits, capwaits;
	double t0, t_first, waited, secs;
	bool have_batch;
	int rc;                  /* the exit status so far */
} consume_run;

enum { O_BATCH = 256, O_EPOCHS, O_SHUFFLE, O_SEED, O_RANK, O_WORLD, O_DROP, O_SEPOCH,
       O_SBATCH, O_PREFETCH, O_STEP, O_PRINT, O_JSON, O_WINDOW, O_DEVICE };

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
	case O_PREFETCH: o->prefetch = (uint32_t)v; break;
	case O_WINDOW: o->window = (uint32_t)v; break;
	case O_STEP: co->step_ms = v; break;
	case O_DEVICE: return trainer_opt_device(arg, v, o);
	}
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
		case O_PRINT: co->print = true; continue;
		case O_JSON: co->json = true; continue;
		case O_SHUFFLE: r = trainer_opt_shuffle(optarg, &co->so); break;
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

	if (!o->dataset)
		return cli_usage("consume: missing DATASET");
	if (o->batch_size == 0)
		return cli_usage("consume: --batch-size N (N >= 1) is required");
	if (o->world == 0 || o->rank >= o->world)
		return cli_usage("consume: --rank must be below --world");
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

	if (connect_or_say(sock, &c) < 0)
		return -1;
	run->t0 = cli_now();
	r = bc_open(c, o, &s);
	if (r < 0) {
		fprintf(stderr, "batchctl: open %s%s: %s\n", o->dataset,
			o->device == BC_HOST ? "" : " on a GPU",
			bc_client_error(c)[0] ? bc_client_error(c) : bc_strerror(r));
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
	return 0;
}

static void print_samples(const bc_batch *b)
{
	for (uint32_t i = 0; i < bc_batch_count(b); i++) {
		const void *p;
		size_t len;

		bc_batch_sample(b, i, &p, &len);
		printf("%" PRIu64 " %" PRIu64 " %" PRIu64 " %016llx\n", bc_batch_epoch(b),
		       bc_batch_index(b), bc_batch_sample_id(b, i),
		       (unsigned long long)XXH3_64bits(p, len));
	}
}

/* Note how long the batch was waited for. @return 0, or -ENOMEM after saying so. */
static int record_wait(consume_run *run, double wait)
{
	if (run->nwaits == run->capwaits) {
		double *w;

		run->capwaits = run->capwaits ? 2 * run->capwaits : 1024;
		w = realloc(run->waits, run->capwaits * sizeof(*w));
		if (!w) {
			fprintf(stderr, "batchctl: out of memory\n");
			return -ENOMEM;
		}
		run->waits = w;
	}
	run->waits[run->nwaits++] = wait;
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
	if (co->print)
		print_samples(b);
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
	if (co->step_ms)
		trainer_sleep_ms(co->step_ms);
	bc_release(b);
	return 0;
}

/* Run `epochs` whole epochs from the start position. @return 0, or -ENOMEM. */
static int consume_loop(consume_run *run, const consume_opts *co, bc_stream *s, gpucheck *gpu)
{
	for (uint64_t ep = 0; ep < co->epochs;) {
		bc_batch *b;
		double tw = cli_now();
		int r = bc_next(s, &b, -1);

		run->waited += cli_now() - tw;
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

static void consume_report(const consume_run *run, const consume_opts *co)
{
	double secs = run->secs, waited = run->waited;
	double mean = run->nwaits ? waited / (double)run->nwaits : 0;
	double p99 = run->nwaits ? run->waits[(size_t)((double)(run->nwaits - 1) * 0.99)] : 0;
	double first = run->have_batch ? run->t_first * 1e3 : 0;
	uint64_t bytes = run->bytes, mismatches = run->mismatches;
	int device = co->so.device;
	FILE *out = co->print ? stderr : stdout;

	if (co->json) {
		printf("{\"batches\": %" PRIu64 ", \"samples\": %" PRIu64 ", \"bytes\": %" PRIu64
		       ", \"failed\": %" PRIu64 ", \"seconds\": %.6f, \"mb_per_s\": %.3f, "
		       "\"wait_us_mean\": %.1f, \"wait_us_p99\": %.1f, \"stall_pct\": %.3f, "
		       "\"first_batch_ms\": %.3f",
		       run->batches, run->samples, bytes, run->failed, secs,
		       secs > 0 ? (double)bytes / secs / 1e6 : 0, mean * 1e6, p99 * 1e6,
		       secs > 0 ? 100.0 * waited / secs : 0, first);
		if (device != BC_HOST)
			printf(", \"device\": %d, \"gb_per_s\": %.3f, \"mismatches\": %" PRIu64,
			       device, secs > 0 ? (double)bytes / secs / 1e9 : 0, mismatches);
		printf("}\n");
		return;
	}
	fprintf(out, "%" PRIu64 " batches, %" PRIu64 " samples, %.1f MB in %.2f s: %.1f MB/s, "
		"%.0f samples/s; wait mean %.1f us, p99 %.1f us, stall %.1f%%; first batch "
		"after %.1f ms%s\n",
		run->batches, run->samples, (double)bytes / 1e6, secs,
		secs > 0 ? (double)bytes / secs / 1e6 : 0,
		secs > 0 ? (double)run->samples / secs : 0, mean * 1e6, p99 * 1e6,
		secs > 0 ? 100.0 * waited / secs : 0, first,
		run->failed ? "; some batches FAILED" : "");
	if (device != BC_HOST)
		fprintf(out, "device %d: %.2f GB/s delivered, copied back and compared: %" PRIu64
			" mismatching batch%s%s\n", device, secs > 0 ? (double)bytes / secs / 1e9 : 0,
			mismatches, mismatches == 1 ? "" : "es", mismatches ? " (FAILED)" : "");
}

static int cmd_consume(const char *sock, int argc, char **argv)
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
	if (consume_open(sock, &co, &run, &c, &s, &gpu) < 0)
		return 1;
	r = consume_loop(&run, &co, s, gpu);
	/* Every copy this run queued has landed before the clock stops. */
	if (r == 0 && gpu && gpucheck_sync(gpu, why, sizeof(why)) < 0) {
		fprintf(stderr, "batchctl: CUDA: %s\n", why);
		run.rc = 1;
	}
	run.secs = cli_now() - run.t0;
	bc_close(s);
	bc_disconnect(c);
	gpucheck_free(gpu);
	if (r == 0) {
		if (run.nwaits)
			qsort(run.waits, run.nwaits, sizeof(*run.waits), cmp_double);
		consume_report(&run, &co);
	}
	free(run.waits);
	return r < 0 ? 1 : run.rc;
}

int main(int argc, char **argv)
{
	const char *sock = NULL;
	int i = 1;

	cli_init("batchctl", usage_text);
	if (argc > 2 && (!strcmp(argv[1], "-s") || !strcmp(argv[1], "--socket"))) {
		sock = argv[2];
		i = 3;
	}
	if (i >= argc)
		return cli_usage(NULL);
	if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
		fputs(usage_text, stdout);
		return 0;
	}
	if (!strcmp(argv[i], "--version")) {
		printf("batchctl %s\n", BATCHD_VERSION);
		return 0;
	}
	if (!strcmp(argv[i], "status"))
		return cmd_status(sock, argc - i, argv + i);
	if (!strcmp(argv[i], "stats"))
		return cmd_stats(sock, argc - i, argv + i);
	if (!strcmp(argv[i], "sessions"))
		return cmd_sessions(sock, argc - i, argv + i);
	if (!strcmp(argv[i], "metrics"))
		return cmd_metrics(sock, argc - i, argv + i);
	if (!strcmp(argv[i], "top"))
		return cmd_top(sock, argc - i, argv + i);
	if (!strcmp(argv[i], "consume"))
		return cmd_consume(sock, argc - i, argv + i);
	return cli_usage("unknown command '%s'", argv[i]);
}
