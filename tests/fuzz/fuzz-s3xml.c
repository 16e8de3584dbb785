/* SPDX-License-Identifier: MIT */
/*
 * fuzz-s3xml.c - libFuzzer target for the S3 client's XML reply parsers.
 *
 * The replies come from a remote server, so every input is fed to all five
 * parsers of s3_priv.h (bp__s3_xml_error, bp__s3_xml_error_region,
 * bp__s3_xml_list, bp__s3_xml_upload_id, bp__s3_xml_complete). Beyond "no crash, no
 * sanitizer report" it checks the promises s3_priv.h makes, and aborts
 * when one is broken:
 *
 *  - return values only from each parser's documented set, and an <Error>
 *    to bp__s3_xml_error_region exactly when it is one to bp__s3_xml_error;
 *  - on success, strings are NUL-terminated inside their buffers (the
 *    message buffer is malloc'd to its exact size, so ASan sees a write
 *    past it), and an upload id is non-empty;
 *  - a listing's keys all start with the prefix given, n <= max, a
 *    truncated page carries a non-empty next token, and -E2BIG comes only
 *    when the page holds more objects than max (checked against the same
 *    page parsed without a limit);
 *  - parsing the same bytes twice gives the same result (determinism).
 *
 * Everything allocated is freed, so the replay's leak check sees a parser
 * that leaks. Built two ways (tests/meson.build): with -fsanitize=fuzzer as
 * the fuzzer itself, and with tests/fuzz/replay.c as a plain program that
 * replays the seed corpus (tests/fuzz/corpus/s3xml) in every `meson test`.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s3_priv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MSG_LEN 200u
#define SMALL_MAX 3u
#define PREFIX "data/"

static void require(bool ok, const char *what, long long v)
{
	if (ok)
		return;
	fprintf(stderr, "fuzz-s3xml: broken promise: %s (%lld)\n", what, v);
	abort();
}

/* What one parse of an <Error> or a complete reply left. */
typedef struct reply {
	int r;
	char code[64];
	char etag[BP_S3_ETAG_MAX];
	char region[64];
	char *msg;                /* MSG_LEN bytes, malloc'd so that ASan bounds it */
} reply;

static void terminated(const char *s, size_t len, const char *what)
{
	require(memchr(s, '\0', len) != NULL, what, (long long)len);
}

/* One parse by bp__s3_xml_complete (complete) or bp__s3_xml_error, its promises checked. */
static void reply_once(const char *buf, size_t len, bool complete, reply *o)
{
	memset(o->etag, 'x', sizeof(o->etag));
	memset(o->code, 'x', sizeof(o->code));
	memset(o->msg, 'x', MSG_LEN);
	if (complete) {
		o->r = bp__s3_xml_complete(buf, len, o->etag, o->code, o->msg, MSG_LEN);
		require(o->r == 0 || o->r == 1 || o->r == -EPROTO,
			"xml_complete returns 0, 1 or -EPROTO", o->r);
	} else {
		o->r = bp__s3_xml_error(buf, len, o->code, o->msg, MSG_LEN);
		require(o->r == 0 || o->r == -EPROTO, "xml_error returns 0 or -EPROTO", o->r);
		memset(o->region, 'x', sizeof(o->region));
		require(bp__s3_xml_error_region(buf, len, o->region) == o->r,
			"xml_error_region returns what xml_error does", o->r);
		if (o->r == 0)
			terminated(o->region, sizeof(o->region), "region NUL-terminated in 64");
		/* xml_error's success is an <Error>, as xml_complete's 1 */
		o->r = o->r == 0 ? 1 : o->r;
	}
	if (o->r == 0) {
		terminated(o->etag, sizeof(o->etag), "xml_complete etag NUL-terminated");
		require(o->etag[0] != '\0', "xml_complete etag non-empty on 0", 0);
	} else if (o->r == 1) {
		terminated(o->code, sizeof(o->code), "code NUL-terminated in 64");
		terminated(o->msg, MSG_LEN, "msg NUL-terminated in msglen");
	}
}

/* Both parsers twice: each deterministic, and an <Error> to both or to neither. */
static void check_replies(const char *buf, size_t len, char *m1, char *m2)
{
	reply a = { .msg = m1 }, b = { .msg = m2 };
	int as_error = -EPROTO;

	for (int complete = 0; complete < 2; complete++) {
		reply_once(buf, len, complete, &a);
		reply_once(buf, len, complete, &b);
		require(a.r == b.r, "deterministic (return)", b.r);
		if (a.r == 0)
			require(!strcmp(a.etag, b.etag), "xml_complete deterministic (etag)", 0);
		if (a.r == 1)
			require(!strcmp(a.code, b.code) && !strcmp(a.msg, b.msg) &&
				(complete || !strcmp(a.region, b.region)),
				"deterministic (code, msg, region)", complete);
		if (!complete)
			as_error = a.r;
		else
			require((a.r == 1) == (as_error == 1),
				"xml_complete 1 exactly when xml_error 0", a.r);
	}
}

static void check_upload_id(const char *buf, size_t len)
{
	char *a = NULL, *b = NULL;
	int ra = bp__s3_xml_upload_id(buf, len, &a);
	int rb = bp__s3_xml_upload_id(buf, len, &b);

	require(ra == 0 || ra == -EPROTO || ra == -ENOMEM,
		"xml_upload_id returns 0, -EPROTO or -ENOMEM", ra);
	require(ra == rb, "xml_upload_id deterministic (return)", rb);
	if (ra == 0) {
		require(a && a[0] != '\0', "xml_upload_id non-empty id on 0", 0);
		require(!strcmp(a, b), "xml_upload_id deterministic (id)", 0);
	} else {
		require(!a && !b, "xml_upload_id leaves *ret alone on failure", ra);
	}
	free(a);
	free(b);
}

/* Freed here, not with bp_s3_objects_free, so the fuzzer links s3_xml.c alone. */
static void list_free(bp__s3_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i].key);
	free(l->v);
	free(l->next);
}

static int list_once(const char *buf, size_t len, const char *prefix, size_t max,
		     bp__s3_list *l)
{
	int r;

	*l = (bp__s3_list){ .max = max };
	r = bp__s3_xml_list(buf, len, prefix, l);
	require(r == 0 || r == -EPROTO || r == -EILSEQ || r == -E2BIG || r == -ENOMEM,
		"xml_list returns 0, -EPROTO, -EILSEQ, -E2BIG or -ENOMEM", r);
	require(l->n <= l->cap, "xml_list n <= cap", (long long)l->n);
	if (max)
		require(l->n <= max, "xml_list n <= max", (long long)l->n);
	if (r != 0)
		return r;
	for (size_t i = 0; i < l->n; i++) {
		require(l->v[i].key != NULL, "xml_list key set", (long long)i);
		require(!strncmp(l->v[i].key, prefix, strlen(prefix)),
			"xml_list key starts with the prefix", (long long)i);
		terminated(l->v[i].etag, sizeof(l->v[i].etag), "xml_list etag NUL-terminated");
		/* Nothing that could end a header or a log line gets through. */
		require(bp__s3_key_ok(l->v[i].key), "xml_list key has no control character",
			(long long)i);
		require(bp__s3_etag_ok(l->v[i].etag, strlen(l->v[i].etag)),
			"xml_list etag is visible ASCII", (long long)i);
	}
	if (l->truncated)
		require(l->next && l->next[0], "xml_list truncated has a next token", 0);
	return r;
}

static bool same_list(const bp__s3_list *a, const bp__s3_list *b)
{
	if (a->n != b->n || a->truncated != b->truncated || !a->next != !b->next)
		return false;
	if (a->next && strcmp(a->next, b->next))
		return false;
	for (size_t i = 0; i < a->n; i++)
		if (strcmp(a->v[i].key, b->v[i].key) || a->v[i].size != b->v[i].size ||
		    strcmp(a->v[i].etag, b->v[i].etag))
			return false;
	return true;
}

static void check_list(const char *buf, size_t len)
{
	bp__s3_list all, again, small, pre;
	int r_all = list_once(buf, len, "", SIZE_MAX, &all);
	int r_again = list_once(buf, len, "", SIZE_MAX, &again);
	int r_small = list_once(buf, len, "", SMALL_MAX, &small);
	int r_pre = list_once(buf, len, PREFIX, SIZE_MAX, &pre);

	require(r_all == r_again, "xml_list deterministic (return)", r_again);
	require(r_all != 0 || same_list(&all, &again), "xml_list deterministic (page)", 0);
	require(r_all != -E2BIG, "xml_list -E2BIG without a limit", r_all);
	if (r_all == 0) {
		/* the same page under a small limit: all of it, or -E2BIG exactly when it holds more */
		if (all.n > SMALL_MAX)
			require(r_small == -E2BIG, "xml_list -E2BIG when more than max",
				(long long)all.n);
		else
			require(r_small == 0 && same_list(&all, &small),
				"xml_list within max as without", r_small);
		/* under a prefix: the same page when every key has it, else -EPROTO */
		bool every = true;

		for (size_t i = 0; i < all.n; i++)
			every = every && !strncmp(all.v[i].key, PREFIX, strlen(PREFIX));
		require(every ? r_pre == 0 && same_list(&all, &pre) : r_pre == -EPROTO,
			"xml_list refuses exactly the keys outside the prefix", r_pre);
	} else if (r_all == -EPROTO) {
		require(r_small == -EPROTO || r_small == -E2BIG,
			"xml_list under a limit fails as without", r_small);
	}
	list_free(&all);
	list_free(&again);
	list_free(&small);
	list_free(&pre);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data;
	char *m1 = malloc(MSG_LEN), *m2 = malloc(MSG_LEN);

	if (!m1 || !m2) {
		free(m1);
		free(m2);
		return 0;
	}
	check_replies(buf, size, m1, m2);
	check_upload_id(buf, size);
	check_list(buf, size);
	free(m1);
	free(m2);
	return 0;
}
