/* SPDX-License-Identifier: MIT */
/*
 * batchclient.h - libbatchclient: receive mini-batches from batchd.
 *
 * A trainer connects to the local batchd, opens a stream on a dataset and
 * calls bc_next() in its training loop. Batches arrive in shared memory,
 * already read, checked and decompressed; taking a ready batch costs no
 * system call. Each batch stays valid until bc_release().
 *
 *     bc_client *c;
 *     bc_stream *s;
 *     bc_stream_opts o;
 *     bc_batch *b;
 *
 *     bc_connect(NULL, &c);
 *     bc_stream_opts_init(&o);
 *     o.dataset = "imagenet/train";
 *     o.batch_size = 256;
 *     o.shuffle = BC_SHUFFLE_GLOBAL;
 *     bc_open(c, &o, &s);
 *     for (;;) {
 *             int r = bc_next(s, &b, -1);
 *             if (r == BC_EPOCH_END) { ... end of an epoch: the next call starts the next ... }
 *             else if (r < 0) { ... bc_strerror(r), bc_stream_error(s) ... }
 *             else { ... use bc_batch_data(b, &len) ...; bc_release(b); }
 *     }
 *
 * Errors are negative errno values; bc_strerror() names them, and messages
 * from the daemon are kept in bc_client_error() / bc_stream_error().
 * A call that fails leaves its ret_ out-parameter as it was: initialise
 * the pointers to NULL, and every call here takes that NULL (the value
 * each returns for it is in its comment), so error paths need no checks.
 *
 * Signals: the library never raises SIGPIPE, whatever the trainer's
 * SIGPIPE disposition. When batchd stops or dies, calls fail with the
 * errors below instead (bc_next: -ESHUTDOWN or -EPIPE).
 *
 * Thread rules: a bc_client may be shared by threads (its socket is
 * locked); a bc_stream and its batches belong to one thread at a time.
 * Different streams may be used from different threads concurrently.
 */
#ifndef BATCHCLIENT_H
#define BATCHCLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && defined(BATCHCLIENT_BUILDING)
#define BC_API __attribute__((visibility("default")))
#else
#define BC_API
#endif

typedef struct bc_client bc_client;
typedef struct bc_stream bc_stream;
typedef struct bc_batch bc_batch;

/* bc_next() result: the previous batch was the last of its epoch. */
#define BC_EPOCH_END 1

enum bc_shuffle {
	BC_SHUFFLE_NONE = 0,    /* dataset order */
	BC_SHUFFLE_GLOBAL = 1,  /* a full permutation per epoch */
	BC_SHUFFLE_BLOCK = 2,   /* shuffled blocks, samples mixed within a window of blocks */
};

#define BC_HOST (-1)            /* placement: host memory */

enum bc_crop {
	BC_CROP_RANDOM_RESIZED = 1, /* RandomResizedCrop(size, scale, ratio) */
	BC_CROP_CENTER = 2,         /* Resize(resize) + CenterCrop(size) */
};

/* What a token pack's samples are (bc_stream_opts.sequences; docs/tokens.md). */
enum bc_sequences {
	BC_SEQUENCES_NONE = 0,    /* the pack's own samples (its documents) */
	BC_SEQUENCES_WINDOWS = 1, /* the token stream cut into windows of seq_len + 1 */
	BC_SEQUENCES_PACKED = 2,  /* whole documents packed into rows of seq_len + 1 */
};

/* One source of a mixture (bc_stream_opts.sources; docs/tokens.md, Mixtures). */
typedef struct bc_source {
	const char *dataset;    /* a token pack, as bc_stream_opts.dataset */
	double weight;          /* its share, relative to the others': finite, > 0 */
} bc_source;

/* What the daemon makes of one bytes field (bc_stream_opts.decode). */
typedef struct bc_decode {
	const char *field;      /* the bytes field decoded; NULL: none */
	uint32_t height, width; /* the tensor's, 1 .. 8192 */
	enum bc_crop crop;
	uint32_t resize;        /* BC_CROP_CENTER: the short side before the crop; 0: max(height, width) */
	float scale_min, scale_max; /* BC_CROP_RANDOM_RESIZED; 0, 0: 0.08, 1 */
	float ratio_min, ratio_max; /* 0, 0: 3/4, 4/3 */
	float flip;             /* horizontal flip probability */
	bool nhwc;              /* [H, W, 3] a sample; false: [3, H, W] */
	/*
	 * A bad image (corrupt, truncated, too large, not an image) is left
	 * out of its batch, which comes with the others (bc_batch_count
	 * fewer, bc_batch_skipped naming it); false: it fails its batch,
	 * naming the sample (on_error "fail", the default).
	 */
	bool skip_bad;
} bc_decode;

typedef struct bc_stream_opts {
	uint32_t struct_size;   /* set by bc_stream_opts_init; lets the struct grow */
	const char *dataset;    /* relative to a daemon root, or absolute under one */
	uint32_t batch_size;    /* samples per batch, >= 1 */
	enum bc_shuffle shuffle; /* bc_stream_opts_init: BC_SHUFFLE_GLOBAL, as everywhere */
	uint64_t seed;
	uint64_t start_epoch;   /* resume: first epoch */
	uint64_t start_batch;   /* resume: batches of start_epoch already consumed */
	uint32_t rank, world;   /* data-parallel split; world >= 1 */
	bool drop_last;         /* drop the uneven tail instead of padding by wrapping */
	uint32_t prefetch;      /* batches staged ahead; 0 = the daemon's default */
	uint32_t window;        /* BC_SHUFFLE_BLOCK: blocks per window; 0 = default */
	int device;             /* BC_HOST, or a CUDA device ordinal */
	/*
	 * The fields the batches carry: comma-separated names from the
	 * dataset's schema ("image,label"); NULL or "" = every field. A
	 * session of scalar and str fields only reads no block at all.
	 */
	const char *fields;
	bool keys;              /* batches carry the sample keys (bc_batch_sample_key) */
	/*
	 * Elastic resume. Ranks stripe each epoch's global order (docs/architecture.md,
	 * "Plan"), so after k lockstep steps of batch_size B at world W the
	 * ranks have consumed the first k*B*W positions of the epoch: resume
	 * at any world size with start_sample = that count (and start_batch
	 * 0). start_epoch's batches are then counted from start_sample
	 * (bc_stream_epoch_batches); with drop_last it may have none, and the
	 * stream begins with the next epoch.
	 */
	uint64_t start_sample;  /* resume: global position in start_epoch's order (samples all ranks consumed) */
	/*
	 * Serve every batch_stride-th batch from start_batch (DataLoader
	 * workers); 1 = all; 1 .. 4096. N streams of one rank with start_batch
	 * k = 0 .. N-1 and batch_stride N between them deliver the rank's
	 * batches, worker k taking batches k, k+N, ... across epochs.
	 */
	uint32_t batch_stride;
	/*
	 * Images decoded in the daemon (docs/images.md): with decode.field
	 * set, that bytes field of each sample (JPEG, PNG or WebP) arrives
	 * as a uint8 tensor of decode.height x decode.width RGB pixels
	 * (bc_batch_field: 3·height·width bytes a sample), made with
	 * torchvision's RandomResizedCrop + flip or Resize + CenterCrop,
	 * every random choice a function of (seed, epoch, sample id). A bad
	 * image fails its batch, naming the sample, or with decode.skip_bad
	 * is left out of it.
	 */
	bc_decode decode;
	/*
	 * Token packs (batchd-pack create --tokens; docs/tokens.md): with
	 * sequences set, a sample is a row of seq_len + 1 token ids, int32
	 * (field "tokens": bc_batch_field gives a dense [count, seq_len + 1]
	 * int32_t array), cut as windows from the stream of documents or
	 * packed from whole documents; packed rows come with "position_ids"
	 * (int32 [count, seq_len + 1], each document counting from 0, the
	 * padding 0) and "cu_seqlens" (int32: the document boundaries over the
	 * first seq_len tokens of every row, flattened, from 0 to count x
	 * seq_len: FlashAttention's varlen argument). 1 <= seq_len <= 2^20.
	 */
	enum bc_sequences sequences;
	uint32_t seq_len;
	/*
	 * A weighted mixture (docs/tokens.md, Mixtures): of token packs with
	 * sequences, else of packs of one schema (fields alike in order, name,
	 * type and class names; no keys): nsources (2 .. 64) sources instead
	 * of `dataset` (which stays NULL). Every run of P consecutive rows holds exactly c_i rows
	 * of source i, c_i / P its weight's share (P the smallest period that
	 * holds the weights to 1e-9, at most 65536); each source is shuffled
	 * and cycled in passes of its own; field "source" (int64) says each
	 * row's source. An epoch is epoch_samples rows (0: the sources'
	 * sequences, or samples, summed); positions (start_sample) count rows of the mixed
	 * stream, so resume and elastic resume work as for one dataset.
	 */
	const bc_source *sources;
	uint32_t nsources;
	uint64_t epoch_samples;
} bc_stream_opts;

/*
 * Defaults: batch_size 1, BC_SHUFFLE_GLOBAL (seed 0; the default of
 * batchctl consume, batchd-bench and the Python Loader too), rank 0 of 1,
 * host placement, every field, no keys, start_sample 0, batch_stride 1.
 * NULL: does nothing. Programs built against an older bc_stream_opts (a
 * smaller struct_size) get the defaults of what it lacks.
 */
BC_API void bc_stream_opts_init(bc_stream_opts *o);

/*
 * Connect to batchd at socket_path, or, when NULL, at $BATCHD_SOCKET, else
 * /run/batchd/batchd.sock if it exists, else $XDG_RUNTIME_DIR/batchd.sock.
 * @return 0; -ENOENT / -ECONNREFUSED (no daemon there); -EACCES (not
 * allowed to the socket, or refused by the daemon's [access]);
 * -EPROTONOSUPPORT (no common protocol version); -ETIMEDOUT; -ENAMETOOLONG;
 * -ENOMEM; -EINVAL (ret NULL).
 * On success *ret is the client; free it with bc_disconnect(). On failure
 * *ret is untouched and there is no client to ask: bc_client_error(NULL)
 * then says, in one sentence, which socket was tried and how it was chosen
 * (the argument, $BATCHD_SOCKET, /run/batchd/batchd.sock or
 * $XDG_RUNTIME_DIR), why it failed and the likely fix ("is batchd
 * running?", "join the batchd group", the protocol versions this library
 * speaks). That message is the calling thread's own and stays until its
 * next bc_connect, which clears it (for -EINVAL it stays "").
 * Thread: any; concurrent connects from different threads keep their own
 * messages.
 */
BC_API int bc_connect(const char *socket_path, bc_client **ret);

/* Close the connection. Streams must be closed first. NULL is fine. */
BC_API void bc_disconnect(bc_client *c);

/*
 * The daemon's message for the last failed request on c ("" if none). For
 * NULL: why the calling thread's last bc_connect failed ("" after one that
 * succeeded). The string stays valid until the next request on c (NULL:
 * the thread's next bc_connect).
 */
BC_API const char *bc_client_error(const bc_client *c);

/*
 * The daemon's status as a JSON object. @return 0 with *ret_json a
 * NUL-terminated string the caller frees with free(), or negative errno
 * (-EINVAL for a NULL c or ret_json; -EPIPE / -ESHUTDOWN when the daemon
 * is gone).
 */
BC_API int bc_status(bc_client *c, char **ret_json);

/*
 * The daemon's metrics in the Prometheus text exposition format. @return 0
 * with *ret_text a NUL-terminated string the caller frees with free(), or
 * negative errno, as bc_status.
 */
BC_API int bc_metrics(bc_client *c, char **ret_text);

/*
 * Open a stream. @return 0; the daemon's error (e.g. -ENOENT no such
 * dataset, or no such field: the message lists the dataset's fields;
 * -ENODATA keys asked of a dataset that stores none; -EACCES outside the
 * roots, -EBADMSG corrupt pack, -ENOMEM over the memory budget, -ENODEV
 * no CUDA device, -EINVAL bad options; -EOPNOTSUPP a GPU stream from
 * another PID namespace than batchd's, where CUDA IPC events do not
 * open; for a remote dataset, what its bucket did: -EPROTO a reply that
 * broke the protocol, -EIO a transport failure, -EAGAIN failures left
 * after the retries, the message naming the object, s3://BUCKET/KEY or
 * its URL) with its message in bc_client_error(); -ETIMEDOUT when batchd
 * did not answer within 120 s (bc_client_error() names the dataset; the
 * client then serves no more requests, since the late answer could be
 * taken for another's: bc_disconnect and connect again); -EPIPE when the
 * daemon is gone; -EINVAL for a NULL c
 * or ret, or options it refuses before asking (batch_size 0, rank not
 * below world, batch_stride outside 1 .. 4096, a field list that is not
 * comma-separated names of [A-Za-z0-9_.-], ...), every one of them but a
 * NULL c with its reason, naming the value and what is allowed, in
 * bc_client_error(). On success *ret is the stream; close it with
 * bc_close(). On failure *ret is untouched.
 */
BC_API int bc_open(bc_client *c, const bc_stream_opts *o, bc_stream **ret);

/*
 * Take the next batch, waiting up to timeout_ms (-1: forever, 0: do not
 * wait). @return 0 with *ret set; BC_EPOCH_END once between the last batch
 * of an epoch and the first of the next (nothing consumed); -ETIMEDOUT;
 * a negative errno for a batch the daemon could not build (the stream
 * moves past it; the reason is in bc_stream_error()): any errno, those
 * below too; a remote dataset's fetch fails a batch with -EPROTO (the
 * server's reply broke the protocol), -ETIMEDOUT, -EIO or -EAGAIN, the
 * reason naming the object (s3://BUCKET/KEY or its URL). Such a failed
 * batch moves bc_stream_position() on, which a wait that ran out and the
 * stops and deaths below never do: that tells them apart. -ENOBUFS when the
 * batches the caller holds keep the daemon from staging the next one
 * (every slot held, or more than two held, or an old one held while newer
 * ones were released: memory is reused in order) — release them first;
 * -ESHUTDOWN when the daemon stopped the stream, -ETIME when it ended it
 * because the caller held batches past the lease ([session]
 * lease_timeout), -EPROTO when the caller broke the ring protocol; -EPIPE
 * when the daemon is gone (it died, or exited without stopping the
 * stream). Batches the daemon published before it stopped or died are
 * still delivered first: their memory is ours. Each of these says why in
 * bc_stream_error(). -EINVAL for a NULL s or ret. *ret is written only
 * on success.
 */
BC_API int bc_next(bc_stream *s, bc_batch **ret, int timeout_ms);

/*
 * Give a batch back; its memory is reused. Memory is reused in batch
 * order, so a trainer should release batches in the order it took them and
 * hold at most two at a time. On GPU streams, also records the release
 * event on the batch's stream (see bc_batch_wait_stream); where that record
 * fails (a stream of another CUDA context), it waits for the stream to
 * drain instead. @return 0, or -EINVAL if already released (or NULL);
 * -EIO if neither the record nor the drain worked: the batch is then kept
 * from the daemon, which must not reuse memory the stream may still read,
 * and the stream delivers nothing more (bc_next -EIO, the reason in
 * bc_stream_error()). A release once the
 * daemon is gone still returns 0: the stream's next bc_next reports it.
 */
BC_API int bc_release(bc_batch *b);

/* A batch's numbers: 0 for a NULL b. */
BC_API uint64_t bc_batch_epoch(const bc_batch *b);
BC_API uint64_t bc_batch_index(const bc_batch *b);   /* within the epoch, for this rank */
BC_API uint32_t bc_batch_count(const bc_batch *b);   /* samples */
/*
 * The samples left out of b: bad images of a stream opened with
 * decode.skip_bad, in batch order. @return how many (0 for other streams
 * and a NULL b); *ret_ids (when not NULL) their ids, valid until release.
 */
BC_API uint32_t bc_batch_skipped(const bc_batch *b, const uint64_t **ret_ids);
/* Sample i's id; UINT64_MAX when i >= count or b is NULL. */
BC_API uint64_t bc_batch_sample_id(const bc_batch *b, uint32_t i);
/*
 * Sample i's bytes. @return 0, -ERANGE when i >= count, -EINVAL for a
 * NULL b, ret_data or ret_len, -EBADMSG for a table entry outside the
 * payload.
 */
BC_API int bc_batch_sample(const bc_batch *b, uint32_t i, const void **ret_data, size_t *ret_len);
/*
 * All samples' bytes, contiguous in sample order (a dense tensor for
 * fixed-size samples); *ret_len (may be NULL) their size. NULL b: NULL, 0.
 * With fields, bc_batch_sample and bc_batch_data give the first selected
 * bytes field (sizes 0 when none is selected).
 */
BC_API const void *bc_batch_data(const bc_batch *b, size_t *ret_len);

/*
 * bc_batch_data's bytes through a writable view: the trainer may modify
 * them in place (normalise, zero), and only it sees the change. The view
 * is a copy-on-write mapping of the same memory: it shows the daemon's
 * bytes until the trainer writes a page, which then becomes the trainer's
 * own copy; the daemon and other sessions never see it. bc_release drops
 * those copies, and the first writable view of each batch starts from the
 * daemon's bytes, so later batches are exact even after a write through a
 * pointer kept past bc_release (that write is still a use after release:
 * it may show in a batch the trainer holds on the same memory). The
 * read-only pointers (bc_batch_data, bc_batch_sample, bc_batch_field)
 * never show the trainer's writes. Costs a page fault per page written
 * (a copy of it), one pread(2) of /proc/self/pagemap at the first
 * writable view and at the release of each batch that had one, and a
 * madvise(2) there when the batch's pages hold copies; pages only read
 * stay mapped. GPU streams: the host staging copy only.
 * @return 0 with *ret_data and *ret_len set; -EINVAL for a released (or
 * NULL) b, ret_data or ret_len; -EOPNOTSUPP when the machine's pages are
 * larger than BP_RING_RECORD_ALIGN, or the errno mmap(2) gave when the
 * kernel refused the mapping (said in bc_stream_error()): copy instead.
 * Thread: the stream's.
 */
BC_API int bc_batch_data_writable(bc_batch *b, void **ret_data, size_t *ret_len);

/* ---- fields ------------------------------------------------------------------------------ */

/* Field types, as the dataset's schema gives them (lib/pack/PACK.md, Fields). */
enum bc_field_type {
	BC_FIELD_BYTES = 1,     /* variable-length bytes (an image, a file) */
	BC_FIELD_INT64 = 2,     /* one int64_t a sample (a label) */
	BC_FIELD_FLOAT32 = 3,   /* one float a sample */
	BC_FIELD_FLOAT64 = 4,   /* one double a sample */
	BC_FIELD_STR = 5,       /* short text, not NUL-terminated (a class name, a caption) */
};

typedef struct bc_field_info {
	const char *name;       /* NUL-terminated, [A-Za-z0-9_.-] */
	uint32_t type;          /* enum bc_field_type */
	uint32_t class_count;   /* int64 fields: values are 0 .. class_count-1, named classes[v] */
	const char *const *classes; /* class_count NUL-terminated names, or NULL */
	uint64_t fixed_size;    /* bytes fields: every sample's size when all are equal, else 0 */
	bool selected;          /* the stream's batches carry it */
} bc_field_info;

/*
 * The dataset's whole schema, in schema order, valid while s is open;
 * *ret_count (may be NULL) fields. A dataset packed from plain files has
 * one bytes field, "data". NULL s: NULL, 0.
 */
BC_API const bc_field_info *bc_stream_schema(const bc_stream *s, uint32_t *ret_count);

/* The schema index of the field called name; -ENOENT, or -EINVAL for a NULL s or name. */
BC_API int bc_stream_field_index(const bc_stream *s, const char *name);

/*
 * All samples' values of field `field` (a schema index), valid until
 * bc_release(): a scalar field's dense [count] array (int64_t, float or
 * double); a bytes or str field's values end to end in sample order (for
 * a bytes field with fixed_size, a dense [count, fixed_size] array).
 * @return 0; -ERANGE for no such field; -ENODATA for a field the stream
 * did not select; -EINVAL for a NULL b, ret_data or ret_len; -EBADMSG
 * for a record that does not hold together.
 */
BC_API int bc_batch_field(const bc_batch *b, uint32_t field, const void **ret_data,
			  size_t *ret_len);

/*
 * bc_batch_field's values through the writable view bc_batch_data_writable
 * describes. @return 0; bc_batch_field's errors; then
 * bc_batch_data_writable's.
 */
BC_API int bc_batch_field_writable(bc_batch *b, uint32_t field, void **ret_data,
				   size_t *ret_len);

/*
 * Sample i's value of field `field`: its bytes or text, or its one
 * scalar. @return 0; -ERANGE for i >= count or no such field; -ENODATA,
 * -EINVAL, -EBADMSG as bc_batch_field.
 */
BC_API int bc_batch_field_sample(const bc_batch *b, uint32_t field, uint32_t i,
				 const void **ret_data, size_t *ret_len);

/*
 * Sample i's key (its path in the source, or its WebDataset key; not
 * NUL-terminated), valid until bc_release(). @return 0; -ENODATA when the
 * stream was not opened with keys; -ERANGE for i >= count; -EINVAL,
 * -EBADMSG as bc_batch_field.
 */
BC_API int bc_batch_sample_key(const bc_batch *b, uint32_t i, const char **ret_key,
			       size_t *ret_len);

/*
 * GPU streams (bc_stream_opts.device >= 0). Every batch is copied by the
 * daemon into device memory on that GPU, which the stream maps once when
 * it opens (libbatchclient loads the CUDA driver at run time; it does not
 * link it). The copy is asynchronous: before a kernel reads the batch, make
 * its stream wait for the copy with bc_batch_wait_stream() — a GPU-side
 * wait, the CPU does not block. bc_release() then records, on the stream
 * last given to bc_batch_wait_stream() (or the legacy default stream if
 * none), the event the daemon waits for before it copies another batch
 * into that memory; work queued on that stream before the release may still
 * read the batch. Work on other streams must be ordered before that stream
 * by the caller. The host views (bc_batch_data, bc_batch_sample) stay
 * valid too: they are the staging copy.
 *
 * Streams are CUstream / cudaStream_t values passed as void *.
 */

/*
 * BC_HOST, or the CUDA device ordinal (as this process numbers them) the
 * stream delivers to. BC_HOST for a NULL s.
 */
BC_API int bc_stream_device(const bc_stream *s);

/*
 * The batch's payload in device memory: all samples' bytes, contiguous in
 * sample order, at the same offsets as bc_batch_data(). With fields the
 * whole payload comes over: bc_batch_data()'s bytes at its start, and
 * every other selected field (labels too) as far from it as on the host
 * (bc_batch_field's pointer minus bc_batch_data's). NULL (and *ret_len
 * 0) on host streams, for failed batches and for a NULL b. Valid until
 * bc_release(); read it only on a stream that waited with
 * bc_batch_wait_stream().
 */
BC_API void *bc_batch_device_data(const bc_batch *b, size_t *ret_len);

/*
 * Make `stream` (NULL: the legacy default stream) wait, on the GPU, until
 * the batch's bytes have landed in device memory, and remember the stream
 * for bc_release(). @return 0; -EINVAL for a host batch, one already
 * released, or NULL; -EIO for a CUDA error (named in bc_stream_error()).
 */
BC_API int bc_batch_wait_stream(bc_batch *b, void *stream);

/*
 * Block the calling thread until the batch's copy into device memory has
 * completed: for consumers that take the device pointer with no stream to
 * order on (__cuda_array_interface__ with stream None). @return 0; -EINVAL
 * for a host batch, one already released, or NULL; -EIO for a CUDA error
 * (named in bc_stream_error()).
 */
BC_API int bc_batch_sync(bc_batch *b);

/*
 * The next batch bc_next() will return, as (epoch, batch): with the
 * stream's batch_stride it is the one after the last taken's stride. The
 * batch index counts within that epoch's schedule (start_epoch's from
 * start_sample). To resume one stream of stride 1 at the same world and
 * batch size, reopen there; to resume at another world, reopen with
 * start_sample = the samples all ranks consumed (see bc_stream_opts).
 * Either pointer may be NULL; a NULL s gives (0, 0).
 */
BC_API void bc_stream_position(const bc_stream *s, uint64_t *ret_epoch, uint64_t *ret_batch);
/* What READY said of the stream: a full epoch's batches; 0 for a NULL s. */
BC_API uint64_t bc_stream_batches_per_epoch(const bc_stream *s);
/*
 * Batches this stream's schedule has in `epoch`: fewer in start_epoch when
 * start_sample > 0 (0 when drop_last leaves none), 0 before start_epoch,
 * bc_stream_batches_per_epoch() after. Stride aside: every batch_stride-th
 * of them is this stream's. 0 for a NULL s. Any thread.
 */
BC_API uint64_t bc_stream_epoch_batches(const bc_stream *s, uint64_t epoch);
BC_API uint64_t bc_stream_samples(const bc_stream *s);       /* in the dataset */
BC_API uint64_t bc_stream_fingerprint(const bc_stream *s);

/*
 * A mixture's sources (0 for any other stream), and how many rows of
 * source i the mixed stream's first epoch x epoch_samples + sample
 * positions hold (what all ranks consumed of it at a checkpoint (epoch,
 * sample)): into *ret. @return 0; -ERANGE for no such source; -EINVAL
 * for a NULL s or ret.
 */
BC_API uint32_t bc_stream_sources(const bc_stream *s);
BC_API int bc_stream_source_used(const bc_stream *s, uint32_t i, uint64_t epoch, uint64_t sample,
				 uint64_t *ret);
BC_API uint64_t bc_stream_max_sample(const bc_stream *s);
/* Why the last batch failed, or why the stream stopped ("" if it did not, and for NULL). */
BC_API const char *bc_stream_error(const bc_stream *s);

/*
 * Close a stream; unreleased batches become invalid. A GPU stream first
 * waits for the GPU work queued on its batches' streams (held ones
 * included) before it unmaps the device memory. NULL is fine. @return 0 or
 * negative errno.
 */
BC_API int bc_close(bc_stream *s);

/* A static description of a bc_* return value. */
BC_API const char *bc_strerror(int err);

#ifdef __cplusplus
}
#endif

#endif
