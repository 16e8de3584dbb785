#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Zero-copy views and their lifetime (see batchclient/batch.py):

- numpy() arrays, batch.data and batch.samples are views of the daemon's
  shared, read-only staging memory: no copy, shared between each other;
- after release (explicit, at the next step, at close) the batch's own
  memoryviews raise and its methods raise ReleasedError;
- arrays and derived memoryviews pin the batch: their bytes stay exact
  while they live, the slot goes back when they die, an old pinned batch
  raises PinnedBatchError instead of stalling, and closing the loader
  waits for them before unmapping.
NumPy is required (tools/deps.sh installs python3-numpy)."""
import gc
import os

import numpy as np

import batchclient
import batchd_testlib as T

N, SIZE = 400, 256


def mapping_of(addr):
    """The /proc/self/maps line of the mapping holding addr."""
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= addr < hi:
                return line.strip()
    return ""


def address(a):
    return a.__array_interface__["data"][0]


class Views(T.DaemonCase):
    @classmethod
    def make_datasets(cls, d):
        rec = os.path.join(cls.tmp, "rec.bin")
        T.write_records(rec, N, SIZE)
        cls.records = [T.record_bytes(i, SIZE) for i in range(N)]
        T.pack(d.path("rec.bpk"), records=(SIZE, rec))

    def check_rows(self, a, ids):
        self.assertEqual([a[k].tobytes() for k in range(len(ids))],
                         [self.records[i] for i in ids])

    def test_numpy_is_a_view_of_shared_memory(self):
        b = next(iter(self.loader("rec.bpk", 10, shuffle="none")))
        a = b.numpy()
        w = b.numpy("<u4", (SIZE // 4,))
        d = np.frombuffer(b.data, np.uint8)
        s3 = np.frombuffer(b.samples[3], np.uint8)
        self.assertEqual(a.shape, (10, SIZE))
        self.assertEqual(w.shape, (10, SIZE // 4))
        for x in (w, d, s3):
            self.assertTrue(np.shares_memory(a, x))
        self.assertEqual(address(a), address(w))
        self.assertEqual(address(a), address(d))
        self.assertEqual(address(s3), address(a) + 3 * SIZE)
        self.assertEqual(address(a), b._addr)            # what bc_batch_data_writable() returned
        self.assertFalse(a.flags.owndata)
        # The bytes live in the daemon's sealed memfd, mapped shared and read-only by
        # bc_batch_data(); the views show them through this process's copy-on-write mapping
        # of the same memfd (bc_batch_data_writable), at the same offset.
        ro = mapping_of(b._ro_addr)
        self.assertIn("memfd:", ro)
        self.assertTrue(ro.split()[1].startswith("r-") and ro.split()[1].endswith("s"), ro)
        m = mapping_of(address(a))
        self.assertIn("memfd:", m)
        self.assertEqual(m.split()[1], "rw-p", m)
        self.assertEqual(m.split()[3:], ro.split()[3:])  # the same memfd (device, inode, name)
        self.assertEqual(address(a) - int(m.split("-")[0], 16),
                         b._ro_addr - int(ro.split("-")[0], 16))
        self.assertFalse(a.flags.writeable)
        with self.assertRaises(ValueError):
            a[0, 0] = 1
        with self.assertRaises(ValueError):
            a.flags.writeable = True
        with self.assertRaises(TypeError):
            b.samples[0][0] = 1
        self.check_rows(a, b.ids)
        self.assertEqual(int(w[2, 0]), int.from_bytes(self.records[2][:4], "little"))

    def test_released_views_raise(self):
        ld = self.loader("rec.bpk", 10)
        it = iter(ld)
        b = next(it)
        data, samples, ids = b.data, b.samples, b.ids
        b.release()
        self.assertTrue(b.released)
        self.assertFalse(b.pinned)
        for v in [data] + samples:
            with self.assertRaises(ValueError):
                v[0]
            with self.assertRaises(ValueError):
                bytes(v)
        for get in (lambda: b.data, lambda: b.samples, lambda: b.sizes, b.numpy, b.torch):
            with self.assertRaises(batchclient.ReleasedError):
                get()
        b.release()                                     # twice is harmless
        self.assertEqual((b.ids, len(b), b.epoch, b.index), (ids, 10, 0, 0))   # metadata stays
        # The next step releases the batch before it.
        b1 = next(it)
        d1, s1 = b1.data, b1.samples
        b2 = next(it)
        self.assertTrue(b1.released)
        with self.assertRaises(ValueError):
            d1[0]
        with self.assertRaises(ValueError):
            s1[5].tobytes()
        # Closing the loader releases the current one.
        d2 = b2.data
        ld.close()
        self.assertTrue(b2.released)
        with self.assertRaises(ValueError):
            d2[0]

    def test_arrays_pin_their_batch(self):
        ld = self.loader("rec.bpk", 10, shuffle="none", prefetch=2)
        it = iter(ld)
        b0 = next(it)
        a = b0.numpy()
        b1 = next(it)                 # b0 released while `a` lives: pinned, not given back
        self.assertTrue(b0.released and b0.pinned)
        with self.assertRaises(batchclient.ReleasedError):
            b0.numpy()
        self.check_rows(a, b0.ids)
        self.assertEqual(b1.ids, tuple(range(10, 20)))
        # b0 is older than the batch yielded last: taking more would stall the ring.
        with self.assertRaisesRegex(batchclient.PinnedBatchError, "batch 0:0 is still referenced"):
            next(it)
        self.check_rows(a, range(10))  # still exact
        del a
        self.assertFalse(b0.pinned)
        b2 = next(it)                 # the failed step consumed nothing
        self.assertEqual(b2.ids, tuple(range(20, 30)))

    def test_the_usual_loop_keeps_one_step_of_views(self):
        ld = self.loader("rec.bpk", 16, shuffle="global", seed=1, prefetch=1)
        for _ in range(3):
            prev = prev_ids = None
            for b in ld:
                x = b.numpy("uint8", (SIZE,))     # `x`, `prev` still bound when the next step runs
                if prev is not None:
                    self.check_rows(prev, prev_ids)   # the batch before: still exact
                self.check_rows(x, b.ids)
                prev, prev_ids = x, b.ids
            self.check_rows(x, b.ids)            # valid after the loop: the last batch is pinned
            self.assertTrue(b.released and b.pinned)
        del x, prev
        self.assertFalse(b.pinned)

    def test_derived_memoryviews_pin(self):
        ld = self.loader("rec.bpk", 8, shuffle="none")
        it = iter(ld)
        b = next(it)
        s = b.samples[2]
        t = s[3:11]
        c = s.cast("c")
        f = np.frombuffer(b.samples[5], np.uint8)
        b.release()
        with self.assertRaises(ValueError):
            s[0]
        self.assertTrue(b.pinned)
        self.assertEqual(bytes(t), self.records[2][3:11])
        self.assertEqual(c[0], self.records[2][:1])
        self.assertEqual(f.tobytes(), self.records[5])
        del t, c
        self.assertTrue(b.pinned)
        del f
        self.assertFalse(b.pinned)
        next(it)
        self.assertEqual(next(it).index, 2)

    def test_reference_cycles_do_not_pin_forever(self):
        class Holder:
            pass
        it = iter(self.loader("rec.bpk", 8, shuffle="none"))
        h = Holder()
        h.me, h.a = h, next(it).numpy()
        del h
        gc.disable()
        try:
            next(it)
            self.assertEqual(next(it).index, 2)      # the loader collected the cycle
        finally:
            gc.enable()

    def test_close_waits_for_live_arrays(self):
        ld = self.loader("rec.bpk", 10, shuffle="none")
        b = next(iter(ld))
        a = b.numpy()
        ld.close()
        self.assertTrue(b.released and b.pinned)
        self.assertEqual(len(self.daemon.sessions()), 1)   # not closed: `a` maps its memory
        self.check_rows(a, range(10))
        del a
        self.assertEqual(self.wait_sessions(0), [])

    def test_reopening_keeps_old_arrays(self):
        ld = self.loader("rec.bpk", 10, shuffle="none")
        b = next(iter(ld))
        a = b.numpy()
        ld.set_epoch(3)                          # reopens the stream at (3, 0)
        b3 = next(iter(ld))
        self.assertEqual((b3.epoch, b3.index), (3, 0))
        self.assertTrue(b.released and b.pinned)
        self.check_rows(a, range(10))
        self.assertEqual(len(self.daemon.sessions()), 2)
        del a
        self.assertEqual(len(self.wait_sessions(1)), 1)


if __name__ == "__main__":
    T.main()
