/* SPDX-License-Identifier: MIT */
/*
 * s3_upload.c - writing an object from a file (s3.h, bp_s3_upload_fd):
 * one PUT for a small file, else a multipart upload whose parts are read
 * straight from the file with pread, one after another on one connection.
 *
 * A multipart upload that fails is aborted, so no parts are left stored
 * (and billed) where nothing lists them; the object appears only when
 * CompleteMultipartUpload succeeds, whole. Its reply can be an <Error>
 * inside a 200 (S3 sends the status before it knows), so that body is
 * read, not just the status.
 *
 * The payload is not signed (UNSIGNED-PAYLOAD: hashing it for SigV4 would
 * read every part twice before sending it); each PUT carries Content-MD5
 * instead, so the server stores a part only if it got the bytes read here
 * (BadDigest otherwise). Built without libcrypto, PUTs go without it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "s3_priv.h"

#if BATCHD_S3_MD5
#include <openssl/evp.h>
#endif

int bp__s3_content_md5(int fd, uint64_t off, uint64_t len, char out[32])
{
#if BATCHD_S3_MD5
	unsigned char md[EVP_MAX_MD_SIZE], *buf = malloc(1u << 20);
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	unsigned mdlen = 0;
	int r = -ENOMEM;

	if (!buf || !c || !EVP_DigestInit_ex(c, EVP_md5(), NULL))
		goto out;
	for (uint64_t done = 0; done < len;) {
		size_t want = len - done < (1u << 20) ? (size_t)(len - done) : (1u << 20);
		ssize_t got = pread(fd, buf, want, (off_t)(off + done));

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			r = got < 0 ? -errno : -EIO;
			goto out;
		}
		EVP_DigestUpdate(c, buf, (size_t)got);
		done += (uint64_t)got;
	}
	if (EVP_DigestFinal_ex(c, md, &mdlen) && mdlen == 16) {
		EVP_EncodeBlock((unsigned char *)out, md, 16);
		r = 0;
	}
out:
	EVP_MD_CTX_free(c);
	free(buf);
	return r;
#else
	(void)fd, (void)off, (void)len;
	out[0] = '\0';
	return -EOPNOTSUPP;
#endif
}

/* The part size for size bytes: asked, or 64 MiB, grown to keep within 10000 parts. */
static uint64_t part_size_for(uint64_t size, uint64_t asked)
{
	uint64_t p = asked ? asked : BP__S3_PART_DEFAULT;

	if ((size + p - 1) / p > BP__S3_PARTS_MAX)
		p = ((((size + BP__S3_PARTS_MAX - 1) / BP__S3_PARTS_MAX) + (1u << 20) - 1) >> 20) << 20;
	return p;
}

/* PUT [off, off + len) of fd to loc with query q (NULL: the object itself). */
static int put(const bp_s3 *s, const bp_s3_loc *loc, const char *q, int fd, uint64_t off,
	       uint64_t len, char etag[BP_S3_ETAG_MAX], const char *where, bp_s3_error *e)
{
	char md5[32], header[48];
	const char *extra[] = { header, NULL };
	bp__s3_req r;
	int err = bp__s3_content_md5(fd, off, len, md5);

	if (err < 0 && err != -EOPNOTSUPP)
		return bp__s3_fail(e, err, where, "reading the file to upload: %s", strerror(-err));
	snprintf(header, sizeof(header), "Content-MD5: %s", md5);
	if (bp__s3_req_init(s, loc, q, err == 0 ? extra : NULL, &r) < 0)
		return bp__s3_fail(e, -ENOMEM, where, "out of memory");
	r.in_fd = fd;
	r.in_off = off;
	r.in_len = len;
	curl_easy_setopt(r.h, CURLOPT_UPLOAD, 1L);
	curl_easy_setopt(r.h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)len);
	err = bp__s3_perform(s, &r, where, e);
	if (err == 0 && !r.etag[0])
		err = bp__s3_fail(e, -EPROTO, where, "the PUT's reply has no ETag");
	if (err == 0)
		snprintf(etag, BP_S3_ETAG_MAX, "%s", r.etag);
	bp__s3_req_cleanup(&r);
	return err;
}

/* POST body (may be NULL) to loc with query q, keeping the reply's XML in r (cleaned by the caller). */
static int post(const bp_s3 *s, const bp_s3_loc *loc, const char *q, const char *body,
		bp__s3_req *r, const char *where, bp_s3_error *e)
{
	const char *extra[] = { body ? "Content-Type: application/xml" : NULL, NULL };

	if (bp__s3_req_init(s, loc, q, extra, r) < 0)
		return bp__s3_fail(e, -ENOMEM, where, "out of memory");
	r->keep = true;
	curl_easy_setopt(r->h, CURLOPT_POST, 1L);
	curl_easy_setopt(r->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body ? strlen(body) : 0));
	curl_easy_setopt(r->h, CURLOPT_COPYPOSTFIELDS, body ? body : "");
	return bp__s3_perform(s, r, where, e);
}

/* A query ?name=value (sorted with the rest) for an upload's requests. */
static char *query2(const char *n1, const char *v1, const char *n2, const char *v2)
{
	bp__s3_param p[] = { { n1, v1 }, { n2, v2 } };

	return bp__s3_query(p, n2 ? 2 : 1);
}

static int create_upload(const bp_s3 *s, const bp_s3_loc *loc, char **id, const char *where,
			 bp_s3_error *e)
{
	char *q = query2("uploads", NULL, NULL, NULL);
	bp__s3_req r = { 0 };
	int err;

	if (!q)
		return bp__s3_fail(e, -ENOMEM, where, "out of memory");
	err = post(s, loc, q, NULL, &r, where, e);
	if (err == 0 && (err = bp__s3_xml_upload_id(r.body ? r.body : "", r.body_len, id)) < 0)
		bp__s3_fail(e, err, where, err == -ENOMEM ? "out of memory"
				: "CreateMultipartUpload's reply has no UploadId");
	bp__s3_req_cleanup(&r);
	free(q);
	return err;
}

/* Abort upload id, best effort: the failure being reported is the one that matters. */
static void abort_upload(const bp_s3 *s, const bp_s3_loc *loc, const char *id, const char *where)
{
	char *q = query2("uploadId", id, NULL, NULL);
	bp_s3_error ignored;
	bp__s3_req r;

	if (q && bp__s3_req_init(s, loc, q, NULL, &r) == 0) {
		curl_easy_setopt(r.h, CURLOPT_CUSTOMREQUEST, "DELETE");
		bp__s3_perform(s, &r, where, &ignored);
		bp__s3_req_cleanup(&r);
	}
	free(q);
}

static int complete_upload(const bp_s3 *s, const bp_s3_loc *loc, const char *id,
			   char (*etags)[BP_S3_ETAG_MAX], size_t n, char etag[BP_S3_ETAG_MAX],
			   const char *where, bp_s3_error *e)
{
	char *q = query2("uploadId", id, NULL, NULL), *body = bp__s3_xml_complete_body(etags, n);
	char code[64], msg[256];
	bp__s3_req r = { 0 };
	int err;

	if (!q || !body)
		err = bp__s3_fail(e, -ENOMEM, where, "out of memory");
	else
		err = post(s, loc, q, body, &r, where, e);
	if (err == 0) {
		err = bp__s3_xml_complete(r.body ? r.body : "", r.body_len, etag, code, msg,
					  sizeof(msg));
		if (err == 1) {
			err = bp__s3_fail(e, -EIO, where, "CompleteMultipartUpload failed: %s: %s",
					  code, msg);
			snprintf(e->code, sizeof(e->code), "%s", code);
			e->status = 200;
		} else if (err < 0) {
			bp__s3_fail(e, err, where, "CompleteMultipartUpload's reply is not a "
				    "CompleteMultipartUploadResult");
		}
	}
	bp__s3_req_cleanup(&r);
	free(q);
	free(body);
	return err;
}

static int upload_parts(const bp_s3 *s, const bp_s3_loc *loc, const char *id, int fd,
			uint64_t size, uint64_t part, char (*etags)[BP_S3_ETAG_MAX],
			void (*progress)(void *ctx, uint64_t done), void *ctx, const char *where,
			bp_s3_error *e)
{
	size_t n = (size_t)((size + part - 1) / part);

	for (size_t i = 0; i < n; i++) {
		uint64_t off = (uint64_t)i * part, len = size - off < part ? size - off : part;
		char num[24], *q;
		int err;

		snprintf(num, sizeof(num), "%zu", i + 1);
		if (!(q = query2("partNumber", num, "uploadId", id)))
			return bp__s3_fail(e, -ENOMEM, where, "out of memory");
		err = put(s, loc, q, fd, off, len, etags[i], where, e);
		free(q);
		if (err < 0) {
			size_t m = strlen(e->msg);

			snprintf(e->msg + m, sizeof(e->msg) - m, " (part %zu of %zu)", i + 1, n);
			return err;
		}
		if (progress)
			progress(ctx, off + len);
	}
	return 0;
}

static int multipart(const bp_s3 *s, const bp_s3_loc *loc, int fd, uint64_t size, uint64_t part,
		     void (*progress)(void *ctx, uint64_t done), void *ctx,
		     char etag[BP_S3_ETAG_MAX], const char *where, bp_s3_error *e)
{
	size_t n = (size_t)((size + part - 1) / part);
	char (*etags)[BP_S3_ETAG_MAX] = calloc(n, sizeof(*etags));
	char *id = NULL;
	int err;

	if (!etags)
		return bp__s3_fail(e, -ENOMEM, where, "out of memory");
	err = create_upload(s, loc, &id, where, e);
	if (err == 0)
		err = upload_parts(s, loc, id, fd, size, part, etags, progress, ctx, where, e);
	if (err == 0)
		err = complete_upload(s, loc, id, etags, n, etag, where, e);
	if (err < 0 && id)
		abort_upload(s, loc, id, where);
	free(id);
	free(etags);
	return err;
}

int bp_s3_upload_fd(const bp_s3 *s, const bp_s3_loc *loc, int fd, uint64_t size,
		    uint64_t part_size, void (*progress)(void *ctx, uint64_t done), void *ctx,
		    char etag_out[BP_S3_ETAG_MAX], bp_s3_error *e)
{
	char where[BP_S3_MSG_MAX], etag[BP_S3_ETAG_MAX] = "";
	uint64_t part = part_size_for(size, part_size);
	int err;

	bp__s3_where(loc, where, sizeof(where));
	if (loc->plain)
		return bp__s3_fail(e, -EOPNOTSUPP, where, "cannot upload to a plain URL; use "
				   "s3://BUCKET/KEY");
	if (!loc->key[0] || loc->key[strlen(loc->key) - 1] == '/')
		return bp__s3_fail(e, -EINVAL, where, "names a prefix, not an object");
	if (part < BP__S3_PART_MIN || part > BP__S3_PART_MAX)
		return bp__s3_fail(e, -EINVAL, where, "part size %" PRIu64 " is not within 5 MiB "
				   "to 5 GiB", part);
	if (size < part)
		err = put(s, loc, NULL, fd, 0, size, etag, where, e);
	else
		err = multipart(s, loc, fd, size, part, progress, ctx, etag, where, e);
	if (err == 0 && size < part && progress)
		progress(ctx, size);
	if (err == 0 && etag_out)
		snprintf(etag_out, BP_S3_ETAG_MAX, "%s", etag);
	return err;
}
