/* SPDX-License-Identifier: MIT */
/*
 * config-testlib.h - what the configuration suites (tests/unit/test-config.c,
 * test-config-errors.c, test-config-cli.c) share: loading a string under
 * the name t.conf, the defaults and a marked configuration to compare
 * against, message assertions, scratch files, and the command line
 * parsed from a NULL-terminated argv.
 *
 * Every loader writes its message to ct_err, so a test reads what the
 * call it just made said. Thread rules: called from a test's one thread
 * (Check runs each test in a forked child, or all in one process under
 * CK_FORK=no); ct_err and ct_tmpdir are process-wide.
 */
#ifndef BATCHD_TESTS_CONFIG_TESTLIB_H
#define BATCHD_TESTS_CONFIG_TESTLIB_H

#include <limits.h>
#include <stddef.h>

#include "config.h"

#ifndef BATCHD_DAEMON_CONFIG_H
#error "config.h is not daemon/config/config.h: check the include path"
#endif

/* The name every string is loaded under: messages start "t.conf:LINE: ". */
#define NAME "t.conf"

/* A NULL-terminated argv whose argv[0] is "batchd". */
#define ARGV(...) ((char *[]){ "batchd", __VA_ARGS__, NULL })

/* The number of entries of a table of cases, for tcase_add_loop_test. */
#define NCASES(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* The message of the last load or parse that failed. */
extern char ct_err[1024];

/* Load text into c as the file NAME: bd_config_load_string's result. */
int ct_load(bd_config *c, const char *text);

/* What decode_threads = 0 resolves to, computed independently. */
unsigned ct_usable_cpus(void);

/* Every scalar setting of a equals b's (asserted). */
void ct_assert_scalars_eq(const bd_config *a, const bd_config *b);

/* c holds exactly the defaults, decode_threads as given. */
void ct_assert_defaults(const bd_config *c, unsigned decode_threads);

/* c's roots are exactly want[0..n), in that order. */
void ct_assert_roots(const bd_config *c, const char *const *want, size_t n);

/* The message s starts with prefix. */
void ct_assert_prefix(const char *s, const char *prefix);

/*
 * A configuration that is not the defaults (a socket, a root, a queue
 * depth), to see errors leave it alone; ct_assert_marked checks it still is.
 */
void ct_init_marked(bd_config *c);
void ct_assert_marked(const bd_config *c);

/* "/" followed by 'a's: a path of exactly n bytes in buf (n + 1 with the NUL). */
void ct_long_path(char *buf, size_t n);

/*
 * A fresh directory under $TMPDIR (or /tmp), its path in ct_tmpdir; the
 * test removes what it wrote there and rmdir()s it.
 */
extern char ct_tmpdir[PATH_MAX];
void ct_make_tmpdir(void);
/* Write len bytes of text to ct_tmpdir/leaf: @return its path (a static buffer). */
const char *ct_write_tmp(const char *leaf, const char *text, size_t len);
/* Unlink ct_tmpdir/leaf, if it is there. */
void ct_remove_tmp(const char *leaf);

/* bd_config_from_args on argv (NULL-terminated; argc is counted), no default file. */
int ct_from_args(bd_config *c, char **argv);

#endif
