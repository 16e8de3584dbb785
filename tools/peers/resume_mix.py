# SPDX-License-Identifier: MIT
"""The mixture case of the exact-resume workload (resume.py): an LLM
trainer reading windows of tokens from three sources by weight is killed
mid-epoch and resumed from its loader's checkpoint, at the same world
size and at others; per source, which windows were read twice and which
were never read?

Why this exists: a mixture's loader state is more than a count (each
source's place, the sampler's draws), and a resume that is exact for one
dataset may not be for a mixture. resume.py drives it (its Trainer, its
trainer processes, SIGKILL, rank 0's checkpoint); this module holds the
data, the peers and the count.

Data: three sources (web, code, data) of WINDOWS[s] windows of ROW
tokens (seq_len ROW - 1); window k of source s is one document: MARK + s,
k, ids derived from (s, k), and EOS, so that a window's (s, k) is read
from its own ids and checked. Each peer's copy is written by its own
writer: `batchd-pack create --tokens uint16 --eos` of each source's
.bin, MDSWriter shards of windows (column tokens, ndarray:uint16:ROW),
litdata.optimize with TokensLoader (chunks of whole windows, so that its
windows are these).

An epoch of the mixture is EPOCH windows over all ranks (the trainers
stop there; a loader whose epoch ends sooner ends it sooner), weights
WEIGHTS. Each peer first runs the epoch uninterrupted at the killed
world size (the reference); the count per source is then: repeated
(read before the kill and again after), lost (in the reference, never
read), other (read, not in the reference: the resumed run drew other
windows than the uninterrupted one).
"""
import os

import numpy as np

ROW = 64
SEQ = ROW - 1
B = 16
SOURCES = ("web", "code", "data")
WINDOWS = {"web": 2048, "code": 640, "data": 384}
WEIGHTS = (0.7, 0.2, 0.1)
EPOCH = 1536             # windows a mixture epoch is read for, all ranks: 48 steps at world 2
MARK = 60000
EOS = 65535
SEED = 7
WORKERS = 2

# (name, world before the kill, world after, epoch, step of each rank
# after which it dies): 20 of 48 steps at world 2 is 640 windows, a whole
# number of global batches at worlds 1, 2 and 4.
SCENARIOS = (
    ("mix, world 2->2, kill 20/48", 2, 2, 0, 20),
    ("mix, world 2->1, kill 20/48", 2, 1, 0, 20),
    ("mix, world 2->4, kill 20/48", 2, 4, 0, 20),
)


def window(s, k):
    """Window k of source s (indexes into SOURCES) as uint16 ids."""
    body = np.random.default_rng([SEED, s, k]).integers(0, MARK, ROW - 3)
    return np.concatenate([[MARK + s, k], body, [EOS]]).astype(np.uint16)


def window_id(t):
    """(s, k) of a window's ids; ValueError where they are no such window."""
    t = np.asarray(t)
    s, k = int(t[0]) - MARK, int(t[1])
    if len(t) != ROW or not 0 <= s < len(SOURCES) or k >= WINDOWS[SOURCES[s]] or \
            not np.array_equal(t.astype(np.int64), window(s, k).astype(np.int64)):
        raise ValueError(f"{len(t)} ids that are no window of this workload (head {t[:2]})")
    return s * 100000 + k


def ids_of(rows):
    return [window_id(r) for r in np.asarray(rows)]


def write_bins(d):
    """Each source's .bin (nanoGPT layout) under d. @return {source: path}."""
    out = {}
    for s, nm in enumerate(SOURCES):
        p = os.path.join(d, nm + ".bin")
        with open(p, "wb") as f:
            for k in range(WINDOWS[nm]):
                f.write(window(s, k).tobytes())
        out[nm] = p
    return out


class Trainer:
    """The mixture loop over a resume.Trainer: stops the epoch at EPOCH
    windows over all ranks (steps in lockstep), counting from the
    checkpoint's; the checkpoint holds the loader's state and that count."""

    def __init__(self, base, a):
        self.t = base(a)
        self.a = a
        saved = self.t.state or {}
        self.loader_state = saved.get("loader")
        self.done = saved.get("done", 0)

    def loop(self, dl, ids):
        n = self.done
        for epoch in self.t.epochs():
            for b in dl:
                if n >= EPOCH:
                    break
                n += B * self.a.world
                done = n
                self.t.step(epoch, ids(b), lambda: {"loader": dl.state_dict(), "done": done})


class Peer:
    name = ""
    how = ""

    def versions(self):
        raise NotImplementedError

    def write(self, d, build, run_checked):
        raise NotImplementedError

    def run(self, a, base):
        raise NotImplementedError


def ids_dict(batch):
    import torch
    rows = torch.stack(batch) if not isinstance(batch[0], dict) else \
        np.stack([x["tokens"] for x in batch])
    return {"ids": ids_of(rows)}


def batch_ids(b):
    """batchclient collate (module level: workers may pickle it): the
    windows' (source, index) from their ids."""
    return ids_of(b.torch("tokens").numpy())


class Batchd(Peer):
    name = "batchd"
    how = ("batchclient.torch.DataLoader over a BatchdDataset of [(path, weight)] with "
           "seq_len and sequences='windows'")

    def versions(self):
        import batchclient
        return {"batchclient": getattr(batchclient, "__version__", "?")}

    def write(self, d, build, run_checked):
        bins = write_bins(d)
        os.makedirs(os.path.join(d, "root"))
        for nm, p in bins.items():
            run_checked([os.path.join(build, "tools", "batchd-pack"), "create",
                         os.path.join(d, "root", nm + ".bpk"), "--tokens", "uint16", "--eos",
                         str(EOS), p])

    def run(self, a, base):
        import batchclient.torch as bt
        ds = bt.BatchdDataset([(nm + ".bpk", w) for nm, w in zip(SOURCES, WEIGHTS)], B,
                              shuffle="global", seed=SEED, rank=a.rank, world=a.world,
                              socket=a.socket, timeout=30, seq_len=SEQ, sequences="windows",
                              collate=batch_ids)
        dl = bt.DataLoader(ds, num_workers=WORKERS)
        t = Trainer(base, a)
        if t.loader_state:
            dl.load_state_dict(t.loader_state)
        t.loop(dl, lambda b: b)
        del dl
        ds.close()


class Mosaic(Peer):
    """Streams with proportion=, epoch_size=EPOCH, StreamingDataLoader;
    num_canonical_nodes=2 at every world (its elastic determinism)."""
    name = "mosaic"
    how = ("StreamingDataLoader's state_dict (sample_in_epoch over all ranks); Streams with "
           "proportion=weight, epoch_size=EPOCH")

    def versions(self):
        import streaming
        return {"mosaicml-streaming": streaming.__version__}

    def write(self, d, build, run_checked):
        from streaming import MDSWriter
        for s, nm in enumerate(SOURCES):
            with MDSWriter(out=os.path.join(d, "mds", nm),
                           columns={"tokens": f"ndarray:uint16:{ROW}"},
                           size_limit=128 * (ROW * 2 + 8)) as w:
                for k in range(WINDOWS[nm]):
                    w.write({"tokens": window(s, k)})

    def run(self, a, base):
        from streaming import Stream, StreamingDataLoader, StreamingDataset
        streams = [Stream(local=os.path.join(a.data, "mds", nm), proportion=w)
                   for nm, w in zip(SOURCES, WEIGHTS)]
        ds = StreamingDataset(streams=streams, epoch_size=EPOCH, batch_size=B, shuffle=True,
                              shuffle_seed=SEED, num_canonical_nodes=2)
        dl = StreamingDataLoader(ds, batch_size=B, num_workers=WORKERS, collate_fn=ids_dict)
        t = Trainer(base, a)
        if t.loader_state:
            dl.load_state_dict(t.loader_state)
        t.loop(dl, lambda b: b["ids"])


def lit_windows(s):
    """litdata.optimize's fn: source s's windows, each one document."""
    import torch
    for k in range(WINDOWS[SOURCES[s]]):
        yield torch.from_numpy(window(s, k))


class LitData(Peer):
    """CombinedStreamingDataset(weights, iterate_over_all=False) over one
    StreamingDataset (TokensLoader(block_size=ROW), shuffle, drop_last)
    a source, StreamingDataLoader."""
    name = "litdata"
    how = ("StreamingDataLoader's state_dict of a CombinedStreamingDataset (each dataset's "
           "samples yielded and the sampler's place)")

    def versions(self):
        import litdata
        return {"litdata": litdata.__version__}

    def write(self, d, build, run_checked):
        import litdata
        from litdata import TokensLoader
        for s, nm in enumerate(SOURCES):
            litdata.optimize(fn=lit_windows, inputs=[s], output_dir=os.path.join(d, "lit", nm),
                             chunk_size=ROW * 64, item_loader=TokensLoader(), num_workers=1,
                             mode="overwrite")

    def run(self, a, base):
        import litdata
        from litdata import TokensLoader
        dss = [litdata.StreamingDataset(os.path.join(a.data, "lit", nm),
                                        item_loader=TokensLoader(block_size=ROW), shuffle=True,
                                        seed=SEED, drop_last=True) for nm in SOURCES]
        ds = litdata.CombinedStreamingDataset(dss, seed=SEED, weights=WEIGHTS,
                                              iterate_over_all=False)
        dl = litdata.StreamingDataLoader(ds, batch_size=B, num_workers=WORKERS,
                                         collate_fn=ids_dict)
        t = Trainer(base, a)
        if t.loader_state:
            dl.load_state_dict(t.loader_state)
        t.loop(dl, lambda b: b["ids"])


PEER_CLASSES = {p.name: p for p in (Batchd, Mosaic, LitData)}


def count(reference, before, after):
    """Per source: read, repeated, lost, other (see the module doc)."""
    import collections
    out = {}
    ref, pre, post = (collections.Counter(x) for x in (reference, before, after))
    for s, nm in enumerate(SOURCES):
        def mine(c):
            return {i: n for i, n in c.items() if i // 100000 == s}
        r, b, a = mine(ref), mine(pre), mine(post)
        seen = set(b) | set(a)
        out[nm] = {"reference": sum(r.values()), "read": sum(b.values()) + sum(a.values()),
                   "repeated": sum(n for i, n in a.items() if i in b),
                   "lost": sum(1 for i in r if i not in seen),
                   "other": sum(1 for i in seen if i not in r)}
    return out


def cell(c):
    """A source's count as `repeated/lost` (+ other)."""
    txt = f"{c['repeated']}/{c['lost']}"
    return txt + (f" +{c['other']} other" if c["other"] else "")
