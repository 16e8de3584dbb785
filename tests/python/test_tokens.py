#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Token packs read as sequences (docs/tokens.md), against a real batchd.

Windows: a flat uint16 stream of documents ending in an end-of-document
id, cut into rows of seq_len + 1; every row is exactly its slice of the
stream, the rows of an epoch over 1, 2, 3 and 8 ranks are every window
once (plus the documented padding of the last step), and the tail that
fills no window is in none. Packed: documents of a JSONL file (ids unique,
no end-of-document id, so padding is 0) packed into rows; over an epoch
every id appears exactly once, whole documents stay in one row unless
longer than a row, position_ids count from 0 in each piece, cu_seqlens
is the batch's flattened boundaries over the inputs. Resume at another
world size continues with exactly the windows not yet read. The
refusals: a pack that holds no tokens, keys or decode with seq_len, a
seq_len with no full window."""
import collections
import json
import os
import random
import unittest

import batchd_testlib as T

import numpy as np

SEQ = 31                       # rows of 32 tokens
ROW = SEQ + 1
EOS = 0


def documents(seed, n, longest):
    """n documents of 1 .. longest tokens with ids unique over all of them (>= 1)."""
    rng = random.Random(seed)
    docs, at = [], 1
    for _ in range(n):
        k = rng.randint(1, longest)
        docs.append(list(range(at, at + k)))
        at += k
    return docs


class Tokens(T.DaemonCase):
    @classmethod
    def make_datasets(cls, d):
        # Windows: a flat stream, each document ending in EOS (ids < 2^16).
        cls.flat_docs = [doc + [EOS] for doc in documents(1, 300, 90)]
        cls.stream = np.array([t for doc in cls.flat_docs for t in doc], dtype="<u2")
        src = os.path.join(cls.tmp, "web.bin")
        cls.stream.tofile(src)
        T.pack(d.path("web.bpk"), src, block_size="4K",
               extra=("--tokens", "uint16", "--eos", str(EOS)))
        # Packed: JSONL documents of unique ids, some longer than a row.
        cls.docs = documents(2, 240, 3 * ROW + 5)
        src = os.path.join(cls.tmp, "docs.jsonl")
        with open(src, "w") as f:
            for doc in cls.docs:
                f.write(json.dumps(doc) + "\n")
        T.pack(d.path("docs.bpk"), src, block_size="2K", extra=("--tokens", "uint32"))
        # The same documents again, as a second source of a packed mixture.
        T.pack(d.path("docs2.bpk"), src, block_size="1K", extra=("--tokens", "uint32"))
        cls.where = {t: (i, j) for i, doc in enumerate(cls.docs) for j, t in enumerate(doc)}
        # Mixture sources: a second flat stream and a small one (a few windows).
        cls.code_docs = [doc + [EOS] for doc in documents(3, 120, 60)]
        cls.code = np.array([t for doc in cls.code_docs for t in doc], dtype="<u2")
        cls.math = np.array([t for doc in documents(4, 6, 20) for t in doc + [EOS]], dtype="<u2")
        for name, arr in (("code", cls.code), ("math", cls.math)):
            src = os.path.join(cls.tmp, name + ".bin")
            arr.tofile(src)
            T.pack(d.path(name + ".bpk"), src, block_size="2K",
                   extra=("--tokens", "uint16", "--eos", str(EOS)))
        # No tokens at all: a pack of files.
        T.write_files(os.path.join(cls.tmp, "files"), [10, 20, 30])
        T.pack(d.path("files.bpk"), os.path.join(cls.tmp, "files"))

    def rows(self, world, batch, shuffle="global", **kw):
        """{id: tokens row} over one epoch read by every rank in lockstep, and
        each rank's ids in order."""
        lds = [self.loader("web.bpk", batch, shuffle=shuffle, seed=7, rank=r, world=world,
                           seq_len=SEQ, **kw) for r in range(world)]
        got, order = {}, [[] for _ in range(world)]
        for r, ld in enumerate(lds):
            for b in ld:
                tok = b["tokens"]
                self.assertEqual(tok.dtype, np.int32)
                self.assertEqual(tok.shape, (len(b.ids), ROW))
                for i, k in enumerate(b.ids):
                    got.setdefault(k, tok[i].copy())
                    order[r].append(k)
            ld.close()
        return got, order

    def test_windows_every_token_once(self):
        windows = len(self.stream) // ROW
        for world in (1, 2, 3, 8):
            with self.subTest(world=world):
                got, order = self.rows(world, 5)
                ids = [k for o in order for k in o]
                self.assertEqual(set(ids), set(range(windows)), "every window of the epoch")
                pad = len(ids) - windows
                self.assertLess(pad, world * 5, "padding is at most the last step's")
                for k, row in got.items():
                    np.testing.assert_array_equal(row, self.stream[k * ROW:(k + 1) * ROW],
                                                  f"window {k}: its slice of the stream")
        # The tail that fills no window: fewer tokens than a row, in none.
        self.assertLess(len(self.stream) - windows * ROW, ROW)

    def test_windows_resume_at_another_world(self):
        windows = len(self.stream) // ROW
        old = [self.loader("web.bpk", 4, seed=3, rank=r, world=2, seq_len=SEQ)
               for r in range(2)]
        seen = []
        its = [iter(ld) for ld in old]
        for _ in range(3):
            for it in its:
                seen += list(next(it).ids)
        state = old[0].state_dict()
        for ld in old:
            ld.close()
        new = [self.loader("web.bpk", 6, seed=3, rank=r, world=3, seq_len=SEQ)
               for r in range(3)]
        rest = []
        for ld in new:
            ld.load_state_dict(state)
            for b in ld:
                self.assertEqual(b.epoch, 0)
                rest += list(b.ids)
        self.assertEqual(len(set(seen)), len(seen), "no window twice before the stop")
        self.assertEqual(set(seen) | set(rest), set(range(windows)))
        self.assertEqual(len(set(rest) - set(seen)), windows - len(seen),
                         "the resumed ranks read every window not read yet")
        self.assertLess(len(rest) - (windows - len(seen)), 3 * 6,
                        "and repeat only the last step's padding")

    def check_packed(self, b):
        tok, pos = b["tokens"], b["position_ids"]
        cu = b["cu_seqlens"]
        n = len(b.ids)
        self.assertEqual(tok.shape, (n, ROW))
        self.assertEqual(pos.shape, (n, ROW))
        self.assertEqual(cu.dtype, np.int32)
        want = [0]
        for i in range(n):
            for j in range(ROW):
                t = int(tok[i, j])
                if t == 0:
                    self.assertEqual(pos[i, j], 0, "padding has position 0")
                    self.assertTrue(all(tok[i, j:] == 0), "padding ends the row")
                    break
                d, k = self.where[t]
                self.assertEqual(pos[i, j], k % ROW, f"token {t}: its place in its piece")
                if pos[i, j] != 0:
                    self.assertEqual(int(tok[i, j - 1]), t - 1, "a piece is consecutive ids")
            # Boundaries over the inputs (the first SEQ tokens): a segment ends
            # where the next starts, the padding one segment.
            for j in range(1, SEQ):
                new_doc = pos[i, j] == 0 and tok[i, j] != 0
                pad_starts = tok[i, j] == 0 and tok[i, j - 1] != 0
                if new_doc or pad_starts:
                    want.append(i * SEQ + j)
            want.append((i + 1) * SEQ)
        self.assertEqual(list(cu), want, f"cu_seqlens of batch {b.epoch}:{b.index}")
        return tok

    def test_packed_every_token_once(self):
        all_ids = sorted(self.where)
        for world in (1, 2, 3, 8):
            with self.subTest(world=world):
                self.assertEqual(self.wait_sessions(0), [], "the last world's sessions ended")
                lds = [self.loader("docs.bpk", 3, seed=11, rank=r, world=world, seq_len=SEQ,
                                   sequences="packed", drop_last=False) for r in range(world)]
                # The ranks share one packed table, charged to each.
                for s in self.daemon.sessions():
                    self.assertEqual(s["sequences"]["shared_by"], world)
                    self.assertGreater(s["sequences"]["table_bytes"], 0)
                rows = {}
                for ld in lds:
                    for b in ld:
                        tok = self.check_packed(b)
                        for i, k in enumerate(b.ids):
                            rows[k] = tok[i].copy()
                    b = tok = None      # the last batch's arrays would keep its session open
                    ld.close()
                toks = [int(t) for row in rows.values() for t in row if t]
                self.assertEqual(sorted(toks), all_ids, "every token once over the epoch")
                # A document that fits a row is whole in one row.
                for doc in self.docs:
                    if len(doc) <= ROW:
                        holders = [k for k, row in rows.items() if doc[0] in set(row.tolist())]
                        self.assertEqual(len(holders), 1)
                        self.assertTrue(set(doc) <= set(rows[holders[0]].tolist()))

    MIX = [("web.bpk", 0.7), ("code.bpk", 0.2), ("math.bpk", 0.1)]

    def streams(self):
        return [self.stream, self.code, self.math]

    def mixed(self, epochs, world=1, batch=10, **kw):
        """Each rank's (source, session id, row) in order over `epochs` epochs."""
        lds = [self.loader(self.MIX, batch, seed=5, rank=r, world=world, seq_len=SEQ, **kw)
               for r in range(world)]
        out = [[] for _ in range(world)]
        for r, ld in enumerate(lds):
            for e in range(epochs):
                ld.set_epoch(e)
                for b in ld:
                    self.assertEqual(list(b.sources), list(b["source"]))
                    for i, k in enumerate(b.ids):
                        out[r].append((int(b.sources[i]), int(k), b["tokens"][i].copy()))
            ld.close()
        return out

    def local(self, source, k):
        """Session id k's window within its source (ids run source by source)."""
        first = 0
        for s in range(source):
            first += len(self.streams()[s]) // ROW
        return k - first

    def test_mixture_proportions_and_passes(self):
        rows, = self.mixed(2)
        counts = [len(s) // ROW for s in self.streams()]
        self.assertEqual(len(rows), 2 * sum(counts))
        # Every 10 consecutive rows of the stream: exactly 7, 2 and 1.
        for start in range(len(rows) - 10):
            got = [0, 0, 0]
            for src, _, _ in rows[start:start + 10]:
                got[src] += 1
            self.assertEqual(got, [7, 2, 1], f"rows {start} .. {start + 9}")
        # Each row is its source's window; each source's passes are permutations.
        uses = [[], [], []]
        for src, k, row in rows:
            w = self.local(src, k)
            self.assertTrue(0 <= w < counts[src])
            np.testing.assert_array_equal(row, self.streams()[src][w * ROW:(w + 1) * ROW])
            uses[src].append(w)
        for src in range(3):
            n = counts[src]
            for p in range(len(uses[src]) // n):
                self.assertEqual(sorted(uses[src][p * n:(p + 1) * n]), list(range(n)),
                                 f"source {src}, pass {p}: each window once")
        self.assertGreater(len(uses[2]) // counts[2], 3, "the small source is upsampled")

    def test_mixture_resume_elsewhere(self):
        whole, = self.mixed(1)
        old = [self.loader(self.MIX, 4, seed=5, rank=r, world=2, seq_len=SEQ) for r in range(2)]
        its = [iter(ld) for ld in old]
        for _ in range(5):
            for it in its:
                next(it)
        state = old[0].state_dict()
        self.assertEqual(state["sample"], 40)
        used = [s["used"] for s in state["sources"]]
        self.assertEqual(used, [[src for src, _, _ in whole[:40]].count(i) for i in range(3)],
                         "the state's per-source counts are the stream's")
        for ld in old:
            ld.close()
        rest = []
        new = [self.loader(self.MIX, 3, seed=5, rank=r, world=3, seq_len=SEQ) for r in range(3)]
        for ld in new:
            ld.load_state_dict(state)
            rest += [int(k) for b in ld for k in b.ids]
        want = [k for _, k, _ in whole[40:]]
        self.assertFalse(collections.Counter(want) - collections.Counter(rest),
                         "every row of the rest of the epoch, as often as the stream has it")
        self.assertLess(sum((collections.Counter(rest) - collections.Counter(want)).values()), 9,
                        "and only the last step's padding more")
        # Other weights: refused, naming the source.
        other = self.loader([("web.bpk", 0.6), ("code.bpk", 0.3), ("math.bpk", 0.1)], 4,
                            seed=5, seq_len=SEQ)
        with self.assertRaises(ValueError) as e:
            other.load_state_dict(state)
        self.assertIn("source 0", str(e.exception))
        self.assertIn("weight 0.7", str(e.exception))

    def test_mixture_refusals(self):
        for bad in (0, -1, float("nan"), float("inf")):
            with self.assertRaises(ValueError):
                self.loader([("web.bpk", 1), ("code.bpk", bad)], 4, seq_len=SEQ)
        with self.assertRaises(ValueError):
            self.loader([("web.bpk", 1)], 4, seq_len=SEQ)
        with self.assertRaises(T.batchclient.BatchdError) as e:
            self.loader([("web.bpk", 1), ("files.bpk", 1)], 4, seq_len=SEQ)
        self.assertIn("files.bpk", str(e.exception))
        self.assertIn("no token pack", str(e.exception))

    def test_mixture_packed(self):
        """Packed rows of two sources by 1:1: rows alternate, each checked as
        packed rows are, and over an epoch (a pass of each) every token of
        each source once."""
        lds = [self.loader([("docs.bpk", 1), ("docs2.bpk", 1)], 4, seed=2, rank=r, world=2,
                           seq_len=SEQ, sequences="packed") for r in range(2)]
        toks = [[], []]
        for ld in lds:
            for b in ld:
                tok = self.check_packed(b)
                self.assertEqual(len(b.sources), len(b.ids))
                for i, src in enumerate(b.sources):
                    toks[int(src)] += [int(t) for t in tok[i] if t]
            ld.close()
        for src in (0, 1):
            self.assertEqual(set(toks[src]), set(self.where), f"source {src}: every token")
            self.assertLess(len(toks[src]) - len(self.where), 2 * 4 * ROW,
                            f"source {src}: once, but for the last step's padding")

    def test_refusals(self):
        with self.assertRaises(T.batchclient.BatchdError) as e:
            self.loader("files.bpk", 2, seq_len=SEQ)
        self.assertIn("no token pack", str(e.exception))
        with self.assertRaises(T.batchclient.BatchdError) as e:
            self.loader("web.bpk", 2, seq_len=len(self.stream))
        self.assertIn("smaller seq_len", str(e.exception))
        with self.assertRaises(T.batchclient.BatchdError) as e:
            self.loader("docs.bpk", 4096, seq_len=1 << 20, sequences="packed")
        self.assertIn("cu_seqlens are int32", str(e.exception))
        with self.assertRaises(ValueError):
            self.loader("web.bpk", 2, seq_len=SEQ, keys=True)
        with self.assertRaises(ValueError):
            self.loader("web.bpk", 2, seq_len=0)
        with self.assertRaises(ValueError):
            self.loader("web.bpk", 2, seq_len=SEQ, sequences="sliding")


if __name__ == "__main__":
    T.main()
