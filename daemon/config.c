/* SPDX-License-Identifier: MIT */
/*
 * config.c - defaults, the configuration file and the command line (see
 * config.h).
 *
 * inih does the INI syntax, but it is fed through our own line reader
 * because three of its habits would turn a typo into a silently different
 * configuration: a line longer than its buffer is split and the tail parsed
 * as a line of its own; an indented line continues the previous key's value
 * (so an indented `[io]` or `key = v` becomes a value); and anything after
 * a section's `]` is ignored. The reader therefore hands inih one whole
 * line at a time with leading blanks and comments removed, refuses lines
 * that do not fit, checks section headers itself, and counts lines, so
 * every message carries the line number whatever the inih version.
 *
 * A load builds the new values on the side and commits them only when the
 * whole input is valid: a bad file (on SIGHUP, say) leaves the running
 * configuration as it was.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include <ini.h>

#include "config.h"
#include "log.h"
#include "units.h"

/* From the build as a flag (daemon/meson.build, tests/config.build.txt). */
#ifndef BATCHD_VERSION
#error "define BATCHD_VERSION (-DBATCHD_VERSION=\"x.y.z\")"
#endif

#define QUOTE_MAX 80   /* bytes of a value shown in a message */

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

#define ELEMENTSOF(a) (sizeof(a) / sizeof((a)[0]))

const char *bd_config_io_engine_name(bd_config_io_engine e)
{
	return (unsigned)e < ELEMENTSOF(engine_names) ? engine_names[e] : "?";
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

__attribute__((format(printf, 3, 4)))
static void msg(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!buf || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, len, fmt, ap);
	va_end(ap);
}

/*
 * s in single quotes, control bytes and quotes escaped, cut after
 * QUOTE_MAX bytes: values come from files and flags and are echoed to
 * a terminal or the journal.
 */
static const char *quote(char *buf, size_t len, const char *s)
{
	size_t o = 0, i;

	buf[o++] = '\'';
	for (i = 0; s[i] && i < QUOTE_MAX && o + 8 < len; i++) {
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

#define QBUF (QUOTE_MAX * 4 + 8)

/* ---- values ------------------------------------------------------------ */

/*
 * Each parser takes a value as written (file or flag), stores it in *ret
 * only when valid, and otherwise writes "'VALUE' is ... (allowed ...)"
 * into what. @return 0, -EINVAL, -ENOMEM (roots).
 */

static int parse_uint(const char *v, unsigned min, unsigned max, unsigned *ret,
		      char *what, size_t wlen)
{
	char q[QBUF];
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

static int parse_budget(const char *v, uint64_t *ret, char *what, size_t wlen)
{
	char q[QBUF];
	uint64_t n;
	int r;

	r = bp_parse_size(v, &n);
	if (r == -ERANGE) {
		msg(what, wlen, "%s is too large", quote(q, sizeof(q), v));
		return -EINVAL;
	}
	if (r < 0) {
		msg(what, wlen, "%s is not a size (a number with an optional K, M, G or T suffix, e.g. 512M, 4G)",
		    quote(q, sizeof(q), v));
		return -EINVAL;
	}
	if (n < BD_CONFIG_MIN_BUDGET) {
		msg(what, wlen, "%s is below the minimum of 16M", quote(q, sizeof(q), v));
		return -EINVAL;
	}
	*ret = n;
	return 0;
}

static int parse_name(const char *v, const char *const *names, size_t n, int *ret,
		      const char *allowed, char *what, size_t wlen)
{
	char q[QBUF];

	for (size_t i = 0; i < n; i++) {
		if (!strcmp(v, names[i])) {
			*ret = (int)i;
			return 0;
		}
	}
	msg(what, wlen, "%s is not one of %s", quote(q, sizeof(q), v), allowed);
	return -EINVAL;
}

static int parse_engine(const char *v, bd_config_io_engine *ret, char *what, size_t wlen)
{
	int i = 0, r;

	r = parse_name(v, engine_names, ELEMENTSOF(engine_names), &i,
		       "auto, io_uring, pread", what, wlen);
	if (r == 0)
		*ret = (bd_config_io_engine)i;
	return r;
}

static int parse_direct(const char *v, bd_config_direct *ret, char *what, size_t wlen)
{
	int i = 0, r;

	r = parse_name(v, direct_names, ELEMENTSOF(direct_names), &i,
		       "auto, on, off", what, wlen);
	if (r == 0)
		*ret = (bd_config_direct)i;
	return r;
}

static int parse_log_level(const char *v, int *ret, char *what, size_t wlen)
{
	char q[QBUF];
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
	char q[QBUF];
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
	char q[QBUF];
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

static void roots_free(char **roots, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(roots[i]);
	free(roots);
}

static unsigned usable_cpus(void)
{
	cpu_set_t set;
	long n = -1;

	/* The affinity mask, not the machine: containers and cpusets shrink it. */
	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		n = CPU_COUNT(&set);
	if (n <= 0)
		n = sysconf(_SC_NPROCESSORS_ONLN);
	if (n <= 0)
		n = 1;
	return n > (long)BD_CONFIG_MAX_DECODE_THR ? BD_CONFIG_MAX_DECODE_THR : (unsigned)n;
}

/* ---- init / free ------------------------------------------------------- */

void bd_config_init(bd_config *c)
{
	*c = (bd_config){
		.socket = NULL,
		.log_level = BD_CONFIG_DEFAULT_LOG_LEVEL,
		.roots = NULL,
		.nroots = 0,
		.memory_budget = BD_CONFIG_DEFAULT_BUDGET,
		.io_engine = BD_CFG_IO_AUTO,
		.direct = BD_CFG_DIRECT_AUTO,
		.queue_depth = BD_CONFIG_DEFAULT_QD,
		.io_threads = BD_CONFIG_DEFAULT_IO_THR,
		.decode_threads = 0,
		.prefetch = BD_CONFIG_DEFAULT_PREFETCH,
		.max_prefetch = BD_CONFIG_DEFAULT_MAX_PF,
		.socket_mode = 0660,
	};
}

void bd_config_free(bd_config *c)
{
	if (!c)
		return;
	free(c->socket);
	free(c->socket_group);
	free(c->metrics_listen);
	free(c->allow_uids);
	free(c->allow_gids);
	roots_free(c->roots, c->nroots);
	*c = (bd_config){ 0 };
}

/* The new value when one was set, else the old one; the loser is freed. */
static void keep_str(char **mine, char **theirs)
{
	if (*mine)
		free(*theirs);
	else
		*mine = *theirs;
}

static void keep_ids(uint32_t **mine, size_t *n, uint32_t **theirs, size_t *tn)
{
	if (*n) {
		free(*theirs);
	} else {
		free(*mine);
		*mine = *theirs;
		*n = *tn;
	}
}

/*
 * Make next (built from c's scalars plus new allocations) the
 * configuration: each string, id list and the roots of next win when set,
 * else c's are kept. Cannot fail.
 */
static void commit(bd_config *c, bd_config *next)
{
	keep_str(&next->socket, &c->socket);
	keep_str(&next->socket_group, &c->socket_group);
	keep_str(&next->metrics_listen, &c->metrics_listen);
	keep_ids(&next->allow_uids, &next->nallow_uids, &c->allow_uids, &c->nallow_uids);
	keep_ids(&next->allow_gids, &next->nallow_gids, &c->allow_gids, &c->nallow_gids);
	if (next->nroots) {
		roots_free(c->roots, c->nroots);
	} else {
		free(next->roots);
		next->roots = c->roots;
		next->nroots = c->nroots;
	}
	if (!next->decode_threads)
		next->decode_threads = usable_cpus();
	*c = *next;
}

/* c's scalars, none of its allocations. */
static bd_config scalars(const bd_config *c)
{
	bd_config s = *c;

	s.socket = NULL;
	s.roots = NULL;
	s.nroots = 0;
	s.socket_group = NULL;
	s.metrics_listen = NULL;
	s.allow_uids = s.allow_gids = NULL;
	s.nallow_uids = s.nallow_gids = 0;
	return s;
}

/* ---- the file ---------------------------------------------------------- */

enum key_id {
	KEY_SOCKET,
	KEY_LOG_LEVEL,
	KEY_ROOT,
	KEY_BUDGET,
	KEY_ENGINE,
	KEY_DIRECT,
	KEY_QUEUE_DEPTH,
	KEY_IO_THREADS,
	KEY_DECODE_THREADS,
	KEY_PREFETCH,
	KEY_MAX_PREFETCH,
	KEY_SOCKET_MODE,
	KEY_SOCKET_GROUP,
	KEY_SESSIONS_PER_UID,
	KEY_MEMORY_PER_UID,
	KEY_ALLOW_UID,
	KEY_ALLOW_GID,
	KEY_METRICS_LISTEN,
	KEY_LEASE_TIMEOUT,
};

static const struct key {
	const char *section;
	const char *name;
	enum key_id id;
	unsigned min, max;   /* whole-number keys */
} keys[] = {
	{ "daemon", "socket", KEY_SOCKET, 0, 0 },
	{ "daemon", "log_level", KEY_LOG_LEVEL, 0, 0 },
	{ "daemon", "socket_mode", KEY_SOCKET_MODE, 0, 0777 },
	{ "daemon", "socket_group", KEY_SOCKET_GROUP, 0, 0 },
	{ "datasets", "root", KEY_ROOT, 0, 0 },
	{ "memory", "budget", KEY_BUDGET, 0, 0 },
	{ "io", "engine", KEY_ENGINE, 0, 0 },
	{ "io", "direct", KEY_DIRECT, 0, 0 },
	{ "io", "queue_depth", KEY_QUEUE_DEPTH, 1, BD_CONFIG_MAX_QD },
	{ "io", "threads", KEY_IO_THREADS, 1, BD_CONFIG_MAX_IO_THR },
	{ "decode", "threads", KEY_DECODE_THREADS, 0, BD_CONFIG_MAX_DECODE_THR },
	{ "session", "prefetch", KEY_PREFETCH, 1, BD_CONFIG_MAX_PREFETCH },
	{ "session", "max_prefetch", KEY_MAX_PREFETCH, 1, BD_CONFIG_MAX_PREFETCH },
	{ "session", "lease_timeout", KEY_LEASE_TIMEOUT, 0, 604800 },
	{ "limits", "sessions_per_uid", KEY_SESSIONS_PER_UID, 0, 4096 },
	{ "limits", "memory_per_uid", KEY_MEMORY_PER_UID, 0, 0 },
	{ "access", "allow_uid", KEY_ALLOW_UID, 0, 0 },
	{ "access", "allow_gid", KEY_ALLOW_GID, 0, 0 },
	{ "metrics", "listen", KEY_METRICS_LISTEN, 0, 0 },
};

static bool section_known(const char *section)
{
	for (size_t i = 0; i < ELEMENTSOF(keys); i++)
		if (!strcmp(keys[i].section, section))
			return true;
	return false;
}

static const struct key *key_find(const char *section, const char *name)
{
	for (size_t i = 0; i < ELEMENTSOF(keys); i++)
		if (!strcmp(keys[i].section, section) && !strcmp(keys[i].name, name))
			return &keys[i];
	return NULL;
}

/* "[daemon] [datasets] ..." or "engine, direct, ..." for section. */
static void known_list(char *buf, size_t len, const char *section)
{
	size_t o = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < ELEMENTSOF(keys) && o < len; i++) {
		const struct key *k = &keys[i];
		int n;

		if (section && strcmp(k->section, section))
			continue;
		if (!section && i && !strcmp(k->section, keys[i - 1].section))
			continue;
		if (section)
			n = snprintf(buf + o, len - o, "%s%s", o ? ", " : "", k->name);
		else
			n = snprintf(buf + o, len - o, "%s[%s]", o ? " " : "", k->section);
		if (n < 0)
			break;
		o += (size_t)n;
	}
}

static unsigned *uint_field(bd_config *c, enum key_id id)
{
	switch (id) {
	case KEY_QUEUE_DEPTH:
		return &c->queue_depth;
	case KEY_IO_THREADS:
		return &c->io_threads;
	case KEY_DECODE_THREADS:
		return &c->decode_threads;
	case KEY_PREFETCH:
		return &c->prefetch;
	case KEY_MAX_PREFETCH:
		return &c->max_prefetch;
	case KEY_SESSIONS_PER_UID:
		return &c->sessions_per_uid;
	case KEY_LEASE_TIMEOUT:
		return &c->lease_timeout;
	default:
		return NULL;
	}
}

static int set_str(char **field, const char *v, char *what, size_t wlen)
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

static int parse_mode(const char *v, unsigned *ret, char *what, size_t wlen)
{
	char q[QBUF], *end;
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
static int parse_id(const char *v, bool group, uint32_t **ids, size_t *n, char *what,
		    size_t wlen)
{
	char q[QBUF], *end;
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
static int parse_listen(const char *v, char **ret, char *what, size_t wlen)
{
	char q[QBUF], host[64], *end;
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
	return set_str(ret, v, what, wlen);
}

/* Set one key of next from its value. @return 0, -EINVAL, -ENOMEM. */
static int apply(bd_config *next, const struct key *k, const char *v,
		 char *what, size_t wlen)
{
	char *s;
	int r;

	switch (k->id) {
	case KEY_SOCKET:
		r = check_socket(v, what, wlen);
		if (r < 0)
			return r;
		return set_str(&next->socket, v, what, wlen);
	case KEY_LOG_LEVEL:
		return parse_log_level(v, &next->log_level, what, wlen);
	case KEY_ROOT:
		r = normalize_root(v, &s, what, wlen);
		if (r < 0)
			return r;
		return roots_add(&next->roots, &next->nroots, s, what, wlen);
	case KEY_BUDGET:
		return parse_budget(v, &next->memory_budget, what, wlen);
	case KEY_ENGINE:
		return parse_engine(v, &next->io_engine, what, wlen);
	case KEY_DIRECT:
		return parse_direct(v, &next->direct, what, wlen);
	case KEY_SOCKET_MODE:
		return parse_mode(v, &next->socket_mode, what, wlen);
	case KEY_SOCKET_GROUP:
		if (!*v) {
			msg(what, wlen, "empty group");
			return -EINVAL;
		}
		return set_str(&next->socket_group, v, what, wlen);
	case KEY_MEMORY_PER_UID:
		if (!strcmp(v, "0")) {
			next->memory_per_uid = 0;
			return 0;
		}
		return parse_budget(v, &next->memory_per_uid, what, wlen);
	case KEY_ALLOW_UID:
		return parse_id(v, false, &next->allow_uids, &next->nallow_uids, what, wlen);
	case KEY_ALLOW_GID:
		return parse_id(v, true, &next->allow_gids, &next->nallow_gids, what, wlen);
	case KEY_METRICS_LISTEN:
		return parse_listen(v, &next->metrics_listen, what, wlen);
	default:
		return parse_uint(v, k->min, k->max, uint_field(next, k->id), what, wlen);
	}
}

struct load {
	const char *name;       /* for messages */
	const char *text;
	size_t len, pos;
	int lineno;             /* of the line last handed to inih */
	bd_config next;
	int prefetch_line, max_prefetch_line;
	int err_line;           /* first error (0: none yet) */
	int err_errno;
	char *err;
	size_t errlen;
};

__attribute__((format(printf, 3, 4)))
static void load_fail(struct load *l, int r, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (l->err_line)
		return;   /* only the first error is reported */
	l->err_line = l->lineno;
	l->err_errno = r;
	if (!l->err || !l->errlen)
		return;
	if (r == -ENOMEM) {
		msg(l->err, l->errlen, "%s: out of memory", l->name);
		return;
	}
	n = snprintf(l->err, l->errlen, "%s:%d: ", l->name, l->lineno);
	if (n < 0 || (size_t)n >= l->errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(l->err + n, l->errlen - (size_t)n, fmt, ap);
	va_end(ap);
}

static bool blank(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\v' || ch == '\f';
}

/* End of the line's content: before a comment (';' or '#' at the start or after a blank). */
static const char *content_end(const char *p, const char *end)
{
	for (const char *s = p; s < end; s++)
		if ((*s == ';' || *s == '#') && (s == p || blank(s[-1])))
			return s;
	return end;
}

/* p..end is a "[...]" line without comments or outer blanks. */
static int check_header(struct load *l, const char *p, const char *end)
{
	const char *rb = memchr(p, ']', (size_t)(end - p));
	char name[64], q[QBUF], known[128];
	size_t n;

	if (!rb)
		return 0;   /* no ']': inih reports the syntax error */
	if (rb + 1 != end) {
		load_fail(l, -EINVAL, "text after ']' in a section header");
		return -EINVAL;
	}
	n = (size_t)(rb - p - 1);
	if (n >= sizeof(name))
		n = sizeof(name) - 1;
	memcpy(name, p + 1, n);
	name[n] = '\0';
	if (!section_known(name)) {
		known_list(known, sizeof(known), NULL);
		load_fail(l, -EINVAL, "unknown section %s (known: %s)",
			  quote(q, sizeof(q), name), known);
		return -EINVAL;
	}
	return 0;
}

/*
 * inih's fgets-style reader: one whole line per call, cleaned (see the top
 * of this file), or NULL at the end or once an error is recorded, which
 * stops the parse there.
 */
static char *line_reader(char *str, int num, void *stream)
{
	struct load *l = stream;
	const char *p, *end, *nl;
	size_t n;

	if (l->err_line || l->pos >= l->len)
		return NULL;
	p = l->text + l->pos;
	nl = memchr(p, '\n', l->len - l->pos);
	end = nl ? nl : l->text + l->len;
	l->pos = (size_t)(end - l->text) + (nl ? 1 : 0);
	l->lineno++;

	if (memchr(p, '\0', (size_t)(end - p))) {
		load_fail(l, -EINVAL, "NUL byte in line");
		return NULL;
	}
	if (l->lineno == 1 && end - p >= 3 && !memcmp(p, "\xef\xbb\xbf", 3))
		p += 3;   /* UTF-8 byte order mark */
	while (p < end && blank(*p))
		p++;
	end = content_end(p, end);
	while (end > p && blank(end[-1]))
		end--;
	if (p < end && *p == '[' && check_header(l, p, end) < 0)
		return NULL;

	n = (size_t)(end - p);
	if (num < 2 || n > (size_t)num - 2) {
		load_fail(l, -EINVAL, "line is %zu characters long (at most %d, not counting blanks and comments)",
			  n, num < 2 ? 0 : num - 2);
		return NULL;
	}
	memcpy(str, p, n);
	str[n] = '\n';
	str[n + 1] = '\0';
	return str;
}

static int handle_key(struct load *l, const char *section, const char *name,
		      const char *value)
{
	char what[512], q[QBUF], known[128];
	const struct key *k;
	int r;

	if (l->err_line)
		return 0;
	if (!*section) {
		load_fail(l, -EINVAL, "%s is outside any section",
			  quote(q, sizeof(q), name));
		return 0;
	}
	k = key_find(section, name);
	if (!k) {
		if (!section_known(section)) {
			/* Headers are checked by the reader; this is a fallback. */
			known_list(known, sizeof(known), NULL);
			load_fail(l, -EINVAL, "unknown section %s (known: %s)",
				  quote(q, sizeof(q), section), known);
		} else {
			known_list(known, sizeof(known), section);
			load_fail(l, -EINVAL, "unknown key %s in [%s] (known: %s)",
				  quote(q, sizeof(q), name), section, known);
		}
		return 0;
	}
	r = apply(&l->next, k, value, what, sizeof(what));
	if (r < 0) {
		load_fail(l, r, "[%s] %s: %s", k->section, k->name, what);
		return 0;
	}
	if (k->id == KEY_PREFETCH)
		l->prefetch_line = l->lineno;
	else if (k->id == KEY_MAX_PREFETCH)
		l->max_prefetch_line = l->lineno;
	return 1;
}

#if INI_HANDLER_LINENO
static int key_handler(void *user, const char *section, const char *name,
		       const char *value, int lineno)
{
	(void)lineno;   /* ours counts the lines inih was actually given */
	return handle_key(user, section, name, value);
}
#else
static int key_handler(void *user, const char *section, const char *name,
		       const char *value)
{
	return handle_key(user, section, name, value);
}
#endif

/* Checks across keys, once the whole file is read. */
static void load_check(struct load *l)
{
	const bd_config *n = &l->next;

	if (n->prefetch <= n->max_prefetch)
		return;
	/* Blame the later of the two lines; the file set at least one of them. */
	if (l->prefetch_line || l->max_prefetch_line)
		l->lineno = l->prefetch_line > l->max_prefetch_line ? l->prefetch_line
								    : l->max_prefetch_line;
	load_fail(l, -EINVAL, "[session] prefetch = %u is above max_prefetch = %u",
		  n->prefetch, n->max_prefetch);
}

int bd_config_load_string(bd_config *c, const char *name, const char *text, size_t len,
			  char *err, size_t errlen)
{
	struct load l = {
		.name = name,
		.text = text,
		.len = len,
		.err = err,
		.errlen = errlen,
	};
	int r;

	if (len > BD_CONFIG_MAX_FILE) {
		msg(err, errlen, "%s: larger than %llu bytes", name,
		    (unsigned long long)BD_CONFIG_MAX_FILE);
		return -EFBIG;
	}
	l.next = scalars(c);
	r = ini_parse_stream(line_reader, &l, key_handler, &l);
	if (r == -2) {
		bd_config_free(&l.next);
		msg(err, errlen, "%s: out of memory", name);
		return -ENOMEM;
	}
	/*
	 * inih returns the first line it rejected; a syntax error it found
	 * before our first error wins.
	 */
	if (r > 0 && (!l.err_line || r < l.err_line)) {
		l.err_line = 0;
		l.lineno = r;
		load_fail(&l, -EINVAL, "expected '[section]' or 'key = value'");
	}
	if (!l.err_line)
		load_check(&l);
	if (l.err_line) {
		bd_config_free(&l.next);
		return l.err_errno;
	}
	commit(c, &l.next);
	return 0;
}

/* The whole file, up to BD_CONFIG_MAX_FILE + 1 bytes. Caller frees *ret. */
static int read_file(const char *path, char **ret, size_t *ret_len)
{
	size_t cap = 4096, len = 0;
	char *buf = NULL, *grown;
	int fd, r = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return -errno;
	for (;;) {
		ssize_t n;

		if (!buf || len == cap) {
			if (buf)
				cap *= 2;
			grown = realloc(buf, cap);
			if (!grown) {
				r = -ENOMEM;
				break;
			}
			buf = grown;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			break;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len > BD_CONFIG_MAX_FILE)
			break;   /* enough to know it is too big */
	}
	close(fd);
	if (r < 0) {
		free(buf);
		return r;
	}
	*ret = buf;
	*ret_len = len;
	return 0;
}

int bd_config_load_file(bd_config *c, const char *path, char *err, size_t errlen)
{
	size_t len = 0;
	char *text = NULL;
	int r;

	r = read_file(path, &text, &len);
	if (r < 0) {
		msg(err, errlen, "%s: %s", path, strerror(-r));
		return r;
	}
	r = bd_config_load_string(c, path, text, len, err, errlen);
	free(text);
	return r;
}

/* ---- the command line -------------------------------------------------- */

enum {
	OPT_SOCKET = 0x100,
	OPT_ROOT,
	OPT_MEMORY,
	OPT_IO_ENGINE,
	OPT_DIRECT,
	OPT_LOG_LEVEL,
};

static const struct option options[] = {
	{ "config", required_argument, NULL, 'c' },
	{ "socket", required_argument, NULL, OPT_SOCKET },
	{ "root", required_argument, NULL, OPT_ROOT },
	{ "memory", required_argument, NULL, OPT_MEMORY },
	{ "io-engine", required_argument, NULL, OPT_IO_ENGINE },
	{ "direct", required_argument, NULL, OPT_DIRECT },
	{ "log-level", required_argument, NULL, OPT_LOG_LEVEL },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

static const char usage[] =
	"Usage: batchd [OPTION]...\n"
	"Plan, read, decompress and stage training batches for local trainers.\n"
	"\n"
	"  -c, --config FILE       read FILE first; the options below override it\n"
	"      --socket PATH       control socket (default: $RUNTIME_DIRECTORY/batchd.sock,\n"
	"                          else /run/batchd/batchd.sock as root,\n"
	"                          else $XDG_RUNTIME_DIR/batchd.sock)\n"
	"      --root DIR          serve datasets below DIR (absolute); repeat for more;\n"
	"                          replaces the roots of the file\n"
	"      --memory SIZE       memory budget, e.g. 512M, 4G (at least 16M)\n"
	"      --io-engine ENGINE  auto, io_uring or pread\n"
	"      --direct MODE       O_DIRECT reads: auto, on or off\n"
	"      --log-level LEVEL   err, warning, notice, info or debug\n"
	"  -h, --help              show this help and exit\n"
	"  -V, --version           show the version and exit\n";

/* Flags seen, validated, not yet applied. */
struct flags {
	const char *config;
	char *socket;
	char **roots;
	size_t nroots;
	bool budget_set, engine_set, direct_set, level_set;
	uint64_t budget;
	bd_config_io_engine engine;
	bd_config_direct direct;
	int level;
};

static void flags_free(struct flags *f)
{
	free(f->socket);
	roots_free(f->roots, f->nroots);
}

static const char *opt_name(int val)
{
	switch (val) {
	case 'c':
		return "-c";
	case 'h':
		return "--help";
	case 'V':
		return "--version";
	case OPT_SOCKET:
		return "--socket";
	case OPT_ROOT:
		return "--root";
	case OPT_MEMORY:
		return "--memory";
	case OPT_IO_ENGINE:
		return "--io-engine";
	case OPT_DIRECT:
		return "--direct";
	case OPT_LOG_LEVEL:
		return "--log-level";
	default:
		return NULL;
	}
}

/* Validate one flag's argument into f. @return 0, -EINVAL, -ENOMEM. */
static int parse_flag(struct flags *f, int opt, const char *arg, char *what, size_t wlen)
{
	char *s;
	int r;

	switch (opt) {
	case 'c':
		f->config = arg;
		return 0;
	case OPT_SOCKET:
		r = check_socket(arg, what, wlen);
		if (r < 0)
			return r;
		return set_str(&f->socket, arg, what, wlen);
	case OPT_ROOT:
		r = normalize_root(arg, &s, what, wlen);
		if (r < 0)
			return r;
		return roots_add(&f->roots, &f->nroots, s, what, wlen);
	case OPT_MEMORY:
		f->budget_set = true;
		return parse_budget(arg, &f->budget, what, wlen);
	case OPT_IO_ENGINE:
		f->engine_set = true;
		return parse_engine(arg, &f->engine, what, wlen);
	case OPT_DIRECT:
		f->direct_set = true;
		return parse_direct(arg, &f->direct, what, wlen);
	case OPT_LOG_LEVEL:
		f->level_set = true;
		return parse_log_level(arg, &f->level, what, wlen);
	default:
		return -EINVAL;
	}
}

/* Fold validated flags into c; moves f's allocations. Cannot fail. */
static void flags_apply(struct flags *f, bd_config *c)
{
	bd_config next = scalars(c);

	next.socket = f->socket;
	next.roots = f->roots;
	next.nroots = f->nroots;
	f->socket = NULL;
	f->roots = NULL;
	f->nroots = 0;
	if (f->budget_set)
		next.memory_budget = f->budget;
	if (f->engine_set)
		next.io_engine = f->engine;
	if (f->direct_set)
		next.direct = f->direct;
	if (f->level_set)
		next.log_level = f->level;
	commit(c, &next);
}

int bd_config_from_args(bd_config *c, int argc, char **argv, char *err, size_t errlen)
{
	struct flags f = { 0 };
	char what[512];
	const char *flag;
	int opt, r = 0;

	/* Fresh getopt state (GNU: optind 0 reinitializes); our own messages. */
	optind = 0;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, "+:c:hV", options, NULL)) != -1) {
		switch (opt) {
		case 'h':
			fputs(usage, stdout);
			r = 1;
			goto out;
		case 'V':
			printf("batchd %s\n", BATCHD_VERSION);
			r = 1;
			goto out;
		case ':':
			flag = opt_name(optopt);
			msg(err, errlen, "%s: needs an argument", flag ? flag : argv[optind - 1]);
			r = -EINVAL;
			goto out;
		case '?':
			flag = optopt ? opt_name(optopt) : NULL;
			if (flag)
				msg(err, errlen, "%s: takes no argument", flag);
			else if (optopt)
				msg(err, errlen, "unknown option '-%c' (see --help)", optopt);
			else
				msg(err, errlen, "unknown option '%s' (see --help)",
				    argv[optind - 1]);
			r = -EINVAL;
			goto out;
		default:
			r = parse_flag(&f, opt, optarg, what, sizeof(what));
			if (r < 0) {
				msg(err, errlen, "%s: %s", opt_name(opt), what);
				goto out;
			}
		}
	}
	if (optind < argc) {
		char q[QBUF];

		msg(err, errlen, "unexpected argument %s (see --help)",
		    quote(q, sizeof(q), argv[optind]));
		r = -EINVAL;
		goto out;
	}
	if (f.config) {
		r = bd_config_load_file(c, f.config, err, errlen);
		if (r < 0)
			goto out;
	}
	flags_apply(&f, c);
out:
	flags_free(&f);
	return r;
}

/* ---- default socket ---------------------------------------------------- */

/* dir (n bytes, trailing slashes dropped) + "/batchd.sock" into buf. */
static int socket_in(char *buf, size_t len, const char *dir, size_t n)
{
	static const char leaf[] = "/batchd.sock";
	size_t total;

	while (n > 1 && dir[n - 1] == '/')
		n--;
	if (n == 1)
		n = 0;   /* "/" */
	total = n + sizeof(leaf) - 1;
	if (total > BD_CONFIG_SOCKET_MAX)
		return -ENAMETOOLONG;
	if (total >= len)
		return -ENOBUFS;
	memcpy(buf, dir, n);
	memcpy(buf + n, leaf, sizeof(leaf));
	return 0;
}

int bd_config_default_socket(char *buf, size_t len)
{
	const char *dir;

	/* secure_getenv: a setuid or file-capability batchd ignores these. */
	dir = secure_getenv("RUNTIME_DIRECTORY");
	if (dir && dir[0] == '/')
		return socket_in(buf, len, dir, strcspn(dir, ":"));
	if (geteuid() == 0)
		return socket_in(buf, len, "/run/batchd", strlen("/run/batchd"));
	dir = secure_getenv("XDG_RUNTIME_DIR");
	if (dir && dir[0] == '/')
		return socket_in(buf, len, dir, strlen(dir));
	return -ENOENT;
}
