/* SPDX-License-Identifier: MIT */
/*
 * bench.h - what the modes of batchd-bench share: the commands themselves,
 * clocks, argument parsing beyond cli.h, and JSON string output.
 *
 * batchd-bench answers one question for a user about to train: can this
 * machine's disks, cores and PCIe links feed the GPUs, and with which
 * settings? Each mode is one command (bench_cmd_*), given argv from its
 * mode word on; each returns the process exit status: 0 success, 1
 * failure, 2 usage error (naming the argument), 77 "cannot run here" (h2d
 * or pipeline --device without CUDA).
 *
 * Thread rules: the bench_cmd_* functions run on the main thread, one per
 * process; the helpers here are pure or read a clock and may be called
 * from any thread.
 */
#ifndef BATCHD_TOOLS_BENCH_H
#define BATCHD_TOOLS_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

int bench_cmd_disk(int argc, char **argv);
int bench_cmd_sweep(int argc, char **argv);
int bench_cmd_decode(int argc, char **argv);
int bench_cmd_pipeline(int argc, char **argv);
int bench_cmd_h2d(int argc, char **argv);

/* CLOCK_MONOTONIC in nanoseconds / seconds. */
uint64_t bench_now_ns(void);
double bench_now(void);

/*
 * A duration: a decimal number of seconds with an optional unit suffix
 * "s", "ms" or "m" ("10", "0.5", "250ms", "2m"). @return 0, or -EINVAL for
 * anything else (empty, negative, junk, over a day).
 */
int bench_parse_seconds(const char *s, double *ret);

/*
 * A comma-separated list of at most @max values, each a size (bp_parse_size:
 * "4K,64K,1M") when @sizes, else a whole number ("1,2,4"); each must be
 * >= 1. @return 0 and *ret_n (>= 1) with out[0..n) in the order given;
 * -EINVAL for an empty list, an empty item, junk or a zero; -E2BIG for
 * more than @max items. out may be written on failure.
 */
int bench_parse_list(const char *s, bool sizes, uint64_t *out, size_t max, size_t *ret_n);

/* s as a JSON string (quotes and escapes included). */
void bench_json_string(FILE *f, const char *s);
/* s as SVG/XML text: &, <, >, " escaped, control bytes dropped. */
void bench_xml_text(FILE *f, const char *s);

/* Default thread count: the online CPUs, at least 1. */
unsigned bench_ncpus(void);

#endif
