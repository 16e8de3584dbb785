/* SPDX-License-Identifier: MIT */
/*
 * sources.h - a session over a weighted mixture of datasets: token packs
 * cut into sequences, or packs of samples of one schema (docs/tokens.md,
 * "Mixtures"; OPEN's sources trailer, PROTOCOL.md).
 *
 * The session's epoch is `epoch` positions of one endless mixed stream:
 * epoch e's position p is stream position P = e x epoch + p, which holds
 * source slot[P mod period] (lib/proto/mixture.h), its k-th use. Each
 * source is read in passes of its own: use k is item
 * order_i(k / count_i, k mod count_i) of that source (a sequence, or a
 * sample), order_i being the session's shuffle of that source with the
 * pass in place of the epoch (sampler.h). So a small source upsampled repeats in full passes, each a
 * new permutation; a large one is read without repetition until its pass
 * ends, across epochs; and everything is a function of (seed, P): ranks,
 * resume and elastic resume count positions of the stream as they count
 * samples.
 *
 * A session id names a source's item: source i's are ids
 * [src[i].first, src[i].first + src[i].count). Sorting ids sorts by
 * source, then by where each source stores them.
 *
 * A mixture of samples carries its sources' schema (equal in names,
 * types and class names: bd_mix_new refuses others, naming the first
 * difference) and one field more, "source", int64: field index
 * BD_MIX_SOURCE_FIELD(x) of the session's schema, which no dataset has
 * (write_columns fills it); a token mixture's is its last field too.
 *
 * Thread rules: bd_mix_new on the open's worker thread; read-only after.
 */
#ifndef BATCHD_DAEMON_SOURCES_H
#define BATCHD_DAEMON_SOURCES_H

#include <stdint.h>

#include "dataset.h"
#include "mixture.h"
#include "protocol.h"
#include "sampler.h"
#include "sequences.h"

typedef struct bd_source {
	bd_dataset *dset;           /* held (source 0's is the session's own) */
	bd_seqs *seqs;              /* owned (source 0's is the session's own); NULL: samples */
	uint64_t first;             /* its first session id */
	uint64_t count;             /* its items: sequences, or samples */
	bd_sampler order;           /* its passes (samples: count, world 1, batch 1) */
} bd_source;

typedef struct bd_mix {
	uint32_t n, period;
	uint32_t count[BP_MIX_SOURCES_MAX];  /* positions a period */
	uint8_t *slot;              /* period: each position's source */
	uint32_t *rank;             /* period: its use within the period */
	uint64_t epoch;             /* positions an epoch */
	uint64_t ids;               /* the sources' sequences summed */
	uint64_t fingerprint;       /* of the sources' fingerprints and counts, in order */
	uint32_t max_pieces, max_frags;  /* tokens: the sources' most */
	uint32_t max_frames;        /* samples: the most blocks a sample spans, of any source */
	uint64_t blocks;            /* the sources' blocks summed */
	uint64_t max_sample;        /* the largest item of any source (READY) */
	uint64_t mean_raw;          /* samples: the mixed stream's mean sample bytes */
	bp_field field[BP_FIELD_MAX + 1];
	bp_schema schema;           /* tokens[, position_ids, cu_seqlens] or the sources', source */
	uint64_t heap;
	bd_source src[BP_MIX_SOURCES_MAX];
} bd_mix;

/* The schema index of a mixture's "source" field: its last. */
#define BD_MIX_SOURCE_FIELD(x) ((x)->schema.count - 1)

/*
 * The mixture OPEN m asks for over d[0..m->sources) with their sequences
 * q[...] (taken, as d[1..]: on success the mixture holds them and the
 * arrays are NULL; d[0] and q[0] stay the caller's, borrowed), or of
 * their samples when q is NULL. @return 0; -EINVAL with err (a source
 * cannot be shuffled; samples: schemas that differ, or one with a field
 * "source" or BP_FIELD_MAX fields already); -ENOMEM.
 */
int bd_mix_new(bd_dataset **d, bd_seqs **q, const bp_msg_open *m, bd_mix **ret, char *err,
	       size_t errlen);

void bd_mix_free(bd_mix *x);

/* The session id at position pos of epoch `epoch`, and its source. */
uint64_t bd_mix_id(const bd_mix *x, uint64_t epoch, uint64_t pos, uint32_t *ret_source);

/* The source of session id `id`, and its item there. */
uint32_t bd_mix_source_of(const bd_mix *x, uint64_t id, uint64_t *ret_local);

/*
 * The most bytes n samples of the mixed stream take (selected whole): the
 * n largest of all its sources' samples (bd_dataset_batch_bound's, merged).
 */
uint64_t bd_mix_batch_bound(const bd_mix *x, uint32_t n);

#endif
