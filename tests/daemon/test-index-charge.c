/* SPDX-License-Identifier: MIT */
/*
 * test-index-charge.c - a dataset's index is charged to the memory budget
 * before it is spent: packs of many one-byte samples, one per block (72
 * bytes of index and about 20 of lookup table a sample, nothing else to
 * speak of), under a real batchd with a budget that holds two of them.
 *
 * What is asserted: memory.used counts a version's index and tables, once
 * however many sessions read it (memory.datasets, each session's
 * dataset_memory, the Prometheus gauge), within a stated margin of the
 * index bytes the pack's footer gives; a third dataset is refused with
 * -ENOMEM before it is loaded (datasets.loaded does not move), the message
 * naming its index, what is left and the budget, and what to change; a
 * uid's memory_per_uid refuses a version that does not fit it; closing
 * the sessions leaves the versions charged but evictable, and an open
 * that needs their room evicts them; and the daemon's RSS (VmRSS) grows
 * by no more than the budget plus a stated margin over what it had at
 * start through the six-dataset attack of issue 34 (six sessions on six
 * such packs under a small budget).
 *
 * A service suite: batchd started with -c FILE on a temporary socket,
 * clients through libbatchclient, the figures read back from the status
 * and the metrics. BATCHD, BATCHD_PACK and BATCHCTL name the binaries.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <check.h>
#include <json-c/json.h>

#include "daemon-testlib.h"
#include "pack-testlib.h"
#include "service-testlib.h"
#include "units.h"

static dt_daemon D;

#define expect dt_expect

#define MIB (UINT64_C(1) << 20)

/*
 * The packs: SAMPLES one-byte samples, one per block. Index: 72 bytes a
 * sample (56 a block, 16 a sample: lib/pack/PACK.md); the lookup table
 * about 20 more a block; the rest of a version (its records, the shard
 * map) a few KiB. 250,000 samples: an 18 MB index, about 23 MB in all.
 */
#define SAMPLES 250000u
#define INDEX_BYTES ((uint64_t)SAMPLES * 72)
/* A version's bytes over its index: the lookup table and the rest (stated margin). */
#define TABLES_MARGIN ((uint64_t)SAMPLES * 24 + MIB)
#define PACKS 6

/*
 * The budget: 64 MiB of which the block cache takes 8 (and its bucket
 * table 4 KiB): 56 MiB for sessions and versions, two versions and their
 * small sessions, not three.
 */
#define BUDGET (UINT64_C(64) << 20)
#define CONF "[memory]\nbudget = 64M\ncache = 8M\n"
/*
 * The daemon's RSS may grow past what it had at start (code, libraries,
 * thread stacks, the read buffers: about 47 MiB here) by the budget and
 * this much more: malloc's own slack, what a load holds while its bytes
 * are counted (stated margin).
 */
#define RSS_SLACK (UINT64_C(16) << 20)

/* ---- fixtures --------------------------------------------------------------- */

static char pack_name[PACKS][16];

/* Copy from to to (a new inode: a dataset of its own, not a hard link to the same version). */
static void copy_file(const char *from, const char *to)
{
	int in = open(from, O_RDONLY | O_CLOEXEC), out;
	struct stat st;
	off_t off = 0;

	ck_assert_int_ge(in, 0);
	ck_assert_int_eq(fstat(in, &st), 0);
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ck_assert_int_ge(out, 0);
	while (off < st.st_size) {
		ssize_t n = copy_file_range(in, &off, out, NULL, (size_t)(st.st_size - off), 0);

		ck_assert_int_gt(n, 0);
	}
	close(in);
	close(out);
}

/* The PACKS packs in the daemon's root (one written, the others copies), then conf. */
static void start_with(const char *conf)
{
	char first[PATH_MAX], path[PATH_MAX];
	bp_pack_footer footer;
	pt_samples s;
	int fd;

	sv_setup();
	pt_samples_make(&s, SAMPLES, 1, 1, PT_RANDOM, 34);
	for (int i = 0; i < PACKS; i++)
		snprintf(pack_name[i], sizeof(pack_name[i]), "tiny%d.bpk", i);
	fd = open(dt_root_path(&D, pack_name[0], first, sizeof(first)),
		  O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pt_pack_write(fd, &s, 1, NULL, 0, 1, &footer), 0);
	close(fd);
	pt_samples_free(&s);
	ck_assert_uint_eq(footer.index_size, INDEX_BYTES);
	for (int i = 1; i < PACKS; i++)
		copy_file(first, dt_root_path(&D, pack_name[i], path, sizeof(path)));
	sv_conf_basic("info", conf);
	sv_start_ok();
}

static void setup(void)
{
	start_with(CONF);
}

/* ---- helpers ------------------------------------------------------------------ */

/* The daemon's resident set (VmRSS), bytes. */
static uint64_t daemon_rss(void)
{
	char path[64], line[256];
	unsigned long long kib = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)D.pid);
	f = fopen(path, "re");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %llu kB", &kib) == 1)
			break;
	fclose(f);
	ck_assert_uint_gt(kib, 0);
	return (uint64_t)kib << 10;
}

/* A small session on pack i: batch 16, no shuffle, prefetch 2. */
static bc_stream_opts pack_opts(int i)
{
	bc_stream_opts o;

	dt_opts(&o, pack_name[i], 16, BC_SHUFFLE_NONE, 0);
	o.prefetch = 2;
	return o;
}

static bc_stream *open_pack(bc_client *c, int i)
{
	bc_stream_opts o = pack_opts(i);

	return dt_open_ok(c, &o);
}

/* A batch of s, its one-byte samples all there. */
static void take_one(bc_stream *s)
{
	bc_batch *b = NULL;
	int r = bc_next(s, &b, WAIT_MS);

	expect(r >= 0 && bc_batch_count(b) == 16, "bc_next: %s (%d), %u samples", bc_strerror(r), r,
	       bc_batch_count(b));
	for (uint32_t i = 0; i < bc_batch_count(b); i++) {
		const void *data;
		size_t len = 0;

		expect(bc_batch_sample(b, i, &data, &len) == 0 && len == 1, "sample %u of %zu bytes",
		       i, len);
	}
	ck_assert_int_eq(bc_release(b), 0);
}

/* memory.used is every holder's sum, and within the budget. */
static void expect_used_adds_up(json_object *st, const char *when)
{
	uint64_t used = dt_ju64(st, "memory.used"), sessions = dt_ju64(st, "memory.sessions");
	uint64_t datasets = dt_ju64(st, "memory.datasets"), cache = dt_ju64(st, "memory.cache");

	expect(used == sessions + datasets + cache && used <= BUDGET, "%s: memory.used %" PRIu64
	       " is not sessions %" PRIu64 " + datasets %" PRIu64 " + cache %" PRIu64 " within the "
	       "budget %" PRIu64, when, used, sessions, datasets, cache, BUDGET);
}

/* Every session ended and its memory given back: the versions are all unused. */
static bool all_ended(const char *json, void *ctx)
{
	uint64_t sessions, datasets, unused;

	(void)ctx;
	return dt_json_sessions(json) == 0 &&
	       dt_json_u64(json, "\"memory\": {\"budget\"", "sessions", &sessions) && !sessions &&
	       dt_json_u64(json, "\"memory\": {\"budget\"", "datasets", &datasets) &&
	       dt_json_u64(json, "\"memory\": {\"budget\"", "datasets_unused", &unused) &&
	       datasets == unused;
}

static void wait_all_ended(const char *when)
{
	expect(dt_wait_status(D.sock, all_ended, NULL, TRIES), "%s: sessions still open or "
	       "charged (memory.sessions %" PRIu64 ", datasets %" PRIu64 ", of them unused %" PRIu64
	       ")", when, dt_status_u64("memory.sessions"), dt_status_u64("memory.datasets"),
	       dt_status_u64("memory.datasets_unused"));
}

/* One version's charge, within the stated margin of its index. */
static void expect_one_version(uint64_t bytes, const char *what)
{
	expect(bytes >= INDEX_BYTES && bytes <= INDEX_BYTES + TABLES_MARGIN, "%s: %" PRIu64
	       " bytes charged for a version whose index is %" PRIu64 " (margin %" PRIu64 ")",
	       what, bytes, INDEX_BYTES, TABLES_MARGIN);
}

/* ---- 1. charged once, and seen ------------------------------------------------------- */

/*
 * A session's version is charged: memory.datasets holds its index and
 * tables (within the margin), as the session's dataset_memory and the
 * metrics say; a second session on the same version charges nothing more.
 */
START_TEST(test_charged_once)
{
	bc_client *c = dt_connect_ok();
	bc_stream *a = open_pack(c, 0), *b;
	json_object *st, *se;
	uint64_t one;

	take_one(a);
	st = dt_status_json_ok();
	one = dt_ju64(st, "memory.datasets");
	expect_one_version(one, "one session's version");
	se = sv_session_by_pid(sv_sessions_of(st), getpid(), pack_name[0]);
	expect(se && dt_ju64(se, "dataset_memory") == one, "the session's dataset_memory is not "
	       "memory.datasets %" PRIu64, one);
	expect(dt_ju64(st, "datasets.bytes") == one, "datasets.bytes %" PRIu64 " is not %" PRIu64,
	       dt_ju64(st, "datasets.bytes"), one);
	expect_used_adds_up(st, "one session");
	json_object_put(st);
	expect(sv_metric("batchd_memory_datasets_bytes", NULL) == (double)one,
	       "batchd_memory_datasets_bytes is not %" PRIu64, one);

	b = open_pack(c, 0);
	take_one(b);
	st = dt_status_json_ok();
	expect(dt_ju64(st, "memory.datasets") == one && dt_ju64(st, "datasets.loaded") == 1,
	       "two sessions on one version: memory.datasets %" PRIu64 " (one is %" PRIu64 "), %"
	       PRIu64 " loaded", dt_ju64(st, "memory.datasets"), one,
	       dt_ju64(st, "datasets.loaded"));
	expect_used_adds_up(st, "two sessions, one version");
	json_object_put(st);
	ck_assert_int_eq(bc_close(a), 0);
	ck_assert_int_eq(bc_close(b), 0);
	bc_disconnect(c);
}
END_TEST

/* ---- 2. refused before it is loaded --------------------------------------------------- */

/*
 * Two versions fit, a third does not: it is refused with -ENOMEM naming
 * its bytes, its index, what is left and the budget, and what to change,
 * from its footer (nothing of it loaded: datasets.loaded stays at 2).
 */
START_TEST(test_refused)
{
	bc_client *c = dt_connect_ok();
	bc_stream *a = open_pack(c, 0), *b = open_pack(c, 1);
	bc_stream_opts o = pack_opts(2);
	json_object *st;
	const char *msg;
	char index[32];

	take_one(a);
	take_one(b);
	msg = dt_open_fails(c, &o, -ENOMEM);
	bp_format_size(INDEX_BYTES, index, sizeof(index));
	expect(strstr(msg, "memory budget: dataset tiny2.bpk: its index and tables need ") &&
	       strstr(msg, index) && strstr(msg, " of index in 1 shard; read from its shards' "
					 "footers, before loading) and ") &&
	       strstr(msg, " of the budget is left (datasets and sessions may use ") &&
	       strstr(msg, "raise [memory] budget (64.0 MiB, of which the block cache, [memory] "
			   "cache, takes 8.00 MiB) or lower [memory] cache") &&
	       strstr(msg, "batchd-pack create --block-size"),
	       "the refusal does not name the figures and what to change: \"%s\"", msg);
	st = dt_status_json_ok();
	expect(dt_ju64(st, "datasets.loaded") == 2 && dt_ju64(st, "refused.memory") == 1,
	       "%" PRIu64 " versions loaded, %" PRIu64 " refused for memory", dt_ju64(st,
	       "datasets.loaded"), dt_ju64(st, "refused.memory"));
	expect_one_version(dt_ju64(st, "memory.datasets") / 2, "each of two versions");
	expect_used_adds_up(st, "two versions, a third refused");
	json_object_put(st);
	/* Those it holds still serve. */
	take_one(a);
	take_one(b);
	ck_assert_int_eq(bc_close(a), 0);
	ck_assert_int_eq(bc_close(b), 0);
	bc_disconnect(c);
}
END_TEST

/* ---- 3. freed, evicted ------------------------------------------------------------ */

/*
 * Closing the sessions leaves their versions cached and charged
 * (memory.datasets_unused), within the budget; an open that needs their
 * room evicts them, least recently used first, and is served; closing
 * everything leaves nothing but evictable versions.
 */
START_TEST(test_freed)
{
	bc_client *c = dt_connect_ok();
	bc_stream *s[PACKS];
	json_object *st;
	uint64_t two;

	s[0] = open_pack(c, 0);
	s[1] = open_pack(c, 1);
	take_one(s[0]);
	take_one(s[1]);
	two = dt_status_u64("memory.datasets");
	ck_assert_int_eq(bc_close(s[0]), 0);
	ck_assert_int_eq(bc_close(s[1]), 0);
	wait_all_ended("two closed");
	st = dt_status_json_ok();
	expect(dt_ju64(st, "memory.datasets") == two && dt_ju64(st, "memory.datasets_unused") == two &&
	       dt_ju64(st, "datasets.unused") == 2, "closed: memory.datasets %" PRIu64 ", of it "
	       "unused %" PRIu64 " (was %" PRIu64 "), %" PRIu64 " unused versions",
	       dt_ju64(st, "memory.datasets"), dt_ju64(st, "memory.datasets_unused"), two,
	       dt_ju64(st, "datasets.unused"));
	json_object_put(st);

	/* Every pack in turn: each open evicts what it needs, the least recently used first. */
	for (int i = 2; i < PACKS; i++) {
		s[i] = open_pack(c, i);
		take_one(s[i]);
		st = dt_status_json_ok();
		expect_used_adds_up(st, "an open that evicts");
		json_object_put(st);
		ck_assert_int_eq(bc_close(s[i]), 0);
	}
	wait_all_ended("all closed");
	st = dt_status_json_ok();
	expect(dt_ju64(st, "datasets.evicted") >= PACKS - 2 &&
	       dt_ju64(st, "datasets.loaded") == PACKS, "%" PRIu64 " versions evicted, %" PRIu64
	       " loaded", dt_ju64(st, "datasets.evicted"), dt_ju64(st, "datasets.loaded"));
	expect(dt_ju64(st, "memory.datasets") == dt_ju64(st, "memory.datasets_unused") &&
	       dt_ju64(st, "memory.sessions") == 0, "all closed: memory.datasets %" PRIu64
	       ", unused %" PRIu64 ", sessions %" PRIu64, dt_ju64(st, "memory.datasets"),
	       dt_ju64(st, "memory.datasets_unused"), dt_ju64(st, "memory.sessions"));
	expect_used_adds_up(st, "all closed");
	json_object_put(st);
	expect(sv_metric("batchd_dataset_versions_evicted_total", NULL) >= PACKS - 2,
	       "batchd_dataset_versions_evicted_total is under %d", PACKS - 2);
	bc_disconnect(c);
}
END_TEST

/* ---- 4. the uid's limit ------------------------------------------------------------ */

static void setup_per_uid(void)
{
	start_with("[memory]\nbudget = 1G\n[limits]\nmemory_per_uid = 16M\n");
}

/* A version bigger than memory_per_uid is refused for the uid, before it is loaded. */
START_TEST(test_per_uid)
{
	bc_client *c = dt_connect_ok();
	bc_stream_opts o = pack_opts(0);
	const char *msg;
	char want[96];

	msg = dt_open_fails(c, &o, -ENOMEM);
	snprintf(want, sizeof(want), "uid %u holds 0 B of the 16.0 MiB [limits] memory_per_uid "
		 "allows: ", (unsigned)getuid());
	expect(strstr(msg, "memory limit per user: dataset tiny0.bpk: its index and tables need ") &&
	       strstr(msg, "read from its shards' footers, before loading") && strstr(msg, want) &&
	       strstr(msg, "raise [limits] memory_per_uid"), "the refusal: \"%s\"", msg);
	expect(dt_status_u64("datasets.loaded") == 0 && dt_status_u64("memory.datasets") == 0,
	       "a refused version was loaded or charged");
	bc_disconnect(c);
}
END_TEST

/* ---- 5. RSS through the attack ------------------------------------------------------- */

/*
 * Issue 34's attack: a session on each of six packs whose indexes
 * together are far over the budget. Those that fit are served, the rest
 * refused; the daemon's RSS grows by no more than the budget and the
 * margin, and memory.used stays within the budget, during and after.
 */
START_TEST(test_rss_bounded)
{
	bc_client *c = dt_connect_ok();
	bc_stream *s[PACKS] = { 0 };
	uint64_t before = daemon_rss(), peak = before, rss;
	int opened = 0, refused = 0;
	json_object *st;

	for (int i = 0; i < PACKS; i++) {
		bc_stream_opts o = pack_opts(i);
		int r = bc_open(c, &o, &s[i]);

		if (r == 0) {
			take_one(s[i]);
			opened++;
		} else {
			expect(r == -ENOMEM && strstr(bc_client_error(c), "memory budget: dataset "),
			       "pack %d: %s (%d): %s", i, bc_strerror(r), r, bc_client_error(c));
			s[i] = NULL;
			refused++;
		}
		rss = daemon_rss();
		peak = rss > peak ? rss : peak;
		st = dt_status_json_ok();
		expect_used_adds_up(st, "during the attack");
		json_object_put(st);
	}
	fprintf(stderr, "test-index-charge: RSS %" PRIu64 " MiB at start, %" PRIu64 " MiB at most "
		"with %d of %d sessions open (%d refused), budget %" PRIu64 " MiB\n", before >> 20,
		peak >> 20, opened, PACKS, refused, BUDGET >> 20);
	expect(opened == 2 && refused == PACKS - 2, "%d of %d opened", opened, PACKS);
	expect(peak <= before + BUDGET + RSS_SLACK, "RSS reached %" PRIu64 " MiB from %" PRIu64
	       " MiB at start: over the %" PRIu64 " MiB budget and the %" PRIu64 " MiB margin",
	       peak >> 20, before >> 20, BUDGET >> 20, RSS_SLACK >> 20);
	for (int i = 0; i < PACKS; i++)
		if (s[i])
			ck_assert_int_eq(bc_close(s[i]), 0);
	wait_all_ended("after the attack");
	rss = daemon_rss();
	expect(rss <= before + BUDGET + RSS_SLACK, "RSS %" PRIu64 " MiB after the sessions closed "
	       "(%" PRIu64 " MiB at start)", rss >> 20, before >> 20);
	bc_disconnect(c);
}
END_TEST

/* ---- the suite ------------------------------------------------------------------------------------ */

static Suite *index_charge_suite(void)
{
	Suite *s = suite_create("index-charge");

	tcase_add_test(dt_tcase(s, "charged_once", setup), test_charged_once);
	tcase_add_test(dt_tcase(s, "refused", setup), test_refused);
	tcase_add_test(dt_tcase(s, "freed", setup), test_freed);
	tcase_add_test(dt_tcase(s, "per_uid", setup_per_uid), test_per_uid);
	tcase_add_test(dt_tcase(s, "rss_bounded", setup), test_rss_bounded);
	return s;
}

int main(void)
{
	return dt_check_main(&D, index_charge_suite);
}
