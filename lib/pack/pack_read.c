/* SPDX-License-Identifier: MIT */
/*
 * pack_read.c - reading an open dataset (pack_file.h): samples one at a
 * time through a reader that decodes their blocks, every block and
 * section verified against its checksums, and the whole-buffer reads and
 * writes the pack code and the tools share.
 *
 * Why apart from pack_file.c: opening distrusts the shards and builds the
 * dataset; what is here only uses one through its accessors.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xxhash.h>
#include <zstd.h>

#include "pack_fields.h"
#include "pack_file.h"
#include "pack_file_priv.h"
#include "pack_priv.h"

/* ---- synchronous reader ------------------------------------------------ */

struct bp_sample_reader {
	const bp_dataset *ds;
	ZSTD_DCtx *dctx;
	uint8_t *stored, *raw;
	size_t stored_cap, raw_cap;
	size_t shard;            /* cached block, valid when have_block */
	uint64_t block;
	bool have_block;
};

int bp_sample_reader_new(const bp_dataset *ds, bp_sample_reader **ret)
{
	bp_sample_reader *r = calloc(1, sizeof(*r));

	if (!r)
		return -ENOMEM;
	r->ds = ds;
	r->dctx = ZSTD_createDCtx();
	if (!r->dctx || bp_pack_dctx_init(r->dctx) < 0) {
		bp_sample_reader_free(r);
		return -ENOMEM;
	}
	*ret = r;
	return 0;
}

void bp_sample_reader_free(bp_sample_reader *r)
{
	if (!r)
		return;
	ZSTD_freeDCtx(r->dctx);
	free(r->stored);
	free(r->raw);
	free(r);
}

/* Read and decode block bi of shard sh (its entry b) into out (out_cap bytes). */
static int reader_decode(bp_sample_reader *r, const bp_shard *sh, uint64_t bi,
			 const bp_pack_block *b, uint8_t *out, size_t out_cap,
			 bp_dataset_fault *fault)
{
	bp_pack_fault pf = { 0 };
	uint8_t *in;
	int err;

	/* Raw blocks are read straight into place and checked there. */
	if (b->codec == BP_CODEC_RAW) {
		in = out;
	} else {
		if (bp_buf_reserve(&r->stored, &r->stored_cap, b->stored_size) < 0)
			return -ENOMEM;
		in = r->stored;
	}
	err = bp__read_meta(sh, in, b->stored_size, b->offset);
	if (err < 0)
		return bp__fault_set(fault, sh->name, err == -ENODATA ? -EIO : err,
				 "cannot read block", b->offset, (int64_t)bi);
	err = bp_pack_block_decode(b, in, r->dctx, sh->ddict, out, out_cap, &pf);
	if (err < 0)
		return bp__fault_set(fault, sh->name, err, pf.what, pf.offset, (int64_t)bi);
	return 0;
}

/*
 * Read sample s's blocks into r->raw: its block, or a framed sample's
 * frames one after another, which lays the sample out whole.
 */
static int reader_load(bp_sample_reader *r, const bp_shard *sh, const bp_pack_sample *s,
		       bp_dataset_fault *fault)
{
	uint64_t need, at = 0;
	bp_pack_block b;
	int err;

	r->have_block = false;
	bp_pack_index_block(&sh->index, s->block, &b);
	need = s->frames > 1 ? s->size : b.raw_size;
	if (bp_buf_reserve(&r->raw, &r->raw_cap, need) < 0)
		return -ENOMEM;
	for (uint64_t k = 0; k < s->frames; k++) {
		/* The index proved the frames add up to the sample: each fits what is left. */
		if (k)
			bp_pack_index_block(&sh->index, s->block + k, &b);
		err = reader_decode(r, sh, s->block + k, &b, r->raw + at, r->raw_cap - at, fault);
		if (err < 0)
			return err;
		at += b.raw_size;
	}
	return 0;
}

int bp_sample_reader_get(bp_sample_reader *r, uint64_t id, const uint8_t **ret_data,
			 uint64_t *ret_size, bp_dataset_fault *fault)
{
	bp_pack_sample s;
	const bp_shard *sh;
	size_t shard;
	int err;

	err = bp_dataset_locate(r->ds, id, &shard, &s);
	if (err < 0)
		return err;
	sh = bp_dataset_shard(r->ds, shard);
	if (!r->have_block || r->shard != shard || r->block != s.block) {
		err = reader_load(r, sh, &s, fault);
		if (err < 0)
			return err;
		r->have_block = true;
		r->shard = shard;
		r->block = s.block;
	}
	*ret_data = r->raw + s.offset;
	*ret_size = s.size;
	return 0;
}

/* ---- verify ------------------------------------------------------------ */

#define VERIFY_CHUNK (UINT64_C(8) << 20)

/*
 * A token pack's ids as verify decodes its blocks: the shard's raw bytes
 * in block order are its token stream, and an id may straddle two frames
 * of a hostile shard, so the bytes of one not yet whole wait in part.
 */
typedef struct id_scan {
	uint32_t width, have;    /* width 0: no token pack */
	uint8_t part[4];
	uint64_t max;
} id_scan;

static void id_feed(id_scan *t, const uint8_t *p, size_t n)
{
	size_t whole;
	uint64_t m;

	for (; t->have && n; p++, n--) {
		t->part[t->have++] = *p;
		if (t->have == t->width) {
			m = bp__tokens_max(t->part, t->width, t->width);
			t->max = m > t->max ? m : t->max;
			t->have = 0;
		}
	}
	whole = n - n % t->width;
	m = bp__tokens_max(p, whole, t->width);
	t->max = m > t->max ? m : t->max;
	memcpy(t->part, p + whole, n - whole);
	t->have = (uint32_t)(n - whole);
}

/* A token pack's largest id, found in its blocks, against its TOKENS section's. */
static int id_check(const bp_shard *sh, const id_scan *t, const bp_tokens *tok,
		    bp_dataset_fault *fault)
{
	bp_pack_section sec;

	if (t->max == tok->max_id)
		return 0;
	bp_pack_index_find_section(&sh->index, BP_SECTION_TOKENS, BP_SECTION_NO_FIELD, &sec);
	return bp__fault_set(fault, sh->name, -EBADMSG,
			     "tokens section's largest id is not the documents' largest",
			     sec.offset + T_MAX_ID, -1);
}

/*
 * Blocks are contiguous, so verification reads the data region in large
 * sequential chunks of whole blocks and checks each block in place; a
 * token pack's ids (tok, else NULL) are read from them on the way.
 */
static int verify_shard(const bp_shard *sh, const bp_tokens *tok, bp_sample_reader *r,
			uint64_t *stored_done, uint64_t *raw_done, bp_dataset_fault *fault)
{
	uint64_t bi = 0, n = sh->footer.block_count;
	id_scan ids = { .width = tok ? tok->width : 0 };
	int err;

	posix_fadvise(sh->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	while (bi < n) {
		bp_pack_block first, b;
		uint64_t end = bi, span = 0, max_raw = 0;

		bp_pack_index_block(&sh->index, bi, &first);
		do {
			bp_pack_index_block(&sh->index, end, &b);
			span += b.stored_size;
			if (b.raw_size > max_raw)
				max_raw = b.raw_size;
			end++;
		} while (end < n && span < VERIFY_CHUNK);

		if (bp_buf_reserve(&r->stored, &r->stored_cap, span) < 0 ||
		    bp_buf_reserve(&r->raw, &r->raw_cap, max_raw) < 0)
			return -ENOMEM;
		err = bp__read_meta(sh, r->stored, span, first.offset);
		if (err < 0)
			return bp__fault_set(fault, sh->name, err == -ENODATA ? -EIO : err,
					 "cannot read blocks", first.offset, (int64_t)bi);
		for (; bi < end; bi++) {
			bp_pack_fault pf = { 0 };

			bp_pack_index_block(&sh->index, bi, &b);
			err = bp_pack_block_decode(&b, r->stored + (b.offset - first.offset), r->dctx,
						   sh->ddict, r->raw, r->raw_cap, &pf);
			if (err < 0)
				return bp__fault_set(fault, sh->name, err, pf.what, pf.offset,
						 (int64_t)bi);
			if (ids.width)
				id_feed(&ids, r->raw, b.raw_size);
			*stored_done += b.stored_size;
			*raw_done += b.raw_size;
		}
	}
	return tok ? id_check(sh, &ids, tok, fault) : 0;
}

static int shard_pread(void *ctx, void *buf, size_t len, uint64_t off)
{
	int r = bp_shard_pread(ctx, buf, len, off);

	return r == -ENODATA ? -EIO : r;
}

/*
 * The sections, read again from the file: those loaded at open checked
 * as open checks them, and every key block and key-hash page with them.
 */
static int verify_sections(const bp_shard *sh, bp_sample_reader *r, bp_dataset_fault *fault)
{
	bp_pack_fault pf = { 0 };
	bp_pack_fields fields;
	uint8_t *bytes = NULL;
	int err;

	if (sh->index.section_count == 0)
		return 0;
	err = bp__fields_load(sh, &bytes, &fields, fault);
	if (err < 0)
		return err;
	if (fields.keys) {
		err = bp_pack_keys_verify(&sh->index, shard_pread, (void *)sh, r->dctx, &pf);
		if (err < 0 && pf.what)
			bp__fault_set(fault, sh->name, err, pf.what, pf.offset, pf.block);
	}
	bp_pack_fields_clear(&fields);
	free(bytes);
	return err;
}

int bp_dataset_verify(const bp_dataset *ds,
		      void (*progress)(void *ctx, uint64_t stored_done, uint64_t raw_done),
		      void *ctx, bp_dataset_fault *fault)
{
	uint64_t stored_done = 0, raw_done = 0;
	bp_sample_reader *r;
	int err;

	err = bp_sample_reader_new(ds, &r);
	if (err < 0)
		return err;
	for (size_t i = 0; i < bp_dataset_shard_count(ds); i++) {
		const bp_pack_fields *pf = bp_dataset_shard_fields(ds, i);

		err = verify_shard(bp_dataset_shard(ds, i), pf->has_tokens ? &pf->tokens : NULL, r,
				   &stored_done, &raw_done, fault);
		if (err == 0)
			err = verify_sections(bp_dataset_shard(ds, i), r, fault);
		if (err < 0)
			break;
		if (progress)
			progress(ctx, stored_done, raw_done);
	}
	bp_sample_reader_free(r);
	return err;
}

void bp_dataset_fault_format(const bp_dataset_fault *fault, char *buf, size_t len)
{
	const char *what = fault->pack.what ? fault->pack.what : "error";

	if (fault->pack.block >= 0)
		snprintf(buf, len, "shard %s: block %" PRId64 " at byte %" PRIu64 ": %s",
			 fault->shard, fault->pack.block, fault->pack.offset, what);
	else
		snprintf(buf, len, "shard %s: at byte %" PRIu64 ": %s", fault->shard,
			 fault->pack.offset, what);
}

/* ---- whole reads and writes ----------------------------------------------- */

/* One call moves at most 1 GiB: Linux caps a read or write below 2 GiB anyway. */
#define IO_CHUNK ((size_t)1 << 30)

int bp_shard_pread(const bp_shard *sh, void *buf, size_t len, uint64_t off)
{
	return sh->read ? sh->read(sh->read_ctx, buf, len, off) : bp_pread_full(sh->fd, buf, len, off);
}

int bp_pread_full(int fd, void *buf, size_t len, uint64_t off)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = pread(fd, p, len > IO_CHUNK ? IO_CHUNK : len, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -ENODATA;
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* write(2) when off is negative, else pwrite(2) at off, until len bytes are out. */
static int write_loop(int fd, const void *buf, size_t len, int64_t off)
{
	const uint8_t *p = buf;

	while (len) {
		size_t n1 = len > IO_CHUNK ? IO_CHUNK : len;
		ssize_t n = off < 0 ? write(fd, p, n1) : pwrite(fd, p, n1, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
		if (off >= 0)
			off += n;
	}
	return 0;
}

int bp_write_full(int fd, const void *buf, size_t len)
{
	return write_loop(fd, buf, len, -1);
}

int bp_pwrite_full(int fd, const void *buf, size_t len, uint64_t off)
{
	return off > INT64_MAX ? -EINVAL : write_loop(fd, buf, len, (int64_t)off);
}

int bp_buf_reserve(uint8_t **buf, size_t *cap, size_t need)
{
	uint8_t *p;

	if (need <= *cap && *buf)
		return 0;
	p = realloc(*buf, need ? need : 1);
	if (!p)
		return -ENOMEM;
	*buf = p;
	*cap = need;
	return 0;
}
