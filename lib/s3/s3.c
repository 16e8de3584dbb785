/* SPDX-License-Identifier: MIT */
/*
 * s3.c - the S3 client's locations, client and addressing (s3.h): parsing
 * s3:// and http(s):// locations, the endpoint and region of a client,
 * where its credentials come from, and the URLs and query strings its
 * requests go to. The requests themselves are in s3_http.c, uploads in
 * s3_upload.c, the XML replies in s3_xml.c.
 *
 * A key is checked as strictly as a path, because the daemon and the
 * cache name things by it: no "//", no "." or ".." component, no control
 * bytes, at most S3's 1024 bytes. Keys and query values are sent
 * percent-encoded (RFC 3986 unreserved bytes as they are, '/' kept in the
 * path), which is also their SigV4 canonical form, so what curl signs is
 * what the server recomputes.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <libxml/parser.h>

#include "s3.h"
#include "s3_priv.h"

void bp__s3_say(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

void bp__s3_wipe_free(char *secret)
{
	if (secret)
		explicit_bzero(secret, strlen(secret));
	free(secret);
}

int bp_s3_global_init(void)
{
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		return -ENOMEM;
	/* libxml2 sets up its globals here rather than racily in the first parse. */
	xmlInitParser();
	return 0;
}

/* ---- locations ------------------------------------------------------------------ */

static bool prefixed(const char *s, const char *p)
{
	return strncasecmp(s, p, strlen(p)) == 0;
}

bool bp_s3_is_remote(const char *s)
{
	return s && (prefixed(s, "s3://") || prefixed(s, "http://") || prefixed(s, "https://"));
}

static bool alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* S3's bucket naming rules. @return NULL when b[0..n) is a good name, else what is wrong. */
static const char *bucket_fault(const char *b, size_t n)
{
	if (n < 3 || n > 63)
		return "must be 3 to 63 characters";
	for (size_t i = 0; i < n; i++)
		if (!alnum(b[i]) && b[i] != '.' && b[i] != '-')
			return "may hold only lowercase letters, digits, '.' and '-'";
	if (!alnum(b[0]) || !alnum(b[n - 1]))
		return "must begin and end with a letter or digit";
	for (size_t i = 0; i + 1 < n; i++)
		if ((b[i] == '.' && (b[i + 1] == '.' || b[i + 1] == '-')) ||
		    (b[i] == '-' && b[i + 1] == '.'))
			return "may not hold \"..\", \".-\" or \"-.\"";
	return NULL;
}

/* A key's faults, as s3.h says. @return NULL when k is a good key (or prefix), else what is wrong. */
static const char *key_fault(const char *k)
{
	size_t n = strlen(k);
	const char *c = k;

	if (n > BP__S3_KEY_MAX)
		return "is longer than S3's 1024 bytes";
	if (k[0] == '/')
		return "starts with '/' (write s3://BUCKET/KEY with one '/')";
	if (strstr(k, "//"))
		return "holds \"//\" (an empty path component)";
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)k[i] < 0x20 || k[i] == 0x7f)
			return "holds a control byte";
	while (*c) {
		size_t len = strcspn(c, "/");

		if ((len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.'))
			return "has a \".\" or \"..\" component (it would name another object than "
			       "the path suggests)";
		c += len + (c[len] == '/');
	}
	return NULL;
}

static int parse_s3(const char *s, bp_s3_loc *l, char *err, size_t errlen)
{
	const char *b = s + 5, *slash = strchr(b, '/');
	size_t n = slash ? (size_t)(slash - b) : strlen(b);
	const char *why = bucket_fault(b, n);

	if (why) {
		bp__s3_say(err, errlen, "%s: bucket name '%.*s' %s", s, (int)(n > 63 ? 63 : n), b, why);
		return -EINVAL;
	}
	if ((why = key_fault(slash ? slash + 1 : ""))) {
		bp__s3_say(err, errlen, "%.200s: the key %s", s, why);
		return -EINVAL;
	}
	l->bucket = strndup(b, n);
	l->key = strdup(slash ? slash + 1 : "");
	return l->bucket && l->key ? 0 : -ENOMEM;
}

static int parse_plain(const char *s, bp_s3_loc *l, char *err, size_t errlen)
{
	const char *host = strstr(s, "://") + 3;

	if (strlen(s) > BP__S3_URL_MAX) {
		bp__s3_say(err, errlen, "%.200s...: a URL longer than %u bytes", s, BP__S3_URL_MAX);
		return -EINVAL;
	}
	if (!*host || *host == '/') {
		bp__s3_say(err, errlen, "%s: no host after '://'", s);
		return -EINVAL;
	}
	for (const char *c = s; *c; c++) {
		if ((unsigned char)*c <= 0x20 || *c == 0x7f || *c == '#') {
			bp__s3_say(err, errlen, "%.200s: a URL may not hold blanks, control bytes or '#' "
				"(percent-encode them)", s);
			return -EINVAL;
		}
	}
	l->plain = true;
	l->key = strdup(s);
	return l->key ? 0 : -ENOMEM;
}

int bp_s3_loc_parse(const char *s, bp_s3_loc *ret, char *err, size_t errlen)
{
	bp_s3_loc l = { 0 };
	int r;

	if (!s || !bp_s3_is_remote(s)) {
		bp__s3_say(err, errlen, "'%.200s' is not a remote location (s3://BUCKET/KEY, "
			"https://HOST/PATH or http://HOST/PATH)", s ? s : "");
		return -EINVAL;
	}
	r = prefixed(s, "s3://") ? parse_s3(s, &l, err, errlen) : parse_plain(s, &l, err, errlen);
	if (r < 0) {
		if (r == -ENOMEM)
			bp__s3_say(err, errlen, "out of memory");
		bp_s3_loc_free(&l);
		return r;
	}
	*ret = l;
	return 0;
}

void bp_s3_loc_free(bp_s3_loc *l)
{
	if (!l)
		return;
	free(l->bucket);
	free(l->key);
	l->bucket = l->key = NULL;
}

void bp__s3_where(const bp_s3_loc *loc, char *buf, size_t len)
{
	if (loc->plain)
		snprintf(buf, len, "%s", loc->key);
	else
		snprintf(buf, len, "s3://%s/%s", loc->bucket, loc->key);
}

/* ---- encoding, queries, URLs ---------------------------------------------------------- */

char *bp__s3_encode(const char *s, bool keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = strlen(s);
	char *out = malloc(3 * n + 1), *o = out;

	if (!out)
		return NULL;
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		    c == '-' || c == '.' || c == '_' || c == '~' || (keep_slash && c == '/')) {
			*o++ = (char)c;
		} else {
			*o++ = '%';
			*o++ = hex[c >> 4];
			*o++ = hex[c & 15];
		}
	}
	*o = '\0';
	return out;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(((const bp__s3_param *)a)->name, ((const bp__s3_param *)b)->name);
}

char *bp__s3_query(const bp__s3_param *p, size_t n)
{
	bp__s3_param sorted[16];
	char *out = NULL, *name = NULL, *value = NULL;
	size_t len = 0, cap = 1;

	if (n > sizeof(sorted) / sizeof(sorted[0]))
		return NULL;
	if (n)
		memcpy(sorted, p, n * sizeof(*p));
	/* Names are ASCII and encode to themselves, so sorting them raw sorts the encoded ones. */
	qsort(sorted, n, sizeof(*sorted), by_name);
	for (size_t i = 0; i < n; i++)
		cap += 3 * (strlen(sorted[i].name) + (sorted[i].value ? strlen(sorted[i].value) : 0)) + 2;
	if (!(out = malloc(cap)))
		return NULL;
	out[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		name = bp__s3_encode(sorted[i].name, false);
		value = bp__s3_encode(sorted[i].value ? sorted[i].value : "", false);
		if (!name || !value) {
			free(name);
			free(value);
			free(out);
			return NULL;
		}
		len += (size_t)snprintf(out + len, cap - len, "%s%s=%s", i ? "&" : "", name, value);
		free(name);
		free(value);
	}
	return out;
}

/* Virtual-host addressing for this bucket? */
static bool virtual_for(const bp_s3 *s, const char *bucket)
{
	if (s->addressing == BP_S3_ADDR_VIRTUAL)
		return true;
	/* A dotted bucket name would not match AWS's wildcard certificate as a host. */
	return s->addressing == BP_S3_ADDR_AUTO && s->aws && !strchr(bucket, '.');
}

char *bp__s3_url(const bp_s3 *s, const bp_s3_loc *loc, const char *q)
{
	const char *sep = q && *q ? "?" : "";
	char *key, *url = NULL;
	int r;

	if (!q)
		q = "";
	if (loc->plain)
		return strdup(loc->key);
	if (!(key = bp__s3_encode(loc->key, true)))
		return NULL;
	if (virtual_for(s, loc->bucket))
		r = asprintf(&url, "%s://%s.%s/%s%s%s", s->scheme, loc->bucket, s->host, key, sep, q);
	else
		r = asprintf(&url, "%s://%s/%s/%s%s%s", s->scheme, s->host, loc->bucket, key, sep, q);
	free(key);
	return r < 0 ? NULL : url;
}

/* ---- the client ---------------------------------------------------------------------- */

/* c's endpoint into s's scheme and host. @return 0 or -EINVAL/-ENOMEM with err. */
static int endpoint(bp_s3 *s, const char *ep, char *err, size_t errlen)
{
	const char *host, *end;
	size_t n;

	if (prefixed(ep, "https://"))
		s->scheme = strdup("https");
	else if (prefixed(ep, "http://"))
		s->scheme = strdup("http");
	else {
		bp__s3_say(err, errlen, "endpoint '%.200s' is not http://HOST[:PORT] or https://HOST[:PORT]",
		    ep);
		return -EINVAL;
	}
	host = strstr(ep, "://") + 3;
	end = host + strcspn(host, "/?#");
	n = (size_t)(end - host);
	if (n == 0 || n > 255 || (*end && strcmp(end, "/")) || memchr(host, '@', n) ||
	    strcspn(host, " \t\r\n") < n) {
		bp__s3_say(err, errlen, "endpoint '%.200s' is not http://HOST[:PORT] or https://HOST[:PORT] "
			"(no path, query or user)", ep);
		return -EINVAL;
	}
	if (!s->scheme || !(s->host = strndup(host, n)))
		return -ENOMEM;
	s->aws = n > 14 && !strncasecmp(s->host + n - 14, ".amazonaws.com", 14);
	return 0;
}

static int region(bp_s3 *s, const char *r, char *err, size_t errlen)
{
	size_t n = strlen(r);

	if (n == 0 || n > 32 || strspn(r, "abcdefghijklmnopqrstuvwxyz0123456789-") != n) {
		bp__s3_say(err, errlen, "region '%.64s' is not a region name (lowercase letters, digits "
			"and '-', such as us-east-1)", r);
		return -EINVAL;
	}
	s->region = strdup(r);
	return s->region && asprintf(&s->sigv4, "aws:amz:%s:s3", r) >= 0 ? 0 : -ENOMEM;
}

static int take_creds(bp_s3 *s, bp__s3_creds *cr)
{
	snprintf(s->source, sizeof(s->source), "%s", cr->source);
	if (!cr->key_id)
		return 0;
	s->key_id = cr->key_id;
	s->secret = cr->secret;
	cr->key_id = cr->secret = NULL;
	if (cr->token && asprintf(&s->token_header, "x-amz-security-token: %s", cr->token) < 0) {
		s->token_header = NULL;
		return -ENOMEM;
	}
	return 0;
}

int bp_s3_new(const bp_s3_config *c, bp_s3 **ret, char *err, size_t errlen)
{
	bp__s3_creds cr = { 0 };
	char *ep = NULL;
	bp_s3 *s;
	int r;

	if (!(s = calloc(1, sizeof(*s))) || !(s->counts = calloc(1, sizeof(*s->counts)))) {
		free(s);
		return -ENOMEM;
	}
	s->addressing = c->addressing;
	s->retries = c->retries;
	s->timeout = c->timeout ? c->timeout : BP_S3_DEFAULT_TIMEOUT;
	s->min_rate = c->min_rate;
	r = region(s, c->region ? c->region : BP_S3_DEFAULT_REGION, err, errlen);
	if (r == 0 && !c->endpoint && asprintf(&ep, "https://s3.%s.amazonaws.com", s->region) < 0)
		r = -ENOMEM;
	if (r == 0)
		r = endpoint(s, c->endpoint ? c->endpoint : ep, err, errlen);
	if (r == 0 && c->ca_file && !(s->ca_file = strdup(c->ca_file)))
		r = -ENOMEM;
	if (r == 0)
		r = bp__s3_creds_resolve(c, &cr, err, errlen);
	if (r == 0)
		r = take_creds(s, &cr);
	bp__s3_creds_free(&cr);
	free(ep);
	if (r < 0) {
		if (r == -ENOMEM)
			bp__s3_say(err, errlen, "out of memory");
		bp_s3_free(s);
		return r;
	}
	*ret = s;
	return 0;
}

void bp_s3_free(bp_s3 *s)
{
	if (!s)
		return;
	free(s->scheme);
	free(s->host);
	free(s->region);
	free(s->sigv4);
	free(s->key_id);
	bp__s3_wipe_free(s->secret);
	bp__s3_wipe_free(s->token_header);
	free(s->ca_file);
	free(s->counts);
	free(s);
}

bool bp_s3_signed(const bp_s3 *s)
{
	return s->key_id != NULL;
}

const char *bp_s3_credentials_source(const bp_s3 *s)
{
	return s->source;
}

void bp_s3_stats_get(const bp_s3 *s, bp_s3_stats *ret)
{
	ret->requests = atomic_load_explicit(&s->counts->requests, memory_order_relaxed);
	ret->retries = atomic_load_explicit(&s->counts->retries, memory_order_relaxed);
	ret->bytes = atomic_load_explicit(&s->counts->bytes, memory_order_relaxed);
}

/* ---- retries ---------------------------------------------------------------------------- */

unsigned bp_s3_backoff_ms(unsigned attempt)
{
	static _Thread_local uint64_t state;
	unsigned base = 100;

	if (!state) {
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		state = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ (uintptr_t)&state;
		state |= 1;
	}
	for (unsigned i = 1; i < attempt && base < 5000; i++)
		base *= 2;
	if (base > 5000)
		base = 5000;
	/* xorshift64: "equal jitter", half the delay fixed and half random, so retries spread out. */
	state ^= state << 13;
	state ^= state >> 7;
	state ^= state << 17;
	return base / 2 + (unsigned)(state % (base / 2 + 1));
}
