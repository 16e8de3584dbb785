/* SPDX-License-Identifier: MIT */
/*
 * gen-protocol-corpus.c - write the seed corpus for fuzz-protocol.
 *
 * A fuzzer that starts from one valid message of each type reaches every
 * body decoder's field checks at once instead of rediscovering the magic,
 * the type numbers and the exact-length rule. This writes one valid message
 * per type (three OPENs: device and host placement, and one selecting
 * fields and keys) plus damaged ones: empty,
 * a short header, a bad magic, a future version, an unknown type, a length
 * that disagrees with the datagram, a trailing byte, a NUL in a path, a
 * non-printable client name. Deterministic; run by hand, output committed:
 *
 *   build/tests/fuzz/gen-protocol-corpus tests/fuzz/corpus/protocol
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "protocol.h"
#include "ring.h"

static const char *out_dir;
static int failed;

static void put(const char *name, const uint8_t *buf, size_t len)
{
	char path[4096];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", out_dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, buf, len) != (ssize_t)len) {
		fprintf(stderr, "gen-protocol-corpus: %s: %s\n", path, strerror(errno));
		failed = 1;
	} else {
		printf("%-28s %6zu bytes\n", name, len);
	}
	if (fd >= 0)
		close(fd);
}

/* Put an encoder's result; @return its length (0 after a failure). */
static size_t put_encoded(const char *name, int n, const uint8_t *buf)
{
	if (n < 0) {
		fprintf(stderr, "gen-protocol-corpus: %s: encoder says %s\n", name, strerror(-n));
		failed = 1;
		return 0;
	}
	put(name, buf, (size_t)n);
	return (size_t)n;
}

static void le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void le32(uint8_t *p, uint32_t v)
{
	le16(p, (uint16_t)v);
	le16(p + 2, (uint16_t)(v >> 16));
}

int main(int argc, char **argv)
{
	static const char path[] = "/data/imagenet/train";
	uint8_t buf[512], bad[512];
	size_t open_len, hello_len, ready_len;

	if (argc != 2) {
		fprintf(stderr, "usage: %s OUTPUT-DIR\n", argv[0]);
		return 2;
	}
	out_dir = argv[1];

	bp_msg_hello hello = { .min_version = 1, .max_version = 1, .name = "trainer-0",
			       .name_len = 9 };
	hello_len = put_encoded("hello.bin", bp_msg_hello_encode(&hello, buf, sizeof(buf)), buf);
	memcpy(bad, buf, hello_len);

	bp_msg_hello_ok ok = { .version = 1, .max_sessions = 16, .max_batch_size = 4096,
			       .server = "batchd 0.1.0", .server_len = 12 };
	put_encoded("hello-ok.bin", bp_msg_hello_ok_encode(&ok, buf, sizeof(buf)), buf);

	bp_msg_open open_dev = { .seed = 0x0123456789abcdefu, .start_epoch = 3, .start_batch = 77,
				 .batch_size = 256, .rank = 3, .world = 8, .prefetch = 16,
				 .window = 64, .placement = 0, .shuffle = BP_SHUFFLE_BLOCK,
				 .drop_last = true, .path = path, .path_len = sizeof(path) - 1 };
	open_len = put_encoded("open.bin", bp_msg_open_encode(&open_dev, buf, sizeof(buf)), buf);

	bp_msg_open open_host = { .seed = 7, .batch_size = 32, .rank = 0, .world = 1,
				  .placement = BP_PLACEMENT_HOST, .shuffle = BP_SHUFFLE_GLOBAL,
				  .path = "shards", .path_len = 6 };
	put_encoded("open-host.bin", bp_msg_open_encode(&open_host, buf, sizeof(buf)), buf);

	bp_msg_open open_fields = { .seed = 11, .batch_size = 64, .rank = 1, .world = 3,
				    .placement = BP_PLACEMENT_HOST, .shuffle = BP_SHUFFLE_GLOBAL,
				    .keys = true, .fields = "jpg,label", .fields_len = 9,
				    .path = "imagefolder.bpk", .path_len = 15 };
	put_encoded("open-fields.bin", bp_msg_open_encode(&open_fields, buf, sizeof(buf)), buf);

	/* Elastic resume: the trailer after the path, behind a field list. */
	bp_msg_open open_resume = { .seed = 13, .start_epoch = 2, .start_batch = 1,
				    .batch_size = 32, .rank = 2, .world = 3,
				    .placement = BP_PLACEMENT_HOST, .shuffle = BP_SHUFFLE_BLOCK,
				    .fields = "label", .fields_len = 5, .path = "shards",
				    .path_len = 6, .start_sample = 960, .batch_stride = 4 };
	put_encoded("open-resume.bin", bp_msg_open_encode(&open_resume, buf, sizeof(buf)), buf);

	/* Images decoded in the daemon: the decode trailer after the resume trailer. */
	bp_msg_open open_decode = { .seed = 17, .batch_size = 64, .rank = 0, .world = 1,
				    .placement = BP_PLACEMENT_HOST, .shuffle = BP_SHUFFLE_GLOBAL,
				    .fields = "image,label", .fields_len = 11,
				    .path = "imagenet", .path_len = 8, .start_sample = 64,
				    .decode = { .kind = BP_DECODE_IMAGE,
						.crop = BP_CROP_RANDOM_RESIZED, .height = 224,
						.width = 224, .scale_min = 0.08f, .scale_max = 1.0f,
						.ratio_min = 0.75f, .ratio_max = 4.0f / 3.0f,
						.flip = 0.5f, .field = "image", .field_len = 5 } };
	put_encoded("open-decode.bin", bp_msg_open_encode(&open_decode, buf, sizeof(buf)), buf);

	/* Token packs as packed sequences, and a mixture of three: the last two trailers. */
	bp_msg_open open_seq = { .seed = 19, .batch_size = 32, .rank = 1, .world = 2,
				 .placement = BP_PLACEMENT_HOST, .shuffle = BP_SHUFFLE_GLOBAL,
				 .path = "web.bpk", .path_len = 7, .start_sample = 96,
				 .sequences = BP_SEQUENCES_PACKED, .seq_len = 2048 };
	put_encoded("open-sequences.bin", bp_msg_open_encode(&open_seq, buf, sizeof(buf)), buf);
	open_seq.sources = 3;
	open_seq.epoch_samples = 100000;
	open_seq.source[0].count = 7;
	open_seq.source[1] = (bp_open_source){ .count = 2, .path = "code.bpk", .path_len = 8 };
	open_seq.source[2] = (bp_open_source){ .count = 1, .path = "math.bpk", .path_len = 8 };
	put_encoded("open-mixture.bin", bp_msg_open_encode(&open_seq, buf, sizeof(buf)), buf);

	bp_msg_ready ready = { .session = 42, .fingerprint = 0xfeedfacecafebeefu,
			       .samples = 1281167, .batches_per_epoch = 625,
			       .data_size = bp_ring_arena_offset(8) + (1u << 20),
			       .ctrl_size = bp_ring_ctrl_size(8), .max_sample = 150000,
			       .batch_size = 256, .slots = 8, .placement = 0 };
	ready_len = put_encoded("ready.bin", bp_msg_ready_encode(&ready, buf, sizeof(buf)), buf);

	bp_msg_error error = { .code = -ENOENT, .message = "dataset /data/x: no such file",
			       .message_len = 29 };
	put_encoded("error.bin", bp_msg_error_encode(&error, buf, sizeof(buf)), buf);

	bp_msg_session session = { .session = 42 };
	put_encoded("close.bin", bp_msg_session_encode(BP_MSG_CLOSE, &session, buf, sizeof(buf)),
		    buf);
	put_encoded("closed.bin",
		    bp_msg_session_encode(BP_MSG_CLOSED, &session, buf, sizeof(buf)), buf);
	put_encoded("status.bin", bp_msg_status_encode(buf, sizeof(buf)), buf);

	bp_msg_text reply = { .code = 0, .text = "{\"sessions\":1,\"gpu\":false}", .text_len = 26 };
	put_encoded("status-reply.bin",
		    bp_msg_text_encode(BP_MSG_STATUS_REPLY, &reply, buf, sizeof(buf)), buf);
	bp_msg_text bye = { .code = -ESHUTDOWN, .text = "daemon stopping", .text_len = 15 };
	put_encoded("goodbye.bin", bp_msg_text_encode(BP_MSG_GOODBYE, &bye, buf, sizeof(buf)),
		    buf);
	put_encoded("metrics.bin", bp_msg_metrics_encode(buf, sizeof(buf)), buf);
	bp_msg_text part = { .code = BP_TEXT_MORE, .text = "batchd_up 1\n", .text_len = 12 };
	put_encoded("metrics-reply-part.bin",
		    bp_msg_text_encode(BP_MSG_METRICS_REPLY, &part, buf, sizeof(buf)), buf);
	if (failed)
		return 1;

	/* Damaged messages. */
	put("empty.bin", buf, 0);
	bad[hello_len - 1] = 0x07; /* BEL at the end of the name */
	put("hello-nonprintable.bin", bad, hello_len);
	put("short-header.bin", bad, 10);

	bp_msg_open_encode(&open_dev, bad, sizeof(bad));
	bad[0] ^= 0x01;
	put("bad-magic.bin", bad, open_len);
	bp_msg_open_encode(&open_dev, bad, sizeof(bad));
	le16(bad + 6, BP_PROTO_VERSION + 1);
	put("future-version.bin", bad, open_len);
	bp_msg_open_encode(&open_dev, bad, sizeof(bad));
	le16(bad + 4, 0x00ff);
	put("unknown-type.bin", bad, open_len);
	bp_msg_open_encode(&open_dev, bad, sizeof(bad));
	bad[open_len - 5] = 0; /* NUL inside the path */
	put("open-nul-path.bin", bad, open_len);
	bp_msg_open_encode(&open_dev, bad, sizeof(bad));
	bad[open_len] = '/';
	le32(bad + 8, (uint32_t)open_len + 1);
	put("open-trailing-byte.bin", bad, open_len + 1);
	le32(bad + 8, (uint32_t)open_len - 3); /* cut short, header rewritten to match */
	put("open-truncated.bin", bad, open_len - 3);

	bp_msg_ready_encode(&ready, bad, sizeof(bad));
	le32(bad + 8, (uint32_t)ready_len + 8);
	put("ready-length-mismatch.bin", bad, ready_len);
	return failed;
}
