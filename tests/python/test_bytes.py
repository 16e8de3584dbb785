#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Delivered bytes are exact: every sample view equals `batchd-pack cat`
of its id and the bytes it was packed from, for fixed-size records and
for files of every size (empty ones too), in one-sample and multi-sample
blocks and across shards; batch.data holds the samples back to back."""
import os
import random

import batchd_testlib as T

NREC, SIZE = 600, 785
NVAR = 300


class Bytes(T.DaemonCase):
    @classmethod
    def make_datasets(cls, d):
        rec = os.path.join(cls.tmp, "rec.bin")
        T.write_records(rec, NREC, SIZE, seed=4)
        cls.records = [T.record_bytes(i, SIZE, seed=4) for i in range(NREC)]
        rng = random.Random(9)
        sizes = [0 if rng.random() < 0.1 else rng.randrange(1, 3000) for _ in range(NVAR)]
        sizes[0] = sizes[NVAR - 1] = 0
        cls.files = T.write_files(os.path.join(cls.tmp, "files"), sizes)
        T.pack(d.path("rec.bpk"), records=(SIZE, rec))
        T.pack(d.path("rec-blk.bpk"), records=(SIZE, rec), block_size="64K", extra=["--no-dict"])
        T.pack(d.path("var.bpk"), os.path.join(cls.tmp, "files"))
        T.pack(d.path("var-blk"), os.path.join(cls.tmp, "files"), block_size="16K",
               shard_size="150K")

    def collect(self, dataset, **kw):
        """{id: bytes} over one epoch, checking data == samples back to back."""
        got = {}
        for b in self.loader(dataset, 32, **kw):
            samples = b.samples
            self.assertEqual(len(samples), len(b))
            self.assertEqual(b"".join(bytes(s) for s in samples), bytes(b.data))
            self.assertEqual(b.nbytes, len(b.data))
            self.assertEqual(b.sizes, tuple(len(s) for s in samples))
            for i, s in zip(b.ids, samples):
                self.assertTrue(s.readonly)
                got.setdefault(i, bytes(s))
                self.assertEqual(got[i], bytes(s), f"sample {i} differs between deliveries")
        return got

    def test_records_equal_sources_and_cat(self):
        for name in ("rec.bpk", "rec-blk.bpk"):
            got = self.collect(name, shuffle="global", seed=1)
            self.assertEqual(sorted(got), list(range(NREC)))
            for i in range(NREC):
                self.assertEqual(got[i], self.records[i], f"{name} sample {i}")
            path = self.daemon.path(name)
            for i in random.Random(1).sample(range(NREC), 40):
                self.assertEqual(got[i], T.cat(path, i), f"{name} sample {i} vs batchd-pack cat")

    def test_files_equal_sources_and_cat(self):
        for name, mode in (("var.bpk", "global"), ("var-blk", "block"), ("var-blk", "none")):
            got = self.collect(name, shuffle=mode, seed=2)
            self.assertEqual(sorted(got), list(range(NVAR)))
            path = self.daemon.path(name)
            for i in range(NVAR):
                self.assertEqual(got[i], self.files[i], f"{name} sample {i}")
            # Against batchd-pack cat: all of var.bpk, a sample (with the empties) of var-blk.
            ids = range(NVAR) if name == "var.bpk" else \
                [0, NVAR - 1] + random.Random(mode).sample(range(1, NVAR - 1), 30)
            for i in ids:
                self.assertEqual(got[i], T.cat(path, i), f"{name} sample {i} vs cat")

    def test_numpy_rows_are_the_records(self):
        import numpy as np
        for b in self.loader("rec.bpk", 50, shuffle="global", seed=3):
            a = b.numpy()
            self.assertEqual(a.shape, (len(b), SIZE))
            self.assertEqual(a.dtype, np.uint8)
            for row, i in zip(a, b.ids):
                self.assertEqual(row.tobytes(), self.records[i])

    def test_numpy_refuses_variable_sizes(self):
        b = next(iter(self.loader("var.bpk", 16, shuffle="none")))
        with self.assertRaisesRegex(ValueError, "differ in size"):
            b.numpy()
        with self.assertRaisesRegex(ValueError, "differ in size"):
            b.numpy("uint8", (100,))


if __name__ == "__main__":
    T.main()
