/* SPDX-License-Identifier: MIT */
/*
 * protocol.c - encode, decode and validate the control messages
 * (PROTOCOL.md).
 *
 * Every message is parsed straight out of a datagram a peer chose, so the
 * rule of pack.c holds here too: no field is used before it is checked.
 * Each message has one validator, shared by its encoder and its decoder,
 * so the two cannot drift apart: whatever an encoder accepts, the decoder
 * accepts, and every byte sequence a decoder accepts re-encodes to itself
 * (reserved bytes must be zero, booleans 0 or 1, lengths exact), which the
 * fuzz target checks. Decoders write their out-parameter only on success;
 * strings they return point into the caller's buffer.
 *
 * Pure functions: any thread may call them, no allocation, no I/O.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "endian.h"
#include "protocol.h"
#include "ring.h"

/* Header field offsets. */
enum {
	H_MAGIC = 0,
	H_TYPE = 4,
	H_VERSION = 6,
	H_LENGTH = 8,
	H_RESERVED = 12,
};

/* Body field offsets, from the start of the message (the header is 0..15). */
enum {
	HELLO_MIN_VERSION = 16,
	HELLO_MAX_VERSION = 18,
	HELLO_NAME_LEN = 20,
	HELLO_NAME = 24,

	HELLO_OK_VERSION = 16,
	HELLO_OK_RESERVED = 18,
	HELLO_OK_MAX_SESSIONS = 20,
	HELLO_OK_MAX_BATCH_SIZE = 24,
	HELLO_OK_SERVER_LEN = 28,
	HELLO_OK_SERVER = 32,

	OPEN_SEED = 16,
	OPEN_START_EPOCH = 24,
	OPEN_START_BATCH = 32,
	OPEN_BATCH_SIZE = 40,
	OPEN_RANK = 44,
	OPEN_WORLD = 48,
	OPEN_PREFETCH = 52,
	OPEN_WINDOW = 56,
	OPEN_PLACEMENT = 60,
	OPEN_SHUFFLE = 64,
	OPEN_DROP_LAST = 65,
	OPEN_FLAGS = 66,
	OPEN_DEVICE_UUID = 68,
	OPEN_PATH_LEN = 84,
	OPEN_PATH = 88,
	OPEN_FIELDS = 92,            /* with BP_OPEN_FIELDS: the list, then the path */
	/* With BP_OPEN_RESUME, after the path: */
	OPEN_RESUME_SAMPLE = 0,      /* u64 start_sample */
	OPEN_RESUME_STRIDE = 8,      /* u32 batch_stride, 1 .. BP_STRIDE_MAX */
	OPEN_RESUME_SIZE = 12,
	/* With BP_OPEN_SOURCES, last: u64 epoch_samples, u32 counts, paths, then: */
	OPEN_SRC_TAIL = 8,           /* u32 sources, u32 the trailer's bytes */
	/* With BP_OPEN_SEQUENCES, before it: */
	OPEN_SEQ_LEN = 0,            /* u32 seq_len, 1 .. BP_SEQ_LEN_MAX */
	OPEN_SEQ_MODE = 4,           /* u8 enum bp_sequences, then 3 bytes zero */
	OPEN_SEQ_SIZE = 8,
	/* With BP_OPEN_DECODE, before it: */
	OPEN_DECODE_HEIGHT = 0,      /* u32 */
	OPEN_DECODE_WIDTH = 4,       /* u32 */
	OPEN_DECODE_RESIZE = 8,      /* u32 */
	OPEN_DECODE_KIND = 12,       /* u8 */
	OPEN_DECODE_CROP = 13,       /* u8 */
	OPEN_DECODE_LAYOUT = 14,     /* u8 */
	OPEN_DECODE_ON_ERROR = 15,   /* u8 */
	OPEN_DECODE_SCALE_MIN = 16,  /* f32, as its IEEE 754 bits, little-endian */
	OPEN_DECODE_SCALE_MAX = 20,
	OPEN_DECODE_RATIO_MIN = 24,
	OPEN_DECODE_RATIO_MAX = 28,
	OPEN_DECODE_FLIP = 32,
	OPEN_DECODE_FIELD_LEN = 36,  /* u8, 1 .. 64 */
	OPEN_DECODE_FIELD = 37,      /* u8[64]: the name, zero after it */
	OPEN_DECODE_RESERVED = 101,  /* u8[3], zero */
	OPEN_DECODE_SIZE = 104,

	READY_SESSION = 16,
	READY_FINGERPRINT = 24,
	READY_SAMPLES = 32,
	READY_BATCHES_PER_EPOCH = 40,
	READY_DATA_SIZE = 48,
	READY_CTRL_SIZE = 56,
	READY_MAX_SAMPLE = 64,
	READY_BATCH_SIZE = 72,
	READY_SLOTS = 76,
	READY_PLACEMENT = 80,
	READY_RESERVED = 84,
	READY_SIZE = 88,

	ERROR_CODE = 16,
	ERROR_MESSAGE_LEN = 20,
	ERROR_MESSAGE = 24,

	SESSION_ID = 16,
	SESSION_SIZE = 24,

	TEXT_CODE = 16,
	TEXT_LEN = 20,
	TEXT = 24,
};

/* Limits PROTOCOL.md states that protocol.h has no constant for. */
#define PROTO_SERVER_MAX     64u
#define PROTO_BATCH_SIZE_MAX (UINT32_C(1) << 20)
#define PROTO_WORLD_MAX      (UINT32_C(1) << 16)
#define PROTO_PREFETCH_MAX   4096u
#define PROTO_WINDOW_MAX     (UINT32_C(1) << 20)
#define PROTO_PLACEMENT_MAX  255
#define PROTO_ERRNO_MAX      4095
#define PROTO_FIELD_NAME_MAX 64u
#define PROTO_FIELDS_MAX     64u

static uint16_t le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static void put_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

/* ---- shared rules ------------------------------------------------------ */

/* A string field: NULL only when empty, at most max bytes. */
static bool string_ok(const char *s, uint32_t len, uint32_t max)
{
	return len <= max && (s || len == 0);
}

static bool printable(const char *s, uint32_t len)
{
	for (uint32_t i = 0; i < len; i++)
		if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
			return false;
	return true;
}

static bool no_nul(const char *s, uint32_t len)
{
	return len == 0 || !memchr(s, 0, len);
}

/* A negative errno as the wire carries it: -4095 .. -1. */
static bool errno_ok(int32_t code)
{
	return code < 0 && code >= -PROTO_ERRNO_MAX;
}

static bool placement_ok(int32_t placement)
{
	return placement >= BP_PLACEMENT_HOST && placement <= PROTO_PLACEMENT_MAX;
}

static bool batch_size_ok(uint32_t batch_size)
{
	return batch_size >= 1 && batch_size <= PROTO_BATCH_SIZE_MAX;
}

static bool version_known(uint16_t version)
{
	return version >= BP_PROTO_MIN_VERSION && version <= BP_PROTO_VERSION;
}

static bool hello_valid(const bp_msg_hello *m)
{
	return m->min_version >= 1 && m->min_version <= m->max_version &&
	       string_ok(m->name, m->name_len, BP_NAME_MAX) && printable(m->name, m->name_len);
}

static bool hello_ok_valid(const bp_msg_hello_ok *m)
{
	return version_known(m->version) && m->max_sessions >= 1 &&
	       batch_size_ok(m->max_batch_size) &&
	       string_ok(m->server, m->server_len, PROTO_SERVER_MAX) &&
	       printable(m->server, m->server_len);
}

static bool name_byte(unsigned char ch)
{
	return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
	       ch == '_' || ch == '.' || ch == '-';
}

/*
 * OPEN's field list: names of 1 .. 64 name bytes between single commas,
 * at most 64 of them. Whether the dataset has them, and duplicates, are
 * the daemon's to judge (its answer names the fields it has).
 */
static bool field_list_ok(const char *s, uint32_t len)
{
	uint32_t names = 1, run = 0;

	if (!string_ok(s, len, BP_FIELD_LIST_MAX))
		return false;
	for (uint32_t i = 0; i < len; i++) {
		if (s[i] == ',') {
			if (run == 0)
				return false;
			run = 0;
			names++;
		} else if (!name_byte((unsigned char)s[i]) || ++run > PROTO_FIELD_NAME_MAX) {
			return false;
		}
	}
	return len == 0 || (run > 0 && names <= PROTO_FIELDS_MAX);
}

static bool in_range(float v, float lo, float hi)
{
	return v >= lo && v <= hi; /* false for a NaN */
}

/* A decode trailer's fields, each in its range (what they mean together is the daemon's). */
static bool decode_valid(const bp_open_decode *d)
{
	if (d->kind == 0)
		return true;
	return d->kind == BP_DECODE_IMAGE &&
	       (d->crop == BP_CROP_RANDOM_RESIZED || d->crop == BP_CROP_CENTER) &&
	       d->layout <= BP_LAYOUT_NHWC && d->on_error <= BP_ON_ERROR_SKIP &&
	       d->height >= 1 && d->height <= BP_DECODE_SIDE_MAX && d->width >= 1 &&
	       d->width <= BP_DECODE_SIDE_MAX && d->resize <= BP_DECODE_RESIZE_MAX &&
	       in_range(d->scale_min, 0x1p-24f, 1.0f) && in_range(d->scale_max, d->scale_min, 1.0f) &&
	       in_range(d->ratio_min, 0x1p-24f, 100.0f) &&
	       in_range(d->ratio_max, d->ratio_min, 100.0f) && in_range(d->flip, 0.0f, 1.0f) &&
	       d->field && d->field_len >= 1 && d->field_len <= PROTO_FIELD_NAME_MAX &&
	       field_list_ok(d->field, d->field_len) && !memchr(d->field, ',', d->field_len);
}

/* A sequences trailer's fields in their ranges; none at all when sequences is 0. */
static bool sequences_valid(const bp_msg_open *m)
{
	if (m->sequences == BP_SEQUENCES_NONE)
		return m->seq_len == 0;
	return m->sequences <= BP_SEQUENCES_PACKED && m->seq_len >= 1 &&
	       m->seq_len <= BP_SEQ_LEN_MAX;
}

/* A mixture's sources: 2 .. 64 of them, counts summing to a period, paths as OPEN's. */
static bool sources_valid(const bp_msg_open *m)
{
	uint64_t period = 0;

	if (m->sources == 0)
		return true;
	if (m->sources < 2 || m->sources > BP_MIX_SOURCES_MAX)
		return false;
	for (uint32_t i = 0; i < m->sources; i++) {
		const bp_open_source *src = &m->source[i];

		if (src->count < 1 || src->count > BP_MIX_PERIOD_MAX)
			return false;
		period += src->count;
		if (i && (src->path_len < 1 || !string_ok(src->path, src->path_len, BP_PATH_MAX) ||
			  !no_nul(src->path, src->path_len)))
			return false;
	}
	return period <= BP_MIX_PERIOD_MAX;
}

/* The sources trailer's bytes. */
static uint64_t sources_size(const bp_msg_open *m)
{
	uint64_t n = 8 + 4 * (uint64_t)m->sources + OPEN_SRC_TAIL;

	for (uint32_t i = 1; i < m->sources; i++)
		n += 4 + (uint64_t)m->source[i].path_len;
	return m->sources ? n : 0;
}

static void sources_put(uint8_t *t, const bp_msg_open *m)
{
	uint64_t at = 8;

	bp_put_le64(t, m->epoch_samples);
	for (uint32_t i = 0; i < m->sources; i++, at += 4)
		bp_put_le32(t + at, m->source[i].count);
	for (uint32_t i = 1; i < m->sources; i++) {
		bp_put_le32(t + at, m->source[i].path_len);
		memcpy(t + at + 4, m->source[i].path, m->source[i].path_len);
		at += 4 + m->source[i].path_len;
	}
	bp_put_le32(t + at, m->sources);
	bp_put_le32(t + at + 4, (uint32_t)(at + OPEN_SRC_TAIL));
}

/* The sources trailer ending buf[0..len), off the end. @return its bytes, or -EBADMSG. */
static int64_t sources_get(const uint8_t *buf, size_t len, bp_msg_open *m)
{
	uint64_t size, at;

	if (len < OPEN_PATH + OPEN_SRC_TAIL)
		return -EBADMSG;
	m->sources = bp_le32(buf + len - OPEN_SRC_TAIL);
	size = bp_le32(buf + len - 4);
	if (m->sources < 2 || m->sources > BP_MIX_SOURCES_MAX || size > len - OPEN_PATH ||
	    size < 8 + 4 * (uint64_t)m->sources + OPEN_SRC_TAIL)
		return -EBADMSG;
	buf += len - size;
	m->epoch_samples = bp_le64(buf);
	at = 8;
	for (uint32_t i = 0; i < m->sources; i++, at += 4)
		m->source[i].count = bp_le32(buf + at);
	for (uint32_t i = 1; i < m->sources; i++) {
		if (at + 4 > size - OPEN_SRC_TAIL)
			return -EBADMSG;
		m->source[i].path_len = bp_le32(buf + at);
		if (m->source[i].path_len > size - OPEN_SRC_TAIL - at - 4)
			return -EBADMSG;
		m->source[i].path = (const char *)buf + at + 4;
		at += 4 + m->source[i].path_len;
	}
	/* The paths fill the trailer exactly: it re-encodes to itself. */
	return at + OPEN_SRC_TAIL == size ? (int64_t)size : -EBADMSG;
}

static bool open_valid(const bp_msg_open *m)
{
	return decode_valid(&m->decode) && sequences_valid(m) && sources_valid(m) &&
	       batch_size_ok(m->batch_size) && m->world >= 1 && m->world <= PROTO_WORLD_MAX &&
	       m->rank < m->world && m->prefetch <= PROTO_PREFETCH_MAX &&
	       m->window <= PROTO_WINDOW_MAX && placement_ok(m->placement) &&
	       m->shuffle <= BP_SHUFFLE_BLOCK && m->path_len >= 1 &&
	       string_ok(m->path, m->path_len, BP_PATH_MAX) && no_nul(m->path, m->path_len) &&
	       field_list_ok(m->fields, m->fields_len) && m->batch_stride <= BP_STRIDE_MAX;
}

/* Whether OPEN needs its BP_OPEN_RESUME trailer: a stride of 0 is taken as 1. */
static bool open_resumes(const bp_msg_open *m)
{
	return m->start_sample != 0 || m->batch_stride > 1;
}

/*
 * The sizes must describe a ring the client can map: the control memfd is
 * exactly what ring.h computes for the slot count, and the data memfd holds
 * the header, the descriptors and a non-empty, page-sized arena.
 */
static bool ready_valid(const bp_msg_ready *m)
{
	if (m->session == 0 || m->samples == 0 || m->batches_per_epoch == 0 ||
	    !batch_size_ok(m->batch_size) || !placement_ok(m->placement))
		return false;
	if (m->slots == 0 || m->slots > BP_RING_MAX_SLOTS)
		return false;
	return m->ctrl_size == bp_ring_ctrl_size(m->slots) &&
	       m->data_size > bp_ring_arena_offset(m->slots) &&
	       m->data_size % BP_RING_RECORD_ALIGN == 0;
}

static bool error_valid(const bp_msg_error *m)
{
	return errno_ok(m->code) && string_ok(m->message, m->message_len, BP_ERRMSG_MAX) &&
	       no_nul(m->message, m->message_len);
}

static bool session_type(uint16_t type)
{
	return type == BP_MSG_CLOSE || type == BP_MSG_CLOSED;
}

static bool text_type(uint16_t type)
{
	return type == BP_MSG_STATUS_REPLY || type == BP_MSG_METRICS_REPLY || type == BP_MSG_GOODBYE;
}

static bool text_valid(uint16_t type, const bp_msg_text *m)
{
	/* Replies: 0 for the last part, BP_TEXT_MORE when more parts follow. */
	if (type == BP_MSG_GOODBYE ? !errno_ok(m->code)
				   : m->code != 0 && m->code != BP_TEXT_MORE)
		return false;
	return string_ok(m->text, m->text_len, BP_STATUS_MAX) && no_nul(m->text, m->text_len);
}

/* ---- header ------------------------------------------------------------ */

/* Validate, then check room: -EINVAL wins over -ENOSPC. */
static int begin(bool valid, const uint8_t *buf, size_t cap, uint64_t len)
{
	if (!valid || (!buf && cap) || len > BP_MSG_MAX)
		return -EINVAL;
	if (cap < len)
		return -ENOSPC;
	return 0;
}

static void put_header(uint8_t *buf, uint16_t type, uint32_t len)
{
	bp_put_le32(buf + H_MAGIC, BP_PROTO_MAGIC);
	put_le16(buf + H_TYPE, type);
	put_le16(buf + H_VERSION, BP_PROTO_VERSION);
	bp_put_le32(buf + H_LENGTH, len);
	bp_put_le32(buf + H_RESERVED, 0);
}

static void put_string(uint8_t *at, const char *s, uint32_t len)
{
	bp_put_le32(at, len);
	if (len)
		memcpy(at + 4, s, len);
}

int bp_msg_header_decode(const uint8_t *buf, size_t len, bp_msg_header *ret)
{
	bp_msg_header h;

	if (!buf || len < BP_MSG_HEADER_SIZE || len > BP_MSG_MAX)
		return -EBADMSG;
	h.magic = bp_le32(buf + H_MAGIC);
	h.type = le16(buf + H_TYPE);
	h.version = le16(buf + H_VERSION);
	h.length = bp_le32(buf + H_LENGTH);
	h.reserved = bp_le32(buf + H_RESERVED);
	if (h.magic != BP_PROTO_MAGIC)
		return -EBADMSG;
	/*
	 * The version is judged before anything else a later version may
	 * redefine (types, lengths), so a peer from the future learns it is
	 * from the future rather than that it is malformed.
	 */
	if (!version_known(h.version))
		return -EPROTONOSUPPORT;
	if (h.type < BP_MSG_HELLO || h.type > BP_MSG_METRICS_REPLY || h.length != len ||
	    h.reserved != 0)
		return -EBADMSG;
	*ret = h;
	return 0;
}

/*
 * The header of a message the caller expects to be of type `type`, whose
 * body is `fixed` bytes, optionally followed by a string whose u32 length
 * sits at `len_at` (0: no string). The message must end exactly where its
 * last field does. On success *ret_str_len is the string's length.
 */
static int open_message(const uint8_t *buf, size_t len, uint16_t type, size_t fixed,
			size_t len_at, uint32_t *ret_str_len)
{
	bp_msg_header h;
	uint32_t str_len = 0;

	if (bp_msg_header_decode(buf, len, &h) < 0 || h.type != type)
		return -EBADMSG;
	if (len < fixed)
		return -EBADMSG;
	if (len_at) {
		str_len = bp_le32(buf + len_at);
		/* len <= BP_MSG_MAX, so the sum cannot wrap. */
		if ((uint64_t)fixed + str_len != len)
			return -EBADMSG;
	} else if (len != fixed) {
		return -EBADMSG;
	}
	*ret_str_len = str_len;
	return 0;
}

/* ---- HELLO ------------------------------------------------------------- */

int bp_msg_hello_encode(const bp_msg_hello *m, uint8_t *buf, size_t cap)
{
	uint64_t len;
	int r;

	if (!m)
		return -EINVAL;
	len = (uint64_t)HELLO_NAME + m->name_len;
	r = begin(hello_valid(m), buf, cap, len);
	if (r < 0)
		return r;
	put_header(buf, BP_MSG_HELLO, (uint32_t)len);
	put_le16(buf + HELLO_MIN_VERSION, m->min_version);
	put_le16(buf + HELLO_MAX_VERSION, m->max_version);
	put_string(buf + HELLO_NAME_LEN, m->name, m->name_len);
	return (int)len;
}

int bp_msg_hello_decode(const uint8_t *buf, size_t len, bp_msg_hello *ret)
{
	bp_msg_hello m;

	if (open_message(buf, len, BP_MSG_HELLO, HELLO_NAME, HELLO_NAME_LEN, &m.name_len) < 0)
		return -EBADMSG;
	m.min_version = le16(buf + HELLO_MIN_VERSION);
	m.max_version = le16(buf + HELLO_MAX_VERSION);
	m.name = (const char *)buf + HELLO_NAME;
	if (!hello_valid(&m))
		return -EBADMSG;
	*ret = m;
	return 0;
}

/* ---- HELLO_OK ---------------------------------------------------------- */

int bp_msg_hello_ok_encode(const bp_msg_hello_ok *m, uint8_t *buf, size_t cap)
{
	uint64_t len;
	int r;

	if (!m)
		return -EINVAL;
	len = (uint64_t)HELLO_OK_SERVER + m->server_len;
	r = begin(hello_ok_valid(m), buf, cap, len);
	if (r < 0)
		return r;
	put_header(buf, BP_MSG_HELLO_OK, (uint32_t)len);
	put_le16(buf + HELLO_OK_VERSION, m->version);
	put_le16(buf + HELLO_OK_RESERVED, 0);
	bp_put_le32(buf + HELLO_OK_MAX_SESSIONS, m->max_sessions);
	bp_put_le32(buf + HELLO_OK_MAX_BATCH_SIZE, m->max_batch_size);
	put_string(buf + HELLO_OK_SERVER_LEN, m->server, m->server_len);
	return (int)len;
}

int bp_msg_hello_ok_decode(const uint8_t *buf, size_t len, bp_msg_hello_ok *ret)
{
	bp_msg_hello_ok m;

	if (open_message(buf, len, BP_MSG_HELLO_OK, HELLO_OK_SERVER, HELLO_OK_SERVER_LEN,
			 &m.server_len) < 0)
		return -EBADMSG;
	if (le16(buf + HELLO_OK_RESERVED) != 0)
		return -EBADMSG;
	m.version = le16(buf + HELLO_OK_VERSION);
	m.max_sessions = bp_le32(buf + HELLO_OK_MAX_SESSIONS);
	m.max_batch_size = bp_le32(buf + HELLO_OK_MAX_BATCH_SIZE);
	m.server = (const char *)buf + HELLO_OK_SERVER;
	if (!hello_ok_valid(&m))
		return -EBADMSG;
	*ret = m;
	return 0;
}

/* ---- OPEN -------------------------------------------------------------- */

/* What is wrong with d, which decode_valid refused. */
static void decode_why(const bp_open_decode *d, char *buf, size_t len)
{
	if (d->kind != BP_DECODE_IMAGE)
		snprintf(buf, len, "decode kind %u is not image (1)", d->kind);
	else if (d->crop != BP_CROP_RANDOM_RESIZED && d->crop != BP_CROP_CENTER)
		snprintf(buf, len, "decode crop %u is not random-resized (1) or center (2)", d->crop);
	else if (d->layout > BP_LAYOUT_NHWC)
		snprintf(buf, len, "decode layout %u is not NCHW (0) or NHWC (1)", d->layout);
	else if (d->on_error > BP_ON_ERROR_SKIP)
		snprintf(buf, len, "decode on_error %u is not fail (0) or skip (1)", d->on_error);
	else if (d->height < 1 || d->height > BP_DECODE_SIDE_MAX || d->width < 1 ||
		 d->width > BP_DECODE_SIDE_MAX)
		snprintf(buf, len, "decode size %ux%u: height and width must be 1 .. %u", d->height,
			 d->width, BP_DECODE_SIDE_MAX);
	else if (d->resize > BP_DECODE_RESIZE_MAX)
		snprintf(buf, len, "decode resize %u is over %u", d->resize, BP_DECODE_RESIZE_MAX);
	else if (!in_range(d->scale_min, 0x1p-24f, 1.0f) ||
		 !in_range(d->scale_max, d->scale_min, 1.0f))
		snprintf(buf, len, "decode scale (%g, %g) must be 0 < min <= max <= 1",
			 (double)d->scale_min, (double)d->scale_max);
	else if (!in_range(d->ratio_min, 0x1p-24f, 100.0f) ||
		 !in_range(d->ratio_max, d->ratio_min, 100.0f))
		snprintf(buf, len, "decode ratio (%g, %g) must be 0 < min <= max <= 100",
			 (double)d->ratio_min, (double)d->ratio_max);
	else if (!in_range(d->flip, 0.0f, 1.0f))
		snprintf(buf, len, "decode flip %g is not a probability (0 .. 1)", (double)d->flip);
	else
		snprintf(buf, len, "decode field \"%.*s\" is not one field name of [A-Za-z0-9_.-] "
			 "(1 .. %u bytes)", (int)(d->field_len > 64 ? 64 : d->field_len),
			 d->field ? d->field : "", PROTO_FIELD_NAME_MAX);
}

static void put_f32(uint8_t *p, float v)
{
	uint32_t u;

	memcpy(&u, &v, sizeof(u));
	bp_put_le32(p, u);
}

static float get_f32(const uint8_t *p)
{
	uint32_t u = bp_le32(p);
	float v;

	memcpy(&v, &u, sizeof(v));
	return v;
}

static void decode_put(uint8_t *t, const bp_open_decode *d)
{
	memset(t, 0, OPEN_DECODE_SIZE);
	bp_put_le32(t + OPEN_DECODE_HEIGHT, d->height);
	bp_put_le32(t + OPEN_DECODE_WIDTH, d->width);
	bp_put_le32(t + OPEN_DECODE_RESIZE, d->resize);
	t[OPEN_DECODE_KIND] = d->kind;
	t[OPEN_DECODE_CROP] = d->crop;
	t[OPEN_DECODE_LAYOUT] = d->layout;
	t[OPEN_DECODE_ON_ERROR] = d->on_error;
	put_f32(t + OPEN_DECODE_SCALE_MIN, d->scale_min);
	put_f32(t + OPEN_DECODE_SCALE_MAX, d->scale_max);
	put_f32(t + OPEN_DECODE_RATIO_MIN, d->ratio_min);
	put_f32(t + OPEN_DECODE_RATIO_MAX, d->ratio_max);
	put_f32(t + OPEN_DECODE_FLIP, d->flip);
	t[OPEN_DECODE_FIELD_LEN] = (uint8_t)d->field_len;
	memcpy(t + OPEN_DECODE_FIELD, d->field, d->field_len);
}

/* @return 0, or -EBADMSG for bytes that would not re-encode to themselves. */
static int decode_get(const uint8_t *t, bp_open_decode *d)
{
	static const uint8_t zero[PROTO_FIELD_NAME_MAX];

	d->height = bp_le32(t + OPEN_DECODE_HEIGHT);
	d->width = bp_le32(t + OPEN_DECODE_WIDTH);
	d->resize = bp_le32(t + OPEN_DECODE_RESIZE);
	d->kind = t[OPEN_DECODE_KIND];
	d->crop = t[OPEN_DECODE_CROP];
	d->layout = t[OPEN_DECODE_LAYOUT];
	d->on_error = t[OPEN_DECODE_ON_ERROR];
	d->scale_min = get_f32(t + OPEN_DECODE_SCALE_MIN);
	d->scale_max = get_f32(t + OPEN_DECODE_SCALE_MAX);
	d->ratio_min = get_f32(t + OPEN_DECODE_RATIO_MIN);
	d->ratio_max = get_f32(t + OPEN_DECODE_RATIO_MAX);
	d->flip = get_f32(t + OPEN_DECODE_FLIP);
	d->field_len = t[OPEN_DECODE_FIELD_LEN];
	d->field = (const char *)t + OPEN_DECODE_FIELD;
	/* The name's padding and the reserved bytes are zero; the kind says there is a trailer. */
	if (d->kind == 0 || d->field_len > PROTO_FIELD_NAME_MAX ||
	    memcmp(t + OPEN_DECODE_FIELD + d->field_len, zero,
		   PROTO_FIELD_NAME_MAX - d->field_len) ||
	    memcmp(t + OPEN_DECODE_RESERVED, zero, OPEN_DECODE_SIZE - OPEN_DECODE_RESERVED))
		return -EBADMSG;
	return 0;
}

bool bp_msg_open_why(const bp_msg_open *m, char *buf, size_t len)
{
	if (!batch_size_ok(m->batch_size))
		snprintf(buf, len, "batch_size %u must be 1 .. %u", m->batch_size,
			 PROTO_BATCH_SIZE_MAX);
	else if (m->world < 1 || m->world > PROTO_WORLD_MAX || m->rank >= m->world)
		snprintf(buf, len, "rank %u of world %u: world must be 1 .. %u and rank below it",
			 m->rank, m->world, PROTO_WORLD_MAX);
	else if (m->prefetch > PROTO_PREFETCH_MAX)
		snprintf(buf, len, "prefetch %u is over %u", m->prefetch, PROTO_PREFETCH_MAX);
	else if (m->window > PROTO_WINDOW_MAX)
		snprintf(buf, len, "window %u is over %u", m->window, PROTO_WINDOW_MAX);
	else if (!placement_ok(m->placement))
		snprintf(buf, len, "placement %d is neither host (-1) nor a device 0 .. %d",
			 m->placement, PROTO_PLACEMENT_MAX);
	else if (m->shuffle > BP_SHUFFLE_BLOCK)
		snprintf(buf, len, "shuffle %u is not none (0), global (1) or block (2)", m->shuffle);
	else if (m->path_len < 1 || !string_ok(m->path, m->path_len, BP_PATH_MAX) ||
		 !no_nul(m->path, m->path_len))
		snprintf(buf, len, "dataset path of %u bytes must be 1 .. %u bytes without NUL",
			 m->path_len, BP_PATH_MAX);
	else if (!field_list_ok(m->fields, m->fields_len))
		snprintf(buf, len, "field list \"%.*s\" is not comma-separated field names of "
			 "[A-Za-z0-9_.-] (at most %u of at most %u bytes)",
			 (int)(m->fields_len > 256 ? 256 : m->fields_len), m->fields ? m->fields : "",
			 PROTO_FIELDS_MAX, PROTO_FIELD_NAME_MAX);
	else if (m->batch_stride > BP_STRIDE_MAX)
		snprintf(buf, len, "batch_stride %u must be 1 .. %u", m->batch_stride, BP_STRIDE_MAX);
	else if (!decode_valid(&m->decode))
		decode_why(&m->decode, buf, len);
	else if (!sequences_valid(m))
		snprintf(buf, len, "sequences %u with seq_len %u: sequences must be windows (1) or "
			 "packed (2) with seq_len 1 .. %u", m->sequences, m->seq_len, BP_SEQ_LEN_MAX);
	else if (!sources_valid(m))
		snprintf(buf, len, "a mixture of %u sources: 2 .. %u sources, each counted 1 .. %u "
			 "times a period of at most %u, each path 1 .. %u bytes without NUL",
			 m->sources, BP_MIX_SOURCES_MAX, BP_MIX_PERIOD_MAX, BP_MIX_PERIOD_MAX,
			 BP_PATH_MAX);
	else
		return false;
	return true;
}

int bp_msg_open_encode(const bp_msg_open *m, uint8_t *buf, size_t cap)
{
	uint64_t len, at;
	int r;

	if (!m)
		return -EINVAL;
	len = (uint64_t)OPEN_PATH + m->path_len + (m->fields_len ? 4u + m->fields_len : 0) +
	      (open_resumes(m) ? OPEN_RESUME_SIZE : 0) + (m->decode.kind ? OPEN_DECODE_SIZE : 0) +
	      (m->sequences ? OPEN_SEQ_SIZE : 0) + sources_size(m);
	r = begin(open_valid(m), buf, cap, len);
	if (r < 0)
		return r;
	put_header(buf, BP_MSG_OPEN, (uint32_t)len);
	bp_put_le64(buf + OPEN_SEED, m->seed);
	bp_put_le64(buf + OPEN_START_EPOCH, m->start_epoch);
	bp_put_le64(buf + OPEN_START_BATCH, m->start_batch);
	bp_put_le32(buf + OPEN_BATCH_SIZE, m->batch_size);
	bp_put_le32(buf + OPEN_RANK, m->rank);
	bp_put_le32(buf + OPEN_WORLD, m->world);
	bp_put_le32(buf + OPEN_PREFETCH, m->prefetch);
	bp_put_le32(buf + OPEN_WINDOW, m->window);
	bp_put_le32(buf + OPEN_PLACEMENT, (uint32_t)m->placement);
	buf[OPEN_SHUFFLE] = m->shuffle;
	buf[OPEN_DROP_LAST] = m->drop_last ? 1 : 0;
	put_le16(buf + OPEN_FLAGS, (uint16_t)((m->fields_len ? BP_OPEN_FIELDS : 0) |
					      (m->keys ? BP_OPEN_KEYS : 0) |
					      (open_resumes(m) ? BP_OPEN_RESUME : 0) |
					      (m->decode.kind ? BP_OPEN_DECODE : 0) |
					      (m->sequences ? BP_OPEN_SEQUENCES : 0) |
					      (m->sources ? BP_OPEN_SOURCES : 0)));
	memcpy(buf + OPEN_DEVICE_UUID, m->device_uuid, sizeof(m->device_uuid));
	bp_put_le32(buf + OPEN_PATH_LEN, m->path_len);
	if (m->fields_len) {
		put_string(buf + OPEN_PATH, m->fields, m->fields_len);
		memcpy(buf + OPEN_FIELDS + m->fields_len, m->path, m->path_len);
	} else {
		memcpy(buf + OPEN_PATH, m->path, m->path_len);
	}
	/* The trailers from the end: sources, sequences, decode, resume. */
	at = len - sources_size(m);
	if (m->sources)
		sources_put(buf + at, m);
	if (m->sequences) {
		at -= OPEN_SEQ_SIZE;
		memset(buf + at, 0, OPEN_SEQ_SIZE);
		bp_put_le32(buf + at + OPEN_SEQ_LEN, m->seq_len);
		buf[at + OPEN_SEQ_MODE] = m->sequences;
	}
	if (m->decode.kind) {
		at -= OPEN_DECODE_SIZE;
		decode_put(buf + at, &m->decode);
	}
	if (open_resumes(m)) {
		at -= OPEN_RESUME_SIZE;
		bp_put_le64(buf + at + OPEN_RESUME_SAMPLE, m->start_sample);
		bp_put_le32(buf + at + OPEN_RESUME_STRIDE, m->batch_stride ? m->batch_stride : 1);
	}
	return (int)len;
}

int bp_msg_open_decode(const uint8_t *buf, size_t len, bp_msg_open *ret)
{
	bp_msg_open m = { .fields = NULL, .fields_len = 0 };
	uint64_t path_at = OPEN_PATH;
	bp_msg_header h;
	uint16_t flags;

	/* Two strings at most (open_message knows one): the lengths are checked here. */
	if (bp_msg_header_decode(buf, len, &h) < 0 || h.type != BP_MSG_OPEN || len < OPEN_PATH)
		return -EBADMSG;
	flags = le16(buf + OPEN_FLAGS);
	/* A bool byte other than 0/1, or an unknown flag, would not re-encode to itself. */
	if (buf[OPEN_DROP_LAST] > 1 ||
	    (flags & ~(BP_OPEN_FIELDS | BP_OPEN_KEYS | BP_OPEN_RESUME | BP_OPEN_DECODE |
		       BP_OPEN_SEQUENCES | BP_OPEN_SOURCES)))
		return -EBADMSG;
	/* The trailers come off the end: sources, sequences, decode, resume. */
	if (flags & BP_OPEN_SOURCES) {
		int64_t size = sources_get(buf, len, &m);

		if (size < 0)
			return -EBADMSG;
		len -= (size_t)size;
	}
	if (flags & BP_OPEN_SEQUENCES) {
		const uint8_t *t = buf + len - OPEN_SEQ_SIZE;

		if (len < OPEN_PATH + OPEN_SEQ_SIZE)
			return -EBADMSG;
		m.seq_len = bp_le32(t + OPEN_SEQ_LEN);
		m.sequences = t[OPEN_SEQ_MODE];
		/* A trailer saying "none", or reserved bytes set, would not re-encode. */
		if (m.sequences == BP_SEQUENCES_NONE || t[5] || t[6] || t[7])
			return -EBADMSG;
		len -= OPEN_SEQ_SIZE;
	}
	if (flags & BP_OPEN_DECODE) {
		if (len < OPEN_PATH + OPEN_DECODE_SIZE ||
		    decode_get(buf + len - OPEN_DECODE_SIZE, &m.decode) < 0)
			return -EBADMSG;
		len -= OPEN_DECODE_SIZE;
	}
	m.path_len = bp_le32(buf + OPEN_PATH_LEN);
	if (flags & BP_OPEN_FIELDS) {
		if (len < OPEN_FIELDS)
			return -EBADMSG;
		m.fields_len = bp_le32(buf + OPEN_PATH);
		m.fields = (const char *)buf + OPEN_FIELDS;
		/* An empty list is written as no list: flag and length must agree. */
		if (m.fields_len == 0)
			return -EBADMSG;
		path_at = (uint64_t)OPEN_FIELDS + m.fields_len;
	}
	m.batch_stride = 1;
	if (flags & BP_OPEN_RESUME) {
		const uint8_t *t = buf + len - OPEN_RESUME_SIZE;

		if (len < OPEN_PATH + OPEN_RESUME_SIZE)
			return -EBADMSG;
		m.start_sample = bp_le64(t + OPEN_RESUME_SAMPLE);
		m.batch_stride = bp_le32(t + OPEN_RESUME_STRIDE);
		/* The encoder writes no trailer that says "0 and 1": it would not re-encode. */
		if (m.batch_stride == 0 || !open_resumes(&m))
			return -EBADMSG;
		len -= OPEN_RESUME_SIZE;
	}
	/* len <= BP_MSG_MAX: neither sum wraps in 64 bits. */
	if (path_at + m.path_len != len)
		return -EBADMSG;
	m.keys = (flags & BP_OPEN_KEYS) != 0;
	m.seed = bp_le64(buf + OPEN_SEED);
	m.start_epoch = bp_le64(buf + OPEN_START_EPOCH);
	m.start_batch = bp_le64(buf + OPEN_START_BATCH);
	m.batch_size = bp_le32(buf + OPEN_BATCH_SIZE);
	m.rank = bp_le32(buf + OPEN_RANK);
	m.world = bp_le32(buf + OPEN_WORLD);
	m.prefetch = bp_le32(buf + OPEN_PREFETCH);
	m.window = bp_le32(buf + OPEN_WINDOW);
	m.placement = (int32_t)bp_le32(buf + OPEN_PLACEMENT);
	m.shuffle = buf[OPEN_SHUFFLE];
	m.drop_last = buf[OPEN_DROP_LAST] == 1;
	memcpy(m.device_uuid, buf + OPEN_DEVICE_UUID, sizeof(m.device_uuid));
	m.path = (const char *)buf + path_at;
	if (!open_valid(&m))
		return -EBADMSG;
	*ret = m;
	return 0;
}

/* ---- READY ------------------------------------------------------------- */

int bp_msg_ready_encode(const bp_msg_ready *m, uint8_t *buf, size_t cap)
{
	int r;

	if (!m)
		return -EINVAL;
	r = begin(ready_valid(m), buf, cap, READY_SIZE);
	if (r < 0)
		return r;
	put_header(buf, BP_MSG_READY, READY_SIZE);
	bp_put_le64(buf + READY_SESSION, m->session);
	bp_put_le64(buf + READY_FINGERPRINT, m->fingerprint);
	bp_put_le64(buf + READY_SAMPLES, m->samples);
	bp_put_le64(buf + READY_BATCHES_PER_EPOCH, m->batches_per_epoch);
	bp_put_le64(buf + READY_DATA_SIZE, m->data_size);
	bp_put_le64(buf + READY_CTRL_SIZE, m->ctrl_size);
	bp_put_le64(buf + READY_MAX_SAMPLE, m->max_sample);
	bp_put_le32(buf + READY_BATCH_SIZE, m->batch_size);
	bp_put_le32(buf + READY_SLOTS, m->slots);
	bp_put_le32(buf + READY_PLACEMENT, (uint32_t)m->placement);
	bp_put_le32(buf + READY_RESERVED, 0);
	return READY_SIZE;
}

int bp_msg_ready_decode(const uint8_t *buf, size_t len, bp_msg_ready *ret)
{
	bp_msg_ready m;
	uint32_t none;

	if (open_message(buf, len, BP_MSG_READY, READY_SIZE, 0, &none) < 0)
		return -EBADMSG;
	if (bp_le32(buf + READY_RESERVED) != 0)
		return -EBADMSG;
	m.session = bp_le64(buf + READY_SESSION);
	m.fingerprint = bp_le64(buf + READY_FINGERPRINT);
	m.samples = bp_le64(buf + READY_SAMPLES);
	m.batches_per_epoch = bp_le64(buf + READY_BATCHES_PER_EPOCH);
	m.data_size = bp_le64(buf + READY_DATA_SIZE);
	m.ctrl_size = bp_le64(buf + READY_CTRL_SIZE);
	m.max_sample = bp_le64(buf + READY_MAX_SAMPLE);
	m.batch_size = bp_le32(buf + READY_BATCH_SIZE);
	m.slots = bp_le32(buf + READY_SLOTS);
	m.placement = (int32_t)bp_le32(buf + READY_PLACEMENT);
	if (!ready_valid(&m))
		return -EBADMSG;
	*ret = m;
	return 0;
}

/* ---- ERROR ------------------------------------------------------------- */

int bp_msg_error_encode(const bp_msg_error *m, uint8_t *buf, size_t cap)
{
	uint64_t len;
	int r;

	if (!m)
		return -EINVAL;
	len = (uint64_t)ERROR_MESSAGE + m->message_len;
	r = begin(error_valid(m), buf, cap, len);
	if (r < 0)
		return r;
	put_header(buf, BP_MSG_ERROR, (uint32_t)len);
	bp_put_le32(buf + ERROR_CODE, (uint32_t)m->code);
	put_string(buf + ERROR_MESSAGE_LEN, m->message, m->message_len);
	return (int)len;
}

int bp_msg_error_decode(const uint8_t *buf, size_t len, bp_msg_error *ret)
{
	bp_msg_error m;

	if (open_message(buf, len, BP_MSG_ERROR, ERROR_MESSAGE, ERROR_MESSAGE_LEN,
			 &m.message_len) < 0)
		return -EBADMSG;
	m.code = (int32_t)bp_le32(buf + ERROR_CODE);
	m.message = (const char *)buf + ERROR_MESSAGE;
	if (!error_valid(&m))
		return -EBADMSG;
	*ret = m;
	return 0;
}

/* ---- CLOSE, CLOSED ----------------------------------------------------- */

int bp_msg_session_encode(uint16_t type, const bp_msg_session *m, uint8_t *buf, size_t cap)
{
	int r;

	if (!m)
		return -EINVAL;
	r = begin(session_type(type) && m->session != 0, buf, cap, SESSION_SIZE);
	if (r < 0)
		return r;
	put_header(buf, type, SESSION_SIZE);
	bp_put_le64(buf + SESSION_ID, m->session);
	return SESSION_SIZE;
}

/* @return -EINVAL (not -EBADMSG) when type is not CLOSE or CLOSED: a caller bug. */
int bp_msg_session_decode(uint16_t type, const uint8_t *buf, size_t len, bp_msg_session *ret)
{
	uint64_t session;
	uint32_t none;

	if (!session_type(type))
		return -EINVAL;
	if (open_message(buf, len, type, SESSION_SIZE, 0, &none) < 0)
		return -EBADMSG;
	session = bp_le64(buf + SESSION_ID);
	if (session == 0)
		return -EBADMSG;
	ret->session = session;
	return 0;
}

/* ---- STATUS ------------------------------------------------------------ */

static int empty_encode(uint16_t type, uint8_t *buf, size_t cap)
{
	int r;

	r = begin(true, buf, cap, BP_MSG_HEADER_SIZE);
	if (r < 0)
		return r;
	put_header(buf, type, BP_MSG_HEADER_SIZE);
	return BP_MSG_HEADER_SIZE;
}

int bp_msg_status_encode(uint8_t *buf, size_t cap)
{
	return empty_encode(BP_MSG_STATUS, buf, cap);
}

int bp_msg_status_decode(const uint8_t *buf, size_t len)
{
	uint32_t none;

	return open_message(buf, len, BP_MSG_STATUS, BP_MSG_HEADER_SIZE, 0, &none);
}

int bp_msg_metrics_encode(uint8_t *buf, size_t cap)
{
	return empty_encode(BP_MSG_METRICS, buf, cap);
}

int bp_msg_metrics_decode(const uint8_t *buf, size_t len)
{
	uint32_t none;

	return open_message(buf, len, BP_MSG_METRICS, BP_MSG_HEADER_SIZE, 0, &none);
}

/* ---- STATUS_REPLY, GOODBYE --------------------------------------------- */

int bp_msg_text_encode(uint16_t type, const bp_msg_text *m, uint8_t *buf, size_t cap)
{
	uint64_t len;
	int r;

	if (!m)
		return -EINVAL;
	len = (uint64_t)TEXT + m->text_len;
	r = begin(text_type(type) && text_valid(type, m), buf, cap, len);
	if (r < 0)
		return r;
	put_header(buf, type, (uint32_t)len);
	bp_put_le32(buf + TEXT_CODE, (uint32_t)m->code);
	put_string(buf + TEXT_LEN, m->text, m->text_len);
	return (int)len;
}

/* @return -EINVAL (not -EBADMSG) when type is not a text message: a caller bug. */
int bp_msg_text_decode(uint16_t type, const uint8_t *buf, size_t len, bp_msg_text *ret)
{
	bp_msg_text m;

	if (!text_type(type))
		return -EINVAL;
	if (open_message(buf, len, type, TEXT, TEXT_LEN, &m.text_len) < 0)
		return -EBADMSG;
	m.code = (int32_t)bp_le32(buf + TEXT_CODE);
	m.text = (const char *)buf + TEXT;
	if (!text_valid(type, &m))
		return -EBADMSG;
	*ret = m;
	return 0;
}

/* ---- names ------------------------------------------------------------- */

const char *bp_msg_type_name(uint16_t type)
{
	static const char *const names[] = {
		[BP_MSG_HELLO] = "HELLO",
		[BP_MSG_HELLO_OK] = "HELLO_OK",
		[BP_MSG_OPEN] = "OPEN",
		[BP_MSG_READY] = "READY",
		[BP_MSG_ERROR] = "ERROR",
		[BP_MSG_CLOSE] = "CLOSE",
		[BP_MSG_CLOSED] = "CLOSED",
		[BP_MSG_STATUS] = "STATUS",
		[BP_MSG_STATUS_REPLY] = "STATUS_REPLY",
		[BP_MSG_GOODBYE] = "GOODBYE",
		[BP_MSG_METRICS] = "METRICS",
		[BP_MSG_METRICS_REPLY] = "METRICS_REPLY",
	};

	if (type >= sizeof(names) / sizeof(names[0]) || !names[type])
		return "UNKNOWN";
	return names[type];
}

const char *bp_cuda_uuid_str(const uint8_t u[16], char *buf, size_t len)
{
	snprintf(buf, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
		 u[13], u[14], u[15]);
	return buf;
}

static const char *const shuffle_names[BP_SHUFFLE_MODES] = {
	[BP_SHUFFLE_NONE] = "none",
	[BP_SHUFFLE_GLOBAL] = "global",
	[BP_SHUFFLE_BLOCK] = "block",
};

const char *bp_shuffle_name(unsigned mode)
{
	return mode < BP_SHUFFLE_MODES ? shuffle_names[mode] : "?";
}

int bp_shuffle_parse(const char *name, enum bp_shuffle *ret)
{
	for (unsigned m = 0; m < BP_SHUFFLE_MODES; m++)
		if (!strcmp(name, shuffle_names[m])) {
			*ret = (enum bp_shuffle)m;
			return 0;
		}
	return -EINVAL;
}
