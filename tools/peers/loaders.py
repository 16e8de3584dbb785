# SPDX-License-Identifier: MIT
"""The loaders the peers' harness runs, each as its users run it, and the
one consumer loop they all feed.

Why this module exists: every loader must be measured by the same trainer
loop (take a batch as a [batch, sample] uint8 array, read every byte of it)
and checked the same way (every sample of the epoch once, bytes unchanged),
while each is set up with its own API and its own knobs. A peer here is a
name, the format it reads (data.py writes them), the settings its sweep
tries, and open(), which returns a callable giving one epoch's iterator of
(ids or None, [batch, size] array).

One measurement (run_one) is one process: the driver starts a fresh Python
for every run (run.py --child), so that no loader's worker processes,
threads, shared memory or page cache of its own outlive its run, and so
that a run can be put in a memory cgroup whole.
"""
import math
import os
import time

# The peers, in the order of the table. "settings": the points the sweep
# tries (run.py's --workers / --dali-threads replace them).
PEERS = {
    "batchd": {"title": "batchd (batchclient.Loader)", "format": "bpk", "module": "batchclient",
               "knob": None},
    "torch": {"title": "torch DataLoader, files", "format": "raw", "module": "torch",
              "knob": "num_workers"},
    "wds": {"title": "WebDataset tars", "format": "wds", "module": "webdataset",
            "knob": "num_workers"},
    "litdata": {"title": "litData StreamingDataset", "format": "litdata", "module": "litdata",
                "knob": "num_workers"},
    "mds": {"title": "Mosaic StreamingDataset", "format": "mds", "module": "streaming",
            "knob": "num_workers"},
    "dali": {"title": "DALI readers.file (CPU)", "format": "raw", "module": "nvidia.dali",
             "knob": "num_threads"},
}
WDS_SHUFFLE = 1000        # WebDataset's sample buffer (its docs' example size)
DALI_FILL = 1024          # DALI's reader shuffle buffer (initial_fill, its default)


def describe(peer, s):
    knob = PEERS[peer]["knob"]
    if knob is None:
        return f"--memory {s['memory']}" if s.get("memory") else "daemon defaults"
    return f"{knob}={s[knob]}"


def as_batch(ids, blobs, size):
    """A list of sample bytes as one [batch, size] uint8 tensor (one copy,
    as a collate_fn makes it), with the ids as a list."""
    import numpy as np
    import torch
    joined = b"".join(blobs)
    if len(joined) != size * len(blobs):
        raise IOError(f"a batch of {len(blobs)} samples holds {len(joined)} B, "
                      f"expected {size} each")
    return ids, torch.from_numpy(np.frombuffer(joined, np.uint8).reshape(len(blobs), size).copy())


class DictCollate:
    """collate_fn for items {"id": int, "data": bytes} (litData, Mosaic)."""

    def __init__(self, size):
        self.size = size

    def __call__(self, items):
        return as_batch([int(x["id"]) for x in items], [x["data"] for x in items], self.size)


class WdsCollate:
    """collation_fn for WebDataset's (key, bytes) tuples."""

    def __init__(self, size):
        self.size = size

    def __call__(self, items):
        return as_batch([int(k) for k, _ in items], [b for _, b in items], self.size)


class IdFiles:
    """bench-vs-torch's Dataset over files (one open + readinto a sample),
    yielding (id, tensor) so that the epoch's ids can be checked too."""

    def __init__(self, paths, size):
        from data import bench_vs_torch
        self.files = bench_vs_torch().RawFiles(paths, size)

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        return i, self.files[i]


def _loader_kw(w):
    """DataLoader arguments every DataLoader-based peer gets: persistent
    workers (no respawn per epoch), pin_memory off (no GPU here)."""
    return {"num_workers": w, "persistent_workers": w > 0, "pin_memory": False}


def open_batchd(spec, s):
    import batchclient
    import torch
    ld = batchclient.Loader(spec["dataset"], spec["batch_size"], shuffle="global",
                            seed=spec["seed"], socket=spec["socket"])
    size = spec["size"]

    def epoch():
        for b in ld:
            yield b.ids, b.torch(torch.uint8, (size,))
    return epoch, ld.close


def open_torch(spec, s):
    import torch
    from torch.utils.data import DataLoader
    raw = spec["path"]
    paths = [os.path.join(raw, n) for n in sorted(os.listdir(raw))]
    g = torch.Generator()
    g.manual_seed(spec["seed"])
    dl = DataLoader(IdFiles(paths, spec["size"]), batch_size=spec["batch_size"], shuffle=True,
                    generator=g, **_loader_kw(s["num_workers"]))

    def epoch():
        for ids, t in dl:
            yield ids.tolist(), t
    return epoch, None


def open_wds(spec, s):
    import webdataset as wds
    d = spec["path"]
    urls = [os.path.join(d, n) for n in sorted(os.listdir(d)) if n.endswith(".tar")]
    ds = (wds.WebDataset(urls, shardshuffle=len(urls), seed=spec["seed"], empty_check=False)
          .shuffle(WDS_SHUFFLE).to_tuple("__key__", "bin")
          .batched(spec["batch_size"], collation_fn=WdsCollate(spec["size"]), partial=True))
    dl = wds.WebLoader(ds, batch_size=None, **_loader_kw(s["num_workers"]))
    return lambda: iter(dl), None


def open_litdata(spec, s):
    import litdata
    if os.environ.get("BATCHD_PEERS_ALLOW_HTTP") == "1":
        # The test bucket is plain http://; litData's obstore client options
        # lack allow_http (its chunk GETs fail with BadScheme): add it, and
        # nothing else, so that its own download path is the one measured.
        from litdata.streaming import downloader
        opts = dict(downloader._OBSTORE_CLIENT_OPTIONS)
        opts["allow_http"] = "true"
        downloader._OBSTORE_CLIENT_OPTIONS = opts
    ds = litdata.StreamingDataset(spec["path"], shuffle=True, seed=spec["seed"],
                                  cache_dir=spec.get("cache_dir"))
    dl = litdata.StreamingDataLoader(ds, batch_size=spec["batch_size"],
                                     collate_fn=DictCollate(spec["size"]),
                                     **_loader_kw(s["num_workers"]))
    return lambda: iter(dl), None


def open_mds(spec, s):
    from streaming import StreamingDataset
    from torch.utils.data import DataLoader
    remote = spec.get("remote")
    ds = StreamingDataset(local=spec.get("cache_dir") or spec["path"], remote=remote,
                          shuffle=True, shuffle_seed=spec["seed"],
                          batch_size=spec["batch_size"])
    dl = DataLoader(ds, batch_size=spec["batch_size"], collate_fn=DictCollate(spec["size"]),
                    **_loader_kw(s["num_workers"]))
    return lambda: iter(dl), None


def open_dali(spec, s):
    """A CPU-only pipeline (device_id=None): fn.readers.file over the
    files, labels = ids, random_shuffle, the last batch padded (and cut
    here) so that every epoch starts afresh."""
    import numpy as np
    from nvidia.dali import fn, pipeline_def
    raw, n, B = spec["path"], spec["n"], spec["batch_size"]
    files = [os.path.join(raw, nm) for nm in sorted(os.listdir(raw))]

    @pipeline_def(batch_size=B, num_threads=s["num_threads"], device_id=None,
                  seed=spec["seed"] + 1, prefetch_queue_depth=2)
    def pipe():
        data, label = fn.readers.file(files=files, labels=list(range(n)), random_shuffle=True,
                                      initial_fill=DALI_FILL, pad_last_batch=True,
                                      name="reader", device="cpu")
        return data, label

    p = pipe()
    p.build()
    batches = math.ceil(n / B)

    def epoch():
        for k in range(batches):
            data, label = p.run()
            keep = min(B, n - k * B)
            ids = np.asarray(label.as_array()).reshape(-1)[:keep]
            yield ids.tolist(), data.as_array()[:keep]
    return epoch, None


OPEN = {"batchd": open_batchd, "torch": open_torch, "wds": open_wds, "litdata": open_litdata,
        "mds": open_mds, "dali": open_dali}


def check_epoch(label, fps, want_sorted, ids, n):
    """Every sample of the epoch exactly once, bytes unchanged: the sorted
    fingerprints equal the data's; the ids, where the loader gives them,
    are 0..n-1 once each."""
    import numpy as np
    got = np.sort(np.concatenate(fps)) if fps else np.empty(0, np.uint64)
    if len(got) != n:
        raise RuntimeError(f"{label}: an epoch of {len(got)} samples, expected {n}")
    if not np.array_equal(got, want_sorted):
        bad = int(np.count_nonzero(got != want_sorted))
        raise RuntimeError(f"{label}: {bad} of {n} samples differ from the data (missing, "
                           "repeated or changed bytes)")
    if ids is not None and not np.array_equal(np.sort(np.asarray(ids, np.int64)),
                                              np.arange(n, dtype=np.int64)):
        raise RuntimeError(f"{label}: the ids of an epoch are not 0..{n - 1} once each")


def run_one(spec):
    """One measurement: open the peer, spec["warmup"] untimed epochs, then
    spec["epochs"] timed ones, each checked.
    @return {"samples_s", "bytes_s", "epoch_s": [...], "setup_s"}."""
    import numpy as np
    from data import fingerprints
    peer, s = spec["peer"], spec["settings"]
    label = f"{PEERS[peer]['title']}, {describe(peer, s)}"
    want = np.sort(np.load(spec["fps"]))
    n, size = spec["n"], spec["size"]
    t0 = time.perf_counter()
    epoch, close = OPEN[peer](spec, s)
    setup = time.perf_counter() - t0
    times = []
    try:
        for e in range(spec["warmup"] + spec["epochs"]):
            fps, ids, have_ids = [], [], True
            t0 = time.perf_counter()
            for bid, batch in epoch():
                a = batch.numpy() if hasattr(batch, "numpy") else np.asarray(batch)
                fps.append(fingerprints(a.reshape(-1, size)))
                if bid is None:
                    have_ids = False
                elif have_ids:
                    ids.extend(bid)
            dt = time.perf_counter() - t0
            check_epoch(f"{label}, epoch {e}", fps, want, ids if have_ids else None, n)
            times.append(dt)
    finally:
        if close:
            close()
    timed = times[spec["warmup"]:]
    return {"samples_s": n * len(timed) / sum(timed), "bytes_s": n * size * len(timed) / sum(timed),
            "epoch_s": times, "setup_s": setup}
