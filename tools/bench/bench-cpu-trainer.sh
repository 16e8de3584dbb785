#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A CPU-bound trainer sharing its cores with batchd: its epoch time with
# batchd feeding it against the same loop over the same batches already
# in memory, in alternating pairs, in one run.
#
#   tools/bench/bench-cpu-trainer.sh OUTDIR [--samples N] [--sample-size SIZE]
#       [--batch-size B] [--epochs E] [--step-cpu-ms T] [--repeat R] [--nice N]
#
# Defaults: 20000 samples of 8K (half random, half text; batchd-pack's
# default options: one sample per block), batch 64, 3 epochs, 10 ms of CPU
# burnt per step on the trainer's own thread (its CPU clock, not a sleep),
# 3 pairs. The data fits in RAM and the page cache is left warm. Each run
# gets a fresh batchd with its default settings (its decode threads one
# per CPU, the trainer's cores):
#   A  batchd-bench pipeline --step-cpu-ms T: batches from batchd;
#   B  the same with --in-memory: one epoch copied into the trainer first
#      (untimed, its stream closed), then the same loop over the copies.
# Reported: the median ratio of mean epoch times A/B (target <= 1.05) with
# min and max, the same for the first epoch and for the later ones, A's
# stall % as the client measures it (time blocked in bc_next over its
# wall time; target < 1%), the CPU seconds each daemon thread used during
# A (B's daemon only serves the untimed copy and is idle after), and the
# load average before every run. --nice N runs the daemon and both sides
# at niceness N (default 0): on a shared machine, below 0 other jobs take
# less from either. Per-run JSON and the lines the table is made of are
# left in OUTDIR.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tools/bench/bench-lib.sh
. tools/bench/bench-lib.sh

samples=20000 sample_size=8K batch_size=64 epochs=3 step_cpu_ms=10 repeat=3
bl_args "OUTDIR [--samples N] [--sample-size SIZE] [--batch-size B] [--epochs E] [--step-cpu-ms T] [--repeat R] [--nice N]" \
	"samples sample-size batch-size epochs step-cpu-ms repeat" -- "$@"
[[ $epochs -ge 2 ]] || { echo "$0: --epochs must be at least 2 (the first epoch is reported apart)" >&2; exit 2; }
bytes=$(numfmt --from=iec "$sample_size")
res=$out/cpu-trainer.jsonl
: >"$res"

bl_make_pack "$out/cpu.bpk" "$samples" "$bytes"
bl_pack_line "$out/cpu.bpk"
echo "trainer: batch $batch_size, $epochs epochs, $step_cpu_ms ms CPU a step; $repeat pairs; $(nproc) CPUs"

# line SIDE PAIR JSON LOAD [THREADS TIER]: the results' line of one run.
line() {
	"$PY" - "$@" <<'PYEOF'
import json, statistics, sys
side, pair, path, load = sys.argv[1:5]
j = json.load(open(path))
t, e = j["total"], j["total"]["epoch_s"]
r = {"case": "cpu-trainer", "pair": int(pair), "side": side, "unit": "s/epoch",
     "value": statistics.mean(e), "first": e[0], "steady": statistics.mean(e[1:]),
     "stall_pct": t["stall_pct"], "client_cpu_s": t["cpu_s"], "load": load, "epoch_s": e}
if len(sys.argv) > 5:
    r["threads"] = json.loads(sys.argv[5])
    r["daemon_cpu_s"] = sum(r["threads"].values())
    r["tier"] = sys.argv[6]
print(json.dumps(r))
PYEOF
}

for i in $(seq "$repeat"); do
	for side in A B; do
		mem=()
		[[ $side == B ]] && mem=(--in-memory)
		bl_daemon_start "$out"
		load=$(bl_load)
		bl_watch_start "$out/threads.json"
		bl_run "$BENCH" pipeline cpu.bpk --socket "$out/batchd.sock" --batch-size "$batch_size" \
			--epochs "$epochs" --step-cpu-ms "$step_cpu_ms" "${mem[@]}" --json >"$out/$side$i.json"
		bl_watch_stop
		bl_record "$res" "$(line "$side" "$i" "$out/$side$i.json" "$load" "$(cat "$out/threads.json")" "$(bl_tier "$out")")"
		bl_daemon_stop
		tail -1 "$res" | "$PY" -c 'import json,sys; r=json.load(sys.stdin); print("  pair %d %s: epochs %s s, stall %.2f%%, load %s" % (r["pair"], "batchd   " if r["side"] == "A" else "in-memory", " ".join("%.3f" % x for x in r["epoch_s"]), r["stall_pct"], r["load"]))'
	done
done
echo "A = batchd, B = the same loop over the batches in memory:"
bl_summary "$res"
