/* SPDX-License-Identifier: MIT */
/*
 * session_images.c - a decoded batch's bad images: the one that failed
 * it named by id and key, or (on_error=skip) every one left out of it.
 *
 * The decode threads note bad images in the record's image outcome
 * (fields.h, bd_selection_head): a count, then batch indices. Leaving
 * images out compacts the record in place, on the loop thread, once its
 * job is in: the kept samples' values move down in every region of the
 * payload, the tables are rewritten for the samples kept, and the image
 * outcome after them lists the ids left out (ring.h). The payload stays
 * where it was planned (slot.head), so nothing else moves. Bad images
 * are rare; a compaction costs a memmove of the batch's payload, paid
 * only by a batch that has one.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "pack_fields.h"
#include "session_priv.h"

/* A sample noted bad, in its sample table entry's offset, until the table is compacted. */
#define LEFT_OUT UINT64_MAX

/* Key bytes as a reason or a log line shows them: printable ASCII, the rest '?'. */
static void show_key(const char *key, uint64_t len, char *buf, size_t size)
{
	size_t n = len < size - 1 ? (size_t)len : size - 1;

	for (size_t i = 0; i < n; i++)
		buf[i] = key[i] >= 0x20 && key[i] < 0x7f ? key[i] : '?';
	buf[n] = '\0';
}

/* The value tables of a record of n samples: after its sample table and region entries. */
static bp_ring_span *value_tables(const bd_session *s, uint8_t *rec, uint32_t n)
{
	return (bp_ring_span *)(rec + (uint64_t)n * sizeof(bp_ring_sample)) + s->sel.regions;
}

/*
 * The key of sample i (id `id`) of the record at rec (n samples, tables
 * as planned) into buf: from the batch's own keys when the session
 * carries them, else read from a local dataset (a key block, on the loop
 * thread: only for a batch that lost an image; a remote one's would wait
 * for the bucket there); "" when there is none to read or the read fails.
 * @return buf.
 */
static const char *key_of(const bd_session *s, const slot *sl, uint8_t *rec, uint32_t i,
			  uint64_t id, char *buf, size_t size)
{
	bp_key_reader *kr;
	bp_dataset_fault fault;
	const char *key;
	uint64_t local;
	const bd_dataset *d = bd__session_source(s, id, &local, NULL);
	size_t len;

	buf[0] = '\0';
	if (s->sel.keys) {
		/* The keys' value table is the last (fields.h). */
		uint32_t tables = s->sel.values - (s->sel.lead >= 0 ? 1 : 0);
		bp_ring_span x = value_tables(s, rec, sl->count)[(size_t)(tables - 1) * sl->count + i];

		show_key((const char *)rec + sl->head + x.offset, x.size, buf, size);
		return buf;
	}
	if (d->robj || !bp_dataset_has_keys(d->ds) || bp_key_reader_new(d->ds, &kr) < 0)
		return buf;
	if (bp_key_reader_get(kr, local, &key, &len, &fault) == 0)
		show_key(key, len, buf, size);
	bp_key_reader_free(kr);
	return buf;
}

/*
 * "dataset D: sample ID (key K)", or without the key for a dataset
 * without keys; a mixture's sample by its source's dataset and its id
 * there.
 */
static const char *sample_name(const bd_session *s, const slot *sl, uint8_t *rec, uint32_t i,
			       char *buf, size_t size)
{
	const bp_ring_sample *t = (const bp_ring_sample *)rec;
	char key[160];
	uint64_t local;
	const bd_dataset *d = bd__session_source(s, t[i].id, &local, NULL);
	int n = snprintf(buf, size, "dataset %s: sample %" PRIu64, d->name, local);

	if (*key_of(s, sl, rec, i, t[i].id, key, sizeof(key)) && n > 0 && (size_t)n < size)
		snprintf(buf + n, size - (size_t)n, " (key %s)", key);
	return buf;
}

/*
 * Move the kept values of one value table (n entries at x, absolute
 * payload offsets, laid end to end from x[0]) down over the left-out
 * ones, and their entries to y (keep of them; y <= x). @return where the
 * last kept value ends.
 */
static uint64_t compact_values(uint8_t *payload, const bp_ring_sample *table, uint32_t n,
			       const bp_ring_span *x, bp_ring_span *y)
{
	uint64_t at = n ? x[0].offset : 0;

	for (uint32_t i = 0, j = 0; i < n; i++) {
		bp_ring_span v = x[i];

		if (table[i].offset == LEFT_OUT)
			continue;
		memmove(payload + at, payload + v.offset, v.size);
		y[j++] = (bp_ring_span){ .offset = at, .size = v.size };
		at += v.size;
	}
	return at;
}

/*
 * Leave the k samples whose indices are at bad[1..k] out of the record
 * (slot sl, its job in): every region compacted, the tables rewritten
 * for the samples kept, the image outcome after them listing the ids
 * left out. The order matters, as the new tables overlap the old: value
 * tables first, in place; scalars; the sample table, which holds the
 * marks the others read; then the value tables and the region entries
 * down to their new place.
 */
static void leave_out(bd_session *s, slot *sl, uint8_t *rec, uint64_t *bad)
{
	const bd_selection *sel = &s->sel;
	uint32_t n = sl->count, k = (uint32_t)bad[0], keep = n - k, q = 0;
	uint32_t lead = sel->lead >= 0 ? 1 : 0, tables = sel->regions ? sel->values - lead : 0;
	uint8_t *payload = rec + sl->head;
	bp_ring_sample *table = (bp_ring_sample *)rec;
	bp_ring_span reg[BP_FIELD_MAX + 1], *values = value_tables(s, rec, n);
	uint64_t end[BP_FIELD_MAX + 1], at = table[0].offset; /* the lead's region's start */
	uint64_t *ids = bad + 1;

	for (uint32_t j = 0; j < k; j++)
		table[ids[j]].offset = LEFT_OUT;
	memcpy(reg, table + n, sel->regions * sizeof(bp_ring_span));
	/* Value table t is value slot t + lead (the lead's values are the sample table's). */
	for (uint32_t t = 0; t < tables; t++)
		end[t + lead] = compact_values(payload, table, n, values + (size_t)t * n,
					       values + (size_t)t * keep);
	for (uint32_t r = 0; r < sel->count; r++) {
		size_t size = bp_field_scalar_size(sel->schema->fields[sel->field[r]].type);
		uint8_t *a = payload + reg[r].offset;

		if (!size)
			continue;
		for (uint32_t i = 0, j = 0; i < n; i++)
			if (table[i].offset != LEFT_OUT)
				memmove(a + (size_t)j++ * size, a + (size_t)i * size, size);
		reg[r].size = (uint64_t)keep * size;
	}
	/* The sample table: the lead's values move, the left-out ids go to the outcome. */
	for (uint32_t i = 0, j = 0; i < n; i++) {
		bp_ring_sample x = table[i];

		if (x.offset == LEFT_OUT) {
			ids[q++] = x.id;
			continue;
		}
		if (lead) {
			memmove(payload + at, payload + x.offset, x.size);
			x.offset = at;
			at += x.size;
		}
		table[j++] = x;
	}
	end[0] = at;
	for (uint32_t r = 0; r < sel->regions; r++) {
		int32_t v = r < sel->count ? sel->slot[r] : (int32_t)sel->values - 1;

		if (v >= 0)
			reg[r].size = end[v] - reg[r].offset;
	}
	memmove(value_tables(s, rec, keep), values, (size_t)tables * keep * sizeof(bp_ring_span));
	memcpy(table + keep, reg, sel->regions * sizeof(bp_ring_span));
	/* The outcome after the new tables: the ids, then their count before them. */
	bad = (uint64_t *)(rec + bd_selection_tables(sel, keep));
	memmove(bad + 1, ids, (size_t)k * sizeof(uint64_t));
	bad[0] = k;
	sl->count = keep;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

void bd__session_image_outcome(bd_session *s, slot *sl, int status, const char *reason)
{
	uint8_t *rec = record(s, sl);
	uint64_t *bad = (uint64_t *)(rec + bd_selection_tables(&s->sel, sl->count));
	char name[256], why[BP_RING_REASON_MAX];
	uint64_t k = bad[0], first;

	/* Written by the decode threads: trusted, but checked as cheaply as it is kept. */
	if (k > sl->count) {
		snprintf(why, sizeof(why), "dataset %s: %" PRIu64 " bad images noted in a batch of %u",
			 s->dset->name, k, sl->count);
		fail_slot(s, sl, -EIO, why);
		return;
	}
	if (status < 0) {
		/* An image failed the batch: its reason is lib/image's alone; name the sample. */
		if (!s->sel.image_skip && k == 1 && bad[1] < sl->count) {
			snprintf(why, sizeof(why), "%s: %s",
				 sample_name(s, sl, rec, (uint32_t)bad[1], name, sizeof(name)), reason);
			reason = why;
		}
		fail_slot(s, sl, status, reason);
		return;
	}
	if (k == 0)
		return;
	first = bad[1];
	qsort(bad + 1, k, sizeof(uint64_t), cmp_u64);
	for (uint64_t j = 0; j < k; j++)
		if (bad[1 + j] >= sl->count || (j && bad[1 + j] == bad[j])) {
			fail_slot(s, sl, -EIO, "bad images noted twice or out of the batch");
			return;
		}
	/* The first noted (its reason came with the event) is named; the count says the rest. */
	sample_name(s, sl, rec, (uint32_t)first, name, sizeof(name));
	bd_log(LOG_WARNING, "session %" PRIu64 ": batch %" PRIu64 " of epoch %" PRIu64 ": left out %"
	       PRIu64 " bad image%s (on_error=skip): %s: %s%s", s->id, sl->batch,
	       sl->epoch, k, k == 1 ? "" : "s", name, reason,
	       k > 1 ? " (the first of them)" : "");
	s->skipped += k;
	leave_out(s, sl, rec, bad);
}
