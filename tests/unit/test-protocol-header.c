/* SPDX-License-Identifier: MIT */
/*
 * test-protocol-header.c - the Check suite for the protocol's common
 * header (lib/proto/protocol.c): its byte layout, and what bp_msg_header_decode
 * turns down before any body decoder sees a datagram (wrong magic, unknown
 * type, a length that disagrees with the datagram or exceeds BP_MSG_MAX,
 * non-zero reserved bytes).
 *
 * Version negotiation lives here too, because it starts in the header: a
 * version this build does not speak is -EPROTONOSUPPORT from the header
 * decoder (so the daemon can answer it) but only -EBADMSG from the body
 * decoders, and HELLO's range and HELLO_OK's choice are validated on both
 * the encoding and the decoding side.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "protocol-testlib.h"

START_TEST(test_header_layout)
{
	static const uint8_t want[16] = { 'B', 'D', 'P', '1', 8, 0, 1, 0,
					  16, 0, 0, 0, 0, 0, 0, 0 };
	bp_msg_header h;

	ck_assert_int_eq(bp_msg_status_encode(prt_msg, sizeof(prt_msg)), 16);
	ck_assert_mem_eq(prt_msg, want, 16);
	ck_assert_int_eq(bp_msg_header_decode(prt_msg, 16, &h), 0);
	ck_assert_uint_eq(h.magic, BP_PROTO_MAGIC);
	ck_assert_uint_eq(h.type, BP_MSG_STATUS);
	ck_assert_uint_eq(h.version, BP_PROTO_VERSION);
	ck_assert_uint_eq(h.length, 16);
	ck_assert_uint_eq(h.reserved, 0);
}
END_TEST

START_TEST(test_header_each_type)
{
	uint16_t type = (uint16_t)(TYPE_FIRST + _i);
	size_t len = prt_sample(type);
	bp_msg_header h;

	ck_assert_int_eq(bp_msg_header_decode(prt_msg, len, &h), 0);
	ck_assert_uint_eq(h.type, type);
	ck_assert_uint_eq(h.version, BP_PROTO_VERSION);
	ck_assert_uint_eq(h.length, len);
	ck_assert_uint_eq(prt_rd(prt_msg + HDR_TYPE, 2), type);
	ck_assert_uint_eq(prt_rd(prt_msg + HDR_LENGTH, 4), len);
	ck_assert_uint_eq(prt_rd(prt_msg + HDR_MAGIC, 4), BP_PROTO_MAGIC);
	ck_assert_uint_eq(prt_rd(prt_msg + HDR_RESERVED, 4), 0);
}
END_TEST

START_TEST(test_header_bad_magic)
{
	bp_msg_header h, untouched;

	memset(&h, 0xa5, sizeof(h));
	untouched = h;
	for (int i = 0; i < 4; i++) {
		prt_sample(BP_MSG_STATUS);
		prt_msg[HDR_MAGIC + i] ^= 0x20;
		ck_assert_int_eq(bp_msg_header_decode(prt_msg, 16, &h), -EBADMSG);
	}
	prt_sample(BP_MSG_STATUS);
	prt_wr(prt_msg, 4, 0x31504442u ^ 0xffffffffu);
	ck_assert_int_eq(bp_msg_header_decode(prt_msg, 16, &h), -EBADMSG);
	/* Big-endian magic: a peer that forgot the byte order. */
	prt_wr(prt_msg, 4, 0x42445031u);
	ck_assert_int_eq(bp_msg_header_decode(prt_msg, 16, &h), -EBADMSG);
	ck_assert_mem_eq(&h, &untouched, sizeof(h));
}
END_TEST

START_TEST(test_header_unknown_type)
{
	static const uint16_t bad[] = { 0, TYPE_LAST + 1, 13, 0x100, 0x7fff, 0xffff };
	bp_msg_header h;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		prt_sample(BP_MSG_STATUS);
		prt_wr(prt_msg + HDR_TYPE, 2, bad[i]);
		ck_assert_int_eq(bp_msg_header_decode(prt_msg, 16, &h), -EBADMSG);
	}
}
END_TEST

START_TEST(test_header_length)
{
	static const uint32_t bad[] = { 0, 15, 17, 24, BP_MSG_MAX, 0xffffffffu };
	bp_msg_header h;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		prt_sample(BP_MSG_STATUS);
		prt_wr(prt_msg + HDR_LENGTH, 4, bad[i]);
		ck_assert_int_eq(bp_msg_header_decode(prt_msg, 16, &h), -EBADMSG);
	}
	/* length agrees with a longer datagram: the header is fine, STATUS is not. */
	prt_sample(BP_MSG_STATUS);
	prt_wr(prt_msg + HDR_LENGTH, 4, 17);
	prt_msg[16] = 0;
	ck_assert_int_eq(bp_msg_header_decode(prt_msg, 17, &h), 0);
	ck_assert_int_eq(bp_msg_status_decode(prt_msg, 17), -EBADMSG);
	/* Shorter than a header, at every length, and no buffer at all. */
	prt_sample(BP_MSG_STATUS);
	for (size_t n = 0; n < 16; n++)
		ck_assert_int_eq(bp_msg_header_decode(prt_msg, n, &h), -EBADMSG);
	ck_assert_int_eq(bp_msg_header_decode(NULL, 16, &h), -EBADMSG);
}
END_TEST

START_TEST(test_header_over_max)
{
	bp_msg_header h;

	/* A datagram one byte over the limit is rejected even when self-consistent. */
	prt_sample(BP_MSG_STATUS_REPLY);
	prt_wr(prt_msg + HDR_LENGTH, 4, BP_MSG_MAX + 1);
	ck_assert_int_eq(bp_msg_header_decode(prt_msg, BP_MSG_MAX + 1, &h), -EBADMSG);
	prt_wr(prt_msg + HDR_LENGTH, 4, BP_MSG_MAX);
	ck_assert_int_eq(bp_msg_header_decode(prt_msg, BP_MSG_MAX, &h), 0);
	ck_assert_uint_eq(h.length, BP_MSG_MAX);
}
END_TEST

START_TEST(test_header_reserved)
{
	bp_msg_header h;

	for (int i = 0; i < 4; i++) {
		prt_sample(BP_MSG_STATUS);
		prt_msg[HDR_RESERVED + i] = 1;
		ck_assert_int_eq(bp_msg_header_decode(prt_msg, 16, &h), -EBADMSG);
	}
}
END_TEST

/* ---- version negotiation ------------------------------------------------ */

START_TEST(test_negotiation_header_version)
{
	static const uint16_t future[] = { 0, BP_PROTO_VERSION + 1, 3, 0x100, 0xffff };
	bp_msg_header h;

	for (size_t i = 0; i < sizeof(future) / sizeof(future[0]); i++) {
		size_t len = prt_sample(BP_MSG_HELLO);

		prt_wr(prt_msg + HDR_VERSION, 2, future[i]);
		ck_assert_int_eq(bp_msg_header_decode(prt_msg, len, &h), -EPROTONOSUPPORT);
		/* The version is judged before type, length and reserved ... */
		prt_wr(prt_msg + HDR_TYPE, 2, 0xffff);
		prt_wr(prt_msg + HDR_RESERVED, 4, 1);
		ck_assert_int_eq(bp_msg_header_decode(prt_msg, len, &h), -EPROTONOSUPPORT);
		ck_assert_int_eq(bp_msg_header_decode(prt_msg, len + 1, &h), -EPROTONOSUPPORT);
		/* ... but only with a good magic and a whole header. */
		prt_msg[HDR_MAGIC] ^= 1;
		ck_assert_int_eq(bp_msg_header_decode(prt_msg, len, &h), -EBADMSG);
		prt_msg[HDR_MAGIC] ^= 1;
		ck_assert_int_eq(bp_msg_header_decode(prt_msg, 15, &h), -EBADMSG);
	}
}
END_TEST

START_TEST(test_negotiation_body_decoders)
{
	uint16_t type = (uint16_t)(TYPE_FIRST + _i);

	/* Body decoders speak only -EBADMSG, even for a version from the future. */
	ck_assert_int_eq(prt_decode_patched(type, HDR_VERSION, 2, BP_PROTO_VERSION + 1), -EBADMSG);
	ck_assert_int_eq(prt_decode_patched(type, HDR_VERSION, 2, 0), -EBADMSG);
}
END_TEST

START_TEST(test_negotiation_hello_ranges)
{
	bp_msg_hello m = prt_sample_hello(), got;
	int n;

	/* Ranges beyond this build's are well-formed: the daemon answers them with ERROR. */
	static const uint16_t ok[][2] = { { 1, 1 }, { 1, 0xffff }, { 2, 5 }, { 0xffff, 0xffff } };
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		m.min_version = ok[i][0];
		m.max_version = ok[i][1];
		n = bp_msg_hello_encode(&m, prt_msg, sizeof(prt_msg));
		ck_assert_int_gt(n, 0);
		ck_assert_int_eq(bp_msg_hello_decode(prt_msg, (size_t)n, &got), 0);
		ck_assert_uint_eq(got.min_version, ok[i][0]);
		ck_assert_uint_eq(got.max_version, ok[i][1]);
	}
	static const uint16_t bad[][2] = { { 0, 0 }, { 0, 1 }, { 2, 1 }, { 0xffff, 1 } };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		m.min_version = bad[i][0];
		m.max_version = bad[i][1];
		ck_assert_int_eq(bp_msg_hello_encode(&m, prt_msg, sizeof(prt_msg)), -EINVAL);
		ck_assert_int_eq(prt_decode_patched(BP_MSG_HELLO, HELLO_MIN, 4,
						bad[i][0] | (uint32_t)bad[i][1] << 16), -EBADMSG);
	}
}
END_TEST

START_TEST(test_negotiation_hello_ok_version)
{
	bp_msg_hello_ok m = prt_sample_hello_ok();

	/* The chosen version must be one this build speaks. */
	ck_assert_int_eq(prt_decode_patched(BP_MSG_HELLO_OK, OK_VERSION, 2, BP_PROTO_VERSION), 0);
	ck_assert_int_eq(prt_decode_patched(BP_MSG_HELLO_OK, OK_VERSION, 2, 0), -EBADMSG);
	ck_assert_int_eq(prt_decode_patched(BP_MSG_HELLO_OK, OK_VERSION, 2, BP_PROTO_VERSION + 1),
			 -EBADMSG);
	m.version = 0;
	ck_assert_int_eq(bp_msg_hello_ok_encode(&m, prt_msg, sizeof(prt_msg)), -EINVAL);
	m.version = BP_PROTO_VERSION + 1;
	ck_assert_int_eq(bp_msg_hello_ok_encode(&m, prt_msg, sizeof(prt_msg)), -EINVAL);
}
END_TEST

static Suite *header_suite(void)
{
	Suite *s = suite_create("protocol-header");
	TCase *tc;

	tc = tcase_create("header");
	tcase_add_test(tc, test_header_layout);
	tcase_add_loop_test(tc, test_header_each_type, 0, TYPE_COUNT);
	tcase_add_test(tc, test_header_bad_magic);
	tcase_add_test(tc, test_header_unknown_type);
	tcase_add_test(tc, test_header_length);
	tcase_add_test(tc, test_header_over_max);
	tcase_add_test(tc, test_header_reserved);
	suite_add_tcase(s, tc);

	tc = tcase_create("negotiation");
	tcase_add_test(tc, test_negotiation_header_version);
	tcase_add_loop_test(tc, test_negotiation_body_decoders, 0, TYPE_COUNT);
	tcase_add_test(tc, test_negotiation_hello_ranges);
	tcase_add_test(tc, test_negotiation_hello_ok_version);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return prt_run(header_suite());
}
