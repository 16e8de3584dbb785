#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# compare-fio.sh - batchd-bench disk side by side with fio on the same file.
#
#   tools/compare-fio.sh FILE [--size SIZE] [--runtime SEC] [--repeat N]
#                        [--bench PATH] [--strict]
#
# Runs three patterns, each first with fio (io_uring engine, O_DIRECT,
# fixed buffers, registered files, time-based, no ramp, JSON output) and
# then with `batchd-bench disk` with the same block size, queue depth and
# runtime:
#
#   read      1 MiB   QD32   compared on bandwidth   (target >= 0.95 of fio)
#   randread  4 KiB   QD64   compared on IOPS        (target >= 0.90 of fio)
#   randread  128 KiB QD16   compared on bandwidth   (target >= 0.95 of fio)
#
# and prints each pair with the ratio batchd-bench / fio and the latencies.
# FILE is created at --size (default 2G) when absent. Each pattern runs as
# --repeat N pairs (default 5) of --runtime SEC each (default 4), fio and
# batchd-bench back to back, alternating which goes first. Shared and
# cloud disks drift by tens of percent within a minute, so the ratio shown
# is the median of the per-pair ratios (each pair ran under nearly the same
# conditions), next to the median of each tool's own numbers.
# fio is installed with apt-get when missing.
#
# Exit status: 0; 1 on a failed run; 3 with --strict when a target is missed;
# 2 on a usage error.
set -euo pipefail
export LC_ALL=C

usage() {
	echo "usage: tools/compare-fio.sh FILE [--size SIZE] [--runtime SEC] [--repeat N] [--bench PATH] [--strict]" >&2
	exit 2
}

FILE="" SIZE=2G RUNTIME=4 REPEAT=5 BENCH="" STRICT=0
while [[ $# -gt 0 ]]; do
	case $1 in
	--size) SIZE=${2:?--size needs a value}; shift 2 ;;
	--runtime) RUNTIME=${2:?--runtime needs a value}; shift 2 ;;
	--repeat) REPEAT=${2:?--repeat needs a value}; shift 2 ;;
	--bench) BENCH=${2:?--bench needs a value}; shift 2 ;;
	--strict) STRICT=1; shift ;;
	-h | --help) usage ;;
	-*) echo "compare-fio.sh: unknown option '$1'" >&2; usage ;;
	*)
		[[ -z $FILE ]] || { echo "compare-fio.sh: unexpected argument '$1'" >&2; usage; }
		FILE=$1; shift ;;
	esac
done
[[ -n $FILE ]] || { echo "compare-fio.sh: missing FILE" >&2; usage; }
[[ $RUNTIME =~ ^[1-9][0-9]*$ ]] || { echo "compare-fio.sh: --runtime: '$RUNTIME' is not a whole number of seconds" >&2; usage; }
[[ $REPEAT =~ ^[1-9][0-9]*$ ]] || { echo "compare-fio.sh: --repeat: '$REPEAT' is not a number from 1" >&2; usage; }

ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [[ -z $BENCH ]]; then
	for b in "${BATCHD_BENCH:-}" "$ROOT/build/tools/batchd-bench" "$(command -v batchd-bench || true)"; do
		if [[ -n $b && -x $b ]]; then BENCH=$b; break; fi
	done
fi
[[ -n $BENCH && -x $BENCH ]] || { echo "compare-fio.sh: batchd-bench not found; build it (ninja -C build) or pass --bench PATH" >&2; exit 1; }

if ! command -v fio >/dev/null; then
	echo "compare-fio.sh: installing fio" >&2
	if [[ $(id -u) -eq 0 ]]; then apt-get install -y fio >&2; else sudo apt-get install -y fio >&2; fi
fi
PY=/usr/bin/python3
[[ -x $PY ]] || PY=python3

if [[ ! -e $FILE ]]; then
	echo "compare-fio.sh: creating $FILE ($SIZE)" >&2
	"$BENCH" disk "$FILE" --size "$SIZE" --bs 1M --qd 4 --runtime 100ms --json >/dev/null
fi
if [[ -b $FILE ]]; then BYTES=$(blockdev --getsize64 "$FILE"); else BYTES=$(stat -c %s "$FILE"); fi

T=$(mktemp -d "${TMPDIR:-/tmp}/compare-fio.XXXXXX")
trap 'rm -rf "$T"' EXIT

# name rw bs qd metric target
PATTERNS=(
	"read-1M-qd32 read 1M 32 bw 0.95"
	"randread-4K-qd64 randread 4K 64 iops 0.90"
	"randread-128K-qd16 randread 128K 16 bw 0.95"
)

run_fio() { # name rw bs qd out
	fio --name="$1" --filename="$FILE" --size="$BYTES" --rw="$2" --bs="$3" --iodepth="$4" \
		--ioengine=io_uring --direct=1 --fixedbufs --registerfiles --numjobs=1 \
		--time_based --runtime="$RUNTIME" --ramp_time=0 --output-format=json >"$5"
}
run_bench() { # name rw bs qd out
	"$BENCH" disk "$FILE" --rw "$2" --bs "$3" --qd "$4" --direct --runtime "$RUNTIME" --json >"$5"
}

echo "# $(fio --version) vs $("$BENCH" --version); $(uname -sr); $FILE: $BYTES bytes; ${RUNTIME}s per run, $REPEAT run(s) each"
echo "# fio --filename=$FILE --size=$BYTES --rw=RW --bs=BS --iodepth=QD --ioengine=io_uring --direct=1 --fixedbufs --registerfiles --numjobs=1 --time_based --runtime=$RUNTIME --ramp_time=0 --output-format=json"
echo "# $BENCH disk $FILE --rw RW --bs BS --qd QD --direct --runtime $RUNTIME --json"
for p in "${PATTERNS[@]}"; do
	read -r name rw bs qd _ _ <<<"$p"
	for ((i = 1; i <= REPEAT; i++)); do
		echo "compare-fio.sh: $name run $i/$REPEAT" >&2
		if ((i % 2)); then
			run_fio "$name" "$rw" "$bs" "$qd" "$T/$name.fio.$i.json"
			run_bench "$name" "$rw" "$bs" "$qd" "$T/$name.bench.$i.json"
		else
			run_bench "$name" "$rw" "$bs" "$qd" "$T/$name.bench.$i.json"
			run_fio "$name" "$rw" "$bs" "$qd" "$T/$name.fio.$i.json"
		fi
	done
done

"$PY" - "$T" "$REPEAT" "$STRICT" "${PATTERNS[@]}" <<'EOF'
import json, statistics, sys

tmp, repeat, strict = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"

def load(name, tool, i):
    with open(f"{tmp}/{name}.{tool}.{i}.json") as f:
        j = json.load(f)
    job = j["jobs"][0] if tool == "fio" else j
    r = job["read"] if tool == "fio" else j
    c = r["clat_ns"]
    ms = r["runtime"] if tool == "fio" else r["runtime_ms"]
    cpu = (job["usr_cpu"] + job["sys_cpu"]) / 100 * ms * 1e3 / max(r["total_ios"], 1)
    return {"bw": r["bw_bytes"], "iops": r["iops"], "mean": c["mean"], "cpu": cpu,
            "p50": c["percentile"]["50.000000"], "p99": c["percentile"]["99.000000"]}

def med(runs, key):
    return statistics.median(r[key] for r in runs)

def fmt(metric, v):
    return f"{v / 1e6:8.1f} MB/s" if metric == "bw" else f"{v / 1e3:8.1f} kIOPS"

missed = 0
print(f"{'pattern':<20} {'metric':<6} {'fio':>14} {'batchd-bench':>14} {'ratio':>6} {'target':>6}  "
      f"{'clat p50/p99 us: fio':>21} {'batchd-bench':>13}  {'CPU us/read: fio':>16} {'bb':>5}")
for p in sys.argv[4:]:
    name, rw, bs, qd, metric, target = p.split()
    fio = [load(name, "fio", i) for i in range(1, repeat + 1)]
    bb = [load(name, "bench", i) for i in range(1, repeat + 1)]
    f, b = med(fio, metric), med(bb, metric)
    ratio = statistics.median(y[metric] / x[metric] for x, y in zip(fio, bb) if x[metric])
    ok = ratio >= float(target)
    missed += not ok
    lat = lambda runs: f"{med(runs, 'p50') / 1e3:.0f}/{med(runs, 'p99') / 1e3:.0f}"
    print(f"{name:<20} {metric:<6} {fmt(metric, f):>14} {fmt(metric, b):>14} {ratio:6.3f} "
          f"{float(target):6.2f}  {lat(fio):>21} {lat(bb):>13}  {med(fio, 'cpu'):16.2f} "
          f"{med(bb, 'cpu'):5.2f}  {'ok' if ok else 'MISSED'}")
    if repeat > 1:
        print(f"{'':<20} pairs (fio / batchd-bench): " + ", ".join(
            f"{fmt(metric, x[metric]).strip()} / {fmt(metric, y[metric]).strip()}"
            for x, y in zip(fio, bb)))
        lo, hi = min(x[metric] for x in fio), max(x[metric] for x in fio)
        print(f"{'':<20} fio against itself: {fmt(metric, lo).strip()} .. {fmt(metric, hi).strip()} "
              f"({100 * (hi - lo) / f:.0f}% of its median): the noise floor of this disk")
print("ratio: median over pairs of batchd-bench / fio; fio, batchd-bench: medians of the runs;")
print("CPU us/read: user + system CPU time of the reading thread per completed read (median)")
sys.exit(3 if strict and missed else 0)
EOF
