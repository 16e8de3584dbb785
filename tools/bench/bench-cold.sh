#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# batchd cold from disk against decode alone on the same pack: is the
# pipeline as fast as its decode pool, big samples and small?
#
#   tools/bench/bench-cold.sh OUTDIR [--big N] [--small N] [--repeat R]
#       [--tier ram|page|direct] [--nice N] [--against BATCHD] [--only CASES]
#
# Three packs of generated samples (half random bytes, half text; about
# 1.7x compression): N big samples of 1 MiB (default 1000), N small ones of
# 8 KiB (default 100000) with batchd-pack's default block size (one sample
# per block), and the same small samples in 64 KiB blocks; and, with
# --only, rand-1m and rand-8k: as many samples of random bytes
# (incompressible: stored raw, so decoding is a hash and a copy). For each pack,
# R (default 3) alternating pairs:
#   A  the page cache dropped, a fresh batchd with its default settings,
#      and `batchd-bench pipeline --epochs 1` through it (global shuffle;
#      batch 16 of the big samples, 256 of the small): raw bytes delivered
#      per second, first batch included;
#   B  `batchd-bench decode --threads 2`: the stored blocks read into
#      memory untimed, then decoded on 2 threads as the daemon's workers do;
#   C  what the disk allows: the page cache dropped, `batchd-bench disk`
#      reading the pack once at random in blocks of its mean stored block
#      size (rounded up to 4 KiB), O_DIRECT, queue depth 64; its reads per
#      second times the pack's mean raw bytes per block (one read a
#      block, as batchd reads them). Where C is below B no loader can
#      reach B: A/C says how close batchd came to the disk.
#   D  the disk at its best: the page cache dropped, `batchd-bench disk`
#      reading the pack once in file order, 4 MiB O_DIRECT reads at queue
#      depth 4 (dd iflag=direct bs=4M, with reads in flight), as raw bytes
#      per second (its rate times raw over stored bytes). A ram-tier first
#      pass that streams the pack in file order ([io] first_pass) can
#      beat C; A/D says how close it came to one sequential read.
# Reported per pack: the median ratios A/B (target >= 0.9) and A/C with min and max,
# the load average before every run, the CPU seconds each daemon thread
# used in the last A and the tier the daemon chose (--tier sets [memory]
# tier for it; default: the daemon's choice, auto), and the daemon's minor
# page faults in each A. --against BATCHD adds A0, the same cold epoch
# through another batchd binary (a build of an earlier commit: a change's
# effect), run before A in odd pairs and after it in even ones; reported
# as A/A0 with its spread and each side's page faults. --only CASES runs
# those of big-1m,small-8k,small-8k-b64k,rand-1m,rand-8k (comma-separated;
# default the first three). --nice N runs the daemon and both sides at
# niceness N (default 0). Needs root (to drop the
# page cache). Per-run JSON and the table's lines are left in OUTDIR.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tools/bench/bench-lib.sh
. tools/bench/bench-lib.sh

big=1000 small=100000 repeat=3 tier="" against="" only="big-1m,small-8k,small-8k-b64k"
bl_args "OUTDIR [--big N] [--small N] [--repeat R] [--tier ram|page|direct] [--nice N] [--against BATCHD] [--only CASES]" \
	"big small repeat tier against only" -- "$@"
if [[ -n $against && ! -x $against ]]; then
	echo "$0: --against: $against is not an executable batchd" >&2
	exit 2
fi
conf=()
case $tier in
"") ;;
ram | page | direct)
	printf '[memory]\ntier = %s\n' "$tier" >"$out/batchd.conf"
	conf=(--config "$out/batchd.conf") ;;
*) echo "$0: --tier: '$tier' is not ram, page or direct" >&2; exit 2 ;;
esac
res=$out/cold.jsonl
: >"$res"

cases=${only//,/ }
for p in $cases; do
	case $p in
	big-1m) bl_make_pack "$out/big-1m.bpk" "$big" 1048576 ;;
	small-8k) bl_make_pack "$out/small-8k.bpk" "$small" 8192 ;;
	small-8k-b64k) bl_make_pack "$out/small-8k-b64k.bpk" "$small" 8192 --block-size 64K ;;
	rand-1m) bl_make_random_pack "$out/rand-1m.bpk" "$big" 1048576 ;;
	rand-8k) bl_make_random_pack "$out/rand-8k.bpk" "$small" 8192 ;;
	*) echo "$0: --only: '$p' is not big-1m, small-8k, small-8k-b64k, rand-1m or rand-8k" >&2
	   exit 2 ;;
	esac
	bl_pack_line "$out/$p.bpk"
done

# faults PID: the daemon's minor and major page faults so far ("MINOR MAJOR").
faults() {
	awk '{ sub(/.*\) /, ""); print $8, $10 }' "/proc/$1/stat"
}

# cold SIDE PACK PAIR BATCH: one cold epoch (page cache dropped, a fresh
# daemon: $BATCHD) through batchd-bench pipeline, recorded as SIDE.
cold() {
	local side=$1 p=$2 i=$3 batch=$4 load f
	bl_drop_caches
	bl_daemon_start "$out" "${conf[@]}"
	load=$(bl_load)
	bl_watch_start "$out/threads.json"
	bl_run "$BENCH" pipeline "$p.bpk" --socket "$out/batchd.sock" --batch-size "$batch" --epochs 1 \
		--json >"$out/$p-$side$i.json"
	f=$(faults "$DAEMON_PID")
	bl_watch_stop
	bl_record "$res" "$(line "$p" "$side" "$i" "$out/$p-$side$i.json" "$load" "$(cat "$out/threads.json")" "$(bl_tier "$out")" "$f")"
	bl_daemon_stop
}

# line CASE SIDE PAIR JSON LOAD [THREADS TIER | INFO]: the results' line of one run.
line() {
	"$PY" - "$@" <<'PYEOF'
import json, sys
case, side, pair, path, load = sys.argv[1:6]
j = json.load(open(path))
if side in ("A", "A0"):
    mbs = j["total"]["bytes_per_s"] / 1e6
elif side == "B":
    mbs = j["raw_bytes_per_s"] / 1e6
elif side == "D":
    info = json.load(open(sys.argv[6]))
    mbs = j["bw_bytes"] * info["raw_bytes"] / info["stored_bytes"] / 1e6
else:
    info = json.load(open(sys.argv[6]))
    mbs = j["iops"] * info["raw_bytes"] / info["blocks"] / 1e6
r = {"case": case, "pair": int(pair), "side": side, "unit": "MB/s", "value": mbs, "load": load}
if side == "C":
    r["what"] = f"disk, random {j['bs'] // 1024} KiB O_DIRECT reads, QD {j['iodepth']}"
if side == "D":
    r["what"] = f"disk, in file order, {j['bs'] >> 20} MiB O_DIRECT reads, QD {j['iodepth']}"
if side in ("A", "A0"):
    r["stall_pct"] = j["total"]["stall_pct"]
    r["first_batch_ms"] = j["total"]["first_batch_ms"]
    r["threads"] = json.loads(sys.argv[6])
    r["daemon_cpu_s"] = sum(r["threads"].values())
    r["tier"] = sys.argv[7]
    r["minor_faults"], r["major_faults"] = (int(x) for x in sys.argv[8].split())
print(json.dumps(r))
PYEOF
}

ours=$BATCHD
for p in $cases; do
	batch=256
	[[ $p == big-1m || $p == rand-1m ]] && batch=16
	"$PACKER" info "$out/$p.bpk" --json >"$out/$p.info.json"
	bs=$("$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); print(-(-j["stored_bytes"] // j["blocks"] // 4096) * 4096)' "$out/$p.info.json")
	for i in $(seq "$repeat"); do
		if [[ -n $against && $((i % 2)) == 1 ]]; then BATCHD=$against cold A0 "$p" "$i" "$batch"; fi
		BATCHD=$ours cold A "$p" "$i" "$batch"
		if [[ -n $against && $((i % 2)) == 0 ]]; then BATCHD=$against cold A0 "$p" "$i" "$batch"; fi
		load=$(bl_load)
		bl_run "$BENCH" decode "$out/$p.bpk" --threads 2 --json >"$out/$p-B$i.json"
		bl_record "$res" "$(line "$p" B "$i" "$out/$p-B$i.json" "$load")"
		bl_drop_caches
		load=$(bl_load)
		bl_run "$BENCH" disk "$out/$p.bpk" --rw randread --bs "$bs" --qd 64 --direct --json \
			>"$out/$p-C$i.json"
		bl_record "$res" "$(line "$p" C "$i" "$out/$p-C$i.json" "$load" "$out/$p.info.json")"
		grep -v '"side": "A0"' "$res" | tail -3 | "$PY" -c 'import json,sys
a, b, c = (json.loads(l) for l in sys.stdin)
print("  %s pair %d: pipeline %.0f MB/s (load %s), decode %.0f MB/s (load %s), disk %.0f MB/s (load %s): A/B %.3f, A/C %.3f" % (a["case"], a["pair"], a["value"], a["load"], b["value"], b["load"], c["value"], c["load"], a["value"] / b["value"], a["value"] / c["value"]))'
		bl_drop_caches
		load=$(bl_load)
		bl_run "$BENCH" disk "$out/$p.bpk" --rw read --bs 4M --qd 4 --direct --json \
			>"$out/$p-D$i.json"
		bl_record "$res" "$(line "$p" D "$i" "$out/$p-D$i.json" "$load" "$out/$p.info.json")"
	done
done
echo "A = cold pipeline, B = decode only on 2 threads, C = the disk (random), D = the disk (file order):"
bl_summary "$res"
# A's page faults, and with --against the other batchd's cold epochs beside A's.
"$PY" - "$res" "$against" <<'PYEOF'
import json, statistics, sys
med = statistics.median
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for c in dict.fromkeys(r["case"] for r in rows):
    side = {}
    for r in rows:
        if r["case"] == c:
            side.setdefault(r["pair"], {})[r["side"]] = r
    a = [p["A"] for p in side.values() if "A" in p]
    print(f"{c}: A minor page faults median {med(x['minor_faults'] for x in a):.0f}")
    ad = [(p["A"], p["D"]) for p in side.values() if "A" in p and "D" in p]
    if ad:
        r = [x["value"] / y["value"] for x, y in ad]
        print(f"    D {med(y['value'] for _, y in ad):.4g} MB/s ({ad[0][1]['what']}), "
              f"A/D median {med(r):.3f} (min {min(r):.3f}, max {max(r):.3f})")
    both = [(p["A"], p["A0"]) for p in side.values() if "A" in p and "A0" in p]
    if both:
        r = [x["value"] / y["value"] for x, y in both]
        print(f"    A0 ({sys.argv[2]}) {med(y['value'] for _, y in both):.4g} MB/s, "
              f"A/A0 median {med(r):.3f} (min {min(r):.3f}, max {max(r):.3f}), {len(both)} pairs; "
              f"A0 minor page faults median {med(y['minor_faults'] for _, y in both):.0f}, "
              f"daemon CPU s A {med(x['daemon_cpu_s'] for x, _ in both):.2f}, "
              f"A0 {med(y['daemon_cpu_s'] for _, y in both):.2f}")
PYEOF
