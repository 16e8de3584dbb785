#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Epochs through batchclient.Loader: every sample exactly once (plus the
documented padding) across ranks and shuffle modes, len(), set_epoch and
the schedule's determinism."""
import collections
import os

import batchd_testlib as T

N = 1000
SIZE = 100


class Epochs(T.DaemonCase):
    @classmethod
    def make_datasets(cls, d):
        rec = os.path.join(cls.tmp, "rec.bin")
        T.write_records(rec, N, SIZE)
        T.pack(d.path("one.bpk"), records=(SIZE, rec))
        T.pack(d.path("blk.bpk"), records=(SIZE, rec), block_size="4K")
        T.pack(d.path("shards"), records=(SIZE, rec), block_size="4K", shard_size="40K")

    def epoch_ids(self, ld):
        """One iteration: (ids in order, batch sizes, (epoch, index) per batch)."""
        ids, sizes, where = [], [], []
        for b in ld:
            ids += b.ids
            sizes.append(len(b))
            where.append((b.epoch, b.index))
        return ids, sizes, where

    def check_partition(self, dataset, mode, world, batch_size, drop_last):
        per_rank = N // world if drop_last else -(-N // world)
        batches = per_rank // batch_size if drop_last else -(-per_rank // batch_size)
        got = collections.Counter()
        for rank in range(world):
            ld = self.loader(dataset, batch_size, shuffle=mode, seed=7, rank=rank, world=world,
                             drop_last=drop_last)
            self.assertEqual(len(ld), batches)
            ids, sizes, where = self.epoch_ids(ld)
            self.assertEqual(where, [(0, i) for i in range(batches)])
            self.assertEqual(len(ids), per_rank if not drop_last else batches * batch_size)
            self.assertTrue(all(s == batch_size for s in sizes[:-1]), sizes)
            self.assertEqual(ld.position, (1, 0))
            got.update(ids)
            ld.close()
        ctx = f"{dataset} {mode} world {world} batch {batch_size} drop_last {drop_last}"
        self.assertTrue(set(got) <= set(range(N)), ctx)
        if drop_last:
            self.assertTrue(all(c == 1 for c in got.values()), ctx)
            self.assertEqual(sum(got.values()), world * batches * batch_size, ctx)
        else:
            # Every sample once; the padding wraps, repeating world*per_rank - N of them once more.
            self.assertEqual(set(got), set(range(N)), ctx)
            extra = world * per_rank - N
            self.assertEqual(sum(got.values()), N + extra, ctx)
            self.assertTrue(all(c <= 2 for c in got.values()), ctx)

    def test_exactly_once_every_mode_and_world(self):
        for dataset in ("one.bpk", "blk.bpk", "shards"):
            for mode in ("none", "global", "block"):
                for world, bs, drop in ((1, 64, False), (3, 50, False), (3, 64, True)):
                    with self.subTest(dataset=dataset, mode=mode, world=world, drop=drop):
                        self.check_partition(dataset, mode, world, bs, drop)

    def test_none_is_file_order(self):
        ids, _, _ = self.epoch_ids(self.loader("one.bpk", 64, shuffle="none"))
        self.assertEqual(ids, list(range(N)))
        ids, _, _ = self.epoch_ids(self.loader("one.bpk", 64, shuffle=False))
        self.assertEqual(ids, list(range(N)))

    def test_iterations_are_consecutive_epochs(self):
        ld = self.loader("one.bpk", 128, shuffle="global", seed=3)
        e0, _, w0 = self.epoch_ids(ld)
        e1, _, w1 = self.epoch_ids(ld)
        self.assertEqual({e for e, _ in w0}, {0})
        self.assertEqual({e for e, _ in w1}, {1})
        self.assertEqual(sorted(e0), list(range(N)))
        self.assertEqual(sorted(e1), list(range(N)))
        self.assertNotEqual(e0, e1, "global shuffle gave two epochs the same order")
        self.assertNotEqual(e0, list(range(N)))

    def test_schedule_is_deterministic(self):
        a, _, _ = self.epoch_ids(self.loader("one.bpk", 100, seed=11))
        b, _, _ = self.epoch_ids(self.loader("one.bpk", 100, seed=11))
        c, _, _ = self.epoch_ids(self.loader("one.bpk", 100, seed=12))
        self.assertEqual(a, b)
        self.assertNotEqual(a, c)

    def test_set_epoch(self):
        ref = self.loader("one.bpk", 100, seed=5)
        epochs = [self.epoch_ids(ref)[0] for _ in range(3)]
        ld = self.loader("one.bpk", 100, seed=5)
        stream = ld._stream
        for e in range(3):
            ld.set_epoch(e)      # where the stream stands already: no reopen
            self.assertEqual(self.epoch_ids(ld)[0], epochs[e])
        self.assertIs(ld._stream, stream)
        ld.set_epoch(1)          # backwards: reopens at (1, 0)
        self.assertEqual(ld.position, (1, 0))
        ids, _, where = self.epoch_ids(ld)
        self.assertEqual(ids, epochs[1])
        self.assertEqual(where[0], (1, 0))
        self.assertIsNot(ld._stream, stream)
        ld.set_epoch(0)          # skipping ahead after a partial epoch also reopens
        it = iter(ld)
        self.assertEqual(next(it).ids, tuple(epochs[0][:100]))
        ld.set_epoch(2)
        self.assertEqual(self.epoch_ids(ld)[0], epochs[2])
        self.assertEqual(len(self.wait_sessions(2)), 2)   # ref and ld: reopening closed the old streams
        ld.close()
        ref.close()

    def test_break_then_iterate_finishes_the_epoch(self):
        ld = self.loader("one.bpk", 100, shuffle="none")
        for b in ld:
            if b.index == 3:
                break
        rest, _, where = self.epoch_ids(ld)
        self.assertEqual(where[0], (0, 4))
        self.assertEqual(rest, list(range(400, N)))
        self.assertEqual(self.epoch_ids(ld)[2][0], (1, 0))

    def test_collate_hook(self):
        ld = self.loader("one.bpk", 100, shuffle="none", collate=lambda b: list(b.ids))
        out = list(ld)
        self.assertEqual(out[0], list(range(100)))
        self.assertEqual(sum(out, []), list(range(N)))

    def test_len_and_properties(self):
        ld = self.loader("blk.bpk", 64, world=2, rank=1)
        self.assertEqual(len(ld), -(-(N // 2) // 64))
        self.assertEqual(ld.samples, N)
        self.assertEqual(ld.max_sample, SIZE)
        self.assertEqual((ld.rank, ld.world, ld.batch_size, ld.shuffle), (1, 2, 64, "global"))
        self.assertNotEqual(ld.fingerprint, 0)
        self.assertIn("blk.bpk", repr(ld))


if __name__ == "__main__":
    T.main()
