#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# run.sh - everything batchd has to show on a machine with a GPU, in one go.
#
#   tests/gpu/run.sh OUTDIR
#
# 1. installs the build dependencies only if some are missing (tools/deps.sh);
# 2. builds build-gpu/ (-Dcuda=enabled, release; reused if present);
# 3. runs the 'gpu' suite alone (it measures free device memory), then the
#    'daemon' and 'protocol' suites;
# 4. packs ~1.5 GiB of incompressible samples (512 KiB each), serves them with
#    one batchd, and runs batchd-bench h2d, batchd-bench pipeline --device 0
#    (and --touch, which copies every batch back and compares it), the same
#    pipeline into host memory, and batchctl consume --device 0 over an epoch;
# 5. writes every log and JSON into OUTDIR, and OUTDIR/summary.txt with the
#    three key figures: raw pinned H2D peak, GB/s delivered to device memory
#    by the pipeline, host pipeline GB/s.
#
# Each step is time-boxed; a failed step is recorded and the script goes on
# where it can, then exits 1 if any step failed (0 otherwise). Meant to take
# well under 5 minutes on a 16-core machine with an H200.
set -euo pipefail
export LC_ALL=C

if [[ $# -ne 1 ]]; then
	echo "usage: $0 OUTDIR" >&2
	exit 2
fi
mkdir -p "$1"
OUT=$(cd "$1" && pwd)
cd "$(dirname "$0")/../.."
BUILD=build-gpu
T_START=$SECONDS

FAILED=()
: >"$OUT/steps.txt"

# step NAME SECONDS CMD...: run CMD with a time limit, stdout and stderr into
# OUTDIR/NAME.log; record the outcome. Returns CMD's status.
step() {
	local name=$1 secs=$2 rc=0 t0=$SECONDS
	shift 2
	echo "== $name: $*"
	timeout -k 10 "$secs" "$@" >"$OUT/$name.log" 2>&1 </dev/null || rc=$?
	record "$name" "$rc" $((SECONDS - t0)) "$OUT/$name.log"
	return "$rc"
}

# step_json NAME SECONDS CMD...: as step, but stdout into OUTDIR/NAME.json.
step_json() {
	local name=$1 secs=$2 rc=0 t0=$SECONDS
	shift 2
	echo "== $name: $*"
	timeout -k 10 "$secs" "$@" >"$OUT/$name.json" 2>"$OUT/$name.log" </dev/null || rc=$?
	record "$name" "$rc" $((SECONDS - t0)) "$OUT/$name.log"
	return "$rc"
}

# record NAME STATUS SECONDS LOG
record() {
	local what="exit $2"
	[[ $2 -eq 124 || $2 -eq 137 ]] && what="TIMED OUT (exit $2)"
	if [[ $2 -eq 0 ]]; then
		printf '%-16s ok      %4d s\n' "$1" "$3" | tee -a "$OUT/steps.txt"
	else
		printf '%-16s FAILED  %4d s  %s\n' "$1" "$3" "$what" | tee -a "$OUT/steps.txt"
		FAILED+=("$1")
		[[ -s $4 ]] && tail -n 25 "$4" | sed 's/^/    /'
	fi
	return 0
}

# fail NAME WHY: a check of this script's own that did not hold.
fail() {
	printf '%-16s FAILED  %s\n' "$1" "$2" | tee -a "$OUT/steps.txt"
	FAILED+=("$1")
}

# jval FILE EXPR: a value from a JSON file (j is the document), or n/a.
jval() {
	python3 - "$1" "$2" <<'PYEOF' 2>/dev/null || echo "n/a"
import json, sys
with open(sys.argv[1]) as f:
    j = json.load(f)
print(eval(sys.argv[2]))
PYEOF
}

WORK=""
DAEMON_PID=""
cleanup() {
	if [[ -n $DAEMON_PID ]]; then
		kill -KILL "$DAEMON_PID" 2>/dev/null || true
		wait "$DAEMON_PID" 2>/dev/null || true
	fi
	[[ -n $WORK ]] && rm -rf "$WORK"
	return 0
}
trap cleanup EXIT

# ---- the machine -----------------------------------------------------------------

{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "host: $(uname -a)"
	echo "cpus: $(nproc)"
	echo "git: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (modified)')"
	if command -v nvidia-smi >/dev/null; then
		nvidia-smi 2>&1 || true
	else
		echo "nvidia-smi: not installed"
	fi
} >"$OUT/machine.txt" 2>&1
GPU_NAME=$( (nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || true) | head -n 1)

# ---- dependencies and build --------------------------------------------------------

deps_present() {
	local c
	for c in gcc meson ninja pkg-config python3 timeout; do
		command -v "$c" >/dev/null || return 1
	done
	pkg-config --exists liburing libzstd libuv check libxxhash inih libarchive json-c
}

if ! deps_present; then
	step deps 300 bash -c '. tools/deps.sh && batchd_install_deps' || true
fi

SETUP_OPTS=(-Dcuda=enabled -Dfault_injection=false --buildtype=release)
if [[ -f $BUILD/build.ninja ]]; then
	step setup 120 meson setup --reconfigure "$BUILD" "${SETUP_OPTS[@]}" || true
else
	step setup 120 meson setup "$BUILD" "${SETUP_OPTS[@]}" || true
fi
BUILT=0
if [[ -f $BUILD/build.ninja ]] && step build 240 ninja -C "$BUILD"; then
	BUILT=1
fi

# ---- suites ------------------------------------------------------------------------

if [[ $BUILT -eq 1 ]]; then
	# Alone: it compares the device's free memory before and after.
	step test-gpu 270 meson test -C "$BUILD" --no-rebuild --print-errorlogs --suite gpu || true
	cp "$BUILD/meson-logs/testlog.txt" "$OUT/testlog-gpu.txt" 2>/dev/null || true
	if grep -q 'SKIP' "$OUT/test-gpu.log"; then
		fail test-gpu-skip "the gpu suite skipped on this machine: $(grep -h '^SKIP' "$OUT/testlog-gpu.txt" 2>/dev/null | head -n 1)"
	fi
	step test-suites 180 meson test -C "$BUILD" --no-rebuild --print-errorlogs \
		--num-processes "$(nproc)" --suite daemon --suite protocol || true
	cp "$BUILD/meson-logs/testlog.txt" "$OUT/testlog-suites.txt" 2>/dev/null || true
fi

# ---- a dataset and a daemon ------------------------------------------------------------

PACK=$BUILD/tools/batchd-pack
CTL=$BUILD/tools/batchctl
BENCH=$BUILD/tools/batchd-bench
BATCHD=$BUILD/daemon/batchd
PARTS=12                 # x 128 MiB = 1.5 GiB
SAMPLE=512K              # bytes per sample (batchd-pack --records)
BATCH=64                 # x 512 KiB = 32 MiB per batch
EPOCHS=3                 # per pipeline run: 4.5 GiB
HAVE_DATA=0
DAEMON_UP=0

# Socket paths must fit in 108 bytes: a short directory.
tmp=${TMPDIR:-/tmp}
[[ ${#tmp} -le 60 ]] || tmp=/tmp
WORK=$(mktemp -d "$tmp/batchd-gpu.XXXXXX")
SOCK=$WORK/batchd.sock

gen_parts() {
	local i pids=()
	mkdir -p "$WORK/raw" "$WORK/data"
	for ((i = 0; i < PARTS; i++)); do
		head -c 128M /dev/urandom >"$WORK/raw/part-$i" &
		pids+=($!)
	done
	for i in "${pids[@]}"; do
		wait "$i"
	done
	for ((i = 0; i < PARTS; i++)); do
		[[ $(stat -c %s "$WORK/raw/part-$i") -eq $((128 << 20)) ]] || return 1
	done
}

make_pack() {
	local i args=()
	for ((i = 0; i < PARTS; i++)); do
		args+=(--records "$SAMPLE" "$WORK/raw/part-$i")
	done
	"$PACK" create "$WORK/data/data.bpk" "${args[@]}" --level 1 || return 1
	rm -rf "$WORK/raw"
	"$PACK" info "$WORK/data/data.bpk"
}

# timeout runs programs, not functions: hand them to a child bash.
export WORK PARTS PACK SAMPLE
export -f gen_parts make_pack
if [[ $BUILT -eq 1 ]] && step gen-data 90 bash -c 'set -euo pipefail; gen_parts' &&
	step pack 120 bash -c 'set -euo pipefail; make_pack'; then
	HAVE_DATA=1
fi

if [[ $HAVE_DATA -eq 1 ]]; then
	echo "== batchd on $SOCK"
	"$BATCHD" --socket "$SOCK" --root "$WORK/data" --memory 8G --log-level info \
		>"$OUT/batchd.log" 2>&1 </dev/null &
	DAEMON_PID=$!
	for ((i = 0; i < 600; i++)); do
		if "$CTL" -s "$SOCK" status --json >"$OUT/status-start.json" 2>/dev/null; then
			DAEMON_UP=1
			break
		fi
		kill -0 "$DAEMON_PID" 2>/dev/null || break
		sleep 0.1
	done
	if [[ $DAEMON_UP -eq 1 ]]; then
		printf '%-16s ok\n' batchd-start | tee -a "$OUT/steps.txt"
		if [[ $(jval "$OUT/status-start.json" 'j["cuda"]["available"]') != True ]]; then
			fail batchd-cuda "batchd says CUDA is unavailable: $(jval "$OUT/status-start.json" 'j["cuda"]["reason"]')"
		fi
	else
		fail batchd-start "batchd did not answer on $SOCK within 60 s"
		tail -n 25 "$OUT/batchd.log" | sed 's/^/    /'
	fi
fi

# ---- figures -----------------------------------------------------------------------------

if [[ $BUILT -eq 1 ]]; then
	step_json h2d 90 "$BENCH" h2d --json || true
fi
if [[ $DAEMON_UP -eq 1 ]]; then
	step_json pipeline-gpu 120 "$BENCH" pipeline data.bpk --socket "$SOCK" --device 0 \
		--batch-size "$BATCH" --shuffle global --epochs "$EPOCHS" --json || true
	step_json pipeline-touch 120 "$BENCH" pipeline data.bpk --socket "$SOCK" --device 0 --touch \
		--batch-size "$BATCH" --shuffle global --epochs 1 --json || true
	step_json pipeline-host 120 "$BENCH" pipeline data.bpk --socket "$SOCK" \
		--batch-size "$BATCH" --shuffle global --epochs "$EPOCHS" --json || true
	step_json consume-gpu 120 "$CTL" -s "$SOCK" consume data.bpk --device 0 \
		--batch-size "$BATCH" --shuffle global --epochs 1 --json || true

	# Every session is gone: no device memory may stay allocated.
	idle=0
	for ((i = 0; i < 100; i++)); do
		"$CTL" -s "$SOCK" status --json >"$OUT/status-end.json" 2>/dev/null || true
		if [[ $(jval "$OUT/status-end.json" 'len(j["sessions"]) == 0 and j["cuda"]["device_memory"] == 0') == True ]]; then
			idle=1
			break
		fi
		sleep 0.1
	done
	if [[ $idle -eq 1 ]]; then
		printf '%-16s ok\n' batchd-idle | tee -a "$OUT/steps.txt"
	else
		fail batchd-idle "10 s after the last client: $(jval "$OUT/status-end.json" 'j["cuda"]')"
	fi
fi
if [[ -n $DAEMON_PID ]]; then
	kill -TERM "$DAEMON_PID" 2>/dev/null || true
	for ((i = 0; i < 300; i++)); do
		kill -0 "$DAEMON_PID" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$DAEMON_PID" 2>/dev/null || true
	rc=0
	wait "$DAEMON_PID" 2>/dev/null || rc=$?
	DAEMON_PID=""
	if [[ $rc -eq 0 ]]; then
		printf '%-16s ok\n' batchd-stop | tee -a "$OUT/steps.txt"
	else
		fail batchd-stop "batchd exited with status $rc after SIGTERM (see batchd.log)"
	fi
fi

# ---- summary ----------------------------------------------------------------------------

gbs() { jval "$1" "'%.2f' % ($2 / 1e9)"; }
{
	echo "batchd GPU run, $(date -u +%Y-%m-%dT%H:%M:%SZ), ${GPU_NAME:-no GPU name}, $(nproc) CPUs, $((SECONDS - T_START)) s"
	echo
	printf '%-44s %8s GB/s\n' "raw pinned H2D peak (batchd-bench h2d)" \
		"$(gbs "$OUT/h2d.json" 'j["pinned"]["best_bw_bytes"]')"
	printf '%-44s %8s GB/s\n' "delivered to device 0 (pipeline --device 0)" \
		"$(gbs "$OUT/pipeline-gpu.json" 'j["total"]["bytes_per_s"]')"
	printf '%-44s %8s GB/s\n' "host pipeline (pipeline, host memory)" \
		"$(gbs "$OUT/pipeline-host.json" 'j["total"]["bytes_per_s"]')"
	echo
	echo "also:"
	printf '  %-42s %8s GB/s\n' "pageable H2D peak" "$(gbs "$OUT/h2d.json" 'j["pageable"]["best_bw_bytes"]')"
	printf '  %-42s %8s GB/s\n' "registered H2D peak" "$(gbs "$OUT/h2d.json" 'j["registered"]["best_bw_bytes"]')"
	printf '  %-42s %8s %%\n' "pipeline --device 0 stall" "$(jval "$OUT/pipeline-gpu.json" 'j["total"]["stall_pct"]')"
	printf '  %-42s %8s %%\n' "host pipeline stall" "$(jval "$OUT/pipeline-host.json" 'j["total"]["stall_pct"]')"
	printf '  %-42s %8s\n' "pipeline --touch mismatching batches" "$(jval "$OUT/pipeline-touch.json" 'j["total"]["mismatches"]')"
	printf '  %-42s %8s GB/s, %s mismatching batches\n' "batchctl consume --device 0 (checked)" \
		"$(jval "$OUT/consume-gpu.json" 'j["gb_per_s"]')" "$(jval "$OUT/consume-gpu.json" 'j["mismatches"]')"
	printf '  %-42s %s\n' "dataset" "$PARTS x 128 MiB random, samples of $SAMPLE bytes, batch $BATCH, global shuffle, $EPOCHS epochs per pipeline run"
	echo
	echo "steps:"
	sed 's/^/  /' "$OUT/steps.txt"
	echo
	if [[ ${#FAILED[@]} -eq 0 ]]; then
		echo "RESULT: PASS"
	else
		echo "RESULT: FAIL (${FAILED[*]})"
	fi
} >"$OUT/summary.txt"
cat "$OUT/summary.txt"
[[ ${#FAILED[@]} -eq 0 ]]
