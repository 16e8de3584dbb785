/* SPDX-License-Identifier: MIT */
/*
 * s3_http.c - the S3 client's requests (s3.h): one easy handle per
 * request, set up the same way for the synchronous calls and the daemon's
 * multi handle, and one classification of what came back.
 *
 * A ranged GET is trusted only when the reply says it is that range: a
 * 206 whose Content-Range starts at the offset asked and ends where it
 * should, or a 200 for a range that is the whole object. Bytes beyond the
 * range are refused, and a reply that ends short fails, so a range that
 * lands is exactly the bytes asked for. A retried range starts again at
 * its first byte and writes over the same offsets, so the bytes of a
 * dropped attempt are all overwritten or the whole call fails.
 *
 * Redirects are not followed. S3 answers a bucket in another region with
 * a 301 or 307 naming that region (x-amz-bucket-region, or the <Region>
 * of its <Error>), which becomes the fix in the message; a redirect that
 * names no region is reported as one, with where it points (Location),
 * since it may come from a proxy or another service altogether.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "batchd-build.h"
#include "s3_priv.h"

int bp__s3_fail(bp_s3_error *e, int err, const char *where, const char *fmt, ...)
{
	va_list ap;
	int n;

	memset(e, 0, sizeof(*e));
	n = snprintf(e->msg, sizeof(e->msg), "%s: ", where);
	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < sizeof(e->msg))
		vsnprintf(e->msg + n, sizeof(e->msg) - (size_t)n, fmt, ap);
	va_end(ap);
	return err;
}

/* ---- callbacks ---------------------------------------------------------------------- */

static void stop(bp__s3_req *r, int err, const char *msg)
{
	if (!r->stop) {
		r->stop = err;
		snprintf(r->stop_msg, sizeof(r->stop_msg), "%s", msg);
	}
}

static int parse_u64(const char *s, const char *end, uint64_t *ret)
{
	uint64_t v = 0;

	if (s == end)
		return -EINVAL;
	for (; s < end; s++) {
		if (*s < '0' || *s > '9' || v > (UINT64_MAX - 9) / 10)
			return -EINVAL;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	*ret = v;
	return 0;
}

/* "bytes FIRST-LAST/TOTAL" */
static void content_range(bp__s3_req *r, const char *v, const char *end)
{
	const char *dash, *slash;

	if ((size_t)(end - v) < 6 || strncasecmp(v, "bytes ", 6))
		return;
	v += 6;
	dash = memchr(v, '-', (size_t)(end - v));
	slash = dash ? memchr(dash, '/', (size_t)(end - dash)) : NULL;
	r->has_range = slash && parse_u64(v, dash, &r->range_first) == 0 &&
		       parse_u64(dash + 1, slash, &r->range_last) == 0;
}

void bp__s3_req_deadline(const bp_s3 *s, bp__s3_req *r, uint64_t bytes)
{
	uint64_t ms;

	if (!s->min_rate)
		return;
	ms = (uint64_t)s->timeout * 1000 + bytes / s->min_rate * 1000 +
	     bytes % s->min_rate * 1000 / s->min_rate;
	curl_easy_setopt(r->h, CURLOPT_TIMEOUT_MS, (long)(ms < LONG_MAX ? ms : LONG_MAX));
}

static size_t on_header(char *p, size_t size, size_t n, void *user)
{
	bp__s3_req *r = user;
	size_t len = size * n;
	const char *colon = memchr(p, ':', len), *v, *end = p + len;

	/* A new status line (after a 100 Continue): forget the last reply's head. */
	if (len >= 5 && !strncmp(p, "HTTP/", 5)) {
		r->etag[0] = r->region[0] = r->location[0] = '\0';
		r->has_length = r->has_range = r->bad_etag = false;
		return len;
	}
	if (!colon)
		return len;
	for (v = colon + 1; v < end && (*v == ' ' || *v == '\t'); v++)
		;
	while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
		end--;
#define IS(name) ((size_t)(colon - p) == strlen(name) && !strncasecmp(p, name, strlen(name)))
	if (IS("etag") && bp__s3_etag_ok(v, (size_t)(end - v)))
		snprintf(r->etag, sizeof(r->etag), "%.*s", (int)(end - v), v);
	else if (IS("etag"))
		r->bad_etag = true;
	else if (IS("content-length"))
		r->has_length = parse_u64(v, end, &r->length) == 0;
	else if (IS("content-range"))
		content_range(r, v, end);
	else if (IS("x-amz-bucket-region") && (size_t)(end - v) < sizeof(r->region))
		snprintf(r->region, sizeof(r->region), "%.*s", (int)(end - v), v);
	else if (IS("location"))
		snprintf(r->location, sizeof(r->location), "%.*s", (int)(end - v), v);
#undef IS
	return len;
}

/* Keep p[0..n) in r->body, up to max bytes. @return false when over max. */
static bool keep(bp__s3_req *r, const char *p, size_t n, size_t max)
{
	if (r->body_len + n > max)
		return false;
	if (r->body_len + n + 1 > r->body_cap) {
		size_t cap = r->body_cap ? r->body_cap : 4096;
		char *b;

		while (cap < r->body_len + n + 1)
			cap *= 2;
		if (!(b = realloc(r->body, cap)))
			return false;
		r->body = b;
		r->body_cap = cap;
	}
	memcpy(r->body + r->body_len, p, n);
	r->body_len += n;
	r->body[r->body_len] = '\0';
	return true;
}

/* Before a range's first byte: is this reply that range? */
static bool range_ok(bp__s3_req *r)
{
	char msg[160];

	if (r->status == 206 && r->has_range && r->range_first == r->want_off &&
	    r->range_last == r->want_off + r->want_len - 1)
		return true;
	if (r->status == 200 && r->want_off == 0 && r->has_length && r->length == r->want_len)
		return true;
	if (r->status == 206 && r->has_range)
		snprintf(msg, sizeof(msg), "sent bytes %" PRIu64 "-%" PRIu64 " for a range of %" PRIu64
			 "-%" PRIu64, r->range_first, r->range_last, r->want_off,
			 r->want_off + r->want_len - 1);
	else
		snprintf(msg, sizeof(msg), "answered a range request with HTTP %ld without the "
			 "range (a server or proxy that ignores Range)", r->status);
	stop(r, -EPROTO, msg);
	return false;
}

static size_t sink(bp__s3_req *r, const char *p, size_t n)
{
	if (r->fd >= 0) {
		uint64_t at = r->fd_off + r->got;

		for (size_t done = 0; done < n;) {
			ssize_t w = pwrite(r->fd, p + done, n - done, (off_t)(at + done));

			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				char msg[96];

				snprintf(msg, sizeof(msg), "writing the bytes fetched: %s",
					 w < 0 ? strerror(errno) : "no progress");
				stop(r, w < 0 ? -errno : -EIO, msg);
				return 0;
			}
			done += (size_t)w;
		}
		return n;
	}
	if (r->write && r->write(r->ctx, p, n) != n) {
		stop(r, -ECANCELED, "stopped by its reader");
		return 0;
	}
	return n;
}

static size_t on_body(char *p, size_t size, size_t n, void *user)
{
	bp__s3_req *r = user;
	size_t len = size * n;

	if (!r->status)
		curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &r->status);
	if (r->status < 200 || r->status > 299) {
		/* An error's body: its first 4 KiB say why, the rest is dropped. */
		if (r->body_len < BP__S3_ERRBODY_MAX)
			keep(r, p, len < BP__S3_ERRBODY_MAX - r->body_len ? len
					   : BP__S3_ERRBODY_MAX - r->body_len, BP__S3_ERRBODY_MAX);
		return len;
	}
	if (r->keep) {
		if (keep(r, p, len, BP__S3_XML_MAX))
			return len;
		stop(r, -EPROTO, "sent a reply larger than 16 MiB");
		return 0;
	}
	if (!r->ranged)
		return len;
	if (r->got == 0 && !range_ok(r))
		return 0;
	if (len > r->want_len - r->got) {
		stop(r, -EPROTO, "sent more bytes than the range asked for");
		return 0;
	}
	if (sink(r, p, len) != len)
		return 0;
	r->got += len;
	return len;
}

static size_t on_read(char *p, size_t size, size_t n, void *user)
{
	bp__s3_req *r = user;
	size_t want = size * n;
	ssize_t got;

	if (want > r->in_len - r->in_pos)
		want = (size_t)(r->in_len - r->in_pos);
	if (!want)
		return 0;
	do
		got = pread(r->in_fd, p, want, (off_t)(r->in_off + r->in_pos));
	while (got < 0 && errno == EINTR);
	if (got <= 0) {
		stop(r, got < 0 ? -errno : -EIO, got < 0 ? "reading the file to upload failed"
							 : "the file to upload ended early");
		return CURL_READFUNC_ABORT;
	}
	r->in_pos += (uint64_t)got;
	return (size_t)got;
}

static int on_seek(void *user, curl_off_t off, int origin)
{
	bp__s3_req *r = user;

	if (origin != SEEK_SET || off < 0 || (uint64_t)off > r->in_len)
		return CURL_SEEKFUNC_CANTSEEK;
	r->in_pos = (uint64_t)off;
	return CURL_SEEKFUNC_OK;
}

/* ---- requests ----------------------------------------------------------------------- */

static int add_header(bp__s3_req *r, const char *h)
{
	struct curl_slist *l = curl_slist_append(r->hdrs, h);

	if (!l)
		return -ENOMEM;
	r->hdrs = l;
	return 0;
}

static int set_options(const bp_s3 *s, const bp_s3_loc *loc, bp__s3_req *r)
{
	CURL *h = r->h;
	int bad = 0;

	bad |= curl_easy_setopt(h, CURLOPT_URL, r->url);
#if LIBCURL_VERSION_NUM >= 0x075500
	bad |= curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
#else
	bad |= curl_easy_setopt(h, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
	bad |= curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
	bad |= curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	bad |= curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
	bad |= curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
	/*
	 * A request fails (retryably) after timeout seconds averaging less than
	 * min_rate bytes a second (without a byte moving, when min_rate is 0):
	 * a server that trickles cannot hold a request, nor the fetcher.
	 */
	bad |= curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT,
				(long)(s->min_rate ? (s->min_rate < LONG_MAX ? s->min_rate : LONG_MAX) : 1));
	bad |= curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)s->timeout);
	bad |= curl_easy_setopt(h, CURLOPT_USERAGENT, "batchd/" BATCHD_VERSION);
	bad |= curl_easy_setopt(h, CURLOPT_ERRORBUFFER, r->errbuf);
	bad |= curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	bad |= curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
	bad |= curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	bad |= curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
	bad |= curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
	bad |= curl_easy_setopt(h, CURLOPT_READDATA, r);
	bad |= curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, on_seek);
	bad |= curl_easy_setopt(h, CURLOPT_SEEKDATA, r);
	bad |= curl_easy_setopt(h, CURLOPT_PRIVATE, r);
	if (s->ca_file)
		bad |= curl_easy_setopt(h, CURLOPT_CAINFO, s->ca_file);
	if (!loc->plain && s->key_id) {
		bad |= curl_easy_setopt(h, CURLOPT_AWS_SIGV4, s->sigv4);
		bad |= curl_easy_setopt(h, CURLOPT_USERNAME, s->key_id);
		bad |= curl_easy_setopt(h, CURLOPT_PASSWORD, s->secret);
	}
	bad |= curl_easy_setopt(h, CURLOPT_HTTPHEADER, r->hdrs);
	return bad ? -ENOMEM : 0;
}

int bp__s3_req_init(const bp_s3 *s, const bp_s3_loc *loc, const char *q,
		    const char *const *extra, bp__s3_req *r)
{
	int err = -ENOMEM;

	memset(r, 0, sizeof(*r));
	r->fd = -1;
	r->in_fd = -1;
	if (!(r->h = curl_easy_init()) || !(r->url = bp__s3_url(s, loc, q)))
		goto fail;
	/* curl 7.88 signs this header's value as the payload hash when it is there. */
	if (!loc->plain && add_header(r, "x-amz-content-sha256: UNSIGNED-PAYLOAD") < 0)
		goto fail;
	if (!loc->plain && s->token_header && add_header(r, s->token_header) < 0)
		goto fail;
	for (; extra && *extra; extra++)
		if (add_header(r, *extra) < 0)
			goto fail;
	if ((err = set_options(s, loc, r)) < 0)
		goto fail;
	return 0;
fail:
	bp__s3_req_cleanup(r);
	return err;
}

void bp__s3_req_cleanup(bp__s3_req *r)
{
	if (!r)
		return;
	if (r->h)
		curl_easy_cleanup(r->h);
	curl_slist_free_all(r->hdrs);
	free(r->url);
	free(r->post);
	free(r->body);
	r->h = NULL;
	r->hdrs = NULL;
	r->url = r->post = r->body = NULL;
}

/* Ready r for another attempt: the same request from its first byte. */
static void rewind_req(bp__s3_req *r)
{
	r->status = 0;
	r->etag[0] = r->region[0] = r->location[0] = '\0';
	r->has_length = r->has_range = r->bad_etag = false;
	r->got = r->in_pos = 0;
	r->body_len = 0;
	r->stop = 0;
	r->stop_msg[0] = r->errbuf[0] = '\0';
}

/* ---- outcomes ----------------------------------------------------------------------- */

static bool retryable_code(CURLcode c)
{
	switch (c) {
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_COULDNT_CONNECT:
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_PARTIAL_FILE:
	case CURLE_GOT_NOTHING:
		return true;
	default:
		return false;
	}
}

static int status_errno(long status)
{
	if (status == 404)
		return -ENOENT;
	if (status == 401 || status == 403)
		return -EACCES;
	if (status == 412)
		return -ESTALE;
	if (status == 416)
		return -ERANGE;
	if (status == 408 || status == 429 || status >= 500)
		return -EAGAIN;
	return -EINVAL;
}

static const char *reason(long status)
{
	switch (status) {
	case 301: return "Moved Permanently";
	case 302: return "Found";
	case 307: return "Temporary Redirect";
	case 308: return "Permanent Redirect";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 412: return "Precondition Failed";
	case 416: return "Range Not Satisfiable";
	case 429: return "Too Many Requests";
	case 500: return "Internal Server Error";
	case 503: return "Service Unavailable";
	default: return "";
	}
}

/* Does s name a region as AWS spells them (lowercase letters, digits, '-')? */
static bool region_named(const char *s)
{
	size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-");

	return n > 0 && s[n] == '\0';
}

/* s for a message into buf: bytes outside visible ASCII as '?', cut with "..." to fit. */
static void visible(const char *s, char *buf, size_t len)
{
	size_t n = 0;

	for (; s[n] && n + 1 < len; n++)
		buf[n] = (unsigned char)s[n] < 0x20 || (unsigned char)s[n] > 0x7e ? '?' : s[n];
	buf[n] = '\0';
	if (s[n] && len > 4)
		memcpy(buf + len - 4, "...", 4);
}

/* The host[:port] of absolute URL u (userinfo left out) into buf; "" when u is relative. */
static void url_host(const char *u, char *buf, size_t len)
{
	const char *p = strstr(u, "://"), *end, *at;

	buf[0] = '\0';
	if (!p || p != u + strcspn(u, "/?#:"))
		return;
	p += 3;
	end = p + strcspn(p, "/?#");
	for (at = p; at < end; at++)
		if (*at == '@')
			p = at + 1;
	snprintf(buf, len, "%.*s", (int)(end - p), p);
}

/*
 * What a redirect, or a refusal for signing the wrong region, asks of the
 * caller, appended at buf. "Another region" only when the reply names one
 * (x-amz-bucket-region, or its <Error>'s <Region>): a redirect that names
 * none may come from a proxy or another service, so it is reported as a
 * redirect, with where it points.
 */
static void redirect_fix(const bp__s3_req *r, const char *code, char *buf, size_t len)
{
	bool redirect = r->status >= 300 && r->status < 400;
	char region[64] = "", loc[160], host[128];

	if (!redirect && strcmp(code, "AuthorizationHeaderMalformed"))
		return;
	if (region_named(r->region))
		snprintf(region, sizeof(region), "%s", r->region);
	else if (!r->body_len || bp__s3_xml_error_region(r->body, r->body_len, region) < 0 ||
		 !region_named(region))
		region[0] = '\0';
	if (region[0]) {
		snprintf(buf, len, "; the bucket is in another region (%s): set [remote] region / "
			 "--region", region);
		return;
	}
	if (!redirect)
		return;
	visible(r->location, loc, sizeof(loc));
	url_host(loc, host, sizeof(host));
	if (host[0])
		snprintf(buf, len, "; redirected to %s (Location: %s): redirects are not followed: "
			 "check [remote] endpoint / --endpoint", host, loc);
	else if (loc[0])
		snprintf(buf, len, "; redirected (Location: %s): redirects are not followed: check "
			 "[remote] endpoint / --endpoint", loc);
	else
		snprintf(buf, len, "; redirects are not followed: check [remote] endpoint / "
			 "--endpoint");
}

/* A reply with an HTTP error status: the sentence, with the server's Code and Message. */
static int http_error(bp__s3_req *r, const char *where, bp_s3_error *e)
{
	char code[64] = "", msg[256] = "";
	size_t n;

	if (r->body_len)
		bp__s3_xml_error(r->body, r->body_len, code, msg, sizeof(msg));
	memset(e, 0, sizeof(*e));
	e->status = r->status;
	e->retryable = status_errno(r->status) == -EAGAIN;
	snprintf(e->code, sizeof(e->code), "%s", code);
	n = (size_t)snprintf(e->msg, sizeof(e->msg), "%s: HTTP %ld %s%s%s", where, r->status,
			     code[0] ? code : reason(r->status), msg[0] ? ": " : "", msg);
	if (n < sizeof(e->msg))
		redirect_fix(r, code, e->msg + n, sizeof(e->msg) - n);
	return r->status >= 300 && r->status < 400 ? -EINVAL : status_errno(r->status);
}

int bp__s3_req_outcome(bp__s3_req *r, CURLcode code, const char *where, bp_s3_error *e)
{
	if (!r->status)
		curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &r->status);
	if (r->stop)
		return bp__s3_fail(e, r->stop, where, "%s", r->stop_msg);
	if (code != CURLE_OK) {
		int err = retryable_code(code) ? -EAGAIN
			: code == CURLE_OUT_OF_MEMORY ? -ENOMEM : -EIO;

		bp__s3_fail(e, err, where, "%s", r->errbuf[0] ? r->errbuf : curl_easy_strerror(code));
		e->retryable = err == -EAGAIN;
		return err;
	}
	if (r->status < 200 || r->status > 299)
		return http_error(r, where, e);
	if (r->ranged && r->got != r->want_len)
		return bp__s3_fail(e, -EPROTO, where, "the reply ended after %" PRIu64 " of %" PRIu64
				   " bytes", r->got, r->want_len);
	return 0;
}

void bp__s3_count(const bp_s3 *s, const bp__s3_req *r, bool retry)
{
	/* Statistics only: nothing is ordered by them, relaxed is enough. */
	atomic_fetch_add_explicit(&s->counts->requests, 1, memory_order_relaxed);
	if (retry)
		atomic_fetch_add_explicit(&s->counts->retries, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->counts->bytes, r->got + (r->keep ? r->body_len : 0),
				  memory_order_relaxed);
}

int bp__s3_perform(const bp_s3 *s, bp__s3_req *r, const char *where, bp_s3_error *e)
{
	for (unsigned attempt = 0;; attempt++) {
		CURLcode code;
		size_t n;
		int err;

		rewind_req(r);
		code = curl_easy_perform(r->h);
		bp__s3_count(s, r, attempt > 0);
		err = bp__s3_req_outcome(r, code, where, e);
		if (err == 0 || !e->retryable || attempt >= s->retries) {
			n = strlen(e->msg);
			if (err && attempt && n + 40 < sizeof(e->msg))
				snprintf(e->msg + n, sizeof(e->msg) - n, " (after %u retries)", attempt);
			if (err && e->retryable)
				err = -EAGAIN;
			return err;
		}
		struct timespec ts = { .tv_sec = 0 };
		unsigned ms = bp_s3_backoff_ms(attempt + 1);

		ts.tv_sec = ms / 1000;
		ts.tv_nsec = (long)(ms % 1000) * 1000000L;
		while (nanosleep(&ts, &ts) < 0)
			;
	}
}
