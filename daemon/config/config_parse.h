/* SPDX-License-Identifier: MIT */
/*
 * config_parse.h - what the configuration's three files lend each other:
 * the value parsers and messages of config_value.c, used by the file
 * (config.c) and the command line (config_args.c), and config.c's way of
 * building a new configuration beside the running one and committing it,
 * which the command line uses too.
 *
 * Each parser takes a value as written (file or flag), stores it in *ret
 * (or the named field) only when valid, and otherwise writes "'VALUE' is
 * ... (allowed ...)" into what. @return 0, -EINVAL, or -ENOMEM.
 *
 * Thread rules: as config.h; nothing here keeps state.
 */
#ifndef BATCHD_DAEMON_CONFIG_PARSE_H
#define BATCHD_DAEMON_CONFIG_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

#define ELEMENTSOF(a) (sizeof(a) / sizeof((a)[0]))

#define BD__CONFIG_QUOTE_MAX 80   /* bytes of a value shown in a message */
#define BD__CONFIG_QBUF (BD__CONFIG_QUOTE_MAX * 4 + 8)   /* for bd__config_quote */

/* snprintf into buf, which may be NULL (no message wanted). */
__attribute__((format(printf, 3, 4)))
void bd__config_msg(char *buf, size_t len, const char *fmt, ...);
/* s quoted for a message into buf (BD__CONFIG_QBUF bytes). @return buf. */
const char *bd__config_quote(char *buf, size_t len, const char *s);

int bd__config_parse_uint(const char *v, unsigned min, unsigned max, unsigned *ret,
			  char *what, size_t wlen);
int bd__config_parse_budget(const char *v, uint64_t *ret, char *what, size_t wlen);
/* A size (K, M, G, T suffixes) in min..max. */
int bd__config_parse_size(const char *v, uint64_t min, uint64_t max, uint64_t *ret,
			  char *what, size_t wlen);
/* yes/no, true/false, on/off, 1/0. */
int bd__config_parse_bool(const char *v, bool *ret, char *what, size_t wlen);
int bd__config_parse_engine(const char *v, bd_config_io_engine *ret, char *what, size_t wlen);
int bd__config_parse_direct(const char *v, bd_config_direct *ret, char *what, size_t wlen);
/* [memory] cache: auto or a size (0: no cache). */
int bd__config_parse_cache(const char *v, uint64_t *ret, char *what, size_t wlen);
int bd__config_parse_tier(const char *v, bd_config_tier *ret, char *what, size_t wlen);
/* [io] first_pass: stream (*ret true) or batches. */
int bd__config_parse_first_pass(const char *v, bool *ret, char *what, size_t wlen);
int bd__config_parse_log_level(const char *v, int *ret, char *what, size_t wlen);
/* An octal file mode up to 0777. */
int bd__config_parse_mode(const char *v, unsigned *ret, char *what, size_t wlen);
/* A user (or, with group, a group) name or number, appended to *ids. */
int bd__config_parse_id(const char *v, bool group, uint32_t **ids, size_t *n, char *what,
			size_t wlen);
/* HOST:PORT with an IPv4 address, stored as written into *ret. */
int bd__config_parse_listen(const char *v, char **ret, char *what, size_t wlen);
/* Replace *field with a copy of v. */
int bd__config_set_str(char **field, const char *v, char *what, size_t wlen);
/* The same for a socket path: absolute, and it must fit sun_path. */
int bd__config_set_socket(char **field, const char *v, char *what, size_t wlen);
/* Append the absolute root v, normalized, unless *roots holds it already. */
int bd__config_add_root(char ***roots, size_t *n, const char *v, char *what, size_t wlen);
void bd__config_roots_free(char **roots, size_t n);
/* [datasets] remote: s3://BUCKET[/PREFIX] or http(s)://HOST[/PATH], appended without duplicates. */
int bd__config_add_remote(char ***remotes, size_t *n, const char *v, char *what, size_t wlen);
/* [remote] endpoint: http(s)://HOST[:PORT], no path. */
int bd__config_set_endpoint(char **field, const char *v, char *what, size_t wlen);
/* [remote] addressing: auto, path, virtual -> 0, 1, 2. */
int bd__config_parse_addressing(const char *v, int *ret, char *what, size_t wlen);
/* An absolute path, '.' and '..' components refused. */
int bd__config_set_abs_path(char **field, const char *v, char *what, size_t wlen);
/* [cache] chunk: a size in 64K..64M, a multiple of 4K. */
int bd__config_parse_chunk(const char *v, uint64_t *ret, char *what, size_t wlen);

/* c's scalars, none of its allocations: where a new configuration starts. */
bd_config bd__config_scalars(const bd_config *c);
/* Make next the configuration c, keeping c's allocations where next has none. Cannot fail. */
void bd__config_commit(bd_config *c, bd_config *next);

#endif
