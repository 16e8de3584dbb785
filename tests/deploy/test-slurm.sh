#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Slurm recipe in conf/slurm/ on a real Slurm: Debian's slurmctld and
# two slurmd as nodes n1 and n2 of a cluster on this machine, with munge
# (tests/deploy/slurm-cluster.sh). The jobs are sbatch of the shipped
# train.sbatch, sized on sbatch's command line and set by the environment
# alone, run as user nobody; their trainers are
# tests/deploy/slurm-trainer.py, which consumes its rank's share of an
# epoch through batchctl and checkpoints after every batch. The recipe,
# batchd and batchctl are copied into an install-like tree first (conf/slurm
# as share/batchd/slurm), which nobody may read wherever the checkout is.
#
# Each rank's samples (epoch, batch, id, XXH3 of the bytes) must be exactly
# what that rank of that world gets from a batchd of its own, and the union
# over the ranks the whole epoch, each sample once, its XXH3 that of the
# record written into the pack.
#
#   test-slurm.sh BUILD_DIR SOURCE_DIR step
#     conf/slurm and these scripts through shellcheck; then batchd as an srun
#     step of the job (2 nodes x 2 ranks): one batchd per node, each rank
#     through its node's, stopped with the job; then a job whose trainer
#     step is killed with `scancel --signal=KILL` mid-epoch, requeued with
#     `scontrol requeue`: every rank resumes from its checkpoint and the
#     epoch is still exact.
#   test-slurm.sh BUILD_DIR SOURCE_DIR prolog
#     batchd started by batchd-prolog.sh (slurm.conf Prolog=, PrologFlags=
#     Alloc) as the job's user on each node, set by batchd-slurm.env beside
#     slurm.conf, 2 nodes x 3 ranks; batchd-epilog.sh (Epilog=) stops it
#     and removes its directory, and no node is drained.
#
# Both end with the cluster stopped and no process of theirs left; the
# test runs in a PID namespace of its own, which takes every process
# still in it down when it ends, however it ends. BATCHD_TEST_KEEP=1 keeps
# the temporary directory: the daemons' logs (slurm/log), each job's output
# and its trainers' files.
# shellcheck disable=SC2015 # `A && ok || bad`: ok always succeeds
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
mode=$3
[[ $mode == step || $mode == prolog ]] || { echo "usage: test-slurm.sh BUILD_DIR SOURCE_DIR step|prolog" >&2; exit 2; }
if [[ $(id -u) -ne 0 ]]; then
	echo "SKIP: slurmd must run as root to start jobs as their users (and munged, slurmctld with it)"
	exit 77
fi
# shellcheck source=tests/deploy/slurm-cluster.sh
. "$src/tests/deploy/slurm-cluster.sh"
slurm_isolate "$@"
# ok, bad: the TAP-like lines and counts of the script tests.
# shellcheck source=tests/cli/cli-lib.sh
. "$src/tests/cli/cli-lib.sh"
for p in slurmctld slurmd sbatch srun scontrol munged mungekey shellcheck stdbuf; do
	command -v "$p" >/dev/null || { echo "FAIL - $p is not installed: tools/deps.sh installs it"; exit 1; }
done

tmp=$(mktemp -d)
ref_daemon=
cleanup() {
	slurm_stop || true
	[[ -z $ref_daemon ]] || kill -KILL "$ref_daemon" 2>/dev/null || true
	if [[ -n ${BATCHD_TEST_KEEP:-} ]]; then
		echo "note: kept $tmp (BATCHD_TEST_KEEP)"
	else
		rm -rf "$tmp"
	fi
}
trap cleanup EXIT
chmod 0755 "$tmp"
user=nobody
uid=$(id -u "$user")
gid=$(id -g "$user")
SAMPLE='^[0-9]+ [0-9]+ [0-9]+ [0-9a-f]{16}$'

# 1. shellcheck: the recipe and this test's scripts (once, in the step test).
if [[ $mode == step ]]; then
	if out=$(cd "$src" && shellcheck -x conf/slurm/*.sh conf/slurm/train.sbatch \
		tests/deploy/slurm-cluster.sh tests/deploy/test-slurm.sh 2>&1); then
		ok "shellcheck conf/slurm and the test's scripts"
	else
		bad "shellcheck: $out"
	fi
fi

# 2. The install: what the jobs run, readable by the job's user.
inst=$tmp/inst
mkdir -p "$inst/daemon" "$inst/tools" "$inst/client" "$inst/slurm"
cp "$build/daemon/batchd" "$inst/daemon/"
cp "$build/tools/batchctl" "$inst/tools/"
find "$build/client" -maxdepth 1 -name "libbatchclient.so*" ! -type d -exec cp -P -t "$inst/client" {} +
cp "$src"/conf/slurm/batchd-node.sh "$src"/conf/slurm/batchd-prolog.sh \
	"$src"/conf/slurm/batchd-epilog.sh "$src"/conf/slurm/train.sbatch "$inst/slurm/"
cp "$src/tests/deploy/slurm-trainer.py" "$inst/"
chmod -R a+rX "$inst"
setpriv --reuid="$uid" --regid="$gid" --clear-groups "$inst/tools/batchctl" --help >/dev/null 2>&1 ||
	{ echo "FAIL - user $user cannot run $inst/tools/batchctl"; exit 1; }

# 3. A dataset of 240 samples of 1000 random bytes, batchd.conf for it, and
# what each sample's XXH3 must be: that of its record.
mkdir "$tmp/data"
/usr/bin/python3 -c 'import random, sys; sys.stdout.buffer.write(random.Random(7).randbytes(240 * 1000))' \
	>"$tmp/records"
"$build/tools/batchd-pack" create "$tmp/data/ds.bpk" --records 1000 "$tmp/records" >/dev/null
/usr/bin/python3 - "$tmp/records" >"$tmp/truth" <<-'PYEOF'
	import sys, xxhash
	data = open(sys.argv[1], "rb").read()
	for i in range(len(data) // 1000):
	    print(i, xxhash.xxh3_64_hexdigest(data[i * 1000:(i + 1) * 1000]))
PYEOF
cat >"$tmp/batchd.conf" <<-EOF
	[datasets]
	root = $tmp/data
	[memory]
	budget = 256M
EOF
# Where the build's batchd has remote datasets, the recipe passes it a cache directory.
cache=
if "$build/daemon/batchd" --help | grep -q -- --cache-dir; then
	cache=$tmp/cache
	install -d -o "$uid" -g "$gid" "$cache"
fi

# reference WORLD BATCH...: what rank R of WORLD gets with batches of BATCH
# from a batchd of its own, in $tmp/ref.WORLD.BATCH.R.
reference() {
	local world=$1 sock=$tmp/ref.sock bs r
	shift
	"$build/daemon/batchd" -c "$tmp/batchd.conf" --socket "$sock" 2>>"$tmp/ref.log" &
	ref_daemon=$!
	for _ in $(seq 500); do [ -S "$sock" ] && break; sleep 0.02; done
	for bs in "$@"; do
		for ((r = 0; r < world; r++)); do
			"$build/tools/batchctl" -s "$sock" consume ds.bpk --batch-size "$bs" --seed 3 --rank "$r" \
				--world "$world" --epochs 1 --print-samples 2>>"$tmp/ref.log" |
				grep -E "$SAMPLE" >"$tmp/ref.$world.$bs.$r"
		done
	done
	kill -TERM "$ref_daemon"
	wait "$ref_daemon" || bad "the reference batchd exited $?"
	ref_daemon=
}

# check_ranks NAME DIR WORLD BATCH: each rank's samples as the reference's,
# the union the epoch once, byte for byte.
check_ranks() {
	local name=$1 dir=$2 world=$3 bs=$4 r lines
	for ((r = 0; r < world; r++)); do
		lines=$(grep -cE "$SAMPLE" "$dir/rank.$r" || true)
		if [[ $lines -gt 0 ]] && cmp -s "$dir/rank.$r" "$tmp/ref.$world.$bs.$r"; then
			ok "$name: rank $r of $world: its $lines samples, ids and bytes as from a batchd of its own"
		else
			bad "$name: rank $r of $world differs from the reference: $(diff "$dir/rank.$r" "$tmp/ref.$world.$bs.$r" 2>&1 | head -3)"
		fi
	done
	cat "$dir"/rank.* | awk '{ print $3, $4 }' | sort -n >"$dir/union"
	if cmp -s "$dir/union" "$tmp/truth"; then
		ok "$name: the $world ranks together read samples 0..239 once each, each sample's XXH3 its record's"
	else
		bad "$name: the union over the ranks is not the epoch once: $(wc -l <"$dir/union") samples read;" \
			"repeated ids: $(awk '{ print $1 }' "$dir/union" | uniq -d | head -3 | tr '\n' ' ')" \
			"first difference: $(diff "$dir/union" "$tmp/truth" | head -2 | tr '\n' ' ')"
	fi
}

# field R N [RUN]: field N of line RUN (default 1) of run.R in $out.
field() { sed -n "${3:-1}p" "$out/run.$1" 2>/dev/null | cut -d' ' -f"$2"; }

# submit NAME NTASKS_PER_NODE BATCH [SBATCH OPTION...]: train.sbatch on 2
# nodes as $user, the trainer writing into $tmp/NAME; prints the job id.
submit() {
	local name=$1 per_node=$2 bs=$3
	shift 3
	install -d -o "$uid" -g "$gid" "$tmp/$name"
	sbatch --parsable --uid="$uid" --gid="$gid" --chdir="$tmp/$name" --output="$tmp/$name/job.log" \
		--open-mode=append --job-name="$name" --nodes=2 --ntasks-per-node="$per_node" --cpus-per-task=1 \
		--gpus-per-node=0 --time=10 "$@" "$inst/slurm/train.sbatch" \
		/usr/bin/python3 "$inst/slurm-trainer.py" "$tmp/$name" ds.bpk "$bs"
}

cluster=$tmp/slurm
if [[ $mode == step ]]; then
	reference 4 16 4
	slurm_start "$cluster" 2 || { bad "the Slurm cluster did not start"; exit 1; }
	ok "Slurm $(sinfo -V | cut -d' ' -f2): slurmctld and 2 slurmd (nodes n1, n2) up, MULTIPLE_SLURMD" \
		"$(scontrol show config | sed -n 's/^MULTIPLE_SLURMD *= *//p')"
	export BATCHD_SLURM_DIR=$inst/slurm BATCHD=$inst/daemon/batchd BATCHCTL=$inst/tools/batchctl \
		BATCHD_CONF=$tmp/batchd.conf BATCHD_CACHE_DIR=$cache TMPDIR=$tmp/tmpdir
	install -d -m 1777 "$TMPDIR"

	# 4. batchd as an srun step: 2 nodes x 2 ranks, batches of 16.
	out=$tmp/step
	id=$(submit step 2 16)
	if slurm_wait_job "$id" 90 COMPLETED FAILED CANCELLED TIMEOUT NODE_FAIL OUT_OF_MEMORY &&
		[[ $(slurm_job_state "$id") == COMPLETED ]]; then
		ok "step: job $id (train.sbatch) completed, exit 0"
	else
		bad "step: job $id is $(slurm_job_state "$id"): $(tail -5 "$out/job.log")"
	fi
	check_ranks step "$out" 4 16
	for r in 0 1 2 3; do
		node=n$((r / 2 + 1))
		want="$node $((r % 2)) $TMPDIR/batchd-$id-$node/batchd.sock"
		[[ "$(field $r 1-3)" == "$want" ]] &&
			ok "step: rank $r on $node, local rank $((r % 2)), through that node's socket" ||
			bad "step: rank $r ran as '$(field $r 1-3)', not '$want'"
		[[ "$(field $r 8-10)" == "$uid $uid 700" ]] &&
			ok "step: rank $r ran as $user, its batchd's directory $user's, mode 0700" ||
			bad "step: rank $r: uid, the directory's owner and mode are '$(field $r 8-10)', not '$uid $uid 700'"
	done
	p1=$(field 0 7) p2=$(field 2 7)
	[[ $p1 =~ ^[0-9]+$ && $p2 =~ ^[0-9]+$ && $p1 != "$p2" && $(field 1 7) == "$p1" && $(field 3 7) == "$p2" ]] &&
		ok "step: one batchd per node (pids $p1 and $p2), each serving its node's ranks" ||
		bad "step: the ranks' batchd pids are $(for r in 0 1 2 3; do field $r 7; done | tr '\n' ' ')"
	n=$(grep -c 'listening' "$out/job.log" || true)
	[[ $n -eq 2 ]] && ok "step: 2 batchd listened in the job" || bad "step: $n batchd listened, not 2"
	# Stopped at the end of the job: SIGTERM (scancel), drained, socket removed.
	n=$(grep -c 'batchd\[notice\]: stopped$' "$out/job.log" || true)
	[[ ! -e $TMPDIR/batchd-$id-n1/batchd.sock && ! -e $TMPDIR/batchd-$id-n2/batchd.sock && $n -eq 2 ]] &&
		! grep -q 'the batchd step exited' "$out/job.log" &&
		ok "step: both batchd drained and stopped with the job, exit 0, their sockets removed" ||
		bad "step: batchd not stopped cleanly: $(grep -E 'batchd step|drain|socket' "$out/job.log" | head -3)"

	# 5. Killed mid-epoch and requeued: batches of 4 (15 a rank), a step of 250 ms.
	out=$tmp/requeue
	id=$(TRAIN_STEP_MS=250 submit requeue 2 4 --requeue)
	mid_epoch() {
		local r c
		for r in 0 1 2 3; do
			read -r c _ 2>/dev/null <"$out/ckpt.$r" || return 1
			((c >= 2)) || return 1
		done
	}
	if slurm__until 60 mid_epoch; then
		step=$(field 0 4)
		scancel --signal=KILL "$step" && ok "requeue: every rank 2 batches in; scancel --signal=KILL $step (the trainers' step)" ||
			bad "requeue: scancel --signal=KILL $step failed"
	else
		bad "requeue: the ranks did not reach batch 2 within 60 s (job $(slurm_job_state "$id")): $(tail -3 "$out/job.log")"
	fi
	slurm_wait_job "$id" 60 FAILED COMPLETED CANCELLED || true
	[[ $(slurm_job_state "$id") == FAILED ]] && ok "requeue: the job failed with its trainers killed" ||
		bad "requeue: job $id is $(slurm_job_state "$id") after the kill, not FAILED"
	killed_at=()
	for r in 0 1 2 3; do
		read -r c _ 2>/dev/null <"$out/ckpt.$r" || c=
		killed_at+=("$c")
		[[ $c =~ ^[0-9]+$ ]] && ((c >= 2 && c < 15)) && ok "requeue: rank $r killed mid-epoch, checkpoint at batch $c of 15" ||
			bad "requeue: rank $r's checkpoint when killed is '$c', not within 2..14"
	done
	grep -q 'Killed' "$out/job.log" && ok "requeue: srun reported its tasks killed (SIGKILL)" ||
		bad "requeue: no task reported killed: $(tail -5 "$out/job.log")"
	# A requeued job is held back by the job credential's lifetime (120 s): start it now.
	scontrol requeue "$id" && scontrol update JobId="$id" StartTime=now ||
		bad "requeue: scontrol requeue $id, or its StartTime=now, failed"
	if slurm_wait_job "$id" 90 COMPLETED FAILED CANCELLED TIMEOUT NODE_FAIL && [[ $(slurm_job_state "$id") == COMPLETED ]]; then
		ok "requeue: job $id requeued (scontrol requeue) and completed"
	else
		bad "requeue: job $id is $(slurm_job_state "$id") after the requeue: $(tail -5 "$out/job.log")"
	fi
	for r in 0 1 2 3; do
		want="0 0 1 ${killed_at[r]}"
		got="$(field $r 5 1) $(field $r 6 1) $(field $r 5 2) $(field $r 6 2)"
		[[ $got == "$want" ]] && ok "requeue: rank $r started at batch 0, then (restart 1) at its checkpoint, batch ${killed_at[r]}" ||
			bad "requeue: rank $r's starts (restart count, batch) are '$got', not '$want'"
	done
	check_ranks requeue "$out" 4 4
	p1=$(field 0 7 2)
	[[ $p1 =~ ^[0-9]+$ && $p1 != "$(field 0 7 1)" ]] && ok "requeue: the requeued job ran a batchd of its own" ||
		bad "requeue: batchd pids $(field 0 7 1), $p1"
else
	reference 6 16
	# 6. batchd from the prolog, 2 nodes x 3 ranks. slurmd runs prolog and
	# epilog with Slurm's variables alone: their settings are in the file beside
	# slurm.conf, and the job's environment has none of them either.
	mkdir -p "$cluster"
	cat >"$cluster/batchd-slurm.env" <<-EOF
		# batchd-node.sh's settings on this cluster's nodes.
		BATCHD=$inst/daemon/batchd
		BATCHCTL=$inst/tools/batchctl
		BATCHD_CONF=$tmp/batchd.conf
		BATCHD_CACHE_DIR=$cache
		BATCHD_RUN_BASE=$tmp/run
	EOF
	slurm_start "$cluster" 2 "Prolog=$inst/slurm/batchd-prolog.sh" "Epilog=$inst/slurm/batchd-epilog.sh" \
		PrologFlags=Alloc || { bad "the Slurm cluster did not start"; exit 1; }
	ok "Slurm $(sinfo -V | cut -d' ' -f2): 2 nodes with Prolog=batchd-prolog.sh, Epilog=batchd-epilog.sh, PrologFlags=Alloc"
	out=$tmp/prolog
	id=$(BATCHD_SLURM_MODE=prolog BATCHD_SLURM_DIR=$inst/slurm submit prolog 3 16)
	if slurm_wait_job "$id" 90 COMPLETED FAILED CANCELLED TIMEOUT NODE_FAIL && [[ $(slurm_job_state "$id") == COMPLETED ]]; then
		ok "prolog: job $id (train.sbatch, BATCHD_SLURM_MODE=prolog) completed, exit 0"
	else
		bad "prolog: job $id is $(slurm_job_state "$id"): $(tail -n 5 "$out/job.log" 2>&1; sinfo -h -N -o '%N %T %E')"
	fi
	check_ranks prolog "$out" 6 16
	for r in 0 1 2 3 4 5; do
		node=n$((r / 3 + 1))
		want="$node $((r % 3)) $tmp/run/$id-$node/batchd.sock"
		[[ "$(field $r 1-3)" == "$want" ]] &&
			ok "prolog: rank $r on $node, local rank $((r % 3)), through the prolog's socket on that node" ||
			bad "prolog: rank $r ran as '$(field $r 1-3)', not '$want'"
	done
	pids=()
	for n in 1 2; do
		r=$(((n - 1) * 3))
		pid=$(field $r 7) pidfile=$(field $r 11) owner=$(field $r 12)
		pids+=("$pid")
		[[ $pid =~ ^[0-9]+$ && $pid == "$pidfile" && $owner == "$uid" && $(field $r 8-10) == "$uid $uid 700" ]] &&
			ok "prolog: n$n's batchd (pid $pid, its batchd.pid) ran as the job's user, $user, in a directory of $user's, mode 0700" ||
			bad "prolog: n$n: batchd pid $pid, batchd.pid '$pidfile', its uid '$owner', the rank's uid, directory owner, mode '$(field $r 8-10)'"
	done
	[[ ${pids[0]} != "${pids[1]}" && $(field 1 7) == "${pids[0]}" && $(field 5 7) == "${pids[1]}" ]] &&
		ok "prolog: one batchd per node, each serving its node's ranks" ||
		bad "prolog: the ranks' batchd pids are $(for r in 0 1 2 3 4 5; do field $r 7; done | tr '\n' ' ')"
	# The epilogs ran when the nodes are idle again (a failed one drains its node).
	slurm_wait_idle 60 && ok "epilog: both nodes idle again, neither drained" ||
		bad "epilog: the nodes are $(sinfo -h -N -o '%N %T %E' | tr '\n' ' ')"
	for n in 1 2; do
		pid=${pids[n - 1]}
		[[ ! -e $tmp/run/$id-n$n && ! -e /proc/$pid ]] && ok "epilog: n$n's batchd $pid stopped, its directory removed" ||
			bad "epilog: n$n: batchd $pid $([[ -e /proc/$pid ]] && echo running || echo stopped), $tmp/run/$id-n$n $([[ -e $tmp/run/$id-n$n ]] && echo left || echo removed)"
	done
fi

# The cluster stopped, and nothing it started is left.
slurm_stop && ok "the cluster stopped, no process of the test's left" || bad "processes were left behind (above)"
echo "$PASS passed, $FAILED failed"
[[ $FAILED -eq 0 ]]
