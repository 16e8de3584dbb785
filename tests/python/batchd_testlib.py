# SPDX-License-Identifier: MIT
"""What the Python tests need around a real batchd: datasets made with
batchd-pack, a daemon on a temporary socket, and reference bytes.

Why a separate file: the test files should read as behaviours ("an epoch
delivers every sample once"); the plumbing (fork/exec, temporary trees,
waiting for a socket) lives here, as tests/lib/daemon-testlib.c does for C.

Environment (meson test sets it): BATCHD and BATCHD_PACK, the built
binaries; BATCHCLIENT_LIB, the built libbatchclient; PYTHONPATH reaching
client/python. Run a file by hand the same way:

    BATCHD=build/daemon/batchd BATCHD_PACK=build/tools/batchd-pack \\
    BATCHCLIENT_LIB=build/client/libbatchclient.so.0 PYTHONPATH=client/python \\
    /usr/bin/python3 tests/python/test_epochs.py
"""
import ctypes
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

SKIP = 77

BATCHD = os.environ.get("BATCHD", "")
BATCHD_PACK = os.environ.get("BATCHD_PACK", "")

if os.environ.get("BATCHCLIENT_TEST_SKIP"):
    print(f"SKIP: {os.environ['BATCHCLIENT_TEST_SKIP']}")
    sys.exit(SKIP)

try:
    import batchclient
except ImportError as e:
    print(f"cannot import batchclient ({e}); set PYTHONPATH=client/python and "
          "BATCHCLIENT_LIB (meson test does)", file=sys.stderr)
    sys.exit(1)


def require_tools():
    for name, path in (("BATCHD", BATCHD), ("BATCHD_PACK", BATCHD_PACK)):
        if not path or not os.access(path, os.X_OK):
            print(f"set {name} to the built binary (meson test does)", file=sys.stderr)
            sys.exit(1)


def skip(why):
    """Exit 77 (meson's skip) saying why."""
    print(f"SKIP: {why}")
    sys.exit(SKIP)


def _pdeathsig():
    # The daemon dies with the test, even when the test is killed.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def tmpdir(tag):
    """A fresh directory with a short path (socket paths must fit sun_path)."""
    base = os.environ.get("TMPDIR", "")
    base = base if base and len(base) < 40 else "/tmp"
    return tempfile.mkdtemp(prefix=f"bc-py-{tag}-", dir=base)


# ---- datasets ------------------------------------------------------------------------------


def record_bytes(i, size, seed=1):
    """Record i of a records file: its id in 8 bytes, then compressible noise."""
    rng = random.Random(seed * 1_000_003 + i)
    body = rng.randbytes(max(1, (size - 8) // 4)) * 4
    return (i.to_bytes(8, "little") + body)[:size].ljust(size, b"\0")


def write_records(path, n, size, seed=1):
    with open(path, "wb") as f:
        for i in range(n):
            f.write(record_bytes(i, size, seed))


def write_files(dirpath, sizes, seed=2):
    """One file per sample, named so bytewise order is id order. @return the samples."""
    os.makedirs(dirpath)
    out = []
    for i, n in enumerate(sizes):
        rng = random.Random(seed * 7919 + i)
        data = (rng.randbytes((n + 3) // 4) * 4)[:n]
        with open(os.path.join(dirpath, f"{i:06d}"), "wb") as f:
            f.write(data)
        out.append(data)
    return out


def pack(out, *inputs, records=None, block_size=None, shard_size=None, extra=()):
    """batchd-pack create OUT INPUT... (or --records SIZE FILE)."""
    argv = [BATCHD_PACK, "create", out, *inputs, "--threads", "2"]
    if records is not None:
        argv += ["--records", str(records[0]), records[1]]
    if block_size:
        argv += ["--block-size", str(block_size)]
    if shard_size:
        argv += ["--shard-size", str(shard_size)]
    argv += list(extra)
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {p.returncode}: {p.stderr}")
    return out


def cat(path, sample_id):
    """`batchd-pack cat PATH ID`: the reference bytes of a sample."""
    p = subprocess.run([BATCHD_PACK, "cat", path, str(sample_id)], capture_output=True)
    if p.returncode != 0:
        raise RuntimeError(f"batchd-pack cat {path} {sample_id}: {p.stderr.decode()}")
    return p.stdout


def real_files(patterns, count, min_size=1, max_size=1 << 20):
    """Up to count existing files matching the glob patterns, in sorted
    order, each of min_size .. max_size bytes: the installed system's own
    files (licences, copyright notices, images), bytes no test wrote. The
    cap keeps what the tests size for the same whatever else is installed
    (a wallpaper package's photographs are megabytes each). Exits 77 when
    fewer than count exist."""
    import glob
    out, seen = [], set()
    for pat in patterns:
        for p in sorted(glob.glob(pat, recursive=True)):
            real = os.path.realpath(p)
            if (real in seen or not os.path.isfile(real)
                    or not min_size <= os.path.getsize(real) <= max_size):
                continue
            seen.add(real)
            out.append(real)
            if len(out) == count:
                return out
    skip(f"only {len(out)} files match {patterns}, {count} wanted")


def read(path):
    with open(path, "rb") as f:
        return f.read()


def same_bytes(tc, got, want, ctx):
    """tc.fail unless got == want, saying where they part (not both reprs:
    samples are kilobytes)."""
    got, want = bytes(got), bytes(want)
    if got != want:
        at = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y),
                  min(len(got), len(want)))
        tc.fail(f"{ctx}: {len(got)} bytes, expected {len(want)}; they differ from byte {at}")


def pack_fails(out, *args):
    """Run `batchd-pack create OUT ARGS...` expecting a refusal. @return (exit status, stderr)."""
    argv = [BATCHD_PACK, "create", out, *args]
    p = subprocess.run(argv, capture_output=True, text=True)
    return p.returncode, p.stderr


# ---- the daemon --------------------------------------------------------------------------------


class Daemon:
    """A batchd on dir/sock serving dir/root."""

    def __init__(self, directory, memory="256M", direct="off"):
        self.dir = directory
        self.root = os.path.join(directory, "root")
        self.sock = os.path.join(directory, "sock")
        self.log = os.path.join(directory, "batchd.log")
        self.memory = memory
        self.direct = direct      # buffered reads: the page cache keeps the tests off the disk
        self.extra = []           # more flags, after the others (--config FILE: the file's keys)
        self.proc = None
        os.makedirs(self.root, exist_ok=True)

    def path(self, name):
        return os.path.join(self.root, name)

    def start(self):
        # --no-config: never the machine's SYSCONFDIR/batchd/batchd.conf.
        argv = [BATCHD, "--no-config", "--socket", self.sock, "--root", self.root, "--log-level", "debug",
                "--memory", self.memory, "--direct", self.direct, *self.extra]
        return self.spawn(argv)

    def spawn(self, argv, env=None, timeout=10):
        """Run argv (a batchd command line on self.sock) and wait until it answers; @return self."""
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         env=env, preexec_fn=_pdeathsig)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"batchd exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                batchclient.status(self.sock)
                return self
            except batchclient.ConnectError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"batchd never answered on {self.sock}:\n{self.tail()}")
                time.sleep(0.01)

    def stop(self):
        """SIGTERM and wait. @return the exit status (0 = a clean stop)."""
        if not self.proc:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.proc = None
        return rc

    def kill(self):
        self.proc.kill()
        self.proc.wait()
        self.proc = None

    def tail(self, lines=30):
        try:
            with open(self.log, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return "(no log)"

    def sessions(self):
        return batchclient.status(self.sock)["sessions"]


class DaemonCase(unittest.TestCase):
    """A TestCase class whose tests share one daemon (setUpClass makes the
    datasets of make_datasets() under its root). tearDownClass asserts the
    daemon stops cleanly with no session left open."""

    @classmethod
    def make_datasets(cls, d):
        pass

    @classmethod
    def setUpClass(cls):
        require_tools()
        cls.tmp = tmpdir(cls.__name__.lower()[:12])
        cls.daemon = Daemon(cls.tmp)
        try:
            cls.make_datasets(cls.daemon)
            cls.daemon.start()
        except BaseException:
            cls.daemon.stop()
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        import gc
        gc.collect()
        left = []
        if cls.daemon.proc:
            # A closed session ends once its reads in flight finish: give it a moment.
            deadline = time.monotonic() + 5
            try:
                while (left := cls.daemon.sessions()) and time.monotonic() < deadline:
                    time.sleep(0.01)
            except batchclient.BatchdError:
                pass
        rc = cls.daemon.stop()
        tail = cls.daemon.tail()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        if left:
            raise AssertionError(f"sessions left open at the end: {left}")
        if rc != 0:
            raise AssertionError(f"batchd exited with {rc}:\n{tail}")

    def setUp(self):
        # Tests share the daemon: each starts once the sessions earlier ones
        # closed have ended (a session ends when its reads in flight finish).
        left = self.wait_sessions(0)
        if left:
            raise AssertionError(f"sessions of an earlier test still open: {left}")

    def loader(self, dataset, batch_size, **kw):
        kw.setdefault("socket", self.daemon.sock)
        kw.setdefault("timeout", 20)
        ld = batchclient.Loader(dataset, batch_size, **kw)
        self.addCleanup(ld.close)
        return ld

    def wait_sessions(self, n, seconds=5):
        """Wait until the daemon lists n sessions. @return the list."""
        deadline = time.monotonic() + seconds
        while True:
            s = self.daemon.sessions()
            if len(s) == n or time.monotonic() > deadline:
                return s
            time.sleep(0.01)


def main():
    """unittest.main, with the module's name in failures."""
    unittest.main(verbosity=2)
