#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""batchd against a bucket that lies on purpose (tests/remote/s3hostile.py,
which this starts on loopback; no moto needed).

Each test starts its own daemon on a cache of its own, points it at the
hostile server configured for one attack, and asserts the outcome: a
claimed size decides no allocation (the daemon's RSS and its chunk tables
stay small, the refusal names the figures); a failed open of thousands of
listed keys leaves no descriptor and no empty object behind, and a local
dataset opens after it; an ETag carrying header bytes is refused before
it is ever sent back; an index larger than the cache is refused at
once, naming the figures, and the fetcher serves other opens after it.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import batchd_testlib as T  # noqa: E402
import batchclient  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
BUCKET = "hostile"
KiB = 1 << 10
MiB = 1 << 20
TiB = 1 << 40


class Hostile:
    """The s3hostile.py server of this module."""

    def start(self, top):
        port_file = os.path.join(top, "hostile.port")
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        self.log = open(os.path.join(top, "hostile.log"), "wb")
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "s3hostile.py"),
                                      "--port-file", port_file], stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 20
        while not os.path.exists(port_file):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("s3hostile.py did not start")
            time.sleep(0.02)
        with open(port_file) as f:
            self.endpoint = f"http://127.0.0.1:{int(f.read())}"

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self.log.close()

    def ctl(self, what, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.endpoint}/__hostile/{what}", data=data,
                                     method="GET" if data is None else "POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.load(r)

    def configure(self, objects=None, listings=None):
        self.ctl("config", {"objects": objects or {}, "listings": listings or {}})
        self.ctl("reset", {})


H = Hostile()


def setUpModule():
    T.require_tools()
    H.top = tempfile.mkdtemp(prefix="bd-hostile-")
    H.start(H.top)


def tearDownModule():
    H.stop()


class HostileDaemon(T.Daemon):
    """A batchd whose remote is s3://hostile/p on the hostile server, unsigned."""

    def __init__(self, directory, max_size="256M", chunk="4M", timeout=10, min_rate="16K",
                 memory="256M", extra="", nofile=None):
        super().__init__(directory, memory=memory)
        self.nofile = nofile
        self.cache = os.path.join(directory, "cache")
        self.conf = os.path.join(directory, "batchd.conf")
        with open(self.conf, "w") as f:
            f.write(f"[datasets]\nroot = {self.root}\nremote = s3://{BUCKET}/p\n\n"
                    f"[remote]\nendpoint = {H.endpoint}\nregion = us-east-1\naddressing = path\n"
                    f"retries = 1\ntimeout = {timeout}\nmin_rate = {min_rate}\n\n"
                    f"[cache]\ndir = {self.cache}\nmax_size = {max_size}\nchunk = {chunk}\n{extra}")

    def start(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        argv = [T.BATCHD, "--no-config", "-c", self.conf, "--socket", self.sock, "--log-level",
                "debug", "--memory", self.memory, "--direct", self.direct]
        if self.nofile:
            argv = ["prlimit", f"--nofile={self.nofile}:{self.nofile}", "--"] + argv
        return self.spawn(argv, env=env, timeout=20)

    def rss(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def fds(self):
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def cache_status(self):
        return batchclient.status(self.sock)["remote"]["cache"]


class HostileCase(unittest.TestCase):
    def daemon(self, tag, **kw):
        d = HostileDaemon(tempfile.mkdtemp(prefix=f"{tag}-", dir=H.top), **kw)
        self.addCleanup(self.stop, d)
        return d.start()

    def stop(self, d):
        rc = d.stop()
        self.assertEqual(rc, 0, f"batchd exited with {rc}:\n{d.tail()}")

    def open_error(self, d, dataset):
        with self.assertRaises(batchclient.BatchdError, msg=f"{dataset} opened") as cm:
            ld = batchclient.Loader(dataset, 8, socket=d.sock, timeout=60)
            ld.close()
        return str(cm.exception)

    def settle(self, d, what, want, timeout=10):
        """Wait (the fetcher syncs each second) until what() <= want; @return its last value."""
        deadline = time.monotonic() + timeout
        while True:
            got = what()
            if got <= want or time.monotonic() > deadline:
                return got
            time.sleep(0.2)


def trickling_blocks(top, name, others=None):
    """Serve a pack at p/NAME whose header and index come at once and whose
    block chunks (64K) trickle at 100 B/s; others: more objects to serve."""
    path = small_pack(top, name, n=64, size=16 << 10, block_size="16K")
    size = os.path.getsize(path)
    H.configure(dict({f"p/{name}": {"file": path, "rate": 100, "slow_from": 64 << 10,
                                    "slow_to": size - (128 << 10)}}, **(others or {})))


def trickling(name):
    """GETs of p/NAME the server is trickling now."""
    return H.ctl("stats")["trickling_keys"].get(f"p/{name}", 0)


def wait_trickling(name, want, timeout=20):
    """Wait until at least want GETs of p/NAME trickle; @return how many do."""
    deadline = time.monotonic() + timeout
    while trickling(name) < want and time.monotonic() < deadline:
        time.sleep(0.05)
    return trickling(name)


# ---- 1. sizes the bucket claims ----------------------------------------------------------------


class Claims(HostileCase):
    def test_over_s3s_limit_is_not_believed(self):
        H.configure({"p/huge.bpk": {"claim": 15 * TiB}})
        d = self.daemon("claim15t", chunk="64K")
        err = self.open_error(d, f"s3://{BUCKET}/p/huge.bpk")
        self.assertIn("over S3's 5 TiB limit", err)
        self.assertLess(d.rss(), 200 * MiB)

    def test_claims_cost_no_table(self):
        # 64 listed objects claiming 5 TiB each, in 64 KiB chunks: a table
        # sized by the claims would take 80 million chunks each. The tables
        # hold a record per chunk read instead: the first shard's footer,
        # zeros, and the open fails there.
        H.configure(listings={"p/claims/": {"generate": {"count": 64, "size": 5 * TiB}}})
        d = self.daemon("claims", chunk="64K")
        err = self.open_error(d, f"s3://{BUCKET}/p/claims")
        self.assertIn("EBADMSG", err)
        c = d.cache_status()
        self.assertLessEqual(c["table_bytes"], c["table_max"])
        self.assertLess(c["table_bytes"], 256 * KiB, c)
        self.assertLess(d.rss(), 200 * MiB)

    def test_a_believed_claim_costs_what_is_read(self):
        # 1 TiB in 4 MiB chunks is believed; the footer read at its end is
        # zeros and the open fails, having spent a record or two, not a
        # table of the claimed size.
        H.configure({"p/tera.bpk": {"claim": TiB}})
        d = self.daemon("claim1t")
        base = d.rss()
        err = self.open_error(d, f"s3://{BUCKET}/p/tera.bpk")
        self.assertIn("EBADMSG", err)
        c = d.cache_status()
        self.assertLess(c["table_bytes"], 1 * MiB, c)
        self.assertLess(d.rss() - base, 64 * MiB)


# ---- 2. servers that hold on ------------------------------------------------------------------


class Slow(HostileCase):
    def test_a_trickle_fails_the_open_within_its_deadline(self):
        # 256 KiB at 2 KB/s would take two minutes; far under min_rate 64K
        # over timeout 2 s, each GET fails after about 2 s, once retried:
        # the open fails within seconds, then SIGTERM is quick.
        top = tempfile.mkdtemp(prefix="trickle-", dir=H.top)
        H.configure({"p/slow.bpk": {"file": small_pack(top, "slow.bpk", size=4096), "rate": 2000}})
        d = self.daemon("trickle", timeout=2, min_rate="64K")
        t0 = time.monotonic()
        err = self.open_error(d, f"s3://{BUCKET}/p/slow.bpk")
        took = time.monotonic() - t0
        self.assertLess(took, 30, f"the open waited {took:.1f} s on a trickle: {err}")
        self.assertIn("slow.bpk", err)
        t0 = time.monotonic()
        self.stop(d)
        self.assertLess(time.monotonic() - t0, 10, "SIGTERM waited on the trickle")

    def test_sigterm_ends_an_open_stuck_on_a_bucket(self):
        # No rate floor and a long timeout: the open's GET would trickle for
        # two minutes. SIGTERM fails it at once and the daemon exits.
        top = tempfile.mkdtemp(prefix="stuck-", dir=H.top)
        H.configure({"p/stuck.bpk": {"file": small_pack(top, "stuck.bpk", size=4096), "rate": 2000}})
        d = self.daemon("stuck", timeout=600, min_rate="0")
        errors = []

        def opener():
            try:
                batchclient.Loader(f"s3://{BUCKET}/p/stuck.bpk", 8, socket=d.sock, timeout=120)
            except Exception as e:  # noqa: BLE001 - any failure is the outcome wanted
                errors.append(e)
        th = threading.Thread(target=opener)
        th.start()
        deadline = time.monotonic() + 20
        while H.ctl("stats")["gets"] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        t0 = time.monotonic()
        self.stop(d)
        took = time.monotonic() - t0
        th.join(30)
        self.assertLess(took, 5, f"SIGTERM took {took:.1f} s with an open stuck on a bucket")
        self.assertEqual(len(errors), 1, "the stuck open did not fail")

    def test_opens_stuck_on_a_bucket_leave_local_opens_served(self):
        # Six opens trickling for minutes (no rate floor) would hold every
        # thread of libuv's pool; remote opens have threads of their own,
        # at most half of them for one user, so a local open is served.
        top = tempfile.mkdtemp(prefix="stuckopens-", dir=H.top)
        H.configure({f"p/stuck{i}.bpk": {"file": small_pack(top, f"stuck{i}.bpk", size=4096),
                                         "rate": 500} for i in range(6)})
        d = self.daemon("stuckopens", timeout=600, min_rate="0")
        os.rename(small_pack(d.dir, "local.bpk"), os.path.join(d.root, "local.bpk"))
        errors = []

        def opener(i):
            try:
                batchclient.Loader(f"s3://{BUCKET}/p/stuck{i}.bpk", 8, socket=d.sock, timeout=120)
            except Exception as e:  # noqa: BLE001 - failing at the stop is the outcome wanted
                errors.append(e)
        threads = [threading.Thread(target=opener, args=(i,), daemon=True) for i in range(6)]
        for th in threads:
            th.start()
        def opens_trickling():
            keys = H.ctl("stats")["trickling_keys"]
            return sum(keys.get(f"p/stuck{i}.bpk", 0) for i in range(6))
        deadline = time.monotonic() + 20
        while opens_trickling() < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertGreaterEqual(opens_trickling(), 2, "the remote opens never started")
        t0 = time.monotonic()
        ld = batchclient.Loader("local.bpk", 8, socket=d.sock, timeout=30)
        self.assertEqual(sum(len(b) for b in ld), 64)
        ld.close()
        took = time.monotonic() - t0
        self.assertLess(took, 5, f"a local open took {took:.1f} s behind remote ones")
        # At most half the remote pool is one user's: two trickle, four wait.
        self.assertEqual(opens_trickling(), 2)
        self.stop(d)
        for th in threads:
            th.join(30)
        self.assertEqual(len(errors), 6, "the stuck opens did not fail at the stop")

    def test_an_endless_listing_ends(self):
        H.configure(listings={"p/endless/": {"endless": True}})
        d = self.daemon("endless")
        t0 = time.monotonic()
        err = self.open_error(d, f"s3://{BUCKET}/p/endless")
        self.assertIn("goes on past 146 pages", err)
        self.assertLess(time.monotonic() - t0, 30)
        self.assertLessEqual(H.ctl("stats")["lists"], 146)


# ---- 3. one slow bucket, the same user's other sessions ---------------------------------------


class SameUser(HostileCase):
    def test_a_stuck_remote_session_leaves_the_users_local_one_served(self):
        # The remote pack opens (its header and index chunks come at once),
        # then every block chunk trickles at 100 B/s with no rate floor: its
        # session's reads are stuck. The same uid's local session must still
        # get every batch.
        trickling_blocks(tempfile.mkdtemp(prefix="sameuid-", dir=H.top), "slow.bpk")
        # One I/O thread at queue depth 2: four blocks in flight a user, which
        # the remote session's eight batches of four blocks would all take.
        d = self.daemon("sameuid", chunk="64K", timeout=600, min_rate="0",
                        extra="\n[io]\nthreads = 1\nqueue_depth = 2\n")
        os.rename(small_pack(d.dir, "local.bpk", n=256, size=2048), os.path.join(d.root, "local.bpk"))
        stuck = batchclient.Loader(f"s3://{BUCKET}/p/slow.bpk", 4, socket=d.sock, timeout=120,
                                   prefetch=8)
        got = []
        th = threading.Thread(target=lambda: got.extend(b.ids for b in stuck), daemon=True)
        th.start()
        self.assertGreater(wait_trickling("slow.bpk", 1), 0,
                           "no block read of the remote session trickles")
        t0 = time.monotonic()
        ld = batchclient.Loader("local.bpk", 16, socket=d.sock, timeout=30)
        n = sum(len(b) for b in ld)
        took = time.monotonic() - t0
        ld.close()
        self.assertEqual(n, 256)
        self.assertLess(took, 10, f"the local session of the same uid took {took:.1f} s")
        self.stop(d)
        th.join(30)


# ---- 2 and 3. one user's stuck fetches, another user's dataset --------------------------------


class Shares(HostileCase):
    def test_a_users_stuck_fetches_leave_another_user_requests(self):
        # Four requests in flight at most. Root's session reads a pack whose
        # block chunks trickle at 100 B/s with no rate floor: alone it may
        # hold three of the four, so uid 60001's open of another pack in
        # the same bucket finds one and is served.
        if os.geteuid() != 0 or not shutil.which("setpriv"):
            self.skipTest("needs root and setpriv to run a client as another user")
        top = tempfile.mkdtemp(prefix="shares-", dir=H.top)
        trickling_blocks(top, "slowblocks.bpk", {"p/fast.bpk": {"file": small_pack(top, "fast.bpk")}})
        os.chmod(H.top, 0o755)
        d = self.daemon("shares", chunk="64K", timeout=600, min_rate="0",
                        extra="\n[daemon]\nsocket_mode = 0666\n[remote]\nrequests = 4\n")
        os.chmod(d.dir, 0o755)
        stuck = batchclient.Loader(f"s3://{BUCKET}/p/slowblocks.bpk", 4, socket=d.sock,
                                   timeout=120, prefetch=8)
        th = threading.Thread(target=lambda: [None for _ in stuck], daemon=True)
        th.start()
        wait_trickling("slowblocks.bpk", 3)
        time.sleep(0.5)
        self.assertEqual(trickling("slowblocks.bpk"), 3, "root's share alone is 3 of 4 requests")
        code = ("import batchclient, sys\n"
                f"ld = batchclient.Loader('s3://{BUCKET}/p/fast.bpk', 8, socket={d.sock!r}, timeout=60)\n"
                "print(sum(len(b) for b in ld))\n")
        env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "..", "client", "python"))
        t0 = time.monotonic()
        p = subprocess.run(["setpriv", "--reuid=60001", "--regid=60001", "--clear-groups",
                            sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=90, env=env)
        took = time.monotonic() - t0
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.strip(), "64")
        self.assertLess(took, 20, f"another user's remote dataset took {took:.1f} s")
        self.stop(d)
        th.join(30)


class Abandoned(HostileCase):
    def test_a_closed_sessions_fetches_are_dropped(self):
        # A session whose block chunks trickle at 100 B/s with no rate floor
        # holds three of four requests and has more chunks queued behind
        # them. Once it closes, nobody wants them: the requests on the wire
        # are cut (the server sees its connections close), the queued ones
        # are never sent, the session is gone from the status, and a new
        # session of the same pack gets the requests again.
        trickling_blocks(tempfile.mkdtemp(prefix="abandon-", dir=H.top), "abandoned.bpk")
        d = self.daemon("abandon", chunk="64K", timeout=600, min_rate="0",
                        extra="\n[remote]\nrequests = 4\n")
        def remote():
            return batchclient.status(d.sock)["remote"]
        ld = batchclient.Loader(f"s3://{BUCKET}/p/abandoned.bpk", 4, socket=d.sock,
                                timeout=120, prefetch=8)
        self.assertEqual(wait_trickling("abandoned.bpk", 3), 3,
                         "the session's share is 3 of 4 requests")
        before = remote()
        self.assertGreater(before["queued"], 0, f"no fetch queued behind the wire: {before}")
        self.assertEqual(before["dropped"], 0)
        gets = H.ctl("stats")["gets"]
        ld.close()
        self.assertEqual(self.settle(d, lambda: trickling("abandoned.bpk"), 0), 0,
                         "the server still sends to batchd")
        after = self.settle(d, lambda: remote()["inflight"] + remote()["queued"], 0)
        self.assertEqual(after, 0, f"fetches left for a closed session: {remote()}")
        st = remote()
        self.assertGreaterEqual(st["dropped"], 3 + before["queued"],
                                f"fewer fetches dropped than were wanted: {before} -> {st}")
        self.assertLessEqual(H.ctl("stats")["gets"], gets,
                             "fetches sent after their session closed")
        self.assertEqual(self.settle(d, lambda: len(batchclient.status(d.sock)["sessions"]), 0), 0,
                         "the closed session is still listed")
        # The chunks were dropped, not failed: the same pack opens again and
        # its block chunks are asked for anew.
        ld = batchclient.Loader(f"s3://{BUCKET}/p/abandoned.bpk", 4, socket=d.sock,
                                timeout=120, prefetch=1)
        self.assertGreater(wait_trickling("abandoned.bpk", 1), 0,
                           "the reopened session fetched nothing")
        ld.close()
        self.assertEqual(remote()["errors"], 0, "a dropped fetch counted as an error")


# ---- 4. what failed opens leave -----------------------------------------------------------------


class FailedOpens(HostileCase):
    def test_thousands_of_listed_keys_leave_no_descriptor(self):
        # 3000 listed *.bpk keys whose bytes are zeros: the open makes a
        # cache object for each, then fails at the first footer.
        H.configure(listings={"p/many/": {"generate": {"count": 3000, "size": 1 << 20}}})
        d = self.daemon("manykeys")
        os.rename(small_pack(d.dir, "local.bpk"), os.path.join(d.root, "local.bpk"))
        base = d.fds()
        err = self.open_error(d, f"s3://{BUCKET}/p/many")
        self.assertIn("EBADMSG", err)
        fds = self.settle(d, d.fds, base + 2)
        self.assertLessEqual(fds, base + 2, "descriptors left behind by the failed open")
        objects = self.settle(d, lambda: d.cache_status()["objects"], 2)
        self.assertLessEqual(objects, 2, "empty objects left behind by the failed open")
        left = len(os.listdir(os.path.join(d.cache, "objects")))
        self.assertLessEqual(left, 4, f"{left} files left in the cache directory")
        # And another open, of a local dataset, is served.
        ld = batchclient.Loader("local.bpk", 8, socket=d.sock, timeout=60)
        self.assertEqual(sum(len(b) for b in ld), 64)
        ld.close()


    def test_remote_opens_leave_descriptors_for_local_ones(self):
        # RLIMIT_NOFILE 200: the remote cache and its datasets may hold 100
        # descriptors, three a pack (the cache's, the shard's, the read's).
        # A remote dataset of 20 packs opens and stays open (60); a second
        # one is refused, naming the figures, though the daemon has room
        # for it: that room is the local datasets', and a local dataset of
        # 24 packs (48 descriptors) opens after it.
        top = tempfile.mkdtemp(prefix="nofile-", dir=H.top)
        one = small_pack(top, "one.bpk", n=4)
        H.configure({f"p/w{w}/s{i:02d}.bpk": {"file": one} for w in "ab" for i in range(20)})
        d = self.daemon("nofile", nofile=200)
        local = os.path.join(d.root, "local")
        os.mkdir(local)
        for i in range(24):
            shutil.copy(one, os.path.join(local, f"s{i:02d}.bpk"))
        self.assertEqual(d.cache_status()["files_max"], 100)
        base = d.fds()
        wa = batchclient.Loader(f"s3://{BUCKET}/p/wa", 8, socket=d.sock, timeout=60)
        self.assertEqual(d.cache_status()["files"], 60)
        # What the cache counts is what the daemon holds, besides the
        # session's own few (its connection, ring, memory): one a pack off
        # would be 20.
        extra = d.fds() - base - 60
        self.assertTrue(0 <= extra <= 12, f"{d.fds()} descriptors, {base} before")
        err = self.open_error(d, f"s3://{BUCKET}/p/wb")
        self.assertIn("EMFILE", err)
        self.assertIn("hold 100 descriptors", err)
        self.assertIn("RLIMIT_NOFILE, 200", err)
        self.assertEqual(self.settle(d, lambda: d.cache_status()["files"], 60), 60)
        ld = batchclient.Loader("local", 16, socket=d.sock, timeout=60)
        self.assertEqual(sorted(i for b in ld for i in b.ids), list(range(96)))
        ld.close()
        # Once the first closes, the second fits (the first's version, kept
        # for reopening, gives its descriptors back), and is served.
        self.assertEqual(sum(len(b) for b in wa), 80)
        wa.close()
        wb = batchclient.Loader(f"s3://{BUCKET}/p/wb", 8, socket=d.sock, timeout=60)
        self.assertEqual(sum(len(b) for b in wb), 80)
        self.assertEqual(self.settle(d, lambda: d.cache_status()["files"], 60), 60)
        wb.close()


# ---- 7. reads larger than the cache ----------------------------------------------------------


def hashed_pack(top, name, n=64, size=100, block_size=None):
    """A local pack of n samples, sample i being size + i random bytes.
    @return (its path, [sha256 of sample i])."""
    src = os.path.join(top, name + ".src")
    os.makedirs(src)
    shas = []
    for i in range(n):
        data = os.urandom(size + i)
        shas.append(hashlib.sha256(data).hexdigest())
        with open(os.path.join(src, f"s{i:03d}"), "wb") as f:
            f.write(data)
    return T.pack(os.path.join(top, name), src, block_size=block_size, extra=["--no-dict"]), shas


def small_pack(top, name, n=64, size=100, block_size=None):
    """hashed_pack's path alone."""
    return hashed_pack(top, name, n, size, block_size)[0]


class Larger(HostileCase):
    def test_an_index_over_max_size_is_refused_at_once(self):
        # 950,000 one-byte records, one block each: about 69 MiB of index,
        # more than the smallest max_size (64M) holds.
        top = tempfile.mkdtemp(prefix="bigindex-", dir=H.top)
        rec = os.path.join(top, "records")
        with open(rec, "wb") as f:
            f.write(os.urandom(950_000))
        big = T.pack(os.path.join(top, "big.bpk"), records=(1, rec))
        small = small_pack(top, "small.bpk")
        H.configure({"p/big.bpk": {"file": big}, "p/small.bpk": {"file": small}})
        d = self.daemon("bigindex", max_size="64M")
        t0 = time.monotonic()
        err = self.open_error(d, f"s3://{BUCKET}/p/big.bpk")
        self.assertIn("needs more than [cache] max_size (64.0 MiB) at once", err)
        self.assertLess(time.monotonic() - t0, 30, "the refusal waited for the fetcher")
        # The fetcher's queue is not held by it: another remote open is served.
        ld = batchclient.Loader(f"s3://{BUCKET}/p/small.bpk", 8, socket=d.sock, timeout=60)
        self.assertEqual(sum(len(b) for b in ld), 64)
        ld.close()


# ---- 11. a full cache disk ----------------------------------------------------------------------


class FullDisk(HostileCase):
    def test_a_full_disk_evicts_and_retries(self):
        # The cache on a 2 MiB tmpfs (max_size says 64M): the second pack's
        # chunks find the disk full of the first's, which are evicted to
        # make room; every batch of both is exact.
        top = tempfile.mkdtemp(prefix="fulldisk-", dir=H.top)
        a, sa = hashed_pack(top, "a.bpk", n=40, size=30000, block_size="64K")
        b, sb = hashed_pack(top, "b.bpk", n=40, size=30000, block_size="64K")
        H.configure({"p/a.bpk": {"file": a}, "p/b.bpk": {"file": b}})
        d = HostileDaemon(tempfile.mkdtemp(prefix="fulldisk-", dir=H.top), max_size="64M",
                          chunk="64K")
        os.makedirs(d.cache)
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", d.cache],
                          capture_output=True).returncode != 0:
            self.skipTest("mounting a tmpfs needs root")
        self.addCleanup(subprocess.run, ["umount", "-l", d.cache])
        d.start()
        self.addCleanup(self.stop, d)
        for name, shas in (("a.bpk", sa), ("b.bpk", sb), ("a.bpk", sa)):
            ld = batchclient.Loader(f"s3://{BUCKET}/p/{name}", 4, socket=d.sock, timeout=60)
            got = {}
            for bt in ld:
                for sid, view in zip(bt.ids, bt.samples):
                    got[sid] = hashlib.sha256(view).hexdigest()
            ld.close()
            self.assertEqual(got, dict(enumerate(shas)), f"{name}: the samples delivered")
        self.assertIn("the disk is full (ENOSPC)", open(d.log, errors="replace").read())


# ---- 12. header bytes in an ETag -------------------------------------------------------------


class Headers(HostileCase):
    def test_etag_with_crlf_is_refused_before_it_is_sent(self):
        H.configure(listings={"p/inject/": {"generate": {
            "count": 2, "size": 1 << 20, "etag": '"e"\r\nX-Injected: 1'}}})
        d = self.daemon("etag")
        err = self.open_error(d, f"s3://{BUCKET}/p/inject")
        self.assertIn("control characters", err)
        sent = [h for h in H.ctl("stats")["headers"] if h[0].lower() == "x-injected"]
        self.assertEqual(sent, [], "an injected header reached the server")


if __name__ == "__main__":
    unittest.main(verbosity=2)
