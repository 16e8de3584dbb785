# SPDX-License-Identifier: MIT
#
# cli-lib.sh - what the batchd-pack scripts under tests/cli share: the
# ok/FAIL reporting and running the binary under a time limit. Sourced
# after BIN (the binary) and T (a scratch directory) are set.
# shellcheck shell=bash

# ---- reporting -----------------------------------------------------------------

PASS=0
FAILED=0
ok() {
	PASS=$((PASS + 1))
	printf 'ok - %s\n' "$*"
}
bad() {
	FAILED=$((FAILED + 1))
	printf 'FAIL - %s\n' "$*"
}
skip() { printf 'skip - %s\n' "$*"; }
# expect DESC CONDITION...: ok when the command succeeds.
expect() {
	local desc=$1
	shift
	if "$@"; then ok "$desc"; else bad "$desc"; fi
}

# ---- helpers -------------------------------------------------------------------

# run ARGS...: batchd-pack with a time limit (a hang fails rather than blocks
# the suite). Output in $T/out and $T/err, exit status in RC.
run() {
	RC=0
	timeout -k 5 120 "$BIN" "$@" >"$T/out" 2>"$T/err" </dev/null || RC=$?
}
# The first lines of the last stderr, on one line, for FAIL messages.
err() { head -c 400 "$T/err" | tr '\n' ' '; }
# A failure, not a crash: non-zero, below 124 (neither a timeout, 124..127,
# nor a signal, 128 and up), with a message.
clean_fail() { [[ $RC -ne 0 && $RC -lt 124 && -s $T/err ]]; }
err_has() { grep -qF -- "$1" "$T/err"; }
