/* SPDX-License-Identifier: MIT */
/*
 * fuzz-config.c - libFuzzer target for the configuration file parser.
 *
 * Feeds arbitrary bytes to bd_config_load_string() on top of a non-default
 * configuration and checks the promises config.h makes, not only "no
 * crash, no leak": an error is one of the documented errnos, comes with a
 * "fuzz:" or "fuzz:LINE:" message whose line exists, and leaves the
 * configuration untouched; a success leaves every field in range, every
 * root absolute, normalized and distinct, and loading the same bytes again
 * changes nothing. A broken promise aborts.
 *
 * Built two ways (tests/meson.build): with -fsanitize=fuzzer as the fuzzer
 * itself, and with tests/fuzz/replay.c as a plain program that replays the
 * seed corpus in every `meson test`.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void require(bool ok, const char *what, const char *detail)
{
	if (ok)
		return;
	fprintf(stderr, "fuzz-config: broken promise: %s (%s)\n", what, detail ? detail : "");
	abort();
}

static bool same_string(const char *a, const char *b)
{
	return (!a && !b) || (a && b && !strcmp(a, b));
}

static bool same_config(const bd_config *a, const bd_config *b)
{
	if (!same_string(a->socket, b->socket) || a->nroots != b->nroots)
		return false;
	for (size_t i = 0; i < a->nroots; i++)
		if (strcmp(a->roots[i], b->roots[i]))
			return false;
	return a->log_level == b->log_level && a->memory_budget == b->memory_budget &&
	       a->cache_size == b->cache_size && a->tier == b->tier &&
	       a->io_engine == b->io_engine && a->direct == b->direct &&
	       a->queue_depth == b->queue_depth && a->io_threads == b->io_threads &&
	       a->decode_threads == b->decode_threads && a->prefetch == b->prefetch &&
	       a->max_prefetch == b->max_prefetch;
}

/* The configuration every input is loaded on top of. */
static int base_config(bd_config *c)
{
	static const char base[] =
		"[daemon]\nsocket = /run/fuzz/base.sock\n"
		"[datasets]\nroot = /base/a\nroot = /base/b\n"
		"[io]\nqueue_depth = 7\n";

	bd_config_init(c);
	return bd_config_load_string(c, "base", base, sizeof(base) - 1, NULL, 0);
}

static void check_root(const char *r)
{
	size_t n = strlen(r);

	require(r[0] == '/', "root is absolute", r);
	require(n == 1 || r[n - 1] != '/', "root has no trailing '/'", r);
	require(!strstr(r, "//"), "root has no repeated '/'", r);
	require(!strstr(r, "/./") && !strstr(r, "/../"), "root has no '.' or '..' inside", r);
	require(!(n >= 2 && !strcmp(r + n - 2, "/.")) && !(n >= 3 && !strcmp(r + n - 3, "/..")),
		"root does not end in '.' or '..'", r);
}

static void check_valid(const bd_config *c)
{
	require(c->log_level >= 3 && c->log_level <= 7, "log_level is err..debug", NULL);
	require(c->memory_budget == 0 || c->memory_budget >= BD_CONFIG_MIN_BUDGET,
		"budget auto (0) or >= 16M", NULL);
	require((unsigned)c->tier <= BD_CFG_TIER_DIRECT, "tier in enum", NULL);
	require((unsigned)c->io_engine <= BD_CFG_IO_PREAD, "engine in enum", NULL);
	require((unsigned)c->direct <= BD_CFG_DIRECT_OFF, "direct in enum", NULL);
	require(c->queue_depth >= 1 && c->queue_depth <= BD_CONFIG_MAX_QD, "queue_depth in range", NULL);
	require(c->io_threads >= 1 && c->io_threads <= BD_CONFIG_MAX_IO_THR, "io threads in range", NULL);
	require(c->decode_threads >= 1 && c->decode_threads <= BD_CONFIG_MAX_DECODE_THR,
		"decode threads resolved and in range", NULL);
	require(c->prefetch >= 1 && c->prefetch <= c->max_prefetch &&
		c->max_prefetch <= BD_CONFIG_MAX_PREFETCH, "1 <= prefetch <= max_prefetch <= 1024", NULL);
	require(c->socket != NULL, "socket kept or replaced, never dropped", NULL);
	require(c->socket[0] == '/' && strlen(c->socket) <= BD_CONFIG_SOCKET_MAX,
		"socket absolute and fits sun_path", c->socket);
	require(c->nroots >= 1 && c->nroots <= BD_CONFIG_MAX_ROOTS, "roots kept or replaced, within limit", NULL);
	for (size_t i = 0; i < c->nroots; i++) {
		check_root(c->roots[i]);
		for (size_t j = 0; j < i; j++)
			require(strcmp(c->roots[i], c->roots[j]), "roots are distinct", c->roots[i]);
	}
}

static void check_error(int r, const char *err, const uint8_t *data, size_t size)
{
	unsigned long lines = 1, line;
	char *end;

	require(r == -EINVAL || r == -ENOMEM || r == -EFBIG, "errno is documented", err);
	require(!strncmp(err, "fuzz:", 5), "message starts with the name", err);
	if (r != -EINVAL)
		return;
	line = strtoul(err + 5, &end, 10);
	for (size_t i = 0; i < size; i++)
		lines += data[i] == '\n';
	require(end != err + 5 && end[0] == ':' && end[1] == ' ', "message is NAME:LINE: ...", err);
	require(line >= 1 && line <= lines, "line number exists", err);
	require(end[2] != '\0', "message says what is wrong", err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	bd_config c, before, again;
	char err[512];
	int r;

	require(base_config(&c) == 0 && base_config(&before) == 0, "base loads", NULL);
	err[0] = '\0';
	r = bd_config_load_string(&c, "fuzz", (const char *)data, size, err, sizeof(err));
	if (r < 0) {
		check_error(r, err, data, size);
		require(same_config(&c, &before), "error leaves the configuration untouched", err);
		goto out;
	}
	require(r == 0, "success is 0", NULL);
	check_valid(&c);

	/* The same bytes again, on top of their own result: a fixed point. */
	require(base_config(&again) == 0, "base loads", NULL);
	r = bd_config_load_string(&again, "fuzz", (const char *)data, size, err, sizeof(err));
	require(r == 0, "a second load of the same bytes succeeds", err);
	r = bd_config_load_string(&again, "fuzz", (const char *)data, size, err, sizeof(err));
	require(r == 0 && same_config(&again, &c), "reloading is idempotent", err);
	bd_config_free(&again);
out:
	bd_config_free(&before);
	bd_config_free(&c);
	return 0;
}
