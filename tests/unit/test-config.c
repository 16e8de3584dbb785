/* SPDX-License-Identifier: MIT */
/*
 * test-config.c - the Check suite for what daemon/config/config.c accepts:
 * the defaults, a file that sets every key, the [datasets] roots (in the
 * file and checked on disk), and the shipped conf/batchd.conf, whose
 * documented defaults must be the real ones.
 *
 * What the configuration refuses is test-config-errors.c's, the command
 * line and the default socket path test-config-cli.c's: three programs,
 * one behaviour each, over the helpers in config-testlib.c. Every value
 * loaded is checked field by field against what was written, never just
 * for a zero return. The suite is meant to run under -fsanitize=address
 * too (CK_FORK=no makes LeakSanitizer look at every path in one process).
 *
 * Needs BATCHD_SRCDIR (the source root, for conf/batchd.conf) from the
 * build.
 */
#include <errno.h>
#include <limits.h>
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

#include "config-testlib.h"

#ifndef BATCHD_SRCDIR
#error "define BATCHD_SRCDIR (the source root)"
#endif

#define SHIPPED_CONF BATCHD_SRCDIR "/conf/batchd.conf"

/* ---- helpers ----------------------------------------------------------- */

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
	ck_assert(c.stream_first_pass);
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
	ct_init_marked(&c);
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
	ck_assert_int_eq(bd_config_load_string(&c, NAME, "", 0, ct_err, sizeof(ct_err)), 0);
	ct_assert_defaults(&c, ct_usable_cpus());
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
		"first_pass = batches\n"
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
		"chunk = 64M\n"
		"[images]\n"
		"max_pixels = 1G\n";
	static const char *const roots[] = { "/data/a", "/data/b" };
	bd_config c;

	bd_config_init(&c);
	ck_assert_int_eq(ct_load(&c, text), 0);
	ck_assert_str_eq(c.socket, "/run/test/b.sock");
	ck_assert_int_eq(c.log_level, LOG_DEBUG);
	ct_assert_roots(&c, roots, 2);
	ck_assert_uint_eq(c.memory_budget, UINT64_C(3) << 30);
	ck_assert_uint_eq(c.cache_size, UINT64_C(512) << 20);
	ck_assert_int_eq(c.tier, BD_CFG_TIER_PAGE);
	ck_assert_int_eq(c.io_engine, BD_CFG_IO_PREAD);
	ck_assert_int_eq(c.direct, BD_CFG_DIRECT_OFF);
	ck_assert(!c.stream_first_pass);
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
	ck_assert_uint_eq(c.image_max_pixels, UINT64_C(1) << 30);
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
		ck_assert_msg(ct_load(&c, cases[i].text) == 0, "case %zu: %s", i, ct_err);
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
		ck_assert_msg(ct_load(&c, cases[i].text) == 0, "case %zu: %s", i, ct_err);
		ck_assert_uint_eq(c.memory_budget, cases[i].budget);
		ck_assert_uint_eq(c.queue_depth, cases[i].qd);
		ck_assert_uint_eq(c.decode_threads, cases[i].decode ? cases[i].decode : ct_usable_cpus());
		bd_config_free(&c);
	}
}
END_TEST

START_TEST(test_decode_threads_zero_resolves)
{
	bd_config c;

	bd_config_init(&c);
	ck_assert_int_eq(ct_load(&c, "[decode]\nthreads = 0\n"), 0);
	ck_assert_uint_eq(c.decode_threads, ct_usable_cpus());
	ck_assert_uint_ge(c.decode_threads, 1);
	ck_assert_uint_le(c.decode_threads, 256);
	bd_config_free(&c);
}
END_TEST

START_TEST(test_duplicate_scalar_last_wins)
{
	bd_config c;

	bd_config_init(&c);
	ck_assert_int_eq(ct_load(&c, "[io]\nqueue_depth = 8\nengine = pread\n"
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
	ck_assert_msg(ct_load(&c, text) == 0, "%s", ct_err);
	ck_assert_uint_eq(c.queue_depth, 32);
	ck_assert_uint_eq(c.io_threads, 2);
	ck_assert_int_eq(c.io_engine, BD_CFG_IO_PREAD);
	ck_assert_uint_eq(c.decode_threads, 3);
	ct_assert_roots(&c, roots, 2);
	ck_assert_uint_eq(c.prefetch, 4);
	bd_config_free(&c);
}
END_TEST

/* ---- roots ------------------------------------------------------------- */

START_TEST(test_relative_root)
{
	bd_config c;

	bd_config_init(&c);
	ck_assert_int_eq(ct_load(&c, "[datasets]\nroot = /ok\nroot = relative/dir\n"), -EINVAL);
	ck_assert_str_eq(ct_err, NAME ":3: [datasets] root: 'relative/dir' is not an absolute path");
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
	ck_assert_int_eq(ct_load(&c, "[datasets]\n"
				     "root = /z\n"
				     "root = /data/b/\n"      /* trailing slash */
				     "root = //a///c//\n"     /* repeated slashes */
				     "[io]\nqueue_depth = 2\n"
				     "[datasets]\n"
				     "root = ///\n"           /* "/" */
				     "root = /data\n"
				     "root = /z/\n"), 0);     /* duplicate of /z */
	ct_assert_roots(&c, want, 5);
	bd_config_free(&c);
}
END_TEST

/* A file's roots replace the earlier ones; a file without roots keeps them. */
START_TEST(test_roots_replace_on_reload)
{
	static const char *const mark[] = { "/mark" };
	static const char *const fresh[] = { "/new1", "/new2" };
	bd_config c;

	ct_init_marked(&c);
	ck_assert_int_eq(ct_load(&c, "[io]\nqueue_depth = 3\n"), 0);
	ct_assert_roots(&c, mark, 1);
	ck_assert_str_eq(c.socket, "/tmp/mark.sock");
	ck_assert_int_eq(ct_load(&c, "[datasets]\nroot = /new1\nroot = /new2\n"), 0);
	ct_assert_roots(&c, fresh, 2);
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
	ck_assert_msg(ct_load(&c, text) == 0, "%s", ct_err);
	ck_assert_uint_eq(c.nroots, BD_CONFIG_MAX_ROOTS);
	ck_assert_str_eq(c.roots[BD_CONFIG_MAX_ROOTS - 1], "/r255");
	bd_config_free(&c);

	sprintf(text + o, "root = /one-too-many\n");
	bd_config_init(&c);
	ck_assert_int_eq(ct_load(&c, text), -EINVAL);
	ck_assert_str_eq(ct_err, NAME ":258: [datasets] root: more than 256 roots");
	ck_assert_uint_eq(c.nroots, 0);
	bd_config_free(&c);
	free(text);
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
	ck_assert_msg(ct_load(&c, text) == 0, "%s", ct_err);
	ck_assert_int_eq(bd_config_check_roots(&c, ct_err, sizeof(ct_err)), r);
	ck_assert_str_eq(ct_err, want);
	bd_config_free(&c);
}

/* Roots on disk: each failure names the root, where it was set, why and what to change. */
START_TEST(test_roots_checked)
{
	char text[4 * PATH_MAX], want[4 * PATH_MAX], ok[PATH_MAX + 8], gone[PATH_MAX + 8], file[PATH_MAX + 8];
	bd_config c;

	ct_make_tmpdir();
	snprintf(ok, sizeof(ok), "%s/ok", ct_tmpdir);
	snprintf(gone, sizeof(gone), "%s/gone", ct_tmpdir);
	snprintf(file, sizeof(file), "%s/plain", ct_tmpdir);
	ck_assert_int_eq(mkdir(ok, 0755), 0);
	ct_write_tmp("plain", "", 0);

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
	ck_assert_msg(ct_from_args(&c, ARGV("--root", ok, "--root", gone)) == 0, "%s", ct_err);
	ck_assert_ptr_null(c.root_lines);
	ck_assert_int_eq(bd_config_check_roots(&c, ct_err, sizeof(ct_err)), -ENOENT);
	snprintf(want, sizeof(want), "--root %s: No such file or directory: create it or drop the "
		 "flag", gone);
	ck_assert_str_eq(ct_err, want);
	bd_config_free(&c);

	/* a directory the daemon's user may not search */
	bd_config_init(&c);
	ck_assert_msg(ct_from_args(&c, ARGV("--root", ok)) == 0, "%s", ct_err);
	ck_assert_int_eq(bd_config_check_roots(&c, ct_err, sizeof(ct_err)), 0);
	ck_assert_int_eq(chmod(ok, 0700), 0);
	if (geteuid() == 0) {
		ck_assert_int_eq(check_roots_as_nobody(&c), -EACCES);
	} else {
		ck_assert_int_eq(bd_config_check_roots(&c, ct_err, sizeof(ct_err)), 0);
		ck_assert_int_eq(chmod(ok, 0300), 0);
		ck_assert_int_eq(bd_config_check_roots(&c, ct_err, sizeof(ct_err)), -EACCES);
		snprintf(want, sizeof(want), "--root %s: Permission denied: let the daemon's user "
			 "read and search it (r-x) or drop the flag", ok);
		ck_assert_str_eq(ct_err, want);
	}
	bd_config_free(&c);
	rmdir(ok);
	ct_remove_tmp("plain");
	rmdir(ct_tmpdir);
}
END_TEST

/* ---- the shipped file -------------------------------------------------- */

START_TEST(test_shipped_conf_is_defaults)
{
	bd_config c;

	bd_config_init(&c);
	ck_assert_msg(bd_config_load_file(&c, SHIPPED_CONF, ct_err, sizeof(ct_err)) == 0, "%s", ct_err);
	ct_assert_defaults(&c, ct_usable_cpus());
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
	ck_assert_msg(bd_config_load_string(&c, "uncommented", out, o, ct_err, sizeof(ct_err)) == 0,
		      "%s", ct_err);
	bd_config_init(&d);
	d.decode_threads = ct_usable_cpus();
	ct_assert_scalars_eq(&c, &d);
	bd_config_free(&d);
	/* the path keys have no literal default; their examples must be valid */
	ck_assert_str_eq(c.socket, "/run/batchd/batchd.sock");
	ct_assert_roots(&c, roots, 1);
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

/* ---- suite ------------------------------------------------------------- */

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
