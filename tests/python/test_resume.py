#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Resume through state_dict(): a loader rebuilt from a state saved at any
point (mid-epoch, at an epoch's end, before the first batch, after a
JSON round trip, in a new Loader or the same one) yields exactly the
batches an uninterrupted run yields next; a state from another schedule
is refused. After load_state_dict, the usual epoch loop with set_epoch
resumes the saved epoch where it was saved and refuses another epoch; the
README's pattern, killed with SIGKILL mid-epoch and run again, trains on
every sample of every epoch exactly once."""
import json
import os
import signal
import subprocess
import sys

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
                                             "world", "drop_last", "epoch", "batch")},
                         {"dataset": "rec.bpk", "batch_size": BS, "shuffle": "block", "seed": 4,
                          "rank": 0, "world": 2, "drop_last": False, "epoch": 0, "batch": 0})
        ld.set_epoch(5)
        self.assertEqual(ld.state_dict()["epoch"], 5)

    def test_foreign_states_are_refused(self):
        st = self.loader("rec.bpk", BS, seed=4).state_dict()
        for kw, what in (({"seed": 5}, "seed"), ({"world": 2}, "world"),
                         ({"shuffle": "none"}, "shuffle")):
            with self.assertRaisesRegex(ValueError, what):
                self.loader("rec.bpk", BS, **{"seed": 4, **kw}).load_state_dict(st)
        with self.assertRaisesRegex(ValueError, "batch_size"):
            self.loader("rec.bpk", BS + 1, seed=4).load_state_dict(st)
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
        """The README pattern in a trainer process that dies by SIGKILL in
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
        ref = [(e, i, list(ids)) for e, i, ids in self.reference(shuffle="global", seed=6)]
        self.assertEqual([tuple(d) for d in done], [tuple(r) for r in ref])
        for e in range(EPOCHS):
            ids = sorted(i for d in done if d[0] == e for i in d[2])
            self.assertEqual(ids, list(range(N)), f"epoch {e}")


def trainer(sock, ckpt, kill_after):
    """The README's resume pattern: a checkpoint after every step holds the
    loader's state and what was trained on, written whole or not at all."""
    import batchclient
    ld = batchclient.Loader("rec.bpk", BS, shuffle="global", seed=6, socket=sock)
    done = []
    if os.path.exists(ckpt):
        with open(ckpt) as f:
            c = json.load(f)
        ld.load_state_dict(c["loader"])
        done = c["done"]
    for epoch in range(ld.position[0], EPOCHS):
        ld.set_epoch(epoch)
        for b in ld:
            done.append([b.epoch, b.index, [int(i) for i in b.ids]])
            with open(ckpt + ".tmp", "w") as f:
                json.dump({"loader": ld.state_dict(), "done": done}, f)
            os.replace(ckpt + ".tmp", ckpt)
            if len(done) == kill_after:
                os.kill(os.getpid(), signal.SIGKILL)
    ld.close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--trainer"]:
        trainer(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        T.main()
