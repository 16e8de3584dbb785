/* SPDX-License-Identifier: MIT */
/*
 * test-config-cli.c - batchd's command line (daemon/config/config_args.c)
 * and the default socket path: flags over the file whatever their order,
 * the default file and --no-config, --root replacing the file's roots,
 * --help and --version, every bad flag refused with its message and
 * nothing applied; the socket path's length limit, and the default
 * socket from RUNTIME_DIRECTORY, /run/batchd (as root) or
 * XDG_RUNTIME_DIR.
 *
 * Its own program because it is the configuration as a user types it,
 * not as a file holds it (test-config.c, test-config-errors.c); the
 * helpers are config-testlib.c's. Needs BATCHD_VERSION from the build.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include <check.h>

#include "config-testlib.h"
#include "units.h"

#ifndef BATCHD_VERSION
#error "define BATCHD_VERSION"
#endif

/* ---- helpers ----------------------------------------------------------- */

static void assert_contains(const char *s, const char *part)
{
	ck_assert_msg(strstr(s, part) != NULL, "message '%s' lacks '%s'", s, part);
}

/* ---- command line ------------------------------------------------------ */

/* ct_from_args() with default_file standing for SYSCONFDIR/batchd/batchd.conf. */
static int from_args_default(bd_config *c, char **argv, const char *default_file)
{
	int argc = 0;

	while (argv[argc])
		argc++;
	return bd_config_from_args(c, argc, argv, default_file, ct_err, sizeof(ct_err));
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

	ct_make_tmpdir();
	path = ct_write_tmp("site.conf", site_conf, sizeof(site_conf) - 1);

	/* file only */
	{
		char **argv = ARGV("-c", (char *)path);

		bd_config_init(&c);
		ck_assert_msg(ct_from_args(&c, argv) == 0, "%s", ct_err);
		ck_assert_str_eq(c.socket, "/run/site/b.sock");
		ck_assert_uint_eq(c.memory_budget, UINT64_C(2) << 30);
		ck_assert_int_eq(c.io_engine, BD_CFG_IO_PREAD);
		ck_assert_int_eq(c.log_level, LOG_NOTICE);
		ct_assert_roots(&c, site_roots, 2);
		ck_assert_uint_eq(c.decode_threads, ct_usable_cpus());
		bd_config_free(&c);
	}
	/* flags win, whatever their position; untouched file values stay */
	{
		char **argv = ARGV("--memory", "4G", "--log-level", "debug", "--config", (char *)path,
				   "--io-engine", "io_uring", "--socket", "/tmp/flag.sock",
				   "--direct", "on");

		bd_config_init(&c);
		ck_assert_msg(ct_from_args(&c, argv) == 0, "%s", ct_err);
		ck_assert_uint_eq(c.memory_budget, UINT64_C(4) << 30);
		ck_assert_int_eq(c.log_level, LOG_DEBUG);
		ck_assert_int_eq(c.io_engine, BD_CFG_IO_URING);
		ck_assert_int_eq(c.direct, BD_CFG_DIRECT_ON);
		ck_assert_str_eq(c.socket, "/tmp/flag.sock");
		ck_assert_uint_eq(c.queue_depth, 16);          /* from the file */
		ct_assert_roots(&c, site_roots, 2);               /* no --root: the file's */
		bd_config_free(&c);
	}
	ct_remove_tmp("site.conf");
	rmdir(ct_tmpdir);
}
END_TEST

/* No -c: the default file when it is there, defaults when it is not; never with --no-config. */
START_TEST(test_args_default_file)
{
	char path[PATH_MAX + 64], absent[PATH_MAX + 64];
	bd_config c;

	ct_make_tmpdir();
	snprintf(path, sizeof(path), "%s", ct_write_tmp("site.conf", site_conf, sizeof(site_conf) - 1));
	snprintf(absent, sizeof(absent), "%s/absent.conf", ct_tmpdir);

	bd_config_init(&c);
	ck_assert_msg(from_args_default(&c, ARGV("--log-level", "debug"), path) == 0, "%s", ct_err);
	ck_assert_str_eq(c.file, path);
	ck_assert(!c.no_file);
	ck_assert_uint_eq(c.memory_budget, UINT64_C(2) << 30);   /* the file's */
	ck_assert_int_eq(c.log_level, LOG_DEBUG);                 /* the flag wins */
	bd_config_free(&c);

	bd_config_init(&c);
	ck_assert_msg(from_args_default(&c, ARGV("--log-level", "debug"), absent) == 0, "%s", ct_err);
	ck_assert_ptr_null(c.file);
	ck_assert(!c.no_file);
	ck_assert_uint_eq(c.memory_budget, 0);
	bd_config_free(&c);

	bd_config_init(&c);
	ck_assert_msg(from_args_default(&c, ARGV("--no-config"), path) == 0, "%s", ct_err);
	ck_assert_ptr_null(c.file);
	ck_assert(c.no_file);
	ct_assert_defaults(&c, ct_usable_cpus());
	bd_config_free(&c);

	/* -c /dev/null: an empty file, the other way to ask for none */
	bd_config_init(&c);
	ck_assert_msg(from_args_default(&c, ARGV("-c", "/dev/null"), path) == 0, "%s", ct_err);
	ck_assert_str_eq(c.file, "/dev/null");
	ct_assert_defaults(&c, ct_usable_cpus());
	bd_config_free(&c);

	/* an explicit file that is missing stays an error, default or not */
	ct_init_marked(&c);
	ck_assert_int_eq(from_args_default(&c, ARGV("-c", absent), path), -ENOENT);
	{
		char want[PATH_MAX + 128];

		snprintf(want, sizeof(want), "%s: No such file or directory", absent);
		ck_assert_str_eq(ct_err, want);
	}
	ct_assert_marked(&c);
	bd_config_free(&c);

	/* the later of -c and --no-config wins */
	bd_config_init(&c);
	ck_assert_msg(from_args_default(&c, ARGV("--no-config", "-c", path), NULL) == 0, "%s", ct_err);
	ck_assert_str_eq(c.file, path);
	ck_assert(!c.no_file);
	bd_config_free(&c);
	bd_config_init(&c);
	ck_assert_msg(from_args_default(&c, ARGV("-c", path, "--no-config"), path) == 0, "%s", ct_err);
	ck_assert_ptr_null(c.file);
	ck_assert(c.no_file);
	bd_config_free(&c);

	/* a default file that is there but not a file batchd can read is an error */
	ct_init_marked(&c);
	ck_assert_int_eq(from_args_default(&c, ARGV("--memory", "1G"), ct_tmpdir), -EISDIR);
	ct_assert_marked(&c);
	bd_config_free(&c);
	ct_remove_tmp("site.conf");
	rmdir(ct_tmpdir);
}
END_TEST

START_TEST(test_args_root_replaces)
{
	static const char *const want[] = { "/flag/x", "/flag/y" };
	const char *path;
	bd_config c;

	ct_make_tmpdir();
	path = ct_write_tmp("site.conf", site_conf, sizeof(site_conf) - 1);
	{
		char **argv = ARGV("--root", "/flag/x/", "-c", (char *)path, "--root", "//flag//y",
				   "--root", "/flag/x");

		bd_config_init(&c);
		ck_assert_msg(ct_from_args(&c, argv) == 0, "%s", ct_err);
		ct_assert_roots(&c, want, 2);
		ck_assert_uint_eq(c.memory_budget, UINT64_C(2) << 30);
		bd_config_free(&c);
	}
	/* without a file too */
	{
		char **argv = ARGV("--root", "/flag/x", "--root", "/flag/y");

		bd_config_init(&c);
		ck_assert_int_eq(ct_from_args(&c, argv), 0);
		ct_assert_roots(&c, want, 2);
		bd_config_free(&c);
	}
	ct_remove_tmp("site.conf");
	rmdir(ct_tmpdir);
}
END_TEST

START_TEST(test_args_none)
{
	char *argv[] = { "batchd", NULL };
	bd_config c;

	bd_config_init(&c);
	ck_assert_int_eq(ct_from_args(&c, argv), 0);
	ct_assert_defaults(&c, ct_usable_cpus());
	/* getopt state is reset: a second parse sees its flags */
	{
		char **again = ARGV("--memory", "32M");

		ck_assert_int_eq(ct_from_args(&c, again), 0);
		ck_assert_uint_eq(c.memory_budget, UINT64_C(32) << 20);
	}
	bd_config_free(&c);
}
END_TEST

/* Run ct_from_args with stdout captured into out. */
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
	r = ct_from_args(c, argv);
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

	ct_init_marked(&c);
	ck_assert_int_eq(from_args_stdout(&c, ARGV("--help"), out, sizeof(out)), 1);
	ct_assert_prefix(out, "Usage: batchd [OPTION]...\n");
	assert_contains(out, "--io-engine ENGINE");
	ck_assert_int_eq(from_args_stdout(&c, ARGV("-h"), out, sizeof(out)), 1);
	ct_assert_prefix(out, "Usage: batchd");
	ck_assert_int_eq(from_args_stdout(&c, ARGV("--version"), out, sizeof(out)), 1);
	ck_assert_str_eq(out, "batchd " BATCHD_VERSION "\n");
	ck_assert_int_eq(from_args_stdout(&c, ARGV("--memory", "32M", "-V"), out, sizeof(out)), 1);
	ck_assert_str_eq(out, "batchd " BATCHD_VERSION "\n");
	ct_assert_marked(&c);   /* --help/--version apply nothing */
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
	ct_init_marked(&c);
	ck_assert_int_eq(ct_from_args(&c, argv), t->r);
	if (n > 3 && !strcmp(t->message + n - 3, "..."))
		ck_assert_msg(!strncmp(ct_err, t->message, n - 3), "'%s' vs '%s'", ct_err, t->message);
	else
		ck_assert_str_eq(ct_err, t->message);
	ct_assert_marked(&c);
	bd_config_free(&c);
}
END_TEST

START_TEST(test_args_bad_file_content)
{
	static const char text[] = "[io]\nengine = fast\n";
	char want[PATH_MAX + 128];
	const char *path;
	bd_config c;

	ct_make_tmpdir();
	path = ct_write_tmp("bad.conf", text, sizeof(text) - 1);
	ct_init_marked(&c);
	ck_assert_int_eq(ct_from_args(&c, ARGV("--memory", "4G", "-c", (char *)path)), -EINVAL);
	snprintf(want, sizeof(want), "%s:2: [io] engine: 'fast' is not one of auto, io_uring, pread", path);
	ck_assert_str_eq(ct_err, want);
	ct_assert_marked(&c);   /* and --memory was not applied either */
	bd_config_free(&c);
	ct_remove_tmp("bad.conf");
	rmdir(ct_tmpdir);
}
END_TEST

/* ---- sockets ----------------------------------------------------------- */

START_TEST(test_socket_length)
{
	char path[256], text[512];
	bd_config c;

	ct_long_path(path, BD_CONFIG_SOCKET_MAX);
	snprintf(text, sizeof(text), "[daemon]\nsocket = %s\n", path);
	bd_config_init(&c);
	ck_assert_msg(ct_load(&c, text) == 0, "%s", ct_err);
	ck_assert_uint_eq(strlen(c.socket), 107);
	bd_config_free(&c);

	ct_long_path(path, BD_CONFIG_SOCKET_MAX + 1);
	snprintf(text, sizeof(text), "[daemon]\n\nsocket = %s\n", path);
	ct_init_marked(&c);
	ck_assert_int_eq(ct_load(&c, text), -EINVAL);
	ct_assert_prefix(ct_err, NAME ":3: [daemon] socket: '/aaa");
	assert_contains(ct_err, "is 108 bytes long; a Unix socket path holds at most 107");
	ct_assert_marked(&c);

	ck_assert_int_eq(ct_from_args(&c, ARGV("--socket", path)), -EINVAL);
	ct_assert_prefix(ct_err, "--socket: '/aaa");
	assert_contains(ct_err, "...' is 108 bytes long; a Unix socket path holds at most 107");
	ct_assert_marked(&c);
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
	ct_long_path(dir, 95);
	setenv("RUNTIME_DIRECTORY", dir, 1);
	ck_assert_int_eq(bd_config_default_socket(buf, sizeof(buf)), 0);
	ck_assert_uint_eq(strlen(buf), 107);
	ct_long_path(dir, 96);
	setenv("RUNTIME_DIRECTORY", dir, 1);
	strcpy(buf, "untouched");
	ck_assert_int_eq(bd_config_default_socket(buf, sizeof(buf)), -ENAMETOOLONG);
	ck_assert_str_eq(buf, "untouched");
	clear_socket_env();
}
END_TEST

/* ---- suite ------------------------------------------------------------- */

static Suite *config_cli_suite(void)
{
	Suite *s = suite_create("config-cli");
	TCase *tc;

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

	sr = srunner_create(config_cli_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
