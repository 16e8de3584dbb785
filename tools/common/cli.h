/* SPDX-License-Identifier: MIT */
/*
 * cli.h - what every batchd command-line tool does the same way: strict
 * number parsing, usage errors (exit status 2, naming the argument) and
 * the clock runs are timed with.
 *
 * Thread rules: single-threaded tools only (cli_init keeps globals);
 * cli_parse_u64, cli_now and cli_sleep_ms may be called from any thread.
 */
#ifndef BATCHD_TOOLS_CLI_H
#define BATCHD_TOOLS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Name the program and its usage text for cli_usage(). */
void cli_init(const char *prog, const char *usage_text);

/*
 * A usage error: "PROG: <message>" (when fmt is not NULL: getopt has
 * said it otherwise) and one line pointing at --help, to stderr, so that
 * the message is the last thing on the screen. @return 2, the usage-error
 * exit status.
 */
__attribute__((format(printf, 1, 2)))
int cli_usage(const char *fmt, ...);

/* No command at all: the whole usage text to stderr. @return 2. */
int cli_usage_full(void);

/*
 * Does a subcommand's argv (argv[0] the subcommand) ask for help: a word
 * -h or --help before any "--"? Checked before the subcommand parses its
 * options, so that --help is never taken for a PATH or refused as an
 * unknown option.
 */
bool cli_help_asked(int argc, char **argv);

/* Print the usage text to stdout, as --help does. @return 0, its exit status. */
int cli_help(void);

/* A subcommand: its name and what runs it (argv[0] is the name). */
typedef struct cli_cmd {
	const char *name;
	int (*run)(int argc, char **argv);
} cli_cmd;

/*
 * Run the one of cmds[0..n) that argv[1] names, or print the usage when
 * its words ask for help (cli_help_asked). @return its exit status, or -1
 * when no command has that name.
 */
int cli_run(const cli_cmd *cmds, size_t n, int argc, char **argv);

/* A whole decimal number, nothing before or after. @return 0 or -EINVAL. */
int cli_parse_u64(const char *s, uint64_t *ret);

/* CLOCK_MONOTONIC in seconds, for timing runs. Any thread. */
double cli_now(void);

/* Sleep ms milliseconds, resuming after signals. Any thread. */
void cli_sleep_ms(uint64_t ms);

#endif
