#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Slurm Prolog: one batchd for the job on each of its nodes, started by
# slurmd (as root) before the job's tasks, as the job's user, with its
# socket in /run/batchd-slurm/JOBID-NODE/ (mode 0700, the user's), stopped
# by batchd-epilog.sh. train.sbatch with BATCHD_SLURM_MODE=prolog uses it.
#
# slurm.conf:
#   Prolog=/usr/share/batchd/slurm/batchd-prolog.sh
#   Epilog=/usr/share/batchd/slurm/batchd-epilog.sh
#   PrologFlags=Alloc    # on every node at allocation, not at its first step
#
# The alternative, and the one docs/operations.md recommends, is batchd as an srun
# step of the job itself (train.sbatch's default, BATCHD_SLURM_MODE=step):
# it needs no change to slurm.conf, runs inside the job's cgroup (its
# memory and CPUs counted against the job's allocation, as the shared
# memory it stages is) and ends with the job whatever happens. A daemon a
# prolog starts runs beside the job, in slurmd's cgroup, and a prolog
# that fails drains the node. Use the prolog where the job's own steps
# must not be changed, or where batchd must be up before the batch
# script starts.
#
# Settings: BATCHD, BATCHCTL, BATCHD_CONF, BATCHD_CACHE_DIR, BATCHD_RUN_BASE
# as NAME=VALUE lines in batchd-slurm.env beside slurm.conf (read by
# batchd-node.sh), else batchd-node.sh's defaults. Not slurmd's
# environment: slurmd runs the prolog and the epilog with Slurm's variables
# alone (SLURM_JOB_ID, SLURM_JOB_UID, SLURMD_NODENAME, SLURM_CONF...).
set -euo pipefail
# slurmd runs the prolog with next to no environment: PATH may be unset.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin${PATH:+:$PATH}
node=$(dirname "$(readlink -f "$0")")/batchd-node.sh
export BATCHD_SLURM_MODE=prolog
: "${SLURM_JOB_ID:?the prolog runs under slurmd, which sets SLURM_JOB_ID}"
: "${SLURM_JOB_UID:?the prolog runs under slurmd, which sets SLURM_JOB_UID}"
: "${SLURM_JOB_GID:?the prolog runs under slurmd, which sets SLURM_JOB_GID}"
sock=$("$node" socket)
dir=${sock%/*}
install -d -m 0755 "${dir%/*}"
install -d -o "$SLURM_JOB_UID" -g "$SLURM_JOB_GID" -m 0700 "$dir"
# Detached from slurmd, which waits for the prolog to return: a session of
# its own, no terminal, its output in the run directory. setsid does not
# fork here (a background job is no process group leader), so $! is
# batchd's pid once the exec chain (setpriv, batchd-node.sh) is done.
# As the job's user (slurmd runs the prolog as root; run by that user
# already, there is nothing to drop).
as_user=()
[[ $(id -u) == "$SLURM_JOB_UID" ]] ||
	as_user=(setpriv --reuid="$SLURM_JOB_UID" --regid="$SLURM_JOB_GID" --clear-groups)
setsid "${as_user[@]}" "$node" exec-batchd "$dir" </dev/null >"$dir/batchd.log" 2>&1 &
echo $! >"$dir/batchd.pid"
if ! "$node" wait; then
	# The job would find no batchd: stop this one, and fail (Slurm drains
	# the node and requeues the job).
	kill -TERM "$(cat "$dir/batchd.pid")" 2>/dev/null || true
	tail -5 "$dir/batchd.log" >&2
	exit 1
fi
