/* SPDX-License-Identifier: MIT */
/*
 * config_value.c - what each setting may be: one parser per kind of value
 * (whole numbers in a range, sizes, names from a list, paths, modes,
 * users and groups, HOST:PORT), shared by the file (config.c) and the
 * command line (config_args.c), so a value means the same and is refused
 * in the same words wherever it is written.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_parse.h"
#include "log.h"
#include "units.h"

/* ---- names ------------------------------------------------------------- */

static const char *const engine_names[] = {
	[BD_CFG_IO_AUTO] = "auto",
	[BD_CFG_IO_URING] = "io_uring",
	[BD_CFG_IO_PREAD] = "pread",
};

static const char *const direct_names[] = {
	[BD_CFG_DIRECT_AUTO] = "auto",
	[BD_CFG_DIRECT_ON] = "on",
	[BD_CFG_DIRECT_OFF] = "off",
};
const char *bd_config_io_engine_name(bd_config_io_engine e)
{
	return (unsigned)e < ELEMENTSOF(engine_names) ? engine_names[e] : "?";
}

static const char *const tier_names[] = {
	[BD_CFG_TIER_AUTO] = "auto",
	[BD_CFG_TIER_RAM] = "ram",
	[BD_CFG_TIER_PAGE] = "page",
	[BD_CFG_TIER_DIRECT] = "direct",
};

const char *bd_config_tier_name(bd_config_tier t)
{
	return (unsigned)t < ELEMENTSOF(tier_names) ? tier_names[t] : "?";
}

const char *bd_config_direct_name(bd_config_direct d)
{
	return (unsigned)d < ELEMENTSOF(direct_names) ? direct_names[d] : "?";
}

const char *bd_config_log_level_name(int level)
{
	return bd_log_level_name(level);
}

/* ---- messages ---------------------------------------------------------- */

static void vmsg(char *buf, size_t len, const char *fmt, va_list ap)
{
	if (buf && len)
		vsnprintf(buf, len, fmt, ap);
}

__attribute__((format(printf, 3, 4)))
static void msg(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg(buf, len, fmt, ap);
	va_end(ap);
}

/*
 * s in single quotes, control bytes and quotes escaped, cut after
 * BD__CONFIG_QUOTE_MAX bytes: values come from files and flags and are
 * echoed to a terminal or the journal.
 */
static const char *quote(char *buf, size_t len, const char *s)
{
	size_t o = 0, i;

	buf[o++] = '\'';
	for (i = 0; s[i] && i < BD__CONFIG_QUOTE_MAX && o + 8 < len; i++) {
		unsigned char ch = (unsigned char)s[i];

		if (ch < 0x20 || ch == 0x7f || ch == '\'' || ch == '\\')
			o += (size_t)snprintf(buf + o, len - o, "\\x%02x", ch);
		else
			buf[o++] = (char)ch;
	}
	if (s[i])
		o += (size_t)snprintf(buf + o, len - o, "...");
	buf[o++] = '\'';
	buf[o] = '\0';
	return buf;
}

void bd__config_msg(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg(buf, len, fmt, ap);
	va_end(ap);
}

const char *bd__config_quote(char *buf, size_t len, const char *s)
{
	return quote(buf, len, s);
}

/* ---- values (the contract: config_parse.h) ------------------------------ */

int bd__config_parse_uint(const char *v, unsigned min, unsigned max, unsigned *ret,
		      char *what, size_t wlen)
{
	char q[BD__CONFIG_QBUF];
	uint64_t n = 0;
	const char *p = v;

	if (*p < '0' || *p > '9')
		goto not_number;
	for (; *p >= '0' && *p <= '9'; p++) {
		n = n * 10 + (uint64_t)(*p - '0');
		if (n > UINT_MAX)
			break;   /* out of range; keep scanning for junk below */
	}
	while (*p >= '0' && *p <= '9')
		p++;
	if (*p)
		goto not_number;
	if (n < min || n > max) {
		msg(what, wlen, "%s is out of range (allowed %u..%u)",
		    quote(q, sizeof(q), v), min, max);
		return -EINVAL;
	}
	*ret = (unsigned)n;
	return 0;

not_number:
	msg(what, wlen, "%s is not a whole number (allowed %u..%u)",
	    quote(q, sizeof(q), v), min, max);
	return -EINVAL;
}

/* A limit as it is written in the file: "64K", "1M" (binary), or a plain number of bytes. */
static const char *size_name(uint64_t n, char *buf, size_t len)
{
	static const char suffix[] = "KMGT";
	int i = -1;

	while (n && n % 1024 == 0 && i + 1 < 4) {
		n /= 1024;
		i++;
	}
	if (i < 0)
		snprintf(buf, len, "%llu", (unsigned long long)n);
	else
		snprintf(buf, len, "%llu%c", (unsigned long long)n, suffix[i]);
	return buf;
}

int bd__config_parse_size(const char *v, uint64_t min, uint64_t max, uint64_t *ret,
			  char *what, size_t wlen)
{
	char q[BD__CONFIG_QBUF], lim[32];
	uint64_t n;
	int r;

	r = bp_parse_size(v, &n);
	if (r == -ERANGE || (r == 0 && n > max)) {
		if (max == UINT64_MAX)
			msg(what, wlen, "%s is too large", quote(q, sizeof(q), v));
		else
			msg(what, wlen, "%s is too large (at most %s)", quote(q, sizeof(q), v),
			    size_name(max, lim, sizeof(lim)));
		return -EINVAL;
	}
	if (r < 0) {
		msg(what, wlen, "%s is not a size (%s)", quote(q, sizeof(q), v), BP_SIZE_FORMS);
		return -EINVAL;
	}
	if (n < min) {
		msg(what, wlen, "%s is below the minimum of %s", quote(q, sizeof(q), v),
		    size_name(min, lim, sizeof(lim)));
		return -EINVAL;
	}
	*ret = n;
	return 0;
}

int bd__config_parse_budget(const char *v, uint64_t *ret, char *what, size_t wlen)
{
	if (!strcmp(v, "auto")) {
		*ret = 0;
		return 0;
	}
	return bd__config_parse_size(v, BD_CONFIG_MIN_BUDGET, UINT64_MAX, ret, what, wlen);
}

int bd__config_parse_cache(const char *v, uint64_t *ret, char *what, size_t wlen)
{
	if (!strcmp(v, "auto")) {
		*ret = BD_CONFIG_CACHE_AUTO;
		return 0;
	}
	return bd__config_parse_size(v, 0, BD_CONFIG_CACHE_AUTO - 1, ret, what, wlen);
}

int bd__config_parse_bool(const char *v, bool *ret, char *what, size_t wlen)
{
	static const char *const yes[] = { "yes", "true", "on", "1" };
	static const char *const no[] = { "no", "false", "off", "0" };
	char q[BD__CONFIG_QBUF];

	for (size_t i = 0; i < ELEMENTSOF(yes); i++) {
		if (!strcmp(v, yes[i]) || !strcmp(v, no[i])) {
			*ret = !strcmp(v, yes[i]);
			return 0;
		}
	}
	msg(what, wlen, "%s is not yes or no (also true/false, on/off, 1/0)",
	    quote(q, sizeof(q), v));
	return -EINVAL;
}

static int parse_name(const char *v, const char *const *names, size_t n, int *ret,
		      const char *allowed, char *what, size_t wlen)
{
	char q[BD__CONFIG_QBUF];

	for (size_t i = 0; i < n; i++) {
		if (!strcmp(v, names[i])) {
			*ret = (int)i;
			return 0;
		}
	}
	msg(what, wlen, "%s is not one of %s", quote(q, sizeof(q), v), allowed);
	return -EINVAL;
}

int bd__config_parse_engine(const char *v, bd_config_io_engine *ret, char *what, size_t wlen)
{
	int i = 0, r;

	r = parse_name(v, engine_names, ELEMENTSOF(engine_names), &i,
		       "auto, io_uring, pread", what, wlen);
	if (r == 0)
		*ret = (bd_config_io_engine)i;
	return r;
}

int bd__config_parse_direct(const char *v, bd_config_direct *ret, char *what, size_t wlen)
{
	int i = 0, r;

	r = parse_name(v, direct_names, ELEMENTSOF(direct_names), &i,
		       "auto, on, off", what, wlen);
	if (r == 0)
		*ret = (bd_config_direct)i;
	return r;
}

int bd__config_parse_tier(const char *v, bd_config_tier *ret, char *what, size_t wlen)
{
	int i = 0, r;

	r = parse_name(v, tier_names, ELEMENTSOF(tier_names), &i, "auto, ram, page, direct", what,
		       wlen);
	if (r == 0)
		*ret = (bd_config_tier)i;
	return r;
}

int bd__config_parse_first_pass(const char *v, bool *ret, char *what, size_t wlen)
{
	static const char *const names[] = { "batches", "stream" };
	int i = 0, r;

	r = parse_name(v, names, ELEMENTSOF(names), &i, "stream, batches", what, wlen);
	if (r == 0)
		*ret = i == 1;
	return r;
}

int bd__config_parse_log_level(const char *v, int *ret, char *what, size_t wlen)
{
	char q[BD__CONFIG_QBUF];
	int level = bd_log_parse_level(v);

	if (level >= 0) {
		*ret = level;
		return 0;
	}
	msg(what, wlen, "%s is not one of err, warning, notice, info, debug",
	    quote(q, sizeof(q), v));
	return -EINVAL;
}

/* The socket path as given; it must fit sockaddr_un's sun_path with its NUL. */
static int check_socket(const char *v, char *what, size_t wlen)
{
	char q[BD__CONFIG_QBUF];
	size_t n = strlen(v);

	if (v[0] != '/') {
		msg(what, wlen, "%s is not an absolute path", quote(q, sizeof(q), v));
		return -EINVAL;
	}
	if (v[n - 1] == '/') {
		msg(what, wlen, "%s names a directory, not a socket", quote(q, sizeof(q), v));
		return -EINVAL;
	}
	if (n > BD_CONFIG_SOCKET_MAX) {
		msg(what, wlen, "%s is %zu bytes long; a Unix socket path holds at most %u",
		    quote(q, sizeof(q), v), n, BD_CONFIG_SOCKET_MAX);
		return -EINVAL;
	}
	return 0;
}

/*
 * An absolute path with repeated and trailing slashes removed ("/" stays
 * "/"). "." and ".." are refused rather than resolved: lexical ".." is
 * wrong across symlinks, and roots are compared as prefixes.
 */
static int normalize_root(const char *v, char **ret, char *what, size_t wlen)
{
	char q[BD__CONFIG_QBUF];
	size_t n = strlen(v), o = 0;
	char *out;

	if (v[0] != '/') {
		msg(what, wlen, "%s is not an absolute path", quote(q, sizeof(q), v));
		return -EINVAL;
	}
	if (n >= PATH_MAX) {
		msg(what, wlen, "%s is longer than %d bytes", quote(q, sizeof(q), v),
		    PATH_MAX - 1);
		return -EINVAL;
	}
	out = malloc(n + 1);
	if (!out) {
		msg(what, wlen, "out of memory");
		return -ENOMEM;
	}
	for (const char *p = v; *p;) {
		size_t seg;

		while (*p == '/')
			p++;
		seg = strcspn(p, "/");
		if (!seg)
			break;
		if ((seg == 1 && p[0] == '.') || (seg == 2 && p[0] == '.' && p[1] == '.')) {
			msg(what, wlen, "%s has a '.' or '..' component (write the path without them)",
			    quote(q, sizeof(q), v));
			free(out);
			return -EINVAL;
		}
		out[o++] = '/';
		memcpy(out + o, p, seg);
		o += seg;
		p += seg;
	}
	if (!o)
		out[o++] = '/';
	out[o] = '\0';
	*ret = out;
	return 0;
}

/* Append an owned root, dropping duplicates. Takes ownership either way. */
static int roots_add(char ***roots, size_t *n, char *root, char *what, size_t wlen)
{
	char **grown;

	for (size_t i = 0; i < *n; i++) {
		if (!strcmp((*roots)[i], root)) {
			free(root);
			return 0;
		}
	}
	if (*n >= BD_CONFIG_MAX_ROOTS) {
		msg(what, wlen, "more than %u roots", BD_CONFIG_MAX_ROOTS);
		free(root);
		return -EINVAL;
	}
	grown = realloc(*roots, (*n + 1) * sizeof(**roots));
	if (!grown) {
		msg(what, wlen, "out of memory");
		free(root);
		return -ENOMEM;
	}
	grown[(*n)++] = root;
	*roots = grown;
	return 0;
}

void bd__config_roots_free(char **roots, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(roots[i]);
	free(roots);
}

int bd__config_set_str(char **field, const char *v, char *what, size_t wlen)
{
	char *s = strdup(v);

	if (!s) {
		msg(what, wlen, "out of memory");
		return -ENOMEM;
	}
	free(*field);
	*field = s;
	return 0;
}

int bd__config_set_socket(char **field, const char *v, char *what, size_t wlen)
{
	int r = check_socket(v, what, wlen);

	return r < 0 ? r : bd__config_set_str(field, v, what, wlen);
}

int bd__config_add_root(char ***roots, size_t *n, const char *v, char *what, size_t wlen)
{
	char *root;
	int r = normalize_root(v, &root, what, wlen);

	return r < 0 ? r : roots_add(roots, n, root, what, wlen);
}

int bd__config_parse_mode(const char *v, unsigned *ret, char *what, size_t wlen)
{
	char q[BD__CONFIG_QBUF], *end;
	unsigned long m;

	errno = 0;
	m = strtoul(v, &end, 8);
	if (!*v || *v == '-' || *v == '+' || errno || *end || m > 0777) {
		msg(what, wlen, "%s is not an octal file mode (e.g. 0660)",
		    quote(q, sizeof(q), v));
		return -EINVAL;
	}
	*ret = (unsigned)m;
	return 0;
}

/* A user or group: a number, or a name the system knows. */
int bd__config_parse_id(const char *v, bool group, uint32_t **ids, size_t *n, char *what,
		    size_t wlen)
{
	char q[BD__CONFIG_QBUF], *end;
	unsigned long id;
	uint32_t *grown;

	errno = 0;
	id = strtoul(v, &end, 10);
	if (!*v || *end || errno || *v == '-' || *v == '+') {
		struct passwd *pw = group ? NULL : getpwnam(v);
		struct group *gr = group ? getgrnam(v) : NULL;

		if (!pw && !gr) {
			msg(what, wlen, "%s is not a known %s name or number",
			    quote(q, sizeof(q), v), group ? "group" : "user");
			return -EINVAL;
		}
		id = group ? gr->gr_gid : pw->pw_uid;
	}
	if (id >= UINT32_MAX) {
		msg(what, wlen, "%s is out of range", quote(q, sizeof(q), v));
		return -EINVAL;
	}
	if (*n >= BD_CONFIG_MAX_IDS) {
		msg(what, wlen, "more than %u entries", BD_CONFIG_MAX_IDS);
		return -EINVAL;
	}
	grown = realloc(*ids, (*n + 1) * sizeof(**ids));
	if (!grown) {
		msg(what, wlen, "out of memory");
		return -ENOMEM;
	}
	grown[(*n)++] = (uint32_t)id;
	*ids = grown;
	return 0;
}

/* HOST:PORT for the metrics listener: an IPv4 address and a port 1..65535. */
int bd__config_parse_listen(const char *v, char **ret, char *what, size_t wlen)
{
	char q[BD__CONFIG_QBUF], host[64], *end;
	const char *colon = strrchr(v, ':');
	unsigned long port;
	struct in_addr a;

	if (!colon || (size_t)(colon - v) >= sizeof(host)) {
		msg(what, wlen, "%s is not HOST:PORT (e.g. 127.0.0.1:9477)",
		    quote(q, sizeof(q), v));
		return -EINVAL;
	}
	memcpy(host, v, (size_t)(colon - v));
	host[colon - v] = '\0';
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	if (inet_pton(AF_INET, host, &a) != 1 || !colon[1] || *end || errno || port < 1 ||
	    port > 65535) {
		msg(what, wlen, "%s is not HOST:PORT with an IPv4 address (e.g. 127.0.0.1:9477)",
		    quote(q, sizeof(q), v));
		return -EINVAL;
	}
	return bd__config_set_str(ret, v, what, wlen);
}

/* ---- remote datasets ------------------------------------------------------------------ */

/* Printable, no blanks: what may stand in a URL as batchd.conf gives it. */
static bool url_chars(const char *v)
{
	for (const unsigned char *p = (const unsigned char *)v; *p; p++)
		if (*p <= ' ' || *p >= 0x7f)
			return false;
	return true;
}

int bd__config_add_remote(char ***remotes, size_t *n, const char *v, char *what, size_t wlen)
{
	char q[BD__CONFIG_QBUF], *own;
	size_t len = strlen(v);
	const char *host = !strncmp(v, "s3://", 5) ? v + 5 : !strncmp(v, "https://", 8) ? v + 8
			   : !strncmp(v, "http://", 7) ? v + 7 : NULL;

	if (!host || !*host || *host == '/' || !url_chars(v)) {
		msg(what, wlen, "%s is not a remote: give s3://BUCKET/PREFIX or https://HOST/PATH",
		    quote(q, sizeof(q), v));
		return -EINVAL;
	}
	while (len > (size_t)(host - v) && v[len - 1] == '/')
		len--;
	own = strndup(v, len);
	if (!own) {
		msg(what, wlen, "out of memory");
		return -ENOMEM;
	}
	return roots_add(remotes, n, own, what, wlen);
}

int bd__config_set_endpoint(char **field, const char *v, char *what, size_t wlen)
{
	char q[BD__CONFIG_QBUF];
	const char *host = !strncmp(v, "https://", 8) ? v + 8 : !strncmp(v, "http://", 7) ? v + 7
			   : NULL;

	if (!host || !*host || strchr(host, '/') || !url_chars(v)) {
		msg(what, wlen, "%s is not an endpoint: give http(s)://HOST[:PORT], without a path",
		    quote(q, sizeof(q), v));
		return -EINVAL;
	}
	return bd__config_set_str(field, v, what, wlen);
}

int bd__config_parse_addressing(const char *v, int *ret, char *what, size_t wlen)
{
	static const char *const names[] = { "auto", "path", "virtual" };
	char q[BD__CONFIG_QBUF];

	for (int i = 0; i < 3; i++)
		if (!strcmp(v, names[i])) {
			*ret = i;
			return 0;
		}
	msg(what, wlen, "%s is not an addressing: use auto, path (http://endpoint/bucket/key) or "
	    "virtual (http://bucket.endpoint/key)", quote(q, sizeof(q), v));
	return -EINVAL;
}

int bd__config_set_abs_path(char **field, const char *v, char *what, size_t wlen)
{
	char *norm;
	int r = normalize_root(v, &norm, what, wlen);

	if (r < 0)
		return r;
	free(*field);
	*field = norm;
	return 0;
}

int bd__config_parse_chunk(const char *v, uint64_t *ret, char *what, size_t wlen)
{
	char q[BD__CONFIG_QBUF];
	uint64_t n;
	int r = bd__config_parse_size(v, BD_CONFIG_MIN_CHUNK, BD_CONFIG_MAX_CHUNK, &n, what, wlen);

	if (r < 0)
		return r;
	if (n % 4096) {
		msg(what, wlen, "%s is not a multiple of 4K", quote(q, sizeof(q), v));
		return -EINVAL;
	}
	*ret = n;
	return 0;
}
