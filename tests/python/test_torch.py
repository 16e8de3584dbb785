#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""PyTorch: batch.torch() is a tensor over the same shared memory as
batch.numpy() (no copy), of any dtype and shape, pinning its batch like an
array; the example trainer learns from a --records pack, reports its wait
for data, resumes from its checkpoint, and exits 77 without PyTorch.
Exits 77 (skip) when PyTorch is not installed."""
import os
import re
import subprocess
import sys
import tempfile

import batchd_testlib as T

try:
    import torch
except ImportError:
    T.skip("PyTorch is not installed (apt-get install python3-torch)")
import numpy as np

import batchclient

N, SIZE = 256, 64
EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "client",
                       "python", "examples", "train_mnist_like.py")


class Torch(T.DaemonCase):
    @classmethod
    def make_datasets(cls, d):
        rec = os.path.join(cls.tmp, "rec.bin")
        T.write_records(rec, N, SIZE)
        cls.records = [T.record_bytes(i, SIZE) for i in range(N)]
        T.pack(d.path("rec.bpk"), records=(SIZE, rec))
        digits = os.path.join(cls.tmp, "digits.bin")
        subprocess.run([sys.executable, EXAMPLE, "--make-records", digits, "--samples", "1000"],
                       check=True, capture_output=True)
        T.pack(d.path("digits.bpk"), records=(785, digits))

    def test_tensor_is_a_view(self):
        b = next(iter(self.loader("rec.bpk", 16, shuffle="none")))
        a = b.numpy()
        t = b.torch()
        self.assertEqual((t.dtype, tuple(t.shape)), (torch.uint8, (16, SIZE)))
        self.assertEqual(t.data_ptr(), a.__array_interface__["data"][0])
        self.assertEqual(t.data_ptr(), b._addr)
        self.assertTrue(np.array_equal(t.numpy(), a))
        f = b.torch(torch.float32, (4, 4))
        self.assertEqual((f.dtype, tuple(f.shape)), (torch.float32, (16, 4, 4)))
        self.assertEqual(f.data_ptr(), t.data_ptr())
        self.assertTrue(torch.equal(f.reshape(16, 16),
                                    torch.from_numpy(a.copy().view(np.float32))))
        h = b.torch(torch.int16)
        self.assertEqual(tuple(h.shape), (16, SIZE // 2))
        self.assertEqual(int(h[3, 0]), int.from_bytes(self.records[3][:2], "little", signed=True))
        self.assertEqual(bytes(t[5].numpy()), self.records[5])
        y = t.float() / 255                       # what a training step does: a new tensor
        self.assertNotEqual(y.data_ptr(), t.data_ptr())
        with self.assertRaisesRegex(ValueError, "samples are 64 bytes, but shape"):
            b.torch(torch.float32, (5, 3))
        with self.assertRaisesRegex(ValueError, "do not divide into items of 3"):
            b.numpy("V3")

    def test_tensors_pin_and_release(self):
        it = iter(self.loader("rec.bpk", 16, shuffle="none"))
        b = next(it)
        t = b.torch()[2:5]                        # a slice of a view pins too
        next(it)
        self.assertTrue(b.released and b.pinned)
        self.assertEqual(bytes(t[0].numpy()), self.records[2])
        with self.assertRaises(batchclient.ReleasedError):
            b.torch()
        with self.assertRaises(batchclient.PinnedBatchError):
            next(it)
        del t
        self.assertFalse(b.pinned)
        self.assertEqual(next(it).index, 2)

    def test_a_training_loop(self):
        torch.manual_seed(0)
        model = torch.nn.Linear(784, 10)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        ld = self.loader("digits.bpk", 100, seed=1)
        losses = []
        for epoch in range(3):
            ld.set_epoch(epoch)
            total = 0.0
            for b in ld:
                r = b.torch(torch.uint8, (785,))
                loss = torch.nn.functional.cross_entropy(model(r[:, 1:].float() / 255),
                                                         r[:, 0].long())
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += loss.item() * len(b)
            losses.append(total / 1000)
        self.assertLess(losses[-1], losses[0] * 0.7, losses)

    def test_example_trains_and_resumes(self):
        ck = os.path.join(self.tmp, "ck.pt")
        base = [sys.executable, EXAMPLE, "digits.bpk", "--socket", self.daemon.sock,
                "--batch-size", "100", "--checkpoint", ck]
        p = subprocess.run(base + ["--epochs", "2"], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = re.findall(r"epoch (\d+): loss ([\d.]+) .*waiting for data ([\d.]+) s", p.stdout)
        self.assertEqual([int(e) for e, _, _ in lines], [0, 1], p.stdout)
        self.assertLess(float(lines[1][1]), float(lines[0][1]))
        p = subprocess.run(base + ["--epochs", "3"], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("resumed from", p.stdout)
        self.assertEqual(re.findall(r"epoch (\d+): loss", p.stdout), ["2"], p.stdout)

    def test_example_without_torch_exits_77(self):
        with tempfile.TemporaryDirectory() as fake:
            os.mkdir(os.path.join(fake, "torch"))
            with open(os.path.join(fake, "torch", "__init__.py"), "w") as f:
                f.write("raise ImportError('no torch here')\n")
            env = dict(os.environ, PYTHONPATH=fake + os.pathsep + os.environ.get("PYTHONPATH", ""))
            p = subprocess.run([sys.executable, EXAMPLE, "digits.bpk", "--socket",
                                self.daemon.sock], env=env, capture_output=True, text=True)
        self.assertEqual(p.returncode, 77, p.stderr)
        # What to install, as this interpreter installs it: pip in a venv
        # (python-torch2-torch) or another Python, Debian's package in Debian's.
        pip = sys.prefix != sys.base_prefix or not re.fullmatch(r"/usr/bin/python3[.\d]*",
                                                                sys.executable)
        self.assertIn("(pip install torch)" if pip else "(apt-get install python3-torch)",
                      p.stderr)


if __name__ == "__main__":
    T.main()
