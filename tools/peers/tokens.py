# SPDX-License-Identifier: MIT
"""The tokens workload's loaders (LLM pretraining), each as its users run
it, and the one consumer loop they all feed.

Why this module exists: loaders.py measures loaders of samples; an LLM
trainer instead asks for [batch, seq_len + 1] windows of a token stream,
from one source or from a weighted mixture of sources, and what counts is
tokens per second handed to it, with every window of an epoch once where
the loader claims that. tokens_data.py writes the data; here each peer is
opened over it and returns a callable giving one epoch's iterator of
(ids or None, [batch, row] integer tensor, source indexes or None); run_one
times and checks it in a child process (run.py --child).

The peers (their settings: tools/peers/README.md):
  batchd       batchclient.Loader(path, batch_size, seq_len=,
               sequences="windows", shuffle="global"), or over
               [(path, weight), ...]: int32 tensors (b.torch("tokens"))
  litdata      StreamingDataset(item_loader=TokensLoader(block_size=row),
               shuffle=True) + StreamingDataLoader; a mixture through
               CombinedStreamingDataset(weights=, iterate_over_all=False)
  mds          Mosaic StreamingDataset(shuffle=True, batch_size=B) over MDS
               windows in a torch DataLoader; a mixture as Streams with
               proportion=
  memmap       nanoGPT's get_batch: random offsets into the np.memmap of the
               .bin (made anew each batch, as nanoGPT does),
               torch.from_numpy(x.astype(np.int64)); a mixture picks each
               sample's source by weight. Not an epoch of windows: an
               "epoch" is as many random windows as the grid has
  memmap-perm  the same reads over a permutation of the non-overlapping
               windows per epoch: every window once
The peers' collates give int64 (what nanoGPT's astype, litgpt's .long() and
llm-foundry's collator give); batchd gives int32. Nothing is pinned: there
is no GPU here (nanoGPT pins only for CUDA).

Checks (after the timed loop; the fingerprints are taken in it, the same
work for every peer): single source, an epoch of an exactly-once peer must
hold every window of its grid once (sorted fingerprints equal), and where
it gives ids, window id k must be grid window k. A mixture run: every
window must be a window of some source (the source is found by its
fingerprint, or given by b.sources and then checked), the counts per
source and windows seen twice are reported.
"""
import os
import time

DTYPE_PEERS = "int64"

PEERS = {
    "batchd": {"title": "batchd (batchclient.Loader, windows)", "format": "bpk",
               "module": "batchclient", "knob": None, "exact": True},
    "litdata": {"title": "litData TokensLoader", "format": "litdata", "module": "litdata",
                "knob": "num_workers", "exact": True},
    "mds": {"title": "Mosaic StreamingDataset (MDS)", "format": "mds", "module": "streaming",
            "knob": "num_workers", "exact": True},
    "memmap": {"title": "np.memmap, nanoGPT get_batch", "format": "bin", "module": "numpy",
               "knob": None, "exact": False},
    "memmap-perm": {"title": "np.memmap, permuted windows", "format": "bin", "module": "numpy",
                    "knob": None, "exact": True},
}


def describe(peer, s):
    knob = PEERS[peer]["knob"]
    if knob is not None:
        return f"{knob}={s[knob]}"
    return "daemon defaults" if peer == "batchd" else "main process"


# ---- the peers ---------------------------------------------------------------------------------

def open_batchd(spec, s):
    import batchclient
    # b.torch() imports torch at its first call: here, as the other peers'
    # opens import it, not in the first epoch's time (1.3 s here, far more
    # with a cold page cache)
    import torch  # noqa: F401
    srcs = spec["sources"]
    if spec["mode"] == "mix":
        ds = [(x["name"] + ".bpk", w) for x, w in zip(srcs, spec["weights"])]
    else:
        ds = srcs[0]["name"] + ".bpk"
    ld = batchclient.Loader(ds, batch_size=spec["batch_size"], seq_len=spec["seq_len"],
                            sequences="windows", shuffle=spec.get("shuffle", "global"),
                            seed=spec["seed"], socket=spec["socket"])

    def epoch():
        # b.ids: the window's index (in a mixture, counted over the sources'
        # windows end to end; b.sources: each row's source)
        for b in ld:
            src = getattr(b, "sources", None)
            yield b.ids, b.torch("tokens"), src
    return epoch, ld.close


class PeerCollate:
    """collate_fn: a list of windows (torch uint16 tensors from litData,
    {"tokens": uint16 array} from Mosaic) as one [B, row] int64 tensor."""

    def __call__(self, items):
        import numpy as np
        import torch
        # numpy's cast: torch's own uint16 -> int64 (.long()) took 3x longer
        rows = [x["tokens"] if isinstance(x, dict) else x.numpy() for x in items]
        return torch.from_numpy(np.stack(rows).astype(np.int64))


def _loader_kw(w):
    return {"num_workers": w, "persistent_workers": w > 0, "pin_memory": False}


def open_litdata(spec, s):
    import litdata
    from litdata import TokensLoader

    def one(x):
        return litdata.StreamingDataset(x["path"], item_loader=TokensLoader(block_size=spec["row"]),
                                        shuffle=True, seed=spec["seed"])
    if spec["mode"] == "mix":
        ds = litdata.CombinedStreamingDataset([one(x) for x in spec["sources"]],
                                              seed=spec["seed"], weights=spec["weights"],
                                              iterate_over_all=False)
    else:
        ds = one(spec["sources"][0])
    dl = litdata.StreamingDataLoader(ds, batch_size=spec["batch_size"], collate_fn=PeerCollate(),
                                     **_loader_kw(s["num_workers"]))

    def epoch():
        for t in dl:
            yield None, t, None
    return epoch, None


def open_mds(spec, s):
    from streaming import Stream, StreamingDataset
    from torch.utils.data import DataLoader
    kw = {"shuffle": True, "shuffle_seed": spec["seed"], "batch_size": spec["batch_size"]}
    if spec["mode"] == "mix":
        ds = StreamingDataset(streams=[Stream(local=x["path"], proportion=w)
                                       for x, w in zip(spec["sources"], spec["weights"])], **kw)
    else:
        ds = StreamingDataset(local=spec["sources"][0]["path"], **kw)
    dl = DataLoader(ds, batch_size=spec["batch_size"], collate_fn=PeerCollate(),
                    **_loader_kw(s["num_workers"]))

    def epoch():
        for t in dl:
            yield None, t, None
    return epoch, None


def _pick_sources(rng, B, weights):
    import numpy as np
    return rng.choice(len(weights), size=B, p=np.asarray(weights) / sum(weights))


def open_memmap(spec, s):
    """nanoGPT's get_batch (train.py), one row of seq_len + 1 ids a sample
    in place of its x and y (y is x shifted by one)."""
    import numpy as np
    import torch
    srcs, B, row = spec["sources"], spec["batch_size"], spec["row"]
    mix = spec["mode"] == "mix"
    gen = torch.Generator().manual_seed(spec["seed"])
    rng = np.random.default_rng(spec["seed"])
    batches = spec["epoch_windows"] // B

    def get_batch():
        # nanoGPT: "We recreate np.memmap every batch to avoid a memory leak"
        data = [np.memmap(x["path"], dtype=np.uint16, mode="r") for x in srcs]
        if mix:     # each sample's source by weight, then an offset in it
            which = _pick_sources(rng, B, spec["weights"])
            room = torch.tensor([len(data[k]) - row for k in which], dtype=torch.float64)
            ix = (torch.rand(B, generator=gen, dtype=torch.float64) * room).long()
        else:
            which = np.zeros(B, np.int64)
            ix = torch.randint(len(data[0]) - row, (B,), generator=gen)
        x = torch.stack([torch.from_numpy((data[k][i:i + row]).astype(np.int64))
                         for k, i in zip(which, ix.tolist())])
        return x, which

    def epoch():
        for _ in range(batches):
            x, which = get_batch()
            yield None, x, which if mix else None
    return epoch, None


def open_memmap_perm(spec, s):
    """The memmap reads over a permutation of each source's windows, a new
    one each time a source's windows are used up: an epoch of one source
    is every window once."""
    import numpy as np
    import torch
    srcs, B, row = spec["sources"], spec["batch_size"], spec["row"]
    mix = spec["mode"] == "mix"
    rng = np.random.default_rng(spec["seed"])
    nwin = [x["windows"] for x in srcs]
    first = [sum(nwin[:k]) for k in range(len(nwin))]
    state = {"perm": [None] * len(srcs), "at": [0] * len(srcs), "round": [0] * len(srcs)}

    def next_window(k):
        if state["perm"][k] is None or state["at"][k] == nwin[k]:
            state["perm"][k] = np.random.default_rng(
                [spec["seed"], k, state["round"][k]]).permutation(nwin[k])
            state["round"][k] += 1
            state["at"][k] = 0
        w = int(state["perm"][k][state["at"][k]])
        state["at"][k] += 1
        return w

    def epoch():
        data = [np.memmap(x["path"], dtype=np.uint16, mode="r") for x in srcs]
        if mix:
            batches = spec["epoch_windows"] // B
        else:
            batches = -(-nwin[0] // B)
            state["at"][0] = nwin[0]      # a fresh permutation each epoch
        for j in range(batches):
            if mix:
                which = _pick_sources(rng, B, spec["weights"])
            else:
                which = np.zeros(min(B, nwin[0] - j * B), np.int64)
            win = [next_window(int(k)) for k in which]
            x = torch.stack([torch.from_numpy(data[k][w * row:(w + 1) * row].astype(np.int64))
                             for k, w in zip(which, win)])
            # ids as batchd numbers them: the sources' windows end to end
            yield [first[k] + w for k, w in zip(which, win)], x, which if mix else None
    return epoch, None


OPEN = {"batchd": open_batchd, "litdata": open_litdata, "mds": open_mds, "memmap": open_memmap,
        "memmap-perm": open_memmap_perm}


# ---- one measurement -------------------------------------------------------------------------

def dev_read_bytes(dev):
    """Bytes the block device dev (a /proc/diskstats name, e.g. vda) has
    read since boot, or None: the whole machine's reads."""
    try:
        with open("/proc/diskstats") as f:
            for line in f:
                x = line.split()
                if len(x) > 5 and x[2] == dev:
                    return int(x[5]) * 512
    except OSError:
        pass
    return None


def procs_read_bytes(procs):
    """The sum of read_bytes (/proc/PID/io: what a process had read from
    storage, readahead and page faults included, its reaped children
    too) over the processes of a cgroup's procs file: the daemon, the
    trainer and its workers of a cold run. None when it cannot be read."""
    try:
        with open(procs) as f:
            pids = [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return None
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/io") as f:
                total += int(dict(line.split(": ") for line in f.read().splitlines())["read_bytes"])
        except (OSError, KeyError, ValueError):
            pass        # gone meanwhile
    return total


class Seen:
    """What the consumer loop keeps of each batch: the rows' fingerprints,
    the ids and sources where the loader gives them."""

    def __init__(self, w):
        self.w = w
        self.fps, self.ids, self.src = [], [], []
        self.have_ids = self.have_src = True
        self.rows = 0
        self.dtype = None
        self.check_s = 0.0      # time in take(): the consumer's own work

    def take(self, ids, t, src):
        import numpy as np
        from tokens_data import fingerprints
        t0 = time.perf_counter()
        a = t.numpy() if hasattr(t, "numpy") else np.asarray(t)
        if self.dtype is None:
            self.dtype = str(t.dtype).replace("torch.", "")
        self.fps.append(fingerprints(a, self.w))
        self.rows += len(a)
        # copies: a view of a batchd batch kept past its step pins its slot
        if ids is None:
            self.have_ids = False
        elif self.have_ids:
            self.ids.append(np.array(ids, np.int64))
        if src is None:
            self.have_src = False
        elif self.have_src:
            self.src.append(np.array(src, np.int64))
        self.check_s += time.perf_counter() - t0

    def arrays(self):
        import numpy as np
        cat = (lambda v, dt: np.concatenate(v) if v else np.empty(0, dt))
        return (cat(self.fps, np.uint64), cat(self.ids, np.int64) if self.have_ids else None,
                cat(self.src, np.int64) if self.have_src else None)


def check_single(label, seen, want, exact):
    """An epoch of one source: every window of the grid once (exact peers);
    window id k is grid window k where ids are given."""
    import numpy as np
    fps, ids, _ = seen.arrays()
    if not exact:
        return "not checked: random offsets, not windows of a grid"
    if len(fps) != len(want):
        raise RuntimeError(f"{label}: an epoch of {len(fps)} windows, expected {len(want)}")
    if not np.array_equal(np.sort(fps), np.sort(want)):
        bad = int(np.count_nonzero(np.sort(fps) != np.sort(want)))
        raise RuntimeError(f"{label}: {bad} of {len(want)} windows differ from the data's "
                           "(missing, repeated or changed ids)")
    if ids is not None:
        if not np.array_equal(np.sort(ids), np.arange(len(want))):
            raise RuntimeError(f"{label}: the window ids of an epoch are not 0..{len(want) - 1} "
                               "once each")
        if not np.array_equal(fps, want[ids]):
            raise RuntimeError(f"{label}: {int(np.count_nonzero(fps != want[ids]))} windows "
                               "differ from the grid window their id names")
        return "every window once, ids match their windows"
    return "every window once"


def check_mix(label, seen, wants, exact):
    """A mixture run: each window a window of the source b.sources names
    (where given; else of some source: a window that two sources both hold
    counts for the first), per-source counts, windows read more often than
    the sources hold them ("twice": a source may hold the same ids twice,
    long runs of one token or a repeated table).
    @return {"windows": {source index: n}, "twice": n or None, "checked": what}."""
    import numpy as np
    fps, ids, src = seen.arrays()
    if not exact:
        return {"windows": ({int(k): int(n) for k, n in zip(*np.unique(src, return_counts=True))}
                            if src is not None else {}),
                "twice": None, "checked": "not checked: random offsets, not windows of a grid"}
    srt = [np.sort(x) for x in wants]

    def holds(k, f):
        pos = np.clip(np.searchsorted(srt[k], f), 0, len(srt[k]) - 1)
        return srt[k][pos] == f
    if src is not None:
        found = src.copy()
        bad = sum(int((~holds(k, fps[src == k])).sum()) for k in range(len(wants)))
        if bad:
            raise RuntimeError(f"{label}: {bad} of {len(fps)} windows are no window of the "
                               "source their batch names")
    else:
        found = np.full(len(fps), -1, np.int64)
        for k in range(len(wants)):
            found[(found < 0) & holds(k, fps)] = k
        if (found < 0).any():
            raise RuntimeError(f"{label}: {int((found < 0).sum())} of {len(fps)} windows are no "
                               "window of any source")
    if ids is not None and src is not None:
        # a mixture's ids number the sources' windows end to end, in the
        # list's order (batchd: source k's window j is id n_0 + .. + n_k-1 + j)
        first = np.concatenate([[0], np.cumsum([len(x) for x in wants])])
        bad = 0
        for k in range(len(wants)):
            j = ids[src == k] - first[k]
            if len(j) and (j.min() < 0 or j.max() >= len(wants[k])):
                raise RuntimeError(f"{label}: ids {ids[src == k].min()}..{ids[src == k].max()} "
                                   f"of source {k}, whose windows are ids {first[k]}.."
                                   f"{first[k + 1] - 1}")
            bad += int((fps[src == k] != wants[k][j]).sum())
        if bad:
            raise RuntimeError(f"{label}: {bad} windows differ from the window their id names")
    u, c = np.unique(fps, return_counts=True)
    gu, gc = np.unique(np.concatenate(wants), return_counts=True)
    pos = np.clip(np.searchsorted(gu, u), 0, len(gu) - 1)
    held = np.where(gu[pos] == u, gc[pos], 1)
    return {"windows": {int(k): int(n) for k, n in zip(*np.unique(found, return_counts=True))},
            "twice": int(np.maximum(c - held, 0).sum()),
            "checked": "every window one of its source's"}


def run_disk(spec):
    """The disk's own rate: every file under spec["paths"] read once from
    start to end, in order, spec["mode"] "buffered" (8 MiB reads through
    the page cache and its readahead, as cat or dd without flags) or
    "direct" (O_DIRECT, 4 MiB aligned reads, one at a time: dd
    iflag=direct bs=4M). @return {"bytes", "seconds", "mb_s"}."""
    import mmap
    files = []
    for p in spec["paths"]:
        if os.path.isfile(p):
            files.append(p)
        else:
            files += sorted(os.path.join(dp, nm) for dp, _, nms in os.walk(p) for nm in nms)
    direct = spec["mode"] == "direct"
    size = (4 if direct else 8) << 20
    buf = mmap.mmap(-1, size)       # page-aligned, as O_DIRECT needs
    total = 0
    t0 = time.perf_counter()
    for f in files:
        fd = os.open(f, os.O_RDONLY | (os.O_DIRECT if direct else 0))
        try:
            while True:
                n = os.readv(fd, [buf])
                total += n
                if n < size:
                    break
        finally:
            os.close(fd)
    dt = time.perf_counter() - t0
    return {"bytes": total, "seconds": dt, "mb_s": total / dt / 1e6, "files": len(files)}


def run_one(spec):
    """One measurement. single: spec["warmup"] untimed epochs, then
    spec["epochs"] timed ones, each checked; mix: spec["warm_batches"]
    untimed batches, then spec["batches"] timed (the loader's epochs
    chained), checked once. A single run also gives, per epoch, what the
    processes of spec["procs"] (a cgroup's procs file) read from storage
    ("disk_read") and what the block device spec["disk"] read for the
    whole machine ("dev_read"), bytes or None.
    @return {"samples_s" (windows/s), "tokens_s", "epoch_s", "setup_s",
    "dtype", "checked", "disk_read", "dev_read", ...}."""
    if spec.get("kind") == "disk":
        return run_disk(spec)
    import numpy as np
    from tokens_data import fp_weights
    peer, s = spec["peer"], spec["settings"]
    label = f"{PEERS[peer]['title']}, {describe(peer, s)}"
    w = fp_weights(spec["row"])
    wants = [np.load(x["fps"]) for x in spec["sources"]]
    t0 = time.perf_counter()
    epoch, close = OPEN[peer](spec, s)
    setup = time.perf_counter() - t0
    out = {"setup_s": setup}
    try:
        if spec["mode"] == "mix":
            out.update(run_mix(spec, epoch, w, wants, label))
        else:
            times, disk, dev = [], [], []
            for e in range(spec["warmup"] + spec["epochs"]):
                seen = Seen(w)
                r0 = [procs_read_bytes(spec["procs"]) if spec.get("procs") else None,
                      dev_read_bytes(spec["disk"]) if spec.get("disk") else None]
                t0 = time.perf_counter()
                for ids, t, src in epoch():
                    seen.take(ids, t, src)
                times.append(time.perf_counter() - t0)
                r1 = [procs_read_bytes(spec["procs"]) if spec.get("procs") else None,
                      dev_read_bytes(spec["disk"]) if spec.get("disk") else None]
                a, b = [y - x if x is not None and y is not None else None for x, y in zip(r0, r1)]
                disk.append(a)
                dev.append(b)
                out["checked"] = check_single(f"{label}, epoch {e}", seen, wants[0],
                                              PEERS[peer]["exact"])
            timed = times[spec["warmup"]:]
            n = seen.rows
            out.update(epoch_s=times, disk_read=disk, dev_read=dev, windows=n, dtype=seen.dtype,
                       check_share=seen.check_s / times[-1],
                       samples_s=n * len(timed) / sum(timed),
                       tokens_s=n * spec["row"] * len(timed) / sum(timed))
    finally:
        if close:
            close()
    return out


def chained(epoch):
    """The loader's epochs one after another, as a trainer counting steps
    rather than epochs reads them."""
    while True:
        empty = True
        for x in epoch():
            empty = False
            yield x
        if empty:
            raise RuntimeError("an epoch of no batches")


def run_mix(spec, epoch, w, wants, label):
    it = chained(epoch)
    warm = Seen(w)
    for _ in range(spec["warm_batches"]):
        warm.take(*next(it))
    seen = Seen(w)
    t0 = time.perf_counter()
    for _ in range(spec["batches"]):
        seen.take(*next(it))
    dt = time.perf_counter() - t0
    c = check_mix(label, seen, wants, PEERS[spec["peer"]]["exact"])
    names = [x["name"] for x in spec["sources"]]
    return {"epoch_s": [dt], "windows": seen.rows, "dtype": seen.dtype,
            "check_share": seen.check_s / dt,
            "samples_s": seen.rows / dt, "tokens_s": seen.rows * spec["row"] / dt,
            "mix": {names[k]: n for k, n in c["windows"].items()}, "twice": c["twice"],
            "checked": c["checked"]}
