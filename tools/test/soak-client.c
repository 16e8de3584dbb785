/* SPDX-License-Identifier: MIT */
/*
 * soak-client.c - one trainer of the soak test (tools/test/soak.sh): opens
 * streams with random options on random datasets, consumes a random number
 * of batches, closes early, and does it again until its time is up,
 * checking every sample it is given against the pack on disk.
 *
 * A soak test is only worth its hours if it can tell "ran" from "ran
 * right". So this client does not trust the daemon for anything it can
 * check on its own: it opens each dataset itself with proto's reader
 * (bp_dataset_openat under the same root) and hashes every sample once
 * (XXH3-64), and then for every batch it checks the sample count the
 * schedule promises (daemon/session/sampler.h), that samples lie end to end in the
 * batch record, that each sample's size and hash match the pack, that no
 * sample repeats within an epoch of one rank, that a full epoch of a single
 * rank is every sample, and, without shuffling, that the ids are exactly
 * the file order. Anything else is counted as an error and described on
 * stderr with the stream's options, so a failure can be replayed.
 *
 * Usage: soak-client -s SOCKET -r ROOT -t SECONDS [-i ID] [-S SEED] [-f] [-m] [-H HOLD] DATASET...
 * -H none|order|any (default any): whether sessions may hold one or two
 * batches while asking for the next, giving them back oldest first (order)
 * or, in some sessions, newest first (any).
 * -f: the daemon injects faults (BATCHD_FAULTS), so a batch may fail with
 * a reason and the stream move on: such batches are counted as failed, not
 * as errors (their bytes are never checked; nothing wrong may be delivered).
 * -m: the daemon's memory budget is small on purpose, so an open refused
 * for memory (-ENOMEM) is counted as refused, not as an error.
 * Prints one summary line (key=value pairs) on stdout; exits 1 when any
 * error was counted, 2 on a usage error.
 *
 * Thread rules: single-threaded.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "batchclient.h"
#include "cli.h"
#include "pack_file.h"
#include "protocol.h"
#include "trainer.h"

static const char usage_text[] =
	"usage: soak-client -s SOCKET -r ROOT -t SECONDS [-i ID] [-S SEED] [-f] [-m] [-H none|order|any]\n"
	"                   DATASET...\n";

/* Longest a ready batch may take before the stream counts as stalled. */
#define STALL_MS 60000
/* Most batches one session consumes before it closes (see session_limit). */
#define MAX_BATCHES 400
/* Most errors described on stderr (all are counted). */
#define MAX_REPORTED 20

/* A dataset as the pack on disk says it is. */
typedef struct ref {
	const char *name;
	uint64_t samples;
	uint64_t fingerprint;
	uint64_t *size;          /* per sample */
	uint64_t *hash;          /* XXH3-64 per sample */
	uint8_t *seen;           /* per sample: the stamp of the epoch that last delivered it */
	uint8_t stamp;           /* the current epoch's stamp */
} ref;

typedef struct totals {
	uint64_t sessions, refused, batches, samples, bytes, epochs, full_epochs;
	uint64_t reconnects, failed, errors;
} totals;

/* -H: how the client may hold batches while it asks for more. */
enum hold_policy {
	HOLD_NONE,   /* release every batch before the next bc_next */
	HOLD_ORDER,  /* hold one or two batches, give them back oldest first */
	HOLD_ANY,    /* as HOLD_ORDER, but some sessions give back the newest first */
};

static struct {
	unsigned id;
	bool faults;             /* -f: failed batches are expected */
	bool small_budget;       /* -m: opens refused for memory are expected */
	enum hold_policy hold;
	uint64_t rng;
	totals t;
} g;

/* ---- small helpers ------------------------------------------------------ */

static uint64_t rnd(void)
{
	uint64_t z = (g.rng += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* Uniform in [0, n). */
static uint64_t rnd_below(uint64_t n)
{
	return rnd() % n;
}

__attribute__((format(printf, 1, 2)))
static void count_error(const char *fmt, ...)
{
	va_list ap;

	if (g.t.errors++ >= MAX_REPORTED)
		return;
	fprintf(stderr, "soak-client %u: ", g.id);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* ---- the reference ---------------------------------------------------------- */

/* Open name under rootfd and hash every sample, in file order (each block decodes once). */
static int ref_load(ref *rf, int rootfd, const char *name)
{
	bp_dataset_fault fault = { 0 };
	bp_sample_reader *rd = NULL;
	bp_dataset *ds = NULL;
	char why[512];
	int r;

	memset(rf, 0, sizeof(*rf));
	rf->name = name;
	r = bp_dataset_openat(rootfd, name, &ds, &fault);
	if (r < 0) {
		bp_dataset_fault_format(&fault, why, sizeof(why));
		fprintf(stderr, "soak-client: %s: %s (%s)\n", name, strerror(-r), why);
		return r;
	}
	rf->samples = bp_dataset_samples(ds);
	rf->fingerprint = bp_dataset_fingerprint(ds);
	rf->size = calloc(rf->samples, sizeof(*rf->size));
	rf->hash = calloc(rf->samples, sizeof(*rf->hash));
	rf->seen = calloc(rf->samples, 1);
	r = bp_sample_reader_new(ds, &rd);
	if (!rf->size || !rf->hash || !rf->seen || r < 0) {
		r = -ENOMEM;
		goto out;
	}
	for (uint64_t id = 0; id < rf->samples; id++) {
		const uint8_t *data;
		uint64_t size;

		r = bp_sample_reader_get(rd, id, &data, &size, &fault);
		if (r < 0) {
			bp_dataset_fault_format(&fault, why, sizeof(why));
			fprintf(stderr, "soak-client: %s: sample %" PRIu64 ": %s\n", name, id, why);
			goto out;
		}
		rf->size[id] = size;
		rf->hash[id] = XXH3_64bits(data, size);
	}
	r = 0;
out:
	bp_sample_reader_free(rd);
	bp_dataset_close(ds);
	return r;
}

static void ref_free(ref *rf)
{
	free(rf->size);
	free(rf->hash);
	free(rf->seen);
}

/* ---- one session ---------------------------------------------------------- */

/* What the schedule promises a stream (daemon/session/sampler.h §Ranks). */
typedef struct plan {
	uint64_t per_rank;
	uint64_t batches;        /* per epoch */
	uint32_t last_len;       /* samples in the final batch of an epoch */
} plan;

static bool plan_make(const ref *rf, const bc_stream_opts *o, plan *ret)
{
	uint64_t n = rf->samples, w = o->world, b = o->batch_size;
	plan p;

	p.per_rank = o->drop_last ? n / w : (n + w - 1) / w;
	p.batches = o->drop_last ? p.per_rank / b : (p.per_rank + b - 1) / b;
	if (p.batches == 0)
		return false;
	p.last_len = o->drop_last ? o->batch_size : (uint32_t)(p.per_rank - (p.batches - 1) * b);
	*ret = p;
	return true;
}

/* The options, for replaying a failure. */
static void opts_format(const bc_stream_opts *o, size_t hold, bool newest_first,
			char *buf, size_t len)
{
	snprintf(buf, len,
		 "dataset=%s batch=%u shuffle=%s seed=%" PRIu64 " rank=%u world=%u drop_last=%d "
		 "prefetch=%u window=%u start_epoch=%" PRIu64 " hold=%zu%s",
		 o->dataset, o->batch_size, bp_shuffle_name(o->shuffle), o->seed, o->rank, o->world,
		 o->drop_last, o->prefetch, o->window, o->start_epoch, hold,
		 newest_first ? " newest-first" : "");
}

typedef struct session {
	const ref *rf;
	ref *mut;                /* the same ref: its seen[] stamps */
	bc_stream_opts o;
	plan p;
	char desc[400];
	uint64_t epoch, next_index;
	bool have_position;
	bool epoch_from_start;   /* this epoch was seen from its batch 0 */
	uint64_t epoch_samples;  /* distinct samples seen this epoch */
} session;

/* A new epoch starts: forget what was seen (stamps make this O(1) mostly). */
static void epoch_begin(session *ss, uint64_t epoch, bool from_start)
{
	ss->epoch = epoch;
	ss->next_index = 0;
	ss->epoch_from_start = from_start;
	ss->epoch_samples = 0;
	if (++ss->mut->stamp == 0) {
		memset(ss->mut->seen, 0, ss->rf->samples);
		ss->mut->stamp = 1;
	}
}

/*
 * Check one batch against the plan and the pack. Unshuffled, ids are the
 * striped positions: each step deals batch_size * world of them, rank r
 * the r-th run of the batch's length.
 */
static void check_batch(session *ss, const bc_batch *b)
{
	const ref *rf = ss->rf;
	uint64_t epoch = bc_batch_epoch(b), index = bc_batch_index(b);
	uint32_t count = bc_batch_count(b);
	uint32_t want = index + 1 == ss->p.batches ? ss->p.last_len : ss->o.batch_size;
	uint64_t first = index * ss->o.batch_size * ss->o.world + (uint64_t)ss->o.rank * want;
	const uint8_t *base, *expect;
	size_t total, off = 0;

	if (!ss->have_position) {
		/* The first batch: where the stream was asked to start. */
		if (epoch != ss->o.start_epoch || index != 0)
			count_error("%s: first batch is (%" PRIu64 ", %" PRIu64 "), expected (%" PRIu64 ", 0)",
			      ss->desc, epoch, index, ss->o.start_epoch);
		epoch_begin(ss, epoch, index == 0);
		ss->have_position = true;
	}
	if (epoch != ss->epoch || index != ss->next_index)
		count_error("%s: batch (%" PRIu64 ", %" PRIu64 ") out of order, expected (%" PRIu64
		      ", %" PRIu64 ")", ss->desc, epoch, index, ss->epoch, ss->next_index);
	ss->epoch = epoch;
	ss->next_index = index + 1;
	if (index >= ss->p.batches)
		count_error("%s: batch index %" PRIu64 " beyond %" PRIu64 " per epoch", ss->desc, index,
		      ss->p.batches);
	if (count != want)
		count_error("%s: batch (%" PRIu64 ", %" PRIu64 ") holds %u samples, expected %u", ss->desc,
		      epoch, index, count, want);

	base = bc_batch_data(b, &total);
	for (uint32_t i = 0; i < count; i++) {
		uint64_t id = bc_batch_sample_id(b, i);
		const void *data;
		size_t len;

		if (bc_batch_sample(b, i, &data, &len) < 0) {
			count_error("%s: sample %u of batch (%" PRIu64 ", %" PRIu64 ") unreadable", ss->desc,
			      i, epoch, index);
			continue;
		}
		if (id >= rf->samples) {
			count_error("%s: sample id %" PRIu64 " out of range (%" PRIu64 " samples)", ss->desc,
			      id, rf->samples);
			continue;
		}
		if (ss->o.shuffle == BC_SHUFFLE_NONE && id != (first + i) % rf->samples)
			count_error("%s: unshuffled batch (%" PRIu64 ", %" PRIu64 ") sample %u is id %"
			      PRIu64 ", expected %" PRIu64, ss->desc, epoch, index, i, id,
			      (first + i) % rf->samples);
		expect = base + off;
		if ((const uint8_t *)data != expect || off + len > total)
			count_error("%s: sample %u of batch (%" PRIu64 ", %" PRIu64 ") not laid end to end",
			      ss->desc, i, epoch, index);
		off += len;
		if (len != rf->size[id] || XXH3_64bits(data, len) != rf->hash[id]) {
			count_error("%s: sample %" PRIu64 " (batch (%" PRIu64 ", %" PRIu64 ") #%u): %zu bytes, "
			      "hash %016" PRIx64 "; the pack has %" PRIu64 " bytes, hash %016" PRIx64,
			      ss->desc, id, epoch, index, i, len, XXH3_64bits(data, len), rf->size[id],
			      rf->hash[id]);
			continue;
		}
		/* Within one rank's epoch no sample repeats (padding comes from other ranks' share). */
		if (ss->mut->seen[id] == ss->mut->stamp)
			count_error("%s: sample %" PRIu64 " delivered twice in epoch %" PRIu64, ss->desc, id,
			      epoch);
		else
			ss->epoch_samples++;
		ss->mut->seen[id] = ss->mut->stamp;
		g.t.samples++;
		g.t.bytes += len;
	}
	if (off != total)
		count_error("%s: batch (%" PRIu64 ", %" PRIu64 ") is %zu bytes, its samples %zu", ss->desc,
		      epoch, index, total, off);
	g.t.batches++;
}

static void epoch_end(session *ss)
{
	if (!ss->have_position)
		return;
	if (ss->next_index != ss->p.batches)
		count_error("%s: epoch %" PRIu64 " ended after %" PRIu64 " batches, expected %" PRIu64,
		      ss->desc, ss->epoch, ss->next_index, ss->p.batches);
	/* A whole epoch of a single rank without drop_last is every sample, exactly once. */
	if (ss->o.world == 1 && !ss->o.drop_last && ss->epoch_from_start &&
	    ss->epoch_samples != ss->rf->samples)
		count_error("%s: epoch %" PRIu64 " delivered %" PRIu64 " distinct samples of %" PRIu64,
		      ss->desc, ss->epoch, ss->epoch_samples, ss->rf->samples);
	g.t.epochs++;
	if (ss->epoch_from_start)
		g.t.full_epochs++;
	epoch_begin(ss, ss->epoch + 1, true);
}

/* A batch the daemon could not build (an injected fault): its place is used up. */
static void batch_failed(session *ss)
{
	if (!ss->have_position) {
		epoch_begin(ss, ss->o.start_epoch, false);
		ss->have_position = true;
	}
	ss->next_index++;
	ss->epoch_from_start = false; /* the epoch can no longer be checked whole */
	g.t.failed++;
}

/*
 * Errors that end a stream rather than fail one batch of it: a trainer's
 * (trainer.h), and a stall past STALL_MS or a refused call, which a soak
 * counts against the stream too.
 */
static bool stream_ending(int r)
{
	return trainer_stream_over(r) || r == -ETIME || r == -ETIMEDOUT || r == -EINVAL;
}

/*
 * How many batches a session takes before closing: mostly few, so streams
 * open and close often (the churn is what leaks would show in), sometimes
 * none at all, sometimes hundreds, across epochs.
 */
static uint64_t session_limit(void)
{
	uint64_t dice = rnd_below(100);

	if (dice < 10)
		return 0;
	if (dice < 55)
		return 1 + rnd_below(8);
	if (dice < 85)
		return 1 + rnd_below(64);
	return 1 + rnd_below(MAX_BATCHES);
}

static void random_opts(const ref *rf, bc_stream_opts *o)
{
	bc_stream_opts_init(o);
	o->dataset = rf->name;
	o->batch_size = 1 + (uint32_t)rnd_below(256);
	o->shuffle = (enum bc_shuffle)rnd_below(3);
	o->seed = rnd();
	o->world = 1 + (uint32_t)rnd_below(4);
	o->rank = (uint32_t)rnd_below(o->world);
	o->drop_last = rnd_below(4) == 0;
	o->prefetch = rnd_below(3) == 0 ? 0 : 1 + (uint32_t)rnd_below(16);
	o->window = o->shuffle == BC_SHUFFLE_BLOCK ? (uint32_t)rnd_below(9) : 0;
	o->start_epoch = rnd_below(4) == 0 ? rnd_below(5) : 0;
}

/* A session's options, plan and holding, chosen at random (within -H). */
typedef struct session_hold {
	size_t hold;             /* batches kept while asking for the next: 0..HOLD_MAX */
	bool newest_first;       /* give back the newest held batch first */
} session_hold;

enum { HOLD_MAX = 2 };

static void session_choose(session *ss, ref *rf, session_hold *h)
{
	random_opts(rf, &ss->o);
	if (!plan_make(rf, &ss->o, &ss->p)) {
		/* drop_last would leave no batch (the daemon refuses that): keep the tail. */
		ss->o.drop_last = false;
		plan_make(rf, &ss->o, &ss->p);
	}
	*h = (session_hold){ 0 };
	if (g.hold != HOLD_NONE && rnd_below(4) == 0) {
		h->hold = 1 + rnd_below(HOLD_MAX);
		h->newest_first = g.hold == HOLD_ANY && rnd_below(2);
	}
	opts_format(&ss->o, h->hold, h->newest_first, ss->desc, sizeof(ss->desc));
}

/* What the stream says of itself must be what the pack and the plan say. */
static void check_stream(const session *ss, bc_stream *s)
{
	const ref *rf = ss->rf;

	if (bc_stream_samples(s) != rf->samples || bc_stream_fingerprint(s) != rf->fingerprint)
		count_error("%s: stream reports %" PRIu64 " samples, fingerprint %016" PRIx64
		      "; the pack: %" PRIu64 ", %016" PRIx64, ss->desc, bc_stream_samples(s),
		      bc_stream_fingerprint(s), rf->samples, rf->fingerprint);
	if (bc_stream_batches_per_epoch(s) != ss->p.batches)
		count_error("%s: %" PRIu64 " batches per epoch, expected %" PRIu64, ss->desc,
		      bc_stream_batches_per_epoch(s), ss->p.batches);
}

/*
 * Keep b among the held batches when holding; @return the batch to give
 * back now (the oldest, or the newest), or NULL while fewer than hold are held.
 */
static bc_batch *hold_batch(const session_hold *h, bc_batch **held, size_t *nheld, bc_batch *b)
{
	if (!h->hold)
		return b;
	held[(*nheld)++] = b;
	if (*nheld <= h->hold)
		return NULL;
	if (h->newest_first)
		return held[--*nheld];
	b = held[0];
	memmove(held, held + 1, --*nheld * sizeof(held[0]));
	return b;
}

/* Take up to limit batches before the deadline, checking each. @return how many are held at the end. */
static size_t consume(session *ss, bc_stream *s, const session_hold *h, bc_batch **held,
		      uint64_t limit, double deadline)
{
	size_t nheld = 0;
	int r;

	for (uint64_t n = 0; n < limit && cli_now() < deadline;) {
		bc_batch *b;

		r = bc_next(s, &b, STALL_MS);
		if (r == BC_EPOCH_END) {
			epoch_end(ss);
			continue;
		}
		if (r < 0 && g.faults && !stream_ending(r)) {
			batch_failed(ss);
			n++;
			continue;
		}
		/*
		 * Keeping the oldest batch while releasing newer ones holds the
		 * ring up (memory is reused in order): bc_next says so with
		 * -ENOBUFS, which is the documented outcome, not an error.
		 */
		if (r == -ENOBUFS && h->newest_first)
			break;
		if (r < 0) {
			count_error("%s: next after %" PRIu64 " batches: %s (%s)", ss->desc, n,
				   bc_strerror(r), bc_stream_error(s));
			break;
		}
		check_batch(ss, b);
		n++;
		b = hold_batch(h, held, &nheld, b);
		if (b && (r = bc_release(b)) < 0)
			count_error("%s: release: %s", ss->desc, bc_strerror(r));
	}
	return nheld;
}

/*
 * Open one stream, consume up to a random number of batches (holding one or
 * two now and then, as -H allows), close it, with or without batches still
 * held. The daemon gives a stream prefetch + 2 slots so that a trainer may
 * hold a couple of batches (daemon/session/session.c); holding is never more.
 */
static void run_session(bc_client *c, ref *rf, double deadline)
{
	bc_batch *held[HOLD_MAX + 1];
	uint64_t limit = session_limit();
	session ss = { .rf = rf, .mut = rf };
	session_hold h;
	size_t nheld;
	bc_stream *s;
	int r;

	session_choose(&ss, rf, &h);
	r = bc_open(c, &ss.o, &s);
	if (r < 0) {
		g.t.refused++;
		if (r == -ENOMEM && g.small_budget) {
			/* Give the sessions that hold the budget a moment before the next try. */
			nanosleep(&(struct timespec){ .tv_nsec = 20 * 1000 * 1000 }, NULL);
			return;
		}
		count_error("%s: open: %s (%s)", ss.desc, bc_strerror(r), bc_client_error(c));
		return;
	}
	g.t.sessions++;
	check_stream(&ss, s);
	nheld = consume(&ss, s, &h, held, limit, deadline);
	/* Half the time release what is held; else close with it held. */
	if (rnd_below(2))
		for (size_t i = 0; i < nheld; i++)
			if ((r = bc_release(held[i])) < 0)
				count_error("%s: release at close: %s", ss.desc, bc_strerror(r));
	r = bc_close(s);
	if (r < 0)
		count_error("%s: close: %s", ss.desc, bc_strerror(r));
}

/* ---- main ---------------------------------------------------------------- */

/* What the command line asked for. */
typedef struct soak_args {
	const char *sock, *root;
	uint64_t seconds;
	int first_dataset;       /* argv index */
} soak_args;

static int parse_hold(const char *arg)
{
	if (!strcmp(arg, "none"))
		g.hold = HOLD_NONE;
	else if (!strcmp(arg, "order"))
		g.hold = HOLD_ORDER;
	else if (!strcmp(arg, "any"))
		g.hold = HOLD_ANY;
	else
		return cli_usage("bad -H: %s (none, order or any)", arg);
	return 0;
}

/* argv into a and g. @return 0, or the usage exit status. */
static int parse_args(int argc, char **argv, soak_args *a)
{
	uint64_t id = 0, seed = 1;
	int opt;

	*a = (soak_args){ 0 };
	g.hold = HOLD_ANY;
	while ((opt = getopt(argc, argv, "s:r:t:i:S:fmH:")) != -1) {
		switch (opt) {
		case 'H':
			if (parse_hold(optarg))
				return 2;
			break;
		case 'f': g.faults = true; break;
		case 'm': g.small_budget = true; break;
		case 's': a->sock = optarg; break;
		case 'r': a->root = optarg; break;
		case 't':
			if (cli_parse_u64(optarg, &a->seconds) < 0)
				return cli_usage("bad -t: %s", optarg);
			break;
		case 'i':
			if (cli_parse_u64(optarg, &id) < 0 || id > UINT32_MAX)
				return cli_usage("bad -i: %s", optarg);
			break;
		case 'S':
			if (cli_parse_u64(optarg, &seed) < 0)
				return cli_usage("bad -S: %s", optarg);
			break;
		default:
			return cli_usage(NULL);
		}
	}
	if (!a->sock || !a->root || optind >= argc)
		return cli_usage("-s, -r and at least one DATASET are required");
	a->first_dataset = optind;
	g.id = (unsigned)id;
	g.rng = seed * UINT64_C(0x100000001b3) + id;
	return 0;
}

/* Load the reference of every dataset named. @return 0, or -1 after saying why. */
static int load_refs(const char *root, char **names, size_t n, ref **ret)
{
	int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ref *refs;

	if (rootfd < 0) {
		fprintf(stderr, "soak-client: %s: %s\n", root, strerror(errno));
		return -1;
	}
	refs = calloc(n, sizeof(*refs));
	if (!refs)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (ref_load(&refs[i], rootfd, names[i]) < 0)
			return -1;
	close(rootfd);
	*ret = refs;
	return 0;
}

/* Sessions on random datasets until the deadline, reconnecting now and then. */
static void soak(const char *sock, ref *refs, size_t nrefs, double deadline)
{
	bc_client *c = NULL;
	int r;

	while (cli_now() < deadline) {
		if (!c) {
			r = bc_connect(sock, &c);
			if (r < 0) {
				count_error("%s", *bc_client_error(NULL) ? bc_client_error(NULL)
					    : bc_strerror(r));
				break;
			}
		}
		run_session(c, &refs[rnd_below(nrefs)], deadline);
		/* Now and then hang up and come back, as a restarted trainer does. */
		if (rnd_below(4) == 0) {
			bc_disconnect(c);
			c = NULL;
			g.t.reconnects++;
		}
	}
	bc_disconnect(c);
}

int main(int argc, char **argv)
{
	soak_args a;
	size_t nrefs;
	ref *refs;
	int r;

	cli_init("soak-client", usage_text);
	if ((r = parse_args(argc, argv, &a)))
		return r;
	nrefs = (size_t)(argc - a.first_dataset);
	if (load_refs(a.root, argv + a.first_dataset, nrefs, &refs) < 0)
		return 1;
	soak(a.sock, refs, nrefs, cli_now() + (double)a.seconds);
	printf("client=%u sessions=%" PRIu64 " refused=%" PRIu64 " batches=%" PRIu64
	       " samples=%" PRIu64 " bytes=%" PRIu64 " epochs=%" PRIu64 " full_epochs=%" PRIu64
	       " reconnects=%" PRIu64 " failed=%" PRIu64 " errors=%" PRIu64 "\n",
	       g.id, g.t.sessions, g.t.refused, g.t.batches, g.t.samples, g.t.bytes, g.t.epochs,
	       g.t.full_epochs, g.t.reconnects, g.t.failed, g.t.errors);
	for (size_t i = 0; i < nrefs; i++)
		ref_free(&refs[i]);
	free(refs);
	return g.t.errors ? 1 : 0;
}
