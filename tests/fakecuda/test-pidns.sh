#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A trainer in another PID namespace than batchd (a pod beside a batchd
# DaemonSet without hostPID): CUDA IPC events do not open there, so its GPU
# stream is refused with a message that says why and what to do, and its
# host stream works. The same trainer in batchd's namespace gets GPU
# batches. On the fake CUDA (which, like the driver, refuses a handle from
# another PID namespace), so it runs anywhere a PID namespace can be made.
#
#   test-pidns.sh BATCHD BATCHD_PACK BATCHCTL
set -euo pipefail
batchd=$1 pack=$2 ctl=$3
tmp=$(mktemp -d /tmp/batchd-pidns.XXXXXX)
daemon=""
trap '[[ -n $daemon ]] && kill -KILL $daemon 2>/dev/null; rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok - $*"; pass=$((pass + 1)); }
bad() { echo "FAIL - $*"; fail=$((fail + 1)); }

# A new PID namespace: as root directly, else inside a user namespace.
if unshare --pid --fork true 2>/dev/null; then
	ns=(unshare --pid --fork)
elif unshare --user --map-root-user --pid --fork true 2>/dev/null; then
	ns=(unshare --user --map-root-user --pid --fork)
else
	echo "SKIP: this kernel lets this user make no PID namespace (unshare --pid, --user)"
	exit 77
fi
[[ $("${ns[@]}" readlink /proc/self/ns/pid) != "$(readlink /proc/self/ns/pid)" ]] ||
	{ echo "FAIL - unshare did not give a new PID namespace"; exit 1; }

mkdir -p "$tmp/data"
head -c 4M /dev/urandom >"$tmp/raw"
"$pack" create "$tmp/data/d.bpk" --records 4096 "$tmp/raw" >/dev/null
sock=$tmp/batchd.sock
"$batchd" --no-config --socket "$sock" --root "$tmp/data" --log-level info >"$tmp/batchd.log" 2>&1 &
daemon=$!
for _ in $(seq 200); do [[ -S $sock ]] && break; sleep 0.05; done

consume() { timeout -k 5 60 "$ctl" -s "$sock" consume d.bpk --batch-size 64 --epochs 1 "$@"; }

rc=0
consume --device 0 >"$tmp/same.out" 2>&1 || rc=$?
[[ $rc -eq 0 ]] && ok "GPU stream in batchd's PID namespace" ||
	bad "GPU stream in batchd's namespace: exit $rc: $(tail -n 3 "$tmp/same.out")"

rc=0
"${ns[@]}" timeout -k 5 60 "$ctl" -s "$sock" consume d.bpk --batch-size 64 --epochs 1 --device 0 \
	>"$tmp/other.out" 2>&1 || rc=$?
if [[ $rc -ne 0 && $rc -lt 124 ]] && grep -q "another PID namespace than batchd" "$tmp/other.out" &&
	grep -q "hostPID" "$tmp/other.out"; then
	ok "GPU stream from another PID namespace refused: $(grep -o 'this trainer runs in another PID namespace[^:]*' "$tmp/other.out" | head -n 1)"
else
	bad "GPU stream from another PID namespace: exit $rc: $(tail -n 3 "$tmp/other.out")"
fi

rc=0
"${ns[@]}" timeout -k 5 60 "$ctl" -s "$sock" consume d.bpk --batch-size 64 --epochs 1 \
	>"$tmp/host.out" 2>&1 || rc=$?
[[ $rc -eq 0 ]] && ok "host stream from another PID namespace" ||
	bad "host stream from another PID namespace: exit $rc: $(tail -n 3 "$tmp/host.out")"

kill -TERM $daemon
wait $daemon && ok "batchd stopped cleanly" || bad "batchd exit status $?"
daemon=""
echo "# $pass passed, $fail failed"
[[ $fail -eq 0 ]]
