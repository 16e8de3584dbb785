#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""GPU placement where there is no CUDA: Loader(device=...) fails with
ENODEV and the reason ("no CUDA device"), leaves no session behind, and
host Loaders on the same daemon go on unharmed; host batches say they have
no device memory (device_ptr None, no __cuda_array_interface__,
wait_stream refused), down to the C calls. Exits 77 (skip) where this
process or the daemon has a usable CUDA device: GPU sessions are tested
with a GPU there."""
import ctypes
import errno

import batchclient
import batchd_testlib as T
from batchclient import _lib

N, SIZE = 200, 48


def cuda_here():
    """Why this process can use CUDA, or None."""
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    n = ctypes.c_int()
    if cu.cuInit(0) == 0 and cu.cuDeviceGetCount(ctypes.byref(n)) == 0 and n.value > 0:
        return f"this process sees {n.value} CUDA device(s)"
    return None


class Device(T.DaemonCase):
    @classmethod
    def make_datasets(cls, d):
        rec = f"{cls.tmp}/rec.bin"
        T.write_records(rec, N, SIZE)
        T.pack(d.path("rec.bpk"), records=(SIZE, rec))

    @classmethod
    def setUpClass(cls):
        why = cuda_here()
        if why:
            T.skip(f"{why}: GPU placement is not refused here")
        super().setUpClass()
        if batchclient.status(cls.daemon.sock).get("cuda", {}).get("available"):
            cls.tearDownClass()
            T.skip("the daemon has a CUDA device: GPU placement is not refused here")

    def refused(self, device):
        with self.assertRaises(batchclient.BatchdError) as cm:
            batchclient.Loader("rec.bpk", 8, socket=self.daemon.sock, device=device)
        return cm.exception

    def test_device_is_refused_with_the_reason(self):
        for dev in (0, "cuda:1", 7):
            e = self.refused(dev)
            self.assertNotIsInstance(e, batchclient.ConnectError)
            self.assertEqual(e.errno, errno.ENODEV, str(e))
            self.assertIn("no CUDA device", e.message)
            self.assertIn("rec.bpk", str(e))
            self.assertIn("ENODEV", str(e))
        self.assertEqual(self.wait_sessions(0), [])

    def test_host_loader_goes_on(self):
        ld = self.loader("rec.bpk", 10, shuffle="global", seed=3)
        it = iter(ld)
        ids = list(next(it).ids)
        self.assertEqual(self.refused(0).errno, errno.ENODEV)
        for b in it:
            ids += b.ids
        self.assertEqual(sorted(ids), list(range(N)))
        # And a new host Loader after the refusal.
        self.assertEqual(sorted(i for b in self.loader("rec.bpk", 10) for i in b.ids),
                         list(range(N)))

    def test_host_batches_have_no_device_memory(self):
        ld = self.loader("rec.bpk", 10, shuffle="none")
        self.assertIsNone(ld.device)
        b = next(iter(ld))
        self.assertIsNone(b.device_ptr)
        self.assertEqual(b.device_nbytes, 0)
        self.assertEqual(b.nbytes, 10 * SIZE)
        self.assertFalse(hasattr(b, "__cuda_array_interface__"))
        with self.assertRaisesRegex(ValueError, "host memory"):
            b.wait_stream()
        with self.assertRaisesRegex(ValueError, "host memory"):
            b.wait_stream(0x1234)
        # The C contract under it: BC_HOST, NULL and 0, -EINVAL.
        L = _lib.lib()
        n = ctypes.c_size_t(99)
        self.assertEqual(L.bc_stream_device(ld._stream.h), _lib.BC_HOST)
        self.assertIsNone(L.bc_batch_device_data(b._h, ctypes.byref(n)))
        self.assertEqual(n.value, 0)
        self.assertEqual(L.bc_batch_wait_stream(b._h, None), -errno.EINVAL)
        b.release()
        with self.assertRaises(batchclient.ReleasedError):
            b.device_ptr

    def test_bad_device_arguments(self):
        for dev in ("tpu", "cuda:x", 256, -2):
            with self.subTest(device=dev), self.assertRaises(ValueError):
                batchclient.Loader("rec.bpk", 8, socket=self.daemon.sock, device=dev)
        self.assertIsNone(self.loader("rec.bpk", 8, device="cpu").device)


if __name__ == "__main__":
    T.main()
