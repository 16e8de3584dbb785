#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Measure batchd-pack against the zstd command line on the same bytes, and
# batchd's delivery against batchd-pack's decode, side by side in one run.
#
#   tools/bench/bench-pack.sh OUTDIR INPUT_DIR...
#
# 1. create: `batchd-pack create --level 3 --threads 2` versus `zstd -3 -T2`
#    on the inputs' files concatenated in the same (bytewise path) order;
# 2. decode: `batchd-pack verify` versus `zstd -d` of that frame;
# 3. delivery: a batchd on the pack, `batchctl consume` of one epoch with
#    global shuffling (O_DIRECT reads: the page cache does not help), versus
#    the verify figure.
# Figures are raw (uncompressed) MB/s, 1 MB = 10^6 bytes.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 2 ] || { echo "usage: $0 OUTDIR INPUT_DIR..." >&2; exit 2; }
out=$1
shift
pack=build/tools/batchd-pack
ctl=build/tools/batchctl
command -v zstd >/dev/null || { echo "bench-pack: zstd is not installed" >&2; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -rf "$out/bench.bpk" "$out/cat.bin" "$out/cat.zst"

secs() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null; t1=$(date +%s.%N); awk "BEGIN { print $t1 - $t0 }"; }
mbs() { awk "BEGIN { printf \"%.1f\", $1 / $2 / 1000000 }"; }
div() { awk "BEGIN { printf \"%.2f\", $1 / $2 }"; }

# The same bytes in the same order as the pack's samples.
for d in "$@"; do
	(cd "$d" && find . -type f -print0 | LC_ALL=C sort -z | sed -z 's|^\./||' |
		xargs -0 -r cat --)
done >"$out/cat.bin"
raw=$(stat -c %s "$out/cat.bin")
echo "input: $raw bytes in $(for d in "$@"; do find "$d" -type f; done | wc -l) files"

t_pack=$(secs "$pack" create "$out/bench.bpk" "$@" --level 3 --threads 2)
t_zstd=$(secs zstd -q -3 -T2 -f "$out/cat.bin" -o "$out/cat.zst")
t_verify=$(secs "$pack" verify "$out/bench.bpk")
t_unzstd=$(secs zstd -q -d -f "$out/cat.zst" -o /dev/null)
"$pack" info "$out/bench.bpk" | sed 's/^/  /'
printf '%-34s %10s %10s %8s\n' "" "batchd" "zstd" "ratio"
printf '%-34s %10s %10s %8s\n' "create, level 3, 2 threads (MB/s)" "$(mbs "$raw" "$t_pack")" \
	"$(mbs "$raw" "$t_zstd")" "$(div "$t_zstd" "$t_pack")"
printf '%-34s %10s %10s %8s\n' "decode, 1 thread (MB/s)" "$(mbs "$raw" "$t_verify")" \
	"$(mbs "$raw" "$t_unzstd")" "$(div "$t_unzstd" "$t_verify")"
printf '%-34s %10s %10s\n' "compressed size (bytes)" \
	"$("$pack" info "$out/bench.bpk" --json | sed 's/.*"stored_bytes": \([0-9]*\).*/\1/')" \
	"$(stat -c %s "$out/cat.zst")"

sock="$out/batchd.sock"
build/daemon/batchd --no-config --socket "$sock" --root "$out" --direct on --log-level warning &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null; wait $daemon 2>/dev/null' EXIT
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
json=$("$ctl" -s "$sock" consume bench.bpk --batch-size 256 --epochs 1 --shuffle global --json)
echo "batchctl consume (global, batch 256, O_DIRECT): $json"
cons=$(echo "$json" | sed 's/.*"mb_per_s": \([0-9.]*\).*/\1/')
ver=$(mbs "$raw" "$t_verify")
printf 'delivery %s MB/s on %s decode threads versus verify %s MB/s on 1: %s\n' "$cons" \
	"$(nproc)" "$ver" "$(div "$cons" "$ver")"
rm -f "$out/cat.bin" "$out/cat.zst"
