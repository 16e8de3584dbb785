/* SPDX-License-Identifier: MIT */
/*
 * batchctl - operate batchd and consume from it like a trainer would.
 *
 *   batchctl [-s SOCKET] status [--json]
 *   batchctl [-s SOCKET] consume DATASET --batch-size N [--epochs E]
 *            [--shuffle none|global|block] [--seed S] [--rank R --world W]
 *            [--drop-last] [--start-epoch E --start-batch B] [--prefetch P]
 *            [--step-ms T] [--print-samples] [--json]
 *
 * `consume` is a real client through libbatchclient: it takes batches,
 * optionally "trains" for T ms on each, and measures how long it waited.
 * Exit status: 0 success, 1 failure, 2 usage error.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <xxhash.h>

#include "batchclient.h"
#include "cli.h"
#include "batchd-build.h"

static const char usage_text[] =
	"usage: batchctl [-s SOCKET] status [--json]\n"
	"       batchctl [-s SOCKET] consume DATASET --batch-size N [--epochs E]\n"
	"                [--shuffle none|global|block] [--seed S] [--rank R --world W]\n"
	"                [--drop-last] [--start-epoch E --start-batch B] [--prefetch P]\n"
	"                [--step-ms T] [--print-samples] [--json]\n";

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int connect_or_say(const char *sock, bc_client **c)
{
	int r = bc_connect(sock, c);

	if (r < 0)
		fprintf(stderr, "batchctl: cannot reach batchd at %s: %s%s%s\n",
			sock ? sock : "the default socket", bc_strerror(r),
			r == -EPROTONOSUPPORT || r == -ESHUTDOWN ? ": " : "", "");
	return r;
}

/* ---- status ----------------------------------------------------------------------- */

static int cmd_status(const char *sock, int argc, char **argv)
{
	bool json = argc > 1 && !strcmp(argv[1], "--json");
	bc_client *c;
	char *text;
	int r;

	if (argc > 2 || (argc == 2 && !json))
		return cli_usage("status: unexpected argument '%s'", argv[1]);
	if (connect_or_say(sock, &c) < 0)
		return 1;
	r = bc_status(c, &text);
	if (r < 0) {
		fprintf(stderr, "batchctl: status: %s\n", bc_strerror(r));
		bc_disconnect(c);
		return 1;
	}
	if (json) {
		printf("%s\n", text);
	} else {
		/* Small, dependency-free pretty printing: one key per line. */
		int depth = 0;
		bool in_str = false;

		for (const char *p = text; *p; p++) {
			if (*p == '"' && (p == text || p[-1] != '\\'))
				in_str = !in_str;
			if (in_str) {
				putchar(*p);
				continue;
			}
			if (*p == '{' || *p == '[') {
				putchar(*p);
				printf("\n%*s", 2 * ++depth, "");
			} else if (*p == '}' || *p == ']') {
				printf("\n%*s%c", 2 * --depth, "", *p);
			} else if (*p == ',') {
				printf(",\n%*s", 2 * depth, "");
				if (p[1] == ' ')
					p++;
			} else {
				putchar(*p);
			}
		}
		putchar('\n');
	}
	free(text);
	bc_disconnect(c);
	return 0;
}

/* ---- consume ------------------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int cmd_consume(const char *sock, int argc, char **argv)
{
	enum { O_BATCH = 256, O_EPOCHS, O_SHUFFLE, O_SEED, O_RANK, O_WORLD, O_DROP, O_SEPOCH,
	       O_SBATCH, O_PREFETCH, O_STEP, O_PRINT, O_JSON, O_WINDOW };
	static const struct option opts[] = {
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
		{ "window", required_argument, NULL, O_WINDOW },
		{ "step-ms", required_argument, NULL, O_STEP },
		{ "print-samples", no_argument, NULL, O_PRINT },
		{ "json", no_argument, NULL, O_JSON },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t epochs = 1, v, batches = 0, samples = 0, bytes = 0, failed = 0, step_ms = 0;
	double *waits = NULL, t0, t_first = -1, waited = 0, mean, p99, secs;
	size_t nwaits = 0, capwaits = 0;
	bool print = false, json = false, have_batch = false;
	bc_stream_opts o;
	bc_client *c;
	bc_stream *s;
	int ch, r, rc = 0;

	bc_stream_opts_init(&o);
	o.batch_size = 0;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "-", opts, NULL)) != -1) {
		if (ch == 1) {
			if (o.dataset)
				return cli_usage("consume: unexpected argument '%s'", optarg);
			o.dataset = optarg;
			continue;
		}
		if (ch == O_DROP) {
			o.drop_last = true;
			continue;
		}
		if (ch == O_PRINT) {
			print = true;
			continue;
		}
		if (ch == O_JSON) {
			json = true;
			continue;
		}
		if (ch == O_SHUFFLE) {
			if (!strcmp(optarg, "none"))
				o.shuffle = BC_SHUFFLE_NONE;
			else if (!strcmp(optarg, "global"))
				o.shuffle = BC_SHUFFLE_GLOBAL;
			else if (!strcmp(optarg, "block"))
				o.shuffle = BC_SHUFFLE_BLOCK;
			else
				return cli_usage("--shuffle: '%s' is not none, global or block", optarg);
			continue;
		}
		if (ch == '?' || ch < 256)
			return cli_usage(NULL);
		if (cli_parse_u64(optarg, &v) < 0)
			return cli_usage("--%s: '%s' is not a number", opts[ch - O_BATCH].name, optarg);
		switch (ch) {
		case O_BATCH: o.batch_size = v > UINT32_MAX ? 0 : (uint32_t)v; break;
		case O_EPOCHS: epochs = v; break;
		case O_SEED: o.seed = v; break;
		case O_RANK: o.rank = (uint32_t)v; break;
		case O_WORLD: o.world = (uint32_t)v; break;
		case O_SEPOCH: o.start_epoch = v; break;
		case O_SBATCH: o.start_batch = v; break;
		case O_PREFETCH: o.prefetch = (uint32_t)v; break;
		case O_WINDOW: o.window = (uint32_t)v; break;
		case O_STEP: step_ms = v; break;
		}
	}
	if (!o.dataset)
		return cli_usage("consume: missing DATASET");
	if (o.batch_size == 0)
		return cli_usage("consume: --batch-size N (N >= 1) is required");
	if (o.world == 0 || o.rank >= o.world)
		return cli_usage("consume: --rank must be below --world");

	if (connect_or_say(sock, &c) < 0)
		return 1;
	t0 = now();
	r = bc_open(c, &o, &s);
	if (r < 0) {
		fprintf(stderr, "batchctl: open %s: %s\n", o.dataset,
			bc_client_error(c)[0] ? bc_client_error(c) : bc_strerror(r));
		bc_disconnect(c);
		return 1;
	}

	/* Run `epochs` whole epochs from the start position. */
	for (uint64_t ep = 0; ep < epochs;) {
		bc_batch *b;
		double tw = now();

		r = bc_next(s, &b, -1);
		waited += now() - tw;
		if (r == BC_EPOCH_END) {
			ep++;
			continue;
		}
		if (r < 0 && r != -ESHUTDOWN && r != -EPIPE && r != -EPROTO && r != -ENOBUFS) {
			fprintf(stderr, "batchctl: batch failed: %s: %s\n", bc_strerror(r),
				bc_stream_error(s));
			failed++;
			rc = 1;
			continue;
		}
		if (r < 0) {
			fprintf(stderr, "batchctl: %s: %s\n", bc_strerror(r), bc_stream_error(s));
			rc = 1;
			break;
		}
		if (nwaits == capwaits) {
			capwaits = capwaits ? 2 * capwaits : 1024;
			waits = realloc(waits, capwaits * sizeof(*waits));
			if (!waits) {
				fprintf(stderr, "batchctl: out of memory\n");
				return 1;
			}
		}
		waits[nwaits++] = now() - tw;
		if (t_first < 0)
			t_first = now() - t0;
		have_batch = true;
		batches++;
		samples += bc_batch_count(b);
		if (print) {
			for (uint32_t i = 0; i < bc_batch_count(b); i++) {
				const void *p;
				size_t len;

				bc_batch_sample(b, i, &p, &len);
				printf("%" PRIu64 " %" PRIu64 " %" PRIu64 " %016llx\n", bc_batch_epoch(b),
				       bc_batch_index(b), bc_batch_sample_id(b, i),
				       (unsigned long long)XXH3_64bits(p, len));
			}
		}
		{
			size_t len;

			bc_batch_data(b, &len);
			bytes += len;
		}
		if (step_ms) {
			struct timespec ts = { .tv_sec = (time_t)(step_ms / 1000),
					       .tv_nsec = (long)(step_ms % 1000) * 1000000L };

			nanosleep(&ts, NULL);
		}
		bc_release(b);
		/* The last epoch ends when its last batch is taken: do not wait for the next. */
		if (ep + 1 == epochs) {
			uint64_t e, bi;

			bc_stream_position(s, &e, &bi);
			if (bi == 0 && e > o.start_epoch + ep)
				break;
		}
	}
	secs = now() - t0;
	bc_close(s);
	bc_disconnect(c);

	if (nwaits)
		qsort(waits, nwaits, sizeof(*waits), cmp_double);
	mean = nwaits ? waited / (double)nwaits : 0;
	p99 = nwaits ? waits[(size_t)((double)(nwaits - 1) * 0.99)] : 0;
	if (json) {
		printf("{\"batches\": %" PRIu64 ", \"samples\": %" PRIu64 ", \"bytes\": %" PRIu64
		       ", \"failed\": %" PRIu64 ", \"seconds\": %.6f, \"mb_per_s\": %.3f, "
		       "\"wait_us_mean\": %.1f, \"wait_us_p99\": %.1f, \"stall_pct\": %.3f, "
		       "\"first_batch_ms\": %.3f}\n",
		       batches, samples, bytes, failed, secs, secs > 0 ? (double)bytes / secs / 1e6 : 0,
		       mean * 1e6, p99 * 1e6, secs > 0 ? 100.0 * waited / secs : 0,
		       have_batch ? t_first * 1e3 : 0);
	} else {
		fprintf(print ? stderr : stdout,
			"%" PRIu64 " batches, %" PRIu64 " samples, %.1f MB in %.2f s: %.1f MB/s, "
			"%.0f samples/s; wait mean %.1f us, p99 %.1f us, stall %.1f%%; first batch "
			"after %.1f ms%s\n",
			batches, samples, (double)bytes / 1e6, secs,
			secs > 0 ? (double)bytes / secs / 1e6 : 0, secs > 0 ? (double)samples / secs : 0,
			mean * 1e6, p99 * 1e6, secs > 0 ? 100.0 * waited / secs : 0,
			have_batch ? t_first * 1e3 : 0, failed ? "; some batches FAILED" : "");
	}
	free(waits);
	return rc;
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
	if (!strcmp(argv[i], "consume"))
		return cmd_consume(sock, argc - i, argv + i);
	return cli_usage("unknown command '%s'", argv[i]);
}
