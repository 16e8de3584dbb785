/* SPDX-License-Identifier: MIT */
/*
 * test-protocol-names.c - the Check suite for the protocol's names and
 * printed forms (proto/protocol.h): message type names, which the daemon
 * logs and writes into the ERROR a misbehaving client gets, so each is
 * checked exactly.
 */
#include <stdint.h>

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

static Suite *names_suite(void)
{
	Suite *s = suite_create("protocol-names");
	TCase *tc;

	tc = tcase_create("names");
	tcase_add_test(tc, test_type_names);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return prt_run(names_suite());
}
