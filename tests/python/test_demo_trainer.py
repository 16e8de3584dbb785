#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""tools/demo-trainer.py, the trainer tools/demo.sh ends with, against a
real batchd serving a pack of real files (copyright notices and licences
from /usr/share): its table has a row for batchd's Loader and one per
DataLoader worker count asked for, each over exactly the files given
(steps = batches delivered = epochs x ceil(files / batch), samples = epochs
x files), with a waiting fraction in [0, 1] and no more time in next() than
in the step; the JSON rows say the same; the verdict names both loaders.
A --files directory that is not the pack's exits 2 naming the missing
sample. No speed is asserted. Exits 77 (skip) without PyTorch."""
import json
import math
import os
import shutil
import subprocess
import sys
import unittest

import batchd_testlib as T

try:
    import torch  # noqa: F401
except ImportError:
    T.skip("PyTorch is not installed (apt-get install python3-torch)")

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                      "demo-trainer.py")
BUILD = os.path.dirname(os.path.dirname(os.path.abspath(T.BATCHD))) if T.BATCHD else ""
FILES = 90
BATCH = 16
ROUNDS = 2
WORKERS = (0, 2)


class DemoTrainer(T.DaemonCase):
    @classmethod
    def make_datasets(cls, d):
        cls.files = os.path.join(cls.tmp, "files")
        os.makedirs(cls.files)
        for i, src in enumerate(T.real_files(["/usr/share/doc/*/copyright",
                                              "/usr/share/common-licenses/*"], FILES)):
            shutil.copyfile(src, os.path.join(cls.files, f"{i:03d}-{os.path.basename(src)}"))
        T.pack(d.path("files.bpk"), cls.files)

    def trainer(self, *args, files=None):
        return subprocess.run([sys.executable, SCRIPT, "--build", BUILD, "--socket",
                               self.daemon.sock, "--dataset", "files.bpk", "--files",
                               files or self.files, *args],
                              capture_output=True, text=True, timeout=150)

    def test_table_and_verdict(self):
        out = os.path.join(self.tmp, "rows.json")
        r = self.trainer("--rounds", str(ROUNDS), "--batch-size", str(BATCH), "--features",
                         "512", "--hidden", "64", "--workers", ",".join(map(str, WORKERS)),
                         "--json", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertTrue(lines[0].startswith(f"{FILES} files, "), lines[0])
        self.assertEqual(lines[1].split(), ["loader", "workers", "steps", "batches", "step",
                                            "ms", "wait", "ms", "cpu", "ms", "waiting"])
        rows = lines[2:2 + 1 + len(WORKERS)]
        names = [ln[:16].strip() for ln in rows]
        self.assertEqual(names, ["batchd Loader"] + ["DataLoader"] * len(WORKERS), r.stdout)
        steps = ROUNDS * math.ceil(FILES / BATCH)
        for ln, workers in zip(rows, (0,) + WORKERS):
            w, st, batches, step_ms, wait_ms, cpu_ms, waiting = ln[16:].split()
            self.assertEqual(int(w), workers, ln)
            self.assertEqual(int(st), steps, ln)
            self.assertEqual(int(batches), steps, ln)
            self.assertGreater(float(step_ms), 0, ln)
            self.assertLessEqual(float(wait_ms), float(step_ms), ln)
            self.assertGreater(float(cpu_ms), 0, ln)
            self.assertTrue(0 <= float(waiting) <= 1, ln)
        verdict = lines[2 + 1 + len(WORKERS)]
        self.assertRegex(verdict, r"^verdict: batchd: [0-9.]+% of step time waiting, [0-9.]+ ms "
                         r"a step; DataLoader\([0-9]+ workers?, the best of 0/2\): [0-9.]+%")
        with open(out) as f:
            j = json.load(f)
        self.assertEqual((j["files"], j["batch_size"], j["rounds"]), (FILES, BATCH, ROUNDS))
        self.assertEqual(j["bytes"], sum(os.path.getsize(os.path.join(self.files, n))
                                         for n in os.listdir(self.files)))
        for row, workers in zip(j["rows"], (0,) + WORKERS):
            self.assertEqual(row["workers"], workers)
            self.assertEqual(row["epochs"], ROUNDS)
            self.assertEqual(row["steps"], steps)
            self.assertEqual(row["batches"], row["steps"])
            self.assertEqual(row["samples"], ROUNDS * FILES)
            self.assertTrue(0 <= row["waiting"] <= 1, row)
            self.assertAlmostEqual(row["waiting"], row["wait_ms"] / row["step_ms"], places=9)

    def test_files_not_the_packs(self):
        other = os.path.join(self.tmp, "other")
        os.makedirs(other, exist_ok=True)
        r = self.trainer("--short", files=other)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(f"--files {other}: sample '000-", r.stderr)
        self.assertIn("is not there", r.stderr)
        self.assertIn("pass the directory the pack was made from", r.stderr)

    def test_socket_needs_dataset(self):
        r = subprocess.run([sys.executable, SCRIPT, "--socket", self.daemon.sock, "--files",
                            self.files], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--socket needs --dataset", r.stderr)


if __name__ == "__main__":
    T.main()
