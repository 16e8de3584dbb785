#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Failures become clear Python exceptions carrying the daemon's words: a
missing dataset, a path outside the roots, no daemon at the socket, a
daemon killed or stopped mid-epoch, a corrupt block (that batch fails, the
epoch goes on), bad arguments. GPU placement without CUDA: test_device.py."""
import errno
import os
import shutil
import signal
import struct
import time

import batchclient
import batchd_testlib as T

N, SIZE = 300, 128


class Errors(T.DaemonCase):
    @classmethod
    def make_datasets(cls, d):
        cls.rec = os.path.join(cls.tmp, "rec.bin")
        T.write_records(cls.rec, N, SIZE)
        T.pack(d.path("rec.bpk"), records=(SIZE, cls.rec))
        # bad.bpk: one byte flipped in the middle of the block data.
        shutil.copy(d.path("rec.bpk"), d.path("bad.bpk"))
        with open(d.path("bad.bpk"), "r+b") as f:
            data_offset = struct.unpack_from("<Q", f.read(64), 48)[0]
            f.seek(-80, os.SEEK_END)
            index_offset = struct.unpack_from("<Q", f.read(80), 0)[0]
            f.seek((data_offset + index_offset) // 2)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0x40]))
            f.flush()
            os.fsync(f.fileno())

    def private_daemon(self):
        """A daemon of this test's own (to kill), serving rec.bpk."""
        d = T.Daemon(T.tmpdir("kill"))
        self.addCleanup(shutil.rmtree, d.dir, True)
        os.link(self.daemon.path("rec.bpk"), d.path("rec.bpk"))
        self.addCleanup(d.stop)
        return d.start()

    def test_missing_dataset(self):
        with self.assertRaises(batchclient.BatchdError) as cm:
            batchclient.Loader("no-such.bpk", 8, socket=self.daemon.sock)
        e = cm.exception
        self.assertEqual(e.errno, errno.ENOENT)
        self.assertIn("no-such.bpk", str(e))
        self.assertIn("cannot open dataset", str(e))
        self.assertIn("ENOENT", str(e))
        self.assertTrue(e.message)            # the daemon's own text

    def test_outside_the_roots(self):
        for path in ("../x.bpk", "/etc/passwd"):
            with self.assertRaises(batchclient.BatchdError) as cm:
                batchclient.Loader(path, 8, socket=self.daemon.sock)
            self.assertEqual(cm.exception.errno, errno.EACCES, str(cm.exception))

    def test_no_daemon(self):
        # Nothing at the path: ENOENT; a regular file, not a socket: ECONNREFUSED.
        for sock, err in ((os.path.join(self.tmp, "nothing-here"), errno.ENOENT),
                          (self.rec, errno.ECONNREFUSED)):
            with self.subTest(sock=sock), \
                    self.assertRaises(batchclient.ConnectError) as cm:
                batchclient.Loader("rec.bpk", 8, socket=sock)
            self.assertIn(sock, str(cm.exception))
            self.assertEqual(cm.exception.errno, err, str(cm.exception))
            # libbatchclient's words: how the path was chosen and what to do.
            self.assertIn("(the socket path given)", cm.exception.message)
            self.assertIn("is batchd running? (systemctl start batchd, or batchd --socket PATH)",
                          cm.exception.message)

    def test_no_daemon_at_batchd_socket(self):
        sock = os.path.join(self.tmp, "env-nothing-here")
        old = os.environ.get("BATCHD_SOCKET")
        os.environ["BATCHD_SOCKET"] = sock
        try:
            with self.assertRaises(batchclient.ConnectError) as cm:
                batchclient.Loader("rec.bpk", 8)
        finally:
            if old is None:
                del os.environ["BATCHD_SOCKET"]
            else:
                os.environ["BATCHD_SOCKET"] = old
        e = cm.exception
        self.assertEqual(e.errno, errno.ENOENT, str(e))
        self.assertIn(f"cannot connect to batchd at {sock} (from $BATCHD_SOCKET)", str(e))
        self.assertIn("is batchd running?", str(e))

    def test_socket_not_allowed(self):
        # A listening socket with mode 0: EACCES, and the fix is the group.
        # root passes any mode, so there it cannot be provoked.
        if os.geteuid() == 0:
            self.skipTest("running as root: a socket of mode 0 still lets root in")
        import socket
        path = os.path.join(self.tmp, "mode0.sock")
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.addCleanup(srv.close)
        srv.bind(path)
        srv.listen(1)
        os.chmod(path, 0)
        with self.assertRaises(batchclient.ConnectError) as cm:
            batchclient.Loader("rec.bpk", 8, socket=path)
        self.assertEqual(cm.exception.errno, errno.EACCES, str(cm.exception))
        self.assertIn(path, str(cm.exception))
        self.assertIn("join the batchd group (usermod -aG batchd $USER, then log in again)",
                      str(cm.exception))

    def test_killed_daemon(self):
        d = self.private_daemon()
        ld = self.loader("rec.bpk", 10, socket=d.sock, prefetch=2)
        it = iter(ld)
        next(it)
        d.kill()
        t = time.monotonic()
        got = 0
        with self.assertRaises(batchclient.DaemonGoneError) as cm:
            for _ in range(len(ld)):
                next(it)
                got += 1                 # batches staged before the kill are still whole
        self.assertLess(time.monotonic() - t, 5)
        self.assertLessEqual(got, 4)
        self.assertEqual(cm.exception.errno, errno.EPIPE)
        self.assertIn("daemon is gone", str(cm.exception))
        self.assertIn("rec.bpk", str(cm.exception))
        with self.assertRaises(batchclient.DaemonGoneError):
            ld.set_epoch(5)
            next(iter(ld))

    def test_stopped_daemon(self):
        d = self.private_daemon()
        ld = self.loader("rec.bpk", 10, socket=d.sock, prefetch=2)
        it = iter(ld)
        next(it)
        d.proc.send_signal(signal.SIGTERM)
        with self.assertRaises(batchclient.DaemonGoneError) as cm:
            for _ in range(len(ld)):
                next(it)
        self.assertIn(cm.exception.errno, (errno.ESHUTDOWN, errno.EPIPE))
        self.assertTrue(cm.exception.message)
        ld.close()
        self.assertEqual(d.proc.wait(20), 0, d.tail())     # a clean stop

    def test_timeout_then_resume(self):
        d = self.private_daemon()
        ld = self.loader("rec.bpk", 10, socket=d.sock, prefetch=2, shuffle="none", timeout=0.3)
        it = iter(ld)
        next(it)
        d.proc.send_signal(signal.SIGSTOP)       # a daemon that stops making progress
        try:
            got = 0
            with self.assertRaises(batchclient.WaitTimeout) as cm:
                for _ in range(len(ld)):
                    next(it)
                    got += 1
            self.assertLessEqual(got, 4)         # what was staged before it stopped
            self.assertIsInstance(cm.exception, TimeoutError)
            self.assertEqual(cm.exception.errno, errno.ETIMEDOUT)
            self.assertIn("no batch within 0.3 s", str(cm.exception))
        finally:
            d.proc.send_signal(signal.SIGCONT)
        self.assertEqual(next(it).index, got + 1)   # nothing was lost

    def test_forked_child_cannot_use_the_parents_loader(self):
        ld = self.loader("rec.bpk", 10)
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                iter(ld)
            except RuntimeError as e:
                code = 0 if "fork" in str(e) else 4
            ld.close()                           # must not close the parent's session
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        self.assertEqual(len(next(iter(ld))), 10)

    def test_corrupt_block_fails_one_batch(self):
        ld = self.loader("bad.bpk", 10, shuffle="none")
        failures, ids = [], []
        it = iter(ld)
        while True:
            try:
                b = next(it)
            except batchclient.BatchError as e:
                failures.append(e)
                continue                      # the stream moved past it
            except StopIteration:
                break
            ids += b.ids
        self.assertEqual(len(failures), 1)
        e = failures[0]
        self.assertEqual(e.epoch, 0)
        self.assertIn("bad.bpk", e.message)
        self.assertRegex(e.message, "block")
        lost = set(range(e.batch * 10, e.batch * 10 + 10))
        self.assertEqual(sorted(ids), sorted(set(range(N)) - lost))
        self.assertEqual(ld.position, (1, 0))

    def test_bad_arguments(self):
        sock = self.daemon.sock
        for kw in ({"batch_size": 0}, {"batch_size": "x"}, {"shuffle": "random"},
                   {"seed": -1}, {"prefetch": 0}, {"device": "tpu"}, {"rank": 2, "world": 2},
                   {"timeout": 0}, {"collate": 3}):
            with self.subTest(kw=kw), self.assertRaises(ValueError):
                batchclient.Loader("rec.bpk", **{"batch_size": 8, "socket": sock, **kw})
        with self.assertRaises(batchclient.BatchdError) as cm:   # the daemon's limit
            batchclient.Loader("rec.bpk", 8, socket=sock, prefetch=1000)
        self.assertEqual(cm.exception.errno, errno.EINVAL)
        self.assertIn("prefetch", cm.exception.message)
        self.assertEqual(self.wait_sessions(0), [])


if __name__ == "__main__":
    T.main()
