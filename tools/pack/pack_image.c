/* SPDX-License-Identifier: MIT */
/*
 * pack_image.c - re-encoding images larger than --max-side at pack time,
 * and decoding every image for --check-images (see pack_image.h): a
 * block's samples walked value by value, the large images shrunk by
 * lib/image's bi_fit and encoded with libjpeg, the others decoded whole
 * by bi_fit at their own size when checked, the block rebuilt only when
 * something changed or a sample was left out.
 *
 * The encoder writes into a buffer of the fitter's that grows as libjpeg
 * asks, kept from image to image, as are the decoder's scratch and the
 * pixels: a worker allocates for the largest image it has seen, not for
 * every one. libjpeg reports errors through a callback that must not
 * return: it longjmps back to encode().
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "image.h"
#include "pack.h"
#include "pack_file.h"
#include "pack_image.h"
#include "units.h"

struct pack_fit {
	pack_fit_opts o;
	bi_scratch *sc;
	uint8_t *pix;            /* bi_fit's output, [H,W,3] */
	size_t pix_cap;
	uint8_t *jpg;            /* the encoder's output */
	size_t jpg_cap, jpg_len;
	uint8_t *raw;            /* the block rebuilt, swapped with the caller's */
	size_t raw_cap;
	uint64_t *fs;            /* the new field sizes, copied out on success */
	size_t fs_cap;
};

int pack_fit_new(const pack_fit_opts *o, pack_fit **ret)
{
	pack_fit *f = calloc(1, sizeof(*f));

	if (!f)
		return -ENOMEM;
	f->o = *o;
	/* A cap for any image within lib/image's pixel limit; allocated only as images need. */
	f->sc = bi_scratch_new(bi_fit_scratch_need(BI_MAX_PIXELS));
	if (!f->sc) {
		free(f);
		return -ENOMEM;
	}
	*ret = f;
	return 0;
}

void pack_fit_free(pack_fit *f)
{
	if (!f)
		return;
	bi_scratch_free(f->sc);
	free(f->pix);
	free(f->jpg);
	free(f->raw);
	free(f->fs);
	free(f);
}

/* Make *buf hold need bytes, growing by half again at least: values are appended one by one. */
static int reserve(uint8_t **buf, size_t *cap, size_t need)
{
	if (need <= *cap && *buf)
		return 0;
	return bp_buf_reserve(buf, cap, need < *cap + *cap / 2 ? *cap + *cap / 2 : need);
}

/* ---- the encoder ---------------------------------------------------------- */

typedef struct jdest {
	struct jpeg_destination_mgr pub;
	pack_fit *f;
} jdest;

typedef struct jerr {
	struct jpeg_error_mgr pub;
	jmp_buf jb;
} jerr;

static void dest_init(j_compress_ptr c)
{
	jdest *d = (jdest *)c->dest;

	d->pub.next_output_byte = d->f->jpg;
	d->pub.free_in_buffer = d->f->jpg_cap;
}

/* libjpeg asks for room only when the buffer is full: all of it is used. */
static boolean dest_grow(j_compress_ptr c)
{
	jdest *d = (jdest *)c->dest;
	pack_fit *f = d->f;
	size_t used = f->jpg_cap;

	if (bp_buf_reserve(&f->jpg, &f->jpg_cap, used * 2) < 0)
		ERREXIT(c, JERR_OUT_OF_MEMORY);
	d->pub.next_output_byte = f->jpg + used;
	d->pub.free_in_buffer = f->jpg_cap - used;
	return TRUE;
}

static void dest_term(j_compress_ptr c)
{
	jdest *d = (jdest *)c->dest;

	d->f->jpg_len = d->f->jpg_cap - d->pub.free_in_buffer;
}

static void on_error(j_common_ptr c)
{
	longjmp(((jerr *)c->err)->jb, 1);
}

/* f->pix (w x h RGB) into f->jpg. @return 0, -ENOMEM or -EIO with why. */
static int encode(pack_fit *f, uint32_t w, uint32_t h, char *why, size_t len)
{
	struct jpeg_compress_struct ci;
	jdest d = { .pub = { .init_destination = dest_init, .empty_output_buffer = dest_grow,
			     .term_destination = dest_term }, .f = f };
	char msg[JMSG_LENGTH_MAX];
	jerr e;

	/* A quarter of the pixels' bytes holds most photographs at quality 90 without growing. */
	if (reserve(&f->jpg, &f->jpg_cap, (size_t)w * h * 3 / 4 + 4096) < 0)
		return -ENOMEM;
	ci.err = jpeg_std_error(&e.pub);
	e.pub.error_exit = on_error;
	jpeg_create_compress(&ci);
	if (setjmp(e.jb)) {
		ci.err->format_message((j_common_ptr)&ci, msg);
		snprintf(why, len, "JPEG encoder: %s", msg);
		jpeg_destroy_compress(&ci);
		return e.pub.msg_code == JERR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
	}
	ci.dest = &d.pub;
	ci.image_width = w;
	ci.image_height = h;
	ci.input_components = 3;
	ci.in_color_space = JCS_RGB;
	jpeg_set_defaults(&ci);
	jpeg_set_quality(&ci, f->o.quality, TRUE);
	/* YCbCr 4:2:0, as PIL saves a JPEG by default: chroma at half size both ways. */
	ci.comp_info[0].h_samp_factor = ci.comp_info[0].v_samp_factor = 2;
	for (int k = 1; k < 3; k++)
		ci.comp_info[k].h_samp_factor = ci.comp_info[k].v_samp_factor = 1;
	ci.optimize_coding = TRUE;
	ci.dct_method = JDCT_ISLOW;
	jpeg_start_compress(&ci, TRUE);
	while (ci.next_scanline < h) {
		JSAMPROW row = f->pix + (size_t)ci.next_scanline * w * 3;

		jpeg_write_scanlines(&ci, &row, 1);
	}
	jpeg_finish_compress(&ci);
	jpeg_destroy_compress(&ci);
	return 0;
}

/* ---- values and blocks ------------------------------------------------------- */

enum fit_result { FIT_OTHER, FIT_KEPT, FIT_DONE };

/*
 * --check-images: decode the w x h image b whole, at its own size, to
 * see that it decodes; the pixels are not kept. A bomb's pixels are not
 * reserved: bi_fit refuses it by its header, before the output is
 * looked at. @return FIT_KEPT, or as bi_fit with why.
 */
static int check(pack_fit *f, const uint8_t *b, size_t n, uint32_t w, uint32_t h, char *why,
		 size_t len)
{
	bool bomb = (uint64_t)w * h > BI_MAX_PIXELS;
	int r;

	if (!bomb && reserve(&f->pix, &f->pix_cap, (size_t)w * h * 3) < 0)
		return -ENOMEM;
	r = bi_fit(f->sc, b, n, w > h ? w : h, BI_MAX_PIXELS, f->pix, bomb ? 0 : f->pix_cap, &w,
		   &h, why, len);
	return r < 0 ? r : FIT_KEPT;
}

/*
 * One bytes value: FIT_DONE re-encoded into f->jpg, FIT_KEPT an image
 * within the size (with check, decoded), FIT_OTHER no image; or a
 * negative errno with why.
 */
static int fit_value(pack_fit *f, const uint8_t *b, size_t n, char *why, size_t len)
{
	uint32_t w, h, ow, oh, side = f->o.max_side;
	bi_kind kind;
	int r;

	/* By magic alone: a JPEG whose header is corrupt is a bad image, not "no image". */
	if (!bi_sniff(b, n))
		return FIT_OTHER;
	r = bi_probe(b, n, &kind, &w, &h, why, len);
	if (r < 0)
		return r;
	if (!side || (w <= side && h <= side))
		return f->o.check ? check(f, b, n, w, h, why, len) : FIT_KEPT;
	bi_fit_size(w, h, side, &ow, &oh);
	if (reserve(&f->pix, &f->pix_cap, (size_t)ow * oh * 3) < 0)
		return -ENOMEM;
	r = bi_fit(f->sc, b, n, side, BI_MAX_PIXELS, f->pix, f->pix_cap, &ow, &oh, why, len);
	if (r == 0)
		r = encode(f, ow, oh, why, len);
	return r < 0 ? r : FIT_DONE;
}

/* A sample or the block over the pack's limits once re-encoded. @return -E2BIG, said why. */
static int grown(pack_fit_fault *fault, uint64_t size, uint64_t limit, const char *what)
{
	fault->field = PACK_FIT_WHOLE;
	fault->err = 0;
	snprintf(fault->why, sizeof(fault->why), "re-encoded, %s would hold %llu bytes, over the "
		 "%llu MiB limit; lower --jpeg-quality%s", what, (unsigned long long)size,
		 (unsigned long long)(limit >> 20),
		 strcmp(what, "the block") ? "" : " or --block-size");
	return -E2BIG;
}

/* The rebuilt block and its sizes into the caller's; its old buffer becomes f's for the next block. */
static void adopt(pack_fit *f, uint8_t **raw, size_t *raw_cap, uint64_t *sizes, uint64_t *fsizes,
		  size_t n, uint32_t nf)
{
	uint8_t *old = *raw;
	size_t old_cap = *raw_cap;

	*raw = f->raw;
	*raw_cap = f->raw_cap;
	f->raw = old;
	f->raw_cap = old_cap;
	memcpy(fsizes, f->fs, n * nf * sizeof(*fsizes));
	for (size_t i = 0; i < n; i++) {
		sizes[i] = 0;
		for (uint32_t k = 0; k < nf; k++)
			sizes[i] += fsizes[i * nf + k];
	}
}

void pack_fit_faults_free(pack_fit_faults *l)
{
	free(l->v);
	*l = (pack_fit_faults){ 0 };
}

static int fault_push(pack_fit_faults *l, const pack_fit_fault *fault)
{
	if (l->n == l->cap) {
		size_t cap = l->cap * 2 + 4;
		pack_fit_fault *v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = *fault;
	return 0;
}

/* Whether fit_value's err is the image's own fault, one --on-error=skip leaves out. */
static bool bad_image(int err)
{
	return err == -EBADMSG || err == -ENOTSUP || err == -E2BIG;
}

/* A block being fitted, read from raw and, once anything changed, rebuilt in f->raw. */
typedef struct block_walk {
	const uint8_t *raw;      /* the block as read */
	const uint64_t *fsizes;  /* its samples' bytes field sizes as read */
	uint32_t nf;
	bool skip;               /* leave out a sample whose image does not decode */
	uint64_t at, out;        /* bytes of raw walked; bytes of the block as it will be */
	size_t kept;             /* samples kept so far */
	bool changed;            /* the block is being rebuilt in f->raw */
	pack_fit_counts c;
} block_walk;

/*
 * Start rebuilding the block in f->raw, with room for need bytes after
 * the first upto, which are copied: the bytes before the first change
 * stay where they are until one comes.
 */
static int rebuild(pack_fit *f, block_walk *b, uint64_t upto, uint64_t need)
{
	if (reserve(&f->raw, &f->raw_cap, upto + need) < 0)
		return -ENOMEM;
	memcpy(f->raw, b->raw, upto);
	b->changed = true;
	return 0;
}

/*
 * Sample i of the block: each of its values fitted (or checked), its
 * bytes copied where the block is rebuilt. @return 0 kept; 1 left out
 * (b->skip, a value an image that does not decode: the block rebuilt
 * without it, fault saying why); or a negative errno with fault.
 */
static int fit_sample(pack_fit *f, block_walk *b, size_t i, pack_fit_fault *fault)
{
	uint64_t at0 = b->at, out0 = b->out, size = 0, whole = 0;
	pack_fit_counts c = { 0 };
	int r, res;

	for (uint32_t k = 0; k < b->nf; k++)
		whole += b->fsizes[i * b->nf + k];
	for (uint32_t k = 0; k < b->nf; k++) {
		uint64_t v = b->fsizes[i * b->nf + k];
		const uint8_t *src = b->raw + b->at;

		*fault = (pack_fit_fault){ .sample = i, .field = k };
		res = fit_value(f, src, v, fault->why, sizeof(fault->why));
		fault->err = res < 0 ? res : 0;
		if (res < 0 && b->skip && bad_image(res)) {
			/* In place until now, out and at are alike: the bytes before it are kept. */
			if (!b->changed && (r = rebuild(f, b, at0, 0)) < 0)
				return r;
			b->out = out0;
			b->at = at0 + whole;
			return 1;
		}
		if (res < 0)
			return res;
		c.fitted += res == FIT_DONE;
		c.kept += res == FIT_KEPT;
		c.other += res == FIT_OTHER;
		if (res == FIT_DONE && !b->changed && (r = rebuild(f, b, b->at, f->jpg_len)) < 0)
			return r;
		if (res == FIT_DONE)
			src = f->jpg, v = f->jpg_len;
		if (b->changed) {
			if (reserve(&f->raw, &f->raw_cap, b->out + v) < 0)
				return -ENOMEM;
			memcpy(f->raw + b->out, src, v);
		}
		b->at += b->fsizes[i * b->nf + k];
		b->out += v;
		size += v;
		f->fs[b->kept * b->nf + k] = v;
	}
	if (size > BP_PACK_MAX_SAMPLE)
		return grown(fault, size, BP_PACK_MAX_SAMPLE, "the sample");
	b->c.fitted += c.fitted;
	b->c.kept += c.kept;
	b->c.other += c.other;
	b->kept++;
	return 0;
}

int pack_fit_block(pack_fit *f, uint8_t **raw, size_t *raw_cap, uint64_t *raw_size,
		   uint64_t *sizes, uint64_t *fsizes, size_t *n, uint32_t nf,
		   pack_fit_counts *counts, pack_fit_fault *fault, pack_fit_faults *left)
{
	block_walk b = { .raw = *raw, .fsizes = fsizes, .nf = nf, .skip = f->o.skip && left };
	size_t was = left ? left->n : 0;
	int r = 0;

	if (*n * nf > f->fs_cap) {
		uint64_t *fs = realloc(f->fs, *n * nf * sizeof(*fs));

		if (!fs)
			return -ENOMEM;
		f->fs = fs;
		f->fs_cap = *n * nf;
	}
	for (size_t i = 0; r == 0 && i < *n; i++) {
		r = fit_sample(f, &b, i, fault);
		if (r == 1) {
			b.c.left++;
			r = fault_push(left, fault);
		}
		if (r == 0 && b.out > BP_PACK_MAX_BLOCK)
			r = grown(fault, b.out, BP_PACK_MAX_BLOCK, "the block");
	}
	if (r < 0) {
		if (left)
			left->n = was;
		return r;
	}
	counts->fitted += b.c.fitted;
	counts->kept += b.c.kept;
	counts->other += b.c.other;
	counts->left += b.c.left;
	if (b.changed)
		adopt(f, raw, raw_cap, sizes, fsizes, b.kept, nf);
	*n = b.kept;
	*raw_size = b.out;
	return 0;
}

/* ---- what the packing pass asks of it -------------------------------------------- */

void pack_fit_field_sizes(const pack_inputs *in, uint64_t id, uint64_t size, uint64_t *dst)
{
	const bp_schema *s = &in->schema;
	bp_field_value vals[BP_FIELD_MAX];
	const char *key;
	size_t len;

	if (!in->fields) {
		dst[0] = size;
		return;
	}
	pack_inputs_fields(in, id, vals, &key, &len);
	for (uint32_t f = 0, b = 0; f < s->count; f++) {
		if (s->fields[f].type == BP_FIELD_BYTES)
			dst[b++] = vals[f].size;
	}
}

void pack_fit_report(const pack_inputs *in, const pack_fit_opts *o, const char *name,
		     const pack_fit_fault *fault, bool left_out)
{
	const bp_schema *s = &in->schema;
	const char *field = NULL;

	/* The field by name where a sample has more than one bytes field. */
	for (uint32_t f = 0, b = 0; in->fields && bp_schema_bytes_fields(s) > 1 && f < s->count &&
	     !field; f++) {
		if (s->fields[f].type == BP_FIELD_BYTES && b++ == fault->field)
			field = s->fields[f].name;
	}
	if (left_out)
		fprintf(stderr, "batchd-pack: %s%s%s: left out: does not decode: %s\n", name,
			field ? ": field " : "", field ? field : "", fault->why);
	else if (o->check && bad_image(fault->err))
		fprintf(stderr, "batchd-pack: %s%s%s: does not decode: %s; repair or remove it, or "
				"pass --on-error=skip to leave it out\n", name, field ? ": field " : "",
			field ? field : "", fault->why);
	else if (!o->max_side)
		fprintf(stderr, "batchd-pack: %s%s%s: cannot check it: %s\n", name,
			field ? ": field " : "", field ? field : "", fault->why);
	else
		fprintf(stderr, "batchd-pack: %s%s%s: cannot fit it within --max-side %u: %s%s\n",
			name, field ? ": field " : "", field ? field : "", o->max_side, fault->why,
			fault->field == PACK_FIT_WHOLE ? ""
			: bad_image(fault->err) ? "; repair, shrink or remove it, or pack without "
						  "--max-side (--on-error=skip leaves it out)"
			: "; repair, shrink or remove it, or pack without --max-side");
}

void pack_fit_print(const pack_fit_counts *c, const pack_fit_opts *o, uint64_t read)
{
	char was[32];

	if (o->max_side)
		printf("; --max-side %u: re-encoded %" PRIu64 " (JPEG quality %d), kept %" PRIu64
		       ", not images %" PRIu64 "; %s as read", o->max_side, c->fitted, o->quality,
		       c->kept, c->other, bp_format_size(read, was, sizeof(was)));
	/* With --max-side, every image it counts was decoded but those kept unchecked. */
	if (o->check && o->max_side)
		printf("; --check-images: decoded %" PRIu64, c->fitted + c->kept);
	else if (o->check)
		printf("; --check-images: decoded %" PRIu64 ", not images %" PRIu64, c->kept,
		       c->other);
}
