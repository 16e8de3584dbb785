#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Elastic resume: W ranks read k batches each in lockstep, rank 0's
state_dict() is saved, and W' ranks load it and read the rest of the
epoch, for W -> W' = 2 -> 3, 4 -> 1 and 3 -> 8, every shuffle mode, with
and without drop_last, at several k. The old part is exactly the first
k x B x W samples of the epoch's global order; old and new part together
are every sample of the epoch once (plus exactly the head of the order
that pads the tail; with drop_last a prefix of the order, none twice), by
ids and by each sample's bytes (sha256 against `batchd-pack cat`); the
next epoch of the resumed ranks is a fresh W' run's. The same through
batchclient.torch.BatchdDataset and batchclient.torch.DataLoader with two
workers on either side (skipped without PyTorch). A state from before
"sample" was recorded resumes at its batch x batch_size x world."""
import collections
import hashlib
import os
import unittest

import batchd_testlib as T

try:
    import torch
    import batchclient.torch as bt
except ImportError:
    torch = None

N = 101                  # prime: no world or batch size divides it
B = 4
WORLDS = ((2, 3), (4, 1), (3, 8))
MODES = ("none", "global", "block")
EPOCH = 1                # the epoch interrupted (a later one than the first)


def nearest(batch, world, new_world):
    """The batch size at new_world nearest the old global batch."""
    return max(1, round(batch * world / new_world))


def digest(b):
    """(ids, sha256 of each sample) of a batch: collate for DataLoader workers."""
    return list(b.ids), [hashlib.sha256(s).hexdigest() for s in b.samples]


class Base(T.DaemonCase):
    @classmethod
    def make_datasets(cls, d):
        src = os.path.join(cls.tmp, "files")
        # Distinct bytes of distinct sizes; 4 KiB blocks give 'block' shuffle blocks to mix.
        T.write_files(src, [40 + (i * 37) % 211 for i in range(N)])
        T.pack(d.path("el.bpk"), src, block_size="4K")
        cls.sha = [hashlib.sha256(T.cat(d.path("el.bpk"), i)).hexdigest() for i in range(N)]
        cls.orders = {}

    def order(self, mode, epoch):
        """The epoch's global order: one rank reads it whole, position by position."""
        key = (mode, epoch)
        if key not in self.orders:
            ld = self.loader("el.bpk", N, shuffle=mode, seed=5)
            ld.set_epoch(epoch)
            self.orders[key] = [i for b in ld for i in b.ids]
            ld.close()
            self.assertEqual(sorted(self.orders[key]), list(range(N)))
        return self.orders[key]

    def checked(self, ids, shas, ctx):
        """ids, each sample's bytes checked against the pack's."""
        ids = [int(i) for i in ids]
        self.assertEqual(len(ids), len(shas), ctx)
        for i, h in zip(ids, shas):
            self.assertEqual(h, self.sha[i], f"{ctx}: the bytes of sample {i}")
        return ids

    def batch(self, b, ctx):
        return (b.epoch, b.index, self.checked(*digest(b), ctx))

    def loaders(self, world, batch, mode, drop_last):
        return [self.loader("el.bpk", batch, shuffle=mode, seed=5, rank=r, world=world,
                            drop_last=drop_last) for r in range(world)]

    def check_union(self, old, new, order, world, batch, drop_last, ctx):
        """old: the ids of the first part, new: the rest, order: the epoch's global order."""
        self.assertEqual(sorted(old), sorted(order[:len(old)]),
                         f"{ctx}: the first part is not a prefix of the epoch's order")
        got = collections.Counter(old + new)
        total = len(old) + len(new)
        if drop_last:
            self.assertEqual(max(got.values()), 1, f"{ctx}: a sample twice")
            self.assertEqual(set(got), set(order[:total]), f"{ctx}: not a prefix of the order")
            self.assertLess(N - total, world * (batch + 1), f"{ctx}: {N - total} dropped")
        else:
            pad = total - N
            self.assertTrue(0 <= pad < world, f"{ctx}: {pad} padding samples")
            self.assertEqual(got, collections.Counter(order + order[:pad]),
                             f"{ctx}: not every sample once plus the head as padding")

    def resume(self, world, new_world, new_batch, mode, drop_last, k):
        ctx = f"{world} -> {new_world} (batch {B} -> {new_batch}), {mode}, " \
              f"drop_last {drop_last}, k {k}"
        old_lds = self.loaders(world, B, mode, drop_last)
        its = []
        for ld in old_lds:
            ld.set_epoch(EPOCH)
            its.append(iter(ld))
        old = []
        for step in range(k):
            for r, it in enumerate(its):
                e, i, ids = self.batch(next(it), ctx)
                self.assertEqual((e, i), (EPOCH, step), ctx)
                old += ids
        states = [ld.state_dict() for ld in old_lds]
        for ld in old_lds:
            ld.close()
        state = states[0]
        self.assertEqual((state["epoch"], state["batch"], state["sample"]),
                         (EPOCH, k, k * B * world), ctx)
        self.assertTrue(all({**s, "rank": 0} == state for s in states), ctx)
        new_lds = self.loaders(new_world, new_batch, mode, drop_last)
        new, nxt = [], []
        for ld in new_lds:
            ld.load_state_dict(state)
            start, count = ld.position, ld.epoch_batches()
            for epoch in range(start[0], EPOCH + 2):
                ld.set_epoch(epoch)      # the resumed epoch keeps its position, as in a loop
                got = [self.batch(b, ctx) for b in ld]
                if epoch == EPOCH:
                    self.assertEqual([(e, i) for e, i, _ in got],
                                     [(EPOCH, i) for i in range(start[1], count)], ctx)
                    new += [i for _, _, ids in got for i in ids]
                else:
                    nxt.append(got)
            ld.close()
        self.check_union(old, new, self.order(mode, EPOCH), new_world, new_batch, drop_last,
                         ctx)
        self.assertEqual(nxt, self.fresh(new_world, new_batch, mode, drop_last, EPOCH + 1),
                         f"{ctx}: the next epoch")

    def fresh(self, world, batch, mode, drop_last, epoch):
        """Each rank's batches of `epoch` in a fresh run at world."""
        out = []
        for ld in self.loaders(world, batch, mode, drop_last):
            ld.set_epoch(epoch)
            out.append([self.batch(b, f"fresh world {world}") for b in ld])
            ld.close()
        return out



class Elastic(Base):
    def test_resume_at_another_world(self):
        for world, new_world in WORLDS:
            for drop_last in (False, True):
                ld = self.loader("el.bpk", B, world=world, drop_last=drop_last)
                batches = len(ld)
                ld.close()
                for mode in MODES:
                    for k in (1, batches // 2, batches - 1):
                        with self.subTest(world=world, new_world=new_world, mode=mode,
                                          drop_last=drop_last, k=k):
                            self.resume(world, new_world, nearest(B, world, new_world), mode,
                                        drop_last, k)

    def test_another_global_batch(self):
        """Not the nearest batch size: a global batch of 15 after one of 8."""
        for mode in MODES:
            for drop_last in (False, True):
                with self.subTest(mode=mode, drop_last=drop_last):
                    self.resume(2, 3, 5, mode, drop_last, 5)

    def test_same_world_is_continuing(self):
        """At the same world and batch size the resumed ranks read exactly
        the batches the saved run would have, numbered alike."""
        for mode in MODES:
            ref = self.fresh(3, B, mode, False, EPOCH)
            for r, ld in enumerate(self.loaders(3, B, mode, False)):
                ld.load_state_dict({**self.loader("el.bpk", B, shuffle=mode, seed=5, rank=0,
                                                  world=3).state_dict(),
                                    "epoch": EPOCH, "batch": 4, "sample": 4 * B * 3})
                self.assertEqual(ld.position, (EPOCH, 4))
                self.assertEqual([self.batch(b, mode) for b in ld], ref[r][4:], mode)

    def test_old_state_without_sample(self):
        """A state saved before "sample" existed: batch x batch_size x world at its world."""
        st = self.loader("el.bpk", B, shuffle="global", seed=5, world=2).state_dict()
        st = {k: v for k, v in st.items() if k != "sample"}
        st.update(epoch=EPOCH, batch=3)
        new = []
        for ld in self.loaders(3, 3, "global", False):
            ld.load_state_dict(st)
            self.assertEqual(ld.state_dict()["sample"], 3 * B * 2)
            new += [i for b in ld for i in self.batch(b, "old state")[2]]
        order = self.order("global", EPOCH)
        self.check_union(order[:3 * B * 2], new, order, 3, 3, False, "old state")

    def test_drop_last_leaves_the_resumed_epoch_nothing(self):
        """4 samples left for 3 ranks of 2 with drop_last: no batch, so the
        resumed loaders stand at the next epoch, a fresh run's."""
        st = dict(self.loader("el.bpk", 1, seed=5, drop_last=True).state_dict(), epoch=EPOCH,
                  batch=N - 4, sample=N - 4)
        want = self.fresh(3, 2, "global", True, EPOCH + 1)
        for r, ld in enumerate(self.loaders(3, 2, "global", True)):
            ld.load_state_dict(st)
            self.assertEqual((ld.position, ld.state_dict()["sample"]), ((EPOCH + 1, 0), 0))
            with self.assertRaisesRegex(ValueError, "the state resumes epoch 2 at batch 0"):
                ld.set_epoch(EPOCH)
            ld.set_epoch(EPOCH + 1)
            self.assertEqual([self.batch(b, "drop_last") for b in ld], want[r])

    def test_bad_positions_are_refused(self):
        st = self.loader("el.bpk", B, seed=5).state_dict()
        with self.assertRaisesRegex(ValueError, r"sample 101 is past the end of the epoch "
                                    r"\(101 samples\)"):
            self.loader("el.bpk", B, seed=5, world=2).load_state_dict({**st, "sample": N})
        with self.assertRaisesRegex(ValueError, r"sample 3 is before the first sample of its "
                                    r"batch 1 \(1 x batch_size 4 x world 1 = 4\)"):
            self.loader("el.bpk", B, seed=5, world=2).load_state_dict({**st, "batch": 1,
                                                                       "sample": 3})
        with self.assertRaisesRegex(ValueError, r"drop_last \(False, now True\)"):
            self.loader("el.bpk", B, seed=5, world=2, drop_last=True).load_state_dict(st)


@unittest.skipIf(torch is None, "PyTorch is not installed (apt-get install python3-torch)")
class ElasticTorch(Base):
    """The same through BatchdDataset and batchclient.torch.DataLoader(num_workers=2)."""

    def datasets(self, world, batch, mode):
        out = []
        for r in range(world):
            ds = bt.BatchdDataset("el.bpk", batch, shuffle=mode, seed=5, rank=r, world=world,
                                  socket=self.daemon.sock, timeout=20, collate=digest)
            self.addCleanup(ds.close)
            out.append(ds)
        return out

    def epoch(self, ds, ctx):
        return [self.checked(ids, shas, ctx)
                for ids, shas in bt.DataLoader(ds, num_workers=2)]

    def torch_resume(self, world, new_world, mode, k):
        ctx = f"torch {world} -> {new_world}, {mode}, k {k}"
        new_batch = nearest(B, world, new_world)
        old_ds = self.datasets(world, B, mode)
        its = []
        for ds in old_ds:
            ds.set_epoch(EPOCH)
            its.append(iter(bt.DataLoader(ds, num_workers=2)))
        old = []
        for _ in range(k):
            for it in its:
                ids, shas = next(it)
                old += self.checked(ids, shas, ctx)
        state = old_ds[0].state_dict()
        self.assertEqual((state["epoch"], state["batch"], state["sample"]),
                         (EPOCH, k, k * B * world), ctx)
        del its
        new, nxt = [], []
        for ds in self.datasets(new_world, new_batch, mode):
            ds.load_state_dict(state)
            self.assertEqual(ds.epoch, EPOCH, ctx)
            count = ds.epoch_batches() - ds.position[1]
            got = self.epoch(ds, ctx)
            self.assertEqual(len(got), count, ctx)
            self.assertEqual(ds.position, (EPOCH + 1, 0), ctx)
            new += [i for ids in got for i in ids]
            nxt.append(self.epoch(ds, ctx))      # moved on to the next epoch by itself
        self.check_union(old, new, self.order(mode, EPOCH), new_world, new_batch, False, ctx)
        want = self.fresh(new_world, new_batch, mode, False, EPOCH + 1)
        self.assertEqual(nxt, [[ids for _, _, ids in rank] for rank in want], ctx)

    def test_drop_last_leaves_the_resumed_epoch_nothing(self):
        st = dict(self.loader("el.bpk", 1, seed=5, drop_last=True).state_dict(), epoch=EPOCH,
                  batch=N - 4, sample=N - 4)
        ds = bt.BatchdDataset("el.bpk", 2, seed=5, rank=1, world=3, drop_last=True,
                              socket=self.daemon.sock, timeout=20, collate=digest)
        self.addCleanup(ds.close)
        ds.load_state_dict(st)
        self.assertEqual((ds.position, ds.epoch_batches()), ((EPOCH + 1, 0), len(ds)))
        want = self.fresh(3, 2, "global", True, EPOCH + 1)[1]
        self.assertEqual(self.epoch(ds, "drop_last"), [ids for _, _, ids in want])

    def test_resume_at_another_world(self):
        for (world, new_world), mode in zip(WORLDS, MODES):
            with self.subTest(world=world, new_world=new_world, mode=mode):
                self.torch_resume(world, new_world, mode, 3)


if __name__ == "__main__":
    T.main()
