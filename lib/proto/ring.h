/* SPDX-License-Identifier: MIT */
/*
 * ring.h - the shared-memory layout of a session: where batches are staged
 * by batchd and picked up by the trainer.
 *
 * A session has two memfds. The DATA memfd is written only by the daemon
 * and sealed (F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_FUTURE_WRITE) before it is
 * handed over, so the client can map it read-only and nothing else: it can
 * neither corrupt staged batches nor make the daemon fault by truncating
 * it. The CONTROL memfd is small and written by both; it is sealed against
 * shrinking and growing, and the daemon treats every byte in it as hostile.
 *
 * DATA memfd:
 *   [0, 4096)                 ring header (bp_ring_header)
 *   [4096, 4096 + 64*slots)   descriptors, one per batch in flight
 *   [arena_offset, +arena_size) batch records, allocated as a byte ring
 *   [gpu_offset, +gpu_size)   GPU sessions only: the device table
 *                             (bp_ring_gpu, then one bp_ring_gpu_slot per slot)
 *   [schema_offset, +schema_size) the dataset's schema: inside the header's
 *                             page (at BP_RING_SCHEMA_INLINE) when it fits,
 *                             else in pages after everything above
 * A batch record is its sample table (count x bp_ring_sample) followed,
 * at payload_offset (256-byte aligned), by the samples' bytes laid end to
 * end, so fixed-size samples form one dense [count, sample_bytes] array.
 * A failed batch has status < 0 and a NUL-terminated reason at its
 * record offset instead of samples. A record's payload starts at its
 * descriptor's `payload`, which a reader must use: a batch that left
 * samples out (BP_RING_SKIPS) has tables for fewer samples than were
 * planned, and its payload did not move.
 *
 * Fields (PROTOCOL.md, "Fields"): the header names the dataset's schema
 * (encoded as lib/pack/pack_fields.h's bp_schema_encode, at schema_offset)
 * and the fields the session selected. A session that selected one bytes
 * field and no keys has exactly the record above. Any other has, after
 * the sample table (which then describes the first selected bytes field,
 * the "lead": sizes 0 when none is selected), one bp_ring_span per
 * selected field in schema order and one more for the keys when asked:
 * the field's region of the payload. Then count x bp_ring_span for each
 * other selected bytes field and each selected str field, in schema
 * order, and for the keys last: each sample's value in the payload. The
 * payload holds the lead's region first, then the other selected fields'
 * in schema order, then the keys', each region 256-byte aligned; a scalar
 * field's region is its dense [count] array.
 *
 * Publication: batch seq (0, 1, 2, ...) lives in descriptor seq % slots.
 * The daemon fills the record and the descriptor, then stores
 * produced = seq + 1 with release semantics; a client that loads produced
 * with acquire semantics and finds it > seq may read descriptor and record
 * with no syscall.
 *
 * Release: the client stores release[seq % slots] = seq + 1 in the control
 * memfd. The daemon reclaims batches strictly in seq order, so a record's
 * bytes are reused only after the client released it and every batch
 * before it.
 *
 * GPU sessions: batch seq is also copied into device slot seq % slots of
 * the device allocation the READY message hands over as a fifth fd (a CUDA
 * VMM POSIX-fd handle). The daemon records the slot's `ready` event after
 * the copy and publishes the batch at once; the client makes its stream
 * wait on that event (GPU side), and at release records the slot's
 * `released` event on its stream before it stores the release mark. The
 * daemon copies into a device slot only once that event has completed, and
 * reuses the record's host bytes only once its own copy has completed.
 * Both events are the daemon's (CUDA IPC event handles in the device
 * table), so the daemon never opens a handle the client made up.
 *
 * Sleeping: a client with nothing ready sets ctrl.client_sleeping and
 * re-checks produced, both sequentially consistent (a Dekker pair: the
 * store cannot pass the load), and only then sleeps in poll(2) on the
 * session's "published" pipe and on its socket (so a dead daemon wakes
 * it too); the daemon stores produced and then loads client_sleeping, both
 * sequentially consistent, and writes that pipe
 * when client_sleeping is set. The same pattern runs the other way with
 * ctrl.daemon_hungry and the "released" pipe when the daemon waits for
 * releases. A ready batch therefore costs no syscall, and a wake-up costs
 * one only when somebody actually sleeps.
 */
#ifndef BATCHD_PROTO_RING_H
#define BATCHD_PROTO_RING_H

#include <stdint.h>

#define BP_RING_MAGIC        UINT64_C(0x31474e4952504442) /* "BDPRING1" */
#define BP_RING_VERSION      1u
#define BP_RING_HEADER_SIZE  4096u
#define BP_RING_DESC_SIZE    64u
#define BP_RING_PAYLOAD_ALIGN 256u
#define BP_RING_RECORD_ALIGN 4096u
#define BP_RING_REASON_MAX   512u
#define BP_RING_MAX_SLOTS    1024u
#define BP_RING_WAIT_BUCKETS 13u
#define BP_RING_SCHEMA_INLINE 256u /* schema_offset when the schema fits the header's page */

enum bp_ring_state {
	BP_RING_RUNNING = 0,
	BP_RING_STOPPED = 1,   /* the daemon ended the session (shutdown); error holds why */
};

/* At offset 0 of the data memfd. Fields below `produced` never change. */
typedef struct bp_ring_header {
	uint64_t magic;
	uint32_t version;
	uint32_t header_size;
	uint64_t session;
	uint64_t data_size;
	uint64_t arena_offset;
	uint64_t arena_size;
	uint64_t batches_per_epoch;
	uint32_t slots;
	uint32_t batch_size;
	uint64_t gpu_offset;   /* offset 64: the device table, 0 for host sessions */
	uint64_t gpu_size;     /* its bytes (page-rounded) */
	uint64_t schema_offset; /* offset 80: the encoded schema (bp_schema_encode) */
	uint64_t schema_size;  /* its bytes */
	uint64_t fields;       /* offset 96: selected fields, bit i = schema field i */
	uint32_t flags;        /* offset 104: BP_RING_KEYS */
	uint32_t pad2;
	uint8_t pad0[128 - 112];
	uint64_t produced;     /* offset 128: batches published (release store) */
	uint8_t pad1[192 - 136];
	uint32_t state;        /* offset 192: enum bp_ring_state */
	int32_t error;         /* negative errno when stopped */
} bp_ring_header;

/* At 4096 + 64 * (seq % slots). */
typedef struct bp_ring_desc {
	uint64_t seq;
	uint64_t epoch;
	uint64_t batch;        /* index within the epoch, for this rank */
	uint64_t record;       /* offset of the record in the data memfd */
	uint64_t payload;      /* offset of the payload in the data memfd */
	uint64_t payload_size;
	uint32_t count;        /* samples */
	int32_t status;        /* 0, or negative errno: reason at `record` */
	uint64_t device;       /* GPU sessions: offset of the payload in the device allocation */
} bp_ring_desc;

typedef struct bp_ring_sample {
	uint64_t id;           /* global sample id */
	uint64_t offset;       /* from the payload start */
	uint64_t size;
} bp_ring_sample;

/* Header flags: records carry the samples' keys. */
#define BP_RING_KEYS 0x1u
/*
 * Records list the samples left out (the session decodes images with
 * on_error skip): right after the record's tables, a u64 count k and k
 * u64 sample ids, before payload.
 */
#define BP_RING_SKIPS 0x2u

/* A field's region of the payload, or one sample's value (offset from the payload start). */
typedef struct bp_ring_span {
	uint64_t offset;
	uint64_t size;
} bp_ring_span;

/* At offset 0 of the control memfd. Hostile to the daemon. */
typedef struct bp_ring_ctrl {
	uint32_t reserved;
	uint32_t client_sleeping;  /* client: about to sleep on the published pipe */
	uint8_t pad0[64 - 8];
	uint32_t daemon_hungry;    /* daemon: waiting for releases; poke the released pipe */
	uint8_t pad1[128 - 68];
	uint64_t consumed;         /* client: batches taken (informational) */
	/*
	 * Client-reported time spent in bc_next (informational, for metrics;
	 * the daemon clamps and never trusts it): total nanoseconds, calls,
	 * and a histogram of calls by wait, bucket i counting waits of at most
	 * BP_RING_WAIT_BOUND_NS(i) (the last bucket: longer ones).
	 */
	uint64_t wait_ns;
	uint64_t waits;
	uint64_t wait_hist[BP_RING_WAIT_BUCKETS];
	uint64_t release[];        /* slots entries: seq + 1 of the last release */
} bp_ring_ctrl;

#define BP_RING_GPU_MAGIC    UINT64_C(0x3155504752504442) /* "BDPRGPU1" */
#define BP_RING_IPC_HANDLE   64u   /* bytes of a CUDA IPC event handle */
#define BP_RING_DEVICE_ALIGN 512u  /* device slots start at multiples of this */

/* At gpu_offset of the data memfd (GPU sessions). Written once, before READY. */
typedef struct bp_ring_gpu {
	uint64_t magic;
	uint8_t uuid[16];      /* the CUDA device holding the allocation */
	uint64_t size;         /* bytes of the device allocation (the READY fd's) */
	uint64_t slot_bytes;   /* device slot i is [i * slot_bytes, +slot_bytes) */
	uint32_t slots;        /* = header slots */
	uint32_t pinned;       /* 1: staged from pinned host memory; 0: pageable (slower copies) */
	int32_t ordinal;       /* the daemon's ordinal of the device (informational) */
	uint32_t pad0;
	uint64_t pid_ns;       /* inode of the daemon's PID namespace (0: unknown) */
	uint8_t pad1[128 - 64];
} bp_ring_gpu;

/* Right after bp_ring_gpu, one per slot. */
typedef struct bp_ring_gpu_slot {
	uint8_t ready[BP_RING_IPC_HANDLE];     /* daemon records after its copy; client waits */
	uint8_t released[BP_RING_IPC_HANDLE];  /* client records at release; daemon waits */
} bp_ring_gpu_slot;

_Static_assert(sizeof(bp_ring_gpu) == 128, "device table layout");
_Static_assert(sizeof(bp_ring_gpu_slot) == 128, "device slot layout");

/* Bytes of the device table for `slots` slots (page-rounded). */
static inline uint64_t bp_ring_gpu_size(uint32_t slots)
{
	return (sizeof(bp_ring_gpu) + sizeof(bp_ring_gpu_slot) * (uint64_t)slots + 4095u) &
	       ~UINT64_C(4095);
}

/*
 * Upper bound of wait bucket i < BP_RING_WAIT_BUCKETS - 1: 1, 4, 16, 64,
 * 256 us, the same in ms, then 1 and 4 s. Nearly powers of four, and
 * each a decimal a person reads (le="0.004" in the metrics).
 */
static inline uint64_t bp_ring_wait_bound_ns(unsigned i)
{
	static const uint64_t step[5] = { 1, 4, 16, 64, 256 };
	uint64_t ns = 1000 * step[i % 5];

	for (unsigned k = i / 5; k; k--)
		ns *= 1000;
	return ns;
}
#define BP_RING_WAIT_BOUND_NS(i) bp_ring_wait_bound_ns(i)

#define BP_RING_CTRL_RELEASE_OFFSET 256u

_Static_assert(sizeof(bp_ring_header) == 200, "ring header layout");
_Static_assert(sizeof(bp_ring_desc) == BP_RING_DESC_SIZE, "descriptor layout");
_Static_assert(sizeof(bp_ring_ctrl) == BP_RING_CTRL_RELEASE_OFFSET, "control layout");

/* Bytes of the control memfd for `slots` descriptors (page-rounded). */
static inline uint64_t bp_ring_ctrl_size(uint32_t slots)
{
	return (BP_RING_CTRL_RELEASE_OFFSET + 8u * (uint64_t)slots + 4095u) & ~UINT64_C(4095);
}

/* Offset of batch seq's descriptor in the data memfd. */
static inline uint64_t bp_ring_desc_offset(uint32_t slots, uint64_t seq)
{
	return BP_RING_HEADER_SIZE + BP_RING_DESC_SIZE * (seq % slots);
}

/* Offset of the arena for `slots` descriptors (page-rounded). */
static inline uint64_t bp_ring_arena_offset(uint32_t slots)
{
	return (BP_RING_HEADER_SIZE + BP_RING_DESC_SIZE * (uint64_t)slots + 4095u) &
	       ~UINT64_C(4095);
}

#endif
