#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""batchclient.torch.BatchdDataset under torch.utils.data.DataLoader: every
epoch delivers exactly this rank's batches in this rank's order (each
sample's bytes checked) for num_workers 0, 1, 2 and 3 and for world 1 and
3, with len() what the DataLoader yields; set_epoch reaches persistent workers and changes the
order, and an epoch without it moves on by itself (a break with workers
repeats it); idle workers; spawned workers; pin_memory; labels of an
ImageFolder pack through to_tensors and to_dict, copied out of shared
memory in workers and zero-copy without; rank and world from torchrun's
and Slurm's variables; state_dict exact at epoch boundaries with workers
and anywhere without, in Loader's format; collate results that cannot
leave a worker refused; `import batchclient` without torch.
batchclient.torch.DataLoader: state_dict() exact after any step, for
num_workers 0, 2 and 3, persistent or not, with pin_memory, across a
break and a new iterator started mid-epoch (the old one refused); a plain
DataLoader's mid-epoch state_dict() with workers refused with
RuntimeError, exact at the epoch's end; its bad arguments.
Exits 77 (skip) when PyTorch is not installed."""
import collections
import os
import subprocess
import sys
import warnings

import batchd_testlib as T

try:
    import torch
    from torch.utils.data import DataLoader
except ImportError:
    T.skip("PyTorch is not installed (apt-get install python3-torch)")

import batchclient
import batchclient.torch as bt

N, SIZE, BS = 100, 32, 7
CLASSES = ["ant", "bee", "cat"]
IMG = 24


def ids_of(x):
    """The record ids in the first 8 bytes of each row of a uint8 [B, SIZE] tensor."""
    return [int.from_bytes(bytes(r[:8].tolist()), "little") for r in x]


class TorchDataset(T.DaemonCase):
    @classmethod
    def make_datasets(cls, d):
        rec = os.path.join(cls.tmp, "rec.bin")
        T.write_records(rec, N, SIZE)
        T.pack(d.path("rec.bpk"), records=(SIZE, rec))
        # An ImageFolder tree of equal-sized "images": the bytes name their class.
        src = os.path.join(cls.tmp, "folder")
        cls.images = {}
        for i in range(60):
            c = CLASSES[i % 3]
            os.makedirs(os.path.join(src, c), exist_ok=True)
            body = (f"{c}:{i:04d}:".encode() * IMG)[:IMG]
            with open(os.path.join(src, c, f"{i:04d}.img"), "wb") as f:
                f.write(body)
            cls.images[body] = CLASSES.index(c)
        T.pack(d.path("folder.bpk"), src, extra=["--labels", "dirname"])

    def dataset(self, name="rec.bpk", batch_size=BS, **kw):
        kw.setdefault("socket", self.daemon.sock)
        kw.setdefault("timeout", 20)
        ds = bt.BatchdDataset(name, batch_size, **kw)
        self.addCleanup(ds.close)
        return ds

    def reference(self, epoch, rank=0, world=1, **kw):
        """The ids a Loader of that rank yields in `epoch`, batch by batch."""
        ld = self.loader("rec.bpk", BS, rank=rank, world=world, **kw)
        ld.set_epoch(epoch)
        out = [list(b.ids) for b in ld]
        ld.close()
        return out

    def epoch_ids(self, dl):
        """One epoch of a DataLoader over rec.bpk: ids per batch, each row's bytes checked."""
        out = []
        for x in dl:
            self.assertEqual((x.dtype, x.shape[1]), (torch.uint8, SIZE))
            ids = ids_of(x)
            for i, row in zip(ids, x):
                T.same_bytes(self, bytes(row.tolist()), T.record_bytes(i, SIZE), f"sample {i}")
            out.append(ids)
        return out

    def assert_same_batches(self, got, want, ctx):
        """The same batches (each one's ids in order) in the same order: worker
        k of N serves every N-th batch from k, and DataLoader takes one from
        each worker in turn."""
        self.assertEqual(got, want, ctx)

    def test_exact_once_for_any_workers_and_world(self):
        for world in (1, 3):
            for workers in (0, 1, 2, 3):
                union = collections.Counter()
                for rank in range(world):
                    ctx = f"world {world}, rank {rank}, num_workers {workers}"
                    ds = self.dataset(rank=rank, world=world)
                    dl = DataLoader(ds, batch_size=None, num_workers=workers)
                    got = self.epoch_ids(dl)
                    want = self.reference(0, rank, world)
                    self.assertEqual(len(ds), len(want), ctx)
                    self.assertEqual(len(dl), len(got), ctx)
                    self.assert_same_batches(got, want, ctx)
                    union.update(i for b in got for i in b)
                    ds.close()
                # Every sample; with world 3 the two that pad the last rank twice.
                self.assertEqual(set(union), set(range(N)), f"world {world}")
                self.assertEqual(sum(union.values()), N if world == 1 else 102)

    def test_zero_copy_without_workers(self):
        ds = self.dataset()
        it = iter(DataLoader(ds, batch_size=None, num_workers=0))
        x = next(it)
        held = ds._loader._current
        self.assertEqual(x.data_ptr(), held._addr)        # a view of the batch, not a copy
        self.assertFalse(held.released)
        del x
        next(it)
        self.assertTrue(held.released)                    # until the next step

    def test_set_epoch_reaches_persistent_workers(self):
        ds = self.dataset()
        dl = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
        seen = []
        for epoch in (0, 1):
            ds.set_epoch(epoch)
            got = self.epoch_ids(dl)
            self.assert_same_batches(got, self.reference(epoch), f"epoch {epoch}")
            seen.append(sorted(got))
        self.assertNotEqual(seen[0], seen[1])
        ds.set_epoch(0)                                    # back to epoch 0, same workers
        self.assert_same_batches(self.epoch_ids(dl), self.reference(0), "epoch 0 again")
        del dl

    def test_epochs_move_on_without_set_epoch(self):
        for workers, persistent in ((0, False), (2, False), (3, True)):
            ctx = f"num_workers {workers}"
            ds = self.dataset(seed=5)
            dl = DataLoader(ds, batch_size=None, num_workers=workers,
                            persistent_workers=persistent)
            for epoch in (0, 1, 2):
                self.assertEqual(ds.position, (epoch, 0), ctx)
                self.assert_same_batches(self.epoch_ids(dl), self.reference(epoch, seed=5),
                                         f"{ctx}, epoch {epoch}")
            del dl
            ds.close()

    def test_fewer_batches_than_workers(self):
        # 100 samples in batches of 60: two batches, so worker 2 of 3 has none to give.
        ds = self.dataset(batch_size=60, seed=2)
        want = [list(b.ids) for b in self.loader("rec.bpk", 60, seed=2)]
        dl = DataLoader(ds, batch_size=None, num_workers=3)
        got = [ids_of(x) for x in dl]
        self.assertEqual((len(ds), len(want)), (2, 2))
        self.assert_same_batches(got, want, "2 batches, 3 workers")
        self.assertEqual(ds.position, (1, 0))        # the idle worker counted as done

    def test_a_break_with_workers_repeats_the_epoch(self):
        for persistent in (False, True):
            ctx = f"persistent_workers={persistent}"
            ds = self.dataset(seed=7)
            dl = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=persistent)
            for n, _ in enumerate(dl):
                # The ninth batch: with 4 asked ahead, worker 0 (batches 0, 2, .. 14) has
                # been asked for 7 of its 8 and worker 1 (1, 3, .. 13) for 6 of its 7, so
                # neither has finished its share.
                if n == 8:
                    break
            self.assertEqual(ds.position, (0, 0), ctx)
            for epoch in (0, 1):
                self.assert_same_batches(self.epoch_ids(dl), self.reference(epoch, seed=7),
                                         f"{ctx}, epoch {epoch}")
                self.assertEqual(ds.position, (epoch + 1, 0), ctx)
            del dl
            ds.close()

    def test_spawned_workers(self):
        # The dataset crosses into workers by pickle; its shared position with it.
        ds = self.dataset(seed=9)
        dl = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="spawn")
        self.assert_same_batches(self.epoch_ids(dl), self.reference(0, seed=9), "spawn")
        self.assertEqual(ds.position, (1, 0))

    def test_pin_memory(self):
        # DataLoader pins only where there is a device to pin for; elsewhere the
        # tensors stay as they are. torch 1.13 asks CUDA, silently; torch 2.x asks
        # torch.accelerator and, finding none, warns once per iterator (a warning
        # that -W error makes fatal: hence counted here, for each version).
        accel = getattr(torch, "accelerator", None)
        pins = accel.is_available() if accel is not None else torch.cuda.is_available()
        warns = 1 if accel is not None and not pins else 0
        for workers in (0, 2):
            ctx = f"num_workers {workers}"
            ds = self.dataset()
            dl = DataLoader(ds, batch_size=None, num_workers=workers, pin_memory=True)
            got = []
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                for x in dl:
                    self.assertEqual(x.is_pinned(), pins, ctx)
                    got.append(ids_of(x))
                    del x        # with num_workers=0 a view of the batch, which it pins
            self.assert_same_batches(got, self.reference(0), f"pin_memory, {ctx}")
            said = [str(w.message) for w in caught if "pin_memory" in str(w.message)]
            self.assertEqual(len(said), warns, f"{ctx}: {said}")
            ds.close()

    def check_labelled(self, x, y):
        self.assertEqual((x.dtype, tuple(x.shape[1:]), y.dtype), (torch.uint8, (IMG,),
                                                                  torch.int64))
        self.assertEqual(len(x), len(y))
        return [(bytes(r.tolist()), int(c)) for r, c in zip(x, y)]

    def test_labels_through_to_tensors(self):
        for workers in (0, 2):
            ds = self.dataset("folder.bpk", 8, fields=["data", "label"])
            self.assertEqual(ds.classes, tuple(CLASSES))
            got = []
            for x, y in DataLoader(ds, batch_size=None, num_workers=workers):
                got += self.check_labelled(x, y)
            self.assertEqual(sorted(got), sorted(self.images.items()), f"workers {workers}")
            ds.close()

    def test_labels_through_to_dict(self):
        ds = self.dataset("folder.bpk", 8, collate=bt.to_dict, keys=True, shuffle="none")
        got = {}
        for d in DataLoader(ds, batch_size=None, num_workers=3):
            self.assertEqual(set(d), {"data", "label", "__key__"})
            for key, body in zip(d["__key__"], self.check_labelled(d["data"], d["label"])):
                self.assertEqual(CLASSES[body[1]], key.split("/")[0], key)
                got[key] = body
        self.assertEqual(sorted(got.values()), sorted(self.images.items()))
        self.assertEqual(len(got), 60)

    def test_worker_output_is_copied_out(self):
        # A hook returning views and memoryviews of shared memory: the worker copies them.
        def views(b):
            return {"x": b.torch(), "arr": b.numpy(), "mv": b.samples[0], "ids": b.ids}
        ds = self.dataset(collate=views)
        n = 0
        for d in DataLoader(ds, batch_size=None, num_workers=2):
            self.assertTrue(torch.equal(d["x"], d["arr"]))
            self.assertEqual(bytes(d["mv"]), T.record_bytes(d["ids"][0], SIZE))
            self.assertEqual(ids_of(d["x"]), list(d["ids"]))
            n += len(d["ids"])
        self.assertEqual(n, N)

    def test_a_view_hidden_from_the_copy_is_refused(self):
        class Box:
            def __init__(self, t):
                self.t = t
        ds = self.dataset(collate=lambda b: Box(b.torch()))
        with self.assertRaisesRegex(TypeError, "still references the batch's shared memory"):
            for _ in DataLoader(ds, batch_size=None, num_workers=1):
                pass

    def test_rank_from_torchrun_and_slurm(self):
        want = self.reference(0, 1, 3)
        for env in ({"RANK": "1", "WORLD_SIZE": "3", "LOCAL_RANK": "1"},
                    {"SLURM_PROCID": "1", "SLURM_NTASKS": "3"}):
            old = {k: os.environ.pop(k, None) for k in
                   ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS")}
            os.environ.update(env)
            try:
                ds = self.dataset()
            finally:
                for k, v in old.items():
                    os.environ.pop(k, None)
                    if v is not None:
                        os.environ[k] = v
            # Settled at construction: the workers see rank 1 of 3 with the variables gone.
            self.assertEqual((ds.rank, ds.world), (1, 3), env)
            got = self.epoch_ids(DataLoader(ds, batch_size=None, num_workers=2))
            self.assert_same_batches(got, want, str(env))
            ds.close()

    def test_state_dict_at_an_epoch_boundary_with_workers(self):
        ds = self.dataset(seed=3)
        self.epoch_ids(DataLoader(ds, batch_size=None, num_workers=3))
        state = ds.state_dict()
        self.assertEqual((state["epoch"], state["batch"]), (1, 0))
        ds.close()
        again = self.dataset(seed=3)
        again.load_state_dict(state)
        got = self.epoch_ids(DataLoader(again, batch_size=None, num_workers=2))
        self.assert_same_batches(got, self.reference(1, seed=3), "resumed epoch 1")
        ld = self.loader("rec.bpk", BS, seed=3)     # the same format as a Loader's
        ld.load_state_dict(state)
        self.assertEqual([list(b.ids) for b in ld], self.reference(1, seed=3))
        with self.assertRaisesRegex(ValueError, r"seed \(3, now 4\)"):
            self.dataset(seed=4).load_state_dict(state)
        with self.assertRaisesRegex(ValueError, "outside an epoch of 15 batches"):
            again.load_state_dict(dict(state, batch=15))

    def test_state_dict_mid_epoch(self):
        want = self.reference(0)
        ds = self.dataset()
        first = []
        for x in DataLoader(ds, batch_size=None, num_workers=0):
            first.append(ids_of(x))
            if len(first) == 4:
                break
        state = ds.state_dict()
        self.assertEqual((state["epoch"], state["batch"]), (0, 4))
        self.assertEqual(first, want[:4])
        # The rest of the epoch, shared by three workers of another dataset.
        rest = self.dataset()
        rest.load_state_dict(state)
        got = self.epoch_ids(DataLoader(rest, batch_size=None, num_workers=3))
        self.assert_same_batches(got, want[4:], "the rest of epoch 0")
        self.assertEqual(rest.position, (1, 0))

    def test_set_epoch_after_load_resumes_the_saved_epoch(self):
        want = self.reference(0)
        state = dict(self.dataset().state_dict(), epoch=0, batch=4, sample=4 * BS)
        for other in (1, 2):
            ds = self.dataset()
            ds.load_state_dict(state)
            with self.assertRaisesRegex(ValueError, "the state resumes epoch 0 at batch 4"):
                ds.set_epoch(other)
        ds = self.dataset()
        ds.load_state_dict(state)
        got = []
        for epoch in range(ds.epoch, 2):
            ds.set_epoch(epoch)           # epoch 0 from batch 4 (two workers), then epoch 1
            got.append(self.epoch_ids(DataLoader(ds, batch_size=None, num_workers=2)))
        self.assert_same_batches(got[0], want[4:], "the rest of epoch 0")
        self.assert_same_batches(got[1], self.reference(1), "epoch 1")

    def test_plain_dataloader_mid_epoch_state_is_refused(self):
        for persistent in (False, True):
            ctx = f"persistent_workers={persistent}"
            ds = self.dataset(seed=8)
            dl = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=persistent)
            got = []
            for x in dl:
                got.append(ids_of(x))
                if len(got) == 3:
                    with self.assertRaisesRegex(RuntimeError, r"inside epoch 0 read by 2 workers "
                                                r"of a torch DataLoader: .* batchclient\.torch"
                                                r"\.DataLoader"):
                        ds.state_dict()
            self.assert_same_batches(got, self.reference(0, seed=8), ctx)
            state = ds.state_dict()                 # after the loop: exact
            self.assertEqual((state["epoch"], state["batch"], state["sample"]), (1, 0, 0), ctx)
            again = self.dataset(seed=8)
            again.load_state_dict(state)
            self.assert_same_batches(self.epoch_ids(DataLoader(again, batch_size=None,
                                                               num_workers=2)),
                                     self.reference(1, seed=8), ctx)
            del dl
            ds.close()

    def take(self, it, n):
        return [ids_of(next(it)) for _ in range(n)]

    def test_counting_dataloader_is_exact_anywhere(self):
        want = self.reference(0, seed=6) + self.reference(1, seed=6)
        per_epoch = len(want) // 2
        for workers, persistent, pin in ((0, False, False), (2, False, False), (2, True, True),
                                         (3, False, True), (3, True, False)):
            ctx = f"num_workers {workers}, persistent {persistent}, pin_memory {pin}"
            ds = self.dataset(seed=6)
            dl = bt.DataLoader(ds, num_workers=workers, persistent_workers=persistent,
                               pin_memory=pin)
            got = []
            for m in (1, 5, per_epoch - 1):          # a break after m batches of epoch 0
                for x in dl:
                    got.append(ids_of(x))
                    st = dl.state_dict()
                    self.assertEqual((st["epoch"], st["batch"], st["sample"]),
                                     (0, len(got), len(got) * BS), ctx)
                    if len(got) == m:
                        break
                del x            # with num_workers=0 a view of the batch, which it pins
                self.assertEqual(got, want[:m], f"{ctx}, break after {m}")
                self.assertEqual(ds.position, (0, m), ctx)
            got += self.epoch_ids(dl)                  # the epoch's rest
            self.assertEqual(ds.state_dict()["epoch"], 1, ctx)
            got += self.epoch_ids(dl)                  # and the next, by itself
            self.assertEqual(got, want, ctx)
            self.assertEqual(ds.position, (2, 0), ctx)
            del dl
            ds.close()

    def test_a_new_iterator_mid_epoch_continues_the_count(self):
        want = self.reference(0, seed=2)
        for workers, persistent in ((2, False), (3, True)):
            ctx = f"num_workers {workers}, persistent {persistent}"
            ds = self.dataset(seed=2)
            dl = bt.DataLoader(ds, num_workers=workers, persistent_workers=persistent)
            first = iter(dl)
            got = self.take(first, 4)
            second = iter(dl)
            with self.assertRaisesRegex(RuntimeError, "a newer iteration over this "
                                        "BatchdDataset has started"):
                next(first)
            got += self.take(second, 3)
            self.assertEqual(ds.state_dict()["batch"], 7, ctx)
            # A counted state resumes with any number of workers, or a plain Loader.
            rest = self.dataset(seed=2)
            rest.load_state_dict(ds.state_dict())
            got += self.epoch_ids(bt.DataLoader(rest, num_workers=workers + 1))
            self.assertEqual(got, want, ctx)
            del first, second, dl
            ds.close()

    def test_counting_dataloader_arguments(self):
        ds = self.dataset()
        with self.assertRaisesRegex(ValueError, r"batch_size=4: batchd makes the batches \(the "
                                    r"BatchdDataset's batch_size, 7\)"):
            bt.DataLoader(ds, batch_size=4)
        with self.assertRaisesRegex(ValueError, "shuffle=True: a BatchdDataset orders its "
                                    "batches itself"):
            bt.DataLoader(ds, shuffle=True)
        with self.assertRaisesRegex(TypeError, "reads a BatchdDataset, not a list"):
            bt.DataLoader([1, 2, 3])
        self.assertEqual(len(bt.DataLoader(ds, num_workers=2)), len(ds))

    def test_bad_arguments(self):
        with self.assertRaisesRegex(ValueError, "collate 3 must be callable"):
            self.dataset(collate=3)
        with self.assertRaisesRegex(ValueError, "rank 3 .* must be in 0 .. world-1 = 2"):
            self.dataset(rank=3, world=3)
        with self.assertRaisesRegex(ValueError, "prefetch 0 must be in 1 .. 1022"):
            self.dataset(prefetch=0)
        with self.assertRaisesRegex(ValueError, "epoch -1 must be >= 0"):
            self.dataset().set_epoch(-1)
        with self.assertRaisesRegex(batchclient.BatchdError, 'has no field "jpg"'):
            self.dataset(fields=["jpg"])

    def test_import_without_torch(self):
        code = ("import sys; sys.modules['torch'] = None\n"
                "import batchclient\n"
                "print(batchclient.Loader.__name__)\n"
                "try:\n"
                "    import batchclient.torch\n"
                "except ImportError as e:\n"
                "    print('refused:', e)\n")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("Loader", p.stdout)
        self.assertIn("refused: batchclient.torch needs PyTorch", p.stdout)


if __name__ == "__main__":
    T.main()
