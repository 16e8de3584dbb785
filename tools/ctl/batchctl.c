/* SPDX-License-Identifier: MIT */
/*
 * batchctl - operate batchd and consume from it like a trainer would.
 *
 *   batchctl [-s SOCKET] status|stats|sessions [--json]
 *   batchctl [-s SOCKET] metrics
 *   batchctl [-s SOCKET] top [--interval-ms MS] [--count N]
 *   batchctl [-s SOCKET] doctor [SESSION] [--seconds S]
 *   batchctl [-s SOCKET] consume DATASET --batch-size N [--epochs E]
 *            [--shuffle none|global|block] [--seed S] [--rank R --world W]
 *            [--drop-last] [--start-epoch E --start-batch B] [--start-sample S]
 *            [--batch-stride N] [--prefetch P] [--step-ms T] [--step-cpu-ms T]
 *            [--print-samples] [--device N] [--json] [--fields NAME,...] [--keys]
 *            [--decode FIELD=KIND:SIZE:CROP[:RESIZE] [--skip-bad]]
 *            [--seq-len N [--sequences windows|packed]]
 *
 * `consume` (batchctl_consume.c) is a real client through libbatchclient:
 * it takes batches, optionally "trains" for T ms on each, and measures how
 * long it waited. With --device N it opens a GPU stream on CUDA device N
 * and, like a trainer, makes its own CUDA stream wait for each batch's
 * copy; then it copies the batch back from device memory and compares it
 * byte for byte with the host staging copy, counting mismatches (any fails
 * the run). This file holds main() and the commands that operate batchd.
 * Exit status: 0 success, 1 failure, 2 usage error.
 */
#include <errno.h>
#include <signal.h>
#include <unistd.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>
#include "batchclient.h"
#include "batchctl.h"
#include "cli.h"
#include "batchd-build.h"
#include "json_path.h"
#include "protocol.h"
#include "units.h"

static const char usage_text[] =
	"usage: batchctl [-s SOCKET] status|stats|sessions [--json]\n"
	"       batchctl [-s SOCKET] metrics\n"
	"       batchctl [-s SOCKET] top [--interval-ms MS] [--count N]\n"
	"       batchctl [-s SOCKET] doctor [SESSION] [--seconds S]\n"
	"       batchctl [-s SOCKET] consume DATASET --batch-size N [--epochs E]\n"
	"                [--shuffle none|global|block] [--seed S] [--rank R --world W]\n"
	"                [--drop-last] [--start-epoch E --start-batch B] [--start-sample S]\n"
	"                [--batch-stride N] [--prefetch P]\n"
	"                [--step-ms T] [--step-cpu-ms T] [--print-samples] [--device N] [--json]\n"
	"                [--fields NAME,...] [--keys] [--decode FIELD=KIND:SIZE:CROP[:RESIZE]]\n"
	"                [--skip-bad] [--seq-len N [--sequences windows|packed]]\n"
	"       batchctl [-s SOCKET] consume --source PATH:WEIGHT --source ... --seq-len N [...]\n"
	"  consume --start-sample S: resume --start-epoch after the S samples that all ranks\n"
	"          consumed (ranks stripe the epoch, so any --world may resume there)\n"
	"  consume --batch-stride N: take every N-th batch from --start-batch (1 .. 4096; N\n"
	"          consumers with --start-batch 0 .. N-1 share a rank's batches)\n"
	"  consume --seq-len N: a token pack's samples as rows of N + 1 token ids, windows of\n"
	"          its stream (default) or --sequences packed whole documents\n";

int batchctl_connect(const char *sock, bc_client **c)
{
	int r = bc_connect(sock, c);

	/* bc_connect's own message names the socket, how it was chosen and the fix. */
	if (r < 0)
		fprintf(stderr, "batchctl: %s\n",
			*bc_client_error(NULL) ? bc_client_error(NULL) : bc_strerror(r));
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

uint64_t get_u64(json_object *o, const char *path)
{
	json_object *v = json_path_get(o, path);

	return v ? (uint64_t)json_object_get_int64(v) : 0;
}

double get_f64(json_object *o, const char *path)
{
	json_object *v = json_path_get(o, path);

	return v ? json_object_get_double(v) : 0;
}

const char *get_str(json_object *o, const char *path)
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

/* ---- the GPUs' telemetry (NVML), when the daemon reports it ------------------------ */

/* The "gpus" array, at the top or in "cuda"; NULL when the daemon has none. */
static json_object *gpu_list(json_object *o)
{
	json_object *g = json_path_get(o, "gpus");

	if (!g)
		g = json_path_get(o, "cuda.gpus");
	return g && json_object_is_type(g, json_type_array) ? g : NULL;
}

/*
 * A GPU's utilization in percent, or -1 when it is not given. NVML counts
 * whole percents (an integer); a real number up to 1 is a ratio; an object
 * gives the GPU's under "gpu".
 */
static double gpu_util_pct(json_object *g)
{
	json_object *u = json_path_get(g, "utilization");
	double d;

	if (u && json_object_is_type(u, json_type_object))
		u = json_path_get(u, "gpu");
	if (!u || !(json_object_is_type(u, json_type_int) || json_object_is_type(u, json_type_double)))
		return -1;
	d = json_object_get_double(u);
	return json_object_is_type(u, json_type_double) && d <= 1.0 ? 100.0 * d : d;
}

/* One GPU's figures, those it has, as ", util 87%, mem 40.0 GiB / 139 GiB, 61 C, 300 W". */
static void gpu_figures(json_object *g, bool full, char *buf, size_t len)
{
	double util = gpu_util_pct(g);
	size_t o = 0;
	char a[32], b[32];

	buf[0] = '\0';
#define ADD(...) \
	do { \
		int n_ = snprintf(buf + o, len - o, __VA_ARGS__); \
		if (n_ > 0 && (size_t)n_ < len - o) \
			o += (size_t)n_; \
	} while (0)
	if (util >= 0)
		ADD(", util %.0f%%", util);
	if (json_path_get(g, "memory_total"))
		ADD(", mem %s / %s", bp_format_size(get_u64(g, "memory_used"), a, sizeof(a)),
		    bp_format_size(get_u64(g, "memory_total"), b, sizeof(b)));
	if (json_path_get(g, "temperature"))
		ADD(", %.0f C", get_f64(g, "temperature"));
	if (full && json_path_get(g, "power_watts"))
		ADD(", %.0f W", get_f64(g, "power_watts"));
#undef ADD
}

/*
 * A line per GPU ("  GPU 0" in a column of width, then its name and
 * figures; `full`: its power and what throttles it too, and why there is
 * no telemetry when NVML is missing). Nothing at all when the daemon
 * reports no GPU telemetry.
 */
static void print_gpus(json_object *o, int width, bool full)
{
	json_object *list = gpu_list(o), *nvml = json_path_get(o, "nvml");

	if (full && nvml && !json_object_get_boolean(json_path_get(nvml, "available")))
		printf("%-*s unavailable: %s\n", width, "GPU telemetry", get_str(nvml, "reason"));
	for (size_t i = 0; list && i < json_object_array_length(list); i++) {
		json_object *g = json_object_array_get_idx(list, i);
		json_object *why = json_path_get(g, "throttle_reasons");
		char label[32], fig[160];

		snprintf(label, sizeof(label), "%sGPU %zu", width > 10 ? "  " : "", i);
		gpu_figures(g, full, fig, sizeof(fig));
		printf("%-*s %s%s", width, label, get_str(g, "name"), fig);
		for (size_t k = 0; full && why && json_object_is_type(why, json_type_array) &&
		     k < json_object_array_length(why); k++)
			printf("%s%s", k ? ", " : ", throttled: ",
			       json_object_get_string(json_object_array_get_idx(why, k)));
		printf("\n");
	}
}

/* Connect, fetch the status document, disconnect. NULL after saying why. */
json_object *status_of(const char *sock)
{
	json_object *o;
	bc_client *c;

	if (batchctl_connect(sock, &c) < 0)
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

/* ---- sessions ---------------------------------------------------------------------- */

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

json_object *find_session(json_object *sessions, uint64_t id)
{
	for (size_t i = 0; sessions && i < json_object_array_length(sessions); i++) {
		json_object *se = json_object_array_get_idx(sessions, i);

		if (get_u64(se, "id") == id)
			return se;
	}
	return NULL;
}

/* The price of a GPU-hour the daemon charges stall at (0: none set). */
double gpu_hour_price(json_object *o)
{
	return get_f64(o, "stall.gpu_hour_price");
}

/* GPUs a session's trainer is taken to hold (the daemon says; 1 before it did). */
double gpus_per_session(json_object *o)
{
	return json_path_get(o, "stall.gpus_per_session") ? get_f64(o, "stall.gpus_per_session") : 1;
}

/*
 * The sessions table: rates over the last dt seconds when prev_sessions
 * has the session (top), else over its life; the GPU-time its trainer
 * lost waiting for data, and what that cost when the daemon has a price.
 */
static void print_sessions(json_object *o, json_object *sessions, json_object *prev_sessions,
			   double dt)
{
	bool priced = gpu_hour_price(o) > 0;

	/* EPOCH/BATCH: where the trainer is (batches it released); AHEAD: batches staged past it. */
	printf("%6s %6s %8s %-28s %-6s %9s %-8s %6s %8s %6s %9s %6s %9s%s\n", "ID", "UID", "PID",
	       "DATASET", "MODE", "RANK", "TO", "EPOCH", "BATCH", "AHEAD", "MB/s", "STALL%",
	       "LOST-GPU-s", priced ? "       COST" : "");
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
		       PRIu64 " %6" PRIu64 " %9.1f %6.1f %10.2f", get_u64(se, "id"), get_u64(se, "uid"),
		       get_u64(se, "pid"), get_str(se, "dataset"), get_str(se, "shuffle"), rank, to,
		       get_u64(se, "trainer_epoch"), get_u64(se, "trainer_batch"),
		       get_u64(se, "ahead"), mbs, stall, get_f64(se, "wait_s") * gpus_per_session(o));
		if (priced)
			printf(" %10.4f", get_f64(se, "stall_cost"));
		printf("\n");
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
		print_sessions(o, sessions, NULL, 0);
	}
	json_object_put(o);
	return 0;
}

/* ---- stats --------------------------------------------------------------------------- */

/* Totals over the ended sessions and the live ones. */
typedef struct stats_totals {
	uint64_t batches, bytes, sessions, hits, misses;
	double stall_s, stall_cost;
} stats_totals;

static void stats_sum(json_object *o, stats_totals *t)
{
	json_object *sessions = NULL;

	t->hits = get_u64(o, "cache.hits");
	t->misses = get_u64(o, "cache.misses");
	t->stall_s = get_f64(o, "stall.seconds");
	t->stall_cost = get_f64(o, "stall.cost");
	/* Every user's sessions, where the daemon lists only the asker's own. */
	if (json_path_get(o, "all_sessions")) {
		t->batches = get_u64(o, "all_sessions.batches");
		t->bytes = get_u64(o, "all_sessions.bytes");
		t->sessions = get_u64(o, "all_sessions.open");
		return;
	}
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
	json_object_object_add(out, "stall_seconds", json_object_new_double(t->stall_s));
	json_object_object_add(out, "lost_gpu_seconds",
			       json_object_new_double(t->stall_s * gpus_per_session(o)));
	json_object_object_add(out, "stall_cost", json_object_new_double(t->stall_cost));
	json_object_object_add(out, "gpu_hour_price", json_object_new_double(gpu_hour_price(o)));
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
	printf("%-22s %" PRIu64 " not reading their replies, %" PRIu64 " without HELLO in time\n",
	       "dropped clients", get_u64(o, "connections.dropped_queue"),
	       get_u64(o, "connections.dropped_handshake"));
	printf("%-22s %" PRIu64 " over the per-user limit, %" PRIu64 " over the limit, %" PRIu64
	       " out of descriptors\n", "refused connections",
	       get_u64(o, "connections.refused_per_uid"),
	       get_u64(o, "connections.refused_max_connections"),
	       get_u64(o, "connections.refused_fds"));
	printf("%-22s not found %" PRIu64 ", access %" PRIu64 ", invalid %" PRIu64 ", memory %"
	       PRIu64 ", limit %" PRIu64 ", corrupt %" PRIu64 ", device %" PRIu64 "\n",
	       "refused opens", get_u64(o, "refused.not_found"), get_u64(o, "refused.access"),
	       get_u64(o, "refused.invalid"), get_u64(o, "refused.memory"),
	       get_u64(o, "refused.limit"), get_u64(o, "refused.corrupt"),
	       get_u64(o, "refused.device"));
}

/* Seconds as "0.005", "4.21", "1234": three figures or more. */
static const char *secs(double s, char *buf, size_t len)
{
	snprintf(buf, len, "%.*f", s < 10 ? 3 : s < 1000 ? 1 : 0, s);
	return buf;
}

/* "stall  4.2 s waiting for data = 4.2 s of GPU-time lost (1 GPU a session), cost ..." */
static void print_stall(json_object *o, double stall_s, double cost)
{
	double gpus = gpus_per_session(o);
	char a[32], b[32];

	printf("%-22s %s s waiting for data = %s s of GPU-time lost (%g GPU a session)", "stall",
	       secs(stall_s, a, sizeof(a)), secs(stall_s * gpus, b, sizeof(b)), gpus);
	if (gpu_hour_price(o) > 0)
		printf(", cost %.4f at %g a GPU-hour", cost, gpu_hour_price(o));
	printf("\n");
}

static void stats_text(json_object *o, const stats_totals *t)
{
	uint64_t looked = t->hits + t->misses;
	char a[32], b[32];

	printf("%-22s %s (up %.0f s, pid %" PRIu64 ")\n", "batchd", get_str(o, "version"),
	       get_f64(o, "uptime_s"), get_u64(o, "pid"));
	printf("%-22s %s, O_DIRECT %s\n", "I/O engine", get_str(o, "io_engine"), get_str(o, "direct"));
	print_cuda(o);
	print_gpus(o, 22, true);
	printf("%-22s %" PRIu64 " sessions, %" PRIu64 " clients\n", "serving", t->sessions,
	       get_u64(o, "clients"));
	printf("%-22s %" PRIu64 " batches, %s\n", "delivered", t->batches,
	       bp_format_size(t->bytes, a, sizeof(a)));
	print_stall(o, t->stall_s, t->stall_cost);
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

/* ---- status -------------------------------------------------------------------------- */

/* "train.bpk (2 sessions), val.bpk (1 session)": the datasets the listed sessions read. */
static void print_datasets(json_object *o)
{
	json_object *sessions = json_path_get(o, "sessions");
	size_t n = sessions ? json_object_array_length(sessions) : 0, shown = 0;
	char a[32];

	printf("%-22s ", "datasets");
	for (size_t i = 0; i < n; i++) {
		const char *name = get_str(json_object_array_get_idx(sessions, i), "dataset");
		size_t users = 0, k;

		for (k = 0; k < i; k++)
			if (!strcmp(name, get_str(json_object_array_get_idx(sessions, k), "dataset")))
				break;
		if (k < i)
			continue;   /* counted at its first session */
		for (k = i; k < n; k++)
			users += !strcmp(name, get_str(json_object_array_get_idx(sessions, k), "dataset"));
		printf("%s%s (%zu session%s)", shown++ ? ", " : "", name, users, users == 1 ? "" : "s");
	}
	printf("%s%" PRIu64 " version%s open, %" PRIu64 " kept unused (%s of index and tables)\n",
	       shown ? "; " : "", get_u64(o, "datasets.held"),
	       get_u64(o, "datasets.held") == 1 ? "" : "s", get_u64(o, "datasets.unused"),
	       bp_format_size(get_u64(o, "datasets.unused_index_bytes"), a, sizeof(a)));
}

/* `status` for people: the daemon, its resources, its sessions. */
static void status_text(json_object *o)
{
	json_object *sessions = json_path_get(o, "sessions");
	uint64_t hits = get_u64(o, "cache.hits"), looked = hits + get_u64(o, "cache.misses");
	char a[32], b[32], c[32], d[32], e[32], f[32];

	printf("%-22s %s (up %.0f s, pid %" PRIu64 ")\n", "batchd", get_str(o, "version"),
	       get_f64(o, "uptime_s"), get_u64(o, "pid"));
	printf("%-22s %s\n", "socket", get_str(o, "socket"));
	printf("%-22s %s, O_DIRECT %s, tier %s, %" PRIu64 " read buffers of %s on %s pages\n",
	       "I/O engine", get_str(o, "io_engine"), get_str(o, "direct"), get_str(o, "tier"),
	       get_u64(o, "read_buffers.count"),
	       bp_format_size(get_u64(o, "read_buffers.size"), a, sizeof(a)),
	       get_str(o, "read_buffers.pages"));
	print_cuda(o);
	print_gpus(o, 22, true);
	printf("%-22s %s used of %s (sessions %s, datasets %s, block cache %s, lingering %s)\n",
	       "memory budget", bp_format_size(get_u64(o, "memory.used"), a, sizeof(a)),
	       bp_format_size(get_u64(o, "memory.budget"), b, sizeof(b)),
	       bp_format_size(get_u64(o, "memory.sessions"), c, sizeof(c)),
	       bp_format_size(get_u64(o, "memory.datasets"), f, sizeof(f)),
	       bp_format_size(get_u64(o, "memory.cache"), d, sizeof(d)),
	       bp_format_size(get_u64(o, "memory.lingering"), e, sizeof(e)));
	printf("%-22s %s of %s, %.1f%% hits (%" PRIu64 " of %" PRIu64 "), %" PRIu64 " evictions\n",
	       "block cache", bp_format_size(get_u64(o, "cache.bytes"), a, sizeof(a)),
	       bp_format_size(get_u64(o, "cache.budget"), b, sizeof(b)),
	       looked ? 100.0 * (double)hits / (double)looked : 0, hits, looked,
	       get_u64(o, "cache.evictions"));
	printf("%-22s %" PRIu64 " clients; threads: %" PRIu64 " I/O, %" PRIu64 " decode (%" PRIu64
	       " active)\n", "clients", get_u64(o, "clients"), get_u64(o, "threads.io"),
	       get_u64(o, "threads.decode"), get_u64(o, "threads.decode_active"));
	printf("%-22s %" PRIu64 " open, %" PRIu64 " ended; %" PRIu64 " batches, %s delivered\n",
	       "sessions", get_u64(o, "all_sessions.open"), get_u64(o, "ended.sessions"),
	       get_u64(o, "all_sessions.batches"),
	       bp_format_size(get_u64(o, "all_sessions.bytes"), a, sizeof(a)));
	print_stall(o, get_f64(o, "stall.seconds"), get_f64(o, "stall.cost"));
	print_datasets(o);
	if (sessions && json_object_array_length(sessions)) {
		printf("\n");
		print_sessions(o, sessions, NULL, 0);
	}
}

static int cmd_status(const char *sock, int argc, char **argv)
{
	json_object *o;
	int json;

	if (!want_json(argc, argv, "status", &json))
		return json;
	if (!(o = status_of(sock)))
		return 1;
	if (json)
		printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	else
		status_text(o);
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
	if (batchctl_connect(sock, &c) < 0)
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

/* top's first lines: the daemon, its memory and cache, its GPUs when it reports them. */
static void top_head(json_object *o, json_object *sessions)
{
	char a[32], b[32], c[32], d[32];

	printf("batchd %s  up %.0f s  %s  sessions %zu  clients %" PRIu64 "  memory %s / %s  "
	       "cache %s / %s\n", get_str(o, "version"), get_f64(o, "uptime_s"),
	       get_str(o, "io_engine"), sessions ? json_object_array_length(sessions) : 0,
	       get_u64(o, "clients"), bp_format_size(get_u64(o, "memory.used"), a, sizeof(a)),
	       bp_format_size(get_u64(o, "memory.budget"), b, sizeof(b)),
	       bp_format_size(get_u64(o, "cache.bytes"), c, sizeof(c)),
	       bp_format_size(get_u64(o, "cache.budget"), d, sizeof(d)));
	print_gpus(o, 5, false);
	printf("\n");
}

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
	if (batchctl_connect(sock, &c) < 0)
		return 1;
	signal(SIGINT, on_top_signal);
	signal(SIGTERM, on_top_signal);
	for (uint64_t n = 0; !top_stop && (!count || n < count); n++) {
		json_object *o = fetch_status(c), *sessions = NULL, *prev_sessions = NULL;
		double t = cli_now();

		if (!o)
			break;
		json_object_object_get_ex(o, "sessions", &sessions);
		if (prev)
			json_object_object_get_ex(prev, "sessions", &prev_sessions);
		if (tty)
			printf("\033[H\033[2J");
		top_head(o, sessions);
		if (sessions)
			print_sessions(o, sessions, prev_sessions, prev ? t - t_prev : 0);
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

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*cmd)(const char *sock, int argc, char **argv);
	} cmds[] = {
		{ "status", cmd_status },
		{ "stats", cmd_stats },
		{ "sessions", cmd_sessions },
		{ "metrics", cmd_metrics },
		{ "top", cmd_top },
		{ "consume", batchctl_consume },
		{ "doctor", batchctl_doctor },
	};
	const char *sock = NULL;
	int i = 1;

	cli_init("batchctl", usage_text);
	if (argc > 2 && (!strcmp(argv[1], "-s") || !strcmp(argv[1], "--socket"))) {
		sock = argv[2];
		i = 3;
	}
	if (i >= argc)
		return cli_usage_full();
	if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
		return cli_help();
	if (!strcmp(argv[i], "--version")) {
		printf("batchctl %s\n", BATCHD_VERSION);
		return 0;
	}
	for (size_t k = 0; k < sizeof(cmds) / sizeof(cmds[0]); k++)
		if (!strcmp(argv[i], cmds[k].name))
			return cli_help_asked(argc - i, argv + i) ? cli_help()
				: cmds[k].cmd(sock, argc - i, argv + i);
	return cli_usage("unknown command '%s'", argv[i]);
}
