#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Remote datasets through real batchd daemons, against moto behind
tests/remote/s3proxy.py (tests/remote/test-remote.sh starts both and sets
S3_ENDPOINT, S3_BUCKET, S3_PROXY_CTL and S3_WORKDIR).

Each test starts its own daemons (a temporary conf, socket and cache dir)
and checks what a trainer gets: every sample id once per epoch with the
bytes, label and key of the local pack; the cache reused after a restart
with no GET for block bytes; an object replaced in the bucket never served
from the old cache; epochs exact through 503s and dropped connections; 403
and 404 named with their key; the cache under max_size on disk; eight
ranks on two daemons covering the dataset once; and a wrong secret named
as such. The bucket is written with curl's SigV4 (--aws-sigv4) and by
batchd-pack create s3://, through the proxy, which checks those signatures
too.
"""
import hashlib
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse
import urllib.request

import batchd_testlib as T
import batchclient

ENDPOINT = os.environ.get("S3_ENDPOINT", "")
BUCKET = os.environ.get("S3_BUCKET", "")
CTL = os.environ.get("S3_PROXY_CTL", "")
WORK = os.environ.get("S3_WORKDIR", "")
PREFIX = "ds"
REMOTE = f"s3://{BUCKET}/{PREFIX}"
MULTI = f"{REMOTE}/multi"
CLASSES = 4
PER_CLASS = 160  # 640 samples: world 8 divides them, so a striped epoch has no padding

MiB = 1 << 20


# ---- the proxy and the bucket -------------------------------------------------------------


def ctl(what, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{CTL}/{what}", data=data, method="GET" if data is None else "POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)


def stats():
    return ctl("stats")


def faults(**f):
    ctl("faults", f)


def reset(stats_only=False):
    ctl("reset?what=stats" if stats_only else "reset", {})


def curl(*args):
    """A curl signed for the bucket (BATCHDTEST/BATCHDTEST, us-east-1). @return (status, body)."""
    argv = ["curl", "-sS", "-o", "-", "-w", "\n%{http_code}", "--max-time", "300", "--aws-sigv4",
            "aws:amz:us-east-1:s3", "--user", "BATCHDTEST:BATCHDTEST", *args]
    # Not under a sanitizer build's preload: curl is not instrumented, and
    # hangs at start with libasan preloaded.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    p = subprocess.run(argv, capture_output=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {p.returncode}: {p.stderr.decode()}")
    body, _, code = p.stdout.rpartition(b"\n")
    return int(code), body


def url(key):
    return f"{ENDPOINT}/{BUCKET}/{urllib.parse.quote(key)}"


def put(local, key):
    with open(local, "rb") as f:
        h = hashlib.sha256()
        for block in iter(lambda: f.read(MiB), b""):
            h.update(block)
    code, body = curl("-H", f"x-amz-content-sha256: {h.hexdigest()}", "-T", local, url(key))
    if code != 200:
        raise RuntimeError(f"PUT {key}: HTTP {code}: {body[:300]!r}")


def put_bytes(data, key):
    path = os.path.join(WORK, "upload.tmp")
    with open(path, "wb") as f:
        f.write(data)
    put(path, key)
    os.unlink(path)


def etag(key):
    code, _ = curl("-I", "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-D", os.path.join(WORK, "head"),
                   url(key))
    if code != 200:
        raise RuntimeError(f"HEAD {key}: HTTP {code}")
    with open(os.path.join(WORK, "head")) as f:
        return next(line.split(":", 1)[1].strip() for line in f if line.lower().startswith("etag:"))


def upload_dataset(local, name):
    """A one-file dataset to PREFIX/name, or a shard directory's *.bpk under PREFIX/name/."""
    if os.path.isfile(local):
        put(local, f"{PREFIX}/{name}")
        return [f"{PREFIX}/{name}"]
    keys = []
    for shard in sorted(os.listdir(local)):
        put(os.path.join(local, shard), f"{PREFIX}/{name}/{shard}")
        keys.append(f"{PREFIX}/{name}/{shard}")
    return keys


# ---- packs ---------------------------------------------------------------------------------


def block_region(path):
    """[data_offset, data_end) of a pack: where its blocks lie (lib/pack/PACK.md)."""
    with open(path, "rb") as f:
        f.seek(48)
        data_offset, = struct.unpack("<Q", f.read(8))
        f.seek(-80, os.SEEK_END)
        index_offset, _, block_count = struct.unpack("<QQQ", f.read(24))
        f.seek(index_offset + 56 * (block_count - 1))
        last_off, last_size = struct.unpack("<QQ", f.read(16))
    return data_offset, last_off + last_size


def random_records(path, n, size, seed):
    """n records of incompressible bytes (stored raw: two such packs of one
    shape have the same size). @return each record's sha256."""
    rng = random.Random(seed)
    shas = []
    with open(path, "wb") as f:
        for _ in range(n):
            rec = rng.randbytes(size) if hasattr(rng, "randbytes") else os.urandom(size)
            shas.append(hashlib.sha256(rec).hexdigest())
            f.write(rec)
    return shas


def records_pack(out, n, size, seed, block_size):
    src = out + ".src"
    shas = random_records(src, n, size, seed)
    T.pack(out, records=(size, src), block_size=block_size, extra=["--no-dict"])
    os.unlink(src)
    return {i: (s, None, None) for i, s in enumerate(shas)}


class Data:
    """What setUpModule made: local packs, their keys in the bucket, what each sample must be."""


D = Data()


def make_multi(top):
    """CLASSES class folders of compressible files of many sizes, packed with
    labels and keys into shards of about 512 KiB. @return {id: (sha256, label, key)}."""
    src = os.path.join(top, "multi-src")
    rng = random.Random(11)
    entries = []
    for c in range(CLASSES):
        os.makedirs(os.path.join(src, f"class{c}"))
        for i in range(PER_CLASS):
            n = rng.randrange(500, 14000)
            data = (rng.getrandbits(8 * ((n + 1) // 2)).to_bytes((n + 1) // 2, "little") * 2)[:n]
            key = f"class{c}/s{i:04d}"
            with open(os.path.join(src, key), "wb") as f:
                f.write(data)
            entries.append((key.encode(), hashlib.sha256(data).hexdigest(), c))
    D.multi = os.path.join(top, "multi")
    T.pack(D.multi, src, block_size="32K", shard_size="512K", extra=["--labels", "dirname"])
    entries.sort()  # ids follow the bytewise order of relative paths
    return {i: (sha, c, key.decode()) for i, (key, sha, c) in enumerate(entries)}


def setUpModule():
    T.require_tools()
    if not (ENDPOINT and BUCKET and CTL and WORK):
        print("run through tests/remote/test-remote.sh (it starts moto and the proxy)", file=sys.stderr)
        sys.exit(1)
    D.top = tempfile.mkdtemp(prefix="packs-", dir=WORK)
    D.expect = make_multi(D.top)
    D.shards = sorted(os.listdir(D.multi))
    assert len(D.shards) >= 3, f"multi has {len(D.shards)} shards; the tests want several"
    D.multi_keys = upload_dataset(D.multi, "multi")
    D.regions = {k: block_region(os.path.join(D.multi, s)) for k, s in zip(D.multi_keys, D.shards)}
    # Not part of the dataset: hidden, not *.bpk, or below a subfolder.
    put_bytes(b"not a pack", f"{PREFIX}/multi/.partial.bpk")
    put_bytes(b"notes", f"{PREFIX}/multi/NOTES.txt")
    put(os.path.join(D.multi, D.shards[0]), f"{PREFIX}/multi/sub/extra.bpk")
    reset()


# ---- daemons -------------------------------------------------------------------------------


class RemoteDaemon(T.Daemon):
    """A batchd with a local root, REMOTE as its remote and a cache dir, from
    a conf of its own (--no-config -c). credentials: a file with this secret,
    or None for none (then env reaches the daemon's environment: AWS_* of
    this process never does)."""

    def __init__(self, directory, cache=None, secret="BATCHDTEST", env=None, **settings):
        super().__init__(directory)
        self.cache = cache or os.path.join(directory, "cache")
        self.conf = os.path.join(directory, "batchd.conf")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        self.env.update(env or {})
        s = {"requests": 8, "retries": 5, "timeout": 10, "max_size": "1G", "chunk": "256K"}
        s.update(settings)
        cred = ""
        if secret is not None:
            path = os.path.join(directory, "s3.credentials")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(f"[default]\naws_access_key_id = BATCHDTEST\naws_secret_access_key = {secret}\n")
            cred = f"credentials = {path}\nprofile = default\n"
        with open(self.conf, "w") as f:
            f.write(f"[datasets]\nroot = {self.root}\nremote = {REMOTE}\n\n"
                    f"[remote]\nendpoint = {ENDPOINT}\nregion = us-east-1\naddressing = path\n{cred}"
                    f"requests = {s['requests']}\nretries = {s['retries']}\ntimeout = {s['timeout']}\n\n"
                    f"[cache]\ndir = {self.cache}\nmax_size = {s['max_size']}\nchunk = {s['chunk']}\n")

    def start(self):
        argv = [T.BATCHD, "--no-config", "-c", self.conf, "--socket", self.sock, "--log-level", "debug",
                "--memory", self.memory, "--direct", self.direct]
        return self.spawn(argv, env=self.env, timeout=20)

    def remote(self):
        """The status JSON's "remote" object."""
        st = batchclient.status(self.sock)
        if "remote" not in st:
            raise AssertionError(f"batchd status has no \"remote\" object: {sorted(st)}")
        return st["remote"]


BATCHCTL = os.environ.get("BATCHCTL") or os.path.join(os.path.dirname(T.BATCHD_PACK), "batchctl")
# Each remote metric and the status JSON member it must equal.
METRICS = {
    "batchd_remote_requests_total": ("requests",), "batchd_remote_bytes_total": ("bytes",),
    "batchd_remote_retries_total": ("retries",), "batchd_remote_errors_total": ("errors",),
    "batchd_remote_inflight": ("inflight",), "batchd_cache_disk_bytes": ("cache", "bytes"),
    "batchd_cache_disk_max_bytes": ("cache", "max_size"),
    "batchd_cache_disk_fetched_bytes_total": ("cache", "fetched_bytes"),
    "batchd_cache_disk_hit_bytes_total": ("cache", "hit_bytes"),
    "batchd_cache_disk_evicted_bytes_total": ("cache", "evicted_bytes"),
}


def metrics(d):
    """`batchctl metrics` of d: {name: value} of its unlabelled samples."""
    p = subprocess.run([BATCHCTL, "-s", d.sock, "metrics"], capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        raise RuntimeError(f"batchctl metrics: exit {p.returncode}: {p.stderr}")
    out = {}
    for line in p.stdout.splitlines():
        name, _, value = line.partition(" ")
        if line and not line.startswith("#") and "{" not in name:
            out[name] = int(float(value))
    return out


def parse_range(r):
    """(first, last) of "bytes=A-B"; None for no Range (the whole object)."""
    if not r:
        return None
    a, _, b = r.partition("=")[2].partition("-")
    return int(a), int(b) if b else 1 << 62


class RemoteCase(unittest.TestCase):
    def setUp(self):
        reset()

    def daemon(self, tag, start=True, **kw):
        """A RemoteDaemon in a directory of its own under WORK, which
        test-remote.sh keeps, logs included, when a test failed."""
        d = RemoteDaemon(tempfile.mkdtemp(prefix=f"{tag}-", dir=WORK), **kw)
        self.addCleanup(self.stop, d)
        if start:
            d.start()
        return d

    def stop(self, d):
        """Stop d (its directory and cache stay), asserting a clean exit."""
        rc = d.stop()
        self.assertEqual(rc, 0, f"batchd exited with {rc}:\n{d.tail()}")

    def loader(self, d, dataset, batch_size=32, **kw):
        kw.setdefault("socket", d.sock)
        kw.setdefault("timeout", 120)
        ld = batchclient.Loader(dataset, batch_size, **kw)
        self.addCleanup(ld.close)
        return ld

    def read_epoch(self, ld, keys=False):
        """One iteration: {id: (sha256, label or None, key or None)}, each id once."""
        got = {}
        for b in ld:
            labels = [int(x) for x in b["label"]] if "label" in b else [None] * len(b)
            ks = list(b.keys) if keys else [None] * len(b)
            for sid, view, label, key in zip(b.ids, b.samples, labels, ks):
                self.assertNotIn(sid, got, f"{ld.dataset}: sample {sid} twice in one epoch")
                got[sid] = (hashlib.sha256(view).hexdigest(), label, key)
        return got

    def assert_exact(self, got, expect, ctx):
        self.assertEqual(sorted(got), sorted(expect), f"{ctx}: the ids delivered")
        wrong = [i for i in expect if got[i] != expect[i]]
        self.assertFalse(wrong, f"{ctx}: {len(wrong)} samples differ, first {wrong[:5]}: "
                                f"got {got[wrong[0]] if wrong else None}, want {expect[wrong[0]] if wrong else None}")

    def epochs_exact(self, d, dataset, expect, epochs=2, keys=True, **kw):
        ld = self.loader(d, dataset, shuffle="global", seed=3, keys=keys, **kw)
        for e in range(epochs):
            self.assert_exact(self.read_epoch(ld, keys=keys), expect, f"{dataset} epoch {e}")
        ld.close()

    def read_through_errors(self, ld, change):
        """Iterate ld, calling change() once two samples have come, until the
        epoch ends or three batches failed. @return ({id: sha256}, [failure text])."""
        it = iter(ld)
        got, errors = {}, []
        while len(errors) < 3:
            try:
                bt = next(it)
            except StopIteration:
                break
            except batchclient.BatchError as e:
                errors.append(str(e))
                continue  # the stream has moved past the failed batch
            for sid, view in zip(bt.ids, bt.samples):
                got[sid] = hashlib.sha256(view).hexdigest()
            if len(got) == 2:
                change()
        return got, errors

    def block_gets(self, regions):
        """The proxy's GETs since the last reset that read block bytes of the objects in regions."""
        out = []
        for g in stats()["gets"]:
            if g["key"] not in regions:
                continue
            lo, hi = regions[g["key"]]
            r = parse_range(g["range"])
            if r is None or (r[0] < hi and r[1] >= lo):
                out.append(g)
        return out

    def assert_requests_counted(self, d, ctx):
        """Status remote.requests counts every HTTP request (retries included):
        all the proxy saw since the test's reset, the test having sent none."""
        self.assertEqual(d.remote()["requests"], stats()["requests"],
                         f"{ctx}: the daemon's remote.requests against the requests the proxy saw "
                         f"({stats()['by_method']})")

    def swap_packs(self, directory, n, size, block_size):
        """Two packs of one size and shape, different bytes. @return (path, expect) of each."""
        a = os.path.join(directory, "a.bpk")
        b = os.path.join(directory, "b.bpk")
        ea = records_pack(a, n, size, 21, block_size)
        eb = records_pack(b, n, size, 22, block_size)
        self.assertEqual(os.path.getsize(a), os.path.getsize(b), "the two versions must have one size")
        return (a, ea), (b, eb)

    def open_error(self, d, dataset):
        """The BatchdError of opening dataset (the test fails if it opens)."""
        with self.assertRaises(batchclient.BatchdError, msg=f"{dataset} opened") as cm:
            self.loader(d, dataset)
        return cm.exception


# ---- 1. byte-exact epochs ------------------------------------------------------------------


class Epochs(RemoteCase):
    def test_local_pack_is_the_reference(self):
        # What the other tests compare with: the local pack through batchd.
        d = self.daemon("ref")
        shutil.copytree(D.multi, d.path("ref-multi"))
        self.assert_exact(self.read_epoch(self.loader(d, "ref-multi", shuffle="none", keys=True), keys=True),
                          D.expect, "local ref-multi")

    def test_shards_from_the_bucket_two_epochs(self):
        d = self.daemon("epochs")
        ld = self.loader(d, MULTI, shuffle="global", seed=3, keys=True)
        self.assertEqual(ld.samples, len(D.expect), "hidden, non-.bpk or nested objects counted")
        for e in range(2):
            self.assert_exact(self.read_epoch(ld, keys=True), D.expect, f"{MULTI} epoch {e}")
        ld.close()
        r = d.remote()
        self.assertGreater(r["requests"], 0)
        self.assertGreater(r["cache"]["fetched_bytes"], 0)
        self.assert_requests_counted(d, MULTI)
        # (A HEAD of ds/multi may be explained by a one-byte GET of it: a 404, nothing read.)
        gets = {g["key"] for g in stats()["gets"] if g["key"] and 200 <= g["status"] < 300}
        self.assertEqual(gets, set(D.multi_keys), "objects read other than the dataset's shards")
        # Every GET of block bytes carries If-Match with the object's ETag.
        tags = {k: etag(k).strip('"') for k in D.multi_keys}
        blocks = self.block_gets(D.regions)
        self.assertTrue(blocks)
        for g in blocks:
            self.assertEqual((g["if_match"] or "").strip('"'), tags[g["key"]], g)

    def test_created_in_the_bucket_by_batchd_pack(self):
        # The same inputs packed straight to s3:// (multipart, signed by the
        # tool): the same samples, labels and keys.
        made = f"{REMOTE}/made-multi"
        T.pack(made, os.path.join(D.top, "multi-src"), block_size="32K", shard_size="512K",
               extra=["--labels", "dirname", "--endpoint", ENDPOINT, "--region", "us-east-1",
                      "--addressing", "path"])
        d = self.daemon("made")
        reset(stats_only=True)
        self.epochs_exact(d, made, D.expect, epochs=1)
        self.assertEqual(stats()["bad_signatures"], 0)

    def test_metrics_are_the_status(self):
        d = self.daemon("metrics")
        self.epochs_exact(d, MULTI, D.expect, epochs=1)
        r = d.remote()
        m = metrics(d)
        for name, path in METRICS.items():
            want = r
            for p in path:
                want = want[p]
            self.assertEqual(m.get(name), want, f"metric {name} against status remote.{'.'.join(path)}")
        self.assertEqual(r["inflight"], 0, "GETs on the wire with every session closed")
        self.assertEqual(r["cache"]["objects"], len(D.multi_keys), r)
        ranged = sum(g["bytes"] for g in stats()["gets"] if g["status"] == 206)
        self.assertGreaterEqual(r["bytes"], ranged, "remote.bytes below the ranged bytes the proxy sent")

    def test_relative_name_resolves_to_the_remote(self):
        d = self.daemon("relative")
        self.assert_exact(self.read_epoch(self.loader(d, "multi", shuffle="none", keys=True), keys=True),
                          D.expect, "multi (relative, from the remote)")
        self.assertTrue(any(g["key"] in D.regions for g in stats()["gets"]))

    def test_local_root_first(self):
        d = self.daemon("shadow")
        local = records_pack(d.path("shadow.bpk"), 64, 1000, 1, "8K")
        records_pack(os.path.join(d.dir, "other.bpk"), 64, 1000, 2, "8K")
        upload_dataset(os.path.join(d.dir, "other.bpk"), "shadow.bpk")
        reset(stats_only=True)
        self.assert_exact(self.read_epoch(self.loader(d, "shadow.bpk", shuffle="none")), local,
                          "shadow.bpk (local)")
        self.assertEqual([g for g in stats()["gets"] if g["key"] == f"{PREFIX}/shadow.bpk"], [])


# ---- 2. the cache across a restart ---------------------------------------------------------


class CacheReuse(RemoteCase):
    def test_restart_reads_no_block_bytes(self):
        first = self.daemon("reuse1")
        self.epochs_exact(first, MULTI, D.expect, epochs=1)
        self.assertTrue(self.block_gets(D.regions), "the first daemon fetched no block bytes at all")
        self.stop(first)
        reset(stats_only=True)
        again = self.daemon("reuse2", cache=first.cache)
        self.epochs_exact(again, MULTI, D.expect, epochs=1)
        got = self.block_gets(D.regions)
        self.assertEqual(got, [], "GETs of block bytes after the restart, with every chunk cached")
        blocks = sum(hi - lo for lo, hi in D.regions.values())
        c = again.remote()["cache"]
        self.assertGreaterEqual(c["hit_bytes"], blocks, c)
        self.assertEqual(c["dir"], first.cache)


# ---- 3. an object replaced in the bucket ---------------------------------------------------


class Replaced(RemoteCase):
    def test_next_session_gets_the_new_bytes(self):
        d = self.daemon("replace")
        (a, ea), (b, eb) = self.swap_packs(d.dir, 256, 4096, "16K")
        upload_dataset(a, "swap.bpk")
        old = etag(f"{PREFIX}/swap.bpk")
        self.epochs_exact(d, f"{REMOTE}/swap.bpk", ea, keys=False)
        upload_dataset(b, "swap.bpk")
        self.assertNotEqual(etag(f"{PREFIX}/swap.bpk"), old)
        reset(stats_only=True)
        self.epochs_exact(d, f"{REMOTE}/swap.bpk", eb, keys=False)
        self.assertTrue(self.block_gets({f"{PREFIX}/swap.bpk": block_region(b)}),
                        "the new version was served without a GET of its blocks")
        # And after a restart on the same cache: still the new bytes.
        self.stop(d)
        again = self.daemon("replace2", cache=d.cache)
        self.epochs_exact(again, f"{REMOTE}/swap.bpk", eb, epochs=1, keys=False)

    def test_running_session_fails_the_batch_naming_the_key(self):
        # One GET in flight and one batch staged: most blocks are fetched
        # after the object changes, each with If-Match the opened ETag.
        d = self.daemon("changed", requests=1, chunk="64K")
        (a, ea), (b, eb) = self.swap_packs(d.dir, 512, 64 << 10, "64K")
        upload_dataset(a, "change.bpk")
        ld = self.loader(d, f"{REMOTE}/change.bpk", batch_size=1, shuffle="none", prefetch=1)
        got, errors = self.read_through_errors(ld, lambda: upload_dataset(b, "change.bpk"))
        ld.close()
        self.assertTrue(errors, f"no batch failed after the object changed ({len(got)} delivered)")
        key = f"{REMOTE}/change.bpk"
        self.assertIn(key, errors[0])
        self.assertIn("changed in the bucket since the session opened", errors[0])
        wrong = [i for i, s in got.items() if s != ea[i][0]]
        self.assertEqual(wrong, [], "a running session got bytes that are not its version's")
        self.assertTrue(any(g["status"] == 412 for g in stats()["gets"]), "the proxy answered no 412")
        self.epochs_exact(d, key, eb, epochs=1, keys=False)


# ---- 4. retried failures -------------------------------------------------------------------


class Faults(RemoteCase):
    def test_503_and_dropped_connections(self):
        # Half the GETs fail (3k and 4k), and other requests take the GET
        # numbers between one request's attempts, so a request may meet many
        # faults in a row: 20 retries make 21 in a row (about 1 in 2 million)
        # what it takes to fail a batch.
        d = self.daemon("faults", requests=4, retries=20, chunk="64K")
        faults(status_every=3, status=503, drop_every=4, drop_after_bytes=1000)
        self.epochs_exact(d, MULTI, D.expect, epochs=2)
        st = stats()
        self.assertTrue(any(g["fault"] == "status" for g in st["gets"]), "no 503 was injected")
        self.assertTrue(any(g["fault"] == "drop" for g in st["gets"]), "no connection was dropped")
        r = d.remote()
        self.assertGreater(r["retries"], 0, r)
        self.assert_requests_counted(d, "with faults")


# ---- 5. 403 and 404 ------------------------------------------------------------------------


class Refusals(RemoteCase):
    def test_missing_dataset_404(self):
        d = self.daemon("missing")
        e = self.open_error(d, f"{REMOTE}/missing")
        self.assertIn(f"{REMOTE}/missing", str(e))
        self.assert_requests_counted(d, "a missing dataset's open")
        self.assertIn("404", str(e))

    def test_forbidden_at_open_403(self):
        d = self.daemon("deny")
        records_pack(os.path.join(d.dir, "deny.bpk"), 16, 100, 3, "4K")
        upload_dataset(os.path.join(d.dir, "deny.bpk"), "deny.bpk")
        faults(key_status={f"{PREFIX}/deny.bpk": 403})
        e = self.open_error(d, f"{REMOTE}/deny.bpk")
        self.assertIn(f"{REMOTE}/deny.bpk", str(e))
        self.assertIn("403", str(e))

    def test_forbidden_block_fetch_fails_the_batch(self):
        d = self.daemon("late", requests=1, chunk="64K")
        expect = records_pack(os.path.join(d.dir, "late.bpk"), 512, 64 << 10, 4, "64K")
        upload_dataset(os.path.join(d.dir, "late.bpk"), "late.bpk")
        ld = self.loader(d, f"{REMOTE}/late.bpk", batch_size=1, shuffle="none", prefetch=1)
        got, errors = self.read_through_errors(ld, lambda: faults(key_status={f"{PREFIX}/late.bpk": 403}))
        self.assertTrue(errors, f"no batch failed with the object forbidden ({len(got)} delivered)")
        self.assertIn(f"{REMOTE}/late.bpk", errors[0])
        self.assertIn("403", errors[0])
        self.assertEqual([i for i, s in got.items() if s != expect[i][0]], [])
        # The daemon goes on serving another session, on another dataset, meanwhile.
        self.epochs_exact(d, MULTI, D.expect, epochs=1)
        ld.close()


# ---- 6. the cache's size -------------------------------------------------------------------


class CacheLimit(RemoteCase):
    def test_never_above_max_size(self):
        max_size = 64 * MiB
        # A block per sample, 1 MiB chunks, a global shuffle: reads land all
        # over the object and evict all the time; about 1 GiB comes through.
        d = self.daemon("limit", max_size="64M", chunk="1M", requests=8)
        expect = records_pack(os.path.join(d.dir, "big.bpk"), 800, 256 << 10, 5, "256K")
        self.assertGreater(os.path.getsize(os.path.join(d.dir, "big.bpk")), 200 * 1000 * 1000)
        upload_dataset(os.path.join(d.dir, "big.bpk"), "big.bpk")
        os.unlink(os.path.join(d.dir, "big.bpk"))
        seen = {"status": 0, "du": 0, "polls": 0, "error": None}
        stop = threading.Event()

        def poll():
            try:
                while not stop.is_set():
                    c = d.remote()["cache"]
                    du = subprocess.run(["du", "-s", "-B1", d.cache], capture_output=True, text=True)
                    seen["status"] = max(seen["status"], c["bytes"])
                    seen["du"] = max(seen["du"], int(du.stdout.split()[0]) if du.returncode == 0 else 0)
                    seen["polls"] += 1
                    stop.wait(0.05)
            except Exception as e:  # noqa: BLE001 - reported by the test below
                seen["error"] = repr(e)

        t = threading.Thread(target=poll, daemon=True)
        t.start()
        try:
            self.epochs_exact(d, f"{REMOTE}/big.bpk", expect, epochs=2, keys=False, batch_size=8)
        finally:
            stop.set()
            t.join()
        c = d.remote()["cache"]
        self.assertIsNone(seen["error"], "polling the status failed")
        self.assertEqual(c["max_size"], max_size)
        self.assertGreater(seen["polls"], 2)
        self.assertLessEqual(seen["status"], max_size, f"status cache.bytes above max_size: {seen}")
        self.assertLessEqual(seen["du"], max_size + MiB, f"du -s -B1 of the cache above max_size + 1 MiB: {seen}")
        self.assertGreater(c["evicted_bytes"], 0, c)


# ---- 7. two nodes --------------------------------------------------------------------------


class TwoNodes(RemoteCase):
    def test_eight_ranks_on_two_daemons(self):
        nodes = [self.daemon("node0"), self.daemon("node1")]
        got = {}
        for rank in range(8):
            d = nodes[rank // 4]
            ld = self.loader(d, MULTI, batch_size=16, shuffle="global", seed=9, rank=rank, world=8)
            part = self.read_epoch(ld)
            ld.close()
            self.assertEqual(len(part), len(D.expect) // 8, f"rank {rank}")
            dup = set(part) & set(got)
            self.assertFalse(dup, f"rank {rank} repeats samples of another rank: {sorted(dup)[:5]}")
            got.update(part)
        self.assert_exact({i: v[:2] for i, v in got.items()}, {i: v[:2] for i, v in D.expect.items()},
                          "ranks 0-7 of world 8")
        caches = [d.remote()["cache"] for d in nodes]
        for d, c in zip(nodes, caches):
            self.assertGreater(c["fetched_bytes"], 0, f"{d.sock}: {c}")
        self.assertNotEqual(caches[0]["dir"], caches[1]["dir"])


# ---- 8. signatures -------------------------------------------------------------------------


class Signatures(RemoteCase):
    def test_wrong_secret(self):
        d = self.daemon("badsig", secret="NOT-THE-SECRET")
        e = self.open_error(d, MULTI)
        self.assertIn("403", str(e))
        self.assertIn("SignatureDoesNotMatch", str(e))
        st = stats()
        self.assertGreater(st["bad_signatures"], 0)
        self.assertIn("SignatureDoesNotMatch", st["refused"])

    def test_environment_only_without_a_credentials_file(self):
        d = self.daemon("envsig", secret=None,
                        env={"AWS_ACCESS_KEY_ID": "BATCHDTEST", "AWS_SECRET_ACCESS_KEY": "NOT-THE-SECRET"})
        e = self.open_error(d, MULTI)
        self.assertIn("SignatureDoesNotMatch", str(e))
        reset()
        ok = self.daemon("filesig", env={"AWS_ACCESS_KEY_ID": "BATCHDTEST", "AWS_SECRET_ACCESS_KEY": "NOT-THE-SECRET"})
        self.epochs_exact(ok, MULTI, D.expect, epochs=1)
        self.assertEqual(stats()["bad_signatures"], 0, "the environment's secret was used despite the file")


if __name__ == "__main__":
    T.main()
