/* SPDX-License-Identifier: MIT */
/*
 * fields-pack.h - the samples the fields suites read and the packs that
 * hold them: two bytes fields (an image, some large enough to be stored
 * as frames, and a mask, empty for some samples), an int64 label with
 * class names, a float32 score, a str caption (empty for some) and a key,
 * every value a function of the sample's id, so that a delivered batch
 * is checked field by field against what was written.
 *
 * Why a file of its own: test-fields-daemon.c writes these packs into a
 * real batchd's root and checks what it delivers; test-fields-protocol.c
 * serves their schema from a fake daemon. Compiled into both
 * (tests/daemon/meson.build) rather than written twice.
 *
 * Thread rules: the test's main thread only, as daemon-testlib.h.
 */
#ifndef BATCHD_TESTS_FIELDS_PACK_H
#define BATCHD_TESTS_FIELDS_PACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pack_fields.h"

#define FRAME 4096u               /* BP_PACK_MIN_FRAME: large images become frames */
#define FIELD_COUNT 5u

/* The fields, in schema order. */
enum { F_IMG, F_MASK, F_LABEL, F_SCORE, F_CAPTION };

/* Sample id's values: the sizes and bytes of its bytes fields, its label and score. */
size_t img_size(uint64_t id);
size_t mask_size(uint64_t id);
uint8_t img_byte(uint64_t id, size_t j);
uint8_t mask_byte(uint64_t id, size_t j);
int64_t label_of(uint64_t id);
float score_of(uint64_t id);
/* Sample id's caption into buf (at most len bytes). @return its length, 0 for none. */
size_t caption_of(uint64_t id, char *buf, size_t len);

/* Bytes a key is padded with: 0 but for the long-keys pack. */
extern size_t key_pad;
#define KEY_BUF (BP_KEY_MAX + 1)

/* Sample id's key into buf, NUL-terminated. @return its length. */
size_t key_of(uint64_t id, char *buf, size_t len);

/* The test schema: its fields, and the schema the packs are written with. */
extern bp_field schema_fields[FIELD_COUNT];
extern const bp_schema pack_schema;

/*
 * Write samples [0, n) with the test schema (and keys) to root/name of
 * the suite's daemon (dt_suite_daemon); fails the test when it cannot.
 */
void write_fields_pack(const char *name, uint64_t n, bool keys);

#endif
