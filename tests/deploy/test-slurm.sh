#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Slurm recipe in conf/slurm/, run for real without Slurm: shellcheck
# first, then train.sbatch with a stand-in srun and scontrol
# (fake-slurm/) that run each job step's tasks here with Slurm's
# variables and a TMPDIR per "node". Both ways of starting batchd: as an
# srun step of the job (2 nodes x 2 ranks: two real batchd from the build
# tree, one per node, each serving its node's ranks), and from
# batchd-prolog.sh as slurmd would (1 node x 3 ranks), stopped by
# batchd-epilog.sh. The ranks are `batchctl consume --print-samples` on a
# pack of the test's making; each rank's samples (epoch, batch, id,
# XXH3 of the bytes) must be exactly what that rank of that world gets
# from a batchd of its own, and the union over the ranks the whole epoch,
# each sample once.
#
#   test-slurm.sh BUILD_DIR SOURCE_DIR
# shellcheck disable=SC2015 # `A && ok || bad`: ok always succeeds
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
command -v shellcheck >/dev/null || { echo "skip: shellcheck is not installed (tools/deps.sh)"; exit 77; }
tmp=$(mktemp -d)
daemon=
trap '[ -z "$daemon" ] || kill -KILL "$daemon" 2>/dev/null; rm -rf "$tmp"' EXIT
# ok, bad: the TAP-like lines and counts of the script tests.
# shellcheck source=tests/cli/cli-lib.sh
. "$src/tests/cli/cli-lib.sh"
ctl=$build/tools/batchctl
slurm=$src/conf/slurm

# 1. shellcheck: the recipe, the stand-ins and this script.
if out=$(cd "$src" && shellcheck -x conf/slurm/*.sh conf/slurm/train.sbatch \
	tests/deploy/fake-slurm/srun tests/deploy/fake-slurm/scontrol tests/deploy/test-slurm.sh 2>&1); then
	ok "shellcheck conf/slurm and the stand-ins"
else
	bad "shellcheck: $out"
fi

# 2. A dataset of 240 samples of 1000 random bytes, and batchd.conf for it.
mkdir "$tmp/data"
/usr/bin/python3 -c 'import random, sys; sys.stdout.buffer.write(random.Random(7).randbytes(240 * 1000))' \
	>"$tmp/records"
"$build/tools/batchd-pack" create "$tmp/data/ds.bpk" --records 1000 "$tmp/records" >/dev/null
cat >"$tmp/batchd.conf" <<-EOF2
	[datasets]
	root = $tmp/data
	[memory]
	budget = 256M
EOF2

# What rank R of world W gets from a batchd of its own: the reference.
reference() {
	local world=$1 sock=$tmp/ref.sock
	"$build/daemon/batchd" -c "$tmp/batchd.conf" --socket "$sock" 2>"$tmp/ref.log" &
	daemon=$!
	for _ in $(seq 500); do [ -S "$sock" ] && break; sleep 0.02; done
	for ((r = 0; r < world; r++)); do
		"$ctl" -s "$sock" consume ds.bpk --batch-size 16 --seed 3 --rank "$r" --world "$world" \
			--print-samples 2>>"$tmp/ref.log" | grep -E '^[0-9]+ [0-9]+ [0-9]+ [0-9a-f]{16}$' >"$tmp/ref.$world.$r"
	done
	kill -TERM "$daemon"
	wait "$daemon" || bad "the reference batchd exited $?"
	daemon=
}
reference 4
reference 3

# The trainer each rank runs: its samples, and which socket it used.
# shellcheck disable=SC2016 # expanded by each rank's shell
trainer=(bash -c 'echo "$BATCHD_SOCKET $LOCAL_RANK" >"$OUT/sock.$RANK"
	exec "$BATCHCTL" consume ds.bpk --batch-size 16 --seed 3 --rank "$RANK" --world "$WORLD_SIZE" \
		--print-samples >"$OUT/rank.$RANK"')

# check_ranks MODE WORLD: each rank's samples as the reference's, the union the epoch once.
check_ranks() {
	local mode=$1 world=$2 r lines
	for ((r = 0; r < world; r++)); do
		lines=$(grep -cE '^[0-9]+ [0-9]+ [0-9]+ [0-9a-f]{16}$' "$tmp/$mode/rank.$r" || true)
		if [ "$lines" -gt 0 ] && diff -q <(grep -E '^[0-9]+ [0-9]+ [0-9]+ [0-9a-f]{16}$' "$tmp/$mode/rank.$r") \
			"$tmp/ref.$world.$r" >/dev/null; then
			ok "$mode: rank $r of $world: its $lines samples, ids and bytes as from a batchd of its own"
		else
			bad "$mode: rank $r of $world differs from the reference: $(diff <(grep -E '^[0-9]' "$tmp/$mode/rank.$r") "$tmp/ref.$world.$r" | head -3)"
		fi
	done
	local ids
	ids=$(cat "$tmp/$mode"/rank.* | awk 'NF == 4 { print $3 }' | sort -n | tr '\n' ' ')
	[ "$ids" = "$(seq -s ' ' 0 239) " ] && ok "$mode: the $world ranks together read samples 0..239, each once" ||
		bad "$mode: the union over the ranks is not the epoch once: $(wc -w <<<"$ids") ids read; repeated: $(tr ' ' '\n' <<<"$ids" | uniq -d | head -3 | tr '\n' ' ')"
}

# A batchd with remote datasets takes the cache directory the recipe passes.
cache=
if "$build/daemon/batchd" --help | grep -q -- --cache-dir; then
	cache=$tmp/cache
	mkdir "$cache"
fi

# The job's environment, as sbatch gives a batch script.
job() {
	local id=$1 nodelist=$2 nnodes=$3 per_node=$4
	shift 4
	env PATH="$src/tests/deploy/fake-slurm:$PATH" FAKE_SLURM_ROOT="$tmp/nodes" \
		SLURM_JOB_ID="$id" SLURM_JOB_NODELIST="$nodelist" SLURM_JOB_NUM_NODES="$nnodes" \
		SLURM_NNODES="$nnodes" SLURM_NTASKS=$((nnodes * per_node)) SLURM_NTASKS_PER_NODE="$per_node" \
		BATCHD_SLURM_DIR="$slurm" BATCHD="$build/daemon/batchd" BATCHCTL="$ctl" \
		BATCHD_CONF="$tmp/batchd.conf" BATCHD_CACHE_DIR="$cache" "$@"
}

# 3. batchd as an srun step: 2 nodes x 2 ranks.
mkdir -p "$tmp/step" "$tmp/nodes"
if job 501 'node[0-1]' 2 2 OUT="$tmp/step" bash "$slurm/train.sbatch" "${trainer[@]}" \
	>"$tmp/step.log" 2>&1; then
	ok "step: train.sbatch exited 0"
else
	bad "step: train.sbatch failed: $(tail -5 "$tmp/step.log")"
fi
check_ranks step 4
# Each rank used its own node's batchd, two daemons in all.
for r in 0 1 2 3; do
	want="$tmp/nodes/node$((r / 2))/tmp/batchd-501/batchd.sock $((r % 2))"
	[ "$(cat "$tmp/step/sock.$r" 2>/dev/null)" = "$want" ] &&
		ok "step: rank $r on node$((r / 2)), local rank $((r % 2)), through that node's socket" ||
		bad "step: rank $r used '$(cat "$tmp/step/sock.$r" 2>/dev/null)', not '$want'"
done
n=$(grep -c 'listening' "$tmp/step.log" || true)
[ "$n" -eq 2 ] && ok "step: one batchd per node (2 listening)" || bad "step: $n batchd listened, not 2"
# Stopped at the end of the job: SIGTERM through srun, drained, socket removed.
[ ! -e "$tmp/nodes/node0/tmp/batchd-501/batchd.sock" ] && [ ! -e "$tmp/nodes/node1/tmp/batchd-501/batchd.sock" ] &&
	! grep -q 'the batchd step exited' "$tmp/step.log" &&
	ok "step: both batchd stopped with the job and exited 0, sockets removed" ||
	bad "step: batchd not stopped cleanly: $(grep -E 'batchd step|drain' "$tmp/step.log")"

# 4. batchd from the prolog: 1 node x 3 ranks, as the job's user, stopped by the epilog.
# slurmd runs both with next to no environment (no PATH).
slurmd() {
	env -i SLURM_JOB_ID=502 SLURM_JOB_UID="$(id -u)" SLURM_JOB_GID="$(id -g)" SLURM_JOB_USER="$(id -un)" \
		BATCHD_RUN_BASE="$tmp/run" BATCHD="$build/daemon/batchd" BATCHCTL="$ctl" \
		BATCHD_CONF="$tmp/batchd.conf" BATCHD_CACHE_DIR="$cache" "$@"
}
mkdir -p "$tmp/prolog"
if slurmd "$slurm/batchd-prolog.sh" >"$tmp/prolog.log" 2>&1; then
	ok "prolog: batchd-prolog.sh exited 0"
else
	bad "prolog: batchd-prolog.sh failed: $(tail -5 "$tmp/prolog.log")"
fi
sock=$tmp/run/502/batchd.sock
pid=$(cat "$tmp/run/502/batchd.pid" 2>/dev/null || echo none)
[ -S "$sock" ] && "$ctl" -s "$sock" status >/dev/null && [ "$(stat -c %a "$tmp/run/502")" = 700 ] &&
	[ "$(stat -c %u "$tmp/run/502")" = "$(id -u)" ] &&
	ok "prolog: batchd answers on $sock, in a directory of mode 0700 the job's user owns" ||
	bad "prolog: no batchd on $sock"
[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = batchd ] && ok "prolog: batchd.pid names batchd ($pid)" ||
	bad "prolog: batchd.pid ($pid) is not batchd"
if job 502 node0 1 3 OUT="$tmp/prolog" BATCHD_SLURM_MODE=prolog BATCHD_RUN_BASE="$tmp/run" \
	bash "$slurm/train.sbatch" "${trainer[@]}" >"$tmp/prolog-job.log" 2>&1; then
	ok "prolog: train.sbatch (BATCHD_SLURM_MODE=prolog) exited 0"
else
	bad "prolog: train.sbatch failed: $(tail -5 "$tmp/prolog-job.log")"
fi
check_ranks prolog 3
[ -S "$sock" ] && ok "prolog: batchd outlives the job's steps, for the epilog to stop" ||
	bad "prolog: batchd is gone before the epilog"
if slurmd "$slurm/batchd-epilog.sh" >"$tmp/epilog.log" 2>&1; then
	ok "epilog: batchd-epilog.sh exited 0"
else
	bad "epilog: batchd-epilog.sh failed: $(tail -5 "$tmp/epilog.log")"
fi
state=$(sed -n 's/^[0-9]* ([^)]*) \(.\).*/\1/p' "/proc/$pid/stat" 2>/dev/null || true)
if { [ -z "$state" ] || [ "$state" = Z ]; } && [ ! -e "$tmp/run/502" ]; then
	ok "epilog: batchd $pid stopped, run directory removed"
else
	bad "epilog: batchd $pid still running ($state) or $tmp/run/502 left"
fi
grep -q 'did not drain' "$tmp/epilog.log" && bad "epilog: batchd had to be killed: $(cat "$tmp/epilog.log")"
echo "note: no Slurm here: srun and scontrol are stand-ins (tests/deploy/fake-slurm), the daemons and trainers real"
echo "$PASS passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
