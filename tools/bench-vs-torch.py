#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""bench-vs-torch: the same pack read by PyTorch's DataLoader and by batchd.

(a) torch.utils.data.DataLoader over a Dataset that reads each sample from
    the .bpk itself: it parses the index (proto/PACK.md), preads the block,
    checks its XXH3 hashes when python3-xxhash is there (batchd always
    does), and decompresses it with python3-zstandard (with the pack's
    dictionary for codec 2); num_workers 0, 1 and 2, pin_memory off,
    persistent workers, shuffle=True.
(b) batchclient.Loader on a batchd serving the same pack, shuffle="global",
    each batch taken as a [batch, sample] uint8 tensor (a view, no copy).

Same batch size, same epochs; each run has one untimed warm-up epoch
(workers start, page cache fills), then --epochs timed ones; the loaders
run --repeat times, interleaved, and the best run of each is reported
with the median beside it (other work on the machine only slows runs
down). Every run must deliver the same bytes: the sum of all bytes of an
epoch is compared across runs. Prints samples/s, MB/s and the ratio
batchclient / DataLoader for each num_workers.

    tools/bench-vs-torch.py                      # 60000 MNIST-sized records (785 B)
    tools/bench-vs-torch.py --record-size 16K --samples 20000
    tools/bench-vs-torch.py --pack /srv/data/x.bpk --batch-size 256

Needs python3-torch, python3-numpy and python3-zstandard (Debian); run as
root it installs what is missing with apt-get, else it says what to
install. Uses the build tree's batchd, batchd-pack and libbatchclient
(--build, default build/). Exit status: 0 ok, 1 failure, 2 usage or a
missing dependency.
"""
import argparse
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEBS = {"numpy": "python3-numpy", "torch": "python3-torch", "zstandard": "python3-zstandard"}


def ensure_modules():
    missing = []
    for mod, deb in DEBS.items():
        try:
            __import__(mod)
        except ImportError:
            missing.append(deb)
    if not missing:
        return
    if os.geteuid() == 0 and shutil.which("apt-get") and not os.environ.get("BENCH_NO_APT"):
        print(f"bench-vs-torch: installing {' '.join(missing)} with apt-get", file=sys.stderr)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], env=env, check=False)
        if subprocess.run(["apt-get", "install", "-y", "-qq", *missing], env=env).returncode == 0:
            os.environ["BENCH_NO_APT"] = "1"      # once: re-exec with the new modules
            os.execv(sys.executable, [sys.executable] + sys.argv)
    print(f"bench-vs-torch: missing Python modules; install them with:\n"
          f"  sudo apt-get install {' '.join(missing)}", file=sys.stderr)
    sys.exit(2)


def size_arg(s):
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    s = s.strip().lower()
    return int(s[:-1]) * mult[s[-1]] if s and s[-1] in mult else int(s)


# ---- (a) a pack reader in Python, as a torch Dataset ------------------------------------------

class BpkDataset:
    """Samples of a .bpk (or a directory of .bpk shards) read with pread and
    python3-zstandard. Opens its files lazily, so that each DataLoader
    worker has its own descriptors and decompressors."""

    BLOCK = [("offset", "<u8"), ("stored", "<u8"), ("raw", "<u8"), ("first", "<u8"),
             ("stored_hash", "<u8"), ("raw_hash", "<u8"), ("codec", "<u4"), ("reserved", "<u4")]
    SAMPLE = [("offset", "<u8"), ("size", "<u8")]

    def __init__(self, path, verify=True):
        import numpy as np
        if os.path.isdir(path):
            names = sorted(n for n in os.listdir(path) if n.endswith(".bpk")
                           and not n.startswith("."))
            self.paths = [os.path.join(path, n) for n in names]
        else:
            self.paths = [path]
        try:
            import xxhash
            self._xxh3 = xxhash.xxh3_64_intdigest if verify else None
        except ImportError:
            self._xxh3 = None
        self.shards = [self._index(p) for p in self.paths]
        self.starts = np.cumsum([0] + [s["samples"] for s in self.shards])
        self._pid = None

    @property
    def verifies(self):
        return self._xxh3 is not None

    def _index(self, path):
        import numpy as np
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:8] != b"\x89BPK\r\n\x1a\n" or struct.unpack_from("<I", head, 8)[0] != 1:
                raise ValueError(f"{path}: not a version 1 .bpk")
            dict_off, dict_size, _, data_off = struct.unpack_from("<QQQQ", head, 24)
            f.seek(-80, os.SEEK_END)
            foot = f.read(80)
            if foot[72:80] != b"BPKINDEX":
                raise ValueError(f"{path}: no .bpk footer")
            index_off, index_size, blocks, samples = struct.unpack_from("<QQQQ", foot, 0)
            if index_size != 56 * blocks + 16 * samples:
                raise ValueError(f"{path}: index size does not match its counts")
            f.seek(index_off)
            index = f.read(index_size)
            f.seek(dict_off)
            dictionary = f.read(dict_size) if dict_size else b""
        if self._xxh3 and self._xxh3(index) != struct.unpack_from("<Q", foot, 48)[0]:
            raise ValueError(f"{path}: index checksum mismatch")
        bt = np.frombuffer(index, self.BLOCK, blocks, 0)
        st = np.frombuffer(index, self.SAMPLE, samples, 56 * blocks)
        return {"path": path, "samples": samples, "dict": dictionary,
                "first": bt["first"].astype(np.int64), "blocks": bt, "table": st}

    def __len__(self):
        return int(self.starts[-1])

    def _open(self):
        import zstandard
        self._fds = [os.open(s["path"], os.O_RDONLY | os.O_CLOEXEC) for s in self.shards]
        self._plain = zstandard.ZstdDecompressor()
        self._withdict = [zstandard.ZstdDecompressor(dict_data=zstandard.ZstdCompressionDict(
            s["dict"])) if s["dict"] else None for s in self.shards]
        self._last = (None, None, None)
        self._pid = os.getpid()

    def raw_block(self, k, b):
        """The raw bytes of block b of shard k (one cached: sequential reads reuse it)."""
        if self._last[:2] == (k, b):
            return self._last[2]
        s = self.shards[k]
        e = s["blocks"][b]
        stored = os.pread(self._fds[k], int(e["stored"]), int(e["offset"]))
        if len(stored) != e["stored"]:
            raise IOError(f"{s['path']}: block {b}: short read")
        if self._xxh3 and self._xxh3(stored) != e["stored_hash"]:
            raise IOError(f"{s['path']}: block {b}: stored hash mismatch")
        codec = int(e["codec"])
        if codec == 0:
            raw = stored
        else:
            d = self._plain if codec == 1 else self._withdict[k]
            raw = d.decompress(stored, max_output_size=int(e["raw"]))
            if self._xxh3 and self._xxh3(raw) != e["raw_hash"]:
                raise IOError(f"{s['path']}: block {b}: raw hash mismatch")
        self._last = (k, b, raw)
        return raw

    def sample(self, i):
        import numpy as np
        if self._pid != os.getpid():
            self._open()
        k = int(np.searchsorted(self.starts, i, "right")) - 1
        j = i - int(self.starts[k])
        s = self.shards[k]
        b = int(np.searchsorted(s["first"], j, "right")) - 1
        off, size = (int(x) for x in s["table"][j])
        return memoryview(self.raw_block(k, b))[off:off + size]

    def __getitem__(self, i):
        import numpy as np
        import torch
        v = self.sample(i)
        t = torch.empty(len(v), dtype=torch.uint8)
        t.numpy()[:] = np.frombuffer(v, np.uint8)
        return t


# ---- the runs ---------------------------------------------------------------------------------

def run_torch(ds, args, workers):
    import torch
    from torch.utils.data import DataLoader
    g = torch.Generator()
    g.manual_seed(args.seed)
    dl = DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=workers,
                    pin_memory=False, persistent_workers=workers > 0, generator=g)
    return timed(lambda: iter(dl), lambda x: x, args)


def run_batchd(sock, name, args):
    import torch
    import batchclient
    ld = batchclient.Loader(name, args.batch_size, shuffle="global", seed=args.seed, socket=sock)
    before = batchclient.status(sock)
    try:
        out = timed(lambda: iter(ld), lambda b: b.torch(torch.uint8, (ld.max_sample,)), args)
    finally:
        ld.close()
    after = batchclient.status(sock)
    cache = {k: after["cache"][k] - before["cache"][k] for k in ("hits", "misses")}
    cache["decoded"] = after["pipeline"]["blocks_decoded"] - before["pipeline"]["blocks_decoded"]
    cache["read"] = after["pipeline"]["blocks_read"] - before["pipeline"]["blocks_read"]
    return out + (cache,)


def timed(epoch_iter, as_tensor, args):
    """Warm-up epoch, then args.epochs timed ones. @return (samples/s, bytes/s, sums)."""
    sums = []
    samples = nbytes = 0
    t0 = None
    for e in range(args.epochs + 1):
        if e == 1:
            t0 = time.perf_counter()
            samples = nbytes = 0
        total = 0
        for item in epoch_iter():
            t = as_tensor(item)
            total += int(t.sum(dtype=__import__("torch").int64))   # touch every byte
            samples += t.shape[0]
            nbytes += t.numel()
        sums.append(total)
    dt = time.perf_counter() - t0
    return samples / dt, nbytes / dt, sums


# ---- setup ------------------------------------------------------------------------------------

def make_records(path, n, size, seed):
    """n records of `size` bytes: MNIST-like bytes (a label, then sparse pixels)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    with open(path, "wb") as f:
        for lo in range(0, n, 4096):
            k = min(4096, n - lo)
            rec = rng.integers(0, 256, (k, size), dtype=np.uint8)
            rec[rng.random((k, size)) < 0.6] = 0            # compressible, like real images
            rec[:, 0] = rng.integers(0, 10, k)
            f.write(rec.tobytes())


def start_batchd(args, root, sock, log):
    argv = [args.batchd, "--socket", sock, "--root", root, "--log-level", "notice",
            "--memory", args.memory]
    if args.direct:
        argv += ["--direct", args.direct]
    p = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    import batchclient
    for _ in range(500):
        if p.poll() is not None:
            raise RuntimeError(f"batchd exited with {p.returncode}; see {log.name}")
        try:
            batchclient.status(sock)
            return p
        except batchclient.ConnectError:
            time.sleep(0.01)
    p.kill()
    raise RuntimeError(f"batchd did not answer on {sock}")


def main():
    ap = argparse.ArgumentParser(description="PyTorch DataLoader vs batchclient.Loader on one "
                                 "pack", epilog=__doc__.split("\n\n")[1])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="meson build directory")
    ap.add_argument("--pack", help="an existing .bpk (or shard directory); default: make one")
    ap.add_argument("--samples", type=int, default=60000)
    ap.add_argument("--record-size", type=size_arg, default=785)
    ap.add_argument("--block-size", help="batchd-pack --block-size for the made pack")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=2, help="timed epochs (after one warm-up)")
    ap.add_argument("--workers", default="0,1,2", help="DataLoader num_workers to run")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of each loader, interleaved; the best is reported (noise from "
                    "other work on the machine only ever slows a run down)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--memory", default="auto", help="batchd --memory (default: auto, as the daemon)")
    ap.add_argument("--direct", choices=("auto", "on", "off"), help="batchd --direct")
    ap.add_argument("--no-verify", action="store_true",
                    help="the Python reader skips XXH3 checks (batchd never does)")
    ap.add_argument("--workdir", help="where the made pack goes (default: a temporary dir)")
    ap.add_argument("--json", action="store_true", help="also print the results as JSON")
    args = ap.parse_args()

    ensure_modules()
    args.batchd = os.path.join(args.build, "daemon", "batchd")
    pack_tool = os.path.join(args.build, "tools", "batchd-pack")
    lib = os.path.join(args.build, "client", "libbatchclient.so.0")
    for p in (args.batchd, pack_tool, lib):
        if not os.path.exists(p):
            print(f"bench-vs-torch: {p} is missing; build first (ninja -C {args.build})",
                  file=sys.stderr)
            return 2
    os.environ.setdefault("BATCHCLIENT_LIB", lib)
    sys.path.insert(0, os.path.join(ROOT, "client", "python"))
    import torch

    work = args.workdir or tempfile.mkdtemp(prefix="bench-vs-torch-", dir="/tmp")
    os.makedirs(work, exist_ok=True)
    made = args.workdir is None
    daemon = None
    try:
        if args.pack:
            pack = os.path.abspath(args.pack)
        else:
            pack = os.path.join(work, "bench.bpk")
            if not os.path.exists(pack):
                rec = os.path.join(work, "records.bin")
                make_records(rec, args.samples, args.record_size, args.seed)
                cmd = [pack_tool, "create", pack, "--records", str(args.record_size), rec]
                if args.block_size:
                    cmd += ["--block-size", args.block_size]
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
                os.unlink(rec)
        info = json.loads(subprocess.run([pack_tool, "info", pack, "--json"], check=True,
                                         capture_output=True, text=True).stdout)
        ds = BpkDataset(pack, verify=not args.no_verify)
        sock = os.path.join(work, "batchd.sock")
        log = open(os.path.join(work, "batchd.log"), "ab")
        daemon = start_batchd(args, os.path.dirname(pack), sock, log)

        workers = [int(x) for x in args.workers.split(",") if x != ""]
        runs = {w: [] for w in workers}
        ours_runs = []
        for rep in range(args.repeat):
            for w in workers:
                runs[w].append(run_torch(ds, args, w))
                print(f"  run {rep + 1}/{args.repeat}: torch DataLoader, num_workers={w}: "
                      f"{runs[w][-1][0]:,.0f} samples/s", file=sys.stderr)
            ours_runs.append(run_batchd(sock, os.path.basename(pack), args))
            print(f"  run {rep + 1}/{args.repeat}: batchclient.Loader: "
                  f"{ours_runs[-1][0]:,.0f} samples/s", file=sys.stderr)

        def best(rs):
            return max(rs, key=lambda r: r[0])

        def median(rs):
            return sorted(r[0] for r in rs)[len(rs) // 2]

        sps, bps, sums, cache = best(ours_runs)
        ours = {"loader": "batchclient.Loader", "samples_s": sps, "bytes_s": bps, "sums": sums,
                "median_samples_s": median(ours_runs), "batchd": cache}
        rows = []
        for w in workers:
            b = best(runs[w])
            rows.append({"loader": f"torch DataLoader, num_workers={w}", "workers": w,
                         "samples_s": b[0], "bytes_s": b[1], "sums": b[2],
                         "median_samples_s": median(runs[w])})
        for r in rows + [ours]:
            for run in (runs[r["workers"]] if "workers" in r else ours_runs):
                if run[2] != ours_runs[0][2]:
                    raise RuntimeError(f"{r['loader']} delivered other bytes than batchd: "
                                       f"epoch sums {run[2]} vs {ours_runs[0][2]}")
        for r in rows:
            r["ratio"] = ours["samples_s"] / r["samples_s"]

        print(f"pack: {info.get('samples')} samples, mean {info.get('mean_sample', 0):.0f} B, "
              f"{info.get('blocks')} blocks, ratio {info.get('ratio', 0):.2f}, "
              f"dictionary {info.get('dict_bytes', 0)} B, codec {info.get('codec')} ({pack})")
        print(f"batch {args.batch_size}, shuffle (DataLoader shuffle=True / batchd global), "
              f"{args.epochs} timed epochs after 1 warm-up, best of {args.repeat} runs, "
              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, "
              f"torch {torch.__version__}, Python reader verifies XXH3: "
              f"{'yes' if ds.verifies else 'no'}")
        print(f"batchd (all {args.epochs + 1} epochs): {cache['read']} blocks read, "
              f"{cache['decoded']} decoded, block cache {cache['hits']} hits / "
              f"{cache['misses']} misses (batchd --memory {args.memory}: the cache gets "
              "half; a pack whose decoded bytes fit it is in the ram tier)")
        print(f"| {'loader':<34} | {'samples/s':>10} | {'median':>10} | {'MB/s':>7} "
              f"| {'batchclient / this':>18} |")
        print(f"|{'-' * 36}|{'-' * 12}|{'-' * 12}|{'-' * 9}|{'-' * 20}|")
        for r in rows + [ours]:
            ratio = f"{r['ratio']:.2f}x" if "ratio" in r else "1.00x"
            print(f"| {r['loader']:<34} | {r['samples_s']:>10,.0f} | "
                  f"{r['median_samples_s']:>10,.0f} | {r['bytes_s'] / 1e6:>7.1f} | {ratio:>18} |")
        if args.json:
            print(json.dumps({"pack": info, "batch_size": args.batch_size, "epochs": args.epochs,
                              "runs": rows + [ours]}, indent=1))
        return 0
    finally:
        if daemon is not None:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(30)
        if made:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (RuntimeError, ValueError, OSError, subprocess.CalledProcessError) as e:
        print(f"bench-vs-torch: {e}", file=sys.stderr)
        sys.exit(1)
