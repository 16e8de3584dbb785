#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Slurm Epilog: stops the batchd batchd-prolog.sh started for the job on
# this node and removes its run directory. SIGTERM drains (clients told,
# sessions ended, memory freed, within 10 s); after 20 s it is killed. An
# epilog that fails drains the node, so it fails only when batchd outlives
# SIGKILL.
set -euo pipefail
# slurmd runs the epilog with next to no environment: PATH may be unset.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin${PATH:+:$PATH}
node=$(dirname "$(readlink -f "$0")")/batchd-node.sh
export BATCHD_SLURM_MODE=prolog
: "${SLURM_JOB_ID:?the epilog runs under slurmd, which sets SLURM_JOB_ID}"
sock=$("$node" socket)
dir=${sock%/*}
pid=$(cat "$dir/batchd.pid" 2>/dev/null || true)

# Is pid still the job's batchd (not a zombie, not a reused pid)?
running() {
	local stat
	stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
	[[ $stat =~ ^[0-9]+\ \(batchd\)\ [^Z] ]]
}

if [[ $pid =~ ^[0-9]+$ ]] && running; then
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 100); do
		running || break
		sleep 0.2
	done
	if running; then
		echo "batchd-epilog.sh: batchd $pid did not drain in 20 s: killing it" >&2
		kill -KILL "$pid" 2>/dev/null || true
		sleep 1
		! running || { echo "batchd-epilog.sh: batchd $pid outlived SIGKILL" >&2; exit 1; }
	fi
fi
rm -rf -- "$dir"
