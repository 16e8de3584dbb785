#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bench-hostile.sh - what hostile tenants cost a well-behaved one, on a
# shared batchd with its default limits.
#
#   tools/bench/bench-hostile.sh [PAIRS] [N]     (PAIRS defaults to 5, N to 8)
#
# Packs two datasets (20,000 text samples of 1-8 KiB for the good client;
# 20,000 records of ~300 bytes, one per block, for the floods), starts
# batchd, and runs PAIRS alternating pairs: the good client alone (A), then
# the good client while N hostile clients of each kind run (B):
# tools/test/hostile-client.c's silent connections, unread requests, session
# memory kept after close, floods of huge batches and absurd wait counters.
# The good client is `batchctl consume` over two epochs, global shuffle,
# batch 64. Run as root, each kind of hostile client runs as a user of its
# own (uids 60001-60005: five other tenants, each with limits of its own,
# so no attack is stopped by another's per-user cap); otherwise all run as
# the same user.
#
# Prints each pair, the median B/A ratio of samples/s and of first-batch
# latency with their spread (min-max), and the daemon's RSS and fds before
# the first attack, during the last one and after it.
#
# Environment: BATCHD_BUILD (default: build), TMPDIR, HOSTILE_KINDS (the
# kinds to run, default "silent noread keepfd flood counters").
set -euo pipefail

pairs=${1:-5}
n=${2:-8}
case "$pairs$n" in *[!0-9]*) echo "usage: $0 [PAIRS] [N]" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${BATCHD_BUILD:-$here/build}
batchd=$build/daemon/batchd
pack=$build/tools/batchd-pack
ctl=$build/tools/batchctl
hostile=$build/tools/hostile-client
for b in "$batchd" "$pack" "$ctl" "$hostile"; do
	[ -x "$b" ] || { echo "bench-hostile.sh: $b is not built (ninja -C $build)" >&2; exit 2; }
done

dir=$(mktemp -d "${TMPDIR:-/tmp}/batchd-hostile.XXXXXX")
chmod 755 "$dir"
daemon_pid=
cleanup() {
	pkill -f "$hostile -s $dir/sock" 2>/dev/null || true
	[ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT

python3 - "$dir/in" <<'EOF'
import os, random, sys
out, rng = sys.argv[1], random.Random(7)
words = "batch shard block sample epoch rank world seed tensor label".split()
def text(n):
    s, length = [], 0
    while length < n:
        w = rng.choice(words)
        s.append(w)
        length += len(w) + 1
    return (" ".join(s) + " ")[:n].encode()
for sub, count, lo, hi in (("good", 20000, 1024, 8192), ("tiny", 20000, 200, 400)):
    os.makedirs(os.path.join(out, sub))
    for i in range(count):
        with open(os.path.join(out, sub, "%05d" % i), "wb") as f:
            f.write(text(rng.randrange(lo, hi)))
EOF
mkdir -p "$dir/root"
"$pack" create "$dir/root/good.bpk" "$dir/in/good" --block-size 64K >/dev/null
"$pack" create "$dir/root/tiny.bpk" "$dir/in/tiny" >/dev/null
rm -rf "$dir/in"

cat >"$dir/batchd.conf" <<EOF
[daemon]
socket = $dir/sock
socket_mode = 0666
[datasets]
root = $dir/root
EOF
"$batchd" -c "$dir/batchd.conf" --log-level warning 2>"$dir/batchd.log" &
daemon_pid=$!
for _ in $(seq 100); do
	"$ctl" -s "$dir/sock" status >/dev/null 2>&1 && break
	sleep 0.1
done

other_uids=false
who="the same user"
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
	other_uids=true
	who="uids 60001-60005, one per kind"
fi
rss_mb() { awk '/^VmRSS:/ { printf "%d", $2 / 1024 }' "/proc/$daemon_pid/status"; }
fds() { ls "/proc/$daemon_pid/fd" | wc -l; }

attack_start() {
	local m i args uid=60000 as=()
	for m in ${HOSTILE_KINDS:-silent noread keepfd flood counters}; do
		uid=$((uid + 1))
		$other_uids && as=(setpriv --reuid="$uid" --regid="$uid" --clear-groups)
		case $m in
		keepfd | counters) args=(good.bpk) ;;
		flood) args=(-n 4096 tiny.bpk) ;;
		*) args=() ;;
		esac
		for i in $(seq "$n"); do
			"${as[@]}" "$hostile" -s "$dir/sock" -m "$m" -t 3600 "${args[@]}" \
				>>"$dir/hostile.out" 2>>"$dir/hostile.err" &
		done
	done
	sleep 2   # let the attack reach its steady state
}
attack_stop() {
	pkill -TERM -f "$hostile -s $dir/sock" 2>/dev/null || true
	while pgrep -f "$hostile -s $dir/sock" >/dev/null; do sleep 0.1; done
}
# good: prints "samples_per_s first_batch_ms"
good() {
	timeout 300 "$ctl" -s "$dir/sock" consume good.bpk --batch-size 64 --epochs 2 --shuffle global \
		--seed 3 --json |
		python3 -c 'import json, sys
d = json.load(sys.stdin)
print("%.0f %.3f" % (d["samples"] / d["seconds"], d["first_batch_ms"]))' ||
		echo "0 inf"   # not served within 300 s
}

good >/dev/null   # warm the page cache and the daemon
rss0=$(rss_mb)
fd0=$(fds)
echo "pair  alone: samples/s  first batch ms   |  under attack: samples/s  first batch ms"
ratios_rate=()
ratios_first=()
for p in $(seq "$pairs"); do
	read -r a_rate a_first < <(good)
	attack_start
	read -r b_rate b_first < <(good)
	rss1=$(rss_mb)
	fd1=$(fds)
	attack_stop
	printf "%4d  %17s  %14s   |  %24s  %14s\n" "$p" "$a_rate" "$a_first" "$b_rate" "$b_first"
	ratios_rate+=("$(awk -v a="$a_rate" -v b="$b_rate" 'BEGIN { printf "%.3f", b / a }')")
	ratios_first+=("$(awk -v a="$a_first" -v b="$b_first" 'BEGIN { printf "%.3f", b / a }')")
done
sleep 1
rss2=$(rss_mb)
fd2=$(fds)
stats() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
	m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
	printf "median %.2fx (spread %.2f-%.2f)", m, v[1], v[NR] }'; }
echo "samples/s under attack / alone:          $(stats "${ratios_rate[@]}")"
echo "first-batch latency under attack / alone: $(stats "${ratios_first[@]}")"
echo "daemon RSS: ${rss0} MiB before, ${rss1} MiB during the last attack, ${rss2} MiB after"
echo "daemon fds: $fd0 before, $fd1 during the last attack, $fd2 after"
echo "hostile clients ($n of each kind, as $who):"
awk '{ split($1, m, "="); for (i = 2; i <= NF; i++) { split($i, kv, "="); s[m[2] " " kv[1]] += kv[2] } }
	END { for (k in s) print "  " k "=" s[k] }' "$dir/hostile.out" | sort
