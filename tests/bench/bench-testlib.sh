# SPDX-License-Identifier: MIT
# shellcheck shell=bash
#
# bench-testlib.sh - what the batchd-bench test scripts share: the check
# counters and their "ok - ...", "FAIL - ...", "skip - ..." lines, a
# batchd-bench run under a time limit (a mode that never ends is a failure,
# not a hung suite), a scratch directory removed at exit with any batchd
# the script started, and checks of JSON output. Sourced, after the script
# has set BENCH (the batchd-bench to run) and PY (Python 3); T (its scratch
# directory) is set by the script or by scratch.

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

# scratch NAME: T, a new directory NAME.XXXXXX under the current one,
# removed at exit after the batchd in DAEMON_PID (when set) is stopped.
DAEMON_PID=""
scratch() {
	T=$(mktemp -d "$PWD/$1.XXXXXX")
	trap scratch_cleanup EXIT
}
scratch_cleanup() {
	if [[ -n $DAEMON_PID ]]; then kill "$DAEMON_PID" 2>/dev/null || true; wait "$DAEMON_PID" 2>/dev/null || true; fi
	rm -rf "$T"
}

# py EXPR FILE [FILE2]: evaluate a Python expression with j = the JSON in
# the first file (t its "total", when it has one) and j2 the second's;
# exit status 0 when it is true. Prints it if not.
py() {
	"$PY" - "$@" <<'PYEOF'
import json, sys
expr = sys.argv[1]
j = json.load(open(sys.argv[2]))
j2 = json.load(open(sys.argv[3])) if len(sys.argv) > 3 else None
t = j.get("total") if isinstance(j, dict) else None
v = eval(expr)
if not v:
    print("  (false: %s)" % expr, file=sys.stderr)
sys.exit(0 if v else 1)
PYEOF
}

# finish: the summary line; exit status 0 when nothing failed, 1 otherwise.
finish() {
	echo "$PASS passed, $FAILED failed"
	[[ $FAILED -eq 0 ]]
}
