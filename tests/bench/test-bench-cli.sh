#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# test-bench-cli.sh - batchd-bench end to end: every mode on a small file and
# small packs, its JSON parsed back and its byte counts checked against what
# was read, and every bad argument refused with exit status 2 and a message
# naming it.
#
#   bash tests/bench/test-bench-cli.sh BATCHD-BENCH BATCHD-PACK BATCHD PYTHON3
#
# Each check prints "ok - ...", "FAIL - ..." or "skip - ... (why)"; the last
# line is "N passed, M failed". Exit status 0 when nothing failed, 1 otherwise.
# Runs in the current directory's file system (meson: the build directory),
# where O_DIRECT usually works; tmpfs does not take O_DIRECT and the checks
# that need it are skipped there.
set -euo pipefail
export LC_ALL=C

if [[ $# -ne 4 ]]; then
	echo "usage: $0 BATCHD-BENCH BATCHD-PACK BATCHD PYTHON3" >&2
	exit 2
fi
BENCH=$(realpath -- "$1")
PACK=$(realpath -- "$2")
BATCHD=$(realpath -- "$3")
PY=$4

# shellcheck source=tests/bench/bench-testlib.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/bench-testlib.sh"
scratch bench-cli
# The pipeline mode's own batchd gets a directory under $TMPDIR when that is
# short enough for a socket path; use ours, to check it is cleaned up.
TMPDIR_CHECK=0
if [[ ${#T} -le 55 ]]; then
	mkdir "$T/tmp"
	export TMPDIR=$T/tmp
	TMPDIR_CHECK=1
fi

jval() { "$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }

# ---- arguments -----------------------------------------------------------------

# usage_error DESC NEEDLE ARGS...: exit 2, and stderr names NEEDLE.
usage_error() {
	local desc=$1 needle=$2
	shift 2
	run "$@"
	if [[ $RC -eq 2 ]] && grep -qF -- "$needle" "$T/err"; then
		ok "usage error: $desc"
	else
		bad "usage error: $desc: exit $RC, stderr: $(head -c 200 "$T/err" | tr '\n' ' ')"
	fi
}

F=$T/data.bin
usage_error "no mode" "missing mode"
usage_error "unknown mode" "'frobnicate'" frobnicate
usage_error "disk without FILE" "missing FILE" disk
usage_error "disk two files" "'b'" disk a b
usage_error "disk --bs 0" "--bs" disk "$F" --bs 0
usage_error "disk --bs junk" "--bs" disk "$F" --bs 4Q
usage_error "disk --bs 2G" "--bs" disk "$F" --bs 2G
usage_error "disk --qd 0" "--qd" disk "$F" --qd 0
usage_error "disk --qd 5000" "--qd" disk "$F" --qd 5000
usage_error "disk --rw write" "--rw" disk "$F" --rw write
usage_error "disk --runtime x" "--runtime" disk "$F" --runtime x
usage_error "disk --runtime 0" "--runtime" disk "$F" --runtime 0
usage_error "disk --engine aio" "--engine" disk "$F" --engine aio
usage_error "disk --direct=2" "--direct" disk "$F" --direct=2
usage_error "disk --threads 0" "--threads" disk "$F" --threads 0
usage_error "disk --size junk" "--size" disk "$F" --size lots
usage_error "disk --hugepages=big" "--hugepages" disk "$F" --hugepages=big
usage_error "disk unknown option" "--frob" disk "$F" --frob
usage_error "disk missing value" "--bs" disk "$F" --bs
usage_error "disk buffers over 4 GiB" "--qd x --bs" disk "$F" --qd 4096 --bs 2M
usage_error "sweep --bs list" "--bs" sweep "$F" --bs 4K,,8K
usage_error "sweep --bs list names the size forms" "sizes above 0, comma-separated (\"4K,64K,1M\"); a size is a number of bytes, or a number with a unit: K, M, G, T or KiB" \
	sweep "$F" --bs 4K,lots
usage_error "sweep --qd list" "--qd" sweep "$F" --qd 1,x
usage_error "sweep --qd 0" "--qd" sweep "$F" --qd 0,1
usage_error "decode without DATASET" "missing DATASET" decode
usage_error "decode --threads x" "--threads" decode x.bpk --threads x
usage_error "decode --seconds x" "--seconds" decode x.bpk --seconds soon
usage_error "pipeline --clients 0" "--clients" pipeline x.bpk --clients 0
usage_error "pipeline --batch-size x" "--batch-size" pipeline x.bpk --batch-size x
usage_error "pipeline --shuffle" "--shuffle" pipeline x.bpk --shuffle random
usage_error "pipeline --seconds with --epochs" "--epochs" pipeline x.bpk --seconds 1 --epochs 1
usage_error "pipeline --device x" "--device" pipeline x.bpk --device x
usage_error "pipeline --touch without --device" "--touch" pipeline x.bpk --touch
usage_error "h2d --size" "--size" h2d --size x
usage_error "h2d --reps 0" "--reps" h2d --reps 0
usage_error "h2d extra argument" "'x'" h2d x

run disk "$T/absent.bin"
expect "disk on a missing file without --size says so" \
	eval '[[ $RC -eq 1 ]] && grep -q "give --size" "$T/err" && [[ ! -e $T/absent.bin ]]'

# ---- disk ----------------------------------------------------------------------

run disk "$F" --size 8M --bs 64K --qd 8 --json
expect "disk creates FILE at --size" eval '[[ $RC -eq 0 && $(stat -c %s "$F") -eq 8388608 ]]'
cp "$T/out" "$T/create.json"
expect "a size-based run reads the file once (io_bytes == size)" \
	py 'j["io_bytes"] == 8 << 20 and j["total_ios"] == 128 and j["clat_ns"]["N"] == 128 and not j["time_based"]' "$T/create.json"

DIRECT=1
run disk "$F" --direct --bs 4K --qd 4 --size 64K --json
if [[ $RC -ne 0 ]]; then
	DIRECT=0
	skip "O_DIRECT checks (this file system refuses O_DIRECT: $(head -c 120 "$T/err"))"
else
	expect "--direct reads with O_DIRECT, fixed buffers and files" \
		py 'j["direct"] == 1 and j["fixedbufs"] and j["registerfiles"] and j["ioengine"] == "io_uring"' "$T/out"
fi

for args in "--rw read --bs 64K --qd 8" "--rw randread --bs 4K --qd 32" "--rw randread --bs 16K --qd 4 --threads 3" \
	"--rw read --bs 128K --qd 1 --engine psync" "--rw randread --bs 8K --qd 16 --buffered" \
	"--rw randread --bs 64K --qd 8 --hugepages --no-fixedbufs --no-registerfiles"; do
	# shellcheck disable=SC2086 # word splitting of $args is the point
	run disk "$F" $args --json
	cp "$T/out" "$T/d.json"
	expect "disk $args: every block read once, io_bytes == total_ios * bs == 8 MiB" \
		py 'j["io_bytes"] == 8 << 20 and j["io_bytes"] == j["total_ios"] * j["bs"] and j["clat_ns"]["N"] == j["total_ios"]' "$T/d.json"
done
run disk "$F" --rw randread --bs 4K --qd 4 --buffered --json
expect "--buffered is reported" py 'j["direct"] == 0' "$T/out"
# The pages under the buffers: what was asked and what was got, both reported.
THP=$(sed -n 's/.*\[\(.*\)\].*/\1/p' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo unknown)
HUGETLB_FREE=$(awk '$1 == "HugePages_Free:" { print $2 }' /proc/meminfo)
run disk "$F" --rw randread --bs 64K --qd 8 --json
cp "$T/out" "$T/pages.json"
if [[ $THP == always || $THP == unknown ]]; then
	expect "normal pages asked for, reported with what they got" \
		py 'j["pages_asked"] == "normal" and j["pages"] in ("normal", "thp", "mixed") and j["hugepages"] == (j["pages"] == "thp")' "$T/pages.json"
else
	expect "normal pages asked for and got (THP $THP)" \
		py 'j["pages_asked"] == "normal" and j["pages"] == "normal" and not j["hugepages"]' "$T/pages.json"
fi
run disk "$F" --rw randread --bs 64K --qd 8 --hugepages=hugetlb --json
cp "$T/out" "$T/pages.json"
if [[ ${HUGETLB_FREE:-0} -eq 0 ]]; then
	expect "--hugepages=hugetlb with no hugetlb pages reserved falls back to normal pages and says so" \
		py 'j["pages_asked"] == "hugetlb" and j["pages"] == "normal" and not j["hugepages"] and j["io_bytes"] == 8 << 20' "$T/pages.json"
	run disk "$F" --rw randread --bs 64K --qd 8 --hugepages=hugetlb
	expect "human output: normal pages (huge pages refused)" grep -q "normal pages (huge pages refused)" "$T/out"
else
	expect "--hugepages=hugetlb with $HUGETLB_FREE hugetlb pages free gets them" \
		py 'j["pages_asked"] == "hugetlb" and j["pages"] == "hugetlb" and j["hugepages"] and j["io_bytes"] == 8 << 20' "$T/pages.json"
fi
run disk "$F" --rw randread --bs 64K --qd 8 --hugepages=thp --json
cp "$T/out" "$T/pages.json"
if [[ $THP == never ]]; then
	expect "--hugepages=thp with THP off falls back to normal pages" \
		py 'j["pages_asked"] == "thp" and j["pages"] == "normal" and not j["hugepages"]' "$T/pages.json"
else
	expect "--hugepages=thp reports the pages it got" \
		py 'j["pages_asked"] == "thp" and j["pages"] in ("thp", "mixed", "normal") and j["hugepages"] == (j["pages"] == "thp") and j["io_bytes"] == 8 << 20' "$T/pages.json"
fi
run disk "$F" --rw read --bs 4K --qd 4 --engine psync --qd 8 --json
expect "psync reports its engine and reads at QD 1" \
	py 'j["ioengine"] == "psync" and j["iodepth"] == 1 and j["io_bytes"] == 8 << 20' "$T/out"
run disk "$F" --rw randread --bs 16K --qd 8 --size 1M --json
expect "--size below the file limits the region" py 'j["io_bytes"] == 1 << 20 and j["size"] == 1 << 20' "$T/out"

run disk "$F" --rw randread --bs 4K --qd 16 --runtime 300ms --json
cp "$T/out" "$T/tb.json"
expect "a time-based run: io_bytes == total_ios * bs, runtime >= --runtime" \
	py 'j["time_based"] and j["io_bytes"] > 0 and j["io_bytes"] == j["total_ios"] * 4096 and j["runtime_ms"] >= 299' "$T/tb.json"
expect "bw_bytes and iops agree with io_bytes and runtime_ms (fio's meaning)" \
	py 'abs(j["bw_bytes"] - j["io_bytes"] / j["runtime_ms"] * 1000) <= 1 + 1e-6 * j["bw_bytes"] and abs(j["iops"] - j["total_ios"] / j["runtime_ms"] * 1000) < 1e-3 * j["iops"] + 0.01 and abs(j["bw"] - j["bw_bytes"] / 1024) < 1' "$T/tb.json"
expect "clat_ns has fio's keys, percentiles ascending within min..max" \
	py 'sorted(j["clat_ns"]["percentile"]) == sorted(["1.000000","5.000000","10.000000","20.000000","30.000000","40.000000","50.000000","60.000000","70.000000","80.000000","90.000000","95.000000","99.000000","99.500000","99.900000","99.950000","99.990000"]) and (lambda p: all(a <= b for a, b in zip(p, p[1:])) and j["clat_ns"]["min"] <= p[0] and p[-1] <= j["clat_ns"]["max"])([v for k, v in sorted(j["clat_ns"]["percentile"].items(), key=lambda kv: float(kv[0]))]) and j["clat_ns"]["min"] <= j["clat_ns"]["mean"] <= j["clat_ns"]["max"]' "$T/tb.json"

run disk "$F" --rw read --bs 1M --qd 2
expect "human output reads like fio" \
	eval '[[ $RC -eq 0 ]] && grep -q "read: IOPS=" "$T/out" && grep -q "clat percentiles (usec): p50=" "$T/out" && grep -q "p99.9=" "$T/out"'
run disk "$F" --bs 3M --qd 1 --size 2M --json
expect "fewer whole blocks than threads is an error, not a hang" eval '[[ $RC -eq 1 ]] && grep -q "whole blocks" "$T/err"'
if [[ $DIRECT -eq 1 ]]; then
	run disk "$F" --direct --bs 1000 --qd 1
	expect "--direct with a misaligned --bs names the alignment" eval '[[ $RC -eq 1 ]] && grep -q "alignment" "$T/err"'
fi

# ---- sweep ---------------------------------------------------------------------

# svg_check PYTHON FILE: PYTHON's asserts over the SVG chart FILE, with root,
# texts (every text element's) and lines (the data polylines) defined.
svg_check() {
	"$PY" -c '
import sys, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[2]).getroot()
texts = [t.text or "" for t in root.iter(ns + "text")]
lines = [p for p in root.iter(ns + "polyline") if p.get("stroke") != "black"]
exec(sys.argv[1])
' "$1" "$2"
}

run sweep "$F" --bs 4K,64K --qd 1,4,2 --runtime 100ms --svg "$T/s.svg" --csv "$T/s.csv" --json
cp "$T/out" "$T/sweep.json"
expect "sweep measures every (bs, qd) point" \
	py 'len(j["points"]) == 6 and sorted((p["bs"], p["iodepth"]) for p in j["points"]) == sorted((b, q) for b in (4096, 65536) for q in (1, 2, 4)) and all(p["io_bytes"] > 0 and p["io_bytes"] % p["bs"] == 0 for p in j["points"])' "$T/sweep.json"
expect "sweep CSV: a header and one row per point, matching the JSON" \
	"$PY" -c '
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
j = json.load(open(sys.argv[2]))
assert len(rows) == 6, rows
for r, p in zip(rows, j["points"]):
    assert int(r["bs"]) == p["bs"] and int(r["qd"]) == p["iodepth"] and int(r["io_bytes"]) == p["io_bytes"]
' "$T/s.csv" "$T/sweep.json"
expect "sweep SVG: valid XML, one line per block size, axes, ticks and legend" \
	svg_check "$(cat <<'PY'
assert len(lines) == 2, len(lines)
assert all(len(p.get("points").split()) == 3 for p in lines)
assert any("queue depth" in t for t in texts) and any("bandwidth" in t for t in texts)
assert any(t == "bs 4.00 KiB" for t in texts) and any(t == "bs 64.0 KiB" for t in texts)
assert all(q in texts for q in ("1", "2", "4"))
PY
)" "$T/s.svg"
run disk "$F" --bs 4K --qd 4 --runtime 100ms --svg "$T/d.svg"
expect "disk SVG: valid XML, the reads' latency distribution rising to 100%, its legend" \
	svg_check "$(cat <<'PY'
assert len(lines) == 1, len(lines)
ys = [float(pt.split(",")[1]) for pt in lines[0].get("points").split()]
assert ys == sorted(ys, reverse=True) and ys[-1] == 50.0, ys[-3:]   # climbs to 100% (y 50)
assert any("read latency" in t for t in texts) and any(t.startswith("reads (") for t in texts)
assert all(p in texts for p in ("p50", "p90", "p99"))
PY
)" "$T/d.svg"
run sweep "$F" --bs 64K --qd 1,8 --runtime 100ms
expect "sweep prints a table with the knee" eval '[[ $RC -eq 0 ]] && grep -q "qd 8" "$T/out" && grep -q "90% of best at qd" "$T/out"'

# ---- packs ---------------------------------------------------------------------

# 240 samples of 200..6000 bytes of compressible text.
"$PY" - "$T/src" <<'PYEOF'
import os, random, sys
root = sys.argv[1]
os.makedirs(root)
rng = random.Random(7)
words = [b"batch", b"daemon", b"sample", b"tensor", b"gpu", b"zstd", b"block", b"epoch", b"queue"]
for i in range(240):
    n = rng.randint(200, 6000)
    out = bytearray()
    while len(out) < n:
        out += rng.choice(words) + b" " + str(rng.randint(0, 999)).encode() + b"\n"
    with open(os.path.join(root, "s%04d.txt" % i), "wb") as f:
        f.write(out[:n])
PYEOF
mkpack() { # OUT ARGS...
	local out=$1
	shift
	timeout 60 "$PACK" create "$out" "$T/src" "$@" >"$T/out" 2>"$T/err" &&
		timeout 60 "$PACK" info "$out" --json >"$out.info.json"
}
expect "batchd-pack makes the test packs" eval 'mkpack "$T/one.bpk" && mkpack "$T/big.bpk" --block-size 64K && mkpack "$T/shards" --block-size 16K --shard-size 128K'

# ---- decode --------------------------------------------------------------------

for p in one.bpk big.bpk shards; do
	run decode "$T/$p" --threads 2 --json
	cp "$T/out" "$T/dec.json"
	expect "decode $p: raw_bytes, stored_bytes and blocks equal the pack's" \
		py 'j["raw_bytes"] == j2["raw_bytes"] and j["stored_bytes"] == j2["stored_bytes"] and j["blocks"] == j2["blocks"] and j["passes"] == 1 and j["raw_bytes_per_s"] > 0' "$T/dec.json" "$T/$p.info.json"
done
run decode "$T/big.bpk" --threads 1 --seconds 200ms --json
cp "$T/out" "$T/dec.json"
expect "decode --seconds repeats whole passes: raw_bytes == passes * the pack's" \
	py 'j["passes"] >= 1 and j["raw_bytes"] == j["passes"] * j2["raw_bytes"] and j["seconds"] >= 0.2' "$T/dec.json" "$T/big.bpk.info.json"
run decode "$T/big.bpk"
expect "decode human output" eval '[[ $RC -eq 0 ]] && grep -q "MB/s raw" "$T/out"'
# Corrupt one byte in the middle of block 1's stored bytes: the index still
# opens, the block's hash check fails and decode names it.
cp "$T/big.bpk" "$T/bad.bpk"
"$PY" - "$T/bad.bpk" <<'PYEOF'
import sys
# the second block starts after the 64-byte header (+ dictionary, none here) and block 0
data = bytearray(open(sys.argv[1], "rb").read())
data[len(data) // 3] ^= 0xff
open(sys.argv[1], "wb").write(data)
PYEOF
run decode "$T/bad.bpk" --threads 2
expect "decode of a corrupt block fails naming the block" eval '[[ $RC -eq 1 ]] && grep -q "block [0-9]* at byte" "$T/err"'
run decode "$T/nothing.bpk"
expect "decode of a missing dataset fails" eval '[[ $RC -eq 1 && -s $T/err ]]'

# ---- pipeline ------------------------------------------------------------------

run pipeline "$T/big.bpk" --clients 2 --batch-size 12 --epochs 1 --batchd "$BATCHD" --json
cp "$T/out" "$T/pl.json"
expect "pipeline, 2 clients, 1 epoch: every sample once, bytes == the pack's raw_bytes" \
	py 'j["total"]["samples"] == 240 and j["total"]["bytes"] == j2["raw_bytes"] and j["total"]["batches"] == 20 and len(j["per_client"]) == 2 and all(c["samples"] == 120 for c in j["per_client"]) and j["own_daemon"]' "$T/pl.json" "$T/big.bpk.info.json"
expect "pipeline reports stall, first batch and waits" \
	py '0 <= j["total"]["stall_pct"] <= 100 and j["total"]["first_batch_ms"] > 0 and j["total"]["wait_ns"]["N"] == 20' "$T/pl.json"
run pipeline "$T/shards" --clients 1 --batch-size 16 --epochs 2 --shuffle block --batchd "$BATCHD" --json
cp "$T/out" "$T/pl.json"
expect "pipeline, sharded dataset, 2 epochs: bytes == 2 * raw_bytes" \
	py 'j["total"]["samples"] == 480 and j["total"]["bytes"] == 2 * j2["raw_bytes"]' "$T/pl.json" "$T/shards.info.json"
run pipeline "$T/one.bpk" --clients 2 --batch-size 8 --seconds 300ms --step-ms 2 --batchd "$BATCHD"
expect "pipeline, time-based, human table" eval '[[ $RC -eq 0 ]] && grep -q "^ *total" "$T/out" && grep -q "stall%" "$T/out"'
expect "pipeline with a step: no word of a stall by design" eval '! grep -q "by design" "$T/out"'
run pipeline "$T/one.bpk" --clients 2 --batch-size 8 --epochs 1 --batchd "$BATCHD" --svg "$T/p.svg"
expect "pipeline SVG: the waits of all clients and of each, as distributions" \
	svg_check "$(cat <<'PY'
assert len(lines) == 3, len(lines)
assert any(t.startswith("all clients (") for t in texts)
assert any(t.startswith("client 0 (") for t in texts) and any(t.startswith("client 1 (") for t in texts)
assert any("wait for a batch" in t for t in texts)
PY
)" "$T/p.svg"
run pipeline "$T/one.bpk" --clients 1 --batch-size 8 --epochs 1 --batchd "$BATCHD"
expect "pipeline without a step says its stall of 100% is by design" \
	eval '[[ $RC -eq 0 ]] && grep -q "stall% is 100 by design with no --step-ms or --step-cpu-ms" "$T/out"'

# A running batchd, named with --socket: the benchmark starts none.
"$BATCHD" --no-config --socket "$T/d.sock" --root "$T" 2>"$T/batchd.log" &
DAEMON_PID=$!
for _ in $(seq 500); do [[ -S $T/d.sock ]] && break; sleep 0.02; done
run pipeline one.bpk --socket "$T/d.sock" --clients 3 --batch-size 10 --epochs 1 --json
cp "$T/out" "$T/pl.json"
expect "pipeline --socket uses the running batchd" \
	py 'not j["own_daemon"] and j["total"]["samples"] == 240 and j["total"]["bytes"] == j2["raw_bytes"]' "$T/pl.json" "$T/one.bpk.info.json"
# A path the user can see goes to the daemon absolute, whether written so or
# relative to the current directory (the test runs in T's parent).
for ds in "$T/one.bpk" "$(basename "$T")/one.bpk"; do
	run pipeline "$ds" --socket "$T/d.sock" --clients 1 --batch-size 10 --epochs 1 --json
	cp "$T/out" "$T/pl.json"
	expect "pipeline --socket $ds: the dataset as the user named it" \
		py 'not j["own_daemon"] and j["total"]["samples"] == 240' "$T/pl.json"
done
kill "$DAEMON_PID"
wait "$DAEMON_PID" || true
DAEMON_PID=""
run pipeline one.bpk --socket "$T/none.sock" --epochs 1
expect "pipeline --socket with no daemon there: says which socket and what to do" \
	eval '[[ $RC -ne 0 ]] && grep -qF "cannot connect to batchd at $T/none.sock (the socket path given)" "$T/err" &&
	      grep -qF "is batchd running?" "$T/err"'
run pipeline "$T/big.bpk" --batchd "$T/no-such-batchd" --epochs 1
expect "pipeline with a batchd that cannot run fails cleanly" eval '[[ $RC -eq 1 && -s $T/err ]]'
if [[ $TMPDIR_CHECK -eq 1 ]]; then
	expect "pipeline leaves no temporary directory behind" eval '[[ -z $(ls -A "$T/tmp") ]]'
else
	skip "temporary directory check (the test directory is too deep for a socket path)"
fi

# ---- h2d -----------------------------------------------------------------------

run h2d --size 8M --reps 2 --json
if [[ $RC -eq 77 ]]; then
	expect "h2d without CUDA exits 77 and says why" grep -q "CUDA unavailable" "$T/err"
else
	expect "h2d measures pinned and pageable copies" py 'j["pinned"]["bw_bytes"] > 0 and j["pageable"]["bw_bytes"] > 0' "$T/out"
fi

finish
