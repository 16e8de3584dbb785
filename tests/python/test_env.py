#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Data-parallel defaults: rank and world come from torchrun's RANK and
WORLD_SIZE, else Slurm's SLURM_PROCID and SLURM_NTASKS, else 0 of 1;
arguments win; bad values are refused with the variable's name. Ranks
started as separate processes with only the environment set split an
epoch between them exactly."""
import json
import os
import subprocess
import sys

import batchclient
import batchd_testlib as T

N, SIZE = 500, 32
VARS = ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "LOCAL_RANK")


class Env(T.DaemonCase):
    @classmethod
    def make_datasets(cls, d):
        rec = os.path.join(cls.tmp, "rec.bin")
        T.write_records(rec, N, SIZE)
        T.pack(d.path("rec.bpk"), records=(SIZE, rec))

    def setUp(self):
        saved = {k: os.environ[k] for k in VARS if k in os.environ}

        def restore():
            self.env()
            os.environ.update(saved)
        self.addCleanup(restore)

    def env(self, **kv):
        for k in VARS:
            os.environ.pop(k, None)
        os.environ.update({k: str(v) for k, v in kv.items()})

    def test_defaults(self):
        self.env()
        self.assertEqual(batchclient.rank_and_world(), (0, 1))
        self.env(RANK=2, WORLD_SIZE=4)
        self.assertEqual(batchclient.rank_and_world(), (2, 4))
        self.env(SLURM_PROCID=5, SLURM_NTASKS=8)
        self.assertEqual(batchclient.rank_and_world(), (5, 8))
        self.env(RANK=1, WORLD_SIZE=2, SLURM_PROCID=5, SLURM_NTASKS=8)   # torchrun under srun
        self.assertEqual(batchclient.rank_and_world(), (1, 2))
        self.assertEqual(batchclient.rank_and_world(0, 3), (0, 3))       # arguments win
        self.assertEqual(batchclient.rank_and_world(rank=1), (1, 2))

    def test_bad_values_name_their_source(self):
        for kv, pattern in (({"RANK": 2, "WORLD_SIZE": 2}, r"rank 2 \(from \$RANK\)"),
                            ({"RANK": "x", "WORLD_SIZE": 2}, r"\$RANK: 'x'"),
                            ({"SLURM_PROCID": 0, "SLURM_NTASKS": 0}, r"\$SLURM_NTASKS"),
                            ({"RANK": -1, "WORLD_SIZE": 2}, "rank -1")):
            self.env(**kv)
            with self.assertRaisesRegex(ValueError, pattern):
                batchclient.rank_and_world()
            with self.assertRaisesRegex(ValueError, pattern):
                batchclient.Loader("rec.bpk", 8, socket=self.daemon.sock)

    def test_loader_uses_the_environment(self):
        self.env(RANK=1, WORLD_SIZE=3)
        ld = self.loader("rec.bpk", 20, seed=3)
        self.assertEqual((ld.rank, ld.world), (1, 3))
        from_env = [b.ids for b in ld]
        self.env()
        explicit = [b.ids for b in self.loader("rec.bpk", 20, seed=3, rank=1, world=3)]
        self.assertEqual(from_env, explicit)
        self.env(SLURM_PROCID=2, SLURM_NTASKS=3)
        ld = self.loader("rec.bpk", 20, seed=3)
        self.assertEqual((ld.rank, ld.world), (2, 3))
        self.assertEqual(len(ld), -(-(-(-N // 3)) // 20))

    def test_ranks_as_processes_split_an_epoch(self):
        prog = ("import batchclient, json, sys\n"
                "ld = batchclient.Loader('rec.bpk', 16, seed=8, socket=sys.argv[1])\n"
                "print(json.dumps([ld.rank, ld.world, [i for b in ld for i in b.ids]]))\n")
        for launcher in ({"RANK": "{r}", "WORLD_SIZE": "4", "LOCAL_RANK": "{r}"},
                         {"SLURM_PROCID": "{r}", "SLURM_NTASKS": "4"}):
            procs = []
            for r in range(4):
                env = {k: v for k, v in os.environ.items() if k not in VARS}
                env.update({k: v.format(r=r) for k, v in launcher.items()})
                procs.append(subprocess.Popen([sys.executable, "-c", prog, self.daemon.sock],
                                              env=env, stdout=subprocess.PIPE, text=True))
            ids = []
            for r, p in enumerate(procs):
                out, _ = p.communicate(timeout=30)
                self.assertEqual(p.returncode, 0)
                rank, world, got = json.loads(out)
                self.assertEqual((rank, world), (r, 4))
                self.assertEqual(len(got), N // 4)
                ids += got
            self.assertEqual(sorted(ids), list(range(N)), launcher)


if __name__ == "__main__":
    T.main()
