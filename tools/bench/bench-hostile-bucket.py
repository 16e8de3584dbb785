#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench-hostile-bucket.py - what a hostile bucket costs well-behaved
tenants of a shared batchd (issue 34's measure).

    tools/bench/bench-hostile-bucket.py [--pairs 5] [--n 8] [--build build]

Packs a local dataset (good.bpk, 5,000 samples of 2-8 KiB), starts
tests/remote/s3hostile.py (a bucket that lies on purpose) and a batchd
whose remote is that bucket, then runs PAIRS alternating pairs: the good
clients alone (A), then the good clients while N hostile remote sessions of
each kind run (B): opens whose every byte trickles at 200 B/s (slow), opens
of an object claiming 15 TiB and of one claiming 4 TiB (claim), opens of a
listing that never ends (endless), and opens of 3,000 listed keys of zeros
(failed), each kind's N threads opening again as soon as an open fails.
The good clients are `batchctl consume good.bpk` over two epochs, global
shuffle, batch 64: one as the attackers' user, and (as root) one as uid
60001. Prints each pair, the median B/A ratio of samples/s and first-batch
latency with their spread, the daemon's RSS, descriptors and memory.used
before the first attack, during the last and after, and how long SIGTERM
takes with the attack running.
"""
import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path[:0] = [HERE, os.path.join(SRC, "tools", "test"), os.path.join(SRC, "client", "python")]
import batchclient  # noqa: E402
from bench_daemon import start_batchd  # noqa: E402
from hostile_bucket import KINDS, Attack, conf, serve  # noqa: E402


def make_pack(top, pack):
    src = os.path.join(top, "good.src")
    os.makedirs(src)
    rng = random.Random(7)
    for i in range(5000):
        with open(os.path.join(src, f"{i:05d}"), "wb") as f:
            f.write(rng.randbytes(rng.randrange(2048, 8192)))
    out = os.path.join(top, "root", "good.bpk")
    os.makedirs(os.path.dirname(out))
    subprocess.run([pack, "create", out, src, "--block-size", "64K"], check=True,
                   stdout=subprocess.DEVNULL)
    shutil.rmtree(src)
    return out


def good(ctl_bin, sock, uid=None):
    """(samples/s, first batch ms) of one consume run, as uid when given."""
    argv = [ctl_bin, "-s", sock, "consume", "good.bpk", "--batch-size", "64", "--epochs", "2",
            "--shuffle", "global", "--seed", "3", "--json"]
    if uid is not None:
        argv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *argv]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        return 0.0, float("inf")
    d = json.loads(p.stdout)
    return d["samples"] / d["seconds"], d["first_batch_ms"]


def proc_figures(pid, sock):
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS:"))
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    used = batchclient.status(sock)["memory"]["used"] >> 20
    return rss, fds, used


def spread(values):
    return f"median {statistics.median(values):.2f}x (spread {min(values):.2f}-{max(values):.2f})"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--build", default=os.path.join(SRC, "build"))
    a = ap.parse_args(argv)
    batchd = os.path.join(a.build, "daemon", "batchd")
    pack = os.path.join(a.build, "tools", "batchd-pack")
    ctl_bin = os.path.join(a.build, "tools", "batchctl")
    os.environ.setdefault("BATCHCLIENT_LIB", os.path.join(a.build, "client", "libbatchclient.so.0"))
    top = tempfile.mkdtemp(prefix="bench-bucket-")
    os.chmod(top, 0o755)
    good_pack = make_pack(top, pack)
    slow_src = os.path.join(top, "slow.bpk")
    shutil.copy(good_pack, slow_src)
    hostile, endpoint = serve(top, slow_src, a.n)
    try:
        sock = os.path.join(top, "sock")
        conf_path = os.path.join(top, "batchd.conf")
        with open(conf_path, "w") as f:
            f.write(f"[daemon]\nsocket_mode = 0666\n[datasets]\nroot = {top}/root\n"
                    + conf(endpoint, os.path.join(top, "cache")).replace("[datasets]\n", ""))
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        os.environ.clear()
        os.environ.update(env)
        log = open(os.path.join(top, "batchd.log"), "wb")
        daemon = start_batchd([batchd, "-c", conf_path, "--socket", sock, "--memory", "1G"], sock,
                              log)
        others = os.geteuid() == 0 and shutil.which("setpriv")
        good(ctl_bin, sock)  # warm the page cache and the daemon
        before = proc_figures(daemon.pid, sock)
        rows, ratios = [], {"same": ([], []), "other": ([], [])}
        for p in range(a.pairs):
            alone = {"same": good(ctl_bin, sock)}
            if others:
                alone["other"] = good(ctl_bin, sock, 60001)
            attack = Attack(sock, a.n)
            attack.start()
            time.sleep(3)  # the slow opens reach the bucket; the others churn
            hit = {"same": good(ctl_bin, sock)}
            if others:
                hit["other"] = good(ctl_bin, sock, 60001)
            during = proc_figures(daemon.pid, sock)
            opens = dict(attack.opens)
            attack.end()
            for who in alone:
                ratios[who][0].append(hit[who][0] / alone[who][0])
                ratios[who][1].append(hit[who][1] / alone[who][1])
                rows.append((p + 1, who, *alone[who], *hit[who]))
        time.sleep(3)  # the fetcher's sync closes unused files, drops empty objects
        after = proc_figures(daemon.pid, sock)
        attack = Attack(sock, a.n)
        attack.start()
        time.sleep(3)
        t0 = time.monotonic()
        daemon.terminate()
        rc = daemon.wait(120)
        sigterm = time.monotonic() - t0
        attack.stop.set()
        print(f"hostile remote sessions: {a.n} of each kind ({', '.join(KINDS)}); opens made "
              f"during the last pair's attack: {opens}")
        print("pair  client  alone: samples/s  first ms  |  under attack: samples/s  first ms")
        for r in rows:
            print(f"{r[0]:4d}  {r[1]:6s}  {r[2]:17.0f}  {r[3]:8.1f}  |  {r[4]:24.0f}  {r[5]:8.1f}")
        for who, (rate, first) in ratios.items():
            if rate:
                print(f"{who}-uid client: samples/s under attack / alone: {spread(rate)}; "
                      f"first-batch latency: {spread(first)}")
        print(f"daemon (RSS MiB, fds, memory.used MiB): before {before}, during the last "
              f"attack {during}, after {after}")
        print(f"SIGTERM with the attack running: exit {rc} in {sigterm:.2f} s")
    finally:
        hostile.kill()
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
