/* SPDX-License-Identifier: MIT */
/*
 * client_priv.h - what the files of libbatchclient share and trainers do
 * not see: the objects behind batchclient.h's opaque types, and the bc__
 * calls between batchclient.c (the connection, opening and closing
 * streams), ring_reader.c (taking and releasing batches) and gpu_stream.c
 * (the device side of GPU streams). It is not installed, and
 * nothing declared here is exported: the library builds with
 * -fvisibility=hidden and batchclient.map, so only BC_API symbols leave it.
 *
 * Threads: as batchclient.h says for the object a call takes. A bc_stream,
 * its batches and its bc_gpu belong to the one thread using the stream; a
 * bc_client's err and buf only under its mu.
 */
#ifndef BATCHCLIENT_CLIENT_PRIV_H
#define BATCHCLIENT_CLIENT_PRIV_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "batchclient.h"
#include "pack_fields.h"
#include "protocol.h"
#include "ring.h"

struct bc_client {
	int fd;
	pthread_mutex_t mu;
	bool dead;
	int last_len;            /* bytes of the last datagram received */
	char err[BP_ERRMSG_MAX + 1];
	uint8_t buf[BP_MSG_MAX];
};

struct bc_batch {
	bc_stream *s;
	uint64_t seq;
	bp_ring_desc d;          /* copy of the descriptor */
	const bp_ring_sample *table;
	const bp_ring_span *regions; /* fields (ring.h): region entries, NULL for a plain record */
	const bp_ring_span *values;  /* ... and the value tables after them */
	const uint8_t *payload;
	const uint64_t *skipped; /* the ids left out (ring.h, BP_RING_SKIPS), nskipped of them */
	uint32_t nskipped;
	void *dev;               /* GPU streams: the payload in device memory, else NULL */
	void *stream;            /* CUstream last given to bc_batch_wait_stream; NULL: legacy default */
	bool held;
	bool writable;           /* a writable view was handed out: drop its private pages at release */
};

/*
 * Where a record of the stream's selection keeps each field (ring.h,
 * "Fields"): derived from the schema and the selection the ring header
 * names, the same way the daemon lays records out.
 */
typedef struct bc_layout {
	int32_t lead;                 /* schema index of the first selected bytes field, or -1 */
	uint32_t regions;             /* region entries in a record: 0 for a plain record */
	uint32_t tables;              /* value tables after them (count entries each) */
	int32_t region[BP_FIELD_MAX + 1]; /* per schema field (then the keys): its entry, -1 none */
	int32_t table[BP_FIELD_MAX + 1];  /* ... its value table, -1 none (scalar, lead) */
} bc_layout;

/* A GPU stream's hold on the device allocation; defined in gpu_stream.c. */
typedef struct bc_gpu bc_gpu;

struct bc_stream {
	bc_client *c;
	bp_msg_ready r;
	int device;              /* BC_HOST, or the caller's CUDA ordinal */
	int data_fd, ctrl_fd, released_fd, published_fd;
	int gpu_fd;              /* GPU streams: the VMM handle, until it is mapped */
	bc_gpu *gpu;             /* GPU streams once mapped; always NULL without CUDA */
	const uint8_t *data;
	uint8_t *wdata;          /* the data memfd again, MAP_PRIVATE and writable; NULL: refused */
	int wdata_err;           /* why it is NULL: the negative errno mmap gave */
	int pagemap_fd;          /* /proc/self/pagemap, to see which of wdata's pages are ours; -1 */
	const bp_ring_header *hdr;
	bp_ring_ctrl *ctrl;
	uint64_t start_epoch, start_batch;
	uint64_t first_batches;  /* start_epoch's, from start_sample (bp_schedule) */
	uint32_t stride;         /* batch_stride, >= 1 */
	uint64_t consumed;       /* batches taken */
	uint64_t epoch;          /* epoch of the last batch taken */
	bool epoch_end_said;
	uint32_t held;
	bool daemon_gone;        /* a release found nobody reading the released pipe */
	bool gpu_broken;         /* a release could not be ordered after the batch's last use */
	bc_batch *batches;       /* one per slot */
	bp_schema schema;        /* the dataset's, decoded from the data memfd */
	bc_field_info *info;     /* schema.count, for bc_stream_schema */
	uint64_t fields;         /* selected: bit i = schema field i */
	bool keys;               /* records carry the keys */
	bool skips;              /* records list the samples left out (BP_RING_SKIPS) */
	bc_layout lay;
	/* A mixture's arithmetic (lib/proto/mixture.h): counts, and the period's slots. */
	uint32_t nsources, period;
	uint32_t count[BP_MIX_SOURCES_MAX];
	uint8_t *slot;
	uint32_t *rank;
	char err[BP_RING_REASON_MAX + 1];
};

/* batchclient.c */


/*
 * connection.c: the socket's messages, one request at a time under the
 * client's lock (connection.c documents each call's returns): the whole of
 * a message sent, one reply received with its descriptors, an ERROR
 * reply's code and text, descriptors closed.
 */
int bc__send_all(bc_client *c, const uint8_t *msg, int len);
int bc__recv_reply(bc_client *c, int *fds, int nfds, int *ret_nfds);
int bc__reply_error(bc_client *c, const uint8_t *buf, int len);
/* Seconds a request waits for its reply (the socket's receive timeout), for messages. */
int bc__reply_timeout_s(const bc_client *c);
void bc__close_fds(int *fds, int n);
/* Say in s->err why the session's memory was refused (bc_open passes it on). @return -EBADMSG. */
int bc__bad_ring(bc_stream *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Bytes of a record's tables for n samples: where its payload starts at the earliest. */
uint64_t bc__record_head(const bc_stream *s, uint32_t n);

/* gpu_stream.c. Without CUDA these are stubs: no stream is a GPU stream. */

/*
 * The UUID of this process's CUDA device `ordinal`, for OPEN: ordinals
 * differ between processes (CUDA_VISIBLE_DEVICES), UUIDs do not.
 * @return 1 with uuid set; 0 when this process has no usable CUDA driver
 * (why says why); a negative errno with c->err set (under c->mu, which the
 * caller must not hold) when the driver has no such device.
 */
int bc__gpu_uuid(bc_client *c, int ordinal, uint8_t uuid[16], char *why, size_t whylen);

/*
 * Map the device memory of the GPU session READY announced on s (s is
 * mapped, s->gpu_fd the allocation's handle), checking it is on the device
 * with UUID want. @return 0; a negative errno with s->err naming the
 * failing step, everything it did undone.
 */
int bc__gpu_open(bc_stream *s, const uint8_t want[16]);

/*
 * Let the work queued on held batches finish, then unmap and drop what
 * bc__gpu_open holds. No CUDA calls in a forked child. A stream that is
 * not (or no longer) mapped is fine.
 */
void bc__gpu_free(bc_stream *s);

/*
 * The device address of batch seq's payload (descriptor d), checked to lie
 * in its device slot: *ret_dev is NULL on host streams. @return 0, or
 * -EBADMSG with s->err set.
 */
int bc__gpu_bind(bc_stream *s, const bp_ring_desc *d, uint64_t seq, void **ret_dev);

/*
 * Record the slot's `released` event on the batch's stream: the daemon
 * copies into the slot again only once the work queued there before now
 * is done. Only for a batch with device memory. @return 0, or -EIO with
 * the reason in the stream's err.
 */
int bc__gpu_record_release(bc_batch *b);

/*
 * Block until b's copy into device memory has completed (the slot's ready
 * event). @return 0 or -EIO (CUDA's reason in s->err).
 */
int bc__gpu_sync(bc_batch *b);

#endif
