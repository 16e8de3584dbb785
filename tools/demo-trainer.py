#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A trainer that computes, fed by batchd and by torch's DataLoader over the
same files, in turns: how much of each step waits for data.

Why: a loader that only reads shows its wait as all of its time, which says
nothing about training. What a user wants to know is how much of a real
step (forward, backward, optimizer) is lost waiting for the next batch, and
whether batchd beats what they run today on their own files. So both
loaders here feed the same model the same samples, turned into the same
tensors, and the model costs the same FLOPs per sample whoever feeds it:

  - batchd: batchclient.Loader over a pack of the files (one sample per
    file), the features taken from the batch's zero-copy views in the
    collate hook, in the training process (num_workers 0, the fast path);
  - DataLoader: a map-style Dataset that opens and reads one file per
    sample, with num_workers 0, 2 and 4 (all measured, the best reported).

A sample's features are its first --features bytes (zero-padded, scaled to
[-0.5, 0.5)), its label the bit length of its size (which power of two it
falls under): both loaders compute them with the same function. The model
is an MLP (features -> hidden -> hidden -> 32 classes, SGD) run on
--threads CPU threads, a fixed cost per sample. The runs alternate, one
epoch each: batchd, DataLoader(0), DataLoader(2), DataLoader(4), then again;
a few warm-up steps of each loader first (not counted) start the workers,
open the stream and allocate the model's buffers. Every run's epoch must deliver the same samples and bytes
(checked: a mismatch fails the run).

Per loader it prints the steps taken (= batches delivered), the mean step
time (epoch wall time over steps), the time per step spent in next(), the
training thread's CPU time per step (the model's step and whatever the
loader does in that thread: on a busy machine step times vary with the
load while this stays put) and the waiting fraction (time in next() over
the epoch), then a verdict line.

    ./demo-trainer.py --files DIR                 # packs DIR, runs a batchd of its own
    ./demo-trainer.py --socket S --dataset NAME --files DIR   # a running batchd serving
                                                              # NAME, a pack of DIR
    ./demo-trainer.py --files DIR --short         # 2 measured rounds (tools/demo.sh)

Exit status: 0 done; 1 failed (a loader broke, the loaders disagreed);
2 usage or no build tree; 77 when PyTorch or NumPy is not installed.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLASSES = 32


class Usage(Exception):
    """Bad input or environment: exit status 2 with this message."""


# ---- the samples, the same way for both loaders -------------------------------------------------

def features(buf, n_features):
    """(float32 array [n_features], label) of one sample's bytes."""
    import numpy as np
    x = np.zeros(n_features, np.float32)
    n = min(len(buf), n_features)
    x[:n] = np.frombuffer(buf, np.uint8, n)
    x *= 1.0 / 256
    x -= 0.5
    return x, min(len(buf).bit_length(), CLASSES - 1)


class Files:
    """torch's usual map-style Dataset: one file opened and read per sample,
    (features, label, size) out, the tensors DataLoader's collate stacks."""

    def __init__(self, paths, n_features):
        self.paths = paths
        self.n_features = n_features

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        import torch
        with open(self.paths[i], "rb") as f:
            buf = f.read()
        x, y = features(buf, self.n_features)
        return torch.from_numpy(x), y, len(buf)


def collate_batchd(n_features):
    """The Loader's collate hook: a batch's samples, read in place, to (x, y, sizes)."""
    import numpy as np
    import torch

    def collate(batch):
        views = batch.samples
        x = np.empty((len(views), n_features), np.float32)
        y = np.empty(len(views), np.int64)
        for i, v in enumerate(views):
            x[i], y[i] = features(v, n_features)
        return torch.from_numpy(x), torch.from_numpy(y), torch.tensor(batch.sizes)
    return collate


def file_list(loader, files):
    """The files of the pack, in sample-id order: its keys (relative paths)
    under files, each checked to have the size of its sample."""
    import batchclient
    paths = []
    with batchclient.Loader(loader["dataset"], 256, shuffle="none", socket=loader["socket"],
                            keys=True) as L:
        for batch in L:
            for key, size in zip(batch.keys, batch.sizes):
                p = os.path.join(files, key)
                try:
                    on_disk = os.path.getsize(p)
                except OSError as e:
                    raise Usage(f"--files {files}: sample '{key}' of {loader['dataset']} is not "
                                f"there ({e.strerror}): pass the directory the pack was made from")
                if on_disk != size:
                    raise Usage(f"--files {files}: '{key}' has {on_disk} bytes, its sample in "
                                f"{loader['dataset']} {size}: the files changed since the pack "
                                f"was made; pack them again")
                paths.append(p)
    if not paths:
        raise Usage(f"{loader['dataset']} has no samples")
    return paths


# ---- the trainer ---------------------------------------------------------------------------------

class Trainer:
    """One model per loader, the same initial weights for each."""

    def __init__(self, args):
        import torch
        from torch import nn
        torch.manual_seed(args.seed)
        h = args.hidden
        self.model = nn.Sequential(nn.Linear(args.features, h), nn.ReLU(), nn.Linear(h, h),
                                   nn.ReLU(), nn.Linear(h, CLASSES))
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.loss = nn.CrossEntropyLoss()

    def step(self, x, y):
        loss = self.loss(self.model(x), y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.item()

    def epoch(self, iterable, limit=None):
        """Train one epoch, or its first limit steps; {steps, samples, bytes,
        labels, seconds, wait, cpu} (cpu: this thread's CPU seconds)."""
        steps = samples = nbytes = labels = 0
        wait = 0.0
        cpu = time.thread_time()
        t_epoch = time.perf_counter()
        it = iter(iterable)
        while steps != limit:
            t0 = time.perf_counter()
            try:
                x, y, sizes = next(it)
            except StopIteration:
                wait += time.perf_counter() - t0
                break
            wait += time.perf_counter() - t0
            self.step(x, y)
            steps += 1
            samples += len(y)
            nbytes += int(sizes.sum())
            labels += int(y.sum())
        return {"steps": steps, "samples": samples, "bytes": nbytes, "labels": labels,
                "seconds": time.perf_counter() - t_epoch, "wait": wait,
                "cpu": time.thread_time() - cpu}


class Run:
    """A loader, its trainer and what its measured epochs added up to."""

    def __init__(self, name, workers, iterable, set_epoch, batches, args):
        self.name, self.workers = name, workers
        self.iterable, self.set_epoch, self.batches = iterable, set_epoch, batches
        self.trainer = Trainer(args)
        self.epochs = []

    def totals(self):
        steps = sum(e["steps"] for e in self.epochs)
        secs = sum(e["seconds"] for e in self.epochs)
        wait = sum(e["wait"] for e in self.epochs)
        cpu = sum(e["cpu"] for e in self.epochs)
        return {"loader": self.name, "workers": self.workers, "epochs": len(self.epochs),
                "batches": self.batches * len(self.epochs), "steps": steps,
                "samples": sum(e["samples"] for e in self.epochs),
                "step_ms": 1e3 * secs / steps, "wait_ms": 1e3 * wait / steps,
                "cpu_ms": 1e3 * cpu / steps,
                "waiting": wait / secs}


def make_runs(args, loader, paths):
    import torch
    import batchclient
    L = batchclient.Loader(loader["dataset"], args.batch_size, shuffle="global", seed=args.seed,
                           socket=loader["socket"], collate=collate_batchd(args.features))
    runs = [Run("batchd Loader", 0, L, L.set_epoch, len(L), args)]
    ds = Files(paths, args.features)
    for w in args.workers:
        g = torch.Generator()
        dl = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True,
                                         generator=g, num_workers=w, persistent_workers=w > 0)
        runs.append(Run("DataLoader", w, dl, lambda e, g=g: g.manual_seed(args.seed + e),
                        len(dl), args))
    return runs


def check_same(first, e, run, n):
    """Every epoch delivers the pack's n samples, the same bytes and labels."""
    if e["samples"] != n:
        raise RuntimeError(f"{run.name} ({run.workers} workers) delivered {e['samples']} samples "
                           f"in an epoch, not the {n} of the pack")
    if (e["bytes"], e["labels"]) != (first["bytes"], first["labels"]):
        raise RuntimeError(f"{run.name} ({run.workers} workers) delivered {e['bytes']} bytes "
                           f"(label sum {e['labels']}) in an epoch, the first loader "
                           f"{first['bytes']} ({first['labels']}): not the same samples")


def train(args, loader):
    import torch
    torch.set_num_threads(args.threads)
    paths = file_list(loader, args.files)
    runs = make_runs(args, loader, paths)
    first = None
    try:
        # The warm-up: workers started, the stream opened, the model's buffers allocated.
        for run in runs:
            run.set_epoch(0)
            run.trainer.epoch(run.iterable, args.warmup)
        for r in range(1, args.rounds + 1):
            for run in runs:
                run.set_epoch(r)
                e = run.trainer.epoch(run.iterable)
                first = first or e
                check_same(first, e, run, len(paths))
                run.epochs.append(e)
    finally:
        runs[0].iterable.close()
    return len(paths), first["bytes"], [run.totals() for run in runs]


# ---- the report ------------------------------------------------------------------------------

def report(args, n, nbytes, rows):
    flops = 6 * (args.features * args.hidden + args.hidden * args.hidden + args.hidden * CLASSES)
    print(f"{n} files, {nbytes / 1e6:.1f} MB an epoch; batch {args.batch_size}; MLP "
          f"{args.features}-{args.hidden}-{args.hidden}-{CLASSES} on {args.threads} CPU "
          f"thread{'s' if args.threads != 1 else ''} ({flops / 1e6:.3g} MFLOP a sample, forward "
          f"and backward); {args.rounds} round{'s' if args.rounds != 1 else ''} of one epoch "
          f"each, alternating, after {args.warmup} warm-up steps each; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'loader':<16} {'workers':>7} {'steps':>6} {'batches':>7} {'step ms':>8} "
          f"{'wait ms':>8} {'cpu ms':>7} {'waiting':>8}")
    for r in rows:
        print(f"{r['loader']:<16} {r['workers']:>7} {r['steps']:>6} {r['batches']:>7} "
              f"{r['step_ms']:>8.2f} {r['wait_ms']:>8.2f} {r['cpu_ms']:>7.2f} {r['waiting']:>8.4f}")
    b = rows[0]
    best = min(rows[1:], key=lambda r: r["step_ms"])
    tried = "/".join(str(r["workers"]) for r in rows[1:])
    print(f"verdict: batchd: {100 * b['waiting']:.1f}% of step time waiting, {b['step_ms']:.1f} ms "
          f"a step; DataLoader({best['workers']} worker{'s' if best['workers'] != 1 else ''}, "
          f"the best of {tried}): {100 * best['waiting']:.1f}%, {best['step_ms']:.1f} ms a step "
          f"({best['step_ms'] / b['step_ms']:.2f}x batchd's)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"files": n, "bytes": nbytes, "batch_size": args.batch_size,
                       "rounds": args.rounds, "rows": rows}, f, indent=1)


# ---- setup -------------------------------------------------------------------------------------

def own_daemon(args, work):
    """Pack --files and start a batchd on it; ({dataset, socket}, Popen)."""
    batchd = os.path.join(args.build, "daemon", "batchd")
    pack_tool = os.path.join(args.build, "tools", "batchd-pack")
    for p in (batchd, pack_tool):
        if not os.path.exists(p):
            raise Usage(f"{p} is missing: build first (ninja -C {args.build}), pass --build DIR, "
                        f"or --socket of a running batchd")
    r = subprocess.run([pack_tool, "create", os.path.join(work, "files.bpk"), args.files],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise Usage(f"batchd-pack create of --files {args.files} failed: {r.stderr.strip()}")
    sock = os.path.join(work, "batchd.sock")
    logname = os.path.join(work, "batchd.log")
    with open(logname, "wb") as log:
        p = subprocess.Popen([batchd, "--socket", sock, "--root", work], stdout=log, stderr=log,
                             stdin=subprocess.DEVNULL)
    wait_for(p, sock, logname)
    return {"dataset": "files.bpk", "socket": sock}, p


def wait_for(p, sock, logname):
    import batchclient
    for _ in range(500):
        if p.poll() is not None:
            raise RuntimeError(f"batchd exited with {p.returncode}; see {logname}")
        try:
            batchclient.status(sock)
            return
        except batchclient.ConnectError:
            time.sleep(0.01)
    p.kill()
    raise RuntimeError(f"batchd did not answer on {sock} within 5 s; see {logname}")


def workers_list(s):
    try:
        v = [int(w) for w in s.split(",")]
    except ValueError:
        v = []
    if not v or any(w < 0 or w > 64 for w in v):
        raise argparse.ArgumentTypeError(f"'{s}' is not a comma-separated list of worker counts "
                                         "(0..64), e.g. 0,2,4")
    return v


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", required=True, help="the directory of files both loaders read")
    p.add_argument("--socket", help="a running batchd's socket (needs --dataset)")
    p.add_argument("--dataset", help="with --socket: the pack of --files, as that batchd names it")
    p.add_argument("--build", default=os.path.join(ROOT, "build"),
                   help="meson build tree with batchd, batchd-pack, libbatchclient (default: build/)")
    p.add_argument("--short", action="store_true", help="2 measured rounds instead of 5")
    p.add_argument("--rounds", type=int, help="measured rounds (one epoch per loader each)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--features", type=int, default=1024, help="bytes of a sample the model reads")
    p.add_argument("--hidden", type=int, default=128, help="width of the MLP's hidden layers")
    p.add_argument("--threads", type=int, default=1, help="CPU threads of the model's step")
    p.add_argument("--workers", type=workers_list, default=[0, 2, 4],
                   help="DataLoader num_workers to measure (default 0,2,4)")
    p.add_argument("--warmup", type=int, default=4,
                   help="steps of each loader before the measured rounds (default 4)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="FILE", help="also write the rows to FILE as JSON")
    args = p.parse_args()
    if args.rounds is None:
        args.rounds = 2 if args.short else 5
    for name in ("rounds", "batch_size", "features", "hidden", "threads", "warmup"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.socket and not args.dataset:
        p.error("--socket needs --dataset (the pack of --files, as that batchd names it)")
    if not os.path.isdir(args.files):
        p.error(f"--files {args.files}: not a directory")
    return args


def modules_missing():
    import batchclient
    for mod in ("torch", "numpy"):
        try:
            __import__(mod)
        except ImportError:
            return f"{mod} is not installed ({batchclient.install_hint(mod)})"
    return None


def run(args):
    if args.socket:
        return train(args, {"dataset": args.dataset, "socket": args.socket})
    work = tempfile.mkdtemp(prefix="demo-trainer-", dir="/tmp")
    daemon = None
    try:
        loader, daemon = own_daemon(args, work)
        return train(args, loader)
    finally:
        if daemon:
            daemon.terminate()
            daemon.wait()
        shutil.rmtree(work, ignore_errors=True)


def main():
    args = parse_args()
    # DataLoader warns when workers outnumber the cores; the comparison runs 4 on purpose.
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    lib = os.path.join(args.build, "client", "libbatchclient.so.0")
    if os.path.exists(lib):
        os.environ.setdefault("BATCHCLIENT_LIB", lib)
    if os.path.isdir(os.path.join(ROOT, "client", "python", "batchclient")):
        sys.path.insert(0, os.path.join(ROOT, "client", "python"))
    why = modules_missing()
    if why:
        print(f"demo-trainer: {why}", file=sys.stderr)
        return 77
    try:
        report(args, *run(args))
        return 0
    except Usage as e:
        print(f"demo-trainer: {e}", file=sys.stderr)
        return 2
    except Exception as e:   # batchclient errors carry the daemon's message
        if type(e).__module__.startswith("batchclient") or isinstance(e, RuntimeError):
            print(f"demo-trainer: {e}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
