/* SPDX-License-Identifier: MIT */
/*
 * protocol-testlib.c - message buffers, sample messages and the
 * patch-and-decode helpers of the protocol suites.
 * See protocol-testlib.h for why this exists.
 */
#include "protocol-testlib.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ring.h"

uint8_t prt_msg[BUF_SIZE], prt_out[BUF_SIZE];

/* ---- byte helpers (independent of lib/endian.h) ----------------------- */

uint64_t prt_rd(const uint8_t *p, int width)
{
	uint64_t v = 0;

	for (int i = width - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

void prt_wr(uint8_t *p, int width, uint64_t v)
{
	for (int i = 0; i < width; i++, v >>= 8)
		p[i] = (uint8_t)v;
}

/* ---- sample messages ---------------------------------------------------- */

bp_msg_hello prt_sample_hello(void)
{
	return (bp_msg_hello){ .min_version = 1, .max_version = 1, .name = SAMPLE_NAME,
			       .name_len = sizeof(SAMPLE_NAME) - 1 };
}

bp_msg_hello_ok prt_sample_hello_ok(void)
{
	return (bp_msg_hello_ok){ .version = 1, .max_sessions = 16, .max_batch_size = 4096,
				  .server = SAMPLE_SERVER,
				  .server_len = sizeof(SAMPLE_SERVER) - 1 };
}

bp_msg_open prt_sample_open(void)
{
	return (bp_msg_open){ .seed = UINT64_C(0x0123456789abcdef), .start_epoch = 3,
			      .start_batch = 77, .batch_size = 256, .rank = 3, .world = 8,
			      .prefetch = 16, .window = 64, .placement = 2,
			      .shuffle = BP_SHUFFLE_BLOCK, .drop_last = true,
			      .path = SAMPLE_PATH, .path_len = sizeof(SAMPLE_PATH) - 1 };
}

bp_msg_ready prt_sample_ready(void)
{
	return (bp_msg_ready){ .session = 42, .fingerprint = UINT64_C(0xfeedfacecafebeef),
			       .samples = 1281167, .batches_per_epoch = 625,
			       .data_size = bp_ring_arena_offset(32) + (UINT64_C(64) << 20),
			       .ctrl_size = bp_ring_ctrl_size(32), .max_sample = 1u << 20,
			       .batch_size = 256, .slots = 32, .placement = 2 };
}

bp_msg_error prt_sample_error(void)
{
	return (bp_msg_error){ .code = -ENOENT, .message = SAMPLE_ERROR,
			       .message_len = sizeof(SAMPLE_ERROR) - 1 };
}

bp_msg_text prt_sample_status_reply(void)
{
	return (bp_msg_text){ .code = 0, .text = SAMPLE_JSON, .text_len = sizeof(SAMPLE_JSON) - 1 };
}

bp_msg_text prt_sample_goodbye(void)
{
	return (bp_msg_text){ .code = -ESHUTDOWN, .text = SAMPLE_REASON,
			      .text_len = sizeof(SAMPLE_REASON) - 1 };
}

int prt_encode_sample(uint16_t type, uint8_t *buf, size_t cap)
{
	bp_msg_session s = { .session = 42 };
	bp_msg_hello hello = prt_sample_hello();
	bp_msg_hello_ok ok = prt_sample_hello_ok();
	bp_msg_open open = prt_sample_open();
	bp_msg_ready ready = prt_sample_ready();
	bp_msg_error err = prt_sample_error();
	bp_msg_text reply = prt_sample_status_reply(), bye = prt_sample_goodbye();

	switch (type) {
	case BP_MSG_HELLO: return bp_msg_hello_encode(&hello, buf, cap);
	case BP_MSG_HELLO_OK: return bp_msg_hello_ok_encode(&ok, buf, cap);
	case BP_MSG_OPEN: return bp_msg_open_encode(&open, buf, cap);
	case BP_MSG_READY: return bp_msg_ready_encode(&ready, buf, cap);
	case BP_MSG_ERROR: return bp_msg_error_encode(&err, buf, cap);
	case BP_MSG_CLOSE: return bp_msg_session_encode(BP_MSG_CLOSE, &s, buf, cap);
	case BP_MSG_CLOSED: return bp_msg_session_encode(BP_MSG_CLOSED, &s, buf, cap);
	case BP_MSG_STATUS: return bp_msg_status_encode(buf, cap);
	case BP_MSG_STATUS_REPLY: return bp_msg_text_encode(BP_MSG_STATUS_REPLY, &reply, buf, cap);
	case BP_MSG_GOODBYE: return bp_msg_text_encode(BP_MSG_GOODBYE, &bye, buf, cap);
	case BP_MSG_METRICS: return bp_msg_metrics_encode(buf, cap);
	case BP_MSG_METRICS_REPLY: return bp_msg_text_encode(BP_MSG_METRICS_REPLY, &reply, buf, cap);
	}
	ck_abort_msg("no sample for type %u", type);
	return -1;
}

size_t prt_sample(uint16_t type)
{
	int n = prt_encode_sample(type, prt_msg, sizeof(prt_msg));

	ck_assert_int_gt(n, 0);
	return (size_t)n;
}

/* Decode buf as `type` and, on success, encode the result into out. */
static int recode(uint16_t type, const uint8_t *buf, size_t len, uint8_t *out, size_t cap)
{
	int r;

	switch (type) {
	case BP_MSG_HELLO: {
		bp_msg_hello m;
		r = bp_msg_hello_decode(buf, len, &m);
		return r < 0 ? r : bp_msg_hello_encode(&m, out, cap);
	}
	case BP_MSG_HELLO_OK: {
		bp_msg_hello_ok m;
		r = bp_msg_hello_ok_decode(buf, len, &m);
		return r < 0 ? r : bp_msg_hello_ok_encode(&m, out, cap);
	}
	case BP_MSG_OPEN: {
		bp_msg_open m;
		r = bp_msg_open_decode(buf, len, &m);
		return r < 0 ? r : bp_msg_open_encode(&m, out, cap);
	}
	case BP_MSG_READY: {
		bp_msg_ready m;
		r = bp_msg_ready_decode(buf, len, &m);
		return r < 0 ? r : bp_msg_ready_encode(&m, out, cap);
	}
	case BP_MSG_ERROR: {
		bp_msg_error m;
		r = bp_msg_error_decode(buf, len, &m);
		return r < 0 ? r : bp_msg_error_encode(&m, out, cap);
	}
	case BP_MSG_CLOSE:
	case BP_MSG_CLOSED: {
		bp_msg_session m;
		r = bp_msg_session_decode(type, buf, len, &m);
		return r < 0 ? r : bp_msg_session_encode(type, &m, out, cap);
	}
	case BP_MSG_STATUS:
		r = bp_msg_status_decode(buf, len);
		return r < 0 ? r : bp_msg_status_encode(out, cap);
	case BP_MSG_METRICS:
		r = bp_msg_metrics_decode(buf, len);
		return r < 0 ? r : bp_msg_metrics_encode(out, cap);
	case BP_MSG_STATUS_REPLY:
	case BP_MSG_METRICS_REPLY:
	case BP_MSG_GOODBYE: {
		bp_msg_text m;
		r = bp_msg_text_decode(type, buf, len, &m);
		return r < 0 ? r : bp_msg_text_encode(type, &m, out, cap);
	}
	}
	ck_abort_msg("no decoder for type %u", type);
	return -1;
}

int prt_decode_as(uint16_t type, const uint8_t *buf, size_t len)
{
	int r = recode(type, buf, len, prt_out, sizeof(prt_out));

	if (r >= 0)
		ck_assert_msg(r == (int)len && memcmp(prt_out, buf, len) == 0,
			      "%s: accepted bytes do not re-encode to themselves",
			      bp_msg_type_name(type));
	return r < 0 ? r : 0;
}

int prt_decode_patched(uint16_t type, size_t off, int width, uint64_t v)
{
	size_t len = prt_sample(type);

	prt_wr(prt_msg + off, width, v);
	return prt_decode_as(type, prt_msg, len);
}

size_t prt_string_msg(uint16_t type, size_t str_at, const char *s, size_t slen)
{
	prt_sample(type);
	prt_wr(prt_msg + str_at - 4, 4, slen);
	memcpy(prt_msg + str_at, s, slen);
	prt_wr(prt_msg + HDR_LENGTH, 4, str_at + slen);
	return str_at + slen;
}

char *prt_repeat(char c, size_t n)
{
	static char s[BUF_SIZE];

	ck_assert_uint_le(n, sizeof(s));
	memset(s, c, n);
	return s;
}

int prt_run(Suite *s)
{
	SRunner *sr;
	int failed;

	sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
