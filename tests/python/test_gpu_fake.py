#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""GPU streams in libbatchclient and the binding, on any machine: a fake
CUDA driver (fake_libcuda.c, loaded as libcuda.so.1) and a fake daemon
(fake_batchd.py) stand in for the GPU and for batchd's GPU side.

A GPU stream sends its device's UUID, maps the device allocation once and
opens the slots' events with the device's primary context current around
every driver call; each batch's device pointer is its slot of that
mapping, holding the batch's bytes; wait_stream makes the given stream
wait on the slot's ready event; release records the released event on
that stream before the release mark is stored; close undoes everything.
A daemon that breaks the device table's rules, or a descriptor's device
offset, is refused; a driver call that fails mid-open is named, its errno
returned, everything done so far undone and the session CLOSEd. A process
without a usable driver that gets a GPU session anyway closes it and says
"no CUDA device in this process". Built without CUDA headers, only that
last behaviour exists, and it is what runs."""
import ctypes
import errno
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import unittest

import batchd_testlib as T

FAKE = os.environ.get("FAKE_LIBCUDA", "")
if FAKE:
    # Before anything asks for libcuda.so.1: the loader then hands out this one.
    FAKE_LIB = ctypes.CDLL(FAKE)
    if ctypes.CDLL("libcuda.so.1")._handle != FAKE_LIB._handle:
        T.skip("another libcuda.so.1 is loaded already; the fake driver cannot stand in")

import batchclient                       # noqa: E402
import fake_batchd as F                  # noqa: E402
from batchclient import _lib             # noqa: E402

OOM, INVALID_VALUE, INVALID_DEVICE, INVALID_HANDLE = 2, 1, 101, 400
LAUNCH_FAILED, NOT_SUPPORTED = 719, 801
HERE = os.path.dirname(os.path.abspath(__file__))


class Counts(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int) for n in ("ctx_refs", "handles", "reserved", "mapped",
                                            "events", "no_ctx", "bad_calls", "imports",
                                            "stream_syncs")]


class Event(ctypes.Structure):
    _fields_ = [("used", ctypes.c_int), ("pad", ctypes.c_int), ("records", ctypes.c_long),
                ("waits", ctypes.c_long), ("record_stream", ctypes.c_void_p),
                ("wait_stream", ctypes.c_void_p), ("wait_flags", ctypes.c_uint),
                ("record_device", ctypes.c_int), ("syncs", ctypes.c_long),
                ("shm", ctypes.c_void_p), ("shared", ctypes.c_void_p), ("pending", ctypes.c_int)]


RECORD_CB = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p)


class FakeDriver:
    """The fake driver's test-only entry points (fake_cuda_*)."""

    def __init__(self, lib):
        self.lib = lib
        lib.fake_cuda_counts.argtypes = [ctypes.POINTER(Counts)]
        lib.fake_cuda_event_new.argtypes = [ctypes.c_void_p]
        lib.fake_cuda_event.restype = ctypes.POINTER(Event)
        lib.fake_cuda_event.argtypes = [ctypes.c_int]
        lib.fake_cuda_fail.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
        lib.fake_cuda_fail_also.argtypes = [ctypes.c_char_p, ctypes.c_int]
        lib.fake_cuda_on_record.argtypes = [RECORD_CB]
        lib.fake_cuda_uuid.argtypes = [ctypes.c_int, ctypes.c_void_p]
        lib.fake_cuda_event_pending.argtypes = [ctypes.c_int, ctypes.c_int]

    def event_new(self, handle):
        buf = (ctypes.c_ubyte * 64)()
        i = self.lib.fake_cuda_event_new(buf)
        handle[:] = bytes(buf)
        return i

    def event_free(self, index):
        self.lib.fake_cuda_event_free(index)

    def event_pending(self, index, pending):
        self.lib.fake_cuda_event_pending(index, pending)

    def event(self, index):
        return Event.from_buffer_copy(self.lib.fake_cuda_event(index).contents)

    def counts(self):
        c = Counts()
        self.lib.fake_cuda_counts(ctypes.byref(c))
        return {n: getattr(c, n) for n, _ in Counts._fields_}

    def uuid(self, ordinal):
        buf = (ctypes.c_ubyte * 16)()
        self.lib.fake_cuda_uuid(ordinal, buf)
        return bytes(buf)

    def fail(self, name, code, skip=0):
        self.lib.fake_cuda_fail(name.encode(), code, skip)

    def fail_also(self, name, code):
        """A second call failing once, beside fail()'s."""
        self.lib.fake_cuda_fail_also(name.encode(), code)

    def ctx_depth(self):
        return self.lib.fake_cuda_ctx_depth()


def open_fds():
    return len(os.listdir("/proc/self/fd"))


class Base(unittest.TestCase):
    events = None

    def setUp(self):
        self.tmp = T.tmpdir("gpu")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.sock = os.path.join(self.tmp, "sock")
        self.daemon = F.FakeBatchd(self.sock, self.events or F.NoEvents())
        self.addCleanup(self.daemon.close)

    def loader(self, device=0, **kw):
        kw.setdefault("timeout", 5)
        kw.setdefault("shuffle", "none")
        ld = batchclient.Loader("data", self.daemon.plan.batch_size, socket=self.sock,
                                device=device, **kw)
        self.addCleanup(ld.close)
        return ld

    def refused(self, device=0):
        with self.assertRaises(batchclient.BatchdError) as cm:
            batchclient.Loader("data", self.daemon.plan.batch_size, socket=self.sock,
                               device=device, timeout=5)
        return cm.exception


@unittest.skipUnless(FAKE, "libbatchclient was built without CUDA")
class GpuStreams(Base):
    def setUp(self):
        self.drv = GpuStreams.drv
        self.events = self.drv
        super().setUp()
        self.records = []           # (slot, stream, the slot's release mark at the record)

        def on_record(index, stream):
            for s in self.daemon.sessions.values():
                if index in s.released:
                    slot = s.released.index(index)
                    self.records.append((slot, stream, s.mark(slot)))
        self.cb = RECORD_CB(on_record)
        self.drv.lib.fake_cuda_on_record(self.cb)
        self.fds = open_fds()
        self.addCleanup(self.check_all_undone)

    @classmethod
    def setUpClass(cls):
        cls.drv = FakeDriver(FAKE_LIB)

    def check_all_undone(self, where="at the end"):
        import gc
        gc.collect()
        c = self.drv.counts()
        for k in ("ctx_refs", "handles", "reserved", "mapped", "events", "no_ctx", "bad_calls"):
            self.assertEqual(c[k], 0, f"{k} {where}: {c}")
        self.assertEqual(self.drv.ctx_depth(), 0, where)
        # The fake daemon's thread closes its end of a connection a moment after the client.
        deadline = time.monotonic() + 5
        while open_fds() != self.fds and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(open_fds(), self.fds, f"descriptors {where}")

    def the_session(self):
        (s,) = self.daemon.sessions.values()
        return s

    def test_an_epoch_on_the_gpu(self):
        class TorchLikeStream:
            cuda_stream = 0x5150

        ld = self.loader(0)
        self.assertEqual(ld.device, 0)
        self.assertEqual(_lib.lib().bc_stream_device(ld._stream.h), 0)
        placement, uuid, _ = self.daemon.opens[-1]
        self.assertEqual((placement, uuid), (0, self.drv.uuid(0)))
        s = self.the_session()
        self.assertEqual(self.drv.counts()["imports"] > 0, True)
        streams = [None, 0x77, TorchLikeStream(), "no wait"]
        want = [None, 0x77, 0x5150, None]
        base = None
        for k, b in enumerate(ld):
            ids, body = s.expect[k]
            self.assertEqual(list(b.ids), ids)
            self.assertEqual(bytes(b.data), body)                 # the host view still works
            self.assertEqual(b.device_nbytes, len(body))
            base = b.device_ptr if base is None else base
            self.assertEqual(b.device_ptr, base + k * s.slot_bytes)
            self.assertEqual(ctypes.string_at(b.device_ptr, len(body)), body)
            # stream None tells consumers no synchronisation is needed: the
            # export waits (on the host) for the slot's ready event first.
            self.assertEqual(self.drv.event(s.ready[k]).syncs, 0)
            self.assertEqual(b.__cuda_array_interface__,
                             {"version": 3, "shape": (len(body),), "typestr": "|u1",
                              "data": (b.device_ptr, False), "strides": None, "stream": None})
            self.assertEqual(self.drv.event(s.ready[k]).syncs, 1)
            self.assertIn("cuda:0", repr(b))
            self.assertEqual(self.drv.event(s.ready[k]).waits, 0)
            if streams[k] != "no wait":
                self.assertIs(b.wait_stream(streams[k]), b)
                ev = self.drv.event(s.ready[k])
                self.assertEqual((ev.waits, ev.wait_stream, ev.wait_flags), (1, want[k], 0))
            self.assertEqual(self.drv.ctx_depth(), 0)
            self.assertEqual(s.mark(k), 0)
            self.assertEqual(self.drv.event(s.released[k]).records, 0)
            if k:
                self.assertEqual(s.mark(k - 1), k)                 # the previous one is back
        self.assertEqual(k, s.plan.slots - 1)
        # Each release recorded its slot's event, on the batch's stream, before the mark.
        self.assertEqual(self.records, [(k, want[k], 0) for k in range(s.plan.slots)])
        for k in range(s.plan.slots):
            ev = self.drv.event(s.released[k])
            self.assertEqual((ev.records, ev.record_stream, ev.record_device), (1, want[k], 0))
            self.assertEqual(s.mark(k), k + 1)
        sid = s.id
        ld.close()
        self.assertEqual(self.daemon.closes, [sid])
        self.check_all_undone("after close")

    def test_copies_in_flight(self):
        """batchd publishes a GPU batch once its copy is queued: before the
        copy lands, device memory holds the fake's poison, and a consumer
        that skips the wait reads it; __cuda_array_interface__ (stream None)
        blocks until the copy landed, so a torch.as_tensor-style consumer of
        it reads the batch, after wait_stream (which does not block) too."""
        self.daemon.plan = F.Plan(copies_land=False)
        ld = self.loader(0)
        s = self.the_session()
        for k, b in enumerate(ld):
            body = s.expect[k][1]
            self.assertEqual(bytes(b.data), body)                 # the host copy is final
            self.assertEqual(ctypes.string_at(b.device_ptr, len(body)),
                             bytes([F.POISON]) * len(body), f"batch {k} before its copy")
            self.assertEqual(self.drv.event(s.ready[k]).pending, 1)
            landed = threading.Event()

            def land(k=k):
                time.sleep(0.05)
                landed.set()
                s.land(k)
            t = threading.Thread(target=land)
            t.start()
            self.addCleanup(t.join)
            if k % 2:
                # A GPU-side wait: the host goes on while the copy is in flight.
                self.assertIs(b.wait_stream(0x77), b)
                self.assertEqual(self.drv.event(s.ready[k]).pending, 1)
            ptr = b.__cuda_array_interface__["data"][0]           # waits on the host
            self.assertTrue(landed.is_set(), f"batch {k}: returned before its copy landed")
            self.assertEqual(ctypes.string_at(ptr, len(body)), body, f"batch {k} after the wait")
            t.join()
        self.assertEqual(k, s.plan.slots - 1)
        ld.close()
        self.check_all_undone("after close")

    def test_the_second_device(self):
        ld = self.loader("cuda:1")
        self.assertEqual(self.daemon.opens[-1][:2], (1, self.drv.uuid(1)))
        s = self.the_session()
        it = iter(ld)
        b = next(it)
        self.assertIn("cuda:1", repr(b))
        b.wait_stream(0x10)
        next(it)
        self.assertEqual(self.drv.event(s.released[0]).record_device, 1)   # its context

    def test_an_ordinal_this_process_lacks_is_refused_before_asking(self):
        e = self.refused(5)
        self.assertEqual(e.errno, errno.ENODEV)
        self.assertIn("cuDeviceGet", e.message)
        self.assertIn("CUDA_ERROR_INVALID_DEVICE", e.message)
        self.assertEqual(self.daemon.opens, [])

    def expect_refusal(self, err, text, plan=None, device=0, opened=True):
        if plan is not None:
            self.daemon.plan = plan
        before = list(self.daemon.closes)
        e = self.refused(device)
        self.assertEqual(e.errno, err, str(e))
        self.assertIn(text, e.message)
        if opened:
            # The daemon made the session: the client ended it.
            self.assertEqual(len(self.daemon.closes), len(before) + 1, str(e))
        self.assertEqual(self.daemon.sessions, {})
        self.check_all_undone(f"after {e.message!r}")
        return e

    def test_a_hostile_device_table_is_refused(self):
        P = F.Plan
        for plan, err, text in (
                (P(table_magic=0x1234), errno.EBADMSG, "device table's magic"),
                (P(table_slots=3), errno.EBADMSG, "slot count (3, not 4)"),
                (P(slot_bytes=1000), errno.EBADMSG, "do not fit"),
                (P(slot_bytes=2 << 20, dev_size=2 << 20), errno.EBADMSG, "do not fit"),
                (P(dev_size=2048), errno.EBADMSG, "do not fit"),
                (P(dev_size=0), errno.EBADMSG, "do not fit"),
                (P(gpu_offset=1 << 40), errno.EBADMSG, "is not a 4-slot table"),
                (P(gpu_offset=12), errno.EBADMSG, "is not a 4-slot table"),
                (P(gpu_offset=8), errno.EBADMSG, "magic"),
                (P(gpu_size=0), errno.EBADMSG, "is not a 4-slot table"),
                (P(uuid=bytes(16)), errno.ENODEV, "not visible in this process"),
                (P(uuid=b"\x01" * 16), errno.ENODEV, "GPU-01010101-0101"),
                (P(nfds=4), errno.EBADMSG, "4 descriptors"),
                (P(placement=1), errno.EBADMSG, "placement 1"),
        ):
            with self.subTest(plan=vars(plan)):
                self.expect_refusal(err, text, plan)
        # Visible, but not the device asked for.
        e = self.expect_refusal(errno.EBADMSG, "not on CUDA device 0",
                                P(uuid=self.drv.uuid(1)))
        self.assertIn("GPU-face0001", e.message)

    def test_a_descriptor_outside_its_device_slot_is_refused(self):
        for seq, where in ((1, 0), (1, 1 * 1024 + 512), (2, 1 << 40), (3, 3 * 1024 - 512)):
            with self.subTest(seq=seq, device=where):
                self.daemon.plan = F.Plan(desc_device={seq: where})
                ld = self.loader(0)
                got = 0
                with self.assertRaises(batchclient.BatchError) as cm:
                    for _ in ld:
                        got += 1
                self.assertEqual(got, seq)
                self.assertEqual(cm.exception.errno, errno.EBADMSG)
                self.assertIn("not in its device slot", cm.exception.message)
                ld.close()
                self.check_all_undone()

    def test_a_failing_driver_call_is_named_and_undone(self):
        for name, skip, code, err in (
                ("cuDevicePrimaryCtxRetain", 0, OOM, errno.ENOMEM),
                ("cuCtxPushCurrent", 0, LAUNCH_FAILED, errno.EIO),
                ("cuMemImportFromShareableHandle", 0, INVALID_VALUE, errno.EINVAL),
                ("cuMemAddressReserve", 0, OOM, errno.ENOMEM),
                ("cuMemMap", 0, OOM, errno.ENOMEM),
                ("cuMemSetAccess", 0, NOT_SUPPORTED, errno.EOPNOTSUPP),
                ("cuMemRelease", 0, INVALID_HANDLE, errno.EINVAL),
                ("cuIpcOpenEventHandle", 0, LAUNCH_FAILED, errno.EIO),
                ("cuIpcOpenEventHandle", 1, LAUNCH_FAILED, errno.EIO),
                ("cuIpcOpenEventHandle", 6, OOM, errno.ENOMEM),
        ):
            with self.subTest(call=name, skip=skip):
                self.drv.fail(name, code, skip)
                e = self.expect_refusal(err, name)
                self.assertIn("CUDA device 0", e.message)
        # Before the OPEN: nothing to close.
        self.drv.fail("cuDeviceGetUuid", LAUNCH_FAILED)
        self.expect_refusal(errno.EIO, "cuDeviceGetUuid", opened=False)
        self.drv.fail("cuDeviceGetCount", LAUNCH_FAILED)
        self.expect_refusal(errno.ENODEV, "not visible in this process")
        self.assertEqual(len(self.loader(0)), 4)                  # and all is well after

    def test_a_failed_wait_is_named_and_can_be_retried(self):
        ld = self.loader(0)
        s = self.the_session()
        it = iter(ld)
        b = next(it)
        self.drv.fail("cuStreamWaitEvent", INVALID_HANDLE)
        with self.assertRaises(batchclient.BatchdError) as cm:
            b.wait_stream(0x42)
        self.assertEqual(cm.exception.errno, errno.EIO)
        self.assertIn("cuStreamWaitEvent", cm.exception.message)
        self.assertIn("CUDA_ERROR_INVALID_HANDLE", cm.exception.message)
        b.wait_stream(0x43)
        next(it)
        ev = self.drv.event(s.released[0])
        self.assertEqual((ev.records, ev.record_stream), (1, 0x43))
        with self.assertRaises(batchclient.ReleasedError):
            b.wait_stream(0x44)
        with self.assertRaises(TypeError):
            next(it).wait_stream("stream")

    def test_a_failed_release_record_waits_for_the_stream(self):
        # A record that fails (a stream of another context) must not let the
        # daemon reuse the slot before the stream is done with it: the
        # client drains the stream, then stores the mark.
        ld = self.loader(0)
        s = self.the_session()
        it = iter(ld)
        next(it).wait_stream(0x99)
        syncs = self.drv.counts()["stream_syncs"]
        self.drv.fail("cuEventRecord", INVALID_HANDLE)
        self.assertEqual(next(it).index, 1)                        # no error: made safe
        self.assertEqual(self.drv.counts()["stream_syncs"], syncs + 1)
        self.assertEqual(s.mark(0), 1)                             # released after the drain

    def test_a_release_that_cannot_be_ordered_keeps_the_slot(self):
        ld = self.loader(0)
        s = self.the_session()
        it = iter(ld)
        next(it).wait_stream(0x99)
        self.drv.fail("cuEventRecord", INVALID_HANDLE)
        self.drv.fail_also("cuStreamSynchronize", INVALID_HANDLE)
        with self.assertRaises(batchclient.BatchdError) as cm:
            next(it)
        self.assertEqual(cm.exception.errno, errno.EIO)
        for part in ("cuEventRecord", "cuStreamSynchronize", "stays held"):
            self.assertIn(part, cm.exception.message)
        self.assertEqual(s.mark(0), 0)                             # never handed back
        with self.assertRaises(batchclient.BatchdError) as cm:    # and the stream is over
            next(it)
        self.assertEqual(cm.exception.errno, errno.EIO)
        self.assertIn("stays held", cm.exception.message)

    def test_the_c_calls(self):
        ld = self.loader(0)
        b = next(iter(ld))
        L = _lib.lib()
        n = ctypes.c_size_t()
        self.assertEqual(L.bc_batch_device_data(b._h, ctypes.byref(n)), b.device_ptr)
        self.assertEqual(n.value, b.nbytes)
        self.assertEqual(L.bc_batch_wait_stream(b._h, None), 0)
        self.assertEqual(L.bc_release(b._h), 0)
        self.assertEqual(L.bc_release(b._h), -errno.EINVAL)
        self.assertEqual(L.bc_batch_wait_stream(b._h, None), -errno.EINVAL)
        b._h = None                       # already given back by hand
        ld._stream.held.remove(b)

    def test_closing_with_batches_held(self):
        ld = self.loader(0)
        s = self.the_session()
        it = iter(ld)
        next(it).wait_stream(0x5)
        next(it)
        ld.close()
        # A batch still held at close: its slot's released event is recorded
        # (on its stream, here the default one) and waited for before the
        # unmap, so no queued work reads unmapped memory.
        self.assertEqual(self.drv.event(s.released[1]).records, 1)
        self.check_all_undone("after close")

    def test_open_close_cycles_leak_nothing(self):
        for _ in range(30):
            ld = self.loader(0)
            next(iter(ld)).wait_stream(None)
            ld.close()
        self.check_all_undone("after 30 cycles")


class NoDriver(Base):
    """A process without a usable driver, given a GPU session anyway."""

    PROG = """
import ctypes, json, os, sys
if os.environ.get("FAKE_LIBCUDA"):
    ctypes.CDLL(os.environ["FAKE_LIBCUDA"])   # a driver whose cuInit finds no device
import batchclient, fake_batchd
d = fake_batchd.FakeBatchd(sys.argv[1], fake_batchd.NoEvents())
try:
    batchclient.Loader("data", 8, socket=sys.argv[1], device=0)
    out = {"opened": True}
except batchclient.BatchdError as e:
    out = {"errno": e.errno, "message": e.message}
out.update(opens=[[p, u.hex()] for p, u, _ in d.opens], closes=d.closes,
           sessions=len(d.sessions))
print(json.dumps(out))
"""

    def test_a_gpu_session_without_a_driver_is_closed(self):
        env = dict(os.environ, FAKE_CUDA_INIT_FAIL="1",
                   PYTHONPATH=os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))
        sock = os.path.join(self.tmp, "sock2")
        p = subprocess.run([sys.executable, "-c", self.PROG, sock], env=env,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        out = json.loads(p.stdout)
        self.assertEqual(out.get("errno"), errno.ENODEV, out)
        why = "cuInit" if FAKE else "libbatchclient was built without CUDA"
        self.assertTrue(out["message"].startswith("no CUDA device in this process: " + why),
                        out["message"])
        self.assertEqual(out["opens"], [[0, "00" * 16]])      # asked with a zero UUID
        self.assertEqual((out["closes"], out["sessions"]), ([1], 0))

    def test_the_daemons_reason_wins_when_it_refuses(self):
        self.daemon.plan = F.Plan(refuse=(errno.ENODEV, "no CUDA device: the daemon's reason"))
        e = self.refused(0)
        self.assertEqual(e.errno, errno.ENODEV)
        self.assertIn("the daemon's reason", e.message)


if __name__ == "__main__":
    T.main()
