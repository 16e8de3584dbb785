#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bench-records.sh - tiny samples from the ram tier: what the C client
# gets, with batchd's defaults.
#
#   tools/bench/bench-records.sh [PAIRS] [EPOCHS]    (PAIRS defaults to 3, EPOCHS to 8)
#
# Packs 200,000 records of 64 bytes twice: with batchd-pack's default (one
# record per block) and with --block-size 64K. Starts one batchd per run
# with its defaults (the packs are in the ram tier), reads one epoch to
# warm it, then times `batchctl consume` over EPOCHS epochs, global
# shuffle, batch 256, every sample's bytes delivered. Runs the two packs
# in PAIRS alternating pairs and prints each run's samples/s, then the
# median and spread per pack, with the load average.
#
# Environment: BATCHD_BUILD (default: build), TMPDIR, RECORDS (default
# 200000), BATCH (default 256), SHUFFLE (default global).
set -euo pipefail

pairs=${1:-3}
epochs=${2:-8}
case "$pairs$epochs" in *[!0-9]*|'') echo "usage: $0 [PAIRS] [EPOCHS]" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${BATCHD_BUILD:-$here/build}
records=${RECORDS:-200000}
batch=${BATCH:-256}
shuffle=${SHUFFLE:-global}
batchd=$build/daemon/batchd
pack=$build/tools/batchd-pack
ctl=$build/tools/batchctl
for b in "$batchd" "$pack" "$ctl"; do
	[ -x "$b" ] || { echo "bench-records.sh: $b is not built (ninja -C $build)" >&2; exit 2; }
done

dir=$(mktemp -d "${TMPDIR:-/tmp}/batchd-records.XXXXXX")
daemon_pid=
cleanup() {
	[ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT

# Printable records, so that zstd has something to do.
head -c $((records * 48)) /dev/urandom | base64 -w0 | head -c $((records * 64)) > "$dir/rec.bin"
"$pack" create "$dir/one.bpk" --records 64 "$dir/rec.bin" >/dev/null
"$pack" create "$dir/blk.bpk" --records 64 "$dir/rec.bin" --block-size 64K >/dev/null

# One run: a fresh batchd, a warm-up epoch, then the timed epochs. Prints samples/s.
run() {
	local name=$1 sock=$dir/sock out
	rm -f "$sock"
	"$batchd" --no-config --socket "$sock" --root "$dir" --log-level warning &
	daemon_pid=$!
	for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
	"$ctl" -s "$sock" consume "$dir/$name" --batch-size "$batch" --shuffle "$shuffle" \
		--epochs 1 --json >/dev/null
	out=$("$ctl" -s "$sock" consume "$dir/$name" --batch-size "$batch" --shuffle "$shuffle" \
		--start-epoch 1 --epochs "$epochs" --json)
	kill "$daemon_pid"
	wait "$daemon_pid" 2>/dev/null || true
	daemon_pid=
	python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print("%.0f" % (d["samples"] / d["seconds"]))' "$out"
}

declare -A rates
for p in $(seq "$pairs"); do
	for name in one.bpk blk.bpk; do
		r=$(run "$name")
		rates[$name]+="$r "
		printf 'pair %d  %-8s %12s samples/s\n' "$p" "$name" "$r"
	done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for name in one.bpk blk.bpk; do
	python3 - "$name" ${rates[$name]} <<'PY'
import statistics, sys
name, v = sys.argv[1], [float(x) for x in sys.argv[2:]]
label = {"one.bpk": "one record per block (default)", "blk.bpk": "64 KiB blocks"}[name]
print("%-32s median %10.0f samples/s  (%.0f-%.0f)" % (label, statistics.median(v), min(v), max(v)))
PY
done
