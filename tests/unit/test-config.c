/* SPDX-License-Identifier: MIT */
/*
 * test-config.c - the Check suite for daemon/config/config.c: defaults, the
 * configuration file, the shipped conf/batchd.conf, the command line and
 * the default socket path.
 *
 * Every rejected input is checked for its errno, for the exact start of
 * its message ("NAME:LINE:" or the flag) and for the words that say what
 * is allowed, and for leaving the configuration untouched. The suite is
 * meant to run under -fsanitize=address too (CK_FORK=no makes
 * LeakSanitizer look at every error path in one process).
 *
 * Needs BATCHD_SRCDIR (the source root, for conf/batchd.conf) and
 * BATCHD_VERSION from the build.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <syslog.h>
#include <unistd.h>

#include <check.h>

#include "config.h"
#include "units.h"

#ifndef BATCHD_DAEMON_CONFIG_H
#error "config.h is not daemon/config/config.h: check the include path"
#endif
#ifndef BATCHD_SRCDIR
#error "define BATCHD_SRCDIR (the source root)"
#endif
#ifndef BATCHD_VERSION
#error "define BATCHD_VERSION"
#endif

#define SHIPPED_CONF BATCHD_SRCDIR "/conf/batchd.conf"
#define NAME "t.conf"

static char err[1024];

/* ---- helpers ----------------------------------------------------------- */

static int load(bd_config *c, const char *text)
{
	return bd_config_load_string(c, NAME, text, strlen(text), err, sizeof(err));
}

/* What decode_threads = 0 resolves to, computed independently. */
static unsigned usable_cpus(void)
{
	cpu_set_t set;
	long n = -1;

	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		n = CPU_COUNT(&set);
	if (n <= 0)
		n = sysconf(_SC_NPROCESSORS_ONLN);
	if (n <= 0)
		n = 1;
	return n > 256 ? 256 : (unsigned)n;
}

static void assert_scalars_eq(const bd_config *a, const bd_config *b)
{
	ck_assert_int_eq(a->log_level, b->log_level);
	ck_assert_uint_eq(a->memory_budget, b->memory_budget);
	ck_assert_uint_eq(a->cache_size, b->cache_size);
	ck_assert_int_eq(a->tier, b->tier);
	ck_assert_int_eq(a->io_engine, b->io_engine);
	ck_assert_int_eq(a->direct, b->direct);
	ck_assert_uint_eq(a->queue_depth, b->queue_depth);
	ck_assert_uint_eq(a->io_threads, b->io_threads);
	ck_assert_uint_eq(a->decode_threads, b->decode_threads);
	ck_assert_uint_eq(a->prefetch, b->prefetch);
	ck_assert_uint_eq(a->max_prefetch, b->max_prefetch);
	ck_assert_uint_eq(a->socket_mode, b->socket_mode);
	ck_assert_uint_eq(a->sessions_per_uid, b->sessions_per_uid);
	ck_assert_uint_eq(a->memory_per_uid, b->memory_per_uid);
	ck_assert_uint_eq(a->lease_timeout, b->lease_timeout);
	ck_assert_uint_eq(a->session_blocks, b->session_blocks);
	ck_assert_uint_eq(a->client_queue, b->client_queue);
	ck_assert_uint_eq(a->handshake_timeout, b->handshake_timeout);
	ck_assert_uint_eq(a->connections_per_uid, b->connections_per_uid);
	ck_assert_uint_eq(a->max_connections, b->max_connections);
	ck_assert_int_eq(a->metrics_sessions, b->metrics_sessions);
	ck_assert_int_eq(a->remote_addressing, b->remote_addressing);
	ck_assert_uint_eq(a->remote_requests, b->remote_requests);
	ck_assert_uint_eq(a->remote_retries, b->remote_retries);
	ck_assert_uint_eq(a->remote_timeout, b->remote_timeout);
	ck_assert_uint_eq(a->cache_max_size, b->cache_max_size);
	ck_assert_uint_eq(a->cache_chunk, b->cache_chunk);
}

/* c holds exactly the defaults, decode_threads as given. */
static void assert_defaults(const bd_config *c, unsigned decode_threads)
{
	bd_config d;

	bd_config_init(&d);
	d.decode_threads = decode_threads;
	assert_scalars_eq(c, &d);
	ck_assert_ptr_null(c->socket);
	ck_assert_ptr_null(c->roots);
	ck_assert_uint_eq(c->nroots, 0);
	bd_config_free(&d);
}

static void assert_roots(const bd_config *c, const char *const *want, size_t n)
{
	ck_assert_uint_eq(c->nroots, n);
	for (size_t i = 0; i < n; i++)
		ck_assert_str_eq(c->roots[i], want[i]);
}

static void assert_prefix(const char *s, const char *prefix)
{
	ck_assert_msg(!strncmp(s, prefix, strlen(prefix)),
		      "message '%s' does not start with '%s'", s, prefix);
}

static void assert_contains(const char *s, const char *part)
{
	ck_assert_msg(strstr(s, part) != NULL, "message '%s' lacks '%s'", s, part);
}

/* A configuration that is not the defaults, to see errors leave it alone. */
static void init_marked(bd_config *c)
{
	bd_config_init(c);
	ck_assert_int_eq(load(c, "[daemon]\nsocket = /tmp/mark.sock\n"
				 "[datasets]\nroot = /mark\n"
				 "[io]\nqueue_depth = 7\n"), 0);
}

static void assert_marked(const bd_config *c)
{
	static const char *const roots[] = { "/mark" };

	ck_assert_str_eq(c->socket, "/tmp/mark.sock");
	assert_roots(c, roots, 1);
	ck_assert_uint_eq(c->queue_depth, 7);
	ck_assert_uint_eq(c->memory_budget, 0);   /* auto */
}

/* "/" followed by 'a's: a path of exactly n bytes. */
static void long_path(char *buf, size_t n)
{
	buf[0] = '/';
	memset(buf + 1, 'a', n - 1);
	buf[n] = '\0';
}

static char tmpdir[PATH_MAX];

static void make_tmpdir(void)
{
	const char *base = getenv("TMPDIR");

	snprintf(tmpdir, sizeof(tmpdir), "%s/test-config.XXXXXX", base && *base ? base : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static const char *write_tmp(const char *leaf, const char *text, size_t len)
{
	static char path[PATH_MAX + 64];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", tmpdir, leaf);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(text, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
	return path;
}

static void remove_tmp(const char *leaf)
{
	char path[PATH_MAX + 64];

	snprintf(path, sizeof(path), "%s/%s", tmpdir, leaf);
	unlink(path);
}

static char *read_all(const char *path, size_t *len)
{
	FILE *f = fopen(path, "r");
	char *buf;
	long n;

	ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
	ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	ck_assert_int_ge(n, 0);
	rewind(f);
	buf = malloc((size_t)n + 1);
	ck_assert_ptr_nonnull(buf);
	ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = '\0';
	fclose(f);
	*len = (size_t)n;
	return buf;
}

/* ---- defaults ---------------------------------------------------------- */

START_TEST(test_init_defaults)
{
	bd_config c;

	memset(&c, 0xa5, sizeof(c));
	bd_config_init(&c);
	ck_assert_ptr_null(c.socket);
	ck_assert_int_eq(c.log_level, LOG_INFO);
	ck_assert_ptr_null(c.roots);
	ck_assert_uint_eq(c.nroots, 0);
	ck_assert_uint_eq(c.memory_budget, 0);    /* auto: resolved by the daemon at start */
	ck_assert_uint_eq(c.cache_size, BD_CONFIG_CACHE_AUTO);
	ck_assert_int_eq(c.tier, BD_CFG_TIER_AUTO);
	ck_assert_int_eq(c.io_engine, BD_CFG_IO_AUTO);
	ck_assert_int_eq(c.direct, BD_CFG_DIRECT_AUTO);
	ck_assert_uint_eq(c.queue_depth, 64);
	ck_assert_uint_eq(c.io_threads, 1);
	ck_assert_uint_eq(c.decode_threads, 0);
	ck_assert_uint_eq(c.prefetch, 8);
	ck_assert_uint_eq(c.max_prefetch, 64);
	bd_config_free(&c);
}
END_TEST

START_TEST(test_free_any_state)
{
	bd_config c = { 0 };

	bd_config_free(NULL);
	bd_config_free(&c);          /* zeroed */
	init_marked(&c);
	bd_config_free(&c);          /* owns a socket and roots */
	ck_assert_ptr_null(c.socket);
	ck_assert_ptr_null(c.roots);
	ck_assert_uint_eq(c.nroots, 0);
	bd_config_free(&c);          /* twice */
}
END_TEST

START_TEST(test_empty_input_gives_defaults)
{
	bd_config c;

	bd_config_init(&c);
	ck_assert_int_eq(bd_config_load_string(&c, NAME, "", 0, err, sizeof(err)), 0);
	assert_defaults(&c, usable_cpus());
	bd_config_free(&c);
}
END_TEST

START_TEST(test_names)
{
	ck_assert_str_eq(bd_config_io_engine_name(BD_CFG_IO_AUTO), "auto");
	ck_assert_str_eq(bd_config_io_engine_name(BD_CFG_IO_URING), "io_uring");
	ck_assert_str_eq(bd_config_io_engine_name(BD_CFG_IO_PREAD), "pread");
	ck_assert_str_eq(bd_config_io_engine_name((bd_config_io_engine)99), "?");
	ck_assert_str_eq(bd_config_direct_name(BD_CFG_DIRECT_OFF), "off");
	ck_assert_str_eq(bd_config_log_level_name(LOG_WARNING), "warning");
	ck_assert_str_eq(bd_config_log_level_name(LOG_EMERG), "?");
}
END_TEST

/* ---- a valid file ------------------------------------------------------ */

START_TEST(test_full_valid_file)
{
	static const char text[] =
		"[daemon]\n"
		"socket = /run/test/b.sock\n"
		"log_level = debug\n"
		"[datasets]\n"
		"root = /data/a\n"
		"root = /data/b\n"
		"[memory]\n"
		"budget = 3G\n"
		"cache = 512M\n"
		"tier = page\n"
		"[io]\n"
		"engine = pread\n"
		"direct = off\n"
		"queue_depth = 4096\n"
		"session_blocks = 65536\n"
		"threads = 64\n"
		"[decode]\n"
		"threads = 256\n"
		"[session]\n"
		"prefetch = 1022\n"
		"max_prefetch = 1022\n"
		"[daemon]\n"
		"socket_mode = 0600\n"
		"socket_group = 0\n"
		"[limits]\n"
		"sessions_per_uid = 8\n"
		"memory_per_uid = 256M\n"
		"[access]\n"
		"allow_uid = 1000\n"
		"allow_uid = root\n"
		"allow_gid = 0\n"
		"[metrics]\n"
		"listen = 127.0.0.1:9477\n"
		"[datasets]\n"
		"remote = s3://bucket-a/prefix/\n"
		"remote = https://data.example.org/sets\n"
		"remote = s3://bucket-a/prefix\n"
		"[remote]\n"
		"endpoint = http://127.0.0.1:9000\n"
		"region = eu-west-1\n"
		"addressing = virtual\n"
		"credentials = /etc/batchd/s3.credentials\n"
		"profile = training\n"
		"requests = 1024\n"
		"retries = 0\n"
		"timeout = 3600\n"
		"[cache]\n"
		"dir = /var/cache//batchd/\n"
		"max_size = 100G\n"
		"chunk = 64M\n";
	static const char *const roots[] = { "/data/a", "/data/b" };
	bd_config c;

	bd_config_init(&c);
	ck_assert_int_eq(load(&c, text), 0);
	ck_assert_str_eq(c.socket, "/run/test/b.sock");
	ck_assert_int_eq(c.log_level, LOG_DEBUG);
	assert_roots(&c, roots, 2);
	ck_assert_uint_eq(c.memory_budget, UINT64_C(3) << 30);
	ck_assert_uint_eq(c.cache_size, UINT64_C(512) << 20);
	ck_assert_int_eq(c.tier, BD_CFG_TIER_PAGE);
	ck_assert_int_eq(c.io_engine, BD_CFG_IO_PREAD);
	ck_assert_int_eq(c.direct, BD_CFG_DIRECT_OFF);
	ck_assert_uint_eq(c.queue_depth, 4096);
	ck_assert_uint_eq(c.session_blocks, 65536);
	ck_assert_uint_eq(c.io_threads, 64);
	ck_assert_uint_eq(c.decode_threads, 256);
	ck_assert_uint_eq(c.prefetch, 1022);
	ck_assert_uint_eq(c.max_prefetch, 1022);
	ck_assert_uint_eq(c.socket_mode, 0600);
	ck_assert_str_eq(c.socket_group, "0");
	ck_assert_uint_eq(c.sessions_per_uid, 8);
	ck_assert_uint_eq(c.memory_per_uid, UINT64_C(256) << 20);
	ck_assert_uint_eq(c.nallow_uids, 2);
	ck_assert_uint_eq(c.allow_uids[0], 1000);
	ck_assert_uint_eq(c.allow_uids[1], 0);
	ck_assert_uint_eq(c.nallow_gids, 1);
	ck_assert_uint_eq(c.allow_gids[0], 0);
	ck_assert_str_eq(c.metrics_listen, "127.0.0.1:9477");
	/* Trailing slashes go, duplicates with them. */
	ck_assert_uint_eq(c.nremotes, 2);
	ck_assert_str_eq(c.remotes[0], "s3://bucket-a/prefix");
	ck_assert_str_eq(c.remotes[1], "https://data.example.org/sets");
	ck_assert_str_eq(c.remote_endpoint, "http://127.0.0.1:9000");
	ck_assert_str_eq(c.remote_region, "eu-west-1");
	ck_assert_int_eq(c.remote_addressing, 2);
	ck_assert_str_eq(c.remote_credentials, "/etc/batchd/s3.credentials");
	ck_assert_str_eq(c.remote_profile, "training");
	ck_assert_uint_eq(c.remote_requests, 1024);
	ck_assert_uint_eq(c.remote_retries, 0);
	ck_assert_uint_eq(c.remote_timeout, 3600);
	ck_assert_str_eq(c.cache_dir, "/var/cache/batchd");
	ck_assert_uint_eq(c.cache_max_size, UINT64_C(100) << 30);
	ck_assert_uint_eq(c.cache_chunk, UINT64_C(64) << 20);
	bd_config_free(&c);
}
END_TEST

START_TEST(test_every_enum_value)
{
	static const struct {
		const char *text;
		int level, engine, direct;
	} cases[] = {
		{ "[daemon]\nlog_level = err\n[io]\nengine = auto\ndirect = auto\n", LOG_ERR, BD_CFG_IO_AUTO, BD_CFG_DIRECT_AUTO },
		{ "[daemon]\nlog_level = warning\n[io]\nengine = io_uring\ndirect = on\n", LOG_WARNING, BD_CFG_IO_URING, BD_CFG_DIRECT_ON },
		{ "[daemon]\nlog_level = notice\n[io]\nengine = pread\ndirect = off\n", LOG_NOTICE, BD_CFG_IO_PREAD, BD_CFG_DIRECT_OFF },
		{ "[daemon]\nlog_level = info\n", LOG_INFO, BD_CFG_IO_AUTO, BD_CFG_DIRECT_AUTO },
		{ "[daemon]\nlog_level = debug\n", LOG_DEBUG, BD_CFG_IO_AUTO, BD_CFG_DIRECT_AUTO },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bd_config c;

		bd_config_init(&c);
		ck_assert_msg(load(&c, cases[i].text) == 0, "case %zu: %s", i, err);
		ck_assert_int_eq(c.log_level, cases[i].level);
		ck_assert_int_eq(c.io_engine, cases[i].engine);
		ck_assert_int_eq(c.direct, cases[i].direct);
		bd_config_free(&c);
	}
}
END_TEST

START_TEST(test_sizes_and_bounds)
{
	static const struct {
		const char *text;
		uint64_t budget;
		unsigned qd, decode;
	} cases[] = {
		{ "[memory]\nbudget = 16M\n", UINT64_C(16) << 20, 64, 0 },
		{ "[memory]\nbudget = 16777216\n", UINT64_C(16) << 20, 64, 0 },
		{ "[memory]\nbudget = 1.5GiB\n", UINT64_C(3) << 29, 64, 0 },
		{ "[memory]\nbudget = 2T\n", UINT64_C(2) << 40, 64, 0 },
		{ "[memory]\nbudget = auto\n", 0, 64, 0 },
		{ "[io]\nqueue_depth = 1\n", 0, 1, 0 },
		{ "[io]\nqueue_depth = 0064\n", 0, 64, 0 },
		{ "[decode]\nthreads = 1\n", 0, 64, 1 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bd_config c;

		bd_config_init(&c);
		ck_assert_msg(load(&c, cases[i].text) == 0, "case %zu: %s", i, err);
		ck_assert_uint_eq(c.memory_budget, cases[i].budget);
		ck_assert_uint_eq(c.queue_depth, cases[i].qd);
		ck_assert_uint_eq(c.decode_threads, cases[i].decode ? cases[i].decode : usable_cpus());
		bd_config_free(&c);
	}
}
END_TEST

START_TEST(test_decode_threads_zero_resolves)
{
	bd_config c;

	bd_config_init(&c);
	ck_assert_int_eq(load(&c, "[decode]\nthreads = 0\n"), 0);
	ck_assert_uint_eq(c.decode_threads, usable_cpus());
	ck_assert_uint_ge(c.decode_threads, 1);
	ck_assert_uint_le(c.decode_threads, 256);
	bd_config_free(&c);
}
END_TEST

START_TEST(test_duplicate_scalar_last_wins)
{
	bd_config c;

	bd_config_init(&c);
	ck_assert_int_eq(load(&c, "[io]\nqueue_depth = 8\nengine = pread\n"
				  "[daemon]\nsocket = /a.sock\n"
				  "[io]\nqueue_depth = 16\n"
				  "[daemon]\nsocket = /b.sock\n"), 0);
	ck_assert_uint_eq(c.queue_depth, 16);
	ck_assert_int_eq(c.io_engine, BD_CFG_IO_PREAD);
	ck_assert_str_eq(c.socket, "/b.sock");
	bd_config_free(&c);
}
END_TEST

/* Comments, blanks, CRLF, a BOM, indentation: all accepted, none changes a value. */
START_TEST(test_syntax_accepted)
{
	static const char text[] =
		"\xef\xbb\xbf# comment\r\n"
		"; other comment\r\n"
		"\r\n"
		"   [io]   # section comment\r\n"
		"\tqueue_depth   =   32   # inline\r\n"
		"  threads=2\n"
		"engine = pread ; inline\n"
		"  [decode]\n"               /* raw inih would make this a value of engine */
		"    threads = 3\n"
		"[datasets]\n"
		"root = /data/set#1\n"       /* '#' without a blank before it is data */
		"root = /data/x ;y\n"
		"[session]\n"
		"# prefetch = 2\n"
		"prefetch = 4";              /* no final newline */
	static const char *const roots[] = { "/data/set#1", "/data/x" };
	bd_config c;

	bd_config_init(&c);
	ck_assert_msg(load(&c, text) == 0, "%s", err);
	ck_assert_uint_eq(c.queue_depth, 32);
	ck_assert_uint_eq(c.io_threads, 2);
	ck_assert_int_eq(c.io_engine, BD_CFG_IO_PREAD);
	ck_assert_uint_eq(c.decode_threads, 3);
	assert_roots(&c, roots, 2);
	ck_assert_uint_eq(c.prefetch, 4);
	bd_config_free(&c);
}
END_TEST

/* ---- bad values -------------------------------------------------------- */

static const struct bad_case {
	const char *text;
	int line;
	const char *message;     /* follows "t.conf:LINE: " */
} bad_values[] = {
	{ "[io]\nqueue_depth = 0\n", 2, "[io] queue_depth: '0' is out of range (allowed 1..4096)" },
	{ "[io]\nsession_blocks = 65537\n", 2, "[io] session_blocks: '65537' is out of range (allowed 0..65536)" },
	{ "[io]\nqueue_depth = 4097\n", 2, "[io] queue_depth: '4097' is out of range (allowed 1..4096)" },
	{ "[io]\nqueue_depth = 99999999999999999999999\n", 2, "[io] queue_depth: '99999999999999999999999' is out of range (allowed 1..4096)" },
	{ "[io]\nqueue_depth = -1\n", 2, "[io] queue_depth: '-1' is not a whole number (allowed 1..4096)" },
	{ "[io]\nqueue_depth = +5\n", 2, "[io] queue_depth: '+5' is not a whole number" },
	{ "[io]\nqueue_depth = 12abc\n", 2, "[io] queue_depth: '12abc' is not a whole number" },
	{ "[io]\nqueue_depth = 0x10\n", 2, "[io] queue_depth: '0x10' is not a whole number" },
	{ "[io]\nqueue_depth = 1 2\n", 2, "[io] queue_depth: '1 2' is not a whole number" },
	{ "[io]\nqueue_depth = 2;3\n", 2, "[io] queue_depth: '2;3' is not a whole number" },   /* ';' needs a blank before it */
	{ "[io]\nqueue_depth = 3.5\n", 2, "[io] queue_depth: '3.5' is not a whole number" },
	{ "[io]\nqueue_depth =\n", 2, "[io] queue_depth: '' is not a whole number" },
	{ "[io]\nthreads = 0\n", 2, "[io] threads: '0' is out of range (allowed 1..64)" },
	{ "[io]\nthreads = 65\n", 2, "[io] threads: '65' is out of range (allowed 1..64)" },
	{ "[decode]\nthreads = 257\n", 2, "[decode] threads: '257' is out of range (allowed 0..256)" },
	{ "[daemon]\nsocket_mode = 0999\n", 2, "[daemon] socket_mode: '0999' is not an octal file mode" },
	{ "[daemon]\nsocket_mode = 01777\n", 2, "[daemon] socket_mode: '01777' is not an octal file mode" },
	{ "[limits]\nsessions_per_uid = -1\n", 2, "[limits] sessions_per_uid: '-1' is not a whole number" },
	{ "[limits]\nmemory_per_uid = 1M\n", 2, "[limits] memory_per_uid: '1M' is below the minimum of 16M" },
	{ "[access]\nallow_uid = no-such-user-xyz\n", 2, "[access] allow_uid: 'no-such-user-xyz' is not a known user name or number" },
	{ "[access]\nallow_gid = no-such-group-xyz\n", 2, "[access] allow_gid: 'no-such-group-xyz' is not a known group name or number" },
	{ "[metrics]\nlisten = localhost\n", 2, "[metrics] listen: 'localhost' is not HOST:PORT" },
	{ "[metrics]\nlisten = 127.0.0.1:0\n", 2, "[metrics] listen: '127.0.0.1:0' is not HOST:PORT" },
	{ "[metrics]\nlisten = ::1:9477\n", 2, "[metrics] listen: '::1:9477' is not HOST:PORT" },
	{ "[session]\nprefetch = 0\n", 2, "[session] prefetch: '0' is out of range (allowed 1..1022)" },
	{ "[session]\nprefetch = 1025\n", 2, "[session] prefetch: '1025' is out of range (allowed 1..1022)" },
	{ "[session]\nmax_prefetch = 2000\n", 2, "[session] max_prefetch: '2000' is out of range (allowed 1..1022)" },
	{ "[session]\nprefetch = 100\n", 2, "[session] prefetch = 100 is above max_prefetch = 64" },
	{ "[session]\nmax_prefetch = 4\n\n", 2, "[session] prefetch = 8 is above max_prefetch = 4" },
	{ "[session]\nmax_prefetch = 4\nprefetch = 5\n", 3, "[session] prefetch = 5 is above max_prefetch = 4" },
	{ "[memory]\nbudget = 12Q\n", 2, "[memory] budget: '12Q' is not a size (" BP_SIZE_FORMS ")" },
	{ "[memory]\nbudget = -1G\n", 2, "[memory] budget: '-1G' is not a size" },
	{ "[memory]\nbudget = 1GG\n", 2, "[memory] budget: '1GG' is not a size" },
	{ "[memory]\nbudget =\n", 2, "[memory] budget: '' is not a size" },
	{ "[memory]\nbudget = 8M\n", 2, "[memory] budget: '8M' is below the minimum of 16M" },
	{ "[memory]\ncache = lots\n", 2, "[memory] cache: 'lots' is not a size" },
	{ "[memory]\ntier = fast\n", 2, "[memory] tier: 'fast' is not one of auto, ram, page, direct" },
	{ "[memory]\nbudget = 16777215\n", 2, "[memory] budget: '16777215' is below the minimum of 16M" },
	{ "[memory]\nbudget = 99999999999999999999\n", 2, "[memory] budget: '99999999999999999999' is too large" },
	{ "[memory]\nbudget = 17179869184T\n", 2, "[memory] budget: '17179869184T' is too large" },
	{ "[io]\nengine = uring\n", 2, "[io] engine: 'uring' is not one of auto, io_uring, pread" },
	{ "[io]\nengine = IO_URING\n", 2, "[io] engine: 'IO_URING' is not one of auto, io_uring, pread" },
	{ "[io]\nengine =\n", 2, "[io] engine: '' is not one of auto, io_uring, pread" },
	{ "[io]\ndirect = yes\n", 2, "[io] direct: 'yes' is not one of auto, on, off" },
	{ "[daemon]\nlog_level = warn\n", 2, "[daemon] log_level: 'warn' is not one of err, warning, notice, info, debug" },
	{ "[daemon]\nlog_level = 7\n", 2, "[daemon] log_level: '7' is not one of err, warning, notice, info, debug" },
	{ "[daemon]\nsocket = run/b.sock\n", 2, "[daemon] socket: 'run/b.sock' is not an absolute path" },
	{ "[daemon]\nsocket =\n", 2, "[daemon] socket: '' is not an absolute path" },
	{ "[daemon]\nsocket = /run/batchd/\n", 2, "[daemon] socket: '/run/batchd/' names a directory, not a socket" },
	{ "[datasets]\nroot = data/imagenet\n", 2, "[datasets] root: 'data/imagenet' is not an absolute path" },
	{ "[datasets]\nroot = ~/data\n", 2, "[datasets] root: '~/data' is not an absolute path" },
	{ "[datasets]\nroot =\n", 2, "[datasets] root: '' is not an absolute path" },
	{ "[datasets]\nroot = /data/../etc\n", 2, "[datasets] root: '/data/../etc' has a '.' or '..' component" },
	{ "[datasets]\nroot = /data/.\n", 2, "[datasets] root: '/data/.' has a '.' or '..' component" },
	{ "[daemon]\nlog_level = \x1b[31mred\n", 2, "[daemon] log_level: '\\x1b[31mred' is not one of" },
	{ "[datasets]\nremote = bucket/prefix\n", 2, "[datasets] remote: 'bucket/prefix' is not a remote: give s3://BUCKET/PREFIX or https://HOST/PATH" },
	{ "[datasets]\nremote = s3://\n", 2, "[datasets] remote: 's3://' is not a remote" },
	{ "[datasets]\nremote = s3:///prefix\n", 2, "[datasets] remote: 's3:///prefix' is not a remote" },
	{ "[datasets]\nremote = s3://b k/p\n", 2, "[datasets] remote: 's3://b k/p' is not a remote" },
	{ "[remote]\nendpoint = 127.0.0.1:9000\n", 2, "[remote] endpoint: '127.0.0.1:9000' is not an endpoint: give http(s)://HOST[:PORT], without a path" },
	{ "[remote]\nendpoint = http://host/bucket\n", 2, "[remote] endpoint: 'http://host/bucket' is not an endpoint" },
	{ "[remote]\naddressing = dns\n", 2, "[remote] addressing: 'dns' is not an addressing: use auto, path" },
	{ "[remote]\nregion = us east\n", 2, "[remote] region: 'us east' is not a region" },
	{ "[remote]\nrequests = 0\n", 2, "[remote] requests: '0' is out of range (allowed 1..1024)" },
	{ "[remote]\nretries = 101\n", 2, "[remote] retries: '101' is out of range (allowed 0..100)" },
	{ "[remote]\ntimeout = 0\n", 2, "[remote] timeout: '0' is out of range (allowed 1..3600)" },
	{ "[remote]\ncredentials = s3.cred\n", 2, "[remote] credentials: 's3.cred' is not an absolute path" },
	{ "[cache]\ndir = cache\n", 2, "[cache] dir: 'cache' is not an absolute path" },
	{ "[cache]\nmax_size = 10M\n", 2, "[cache] max_size: '10M' is below the minimum of 64M" },
	{ "[cache]\nchunk = 32K\n", 2, "[cache] chunk: '32K' is below the minimum of 64K" },
	{ "[cache]\nchunk = 128M\n", 2, "[cache] chunk: '128M' is" },
	{ "[cache]\nchunk = 65537K\n", 2, "[cache] chunk: '65537K' is" },
	{ "[cache]\nchunk = 100000\n", 2, "[cache] chunk: '100000' is not a multiple of 4K" },
	/* line numbers count comments, blank lines and CRLF lines */
	{ "# c\n\n; c\r\n[io]\r\n\n  # c\nengine = auto\nqueue_depth = 0\n", 8, "[io] queue_depth: '0'" },
};

/* t->text is refused with -EINVAL and "t.conf:LINE: MESSAGE...", nothing applied. */
static void expect_bad_case(const struct bad_case *t)
{
	char prefix[64];
	bd_config c;

	init_marked(&c);
	snprintf(prefix, sizeof(prefix), NAME ":%d: ", t->line);
	err[0] = '\0';
	ck_assert_int_eq(load(&c, t->text), -EINVAL);
	assert_prefix(err, prefix);
	assert_prefix(err + strlen(prefix), t->message);
	assert_marked(&c);   /* nothing applied */
	bd_config_free(&c);
}

START_TEST(test_bad_value)
{
	expect_bad_case(&bad_values[_i]);
}
END_TEST

/* ---- unknown sections and keys ----------------------------------------- */

static const struct bad_case unknown_cases[] = {
	{ "[foo]\n", 1, "unknown section 'foo' (known: [daemon] [datasets] [memory] [io] [decode] [session] [limits] [access] [metrics] [remote] [cache])" },
	{ "[io]\nqueue_depth = 1\n\n[bogus]\n", 4, "unknown section 'bogus'" },
	{ "[IO]\nengine = auto\n", 1, "unknown section 'IO'" },
	{ "[ io ]\n", 1, "unknown section ' io '" },
	{ "[]\n", 1, "unknown section ''" },
	{ "[io] extra\n", 1, "text after ']' in a section header" },
	{ "[io]\nengine = auto\ndepth = 3\n", 3, "unknown key 'depth' in [io] (known: engine, direct, queue_depth, session_blocks, threads)" },
	{ "[io]\nEngine = auto\n", 2, "unknown key 'Engine' in [io]" },
	{ "[memory]\nbudget_mb = 3\n", 2, "unknown key 'budget_mb' in [memory] (known: budget, cache, tier)" },
	{ "[datasets]\nroots = /a\n", 2, "unknown key 'roots' in [datasets] (known: root, remote)" },
	{ "[cache]\nsize = 1G\n", 2, "unknown key 'size' in [cache] (known: dir, max_size, chunk)" },
	{ "[io]\n= 3\n", 2, "unknown key '' in [io]" },
	{ "engine = auto\n[io]\n", 1, "'engine' is outside any section" },
};

START_TEST(test_unknown)
{
	expect_bad_case(&unknown_cases[_i]);
}
END_TEST

/* ---- syntax ------------------------------------------------------------ */

static const struct bad_case syntax_cases[] = {
	{ "[io]\nengine auto\n", 2, "expected '[section]' or 'key = value'" },
	{ "[io\nengine = auto\n", 1, "expected '[section]' or 'key = value'" },
	{ "[io]\nqueue_depth\n", 2, "expected '[section]' or 'key = value'" },
	/* the first error wins, whoever finds it */
	{ "[io]\nqueue_depth = 0\nthreads = 0\n", 2, "[io] queue_depth: '0'" },
	{ "[io]\nbad line\nqueue_depth = 0\n", 2, "expected '[section]'" },
	{ "[io]\nqueue_depth = 0\nbad line\n", 2, "[io] queue_depth: '0'" },
	{ "[io]\nqueue_depth = 1\n[nope]\nbad line\n", 3, "unknown section 'nope'" },
};

START_TEST(test_syntax_error)
{
	expect_bad_case(&syntax_cases[_i]);
}
END_TEST

/* inih's buffer holds BD_CONFIG_MAX_LINE characters: longer lines are refused, never split. */
START_TEST(test_long_line)
{
	char text[1024], root[512], want[128];
	bd_config c;
	size_t n;

	/* exactly at the limit: accepted */
	n = BD_CONFIG_MAX_LINE - strlen("root = ");
	long_path(root, n);
	snprintf(text, sizeof(text), "[datasets]\nroot = %s   # trailing comment\n", root);
	bd_config_init(&c);
	ck_assert_msg(load(&c, text) == 0, "%s", err);
	ck_assert_uint_eq(c.nroots, 1);
	ck_assert_str_eq(c.roots[0], root);
	bd_config_free(&c);

	/* one more: refused with its line, nothing applied */
	long_path(root, n + 1);
	snprintf(text, sizeof(text), "[datasets]\n\nroot = %s\n[io]\nqueue_depth = 5\n", root);
	init_marked(&c);
	ck_assert_int_eq(load(&c, text), -EINVAL);
	snprintf(want, sizeof(want), NAME ":3: line is %d characters long (at most %d",
		 BD_CONFIG_MAX_LINE + 1, BD_CONFIG_MAX_LINE);
	assert_prefix(err, want);
	assert_marked(&c);
	bd_config_free(&c);

	/* long comments cost nothing */
	memset(text, '#', 900);
	strcpy(text + 900, "\n[io]\nqueue_depth = 9\n");
	bd_config_init(&c);
	ck_assert_msg(load(&c, text) == 0, "%s", err);
	ck_assert_uint_eq(c.queue_depth, 9);
	bd_config_free(&c);
}
END_TEST

START_TEST(test_nul_byte)
{
	static const char text[] = "[io]\nengine = a\0uto\n";
	bd_config c;

	init_marked(&c);
	ck_assert_int_eq(bd_config_load_string(&c, NAME, text, sizeof(text) - 1, err, sizeof(err)),
			 -EINVAL);
	ck_assert_str_eq(err, NAME ":2: NUL byte in line");
	assert_marked(&c);
	bd_config_free(&c);
}
END_TEST

/* Error text goes only where it fits; err may be NULL. */
START_TEST(test_error_buffer)
{
	char small[8];
	bd_config c;

	bd_config_init(&c);
	ck_assert_int_eq(bd_config_load_string(&c, NAME, "[x]\n", 4, NULL, 0), -EINVAL);
	memset(small, 'z', sizeof(small));
	ck_assert_int_eq(bd_config_load_string(&c, NAME, "[x]\n", 4, small, sizeof(small)), -EINVAL);
	ck_assert_str_eq(small, "t.conf:");
	strcpy(err, "untouched");
	ck_assert_int_eq(load(&c, "[io]\nqueue_depth = 3\n"), 0);
	ck_assert_str_eq(err, "untouched");
	bd_config_free(&c);
}
END_TEST

/* ---- roots ------------------------------------------------------------- */

START_TEST(test_relative_root)
{
	bd_config c;

	bd_config_init(&c);
	ck_assert_int_eq(load(&c, "[datasets]\nroot = /ok\nroot = relative/dir\n"), -EINVAL);
	ck_assert_str_eq(err, NAME ":3: [datasets] root: 'relative/dir' is not an absolute path");
	ck_assert_uint_eq(c.nroots, 0);
	ck_assert_ptr_null(c.roots);
	bd_config_free(&c);
}
END_TEST

START_TEST(test_roots_keep_order)
{
	static const char *const want[] = { "/z", "/data/b", "/a/c", "/", "/data" };
	bd_config c;

	bd_config_init(&c);
	ck_assert_int_eq(load(&c, "[datasets]\n"
				  "root = /z\n"
				  "root = /data/b/\n"      /* trailing slash */
				  "root = //a///c//\n"     /* repeated slashes */
				  "[io]\nqueue_depth = 2\n"
				  "[datasets]\n"
				  "root = ///\n"           /* "/" */
				  "root = /data\n"
				  "root = /z/\n"), 0);     /* duplicate of /z */
	assert_roots(&c, want, 5);
	bd_config_free(&c);
}
END_TEST

/* A file's roots replace the earlier ones; a file without roots keeps them. */
START_TEST(test_roots_replace_on_reload)
{
	static const char *const mark[] = { "/mark" };
	static const char *const fresh[] = { "/new1", "/new2" };
	bd_config c;

	init_marked(&c);
	ck_assert_int_eq(load(&c, "[io]\nqueue_depth = 3\n"), 0);
	assert_roots(&c, mark, 1);
	ck_assert_str_eq(c.socket, "/tmp/mark.sock");
	ck_assert_int_eq(load(&c, "[datasets]\nroot = /new1\nroot = /new2\n"), 0);
	assert_roots(&c, fresh, 2);
	ck_assert_uint_eq(c.queue_depth, 3);
	bd_config_free(&c);
}
END_TEST

START_TEST(test_roots_limit)
{
	size_t cap = (BD_CONFIG_MAX_ROOTS + 2) * 16 + 16;
	char *text = malloc(cap);
	size_t o;
	bd_config c;

	ck_assert_ptr_nonnull(text);
	o = (size_t)sprintf(text, "[datasets]\n");
	for (unsigned i = 0; i < BD_CONFIG_MAX_ROOTS; i++)
		o += (size_t)sprintf(text + o, "root = /r%u\n", i);
	bd_config_init(&c);
	ck_assert_msg(load(&c, text) == 0, "%s", err);
	ck_assert_uint_eq(c.nroots, BD_CONFIG_MAX_ROOTS);
	ck_assert_str_eq(c.roots[BD_CONFIG_MAX_ROOTS - 1], "/r255");
	bd_config_free(&c);

	sprintf(text + o, "root = /one-too-many\n");
	bd_config_init(&c);
	ck_assert_int_eq(load(&c, text), -EINVAL);
	ck_assert_str_eq(err, NAME ":258: [datasets] root: more than 256 roots");
	ck_assert_uint_eq(c.nroots, 0);
	bd_config_free(&c);
	free(text);
}
END_TEST

/* ---- the shipped file -------------------------------------------------- */

START_TEST(test_shipped_conf_is_defaults)
{
	bd_config c;

	bd_config_init(&c);
	ck_assert_msg(bd_config_load_file(&c, SHIPPED_CONF, err, sizeof(err)) == 0, "%s", err);
	assert_defaults(&c, usable_cpus());
	bd_config_free(&c);
}
END_TEST

/*
 * Uncommenting every "#key = value" line of the shipped file must load and
 * give the defaults again: the documented defaults are the real ones. Every
 * key must be documented, in its section.
 */
START_TEST(test_shipped_conf_documents_defaults)
{
	static const char *const keys[] = {
		"daemon.socket", "daemon.log_level", "datasets.root", "memory.budget",
		"io.engine", "io.direct", "io.queue_depth", "io.threads",
		"decode.threads", "session.prefetch", "session.max_prefetch",
		"daemon.socket_mode", "daemon.socket_group", "limits.sessions_per_uid",
		"limits.memory_per_uid", "access.allow_uid", "access.allow_gid", "metrics.listen",
		"session.lease_timeout", "io.session_blocks", "limits.client_queue",
		"limits.handshake_timeout", "limits.connections_per_uid", "limits.max_connections",
		"access.admin_uid", "access.admin_gid", "metrics.sessions",
	};
	static const char *const roots[] = { "/srv/datasets" };
	bool seen[sizeof(keys) / sizeof(keys[0])] = { false };
	char section[32] = "", *text, *line, *save;
	size_t len, o = 0;
	char *out;
	bd_config c, d;

	text = read_all(SHIPPED_CONF, &len);
	out = malloc(len + 1);
	ck_assert_ptr_nonnull(out);
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		size_t k = 0;

		if (line[0] == '[')
			sscanf(line, "[%31[^]]]", section);
		/* "#key = value": a commented-out setting */
		while (line[0] == '#' && ((line[1 + k] >= 'a' && line[1 + k] <= 'z') || line[1 + k] == '_'))
			k++;
		if (k && !strncmp(line + 1 + k, " = ", 3)) {
			char full[80];

			snprintf(full, sizeof(full), "%s.%.*s", section, (int)k, line + 1);
			for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
				if (!strcmp(full, keys[i]))
					seen[i] = true;
			line++;
		}
		o += (size_t)sprintf(out + o, "%s\n", line);
	}
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		ck_assert_msg(seen[i], "%s is not documented in conf/batchd.conf", keys[i]);

	bd_config_init(&c);
	ck_assert_msg(bd_config_load_string(&c, "uncommented", out, o, err, sizeof(err)) == 0,
		      "%s", err);
	bd_config_init(&d);
	d.decode_threads = usable_cpus();
	assert_scalars_eq(&c, &d);
	bd_config_free(&d);
	/* the path keys have no literal default; their examples must be valid */
	ck_assert_str_eq(c.socket, "/run/batchd/batchd.sock");
	assert_roots(&c, roots, 1);
	ck_assert_str_eq(c.socket_group, "batchd");
	ck_assert_uint_eq(c.nallow_uids, 1);
	ck_assert_uint_eq(c.allow_uids[0], 1000);
	ck_assert_uint_eq(c.nallow_gids, 1);
	ck_assert_uint_eq(c.allow_gids[0], 1000);
	ck_assert_uint_eq(c.nadmin_uids, 1);
	ck_assert_uint_eq(c.admin_uids[0], 1000);
	ck_assert_uint_eq(c.nadmin_gids, 1);
	ck_assert_uint_eq(c.admin_gids[0], 1000);
	ck_assert_str_eq(c.metrics_listen, "127.0.0.1:9477");
	bd_config_free(&c);
	free(out);
	free(text);
}
END_TEST

/* ---- files ------------------------------------------------------------- */

START_TEST(test_missing_file)
{
	bd_config c;

	init_marked(&c);
	ck_assert_int_eq(bd_config_load_file(&c, "/nonexistent/batchd.conf", err, sizeof(err)),
			 -ENOENT);
	ck_assert_str_eq(err, "/nonexistent/batchd.conf: No such file or directory");
	assert_marked(&c);
	bd_config_free(&c);
}
END_TEST

START_TEST(test_file_errors_name_the_file)
{
	static const char text[] = "[io]\n\nthreads = 99\n";
	char want[PATH_MAX + 128];
	const char *path;
	bd_config c;

	make_tmpdir();
	path = write_tmp("bad.conf", text, sizeof(text) - 1);
	init_marked(&c);
	ck_assert_int_eq(bd_config_load_file(&c, path, err, sizeof(err)), -EINVAL);
	snprintf(want, sizeof(want), "%s:3: [io] threads: '99' is out of range (allowed 1..64)", path);
	ck_assert_str_eq(err, want);
	assert_marked(&c);

	/* a directory */
	ck_assert_int_eq(bd_config_load_file(&c, tmpdir, err, sizeof(err)), -EISDIR);
	snprintf(want, sizeof(want), "%s: Is a directory", tmpdir);
	ck_assert_str_eq(err, want);
	assert_marked(&c);
	bd_config_free(&c);
	remove_tmp("bad.conf");
	rmdir(tmpdir);
}
END_TEST

START_TEST(test_file_too_big)
{
	size_t len = (size_t)BD_CONFIG_MAX_FILE + 1;
	char *text = malloc(len), want[PATH_MAX + 128];
	const char *path;
	bd_config c;

	ck_assert_ptr_nonnull(text);
	memset(text, '\n', len);
	make_tmpdir();
	path = write_tmp("big.conf", text, len);
	init_marked(&c);
	ck_assert_int_eq(bd_config_load_file(&c, path, err, sizeof(err)), -EFBIG);
	snprintf(want, sizeof(want), "%s: larger than 1048576 bytes", path);
	ck_assert_str_eq(err, want);
	assert_marked(&c);
	/* one byte less is fine (all blank lines) */
	ck_assert_int_eq(bd_config_load_string(&c, "s", text, len - 1, err, sizeof(err)), 0);
	assert_marked(&c);
	bd_config_free(&c);
	free(text);
	remove_tmp("big.conf");
	rmdir(tmpdir);
}
END_TEST

/* ---- command line ------------------------------------------------------ */

#define ARGV(...) ((char *[]){ "batchd", __VA_ARGS__, NULL })

/* argv ends with NULL; argc is counted. */
static int from_args(bd_config *c, char **argv)
{
	int argc = 0;

	while (argv[argc])
		argc++;
	return bd_config_from_args(c, argc, argv, NULL, err, sizeof(err));
}

/* from_args() with default_file standing for SYSCONFDIR/batchd/batchd.conf. */
static int from_args_default(bd_config *c, char **argv, const char *default_file)
{
	int argc = 0;

	while (argv[argc])
		argc++;
	return bd_config_from_args(c, argc, argv, default_file, err, sizeof(err));
}

static const char site_conf[] =
	"[daemon]\nsocket = /run/site/b.sock\nlog_level = notice\n"
	"[datasets]\nroot = /site/a\nroot = /site/b\n"
	"[memory]\nbudget = 2G\n"
	"[io]\nengine = pread\ndirect = off\nqueue_depth = 16\n";

START_TEST(test_args_override_file)
{
	static const char *const site_roots[] = { "/site/a", "/site/b" };
	const char *path;
	bd_config c;

	make_tmpdir();
	path = write_tmp("site.conf", site_conf, sizeof(site_conf) - 1);

	/* file only */
	{
		char **argv = ARGV("-c", (char *)path);

		bd_config_init(&c);
		ck_assert_msg(from_args(&c, argv) == 0, "%s", err);
		ck_assert_str_eq(c.socket, "/run/site/b.sock");
		ck_assert_uint_eq(c.memory_budget, UINT64_C(2) << 30);
		ck_assert_int_eq(c.io_engine, BD_CFG_IO_PREAD);
		ck_assert_int_eq(c.log_level, LOG_NOTICE);
		assert_roots(&c, site_roots, 2);
		ck_assert_uint_eq(c.decode_threads, usable_cpus());
		bd_config_free(&c);
	}
	/* flags win, whatever their position; untouched file values stay */
	{
		char **argv = ARGV("--memory", "4G", "--log-level", "debug", "--config", (char *)path,
				   "--io-engine", "io_uring", "--socket", "/tmp/flag.sock",
				   "--direct", "on");

		bd_config_init(&c);
		ck_assert_msg(from_args(&c, argv) == 0, "%s", err);
		ck_assert_uint_eq(c.memory_budget, UINT64_C(4) << 30);
		ck_assert_int_eq(c.log_level, LOG_DEBUG);
		ck_assert_int_eq(c.io_engine, BD_CFG_IO_URING);
		ck_assert_int_eq(c.direct, BD_CFG_DIRECT_ON);
		ck_assert_str_eq(c.socket, "/tmp/flag.sock");
		ck_assert_uint_eq(c.queue_depth, 16);          /* from the file */
		assert_roots(&c, site_roots, 2);               /* no --root: the file's */
		bd_config_free(&c);
	}
	remove_tmp("site.conf");
	rmdir(tmpdir);
}
END_TEST

/* Run bd_config_check_roots(c) as nobody (uid/gid 65534): @return its result. */
static int check_roots_as_nobody(const bd_config *c)
{
	pid_t pid = fork();
	int status;

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 ||
		    setresuid(65534, 65534, 65534) < 0)
			_exit(100);
		_exit(-bd_config_check_roots(c, NULL, 0));
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status));
	ck_assert_int_ne(WEXITSTATUS(status), 100);
	return -WEXITSTATUS(status);
}

/* text loads, and its roots are refused with r and the message want. */
static void assert_root_refused(const char *text, int r, const char *want)
{
	bd_config c;

	bd_config_init(&c);
	ck_assert_msg(load(&c, text) == 0, "%s", err);
	ck_assert_int_eq(bd_config_check_roots(&c, err, sizeof(err)), r);
	ck_assert_str_eq(err, want);
	bd_config_free(&c);
}

/* Roots on disk: each failure names the root, where it was set, why and what to change. */
START_TEST(test_roots_checked)
{
	char text[4 * PATH_MAX], want[4 * PATH_MAX], ok[PATH_MAX + 8], gone[PATH_MAX + 8], file[PATH_MAX + 8];
	bd_config c;

	make_tmpdir();
	snprintf(ok, sizeof(ok), "%s/ok", tmpdir);
	snprintf(gone, sizeof(gone), "%s/gone", tmpdir);
	snprintf(file, sizeof(file), "%s/plain", tmpdir);
	ck_assert_int_eq(mkdir(ok, 0755), 0);
	write_tmp("plain", "", 0);

	snprintf(text, sizeof(text), "[datasets]\nroot = %s\n\nroot = %s\n", ok, gone);
	snprintf(want, sizeof(want), "[datasets] root %s (" NAME ":4): No such file or directory: "
		 "create it or remove the line", gone);
	assert_root_refused(text, -ENOENT, want);
	snprintf(text, sizeof(text), "[datasets]\nroot = %s\nroot = %s\n", ok, file);
	snprintf(want, sizeof(want), "[datasets] root %s (" NAME ":3): Not a directory: name the "
		 "directory that holds the datasets or remove the line", file);
	assert_root_refused(text, -ENOTDIR, want);

	/* --root replaces the file's roots and their lines */
	bd_config_init(&c);
	ck_assert_msg(from_args(&c, ARGV("--root", ok, "--root", gone)) == 0, "%s", err);
	ck_assert_ptr_null(c.root_lines);
	ck_assert_int_eq(bd_config_check_roots(&c, err, sizeof(err)), -ENOENT);
	snprintf(want, sizeof(want), "--root %s: No such file or directory: create it or drop the "
		 "flag", gone);
	ck_assert_str_eq(err, want);
	bd_config_free(&c);

	/* a directory the daemon's user may not search */
	bd_config_init(&c);
	ck_assert_msg(from_args(&c, ARGV("--root", ok)) == 0, "%s", err);
	ck_assert_int_eq(bd_config_check_roots(&c, err, sizeof(err)), 0);
	ck_assert_int_eq(chmod(ok, 0700), 0);
	if (geteuid() == 0) {
		ck_assert_int_eq(check_roots_as_nobody(&c), -EACCES);
	} else {
		ck_assert_int_eq(bd_config_check_roots(&c, err, sizeof(err)), 0);
		ck_assert_int_eq(chmod(ok, 0300), 0);
		ck_assert_int_eq(bd_config_check_roots(&c, err, sizeof(err)), -EACCES);
		snprintf(want, sizeof(want), "--root %s: Permission denied: let the daemon's user "
			 "read and search it (r-x) or drop the flag", ok);
		ck_assert_str_eq(err, want);
	}
	bd_config_free(&c);
	rmdir(ok);
	remove_tmp("plain");
	rmdir(tmpdir);
}
END_TEST

/* No -c: the default file when it is there, defaults when it is not; never with --no-config. */
START_TEST(test_args_default_file)
{
	char path[PATH_MAX + 64], absent[PATH_MAX + 64];
	bd_config c;

	make_tmpdir();
	snprintf(path, sizeof(path), "%s", write_tmp("site.conf", site_conf, sizeof(site_conf) - 1));
	snprintf(absent, sizeof(absent), "%s/absent.conf", tmpdir);

	bd_config_init(&c);
	ck_assert_msg(from_args_default(&c, ARGV("--log-level", "debug"), path) == 0, "%s", err);
	ck_assert_str_eq(c.file, path);
	ck_assert(!c.no_file);
	ck_assert_uint_eq(c.memory_budget, UINT64_C(2) << 30);   /* the file's */
	ck_assert_int_eq(c.log_level, LOG_DEBUG);                 /* the flag wins */
	bd_config_free(&c);

	bd_config_init(&c);
	ck_assert_msg(from_args_default(&c, ARGV("--log-level", "debug"), absent) == 0, "%s", err);
	ck_assert_ptr_null(c.file);
	ck_assert(!c.no_file);
	ck_assert_uint_eq(c.memory_budget, 0);
	bd_config_free(&c);

	bd_config_init(&c);
	ck_assert_msg(from_args_default(&c, ARGV("--no-config"), path) == 0, "%s", err);
	ck_assert_ptr_null(c.file);
	ck_assert(c.no_file);
	assert_defaults(&c, usable_cpus());
	bd_config_free(&c);

	/* -c /dev/null: an empty file, the other way to ask for none */
	bd_config_init(&c);
	ck_assert_msg(from_args_default(&c, ARGV("-c", "/dev/null"), path) == 0, "%s", err);
	ck_assert_str_eq(c.file, "/dev/null");
	assert_defaults(&c, usable_cpus());
	bd_config_free(&c);

	/* an explicit file that is missing stays an error, default or not */
	init_marked(&c);
	ck_assert_int_eq(from_args_default(&c, ARGV("-c", absent), path), -ENOENT);
	{
		char want[PATH_MAX + 128];

		snprintf(want, sizeof(want), "%s: No such file or directory", absent);
		ck_assert_str_eq(err, want);
	}
	assert_marked(&c);
	bd_config_free(&c);

	/* the later of -c and --no-config wins */
	bd_config_init(&c);
	ck_assert_msg(from_args_default(&c, ARGV("--no-config", "-c", path), NULL) == 0, "%s", err);
	ck_assert_str_eq(c.file, path);
	ck_assert(!c.no_file);
	bd_config_free(&c);
	bd_config_init(&c);
	ck_assert_msg(from_args_default(&c, ARGV("-c", path, "--no-config"), path) == 0, "%s", err);
	ck_assert_ptr_null(c.file);
	ck_assert(c.no_file);
	bd_config_free(&c);

	/* a default file that is there but not a file batchd can read is an error */
	init_marked(&c);
	ck_assert_int_eq(from_args_default(&c, ARGV("--memory", "1G"), tmpdir), -EISDIR);
	assert_marked(&c);
	bd_config_free(&c);
	remove_tmp("site.conf");
	rmdir(tmpdir);
}
END_TEST

START_TEST(test_args_root_replaces)
{
	static const char *const want[] = { "/flag/x", "/flag/y" };
	const char *path;
	bd_config c;

	make_tmpdir();
	path = write_tmp("site.conf", site_conf, sizeof(site_conf) - 1);
	{
		char **argv = ARGV("--root", "/flag/x/", "-c", (char *)path, "--root", "//flag//y",
				   "--root", "/flag/x");

		bd_config_init(&c);
		ck_assert_msg(from_args(&c, argv) == 0, "%s", err);
		assert_roots(&c, want, 2);
		ck_assert_uint_eq(c.memory_budget, UINT64_C(2) << 30);
		bd_config_free(&c);
	}
	/* without a file too */
	{
		char **argv = ARGV("--root", "/flag/x", "--root", "/flag/y");

		bd_config_init(&c);
		ck_assert_int_eq(from_args(&c, argv), 0);
		assert_roots(&c, want, 2);
		bd_config_free(&c);
	}
	remove_tmp("site.conf");
	rmdir(tmpdir);
}
END_TEST

START_TEST(test_args_none)
{
	char *argv[] = { "batchd", NULL };
	bd_config c;

	bd_config_init(&c);
	ck_assert_int_eq(from_args(&c, argv), 0);
	assert_defaults(&c, usable_cpus());
	/* getopt state is reset: a second parse sees its flags */
	{
		char **again = ARGV("--memory", "32M");

		ck_assert_int_eq(from_args(&c, again), 0);
		ck_assert_uint_eq(c.memory_budget, UINT64_C(32) << 20);
	}
	bd_config_free(&c);
}
END_TEST

/* Run from_args with stdout captured into out. */
static int from_args_stdout(bd_config *c, char **argv, char *out, size_t len)
{
	FILE *tmp = tmpfile();
	int saved, r;
	size_t n;

	ck_assert_ptr_nonnull(tmp);
	fflush(stdout);
	saved = dup(STDOUT_FILENO);
	ck_assert_int_ge(saved, 0);
	ck_assert_int_ge(dup2(fileno(tmp), STDOUT_FILENO), 0);
	r = from_args(c, argv);
	fflush(stdout);
	dup2(saved, STDOUT_FILENO);
	close(saved);
	rewind(tmp);
	n = fread(out, 1, len - 1, tmp);
	out[n] = '\0';
	fclose(tmp);
	return r;
}

START_TEST(test_args_help_version)
{
	char out[4096];
	bd_config c;

	init_marked(&c);
	ck_assert_int_eq(from_args_stdout(&c, ARGV("--help"), out, sizeof(out)), 1);
	assert_prefix(out, "Usage: batchd [OPTION]...\n");
	assert_contains(out, "--io-engine ENGINE");
	ck_assert_int_eq(from_args_stdout(&c, ARGV("-h"), out, sizeof(out)), 1);
	assert_prefix(out, "Usage: batchd");
	ck_assert_int_eq(from_args_stdout(&c, ARGV("--version"), out, sizeof(out)), 1);
	ck_assert_str_eq(out, "batchd " BATCHD_VERSION "\n");
	ck_assert_int_eq(from_args_stdout(&c, ARGV("--memory", "32M", "-V"), out, sizeof(out)), 1);
	ck_assert_str_eq(out, "batchd " BATCHD_VERSION "\n");
	assert_marked(&c);   /* --help/--version apply nothing */
	bd_config_free(&c);
}
END_TEST

static const struct args_case {
	char *argv[5];
	int r;
	const char *message;     /* the whole message, or its start when ending in "..." */
} args_cases[] = {
	{ { "--memory", "12Q" }, -EINVAL, "--memory: '12Q' is not a size (" BP_SIZE_FORMS ")" },
	{ { "--memory", "1M" }, -EINVAL, "--memory: '1M' is below the minimum of 16M" },
	{ { "--memory", "" }, -EINVAL, "--memory: '' is not a size..." },
	{ { "--io-engine", "uring" }, -EINVAL, "--io-engine: 'uring' is not one of auto, io_uring, pread" },
	{ { "--direct", "yes" }, -EINVAL, "--direct: 'yes' is not one of auto, on, off" },
	{ { "--log-level", "loud" }, -EINVAL, "--log-level: 'loud' is not one of err, warning, notice, info, debug" },
	{ { "--root", "/ok", "--root", "rel/dir" }, -EINVAL, "--root: 'rel/dir' is not an absolute path" },
	{ { "--root", "/a/../b" }, -EINVAL, "--root: '/a/../b' has a '.' or '..' component..." },
	{ { "--socket", "b.sock" }, -EINVAL, "--socket: 'b.sock' is not an absolute path" },
	{ { "--bogus" }, -EINVAL, "unknown option '--bogus' (see --help)" },
	{ { "-x" }, -EINVAL, "unknown option '-x' (see --help)" },
	{ { "--memory" }, -EINVAL, "--memory: needs an argument" },
	{ { "--root" }, -EINVAL, "--root: needs an argument" },
	{ { "-c" }, -EINVAL, "-c: needs an argument" },
	{ { "--config" }, -EINVAL, "-c: needs an argument" },
	{ { "--help=1" }, -EINVAL, "--help: takes no argument" },
	{ { "serve" }, -EINVAL, "unexpected argument 'serve' (see --help)" },
	{ { "--memory", "1G", "--", "x" }, -EINVAL, "unexpected argument 'x' (see --help)" },
	{ { "-c", "/nonexistent/batchd.conf" }, -ENOENT, "/nonexistent/batchd.conf: No such file or directory" },
	/* a bad flag is reported before the file is even read */
	{ { "-c", "/nonexistent/batchd.conf", "--direct", "maybe" }, -EINVAL, "--direct: 'maybe' is not one of auto, on, off" },
};

START_TEST(test_args_bad_flag)
{
	const struct args_case *t = &args_cases[_i];
	char *argv[7] = { "batchd" };
	int argc = 1;   /* argv[argc] stays NULL */
	size_t n = strlen(t->message);
	bd_config c;

	for (int i = 0; i < 5 && t->argv[i]; i++)
		argv[argc++] = t->argv[i];
	init_marked(&c);
	ck_assert_int_eq(from_args(&c, argv), t->r);
	if (n > 3 && !strcmp(t->message + n - 3, "..."))
		ck_assert_msg(!strncmp(err, t->message, n - 3), "'%s' vs '%s'", err, t->message);
	else
		ck_assert_str_eq(err, t->message);
	assert_marked(&c);
	bd_config_free(&c);
}
END_TEST

START_TEST(test_args_bad_file_content)
{
	static const char text[] = "[io]\nengine = fast\n";
	char want[PATH_MAX + 128];
	const char *path;
	bd_config c;

	make_tmpdir();
	path = write_tmp("bad.conf", text, sizeof(text) - 1);
	init_marked(&c);
	ck_assert_int_eq(from_args(&c, ARGV("--memory", "4G", "-c", (char *)path)), -EINVAL);
	snprintf(want, sizeof(want), "%s:2: [io] engine: 'fast' is not one of auto, io_uring, pread", path);
	ck_assert_str_eq(err, want);
	assert_marked(&c);   /* and --memory was not applied either */
	bd_config_free(&c);
	remove_tmp("bad.conf");
	rmdir(tmpdir);
}
END_TEST

/* ---- sockets ----------------------------------------------------------- */

START_TEST(test_socket_length)
{
	char path[256], text[512];
	bd_config c;

	long_path(path, BD_CONFIG_SOCKET_MAX);
	snprintf(text, sizeof(text), "[daemon]\nsocket = %s\n", path);
	bd_config_init(&c);
	ck_assert_msg(load(&c, text) == 0, "%s", err);
	ck_assert_uint_eq(strlen(c.socket), 107);
	bd_config_free(&c);

	long_path(path, BD_CONFIG_SOCKET_MAX + 1);
	snprintf(text, sizeof(text), "[daemon]\n\nsocket = %s\n", path);
	init_marked(&c);
	ck_assert_int_eq(load(&c, text), -EINVAL);
	assert_prefix(err, NAME ":3: [daemon] socket: '/aaa");
	assert_contains(err, "is 108 bytes long; a Unix socket path holds at most 107");
	assert_marked(&c);

	ck_assert_int_eq(from_args(&c, ARGV("--socket", path)), -EINVAL);
	assert_prefix(err, "--socket: '/aaa");
	assert_contains(err, "...' is 108 bytes long; a Unix socket path holds at most 107");
	assert_marked(&c);
	bd_config_free(&c);
}
END_TEST

static void clear_socket_env(void)
{
	unsetenv("RUNTIME_DIRECTORY");
	unsetenv("XDG_RUNTIME_DIR");
}

static void assert_default_socket(const char *want)
{
	char buf[128];

	memset(buf, 0, sizeof(buf));
	ck_assert_int_eq(bd_config_default_socket(buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, want);
}

START_TEST(test_default_socket_runtime_directory)
{
	clear_socket_env();
	setenv("XDG_RUNTIME_DIR", "/run/user/4242", 1);   /* RUNTIME_DIRECTORY wins */
	setenv("RUNTIME_DIRECTORY", "/run/batchd-test", 1);
	assert_default_socket("/run/batchd-test/batchd.sock");
	setenv("RUNTIME_DIRECTORY", "/run/first:/run/second", 1);
	assert_default_socket("/run/first/batchd.sock");
	setenv("RUNTIME_DIRECTORY", "/run/slash//", 1);
	assert_default_socket("/run/slash/batchd.sock");
	setenv("RUNTIME_DIRECTORY", "/", 1);
	assert_default_socket("/batchd.sock");
	clear_socket_env();
}
END_TEST

/*
 * As root the fixed /run/batchd applies before XDG_RUNTIME_DIR; the rest is
 * checked as an unprivileged user (seteuid, undone at the end).
 */
START_TEST(test_default_socket_xdg)
{
	bool was_root = geteuid() == 0;
	char buf[128];

	clear_socket_env();
	setenv("XDG_RUNTIME_DIR", "/run/user/4242", 1);
	setenv("RUNTIME_DIRECTORY", "relative/dir", 1);    /* ignored */
	if (was_root) {
		assert_default_socket("/run/batchd/batchd.sock");
		ck_assert_int_eq(seteuid(65534), 0);
	}
	assert_default_socket("/run/user/4242/batchd.sock");
	setenv("RUNTIME_DIRECTORY", "", 1);                /* ignored */
	assert_default_socket("/run/user/4242/batchd.sock");

	unsetenv("XDG_RUNTIME_DIR");
	strcpy(buf, "untouched");
	ck_assert_int_eq(bd_config_default_socket(buf, sizeof(buf)), -ENOENT);
	ck_assert_str_eq(buf, "untouched");
	setenv("XDG_RUNTIME_DIR", "run/user/4242", 1);     /* relative: ignored */
	ck_assert_int_eq(bd_config_default_socket(buf, sizeof(buf)), -ENOENT);
	ck_assert_str_eq(buf, "untouched");
	if (was_root)
		ck_assert_int_eq(seteuid(0), 0);
	clear_socket_env();
}
END_TEST

START_TEST(test_default_socket_limits)
{
	char dir[256], buf[256], small[32];
	const char *want = "/run/t/batchd.sock";

	clear_socket_env();
	setenv("RUNTIME_DIRECTORY", "/run/t", 1);
	/* exact fit, then one byte short */
	ck_assert_int_eq(bd_config_default_socket(small, strlen(want) + 1), 0);
	ck_assert_str_eq(small, want);
	strcpy(small, "untouched");
	ck_assert_int_eq(bd_config_default_socket(small, strlen(want)), -ENOBUFS);
	ck_assert_str_eq(small, "untouched");

	/* 95 + "/batchd.sock" = 107 bytes: fits; one more does not */
	long_path(dir, 95);
	setenv("RUNTIME_DIRECTORY", dir, 1);
	ck_assert_int_eq(bd_config_default_socket(buf, sizeof(buf)), 0);
	ck_assert_uint_eq(strlen(buf), 107);
	long_path(dir, 96);
	setenv("RUNTIME_DIRECTORY", dir, 1);
	strcpy(buf, "untouched");
	ck_assert_int_eq(bd_config_default_socket(buf, sizeof(buf)), -ENAMETOOLONG);
	ck_assert_str_eq(buf, "untouched");
	clear_socket_env();
}
END_TEST

/* ---- suite ------------------------------------------------------------- */

#define NCASES(a) ((int)(sizeof(a) / sizeof((a)[0])))

static Suite *config_suite(void)
{
	Suite *s = suite_create("config");
	TCase *tc;

	tc = tcase_create("defaults");
	tcase_add_test(tc, test_init_defaults);
	tcase_add_test(tc, test_free_any_state);
	tcase_add_test(tc, test_empty_input_gives_defaults);
	tcase_add_test(tc, test_names);
	suite_add_tcase(s, tc);

	tc = tcase_create("valid_file");
	tcase_add_test(tc, test_full_valid_file);
	tcase_add_test(tc, test_every_enum_value);
	tcase_add_test(tc, test_sizes_and_bounds);
	tcase_add_test(tc, test_decode_threads_zero_resolves);
	tcase_add_test(tc, test_duplicate_scalar_last_wins);
	tcase_add_test(tc, test_syntax_accepted);
	suite_add_tcase(s, tc);

	tc = tcase_create("bad_values");
	tcase_add_loop_test(tc, test_bad_value, 0, NCASES(bad_values));
	suite_add_tcase(s, tc);

	tc = tcase_create("unknown_section_key");
	tcase_add_loop_test(tc, test_unknown, 0, NCASES(unknown_cases));
	suite_add_tcase(s, tc);

	tc = tcase_create("syntax_errors");
	tcase_add_loop_test(tc, test_syntax_error, 0, NCASES(syntax_cases));
	tcase_add_test(tc, test_long_line);
	tcase_add_test(tc, test_nul_byte);
	tcase_add_test(tc, test_error_buffer);
	suite_add_tcase(s, tc);

	tc = tcase_create("roots");
	tcase_add_test(tc, test_relative_root);
	tcase_add_test(tc, test_roots_keep_order);
	tcase_add_test(tc, test_roots_checked);
	tcase_add_test(tc, test_roots_replace_on_reload);
	tcase_add_test(tc, test_roots_limit);
	suite_add_tcase(s, tc);

	tc = tcase_create("shipped_conf");
	tcase_add_test(tc, test_shipped_conf_is_defaults);
	tcase_add_test(tc, test_shipped_conf_documents_defaults);
	suite_add_tcase(s, tc);

	tc = tcase_create("files");
	tcase_add_test(tc, test_missing_file);
	tcase_add_test(tc, test_file_errors_name_the_file);
	tcase_add_test(tc, test_file_too_big);
	suite_add_tcase(s, tc);

	tc = tcase_create("command_line");
	tcase_add_test(tc, test_args_override_file);
	tcase_add_test(tc, test_args_default_file);
	tcase_add_test(tc, test_args_root_replaces);
	tcase_add_test(tc, test_args_none);
	tcase_add_test(tc, test_args_help_version);
	tcase_add_test(tc, test_args_bad_file_content);
	suite_add_tcase(s, tc);

	tc = tcase_create("command_line_errors");
	tcase_add_loop_test(tc, test_args_bad_flag, 0, NCASES(args_cases));
	suite_add_tcase(s, tc);

	tc = tcase_create("socket");
	tcase_add_test(tc, test_socket_length);
	tcase_add_test(tc, test_default_socket_runtime_directory);
	tcase_add_test(tc, test_default_socket_xdg);
	tcase_add_test(tc, test_default_socket_limits);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	sr = srunner_create(config_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
