/* SPDX-License-Identifier: MIT */
/*
 * test-config-limits.c - the settings that guard the control plane
 * against hostile clients: [limits] client_queue, handshake_timeout,
 * connections_per_uid and max_connections, [access] admin_uid and
 * admin_gid, [metrics] sessions. Their defaults, every accepted form, and
 * each refusal with the exact FILE:LINE message an operator reads (the
 * rest of the grammar is test-config.c's and test-config-errors.c's).
 * And the sizes those limits and the budget are written in
 * (lib/proto/units.c, shared by the daemon and the tools): every unit, the
 * blanks and cases allowed, every refusal.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "config.h"
#include "units.h"

#define NAME "t.conf"

static char err[1024];

static int load(bd_config *c, const char *text)
{
	err[0] = '\0';
	return bd_config_load_string(c, NAME, text, strlen(text), err, sizeof(err));
}

START_TEST(test_defaults)
{
	bd_config c;

	bd_config_init(&c);
	ck_assert_uint_eq(c.client_queue, UINT64_C(1) << 20);
	ck_assert_uint_eq(c.handshake_timeout, 5);
	ck_assert_uint_eq(c.connections_per_uid, 64);
	ck_assert_uint_eq(c.max_connections, 1024);
	ck_assert_uint_eq(c.requests_per_uid, 1000);
	ck_assert_uint_eq(c.nadmin_uids, 0);
	ck_assert_uint_eq(c.nadmin_gids, 0);
	ck_assert(!c.metrics_sessions);
	bd_config_free(&c);
}
END_TEST

START_TEST(test_values)
{
	bd_config c;

	bd_config_init(&c);
	ck_assert_msg(load(&c, "[limits]\nclient_queue = 64K\nhandshake_timeout = 0\n"
			  "connections_per_uid = 0\nmax_connections = 65536\nrequests_per_uid = 0\n"
			  "[access]\nadmin_uid = 0\nadmin_uid = 4242\nadmin_gid = 0\n"
			  "[metrics]\nsessions = yes\n") == 0, "%s", err);
	ck_assert_uint_eq(c.client_queue, 65536);
	ck_assert_uint_eq(c.handshake_timeout, 0);
	ck_assert_uint_eq(c.connections_per_uid, 0);
	ck_assert_uint_eq(c.max_connections, 65536);
	ck_assert_uint_eq(c.requests_per_uid, 0);
	ck_assert_uint_eq(c.nadmin_uids, 2);
	ck_assert_uint_eq(c.admin_uids[0], 0);
	ck_assert_uint_eq(c.admin_uids[1], 4242);
	ck_assert_uint_eq(c.nadmin_gids, 1);
	ck_assert(c.metrics_sessions);

	/* A later file without admin lines keeps them; one with them replaces them. */
	ck_assert_msg(load(&c, "[limits]\nclient_queue = 1G\n[metrics]\nsessions = off\n") == 0,
		      "%s", err);
	ck_assert_uint_eq(c.client_queue, UINT64_C(1) << 30);
	ck_assert_uint_eq(c.nadmin_uids, 2);
	ck_assert(!c.metrics_sessions);
	ck_assert_msg(load(&c, "[access]\nadmin_uid = root\n") == 0, "%s", err);
	ck_assert_uint_eq(c.nadmin_uids, 1);
	ck_assert_uint_eq(c.admin_uids[0], 0);
	bd_config_free(&c);
}
END_TEST

static const char *const bools[][2] = {
	{ "yes", "1" }, { "true", "1" }, { "on", "1" }, { "1", "1" },
	{ "no", "0" }, { "false", "0" }, { "off", "0" }, { "0", "0" },
};

START_TEST(test_bool)
{
	char text[64];
	bd_config c;

	bd_config_init(&c);
	c.metrics_sessions = bools[_i][1][0] == '0';
	snprintf(text, sizeof(text), "[metrics]\nsessions = %s\n", bools[_i][0]);
	ck_assert_msg(load(&c, text) == 0, "%s", err);
	ck_assert_int_eq(c.metrics_sessions, bools[_i][1][0] == '1');
	bd_config_free(&c);
}
END_TEST

static const struct bad {
	const char *text, *message;
} bad[] = {
	{ "[limits]\nclient_queue = 2G\n",
	  NAME ":2: [limits] client_queue: '2G' is too large (at most 1G)" },
	{ "[limits]\nclient_queue = 1K\n",
	  NAME ":2: [limits] client_queue: '1K' is below the minimum of 64K" },
	{ "[limits]\nclient_queue = lots\n",
	  NAME ":2: [limits] client_queue: 'lots' is not a size (" BP_SIZE_FORMS ")" },
	{ "[limits]\n\nhandshake_timeout = 3601\n",
	  NAME ":3: [limits] handshake_timeout: '3601' is out of range (allowed 0..3600)" },
	{ "[limits]\nhandshake_timeout = 1s\n",
	  NAME ":2: [limits] handshake_timeout: '1s' is not a whole number (allowed 0..3600)" },
	{ "[limits]\nconnections_per_uid = -1\n",
	  NAME ":2: [limits] connections_per_uid: '-1' is not a whole number (allowed 0..65536)" },
	{ "[limits]\nmax_connections = 0\n",
	  NAME ":2: [limits] max_connections: '0' is out of range (allowed 1..65536)" },
	{ "[limits]\nmax_connections = 65537\n",
	  NAME ":2: [limits] max_connections: '65537' is out of range (allowed 1..65536)" },
	{ "[access]\nadmin_uid = no-such-user-xyz\n",
	  NAME ":2: [access] admin_uid: 'no-such-user-xyz' is not a known user name or number" },
	{ "[access]\nadmin_gid = no-such-group-xyz\n",
	  NAME ":2: [access] admin_gid: 'no-such-group-xyz' is not a known group name or number" },
	{ "[metrics]\nsessions = maybe\n",
	  NAME ":2: [metrics] sessions: 'maybe' is not yes or no (also true/false, on/off, 1/0)" },
	{ "[limits]\nclient_q = 1M\n",
	  NAME ":2: unknown key 'client_q' in [limits] (known: sessions_per_uid, memory_per_uid, "
	  "client_queue, handshake_timeout, connections_per_uid, max_connections, requests_per_uid)" },
	{ "[limits]\nrequests_per_uid = 1000001\n",
	  NAME ":2: [limits] requests_per_uid: '1000001' is out of range (allowed 0..1000000)" },
	{ "[access]\nadmin = 0\n",
	  NAME ":2: unknown key 'admin' in [access] (known: allow_uid, allow_gid, admin_uid, admin_gid)" },
};

/* A bad value is refused with its line and leaves the configuration as it was. */
START_TEST(test_bad)
{
	bd_config c;

	bd_config_init(&c);
	ck_assert_int_eq(load(&c, bad[_i].text), -EINVAL);
	ck_assert_str_eq(err, bad[_i].message);
	ck_assert_uint_eq(c.client_queue, UINT64_C(1) << 20);
	ck_assert_uint_eq(c.handshake_timeout, 5);
	ck_assert_uint_eq(c.max_connections, 1024);
	ck_assert_uint_eq(c.nadmin_uids, 0);
	bd_config_free(&c);
}
END_TEST

/* ---- sizes (bp_parse_size) ---------------------------------------------- */

static const struct size_case {
	const char *text;
	uint64_t bytes;
} sizes[] = {
	{ "0", 0 },
	{ "4096", 4096 },
	{ "18446744073709551615", UINT64_MAX },
	{ "512B", 512 },
	{ "512 b", 512 },
	{ "1K", 1024 },
	{ "1k", 1024 },
	{ "1KiB", 1024 },
	{ "1kib", 1024 },
	{ "1KB", 1000 },
	{ "1kb", 1000 },
	{ "1Kb", 1000 },
	{ "64M", UINT64_C(64) << 20 },
	{ "64MiB", UINT64_C(64) << 20 },
	{ "64MB", UINT64_C(64000000) },
	{ "2 GB", UINT64_C(2000000000) },
	{ "2\tGB", UINT64_C(2000000000) },
	{ "2  GiB", UINT64_C(2) << 30 },
	{ "2G", UINT64_C(2) << 30 },
	{ "2g", UINT64_C(2) << 30 },
	{ "3T", UINT64_C(3) << 40 },
	{ "3TiB", UINT64_C(3) << 40 },
	{ "3TB", UINT64_C(3000000000000) },
	{ "1.5G", UINT64_C(3) << 29 },
	{ "1.5 GiB", UINT64_C(3) << 29 },
	{ "1.5GB", UINT64_C(1500000000) },
	{ "0.5K", 512 },
	{ "1.0009765625K", 1025 },           /* exact: 1 + 1/1024 */
	{ "1.1K", 1126 },                    /* 1126.4: rounded down */
	{ "0.000000000000000000001T", 0 },   /* digits past the 18th are ignored */
	{ "15.99999999999999999T", UINT64_C(17592186044415) },
	{ "18446744073709551.615KB", UINT64_MAX },
	{ "1.50 GiB", UINT64_C(3) << 29 },   /* what bp_format_size writes parses back */
};

START_TEST(test_size_forms)
{
	uint64_t v = 42;

	ck_assert_msg(bp_parse_size(sizes[_i].text, &v) == 0, "'%s' refused", sizes[_i].text);
	ck_assert_msg(v == sizes[_i].bytes, "'%s' is %llu, not %llu", sizes[_i].text,
		      (unsigned long long)v, (unsigned long long)sizes[_i].bytes);
}
END_TEST

static const struct size_refusal {
	const char *text;
	int r;
} size_refusals[] = {
	{ "", -EINVAL },
	{ " 1G", -EINVAL },          /* leading blank */
	{ "1G ", -EINVAL },          /* trailing blank */
	{ "-1G", -EINVAL },
	{ "+1G", -EINVAL },
	{ "G", -EINVAL },
	{ ".5G", -EINVAL },
	{ "1.G", -EINVAL },
	{ "1.5", -EINVAL },          /* a fraction of a byte */
	{ "1.5B", -EINVAL },
	{ "1Q", -EINVAL },
	{ "1GG", -EINVAL },
	{ "1Gi", -EINVAL },
	{ "1iB", -EINVAL },
	{ "1P", -EINVAL },           /* no P, E: more than any machine here holds */
	{ "1GiBs", -EINVAL },
	{ "1 G B", -EINVAL },
	{ "1,5G", -EINVAL },
	{ "0x10", -EINVAL },
	{ "1e9", -EINVAL },
	{ "99999999999999999999Q", -EINVAL },  /* junk wins over overflow */
	{ "18446744073709551616", -ERANGE },   /* 2^64 */
	{ "99999999999999999999", -ERANGE },
	{ "16777216TiB", -ERANGE },            /* 2^64 */
	{ "18446744073709552KB", -ERANGE },
	{ "18446744073709551615.5K", -ERANGE },
};

/* Refused with the errno, and *ret untouched. */
START_TEST(test_size_refused)
{
	uint64_t v = 42;

	ck_assert_msg(bp_parse_size(size_refusals[_i].text, &v) == size_refusals[_i].r,
		      "'%s' not refused with %d", size_refusals[_i].text, size_refusals[_i].r);
	ck_assert_uint_eq(v, 42);
}
END_TEST

/* The file's sizes are the same sizes, and a refusal lists the forms. */
START_TEST(test_size_in_file)
{
	bd_config c;

	bd_config_init(&c);
	ck_assert_msg(load(&c, "[memory]\nbudget = 2 GB\ncache = 512 MiB\n"
			  "[limits]\nmemory_per_uid = 1.5G\nclient_queue = 100KB\n") == 0, "%s", err);
	ck_assert_uint_eq(c.memory_budget, UINT64_C(2000000000));
	ck_assert_uint_eq(c.cache_size, UINT64_C(512) << 20);
	ck_assert_uint_eq(c.memory_per_uid, UINT64_C(3) << 29);
	ck_assert_uint_eq(c.client_queue, 100000);
	ck_assert_int_eq(load(&c, "[memory]\nbudget = 2 Gb it\n"), -EINVAL);
	ck_assert_str_eq(err, NAME ":2: [memory] budget: '2 Gb it' is not a size (a number of "
			 "bytes, or a number with a unit: K, M, G, T or KiB, MiB, GiB, TiB (powers of "
			 "1024), KB, MB, GB, TB (powers of 1000), e.g. 4096, 512M, 1.5 GiB, 2GB)");
	ck_assert_int_eq(load(&c, "[memory]\nbudget = 20000000T\n"), -EINVAL);
	ck_assert_str_eq(err, NAME ":2: [memory] budget: '20000000T' is too large");
	ck_assert_uint_eq(c.memory_budget, UINT64_C(2000000000));
	bd_config_free(&c);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("config-limits");
	TCase *tc = tcase_create("limits");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_values);
	tcase_add_loop_test(tc, test_bool, 0, sizeof(bools) / sizeof(bools[0]));
	tcase_add_loop_test(tc, test_bad, 0, sizeof(bad) / sizeof(bad[0]));
	suite_add_tcase(s, tc);
	tc = tcase_create("sizes");
	tcase_add_loop_test(tc, test_size_forms, 0, sizeof(sizes) / sizeof(sizes[0]));
	tcase_add_loop_test(tc, test_size_refused, 0,
			    sizeof(size_refusals) / sizeof(size_refusals[0]));
	tcase_add_test(tc, test_size_in_file);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
