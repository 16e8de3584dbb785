/* SPDX-License-Identifier: MIT */
/*
 * test-protocol-roundtrip.c - the Check suite for the control messages'
 * encoders and decoders (lib/proto/protocol.c) on valid input: each message
 * type encoded and checked byte by byte against PROTOCOL.md's tables
 * (offsets restated in protocol-testlib.h, not taken from the encoder),
 * then decoded back, at its sample values and at every limit's edge.
 *
 * Decoded strings point into the datagram, not into a copy; the tests
 * assert that too, since the daemon relies on it to avoid allocating.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "protocol-testlib.h"
#include "ring.h"

/* ---- round trips and layouts -------------------------------------------- */

START_TEST(test_hello_roundtrip)
{
	bp_msg_hello m = prt_sample_hello(), got;
	char edge[BP_NAME_MAX];
	int n;

	n = bp_msg_hello_encode(&m, prt_msg, sizeof(prt_msg));
	ck_assert_int_eq(n, HELLO_NAME + (int)m.name_len);
	ck_assert_uint_eq(prt_rd(prt_msg + HDR_TYPE, 2), BP_MSG_HELLO);
	ck_assert_uint_eq(prt_rd(prt_msg + HELLO_MIN, 2), 1);
	ck_assert_uint_eq(prt_rd(prt_msg + HELLO_MAX, 2), 1);
	ck_assert_uint_eq(prt_rd(prt_msg + HELLO_NAME_LEN, 4), m.name_len);
	ck_assert_mem_eq(prt_msg + HELLO_NAME, SAMPLE_NAME, m.name_len);
	ck_assert_int_eq(bp_msg_hello_decode(prt_msg, (size_t)n, &got), 0);
	ck_assert_uint_eq(got.min_version, 1);
	ck_assert_uint_eq(got.max_version, 1);
	ck_assert_uint_eq(got.name_len, m.name_len);
	ck_assert_ptr_eq(got.name, (const char *)prt_msg + HELLO_NAME);

	/* The longest name, made of the printable extremes. */
	for (size_t i = 0; i < sizeof(edge); i++)
		edge[i] = i % 2 ? '~' : ' ';
	m.name = edge;
	m.name_len = BP_NAME_MAX;
	n = bp_msg_hello_encode(&m, prt_msg, sizeof(prt_msg));
	ck_assert_int_eq(n, HELLO_NAME + BP_NAME_MAX);
	ck_assert_int_eq(bp_msg_hello_decode(prt_msg, (size_t)n, &got), 0);
	ck_assert_mem_eq(got.name, edge, BP_NAME_MAX);

	/* An empty name, given as NULL. */
	m.name = NULL;
	m.name_len = 0;
	n = bp_msg_hello_encode(&m, prt_msg, sizeof(prt_msg));
	ck_assert_int_eq(n, HELLO_NAME);
	ck_assert_int_eq(bp_msg_hello_decode(prt_msg, (size_t)n, &got), 0);
	ck_assert_uint_eq(got.name_len, 0);
}
END_TEST

START_TEST(test_hello_ok_roundtrip)
{
	bp_msg_hello_ok m = prt_sample_hello_ok(), got;
	int n;

	n = bp_msg_hello_ok_encode(&m, prt_msg, sizeof(prt_msg));
	ck_assert_int_eq(n, OK_SERVER + (int)m.server_len);
	ck_assert_uint_eq(prt_rd(prt_msg + OK_VERSION, 2), 1);
	ck_assert_uint_eq(prt_rd(prt_msg + OK_RESERVED, 2), 0);
	ck_assert_uint_eq(prt_rd(prt_msg + OK_MAX_SESSIONS, 4), 16);
	ck_assert_uint_eq(prt_rd(prt_msg + OK_MAX_BATCH, 4), 4096);
	ck_assert_uint_eq(prt_rd(prt_msg + OK_SERVER_LEN, 4), m.server_len);
	ck_assert_mem_eq(prt_msg + OK_SERVER, SAMPLE_SERVER, m.server_len);
	ck_assert_int_eq(bp_msg_hello_ok_decode(prt_msg, (size_t)n, &got), 0);
	ck_assert_uint_eq(got.version, 1);
	ck_assert_uint_eq(got.max_sessions, 16);
	ck_assert_uint_eq(got.max_batch_size, 4096);
	ck_assert_uint_eq(got.server_len, m.server_len);
	ck_assert_ptr_eq(got.server, (const char *)prt_msg + OK_SERVER);

	m.max_sessions = UINT32_MAX;
	m.max_batch_size = 1u << 20;
	m.server = prt_repeat('v', 64);
	m.server_len = 64;
	n = bp_msg_hello_ok_encode(&m, prt_msg, sizeof(prt_msg));
	ck_assert_int_eq(n, OK_SERVER + 64);
	ck_assert_int_eq(bp_msg_hello_ok_decode(prt_msg, (size_t)n, &got), 0);
	ck_assert_uint_eq(got.max_sessions, UINT32_MAX);
	ck_assert_uint_eq(got.max_batch_size, 1u << 20);
	ck_assert_uint_eq(got.server_len, 64);
}
END_TEST

START_TEST(test_open_roundtrip)
{
	bp_msg_open m = prt_sample_open(), got;
	int n;

	for (unsigned i = 0; i < sizeof(m.device_uuid); i++)
		m.device_uuid[i] = (uint8_t)(0xa0 + i);
	n = bp_msg_open_encode(&m, prt_msg, sizeof(prt_msg));
	ck_assert_int_eq(n, OPEN_PATH + (int)m.path_len);
	ck_assert_uint_eq(prt_rd(prt_msg + OPEN_SEED, 8), UINT64_C(0x0123456789abcdef));
	ck_assert_uint_eq(prt_msg[OPEN_SEED], 0xef); /* little-endian */
	ck_assert_uint_eq(prt_rd(prt_msg + OPEN_EPOCH, 8), 3);
	ck_assert_uint_eq(prt_rd(prt_msg + OPEN_BATCH, 8), 77);
	ck_assert_uint_eq(prt_rd(prt_msg + OPEN_BATCH_SIZE, 4), 256);
	ck_assert_uint_eq(prt_rd(prt_msg + OPEN_RANK, 4), 3);
	ck_assert_uint_eq(prt_rd(prt_msg + OPEN_WORLD, 4), 8);
	ck_assert_uint_eq(prt_rd(prt_msg + OPEN_PREFETCH, 4), 16);
	ck_assert_uint_eq(prt_rd(prt_msg + OPEN_WINDOW, 4), 64);
	ck_assert_uint_eq(prt_rd(prt_msg + OPEN_PLACEMENT, 4), 2);
	ck_assert_uint_eq(prt_msg[OPEN_SHUFFLE], BP_SHUFFLE_BLOCK);
	ck_assert_uint_eq(prt_msg[OPEN_DROP_LAST], 1);
	ck_assert_uint_eq(prt_rd(prt_msg + OPEN_RESERVED, 2), 0);
	ck_assert_uint_eq(prt_msg[OPEN_UUID], 0xa0);
	ck_assert_uint_eq(prt_msg[OPEN_UUID + 15], 0xaf);
	ck_assert_uint_eq(prt_rd(prt_msg + OPEN_PATH_LEN, 4), m.path_len);
	ck_assert_mem_eq(prt_msg + OPEN_PATH, SAMPLE_PATH, m.path_len);

	ck_assert_int_eq(bp_msg_open_decode(prt_msg, (size_t)n, &got), 0);
	ck_assert_uint_eq(got.seed, m.seed);
	ck_assert_uint_eq(got.start_epoch, 3);
	ck_assert_uint_eq(got.start_batch, 77);
	ck_assert_uint_eq(got.batch_size, 256);
	ck_assert_uint_eq(got.rank, 3);
	ck_assert_uint_eq(got.world, 8);
	ck_assert_uint_eq(got.prefetch, 16);
	ck_assert_uint_eq(got.window, 64);
	ck_assert_int_eq(got.placement, 2);
	ck_assert_uint_eq(got.shuffle, BP_SHUFFLE_BLOCK);
	ck_assert(got.drop_last);
	ck_assert_mem_eq(got.device_uuid, m.device_uuid, sizeof(m.device_uuid));
	ck_assert_uint_eq(got.path_len, m.path_len);
	ck_assert_ptr_eq(got.path, (const char *)prt_msg + OPEN_PATH);

	/* Host placement on the wire is 0xffffffff; every limit at its edge. */
	m.placement = BP_PLACEMENT_HOST;
	m.drop_last = false;
	m.shuffle = BP_SHUFFLE_NONE;
	m.seed = m.start_epoch = m.start_batch = UINT64_MAX;
	m.batch_size = 1u << 20;
	m.world = 1u << 16;
	m.rank = m.world - 1;
	m.prefetch = 4096;
	m.window = 1u << 20;
	m.path = prt_repeat('p', BP_PATH_MAX);
	m.path_len = BP_PATH_MAX;
	n = bp_msg_open_encode(&m, prt_msg, sizeof(prt_msg));
	ck_assert_int_eq(n, OPEN_PATH + BP_PATH_MAX);
	ck_assert_uint_eq(prt_rd(prt_msg + OPEN_PLACEMENT, 4), 0xffffffffu);
	ck_assert_uint_eq(prt_msg[OPEN_DROP_LAST], 0);
	ck_assert_int_eq(bp_msg_open_decode(prt_msg, (size_t)n, &got), 0);
	ck_assert_int_eq(got.placement, BP_PLACEMENT_HOST);
	ck_assert(!got.drop_last);
	ck_assert_uint_eq(got.rank, 65535);
	ck_assert_uint_eq(got.world, 65536);
	ck_assert_uint_eq(got.start_batch, UINT64_MAX);
	ck_assert_uint_eq(got.path_len, BP_PATH_MAX);

	/* The smallest request. */
	m = prt_sample_open();
	m.batch_size = 1;
	m.rank = 0;
	m.world = 1;
	m.prefetch = 0;
	m.window = 0;
	m.path = "/";
	m.path_len = 1;
	n = bp_msg_open_encode(&m, prt_msg, sizeof(prt_msg));
	ck_assert_int_eq(n, OPEN_PATH + 1);
	ck_assert_int_eq(bp_msg_open_decode(prt_msg, (size_t)n, &got), 0);
	ck_assert_uint_eq(got.world, 1);
	ck_assert_uint_eq(got.prefetch, 0);
}
END_TEST

/*
 * The resume trailer (flags bit 2): 12 bytes after the path, with a field
 * list too; absent, start_sample 0 and batch_stride 1; a stride of 0 in the
 * struct means 1 and writes no trailer.
 */
START_TEST(test_open_resume_roundtrip)
{
	bp_msg_open m = prt_sample_open(), got;
	int n;

	m.start_sample = UINT64_C(0x0102030405060708);
	m.batch_stride = 3;
	n = bp_msg_open_encode(&m, prt_msg, sizeof(prt_msg));
	ck_assert_int_eq(n, OPEN_PATH + (int)m.path_len + 12);
	ck_assert_uint_eq(prt_rd(prt_msg + OPEN_RESERVED, 2), 4);
	ck_assert_mem_eq(prt_msg + OPEN_PATH, SAMPLE_PATH, m.path_len);
	ck_assert_uint_eq(prt_rd(prt_msg + n - 12, 8), UINT64_C(0x0102030405060708));
	ck_assert_uint_eq(prt_msg[n - 12], 0x08); /* little-endian */
	ck_assert_uint_eq(prt_rd(prt_msg + n - 4, 4), 3);
	ck_assert_int_eq(bp_msg_open_decode(prt_msg, (size_t)n, &got), 0);
	ck_assert_uint_eq(got.start_sample, UINT64_C(0x0102030405060708));
	ck_assert_uint_eq(got.batch_stride, 3);
	ck_assert_uint_eq(got.path_len, m.path_len);
	ck_assert_ptr_eq(got.path, (const char *)prt_msg + OPEN_PATH);
	ck_assert_uint_eq(got.start_batch, 77);

	/* Only a stride, at its limit, behind a field list and keys. */
	m.start_sample = 0;
	m.batch_stride = BP_STRIDE_MAX;
	m.fields = "img,label";
	m.fields_len = 9;
	m.keys = true;
	n = bp_msg_open_encode(&m, prt_msg, sizeof(prt_msg));
	ck_assert_int_eq(n, OPEN_PATH + 4 + 9 + (int)m.path_len + 12);
	ck_assert_uint_eq(prt_rd(prt_msg + OPEN_RESERVED, 2), 1 | 2 | 4);
	ck_assert_int_eq(bp_msg_open_decode(prt_msg, (size_t)n, &got), 0);
	ck_assert_uint_eq(got.start_sample, 0);
	ck_assert_uint_eq(got.batch_stride, 4096);
	ck_assert_uint_eq(got.fields_len, 9);
	ck_assert_mem_eq(got.fields, "img,label", 9);
	ck_assert_mem_eq(got.path, SAMPLE_PATH, got.path_len);
	ck_assert_ptr_eq(got.path, (const char *)prt_msg + n - 12 - (int)m.path_len);

	/* Only a start_sample: UINT64_MAX travels (the daemon judges it). */
	m = prt_sample_open();
	m.start_sample = UINT64_MAX;
	n = bp_msg_open_encode(&m, prt_msg, sizeof(prt_msg));
	ck_assert_int_eq(bp_msg_open_decode(prt_msg, (size_t)n, &got), 0);
	ck_assert_uint_eq(got.start_sample, UINT64_MAX);
	ck_assert_uint_eq(got.batch_stride, 1);

	/* Neither: the OPEN of before, byte for byte; stride 0 and 1 alike. */
	for (uint32_t stride = 0; stride < 2; stride++) {
		m = prt_sample_open();
		m.batch_stride = stride;
		n = bp_msg_open_encode(&m, prt_msg, sizeof(prt_msg));
		ck_assert_int_eq(n, OPEN_PATH + (int)m.path_len);
		ck_assert_uint_eq(prt_rd(prt_msg + OPEN_RESERVED, 2), 0);
		ck_assert_int_eq(bp_msg_open_decode(prt_msg, (size_t)n, &got), 0);
		ck_assert_uint_eq(got.start_sample, 0);
		ck_assert_uint_eq(got.batch_stride, 1);
	}
}
END_TEST

/*
 * The decode trailer (flags bit 3): 104 bytes, last, after the resume
 * trailer; each field where PROTOCOL.md puts it, floats as their bits;
 * every byte the encoder writes zero must be zero, every range checked.
 */
static bp_open_decode sample_decode(void)
{
	return (bp_open_decode){ .kind = BP_DECODE_IMAGE, .crop = BP_CROP_RANDOM_RESIZED,
				 .layout = BP_LAYOUT_NHWC, .height = 224, .width = 192,
				 .scale_min = 0.08f, .scale_max = 1.0f, .ratio_min = 0.75f,
				 .ratio_max = 4.0f / 3.0f, .flip = 0.5f, .field = "image",
				 .field_len = 5 };
}

START_TEST(test_open_decode_roundtrip)
{
	bp_msg_open m = prt_sample_open(), got;
	const uint8_t *t;
	int n;

	m.decode = sample_decode();
	m.start_sample = 5;
	n = bp_msg_open_encode(&m, prt_msg, sizeof(prt_msg));
	ck_assert_int_eq(n, OPEN_PATH + (int)m.path_len + 12 + 104);
	ck_assert_uint_eq(prt_rd(prt_msg + OPEN_RESERVED, 2), 4 | 8);
	t = prt_msg + n - 104;
	ck_assert_uint_eq(prt_rd(t, 4), 224);
	ck_assert_uint_eq(prt_rd(t + 4, 4), 192);
	ck_assert_uint_eq(prt_rd(t + 8, 4), 0);
	ck_assert_uint_eq(t[12], 1);
	ck_assert_uint_eq(t[13], 1);
	ck_assert_uint_eq(t[14], 1);
	ck_assert_uint_eq(t[15], 0);
	ck_assert_uint_eq(prt_rd(t + 32, 4), 0x3f000000); /* 0.5f */
	ck_assert_uint_eq(t[36], 5);
	ck_assert_mem_eq(t + 37, "image\0", 6);
	/* The resume trailer comes before it. */
	ck_assert_uint_eq(prt_rd(prt_msg + n - 104 - 12, 8), 5);
	ck_assert_int_eq(bp_msg_open_decode(prt_msg, (size_t)n, &got), 0);
	ck_assert_uint_eq(got.decode.kind, BP_DECODE_IMAGE);
	ck_assert_uint_eq(got.decode.height, 224);
	ck_assert_uint_eq(got.decode.width, 192);
	ck_assert_uint_eq(got.decode.layout, BP_LAYOUT_NHWC);
	ck_assert(got.decode.scale_min == 0.08f && got.decode.ratio_max == 4.0f / 3.0f);
	ck_assert(got.decode.flip == 0.5f);
	ck_assert_uint_eq(got.decode.field_len, 5);
	ck_assert_mem_eq(got.decode.field, "image", 5);
	ck_assert_uint_eq(got.start_sample, 5);
	ck_assert_mem_eq(got.path, SAMPLE_PATH, got.path_len);

	/* Alone, center crop. */
	m = prt_sample_open();
	m.decode = sample_decode();
	m.decode.crop = BP_CROP_CENTER;
	m.decode.resize = 256;
	n = bp_msg_open_encode(&m, prt_msg, sizeof(prt_msg));
	ck_assert_int_eq(n, OPEN_PATH + (int)m.path_len + 104);
	ck_assert_int_eq(bp_msg_open_decode(prt_msg, (size_t)n, &got), 0);
	ck_assert_uint_eq(got.decode.resize, 256);
	ck_assert_uint_eq(got.start_sample, 0);

	/* Not canonical: a byte after the name, a reserved byte, kind 0 with the flag. */
	for (int at = 37 + 5; at < 104; at += 9) {
		uint8_t save = prt_msg[n - 104 + at];

		prt_msg[n - 104 + at] = 1;
		ck_assert_int_eq(bp_msg_open_decode(prt_msg, (size_t)n, &got), -EBADMSG);
		prt_msg[n - 104 + at] = save;
	}
	prt_msg[n - 104 + 12] = 0;
	ck_assert_int_eq(bp_msg_open_decode(prt_msg, (size_t)n, &got), -EBADMSG);
}
END_TEST

/*
 * The sequences trailer (flags bit 4): 8 bytes after the decode trailer,
 * seq_len then the mode and three zero bytes; the sources trailer (bit 5)
 * last: epoch_samples, the counts, the other sources' paths, the count of
 * sources and the trailer's size.
 */
START_TEST(test_open_sequences_roundtrip)
{
	bp_msg_open m = prt_sample_open(), got;
	const uint8_t *t;
	int n;

	m.sequences = BP_SEQUENCES_PACKED;
	m.seq_len = 2048;
	m.start_sample = 9;
	n = bp_msg_open_encode(&m, prt_msg, sizeof(prt_msg));
	ck_assert_int_eq(n, OPEN_PATH + (int)m.path_len + 12 + 8);
	ck_assert_uint_eq(prt_rd(prt_msg + OPEN_RESERVED, 2), 4 | 16);
	t = prt_msg + n - 8;
	ck_assert_uint_eq(prt_rd(t, 4), 2048);
	ck_assert_uint_eq(t[4], BP_SEQUENCES_PACKED);
	ck_assert_int_eq(bp_msg_open_decode(prt_msg, (size_t)n, &got), 0);
	ck_assert_uint_eq(got.sequences, BP_SEQUENCES_PACKED);
	ck_assert_uint_eq(got.seq_len, 2048);
	ck_assert_uint_eq(got.start_sample, 9);
	/* A reserved byte, mode 0 with the flag, mode 3, seq_len 0 or over 2^20. */
	prt_msg[n - 1] = 1;
	ck_assert_int_eq(bp_msg_open_decode(prt_msg, (size_t)n, &got), -EBADMSG);
	prt_msg[n - 1] = 0;
	prt_msg[n - 4] = 0;
	ck_assert_int_eq(bp_msg_open_decode(prt_msg, (size_t)n, &got), -EBADMSG);
	prt_msg[n - 4] = 3;
	ck_assert_int_eq(bp_msg_open_decode(prt_msg, (size_t)n, &got), -EBADMSG);
	m.seq_len = 0;
	ck_assert_int_eq(bp_msg_open_encode(&m, prt_msg, sizeof(prt_msg)), -EINVAL);
	m.seq_len = BP_SEQ_LEN_MAX + 1;
	ck_assert_int_eq(bp_msg_open_encode(&m, prt_msg, sizeof(prt_msg)), -EINVAL);
	/* A seq_len without a mode says nothing: refused, not ignored. */
	m.sequences = BP_SEQUENCES_NONE;
	m.seq_len = 16;
	ck_assert_int_eq(bp_msg_open_encode(&m, prt_msg, sizeof(prt_msg)), -EINVAL);
}
END_TEST

START_TEST(test_open_sources_roundtrip)
{
	bp_msg_open m = prt_sample_open(), got;
	int n, size = 8 + 3 * 4 + (4 + 8) + (4 + 9) + 8;

	m.sequences = BP_SEQUENCES_WINDOWS;
	m.seq_len = 64;
	m.sources = 3;
	m.epoch_samples = 1000;
	m.source[0].count = 7;
	m.source[1] = (bp_open_source){ .count = 2, .path = "code.bpk", .path_len = 8 };
	m.source[2] = (bp_open_source){ .count = 1, .path = "math/.bpk", .path_len = 9 };
	n = bp_msg_open_encode(&m, prt_msg, sizeof(prt_msg));
	ck_assert_int_eq(n, OPEN_PATH + (int)m.path_len + 8 + size);
	ck_assert_uint_eq(prt_rd(prt_msg + OPEN_RESERVED, 2), 16 | 32);
	ck_assert_uint_eq(prt_rd(prt_msg + n - 4, 4), (uint64_t)size);
	ck_assert_uint_eq(prt_rd(prt_msg + n - 8, 4), 3);
	ck_assert_uint_eq(prt_rd(prt_msg + n - size, 8), 1000);
	ck_assert_int_eq(bp_msg_open_decode(prt_msg, (size_t)n, &got), 0);
	ck_assert_uint_eq(got.sources, 3);
	ck_assert_uint_eq(got.epoch_samples, 1000);
	ck_assert_uint_eq(got.source[0].count, 7);
	ck_assert_uint_eq(got.source[2].count, 1);
	ck_assert_uint_eq(got.source[1].path_len, 8);
	ck_assert_mem_eq(got.source[1].path, "code.bpk", 8);
	ck_assert_mem_eq(got.source[2].path, "math/.bpk", 9);
	ck_assert_uint_eq(got.seq_len, 64);
	ck_assert_mem_eq(got.path, SAMPLE_PATH, got.path_len);
	/* A size that does not end where the paths do, a source count of 1 or 65. */
	prt_msg[n - 4]++;
	ck_assert_int_eq(bp_msg_open_decode(prt_msg, (size_t)n, &got), -EBADMSG);
	prt_msg[n - 4]--;
	prt_msg[n - 8] = 1;
	ck_assert_int_eq(bp_msg_open_decode(prt_msg, (size_t)n, &got), -EBADMSG);
	prt_msg[n - 8] = 65;
	ck_assert_int_eq(bp_msg_open_decode(prt_msg, (size_t)n, &got), -EBADMSG);
	/* A count of 0, counts over a period of 2^16, an empty path: the encoder refuses. */
	m.source[1].count = 0;
	ck_assert_int_eq(bp_msg_open_encode(&m, prt_msg, sizeof(prt_msg)), -EINVAL);
	m.source[1].count = BP_MIX_PERIOD_MAX;
	ck_assert_int_eq(bp_msg_open_encode(&m, prt_msg, sizeof(prt_msg)), -EINVAL);
	m.source[1].count = 2;
	m.source[2].path_len = 0;
	ck_assert_int_eq(bp_msg_open_encode(&m, prt_msg, sizeof(prt_msg)), -EINVAL);
}
END_TEST

/* Every field out of its range is refused by the encoder, which says which, and by the decoder. */
START_TEST(test_open_decode_ranges)
{
	static const char *const says[] = { "kind 2", "crop 3", "layout 2", "on_error 2",
					     "height and width", "height and width", "resize",
					     "scale", "scale", "ratio", "flip", "flip", "field" };
	uint8_t good[BP_MSG_MAX];
	bp_msg_open m = prt_sample_open(), got;
	char why[256];
	int n, len;

	m.decode = sample_decode();
	len = bp_msg_open_encode(&m, good, sizeof(good));
	ck_assert_int_gt(len, 0);
	for (int k = 0; k < (int)(sizeof(says) / sizeof(says[0])); k++) {
		bp_open_decode *d = &m.decode;
		uint8_t *t = prt_msg + len - 104;
		float nan = NAN;

		m.decode = sample_decode();
		switch (k) {
		case 0: d->kind = 2; break;
		case 1: d->crop = 3; break;
		case 2: d->layout = 2; break;
		case 3: d->on_error = 2; break;
		case 4: d->height = 0; break;
		case 5: d->width = BP_DECODE_SIDE_MAX + 1; break;
		case 6: d->resize = BP_DECODE_RESIZE_MAX + 1; break;
		case 7: d->scale_min = 0; break;
		case 8: d->scale_max = 0.01f; break;
		case 9: d->ratio_max = 0.5f; break;
		case 10: d->flip = 1.5f; break;
		case 11: d->flip = nan; break;
		default: d->field = "a,b"; d->field_len = 3; break;
		}
		ck_assert_int_eq(bp_msg_open_encode(&m, prt_msg, sizeof(prt_msg)), -EINVAL);
		ck_assert(bp_msg_open_why(&m, why, sizeof(why)));
		ck_assert_msg(strstr(why, says[k]), "case %d: \"%s\"", k, why);
		/* The same bytes forged into a good message: refused on the way in too. */
		memcpy(prt_msg, good, (size_t)len);
		switch (k) {
		case 0: t[12] = 2; break;
		case 1: t[13] = 3; break;
		case 2: t[14] = 2; break;
		case 3: t[15] = 2; break;
		case 4: memset(t, 0, 4); break;
		case 5: t[5] = 0x30; break;
		case 6: t[10] = 1; break;
		case 7: memset(t + 16, 0, 4); break;
		case 8: memcpy(t + 20, &d->scale_max, 4); break;
		case 9: memcpy(t + 28, &d->ratio_max, 4); break;
		case 10:
		case 11: memcpy(t + 32, &d->flip, 4); break;
		default: t[38] = ','; break;
		}
		n = bp_msg_open_decode(prt_msg, (size_t)len, &got);
		ck_assert_msg(n == -EBADMSG, "case %d decoded", k);
	}
}
END_TEST

START_TEST(test_ready_roundtrip)
{
	bp_msg_ready m = prt_sample_ready(), got;
	int n;

	n = bp_msg_ready_encode(&m, prt_msg, sizeof(prt_msg));
	ck_assert_int_eq(n, READY_LEN);
	ck_assert_uint_eq(prt_rd(prt_msg + HDR_LENGTH, 4), READY_LEN);
	ck_assert_uint_eq(prt_rd(prt_msg + READY_SESSION, 8), 42);
	ck_assert_uint_eq(prt_rd(prt_msg + READY_FINGERPRINT, 8), m.fingerprint);
	ck_assert_uint_eq(prt_rd(prt_msg + READY_SAMPLES, 8), m.samples);
	ck_assert_uint_eq(prt_rd(prt_msg + READY_BPE, 8), 625);
	ck_assert_uint_eq(prt_rd(prt_msg + READY_DATA_SIZE, 8), m.data_size);
	ck_assert_uint_eq(prt_rd(prt_msg + READY_CTRL_SIZE, 8), m.ctrl_size);
	ck_assert_uint_eq(prt_rd(prt_msg + READY_MAX_SAMPLE, 8), 1u << 20);
	ck_assert_uint_eq(prt_rd(prt_msg + READY_BATCH_SIZE, 4), 256);
	ck_assert_uint_eq(prt_rd(prt_msg + READY_SLOTS, 4), 32);
	ck_assert_uint_eq(prt_rd(prt_msg + READY_PLACEMENT, 4), 2);
	ck_assert_uint_eq(prt_rd(prt_msg + READY_RESERVED, 4), 0);
	ck_assert_int_eq(bp_msg_ready_decode(prt_msg, (size_t)n, &got), 0);
	ck_assert_uint_eq(got.session, m.session);
	ck_assert_uint_eq(got.fingerprint, m.fingerprint);
	ck_assert_uint_eq(got.samples, m.samples);
	ck_assert_uint_eq(got.batches_per_epoch, m.batches_per_epoch);
	ck_assert_uint_eq(got.data_size, m.data_size);
	ck_assert_uint_eq(got.ctrl_size, m.ctrl_size);
	ck_assert_uint_eq(got.max_sample, m.max_sample);
	ck_assert_uint_eq(got.batch_size, m.batch_size);
	ck_assert_uint_eq(got.slots, m.slots);
	ck_assert_int_eq(got.placement, m.placement);

	m.placement = BP_PLACEMENT_HOST;
	m.slots = BP_RING_MAX_SLOTS;
	m.ctrl_size = bp_ring_ctrl_size(m.slots);
	m.data_size = bp_ring_arena_offset(m.slots) + BP_RING_RECORD_ALIGN;
	m.max_sample = 0;
	n = bp_msg_ready_encode(&m, prt_msg, sizeof(prt_msg));
	ck_assert_int_eq(n, READY_LEN);
	ck_assert_int_eq(bp_msg_ready_decode(prt_msg, (size_t)n, &got), 0);
	ck_assert_int_eq(got.placement, BP_PLACEMENT_HOST);
	ck_assert_uint_eq(got.slots, BP_RING_MAX_SLOTS);
	ck_assert_uint_eq(got.data_size, m.data_size);
}
END_TEST

START_TEST(test_error_roundtrip)
{
	bp_msg_error m = prt_sample_error(), got;
	int n;

	n = bp_msg_error_encode(&m, prt_msg, sizeof(prt_msg));
	ck_assert_int_eq(n, ERR_MESSAGE + (int)m.message_len);
	ck_assert_uint_eq(prt_rd(prt_msg + ERR_CODE, 4), (uint32_t)-ENOENT);
	ck_assert_uint_eq(prt_rd(prt_msg + ERR_LEN, 4), m.message_len);
	ck_assert_mem_eq(prt_msg + ERR_MESSAGE, SAMPLE_ERROR, m.message_len);
	ck_assert_int_eq(bp_msg_error_decode(prt_msg, (size_t)n, &got), 0);
	ck_assert_int_eq(got.code, -ENOENT);
	ck_assert_uint_eq(got.message_len, m.message_len);
	ck_assert_ptr_eq(got.message, (const char *)prt_msg + ERR_MESSAGE);

	/* Error text may carry any non-NUL bytes (paths are not ASCII). */
	m.code = -4095;
	m.message = prt_repeat('\xe9', BP_ERRMSG_MAX);
	m.message_len = BP_ERRMSG_MAX;
	n = bp_msg_error_encode(&m, prt_msg, sizeof(prt_msg));
	ck_assert_int_eq(n, ERR_MESSAGE + BP_ERRMSG_MAX);
	ck_assert_int_eq(bp_msg_error_decode(prt_msg, (size_t)n, &got), 0);
	ck_assert_int_eq(got.code, -4095);

	m.code = -1;
	m.message = NULL;
	m.message_len = 0;
	n = bp_msg_error_encode(&m, prt_msg, sizeof(prt_msg));
	ck_assert_int_eq(n, ERR_MESSAGE);
	ck_assert_int_eq(bp_msg_error_decode(prt_msg, (size_t)n, &got), 0);
	ck_assert_int_eq(got.code, -1);
	ck_assert_uint_eq(got.message_len, 0);
}
END_TEST

START_TEST(test_session_roundtrip)
{
	static const uint16_t types[] = { BP_MSG_CLOSE, BP_MSG_CLOSED };
	static const uint64_t ids[] = { 1, 42, UINT64_MAX };

	for (size_t t = 0; t < 2; t++) {
		for (size_t i = 0; i < 3; i++) {
			bp_msg_session m = { .session = ids[i] }, got;
			int n = bp_msg_session_encode(types[t], &m, prt_msg, sizeof(prt_msg));

			ck_assert_int_eq(n, SESSION_LEN);
			ck_assert_uint_eq(prt_rd(prt_msg + HDR_TYPE, 2), types[t]);
			ck_assert_uint_eq(prt_rd(prt_msg + SESSION_ID, 8), ids[i]);
			ck_assert_int_eq(bp_msg_session_decode(types[t], prt_msg, SESSION_LEN, &got), 0);
			ck_assert_uint_eq(got.session, ids[i]);
			/* CLOSE and CLOSED share a layout, not a type. */
			ck_assert_int_eq(bp_msg_session_decode(types[1 - t], prt_msg, SESSION_LEN, &got),
					 -EBADMSG);
		}
	}
}
END_TEST

START_TEST(test_status_roundtrip)
{
	ck_assert_int_eq(bp_msg_status_encode(prt_msg, 16), 16);
	ck_assert_int_eq(bp_msg_status_decode(prt_msg, 16), 0);
}
END_TEST

START_TEST(test_text_roundtrip)
{
	bp_msg_text m = prt_sample_status_reply(), got;
	int n;

	n = bp_msg_text_encode(BP_MSG_STATUS_REPLY, &m, prt_msg, sizeof(prt_msg));
	ck_assert_int_eq(n, TEXT_BYTES + (int)m.text_len);
	ck_assert_uint_eq(prt_rd(prt_msg + HDR_TYPE, 2), BP_MSG_STATUS_REPLY);
	ck_assert_uint_eq(prt_rd(prt_msg + TEXT_CODE, 4), 0);
	ck_assert_uint_eq(prt_rd(prt_msg + TEXT_LEN, 4), m.text_len);
	ck_assert_mem_eq(prt_msg + TEXT_BYTES, SAMPLE_JSON, m.text_len);
	ck_assert_int_eq(bp_msg_text_decode(BP_MSG_STATUS_REPLY, prt_msg, (size_t)n, &got), 0);
	ck_assert_int_eq(got.code, 0);
	ck_assert_uint_eq(got.text_len, m.text_len);
	ck_assert_ptr_eq(got.text, (const char *)prt_msg + TEXT_BYTES);

	m = prt_sample_goodbye();
	n = bp_msg_text_encode(BP_MSG_GOODBYE, &m, prt_msg, sizeof(prt_msg));
	ck_assert_int_eq(n, TEXT_BYTES + (int)m.text_len);
	ck_assert_uint_eq(prt_rd(prt_msg + TEXT_CODE, 4), (uint32_t)-ESHUTDOWN);
	ck_assert_int_eq(bp_msg_text_decode(BP_MSG_GOODBYE, prt_msg, (size_t)n, &got), 0);
	ck_assert_int_eq(got.code, -ESHUTDOWN);
	ck_assert_mem_eq(got.text, SAMPLE_REASON, got.text_len);

	/* The longest text fills the largest datagram exactly. */
	m = prt_sample_status_reply();
	m.text = prt_repeat('x', BP_STATUS_MAX);
	m.text_len = BP_STATUS_MAX;
	n = bp_msg_text_encode(BP_MSG_STATUS_REPLY, &m, prt_msg, sizeof(prt_msg));
	ck_assert_int_eq(n, BP_MSG_MAX);
	ck_assert_int_eq(bp_msg_text_decode(BP_MSG_STATUS_REPLY, prt_msg, (size_t)n, &got), 0);
	ck_assert_uint_eq(got.text_len, BP_STATUS_MAX);

	m = prt_sample_goodbye();
	m.text = NULL;
	m.text_len = 0;
	n = bp_msg_text_encode(BP_MSG_GOODBYE, &m, prt_msg, sizeof(prt_msg));
	ck_assert_int_eq(n, TEXT_BYTES);
	ck_assert_int_eq(bp_msg_text_decode(BP_MSG_GOODBYE, prt_msg, (size_t)n, &got), 0);
}
END_TEST

static Suite *roundtrip_suite(void)
{
	Suite *s = suite_create("protocol-roundtrip");
	TCase *tc;

	tc = tcase_create("roundtrip");
	tcase_add_test(tc, test_hello_roundtrip);
	tcase_add_test(tc, test_hello_ok_roundtrip);
	tcase_add_test(tc, test_open_roundtrip);
	tcase_add_test(tc, test_open_resume_roundtrip);
	tcase_add_test(tc, test_open_decode_roundtrip);
	tcase_add_test(tc, test_open_decode_ranges);
	tcase_add_test(tc, test_open_sequences_roundtrip);
	tcase_add_test(tc, test_open_sources_roundtrip);
	tcase_add_test(tc, test_ready_roundtrip);
	tcase_add_test(tc, test_error_roundtrip);
	tcase_add_test(tc, test_session_roundtrip);
	tcase_add_test(tc, test_status_roundtrip);
	tcase_add_test(tc, test_text_roundtrip);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return prt_run(roundtrip_suite());
}
