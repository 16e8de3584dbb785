#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# run.sh - everything batchd has to show on a machine with a GPU, in one go,
# from a bundle made by tests/gpu/bundle.sh (tests/gpu/README.md).
#
#   BUNDLE/run.sh OUTDIR [--data-mib N] [--no-suites]
#
# The GPU machines this runs on are lent for minutes and reach no network:
# nothing is installed or compiled here. Everything comes from the bundle
# (its programs find their libraries through RPATH); the machine gives only
# glibc, the C++ runtime and the NVIDIA driver. Python is not needed.
#
# Steps, each with its own time limit and all of them inside DEADLINE_S
# (470 s), so the run ends within 8 minutes even if the GPU hangs:
#  1. the machine (nvidia-smi), and that every bundled program resolves;
#  2. test-gpu alone (it measures free device memory), then the daemon and
#     protocol suites' programs from tests.tsv, several at a time;
#  3. N MiB (default 1024) of incompressible samples of 512 KiB packed,
#     served by one batchd;
#  4. batchd-bench h2d; batchd-bench pipeline --device 0, again with
#     --touch (every batch copied back and compared), and into host memory;
#     batchctl consume --device 0 over an epoch;
#  5. the figures and their ratios: batchd's own host-to-device copy rate
#     from pinned staging against the pinned-copy peak, and GB/s delivered
#     into device memory against the host pipeline; for every GPU session
#     whether its staging was pinned (from batchd's log).
# OUTDIR/summary.txt is written as it goes (each step's line the moment it
# ends), so a run that is killed still reports what it did; every log and
# JSON lands beside it. A GPU step that cannot run here (no driver, no
# device) is "skipped" with the reason; on a machine with NVIDIA devices
# that is a failure. Exit status 0 when nothing failed, 1 otherwise.
set -uo pipefail
export LC_ALL=C

usage() { echo "usage: $0 OUTDIR [--data-mib N] [--no-suites]" >&2; exit 2; }
[[ $# -ge 1 ]] || usage
OUTARG=$1
shift
DATA_MIB=1024
SUITES=1
while [[ $# -gt 0 ]]; do
	case $1 in
	--data-mib) [[ $# -ge 2 && $2 =~ ^[0-9]+$ && $2 -ge 1 ]] || usage; DATA_MIB=$2; shift 2 ;;
	--no-suites) SUITES=0; shift ;;
	*) usage ;;
	esac
done

B=$(cd "$(dirname "$0")" && pwd)
if [[ ! -x $B/bin/batchd ]]; then
	echo "run.sh: $B is not a bundle (no bin/batchd). Make one with" >&2
	echo "  tests/gpu/bundle.sh DIR" >&2
	echo "copy DIR to the GPU machine and run DIR/run.sh OUTDIR there (tests/gpu/README.md)." >&2
	exit 2
fi
mkdir -p "$OUTARG" || exit 2
OUT=$(cd "$OUTARG" && pwd)
BATCHD=$B/bin/batchd
PACK=$B/bin/batchd-pack
CTL=$B/bin/batchctl
BENCH=$B/bin/batchd-bench
JSON=$B/bin/gpu-json
T0=$SECONDS
DEADLINE_S=470
SUMMARY=$OUT/summary.txt
FAILED_LIST=$OUT/failed.txt     # a file: suite steps run in subshells

# A GPU is expected where the driver shows NVIDIA devices; there, a GPU step
# that skips is a failure.
GPU_EXPECTED=0
if ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
	GPU_EXPECTED=1
fi

left() { echo $((DEADLINE_S - (SECONDS - T0))); }

# line TEXT: one line into the summary, now.
line() { echo "$*" | tee -a "$SUMMARY"; }

# result NAME STATUS SECONDS [DETAIL]: a step's line.
result() {
	local name=$1 status=$2 secs=$3 detail=${4:-}
	case $status in
	ok) line "$(printf '%-26s ok       %4d s  %s' "$name" "$secs" "$detail")" ;;
	skipped)
		if [[ $GPU_EXPECTED -eq 1 ]]; then
			line "$(printf '%-26s FAILED   %4d s  skipped on a machine with NVIDIA devices: %s' \
				"$name" "$secs" "$detail")"
			echo "$name" >>"$FAILED_LIST"
		else
			line "$(printf '%-26s skipped  %4d s  %s' "$name" "$secs" "$detail")"
		fi ;;
	*)
		line "$(printf '%-26s FAILED   %4d s  %s' "$name" "$secs" "$detail")"
		echo "$name" >>"$FAILED_LIST" ;;
	esac
}

# limit SECS: SECS, or what is left before the deadline if that is less.
limit() {
	local l
	l=$(left)
	echo $(($1 < l ? $1 : l))
}

# timed NAME SECS OUT CMD...: CMD with stdout in OUT and stderr in
# OUTDIR/NAME.log (both there when OUT is that log), its result recorded. Exit status
# 77 is a skip (the tools' "cannot run here"), with the last line it wrote
# as the reason. Returns 0 when it passed.
timed() {
	local name=$1 secs out=$3 rc=0 t=$SECONDS why
	secs=$(limit "$2")
	shift 3
	if [[ $secs -lt 5 ]]; then
		result "$name" failed 0 "not started: the run's ${DEADLINE_S} s were spent"
		return 1
	fi
	if [[ $out == "$OUT/$name.log" ]]; then
		timeout -k 5 "$secs" "$@" >"$out" 2>&1 </dev/null || rc=$?
	else
		timeout -k 5 "$secs" "$@" >"$out" 2>"$OUT/$name.log" </dev/null || rc=$?
	fi
	why=$(cat "$OUT/$name.log" "$out" | grep -v '^\s*$' | tail -n 1 | cut -c1-200)
	case $rc in
	0) result "$name" ok $((SECONDS - t)) ;;
	77) result "$name" skipped $((SECONDS - t)) "$why"; return 1 ;;
	124 | 137) result "$name" failed $((SECONDS - t)) "TIMED OUT after $secs s"; return 1 ;;
	*) result "$name" failed $((SECONDS - t)) "exit $rc: $why"; return 1 ;;
	esac
}

# step NAME SECS CMD...: stdout and stderr in OUTDIR/NAME.log.
step() {
	local name=$1 secs=$2
	shift 2
	timed "$name" "$secs" "$OUT/$name.log" "$@"
}

# step_json NAME SECS CMD...: as step, with stdout in OUTDIR/NAME.json.
step_json() {
	local name=$1 secs=$2
	shift 2
	timed "$name" "$secs" "$OUT/$name.json" "$@"
}

# jv FILE PATH: a value from a JSON file, or n/a.
jv() { "$JSON" "$1" "$2" 2>/dev/null || true; }

WORK=""
DAEMON_PID=""
cleanup() {
	if [[ -n $DAEMON_PID ]]; then
		kill -KILL "$DAEMON_PID" 2>/dev/null
		wait "$DAEMON_PID" 2>/dev/null
	fi
	[[ -n $WORK ]] && rm -rf "$WORK"
	return 0
}
trap cleanup EXIT

# ---- the machine ------------------------------------------------------------------

GPU_NAME=$( (nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || true) | head -n 1)
: >"$SUMMARY"
: >"$FAILED_LIST"
line "batchd GPU run, $(date -u +%Y-%m-%dT%H:%M:%SZ), ${GPU_NAME:-no NVIDIA GPU visible}, $(nproc) CPUs"
line "bundle: $(head -n 1 "$B/VERSION" 2>/dev/null || echo unknown)"
line ""
line "steps (each line written when the step ends):"
{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "host: $(uname -a)"
	echo "cpus: $(nproc)"
	cat "$B/VERSION" 2>/dev/null
	cat /proc/driver/nvidia/version 2>/dev/null || echo "/proc/driver/nvidia/version: absent (no NVIDIA driver)"
	nvidia-smi 2>&1 || echo "nvidia-smi: not available"
} >"$OUT/machine.txt" 2>&1

# Every bundled program finds every library it needs.
missing=$(for f in "$B"/bin/* "$B"/tests/*; do ldd "$f" 2>&1 | grep 'not found' | sed "s|^|$(basename "$f"): |"; done)
if [[ -z $missing ]]; then
	result libraries ok 0 "every bundled program resolves"
else
	result libraries failed 0 "$(echo "$missing" | tr '\n' ';' | tr -s ' \t' ' ' | cut -c1-200)"
fi

# ---- suites -----------------------------------------------------------------------

# run_row NAME: one row of tests.tsv, with its environment and time limit.
run_row() {
	local name=$1 f timeout prog args env secs
	# One field per line: empty fields survive (read with IFS=tab merges them).
	mapfile -t f < <(awk -F'\t' -v n="$name" '$1 == n { for (i = 2; i <= 5; i++) print $i }' \
		"$B/tests.tsv")
	timeout=${f[0]} prog=${f[1]} args=${f[2]//@BUNDLE@/$B} env=${f[3]//@BUNDLE@/$B}
	secs=$(limit "$timeout")
	# shellcheck disable=SC2086 # words: the row's arguments and assignments
	step "test-$name" "$secs" env $env "$B/$prog" $args
}

if [[ $SUITES -eq 1 ]]; then
	run_row gpu
	# The rest several at a time, each on its own time limit, all inside 180 s.
	suite_end=$((SECONDS - T0 + 180))
	jobs_max=$(( $(nproc) / 2 > 1 ? $(nproc) / 2 : 1 ))
	while IFS=$'\t' read -r name _; do
		[[ $name == '#'* || $name == gpu ]] && continue
		while [[ $(jobs -rp | wc -l) -ge $jobs_max ]]; do
			wait -n
		done
		(DEADLINE_S=$((suite_end < DEADLINE_S ? suite_end : DEADLINE_S)); run_row "$name") &
	done <"$B/tests.tsv"
	wait
else
	result suites skipped 0 "--no-suites"
fi

# ---- a dataset and a daemon -----------------------------------------------------------

tmp=${TMPDIR:-/tmp}
[[ ${#tmp} -le 60 ]] || tmp=/tmp      # socket paths must fit in 108 bytes
WORK=$(mktemp -d "$tmp/batchd-gpu.XXXXXX")
SOCK=$WORK/batchd.sock
PART_MIB=$((DATA_MIB < 128 ? DATA_MIB : 128))
PARTS=$(((DATA_MIB + PART_MIB - 1) / PART_MIB))
SAMPLE=512K
BATCH=64
EPOCHS=3
export WORK PARTS PART_MIB PACK SAMPLE

make_data() {
	local i args=()
	mkdir -p "$WORK/raw" "$WORK/data"
	for ((i = 0; i < PARTS; i++)); do
		head -c "${PART_MIB}M" /dev/urandom >"$WORK/raw/part-$i" &
	done
	wait
	for ((i = 0; i < PARTS; i++)); do
		args+=(--records "$SAMPLE" "$WORK/raw/part-$i")
	done
	"$PACK" create "$WORK/data/data.bpk" "${args[@]}" --level 1 || return 1
	rm -rf "$WORK/raw"
	"$PACK" info "$WORK/data/data.bpk"
}
export -f make_data

DAEMON_UP=0
CUDA=0
if step data 120 bash -c 'set -euo pipefail; make_data'; then
	"$BATCHD" --no-config --socket "$SOCK" --root "$WORK/data" --memory 8G --log-level info \
		>"$OUT/batchd.log" 2>&1 </dev/null &
	DAEMON_PID=$!
	t=$SECONDS
	for ((i = 0; i < 300; i++)); do
		if "$CTL" -s "$SOCK" status --json >"$OUT/status-start.json" 2>/dev/null; then
			DAEMON_UP=1
			break
		fi
		kill -0 "$DAEMON_PID" 2>/dev/null || break
		sleep 0.1
	done
	if [[ $DAEMON_UP -eq 1 ]]; then
		result batchd-start ok $((SECONDS - t)) "$SOCK"
		if [[ $(jv "$OUT/status-start.json" cuda.available) == true ]]; then
			CUDA=1
			result batchd-cuda ok 0 "$(jv "$OUT/status-start.json" cuda.devices) device(s)"
		else
			result batchd-cuda skipped 0 "batchd: $(jv "$OUT/status-start.json" cuda.reason)"
		fi
	else
		result batchd-start failed $((SECONDS - t)) "no answer on $SOCK: $(tail -n 1 "$OUT/batchd.log")"
	fi
fi

# ---- figures -----------------------------------------------------------------------------

step_json h2d 90 "$BENCH" h2d --json
if [[ $DAEMON_UP -eq 1 ]]; then
	if [[ $CUDA -eq 1 ]]; then
		step_json pipeline-gpu 120 "$BENCH" pipeline data.bpk --socket "$SOCK" --device 0 \
			--batch-size "$BATCH" --shuffle global --epochs "$EPOCHS" --json
		step_json pipeline-touch 90 "$BENCH" pipeline data.bpk --socket "$SOCK" --device 0 --touch \
			--batch-size "$BATCH" --shuffle global --epochs 1 --json
		step_json consume-gpu 90 "$CTL" -s "$SOCK" consume data.bpk --device 0 \
			--batch-size "$BATCH" --shuffle global --epochs 1 --json
	else
		for s in pipeline-gpu pipeline-touch consume-gpu; do
			result "$s" skipped 0 "batchd serves host memory only: $(jv "$OUT/status-start.json" cuda.reason)"
		done
	fi
	step_json pipeline-host 120 "$BENCH" pipeline data.bpk --socket "$SOCK" \
		--batch-size "$BATCH" --shuffle global --epochs "$EPOCHS" --json

	# Every session is gone: no device memory may stay allocated.
	t=$SECONDS
	idle=0
	for ((i = 0; i < 100; i++)); do
		"$CTL" -s "$SOCK" status --json >"$OUT/status-end.json" 2>/dev/null
		if [[ $("$JSON" --len "$OUT/status-end.json" sessions 2>/dev/null) == 0 &&
			$(jv "$OUT/status-end.json" cuda.device_memory) == 0 ]]; then
			idle=1
			break
		fi
		sleep 0.1
	done
	if [[ $idle -eq 1 ]]; then
		result batchd-idle ok $((SECONDS - t)) "no session, no device memory left"
	else
		result batchd-idle failed $((SECONDS - t)) "10 s after the last client: cuda $(jv "$OUT/status-end.json" cuda)"
	fi
fi
if [[ -n $DAEMON_PID ]]; then
	t=$SECONDS
	kill -TERM "$DAEMON_PID" 2>/dev/null
	for ((i = 0; i < 300; i++)); do
		kill -0 "$DAEMON_PID" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$DAEMON_PID" 2>/dev/null
	rc=0
	wait "$DAEMON_PID" 2>/dev/null || rc=$?
	DAEMON_PID=""
	if [[ $rc -eq 0 ]]; then
		result batchd-stop ok $((SECONDS - t)) "exit 0 after SIGTERM"
	else
		result batchd-stop failed $((SECONDS - t)) "batchd exited with status $rc after SIGTERM (see batchd.log)"
	fi
fi

# ---- summary -----------------------------------------------------------------------------

gbs() { awk -v v="$1" 'BEGIN { if (v ~ /^[0-9.eE+-]+$/) printf "%.2f", v / 1e9; else print "n/a" }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9.eE+-]+$/ && b ~ /^[0-9.eE+-]+$/ && b > 0) printf "%.2f", a / b; else print "n/a" }'; }

H2D_PINNED=$(jv "$OUT/h2d.json" pinned.best_bw_bytes)
H2D_REG=$(jv "$OUT/h2d.json" registered.best_bw_bytes)
H2D_PAGE=$(jv "$OUT/h2d.json" pageable.best_bw_bytes)
GPU_BPS=$(jv "$OUT/pipeline-gpu.json" total.bytes_per_s)
HOST_BPS=$(jv "$OUT/pipeline-host.json" total.bytes_per_s)
# batchd's own copies: the best session's rate, from its log line.
COPY_GBS=$(grep -o 'copies: [0-9]* ([^)]*) at [0-9.]* GB/s' "$OUT/batchd.log" 2>/dev/null |
	awk '{ if ($(NF-1) > m) m = $(NF-1) } END { if (m > 0) print m; else print "n/a" }')
COPY_BPS=$(awk -v g="$COPY_GBS" 'BEGIN { if (g ~ /^[0-9.]+$/) print g * 1e9; else print "n/a" }')

line ""
line "figures:"
line "$(printf '  %-52s %8s GB/s' "pinned H2D peak (batchd-bench h2d, cudaMallocHost)" "$(gbs "$H2D_PINNED")")"
line "$(printf '  %-52s %8s GB/s' "registered shared memfd H2D (as batchd's arena)" "$(gbs "$H2D_REG")")"
line "$(printf '  %-52s %8s GB/s' "pageable H2D" "$(gbs "$H2D_PAGE")")"
line "$(printf '  %-52s %8s GB/s' "batchd's copies from its staging (best session)" "$COPY_GBS")"
line "$(printf '  %-52s %8s GB/s' "delivered to device 0 (pipeline --device 0)" "$(gbs "$GPU_BPS")")"
line "$(printf '  %-52s %8s GB/s' "host pipeline (pipeline, host memory)" "$(gbs "$HOST_BPS")")"
line "$(printf '  %-52s %8s %%' "pipeline --device 0 stall" "$(jv "$OUT/pipeline-gpu.json" total.stall_pct)")"
line "$(printf '  %-52s %8s' "pipeline --touch mismatching batches" "$(jv "$OUT/pipeline-touch.json" total.mismatches)")"
line "$(printf '  %-52s %8s' "batchctl consume --device 0 mismatching batches" "$(jv "$OUT/consume-gpu.json" mismatches)")"
line ""
line "ratios:"
line "$(printf '  %-52s %8s' "batchd's staging H2D / pinned-copy peak" "$(ratio "$COPY_BPS" "$H2D_PINNED")")"
line "$(printf '  %-52s %8s' "registered memfd H2D / pinned-copy peak" "$(ratio "$H2D_REG" "$H2D_PINNED")")"
line "$(printf '  %-52s %8s' "pipeline --device 0 / host pipeline (GB/s)" "$(ratio "$GPU_BPS" "$HOST_BPS")")"
line ""
line "GPU sessions (staging pinned or not, from batchd's log):"
sessions=$(grep -o 'session [0-9]*: GPU [0-9]*, .*staging .*' "$OUT/batchd.log" 2>/dev/null | grep -v copies)
if [[ -n $sessions ]]; then
	while read -r s; do line "  $s"; done <<<"$sessions"
	line "  $(grep -c ' pinned$' <<<"$sessions") of $(wc -l <<<"$sessions") pinned"
else
	line "  none"
fi
line "  dataset: $DATA_MIB MiB of random samples of $SAMPLE bytes, batch $BATCH, global shuffle, $EPOCHS epochs per pipeline run"
line "  run took $((SECONDS - T0)) s"
line ""
mapfile -t FAILED <"$FAILED_LIST"
if [[ ${#FAILED[@]} -eq 0 ]]; then
	line "RESULT: PASS$([[ $CUDA -eq 1 ]] || echo ' (host only: GPU steps skipped, reasons above)')"
	exit 0
fi
line "RESULT: FAIL (${FAILED[*]})"
exit 1
