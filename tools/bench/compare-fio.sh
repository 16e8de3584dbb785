#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# compare-fio.sh - batchd-bench disk side by side with fio on the same file.
#
#   tools/bench/compare-fio.sh FILE [--size SIZE] [--runtime SEC] [--repeat N]
#                        [--pages normal|huge|both] [--bench PATH] [--strict]
#
# Runs three patterns, each first with fio (io_uring engine, O_DIRECT,
# fixed buffers, registered files, time-based, no ramp, JSON output) and
# then with `batchd-bench disk` with the same block size, queue depth,
# runtime, fixed buffers and registered files:
#
#   read      1 MiB   QD32   compared on bandwidth   (target >= 0.95 of fio)
#   randread  4 KiB   QD64   compared on IOPS        (target >= 0.95 of fio)
#   randread  128 KiB QD16   compared on bandwidth   (target >= 0.95 of fio)
#
# Each pattern runs once per kind of buffer page, both tools on the same
# kind (--pages, default both):
#
#   normal   fio --iomem=malloc (its default), batchd-bench's default
#   huge     hugetlb pages on both: fio --iomem=mmaphuge (MAP_HUGETLB),
#            batchd-bench --hugepages=hugetlb
#
# Hugetlb pages exist only when vm.nr_hugepages reserves them (fio takes
# no transparent huge pages); where too few are free for a pattern, its
# huge row says so and is not run, and a huge run that fio is refused or
# that batchd-bench does not get hugetlb pages for is reported as such.
# Every row names what each tool's buffers were: page kind (batchd-bench's
# as it reports it), fixed buffers, registered files.
#
# The table shows each pair with the ratio batchd-bench / fio and the
# latencies. FILE is created at --size (default 2G) when absent. Each
# pattern runs as --repeat N pairs (default 5) of --runtime SEC each
# (default 4), fio and batchd-bench back to back, alternating which goes
# first. Shared and cloud disks drift by tens of percent within a minute,
# so the ratio shown is the median of the per-pair ratios (each pair ran
# under nearly the same conditions), next to the median of each tool's
# own numbers. fio is installed with apt-get when missing.
#
# Exit status: 0; 1 on a failed run; 3 with --strict when a target is missed;
# 2 on a usage error.
set -euo pipefail
export LC_ALL=C

usage() {
	echo "usage: tools/bench/compare-fio.sh FILE [--size SIZE] [--runtime SEC] [--repeat N] [--pages normal|huge|both] [--bench PATH] [--strict]" >&2
	exit 2
}

FILE="" SIZE=2G RUNTIME=4 REPEAT=5 BENCH="" STRICT=0 PAGES=both
while [[ $# -gt 0 ]]; do
	case $1 in
	--size) SIZE=${2:?--size needs a value}; shift 2 ;;
	--runtime) RUNTIME=${2:?--runtime needs a value}; shift 2 ;;
	--repeat) REPEAT=${2:?--repeat needs a value}; shift 2 ;;
	--pages) PAGES=${2:?--pages needs a value}; shift 2 ;;
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
case $PAGES in
normal) VARIANTS=(normal) ;;
huge) VARIANTS=(huge) ;;
both) VARIANTS=(normal huge) ;;
*) echo "compare-fio.sh: --pages: '$PAGES' is not normal, huge or both" >&2; usage ;;
esac

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
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
	"randread-4K-qd64 randread 4K 64 iops 0.95"
	"randread-128K-qd16 randread 128K 16 bw 0.95"
)

bytes_of() { # SIZE with a K or M suffix
	case $1 in
	*K) echo $((${1%K} << 10)) ;;
	*M) echo $((${1%M} << 20)) ;;
	*) echo "$1" ;;
	esac
}
meminfo() { awk -v k="$1:" '$1 == k { print $2 }' /proc/meminfo; }
THP=$(sed -n 's/.*\[\(.*\)\].*/\1/p' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo unknown)
HUGE_KB=$(meminfo Hugepagesize)
HUGE_KB=${HUGE_KB:-2048}

# huge_refused BS QD: why this pattern cannot run on hugetlb pages (empty
# when it can). fio maps qd * bs plus a page of alignment, rounded up to
# whole huge pages; batchd-bench the same without the page; one at a time.
huge_refused() {
	local need free
	need=$(( ( $(bytes_of "$1") * $2 + 4096 + HUGE_KB * 1024 - 1 ) / (HUGE_KB * 1024) ))
	free=$(meminfo HugePages_Free)
	free=${free:-0}
	if ((free < need)); then
		echo "refused: $need hugetlb pages of $HUGE_KB kB needed, $free free (reserve with: sysctl vm.nr_hugepages=$(( $(meminfo HugePages_Total) + need - free )))"
	fi
}

# Registered buffers are unpinned by the ring's teardown, which the kernel
# runs after the process has exited: wait (up to 5 s) until the previous
# run's hugetlb pages are free again, or the next run would find too few.
HUGE_FREE0=$(meminfo HugePages_Free)
HUGE_FREE0=${HUGE_FREE0:-0}
settle_huge() { # variant
	[[ $1 == huge ]] || return 0
	for _ in $(seq 50); do
		(($(meminfo HugePages_Free) >= HUGE_FREE0)) && return 0
		sleep 0.1
	done
}

fio_mem() { if [[ $1 == huge ]]; then echo mmaphuge; else echo malloc; fi; }
bench_pages() { if [[ $1 == huge ]]; then echo "--hugepages=hugetlb"; fi; }

run_fio() { # name rw bs qd variant out
	settle_huge "$5"
	# A job fio cannot set up (no hugetlb pages left) prints its error
	# before the JSON and exits 1; the error line stays in the file.
	fio --name="$1" --filename="$FILE" --size="$BYTES" --rw="$2" --bs="$3" --iodepth="$4" \
		--ioengine=io_uring --direct=1 --fixedbufs --registerfiles --iomem="$(fio_mem "$5")" \
		--numjobs=1 --time_based --runtime="$RUNTIME" --ramp_time=0 --output-format=json >"$6"
}
run_bench() { # name rw bs qd variant out
	settle_huge "$5"
	# shellcheck disable=SC2046 # an empty word for normal pages is the point
	"$BENCH" disk "$FILE" --rw "$2" --bs "$3" --qd "$4" --direct $(bench_pages "$5") \
		--runtime "$RUNTIME" --json >"$6"
}

echo "# $(fio --version) vs $("$BENCH" --version); $(uname -sr); $FILE: $BYTES bytes; ${RUNTIME}s per run, $REPEAT run(s) each"
echo "# fio --filename=$FILE --size=$BYTES --rw=RW --bs=BS --iodepth=QD --ioengine=io_uring --direct=1 --fixedbufs --registerfiles --iomem=malloc|mmaphuge --numjobs=1 --time_based --runtime=$RUNTIME --ramp_time=0 --output-format=json"
echo "# $BENCH disk $FILE --rw RW --bs BS --qd QD --direct [--hugepages=hugetlb] --runtime $RUNTIME --json"
echo "# pages: normal = fio --iomem=malloc and batchd-bench's default; huge = hugetlb on both (fio --iomem=mmaphuge, batchd-bench --hugepages=hugetlb)"
echo "# transparent huge pages: $THP$([[ $THP == always ]] && echo " (normal-page buffers of either tool may get THP; batchd-bench reports what it got)"); hugetlb pages: $(meminfo HugePages_Free) of $(meminfo HugePages_Total) free, $HUGE_KB kB"
: >"$T/skipped"
for v in "${VARIANTS[@]}"; do
	for p in "${PATTERNS[@]}"; do
		read -r name rw bs qd _ _ <<<"$p"
		if [[ $v == huge ]]; then
			why=$(huge_refused "$bs" "$qd")
			if [[ -n $why ]]; then
				echo "$name $why" >>"$T/skipped"
				continue
			fi
		fi
		for ((i = 1; i <= REPEAT; i++)); do
			echo "compare-fio.sh: $name, $v pages, run $i/$REPEAT" >&2
			f=$T/$name.$v.fio.$i.json b=$T/$name.$v.bench.$i.json
			rc=0
			if ((i % 2)); then
				run_fio "$name" "$rw" "$bs" "$qd" "$v" "$f" || rc=$?
				run_bench "$name" "$rw" "$bs" "$qd" "$v" "$b"
			else
				run_bench "$name" "$rw" "$bs" "$qd" "$v" "$b"
				run_fio "$name" "$rw" "$bs" "$qd" "$v" "$f" || rc=$?
			fi
			if ((rc != 0)); then
				if [[ $v == huge ]] && grep -q "Cannot allocate memory" "$f"; then
					echo "$name refused: fio could not map its buffers on hugetlb pages ($(grep -m1 '^fio:' "$f"))" >>"$T/skipped"
					rm -f "$T/$name.$v".*
					break
				fi
				echo "compare-fio.sh: fio failed on $name ($v pages):" >&2
				grep -v '^[[:space:]{}\[\]]' "$f" | head -5 >&2 || true
				exit 1
			fi
		done
	done
done

"$PY" - "$T" "$REPEAT" "$STRICT" "${#VARIANTS[@]}" "${VARIANTS[@]}" "${PATTERNS[@]}" <<'EOF'
import json, statistics, sys

tmp, repeat, strict = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
nv = int(sys.argv[4])
variants, patterns = sys.argv[5:5 + nv], sys.argv[5 + nv:]
skipped = {}
for line in open(f"{tmp}/skipped"):
    name, why = line.rstrip("\n").split(" ", 1)
    skipped[name] = why

def load(name, v, tool, i):
    with open(f"{tmp}/{name}.{v}.{tool}.{i}.json") as f:
        text = f.read()
    j = json.loads(text[text.index("{"):])
    job = j["jobs"][0] if tool == "fio" else j
    r = job["read"] if tool == "fio" else j
    c = r["clat_ns"]
    ms = r["runtime"] if tool == "fio" else r["runtime_ms"]
    cpu = (job["usr_cpu"] + job["sys_cpu"]) / 100 * ms * 1e3 / max(r["total_ios"], 1)
    if tool == "fio":
        # Its JSON leaves engine options out; it fails rather than run
        # without the fixed buffers and registered files it was given.
        mem = job["job options"].get("mem", "malloc")
        bufs = ({"malloc": "malloc (normal)", "mmaphuge": "mmaphuge (hugetlb)"}.get(mem, mem),
                True, True)
    else:
        bufs = (j.get("pages", "normal"), j["fixedbufs"], j["registerfiles"])
    return {"bw": r["bw_bytes"], "iops": r["iops"], "mean": c["mean"], "cpu": cpu, "bufs": bufs,
            "p50": c["percentile"]["50.000000"], "p99": c["percentile"]["99.000000"]}

def med(runs, key):
    return statistics.median(r[key] for r in runs)

def fmt(metric, v):
    return f"{v / 1e6:8.1f} MB/s" if metric == "bw" else f"{v / 1e3:8.1f} kIOPS"

def bufs(runs):
    kinds = sorted({r["bufs"] for r in runs})
    return "; ".join(f"{k[0]}{', fixed bufs' if k[1] else ''}{', reg files' if k[2] else ''}"
                     for k in kinds)

missed = 0
print(f"{'pattern':<20} {'pages':<6} {'metric':<6} {'fio':>14} {'batchd-bench':>14} {'ratio':>6} "
      f"{'target':>6}  {'clat p50/p99 us: fio':>21} {'batchd-bench':>13}  "
      f"{'CPU us/read: fio':>16} {'bb':>5}")
for v in variants:
    for p in patterns:
        name, rw, bs, qd, metric, target = p.split()
        if v == "huge" and name in skipped:
            print(f"{name:<20} {v:<6} {skipped[name]}")
            continue
        fio = [load(name, v, "fio", i) for i in range(1, repeat + 1)]
        bb = [load(name, v, "bench", i) for i in range(1, repeat + 1)]
        f, b = med(fio, metric), med(bb, metric)
        ratio = statistics.median(y[metric] / x[metric] for x, y in zip(fio, bb) if x[metric])
        # Like for like only when batchd-bench got the pages fio was given.
        want = "hugetlb" if v == "huge" else None
        same = all(y["bufs"][0] == want for y in bb) if want else True
        ok = ratio >= float(target)
        missed += not ok and same
        lat = lambda runs: f"{med(runs, 'p50') / 1e3:.0f}/{med(runs, 'p99') / 1e3:.0f}"
        print(f"{name:<20} {v:<6} {metric:<6} {fmt(metric, f):>14} {fmt(metric, b):>14} "
              f"{ratio:6.3f} {float(target):6.2f}  {lat(fio):>21} {lat(bb):>13}  "
              f"{med(fio, 'cpu'):16.2f} {med(bb, 'cpu'):5.2f}  "
              f"{'ok' if ok else 'MISSED' if same else 'unmatched'}")
        print(f"{'':<20} buffers: fio {bufs(fio)} | batchd-bench {bufs(bb)}"
              + ("" if same else " (not the hugetlb pages fio had: not like for like)"))
        if repeat > 1:
            print(f"{'':<20} pairs (fio / batchd-bench): " + ", ".join(
                f"{fmt(metric, x[metric]).strip()} / {fmt(metric, y[metric]).strip()}"
                for x, y in zip(fio, bb)))
            lo, hi = min(x[metric] for x in fio), max(x[metric] for x in fio)
            print(f"{'':<20} fio against itself: {fmt(metric, lo).strip()} .. {fmt(metric, hi).strip()} "
                  f"({100 * (hi - lo) / f:.0f}% of its median): the noise floor of this disk")
print("ratio: median over pairs of batchd-bench / fio; fio, batchd-bench: medians of the runs;")
print("CPU us/read: user + system CPU time of the reading thread per completed read (median);")
print("buffers: fio's --iomem (its pages) and flags as given (fio fails rather than run without")
print("them); batchd-bench's as it reports them (the pages its buffers got)")
sys.exit(3 if strict and missed else 0)
EOF
