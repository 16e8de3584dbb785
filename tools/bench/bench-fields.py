#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""bench-fields: what a label column and sample keys cost.

One WebDataset-style tar of N samples (default 1,000,000): members
NNNNNNN.bin (--size bytes, default 64: half random bytes, half text) and
NNNNNNN.cls (the label, i mod 1000), and a second tar of the same .bin
members alone. Both are packed by `batchd-pack create --group-by key
--block-size 64K`, so the two packs hold the same bytes in the same blocks
and differ only by the label column. Then, on one batchd started here
with its defaults:

  open     a Python Loader (batch --batch) opened and its first batch taken,
           without keys and with keys, in --repeat alternating pairs: the
           time to the first batch, the session's charged memory (status
           "memory") and the daemon's RSS growth while it is open;
  label    batch["label"] (here "cls") on every batch of one shuffled
           epoch: the mean cost per batch, against taking the batch itself;
  consume  `batchctl consume --epochs 2 --shuffle global` in --repeat
           alternating rounds A C B: A the pack with the label, both fields
           delivered; C the same pack with --fields bin (the label column
           there, not selected); B the pack without the label: samples/s
           each, and the median ratios A/B and C/B with their spread (the
           label must not slow the data path).

Every epoch's labels are checked against i mod 1000 of the sample's key,
so a wrong column shows as a failure rather than a fast figure.

    /usr/bin/python3 tools/bench/bench-fields.py
    /usr/bin/python3 tools/bench/bench-fields.py --samples 200000 --repeat 3

Uses the build tree's batchd, batchd-pack, batchctl and libbatchclient
(--build, default build/); needs python3-numpy. --workdir keeps the tars
and packs for later runs with the same settings. Exit status: 0 ok, 1
failure, 2 usage.
"""
import argparse
import io
import json
import os
import random
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

import bench_daemon

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLASSES = 1000


def make_tars(work, n, size, seed):
    """The two tars, made once per (n, size, seed)."""
    stamp = os.path.join(work, "made")
    want = f"{n} {size} {seed}"
    if os.path.exists(stamp) and open(stamp).read() == want:
        return
    rng = random.Random(seed)
    words = b"batch daemon sample tensor gpu zstd block epoch queue loader shard".split()
    text = b" ".join(rng.choice(words) for _ in range(1 << 16))
    half = size // 2
    with tarfile.open(os.path.join(work, "labelled.tar"), "w", format=tarfile.USTAR_FORMAT) as a, \
         tarfile.open(os.path.join(work, "plain.tar"), "w", format=tarfile.USTAR_FORMAT) as b:
        for i in range(n):
            at = rng.randrange(0, len(text) - (size - half))
            data = rng.randbytes(half) + text[at:at + size - half]
            label = str(i % CLASSES).encode()
            for tf, members in ((a, (("bin", data), ("cls", label))), (b, (("bin", data),))):
                for ext, body in members:
                    ti = tarfile.TarInfo("%07d.%s" % (i, ext))
                    ti.size = len(body)
                    tf.addfile(ti, io.BytesIO(body))
    with open(stamp, "w") as f:
        f.write(want)


def pack(tool, work, name):
    out = os.path.join(work, name + ".bpk")
    tar = os.path.join(work, name + ".tar")
    if not os.path.exists(out) or os.path.getmtime(out) < os.path.getmtime(tar):
        if os.path.exists(out):
            os.unlink(out)
        subprocess.run([tool, "create", out, tar, "--group-by", "key", "--block-size", "64K"],
                       check=True, stdout=subprocess.DEVNULL)
    return out


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def session_memory(batchclient, sock):
    st = batchclient.status(sock)
    return sum(s["memory"] for s in st.get("sessions", []))


def start_batchd(build, root, sock, log):
    return bench_daemon.start_batchd([os.path.join(build, "daemon", "batchd"), "--socket", sock,
                                      "--root", root], sock, log)


def open_once(batchclient, sock, path, batch, keys, daemon):
    rss0 = rss_kib(daemon.pid)
    t0 = time.perf_counter()
    loader = batchclient.Loader(path, batch, shuffle="global", socket=sock, keys=keys)
    it = iter(loader)
    b = next(it)
    t1 = time.perf_counter()
    mem = session_memory(batchclient, sock)
    rss = rss_kib(daemon.pid) - rss0
    if keys:
        k = b.keys
        labels = b["cls"]
        for key, label in zip(k, labels):
            if int(key) % CLASSES != int(label):
                raise RuntimeError(f"sample {key}: label {label}, want {int(key) % CLASSES}")
    b.release()
    loader.close()
    return t1 - t0, mem, rss


def label_cost(batchclient, sock, path, batch):
    """Mean ns per batch of batch["cls"] and of taking the batch, one epoch."""
    loader = batchclient.Loader(path, batch, shuffle="global", socket=sock, keys=True)
    take = label = 0
    n = 0
    it = iter(loader)
    while True:
        t0 = time.perf_counter_ns()
        try:
            b = next(it)
        except StopIteration:
            break
        t1 = time.perf_counter_ns()
        labels = b["cls"]
        t2 = time.perf_counter_ns()
        if n % 64 == 0:
            for key, v in zip(b.keys, labels):
                if int(key) % CLASSES != int(v):
                    raise RuntimeError(f"sample {key}: label {v}")
        take += t1 - t0
        label += t2 - t1
        n += 1
        b.release()
    loader.close()
    return take / n, label / n, n


def consume(batchctl, sock, path, batch, fields=None):
    argv = [batchctl, "-s", sock, "consume", path, "--batch-size", str(batch), "--epochs", "2",
            "--shuffle", "global", "--json"]
    if fields:
        argv += ["--fields", fields]
    r = subprocess.run(argv, check=True, capture_output=True, text=True)
    j = json.loads(r.stdout)
    if j["failed"]:
        raise RuntimeError(f"consume {path}: {j['failed']} batches failed")
    return j["samples"] / j["seconds"]


def spread(v):
    return f"{statistics.median(v):.3g} ({min(v):.3g}-{max(v):.3g})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=1000000)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workdir")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = ap.parse_args()
    if args.samples < 1 or args.size < 2 or args.batch < 1 or args.repeat < 1:
        ap.error("--samples, --batch and --repeat must be >= 1, --size >= 2")
    build = os.path.abspath(args.build)
    os.environ.setdefault("BATCHCLIENT_LIB", os.path.join(build, "client", "libbatchclient.so.0"))
    sys.path.insert(0, os.path.join(ROOT, "client", "python"))
    import batchclient

    work = args.workdir or tempfile.mkdtemp(prefix="bench-fields-")
    os.makedirs(work, exist_ok=True)
    t = time.perf_counter()
    make_tars(work, args.samples, args.size, args.seed)
    tool = os.path.join(build, "tools", "batchd-pack")
    labelled, plain = pack(tool, work, "labelled"), pack(tool, work, "plain")
    print(f"# {args.samples} samples of {args.size} bytes, label column {CLASSES} classes, "
          f"keys; tars and packs ready in {time.perf_counter() - t:.1f} s ({work})")
    for p in (labelled, plain):
        j = json.loads(subprocess.run([tool, "info", p, "--json"], capture_output=True,
                                      text=True, check=True).stdout)
        fields = ", ".join(f"{f['name']}:{f['type']}" for f in j["fields"])
        print(f"# {os.path.basename(p)}: {j['samples']} samples in {j['blocks']} blocks, "
              f"{j['raw_bytes'] / 1e6:.1f} MB raw, {j['stored_bytes'] / 1e6:.1f} MB stored; "
              f"fields {fields}; keys {'yes' if j['keys'] else 'no'}")
    print(f"# load average {os.getloadavg()[0]:.2f}")
    sock = os.path.join(work, "batchd.sock")
    batchctl = os.path.join(build, "tools", "batchctl")
    with open(os.path.join(work, "batchd.log"), "w") as log:
        daemon = start_batchd(build, work, sock, log)
        try:
            opened = {False: [], True: []}
            for _ in range(args.repeat):
                for keys in (False, True):
                    opened[keys].append(open_once(batchclient, sock, labelled, args.batch,
                                                  keys, daemon))
            for keys in (False, True):
                o = opened[keys]
                print(f"open {'with' if keys else 'without'} keys: first batch "
                      f"{spread([x[0] * 1e3 for x in o])} ms, session memory "
                      f"{spread([x[1] / 2**20 for x in o])} MiB, daemon RSS growth "
                      f"{spread([x[2] / 1024 for x in o])} MiB")
            take, label, n = label_cost(batchclient, sock, labelled, args.batch)
            print(f"batch[\"cls\"]: {label / 1e3:.1f} us per batch of {args.batch} "
                  f"(taking the batch: {take / 1e3:.1f} us), {n} batches")
            a, c, b = [], [], []
            for _ in range(args.repeat):
                a.append(consume(batchctl, sock, labelled, args.batch))
                c.append(consume(batchctl, sock, labelled, args.batch, fields="bin"))
                b.append(consume(batchctl, sock, plain, args.batch))
            for what, v in (("label delivered", a), ("label in the pack, not selected", c)):
                ratios = [x / y for x, y in zip(v, b)]
                print(f"consume, samples/s, {what}: {spread(v)}; without the label "
                      f"{spread(b)}; ratio {spread(ratios)} over {args.repeat} rounds A C B")
        finally:
            daemon.terminate()
            daemon.wait()
    print(f"# load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
