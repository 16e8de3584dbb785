/* SPDX-License-Identifier: MIT */
/*
 * pack_dict.c - the dictionary `batchd-pack create` trains (see pack_dict.h):
 * an evenly spread set of small samples, zstd's fastCover on the
 * compression threads, and a trial on the training set that keeps the
 * dictionary only when it saves 3% counting its own bytes.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ZDICT_STATIC_LINKING_ONLY /* fastCover parameters: threads for training */
#include <zdict.h>
#include <zstd.h>

#include "pack.h"
#include "pack_dict.h"

#define DICT_MAX_BLOCK      (UINT64_C(64) << 10) /* auto: dictionaries pay below this */
#define DICT_CAPACITY       (112640)             /* zstd's default dictionary size */
#define DICT_TRAIN_BYTES    (UINT64_C(100) * DICT_CAPACITY)
#define DICT_TRAIN_MAX_ONE  (UINT64_C(128) << 10)
#define DICT_MIN_SAMPLES    16

/* The samples a dictionary is trained on, end to end in buf. */
typedef struct training {
	uint8_t *buf;
	size_t *sizes;
	size_t n;
	uint64_t bytes;
} training;

static void training_free(training *t)
{
	free(t->buf);
	free(t->sizes);
}

/* Read an evenly spread set of small samples for training. @return 0, -ENODATA (too few), -errno. */
static int training_set(pack_inputs *in, training *ret)
{
	uint64_t small = 0, small_bytes = 0, step, want, total = 0;
	size_t n = 0, *sizes = NULL;
	uint8_t *buf = NULL;
	pack_iter *it = NULL;
	uint64_t size;
	int r;

	for (uint64_t k = 0; k < in->samples; k++) {
		uint64_t s = pack_inputs_size(in, k);

		if (s && s <= DICT_TRAIN_MAX_ONE) {
			small++;
			small_bytes += s;
		}
	}
	if (small < DICT_MIN_SAMPLES)
		return -ENODATA;
	want = DICT_TRAIN_BYTES / (small_bytes / small + 1) + 1;
	step = small > want ? small / want : 1;

	buf = malloc(DICT_TRAIN_BYTES + DICT_TRAIN_MAX_ONE);
	sizes = malloc((small / step + 1) * sizeof(*sizes));
	r = buf && sizes ? pack_iter_new(in, &it) : -ENOMEM;
	if (r < 0)
		goto fail;
	for (uint64_t seen = 0; (r = pack_iter_next(it, &size)) == 1 && total < DICT_TRAIN_BYTES;) {
		if (!size || size > DICT_TRAIN_MAX_ONE)
			continue;
		if (seen++ % step)
			continue;
		r = pack_iter_read(it, buf + total);
		if (r < 0)
			goto fail;
		sizes[n++] = size;
		total += size;
	}
	if (r < 0)
		goto fail;
	pack_iter_free(it);
	*ret = (training){ .buf = buf, .sizes = sizes, .n = n, .bytes = total };
	return 0;
fail:
	pack_iter_free(it);
	free(buf);
	free(sizes);
	return r;
}

/* Compressed bytes of the training samples, with cdict or without. */
static uint64_t trial_size(const training *t, const ZSTD_CDict *cdict, int level, ZSTD_CCtx *cctx,
			   uint8_t *scratch)
{
	const uint8_t *buf = t->buf;
	uint64_t total = 0;

	for (size_t i = 0; i < t->n; buf += t->sizes[i], i++) {
		bp_pack_encoded e;

		if (bp_pack_block_encode(cctx, cdict, level, buf, t->sizes[i], scratch,
					 ZSTD_compressBound(DICT_TRAIN_MAX_ONE), &e) == 0)
			total += e.stored_size;
	}
	return total;
}

/*
 * Whether dict (size bytes) pays: the trial on the training set, scaled to
 * the whole input, must save 3% with the dictionary's own bytes charged
 * once. @return 1 it pays, 0 not, -ENOMEM.
 */
static int dict_pays(const pack_inputs *in, const pack_create_opts *o, const training *t,
		     const void *dict, size_t size)
{
	uint8_t *scratch = malloc(ZSTD_compressBound(DICT_TRAIN_MAX_ONE));
	ZSTD_CCtx *cctx = ZSTD_createCCtx();
	ZSTD_CDict *cdict = NULL;
	double scale = (double)in->raw_bytes / (double)t->bytes;
	uint64_t plain, with;
	int r = -ENOMEM;

	if (!scratch || !cctx)
		goto out;
	cdict = ZSTD_createCDict(dict, size, o->level);
	if (!cdict)
		goto out;
	plain = trial_size(t, NULL, o->level, cctx, scratch);
	with = trial_size(t, cdict, o->level, cctx, scratch);
	r = (double)with * scale + (double)size < 0.97 * (double)plain * scale;
out:
	ZSTD_freeCDict(cdict);
	ZSTD_freeCCtx(cctx);
	free(scratch);
	return r;
}

/* @return whether o and the input's sizes allow a dictionary to be tried at all. */
static bool dict_wanted(const pack_inputs *in, const pack_create_opts *o)
{
	uint64_t mean = in->raw_bytes / in->samples, block = o->block_size;

	if (o->dict == DICT_OFF)
		return false;
	return o->dict == DICT_ON || (block > mean ? block : mean) <= DICT_MAX_BLOCK;
}

int pack_train_dict(pack_inputs *in, const pack_create_opts *o, void **ret_dict,
		      size_t *ret_size)
{
	/* ZDICT_trainFromBuffer's own choice (fastCover, d=8, 4 steps), on our threads. */
	ZDICT_fastCover_params_t fp = {
		.d = 8,
		.steps = 4,
		.nbThreads = o->threads,
		.zParams = { .compressionLevel = o->level },
	};
	training t;
	uint8_t *dict = NULL;
	size_t cap, got;
	int r;

	*ret_dict = NULL;
	*ret_size = 0;
	if (!dict_wanted(in, o))
		return 0;
	r = training_set(in, &t);
	if (r < 0) {
		if (o->dict == DICT_AUTO)
			return r == -ENODATA ? 0 : r;
		fprintf(stderr, "batchd-pack: too few non-empty samples under %" PRIu64
				" KiB (need %d) to train a dictionary\n",
			DICT_TRAIN_MAX_ONE >> 10, DICT_MIN_SAMPLES);
		return r == -ENODATA ? -EINVAL : r;
	}
	cap = t.bytes / 20 < DICT_CAPACITY ? (size_t)(t.bytes / 20) : DICT_CAPACITY;
	if (cap < 1024)
		cap = 1024;
	dict = malloc(cap);
	r = -ENOMEM;
	if (!dict)
		goto out;
	got = ZDICT_optimizeTrainFromBuffer_fastCover(dict, cap, t.buf, t.sizes, (unsigned)t.n, &fp);
	if (ZDICT_isError(got)) {
		r = 0;
		if (o->dict == DICT_ON) {
			fprintf(stderr, "batchd-pack: dictionary training failed: %s\n",
				ZDICT_getErrorName(got));
			r = -EINVAL;
		}
		goto out;
	}
	r = dict_pays(in, o, &t, dict, got);
	if (r > 0 || (r == 0 && o->dict == DICT_ON)) {
		*ret_dict = dict;
		*ret_size = got;
		dict = NULL;
	}
	if (r > 0)
		r = 0;
out:
	free(dict);
	training_free(&t);
	return r;
}
