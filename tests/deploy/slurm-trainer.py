#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A trainer rank for tests/deploy/test-slurm.sh, which conf/slurm/train.sbatch
runs on a real Slurm as `batchd-node.sh train slurm-trainer.py OUT DATASET
BATCH`: batchctl consume of this rank's share of one epoch (RANK,
WORLD_SIZE and BATCHD_SOCKET from batchd-node.sh), with a checkpoint after
every batch, as a trainer saves its state.

  OUT/rank.R   the samples of the batches done: EPOCH BATCH ID XXH3 lines
  OUT/ckpt.R   "NEXT_BATCH BYTES", replaced (rename) once the batch's lines
               are on disk (fsync)
  OUT/run.R    a line a start: node, local rank, socket, job.step, restart
               count, first batch, batchd's pid (from `batchctl status`),
               this rank's uid, the socket directory's owner and mode, the
               pid in its batchd.pid (the prolog's; else -), batchd's uid

A start after a checkpoint (the job requeued) cuts OUT/rank.R back to BYTES
and consumes from NEXT_BATCH: what a killed run did after its last
checkpoint is done again, and nothing twice. batchctl prints a batch's
samples when it takes the batch and sleeps TRAIN_STEP_MS (the step) before
the next: a batch is done when the next one's lines come, or at the end.
Exits with batchctl consume's status.
"""
import os
import re
import subprocess
import sys

out, dataset, batch = sys.argv[1], sys.argv[2], sys.argv[3]
env = os.environ
rank, world, sock, ctl = env["RANK"], env["WORLD_SIZE"], env["BATCHD_SOCKET"], env["BATCHCTL"]
rec, ckpt = os.path.join(out, f"rank.{rank}"), os.path.join(out, f"ckpt.{rank}")
SAMPLE = re.compile(rb"^\d+ (\d+) \d+ [0-9a-f]{16}\n$")

start, size = 0, 0
if os.path.exists(ckpt):
    with open(ckpt) as f:
        start, size = (int(v) for v in f.read().split())
with open(rec, "ab") as f:
    f.truncate(size)

status = subprocess.run([ctl, "-s", sock, "status"], capture_output=True, text=True).stdout
m = re.search(r"\bpid (\d+)", status)
pid = m.group(1) if m else "-"
sdir = os.path.dirname(sock)
sd = os.stat(sdir)
try:
    with open(os.path.join(sdir, "batchd.pid")) as f:
        pidfile = f.read().strip()
except FileNotFoundError:
    pidfile = "-"
try:
    owner = os.stat(f"/proc/{pid}").st_uid
except (FileNotFoundError, ValueError):
    owner = "-"
with open(os.path.join(out, f"run.{rank}"), "a") as f:
    f.write(f"{env.get('SLURMD_NODENAME')} {env.get('LOCAL_RANK')} {sock} "
            f"{env.get('SLURM_JOB_ID')}.{env.get('SLURM_STEP_ID')} {env.get('SLURM_RESTART_COUNT', 0)} "
            f"{start} {pid} {os.getuid()} {sd.st_uid} {sd.st_mode & 0o7777:o} {pidfile} {owner}\n")


def commit(lines, next_batch):
    with open(rec, "ab") as f:
        f.write(b"".join(lines))
        f.flush()
        os.fsync(f.fileno())
        end = f.tell()
    with open(ckpt + ".tmp", "w") as f:
        f.write(f"{next_batch} {end}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(ckpt + ".tmp", ckpt)


# stdbuf: batchctl's stdout is a pipe here, which stdio would fill in 4 KiB
# blocks; a line at a time, each batch is seen when it is taken.
p = subprocess.Popen(["stdbuf", "-oL", ctl, "-s", sock, "consume", dataset, "--batch-size", batch, "--seed", "3",
                      "--rank", rank, "--world", world, "--epochs", "1", "--start-epoch", "0",
                      "--start-batch", str(start), "--step-ms", env.get("TRAIN_STEP_MS", "0"),
                      "--print-samples"], stdout=subprocess.PIPE)
lines, cur = [], None
for line in p.stdout:
    m = SAMPLE.match(line)
    if not m:
        continue
    b = int(m.group(1))
    if cur is not None and b != cur:
        commit(lines, cur + 1)
        lines = []
    cur = b
    lines.append(line)
rc = p.wait()
if rc == 0 and cur is not None:
    commit(lines, cur + 1)
sys.exit(rc)
