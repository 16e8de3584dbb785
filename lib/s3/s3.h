/* SPDX-License-Identifier: MIT */
/*
 * s3.h - datasets in object storage: S3-compatible buckets (AWS S3, MinIO,
 * Ceph RGW, Alibaba OSS, GCS interop) and plain https:// URLs, read by
 * range and written by multipart upload, through libcurl.
 *
 * Why it exists: the daemon (daemon/remote/remote.c, its fetcher and the local
 * cache) and the tools (batchd-pack create/info/verify) must agree on what
 * a remote location is, how a request is addressed and signed, and which
 * failures are worth retrying. Signing is libcurl's own SigV4
 * (CURLOPT_AWS_SIGV4, "aws:amz:REGION:s3"); every request carries
 * x-amz-content-sha256 (UNSIGNED-PAYLOAD for GET/HEAD and for upload parts,
 * whose bytes their Content-MD5 checks) and, with temporary credentials,
 * x-amz-security-token. Query strings are built already sorted and
 * percent-encoded, so the canonical request curl signs is the one the
 * server computes. XML replies (listings, errors, multipart) are parsed
 * with libxml2, network access and entities off.
 *
 * Locations:
 *   s3://BUCKET/KEY    a key, or a prefix ending in '/' (KEY may be empty)
 *   https://HOST/PATH  a public object, read without signing (no listing:
 *   http://HOST/PATH   a one-file dataset only)
 *
 * Credentials (bp_s3_new), first found wins: the file named in the
 * config (AWS credentials-file syntax, [PROFILE] with aws_access_key_id,
 * aws_secret_access_key, optional aws_session_token; when a file is
 * named, it is the only place looked, and its profile must be there);
 * with allow_env, the environment (AWS_ACCESS_KEY_ID and
 * AWS_SECRET_ACCESS_KEY, both or neither, and AWS_SESSION_TOKEN), then
 * AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials, profile c->profile,
 * else AWS_PROFILE, else "default" (a missing ~/.aws/credentials or
 * default profile is no credentials; a named profile or
 * AWS_SHARED_CREDENTIALS_FILE that is missing is an error). None found:
 * requests go unsigned (public buckets). A credentials file named in the
 * config that group or others may read, or that belongs to another user
 * than the caller (unless the caller is root), is refused, naming the
 * file and `chmod 600` (in systemd's $CREDENTIALS_DIRECTORY, LoadCredential=,
 * group bits are an ACL's mask and are accepted: only others' are refused); ~/.aws/credentials is read as the AWS CLI reads it.
 *
 * Errors: every failing call fills a bp_s3_error whose msg names the
 * location (s3://bucket/key), the HTTP status and the server's error code
 * and message when it sent one ("s3://b/k: HTTP 403 AccessDenied: Access
 * Denied"), or curl's reason for a transport failure. Return values are
 * negative errnos: -ENOENT (404, NoSuchKey/NoSuchBucket), -EACCES (401,
 * 403), -ESTALE (412: the object changed under If-Match), -ERANGE (416),
 * -EINVAL (other 4xx, and 3xx; a bad location or config), -EAGAIN (a
 * retryable failure left after the retries: 5xx, 429, 408, timeouts,
 * resets), -EIO (a transport failure not worth retrying: an unknown host,
 * TLS), -EPROTO (a reply that breaks the protocol: short body, a range
 * other than the one asked for, bad XML), -ECANCELED (a write callback
 * stopped the body), an errno of pwrite for bp_s3_get_to_fd's fd,
 * -ENOMEM.
 *
 * Thread rules: a bp_s3 is immutable after bp_s3_new() and may be shared
 * by any number of threads; each call makes its own easy handle (the
 * synchronous calls) or returns one for the caller's multi handle.
 * bp_s3_global_init() must run once, before any other thread exists
 * (curl_global_init is not thread-safe).
 */
#ifndef BATCHD_PROTO_S3_H
#define BATCHD_PROTO_S3_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef void CURL_handle; /* CURL *, without making every includer include curl.h */

#define BP_S3_ETAG_MAX 128u
#define BP_S3_MSG_MAX 512u
#define BP_S3_DEFAULT_REGION "us-east-1"
#define BP_S3_DEFAULT_RETRIES 5u
#define BP_S3_DEFAULT_TIMEOUT 30u  /* seconds a request may go without a byte */

/* curl_global_init, once per process, from the main thread before others start. @return 0 or -ENOMEM. */
int bp_s3_global_init(void);

/* Where something is: parsed from s3://bucket/key or http(s)://host/path. */
typedef struct bp_s3_loc {
	bool plain;               /* http(s)://: public, unsigned, no listing */
	char *bucket;             /* s3: the bucket; plain: NULL */
	char *key;                /* s3: the key or prefix, no leading '/' ("" for the bucket); plain: the URL */
} bp_s3_loc;

/*
 * Parse s. Bucket names follow S3's rules (3..63 of [a-z0-9.-]); keys may
 * not hold NUL, "//" or a "." or ".." component (they would name another
 * object than the path suggests). @return 0 with *ret (free with
 * bp_s3_loc_free); -EINVAL with err naming what was wrong; -ENOMEM.
 */
int bp_s3_loc_parse(const char *s, bp_s3_loc *ret, char *err, size_t errlen);
void bp_s3_loc_free(bp_s3_loc *l);
/* Is s a remote location (s3://, http://, https://)? */
bool bp_s3_is_remote(const char *s);

typedef enum bp_s3_addressing {
	BP_S3_ADDR_AUTO = 0,      /* virtual-host for *.amazonaws.com endpoints, path-style otherwise */
	BP_S3_ADDR_PATH,          /* http://endpoint/bucket/key */
	BP_S3_ADDR_VIRTUAL,       /* http://bucket.endpoint/key */
} bp_s3_addressing;

typedef struct bp_s3_config {
	const char *endpoint;     /* "https://s3.REGION.amazonaws.com" when NULL; "http://127.0.0.1:9000" */
	const char *region;       /* BP_S3_DEFAULT_REGION when NULL */
	bp_s3_addressing addressing;
	const char *credentials;  /* a credentials file, or NULL */
	const char *profile;      /* "default" when NULL */
	bool allow_env;           /* also look in the environment and ~/.aws (tools: yes; the daemon: no) */
	unsigned retries;         /* retries of a retryable failure; 0 = none */
	unsigned timeout;         /* seconds without progress before a request fails (retryable); 0 = default */
	uint64_t min_rate;        /* bytes/s a request's body must average over timeout seconds (then it
				   * fails, retryable), and a ranged GET's or a listing's deadline:
				   * timeout + bytes / min_rate; 0: only a stall of timeout fails */
	const char *ca_file;      /* CA bundle for https, or NULL for the system's */
} bp_s3_config;

typedef struct bp_s3 bp_s3;

/* What a failing call says. */
typedef struct bp_s3_error {
	long status;              /* HTTP status, 0 for a transport failure */
	bool retryable;           /* 5xx, 429, 408, timeouts, resets, refused connections */
	char code[64];            /* the server's <Code>, "" when none */
	char msg[BP_S3_MSG_MAX];  /* the whole sentence, location first */
} bp_s3_error;

/*
 * A client for c (copied). @return 0 with *ret; -EINVAL (bad endpoint,
 * region, profile missing from the credentials file), -EACCES (a
 * credentials file too open or not ours), -ENOENT (a named credentials
 * file missing), -ENOMEM; err says which and how to fix it.
 */
int bp_s3_new(const bp_s3_config *c, bp_s3 **ret, char *err, size_t errlen);
void bp_s3_free(bp_s3 *s);
/* Are requests signed (credentials found)? Where from ("file /etc/…", "environment", "none"). */
bool bp_s3_signed(const bp_s3 *s);
const char *bp_s3_credentials_source(const bp_s3 *s);

/*
 * What the synchronous calls (bp_s3_head, bp_s3_list, bp_s3_get_to_fd,
 * bp_s3_upload_fd) have sent through s since bp_s3_new: every HTTP request
 * (retries, and the GET that explains a failed HEAD, included), the
 * retries among them, and the body bytes received. Handles from
 * bp_s3_request_get are the caller's to count. Any thread; the counts are
 * read one at a time, not as one snapshot.
 */
typedef struct bp_s3_stats {
	uint64_t requests;
	uint64_t retries;
	uint64_t bytes;
} bp_s3_stats;

void bp_s3_stats_get(const bp_s3 *s, bp_s3_stats *ret);

/* One object: a listing's entry or a HEAD's answer. */
typedef struct bp_s3_object {
	char *key;                /* full key (plain: the URL) */
	uint64_t size;
	char etag[BP_S3_ETAG_MAX]; /* as the server sent it, quotes included; "" when none */
} bp_s3_object;

void bp_s3_objects_free(bp_s3_object *o, size_t n);

/* HEAD loc's object. @return 0 with *ret (free ret->key); negative errno with e. Retries inside. */
int bp_s3_head(const bp_s3 *s, const bp_s3_loc *loc, bp_s3_object *ret, bp_s3_error *e);

/*
 * Every object directly under prefix (ListObjectsV2 with delimiter '/',
 * following continuation tokens), in bytewise key order. Plain locations:
 * -EOPNOTSUPP. @return 0 with *ret (n may be 0; free with
 * bp_s3_objects_free); negative errno with e. max caps the count (-E2BIG
 * beyond it); 0 is no cap. A listing that pages on past twice the pages
 * max needs (2 * max / 1000 + 16; 100,000 without a cap) fails -EPROTO.
 */
int bp_s3_list(const bp_s3 *s, const char *bucket, const char *prefix, size_t max,
	       bp_s3_object **ret, size_t *ret_n, bp_s3_error *e);

/*
 * Read [off, off+len) of an object into fd at fd_off (pwrite), checking
 * If-Match etag when etag is not empty (nor weak, W/"...", which If-Match
 * cannot match) and that exactly len bytes came, the reply being that
 * range (206 with its Content-Range, or 200 when the range is the whole
 * object). A retry writes the range again from fd_off, so on success all
 * of [fd_off, fd_off+len) holds the object's bytes; on failure part of it
 * may hold some. len 0 reads nothing. Retries inside, with backoff.
 * @return 0; negative errno with e.
 */
int bp_s3_get_to_fd(const bp_s3 *s, const bp_s3_loc *loc, const char *etag, uint64_t off,
		    uint64_t len, int fd, uint64_t fd_off, bp_s3_error *e);

/*
 * For the daemon's multi handle: a ranged GET as a ready easy handle, its
 * body passed to write(ctx, data, n) (return n to go on, anything else
 * aborts), in order from byte off, never beyond len bytes, and only once
 * the reply is known to be that range (as bp_s3_get_to_fd checks): the
 * body of an error reply never reaches write(). CURLOPT_PRIVATE is the
 * handle's own; the caller may not set it. The handle owns its header
 * list and URL; free it with bp_s3_request_free after
 * curl_multi_remove_handle. No retries: the caller classifies the
 * outcome with bp_s3_request_result and schedules a retry (a new handle)
 * after bp_s3_backoff_ms. @return the handle, NULL on ENOMEM or len 0.
 */
typedef size_t (*bp_s3_write_fn)(void *ctx, const char *data, size_t n);
CURL_handle *bp_s3_request_get(const bp_s3 *s, const bp_s3_loc *loc, const char *etag,
			       uint64_t off, uint64_t len, bp_s3_write_fn write, void *ctx);
void bp_s3_request_free(CURL_handle *h);
/* The ctx h was made with: what a CURLMsg's easy handle belongs to (CURLOPT_PRIVATE being taken). */
void *bp_s3_request_ctx(CURL_handle *h);
/*
 * The outcome of a finished request from its curl result code: 0 for a
 * 2xx reply of exactly the range asked for, else a negative errno as
 * above with e filled (e->retryable says whether to try again; an error
 * reply's XML is parsed from its first 4 KiB, which the request keeps).
 */
int bp_s3_request_result(CURL_handle *h, int curl_code, const bp_s3_loc *loc, bp_s3_error *e);

/*
 * Milliseconds to wait before retry number attempt (1, 2, ...): exponential
 * from 100 ms, capped at 5 s, with jitter: a value in [d/2, d] for
 * d = min(100 ms * 2^(attempt-1), 5 s). Any thread.
 */
unsigned bp_s3_backoff_ms(unsigned attempt);

/*
 * Upload fd's size bytes to loc: one PUT below part_size, else a
 * multipart upload of part_size parts (5 MiB at least, 10000 parts at
 * most; part_size 0 picks 64 MiB, larger when needed), aborted on failure
 * so no parts are left billed. progress (may be NULL) gets the bytes
 * sent so far after each part. @return 0 with the new object's etag in
 * etag_out (may be NULL); negative errno with e.
 */
int bp_s3_upload_fd(const bp_s3 *s, const bp_s3_loc *loc, int fd, uint64_t size,
		    uint64_t part_size, void (*progress)(void *ctx, uint64_t done), void *ctx,
		    char etag_out[BP_S3_ETAG_MAX], bp_s3_error *e);

#endif
