#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# smoke.sh [BUILD] - the peers' driver end to end on tiny data, with only
# what the test suite has (Debian's python3, python3-torch, python3-numpy;
# no venv): batchd and torch's DataLoader over 512 samples, one pair; checks
# that the table was printed and results.json holds both rows with a ratio.
# tokens-cold needs the token corpus and root: only its disk child (a
# sequential read, buffered and O_DIRECT) and its option are checked.
# Exit 0 ok, 1 failure, 77 skip (no build, or no torch/numpy).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
[[ -x $build/daemon/batchd ]] || { echo "SKIP: no $build/daemon/batchd"; exit 77; }
/usr/bin/python3 -c 'import torch, numpy' 2>/dev/null ||
	{ echo "SKIP: python3-torch or python3-numpy missing"; exit 77; }
work=$(mktemp -d /tmp/peers-smoke.XXXXXX)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 tools/peers/run.py --build "$build" --workdir "$work" --workload raw \
	--peers batchd,torch --samples 512 --record-size 4K --batch-size 32 --epochs 1 \
	--workers 0 --repeat 1 >"$work/out" 2>"$work/err" ||
	{ cat "$work/out" "$work/err"; echo "FAIL: run.py exited $?"; exit 1; }
grep -q '^| torch DataLoader, files' "$work/out" || { cat "$work/out"; echo "FAIL: no table"; exit 1; }
/usr/bin/python3 - "$work/results/results.json" <<'PY'
import json, sys
rows = {r["peer"]: r for r in json.load(open(sys.argv[1]))["raw"]["rows"]}
assert set(rows) == {"batchd", "torch"}, rows
assert rows["torch"]["ratio"] > 0 and rows["batchd"]["samples_s"] > 0, rows
PY
grep -q 'tokens-cold' <(/usr/bin/python3 tools/peers/run.py --help) ||
	{ echo "FAIL: run.py --help does not name tokens-cold"; exit 1; }
head -c 3M /dev/urandom >"$work/disk.bin"
for mode in buffered direct; do
	printf '{"kind": "disk", "paths": ["%s"], "mode": "%s"}' "$work/disk.bin" "$mode" |
		PYTHONPATH=client/python /usr/bin/python3 tools/peers/run.py --child >"$work/disk.out" 2>&1
	tail -1 "$work/disk.out" | /usr/bin/python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
assert "error" in r and "Invalid argument" in r["error"] or r.get("bytes") == 3 << 20, r' ||
		{ cat "$work/disk.out"; echo "FAIL: the disk child, $mode"; exit 1; }
done
echo "2 passed, 0 failed"
