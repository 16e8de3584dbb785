# SPDX-License-Identifier: MIT
# shellcheck shell=bash
#
# bench-testlib.sh - what the batchd-bench test scripts share: the check
# counters and their "ok - ...", "FAIL - ...", "skip - ..." lines, and a
# batchd-bench run under a time limit (a mode that never ends is a failure,
# not a hung suite). Sourced, after the script has set BENCH (the
# batchd-bench to run) and T (its scratch directory).

PASS=0
FAILED=0
ok() { PASS=$((PASS + 1)); printf 'ok - %s\n' "$*"; }
bad() { FAILED=$((FAILED + 1)); printf 'FAIL - %s\n' "$*"; }
skip() { printf 'skip - %s\n' "$*"; }
# expect DESC COMMAND...: ok when COMMAND succeeds; else FAIL with the last
# run's exit status and the start of its output.
expect() {
	local desc=$1
	shift
	if "$@"; then ok "$desc"; else bad "$desc (exit ${RC:-?}; got: $(head -c 300 "$T/out" | tr '\n' ' ') $(head -c 300 "$T/err" | tr '\n' ' '))"; fi
}

# run ARGS...: batchd-bench with a time limit; output in $T/out, $T/err, status in RC.
run() {
	RC=0
	timeout -k 5 60 "$BENCH" "$@" >"$T/out" 2>"$T/err" </dev/null || RC=$?
}

# finish: the summary line; exit status 0 when nothing failed, 1 otherwise.
finish() {
	echo "$PASS passed, $FAILED failed"
	[[ $FAILED -eq 0 ]]
}
