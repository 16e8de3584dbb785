#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A remote dataset's faults reach Python as what they are: RemoteError
(a BatchError, so existing handlers still catch it) naming the object and
the fault, with batchd alive and serving on; only a daemon that went away
is a DaemonGoneError.

Against a real batchd whose remote is a small HTTP server in this process
(a one-file dataset at a plain http:// URL): a reply with the wrong range
fails a batch with EPROTO, a server that sends nothing fails one with
EAGAIN (ETIMEDOUT once the fetcher reports timeouts as such), a HEAD
without a Content-Length fails the open with EPROTO; then the server
mends and the stream goes on with exact bytes. batchd killed while a
batch waits on the server: DaemonGoneError.

Against the fake daemon (fake_batchd.py), the failures no real daemon
makes on demand: batches failed with ETIMEDOUT, EPROTO and EIO naming
s3:// objects (not taken for a wait that ran out, nor for a dead daemon),
the same errnos on a local dataset (BatchError, not RemoteError), a ring
stopped for a protocol violation and a hang-up (DaemonGoneError), opens
refused by the remote path, and an OPEN never answered, which names the
open and its dataset rather than "waiting for a batch".
"""
import errno
import http.server
import os
import pickle
import shutil
import socket
import struct
import threading
import time
import unittest

import batchd_testlib as T
import batchclient
import fake_batchd as F
from batchclient import loader as loader_module

N, SIZE, BATCH = 600, 1000, 50


# ---- a bucket that misbehaves on request --------------------------------------------------------


class Handler(http.server.BaseHTTPRequestHandler):
    """HEAD and ranged GETs of the server's one object, as server.mode says:
    "ok"; "wrong-range" (a 206 one byte off the range asked); "stall"
    (nothing sent until server.unstall is set); "no-length" (a HEAD without
    Content-Length)."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self.send_response(200)
        if self.server.mode != "no-length":
            self.send_header("Content-Length", str(len(self.server.data)))
        self.send_header("ETag", '"e1"')
        self.end_headers()

    def do_GET(self):
        mode, data = self.server.mode, self.server.data
        if mode == "stall":
            self.server.unstall.wait(60)
            self.close_connection = True
            return
        first, last = (int(x) for x in self.headers["Range"].split("=")[1].split("-"))
        body = data[first:last + 1]
        shift = 1 if mode == "wrong-range" else 0
        self.send_response(206)
        self.send_header("Content-Range",
                         f"bytes {first + shift}-{last + shift}/{len(data)}")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", '"e1"')
        self.end_headers()
        self.wfile.write(body)


class Bucket(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, data):
        super().__init__(("127.0.0.1", 0), Handler)
        self.data = data
        self.mode = "ok"
        self.unstall = threading.Event()
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    def handle_error(self, request, client_address):
        pass                     # batchd hangs up on a reply it refuses: not news

    def stop(self):
        self.unstall.set()
        self.shutdown()
        self.server_close()


class RealDaemon(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        T.require_tools()
        cls.tmp = T.tmpdir("remote-err")
        rec = os.path.join(cls.tmp, "rec.bin")
        T.write_records(rec, N, SIZE)
        cls.pack = T.pack(os.path.join(cls.tmp, "rec.bpk"), records=(SIZE, rec),
                          block_size=16384)
        cls.data = T.read(cls.pack)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.bucket = Bucket(self.data)
        self.addCleanup(self.bucket.stop)
        self.url = f"http://127.0.0.1:{self.bucket.server_address[1]}/ds/rec.bpk"

    def daemon(self, timeout=1):
        """A batchd whose remote is the bucket: no retries, a request failing
        after timeout seconds without a byte."""
        d = T.Daemon(T.tmpdir("remote-errd"))
        self.addCleanup(shutil.rmtree, d.dir, True)
        conf = os.path.join(d.dir, "batchd.conf")
        with open(conf, "w") as f:
            f.write(f"[datasets]\nroot = {d.root}\n"
                    f"remote = http://127.0.0.1:{self.bucket.server_address[1]}/ds\n"
                    f"[remote]\nretries = 0\ntimeout = {timeout}\n"
                    f"[cache]\ndir = {d.dir}/cache\nchunk = 64K\nmax_size = 64M\n")
        self.addCleanup(d.stop)
        return d.spawn([T.BATCHD, "--no-config", "-c", conf, "--socket", d.sock,
                        "--log-level", "debug", "--memory", "256M", "--direct", "off"])

    def loader(self, d):
        # prefetch 1: the session stages 3 batches (3 of the dataset's 10
        # chunks) before a test breaks the bucket, never the whole epoch.
        ld = batchclient.Loader(self.url, BATCH, socket=d.sock, shuffle="none", timeout=20,
                                prefetch=1)
        self.addCleanup(ld.close)
        return ld

    def first_failure(self, ld):
        """Iterate until a batch fails. @return the exception."""
        for _ in range(3):
            try:
                for b in ld:
                    b.release()
            except batchclient.BatchdError as e:
                return e
        self.fail("no batch failed")

    def assert_remote(self, e, errnos, d):
        self.assertIsInstance(e, batchclient.RemoteError, str(e))
        self.assertIsInstance(e, batchclient.BatchError)
        self.assertNotIsInstance(e, batchclient.DaemonGoneError)
        self.assertIn(e.errno, errnos, str(e))
        self.assertEqual(e.object, self.url)
        self.assertIn(self.url, e.message)
        self.assertIn(f"remote object {self.url}: ", str(e))
        self.assertIsNotNone(e.batch)
        # batchd is alive, the session still open.
        self.assertEqual(len(batchclient.status(d.sock)["sessions"]), 1, d.tail())

    def assert_goes_on(self, ld):
        """The server mended: batches come again, every sample exact."""
        self.bucket.mode = "ok"
        good = 0
        for _ in range(20):
            try:
                for b in ld:
                    for i, s in zip(b.ids, b.samples):
                        T.same_bytes(self, s, T.record_bytes(i, SIZE), f"sample {i}")
                    good += 1
                    b.release()
                break
            except batchclient.RemoteError:
                continue        # failed before the mend, staged already
        self.assertGreater(good, 0)

    def test_a_wrong_range_fails_a_batch_with_eproto(self):
        d = self.daemon()
        ld = self.loader(d)
        self.bucket.mode = "wrong-range"
        e = self.first_failure(ld)
        self.assert_remote(e, (errno.EPROTO,), d)
        self.assertIn("sent bytes", e.message)
        self.assertIn("the server's reply broke the protocol", str(e))
        self.assertTrue(str(e).endswith("(EPROTO)"), str(e))
        self.assert_goes_on(ld)

    def test_a_silent_server_fails_a_batch_as_timed_out(self):
        d = self.daemon(timeout=1)
        ld = self.loader(d)
        self.bucket.mode = "stall"
        t0 = time.monotonic()
        e = self.first_failure(ld)
        self.assertLess(time.monotonic() - t0, 15)
        # The S3 client reports a timeout left after the retries as EAGAIN.
        self.assert_remote(e, (errno.ETIMEDOUT, errno.EAGAIN), d)
        self.bucket.unstall.set()
        self.assert_goes_on(ld)

    def test_a_head_without_length_fails_the_open_with_eproto(self):
        d = self.daemon()
        self.bucket.mode = "no-length"
        with self.assertRaises(batchclient.BatchdError) as cm:
            batchclient.Loader(self.url, BATCH, socket=d.sock, timeout=20)
        e = cm.exception
        self.assertIsInstance(e, batchclient.RemoteError, str(e))
        self.assertEqual(e.errno, errno.EPROTO)
        self.assertEqual(e.object, self.url)
        self.assertIn("Content-Length", e.message)
        self.assertIn(f"cannot open dataset {self.url!r}", str(e))
        self.assertIsNone(e.batch)
        self.assertEqual(batchclient.status(d.sock)["sessions"], [])

    def test_a_killed_daemon_is_gone_not_remote(self):
        d = self.daemon(timeout=60)
        ld = self.loader(d)
        self.bucket.mode = "stall"
        killer = threading.Timer(0.5, d.kill)
        killer.start()
        self.addCleanup(killer.cancel)
        with self.assertRaises(batchclient.BatchdError) as cm:
            for b in ld:
                b.release()
        e = cm.exception
        self.assertIsInstance(e, batchclient.DaemonGoneError, str(e))
        self.assertNotIsInstance(e, batchclient.RemoteError)
        self.assertEqual(e.errno, errno.EPIPE, str(e))


# ---- the fake daemon ---------------------------------------------------------------------------

REMOTE = "s3://bkt/ds/train"


def timed_out(seq):
    return (errno.ETIMEDOUT, f"dataset {REMOTE}: shard a.bpk: block {seq}: {REMOTE}/a.bpk: "
            "no byte for 30 s")


class FakeDaemon(unittest.TestCase):
    def setUp(self):
        self.tmp = T.tmpdir("remote-fake")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.sock = os.path.join(self.tmp, "sock")
        self.daemon = F.FakeBatchd(self.sock, F.NoEvents())
        self.addCleanup(self.daemon.close)

    def loader(self, dataset=REMOTE, **plan):
        self.daemon.plan = F.Plan(**plan)
        ld = batchclient.Loader(dataset, self.daemon.plan.batch_size, socket=self.sock,
                                shuffle="none", timeout=5)
        self.addCleanup(ld.close)
        return ld

    def take(self, ld):
        """The next batch's index, or the exception instead."""
        try:
            for b in ld:
                index = b.index
                b.release()
                return index
        except batchclient.BatchdError as e:
            return e

    def test_remote_faults_of_batches(self):
        ld = self.loader(failed={
            1: timed_out(1),
            2: (errno.EPROTO, f"dataset {REMOTE}: shard b.bpk: block 9: {REMOTE}/b.bpk: sent "
                "bytes 11-110 for a range of 10-109"),
            3: (errno.EIO, f"dataset {REMOTE}: shard c.bpk: block 0 ({REMOTE}/c.bpk: Could "
                "not resolve host: nowhere)"),
        })
        self.assertEqual(self.take(ld), 0)
        for batch, err, obj, fault in (
                (1, errno.ETIMEDOUT, "a.bpk", "timed out"),
                (2, errno.EPROTO, "b.bpk", "the server's reply broke the protocol"),
                (3, errno.EIO, "c.bpk", "the transfer failed")):
            t0 = time.monotonic()
            e = self.take(ld)
            with self.subTest(batch=batch):
                # At once: a failed batch is not a wait that ran out, nor a dead daemon.
                self.assertLess(time.monotonic() - t0, 2)
                self.assertIs(type(e), batchclient.RemoteError, repr(e))
                self.assertIsInstance(e, batchclient.BatchError)
                self.assertEqual(e.errno, err)
                self.assertEqual(e.object, f"{REMOTE}/{obj}")
                self.assertEqual((e.epoch, e.batch), (0, batch))
                self.assertIn(f"{REMOTE}/{obj}", e.message)
                self.assertIn(f"remote object {REMOTE}/{obj}: {fault}", str(e))
                self.assertEqual(str(pickle.loads(pickle.dumps(e))), str(e))
        self.assertEqual(len(self.daemon.sessions), 1)

    def test_local_failures_are_batch_errors(self):
        ld = self.loader("data", failed={
            0: (errno.EPROTO, "dataset data: shard x.bpk: block 0: a frame chain that loops"),
            1: (errno.ETIMEDOUT, "dataset data: shard x.bpk: block 1: the read timed out"),
            2: (errno.EBADMSG, f"dataset data: shard x.bpk: block 2: see {REMOTE} for more"),
        })
        for batch, err in ((0, errno.EPROTO), (1, errno.ETIMEDOUT), (2, errno.EBADMSG)):
            e = self.take(ld)
            with self.subTest(batch=batch):
                self.assertIs(type(e), batchclient.BatchError, repr(e))
                self.assertEqual((e.errno, e.batch), (err, batch))
        self.assertEqual(self.take(ld), 3)

    def test_a_ring_stopped_for_a_protocol_violation_is_gone(self):
        ld = self.loader(produced=2, stop=errno.EPROTO, failed={1: timed_out(1)})
        self.assertEqual(self.take(ld), 0)
        self.assertIsInstance(self.take(ld), batchclient.RemoteError)
        e = self.take(ld)
        self.assertIs(type(e), batchclient.DaemonGoneError, repr(e))
        self.assertEqual(e.errno, errno.EPROTO)
        self.assertIn("ring protocol violation", e.message)

    def test_a_hang_up_is_gone(self):
        ld = self.loader(produced=1)
        self.assertEqual(self.take(ld), 0)
        threading.Timer(0.3, self.daemon.hang_up).start()
        e = self.take(ld)
        self.assertIs(type(e), batchclient.DaemonGoneError, repr(e))
        self.assertEqual(e.errno, errno.EPIPE)

    def refused(self, dataset, err, message):
        self.daemon.plan = F.Plan(refuse=(err, message))
        with self.assertRaises(batchclient.BatchdError) as cm:
            batchclient.Loader(dataset, 8, socket=self.sock, timeout=5)
        return cm.exception

    def test_remote_faults_of_opens(self):
        for err, message, obj in (
                (errno.EPROTO, f"dataset {REMOTE}: {REMOTE}/a.bpk: HEAD answered without a "
                 "Content-Length", f"{REMOTE}/a.bpk"),
                (errno.EIO, f"dataset {REMOTE}: cannot list it ({REMOTE}/: Could not resolve "
                 "host: nowhere)", f"{REMOTE}/"),
                (errno.EAGAIN, f"{REMOTE}/a.bpk: HTTP 503 SlowDown: slow (after 5 retries)",
                 f"{REMOTE}/a.bpk")):
            e = self.refused(REMOTE, err, message)
            with self.subTest(err=err):
                self.assertIs(type(e), batchclient.RemoteError, repr(e))
                self.assertEqual((e.errno, e.object, e.message), (err, obj, message))
                self.assertEqual((e.epoch, e.batch), (None, None))
                self.assertIn(f"cannot open dataset {REMOTE!r}: remote object {obj}", str(e))
        # The daemon's EPROTO for a local dataset: neither remote nor a dead daemon.
        e = self.refused("data", errno.EPROTO, "dataset data: something broke")
        self.assertIs(type(e), batchclient.BatchdError, repr(e))
        self.assertEqual(e.errno, errno.EPROTO)

    def test_an_open_that_gets_no_answer_says_so(self):
        self.daemon.plan = F.Plan(silent=True)
        real_init = loader_module._Client.__init__
        sock = self.sock

        def quick_client(client, path):
            """The loader's connection, its requests waiting 1 s for a reply, not 120."""
            real_init(client, path)
            for fd in map(int, os.listdir("/proc/self/fd")):
                try:
                    dup = os.dup(fd)
                except OSError:
                    continue
                try:
                    s = socket.socket(fileno=dup)
                except OSError:
                    os.close(dup)
                    continue
                with s:
                    try:
                        ours = s.family == socket.AF_UNIX and s.getpeername() == sock
                    except OSError:
                        ours = False          # the fake daemon's listening socket
                    if ours:
                        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                                     struct.pack("ll", 1, 0))
        loader_module._Client.__init__ = quick_client
        self.addCleanup(setattr, loader_module._Client, "__init__", real_init)
        for dataset, cls in ((REMOTE, batchclient.RemoteError), ("data", batchclient.BatchdError)):
            with self.subTest(dataset=dataset), \
                    self.assertRaises(batchclient.BatchdError) as cm:
                batchclient.Loader(dataset, 8, socket=self.sock, timeout=5)
            e = cm.exception
            self.assertIs(type(e), cls, repr(e))
            self.assertEqual(e.errno, errno.ETIMEDOUT)
            self.assertIn(f"batchd did not answer the OPEN of {dataset} within 1 s", e.message)
            self.assertNotIn("waiting for a batch", str(e))
            if cls is batchclient.RemoteError:
                self.assertEqual(e.object, REMOTE)


if __name__ == "__main__":
    T.main()
