#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A small, real PyTorch training loop fed by batchd (CPU is fine).

The data is MNIST-shaped: fixed 785-byte records, a label byte followed by
28x28 pixels, packed with `batchd-pack create --records 785`. The loop
prints, per epoch, the mean loss, the accuracy, and how long the trainer
waited for data (the number batchd exists to drive to zero).

    # 1. 20000 synthetic digits (10 learnable classes), as a records file
    ./train_mnist_like.py --make-records /srv/data/digits.bin --samples 20000
    # 2. pack them (one record per block, with a trained dictionary)
    batchd-pack create /srv/data/digits.bpk --records 785 /srv/data/digits.bin
    # 3. serve them
    batchd --root /srv/data --socket /tmp/batchd.sock &
    # 4. train; --checkpoint resumes model, optimizer and data position
    ./train_mnist_like.py digits.bpk --socket /tmp/batchd.sock --epochs 3

Under torchrun each rank reads its own share: rank and world come from
$RANK and $WORLD_SIZE without any code here.
Exit status: 0 trained; 1 failed; 77 when PyTorch is not installed.
"""
import argparse
import os
import sys
import time

RECORD = 1 + 28 * 28


def make_records(path, n, seed):
    """n synthetic digits: a per-class template of strokes, shifted, dimmed and noised."""
    import numpy as np
    rng = np.random.default_rng(seed)
    templates = np.zeros((10, 28, 28), np.float32)
    for c in range(10):
        t = np.random.default_rng(1000 + c)
        for _ in range(4):                      # four strokes per class
            r0, c0 = t.integers(4, 24, 2)
            dr, dc = t.integers(-2, 3, 2)
            for k in range(10):
                r, cc = np.clip([r0 + k * dr // 2, c0 + k * dc // 2], 1, 26)
                templates[c, r - 1:r + 2, cc - 1:cc + 2] = 1.0
    shifts = [(a, b) for a in range(-3, 4) for b in range(-3, 4)]
    shifted = np.stack([np.stack([np.roll(templates[c], s, axis=(0, 1)) for s in shifts])
                        for c in range(10)])                       # [10, 49, 28, 28]
    labels = rng.integers(0, 10, n)
    img = shifted[labels, rng.integers(0, len(shifts), n)]
    img = img * rng.uniform(0.4, 1.0, (n, 1, 1)) + rng.normal(0, 0.5, img.shape)
    out = np.empty((n, RECORD), np.uint8)
    out[:, 0] = labels
    out[:, 1:] = (np.clip(img, 0, 1) * 255).astype(np.uint8).reshape(n, -1)
    out.tofile(path)
    print(f"wrote {n} records of {RECORD} bytes to {path}")


def train(args):
    import batchclient
    try:
        import torch
        from torch import nn
    except ImportError:
        print(f"train_mnist_like: PyTorch is not installed ({batchclient.install_hint('torch')})",
              file=sys.stderr)
        return 77

    torch.manual_seed(args.seed)
    loader = batchclient.Loader(args.dataset, args.batch_size, shuffle="global", seed=args.seed,
                                socket=args.socket)
    if loader.max_sample != RECORD:
        print(f"train_mnist_like: {args.dataset} has samples of up to {loader.max_sample} "
              f"bytes, not {RECORD}-byte records", file=sys.stderr)
        return 1
    model = nn.Sequential(nn.Linear(28 * 28, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    first = 0
    if args.checkpoint and os.path.exists(args.checkpoint):
        ck = torch.load(args.checkpoint)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        loader.load_state_dict(ck["loader"])
        first = loader.epoch
        print(f"resumed from {args.checkpoint} at epoch {first}, batch {loader.position[1]}")

    print(f"{args.dataset}: {loader.samples} samples, {len(loader)} batches of "
          f"{args.batch_size} per epoch, rank {loader.rank} of {loader.world}")
    for epoch in range(first, args.epochs):
        loader.set_epoch(epoch)
        total = correct = seen = 0
        loss_sum = 0.0
        wait = 0.0
        t_epoch = time.perf_counter()
        it = iter(loader)
        while True:
            t0 = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                break
            wait += time.perf_counter() - t0
            rec = batch.torch(torch.uint8, (RECORD,))      # a view of batchd's memory
            y = rec[:, 0].long()                           # new tensors: the view is read-only
            x = rec[:, 1:].float() / 255.0
            out = model(x)
            loss = loss_fn(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            n = len(batch)
            loss_sum += loss.item() * n
            correct += (out.argmax(1) == y).sum().item()
            seen += n
            total += 1
        dt = time.perf_counter() - t_epoch
        if seen == 0:
            continue
        print(f"epoch {epoch}: loss {loss_sum / seen:.4f}  accuracy {correct / seen:.3f}  "
              f"batches {total}  time {dt:.2f} s  waiting for data {wait:.3f} s "
              f"({100 * wait / dt:.1f}%)  {seen / dt:.0f} samples/s", flush=True)
        if args.checkpoint:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                        "loader": loader.state_dict()}, args.checkpoint)
    loader.close()
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset", nargs="?", help="pack of 785-byte records, as batchd names it")
    p.add_argument("--socket", help="batchd's socket (default: $BATCHD_SOCKET, then the default)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint", help="save after each epoch here; resume from it if present")
    p.add_argument("--make-records", metavar="FILE", help="write synthetic records and exit")
    p.add_argument("--samples", type=int, default=20000, help="records for --make-records")
    args = p.parse_args()
    if args.make_records:
        make_records(args.make_records, args.samples, args.seed)
        return 0
    if not args.dataset:
        p.error("a dataset is needed (or --make-records)")
    try:
        return train(args)
    except Exception as e:   # batchclient errors carry the daemon's message
        if type(e).__module__.startswith("batchclient"):
            print(f"train_mnist_like: {e}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
