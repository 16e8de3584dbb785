/* SPDX-License-Identifier: MIT */
/*
 * protocol.h - the control messages between batchd and its clients.
 *
 * Clients talk to the daemon over a SOCK_SEQPACKET Unix socket: every
 * datagram is exactly one message, so framing is the kernel's job and a
 * message is never split or merged. Each message is a 16-byte header
 * (magic, type, version, length) followed by a fixed little-endian body
 * and, for some types, one variable-length string at the end. Requests are
 * answered in order, one answer per request; a connection may hold several
 * sessions. Bulk data never travels here: READY carries the session's
 * memfds (SCM_RIGHTS) and batches flow through shared memory (ring.h).
 * PROTOCOL.md is the normative specification.
 *
 * Every decoder takes (buf, len) straight from recvmsg(), trusts nothing,
 * and either fills its struct completely or returns -EBADMSG; strings
 * returned point into buf (not NUL-terminated: use the length). Encoders
 * write into a caller buffer and return the message length or -ENOSPC.
 * Pure functions, reentrant, no allocation.
 */
#ifndef BATCHD_PROTO_PROTOCOL_H
#define BATCHD_PROTO_PROTOCOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mixture.h"    /* BP_MIX_SOURCES_MAX */
#include "schedule.h"   /* BP_STRIDE_MAX */

#define BP_PROTO_MAGIC       0x31504442u  /* "BDP1" in file order */
#define BP_PROTO_VERSION     1u           /* the only version so far */
#define BP_PROTO_MIN_VERSION 1u
#define BP_MSG_HEADER_SIZE   16u
#define BP_MSG_MAX           65536u       /* largest datagram either side sends */
#define BP_PATH_MAX          4096u        /* dataset path bytes in OPEN */
#define BP_NAME_MAX          64u          /* client name bytes in HELLO */
#define BP_ERRMSG_MAX        1024u        /* message bytes in ERROR */
#define BP_FIELD_LIST_MAX    4159u        /* OPEN's field list: 64 names of 64 bytes, 63 commas */
#define BP_STATUS_MAX        (BP_MSG_MAX - BP_MSG_HEADER_SIZE - 8u) /* after code + length */
#define BP_READY_FDS         4            /* data memfd, control memfd, released pipe (write end), published pipe (read end) */
#define BP_READY_FDS_GPU     5            /* GPU sessions: those, then the device allocation (CUDA VMM POSIX fd) */

enum bp_msg_type {
	BP_MSG_HELLO = 1,        /* client -> daemon */
	BP_MSG_HELLO_OK = 2,     /* daemon -> client */
	BP_MSG_OPEN = 3,         /* client -> daemon */
	BP_MSG_READY = 4,        /* daemon -> client, with BP_READY_FDS fds */
	BP_MSG_ERROR = 5,        /* daemon -> client, answers any request */
	BP_MSG_CLOSE = 6,        /* client -> daemon */
	BP_MSG_CLOSED = 7,       /* daemon -> client */
	BP_MSG_STATUS = 8,       /* client -> daemon */
	BP_MSG_STATUS_REPLY = 9, /* daemon -> client */
	BP_MSG_GOODBYE = 10,     /* daemon -> client, unsolicited: the daemon is stopping */
	BP_MSG_METRICS = 11,     /* client -> daemon */
	BP_MSG_METRICS_REPLY = 12, /* daemon -> client: Prometheus text exposition */
};

/* STATUS_REPLY and METRICS_REPLY code: more parts of this reply follow. */
#define BP_TEXT_MORE 1

/*
 * Sample orders (daemon/session/sampler.h says what each is). The one definition:
 * the sampler uses it as is, libbatchclient's public BC_SHUFFLE_* equal it
 * (asserted where the client encodes OPEN).
 */
enum bp_shuffle { BP_SHUFFLE_NONE = 0, BP_SHUFFLE_GLOBAL = 1, BP_SHUFFLE_BLOCK = 2 };
#define BP_SHUFFLE_MODES 3

/* "none", "global", "block"; "?" for a value that is not a mode. */
const char *bp_shuffle_name(unsigned mode);
/*
 * A mode from its name into *ret. @return 0, or -EINVAL for anything but
 * "none", "global" or "block" (*ret untouched).
 */
int bp_shuffle_parse(const char *name, enum bp_shuffle *ret);

#define BP_PLACEMENT_HOST (-1)   /* else a CUDA device ordinal, 0..255 */

/* OPEN flags (the u16 at offset 66). */
#define BP_OPEN_FIELDS 0x1u      /* a field list comes before the path */
#define BP_OPEN_KEYS   0x2u      /* batches carry the samples' keys */
#define BP_OPEN_RESUME 0x4u      /* start_sample and batch_stride follow the path */
#define BP_OPEN_DECODE 0x8u      /* the decode trailer follows */
#define BP_OPEN_SEQUENCES 0x10u  /* the sequences trailer follows */
#define BP_OPEN_SOURCES 0x20u    /* the sources trailer ends the message */

/* What a token session's samples are (OPEN's sequences trailer; docs/tokens.md). */
enum bp_sequences {
	BP_SEQUENCES_NONE = 0,       /* no trailer: samples are the dataset's */
	BP_SEQUENCES_WINDOWS = 1,    /* the token stream cut into windows of seq_len + 1 */
	BP_SEQUENCES_PACKED = 2,     /* whole documents packed into rows of seq_len + 1 */
};
#define BP_SEQ_LEN_MAX (1u << 20) /* tokens a sequence (seq_len + 1 <= 2^20 + 1) */

/* What a session asks the daemon to make of one bytes field (OPEN's decode trailer). */
enum bp_decode_kind { BP_DECODE_IMAGE = 1 };
enum bp_decode_crop { BP_CROP_RANDOM_RESIZED = 1, BP_CROP_CENTER = 2 };
enum bp_decode_layout { BP_LAYOUT_NCHW = 0, BP_LAYOUT_NHWC = 1 };
enum bp_decode_on_error { BP_ON_ERROR_FAIL = 0, BP_ON_ERROR_SKIP = 1 };
#define BP_DECODE_SIDE_MAX 8192u   /* an output tensor's height or width */
#define BP_DECODE_RESIZE_MAX 65535u

typedef struct bp_open_decode {
	uint8_t kind;                /* enum bp_decode_kind; 0: no decode trailer */
	uint8_t crop;                /* enum bp_decode_crop */
	uint8_t layout;              /* enum bp_decode_layout */
	uint8_t on_error;            /* enum bp_decode_on_error */
	uint32_t height, width;      /* the tensor's: 1 .. BP_DECODE_SIDE_MAX */
	uint32_t resize;             /* CENTER: the short side before the crop (0: the crop's); 0 .. BP_DECODE_RESIZE_MAX */
	float scale_min, scale_max;  /* RANDOM_RESIZED: 0 < min <= max <= 1 */
	float ratio_min, ratio_max;  /* RANDOM_RESIZED: 0 < min <= max <= 100 */
	float flip;                  /* horizontal flip probability, 0 .. 1 */
	const char *field;           /* the bytes field decoded: a field name */
	uint32_t field_len;          /* 1 .. 64 */
} bp_open_decode;

/* One source of a mixture (OPEN's sources trailer). */
typedef struct bp_open_source {
	uint32_t count;              /* its positions a period: 1 .. BP_MIX_PERIOD_MAX */
	const char *path;            /* as OPEN's path */
	uint32_t path_len;
} bp_open_source;

typedef struct bp_msg_header {
	uint32_t magic;
	uint16_t type;
	uint16_t version;
	uint32_t length;             /* whole message, header included */
	uint32_t reserved;           /* 0 */
} bp_msg_header;

typedef struct bp_msg_hello {
	uint16_t min_version, max_version;
	const char *name;            /* printable ASCII, may be empty */
	uint32_t name_len;           /* <= BP_NAME_MAX */
} bp_msg_hello;

typedef struct bp_msg_hello_ok {
	uint16_t version;            /* chosen */
	uint32_t max_sessions;       /* per connection */
	uint32_t max_batch_size;
	const char *server;          /* daemon version string */
	uint32_t server_len;         /* <= 64 */
} bp_msg_hello_ok;

typedef struct bp_msg_open {
	uint64_t seed;
	uint64_t start_epoch;
	uint64_t start_batch;        /* batches of start_epoch already consumed */
	uint32_t batch_size;         /* >= 1 */
	uint32_t rank, world;        /* rank < world, world >= 1 */
	uint32_t prefetch;           /* batches staged ahead; 0 = daemon default */
	uint32_t window;             /* block shuffle: blocks per window; 0 = default */
	int32_t placement;           /* BP_PLACEMENT_HOST or a device ordinal */
	uint8_t shuffle;             /* enum bp_shuffle */
	bool drop_last;
	/*
	 * GPU placement: the device's UUID as the client sees it (all zero:
	 * `placement` is the daemon's own ordinal). Ordinals differ between
	 * processes under CUDA_VISIBLE_DEVICES; UUIDs do not.
	 */
	uint8_t device_uuid[16];
	bool keys;                   /* flags BP_OPEN_KEYS: batches carry the sample keys */
	/*
	 * Flags BP_OPEN_FIELDS when fields_len > 0: the fields the session
	 * selects, comma-separated names ([A-Za-z0-9_.-], 1 .. 64 bytes each,
	 * at most 64 names); 0 = every field of the dataset.
	 */
	const char *fields;
	uint32_t fields_len;         /* 0 .. BP_FIELD_LIST_MAX */
	const char *path;            /* dataset, relative to a root or absolute */
	uint32_t path_len;           /* 1 .. BP_PATH_MAX, no NUL bytes */
	/*
	 * Flags BP_OPEN_RESUME when start_sample > 0 or batch_stride > 1 (an
	 * OPEN without them means 0 and 1, so an older peer is unaffected).
	 */
	uint64_t start_sample;       /* global positions of start_epoch all ranks consumed */
	uint32_t batch_stride;       /* serve every batch_stride-th batch: 1 .. BP_STRIDE_MAX; 0 = 1 */
	/* Flags BP_OPEN_DECODE when decode.kind != 0: a field decoded into a tensor. */
	bp_open_decode decode;
	/*
	 * Flags BP_OPEN_SEQUENCES when sequences != 0: a token pack read as
	 * sequences of seq_len + 1 tokens (1 <= seq_len <= BP_SEQ_LEN_MAX).
	 */
	uint8_t sequences;           /* enum bp_sequences */
	uint32_t seq_len;
	/*
	 * Flags BP_OPEN_SOURCES when sources >= 2: a mixture (docs/tokens.md,
	 * "Mixtures") of `path` (source 0) and source[1 .. sources), each with
	 * its count of positions in every period of the sum of the counts.
	 */
	uint32_t sources;            /* 0, or 2 .. BP_MIX_SOURCES_MAX */
	bp_open_source source[BP_MIX_SOURCES_MAX]; /* [0].path and path_len unused: `path` */
	uint64_t epoch_samples;      /* positions an epoch; 0: the sources' samples summed */
} bp_msg_open;

typedef struct bp_msg_ready {
	uint64_t session;            /* id, unique for the daemon's lifetime */
	uint64_t fingerprint;        /* dataset fingerprint */
	uint64_t samples;            /* dataset samples */
	uint64_t batches_per_epoch;  /* for this rank */
	uint64_t data_size;          /* bytes of the data memfd */
	uint64_t ctrl_size;          /* bytes of the control memfd */
	uint64_t max_sample;
	uint32_t batch_size;
	uint32_t slots;              /* batches in flight at most (ring descriptors) */
	int32_t placement;
} bp_msg_ready;

typedef struct bp_msg_error {
	int32_t code;                /* negative errno */
	const char *message;
	uint32_t message_len;        /* <= BP_ERRMSG_MAX */
} bp_msg_error;

typedef struct bp_msg_session {  /* CLOSE, CLOSED */
	uint64_t session;
} bp_msg_session;

typedef struct bp_msg_text {     /* STATUS_REPLY (JSON), METRICS_REPLY, GOODBYE (reason) */
	int32_t code;                /* GOODBYE: negative errno; replies: 0 last part, BP_TEXT_MORE */
	const char *text;
	uint32_t text_len;           /* <= BP_STATUS_MAX */
} bp_msg_text;

/*
 * Decode the header of a received datagram of len bytes: magic, a known
 * type, a version in [BP_PROTO_MIN_VERSION, BP_PROTO_VERSION], length == len,
 * reserved == 0. @return 0 or -EBADMSG (-EPROTONOSUPPORT for a version this
 * build does not speak).
 */
int bp_msg_header_decode(const uint8_t *buf, size_t len, bp_msg_header *ret);

/* Encoders: @return message length, or -ENOSPC when cap is too small, -EINVAL for a field out of range. */
int bp_msg_hello_encode(const bp_msg_hello *m, uint8_t *buf, size_t cap);
int bp_msg_hello_ok_encode(const bp_msg_hello_ok *m, uint8_t *buf, size_t cap);
int bp_msg_open_encode(const bp_msg_open *m, uint8_t *buf, size_t cap);
int bp_msg_ready_encode(const bp_msg_ready *m, uint8_t *buf, size_t cap);
int bp_msg_error_encode(const bp_msg_error *m, uint8_t *buf, size_t cap);
int bp_msg_session_encode(uint16_t type, const bp_msg_session *m, uint8_t *buf, size_t cap);
int bp_msg_status_encode(uint8_t *buf, size_t cap);
int bp_msg_metrics_encode(uint8_t *buf, size_t cap);
int bp_msg_text_encode(uint16_t type, const bp_msg_text *m, uint8_t *buf, size_t cap);

/*
 * Why bp_msg_open_encode refuses m with -EINVAL: the first field out of
 * range and what is allowed, written into buf. @return true when m is
 * refused (buf written), false when it is valid (buf untouched).
 */
bool bp_msg_open_why(const bp_msg_open *m, char *buf, size_t len);

/* Decoders: buf/len is the whole message (header included, already checked
 * by bp_msg_header_decode or not: they check it again). @return 0 or -EBADMSG. */
int bp_msg_hello_decode(const uint8_t *buf, size_t len, bp_msg_hello *ret);
int bp_msg_hello_ok_decode(const uint8_t *buf, size_t len, bp_msg_hello_ok *ret);
int bp_msg_open_decode(const uint8_t *buf, size_t len, bp_msg_open *ret);
int bp_msg_ready_decode(const uint8_t *buf, size_t len, bp_msg_ready *ret);
int bp_msg_error_decode(const uint8_t *buf, size_t len, bp_msg_error *ret);
int bp_msg_session_decode(uint16_t type, const uint8_t *buf, size_t len, bp_msg_session *ret);
int bp_msg_status_decode(const uint8_t *buf, size_t len);
int bp_msg_metrics_decode(const uint8_t *buf, size_t len);
int bp_msg_text_decode(uint16_t type, const uint8_t *buf, size_t len, bp_msg_text *ret);

const char *bp_msg_type_name(uint16_t type);

/*
 * A device UUID (OPEN's device_uuid, the device table's) as nvidia-smi
 * prints it: "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (41 bytes with the
 * NUL) into buf. @return buf.
 */
const char *bp_cuda_uuid_str(const uint8_t uuid[16], char *buf, size_t len);

#endif
