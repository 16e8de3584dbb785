#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""hostile_bucket.py - tenants whose datasets live in a bucket that lies:
tests/remote/s3hostile.py started and configured, and threads opening its
datasets over and over. tools/test/soak.sh runs it beside its good clients
(SOAK_BUCKET); tools/bench/bench-hostile-bucket.py imports it.

    hostile_bucket.py --serve DIR          start the server, configure it,
                                           print its endpoint, run until killed
    hostile_bucket.py --attack --sock SOCK --n N --seconds T
                                           N threads of each kind for T seconds;
                                           prints "opens=... kind=N ..."

The kinds: slow (every byte trickles at 200 B/s), claim (an object of 15
TiB, and one of 4 TiB), endless (a listing that never ends), failed (3,000
listed keys whose bytes are zeros). Each thread opens its dataset again as
soon as an open fails; any open that succeeds is read to its end.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, "..", ".."))
KINDS = ("slow", "claim", "endless", "failed")
REMOTE = "s3://hostile/p"


def serve(top, slow_file, n):
    """Start s3hostile.py below top with the kinds' objects (slow ones from
    slow_file, n of them). @return (Popen, endpoint)."""
    port_file = os.path.join(top, "hostile.port")
    log = open(os.path.join(top, "hostile.log"), "wb")
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    proc = subprocess.Popen([sys.executable, os.path.join(SRC, "tests", "remote", "s3hostile.py"),
                             "--port-file", port_file], stdout=log, stderr=subprocess.STDOUT,
                            env=env)
    deadline = time.monotonic() + 20
    while not os.path.exists(port_file):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("s3hostile.py did not start")
        time.sleep(0.01)
    with open(port_file) as f:
        endpoint = f"http://127.0.0.1:{int(f.read())}"
    objects = {f"p/slow{i}.bpk": {"file": slow_file, "rate": 200} for i in range(n)}
    objects.update({"p/huge.bpk": {"claim": 15 << 40}, "p/big.bpk": {"claim": 4 << 40}})
    body = {"objects": objects, "listings": {
        "p/endless/": {"endless": True}, "p/many/": {"generate": {"count": 3000, "size": 1 << 20}}}}
    req = urllib.request.Request(f"{endpoint}/__hostile/config", data=json.dumps(body).encode(),
                                 method="POST")
    urllib.request.urlopen(req, timeout=10).read()
    return proc, endpoint


def conf(endpoint, cache):
    """The batchd.conf lines that make the bucket a remote: one retry, and a
    trickle fails a request after 5 s (under [remote] min_rate's 16K)."""
    return (f"[datasets]\nremote = {REMOTE}\n[remote]\nendpoint = {endpoint}\n"
            f"region = us-east-1\naddressing = path\nretries = 1\ntimeout = 5\n"
            f"[cache]\ndir = {cache}\nchunk = 64K\n")


class Attack:
    """n threads a kind, each opening its hostile dataset again as soon as an open fails."""

    def __init__(self, sock, n):
        self.sock, self.n, self.stop = sock, n, threading.Event()
        self.opens = {k: 0 for k in KINDS}
        self.served = 0
        self.threads = []

    def one(self, kind, i):
        import batchclient
        name = {"slow": f"{REMOTE}/slow{i}.bpk",
                "claim": f"{REMOTE}/huge.bpk" if i % 2 else f"{REMOTE}/big.bpk",
                "endless": f"{REMOTE}/endless", "failed": f"{REMOTE}/many"}[kind]
        while not self.stop.is_set():
            self.opens[kind] += 1
            try:
                ld = batchclient.Loader(name, 8, socket=self.sock, timeout=600)
                for _ in ld:
                    if self.stop.is_set():
                        break
                ld.close()
                self.served += 1
            except Exception:  # noqa: BLE001 - every failure is the attack's point
                time.sleep(0.05)

    def start(self):
        for kind in KINDS:
            for i in range(self.n):
                t = threading.Thread(target=self.one, args=(kind, i), daemon=True)
                t.start()
                self.threads.append(t)

    def end(self, timeout=300):
        """Stop, and wait for every thread: stuck opens fail within the bucket's deadlines.
        @return whether they all ended."""
        self.stop.set()
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self.threads)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--serve", metavar="DIR")
    ap.add_argument("--slow-file")
    ap.add_argument("--attack", action="store_true")
    ap.add_argument("--sock")
    ap.add_argument("--n", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=10)
    a = ap.parse_args(argv)
    if a.serve:
        # soak.sh ends us with SIGTERM: exit through the finally below, so
        # that the server goes with us instead of outliving the soak.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        proc, endpoint = serve(a.serve, a.slow_file, a.n)
        print(endpoint, flush=True)
        try:
            proc.wait()
        finally:
            proc.kill()
            proc.wait()
        return 0
    sys.path.insert(0, os.path.join(SRC, "client", "python"))
    attack = Attack(a.sock, a.n)
    attack.start()
    time.sleep(a.seconds)
    ended = attack.end()
    print(" ".join(f"{k}={v}" for k, v in attack.opens.items()) + f" served={attack.served}")
    return 0 if ended else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
