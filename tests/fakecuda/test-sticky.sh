#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A sticky CUDA error in batchd (a faulted context: every later call on the
# device fails): the GPU session in flight ends with the reason, a new GPU
# session is refused with it, status and metrics mark the device lost, host
# sessions keep being served, and batchd stops cleanly. On the fake CUDA, whose $FAKE_CUDA_STICKY_AFTER makes a
# copy fault with cudaErrorIllegalAddress and every call after it fail.
#
#   test-sticky.sh BATCHD BATCHD_PACK BATCHCTL
set -euo pipefail
batchd=$1 pack=$2 ctl=$3
tmp=$(mktemp -d /tmp/batchd-sticky.XXXXXX)
daemon=""
trap '[[ -n $daemon ]] && kill -KILL $daemon 2>/dev/null; rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok - $*"; pass=$((pass + 1)); }
bad() { echo "FAIL - $*"; fail=$((fail + 1)); }

mkdir -p "$tmp/data"
head -c 8M /dev/urandom >"$tmp/raw"
"$pack" create "$tmp/data/d.bpk" --records 4096 "$tmp/raw" >/dev/null
sock=$tmp/batchd.sock
FAKE_CUDA_STICKY_AFTER=6 "$batchd" --no-config --socket "$sock" --root "$tmp/data" --log-level info \
	>"$tmp/batchd.log" 2>&1 &
daemon=$!
for _ in $(seq 200); do [[ -S $sock ]] && break; sleep 0.05; done

consume() { timeout -k 5 60 "$ctl" -s "$sock" consume d.bpk --batch-size 64 --epochs 1 "$@"; }

rc=0
consume --device 0 >"$tmp/gpu1.out" 2>&1 || rc=$?
if [[ $rc -ne 0 && $rc -lt 124 ]] && grep -q "sticky error" "$tmp/gpu1.out" &&
	grep -q "illegal memory access" "$tmp/gpu1.out"; then
	ok "the GPU session in flight ended with the reason"
else
	bad "GPU session across the sticky error: exit $rc: $(tail -n 3 "$tmp/gpu1.out")"
fi
grep -q "CUDA device 0 is unusable after a sticky error" "$tmp/batchd.log" &&
	ok "batchd logged the lost device" || bad "no log line for the lost device: $(tail -n 5 "$tmp/batchd.log")"

rc=0
consume --device 0 >"$tmp/gpu2.out" 2>&1 || rc=$?
if [[ $rc -ne 0 && $rc -lt 124 ]] && grep -q "unusable after a sticky error" "$tmp/gpu2.out" &&
	grep -q "restart batchd" "$tmp/gpu2.out"; then
	ok "a new GPU session is refused with the reason"
else
	bad "GPU session after the sticky error: exit $rc: $(tail -n 3 "$tmp/gpu2.out")"
fi

# status and metrics say it, per device.
"$ctl" -s "$sock" status --json >"$tmp/status.json"
lost=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["cuda"]["device_list"][0]["lost"])' \
	"$tmp/status.json" 2>&1 || true)
[[ $lost == *"unusable after a sticky error"* ]] && ok "status: device 0 lost: $lost" ||
	bad "status: device 0's lost is '$lost'"
"$ctl" -s "$sock" metrics >"$tmp/metrics.txt"
grep -Eq '^batchd_cuda_device_lost\{ordinal="0",uuid="GPU-[0-9a-f-]+"\} 1$' "$tmp/metrics.txt" &&
	ok "metrics: batchd_cuda_device_lost 1" ||
	bad "metrics: $(grep batchd_cuda_device_lost "$tmp/metrics.txt" || echo no batchd_cuda_device_lost)"

rc=0
consume --json >"$tmp/host.json" 2>"$tmp/host.err" || rc=$?
if [[ $rc -eq 0 ]] && grep -q '"batches": *32' "$tmp/host.json"; then
	ok "a host session is served in full (32 batches)"
else
	bad "host session after the sticky error: exit $rc: $(tail -c 300 "$tmp/host.json") $(tail -n 2 "$tmp/host.err")"
fi

kill -TERM $daemon
rc=0
wait $daemon || rc=$?
daemon=""
[[ $rc -eq 0 ]] && ok "batchd stopped cleanly" || bad "batchd exit status $rc"
echo "# $pass passed, $fail failed"
[[ $fail -eq 0 ]]
