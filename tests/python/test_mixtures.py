#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Mixtures of packs of samples (docs/tokens.md, "Mixtures"), against a
real batchd: Loader([(path, weight), ...]) without seq_len.

Three manifest packs of one schema (bytes, an int64 label, a str caption)
stored differently (blocks of 1K, a sample a block, frames of 4K) mixed
5:3:2: every 10 consecutive samples of the stream hold exactly 5, 3 and
2; every sample's bytes, label and caption are its source's; each
source's passes are permutations of it (the small one upsampled); the
"source" column is each sample's source; ranks of worlds 2, 3 and 4 read
the stream of world 1 between them; a state saved at world 2 resumes at
world 4 with exactly the rest. to_tensors gives the label, never the
source. The session's dataset memory is its sources' summed, and the
status lists them; a uid's memory_per_uid counts every source's index
once (the refusal names their sum). Refused,
naming what differs: other fields, other class names, a field called
"source", token packs of other id widths, keys."""
import collections
import csv
import os
import random
import re
import unittest

import batchd_testlib as T

import numpy as np

# Source name, samples, pack options.
SOURCES = (("a.bpk", 12, ("--block-size", "1K")),
           ("b.bpk", 7, ("--frame-size", "4K")),
           ("c.bpk", 3, ()))
MIX = [("a.bpk", 0.5), ("b.bpk", 0.3), ("c.bpk", 0.2)]
EPOCH = 60                  # positions an epoch: whole steps at every world and batch used


def sample_bytes(src, i):
    """Sample i of source src: its own bytes, 5 .. 12000 of them (b's largest framed)."""
    rng = random.Random(src * 1000 + i)
    n = 12000 if (src, i) == (1, 3) else rng.randint(5, 3000)
    return (f"{src}:{i}:".encode() + rng.randbytes(n))[:n]


def size_bytes(text):
    """A size as batchd writes it ("12.3 KiB", "512 B") in bytes."""
    n, unit = text.split()
    return float(n) * 1024 ** ["B", "KiB", "MiB", "GiB"].index(unit)


class Mixtures(T.DaemonCase):
    @classmethod
    def make_datasets(cls, d):
        cls.want = []           # per source: [(bytes, label, caption)] by id
        for src, (name, n, opts) in enumerate(SOURCES):
            cls.want.append(cls.manifest_pack(d, name, [
                (sample_bytes(src, i), src * 100 + i, f"source {src}, sample {i}: caf\u00e9")
                for i in range(n)], opts))
        # Not of their schema: another field set, and a field named "source".
        cls.manifest_pack(d, "nocaption.bpk", [(b"x" * 9, 1, None)], ())
        cls.manifest_pack(d, "withsource.bpk", [(b"y" * 9, 1, "z")], (), source=True)
        # Labelled image folders: the same classes twice, other classes once; 64-byte files.
        for name, classes in (("la", ("cat", "dog")), ("lb", ("cat", "dog")),
                              ("lc", ("bird", "cat"))):
            base = os.path.join(cls.tmp, name)
            for c, cls_name in enumerate(classes):
                os.makedirs(os.path.join(base, cls_name))
                for i in range(4):
                    with open(os.path.join(base, cls_name, f"{i}.bin"), "wb") as f:
                        f.write(f"{name}/{cls_name}/{i}".encode().ljust(64, b"."))
            T.pack(d.path(name + ".bpk"), base, extra=("--labels", "dirname"))
        # Images of one colour each, decoded in the daemon; img1's last is no image.
        from PIL import Image
        for src in (0, 1):
            base = os.path.join(cls.tmp, f"img{src}")
            os.makedirs(base)
            for i in range(5):
                path = os.path.join(base, f"{i}.png")
                if (src, i) == (1, 4):
                    with open(path, "wb") as f:
                        f.write(b"\x89PNG\r\n\x1a\n no image at all")
                    continue
                Image.new("RGB", (40 + 8 * i, 30), cls.colour(src, i)).save(path)
            T.pack(d.path(f"img{src}.bpk"), base)
        # Token packs of two id widths: documents as bytes mean two things.
        for width, dtype in (("uint16", "<u2"), ("uint32", "<u4")):
            src = os.path.join(cls.tmp, f"t-{width}.bin")
            np.arange(1, 200, dtype=dtype).tofile(src)
            T.pack(d.path(f"t-{width}.bpk"), src, extra=("--tokens", width, "--eos", "7"))

    @classmethod
    def manifest_pack(cls, d, name, rows, opts, source=False):
        """A manifest pack of rows (bytes, label, caption or None). @return rows."""
        base = os.path.join(cls.tmp, name + ".d")
        os.makedirs(base)
        columns = ["path", "label"] + (["caption"] if rows[0][2] is not None else [])
        columns += ["source"] if source else []
        with open(os.path.join(base, "m.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(columns)
            for i, (data, label, caption) in enumerate(rows):
                with open(os.path.join(base, f"{i:04d}"), "wb") as g:
                    g.write(data)
                w.writerow([f"{i:04d}", label] + ([caption] if caption is not None else []) +
                           ([3] if source else []))
        T.pack(d.path(name), extra=("--manifest", os.path.join(base, "m.csv"), *opts))
        return rows

    def first(self, src):
        """Source src's first session id: ids run source by source."""
        return sum(n for _, n, _ in SOURCES[:src])

    def stream(self, world, batch, epochs=1, **kw):
        """Every rank's samples in lockstep, step by step: [(source, id there,
        bytes, label, caption)], the stream's order for world 1."""
        lds = [self.loader(MIX, batch, seed=3, rank=r, world=world, epoch_samples=EPOCH, **kw)
               for r in range(world)]
        out = []
        for e in range(epochs):
            its = []
            for ld in lds:
                ld.set_epoch(e)
                its.append(iter(ld))
            for step in zip(*its):
                for b in step:
                    self.assertEqual(list(b.sources), list(b["source"]))
                    data, label, caption = b["data"], b["label"], b["caption"]
                    for i, k in enumerate(b.ids):
                        src = int(b.sources[i])
                        out.append((src, int(k) - self.first(src), bytes(data[i]),
                                    int(label[i]), caption[i]))
        for ld in lds:
            ld.close()
        return out

    def test_schema(self):
        ld = self.loader(MIX, 5, epoch_samples=EPOCH)
        self.assertEqual([(f.name, f.type) for f in ld.schema],
                         [("data", "bytes"), ("label", "int64"), ("caption", "str"),
                          ("source", "int64")])
        self.assertEqual(ld.samples, EPOCH)
        self.assertEqual(len(ld), EPOCH // 5)
        ld = self.loader(MIX, 5)
        self.assertEqual(ld.samples, sum(n for _, n, _ in SOURCES), "an epoch: every sample")

    def test_proportions_content_passes(self):
        rows = self.stream(1, 5, epochs=2)
        self.assertEqual(len(rows), 2 * EPOCH)
        for start in range(len(rows) - 10):
            got = [0, 0, 0]
            for r in rows[start:start + 10]:
                got[r[0]] += 1
            self.assertEqual(got, [5, 3, 2], f"samples {start} .. {start + 9}")
        uses = [[], [], []]
        for src, k, data, label, caption in rows:
            want = self.want[src][k]
            T.same_bytes(self, data, want[0], f"source {src} sample {k}")
            self.assertEqual((label, caption), want[1:], f"source {src} sample {k}")
            uses[src].append(k)
        for src, (name, n, _) in enumerate(SOURCES):
            for p in range(len(uses[src]) // n):
                self.assertEqual(sorted(uses[src][p * n:(p + 1) * n]), list(range(n)),
                                 f"{name}, pass {p}: each sample once")
        self.assertGreaterEqual(len(uses[2]) // 3, 8, "c.bpk is upsampled: 8 passes")

    def test_worlds(self):
        whole = collections.Counter((r[0], r[1]) for r in self.stream(1, 5))
        for world, batch in ((2, 5), (3, 4), (4, 3)):
            got = collections.Counter((r[0], r[1]) for r in self.stream(world, batch))
            self.assertEqual(got, whole, f"world {world}: the stream of world 1")

    def test_resume_elsewhere(self):
        whole = self.stream(1, 5)
        old = [self.loader(MIX, 5, seed=3, rank=r, world=2, epoch_samples=EPOCH)
               for r in range(2)]
        its = [iter(ld) for ld in old]
        for _ in range(2):
            for it in its:
                next(it)
        state = old[0].state_dict()
        self.assertEqual(state["sample"], 20)
        self.assertEqual([s["used"] for s in state["sources"]],
                         [[r[0] for r in whole[:20]].count(i) for i in range(3)])
        for ld in old:
            ld.close()
        rest = collections.Counter()
        for r in range(4):
            ld = self.loader(MIX, 2, seed=3, rank=r, world=4, epoch_samples=EPOCH)
            ld.load_state_dict(state)
            for b in ld:
                for i, k in enumerate(b.ids):
                    src = int(b.sources[i])
                    rest[(src, int(k) - self.first(src))] += 1
                    T.same_bytes(self, bytes(b["data"][i]),
                                 self.want[src][int(k) - self.first(src)][0], "resumed")
            ld.close()
        self.assertEqual(rest, collections.Counter((r[0], r[1]) for r in whole[20:]),
                         "exactly the rest of the epoch")

    def test_to_tensors_label_not_source(self):
        from batchclient.torch import to_tensors
        ld = self.loader([("la.bpk", 1), ("lb.bpk", 1)], 4, seed=1)
        self.assertEqual(tuple(ld.classes), ("cat", "dog"))
        n = 0
        for b in ld:
            x, y = to_tensors(b)
            self.assertEqual(tuple(x.shape), (len(b.ids), 64))
            for i in range(len(b.ids)):
                name = bytes(x[i].numpy()).rstrip(b".").decode()
                pack, cls_name, _ = name.split("/")
                self.assertEqual(pack, ("la", "lb")[int(b.sources[i])])
                self.assertEqual(int(y[i]), ["cat", "dog"].index(cls_name), name)
                n += 1
        self.assertEqual(n, 16)

    @staticmethod
    def colour(src, i):
        return (40 + 100 * src, 20 * i, 7)

    def test_images_decoded(self):
        """Each sample's tensor is its source's image; the bad one is left
        out (skip), or fails its batch naming its dataset and its id there."""
        spec = T.batchclient.Image(16, crop="center", on_error="skip")
        ld = self.loader([("img0.bpk", 1), ("img1.bpk", 1)], 4, seed=2, epoch_samples=40,
                         decode={"data": spec})
        seen, skipped = collections.Counter(), 0
        for b in ld:
            x = b["data"]
            self.assertEqual(x.shape[1:], (3, 16, 16))
            skipped += len(b.skipped)
            for i, k in enumerate(b.ids):
                src = int(b.sources[i])
                local = int(k) - 5 * src
                want = np.array(self.colour(src, local), dtype=np.uint8)[:, None, None]
                self.assertTrue((x[i] == want).all(), f"source {src} image {local}")
                seen[(src, local)] += 1
        self.assertEqual(seen[(0, 0)], 4, "20 of each source: 4 passes of 5")
        self.assertNotIn((1, 4), seen)
        self.assertEqual(skipped, 4, "the bad image, once a pass")
        del x, b
        ld.close()
        self.wait_sessions(0)
        ld = self.loader([("img0.bpk", 1), ("img1.bpk", 1)], 10, seed=2,
                         decode={"data": T.batchclient.Image(16, crop="center")})
        with self.assertRaises(T.batchclient.BatchdError) as e:
            for b in ld:
                pass
        self.assertIn("dataset img1.bpk: sample 4 (key 4.png)", str(e.exception))

    def test_memory_is_the_sources(self):
        alone = {}
        for name, _, _ in SOURCES[:2]:
            ld = self.loader(name, 5)
            alone[name] = self.daemon.sessions()[0]["dataset_memory"]
            ld.close()
            self.wait_sessions(0)
        ld = self.loader(MIX[:2], 5)
        s, = self.daemon.sessions()
        self.assertEqual(s["dataset_memory"], sum(alone.values()))
        self.assertEqual(s["sources"], {"period": 8, "epoch": 19, "list": [
            {"dataset": "a.bpk", "count": 5, "items": 12},
            {"dataset": "b.bpk", "count": 3, "items": 7}]})
        ld.close()
        self.wait_sessions(0)
        ld = self.loader("a.bpk", 5)
        self.assertIsNone(self.daemon.sessions()[0]["sources"])
        ld.close()

    def refused(self, sources, *words, **kw):
        with self.assertRaises(T.batchclient.BatchdError) as e:
            self.loader(sources, 4, **kw)
        for w in words:
            self.assertIn(w, str(e.exception))

    def test_refusals(self):
        self.refused([("a.bpk", 1), ("nocaption.bpk", 1)], "nocaption.bpk", "fields")
        self.refused([("la.bpk", 1), ("lc.bpk", 1)], "class names differ")
        self.refused([("withsource.bpk", 1), ("a.bpk", 1)], 'field "source"')
        self.refused([("t-uint16.bpk", 1), ("t-uint32.bpk", 1)], "uint16 token ids",
                     "uint32 token ids", "seq_len")
        self.refused([("a.bpk", 1), ("missing.bpk", 1)], "missing.bpk")
        with self.assertRaises(ValueError):
            self.loader(MIX, 4, keys=True)
        # The same widths mix as documents.
        ld = self.loader([("t-uint16.bpk", 1), ("t-uint16.bpk", 2)], 4)
        self.assertEqual([f.name for f in ld.schema], ["tokens", "source"])


class MixtureLimits(T.DaemonCase):
    """[limits] memory_per_uid counts every source's index and tables,
    each once: a mixture's refusal names the sources' summed."""

    @classmethod
    def make_datasets(cls, d):
        # Samples of 4 MiB: a session's ring alone is over the limit (16M, the least).
        for src, name in enumerate(("a.bpk", "b.bpk")):
            Mixtures.manifest_pack.__func__(cls, d, name, [
                (bytes([src + i]) * (4 << 20), i, f"caption {i}") for i in range(3 + src)], ())
        conf = os.path.join(cls.tmp, "batchd.conf")
        with open(conf, "w") as f:
            f.write("[limits]\nmemory_per_uid = 16M\n")
        d.extra = ["--config", conf]

    def index_bytes(self, dataset):
        """The index and tables a refused open says it needed for its versions."""
        with self.assertRaises(T.batchclient.BatchdError) as e:
            self.loader(dataset, 1, prefetch=1)     # a ring of about 20 MiB
        msg = str(e.exception)
        self.assertIn("memory limit per user", msg)
        what = "its sources'" if isinstance(dataset, list) else "its dataset's"
        m = re.search(re.escape(what) + r" index and tables ([0-9.]+ [KMG]?i?B) ", msg)
        self.assertTrue(m, msg)
        return size_bytes(m.group(1))

    def test_every_source_counted(self):
        a, b = self.index_bytes("a.bpk"), self.index_bytes("b.bpk")
        both = self.index_bytes(MIX[:2])
        self.assertGreater(both, max(a, b))
        self.assertLess(abs(both - (a + b)), 0.01 * (a + b), f"{both} for {a} + {b}")
        # The same version twice is counted once.
        self.assertLess(abs(self.index_bytes([("a.bpk", 1), ("a.bpk", 2)]) - a), 0.01 * a)


if __name__ == "__main__":
    T.main()
