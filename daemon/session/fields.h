/* SPDX-License-Identifier: MIT */
/*
 * fields.h - which of a dataset's fields a session selected, and the
 * batch record layout that selection gives (PROTOCOL.md, "Fields").
 *
 * The session planner, the sizing that runs on the open's worker thread
 * and the status all need the same answers: which fields a batch carries,
 * in what order their regions lie in the payload, how large a record's
 * tables are, and what one sample costs. Keeping them here, apart from
 * the planner's state machine, gives them one definition.
 *
 * Value slots: the planner keeps, per sample, one span (offset, size) for
 * each selected bytes and str field and for the key. Slot 0 is the lead
 * (the first selected bytes field) when there is one; then the other
 * bytes and str fields in schema order; then the key, last.
 *
 * Thread rules: pure functions over a dataset that is read-only after
 * load; any thread.
 */
#ifndef BATCHD_DAEMON_FIELDS_H
#define BATCHD_DAEMON_FIELDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "image.h"
#include "pack_fields.h"
#include "protocol.h"

typedef struct bd_selection {
	const bp_schema *schema;      /* the dataset's (lives with it) */
	uint64_t mask;                /* selected fields: bit i = schema field i */
	bool keys;                    /* records carry the keys */
	uint32_t count;               /* selected fields */
	uint32_t field[BP_FIELD_MAX]; /* their schema indices, in schema order */
	int32_t slot[BP_FIELD_MAX];   /* per selected field: its value slot, -1 for a scalar */
	uint32_t vfield[BP_FIELD_MAX]; /* per value slot but the key's: its schema index */
	int32_t lead;                 /* schema index of the first selected bytes field, or -1 */
	uint32_t bytes;               /* selected bytes fields */
	uint32_t values;              /* value slots: bytes and str fields, and the key */
	uint32_t regions;             /* region entries in a record: 0 for the plain record */
	uint64_t scalar_bytes;        /* a sample's selected scalars */
	bool whole;                   /* the schema has one bytes field: its span is the whole sample */
	/*
	 * OPEN's decode trailer: the value slot decoded into an image tensor
	 * (-1: none), each sample's bytes of it (3·height·width, whatever its
	 * stored size), and what lib/image makes of it.
	 */
	int32_t image_slot;
	uint64_t image_size;
	bi_spec image;
	bool image_skip;              /* on_error skip: a bad image is left out of its batch */
} bd_selection;

/* Is value slot v of sel decoded into an image? */
static inline bool bd_selection_is_image(const bd_selection *sel, uint32_t v)
{
	return sel->image_slot >= 0 && (uint32_t)sel->image_slot == v;
}

/*
 * The selection OPEN m asks of ds: m->fields (NULL or empty: all fields),
 * m->keys and m->decode, over `schema` (a token session's, sequences.h,
 * or a mixture's, sources.h) or, when NULL, ds's own. A token session
 * carries no keys and decodes no image, and a mixture carries no keys
 * (-EINVAL). @return 0; -ENOENT for a name ds has not (err
 * lists the fields it has); -EINVAL for a name given twice, or a decode
 * of a field that is not a selected bytes field, or of a spec lib/image
 * refuses; -ENODATA for keys of a dataset that stores none.
 */
int bd_selection_parse(const bp_dataset *ds, const bp_schema *schema, const bp_msg_open *m,
		       bd_selection *ret, char *err, size_t errlen);

/* Is sel the plain record (one bytes field, no keys), as before fields? */
static inline bool bd_selection_plain(const bd_selection *sel)
{
	return sel->regions == 0;
}

/* Bytes of a record's tables for n samples: the sample table, the region entries, the value tables. */
uint64_t bd_selection_tables(const bd_selection *sel, uint32_t n);

/*
 * Bytes of a record's head for n samples: its tables, then for an image
 * session its image outcome (ring.h: a u64 count and n u64 slots, where
 * the decode threads note bad images, and the published record lists the
 * ids left out), rounded up to BP_RING_PAYLOAD_ALIGN: where the payload
 * starts.
 */
uint64_t bd_selection_head(const bd_selection *sel, uint32_t n);

/* The value slot's size of sample id for slots other than the key's (an image's: its tensor's). */
uint64_t bd_selection_value_size(const bd_selection *sel, const bp_dataset *ds, uint32_t slot,
				 uint64_t id);

/*
 * Most bytes the region padding can add to a payload: each region after
 * the first starts BP_RING_PAYLOAD_ALIGN-aligned.
 */
uint64_t bd_selection_padding(const bd_selection *sel);

/* The selected field names, comma-separated, into buf (truncated to len). @return buf. */
const char *bd_selection_names(const bd_selection *sel, char *buf, size_t len);

#endif
