/* SPDX-License-Identifier: MIT */
/*
 * s3_ops.c - the S3 client's reads (s3.h): HEAD, ListObjectsV2, a range
 * into a file, and a range as an easy handle for the daemon's multi
 * handle. Each builds its request with s3_http.c and classifies the reply
 * there, so a failure reads the same whichever call met it.
 *
 * A listing is "a directory": ListObjectsV2 with delimiter '/', so only
 * the objects directly under the prefix come back (deeper keys are
 * CommonPrefixes and are left out), sorted bytewise here as well as by
 * the server, because a dataset's shard order is that order and a server
 * that sorts otherwise must not reorder a dataset.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s3_priv.h"

void bp_s3_objects_free(bp_s3_object *o, size_t n)
{
	if (!o)
		return;
	for (size_t i = 0; i < n; i++)
		free(o[i].key);
	free(o);
}

/* Fill r for a range GET of [off, off + len) with If-Match etag. @return 0 or -ENOMEM. */
static int range_req(const bp_s3 *s, const bp_s3_loc *loc, const char *etag, uint64_t off,
		     uint64_t len, bp__s3_req *r);

/*
 * A HEAD's error has no body to say why; a one-byte GET of the object
 * gets the server's Code and Message ("InvalidAccessKeyId", "NoSuchBucket")
 * for the message. Only after a failure, so a working HEAD stays one request.
 */
static void explain(const bp_s3 *s, const bp_s3_loc *loc, const char *where, bp_s3_error *e)
{
	bp_s3_error why;
	bp__s3_req r;
	CURLcode code;

	if (e->status < 400 || e->status > 499 || e->code[0] ||
	    range_req(s, loc, NULL, 0, 1, &r) < 0)
		return;
	r.fd = -1;
	code = curl_easy_perform(r.h);
	bp__s3_count(s, &r, false);
	if (bp__s3_req_outcome(&r, code, where, &why) < 0 &&
	    why.status == e->status && why.code[0])
		*e = why;
	bp__s3_req_cleanup(&r);
}

int bp_s3_head(const bp_s3 *s, const bp_s3_loc *loc, bp_s3_object *ret, bp_s3_error *e)
{
	char where[BP_S3_MSG_MAX];
	bp__s3_req r;
	char *key;
	int err;

	bp__s3_where(loc, where, sizeof(where));
	if (bp__s3_req_init(s, loc, NULL, NULL, &r) < 0)
		return bp__s3_fail(e, -ENOMEM, where, "out of memory");
	curl_easy_setopt(r.h, CURLOPT_NOBODY, 1L);
	bp__s3_req_deadline(s, &r, 0);
	err = bp__s3_perform(s, &r, where, e);
	if (err < 0)
		explain(s, loc, where, e);
	if (err == 0 && !r.has_length)
		err = bp__s3_fail(e, -EPROTO, where, "HEAD answered without a Content-Length");
	if (err == 0 && r.bad_etag)
		err = bp__s3_fail(e, -EPROTO, where, "HEAD answered an ETag with control characters, "
				  "spaces or over %d bytes: not one batchd can send back in If-Match",
				  BP_S3_ETAG_MAX - 1);
	if (err == 0 && !(key = strdup(loc->key)))
		err = bp__s3_fail(e, -ENOMEM, where, "out of memory");
	if (err == 0) {
		ret->key = key;
		ret->size = r.length;
		snprintf(ret->etag, sizeof(ret->etag), "%s", r.etag);
	}
	bp__s3_req_cleanup(&r);
	return err;
}

/* Fill r for a range GET of [off, off + len) with If-Match etag. @return 0 or -ENOMEM. */
static int range_req(const bp_s3 *s, const bp_s3_loc *loc, const char *etag, uint64_t off,
		     uint64_t len, bp__s3_req *r)
{
	char range[64], match[BP_S3_ETAG_MAX + 16];
	const char *extra[3] = { range, NULL, NULL };

	snprintf(range, sizeof(range), "Range: bytes=%" PRIu64 "-%" PRIu64, off, off + len - 1);
	/* A weak ETag never matches If-Match (strong comparison, RFC 9110). */
	if (etag && *etag && strncmp(etag, "W/", 2)) {
		snprintf(match, sizeof(match), "If-Match: %s", etag);
		extra[1] = match;
	}
	if (bp__s3_req_init(s, loc, NULL, extra, r) < 0)
		return -ENOMEM;
	r->ranged = true;
	r->want_off = off;
	r->want_len = len;
	bp__s3_req_deadline(s, r, len);
	/* The bytes must be the bytes stored: no transfer encoding a proxy might add. */
	curl_easy_setopt(r->h, CURLOPT_HTTP_CONTENT_DECODING, 0L);
	return 0;
}

int bp_s3_get_to_fd(const bp_s3 *s, const bp_s3_loc *loc, const char *etag, uint64_t off,
		    uint64_t len, int fd, uint64_t fd_off, bp_s3_error *e)
{
	char where[BP_S3_MSG_MAX];
	bp__s3_req r;
	int err;

	bp__s3_where(loc, where, sizeof(where));
	if (len == 0)
		return 0;
	if (off + len < off)
		return bp__s3_fail(e, -EINVAL, where, "range %" PRIu64 "+%" PRIu64 " overflows", off,
				   len);
	if (range_req(s, loc, etag, off, len, &r) < 0)
		return bp__s3_fail(e, -ENOMEM, where, "out of memory");
	r.fd = fd;
	r.fd_off = fd_off;
	err = bp__s3_perform(s, &r, where, e);
	bp__s3_req_cleanup(&r);
	return err;
}

CURL_handle *bp_s3_request_get(const bp_s3 *s, const bp_s3_loc *loc, const char *etag,
			       uint64_t off, uint64_t len, bp_s3_write_fn write, void *ctx)
{
	bp__s3_req *r;

	if (len == 0 || off + len < off || !(r = malloc(sizeof(*r))))
		return NULL;
	if (range_req(s, loc, etag, off, len, r) < 0) {
		free(r);
		return NULL;
	}
	r->write = write;
	r->ctx = ctx;
	return r->h;
}

void bp_s3_request_free(CURL_handle *h)
{
	bp__s3_req *r = NULL;

	if (!h)
		return;
	curl_easy_getinfo(h, CURLINFO_PRIVATE, (char **)&r);
	bp__s3_req_cleanup(r);
	free(r);
}

void *bp_s3_request_ctx(CURL_handle *h)
{
	bp__s3_req *r = NULL;

	curl_easy_getinfo(h, CURLINFO_PRIVATE, (char **)&r);
	return r ? r->ctx : NULL;
}

int bp_s3_request_result(CURL_handle *h, int curl_code, const bp_s3_loc *loc, bp_s3_error *e)
{
	char where[BP_S3_MSG_MAX];
	bp__s3_req *r = NULL;

	bp__s3_where(loc, where, sizeof(where));
	curl_easy_getinfo(h, CURLINFO_PRIVATE, (char **)&r);
	return bp__s3_req_outcome(r, (CURLcode)curl_code, where, e);
}

/* ---- listings ------------------------------------------------------------------------ */

/* One page's request: the query sorted and encoded, the token when there is one. */
static int list_page(const bp_s3 *s, const bp_s3_loc *bucket, const char *prefix,
		     const char *token, bp__s3_list *l, const char *where, bp_s3_error *e)
{
	bp__s3_param p[] = {
		{ "list-type", "2" }, { "delimiter", "/" }, { "prefix", prefix },
		{ "continuation-token", token },
	};
	char *q = bp__s3_query(p, token ? 4 : 3);
	bp__s3_req r;
	int err;

	if (!q || bp__s3_req_init(s, bucket, q, NULL, &r) < 0) {
		free(q);
		return bp__s3_fail(e, -ENOMEM, where, "out of memory");
	}
	free(q);
	r.keep = true;
	/* A page of a thousand keys is well under a MiB. */
	bp__s3_req_deadline(s, &r, 1u << 20);
	err = bp__s3_perform(s, &r, where, e);
	if (err == 0) {
		free(l->next);
		l->next = NULL;
		err = bp__s3_xml_list(r.body ? r.body : "", r.body_len, prefix, l);
		if (err == -E2BIG)
			bp__s3_fail(e, err, where, "more than %zu objects", l->max);
		else if (err == -ENOMEM)
			bp__s3_fail(e, err, where, "out of memory");
		else if (err == -EILSEQ)
			err = bp__s3_fail(e, -EPROTO, where, "the listing holds a key with control "
					  "characters, or an ETag with control characters, spaces or "
					  "over %d bytes", BP_S3_ETAG_MAX - 1);
		else if (err < 0)
			bp__s3_fail(e, err, where, "the listing's XML is not a ListBucketResult "
				    "of keys under the prefix");
	}
	bp__s3_req_cleanup(&r);
	return err;
}

static int by_key(const void *a, const void *b)
{
	return strcmp(((const bp_s3_object *)a)->key, ((const bp_s3_object *)b)->key);
}

int bp_s3_list(const bp_s3 *s, const char *bucket, const char *prefix, size_t max,
	       bp_s3_object **ret, size_t *ret_n, bp_s3_error *e)
{
	bp_s3_loc b = { .bucket = (char *)bucket, .key = (char *)"" };
	bp__s3_list l = { .max = max };
	char where[BP_S3_MSG_MAX];
	/* S3 pages hold 1000 keys: twice the pages max needs, and some, is plenty. */
	size_t pages = 0, most = max ? max / 1000 * 2 + 16 : 100000;
	int err;

	snprintf(where, sizeof(where), "s3://%s/%s", bucket ? bucket : "", prefix);
	if (!bucket)
		return bp__s3_fail(e, -EOPNOTSUPP, where, "a plain URL cannot be listed");
	do {
		/* A server that hands back tokens forever must not keep us here. */
		if (++pages > most) {
			err = bp__s3_fail(e, -EPROTO, where, "the listing goes on past %zu pages, "
					  "more than %zu objects need: not an S3 listing", most,
					  max ? max : (size_t)100000 * 1000);
			break;
		}
		err = list_page(s, &b, prefix, l.next, &l, where, e);
	} while (err == 0 && l.truncated);
	free(l.next);
	if (err < 0) {
		bp_s3_objects_free(l.v, l.n);
		return err;
	}
	if (l.n)
		qsort(l.v, l.n, sizeof(*l.v), by_key);
	*ret = l.v;
	*ret_n = l.n;
	return 0;
}
