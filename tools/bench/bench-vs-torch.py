#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""bench-vs-torch: batchd's Python Loader against what PyTorch users run today.

The same samples, read four ways in one run:
  raw   torch.utils.data.DataLoader over a map-style Dataset that opens and
        reads one file per sample from a directory;
  zst   the same, one .zst file per sample (zstd level 3), decompressed with
        python3-zstandard;
  bpk   the same, reading the .bpk itself: it parses the index
        (lib/pack/PACK.md), preads the block, checks its XXH3 hashes when
        python3-xxhash is there (batchd always does) and decompresses it;
  batchd  batchclient.Loader on a batchd that this script starts with the
        daemon's defaults (--no-config, --socket and --root; --memory and --direct
        only when asked), serving the sample directory packed by
        `batchd-pack create` with its default options (one sample per block),
        shuffle="global", each batch taken as a [batch, sample] uint8 tensor
        (a view, no copy).

Every loader shuffles (DataLoader shuffle=True), uses the same batch size,
and has one untimed warm-up epoch (workers start, page cache fills) before
the --epochs timed ones. Each peer first runs with every --workers count
(num_workers; pin_memory off, persistent workers) and all are shown; its
best count then runs in --repeat pairs with batchd, interleaved A B A B,
so that both sides of a pair see the same machine. The table gives each
loader's median samples/s and the median of the per-pair ratios
batchd / peer with their spread (min-max); the other worker counts of a
peer show their sweep figure, and batchd's median over theirs ("sweep
only"). Every epoch of every run must deliver the same bytes: its check
sum (of 64-bit words, mod 2^64) is checked against the data's. Above the
table: the pack (blocks, compression, dictionary), the load average at
the start and the end (other work on the machine widens the spread), and
the daemon's tier (the session's "tier" in batchd's status) with the
blocks it read and decoded and its block cache hits in the first and the
last of its runs. A batchd epoch of small samples can take well under a
second: --epochs 3 (or more) steadies its figure on a busy machine.

Each sample is half random bytes and half text (words of a fixed
vocabulary), made deterministically from --seed, so that compression
does real work and a .zst file is about 70% of its sample. --workdir
keeps the data for later runs with the same settings.

    /usr/bin/python3 tools/bench/bench-vs-torch.py                  # 20000 x 8 KiB
    /usr/bin/python3 tools/bench/bench-vs-torch.py --record-size 128K --samples 4000
    /usr/bin/python3 tools/bench/bench-vs-torch.py --pack /srv/data/x.bpk --peers bpk

Needs python3-torch, python3-numpy and python3-zstandard (Debian); run as
root it installs what is missing with apt-get, else it says what to
install. Uses the build tree's batchd, batchd-pack and libbatchclient
(--build, default build/). Exit status: 0 ok, 1 failure, 2 usage or a
missing dependency.
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import bench_daemon

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEBS = {"numpy": "python3-numpy", "torch": "python3-torch", "zstandard": "python3-zstandard"}
PEERS = ("raw", "zst", "bpk")
PEER_NAMES = {"raw": "raw files", "zst": ".zst files", "bpk": ".bpk in Python"}
ZSTD_LEVEL = 3                # batchd-pack's default level: the same work per byte
MASK = (1 << 64) - 1
DATA_VERSION = 2              # bump when make_samples changes what it writes
WORDS = (b"the of and to in is was for on that with as by at from his an were are which this "
         b"be or has had not first one their its new after but who they two her she been "
         b"other when time during all into school there world also city some would most "
         b"more state over only national can where university since about team between "
         b"under three group both then four while known year through season may against "
         b"loader batch sample epoch shuffle block cache decode tensor worker queue").split()


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


SIZE_FORMS = ("a number of bytes, or a number with a unit: K, M, G, T or KiB, MiB, GiB, TiB "
              "(powers of 1024), KB, MB, GB, TB (powers of 1000), e.g. 4096, 512M, 1.5 GiB, 2GB")
SIZE = re.compile(r"([0-9]+)(?:\.([0-9]+))?[ \t]*(?:([KMGT])(iB|B)?|B)?", re.IGNORECASE)


def size_arg(s):
    """A size as batchd reads one (lib/proto/units.c, bp_parse_size): digits, an
    optional fraction, blanks, then B, K/M/G/T alone or with iB (powers of
    1024) or with B (powers of 1000), letters in any case; a fraction needs
    a unit and is rounded down to whole bytes."""
    m = SIZE.fullmatch(s)
    if not m or (m.group(2) and not m.group(3)):
        raise argparse.ArgumentTypeError(f"'{s}' is not a size ({SIZE_FORMS})")
    whole, frac, letter, suffix = m.groups()
    base = 1000 if suffix and suffix.lower() == "b" else 1024
    mult = base ** ("KMGT".index(letter.upper()) + 1) if letter else 1
    v = int(whole) * mult + (int(frac) * mult // 10 ** len(frac) if frac else 0)
    if v < 1:
        raise argparse.ArgumentTypeError(f"'{s}' must be at least 1 byte")
    return v


def count_arg(least):
    def parse(s):
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{s}' is not a whole number")
        if v < least:
            raise argparse.ArgumentTypeError(f"{v} must be at least {least}")
        return v
    return parse


def list_arg(s, allowed=None):
    items = [x.strip() for x in s.split(",") if x.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"'{s}' names nothing")
    if allowed is None:
        return [count_arg(0)(x) for x in items]
    bad = [x for x in items if x not in allowed]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown {', '.join(bad)}: choose from "
                                         f"{', '.join(allowed)}")
    return list(dict.fromkeys(items))


def data_sum(a):
    """The check sum of a uint8 array (last axis: one sample): the sum of
    its little-endian 64-bit words mod 2^64 when a sample is a multiple of 8
    bytes, else the sum of its bytes; either way the same whatever order the
    samples come in. Reading every byte is also the trainer's touch. (Not
    torch's uint8 sum: promoted to int64 it runs at well under 1 GB/s.)"""
    import numpy as np
    if a.shape[-1] % 8 == 0:
        return int(a.reshape(-1).view("<u8").sum(dtype=np.uint64))
    return int(a.sum(dtype=np.int64)) & MASK


def as_tensor(data, size):
    """bytes-like data as a fresh uint8 tensor of `size` bytes (the copy a
    Dataset makes so that collate gets a writable tensor)."""
    import numpy as np
    import torch
    if len(data) != size:
        raise IOError(f"a sample of {len(data)} bytes where {size} were expected")
    t = torch.empty(size, dtype=torch.uint8)
    t.numpy()[:] = np.frombuffer(data, np.uint8)
    return t


# ---- the peers: map-style Datasets as users write them ------------------------------------------

class RawFiles:
    """One file per sample: open, read straight into the sample's tensor."""

    def __init__(self, paths, size):
        self.paths, self.size = paths, size

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        import torch
        t = torch.empty(self.size, dtype=torch.uint8)
        with open(self.paths[i], "rb", buffering=0) as f:
            n = f.readinto(t.numpy())
        if n != self.size:
            raise IOError(f"{self.paths[i]}: {n} bytes, expected {self.size}")
        return t


class ZstdFiles:
    """One .zst file per sample, decompressed with python3-zstandard (one
    decompressor per worker process, made on its first sample)."""

    def __init__(self, paths, size):
        self.paths, self.size = paths, size
        self._pid = self._d = None

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        if self._pid != os.getpid():
            import zstandard
            self._d, self._pid = zstandard.ZstdDecompressor(), os.getpid()
        with open(self.paths[i], "rb") as f:
            return as_tensor(self._d.decompress(f.read()), self.size)


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
            version = struct.unpack_from("<I", foot, 56)[0]
            # Version 3 ends the index with a section table (PACK.md, Fields): 32 bytes
            # a section; the samples' bytes stay where they are.
            tables = 56 * blocks + 16 * samples
            if version not in (1, 2, 3) or index_size < tables or (
                    (index_size - tables) % 32 if version == 3 else index_size != tables):
                raise ValueError(f"{path}: index size does not match its counts")
            if version == 3 and self._one_bytes_field(f, index_off + tables,
                                                      index_size - tables) is False:
                raise ValueError(f"{path}: samples of more than one bytes field")
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

    @staticmethod
    def _one_bytes_field(f, table_off, table_size):
        """Whether the schema (the first section, kind 1) has one bytes field
        (type 1): then a sample is its bytes, as in a pack before fields."""
        f.seek(table_off)
        kind, _, off, size, _ = struct.unpack("<IIQQQ", f.read(32))
        if kind != 1 or table_size < 32:
            return False
        f.seek(off)
        schema = f.read(size)
        at, nbytes = 4, 0
        for _ in range(struct.unpack_from("<I", schema, 0)[0]):
            ftype, _, name_len, classes, _ = struct.unpack_from("<BBHIQ", schema, at)
            at += 16 + name_len
            for _ in range(classes):
                at += 2 + struct.unpack_from("<H", schema, at)[0]
            nbytes += ftype == 1
        return nbytes == 1

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
        v = self.sample(i)
        return as_tensor(v, len(v))


# ---- the data -----------------------------------------------------------------------------------

def text_corpus(rng, nbytes):
    """About nbytes of text: words of WORDS drawn with Zipf-like weights,
    with a full stop and a new line now and then."""
    import numpy as np
    w = 1.0 / np.arange(1, len(WORDS) + 1)
    picks = rng.choice(len(WORDS), size=nbytes // 4 + 16, p=w / w.sum())
    ends = rng.random(len(picks))
    words = [WORDS[p] + (b".\n" if e < 0.05 else b" ") for p, e in zip(picks, ends)]
    return b"".join(words)


def write_sample(data, i, dirs, zc):
    name = f"{i:08d}"
    with open(os.path.join(dirs["raw"], name), "wb") as f:
        f.write(data)
    with open(os.path.join(dirs["zst"], name + ".zst"), "wb") as f:
        f.write(zc.compress(data))


def gen_samples(n, size, seed):
    """The n samples of `size` bytes this seed makes, in order, as bytes:
    half random bytes, half a slice of a text corpus (tools/peers writes
    the same ones)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    corpus = text_corpus(rng, max(8 << 20, 4 * size))
    half, text = size // 2, size - size // 2
    for lo in range(0, n, 1024):
        k = min(1024, n - lo)
        noise = rng.integers(0, 256, (k, half), dtype=np.uint8)
        starts = rng.integers(0, len(corpus) - text, k)
        for j in range(k):
            yield noise[j].tobytes() + corpus[starts[j]:starts[j] + text]


def make_samples(dirs, n, size, seed):
    """gen_samples into dirs["raw"] (one file each) and dirs["zst"] (one
    .zst each). @return the data_sum of them all."""
    import numpy as np
    import zstandard
    zc = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    total = 0
    for i, data in enumerate(gen_samples(n, size, seed)):
        total = (total + data_sum(np.frombuffer(data, np.uint8))) & MASK
        write_sample(data, i, dirs, zc)
    return total


def extract_samples(dirs, pack):
    """The samples of an existing pack into dirs, as make_samples writes
    them. @return (count, size, data_sum of them all)."""
    import numpy as np
    import zstandard
    ds = BpkDataset(pack)
    zc = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    total, size = 0, None
    for i in range(len(ds)):
        data = bytes(ds.sample(i))
        if size is None:
            size = len(data)
        elif len(data) != size:
            raise ValueError(f"{pack}: sample {i} has {len(data)} bytes, sample 0 {size}: "
                             "this benchmark needs fixed-size samples (batches as tensors)")
        total = (total + data_sum(np.frombuffer(data, np.uint8))) & MASK
        write_sample(data, i, dirs, zc)
    return len(ds), size, total


def prepare(args, work, pack_tool):
    """The sample directories and the pack under work, reused when a
    manifest says they were made with the same settings.
    @return the manifest: samples, size, sum, pack, raw, zst."""
    dirs = {k: os.path.join(work, k) for k in ("raw", "zst")}
    key = {"version": DATA_VERSION, "pack": os.path.abspath(args.pack) if args.pack else None,
           "samples": args.samples, "size": args.record_size, "seed": args.seed}
    mpath = os.path.join(work, "manifest.json")
    try:
        with open(mpath) as f:
            m = json.load(f)
        if m.get("key") == key and os.path.exists(m["pack"]):
            return m
    except (OSError, ValueError):
        pass
    for d in dirs.values():
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    if os.path.exists(os.path.join(work, "bench.bpk")):
        os.unlink(os.path.join(work, "bench.bpk"))
    t0 = time.perf_counter()
    if args.pack:
        n, size, total = extract_samples(dirs, key["pack"])
        pack = key["pack"]
    else:
        n, size = args.samples, args.record_size
        total = make_samples(dirs, n, size, args.seed)
        pack = os.path.join(work, "bench.bpk")
        subprocess.run([pack_tool, "create", pack, dirs["raw"]], check=True,
                       stdout=subprocess.DEVNULL)
    m = {"key": key, "samples": n, "size": size, "sum": total, "pack": pack, **dirs}
    with open(mpath, "w") as f:
        json.dump(m, f)
    print(f"  data: {n} samples of {size} B made in {time.perf_counter() - t0:.1f} s "
          f"under {work}", file=sys.stderr)
    return m


# ---- the runs -----------------------------------------------------------------------------------

def timed(epoch_iter, to_tensor, args):
    """One warm-up epoch, then args.epochs timed ones.
    @return {"samples_s", "bytes_s", "sums"} (sums: each epoch's data_sum)."""
    sums = []
    samples = nbytes = 0
    t0 = None
    for e in range(args.epochs + 1):
        if e == 1:
            t0 = time.perf_counter()
            samples = nbytes = 0
        total = 0
        for item in epoch_iter():
            t = to_tensor(item)
            total = (total + data_sum(t.numpy())) & MASK
            samples += t.shape[0]
            nbytes += t.numel()
        sums.append(total)
    dt = time.perf_counter() - t0
    return {"samples_s": samples / dt, "bytes_s": nbytes / dt, "sums": sums}


def run_torch(ds, args, workers):
    import warnings
    import torch
    # More workers than CPUs is what --workers asked for; the CPU count is printed.
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    from torch.utils.data import DataLoader
    g = torch.Generator()
    g.manual_seed(args.seed)
    dl = DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=workers,
                    pin_memory=False, persistent_workers=workers > 0, generator=g)
    return timed(lambda: iter(dl), lambda x: x, args)


def counters(st):
    return {"read": st["pipeline"]["blocks_read"], "decoded": st["pipeline"]["blocks_decoded"],
            "hits": st["cache"]["hits"], "misses": st["cache"]["misses"]}


def run_batchd(sock, name, args):
    import torch
    import batchclient
    before = counters(batchclient.status(sock))
    ld = batchclient.Loader(name, args.batch_size, shuffle="global", seed=args.seed, socket=sock)
    try:
        mine = [s for s in batchclient.status(sock).get("sessions", [])
                if s.get("pid") == os.getpid()]
        out = timed(lambda: iter(ld), lambda b: b.torch(torch.uint8, (ld.max_sample,)), args)
    finally:
        ld.close()
    after = counters(batchclient.status(sock))
    out["batchd"] = {k: after[k] - before[k] for k in after}
    out["tier"] = mine[0].get("tier", "?") if mine else "?"
    return out


def check_bytes(label, run, want):
    if any(s != want for s in run["sums"]):
        raise RuntimeError(f"{label} delivered other bytes than the samples hold: epoch sums "
                           f"{run['sums']}, expected {want} each")


def log_tiers(path):
    """The tiers batchd's log gives its datasets at open ("... stored: tier ram, ...")."""
    import re
    with open(path, errors="replace") as f:
        return sorted(set(re.findall(r"stored: tier (\w+)", f.read())))


def start_batchd(args, root, sock, log):
    argv = [args.batchd, "--socket", sock, "--root", root]
    if args.memory:
        argv += ["--memory", args.memory]
    if args.direct:
        argv += ["--direct", args.direct]
    return bench_daemon.start_batchd(argv, sock, log)


def peer_datasets(m, args):
    paths = {k: [os.path.join(m[k], n) for n in sorted(os.listdir(m[k]))] for k in ("raw", "zst")}
    for k, v in paths.items():
        if len(v) != m["samples"]:
            raise RuntimeError(f"{m[k]} holds {len(v)} files, expected {m['samples']}: "
                               "remove the work directory to make the data again")
    make = {"raw": lambda: RawFiles(paths["raw"], m["size"]),
            "zst": lambda: ZstdFiles(paths["zst"], m["size"]),
            "bpk": lambda: BpkDataset(m["pack"], verify=not args.no_verify)}
    return {p: make[p]() for p in args.peers}


def sweep(dss, m, args):
    """Every peer with every worker count, --sweep-repeat rounds.
    @return {peer: {workers: [runs]}}."""
    out = {p: {w: [] for w in args.workers} for p in dss}
    for rep in range(args.sweep_repeat):
        for p, ds in dss.items():
            for w in args.workers:
                r = run_torch(ds, args, w)
                check_bytes(f"{PEER_NAMES[p]}, num_workers={w}", r, m["sum"])
                out[p][w].append(r)
                print(f"  sweep {rep + 1}/{args.sweep_repeat}: {PEER_NAMES[p]}, "
                      f"num_workers={w}: {r['samples_s']:,.0f} samples/s", file=sys.stderr)
    return out


def best_workers(swept):
    """Each peer's worker count with the highest median samples/s in the sweep."""
    return {p: max(by_w, key=lambda w: statistics.median(r["samples_s"] for r in by_w[w]))
            for p, by_w in swept.items()}


def pairs(dss, best, sock, m, args):
    """args.repeat rounds of (batchd, peer) for each peer at its best worker
    count. @return ([batchd runs], {peer: [(peer run, ratio)]})."""
    ours, theirs = [], {p: [] for p in dss}
    name = os.path.basename(m["pack"])
    for rep in range(args.repeat):
        for p, ds in dss.items():
            a = run_batchd(sock, name, args)
            check_bytes("batchclient.Loader", a, m["sum"])
            b = run_torch(ds, args, best[p])
            check_bytes(f"{PEER_NAMES[p]}, num_workers={best[p]}", b, m["sum"])
            ours.append(a)
            theirs[p].append((b, a["samples_s"] / b["samples_s"]))
            print(f"  pair {rep + 1}/{args.repeat}: batchd {a['samples_s']:,.0f}, "
                  f"{PEER_NAMES[p]} (num_workers={best[p]}) {b['samples_s']:,.0f} samples/s: "
                  f"{theirs[p][-1][1]:.2f}x", file=sys.stderr)
    return ours, theirs


# ---- the report ---------------------------------------------------------------------------------

def table_rows(swept, best, ours, theirs):
    med = statistics.median
    ours_sps = med(r["samples_s"] for r in ours)
    rows = [{"loader": "batchclient.Loader (batchd)", "runs": len(ours), "samples_s": ours_sps,
             "bytes_s": med(r["bytes_s"] for r in ours)}]
    for p, by_w in swept.items():
        ratios = [x[1] for x in theirs[p]]
        rows.append({"loader": f"DataLoader, {PEER_NAMES[p]}, num_workers={best[p]}",
                     "peer": p, "workers": best[p], "best": True, "runs": len(ratios),
                     "samples_s": med(x[0]["samples_s"] for x in theirs[p]),
                     "bytes_s": med(x[0]["bytes_s"] for x in theirs[p]),
                     "ratio": med(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)})
        for w, rs in by_w.items():
            if w != best[p]:
                sps = med(r["samples_s"] for r in rs)
                rows.append({"loader": f"  {PEER_NAMES[p]}, num_workers={w}", "peer": p,
                             "workers": w, "best": False, "runs": len(rs), "samples_s": sps,
                             "bytes_s": med(r["bytes_s"] for r in rs), "ratio": ours_sps / sps})
    return rows


def print_table(rows):
    print(f"| {'loader':<44} | {'runs':>4} | {'samples/s':>10} | {'MB/s':>7} "
          f"| {'batchd / this: median (min-max)':>31} |")
    print(f"|{'-' * 46}|{'-' * 6}|{'-' * 12}|{'-' * 9}|{'-' * 33}|")
    for r in rows:
        if "ratio" not in r:
            ratio = "-"
        elif "ratio_min" in r:
            ratio = f"{r['ratio']:.2f}x ({r['ratio_min']:.2f}-{r['ratio_max']:.2f})"
        else:
            ratio = f"{r['ratio']:.2f}x (sweep only)"
        print(f"| {r['loader']:<44} | {r['runs']:>4} | {r['samples_s']:>10,.0f} | "
              f"{r['bytes_s'] / 1e6:>7.1f} | {ratio:>31} |")


def print_report(args, m, info, ours, rows, load0, logged):
    import torch
    print(f"data: {m['samples']} samples of {m['size']} B (half random, half text), "
          f"sum {m['sum']}; pack: {info.get('blocks')} blocks, "
          f"{info.get('samples_per_block', 0):.2f} samples/block, ratio "
          f"{info.get('ratio', 0):.2f}, dictionary {info.get('dict_bytes', 0)} B, codec "
          f"{info.get('codec')}; .zst files {m.get('zst_bytes', 0) / max(1, m['samples']):.0f} "
          f"B/sample on average")
    print(f"batch {args.batch_size}, shuffle on (DataLoader shuffle=True / batchd global), "
          f"{args.epochs} timed epoch(s) after 1 warm-up, {args.repeat} pair(s) per peer, "
          f"torch {torch.__version__}, Python .bpk reader verifies XXH3: "
          f"{'yes' if BpkDataset(m['pack'], not args.no_verify).verifies else 'no'}")
    load1 = os.getloadavg()
    print(f"machine: {os.cpu_count()} CPUs, load average {load0[0]:.2f} {load0[1]:.2f} "
          f"{load0[2]:.2f} at the start, {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} at the end")
    first, last = ours[0]["batchd"], ours[-1]["batchd"]
    tiers = sorted({r["tier"] for r in ours})
    print(f"batchd: {'--memory ' + args.memory if args.memory else 'default memory budget'}, "
          f"tier {'/'.join(tiers)} (log: tier {'/'.join(logged) or '?'}); per run "
          f"({args.epochs + 1} epochs): first "
          f"{first['read']} blocks read, {first['decoded']} decoded, cache "
          f"{first['hits']} hits / {first['misses']} misses; last {last['read']} read, "
          f"{last['decoded']} decoded, {last['hits']} hits / {last['misses']} misses")
    print_table(rows)


def main():
    ap = argparse.ArgumentParser(description="batchclient.Loader against PyTorch DataLoader "
                                 "peers on the same samples",
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=next(
        p for p in __doc__.split("\n\n") if "tools/bench/bench-vs-torch.py" in p))
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="meson build directory")
    ap.add_argument("--pack", help="an existing .bpk (fixed-size samples) to serve; its samples "
                    "are written out for the file peers (default: make the data)")
    ap.add_argument("--samples", type=count_arg(1), default=20000)
    ap.add_argument("--record-size", type=size_arg, default=8192, help="bytes a sample (8K)")
    ap.add_argument("--batch-size", type=count_arg(1), default=128)
    ap.add_argument("--epochs", type=count_arg(1), default=1, help="timed epochs (after one "
                    "warm-up)")
    ap.add_argument("--workers", type=list_arg, default=[0, 1, 2, 4],
                    help="DataLoader num_workers to sweep (default 0,1,2,4)")
    ap.add_argument("--peers", type=lambda s: list_arg(s, PEERS), default=list(PEERS),
                    help="peers to run: raw, zst, bpk (default all)")
    ap.add_argument("--repeat", type=count_arg(1), default=3,
                    help="batchd/peer pairs per peer, interleaved (default 3)")
    ap.add_argument("--sweep-repeat", type=count_arg(1), default=1,
                    help="runs of every peer and worker count before the pairs; the best "
                    "median picks each peer's worker count (default 1)")
    ap.add_argument("--seed", type=count_arg(0), default=0)
    ap.add_argument("--memory", help="batchd --memory (default: not passed, the daemon's own)")
    ap.add_argument("--direct", choices=("auto", "on", "off"), help="batchd --direct")
    ap.add_argument("--no-verify", action="store_true",
                    help="the Python .bpk reader skips XXH3 checks (batchd never does)")
    ap.add_argument("--workdir", help="where the data goes, kept and reused by later runs with "
                    "the same settings (default: a temporary dir, removed)")
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
    if args.pack and not os.path.exists(args.pack):
        print(f"bench-vs-torch: --pack {args.pack}: no such file or directory", file=sys.stderr)
        return 2
    os.environ.setdefault("BATCHCLIENT_LIB", lib)
    sys.path.insert(0, os.path.join(ROOT, "client", "python"))
    work = os.path.abspath(args.workdir or tempfile.mkdtemp(prefix="bench-vs-torch-",
                                                            dir="/tmp"))
    os.makedirs(work, exist_ok=True)
    try:
        return bench(args, work, pack_tool)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


def bench(args, work, pack_tool):
    load0 = os.getloadavg()
    m = prepare(args, work, pack_tool)
    m["zst_bytes"] = sum(e.stat().st_size for e in os.scandir(m["zst"]))
    info = json.loads(subprocess.run([pack_tool, "info", m["pack"], "--json"], check=True,
                                     capture_output=True, text=True).stdout)
    dss = peer_datasets(m, args)
    sock = os.path.join(work, "batchd.sock")
    logpath = os.path.join(work, "batchd.log")
    daemon = None
    with open(logpath, "wb") as log:
        try:
            daemon = start_batchd(args, os.path.dirname(m["pack"]), sock, log)
            swept = sweep(dss, m, args)
            best = best_workers(swept)
            ours, theirs = pairs(dss, best, sock, m, args)
        finally:
            if daemon is not None:
                daemon.send_signal(signal.SIGTERM)
                daemon.wait(30)
    rows = table_rows(swept, best, ours, theirs)
    print_report(args, m, info, ours, rows, load0, log_tiers(logpath))
    if args.json:
        print(json.dumps({"data": {k: m[k] for k in ("samples", "size", "sum", "zst_bytes")},
                          "pack": info, "batch_size": args.batch_size, "epochs": args.epochs,
                          "repeat": args.repeat, "tiers": sorted({r["tier"] for r in ours}),
                          "batchd_runs": [r["samples_s"] for r in ours], "rows": rows},
                         indent=1))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (RuntimeError, ValueError, OSError, subprocess.CalledProcessError) as e:
        print(f"bench-vs-torch: {e}", file=sys.stderr)
        sys.exit(1)
