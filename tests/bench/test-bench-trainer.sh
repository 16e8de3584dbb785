#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# test-bench-trainer.sh - the trainer steps and baseline of the pipeline
# benchmark and of batchctl consume: --step-cpu-ms burns the client's own
# CPU time (checked against the CPU time the client reports, a lower bound
# the busy loop guarantees), --in-memory runs the same loop over one epoch
# copied into the client (the same batches, samples and bytes as the
# pipeline, every epoch timed), and bad values are refused with exit
# status 2 and a message naming the option.
#
#   bash tests/bench/test-bench-trainer.sh BATCHD-BENCH BATCHD-PACK BATCHD BATCHCTL PYTHON3
#
# Each check prints "ok - ..." or "FAIL - ..."; the last line is "N passed,
# M failed". Exit status 0 when nothing failed, 1 otherwise.
set -euo pipefail
export LC_ALL=C

if [[ $# -ne 5 ]]; then
	echo "usage: $0 BATCHD-BENCH BATCHD-PACK BATCHD BATCHCTL PYTHON3" >&2
	exit 2
fi
BENCH=$(realpath -- "$1")
PACK=$(realpath -- "$2")
BATCHD=$(realpath -- "$3")
CTL=$(realpath -- "$4")
PY=$5

# shellcheck source=tests/bench/bench-testlib.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/bench-testlib.sh"
scratch bench-trainer
# ctl ARGS...: batchctl with a time limit, like run.
ctl() {
	RC=0
	timeout -k 5 60 "$CTL" "$@" >"$T/out" 2>"$T/err" </dev/null || RC=$?
}
# usage_error DESC NEEDLE RUNNER ARGS...: exit 2, and stderr names NEEDLE.
usage_error() {
	local desc=$1 needle=$2
	shift 2
	"$@"
	if [[ $RC -eq 2 ]] && grep -qF -- "$needle" "$T/err"; then
		ok "usage error: $desc"
	else
		bad "usage error: $desc: exit $RC, stderr: $(head -c 200 "$T/err" | tr '\n' ' ')"
	fi
}

usage_error "pipeline --step-cpu-ms x" "--step-cpu-ms" run pipeline x.bpk --step-cpu-ms x
usage_error "pipeline --step-cpu-ms over an hour" "--step-cpu-ms: '3600001' is over an hour" \
	run pipeline x.bpk --step-cpu-ms 3600001
usage_error "pipeline --step-ms over an hour" "--step-ms: '3600001' is over an hour" \
	run pipeline x.bpk --step-ms 3600001
usage_error "pipeline --in-memory with --device" "--in-memory" run pipeline x.bpk --in-memory --device 0
usage_error "consume --step-cpu-ms over an hour" "--step-cpu-ms: '3600001' is over an hour" \
	ctl -s "$T/none.sock" consume x.bpk --batch-size 4 --step-cpu-ms 3600001
usage_error "consume --step-cpu-ms x" "--step-cpu-ms" \
	ctl -s "$T/none.sock" consume x.bpk --batch-size 4 --step-cpu-ms x
# No daemon there: exit 1 with bc_connect's own message (the socket, how
# it was chosen, what to do), for the commands that operate batchd and consume.
for cmd in status "consume x.bpk --batch-size 4"; do
	# shellcheck disable=SC2086
	ctl -s "$T/none.sock" $cmd
	expect "batchctl $cmd with no daemon: exit 1, the socket tried, how it was chosen, the fix" \
		eval '[[ $RC -eq 1 ]] && grep -qxF "batchctl: cannot connect to batchd at $T/none.sock (the socket path given): No such file or directory: is batchd running? (systemctl start batchd, or batchd --socket PATH)" "$T/err"'
done

# 240 samples of 1..4000 bytes, packed 16 KiB to a block: batches cut across blocks.
"$PY" - "$T/src" <<'PYEOF'
import os, random, sys
os.makedirs(sys.argv[1])
rng = random.Random(11)
for i in range(240):
    with open(os.path.join(sys.argv[1], "s%04d.bin" % i), "wb") as f:
        f.write(rng.randbytes(rng.randint(1, 4000)))
PYEOF
mkpack() {
	timeout 60 "$PACK" create "$T/p.bpk" "$T/src" --block-size 16K >"$T/out" 2>"$T/err" &&
		timeout 60 "$PACK" info "$T/p.bpk" --json >"$T/info.json"
}
expect "batchd-pack makes the test pack" mkpack

# ---- pipeline --step-cpu-ms ------------------------------------------------------

run pipeline "$T/p.bpk" --batch-size 12 --epochs 3 --step-cpu-ms 2 --batchd "$BATCHD" --json
cp "$T/out" "$T/cpu.json"
expect "pipeline --step-cpu-ms 2, 3 epochs: every sample 3 times, 60 batches, 3 epochs timed" \
	py 't["samples"] == 720 and t["bytes"] == 3 * j2["raw_bytes"] and t["batches"] == 60 and t["epochs_done"] == 3 and len(t["epoch_s"]) == 3 and all(e > 0 for e in t["epoch_s"]) and j["step_cpu_ms"] == 2 and not j["in_memory"]' "$T/cpu.json" "$T/info.json"
expect "pipeline --step-cpu-ms: the client used at least 2 ms of CPU a batch" \
	py 'j["total"]["cpu_s"] >= 60 * 0.002 and j["per_client"][0]["cpu_s"] == j["total"]["cpu_s"]' "$T/cpu.json"
# Each figure is printed to 1 us: the sum of four roundings may pass the wall by 2 us.
expect "pipeline epochs add up to at most the client's wall time" \
	py 'sum(j["total"]["epoch_s"]) <= j["total"]["wall_s"] + 1e-5' "$T/cpu.json"

# ---- pipeline --in-memory --------------------------------------------------------

run pipeline "$T/p.bpk" --clients 2 --batch-size 12 --epochs 2 --step-cpu-ms 1 --in-memory --batchd "$BATCHD" --json
cp "$T/out" "$T/mem.json"
expect "pipeline --in-memory, 2 clients, 2 epochs: every sample twice, bytes == 2 * raw_bytes" \
	py 'j["in_memory"] and t["samples"] == 480 and t["bytes"] == 2 * j2["raw_bytes"] and t["batches"] == 40 and t["failed"] == 0 and all(c["samples"] == 240 and c["epochs_done"] == 2 and len(c["epoch_s"]) == 2 for c in j["per_client"])' "$T/mem.json" "$T/info.json"
expect "pipeline --in-memory: every step burnt its CPU, every batch's wait recorded" \
	py 'all(c["cpu_s"] >= c["batches"] * 0.001 for c in j["per_client"]) and j["total"]["wait_ns"]["N"] == 40 and len(j["total"]["epoch_s"]) == 2' "$T/mem.json"
run pipeline "$T/p.bpk" --batch-size 12 --epochs 1 --in-memory --batchd "$BATCHD" --json
cp "$T/out" "$T/mem1.json"
run pipeline "$T/p.bpk" --batch-size 12 --epochs 1 --batchd "$BATCHD" --json
expect "pipeline --in-memory holds the pipeline's batches: the same count, samples and bytes" \
	py 'all(j["total"][k] == j2["total"][k] for k in ("batches", "samples", "bytes"))' "$T/mem1.json" "$T/out"
run pipeline "$T/p.bpk" --batch-size 50 --seconds 200ms --step-cpu-ms 1 --in-memory --batchd "$BATCHD" --json
cp "$T/out" "$T/memt.json"
expect "pipeline --in-memory, time-based: whole batches of the held epoch, over and over" \
	py 't["batches"] > 5 and t["batches"] == t["wait_ns"]["N"] and t["epochs_done"] == t["batches"] // 5 and t["bytes"] >= t["epochs_done"] * j2["raw_bytes"] and t["wall_s"] >= 0.2' "$T/memt.json" "$T/info.json"
run pipeline "$T/p.bpk" --batch-size 12 --epochs 2 --in-memory --step-cpu-ms 1 --batchd "$BATCHD"
expect "pipeline --in-memory human output names the baseline and each epoch" \
	eval '[[ $RC -eq 0 ]] && grep -q "in-memory baseline" "$T/out" && grep -q "+ 1 ms CPU" "$T/out" && grep -Eq "^epoch s: [0-9.]+ [0-9.]+; client CPU" "$T/out"'

# ---- batchctl consume --step-cpu-ms -----------------------------------------------

"$BATCHD" --no-config --socket "$T/d.sock" --root "$T" 2>"$T/batchd.log" &
DAEMON_PID=$!
for _ in $(seq 500); do [[ -S $T/d.sock ]] && break; sleep 0.02; done
ctl -s "$T/d.sock" consume p.bpk --batch-size 10 --epochs 2 --step-cpu-ms 3 --json
cp "$T/out" "$T/consume.json"
expect "consume --step-cpu-ms 3, 2 epochs: 48 batches, bytes == 2 * raw_bytes, >= 3 ms CPU a batch" \
	py 'j["batches"] == 48 and j["samples"] == 480 and j["bytes"] == 2 * j2["raw_bytes"] and j["cpu_s"] >= 48 * 0.003' "$T/consume.json" "$T/info.json"
ctl -s "$T/d.sock" consume p.bpk --batch-size 10 --step-cpu-ms 1
expect "consume human output reports its CPU time" \
	eval '[[ $RC -eq 0 ]] && grep -Eq "24 batches, 240 samples.*CPU [0-9.]+ s" "$T/out"'
kill "$DAEMON_PID"
wait "$DAEMON_PID" || true
DAEMON_PID=""

finish
