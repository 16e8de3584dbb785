/* SPDX-License-Identifier: MIT */
/*
 * test-protocol-names.c - the Check suite for the protocol's names and
 * printed forms (lib/proto/protocol.h): message type names, the shuffle modes'
 * name table and parser, and device UUIDs as nvidia-smi prints them.
 *
 * These strings leave the process: the daemon logs them and writes them
 * into ERROR replies and the status JSON that `batchctl status` prints,
 * and operators match a UUID there against `nvidia-smi -L` by eye or by
 * script. So each is checked exactly, the parser is checked to be as
 * strict as its table (no case folding, no prefixes, no trailing blanks)
 * and to leave its out-parameter alone on failure, and the UUID formatter
 * to stay within a short buffer.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "protocol-testlib.h"

START_TEST(test_type_names)
{
	static const char *const want[] = { "HELLO", "HELLO_OK", "OPEN", "READY", "ERROR",
					    "CLOSE", "CLOSED", "STATUS", "STATUS_REPLY",
					    "GOODBYE", "METRICS", "METRICS_REPLY" };

	for (int t = TYPE_FIRST; t <= TYPE_LAST; t++)
		ck_assert_str_eq(bp_msg_type_name((uint16_t)t), want[t - TYPE_FIRST]);
	ck_assert_str_eq(bp_msg_type_name(0), "UNKNOWN");
	ck_assert_str_eq(bp_msg_type_name(TYPE_LAST + 1), "UNKNOWN");
	ck_assert_str_eq(bp_msg_type_name(0xffff), "UNKNOWN");
}
END_TEST

/* ---- shuffle modes ------------------------------------------------------ */

START_TEST(test_shuffle_names)
{
	static const char *const want[BP_SHUFFLE_MODES] = {
		[BP_SHUFFLE_NONE] = "none",
		[BP_SHUFFLE_GLOBAL] = "global",
		[BP_SHUFFLE_BLOCK] = "block",
	};
	static const unsigned bad[] = { BP_SHUFFLE_MODES, BP_SHUFFLE_MODES + 1, 255, 256,
					0x7fffffffu, 0xffffffffu };

	for (unsigned m = 0; m < BP_SHUFFLE_MODES; m++)
		ck_assert_str_eq(bp_shuffle_name(m), want[m]);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_str_eq(bp_shuffle_name(bad[i]), "?");
}
END_TEST

START_TEST(test_shuffle_roundtrip)
{
	/* Every mode: name -> parse -> the same mode, and no two modes share a name. */
	for (unsigned m = 0; m < BP_SHUFFLE_MODES; m++) {
		enum bp_shuffle got;

		memset(&got, 0xa5, sizeof(got));
		ck_assert_int_eq(bp_shuffle_parse(bp_shuffle_name(m), &got), 0);
		ck_assert_uint_eq((unsigned)got, m);
		for (unsigned o = 0; o < m; o++)
			ck_assert_str_ne(bp_shuffle_name(m), bp_shuffle_name(o));
	}
}
END_TEST

START_TEST(test_shuffle_parse_rejects)
{
	/* Near misses of every name, and what bp_shuffle_name says for a non-mode. */
	static const char *const bad[] = {
		"", "Global", "GLOBAL", "None", "BLOCK", "none ", " none", "none\n", "block\t",
		"blocks", "globa", "glob", "non", "b", "?", "0", "1", "2", "none,block",
		"global\x01", "\xff", "\x7f", "n\xc3\xb6ne", "random", "shuffle",
	};
	enum bp_shuffle got, untouched;

	memset(&got, 0xa5, sizeof(got));
	untouched = got;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(bp_shuffle_parse(bad[i], &got) == -EINVAL, "\"%s\" accepted", bad[i]);
		ck_assert_mem_eq(&got, &untouched, sizeof(got));
	}
}
END_TEST

/* ---- device UUIDs ------------------------------------------------------- */

/* Bytes with every hex digit in them, letters included, and their printed form. */
static const uint8_t uuid[16] = { 0xde, 0xad, 0xbe, 0xef, 0x01, 0x23, 0x45, 0x67,
				  0x89, 0xab, 0xcd, 0xef, 0xfe, 0xdc, 0xba, 0x98 };
static const char uuid_text[] = "GPU-deadbeef-0123-4567-89ab-cdeffedcba98";

/* 8-4-4-4-12 lowercase hex after "GPU-", as `nvidia-smi -L` prints it. */
static void assert_uuid_shape(const char *s)
{
	ck_assert_uint_eq(strlen(s), 40);
	ck_assert_mem_eq(s, "GPU-", 4);
	for (size_t i = 4; i < 40; i++) {
		if (i == 12 || i == 17 || i == 22 || i == 27)
			ck_assert_msg(s[i] == '-', "%s: no dash at %zu", s, i);
		else
			ck_assert_msg((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'),
				      "%s: not lowercase hex at %zu", s, i);
	}
}

START_TEST(test_uuid_str)
{
	static const uint8_t zero[16], ones[16] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
						    0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
						    0xff, 0xff, 0xff, 0xff };
	char buf[64];

	memset(buf, 0x5a, sizeof(buf));
	ck_assert_ptr_eq(bp_cuda_uuid_str(uuid, buf, sizeof(buf)), buf);
	ck_assert_str_eq(buf, uuid_text);
	assert_uuid_shape(buf);
	/* 41 bytes with the NUL, and not one more touched. */
	for (size_t i = 41; i < sizeof(buf); i++)
		ck_assert_uint_eq((uint8_t)buf[i], 0x5a);

	ck_assert_str_eq(bp_cuda_uuid_str(zero, buf, 41),
			 "GPU-00000000-0000-0000-0000-000000000000");
	assert_uuid_shape(buf);
	ck_assert_str_eq(bp_cuda_uuid_str(ones, buf, 41),
			 "GPU-ffffffff-ffff-ffff-ffff-ffffffffffff");
	assert_uuid_shape(buf);
}
END_TEST

START_TEST(test_uuid_str_truncates)
{
	char buf[48];

	/* Up to the exact fit: the longest prefix that fits, NUL-terminated, nothing past len. */
	for (size_t len = 1; len <= sizeof(uuid_text); len++) {
		memset(buf, 0x5a, sizeof(buf));
		ck_assert_ptr_eq(bp_cuda_uuid_str(uuid, buf, len), buf);
		ck_assert_uint_eq(strlen(buf), len - 1);
		ck_assert_mem_eq(buf, uuid_text, len - 1);
		for (size_t i = len; i < sizeof(buf); i++)
			ck_assert_uint_eq((uint8_t)buf[i], 0x5a);
	}
	/* No room at all: nothing written. */
	memset(buf, 0x5a, sizeof(buf));
	ck_assert_ptr_eq(bp_cuda_uuid_str(uuid, buf, 0), buf);
	for (size_t i = 0; i < sizeof(buf); i++)
		ck_assert_uint_eq((uint8_t)buf[i], 0x5a);
}
END_TEST

static Suite *names_suite(void)
{
	Suite *s = suite_create("protocol-names");
	TCase *tc;

	tc = tcase_create("names");
	tcase_add_test(tc, test_type_names);
	tcase_add_test(tc, test_shuffle_names);
	tcase_add_test(tc, test_shuffle_roundtrip);
	tcase_add_test(tc, test_shuffle_parse_rejects);
	suite_add_tcase(s, tc);

	tc = tcase_create("uuid");
	tcase_add_test(tc, test_uuid_str);
	tcase_add_test(tc, test_uuid_str_truncates);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return prt_run(names_suite());
}
