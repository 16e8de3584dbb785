/* SPDX-License-Identifier: MIT */
/*
 * config-testlib.c - the helpers the configuration suites share (see
 * config-testlib.h): one copy of the loader, the defaults and marked
 * configurations, the message assertions and the scratch files, linked
 * into test-config, test-config-errors and test-config-cli.
 */
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>

#include "config-testlib.h"

char ct_err[1024];

int ct_load(bd_config *c, const char *text)
{
	return bd_config_load_string(c, NAME, text, strlen(text), ct_err, sizeof(ct_err));
}

/* What decode_threads = 0 resolves to, computed independently. */
unsigned ct_usable_cpus(void)
{
	cpu_set_t set;
	long n = -1;

	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		n = CPU_COUNT(&set);
	if (n <= 0)
		n = sysconf(_SC_NPROCESSORS_ONLN);
	if (n <= 0)
		n = 1;
	return n > 256 ? 256 : (unsigned)n;
}

void ct_assert_scalars_eq(const bd_config *a, const bd_config *b)
{
	ck_assert_int_eq(a->log_level, b->log_level);
	ck_assert_uint_eq(a->memory_budget, b->memory_budget);
	ck_assert_uint_eq(a->cache_size, b->cache_size);
	ck_assert_int_eq(a->tier, b->tier);
	ck_assert_int_eq(a->io_engine, b->io_engine);
	ck_assert_int_eq(a->direct, b->direct);
	ck_assert_uint_eq(a->queue_depth, b->queue_depth);
	ck_assert_uint_eq(a->io_threads, b->io_threads);
	ck_assert_uint_eq(a->decode_threads, b->decode_threads);
	ck_assert_uint_eq(a->prefetch, b->prefetch);
	ck_assert_uint_eq(a->max_prefetch, b->max_prefetch);
	ck_assert_uint_eq(a->socket_mode, b->socket_mode);
	ck_assert_uint_eq(a->sessions_per_uid, b->sessions_per_uid);
	ck_assert_uint_eq(a->memory_per_uid, b->memory_per_uid);
	ck_assert_uint_eq(a->lease_timeout, b->lease_timeout);
	ck_assert_uint_eq(a->session_blocks, b->session_blocks);
	ck_assert_uint_eq(a->client_queue, b->client_queue);
	ck_assert_uint_eq(a->handshake_timeout, b->handshake_timeout);
	ck_assert_uint_eq(a->connections_per_uid, b->connections_per_uid);
	ck_assert_uint_eq(a->max_connections, b->max_connections);
	ck_assert_int_eq(a->metrics_sessions, b->metrics_sessions);
	ck_assert_int_eq(a->remote_addressing, b->remote_addressing);
	ck_assert_uint_eq(a->remote_requests, b->remote_requests);
	ck_assert_uint_eq(a->remote_retries, b->remote_retries);
	ck_assert_uint_eq(a->remote_timeout, b->remote_timeout);
	ck_assert_uint_eq(a->cache_max_size, b->cache_max_size);
	ck_assert_uint_eq(a->cache_chunk, b->cache_chunk);
}

/* c holds exactly the defaults, decode_threads as given. */
void ct_assert_defaults(const bd_config *c, unsigned decode_threads)
{
	bd_config d;

	bd_config_init(&d);
	d.decode_threads = decode_threads;
	ct_assert_scalars_eq(c, &d);
	ck_assert_ptr_null(c->socket);
	ck_assert_ptr_null(c->roots);
	ck_assert_uint_eq(c->nroots, 0);
	bd_config_free(&d);
}

void ct_assert_roots(const bd_config *c, const char *const *want, size_t n)
{
	ck_assert_uint_eq(c->nroots, n);
	for (size_t i = 0; i < n; i++)
		ck_assert_str_eq(c->roots[i], want[i]);
}

void ct_assert_prefix(const char *s, const char *prefix)
{
	ck_assert_msg(!strncmp(s, prefix, strlen(prefix)),
		      "message '%s' does not start with '%s'", s, prefix);
}

/* A configuration that is not the defaults, to see errors leave it alone. */
void ct_init_marked(bd_config *c)
{
	bd_config_init(c);
	ck_assert_int_eq(ct_load(c, "[daemon]\nsocket = /tmp/mark.sock\n"
				    "[datasets]\nroot = /mark\n"
				    "[io]\nqueue_depth = 7\n"), 0);
}

void ct_assert_marked(const bd_config *c)
{
	static const char *const roots[] = { "/mark" };

	ck_assert_str_eq(c->socket, "/tmp/mark.sock");
	ct_assert_roots(c, roots, 1);
	ck_assert_uint_eq(c->queue_depth, 7);
	ck_assert_uint_eq(c->memory_budget, 0);   /* auto */
}

/* "/" followed by 'a's: a path of exactly n bytes. */
void ct_long_path(char *buf, size_t n)
{
	buf[0] = '/';
	memset(buf + 1, 'a', n - 1);
	buf[n] = '\0';
}

char ct_tmpdir[PATH_MAX];

void ct_make_tmpdir(void)
{
	const char *base = getenv("TMPDIR");

	snprintf(ct_tmpdir, sizeof(ct_tmpdir), "%s/test-config.XXXXXX", base && *base ? base : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(ct_tmpdir));
}

const char *ct_write_tmp(const char *leaf, const char *text, size_t len)
{
	static char path[PATH_MAX + 64];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", ct_tmpdir, leaf);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(text, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
	return path;
}

void ct_remove_tmp(const char *leaf)
{
	char path[PATH_MAX + 64];

	snprintf(path, sizeof(path), "%s/%s", ct_tmpdir, leaf);
	unlink(path);
}

/* argv ends with NULL; argc is counted. */
int ct_from_args(bd_config *c, char **argv)
{
	int argc = 0;

	while (argv[argc])
		argc++;
	return bd_config_from_args(c, argc, argv, NULL, ct_err, sizeof(ct_err));
}
