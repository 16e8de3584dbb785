#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# batchd on one node of a Slurm job: what train.sbatch runs in its job
# steps, and batchd-prolog.sh and batchd-epilog.sh on each node for a site
# that starts batchd from slurmd instead. One batchd serves the ranks of
# its node; ranks split the global schedule by rank and world alone (a
# pure function of seed, epoch, rank and world), so the nodes' daemons
# need no coordination.
#
#   batchd-node.sh serve        batchd in the foreground (an srun step's task)
#   batchd-node.sh wait         until batchd answers on this node's socket
#   batchd-node.sh train CMD... CMD as this task's rank: RANK, WORLD_SIZE,
#                               LOCAL_RANK and BATCHD_SOCKET set from Slurm's
#   batchd-node.sh socket       the socket's path on this node
#
# Where the socket is: with BATCHD_SLURM_MODE=step (the default, batchd an
# srun step of the job) ${TMPDIR:-/tmp}/batchd-JOBID-NODE/batchd.sock; with
# BATCHD_SLURM_MODE=prolog ${BATCHD_RUN_BASE:-/run/batchd-slurm}/JOBID-NODE/batchd.sock.
# NODE is the node's Slurm name (SLURMD_NODENAME): Slurm gives every task of
# a job the TMPDIR of the submitting shell, which may be a shared file
# system, and one machine may run several slurmd as several nodes (Slurm
# built with --enable-multiple-slurmd, as Debian's is), so a path of the
# job alone would be two nodes' batchd on one socket.
#
# Settings: BATCHD (/usr/sbin/batchd), BATCHCTL (/usr/bin/batchctl),
# BATCHD_CONF (/etc/batchd/batchd.conf), BATCHD_CACHE_DIR (the cache on the
# node's NVMe for remote datasets; empty: batchd.conf's), BATCHD_RUN_BASE,
# BATCHD_WAIT (seconds to wait for the socket, 60). From the environment,
# else from batchd-slurm.env beside slurm.conf (/etc/slurm/batchd-slurm.env,
# or the directory of $SLURM_CONF): NAME=VALUE lines, read, not run, and #
# comments. slurmd runs a prolog and an epilog with Slurm's variables
# alone, not with its own environment, so there the file is the only way
# to set them.
set -euo pipefail

: "${BATCHD_SLURM_MODE:=step}"

die() {
	echo "batchd-node.sh on ${SLURMD_NODENAME:-$(hostname)}: $*" >&2
	exit 1
}

[[ -n ${SLURM_JOB_ID:-} ]] || die "SLURM_JOB_ID is not set: run inside a Slurm job (srun, sbatch, prolog)"

# The settings of batchd-slurm.env that the environment does not set.
site_settings() {
	local file=${SLURM_CONF:-/etc/slurm/slurm.conf} line name n=0
	file=${file%/*}/batchd-slurm.env
	[[ -e $file ]] || return 0
	while IFS= read -r line || [[ -n $line ]]; do
		n=$((n + 1))
		[[ $line =~ ^[[:space:]]*(#.*)?$ ]] && continue
		[[ $line =~ ^(BATCHD|BATCHCTL|BATCHD_CONF|BATCHD_CACHE_DIR|BATCHD_RUN_BASE|BATCHD_WAIT)=(.*)$ ]] ||
			die "$file:$n: not NAME=VALUE of BATCHD, BATCHCTL, BATCHD_CONF, BATCHD_CACHE_DIR, BATCHD_RUN_BASE, BATCHD_WAIT"
		name=${BASH_REMATCH[1]}
		[[ -n ${!name+set} ]] || export "$name=${BASH_REMATCH[2]}"
	done <"$file"
}
site_settings
: "${BATCHD:=/usr/sbin/batchd}"
: "${BATCHCTL:=/usr/bin/batchctl}"
: "${BATCHD_CONF:=/etc/batchd/batchd.conf}"
: "${BATCHD_WAIT:=60}"
# For the trainer `train` runs (train.sbatch's default one runs $BATCHCTL).
export BATCHCTL
node_name=${SLURMD_NODENAME:-$(hostname -s)}

run_dir() {
	case $BATCHD_SLURM_MODE in
	step) echo "${TMPDIR:-/tmp}/batchd-$SLURM_JOB_ID-$node_name" ;;
	prolog) echo "${BATCHD_RUN_BASE:-/run/batchd-slurm}/$SLURM_JOB_ID-$node_name" ;;
	*) die "BATCHD_SLURM_MODE=$BATCHD_SLURM_MODE: use step or prolog" ;;
	esac
}

# batchd with the socket in DIR, in the foreground; ARGS after it.
exec_batchd() {
	local dir=$1
	shift
	local args=(-c "$BATCHD_CONF" --socket "$dir/batchd.sock")
	[[ -z ${BATCHD_CACHE_DIR:-} ]] || args+=(--cache-dir "$BATCHD_CACHE_DIR")
	exec "$BATCHD" "${args[@]}" "$@"
}

wait_socket() {
	local sock deadline
	sock="$(run_dir)/batchd.sock"
	deadline=$((SECONDS + BATCHD_WAIT))
	until "$BATCHCTL" --socket "$sock" status >/dev/null 2>&1; do
		((SECONDS < deadline)) || die "batchd did not answer on $sock within $BATCHD_WAIT s" \
			"(its log: $(run_dir)/batchd.log, or the batchd step's output)"
		sleep 0.2
	done
}

cmd=${1:-}
[[ $# -gt 0 ]] && shift
case $cmd in
serve)
	dir=$(run_dir)
	# Private to the job's user: whoever reaches the socket reads every dataset.
	install -d -m 0700 "$dir"
	exec_batchd "$dir" "$@"
	;;
wait) wait_socket ;;
socket) echo "$(run_dir)/batchd.sock" ;;
train)
	[[ $# -gt 0 ]] || die "train: no command to run"
	[[ -n ${SLURM_PROCID:-} && -n ${SLURM_NTASKS:-} && -n ${SLURM_LOCALID:-} ]] ||
		die "train: SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID must be set: run it under srun"
	# The names torchrun uses, which the Python client's Loader reads (it
	# falls back to SLURM_PROCID and SLURM_NTASKS itself).
	RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID \
		BATCHD_SOCKET="$(run_dir)/batchd.sock" exec "$@"
	;;
exec-batchd)
	# For batchd-prolog.sh: DIR exists already.
	exec_batchd "$@"
	;;
*) die "usage: batchd-node.sh serve|wait|socket|train CMD..." ;;
esac
