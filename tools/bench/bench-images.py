#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""bench-images: images/s of a vision trainer's input pipeline, the loaders
people use against batchd's, on one ImageFolder of real photographs.

Every arm delivers what a ResNet's training loop takes: batches of --batch-size
(64) images, each a JPEG decoded, cut with a random-resized crop (scale
0.08-1, aspect 3/4-4/3) to --size (224) square, flipped half the time, as one
uint8 [B, 3, 224, 224] tensor (CHW, as PILToTensor gives) and int64 labels,
in a shuffled epoch. The arms, each at its best settings:

  torchvision  torchvision.datasets.ImageFolder over the files, transforms
               RandomResizedCrop(224), RandomHorizontalFlip(), PILToTensor(),
               DataLoader(batch_size=64, shuffle=True, persistent_workers),
               num_workers swept (--workers, default 0,1,2,3)
  batchd       batchclient.Loader over the pack, the decode, crop and flip
               in the daemon (batchclient.Image, docs/images.md)
  batchd-pil   what batchd's users do today: BatchdDataset delivers each
               sample's bytes and its label, and its collate hook decodes
               with PIL and applies the same three transforms (as
               client/python/examples/train_cnn.py does);
               torch.utils.data.DataLoader(batch_size=None), num_workers
               swept as torchvision's
  dali         NVIDIA DALI's CPU pipeline (device_id=None, no GPU needed):
               fn.readers.file(file_root=tree, random_shuffle), then either
               fn.decoders.image_random_crop + fn.resize ("fused": decodes
               only the crop's region, DALI's own ResNet recipe) or
               fn.decoders.image + fn.random_resized_crop ("plain"), then
               fn.crop_mirror_normalize(dtype=UINT8, output_layout=CHW,
               mirror=coin flip): the flip and the CHW layout in one pass
               (fn.flip + fn.transpose do the same in two); num_threads
               swept (--dali-threads, default 1,2) with both decoders

Every measurement is a fresh process (bench-images.py --child) that opens
its arm, runs one epoch untimed (workers start, the page cache and the
daemon's cache fill) and then --epochs timed ones, each checked: every
image once (the labels of the epoch count each class's images exactly),
every batch of the shape and types above, every byte of it read. Each arm
first runs once with every point of its sweep; its best point then runs in
--pairs alternating pairs with the candidate (--candidate, default batchd),
candidate first, A B A B, so that
both sides of a pair see the same machine. The table gives each arm's
median images/s with its min-max and the median of the per-pair ratios
candidate / arm with their spread; a wide spread means a busy machine,
which the load column (1-minute load average at the start of its runs)
shows.

The data: tools/bench/make-imagefolder.py's tree (--n 3000 JPEGs in
--classes 10 folders, cut from Debian's wallpaper photographs; it says how)
under WORKDIR/imagefolder, and for the batchd arms its pack,
`batchd-pack create WORKDIR/images.bpk WORKDIR/imagefolder --labels
dirname` (the defaults: one sample per block, for global shuffling), served
by a batchd started here with its defaults (--no-config, --socket, --root
WORKDIR). --workdir keeps both for later runs (remade when the settings
change); without it they go to a temporary directory, removed.

    /usr/bin/python3 tools/bench/bench-images.py --workdir /var/tmp/bench-images
    /usr/bin/python3 tools/bench/bench-images.py --arms torchvision,dali --pairs 3

The torchvision and batchd arms run on Debian's python3 with python3-torch
(1.13) and python3-torchvision (0.14, the version Debian 12 packages with
it; installed with apt-get when missing and run as root, else named), so
that no 2.x torch from PyPI (CUDA-bundled: GBs) is needed for them. The DALI
arm runs in a venv of its own (tools/bench/requirements-dali.txt,
nvidia-dali-cuda130 alone: ~720 MB, made once by tools/deps.sh's
batchd_venv); where it cannot be made (no PyPI) the arm is listed as not
run, with why. Uses the build tree's batchd, batchd-pack and libbatchclient
(--build, default build/). Exit status: 0 ok, 1 failure, 2 usage or a
missing dependency.
"""
import argparse
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEBS = {"numpy": "python3-numpy", "PIL": "python3-pil", "torch": "python3-torch",
        "torchvision": "python3-torchvision"}
DALI_VENV = "dali-cpu"
DALI_REQUIREMENTS = os.path.join(HERE, "requirements-dali.txt")
PACK_NAME = "images.bpk"
med = statistics.median


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---- the arms -----------------------------------------------------------------------------------
# ARMS: name -> function(args) returning the images/s of one timed epoch (after
# its warm-up), run in a child process of its own. args (an argparse.Namespace
# made from the child's spec): tree, pack, socket, batch_size, size, seed,
# epochs, n, class_counts, and settings (the sweep point: {"workers": 2} ...).
# An arm that cannot run here raises NotImplementedError (listed as not run).
# Each function carries its title, the sweep points it tries (points(args) of
# the driver's arguments), the interpreter it needs ("debian" or "dali") and
# whether it needs batchd (a daemon and the pack).

ARMS = {}


def arm(name, title, points, python="debian", batchd=False):
    def register(fn):
        fn.title, fn.points, fn.python, fn.batchd = title, points, python, batchd
        ARMS[name] = fn
        return fn
    return register


def describe(settings):
    return ", ".join(f"{k}={v}" for k, v in settings.items()) or "defaults"


def rrc_transform(size):
    """torchvision's training transforms, as an ImageFolder user writes them."""
    from torchvision import transforms as T
    return T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.PILToTensor()])


def _loader_kw(w):
    """DataLoader arguments of every DataLoader arm: persistent workers (none
    respawned for the timed epoch), pin_memory off (no GPU here)."""
    return {"num_workers": w, "persistent_workers": w > 0, "pin_memory": False}


@arm("torchvision", "torchvision ImageFolder", lambda a: [{"workers": w} for w in a.workers])
def run_torchvision(args):
    import torch
    from torchvision.datasets import ImageFolder
    ds = ImageFolder(args.tree, transform=rrc_transform(args.size))
    g = torch.Generator()
    g.manual_seed(args.seed)
    dl = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True, generator=g,
                                     **_loader_kw(args.settings["workers"]))
    return timed(args, lambda: iter(dl))


@arm("batchd", "batchd, decode in the daemon", lambda a: [{}], batchd=True)
def run_batchd(args):
    # batchd reads, decodes, crops and flips on its decode threads; the client
    # takes the batch as a [B, 3, size, size] uint8 view and the labels.
    import batchclient
    ld = batchclient.Loader(args.pack, args.batch_size, shuffle="global", seed=args.seed,
                            socket=args.socket, fields=["data", "label"],
                            decode={"data": batchclient.Image(size=args.size,
                                                              crop="random-resized", flip=0.5)})

    def epoch():
        for b in ld:
            # The decoded field as [B, 3, size, size] uint8 (a view, no copy);
            # consume() checks the shape and reads every byte.
            yield b.torch("data"), b["label"]
    try:
        return timed(args, epoch)
    finally:
        ld.close()


class PilCollate:
    """BatchdDataset's collate hook of the batchd-pil arm: each sample's
    JPEG bytes decoded by PIL, the training transforms applied, stacked.
    A class (not a closure) so that DataLoader's workers can take it."""

    def __init__(self, size):
        self.size = size
        self.tf = None

    def __call__(self, batch):
        import io
        import numpy as np
        import torch
        from PIL import Image
        if self.tf is None:
            self.tf = rrc_transform(self.size)
        xs = []
        for view in batch["data"]:
            with Image.open(io.BytesIO(view)) as im:
                xs.append(self.tf(im.convert("RGB")))
        return torch.stack(xs), torch.from_numpy(np.array(batch["label"], dtype=np.int64))


@arm("batchd-pil", "batchd bytes, PIL in collate", lambda a: [{"workers": w} for w in a.workers],
     batchd=True)
def run_batchd_pil(args):
    import torch
    from batchclient.torch import BatchdDataset
    ds = BatchdDataset(args.pack, args.batch_size, shuffle="global", seed=args.seed,
                       socket=args.socket, fields=["data", "label"],
                       collate=PilCollate(args.size))
    dl = torch.utils.data.DataLoader(ds, batch_size=None, **_loader_kw(args.settings["workers"]))
    try:
        return timed(args, lambda: iter(dl))
    finally:
        dl = None                   # the workers exit before the dataset's streams close
        ds.close()


@arm("dali", "DALI (CPU)", lambda a: [{"threads": t, "decoder": d} for t in a.dali_threads
                                      for d in ("fused", "plain")], python="dali")
def run_dali(args):
    import numpy as np
    from nvidia.dali import fn, pipeline_def, types
    s, B, n = args.size, args.batch_size, args.n

    @pipeline_def(batch_size=B, num_threads=args.settings["threads"], device_id=None,
                  seed=args.seed + 1, prefetch_queue_depth=2)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=args.tree, random_shuffle=True,
                                        pad_last_batch=True, name="reader")
        if args.settings["decoder"] == "fused":
            images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                                   random_aspect_ratio=[3 / 4, 4 / 3],
                                                   random_area=[0.08, 1.0], num_attempts=10)
            images = fn.resize(images, resize_x=s, resize_y=s)
        else:
            images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
            images = fn.random_resized_crop(images, size=[s, s])
        images = fn.crop_mirror_normalize(images, dtype=types.UINT8, output_layout="CHW",
                                          mirror=fn.random.coin_flip())
        return images, labels

    p = pipe()
    p.build()
    if p.epoch_size("reader") != n:
        raise RuntimeError(f"DALI's reader sees {p.epoch_size('reader')} images, expected {n}")
    batches = math.ceil(n / B)

    def epoch():
        # pad_last_batch: every epoch is whole batches (the pad cut here), so
        # the next one starts afresh.
        for k in range(batches):
            images, labels = p.run()
            keep = min(B, n - k * B)
            yield (images.as_array()[:keep],
                   np.asarray(labels.as_array()).reshape(-1)[:keep].astype(np.int64))
    return timed(args, epoch)


# ---- one measurement (the child's side) ---------------------------------------------------------

def consume(x, y, args, counts):
    """The training loop's side of a batch: checks its shape and types,
    reads every byte of the images (a sum of 64-bit words) and counts the
    labels. @return the images in the batch."""
    import numpy as np
    a = x.numpy() if hasattr(x, "numpy") else np.asarray(x)
    labels = y.numpy() if hasattr(y, "numpy") else np.asarray(y)
    want = (a.shape[0], 3, args.size, args.size)
    if a.dtype != np.uint8 or a.shape != want or a.shape[0] > args.batch_size:
        raise RuntimeError(f"a batch of {a.dtype} {list(a.shape)}, expected uint8 {list(want)} "
                           f"(at most {args.batch_size} images)")
    if labels.dtype != np.int64 or labels.shape != (a.shape[0],):
        raise RuntimeError(f"labels of {labels.dtype} {list(labels.shape)}, expected int64 "
                           f"[{a.shape[0]}]")
    if a.shape[0] and (labels.min() < 0 or labels.max() >= len(counts)):
        raise RuntimeError(f"a label outside 0..{len(counts) - 1}")
    np.ascontiguousarray(a).reshape(-1).view("<u8").sum(dtype=np.uint64)
    counts += np.bincount(labels, minlength=len(counts))
    return a.shape[0]


def timed(args, epoch):
    """epoch(): an iterator over one epoch's (images, labels). One warm-up
    epoch, then args.epochs timed ones, each checked: the labels count each
    class's images exactly (every image once). Records the epochs' times in
    args.epoch_s. @return the timed epochs' images/s."""
    import numpy as np
    want = np.array(args.class_counts, dtype=np.int64)
    times = []
    for e in range(1 + args.epochs):
        counts = np.zeros(len(want), dtype=np.int64)
        n = 0
        t0 = time.perf_counter()
        for x, y in epoch():
            n += consume(x, y, args, counts)
        times.append(time.perf_counter() - t0)
        if n != args.n or not np.array_equal(counts, want):
            raise RuntimeError(f"epoch {e}: {n} images, labels {counts.tolist()}; expected "
                               f"{args.n}, {want.tolist()} (every image once)")
    args.epoch_s = times
    return args.n * args.epochs / sum(times[1:])


def child_main():
    spec = json.load(sys.stdin)
    try:
        args = argparse.Namespace(**spec)
        images_s = ARMS[spec["arm"]](args)
        out = {"images_s": images_s, "epoch_s": args.epoch_s}
    except NotImplementedError as e:
        out = {"error": str(e) or "not implemented", "unavailable": True}
    except BaseException as e:      # the driver reports it; a child never hangs the run
        import traceback
        traceback.print_exc(file=sys.stderr)
        out = {"error": f"{type(e).__name__}: {e}".strip()}
    sys.stdout.flush()
    print("\n" + json.dumps(out), flush=True)
    os._exit(0)                     # DALI's and DataLoader's threads: no waiting for them


# ---- the driver ---------------------------------------------------------------------------------

def ensure_modules():
    """Debian's torch, torchvision, PIL and NumPy for this python3: installed
    with apt-get through tools/deps.sh when missing and root (once, then
    re-executed), else named."""
    missing = []
    for mod, deb in DEBS.items():
        try:
            __import__(mod)
        except ImportError:
            missing.append(deb)
    if not missing:
        return
    if os.geteuid() == 0 and not os.environ.get("BENCH_NO_APT"):
        log(f"bench-images: installing {' '.join(missing)} (apt-get)")
        r = subprocess.run(["bash", "-c", '. "$0/tools/deps.sh" && batchd__apt_install "$@"',
                            ROOT, *missing])
        if r.returncode == 0:
            os.environ["BENCH_NO_APT"] = "1"
            os.execv(sys.executable, [sys.executable] + sys.argv)
    log(f"bench-images: missing Python modules; install them with:\n"
        f"  sudo apt-get install --no-install-recommends {' '.join(missing)}")
    sys.exit(2)


def dali_python():
    """The DALI venv's python (made when missing), or (None, why)."""
    r = subprocess.run(["bash", "-c", '. "$0/tools/deps.sh" && batchd_venv "$1" "$2"', ROOT,
                        DALI_VENV, DALI_REQUIREMENTS], capture_output=True, text=True)
    if r.stderr.strip():
        log("  " + r.stderr.strip().replace("\n", "\n  "))
    if r.returncode != 0 or not r.stdout.strip():
        return None, f"its venv could not be made ({DALI_REQUIREMENTS}: pip failed)"
    return os.path.join(r.stdout.strip().splitlines()[-1], "bin", "python"), None


def make_tree(args, work):
    """tools/bench/make-imagefolder.py's tree under work (made or reused).
    @return its manifest."""
    tree = os.path.join(work, "imagefolder")
    r = subprocess.run([sys.executable, os.path.join(HERE, "make-imagefolder.py"), "--out", tree,
                        "--n", str(args.n), "--classes", str(args.classes), "--seed",
                        str(args.seed), "--json"], stdout=subprocess.PIPE, text=True)
    if r.returncode == 2:
        sys.exit(2)
    if r.returncode != 0:
        raise RuntimeError("make-imagefolder.py failed")
    m = json.loads(r.stdout)
    m["tree"] = tree
    m["class_counts"] = [sum(1 for e in os.scandir(os.path.join(tree, c))
                             if e.name.endswith(".jpg")) for c in m["class_names"]]
    return m


def make_pack(tool, work, m):
    """The tree's pack (batchd-pack's defaults, --labels dirname), remade
    when the tree changed. @return (path, seconds it took or None if reused)."""
    pack = os.path.join(work, PACK_NAME)
    stamp = pack + ".made-from"
    key = json.dumps(m["key"], sort_keys=True)
    try:
        with open(stamp) as f:
            if f.read() == key and os.path.exists(pack):
                return pack, None
    except OSError:
        pass
    for p in (stamp, pack):
        if os.path.exists(p):
            os.unlink(p)
    t0 = time.perf_counter()
    subprocess.run([tool, "create", pack, m["tree"], "--labels", "dirname"], check=True,
                   stdout=subprocess.DEVNULL)
    dt = time.perf_counter() - t0
    with open(stamp, "w") as f:
        f.write(key)
    return pack, dt


class Runner:
    """Starts the children: each arm's interpreter and the environment."""

    def __init__(self, args, base):
        self.args, self.base = args, base
        self.python = {"debian": sys.executable}
        self.env = dict(os.environ)
        pp = [os.path.join(ROOT, "client", "python"), HERE]
        if self.env.get("PYTHONPATH"):
            pp.append(self.env["PYTHONPATH"])
        self.env["PYTHONPATH"] = os.pathsep.join(pp)
        self.env["BATCHCLIENT_LIB"] = os.path.join(args.build, "client", "libbatchclient.so.0")
        # DataLoader warns when workers outnumber the cores; the sweep asks for that.
        self.env.setdefault("PYTHONWARNINGS", "ignore")

    def child(self, name, settings):
        """One measurement. @return its result with "load"; "error" when it failed."""
        spec = dict(self.base, arm=name, settings=settings)
        load = os.getloadavg()[0]
        try:
            p = subprocess.run([self.python[ARMS[name].python], os.path.abspath(__file__),
                                "--child"], input=json.dumps(spec), capture_output=True,
                               text=True, env=self.env, timeout=self.args.run_timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"no result within --run-timeout {self.args.run_timeout} s",
                    "load": load}
        last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
        try:
            out = json.loads(last)
        except ValueError:
            out = {"error": f"exit {p.returncode}, no result"}
        if "error" in out and not out.get("unavailable"):
            out["stderr"] = p.stderr.strip()[-2000:]
        out["load"] = load
        return out


class Contest:
    """The arms' sweeps, then the pairs with the candidate."""

    def __init__(self, runner, arms, failed):
        self.runner, self.arms = runner, arms
        self.failed = failed        # arm: why it did not run
        self.swept = {}             # arm: [(settings, result)]
        self.sweep_failed = {}      # arm: {describe(settings): why}
        self.best = {}
        self.pairs_of = {}          # arm: [(candidate result, its result)]
        self.candidate = None

    def measure(self, name, settings, what):
        r = self.runner.child(name, settings)
        if "error" in r:
            log(f"  {what}: failed: {r['error']}")
            if r.get("stderr"):
                log("    " + r["stderr"].replace("\n", "\n    "))
        else:
            log(f"  {what}: {r['images_s']:,.0f} images/s (epochs "
                f"{', '.join(f'{t:.2f}' for t in r['epoch_s'])} s; load {r['load']:.2f})")
        return r

    def sweep(self, repeat):
        for rep in range(repeat):
            for name in self.arms:
                if name in self.failed:
                    continue
                for s in ARMS[name].points(self.runner.args):
                    r = self.measure(name, s, f"sweep {rep + 1}: {name}, {describe(s)}")
                    if "error" in r:
                        if r.get("unavailable") or not self.swept.get(name):
                            self.failed[name] = r["error"]
                            break
                        self.sweep_failed.setdefault(name, {})[describe(s)] = r["error"]
                        continue
                    self.swept.setdefault(name, []).append((s, r))
        for name, runs in self.swept.items():
            by = {}
            for s, r in runs:
                by.setdefault(json.dumps(s), []).append(r["images_s"])
            self.best[name] = json.loads(max(by, key=lambda k: med(by[k])))

    def pairs(self, want, repeat):
        """--pairs rounds of (candidate, arm) for every other arm that ran."""
        self.candidate = next((c for c in (want, "batchd-pil") if c in self.best), None)
        if self.candidate is None:
            return
        c = self.candidate
        for rep in range(repeat):
            for name in self.arms:
                if name == c or name not in self.best:
                    continue
                a = self.measure(c, self.best[c], f"pair {rep + 1}: {c}, {describe(self.best[c])}")
                b = self.measure(name, self.best[name],
                                 f"pair {rep + 1}: {name}, {describe(self.best[name])}")
                if "error" in a or "error" in b:
                    continue
                log(f"  pair {rep + 1}: {c} / {name} = {a['images_s'] / b['images_s']:.2f}x")
                self.pairs_of.setdefault(name, []).append((a, b))

    def sweep_medians(self, name):
        """{settings: median images/s of its sweep runs} of one arm."""
        by = {}
        for s, r in self.swept[name]:
            by.setdefault(describe(s), []).append(r["images_s"])
        return {k: med(v) for k, v in by.items()}

    def rows(self):
        rows = []
        c = self.candidate
        for name in self.arms:
            if name not in self.best:
                continue
            if name == c and self.pairs_of:
                runs = [a for prs in self.pairs_of.values() for a, _ in prs]
            elif name in self.pairs_of:
                runs = [b for _, b in self.pairs_of[name]]
            else:
                runs = [r for s, r in self.swept[name] if s == self.best[name]]
            v = [r["images_s"] for r in runs]
            row = {"arm": name, "title": ARMS[name].title, "settings": describe(self.best[name]),
                   "runs": len(v), "images_s": med(v), "min": min(v), "max": max(v),
                   "load": [min(r["load"] for r in runs), max(r["load"] for r in runs)],
                   "sweep": self.sweep_medians(name),
                   "sweep_failed": self.sweep_failed.get(name, {})}
            if name in self.pairs_of:
                ratios = [a["images_s"] / b["images_s"] for a, b in self.pairs_of[name]]
                row.update(ratio=med(ratios), ratio_min=min(ratios), ratio_max=max(ratios))
            rows.append(row)
        return rows


def print_table(rows, candidate):
    head = f"{candidate or 'candidate'} / this: median (min-max)"
    print(f"| {'loader':<30} | {'best settings':<28} | {'runs':>4} | "
          f"{'images/s: median (min-max)':>26} | {head:>36} | {'load':>9} |")
    print(f"|{'-' * 32}|{'-' * 30}|{'-' * 6}|{'-' * 28}|{'-' * 38}|{'-' * 11}|")
    for r in rows:
        ratio = (f"{r['ratio']:.2f}x ({r['ratio_min']:.2f}-{r['ratio_max']:.2f})"
                 if "ratio" in r else "-")
        ips = f"{r['images_s']:,.0f} ({r['min']:,.0f}-{r['max']:,.0f})"
        load = f"{r['load'][0]:.1f}-{r['load'][1]:.1f}"
        print(f"| {r['title']:<30} | {r['settings']:<28} | {r['runs']:>4} | {ips:>26} | "
              f"{ratio:>36} | {load:>9} |")
    for r in rows:
        if len(r["sweep"]) + len(r["sweep_failed"]) > 1:
            print(f"  sweep, {r['arm']}: " + ", ".join(
                [f"{k} {v:,.0f}" for k, v in r["sweep"].items()] +
                [f"{k} failed ({why})" for k, why in r["sweep_failed"].items()]))


def list_arg(allowed=None):
    def parse(s):
        items = [x.strip() for x in s.split(",") if x.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"'{s}' names nothing")
        if allowed is None:
            try:
                v = [int(x) for x in items]
            except ValueError:
                raise argparse.ArgumentTypeError(f"'{s}' is not a list of whole numbers")
            if min(v) < 0:
                raise argparse.ArgumentTypeError(f"'{s}': counts are >= 0")
            return list(dict.fromkeys(v))
        bad = [x for x in items if x not in allowed]
        if bad:
            raise argparse.ArgumentTypeError(f"unknown {', '.join(bad)}: choose from "
                                             f"{', '.join(allowed)}")
        return list(dict.fromkeys(items))
    return parse


def parse_args():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0].split(": ", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=next(p for p in __doc__.split("\n\n") if "--workdir /var/tmp" in p))
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="meson build directory")
    ap.add_argument("--workdir", help="where the tree, the pack and the daemon's socket go, kept "
                    "for later runs (default: a temporary directory, removed)")
    ap.add_argument("--arms", type=list_arg(tuple(ARMS)), default=list(ARMS),
                    help=f"arms to run (default all: {', '.join(ARMS)})")
    ap.add_argument("--candidate", choices=tuple(ARMS), default="batchd",
                    help="the arm every other one is paired with (default batchd; batchd-pil "
                    "when it does not run)")
    ap.add_argument("--pairs", type=int, default=3, help="candidate/arm pairs per arm (3)")
    ap.add_argument("--sweep-repeat", type=int, default=1,
                    help="runs of every sweep point; the best median picks an arm's settings")
    ap.add_argument("--epochs", type=int, default=1, help="timed epochs a run, after 1 warm-up")
    ap.add_argument("--workers", type=list_arg(), default=[0, 1, 2, 3],
                    help="DataLoader num_workers to sweep (0,1,2,3)")
    ap.add_argument("--dali-threads", type=list_arg(), default=[1, 2],
                    help="DALI num_threads to sweep (1,2)")
    ap.add_argument("--n", type=int, default=3000, help="images (3000)")
    ap.add_argument("--classes", type=int, default=10, help="class folders (10)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--size", type=int, default=224, help="the crop's side, px (224)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--run-timeout", type=int, default=1800, help="seconds a run may take")
    ap.add_argument("--json", action="store_true", help="also print the results as JSON")
    args = ap.parse_args()
    for k in ("pairs", "sweep_repeat", "epochs", "n", "classes", "batch_size", "size"):
        if getattr(args, k) < 1:
            ap.error(f"--{k.replace('_', '-')} must be at least 1")
    if 0 in args.dali_threads:
        ap.error("--dali-threads: at least 1")
    args.build = os.path.abspath(args.build)
    return args


def bench(args, work):
    load0 = os.getloadavg()
    failed = {}
    m = make_tree(args, work)
    base = {"tree": m["tree"], "n": m["images"], "class_counts": m["class_counts"],
            "batch_size": args.batch_size, "size": args.size, "seed": args.seed,
            "epochs": args.epochs, "pack": PACK_NAME, "socket": os.path.join(work, "batchd.sock"),
            "workers": args.workers, "dali_threads": args.dali_threads}
    runner = Runner(args, base)
    if "dali" in args.arms:
        py, why = dali_python()
        if py:
            runner.python["dali"] = py
        else:
            failed["dali"] = why
    batchd_arms = [a for a in args.arms if ARMS[a].batchd]
    batchd = os.path.join(args.build, "daemon", "batchd")
    tool = os.path.join(args.build, "tools", "batchd-pack")
    lib = runner.env["BATCHCLIENT_LIB"]
    missing = [p for p in (batchd, tool, lib) if not os.path.exists(p)]
    info = pack_s = None
    if batchd_arms and missing:
        for a in batchd_arms:
            failed[a] = f"{missing[0]} is missing: build first (ninja -C {args.build})"
        batchd_arms = []
    daemon = None
    logpath = os.path.join(work, "batchd.log")
    try:
        if batchd_arms:
            pack, pack_s = make_pack(tool, work, m)
            info = json.loads(subprocess.run([tool, "info", pack, "--json"], check=True,
                                             capture_output=True, text=True).stdout)
            os.environ.setdefault("BATCHCLIENT_LIB", lib)
            sys.path.insert(0, os.path.join(ROOT, "client", "python"))
            import bench_daemon
            with open(logpath, "wb") as logf:
                daemon = bench_daemon.start_batchd([batchd, "--socket", base["socket"],
                                                    "--root", work], base["socket"], logf)
        contest = Contest(runner, args.arms, failed)
        contest.sweep(args.sweep_repeat)
        contest.pairs(args.candidate, args.pairs)
    finally:
        if daemon is not None:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(30)
    rows = contest.rows()
    report(args, m, info, pack_s, contest, rows, load0)
    if args.json:
        print(json.dumps({"data": {k: m[k] for k in ("images", "bytes", "mean_bytes",
                                                     "class_counts", "packages")},
                          "pack": info, "batch_size": args.batch_size, "size": args.size,
                          "epochs": args.epochs, "pairs": args.pairs,
                          "candidate": contest.candidate, "rows": rows,
                          "not_run": contest.failed}, indent=1))
    return 0 if rows else 1


def report(args, m, info, pack_s, contest, rows, load0):
    import torch
    import torchvision
    print(f"data: {m['images']} JPEGs in {len(m['class_names'])} classes, "
          f"{m['bytes'] / 1e6:.0f} MB ({m['mean_bytes'] / 1e3:.0f} KB each on average), cut "
          f"from the photographs of {', '.join(m['packages'])} (tools/bench/make-imagefolder.py"
          f"; made in {m['seconds']:.0f} s)")
    if info:
        print(f"pack: {info.get('blocks')} blocks, {info.get('stored_bytes', 0) / 1e6:.0f} MB "
              f"stored, codec {info.get('codec')}"
              + (f", made in {pack_s:.1f} s" if pack_s is not None else ", reused"))
    print(f"batch {args.batch_size}, RandomResizedCrop({args.size}) + horizontal flip, uint8 "
          f"[B, 3, {args.size}, {args.size}] and int64 labels, shuffled; {args.epochs} timed "
          f"epoch(s) after 1 warm-up a run, "
          + (f"{args.pairs} pair(s) per arm with {contest.candidate}" if contest.pairs_of
             else "no pairs (one arm ran)")
          + f"; sweeps: the median of {args.sweep_repeat} run(s) a point; torch "
          f"{torch.__version__}, torchvision {torchvision.__version__}")
    load1 = os.getloadavg()
    print(f"machine: {os.cpu_count()} CPUs, load average {load0[0]:.2f} {load0[1]:.2f} "
          f"{load0[2]:.2f} at the start, {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} at the end")
    print_table(rows, contest.candidate)
    for name, why in contest.failed.items():
        print(f"  did not run: {ARMS[name].title}: {why.splitlines()[0] if why else '?'}")


def main():
    args = parse_args()
    ensure_modules()
    work = os.path.abspath(args.workdir or tempfile.mkdtemp(prefix="bench-images-",
                                                            dir="/var/tmp"))
    os.makedirs(work, exist_ok=True)
    try:
        return bench(args, work)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--child"]:
        child_main()
    try:
        sys.exit(main())
    except (RuntimeError, ValueError, OSError, subprocess.CalledProcessError) as e:
        log(f"bench-images: {e}")
        sys.exit(1)
