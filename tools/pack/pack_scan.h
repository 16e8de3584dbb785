/* SPDX-License-Identifier: MIT */
/*
 * pack_scan.h - what pack_input.c, pack_group.c and pack_manifest.c share
 * behind pack_input.h: messages, entries, schema building, number parsing,
 * tar access, and the scans of class folders, grouped tars and manifests.
 *
 * Thread rules: single-threaded, as pack_input.h.
 */
#ifndef BATCHD_TOOLS_PACK_SCAN_H
#define BATCHD_TOOLS_PACK_SCAN_H

#include "pack_input.h"

/* "batchd-pack: PATH: WHAT[: strerror(-err)]". @return err, or -EINVAL when err is 0. */
int pack__err(int err, const char *path, const char *what);
/* Append an entry to in (*cap its capacity). @return 0 or -ENOMEM. */
int pack__entry_push(pack_input *in, size_t *cap, const pack_entry *e);
/* Append a field to s (a heap schema). @return its index or -ENOMEM. */
int pack__schema_add(bp_schema *s, const char *name, uint32_t type);
/* Free a schema built by pack__schema_add. */
void pack__schema_free(bp_schema *s);
/* Whether name is a valid field name ([A-Za-z0-9_.-]+, at most BP_FIELD_NAME_MAX bytes). */
bool pack__field_name_ok(const char *name, size_t len);
/* Parse a decimal int64 (sign allowed, surrounding whitespace when trim). @return 0, -EINVAL, -ERANGE. */
int pack__parse_i64(const char *s, size_t len, bool trim, int64_t *ret);

/*
 * Refuse a key two samples share, naming both (keys find one sample
 * each), and a key over BP_KEY_MAX bytes. @return 0, -EEXIST, -EINVAL
 * (said why), -ENOMEM.
 */
int pack__check_keys(const pack_inputs *in);

/* Class folders (pack_labels.c): the schema "data", "label" and each file's label. */
int pack__labels_scan(pack_inputs *in, pack_input *p);
/* Grouped tar (pack_group.c): scan, and read the current sample's members. */
int pack__group_scan(pack_inputs *in, pack_input *p);
struct archive;
int pack__group_read(const pack_inputs *in, const pack_input *p, const pack_entry *e,
		     struct archive *a, uint8_t *dst);
/* Manifests (pack_manifest.c). */
int pack__manifest_scan(pack_inputs *in, pack_input *p);

/* "PATH[:MEMBER]: sample of SIZE bytes is over the limit". @return -E2BIG. */
int pack__too_big(const char *path, const char *member, uint64_t size);

/* Tar archives (pack_tar.c): open with every filter (message printed on error). */
struct archive_entry;
int pack__tar_open(const char *path, struct archive **ret);
/*
 * The next regular member, its path made plain (no leading '/' or "./",
 * no "." or empty component): 1 with *ret, 0 at the end, or a negative
 * errno with a message naming the member (a hard link, a ".."
 * component, a bad archive). warned: the scan's, so that a leading '/'
 * is warned of once an archive; NULL in later passes.
 */
int pack__tar_next(struct archive *a, const char *path, bool *warned, struct archive_entry **ret);
/* A plain tar: a sample per regular member, keyed by its plain path. */
int pack__tar_scan(pack_input *in);

#endif
