/* SPDX-License-Identifier: MIT */
/*
 * protocol-testlib.h - the fixture shared by the protocol suites
 * (tests/unit/test-protocol-*.c): message buffers, one sample message of every
 * type, and the patch-and-decode helpers the attacks are written with.
 *
 * The suites check the byte layout against PROTOCOL.md's tables, so the
 * offsets are restated here rather than taken from the encoder, and bytes
 * are read and written by hand (prt_rd, prt_wr) rather than through
 * lib/endian.h. Every decode goes through prt_decode_as, which also
 * asserts that whatever a decoder accepts re-encodes to exactly the bytes
 * it was given: a decoder cannot quietly normalise what a peer sent.
 *
 * Thread rules: everything here is called from a test's one thread (Check
 * runs each test in a forked child); the buffers are process-wide.
 */
#ifndef BATCHD_TESTS_PROTOCOL_TESTLIB_H
#define BATCHD_TESTS_PROTOCOL_TESTLIB_H

#include <stddef.h>
#include <stdint.h>

#include <check.h>

#include "protocol.h"

#define TYPE_FIRST BP_MSG_HELLO
#define TYPE_LAST  BP_MSG_METRICS_REPLY
#define TYPE_COUNT (TYPE_LAST - TYPE_FIRST + 1)

/* Big enough for any message plus room to build over-long ones. */
#define BUF_SIZE (BP_MSG_MAX + 8192)

/* Offsets as PROTOCOL.md lays them out (from the start of the message). */
enum {
	HDR_MAGIC = 0, HDR_TYPE = 4, HDR_VERSION = 6, HDR_LENGTH = 8, HDR_RESERVED = 12,

	HELLO_MIN = 16, HELLO_MAX = 18, HELLO_NAME_LEN = 20, HELLO_NAME = 24,

	OK_VERSION = 16, OK_RESERVED = 18, OK_MAX_SESSIONS = 20, OK_MAX_BATCH = 24,
	OK_SERVER_LEN = 28, OK_SERVER = 32,

	OPEN_SEED = 16, OPEN_EPOCH = 24, OPEN_BATCH = 32, OPEN_BATCH_SIZE = 40, OPEN_RANK = 44,
	OPEN_WORLD = 48, OPEN_PREFETCH = 52, OPEN_WINDOW = 56, OPEN_PLACEMENT = 60,
	OPEN_SHUFFLE = 64, OPEN_DROP_LAST = 65, OPEN_RESERVED = 66, OPEN_UUID = 68,
	OPEN_PATH_LEN = 84, OPEN_PATH = 88,

	READY_SESSION = 16, READY_FINGERPRINT = 24, READY_SAMPLES = 32, READY_BPE = 40,
	READY_DATA_SIZE = 48, READY_CTRL_SIZE = 56, READY_MAX_SAMPLE = 64,
	READY_BATCH_SIZE = 72, READY_SLOTS = 76, READY_PLACEMENT = 80, READY_RESERVED = 84,
	READY_LEN = 88,

	ERR_CODE = 16, ERR_LEN = 20, ERR_MESSAGE = 24,

	SESSION_ID = 16, SESSION_LEN = 24,

	TEXT_CODE = 16, TEXT_LEN = 20, TEXT_BYTES = 24,
};

/* The strings the sample messages carry (literals, so sizeof works). */
#define SAMPLE_NAME   "trainer-0 (rank 3)"
#define SAMPLE_SERVER "batchd 0.1.0"
#define SAMPLE_PATH   "/data/imagenet/train"
#define SAMPLE_ERROR  "dataset /data/x: No such file or directory"
#define SAMPLE_JSON   "{\"sessions\":1,\"gpu\":false}"
#define SAMPLE_REASON "daemon stopping (SIGTERM)"

/* The message under test (prt_sample writes it) and a decoder's re-encoding. */
extern uint8_t prt_msg[BUF_SIZE], prt_out[BUF_SIZE];

/* Little-endian `width`-byte integer at p: read, write. */
uint64_t prt_rd(const uint8_t *p, int width);
void prt_wr(uint8_t *p, int width, uint64_t v);

/* One valid message of each type, every field set to something telling. */
bp_msg_hello prt_sample_hello(void);
bp_msg_hello_ok prt_sample_hello_ok(void);
bp_msg_open prt_sample_open(void);
bp_msg_ready prt_sample_ready(void);
bp_msg_error prt_sample_error(void);
bp_msg_text prt_sample_status_reply(void);
bp_msg_text prt_sample_goodbye(void);

/* The sample message of `type`, through its encoder: its length or -errno. */
int prt_encode_sample(uint16_t type, uint8_t *buf, size_t cap);
/* Encode the sample of `type` into prt_msg; @return its length. */
size_t prt_sample(uint16_t type);

/*
 * Decode buf as `type`: 0 or the decoder's errno. Bytes it accepts must
 * re-encode to themselves (asserted, through prt_out).
 */
int prt_decode_as(uint16_t type, const uint8_t *buf, size_t len);
/* Patch `width` bytes at `off` of the sample of `type` to v and decode it. */
int prt_decode_patched(uint16_t type, size_t off, int width, uint64_t v);

/*
 * Build in prt_msg, byte by byte, a message of `type` whose string (length
 * field at str_at - 4) is s[0..slen): the fixed part comes from the sample,
 * the string and the header length from the arguments. No validation, so
 * it can hold what no encoder would write. @return its length.
 */
size_t prt_string_msg(uint16_t type, size_t str_at, const char *s, size_t slen);

/* n copies of c (not NUL-terminated), in a static buffer of BUF_SIZE. */
char *prt_repeat(char c, size_t n);

/* Run suite s with Check's defaults; @return main's exit status. */
int prt_run(Suite *s);

#endif
