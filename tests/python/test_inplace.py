#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""In-place ops on batch.torch() and batch.torch(name): sub_, mul_, slice
assignment and torch.nn.functional ops with inplace=True on every batch of
two epochs change the trainer's tensor as asked and crash nothing; every
batch taken after them is the pack's bytes exactly, on a ring small
enough that batches reuse the same memory; a second session on the same
dataset sees none of the writes; numpy() stays read-only unless
writable=True. Exits 77 (skip) when PyTorch is not installed."""
import csv
import errno
import os

import batchd_testlib as T

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    T.skip("PyTorch is not installed (apt-get install python3-torch)")
import numpy as np

from batchclient import _lib

N, SIZE, B = 256, 64, 16


def bits(t):
    """A float32 tensor's bits: NaN payloads compare too."""
    return t.contiguous().view(torch.int32)


# The in-place ops, one per batch in turn: (name, op on the tensor in place).
MEAN = torch.full((SIZE // 4,), 0.25)
OPS = [
    ("sub_", lambda x: x.sub_(MEAN)),
    ("mul_", lambda x: x.mul_(2)),
    ("slice", lambda x: x.__setitem__(slice(None), 0)),
    ("relu", lambda x: F.relu(x, inplace=True)),
    ("hardtanh", lambda x: F.hardtanh(x, -1.0, 1.0, inplace=True)),
    ("row", lambda x: x[1:3].fill_(7.5)),
]


class InPlace(T.DaemonCase):
    @classmethod
    def make_datasets(cls, d):
        rec = os.path.join(cls.tmp, "rec.bin")
        T.write_records(rec, N, SIZE)
        cls.records = [T.record_bytes(i, SIZE) for i in range(N)]
        T.pack(d.path("rec.bpk"), records=(SIZE, rec))
        # A manifest of SIZE-byte files with a label and a float32 score.
        base = os.path.join(cls.tmp, "man")
        os.makedirs(base)
        with open(os.path.join(base, "train.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["path", "label", "score"])
            for i in range(N):
                with open(os.path.join(base, f"{i:03d}.bin"), "wb") as g:
                    g.write(cls.records[i])
                w.writerow([f"{i:03d}.bin", i * 3, i / 4])
        T.pack(d.path("man.bpk"),
               extra=["--manifest", os.path.join(base, "train.csv"), "--column", "score:float32"])

    def expect_exact(self, b, ctx):
        """b's bytes are the pack's, sample by sample."""
        self.assertEqual(len(b), B, ctx)
        got = bytes(b.data)
        for k, i in enumerate(b.ids):
            self.assertEqual(got[k * SIZE:(k + 1) * SIZE], self.records[i], f"{ctx}, sample {i}")

    def test_ops_on_every_batch(self):
        ld = self.loader("rec.bpk", B, shuffle="global", seed=3, prefetch=1)
        other = self.loader("rec.bpk", B, shuffle="global", seed=3, prefetch=1)
        seen = 0
        for epoch in range(2):
            others = iter(other)
            for b in ld:
                ctx = f"batch {b.epoch}:{b.index}"
                self.assertEqual(b.epoch, epoch)
                self.expect_exact(b, ctx)
                x = b.torch(torch.float32)
                self.assertEqual(tuple(x.shape), (B, SIZE // 4))
                want = x.clone()
                name, op = OPS[seen % len(OPS)]
                op(want)
                op(x)
                self.assertTrue(torch.equal(bits(x), bits(want)), f"{ctx}: {name}")
                packed = np.frombuffer(b"".join(self.records[i] for i in b.ids), np.float32)
                self.assertFalse(torch.equal(bits(x), bits(torch.from_numpy(packed.copy()))
                                             .reshape(B, -1)), f"{ctx}: {name} changed nothing")
                # The batch's other views show the same, the trainer's, memory.
                self.assertEqual(b.numpy(np.float32, (SIZE // 4,)).tobytes(),
                                 x.numpy().tobytes(), ctx)
                # The other session, on its own memory, is the pack's bytes.
                o = next(others)
                self.assertEqual(o.ids, b.ids, ctx)
                self.expect_exact(o, f"the other session's {ctx}")
                seen += 1
                del x, want, o
        self.assertEqual(seen, 2 * N // B)

    def test_tensor_kept_into_the_next_step(self):
        # The tensor pins its batch, so it may still be written while the
        # next batch is taken; neither that batch nor any later one sees it.
        ld = self.loader("rec.bpk", B, shuffle="none", prefetch=1)
        prev = None
        for epoch in range(2):
            for b in ld:
                ctx = f"batch {b.epoch}:{b.index}"
                self.expect_exact(b, ctx)
                if prev is not None:
                    prev.mul_(3).add_(1)
                    self.assertTrue(torch.equal(prev, torch.full_like(prev, 4)), ctx)
                self.expect_exact(b, ctx + " after the previous batch's tensor was written")
                prev = b.torch()
                prev.fill_(1)
                prev = prev[2:5]

    def test_field_tensors(self):
        ld = self.loader("man.bpk", B, shuffle="global", seed=5, prefetch=1)
        for epoch in range(2):
            for b in ld:
                ctx = f"batch {b.epoch}:{b.index}"
                ids = np.array(b.ids)
                self.assertTrue(np.array_equal(b["label"], ids * 3), ctx)
                self.assertTrue(np.array_equal(b["score"], (ids / 4).astype(np.float32)), ctx)
                self.expect_exact(b, ctx)
                label, score = b.torch("label"), b.torch("score")
                label.sub_(1)
                score.mul_(-2)
                F.relu(score, inplace=True)
                data = b.torch("data")
                data[:, 0] = 255
                self.assertTrue(torch.equal(label, torch.from_numpy(ids * 3 - 1)), ctx)
                self.assertTrue(torch.equal(score, torch.zeros(B)), ctx)
                self.assertEqual(int(data[:, 0].min()), 255, ctx)
                self.assertTrue(np.array_equal(b["label"], ids * 3 - 1), ctx)
                del label, score, data

    def test_numpy_stays_read_only(self):
        b = next(iter(self.loader("rec.bpk", B, shuffle="none")))
        a = b.numpy()
        self.assertFalse(a.flags.writeable)
        with self.assertRaises(ValueError):
            a[0, 0] = 1
        m = next(iter(self.loader("man.bpk", B, shuffle="none")))
        for name in ("data", "label", "score"):
            with self.assertRaises(ValueError, msg=name):
                m[name][0] = 1
        w = b.numpy(writable=True)
        self.assertTrue(w.flags.writeable)
        self.assertFalse(w.flags.owndata)
        self.assertEqual(w.__array_interface__["data"][0], a.__array_interface__["data"][0])
        w -= 1
        self.assertEqual(bytes(a[4]), bytes((v - 1) & 0xff for v in self.records[4]))
        t = b.torch()
        self.assertEqual(t.data_ptr(), a.__array_interface__["data"][0])

    def test_without_a_writable_view(self):
        # A kernel that refuses the private mapping: tensors are copies, with a warning,
        # and the views read the read-only memory.
        L = _lib.lib()
        real = L.bc_batch_data_writable
        L.bc_batch_data_writable = lambda h, p, n: -errno.EPERM
        self.addCleanup(setattr, L, "bc_batch_data_writable", real)
        it = iter(self.loader("rec.bpk", B, shuffle="none"))
        b = next(it)
        with self.assertWarnsRegex(RuntimeWarning, "has no writable view .*a copy is returned"):
            t = b.torch(torch.float32)
        a = b.numpy()
        self.assertEqual(a.__array_interface__["data"][0], b._ro_addr)
        self.assertNotEqual(t.data_ptr(), b._ro_addr)
        t.zero_()
        self.expect_exact(b, "after writing a copy")
        with self.assertWarns(RuntimeWarning):
            w = b.numpy(writable=True)
        self.assertTrue(w.flags.writeable and w.flags.owndata)
        self.expect_exact(next(it), "the next batch")


if __name__ == "__main__":
    T.main()
