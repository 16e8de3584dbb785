/* SPDX-License-Identifier: MIT */
/*
 * test-config-errors.c - what daemon/config/config.c refuses in a
 * configuration file: each bad value, unknown section or key and syntax
 * error, over-long lines, NUL bytes, files that are missing, a directory
 * or too big.
 *
 * Every rejected input is checked for its errno, for the exact start of
 * its message ("NAME:LINE:") and for the words that say what is allowed,
 * and for leaving the configuration untouched. Its own program because
 * the refusals are most of the grammar's cases (tables of them) and read
 * apart from what test-config.c accepts; the helpers are config-testlib.c's.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>

#include "config-testlib.h"
#include "units.h"

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
	{ "[io]\nfirst_pass = sequential\n", 2, "[io] first_pass: 'sequential' is not one of stream, batches" },
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
	{ "[images]\nmax_pixels = 1000\n", 2, "[images] max_pixels: '1000' is below the minimum of 64K" },
	{ "[images]\nmax_pixels = 2G\n", 2, "[images] max_pixels: '2G' is" },
	{ "[images]\nmax_pixels = lots\n", 2, "[images] max_pixels: 'lots' is" },
	/* line numbers count comments, blank lines and CRLF lines */
	{ "# c\n\n; c\r\n[io]\r\n\n  # c\nengine = auto\nqueue_depth = 0\n", 8, "[io] queue_depth: '0'" },
};

/* t->text is refused with -EINVAL and "t.conf:LINE: MESSAGE...", nothing applied. */
static void expect_bad_case(const struct bad_case *t)
{
	char prefix[64];
	bd_config c;

	ct_init_marked(&c);
	snprintf(prefix, sizeof(prefix), NAME ":%d: ", t->line);
	ct_err[0] = '\0';
	ck_assert_int_eq(ct_load(&c, t->text), -EINVAL);
	ct_assert_prefix(ct_err, prefix);
	ct_assert_prefix(ct_err + strlen(prefix), t->message);
	ct_assert_marked(&c);   /* nothing applied */
	bd_config_free(&c);
}

START_TEST(test_bad_value)
{
	expect_bad_case(&bad_values[_i]);
}
END_TEST

/* ---- unknown sections and keys ----------------------------------------- */

static const struct bad_case unknown_cases[] = {
	{ "[foo]\n", 1, "unknown section 'foo' (known: [daemon] [datasets] [memory] [io] [decode] [images] [session] [limits] [access] [metrics] [remote] [cache])" },
	{ "[io]\nqueue_depth = 1\n\n[bogus]\n", 4, "unknown section 'bogus'" },
	{ "[IO]\nengine = auto\n", 1, "unknown section 'IO'" },
	{ "[ io ]\n", 1, "unknown section ' io '" },
	{ "[]\n", 1, "unknown section ''" },
	{ "[io] extra\n", 1, "text after ']' in a section header" },
	{ "[io]\nengine = auto\ndepth = 3\n", 3, "unknown key 'depth' in [io] (known: engine, direct, first_pass, queue_depth, session_blocks, threads)" },
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
	ct_long_path(root, n);
	snprintf(text, sizeof(text), "[datasets]\nroot = %s   # trailing comment\n", root);
	bd_config_init(&c);
	ck_assert_msg(ct_load(&c, text) == 0, "%s", ct_err);
	ck_assert_uint_eq(c.nroots, 1);
	ck_assert_str_eq(c.roots[0], root);
	bd_config_free(&c);

	/* one more: refused with its line, nothing applied */
	ct_long_path(root, n + 1);
	snprintf(text, sizeof(text), "[datasets]\n\nroot = %s\n[io]\nqueue_depth = 5\n", root);
	ct_init_marked(&c);
	ck_assert_int_eq(ct_load(&c, text), -EINVAL);
	snprintf(want, sizeof(want), NAME ":3: line is %d characters long (at most %d",
		 BD_CONFIG_MAX_LINE + 1, BD_CONFIG_MAX_LINE);
	ct_assert_prefix(ct_err, want);
	ct_assert_marked(&c);
	bd_config_free(&c);

	/* long comments cost nothing */
	memset(text, '#', 900);
	strcpy(text + 900, "\n[io]\nqueue_depth = 9\n");
	bd_config_init(&c);
	ck_assert_msg(ct_load(&c, text) == 0, "%s", ct_err);
	ck_assert_uint_eq(c.queue_depth, 9);
	bd_config_free(&c);
}
END_TEST

START_TEST(test_nul_byte)
{
	static const char text[] = "[io]\nengine = a\0uto\n";
	bd_config c;

	ct_init_marked(&c);
	ck_assert_int_eq(bd_config_load_string(&c, NAME, text, sizeof(text) - 1, ct_err, sizeof(ct_err)),
			 -EINVAL);
	ck_assert_str_eq(ct_err, NAME ":2: NUL byte in line");
	ct_assert_marked(&c);
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
	strcpy(ct_err, "untouched");
	ck_assert_int_eq(ct_load(&c, "[io]\nqueue_depth = 3\n"), 0);
	ck_assert_str_eq(ct_err, "untouched");
	bd_config_free(&c);
}
END_TEST

/* ---- files ------------------------------------------------------------- */

START_TEST(test_missing_file)
{
	bd_config c;

	ct_init_marked(&c);
	ck_assert_int_eq(bd_config_load_file(&c, "/nonexistent/batchd.conf", ct_err, sizeof(ct_err)),
			 -ENOENT);
	ck_assert_str_eq(ct_err, "/nonexistent/batchd.conf: No such file or directory");
	ct_assert_marked(&c);
	bd_config_free(&c);
}
END_TEST

START_TEST(test_file_errors_name_the_file)
{
	static const char text[] = "[io]\n\nthreads = 99\n";
	char want[PATH_MAX + 128];
	const char *path;
	bd_config c;

	ct_make_tmpdir();
	path = ct_write_tmp("bad.conf", text, sizeof(text) - 1);
	ct_init_marked(&c);
	ck_assert_int_eq(bd_config_load_file(&c, path, ct_err, sizeof(ct_err)), -EINVAL);
	snprintf(want, sizeof(want), "%s:3: [io] threads: '99' is out of range (allowed 1..64)", path);
	ck_assert_str_eq(ct_err, want);
	ct_assert_marked(&c);

	/* a directory */
	ck_assert_int_eq(bd_config_load_file(&c, ct_tmpdir, ct_err, sizeof(ct_err)), -EISDIR);
	snprintf(want, sizeof(want), "%s: Is a directory", ct_tmpdir);
	ck_assert_str_eq(ct_err, want);
	ct_assert_marked(&c);
	bd_config_free(&c);
	ct_remove_tmp("bad.conf");
	rmdir(ct_tmpdir);
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
	ct_make_tmpdir();
	path = ct_write_tmp("big.conf", text, len);
	ct_init_marked(&c);
	ck_assert_int_eq(bd_config_load_file(&c, path, ct_err, sizeof(ct_err)), -EFBIG);
	snprintf(want, sizeof(want), "%s: larger than 1048576 bytes", path);
	ck_assert_str_eq(ct_err, want);
	ct_assert_marked(&c);
	/* one byte less is fine (all blank lines) */
	ck_assert_int_eq(bd_config_load_string(&c, "s", text, len - 1, ct_err, sizeof(ct_err)), 0);
	ct_assert_marked(&c);
	bd_config_free(&c);
	free(text);
	ct_remove_tmp("big.conf");
	rmdir(ct_tmpdir);
}
END_TEST

/* ---- suite ------------------------------------------------------------- */

static Suite *config_errors_suite(void)
{
	Suite *s = suite_create("config-errors");
	TCase *tc;

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

	tc = tcase_create("files");
	tcase_add_test(tc, test_missing_file);
	tcase_add_test(tc, test_file_errors_name_the_file);
	tcase_add_test(tc, test_file_too_big);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	sr = srunner_create(config_errors_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
