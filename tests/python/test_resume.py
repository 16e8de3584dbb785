#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Resume through state_dict(): a loader rebuilt from a state saved at any
point (mid-epoch, at an epoch's end, before the first batch, after a
JSON round trip, in a new Loader or the same one) yields exactly the
batches an uninterrupted run yields next; a state of another dataset,
seed, shuffle or drop_last is refused, while one of another world or
batch size resumes at its global sample (test_elastic.py has the rest). After load_state_dict, the usual epoch loop with set_epoch
resumes the saved epoch where it was saved and refuses another epoch; the
docs/python.md's pattern, killed with SIGKILL mid-epoch and run again, trains on
every sample of every epoch exactly once; so does the same loop over
batchclient.torch.DataLoader with 2 and 3 workers, persistent or not,
batch for batch as a Loader yields them (skipped without PyTorch)."""
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import traceback
import unittest

import batchd_testlib as T

N, SIZE, BS = 700, 64, 50          # 14 batches per epoch
EPOCHS = 3


class Resume(T.DaemonCase):
    @classmethod
    def make_datasets(cls, d):
        rec = os.path.join(cls.tmp, "rec.bin")
        T.write_records(rec, N, SIZE)
        T.pack(d.path("rec.bpk"), records=(SIZE, rec))
        T.pack(d.path("other.bpk"), records=(SIZE, rec), block_size="4K")

    def run_epochs(self, ld, epochs):
        out = []
        for _ in range(epochs):
            out += [(b.epoch, b.index, b.ids) for b in ld]
        return out

    def reference(self, **kw):
        return self.run_epochs(self.loader("rec.bpk", BS, **kw), EPOCHS)

    def test_resume_in_a_new_loader_anywhere(self):
        for kw in ({"shuffle": "global", "seed": 9}, {"shuffle": "block", "seed": 1},
                   {"shuffle": "global", "seed": 2, "rank": 1, "world": 3}):
            ref = self.reference(**kw)
            per_epoch = len(ref) // EPOCHS
            for stop in (0, 1, 5, per_epoch - 1, per_epoch, per_epoch + 7, 2 * per_epoch - 1):
                with self.subTest(kw=kw, stop=stop):
                    ld = self.loader("rec.bpk", BS, **kw)
                    seen = []
                    it = iter(ld)
                    state = ld.state_dict()
                    while len(seen) < stop:
                        try:
                            b = next(it)
                        except StopIteration:
                            it = iter(ld)
                            continue
                        seen.append((b.epoch, b.index, b.ids))
                        state = ld.state_dict()     # after the step on b
                    ld.close()
                    state = json.loads(json.dumps(state))   # as a checkpoint would store it
                    self.assertEqual((state["epoch"], state["batch"]),
                                     (stop // per_epoch, stop % per_epoch))
                    ld2 = self.loader("rec.bpk", BS, **kw)
                    ld2.load_state_dict(state)
                    rest = []
                    while len(seen) + len(rest) < len(ref):
                        rest += [(b.epoch, b.index, b.ids) for b in ld2]
                    self.assertEqual(seen + rest, ref)
                    ld2.close()

    def test_resume_the_same_loader(self):
        ref = self.reference(seed=4)
        ld = self.loader("rec.bpk", BS, seed=4)
        it = iter(ld)
        for _ in range(4):
            next(it)
        state = ld.state_dict()
        for _ in range(6):                      # wander off, then come back
            next(it)
        ld.load_state_dict(state)
        self.assertEqual(ld.position, (0, 4))
        got = self.run_epochs(ld, 2)
        self.assertEqual(got, ref[4:4 + len(got)])
        self.assertEqual(got[-1][:2], (1, len(ref) // EPOCHS - 1))

    def test_state_names_the_schedule(self):
        ld = self.loader("rec.bpk", BS, seed=4, shuffle="block", rank=0, world=2)
        st = ld.state_dict()
        self.assertEqual({k: st[k] for k in ("dataset", "batch_size", "shuffle", "seed", "rank",
                                             "world", "drop_last", "epoch", "batch", "sample")},
                         {"dataset": "rec.bpk", "batch_size": BS, "shuffle": "block", "seed": 4,
                          "rank": 0, "world": 2, "drop_last": False, "epoch": 0, "batch": 0,
                          "sample": 0})
        it = iter(ld)
        for _ in range(3):
            next(it)
        st = ld.state_dict()
        # The samples all ranks have consumed, stepping in lockstep with this one.
        self.assertEqual((st["epoch"], st["batch"], st["sample"]), (0, 3, 3 * BS * 2))
        ld.set_epoch(5)
        self.assertEqual((ld.state_dict()["epoch"], ld.state_dict()["sample"]), (5, 0))

    def test_foreign_states_are_refused(self):
        st = self.loader("rec.bpk", BS, seed=4).state_dict()
        for kw, what in (({"seed": 5}, r"seed \(4, now 5\)"),
                         ({"shuffle": "none"}, r"shuffle \('global', now 'none'\)"),
                         ({"drop_last": True}, r"drop_last \(False, now True\)")):
            with self.assertRaisesRegex(ValueError, "cannot resume: the state was saved with a "
                                        "different " + what):
                self.loader("rec.bpk", BS, **{"seed": 4, **kw}).load_state_dict(st)
        # Another world or batch size is no other schedule: the position is global.
        st4 = {**st, "batch": 4, "sample": 4 * BS}
        ld = self.loader("rec.bpk", BS, seed=4, world=2)
        ld.load_state_dict(st4)
        self.assertEqual(ld.position, (0, 2))            # 200 samples: 2 global batches of 100
        ld = self.loader("rec.bpk", BS + 1, seed=4)
        ld.load_state_dict(st4)
        self.assertEqual((ld.position, ld.state_dict()["sample"]), ((0, 0), 4 * BS))
        self.assertEqual(ld.epoch_batches(), -(-(N - 4 * BS) // (BS + 1)))
        with self.assertRaisesRegex(ValueError, "fingerprint"):   # the data changed
            self.loader("other.bpk", BS, seed=4).load_state_dict(st)
        with self.assertRaisesRegex(ValueError, "outside an epoch"):
            self.loader("rec.bpk", BS, seed=4).load_state_dict({**st, "batch": 14})
        with self.assertRaisesRegex(ValueError, "version"):
            self.loader("rec.bpk", BS, seed=4).load_state_dict({**st, "version": 99})

    def test_set_epoch_after_load_resumes_the_saved_epoch(self):
        kw = {"shuffle": "global", "seed": 3}
        ref = self.reference(**kw)
        per_epoch = len(ref) // EPOCHS
        ld = self.loader("rec.bpk", BS, **kw)
        taken = 0
        while taken < per_epoch + 5:          # into epoch 1, five batches in
            for _ in ld:
                taken += 1
                if taken == per_epoch + 5:
                    break
        st = ld.state_dict()
        self.assertEqual((st["epoch"], st["batch"]), (1, 5))
        for other in (0, 2):
            ld2 = self.loader("rec.bpk", BS, **kw)
            ld2.load_state_dict(st)
            with self.assertRaisesRegex(ValueError, r"set_epoch\(%d\) after load_state_dict: "
                                        r"the state resumes epoch 1 at batch 5" % other):
                ld2.set_epoch(other)
        ld3 = self.loader("rec.bpk", BS, **kw)
        ld3.load_state_dict(st)
        got = []
        for epoch in range(ld3.position[0], EPOCHS):
            ld3.set_epoch(epoch)              # the saved epoch: from batch 5 on; then as usual
            got += [(b.epoch, b.index, b.ids) for b in ld3]
        self.assertEqual(got, ref[per_epoch + 5:])

    def test_sigkill_mid_epoch_resumes_exactly(self):
        """The docs/python.md pattern in a trainer process that dies by SIGKILL in
        the middle of epoch 1, then runs again from its checkpoint."""
        ckpt = os.path.join(self.tmp, "ckpt.json")
        if os.path.exists(ckpt):
            os.unlink(ckpt)
        argv = [sys.executable, os.path.abspath(__file__), "--trainer", self.daemon.sock, ckpt]
        first = subprocess.run(argv + ["20"], timeout=60)
        self.assertEqual(first.returncode, -signal.SIGKILL)
        with open(ckpt) as f:
            self.assertEqual(len(json.load(f)["done"]), 20)
        second = subprocess.run(argv + ["0"], timeout=60)
        self.assertEqual(second.returncode, 0)
        with open(ckpt) as f:
            done = json.load(f)["done"]
        self.check_trained(done)

    def check_trained(self, done, ctx=""):
        """done, (epoch, index, ids) per step, is every batch of a Loader's EPOCHS epochs once."""
        ref = [(e, i, list(ids)) for e, i, ids in self.reference(shuffle="global", seed=6)]
        self.assertEqual([tuple(d) for d in done], [tuple(r) for r in ref], ctx)
        for e in range(EPOCHS):
            ids = sorted(i for d in done if d[0] == e for i in d[2])
            self.assertEqual(ids, list(range(N)), f"{ctx}epoch {e}")

    def run_forked(self, fn, *args):
        """fn(*args) in a trainer process forked from this one (PyTorch is
        imported once, here), in a process group of its own, then end what
        is left of the group: DataLoader workers of a trainer killed by
        SIGKILL notice only after a while. @return the exit status as
        subprocess gives it (-SIGKILL when it killed itself)."""
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.setpgid(0, 0)
                fn(*args)
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        try:
            os.setpgid(pid, pid)
        except (PermissionError, ProcessLookupError):
            pass            # the child did it first, or is gone already
        deadline = time.monotonic() + 120
        done = 0
        try:
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else \
                        os.WEXITSTATUS(status)
                if time.monotonic() > deadline:
                    self.fail(f"the trainer {fn.__name__}{args} still runs after 120 s")
                time.sleep(0.02)
        finally:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            if not done:
                os.waitpid(pid, 0)

    @unittest.skipUnless(importlib.util.find_spec("torch"), "PyTorch is not installed")
    def test_sigkill_mid_epoch_with_workers_resumes_exactly(self):
        """The same loop over batchclient.torch.DataLoader: its state_dict()
        after any step resumes at the next batch, whatever the workers had
        fetched ahead."""
        import batchclient.torch     # noqa: F401 (once, before the trainers fork)
        for workers, persistent, kill_after in ((2, False, 20), (2, True, 9), (3, False, 31),
                                                (3, True, 17)):
            ctx = f"num_workers {workers}, persistent {persistent}, killed after {kill_after}: "
            ckpt = os.path.join(self.tmp, f"ckpt-{workers}-{persistent}.json")
            args = (self.daemon.sock, ckpt, workers, persistent)
            self.assertEqual(self.run_forked(torch_trainer, *args, kill_after), -signal.SIGKILL,
                             ctx)
            with open(ckpt) as f:
                c = json.load(f)
            self.assertEqual(len(c["done"]), kill_after, ctx)
            self.assertEqual((c["loader"]["epoch"], c["loader"]["batch"]),
                             divmod(kill_after, 14), ctx)
            self.assertEqual(self.run_forked(torch_trainer, *args, 0), 0, ctx)
            with open(ckpt) as f:
                self.check_trained(json.load(f)["done"], ctx)
            self.assertEqual(self.foreign_sessions(), [], ctx)

    def foreign_sessions(self, seconds=10):
        """Sessions of other processes (the trainers' and their workers'),
        once they have had `seconds` to end."""
        deadline = time.monotonic() + seconds
        while True:
            left = [s for s in self.daemon.sessions() if s["pid"] != os.getpid()]
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.05)


def resumed(ckpt, load):
    """What the checkpoint says was trained on ([] without one), after
    load(its loader state)."""
    if not os.path.exists(ckpt):
        return []
    with open(ckpt) as f:
        c = json.load(f)
    load(c["loader"])
    return c["done"]


def checkpoint(ckpt, state, done, kill_after):
    """After a step: the loader's state and what was trained on, written
    whole or not at all; then SIGKILL when kill_after steps are done."""
    with open(ckpt + ".tmp", "w") as f:
        json.dump({"loader": state, "done": done}, f)
    os.replace(ckpt + ".tmp", ckpt)
    if len(done) == kill_after:
        os.kill(os.getpid(), signal.SIGKILL)


def where(batch):
    """What the checkpoint records of a batch (collate for the workers)."""
    return [batch.epoch, batch.index, [int(i) for i in batch.ids]]


def trainer(sock, ckpt, kill_after):
    """docs/python.md's resume pattern, a checkpoint after every step."""
    import batchclient
    ld = batchclient.Loader("rec.bpk", BS, shuffle="global", seed=6, socket=sock)
    done = resumed(ckpt, ld.load_state_dict)
    for epoch in range(ld.position[0], EPOCHS):
        ld.set_epoch(epoch)
        for b in ld:
            done.append(where(b))
            checkpoint(ckpt, ld.state_dict(), done, kill_after)
    ld.close()


def torch_trainer(sock, ckpt, workers, persistent, kill_after):
    """trainer()'s loop over batchclient.torch.DataLoader with workers."""
    import batchclient.torch as bt
    ds = bt.BatchdDataset("rec.bpk", BS, shuffle="global", seed=6, socket=sock, collate=where)
    dl = bt.DataLoader(ds, num_workers=workers, persistent_workers=persistent)
    done = resumed(ckpt, dl.load_state_dict)
    for epoch in range(ds.epoch, EPOCHS):
        ds.set_epoch(epoch)
        for b in dl:
            done.append(b)
            checkpoint(ckpt, dl.state_dict(), done, kill_after)
    del dl
    ds.close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--trainer"]:
        trainer(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        T.main()
