#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Images decoded in the daemon, delivered to a GPU stream (on the fake
# CUDA): the daemon's GPU thread copies each batch of tensors into device
# memory; batchctl consume --device 0 copies every batch back and compares
# it with the host staging, and its per-sample digests of the tensors are
# the host stream's. A truncated image is left out with --skip-bad, and
# the batch that lost it arrives smaller on the device too.
#
#   test-images.sh BATCHD BATCHD_PACK BATCHCTL
set -euo pipefail
batchd=$1 pack=$2 ctl=$3
tmp=$(mktemp -d /tmp/batchd-gpuimg.XXXXXX)
daemon=""
trap '[[ -n $daemon ]] && kill -KILL $daemon 2>/dev/null; rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok - $*"; pass=$((pass + 1)); }
bad() { echo "FAIL - $*"; fail=$((fail + 1)); }

# An ImageFolder of real pictures (adwaita-icon-theme's PNGs), 2 classes,
# and one image cut short: a/01.png, sample 1 in key order.
icons=(/usr/share/icons/Adwaita/512x512/*/*.png)
if [[ ${#icons[@]} -lt 12 ]]; then
	echo "FAIL - adwaita-icon-theme's 512x512 icons are missing (tools/deps.sh installs them)"
	exit 1
fi
mkdir -p "$tmp/tree/a" "$tmp/tree/b" "$tmp/data"
for i in $(seq 0 11); do
	cls=$([[ $((i % 2)) -eq 0 ]] && echo a || echo b)
	cp "${icons[$i]}" "$tmp/tree/$cls/$(printf %02d "$i").png"
done
head -c 3000 "${icons[12]}" >"$tmp/tree/a/01.png"
"$pack" create "$tmp/data/img.bpk" "$tmp/tree" --labels dirname >/dev/null

sock=$tmp/batchd.sock
"$batchd" --no-config --socket "$sock" --root "$tmp/data" --log-level info >"$tmp/batchd.log" 2>&1 &
daemon=$!
for _ in $(seq 200); do [[ -S $sock ]] && break; sleep 0.05; done

consume() {
	timeout -k 5 120 "$ctl" -s "$sock" consume img.bpk --batch-size 4 --epochs 2 --seed 7 \
		--fields data,label --decode data=image:40:random-resized --skip-bad "$@"
}

rc=0
consume --device 0 --json >"$tmp/gpu.json" 2>"$tmp/gpu.err" || rc=$?
if [[ $rc -eq 0 ]] && python3 - "$tmp/gpu.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
# 13 samples, one bad, 2 epochs; every batch copied back and compared.
want = dict(batches=8, samples=24, skipped=2, failed=0, mismatches=0)
got = {k: r[k] for k in want}
sys.exit(0 if got == want else f"got {got}, want {want}")
EOF
then
	ok "tensor batches on the device equal their host staging, the bad image left out"
else
	bad "GPU stream: exit $rc: $(cat "$tmp/gpu.json") $(tail -n 3 "$tmp/gpu.err")"
fi

rc=0
consume --device 0 --print-samples >"$tmp/gpu.samples" 2>"$tmp/gpu.err" || rc=$?
consume --print-samples >"$tmp/host.samples" 2>"$tmp/host.err" || rc=$?
if [[ $rc -eq 0 ]] && [[ $(wc -l <"$tmp/host.samples") -eq 24 ]] &&
	cmp -s "$tmp/gpu.samples" "$tmp/host.samples" && ! grep -q '^[01] [0-9]* 1 ' "$tmp/host.samples"; then
	ok "the GPU stream's tensors are the host stream's, sample by sample"
else
	bad "GPU and host samples differ (exit $rc): $(diff "$tmp/gpu.samples" "$tmp/host.samples" | head -n 4)"
fi

grep -q "left out 1 bad image (on_error=skip): dataset img.bpk: sample 1 (key a/01.png)" "$tmp/batchd.log" &&
	ok "the daemon's log names the image left out" ||
	bad "no log line naming sample 1: $(grep -i 'left out' "$tmp/batchd.log" | head -n 2)"

kill -TERM $daemon
wait $daemon && ok "batchd stopped cleanly" || bad "batchd exit status $?"
daemon=""
echo "# $pass passed, $fail failed"
[[ $fail -eq 0 ]]
