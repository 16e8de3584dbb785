#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# test-bench-decode-rounds.sh - `batchd-bench decode` over packs too large
# for one round: it finishes, decodes every block of every pass once, and
# reads the pack in the number of rounds its block sizes call for.
#
#   bash tests/bench/test-bench-decode-rounds.sh BATCHD-BENCH BATCHD-PACK PYTHON3
#
# Two packs of incompressible fixed-size records (so every block is stored
# raw, all of one size, and the expected round count follows from the
# sizes alone):
#   - one just over the default round size (256 MiB), of blocks that do not
#     tile it, so the first round ends below the limit at a block that does
#     not fit;
#   - a small sharded one decoded with a small --round-size, so rounds
#     cross shard boundaries and some shard's first block is the one that
#     does not fit.
# Each check prints "ok - ...", "FAIL - ..." or "skip - ... (why)"; the last
# line is "N passed, M failed". Exit status 0 when nothing failed, 1
# otherwise. Works in a directory under the current one (meson: the build
# directory); the large pack needs about 560 MB there for a few seconds.
set -euo pipefail
export LC_ALL=C

if [[ $# -ne 3 ]]; then
	echo "usage: $0 BATCHD-BENCH BATCHD-PACK PYTHON3" >&2
	exit 2
fi
BENCH=$(realpath -- "$1")
PACK=$(realpath -- "$2")
PY=$3

T=$(mktemp -d "$PWD/bench-rounds.XXXXXX")
trap 'rm -rf "$T"' EXIT

# shellcheck source=tests/bench/bench-testlib.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/bench-testlib.sh"
# py EXPR DECODE.json INFO.json: Python expression over j (decode's JSON) and
# p (batchd-pack info's); exit status 0 when it is true. Prints it if not.
py() {
	"$PY" - "$@" <<'PYEOF'
import json, math, sys
expr = sys.argv[1]
j = json.load(open(sys.argv[2]))
p = json.load(open(sys.argv[3]))
v = eval(expr)
if not v:
    print("  (false: %s; decode: %s)" % (expr, j), file=sys.stderr)
sys.exit(0 if v else 1)
PYEOF
}
# mkpack OUT RECORDS RECORD-SIZE ARGS...: a pack of RECORDS incompressible
# records; its `info --json` in OUT.info.json.
mkpack() {
	local out=$1 n=$2 size=$3
	shift 3
	"$PY" -c 'import random, sys
r = random.Random(int(sys.argv[2]))
with open(sys.argv[1], "wb") as f:
    for left in range(int(sys.argv[2]), 0, -(1 << 24)):
        f.write(r.randbytes(min(left, 1 << 24)))' "$T/src.bin" $((n * size))
	timeout 60 "$PACK" create "$out" --records "$size" "$T/src.bin" "$@" >"$T/out" 2>"$T/err" &&
		timeout 60 "$PACK" info "$out" --json >"$out.info.json"
	local rc=$?
	rm -f "$T/src.bin"
	return $rc
}
# Python expressions, expanded inside the eval'd checks below.
# shellcheck disable=SC2034
# Every block stored raw and of one size: then the rounds are predictable.
UNIFORM='p["codec_blocks"]["raw"] == p["blocks"] and p["stored_bytes"] == p["raw_bytes"] == p["blocks"] * p["max_block"]'
# Rounds of whole blocks, as many as fit in round_bytes (at least one).
# shellcheck disable=SC2034
ROUNDS='math.ceil(p["blocks"] / max(1, j["round_bytes"] // p["max_block"]))'
# shellcheck disable=SC2034
COUNTS='j["blocks"] == j["passes"] * p["blocks"] and j["raw_bytes"] == j["passes"] * p["raw_bytes"] and j["stored_bytes"] == j["passes"] * p["stored_bytes"]'

# ---- arguments -----------------------------------------------------------------

for bad_size in 0 lots 2T; do
	run decode "$T/x.bpk" --round-size "$bad_size"
	expect "--round-size $bad_size is a usage error naming it" \
		eval '[[ $RC -eq 2 ]] && grep -qF -- "--round-size" "$T/err"'
done

# ---- just over the default round size -------------------------------------------

# 255 blocks of 11 records of 100000 bytes: 280.5 MB; 244 blocks (268.4 MB)
# fill the first 256 MiB round short of the limit, the 245th does not fit.
RC=0
mkpack "$T/big.bpk" 2805 100000 --block-size 1M --level 1 || RC=$?
expect "batchd-pack makes a pack just over 256 MiB of raw blocks" \
	eval '[[ $RC -eq 0 ]] && py "$UNIFORM and p[\"stored_bytes\"] > 256 << 20 and p[\"blocks\"] == 255" "$T/big.bpk.info.json" "$T/big.bpk.info.json"'

run decode "$T/big.bpk" --threads 2 --json
cp "$T/out" "$T/dec.json"
expect "decode of a pack over 256 MiB finishes, in 2 rounds, one pass, every block once" \
	eval '[[ $RC -eq 0 ]] && py "j[\"round_bytes\"] == 256 << 20 and j[\"passes\"] == 1 and j[\"rounds\"] == 2 == $ROUNDS and $COUNTS" "$T/dec.json" "$T/big.bpk.info.json"'

rm -f "$T/big.bpk"

# ---- a sharded pack in small rounds ---------------------------------------------

# 600 records of 10000 bytes in blocks of 4 (40000 bytes), shards of about
# 5-6 blocks; rounds of 3 blocks run across shard boundaries.
RC=0
mkpack "$T/shards" 600 10000 --block-size 32K --shard-size 200K --level 1 || RC=$?
expect "batchd-pack makes a sharded pack of raw blocks" \
	eval '[[ $RC -eq 0 ]] && py "$UNIFORM and p[\"shards\"] > 10 and p[\"blocks\"] == 150" "$T/shards.info.json" "$T/shards.info.json"'

for round in 130000 40000 1 1M; do
	run decode "$T/shards" --threads 3 --round-size "$round" --json
	cp "$T/out" "$T/dec.json"
	expect "decode --round-size $round over shards: rounds of whole blocks, every block once" \
		eval '[[ $RC -eq 0 ]] && py "j[\"passes\"] == 1 and j[\"rounds\"] == $ROUNDS and $COUNTS" "$T/dec.json" "$T/shards.info.json"'
done
run decode "$T/shards" --threads 2 --round-size 130000 --seconds 200ms --json
cp "$T/out" "$T/dec.json"
expect "decode --round-size --seconds: every pass reads all 50 rounds, counts == passes * the pack's" \
	eval '[[ $RC -eq 0 ]] && py "j[\"passes\"] >= 1 and j[\"rounds\"] == 50 and j[\"seconds\"] >= 0.2 and $COUNTS" "$T/dec.json" "$T/shards.info.json"'
run decode "$T/shards" --threads 1 --round-size 130000
expect "decode human output names the rounds" \
	eval '[[ $RC -eq 0 ]] && grep -q "1 pass of 50 rounds (up to 127 KiB each)" "$T/out"'

finish
