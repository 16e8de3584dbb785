#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A small CNN trained on real PNG images, fed four ways, side by side.

Why: the question a trainer asks is not bytes per second but how long an
epoch takes and how much of it the GPU (here: the CPU) spends waiting for
data, with the decode a real image pipeline does. This script packs real
images (class folders, `batchd-pack create --labels dirname`) and runs the
same training loop (2 conv + 2 fc layers, SGD, the same initial weights
for every run) with:

  a. torch's DataLoader over the image files: a map-style Dataset that
     reads and decodes one file per sample (best of 0, 2 and 4 workers);
  b. batchclient.torch.BatchdDataset with num_workers=0, the decode in the
     collate hook, in the training process;
  c. BatchdDataset with num_workers=2, the same decode in the workers;
  d. BatchdDataset with decode= (docs/images.md): batchd decodes each PNG
     and resizes it (Resize(32) + CenterCrop(32)) on its own threads, and
     the trainer only normalizes the uint8 tensor.

Decoding in a to c is PIL's: each PNG to RGB, resized to 32x32, normalized. For each
loader it prints the epoch time (median of the epochs after one warm-up),
the data-wait fraction (time blocked getting the next batch over the epoch
time) and the last epoch's mean training loss.

    ./train_cnn.py                      # a batchd of its own, from build/
    ./train_cnn.py --short              # fewer epochs (tools/demo.sh)
    ./train_cnn.py --socket /tmp/batchd.sock --dataset images.bpk --images DIR

The images come from --source (default /usr/share): every PNG over 2 KiB,
its class the name of the directory holding it (icons' "devices",
"places", ...), classes with fewer than --min-per-class files dropped; the
files are copied into WORKDIR/images/<class>/.
Exit status: 0 trained; 1 failed; 2 usage, too few images or no build
tree; 77 when PyTorch, NumPy or PIL is not installed.
"""
import argparse
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
SIZE = 32
MEAN = (0.5, 0.5, 0.5)
STD = (0.25, 0.25, 0.25)


class Usage(Exception):
    """Bad input or environment: exit status 2 with this message."""


# ---- images ------------------------------------------------------------------------------------

def find_images(source, min_bytes, min_per_class, max_images):
    """{class: [paths]} of the PNGs below source, classes with fewer than
    min_per_class files dropped, at most max_images in all (spread over the
    classes in turn, so a cap keeps every class)."""
    by_class = {}
    for dirpath, _dirs, files in os.walk(source):
        for f in sorted(files):
            p = os.path.join(dirpath, f)
            if not f.endswith(".png") or os.path.islink(p):
                continue
            try:
                if os.path.getsize(p) <= min_bytes:
                    continue
            except OSError:
                continue
            by_class.setdefault(os.path.basename(dirpath), []).append(p)
    kept = {c: sorted(v) for c, v in sorted(by_class.items()) if len(v) >= min_per_class}
    if max_images is not None:
        out = {c: [] for c in kept}
        n = 0
        for k in range(max(map(len, kept.values()), default=0)):
            for c, v in kept.items():
                if k < len(v) and n < max_images:
                    out[c].append(v[k])
                    n += 1
        kept = out
    return kept


def make_image_tree(args, work):
    """Copy the images into work/images/<class>/ (regular files: the packer
    skips symlinks); the tree's path. Usage when there are too few."""
    classes = find_images(args.source, 2048, args.min_per_class, args.max_images)
    n = sum(map(len, classes.values()))
    if len(classes) < 2 or n < args.min_images:
        raise Usage(f"too few images: {n} PNG files over 2 KiB in {len(classes)} classes of at "
                    f"least {args.min_per_class} files below {args.source} (need {args.min_images} "
                    f"in 2 classes or more); pass --source DIR with more, or lower "
                    f"--min-per-class / --min-images")
    tree = os.path.join(work, "images")
    shutil.rmtree(tree, ignore_errors=True)
    for c, paths in classes.items():
        os.makedirs(os.path.join(tree, c))
        for p in paths:
            name = os.path.relpath(p, args.source).replace(os.sep, "_")
            shutil.copyfile(p, os.path.join(tree, c, name))
    return tree


def decode(buf):
    """PNG bytes to a normalized float32 array [3, SIZE, SIZE]."""
    import numpy as np
    from PIL import Image
    with Image.open(io.BytesIO(buf)) as im:
        im = im.convert("RGBA").convert("RGB").resize((SIZE, SIZE), Image.BILINEAR)
        a = np.asarray(im, dtype=np.float32) / 255.0
    a = (a - np.array(MEAN, np.float32)) / np.array(STD, np.float32)
    return a.transpose(2, 0, 1).copy()


def decode_batch(batch):
    """BatchdDataset's collate hook: the batch's PNGs decoded, (x, y) tensors."""
    import numpy as np
    import torch
    x = np.stack([decode(m) for m in batch["data"]])
    y = np.array(batch["label"], dtype=np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


class ImageFiles:
    """A map-style Dataset over a class-folder tree, as torchvision's
    ImageFolder: classes and files in bytewise order, one file read and
    decoded per sample."""

    def __init__(self, tree):
        self.classes = sorted(e.name for e in os.scandir(tree) if e.is_dir(follow_symlinks=False))
        self.items = [(os.path.join(tree, c, f), i) for i, c in enumerate(self.classes)
                      for f in sorted(os.listdir(os.path.join(tree, c)))]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        import torch
        path, label = self.items[i]
        with open(path, "rb") as f:
            return torch.from_numpy(decode(f.read())), label


# ---- training ----------------------------------------------------------------------------------

def make_model(classes, seed):
    import torch
    from torch import nn
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * (SIZE // 4) ** 2, 64), nn.ReLU(), nn.Linear(64, classes))


def run_epochs(dl, set_epoch, classes, args):
    """Train a fresh model (seeded) for args.epochs over dl; a dict of the
    median epoch time and data-wait fraction after the first (warm-up)
    epoch, and the last epoch's mean loss."""
    import torch
    from torch import nn
    model = make_model(classes, args.seed)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    times, waits = [], []
    loss_mean = float("nan")
    for epoch in range(args.epochs):
        set_epoch(epoch)
        loss_sum, seen, wait = 0.0, 0, 0.0
        t_epoch = time.perf_counter()
        it = iter(dl)
        while True:
            t0 = time.perf_counter()
            try:
                x, y = next(it)
            except StopIteration:
                break
            wait += time.perf_counter() - t0
            loss = loss_fn(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_sum += loss.item() * len(y)
            seen += len(y)
        dt = time.perf_counter() - t_epoch
        times.append(dt)
        waits.append(wait / dt)
        loss_mean = loss_sum / max(seen, 1)
    timed = slice(1, None) if args.epochs > 1 else slice(None)
    return {"epoch_s": statistics.median(times[timed]), "wait": statistics.median(waits[timed]),
            "loss": loss_mean, "samples": seen}


def run_files(tree, workers, args):
    import torch
    ds = ImageFiles(tree)
    g = torch.Generator()
    dl = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True, generator=g,
                                     num_workers=workers, persistent_workers=workers > 0)
    return run_epochs(dl, lambda e: g.manual_seed(args.seed + e), len(ds.classes), args)


def normalize_batch(batch):
    """d.'s collate hook: the daemon's uint8 [B, 3, SIZE, SIZE] normalized, (x, y) tensors."""
    import torch
    x = batch.torch("data").float().div_(255)
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    return (x - mean) / std, batch.torch("label").clone()


def run_batchd(dataset, socket, workers, args, decode=None):
    import torch
    from batchclient.torch import BatchdDataset
    collate = normalize_batch if decode else decode_batch
    with BatchdDataset(dataset, args.batch_size, shuffle="global", seed=args.seed,
                       socket=socket, fields=["data", "label"], collate=collate,
                       decode=decode) as ds:
        classes = len(ds.classes)
        dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers,
                                         persistent_workers=workers > 0)
        r = run_epochs(dl, ds.set_epoch, classes, args)
        del dl                  # the workers exit before the stream closes
    return r


def report(rows):
    print(f"{'loader':<44} {'workers':>7} {'epoch s':>8} {'data wait':>10} {'final loss':>10}")
    for name, workers, r in rows:
        print(f"{name:<44} {workers:>7} {r['epoch_s']:>8.3f} {100 * r['wait']:>9.1f}% "
              f"{r['loss']:>10.4f}")


def train(args, tree, dataset, socket):
    import batchclient
    files = {w: run_files(tree, w, args) for w in (0, 2, 4)}
    best = min(files, key=lambda w: files[w]["epoch_s"])
    n = files[best]["samples"]
    print(f"{n} images, {len(ImageFiles(tree).classes)} classes, batch {args.batch_size}, "
          f"{args.epochs} epochs (the first one a warm-up); DataLoader epoch s by workers: "
          + ", ".join(f"{w}: {files[w]['epoch_s']:.3f}" for w in files))
    rows = [("a. DataLoader, a file per sample (best)", best, files[best]),
            ("b. batchd, decode in collate", 0, run_batchd(dataset, socket, 0, args)),
            ("c. batchd, decode in DataLoader workers", 2, run_batchd(dataset, socket, 2, args)),
            ("d. batchd, decode in the daemon", 0, run_batchd(dataset, socket, 0, args, {
                "data": batchclient.Image(SIZE, crop="center", resize=SIZE)}))]
    report(rows)
    return 0


# ---- setup -------------------------------------------------------------------------------------

def own_daemon(args, work):
    """Pack the images and start a batchd on them; (tree, dataset, socket, Popen)."""
    batchd = os.path.join(args.build, "daemon", "batchd")
    pack_tool = os.path.join(args.build, "tools", "batchd-pack")
    for p in (batchd, pack_tool):
        if not os.path.exists(p):
            raise Usage(f"{p} is missing: build first (ninja -C {args.build}), pass --build DIR, "
                        f"or --socket of a running batchd")
    tree = make_image_tree(args, work)
    pack = os.path.join(work, "images.bpk")
    # Each image in one block, however large (a few PNGs here pass the 4 MiB
    # default frame): the daemon decodes an image from one block (row d).
    r = subprocess.run([pack_tool, "create", pack, tree, "--labels", "dirname",
                        "--frame-size", "256M"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"batchd-pack create failed: {r.stderr.strip()}")
    sock = os.path.join(work, "batchd.sock")
    log = open(os.path.join(work, "batchd.log"), "wb")
    p = subprocess.Popen([batchd, "--socket", sock, "--root", work], stdout=log, stderr=log,
                         stdin=subprocess.DEVNULL)
    log.close()
    wait_for(p, sock, log.name)
    return tree, "images.bpk", sock, p


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


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"),
                   help="meson build tree with batchd and batchd-pack (default: build/)")
    p.add_argument("--socket", help="a running batchd's socket instead of one of our own "
                   "(needs --dataset and --images)")
    p.add_argument("--dataset", help="with --socket: the pack of --images, as that batchd names it")
    p.add_argument("--images", help="with --socket: the class-folder tree the pack was made from")
    p.add_argument("--source", default="/usr/share", help="where to look for PNG files")
    p.add_argument("--min-per-class", type=int, default=8)
    p.add_argument("--min-images", type=int, default=64, help="fewer images is an error")
    p.add_argument("--max-images", type=int, help="use at most this many images")
    p.add_argument("--short", action="store_true", help="3 epochs instead of 6")
    p.add_argument("--epochs", type=int, help="epochs per run, the first a warm-up")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", help="where the images, pack and socket go (default: a "
                   "temporary directory, removed)")
    args = p.parse_args()
    if args.epochs is None:
        args.epochs = 3 if args.short else 6
    if args.epochs < 1 or args.batch_size < 1 or args.min_per_class < 1:
        p.error("--epochs, --batch-size and --min-per-class must be at least 1")
    if args.socket and not (args.dataset and args.images):
        p.error("--socket needs --dataset (the pack, as that batchd names it) and --images "
                "(the class-folder tree it was packed from)")
    return args


def modules_missing():
    import batchclient
    for mod in ("torch", "numpy", "PIL"):
        try:
            __import__(mod)
        except ImportError:
            return f"{mod} is not installed ({batchclient.install_hint(mod)})"
    return None


def run(args, work):
    if args.socket:
        if not os.path.isdir(args.images):
            raise Usage(f"--images {args.images}: not a directory")
        return train(args, args.images, args.dataset, args.socket)
    tree, dataset, sock, daemon = own_daemon(args, work)
    try:
        return train(args, tree, dataset, sock)
    finally:
        daemon.terminate()
        daemon.wait()


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
        print(f"train_cnn: {why}", file=sys.stderr)
        return 77
    work = os.path.abspath(args.workdir or tempfile.mkdtemp(prefix="train-cnn-", dir="/tmp"))
    os.makedirs(work, exist_ok=True)
    try:
        return run(args, work)
    except Usage as e:
        print(f"train_cnn: {e}", file=sys.stderr)
        return 2
    except Exception as e:   # batchclient errors carry the daemon's message
        if type(e).__module__.startswith("batchclient") or isinstance(e, RuntimeError):
            print(f"train_cnn: {e}", file=sys.stderr)
            return 1
        raise
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
