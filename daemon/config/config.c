/* SPDX-License-Identifier: MIT */
/*
 * config.c - defaults, the configuration file, and how a new
 * configuration replaces the old one (see config.h). The command line is
 * config_args.c; what each value may be is config_value.c.
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
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ini.h>

#include "config_parse.h"

/* ---- init / free ------------------------------------------------------- */

void bd_config_init(bd_config *c)
{
	*c = (bd_config){
		.socket = NULL,
		.log_level = BD_CONFIG_DEFAULT_LOG_LEVEL,
		.roots = NULL,
		.nroots = 0,
		.memory_budget = BD_CONFIG_DEFAULT_BUDGET,
		.cache_size = BD_CONFIG_CACHE_AUTO,
		.tier = BD_CFG_TIER_AUTO,
		.io_engine = BD_CFG_IO_AUTO,
		.direct = BD_CFG_DIRECT_AUTO,
		.queue_depth = BD_CONFIG_DEFAULT_QD,
		.io_threads = BD_CONFIG_DEFAULT_IO_THR,
		.decode_threads = 0,
		.decode_autotune = true,
		.stream_first_pass = true,
		.prefetch = BD_CONFIG_DEFAULT_PREFETCH,
		.max_prefetch = BD_CONFIG_DEFAULT_MAX_PF,
		.socket_mode = 0660,
		.client_queue = BD_CONFIG_DEFAULT_CLIENT_Q,
		.handshake_timeout = BD_CONFIG_DEFAULT_HANDSHAKE,
		.connections_per_uid = BD_CONFIG_DEFAULT_CONN_UID,
		.max_connections = BD_CONFIG_DEFAULT_MAX_CONN,
		.requests_per_uid = BD_CONFIG_DEFAULT_REQ_UID,
		.gpu_interval = BD_CONFIG_DEFAULT_GPU_INTERVAL,
		.remote_requests = BD_CONFIG_DEFAULT_REMOTE_REQ,
		.remote_retries = BD_CONFIG_DEFAULT_RETRIES,
		.remote_timeout = BD_CONFIG_DEFAULT_TIMEOUT,
		.remote_min_rate = BD_CONFIG_DEFAULT_MIN_RATE,
		.cache_max_size = BD_CONFIG_DEFAULT_CACHE_MAX,
		.image_max_pixels = BD_CONFIG_DEFAULT_IMAGE_PIXELS,
		.cache_chunk = BD_CONFIG_DEFAULT_CHUNK,
	};
}

void bd_config_free(bd_config *c)
{
	if (!c)
		return;
	free(c->file);
	free(c->socket);
	free(c->socket_group);
	free(c->metrics_listen);
	free(c->allow_uids);
	free(c->allow_gids);
	free(c->admin_uids);
	free(c->admin_gids);
	bd__config_roots_free(c->roots, c->nroots);
	free(c->root_lines);
	bd__config_roots_free(c->remotes, c->nremotes);
	free(c->remote_endpoint);
	free(c->remote_region);
	free(c->remote_credentials);
	free(c->remote_profile);
	free(c->cache_dir);
	*c = (bd_config){ 0 };
}

/* ---- a new configuration ------------------------------------------------ */

/* What [decode] threads = 0 stands for: the CPUs this process may run on. */
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
void bd__config_commit(bd_config *c, bd_config *next)
{
	keep_str(&next->file, &c->file);
	keep_str(&next->socket, &c->socket);
	keep_str(&next->socket_group, &c->socket_group);
	keep_str(&next->metrics_listen, &c->metrics_listen);
	keep_str(&next->remote_endpoint, &c->remote_endpoint);
	keep_str(&next->remote_region, &c->remote_region);
	keep_str(&next->remote_credentials, &c->remote_credentials);
	keep_str(&next->remote_profile, &c->remote_profile);
	keep_str(&next->cache_dir, &c->cache_dir);
	if (next->nremotes) {
		bd__config_roots_free(c->remotes, c->nremotes);
	} else {
		free(next->remotes);
		next->remotes = c->remotes;
		next->nremotes = c->nremotes;
	}
	keep_ids(&next->allow_uids, &next->nallow_uids, &c->allow_uids, &c->nallow_uids);
	keep_ids(&next->allow_gids, &next->nallow_gids, &c->allow_gids, &c->nallow_gids);
	keep_ids(&next->admin_uids, &next->nadmin_uids, &c->admin_uids, &c->nadmin_uids);
	keep_ids(&next->admin_gids, &next->nadmin_gids, &c->admin_gids, &c->nadmin_gids);
	/* The roots and the lines they came from travel together. */
	if (next->nroots) {
		bd__config_roots_free(c->roots, c->nroots);
		free(c->root_lines);
	} else {
		free(next->roots);
		free(next->root_lines);
		next->roots = c->roots;
		next->nroots = c->nroots;
		next->root_lines = c->root_lines;
	}
	if (!next->decode_threads)
		next->decode_threads = usable_cpus();
	*c = *next;
}

/* c's scalars, none of its allocations. */
bd_config bd__config_scalars(const bd_config *c)
{
	bd_config s = *c;

	s.file = NULL;
	s.socket = NULL;
	s.roots = NULL;
	s.nroots = 0;
	s.root_lines = NULL;
	s.socket_group = NULL;
	s.metrics_listen = NULL;
	s.remotes = NULL;
	s.nremotes = 0;
	s.remote_endpoint = s.remote_region = s.remote_credentials = s.remote_profile = NULL;
	s.cache_dir = NULL;
	s.allow_uids = s.allow_gids = NULL;
	s.nallow_uids = s.nallow_gids = 0;
	s.admin_uids = s.admin_gids = NULL;
	s.nadmin_uids = s.nadmin_gids = 0;
	return s;
}

/* ---- the file ---------------------------------------------------------- */

enum key_id {
	KEY_SOCKET,
	KEY_LOG_LEVEL,
	KEY_ROOT,
	KEY_BUDGET,
	KEY_CACHE,
	KEY_TIER,
	KEY_ENGINE,
	KEY_DIRECT,
	KEY_FIRST_PASS,
	KEY_QUEUE_DEPTH,
	KEY_SESSION_BLOCKS,
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
	KEY_CLIENT_QUEUE,
	KEY_HANDSHAKE_TIMEOUT,
	KEY_CONNECTIONS_PER_UID,
	KEY_MAX_CONNECTIONS,
	KEY_REQUESTS_PER_UID,
	KEY_ADMIN_UID,
	KEY_ADMIN_GID,
	KEY_METRICS_SESSIONS,
	KEY_DECODE_AUTOTUNE,
	KEY_GPU_HOUR_PRICE,
	KEY_GPU_INTERVAL,
	KEY_REMOTE,
	KEY_REMOTE_ENDPOINT,
	KEY_REMOTE_REGION,
	KEY_REMOTE_ADDRESSING,
	KEY_REMOTE_CREDENTIALS,
	KEY_REMOTE_PROFILE,
	KEY_REMOTE_REQUESTS,
	KEY_REMOTE_RETRIES,
	KEY_REMOTE_TIMEOUT,
	KEY_REMOTE_MIN_RATE,
	KEY_CACHE_DIR,
	KEY_CACHE_MAX_SIZE,
	KEY_CACHE_CHUNK,
	KEY_IMAGE_MAX_PIXELS,
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
	{ "datasets", "remote", KEY_REMOTE, 0, 0 },
	{ "memory", "budget", KEY_BUDGET, 0, 0 },
	{ "memory", "cache", KEY_CACHE, 0, 0 },
	{ "memory", "tier", KEY_TIER, 0, 0 },
	{ "io", "engine", KEY_ENGINE, 0, 0 },
	{ "io", "direct", KEY_DIRECT, 0, 0 },
	{ "io", "first_pass", KEY_FIRST_PASS, 0, 0 },
	{ "io", "queue_depth", KEY_QUEUE_DEPTH, 1, BD_CONFIG_MAX_QD },
	{ "io", "session_blocks", KEY_SESSION_BLOCKS, 0, 65536 },
	{ "io", "threads", KEY_IO_THREADS, 1, BD_CONFIG_MAX_IO_THR },
	{ "decode", "threads", KEY_DECODE_THREADS, 0, BD_CONFIG_MAX_DECODE_THR },
	{ "decode", "autotune", KEY_DECODE_AUTOTUNE, 0, 0 },
	{ "images", "max_pixels", KEY_IMAGE_MAX_PIXELS, 0, 0 },
	{ "session", "prefetch", KEY_PREFETCH, 1, BD_CONFIG_MAX_PREFETCH },
	{ "session", "max_prefetch", KEY_MAX_PREFETCH, 1, BD_CONFIG_MAX_PREFETCH },
	{ "session", "lease_timeout", KEY_LEASE_TIMEOUT, 0, 604800 },
	{ "limits", "sessions_per_uid", KEY_SESSIONS_PER_UID, 0, 4096 },
	{ "limits", "memory_per_uid", KEY_MEMORY_PER_UID, 0, 0 },
	{ "limits", "client_queue", KEY_CLIENT_QUEUE, 0, 0 },
	{ "limits", "handshake_timeout", KEY_HANDSHAKE_TIMEOUT, 0, BD_CONFIG_MAX_HANDSHAKE },
	{ "limits", "connections_per_uid", KEY_CONNECTIONS_PER_UID, 0, BD_CONFIG_MAX_CONN },
	{ "limits", "max_connections", KEY_MAX_CONNECTIONS, 1, BD_CONFIG_MAX_CONN },
	{ "limits", "requests_per_uid", KEY_REQUESTS_PER_UID, 0, BD_CONFIG_MAX_REQ_UID },
	{ "access", "allow_uid", KEY_ALLOW_UID, 0, 0 },
	{ "access", "allow_gid", KEY_ALLOW_GID, 0, 0 },
	{ "access", "admin_uid", KEY_ADMIN_UID, 0, 0 },
	{ "access", "admin_gid", KEY_ADMIN_GID, 0, 0 },
	{ "metrics", "listen", KEY_METRICS_LISTEN, 0, 0 },
	{ "metrics", "sessions", KEY_METRICS_SESSIONS, 0, 0 },
	{ "metrics", "gpu_hour_price", KEY_GPU_HOUR_PRICE, 0, 0 },
	{ "metrics", "gpu_interval", KEY_GPU_INTERVAL, 0, BD_CONFIG_MAX_GPU_INTERVAL },
	{ "remote", "endpoint", KEY_REMOTE_ENDPOINT, 0, 0 },
	{ "remote", "region", KEY_REMOTE_REGION, 0, 0 },
	{ "remote", "addressing", KEY_REMOTE_ADDRESSING, 0, 0 },
	{ "remote", "credentials", KEY_REMOTE_CREDENTIALS, 0, 0 },
	{ "remote", "profile", KEY_REMOTE_PROFILE, 0, 0 },
	{ "remote", "requests", KEY_REMOTE_REQUESTS, 1, BD_CONFIG_MAX_REMOTE_REQ },
	{ "remote", "retries", KEY_REMOTE_RETRIES, 0, BD_CONFIG_MAX_RETRIES },
	{ "remote", "timeout", KEY_REMOTE_TIMEOUT, 1, BD_CONFIG_MAX_TIMEOUT },
	{ "remote", "min_rate", KEY_REMOTE_MIN_RATE, 0, 0 },
	{ "cache", "dir", KEY_CACHE_DIR, 0, 0 },
	{ "cache", "max_size", KEY_CACHE_MAX_SIZE, 0, 0 },
	{ "cache", "chunk", KEY_CACHE_CHUNK, 0, 0 },
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
	case KEY_SESSION_BLOCKS:
		return &c->session_blocks;
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
	case KEY_GPU_INTERVAL:
		return &c->gpu_interval;
	case KEY_HANDSHAKE_TIMEOUT:
		return &c->handshake_timeout;
	case KEY_CONNECTIONS_PER_UID:
		return &c->connections_per_uid;
	case KEY_MAX_CONNECTIONS:
		return &c->max_connections;
	case KEY_REQUESTS_PER_UID:
		return &c->requests_per_uid;
	case KEY_REMOTE_REQUESTS:
		return &c->remote_requests;
	case KEY_REMOTE_RETRIES:
		return &c->remote_retries;
	case KEY_REMOTE_TIMEOUT:
		return &c->remote_timeout;
	default:
		return NULL;
	}
}

/* [metrics] gpu_hour_price: a plain decimal number, finite and >= 0 ("2.50"). */
static int parse_price(const char *v, double *ret, char *what, size_t wlen)
{
	char q[BD__CONFIG_QBUF], *end;
	double d;

	d = strtod(v, &end);
	if (!*v || *end || end == v) {
		bd__config_msg(what, wlen, "%s is not a number (a GPU-hour's price, e.g. 2.50)",
			       bd__config_quote(q, sizeof(q), v));
		return -EINVAL;
	}
	if (!isfinite(d) || d < 0) {
		bd__config_msg(what, wlen, "%s is not a price: give a finite number >= 0 (0: no cost "
			       "figures)", bd__config_quote(q, sizeof(q), v));
		return -EINVAL;
	}
	*ret = d == 0 ? 0 : d;   /* "-0" is 0 */
	return 0;
}

/* Set one key of next from its value. @return 0, -EINVAL, -ENOMEM. */
static int apply(bd_config *next, const struct key *k, const char *v,
		 char *what, size_t wlen)
{
	switch (k->id) {
	case KEY_SOCKET:
		return bd__config_set_socket(&next->socket, v, what, wlen);
	case KEY_LOG_LEVEL:
		return bd__config_parse_log_level(v, &next->log_level, what, wlen);
	case KEY_ROOT:
		return bd__config_add_root(&next->roots, &next->nroots, v, what, wlen);
	case KEY_BUDGET:
		return bd__config_parse_budget(v, &next->memory_budget, what, wlen);
	case KEY_CACHE:
		return bd__config_parse_cache(v, &next->cache_size, what, wlen);
	case KEY_TIER:
		return bd__config_parse_tier(v, &next->tier, what, wlen);
	case KEY_ENGINE:
		return bd__config_parse_engine(v, &next->io_engine, what, wlen);
	case KEY_DIRECT:
		return bd__config_parse_direct(v, &next->direct, what, wlen);
	case KEY_SOCKET_MODE:
		return bd__config_parse_mode(v, &next->socket_mode, what, wlen);
	case KEY_SOCKET_GROUP:
		if (!*v) {
			bd__config_msg(what, wlen, "empty group");
			return -EINVAL;
		}
		return bd__config_set_str(&next->socket_group, v, what, wlen);
	case KEY_MEMORY_PER_UID:
		if (!strcmp(v, "0")) {
			next->memory_per_uid = 0;
			return 0;
		}
		return bd__config_parse_budget(v, &next->memory_per_uid, what, wlen);
	case KEY_ALLOW_UID:
		return bd__config_parse_id(v, false, &next->allow_uids, &next->nallow_uids, what,
					   wlen);
	case KEY_ALLOW_GID:
		return bd__config_parse_id(v, true, &next->allow_gids, &next->nallow_gids, what,
					   wlen);
	case KEY_ADMIN_UID:
		return bd__config_parse_id(v, false, &next->admin_uids, &next->nadmin_uids, what,
					   wlen);
	case KEY_ADMIN_GID:
		return bd__config_parse_id(v, true, &next->admin_gids, &next->nadmin_gids, what,
					   wlen);
	case KEY_CLIENT_QUEUE:
		return bd__config_parse_size(v, BD_CONFIG_MIN_CLIENT_Q, BD_CONFIG_MAX_CLIENT_Q,
					     &next->client_queue, what, wlen);
	case KEY_METRICS_LISTEN:
		return bd__config_parse_listen(v, &next->metrics_listen, what, wlen);
	case KEY_METRICS_SESSIONS:
		return bd__config_parse_bool(v, &next->metrics_sessions, what, wlen);
	case KEY_DECODE_AUTOTUNE:
		return bd__config_parse_bool(v, &next->decode_autotune, what, wlen);
	case KEY_FIRST_PASS:
		return bd__config_parse_first_pass(v, &next->stream_first_pass, what, wlen);
	case KEY_GPU_HOUR_PRICE:
		return parse_price(v, &next->gpu_hour_price, what, wlen);
	case KEY_REMOTE:
		return bd__config_add_remote(&next->remotes, &next->nremotes, v, what, wlen);
	case KEY_REMOTE_ENDPOINT:
		return bd__config_set_endpoint(&next->remote_endpoint, v, what, wlen);
	case KEY_REMOTE_REGION:
	case KEY_REMOTE_PROFILE:
		if (!*v || strpbrk(v, " \t/:")) {
			bd__config_msg(what, wlen, "'%s' is not a %s name", v,
				       k->id == KEY_REMOTE_REGION ? "region (e.g. us-east-1)" : "profile");
			return -EINVAL;
		}
		return bd__config_set_str(k->id == KEY_REMOTE_REGION ? &next->remote_region
						 : &next->remote_profile, v, what, wlen);
	case KEY_REMOTE_ADDRESSING:
		return bd__config_parse_addressing(v, &next->remote_addressing, what, wlen);
	case KEY_REMOTE_CREDENTIALS:
	case KEY_CACHE_DIR:
		return bd__config_set_abs_path(k->id == KEY_CACHE_DIR ? &next->cache_dir
					       : &next->remote_credentials, v, what, wlen);
	case KEY_CACHE_MAX_SIZE:
		return bd__config_parse_size(v, BD_CONFIG_MIN_CACHE_MAX, UINT64_MAX,
					     &next->cache_max_size, what, wlen);
	case KEY_CACHE_CHUNK:
		return bd__config_parse_chunk(v, &next->cache_chunk, what, wlen);
	case KEY_IMAGE_MAX_PIXELS:
		return bd__config_parse_size(v, BD_CONFIG_MIN_IMAGE_PIXELS, BD_CONFIG_MAX_IMAGE_PIXELS,
					     &next->image_max_pixels, what, wlen);
	case KEY_REMOTE_MIN_RATE:
		return bd__config_parse_size(v, 0, BD_CONFIG_MAX_MIN_RATE, &next->remote_min_rate,
					     what, wlen);
	default:
		return bd__config_parse_uint(v, k->min, k->max, uint_field(next, k->id), what,
					     wlen);
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
		bd__config_msg(l->err, l->errlen, "%s: out of memory", l->name);
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
	char name[64], q[BD__CONFIG_QBUF], known[128];
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
			  bd__config_quote(q, sizeof(q), name), known);
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

/* The line of the root just added, for bd_config_check_roots()'s messages. */
static int root_line(struct load *l)
{
	bd_config *n = &l->next;
	unsigned *grown = realloc(n->root_lines, n->nroots * sizeof(*grown));

	if (!grown) {
		load_fail(l, -ENOMEM, "out of memory");
		return -ENOMEM;
	}
	grown[n->nroots - 1] = (unsigned)l->lineno;
	n->root_lines = grown;
	return 0;
}

static int handle_key(struct load *l, const char *section, const char *name,
		      const char *value)
{
	char what[512], q[BD__CONFIG_QBUF], known[128];
	size_t nroots = l->next.nroots;
	const struct key *k;
	int r;

	if (l->err_line)
		return 0;
	if (!*section) {
		load_fail(l, -EINVAL, "%s is outside any section",
			  bd__config_quote(q, sizeof(q), name));
		return 0;
	}
	k = key_find(section, name);
	if (!k) {
		if (!section_known(section)) {
			/* Headers are checked by the reader; this is a fallback. */
			known_list(known, sizeof(known), NULL);
			load_fail(l, -EINVAL, "unknown section %s (known: %s)",
				  bd__config_quote(q, sizeof(q), section), known);
		} else {
			known_list(known, sizeof(known), section);
			load_fail(l, -EINVAL, "unknown key %s in [%s] (known: %s)",
				  bd__config_quote(q, sizeof(q), name), section, known);
		}
		return 0;
	}
	r = apply(&l->next, k, value, what, sizeof(what));
	if (r < 0) {
		load_fail(l, r, "[%s] %s: %s", k->section, k->name, what);
		return 0;
	}
	if (l->next.nroots > nroots && root_line(l) < 0)
		return 0;
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
		bd__config_msg(err, errlen, "%s: larger than %llu bytes", name,
			       (unsigned long long)BD_CONFIG_MAX_FILE);
		return -EFBIG;
	}
	l.next = bd__config_scalars(c);
	r = ini_parse_stream(line_reader, &l, key_handler, &l);
	if (r == -2) {
		bd_config_free(&l.next);
		bd__config_msg(err, errlen, "%s: out of memory", name);
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
	if (!l.err_line && !(l.next.file = strdup(name)))
		load_fail(&l, -ENOMEM, "out of memory");
	if (l.err_line) {
		bd_config_free(&l.next);
		return l.err_errno;
	}
	bd__config_commit(c, &l.next);
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
		bd__config_msg(err, errlen, "%s: %s", path, strerror(-r));
		return r;
	}
	r = bd_config_load_string(c, path, text, len, err, errlen);
	free(text);
	return r;
}

/* ---- roots on disk ------------------------------------------------------ */

/* What to do about a root that cannot be served, by errno. */
static const char *root_fix(int r, bool flag)
{
	switch (r) {
	case -ENOENT:
		return flag ? "create it or drop the flag" : "create it or remove the line";
	case -ENOTDIR:
		return flag ? "name the directory that holds the datasets or drop the flag"
			    : "name the directory that holds the datasets or remove the line";
	case -EACCES:
	case -EPERM:
		return flag ? "let the daemon's user read and search it (r-x) or drop the flag"
			    : "let the daemon's user read and search it (r-x) or remove the line";
	default:
		return flag ? "fix it or drop the flag" : "fix it or remove the line";
	}
}

static int root_usable(const char *root)
{
	struct stat st;

	if (stat(root, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	/* The effective ids: the ones the daemon opens datasets with. */
	if (faccessat(AT_FDCWD, root, R_OK | X_OK, AT_EACCESS) < 0)
		return -errno;
	return 0;
}

int bd_config_check_roots(const bd_config *c, char *err, size_t errlen)
{
	for (size_t i = 0; i < c->nroots; i++) {
		unsigned line = c->root_lines ? c->root_lines[i] : 0;
		int r = root_usable(c->roots[i]);

		if (r == 0)
			continue;
		if (line)
			bd__config_msg(err, errlen, "[datasets] root %s (%s:%u): %s: %s", c->roots[i],
				       c->file ? c->file : "?", line, strerror(-r), root_fix(r, false));
		else
			bd__config_msg(err, errlen, "--root %s: %s: %s", c->roots[i], strerror(-r),
				       root_fix(r, true));
		return r;
	}
	return 0;
}
