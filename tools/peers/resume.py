#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The exact-resume workload: does a trainer killed mid-epoch, resumed from
its loader's last checkpoint, see every sample of the epoch exactly once?

Why this exists: every loader people use offers some state_dict() for
mid-epoch resume, and a user cannot tell from the docs whether it counts
what the training loop consumed or what the loader (its workers, its
prefetch queue) had read ahead. This measures it, per loader, the same
way for each: correctness, not speed.

For each peer and scenario:
  1. a trainer process reads epochs (world W: a process per rank, started
     together with the environment torchrun gives them: $RANK,
     $WORLD_SIZE, $LOCAL_RANK, ...), with a DataLoader of 2 workers where
     the peer uses DataLoader workers; after consuming each batch it logs
     the ids it consumed and saves its checkpoint (its epoch and the
     loader's state_dict()) to a file atomically (a temporary file renamed
     over the old one), then, after a fixed step of a fixed epoch,
     SIGKILLs itself (its workers end with it);
  2. new processes (world W', a process per rank) load rank 0's last
     checkpoint, as trainers restarting from a checkpoint do, and read the
     rest of that epoch, logging ids;
  3. the ids of that epoch are counted against its samples: repeated
     (consumed before the kill and again after) and lost (never consumed).
A sample's id is read from its own bytes (8 bytes little-endian, then 56
bytes derived from the id and checked), so nothing is taken from a
loader's metadata. Each peer's copy of the data is written by its own
writer: batchd-pack for batchd, MDSWriter for Mosaic Streaming,
litdata.optimize for litData, plain files for torchdata's
StatefulDataLoader and DALI's file reader.

    tools/peers/resume.py --build build --workdir /tmp/resume [--json out.json]

prints a table (peer, scenario, samples, repeated, lost, note). A peer that
is not installed, or cannot run here, has a row saying why. Then the
mixture case (resume_mix.py: windows of tokens from three sources by
weight, killed at world 2 and resumed at worlds 2, 1 and 4), a table of
repeated/lost per source (--mix-peers; an empty list skips it).
"""
import argparse
import collections
import hashlib
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
import traceback

import resume_mix

N = 2048                 # samples: every world and batch size here divides it, no padding
SIZE = 64                # bytes per sample
B = 16                   # batch size per rank
SHARD = 256              # samples per shard or chunk, for the peers that have them
SEED = 7
WORKERS = 2

# (name, world before the kill, world after, the epoch and the step in it
# (of each rank) after which the trainers die; the count is over that
# epoch). 48 of 128: three shards in, an even step (worker 0's next
# batch); 51: 40% in, inside a shard, worker 1's batch. At world 2, 25
# steps are 800 samples: 12.5 global batches of the world 4 after it. A
# kill in epoch 1 checks that the resumed epoch is that epoch's order.
SCENARIOS = (
    ("kill 48/128", 1, 1, 0, 48),
    ("kill 51/128", 1, 1, 0, 51),
    ("epoch 1, kill 51/128", 1, 1, 1, 51),
    ("world 2->1, kill 25/64", 2, 1, 0, 25),
    ("world 2->4, kill 25/64", 2, 4, 0, 25),
    ("epoch 1, world 2->1, kill 25/64", 2, 1, 1, 25),
)
PEERS = ("batchd", "mosaic", "litdata", "torchdata", "dali")


# ---- samples -------------------------------------------------------------------------------


def sample(i):
    """Sample i's bytes: its id, then bytes that depend on it."""
    return i.to_bytes(8, "little") + hashlib.blake2b(i.to_bytes(8, "little"),
                                                      digest_size=SIZE - 8).digest()


def sample_id(data):
    """The id sample() wrote into data; ValueError where the bytes are not such a sample."""
    data = bytes(data)
    i = int.from_bytes(data[:8], "little")
    if len(data) != SIZE or i >= N or data != sample(i):
        raise ValueError(f"{len(data)} bytes that are no sample of this workload "
                         f"(id field {i})")
    return i


def ids_of(samples):
    return [sample_id(s) for s in samples]


# ---- the trainer's loop, the same for every peer -------------------------------------------


def save(path, state):
    """state to path, whole or not at all."""
    with open(path + ".tmp", "wb") as f:
        pickle.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def load(path):
    with open(path, "rb") as f:
        return pickle.load(f)


class Trainer:
    """The trainer's side of the loop, the same for every peer: its
    checkpoint holds the epoch it was in and the loader's state, as a
    training script's would. After consuming each batch, step() logs its
    ids, saves the checkpoint and, after step `kill` of epoch `kill_epoch`,
    dies by SIGKILL (its workers die with its process group)."""

    def __init__(self, a):
        self.a = a
        saved = load(a.resume) if a.resume else {"epoch": 0, "loader": None}
        self.epoch, self.state = saved["epoch"], saved["loader"]
        self.log = open(a.log, "w")
        self.steps = {}

    def epochs(self):
        """The epochs this process runs: from the checkpoint's through the
        one the kill is in (the count is over that epoch)."""
        return range(self.epoch, self.a.kill_epoch + 1)

    def step(self, epoch, ids, state_dict):
        self.log.write(json.dumps({"epoch": epoch, "ids": ids}) + "\n")
        self.log.flush()
        save(self.a.ckpt, {"epoch": epoch, "loader": state_dict()})
        self.steps[epoch] = n = self.steps.get(epoch, 0) + 1
        if epoch == self.a.kill_epoch and n == self.a.kill:
            os.kill(os.getpid(), signal.SIGKILL)

    def loop(self, loader, state_dict, ids=lambda b: b, set_epoch=None):
        """The usual epoch loop over a DataLoader-like loader."""
        for epoch in self.epochs():
            if set_epoch:
                set_epoch(epoch)
            for b in loader:
                self.step(epoch, ids(b), state_dict)


# ---- peers ---------------------------------------------------------------------------------
#
# A peer: `versions()` (what is installed, or ImportError), `write(dir)`
# (the epoch's samples in its format), `run(a)` (in the trainer process:
# its loader under a Trainer, resuming from a.resume when given).
# `elastic`: why it is not run at another world size (None: it claims
# that resume and is run).


class Peer:
    name = ""
    elastic = None           # why the peer is not run at another world size (None: it is)
    how = ""                 # what its state counts: why it resumes where it does

    def versions(self):
        raise NotImplementedError

    def write(self, d):
        raise NotImplementedError

    def run(self, a):
        raise NotImplementedError

    def note(self, sc, counts):
        """What users need to know of this row (sc: the SCENARIOS entry)."""
        return ""


def ids_collate(batch):
    """DataLoader collate for samples that are bytes: their ids."""
    return ids_of(batch)


class Batchd(Peer):
    name = "batchd"
    how = ("batchclient.torch.DataLoader counts the batches it hands the training loop; a "
           "resumed worker k of 2 reopens its stream at batch b0 + k, stride 2; another world "
           "resumes at the global sample count (rank 0's state)")

    def versions(self):
        import batchclient
        import torch
        return {"batchclient": getattr(batchclient, "__version__", "?"),
                "torch": torch.__version__}

    def write(self, d):
        rec = os.path.join(d, "records.bin")
        with open(rec, "wb") as f:
            for i in range(N):
                f.write(sample(i))
        os.makedirs(os.path.join(d, "root"))
        run_checked([os.path.join(ARGS.build, "tools", "batchd-pack"), "create",
                     os.path.join(d, "root", "resume.bpk"), "--records", str(SIZE), rec,
                     "--threads", "2"])

    def run(self, a):
        import batchclient.torch as bt
        ds = bt.BatchdDataset("resume.bpk", B, shuffle="global", seed=SEED, rank=a.rank,
                              world=a.world, socket=a.socket, timeout=30, collate=batch_ids)
        dl = bt.DataLoader(ds, num_workers=WORKERS)
        t = Trainer(a)
        if t.state:
            dl.load_state_dict(t.state)
        # set_epoch after load_state_dict resumes the saved epoch where it was saved
        t.loop(dl, dl.state_dict, set_epoch=ds.set_epoch)
        del dl
        ds.close()


def batch_ids(b):
    """batchclient collate: the ids in the batch's bytes."""
    return ids_of(b.samples)


def ids_dict(batch):
    """Collate for samples that are {"data": bytes}: {"ids": their ids} (a
    dict, so that StreamingDataLoader can count the batch's samples)."""
    return {"ids": ids_of(s["data"] for s in batch)}


class Mosaic(Peer):
    """Mosaic Streaming: StreamingDataset over MDS shards, StreamingDataLoader.
    Ranks come from $RANK, $WORLD_SIZE, $LOCAL_RANK, $LOCAL_WORLD_SIZE (it
    joins torch.distributed itself: the ranks run together);
    num_canonical_nodes=2 at every world, which is what makes its order
    the same at world 2 and 1 (its elastic determinism)."""
    name = "mosaic"
    how = ("StreamingDataLoader counts the samples it hands the loop (times the world: "
           "sample_in_epoch); the resumed epoch skips that prefix of its global order, the "
           "same at any world with num_canonical_nodes fixed")

    def versions(self):
        import streaming
        import torch
        return {"mosaicml-streaming": streaming.__version__, "torch": torch.__version__}

    def write(self, d):
        from streaming import MDSWriter
        with MDSWriter(out=os.path.join(d, "mds"), columns={"data": "bytes"},
                       size_limit=SHARD * (SIZE + 4) + 64) as w:
            for i in range(N):
                w.write({"data": sample(i)})

    def run(self, a):
        from streaming import StreamingDataLoader, StreamingDataset
        ds = StreamingDataset(local=os.path.join(a.data, "mds"), batch_size=B, shuffle=True,
                              shuffle_seed=SEED, num_canonical_nodes=2)
        dl = StreamingDataLoader(ds, batch_size=B, num_workers=WORKERS, collate_fn=ids_dict)
        t = Trainer(a)
        if t.state:
            dl.load_state_dict(t.state)
        t.loop(dl, dl.state_dict, ids=lambda b: b["ids"])


class LitData(Peer):
    """litData: StreamingDataset over chunks written by litdata.optimize,
    litdata.StreamingDataLoader. Ranks come from $WORLD_SIZE and
    $GLOBAL_RANK (litdata reads these without torch.distributed); its
    load_state_dict() restripes a state saved at another world size
    ("elastic restripe")."""
    name = "litdata"
    how = ("StreamingDataLoader counts the samples it hands the loop, per worker; at another "
           "world it restripes from that count rounded down to the new global batch")

    def versions(self):
        import litdata
        import torch
        return {"litdata": litdata.__version__, "torch": torch.__version__}

    def write(self, d):
        import litdata
        litdata.optimize(fn=lit_sample, inputs=list(range(N)), output_dir=os.path.join(d, "lit"),
                         chunk_size=SHARD, num_workers=1, mode="overwrite")

    def run(self, a):
        import litdata
        # drop_last: its default is True at a world above 1 and False at 1,
        # and a state of the one is refused by the other (note()); with N
        # a multiple of every global batch here it drops nothing.
        ds = litdata.StreamingDataset(os.path.join(a.data, "lit"), shuffle=True, seed=SEED,
                                      drop_last=True)
        dl = litdata.StreamingDataLoader(ds, batch_size=B, num_workers=WORKERS,
                                         collate_fn=ids_dict)
        t = Trainer(a)
        if t.state:
            dl.load_state_dict(t.state)
        t.loop(dl, dl.state_dict, ids=lambda b: b["ids"])


    def note(self, sc, c):
        name, world, new_world = sc[:3]
        out = []
        if world != new_world:
            if c.get("repeated"):
                stride = new_world * B
                out.append(f"its elastic resume rounds the {c['before']} samples consumed "
                           f"down to a whole global batch of the new world ({new_world} x {B}: "
                           f"{c['before'] - c['before'] % stride}; _round_down_drop_first, "
                           "litdata/streaming/elastic.py) and reads the rest again")
            out.append("drop_last=True given: its default is True at world > 1 and False at "
                       "world 1, and load_state_dict() refuses a state of the other (ValueError: "
                       "The provided `drop_last` state doesn't match the current one)")
        return "; ".join(out)


def lit_sample(i):
    return {"data": sample(i)}


class FilesDataset:
    """A map-style dataset of one file per sample: item i is file i's bytes."""

    def __init__(self, d):
        self.paths = [os.path.join(d, n) for n in sorted(os.listdir(d))]

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        with open(self.paths[i], "rb") as f:
            return f.read()


def write_files(d):
    os.makedirs(d)
    for i in range(N):
        with open(os.path.join(d, f"{i:06d}.bin"), "wb") as f:
            f.write(sample(i))


class TorchData(Peer):
    """torchdata's StatefulDataLoader over a map-style dataset of files,
    shuffle=True (its RandomSampler, whose state it saves)."""
    name = "torchdata"
    how = ("each worker sends its state with each batch; StatefulDataLoader keeps the state "
           "of the batches handed over, not of those prefetched")
    elastic = ("torchdata's StatefulDataLoader documents no resume at another world size "
               "(its state is one rank's sampler and workers)")

    def versions(self):
        from importlib.metadata import version
        import torch
        return {"torchdata": version("torchdata"), "torch": torch.__version__}

    def write(self, d):
        write_files(os.path.join(d, "files"))

    def run(self, a):
        import torch
        from torchdata.stateful_dataloader import StatefulDataLoader
        ds = FilesDataset(os.path.join(a.data, "files"))
        dl = StatefulDataLoader(ds, batch_size=B, shuffle=True, num_workers=WORKERS,
                                collate_fn=ids_collate,
                                generator=torch.Generator().manual_seed(SEED))
        t = Trainer(a)
        if t.state:
            dl.load_state_dict(t.state)
        t.loop(dl, dl.state_dict)


class Dali(Peer):
    """DALI: a CPU-only pipeline (device_id=None) with checkpointing, its
    file reader over the files in an order shuffled once (random_shuffle's
    buffer would mix epochs), num_threads=2; DALI has no DataLoader
    workers. An epoch is the reader's epoch_size / batch_size runs."""
    name = "dali"
    how = ("checkpoint() after run() is the reader's place after the batches returned "
           "(prefetch_queue_depth 2 not counted); the step within the epoch is the "
           "trainer's. Every epoch has one order (the files shuffled once), so its epoch-1 "
           "row checks the position, not the epoch's order")
    elastic = ("DALI's checkpoint restores the same pipeline (\"will produce exactly the "
               "same outputs as the old one would\"); its docs describe no restore at another "
               "shard_id/num_shards")

    def versions(self):
        import nvidia.dali
        return {"nvidia-dali": nvidia.dali.__version__}

    def write(self, d):
        write_files(os.path.join(d, "files"))

    def run(self, a):
        import random
        from nvidia.dali import fn, pipeline_def
        root = os.path.join(a.data, "files")
        files = sorted(os.listdir(root))
        random.Random(SEED).shuffle(files)

        @pipeline_def(batch_size=B, num_threads=2, device_id=None, enable_checkpointing=True)
        def pipe():
            data, _ = fn.readers.file(file_root=root, files=files, name="Reader",
                                      shard_id=a.rank, num_shards=a.world)
            return data

        # The loader's state: DALI's checkpoint (the reader's place) and the
        # steps of the epoch taken, which says how many runs are left in it.
        t = Trainer(a)
        saved = t.state or {"dali": None, "steps": 0}
        p = pipe(checkpoint=saved["dali"]) if saved["dali"] else pipe()
        p.build()
        steps = p.epoch_size("Reader") // a.world // B
        taken = saved["steps"]
        for epoch in t.epochs():
            while taken < steps:
                (out,) = p.run()
                taken += 1
                t.step(epoch, ids_of(out.at(i).tobytes() for i in range(len(out))),
                       lambda: {"dali": p.checkpoint(), "steps": taken})
            taken = 0


PEER_CLASSES = {p.name: p for p in (Batchd, Mosaic, LitData, TorchData, Dali)}


# ---- the driver ----------------------------------------------------------------------------


def run_checked(argv, **kw):
    p = subprocess.run(argv, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {p.returncode}: {p.stderr.strip()[-2000:]}")
    return p


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env_for(rank, world, port, tmp):
    """The environment torchrun gives rank of world on one node, plus
    $GLOBAL_RANK, which litdata reads (Lightning sets it), and a TMPDIR of
    the peer's own: Mosaic leaves file locks there, even at a clean exit."""
    env = dict(os.environ)
    env.update(TMPDIR=tmp, RANK=str(rank), GLOBAL_RANK=str(rank), WORLD_SIZE=str(world),
               LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world), NODE_RANK="0",
               GROUP_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    return env


def end_group(pgid, grace=15):
    """Wait up to `grace` seconds for what is left of a trainer's process
    group (DataLoader workers notice their trainer's death within 5 s, and
    multiprocessing's resource tracker then removes the semaphores and
    shared memory the trainer left, Mosaic's too), then SIGKILL the rest."""
    deadline = time.monotonic() + grace
    try:
        while time.monotonic() < deadline:
            os.killpg(pgid, 0)
            time.sleep(0.1)
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def trainers(peer, d, tag, world, kill_epoch, kill, resume, socket, data=None):
    """The trainer processes of a world's ranks, run together as torchrun
    runs them (Mosaic's ranks meet in torch.distributed); each dies by
    SIGKILL after step `kill` of epoch `kill_epoch` (kill 0: it runs to the
    end of that epoch).
    @return per rank (checkpoint path, id log path). Each process group is
    ended afterwards: DataLoader workers of a trainer that died by SIGKILL
    notice only after a while."""
    port = free_port()
    tmp = os.path.join(d, "tmp")
    os.makedirs(tmp, exist_ok=True)
    procs = []
    for rank in range(world):
        ckpt = os.path.join(d, f"ckpt-{tag}-r{rank}.pkl")
        log = os.path.join(d, f"ids-{tag}-r{rank}.jsonl")
        errf = os.path.join(d, f"stderr-{tag}-r{rank}.txt")
        argv = [sys.executable, os.path.abspath(__file__), "--trainer", peer, "--build",
                ARGS.build, "--workdir", ARGS.workdir, "--data", data or os.path.join(d, "data"),
                "--rank", str(rank), "--world", str(world), "--kill-epoch", str(kill_epoch),
                "--kill", str(kill), "--ckpt", ckpt,
                "--log", log]
        if resume:
            argv += ["--resume", resume]
        if socket:
            argv += ["--socket", socket]
        with open(errf, "w") as err:
            p = subprocess.Popen(argv, env=env_for(rank, world, port, tmp), stdout=err,
                                 stderr=err, start_new_session=True)
        procs.append((p, ckpt, log, errf))
    deadline = time.monotonic() + ARGS.timeout
    failed = []
    for rank, (p, _, _, errf) in enumerate(procs):
        try:
            rc = p.wait(max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            rc = f"still running after {ARGS.timeout:g} s"
        want = -signal.SIGKILL if kill else 0
        if rc != want:
            with open(errf) as f:
                tail = f.read().strip().splitlines()[-1:] or ["(no output)"]
            failed.append(f"trainer {tag} rank {rank}/{world} exited {rc}, expected {want}: "
                          f"{tail[0]} (see {errf})")
    for p, *_ in procs:
        end_group(p.pid, 15 if p.poll() is not None else 0)   # a trainer past the timeout: now
        p.wait()
    if failed:
        raise RuntimeError("; ".join(failed))
    return [(ckpt, log) for _, ckpt, log, _ in procs]


def read_ids(log, epoch):
    """The ids a trainer's log says it consumed in epoch `epoch`."""
    out = []
    if os.path.exists(log):
        with open(log) as f:
            for line in f:
                step = json.loads(line)
                if step["epoch"] == epoch:
                    out += step["ids"]
    return out


def count(before, after):
    """Repeated, lost and more, from the ids consumed before the kill and after."""
    pre = collections.Counter(before)
    post = collections.Counter(after)
    seen = pre + post
    return {
        "samples": N,
        "consumed": len(before) + len(after),
        "before": len(before),
        "after": len(after),
        "repeated": sum(n for i, n in post.items() if i in pre),
        "lost": N - sum(1 for i in range(N) if seen[i]),
        # a sample twice on one side of the kill: not the resume's doing
        "twice_within": sum(n - 1 for c in (pre, post) for n in c.values() if n > 1),
    }


def scenario(peer, d, sc, socket):
    name, world, new_world, epoch, kill = sc
    tag = "".join(c for c in name if c.isalnum())
    first = trainers(peer.name, d, tag + "-a", world, epoch, kill, None, socket)
    # Rank 0's checkpoint: what a trainer saves and restarts from.
    second = trainers(peer.name, d, tag + "-b", new_world, epoch, 0, first[0][0], socket)
    return count([i for _, log in first for i in read_ids(log, epoch)],
                 [i for _, log in second for i in read_ids(log, epoch)])


class quiet:
    """stdout and stderr of this process and its children to a file (a
    writer's progress bars and advertising), restored on exit."""

    def __init__(self, path):
        self.path = path

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        self.saved = [os.dup(1), os.dup(2)]
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)

    def __exit__(self, *exc):
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, old in zip((1, 2), self.saved):
            os.dup2(old, fd)
            os.close(old)


def measure(peer, d):
    rows = []
    os.makedirs(d, exist_ok=True)
    data = os.path.join(d, "data")
    shutil.rmtree(data, ignore_errors=True)
    os.makedirs(data)
    daemon = None
    try:
        with quiet(os.path.join(d, "write.log")):
            peer.write(data)
        socket = None
        if peer.name == "batchd":
            daemon, socket = start_batchd(data)
        for sc in SCENARIOS:
            name, world, new_world = sc[:3]
            row = {"peer": peer.name, "scenario": name, "world": world,
                   "resumed_world": new_world, "epoch": sc[3], "kill_after_step": sc[4]}
            if world != new_world and peer.elastic:
                row.update(note=f"not run: {peer.elastic}")
                rows.append(row)
                continue
            try:
                row.update(scenario(peer, d, sc, socket))
                row["note"] = peer.note(sc, row)
            except Exception as e:
                row["note"] = f"failed: {e}"
                row["error"] = traceback.format_exc()
            rows.append(row)
    finally:
        if daemon:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(20)
    return rows


def measure_mix(peer, d):
    """The mixture scenarios of one peer (resume_mix): its data, the
    reference epoch at the killed world size, then each scenario's kill
    and resume. @return rows."""
    rows = []
    data = os.path.join(d, "data")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(data)
    daemon = socket = None
    name = "mix:" + peer.name
    try:
        with quiet(os.path.join(d, "write.log")):
            peer.write(data, ARGS.build, run_checked)
        if peer.name == "batchd":
            daemon, socket = start_batchd(data)
        refs = {}
        for sc in resume_mix.SCENARIOS:
            label, world, new_world, epoch, kill = sc
            row = {"peer": peer.name, "scenario": label, "world": world,
                   "resumed_world": new_world, "kill_after_step": kill}
            try:
                if world not in refs:
                    ref = trainers(name, d, f"ref-w{world}", world, epoch, 0, None, socket, data)
                    refs[world] = [i for _, log in ref for i in read_ids(log, epoch)]
                tag = "".join(c for c in label if c.isalnum())
                first = trainers(name, d, tag + "-a", world, epoch, kill, None, socket, data)
                second = trainers(name, d, tag + "-b", new_world, epoch, 0, first[0][0], socket,
                                  data)
                row["sources"] = resume_mix.count(
                    refs[world], [i for _, log in first for i in read_ids(log, epoch)],
                    [i for _, log in second for i in read_ids(log, epoch)])
            except Exception as e:
                # every rank's failure is in "error"; the note keeps the first
                row["note"] = f"failed: {str(e).split('; trainer ')[0]}"
                row["error"] = traceback.format_exc()
            rows.append(row)
    except Exception as e:
        rows.append({"peer": peer.name, "scenario": "mix", "note": f"failed: {e}",
                     "error": traceback.format_exc()})
    finally:
        if daemon:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(20)
    return rows


def mix_table(rows):
    cols = ["peer", "scenario"] + [f"{s} rep/lost" for s in resume_mix.SOURCES]
    cells = []
    for r in rows:
        src = r.get("sources")
        cells.append([r["peer"], r.get("scenario", "-")] +
                     [resume_mix.cell(src[s]) if src else "-" for s in resume_mix.SOURCES] +
                     [r.get("note", "")])
    w = [max(len(c), *(len(x[i]) for x in cells)) for i, c in enumerate(cols)]
    out = ["  ".join(c.ljust(w[i]) for i, c in enumerate(cols)) + "  note"]
    for x in cells:
        out.append("  ".join(v.ljust(w[i]) for i, v in enumerate(x[:-1])) + "  " + x[-1])
    return "\n".join(out)


def start_batchd(data):
    import batchclient
    sock = os.path.join(data, "sock")
    log = open(os.path.join(data, "batchd.log"), "ab")
    p = subprocess.Popen([os.path.join(ARGS.build, "daemon", "batchd"), "--no-config",
                          "--socket", sock, "--root", os.path.join(data, "root"),
                          "--memory", "256M", "--direct", "off"],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    deadline = time.monotonic() + 20
    while True:
        if p.poll() is not None:
            raise RuntimeError(f"batchd exited with {p.returncode}: see {log.name}")
        try:
            batchclient.status(sock)
            return p, sock
        except batchclient.ConnectError:
            if time.monotonic() > deadline:
                p.kill()
                raise RuntimeError(f"batchd never answered on {sock}: see {log.name}")
            time.sleep(0.02)


def table(rows):
    cols = ("peer", "scenario", "samples", "repeated", "lost", "note")
    cells = [[str(r.get(c, "-")) for c in cols] for r in rows]
    w = [max(len(c), *(len(x[i]) for x in cells)) for i, c in enumerate(cols[:-1])]
    out = ["  ".join(c.ljust(w[i]) for i, c in enumerate(cols[:-1])) + "  note"]
    for x in cells:
        out.append("  ".join(v.ljust(w[i]) for i, v in enumerate(x[:-1])) + "  " + x[-1])
    return "\n".join(out)


def each_peer(names, classes, measure_fn, subdir, what):
    """measure_fn(peer, its directory) for each peer of the comma-separated
    names that is installed. @return (rows, {peer: versions})."""
    rows, versions = [], {}
    for name in filter(None, names.split(",")):
        cls = classes.get(name)
        if cls is None:
            rows.append({"peer": name, "note": "not run: no such peer in this workload"})
            continue
        peer = cls()
        try:
            versions[name] = peer.versions()
        except Exception as e:
            rows.append({"peer": name, "note": f"not installed: {type(e).__name__}: {e}"})
            continue
        print(f"{what}{name}: {versions[name]}", file=sys.stderr)
        for r in measure_fn(peer, os.path.join(os.path.abspath(ARGS.workdir), subdir + name)):
            counts = (r.get("sources", "-") if "sources" in r or subdir else
                      f"{r.get('repeated', '-')} repeated, {r.get('lost', '-')} lost")
            print(f"  {r.get('scenario', '-')}: {counts} {r.get('note', '')}", file=sys.stderr)
            rows.append(r)
    return rows, versions


def setup_env():
    """PYTHONPATH and BATCHCLIENT_LIB for batchclient, from --build."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ARGS.build = os.path.abspath(ARGS.build)
    py = os.path.join(repo, "client", "python")
    if py not in sys.path:
        sys.path.insert(0, py)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        x for x in (py, os.environ.get("PYTHONPATH")) if x)
    os.environ.setdefault("BATCHCLIENT_LIB",
                          os.path.join(ARGS.build, "client", "libbatchclient.so.0"))


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build", help="batchd's build directory (default build)")
    ap.add_argument("--workdir", default="/tmp/batchd-peers-resume",
                    help="where the data, checkpoints and logs go")
    ap.add_argument("--json", help="write the rows here too")
    ap.add_argument("--peers", default=",".join(PEERS),
                    help=f"comma-separated, of {','.join(PEERS)}")
    ap.add_argument("--mix-peers", default=",".join(resume_mix.PEER_CLASSES),
                    help="the mixture case's peers, comma-separated, of "
                    f"{','.join(resume_mix.PEER_CLASSES)} (empty: none)")
    ap.add_argument("--timeout", type=float, default=300,
                    help="seconds a trainer process may take")
    # the trainer process
    ap.add_argument("--trainer", help=argparse.SUPPRESS)
    for opt in ("--data", "--ckpt", "--log", "--resume", "--socket"):
        ap.add_argument(opt, help=argparse.SUPPRESS)
    for opt in ("--rank", "--world", "--kill", "--kill-epoch"):
        ap.add_argument(opt, type=int, default=0, help=argparse.SUPPRESS)
    ARGS = ap.parse_args()
    setup_env()
    if ARGS.trainer:
        if ARGS.trainer.startswith("mix:"):
            resume_mix.PEER_CLASSES[ARGS.trainer[4:]]().run(ARGS, Trainer)
        else:
            PEER_CLASSES[ARGS.trainer]().run(ARGS)
        return 0
    rows, versions = each_peer(ARGS.peers, PEER_CLASSES, measure, "", "")
    mix_rows, mix_versions = each_peer(ARGS.mix_peers, resume_mix.PEER_CLASSES, measure_mix,
                                       "mix-", "mixture, ")
    if rows:
        print(table(rows))
    hows = {n: PEER_CLASSES[n].how for n in versions}
    print()
    for n, v in versions.items():
        print(f"{n} ({', '.join(f'{k} {x}' for k, x in v.items())}): {hows[n]}")
    if mix_rows:
        print(f"\nmixture: {'/'.join(resume_mix.SOURCES)} windows of {resume_mix.ROW} tokens, "
              f"weights {'/'.join(map(str, resume_mix.WEIGHTS))}, an epoch of "
              f"{resume_mix.EPOCH} windows, batch {resume_mix.B} a rank, "
              f"{resume_mix.WORKERS} workers; per source repeated/lost against the epoch "
              "run uninterrupted at the first world size (other: read, not in it)\n")
        print(mix_table(mix_rows))
        for n, v in mix_versions.items():
            print(f"{n} ({', '.join(f'{k} {x}' for k, x in v.items())}): "
                  f"{resume_mix.PEER_CLASSES[n].how}")
    if ARGS.json:
        with open(ARGS.json, "w") as f:
            json.dump({"workload": "resume", "samples": N, "batch_size": B,
                       "workers": WORKERS, "versions": versions, "how": hows, "rows": rows,
                       "mix": {"row": resume_mix.ROW, "windows": resume_mix.WINDOWS,
                               "weights": resume_mix.WEIGHTS, "epoch": resume_mix.EPOCH,
                               "versions": mix_versions, "rows": mix_rows}},
                      f, indent=1)
    # batchd's rows must be 0/0: anything else (a failed run too) is a bug in it
    bad = [r for r in rows if r["peer"] == "batchd" and "scenario" in r
           and (r.get("repeated") or r.get("lost") or "repeated" not in r)]
    for r in bad:
        print(f"batchd, {r.get('scenario', '')}: not an exact resume: {r.get('repeated')} "
              f"repeated, {r.get('lost')} lost {r.get('note', '')}", file=sys.stderr)
    for r in mix_rows:
        src = r.get("sources")
        if r["peer"] == "batchd" and (not src or any(
                c["repeated"] or c["lost"] or c["other"] for c in src.values())):
            bad.append(r)
            print(f"batchd, {r.get('scenario', '')}: not an exact resume: "
                  f"{src or ''} {r.get('note', '')}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
