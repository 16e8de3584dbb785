#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# soak.sh - a real batchd under many trainers for a while: does it lose
# nothing, and does it give everything back?
#
#   tools/test/soak.sh SECONDS [CLIENTS]        (CLIENTS defaults to 32)
#
# Makes five datasets with batchd-pack (one sample per block with a
# dictionary; 64 KiB blocks; a directory of three shards; fixed-size
# records; a few samples of 0.5-1.5 MiB among small ones, one per block),
# starts batchd on a socket in a scratch directory whose root is
# that directory, and runs CLIENTS soak-clients at once for SECONDS. Each
# opens streams with random options (dataset, batch size 1..256, shuffle
# none/global/block, seed, rank/world, drop_last, prefetch, start epoch),
# consumes a random number of batches, closes early, reopens, and checks
# every sample against the pack on disk (tools/test/soak-client.c says how).
#
# A first, shorter wave of clients warms the daemon up (cache, allocator
# arenas, threads); its RSS and fd count then are the baseline. After the
# main wave the daemon must be back there: fds within 4, RSS within 32 MiB
# (not counting the block cache, which is meant to stay full), no sessions
# and no session memory, memory.used equal to the cache. Then SIGTERM must
# stop it with status 0 within 30 s.
#
# With SOAK_BUCKET=N, the daemon also has a remote: tests/remote/s3hostile.py,
# a bucket that lies (tools/test/hostile_bucket.py), and N threads of each
# kind open its datasets through the main wave: every byte trickling, sizes
# of 15 and 4 TiB claimed, a listing that never ends, 3,000 keys of zeros.
# Their opens fail, and must cost the good clients nothing and leave the
# daemon at its baseline (descriptors, RSS, memory) as above.
#
# With SOAK_HOSTILE=N, N hostile clients of each kind (tools/test/hostile-client.c:
# silent connections, requests never read, session memory kept mapped after
# close, floods of huge batches, absurd wait counters) run through the main
# wave beside the good ones; every good client must still verify every byte,
# and after the attack the daemon must be back at its baseline as above.
#
# Memory: every second the daemon's VmRSS is sampled beside the status
# document's memory.used and memory.budget. The summary reports the largest
# RSS - budget and RSS - used seen; RSS over budget + SOAK_RSS_OVER_MB (64)
# at any sample fails the soak. With SOAK_KILLS=N, N clients at a time are
# started during the main wave and SIGKILLed after 0.2-2 s, over and over.
#
# Fails (exit 1) on any client error, a refused open, a daemon-side failure,
# protocol or ring violation, or the checks above; prints a summary either way.
#
# Environment:
#   BATCHD_BUILD   build directory for the binaries below (default: build)
#   BATCHD, BATCHD_PACK, BATCHCTL, SOAK_CLIENT   the binaries themselves
#   SOAK_MEMORY    batchd --memory (default 2G, 3G with SOAK_BUCKET, whose stuck
#                  sessions hold their share: no client is ever refused);
#                  when set, opens refused for memory are expected and counted
#   SOAK_RSS_OVER_MB  RSS allowed over the budget at any sample (default 64)
#   SOAK_KILLS     clients killed at a time during the main wave (default 0)
#   SOAK_SEED      seed of the clients' choices (default: random; printed)
#   SOAK_HOLD      none|order|any (default any): may trainers hold one or two
#                  batches while asking for more, releasing oldest first or
#                  (any) sometimes newest first (soak-client -H)
#   SOAK_HOSTILE   hostile clients of each kind during the main wave (default 0)
#   SOAK_BUCKET    threads of each kind opening a lying bucket's datasets (default 0;
#                  needs BATCHCLIENT_LIB, the libbatchclient the threads load)
#   HOSTILE_CLIENT the hostile-client binary (default: BATCHD_BUILD's)
#   SOAK_FAULTS    BATCHD_FAULTS rules for batchd (needs -Dfault_injection);
#                  failed batches are then expected and counted, not errors
#   SOAK_KEEP=1    keep the scratch directory (it is kept anyway on failure)
#   TMPDIR         where the scratch directory goes
set -euo pipefail

usage() {
	echo "usage: $0 SECONDS [CLIENTS]" >&2
	exit 2
}
[ $# -ge 1 ] && [ $# -le 2 ] || usage
seconds=$1
clients=${2:-32}
case "$seconds$clients${SOAK_HOSTILE:-0}${SOAK_BUCKET:-0}" in *[!0-9]*) usage ;; esac
bucket=${SOAK_BUCKET:-0}
[ "$seconds" -ge 1 ] && [ "$clients" -ge 1 ] || usage

here=$(cd "$(dirname "$0")/../.." && pwd)
build=${BATCHD_BUILD:-$here/build}
batchd=${BATCHD:-$build/daemon/batchd}
pack=${BATCHD_PACK:-$build/tools/batchd-pack}
ctl=${BATCHCTL:-$build/tools/batchctl}
client=${SOAK_CLIENT:-$build/tools/soak-client}
hostile_bin=${HOSTILE_CLIENT:-$build/tools/hostile-client}
hostile=${SOAK_HOSTILE:-0}
memory=${SOAK_MEMORY:-$([ "$bucket" -gt 0 ] && echo 3G || echo 2G)}
kills=${SOAK_KILLS:-0}
case "$kills" in '' | *[!0-9]*) usage ;; esac
seed=${SOAK_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
bins=("$batchd" "$pack" "$ctl" "$client")
[ "$hostile" -gt 0 ] && bins+=("$hostile_bin")
for b in "${bins[@]}"; do
	[ -x "$b" ] || { echo "soak.sh: $b is not built (ninja -C $build)" >&2; exit 2; }
done
py=$(command -v python3) || { echo "soak.sh: python3 is needed to make the inputs" >&2; exit 2; }

dir=$(mktemp -d "${TMPDIR:-/tmp}/batchd-soak.XXXXXX")
daemon_pid=
failed=0
cleanup() {
	if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
		kill -KILL "$daemon_pid" 2>/dev/null || true
	fi
	[ -n "${bucket_pid:-}" ] && kill "$bucket_pid" 2>/dev/null || true
	if [ "$failed" -eq 0 ] && [ "${SOAK_KEEP:-0}" != 1 ]; then
		rm -rf "$dir"
	else
		echo "soak.sh: scratch directory kept: $dir" >&2
	fi
}
trap cleanup EXIT
fail() {
	echo "soak.sh: FAIL: $*" >&2
	failed=1
}

# ---- datasets ------------------------------------------------------------------

echo "soak.sh: making datasets in $dir"
mkdir -p "$dir/in" "$dir/root"
"$py" - "$dir/in" <<'EOF'
import os, random, sys
out = sys.argv[1]
rng = random.Random(20261129)
words = ("batch shard block sample epoch rank world seed tensor image label "
         "token decode stage read write queue ring cache").split()

def text(n):
    s, have = [], 0
    while have < n:
        w = rng.choice(words)
        s.append(w)
        have += len(w) + 1
    return (" ".join(s) + " ")[:n].encode()

def record():
    return ('{"id": %d, "label": "%s", "score": %.4f, "tags": ["%s", "%s"], "text": "%s"}'
            % (rng.randrange(10**6), rng.choice(words), rng.random(), rng.choice(words),
               rng.choice(words), text(rng.randrange(20, 1200)).decode())).encode()

def put(sub, i, data):
    d = os.path.join(out, sub)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "%05d" % i), "wb") as f:
        f.write(data)

# Small JSON records, one per block: the dictionary's case.
for i in range(3000):
    put("json", i, record())
# Mixed text and noise up to 48 KiB, some empty: packed in 64 KiB blocks.
for i in range(1500):
    n = rng.randrange(0, 48 * 1024) if i % 16 else 0
    put("mixed", i, text(n) if i % 3 else rng.randbytes(n))
# Text of 1..8 KiB in 16 KiB blocks, three shards.
for i in range(2400):
    put("sharded", i, text(rng.randrange(1, 8 * 1024)))
# Large samples: one in 32 of 0.5-1.5 MiB (noise), the rest text of 1..8 KiB.
for i in range(640):
    put("large", i, rng.randbytes(rng.randrange(512 << 10, 1536 << 10)) if i % 32 == 3
        else text(rng.randrange(1, 8 * 1024)))
# Fixed-size records (3 KiB), as a tensor file would hold them.
with open(os.path.join(out, "records.bin"), "wb") as f:
    for i in range(2500):
        f.write(text(1024) + rng.randbytes(2048))
EOF
mk() {
	"$pack" create "$@" --threads 2 >"$dir/pack.log" 2>&1 || { cat "$dir/pack.log" >&2; fail "batchd-pack create $*"; exit 1; }
	tail -1 "$dir/pack.log" | sed "s|^$dir/root/|  |"
}
mk "$dir/root/json.bpk" "$dir/in/json" --dict
mk "$dir/root/mixed.bpk" "$dir/in/mixed" --block-size 64K
mk "$dir/root/sharded" "$dir/in/sharded" --block-size 16K --shard-size 600K
mk "$dir/root/records.bpk" --records 3072 "$dir/in/records.bin" --block-size 256K
mk "$dir/root/large.bpk" "$dir/in/large" --block-size 0
datasets=(json.bpk mixed.bpk sharded records.bpk large.bpk)
for d in "${datasets[@]}"; do
	"$pack" verify "$dir/root/$d" >"$dir/pack.log" 2>&1 || { cat "$dir/pack.log" >&2; fail "batchd-pack verify $d"; exit 1; }
done
shards=$(find "$dir/root/sharded" -name '*.bpk' | wc -l)
[ "$shards" -eq 3 ] || { fail "sharded dataset has $shards shards, not 3"; exit 1; }
rm -rf "$dir/in"

# ---- the daemon ----------------------------------------------------------------

sock=$dir/sock
if [ -n "${SOAK_FAULTS:-}" ]; then
	export BATCHD_FAULTS=$SOAK_FAULTS
	client_flags=(-f)
else
	unset BATCHD_FAULTS
	client_flags=()
fi
client_flags+=(-H "${SOAK_HOLD:-any}")
[ -n "${SOAK_MEMORY:-}" ] && client_flags+=(-m)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
conf=()
bucket_pid=
if [ "$bucket" -gt 0 ]; then
	mkdir "$dir/bucket"
	"$py" "$here/hostile_bucket.py" --serve "$dir/bucket" --slow-file "$dir/root/mixed.bpk" \
		--n "$bucket" >"$dir/bucket/endpoint" 2>"$dir/bucket/serve.err" &
	bucket_pid=$!
	for _ in $(seq 200); do [ -s "$dir/bucket/endpoint" ] && break; sleep 0.05; done
	[ -s "$dir/bucket/endpoint" ] || { fail "the hostile bucket did not start"; exit 1; }
	"$py" -c 'import sys; sys.path.insert(0, sys.argv[1]); import hostile_bucket as h
print(h.conf(sys.argv[2], sys.argv[3]), end="")' "$here" "$(cat "$dir/bucket/endpoint")" \
		"$dir/bucket/cache" >"$dir/batchd.conf"
	conf=(-c "$dir/batchd.conf")
fi
"$batchd" --no-config "${conf[@]}" --socket "$sock" --root "$dir/root" --memory "$memory" \
	--log-level notice 2>"$dir/batchd.log" &
daemon_pid=$!
for _ in $(seq 100); do
	"$ctl" -s "$sock" status >/dev/null 2>&1 && break
	kill -0 "$daemon_pid" 2>/dev/null || { cat "$dir/batchd.log" >&2; fail "batchd died at startup"; exit 1; }
	sleep 0.1
done
"$ctl" -s "$sock" status >/dev/null || { fail "batchd does not answer on $sock"; exit 1; }

# status JSON field by dotted path, e.g. memory.used
status_json() { "$ctl" -s "$sock" status --json; }
field() { "$py" -c 'import json,sys
d=json.load(sys.stdin)
for k in sys.argv[1].split("."): d=d[k]
print(d)' "$1"; }
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$daemon_pid/status"; }
fd_count() { ls "/proc/$daemon_pid/fd" | wc -l; }

# ---- memory sampling: VmRSS against the budget and the charge, every second ----

# sample_memory: "RSS_BYTES USED BUDGET" lines into $dir/memory.log until killed
sample_memory() {
	local rss st
	while kill -0 "$daemon_pid" 2>/dev/null; do
		rss=$(rss_kb) || break
		st=$(status_json 2>/dev/null) || { sleep 1; continue; }
		echo "$((rss * 1024)) $(echo "$st" | "$py" -c 'import json,sys
m=json.load(sys.stdin)["memory"]
print(m["used"], m["budget"])')"
		sleep 1
	done >>"$dir/memory.log"
}
sampler_pid=

# ---- clients killed in the middle of their streams ---------------------------------

# killer SECONDS: $kills clients at a time, each SIGKILLed after 0.2-2 s, until SECONDS pass
killer() {
	local until=$(( $(date +%s) + $1 )) n=0 pids p
	while [ "$(date +%s)" -lt "$until" ]; do
		pids=()
		for _ in $(seq "$kills"); do
			"$client" -s "$sock" -r "$dir/root" -t 30 -i $((100000 + n)) -S "$((seed + n))" \
				"${client_flags[@]}" "${datasets[@]}" >/dev/null 2>&1 &
			pids+=($!)
			n=$((n + 1))
		done
		sleep "$(awk -v r="$RANDOM" 'BEGIN { printf "%.1f", 0.2 + 1.8 * r / 32767 }')"
		for p in "${pids[@]}"; do
			kill -KILL "$p" 2>/dev/null || true
			wait "$p" 2>/dev/null || true
		done
	done
	echo "$n" >"$dir/killed"
}

# Wait until no session is left (clients are gone, the daemon may lag a little).
wait_idle() {
	local s
	for _ in $(seq 100); do
		s=$(status_json | field memory.sessions)
		[ "$s" -eq 0 ] && [ "$(status_json | field sessions | tr -d '[] ')" = "" ] && return 0
		sleep 0.1
	done
	return 1
}

# run_wave NAME SECONDS WAVE: CLIENTS clients at once, client i seeded with
# seed + WAVE * 65536 + i; their summaries into $dir/NAME.*
run_wave() {
	local name=$1 secs=$2 wave=$3 pids=() i rc=0
	for i in $(seq 0 $((clients - 1))); do
		"$client" -s "$sock" -r "$dir/root" -t "$secs" -i "$i" -S "$((seed + wave * 65536 + i))" \
			"${client_flags[@]}" "${datasets[@]}" \
			>"$dir/$name.$i.out" 2>"$dir/$name.$i.err" &
		pids+=($!)
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || { rc=1; echo "soak.sh: $name client $i failed:" >&2; head -5 "$dir/$name.$i.err" >&2; }
	done
	return $rc
}

# sum NAME KEY: the total of KEY=N over the wave's client summaries
sum() { cat "$dir/$1".*.out | tr ' ' '\n' | awk -F= -v k="$2" '$1 == k { s += $2 } END { printf "%.0f\n", s }'; }

warm=$((seconds / 10))
[ $warm -lt 3 ] && warm=3
[ $warm -gt 30 ] && warm=30
sample_memory &
sampler_pid=$!
echo "soak.sh: batchd pid $daemon_pid; seed $seed; warm-up wave: $clients clients for ${warm}s"
run_wave warm "$warm" 1 || fail "warm-up wave"
wait_idle || fail "sessions still open after the warm-up wave"
rss0=$(rss_kb)
fd0=$(fd_count)
cache0=$(status_json | field memory.cache)
echo "soak.sh: baseline: VmRSS $((rss0 / 1024)) MiB, $fd0 fds, cache $((cache0 >> 20)) MiB"

# start_hostile SECONDS: SOAK_HOSTILE clients of each kind, in the background
hostile_pids=()
start_hostile() {
	local secs=$1 i m args
	for m in silent noread keepfd flood counters; do
		case $m in
		keepfd | counters) args=(mixed.bpk) ;;
		flood) args=(-n 2048 json.bpk) ;;
		# Few enough, with the good clients, for [limits] connections_per_uid:
		# every client here runs as the same user.
		silent) args=(-n 8) ;;
		*) args=() ;;
		esac
		for i in $(seq 0 $((hostile - 1))); do
			"$hostile_bin" -s "$sock" -m "$m" -t "$secs" "${args[@]}" \
				>"$dir/hostile.$m.$i.out" 2>"$dir/hostile.$m.$i.err" &
			hostile_pids+=($!)
		done
	done
}

with=""
[ "$hostile" -gt 0 ] && with=", with $hostile hostile clients of each kind"
echo "soak.sh: main wave: $clients clients for ${seconds}s$with"
t0=$(date +%s)
[ "$hostile" -gt 0 ] && start_hostile "$seconds"
bucket_attack=
if [ "$bucket" -gt 0 ]; then
	"$py" "$here/hostile_bucket.py" --attack --sock "$sock" --n "$bucket" --seconds "$seconds" \
		>"$dir/bucket/attack.out" 2>"$dir/bucket/attack.err" &
	bucket_attack=$!
fi
killer_pid=
[ "$kills" -gt 0 ] && { killer "$seconds" & killer_pid=$!; }
run_wave main "$seconds" 0 || fail "main wave"
t1=$(date +%s)
[ -n "$killer_pid" ] && { wait "$killer_pid" || fail "the killer loop failed"; }
for p in "${hostile_pids[@]}"; do
	wait "$p" || fail "a hostile client failed (see $dir/hostile.*.err)"
done
if [ -n "$bucket_attack" ]; then
	wait "$bucket_attack" || fail "the bucket's tenants did not end (see $dir/bucket/attack.err)"
	echo "soak.sh: the lying bucket's opens: $(cat "$dir/bucket/attack.out")"
	sleep 2 # the fetcher's sync closes the files of objects nobody uses
fi
[ "$hostile" -gt 0 ] && echo "soak.sh: during the attack: $(cat "$dir"/hostile.*.out | awk '{ for (i = 2; i <= NF; i++) { split($i, kv, "="); s[kv[1]] += kv[2] } } END { for (k in s) printf "%s=%d ", k, s[k] }')"
wait_idle || fail "sessions still open $(status_json | field memory.sessions) bytes after the main wave"
rss1=$(rss_kb)
fd1=$(fd_count)
st=$(status_json)
echo "$st" >"$dir/status.json"
used1=$(echo "$st" | field memory.used)
cache1=$(echo "$st" | field memory.cache)
dsets1=$(echo "$st" | field memory.datasets)
msess1=$(echo "$st" | field memory.sessions)

# ---- verdict ---------------------------------------------------------------------

kill "$sampler_pid" 2>/dev/null || true
wait "$sampler_pid" 2>/dev/null || true
# max(RSS - budget), max(RSS - used) in bytes, and the samples over budget + the allowance
over_mb=${SOAK_RSS_OVER_MB:-64}
read -r samples max_over_budget max_over_used rss_max over_count < <(awk -v allow=$((over_mb << 20)) '
	NF == 3 { n++; b = $1 - $3; u = $1 - $2
		if (n == 1 || b > mb) mb = b; if (n == 1 || u > mu) mu = u; if ($1 > mr) mr = $1
		if (b > allow) over++ }
	END { printf "%d %.0f %.0f %.0f %d\n", n, mb, mu, mr, over }' "$dir/memory.log")
[ "$samples" -gt 0 ] || fail "no memory samples taken"
[ "$over_count" -eq 0 ] || fail "RSS over the budget + $over_mb MiB in $over_count of $samples samples (largest RSS - budget $((max_over_budget >> 20)) MiB; see $dir/memory.log)"

for k in protocol_violations ring_violations pipeline.failures ended.failed refused.memory \
	refused.other refused.corrupt refused.invalid refused.not_found; do
	v=$(echo "$st" | field "$k")
	[ "$k" = refused.memory ] && [ -n "${SOAK_MEMORY:-}" ] && continue
	# The lying bucket's opens are refused, as they should be.
	[[ $k == refused.* ]] && [ "$bucket" -gt 0 ] && continue
	if [ "$v" -ne 0 ] && { [ -z "${SOAK_FAULTS:-}" ] || [[ $k != pipeline.failures && $k != ended.failed ]]; }; then
		fail "daemon status $k = $v"
	fi
done
[ "$msess1" -eq 0 ] || fail "session memory still held: $msess1 bytes"
# What stays charged once every session ended: the block cache and the
# dataset versions kept (unused, evictable) for the next open.
[ "$used1" -eq $((cache1 + dsets1)) ] ||
	fail "memory.used $used1 is not the cache's $cache1 + the datasets' $dsets1"
# RSS without the block cache, which is meant to stay full.
grow_kb=$(( (rss1 - cache1 / 1024) - (rss0 - cache0 / 1024) ))
slack_mb=${SOAK_RSS_SLACK_MB:-32}
[ $grow_kb -le $((slack_mb * 1024)) ] ||
	fail "RSS grew by $((grow_kb / 1024)) MiB beyond the cache (allowed $slack_mb MiB)"
[ $((fd1 - fd0)) -le 4 ] || fail "fd count grew from $fd0 to $fd1"

errors=$(( $(sum warm errors) + $(sum main errors) ))
refused=$(( $(sum warm refused) + $(sum main refused) ))
[ "$errors" -eq 0 ] || fail "$errors client errors (see $dir/*.err)"

kill -TERM "$daemon_pid"
stop_rc=
for _ in $(seq 300); do
	if ! kill -0 "$daemon_pid" 2>/dev/null; then
		set +e
		wait "$daemon_pid"
		stop_rc=$?
		set -e
		break
	fi
	sleep 0.1
done
if [ -z "$stop_rc" ]; then
	fail "batchd did not stop within 30 s of SIGTERM"
elif [ "$stop_rc" -ne 0 ]; then
	fail "batchd exited $stop_rc on SIGTERM"
fi
daemon_pid=

mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
bytes=$(sum main bytes)
elapsed=$((t1 - t0))
[ $elapsed -gt 0 ] || elapsed=1
rate=$(awk -v b="$bytes" -v t="$elapsed" 'BEGIN { printf "%.1f", b / t / 1048576 }')
cat <<EOF
soak.sh: summary ($( [ $failed -eq 0 ] && echo PASS || echo FAIL ))
  clients            $clients, main wave ${seconds}s$with (seed $seed, hold ${SOAK_HOLD:-any}${SOAK_FAULTS:+, faults: $SOAK_FAULTS})
  sessions opened    $(sum main sessions) (+ $(sum warm sessions) in the warm-up), refused $refused
  reconnects         $(sum main reconnects)
  batches            $(sum main batches)
  samples verified   $(sum main samples)
  bytes verified     $bytes ($(mib "$bytes") MiB, $rate MiB/s)
  epochs ended       $(sum main epochs) ($(sum main full_epochs) seen whole)
  failed batches     $(( $(sum warm failed) + $(sum main failed) ))${SOAK_FAULTS:+ (injected)}
  errors             $errors
  VmRSS              $((rss0 / 1024)) MiB -> $((rss1 / 1024)) MiB (cache $((cache0 >> 20)) -> $((cache1 >> 20)) MiB; growth beyond the cache $((grow_kb / 1024)) MiB)
  fds                $fd0 -> $fd1
  RSS vs budget      $samples samples: max RSS $(mib "$rss_max") MiB; max(RSS - budget) $(mib "$max_over_budget") MiB, max(RSS - used) $(mib "$max_over_used") MiB (fails over +$over_mb MiB)
  refused (memory)   $(echo "$st" | field refused.memory)${SOAK_MEMORY:+ (budget $memory: expected)}
  killed clients     $(cat "$dir/killed" 2>/dev/null || echo 0)
  memory.used        $used1 (cache $cache1, sessions $msess1)
  daemon exit        ${stop_rc:-none} on SIGTERM
EOF
[ $failed -eq 0 ]
