# SPDX-License-Identifier: MIT
#
# slurm-cluster.sh - a Slurm cluster on this machine for tests/deploy, from
# Debian's packages (slurmctld, slurmd, slurm-client, munge; tools/deps.sh
# installs them): munged with a key of its own, slurmctld and one slurmd
# per node, all in the foreground, every file of theirs in the test's
# directory. Nothing under /etc, /run or /var is read or written: SLURM_CONF
# names the generated slurm.conf, which names munge's socket.
#
# Several nodes on one machine: Debian builds Slurm with
# --enable-multiple-slurmd (`scontrol show config` says MULTIPLE_SLURMD =
# Yes), so each node is a slurmd of its own (`slurmd -N NAME`) with a port,
# spool directory and log of its own. They share the machine's CPUs, /tmp
# and TMPDIR, as no real nodes do; each is given 4 CPUs whatever the machine
# has (SlurmdParameters=config_overrides), so that a job's shape does not
# depend on the machine that runs the test.
#
# The test runs in a PID namespace of its own (slurm_isolate), so that
# whatever the cluster starts (slurmstepd, job tasks, a batchd a prolog
# detached) ends with the test, even when the test is killed.
#
#   . tests/deploy/slurm-cluster.sh
#   slurm_isolate "$@"   # first: re-runs the script in a new PID namespace
#   slurm_start DIR NODES [LINE...]   # nodes n1..nNODES; LINEs appended to
#                        # slurm.conf; exports SLURM_CONF; 0 when every node
#                        # is idle, else 1 with the daemons' logs said
#   slurm_job_state JOBID       # its state (PENDING, RUNNING, COMPLETED...)
#   slurm_wait_job JOBID SECONDS STATE...  # until the job is in one of them
#   slurm_wait_idle SECONDS     # no job left, every node idle (epilogs done)
#   slurm_stop           # jobs cancelled, daemons stopped; then every process
#                        # left in the namespace is named on stderr, killed,
#                        # and slurm_stop returns 1. Run at exit too.
# shellcheck shell=bash

SLURM__DIR=
SLURM__PIDS=()

# slurm_isolate ARGS...: the calling script again, as PID 1 of a new PID
# namespace with its own /proc (unshare: util-linux), which takes every
# process in it down when the script ends or unshare is killed
# (--kill-child). Returns in that namespace; exits with the script there.
slurm_isolate() {
	[[ $$ -eq 1 ]] && return 0
	exec unshare --pid --fork --kill-child --mount-proc -- "$BASH" "$0" "$@"
}

# slurm__free_ports N: N TCP ports free on loopback now.
slurm__free_ports() {
	/usr/bin/python3 - "$1" <<-'PYEOF'
		import socket, sys
		socks = [socket.socket() for _ in range(int(sys.argv[1]))]
		for s in socks:
		    s.bind(("127.0.0.1", 0))
		print(" ".join(str(s.getsockname()[1]) for s in socks))
	PYEOF
}

# slurm__until SECONDS CMD...: CMD until it succeeds, every 0.2 s; 1 if it never did.
slurm__until() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@"; do
		((SECONDS < deadline)) || return 1
		sleep 0.2
	done
}

slurm__munge_up() { munge -S "$SLURM__DIR/munge/munge.sock" -n 2>/dev/null | unmunge -S "$SLURM__DIR/munge/munge.sock" >/dev/null 2>&1; }

slurm__all_idle() {
	local states
	states=$(sinfo -h -N -o '%T' 2>/dev/null | sort -u) && [[ $states == idle ]]
}

slurm__logs() {
	local f
	for f in "$SLURM__DIR"/log/*; do
		echo "--- $f" >&2
		tail -n 8 "$f" >&2
	done
}

slurm_start() {
	local dir=$1 nodes=$2 i host ports
	shift 2
	SLURM__DIR=$dir
	mkdir -p "$dir/munge" "$dir/ctld" "$dir/log"
	# munged refuses a socket in a directory that not everyone may search.
	chmod 0755 "$dir" "$dir/munge"
	mungekey -c -k "$dir/munge/munge.key" >/dev/null || return 1
	munged -F --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.sock" \
		--pid-file="$dir/munge/munged.pid" --seed-file="$dir/munge/munged.seed" \
		--log-file="$dir/log/munged.log" >"$dir/log/munged.out" 2>&1 &
	SLURM__PIDS+=($!)
	slurm__until 10 slurm__munge_up || { echo "slurm_start: munged did not answer" >&2; slurm__logs; return 1; }

	read -r -a ports <<<"$(slurm__free_ports $((nodes + 1)))"
	host=$(hostname -s)
	{
		cat <<-EOF
			# A cluster of $nodes nodes on this machine, for tests/deploy (slurm-cluster.sh).
			ClusterName=batchd-test
			SlurmctldHost=$host(127.0.0.1)
			SlurmctldPort=${ports[0]}
			SlurmUser=root
			SlurmdUser=root
			AuthType=auth/munge
			CredType=cred/munge
			AuthInfo=socket=$dir/munge/munge.sock
			StateSaveLocation=$dir/ctld
			SlurmctldPidFile=$dir/ctld/slurmctld.pid
			SlurmctldLogFile=$dir/log/slurmctld.log
			SlurmdSpoolDir=$dir/spool-%n
			SlurmdPidFile=$dir/spool-%n/slurmd.pid
			SlurmdLogFile=$dir/log/slurmd-%n.log
			ProctrackType=proctrack/linuxproc
			TaskPlugin=task/none
			SelectType=select/cons_tres
			SelectTypeParameters=CR_CPU
			SlurmdParameters=config_overrides
			AccountingStorageType=accounting_storage/none
			JobAcctGatherType=jobacct_gather/none
			JobCompType=jobcomp/none
			MpiDefault=none
			ReturnToService=2
			KillWait=10
		EOF
		for ((i = 1; i <= nodes; i++)); do
			echo "NodeName=n$i NodeHostname=$host NodeAddr=127.0.0.1 Port=${ports[i]} CPUs=4 State=UNKNOWN"
		done
		echo "PartitionName=batch Nodes=n[1-$nodes] Default=YES MaxTime=INFINITE State=UP"
		printf '%s\n' "$@"
	} >"$dir/slurm.conf"
	export SLURM_CONF=$dir/slurm.conf
	slurmctld -D >"$dir/log/slurmctld.out" 2>&1 &
	SLURM__PIDS+=($!)
	for ((i = 1; i <= nodes; i++)); do
		mkdir -p "$dir/spool-n$i"
		slurmd -D -N "n$i" >"$dir/log/slurmd-n$i.out" 2>&1 &
		SLURM__PIDS+=($!)
	done
	slurm__until 30 slurm__all_idle || {
		echo "slurm_start: the nodes are not idle after 30 s: $(sinfo -h -N -o '%N %T' 2>&1 | tr '\n' ' ')" >&2
		slurm__logs
		return 1
	}
}

slurm_job_state() { scontrol show job "$1" 2>/dev/null | sed -n 's/^ *JobState=\([A-Z_]*\).*/\1/p'; }

slurm_wait_job() {
	local id=$1 secs=$2 deadline state
	shift 2
	deadline=$((SECONDS + secs))
	while true; do
		state=$(slurm_job_state "$id")
		[[ " $* " == *" $state "* ]] && return 0
		((SECONDS < deadline)) || {
			echo "slurm_wait_job: job $id is ${state:-unknown} after $secs s, not $*" >&2
			return 1
		}
		sleep 0.2
	done
}

slurm__no_jobs() { [[ -z $(squeue -h -o %i 2>/dev/null) ]]; }
slurm_wait_idle() { slurm__until "$1" slurm__no_jobs && slurm__until "$1" slurm__all_idle; }

slurm_stop() {
	local rc=0 p pid stat cmd left=()
	[[ -n $SLURM__DIR ]] || return 0
	if [[ -n $(squeue -h -o %i 2>/dev/null) ]]; then
		# shellcheck disable=SC2046 # one job id a word
		scancel $(squeue -h -o %i) 2>/dev/null
		slurm_wait_idle 30 || true
	fi
	for p in "${SLURM__PIDS[@]}"; do
		kill -TERM "$p" 2>/dev/null || true
	done
	for p in "${SLURM__PIDS[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	SLURM__PIDS=()
	SLURM__DIR=
	# What the daemons left: in this namespace, every process but this shell
	# and the children it waits for now (none: the loop forks nothing).
	[[ $$ -eq 1 ]] || return 0
	for p in /proc/[0-9]*; do
		pid=${p#/proc/}
		[[ $pid -eq 1 ]] && continue
		# A process that ended since the glob has no stat: it was not left.
		read -r stat <"$p/stat" 2>/dev/null || continue
		# Zombies not yet reaped are this shell's own children, ended.
		[[ $stat =~ \)\ Z\  ]] && continue
		read -r -d '' cmd <"$p/cmdline" 2>/dev/null || true
		left+=("$pid (${cmd:-?})")
		kill -KILL "$pid" 2>/dev/null || true
	done
	if [[ ${#left[@]} -gt 0 ]]; then
		printf 'slurm_stop: left behind, killed: %s\n' "${left[@]}" >&2
		rc=1
	fi
	return "$rc"
}
