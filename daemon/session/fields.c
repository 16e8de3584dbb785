/* SPDX-License-Identifier: MIT */
/*
 * fields.c - a session's field selection and the record layout it gives
 * (see fields.h and PROTOCOL.md, "Fields").
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fields.h"
#include "ring.h"
#include "util.h"

/* "image (bytes), label (int64)" into buf: what a refusal lists. */
static void list_fields(const bp_schema *s, char *buf, size_t len)
{
	size_t at = 0;

	buf[0] = '\0';
	for (uint32_t i = 0; i < s->count && at < len; i++) {
		int n = snprintf(buf + at, len - at, "%s%s (%s)", i ? ", " : "", s->fields[i].name,
				 bp_field_type_name(s->fields[i].type));

		if (n < 0)
			break;
		at += (size_t)n;
	}
}

/* Mark the fields m->fields names in *ret_mask. @return 0, -ENOENT or -EINVAL with err. */
static int parse_names(const bp_schema *s, const bp_msg_open *m, const char *dataset,
		       uint64_t *ret_mask, char *err, size_t errlen)
{
	uint64_t mask = 0;

	for (uint32_t at = 0; at < m->fields_len;) {
		char name[BP_FIELD_NAME_MAX + 1], have[512];
		const char *comma = memchr(m->fields + at, ',', m->fields_len - at);
		uint32_t len = comma ? (uint32_t)(comma - (m->fields + at)) : m->fields_len - at;
		int f;

		/* The protocol bounds names to 1 .. BP_FIELD_NAME_MAX name bytes. */
		if (len == 0 || len > BP_FIELD_NAME_MAX) {
			snprintf(err, errlen, "dataset %s: an empty or overlong field name in the "
				 "selection", dataset);
			return -EINVAL;
		}
		memcpy(name, m->fields + at, len);
		name[len] = '\0';
		f = bp_schema_find(s, name);
		if (f < 0) {
			list_fields(s, have, sizeof(have));
			snprintf(err, errlen, "dataset %s has no field \"%s\"; its fields: %s", dataset,
				 name, have);
			return -ENOENT;
		}
		if (mask & (UINT64_C(1) << f)) {
			snprintf(err, errlen, "dataset %s: field \"%s\" is selected twice", dataset,
				 name);
			return -EINVAL;
		}
		mask |= UINT64_C(1) << f;
		at += len + 1;
	}
	*ret_mask = mask;
	return 0;
}

/* Fill the derived counts of sel from its mask and keys. */
static void derive(bd_selection *sel)
{
	const bp_schema *s = sel->schema;
	uint32_t slot = 0;

	sel->count = sel->bytes = 0;
	sel->lead = -1;
	sel->scalar_bytes = 0;
	for (uint32_t i = 0; i < s->count; i++) {
		if (!(sel->mask & (UINT64_C(1) << i)))
			continue;
		if (s->fields[i].type == BP_FIELD_BYTES && sel->lead < 0)
			sel->lead = (int32_t)i;
		sel->field[sel->count++] = i;
	}
	/* The lead takes slot 0, the other bytes and str fields the next ones in order. */
	if (sel->lead >= 0)
		slot = 1;
	for (uint32_t k = 0; k < sel->count; k++) {
		uint32_t type = s->fields[sel->field[k]].type;

		if (type == BP_FIELD_BYTES)
			sel->bytes++;
		if ((int32_t)sel->field[k] == sel->lead) {
			sel->slot[k] = 0;
		} else if (type == BP_FIELD_BYTES || type == BP_FIELD_STR) {
			sel->slot[k] = (int32_t)slot++;
		} else {
			sel->slot[k] = -1;
			sel->scalar_bytes += bp_field_scalar_size(type);
			continue;
		}
		sel->vfield[sel->slot[k]] = sel->field[k];
	}
	sel->values = slot + (sel->keys ? 1 : 0);
	sel->whole = bp_schema_bytes_fields(s) == 1;
	sel->regions = sel->count == 1 && sel->lead >= 0 && !sel->keys ? 0
		       : sel->count + (sel->keys ? 1 : 0);
}

/* OPEN's decode trailer: which slot becomes an image tensor, and how. */
static int parse_decode(const bp_dataset *ds, const bp_msg_open *m, const char *shown,
			bd_selection *sel, char *err, size_t errlen)
{
	const bp_open_decode *d = &m->decode;
	char name[BP_FIELD_NAME_MAX + 1], why[200];
	int f;

	snprintf(name, sizeof(name), "%.*s", (int)d->field_len, d->field);
	f = bp_schema_find(sel->schema, name);
	if (f < 0 || !(sel->mask & (UINT64_C(1) << f)) ||
	    sel->schema->fields[f].type != BP_FIELD_BYTES) {
		snprintf(err, errlen, "dataset %s: decode %s: %s", shown, name,
			 f < 0 ? "no such field" : !(sel->mask & (UINT64_C(1) << f))
			 ? "not among the fields selected: select it" : "not a bytes field");
		return f < 0 ? -ENOENT : -EINVAL;
	}
	sel->image_skip = d->on_error == BP_ON_ERROR_SKIP;
	sel->image = (bi_spec){ .crop = d->crop, .height = d->height, .width = d->width,
				.resize = d->resize, .scale_min = d->scale_min,
				.scale_max = d->scale_max, .ratio_min = d->ratio_min,
				.ratio_max = d->ratio_max, .flip = d->flip,
				.nhwc = d->layout == BP_LAYOUT_NHWC };
	if (bi_spec_check(&sel->image, why, sizeof(why)) < 0) {
		snprintf(err, errlen, "dataset %s: decode %s: %s", shown, name, why);
		return -EINVAL;
	}
	for (uint32_t k = 0; k < sel->count; k++)
		if ((int)sel->field[k] == f)
			sel->image_slot = sel->slot[k];
	sel->image_size = bi_out_bytes(&sel->image);
	return 0;
}

/* What a token session cannot carry: keys (its samples are no documents) and images. */
static int check_sequences(const bp_msg_open *m, const char *shown, char *err, size_t errlen)
{
	if (m->keys)
		snprintf(err, errlen, "dataset %s: a token session's samples are sequences cut from "
			 "its documents, which have no keys: open it without keys", shown);
	else if (m->decode.kind)
		snprintf(err, errlen, "dataset %s: a token session decodes no images: open it "
			 "without decode, or without seq_len", shown);
	else if (m->sequences == BP_SEQUENCES_PACKED &&
		 (uint64_t)m->batch_size * m->seq_len > INT32_MAX)
		snprintf(err, errlen, "dataset %s: batch_size %u x seq_len %u is over 2^31 - 1, and "
			 "a packed batch's cu_seqlens are int32 offsets into it: open it with a "
			 "smaller batch_size", shown, m->batch_size, m->seq_len);
	else
		return 0;
	return -EINVAL;
}

int bd_selection_parse(const bp_dataset *ds, const bp_schema *schema, const bp_msg_open *m,
		       bd_selection *ret, char *err, size_t errlen)
{
	const bp_schema *s = schema ? schema : bp_dataset_schema(ds);
	bd_selection sel = { .schema = s, .keys = m->keys };
	const char *name = m->path ? m->path : "";
	char shown[256];
	int r;

	snprintf(shown, sizeof(shown), "%.*s", (int)m->path_len, name);
	if (m->sequences && (r = check_sequences(m, shown, err, errlen)) < 0)
		return r;
	if (m->sources && m->keys) {
		snprintf(err, errlen, "dataset %s: a mixture's batches name each sample by its source "
			 "(the \"source\" field) and its id, not by key: open it without keys",
			 shown);
		return -EINVAL;
	}
	if (m->fields_len) {
		r = parse_names(s, m, shown, &sel.mask, err, errlen);
		if (r < 0)
			return r;
	} else {
		sel.mask = s->count >= 64 ? UINT64_MAX : (UINT64_C(1) << s->count) - 1;
	}
	if (m->keys && !bp_dataset_has_keys(ds)) {
		snprintf(err, errlen, "dataset %s stores no keys (a pack of --records has none, and "
			 "one made with --no-keys leaves them out): open it without keys, or repack "
			 "its files without --no-keys", shown);
		return -ENODATA;
	}
	derive(&sel);
	sel.image_slot = -1;
	/* A token session's other fields describe its tokens (sequences.h): they come with them. */
	if (m->sequences && !(sel.mask & 1)) {
		snprintf(err, errlen, "dataset %s: a token session's batches always carry \"tokens\": "
			 "add it to the fields", shown);
		return -EINVAL;
	}
	if (m->decode.kind) {
		r = parse_decode(ds, m, shown, &sel, err, errlen);
		if (r < 0)
			return r;
	}
	*ret = sel;
	return 0;
}

uint64_t bd_selection_tables(const bd_selection *sel, uint32_t n)
{
	uint64_t b = (uint64_t)n * sizeof(bp_ring_sample);

	if (sel->regions) {
		uint32_t tables = sel->values - (sel->lead >= 0 ? 1 : 0);

		b += (uint64_t)sel->regions * sizeof(bp_ring_span) +
		     (uint64_t)tables * n * sizeof(bp_ring_span);
	}
	return b;
}

uint64_t bd_selection_head(const bd_selection *sel, uint32_t n)
{
	uint64_t b = bd_selection_tables(sel, n);

	if (sel->image_slot >= 0)
		b += sizeof(uint64_t) * (1 + (uint64_t)n);
	return BD_ALIGN_UP(b, BP_RING_PAYLOAD_ALIGN);
}

uint64_t bd_selection_value_size(const bd_selection *sel, const bp_dataset *ds, uint32_t v,
				 uint64_t id)
{
	uint32_t f = sel->vfield[v];
	uint64_t off, size;
	const uint8_t *data;

	if (bd_selection_is_image(sel, v))
		return sel->image_size;
	if (sel->schema->fields[f].type == BP_FIELD_STR) {
		bp_dataset_field_str(ds, id, f, &data, &size);
		return size;
	}
	bp_dataset_field_span(ds, id, f, &off, &size);
	return size;
}

uint64_t bd_selection_padding(const bd_selection *sel)
{
	uint32_t regions = sel->count + (sel->keys ? 1 : 0);

	return regions > 1 ? (uint64_t)(regions - 1) * (BP_RING_PAYLOAD_ALIGN - 1) : 0;
}

const char *bd_selection_names(const bd_selection *sel, char *buf, size_t len)
{
	size_t at = 0;

	if (len)
		buf[0] = '\0';
	for (uint32_t k = 0; k < sel->count && at < len; k++) {
		int n = snprintf(buf + at, len - at, "%s%s", k ? "," : "",
				 sel->schema->fields[sel->field[k]].name);

		if (n < 0)
			break;
		at += (size_t)n;
	}
	return buf;
}
