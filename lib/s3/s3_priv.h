/* SPDX-License-Identifier: MIT */
/*
 * s3_priv.h - what the files of the S3 client (s3.c, s3_http.c,
 * s3_upload.c, s3_xml.c) share and its unit tests reach into: the client
 * itself, one HTTP request's state, URL and query building, credentials
 * resolution and the XML reply parsers. Not installed, not for the daemon
 * or the tools: they use s3.h.
 *
 * Thread rules: as s3.h. A bp__s3_req belongs to one thread at a time; the
 * parsers and builders keep no state and may run on any thread.
 */
#ifndef BATCHD_PROTO_S3_PRIV_H
#define BATCHD_PROTO_S3_PRIV_H

#include <curl/curl.h>
#include <limits.h>
#include <stdatomic.h>

#include "s3.h"

#define BP__S3_ERRBODY_MAX 4096u          /* an error reply's body kept for its XML */

#define BP__S3_XML_MAX (16u << 20)        /* a listing page or multipart reply, at most */
#define BP__S3_KEY_MAX 1024u              /* S3's own limit on a key, in bytes */
#define BP__S3_URL_MAX 8192u              /* a plain http(s):// location, at most */
#define BP__S3_PART_MIN (5ull << 20)      /* S3's smallest part but the last */
#define BP__S3_PART_MAX (5ull << 30)      /* S3's largest part, and largest single PUT */
#define BP__S3_PART_DEFAULT (64ull << 20)
#define BP__S3_PARTS_MAX 10000u

/* Counts the synchronous calls add to (bp_s3_stats): apart, so that a const bp_s3 can count. */
typedef struct bp__s3_counts {
	_Atomic uint64_t requests, retries, bytes;
} bp__s3_counts;

struct bp_s3 {
	char *scheme;             /* "http" or "https" */
	char *host;               /* host[:port] of the endpoint */
	char *region;
	bp_s3_addressing addressing;
	bool aws;                 /* the host is *.amazonaws.com */
	char *sigv4;              /* "aws:amz:REGION:s3" */
	char *key_id, *secret;    /* NULL: unsigned */
	char *token_header;       /* "x-amz-security-token: ..." or NULL */
	char *ca_file;
	unsigned retries;
	unsigned timeout;
	uint64_t min_rate;
	char source[PATH_MAX + 16]; /* bp_s3_credentials_source */
	bp__s3_counts *counts;
};

/* printf into err[0..errlen) when err is not NULL: the sentence a failing call leaves. */
__attribute__((format(printf, 3, 4)))
void bp__s3_say(char *err, size_t errlen, const char *fmt, ...);

/* Overwrite a secret's bytes, then free it. NULL is fine. */
void bp__s3_wipe_free(char *secret);

/* Credentials as found: all NULL for none. The strings are the caller's to free. */
typedef struct bp__s3_creds {
	char *key_id, *secret, *token;
	char source[PATH_MAX + 16];
} bp__s3_creds;

/*
 * Resolve credentials as s3.h says (the named file, then with allow_env
 * the environment, AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials).
 * @return 0 with *ret (maybe empty); -ENOENT, -EACCES, -EINVAL, -ENOMEM
 * with err naming the file and the fix.
 */
int bp__s3_creds_resolve(const bp_s3_config *c, bp__s3_creds *ret, char *err, size_t errlen);
void bp__s3_creds_free(bp__s3_creds *c);

/*
 * A query string of n name/value pairs (a NULL value is a name alone,
 * written "name="), sorted by name and RFC 3986-encoded, as SigV4's
 * canonical request wants it. @return a malloc'd string ("" for n = 0),
 * NULL on ENOMEM.
 */
typedef struct bp__s3_param {
	const char *name, *value;
} bp__s3_param;
char *bp__s3_query(const bp__s3_param *p, size_t n);

/* s percent-encoded (RFC 3986 unreserved kept, and '/' when keep_slash). @return malloc'd or NULL. */
char *bp__s3_encode(const char *s, bool keep_slash);

/*
 * The URL of loc's object (or of its bucket when loc->key is ""), with
 * query q ("" or NULL for none): path-style http(s)://host/bucket/key or
 * virtual http(s)://bucket.host/key as s's addressing picks for the
 * bucket; a plain location's URL as it is. @return malloc'd or NULL.
 */
char *bp__s3_url(const bp_s3 *s, const bp_s3_loc *loc, const char *q);

/* "s3://bucket/key" or the URL, for messages, into buf. */
void bp__s3_where(const bp_s3_loc *loc, char *buf, size_t len);

/* One HTTP request and what came back. */
typedef struct bp__s3_req {
	CURL *h;
	struct curl_slist *hdrs;
	char *url;
	char *post;               /* a POST's body, owned */
	/* the reply's head */
	long status;
	char etag[BP_S3_ETAG_MAX];
	bool bad_etag;            /* an ETag header bp__s3_etag_ok refused */
	bool has_length, has_range;
	uint64_t length;          /* Content-Length */
	uint64_t range_first, range_last; /* Content-Range */
	char region[64];          /* x-amz-bucket-region */
	char location[256];       /* Location, as sent (cut to fit): for messages only */
	/* where a 2xx body goes: a range written to fd or to write(), or kept */
	bool ranged;
	uint64_t want_off, want_len, got;
	int fd;                   /* >= 0: pwrite at fd_off + got */
	uint64_t fd_off;
	bp_s3_write_fn write;
	void *ctx;
	bool keep;                /* keep the 2xx body (XML replies), up to BP__S3_XML_MAX */
	char *body;               /* kept body: a 2xx reply's when keep, else an error's first 4 KiB */
	size_t body_len, body_cap;
	/* an upload's source: [in_off, in_off + in_len) of in_fd */
	int in_fd;
	uint64_t in_off, in_len, in_pos;
	/* why a callback stopped the transfer: -errno and a sentence, 0 when none */
	int stop;
	char stop_msg[160];
	char errbuf[CURL_ERROR_SIZE];
} bp__s3_req;

/*
 * Give r a deadline for a body of at most bytes: s->timeout seconds plus
 * what bytes take at s->min_rate (none when min_rate is 0).
 */
void bp__s3_req_deadline(const bp_s3 *s, bp__s3_req *r, uint64_t bytes);

/*
 * Build r for loc with query q (may be NULL): URL, the signing (unless loc
 * is plain or s unsigned), x-amz-content-sha256, the token, timeouts, no
 * redirects. GET unless the caller sets another method after. extra
 * headers (NULL-terminated, may be NULL) are added and signed.
 * @return 0 or -ENOMEM (r cleaned up).
 */
int bp__s3_req_init(const bp_s3 *s, const bp_s3_loc *loc, const char *q,
		    const char *const *extra, bp__s3_req *r);
void bp__s3_req_cleanup(bp__s3_req *r);

/*
 * The outcome of r's transfer that ended with code: 0 for a 2xx reply
 * that met its checks, else a negative errno (s3.h) with e filled, its
 * msg starting with where.
 */
int bp__s3_req_outcome(bp__s3_req *r, CURLcode code, const char *where, bp_s3_error *e);

/*
 * Run r (a fresh transfer each attempt, from the same offsets) until it
 * succeeds, fails for good, or s->retries retries are spent. @return as
 * bp__s3_req_outcome.
 */
int bp__s3_perform(const bp_s3 *s, bp__s3_req *r, const char *where, bp_s3_error *e);

/* Count one request of r's (a retry when retry) and the body bytes it brought. */
void bp__s3_count(const bp_s3 *s, const bp__s3_req *r, bool retry);

/* e for a failure found outside a transfer (a bad reply's XML, ENOMEM). @return err. */
__attribute__((format(printf, 4, 5)))
int bp__s3_fail(bp_s3_error *e, int err, const char *where, const char *fmt, ...);

/*
 * The Content-MD5 value (base64 of the MD5) of [off, off + len) of fd into
 * out. @return 0; -EOPNOTSUPP when built without libcrypto (out is "");
 * -errno from pread; -ENOMEM.
 */
int bp__s3_content_md5(int fd, uint64_t off, uint64_t len, char out[32]);

/* ---- XML replies (s3_xml.c) ----------------------------------------------------- */

/*
 * Is s[0..n) an ETag batchd may send back in If-Match and log: empty (the
 * server has none), or under BP_S3_ETAG_MAX bytes of visible ASCII (no
 * control character, space or byte over 0x7e: a CR or LF would end the
 * header and start another)?
 */
bool bp__s3_etag_ok(const char *s, size_t n);
/* Is key free of control characters (bytes below 0x20, and 0x7f), which logs would carry raw? */
bool bp__s3_key_ok(const char *key);

/*
 * An S3 <Error>: its Code into code and Message into msg ("" when absent).
 * @return 0; -EPROTO when buf is not an <Error> document.
 */
int bp__s3_xml_error(const char *buf, size_t len, char code[64], char *msg, size_t msglen);

/*
 * An S3 <Error>'s Region (AuthorizationHeaderMalformed says which region
 * the bucket wants; some servers add it to PermanentRedirect) into region,
 * "" when absent. Unchecked text: the caller decides whether it names a
 * region. @return 0; -EPROTO when buf is not an <Error> document.
 */
int bp__s3_xml_error_region(const char *buf, size_t len, char region[64]);

/* One ListObjectsV2 page, appended to by bp__s3_xml_list. */
typedef struct bp__s3_list {
	bp_s3_object *v;
	size_t n, cap;
	size_t max;               /* more objects than this: -E2BIG */
	bool truncated;
	char *next;               /* NextContinuationToken when truncated, malloc'd */
} bp__s3_list;

/*
 * Append the <Contents> of a ListBucketResult page to l (each key must
 * start with prefix) and set truncated and next. @return 0; -EPROTO (not
 * a listing, a key outside prefix, a bad Size, truncated without a
 * token); -EILSEQ (a key or ETag with control characters, an ETag too
 * long: bp__s3_key_ok, bp__s3_etag_ok); -E2BIG; -ENOMEM.
 */
int bp__s3_xml_list(const char *buf, size_t len, const char *prefix, bp__s3_list *l);

/* InitiateMultipartUploadResult's UploadId. @return 0 with *ret (malloc'd); -EPROTO; -ENOMEM. */
int bp__s3_xml_upload_id(const char *buf, size_t len, char **ret);

/*
 * CompleteMultipartUpload's reply, which may be an <Error> inside a 200:
 * @return 0 with the ETag in etag; 1 for an <Error> (code and msg
 * filled); -EPROTO for anything else.
 */
int bp__s3_xml_complete(const char *buf, size_t len, char etag[BP_S3_ETAG_MAX], char code[64],
			char *msg, size_t msglen);

/* "<CompleteMultipartUpload>" with n parts of etags[i] (part i + 1). @return malloc'd or NULL. */
char *bp__s3_xml_complete_body(char (*etags)[BP_S3_ETAG_MAX], size_t n);

#endif
