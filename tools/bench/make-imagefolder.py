#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""make-imagefolder: an ImageFolder tree of real photographs for the vision
benchmarks (tools/bench/bench-images.py).

Why: a loader's images/s depends on what it decodes. Noise compresses
badly and decodes unlike a photograph, and the PNG icons of /usr/share are
tiny; an ImageNet-like tree of JPEGs (300-500 px short side, about 110 KB
each) is what a vision trainer's loader spends its time on. No data set can
be downloaded here, so the tree is cut from the real photographs that three
Debian packages ship as desktop wallpapers (36 photographs; the packages'
drawings and renders are left out by name):

  mate-backgrounds             12  the nature set (/usr/share/backgrounds/mate/nature)
  lomiri-wallpapers-16.04      13  photographs of Ubuntu's wallpaper contests
  plasma-workspace-wallpapers  11  KDE's photographs, 2560x1600 each

(47 + 16 + 94 MB downloaded, no dependencies.) Run as root, the missing
ones are installed with tools/deps.sh's batchd__apt_install; otherwise it
says what to install.

    /usr/bin/python3 tools/bench/make-imagefolder.py --out /var/tmp/imagefolder
    /usr/bin/python3 tools/bench/make-imagefolder.py --out DIR --n 3000 --classes 10 --seed 0

Each image: a photograph of its class (photograph j belongs to class
j mod --classes), an output short side drawn from 300-500 px and an
aspect ratio as ImageNet's (mostly 4:3 and 3:2 landscapes, some portraits
and squares), a random crop of the photograph of 1.1-3.2x that size scaled
down to it, a horizontal flip half the time, brightness, contrast and
saturation each within +-8%, and a JPEG quality of 75-95 (PIL, 4:2:0),
written to OUT/cNN/IIIIII.jpg (NN the class, IIIIII the image's index).
Everything is drawn from --seed, image by image, so a tree is the same
whatever --jobs (with the same Pillow and libjpeg). OUT.manifest.json
(beside OUT: a file inside would be a sample without a class to
`batchd-pack create --labels dirname`), written last, records what made
the tree; a later run with the same settings and sources reuses it, any
other remakes it. An OUT that holds files without such a manifest is
refused (it is not ours to empty).

The default tree (3000 images, 10 classes) takes about 75 s on 2 busy
cores and 118 MB: 39 KB an image on average, a third of ImageNet's
~110 KB at the same sizes. Wallpapers are smoother than most photographs
(sky, water, out-of-focus backgrounds), so their JPEGs hold fewer bits
per pixel even at the high qualities drawn here: a decoder does the same
pixel work as on ImageNet (IDCT, colour conversion, resizing), and less
entropy decoding.

Needs Debian's python3 and python3-pil, nothing from pip. Exit status: 0
ok, 1 failure, 2 usage or a missing package.
"""
import argparse
import io
import json
import math
import multiprocessing
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FORMAT = 1                  # bump when render() or plan_one() change (the constants
                            # below are in the manifest's key themselves)
MANIFEST = ".manifest.json"     # OUT + this
SHARE = "/usr/share"

# (package, path under /usr/share): the photographs, by name. The packages
# also hold drawings, gradients and renders (mate's abstract/ and desktop/,
# lomiri's analogpattern and umang, most of plasma's), which are not used.
PHOTOS = (
    ("mate-backgrounds", "backgrounds/mate/nature/Aqua.jpg"),
    ("mate-backgrounds", "backgrounds/mate/nature/Blinds.jpg"),
    ("mate-backgrounds", "backgrounds/mate/nature/Dune.jpg"),
    ("mate-backgrounds", "backgrounds/mate/nature/FreshFlower.jpg"),
    ("mate-backgrounds", "backgrounds/mate/nature/Garden.jpg"),
    ("mate-backgrounds", "backgrounds/mate/nature/GreenMeadow.jpg"),
    ("mate-backgrounds", "backgrounds/mate/nature/LadyBird.jpg"),
    ("mate-backgrounds", "backgrounds/mate/nature/RainDrops.jpg"),
    ("mate-backgrounds", "backgrounds/mate/nature/Storm.jpg"),
    ("mate-backgrounds", "backgrounds/mate/nature/TwoWings.jpg"),
    ("mate-backgrounds", "backgrounds/mate/nature/Wood.jpg"),
    ("mate-backgrounds", "backgrounds/mate/nature/YellowFlower.jpg"),
    ("lomiri-wallpapers-16.04", "backgrounds/Bridge_by_Sander_Klootwijk.jpg"),
    ("lomiri-wallpapers-16.04", "backgrounds/Dragonfly_by_Bolly.jpg"),
    ("lomiri-wallpapers-16.04", "backgrounds/Picture_0B_by_freespace.jpg"),
    ("lomiri-wallpapers-16.04", "backgrounds/Picture_1A_by_freespace.jpg"),
    ("lomiri-wallpapers-16.04", "backgrounds/Wine_by_Jakkub_Mede.jpg"),
    ("lomiri-wallpapers-16.04", "backgrounds/aitzgorri_by_Aitzol_Berasategi.jpg"),
    ("lomiri-wallpapers-16.04", "backgrounds/free_by_Peter_Nerlich.jpg"),
    ("lomiri-wallpapers-16.04", "backgrounds/friends_by_Aitzol_Berasategi.jpg"),
    ("lomiri-wallpapers-16.04", "backgrounds/greentock_by_Peter_Nerlich.jpg"),
    ("lomiri-wallpapers-16.04", "backgrounds/life_by_Aitzol_Berasategi.jpg"),
    ("lomiri-wallpapers-16.04", "backgrounds/picosdeeuropa_by_Aitzol_Berasategi.jpg"),
    ("lomiri-wallpapers-16.04", "backgrounds/seeding_by_Clements_Engelhardt.jpg"),
    ("lomiri-wallpapers-16.04", "backgrounds/sunset_by_Aitzol_Berasategi.jpg"),
    ("plasma-workspace-wallpapers", "wallpapers/BytheWater/contents/images/2560x1600.jpg"),
    ("plasma-workspace-wallpapers", "wallpapers/ColdRipple/contents/images/2560x1600.jpg"),
    ("plasma-workspace-wallpapers", "wallpapers/ColorfulCups/contents/images/2560x1600.jpg"),
    ("plasma-workspace-wallpapers", "wallpapers/DarkestHour/contents/images/2560x1600.jpg"),
    ("plasma-workspace-wallpapers", "wallpapers/EveningGlow/contents/images/2560x1600.jpg"),
    ("plasma-workspace-wallpapers", "wallpapers/FallenLeaf/contents/images/2560x1600.jpg"),
    ("plasma-workspace-wallpapers", "wallpapers/Grey/contents/images/2560x1600.jpg"),
    ("plasma-workspace-wallpapers", "wallpapers/Kite/contents/images/2560x1600.jpg"),
    ("plasma-workspace-wallpapers", "wallpapers/OneStandsOut/contents/images/2560x1600.jpg"),
    ("plasma-workspace-wallpapers", "wallpapers/Path/contents/images/2560x1600.jpg"),
    ("plasma-workspace-wallpapers", "wallpapers/summer_1am/contents/images/2560x1600.jpg"),
)
PACKAGES = tuple(dict.fromkeys(p for p, _ in PHOTOS))

SHORT = (300, 500)          # the output's short side, px
# Width/height and weight: ImageNet's photographs are mostly 4:3 and 3:2
# landscapes (500x375, 500x333), then portraits and squares.
ASPECTS = ((4 / 3, 45), (3 / 2, 15), (1.0, 10), (3 / 4, 15), (2 / 3, 10), (16 / 9, 5))
ZOOM = (1.25, 3.5)          # crop side / output side: a reduction (the detail of a camera's)
QUALITY = (75, 95, 92)      # low, high, mode of a triangular draw (Flickr's are mostly 90-95)
JITTER = 0.08               # brightness, contrast, saturation: 1 +- this
LONG_MAX = 2560             # a photograph is held at most this long (memory, speed)


class Usage(Exception):
    """Exit status 2 with this message."""


def log(msg):
    print(f"make-imagefolder: {msg}", file=sys.stderr, flush=True)


# ---- the photographs --------------------------------------------------------------------------

def missing_packages():
    """The Debian packages whose photographs (or python3-pil) are not there."""
    miss = [] if _have_pil() else ["python3-pil"]
    for pkg in PACKAGES:
        if any(not os.path.isfile(os.path.join(SHARE, p)) for q, p in PHOTOS if q == pkg):
            miss.append(pkg)
    return miss


def _have_pil():
    import importlib.util
    return importlib.util.find_spec("PIL") is not None


def ensure_packages():
    """Install what is missing as root (tools/deps.sh's batchd__apt_install),
    once, re-executing this script afterwards; else Usage naming it."""
    miss = missing_packages()
    if not miss:
        return
    if os.geteuid() == 0 and not os.environ.get("BATCHD_IMAGEFOLDER_NO_APT"):
        log(f"installing {' '.join(miss)} (apt-get)")
        r = subprocess.run(["bash", "-c", '. "$0/tools/deps.sh" && batchd__apt_install "$@"',
                            ROOT, *miss])
        if r.returncode == 0:
            os.environ["BATCHD_IMAGEFOLDER_NO_APT"] = "1"     # once
            os.execv(sys.executable, [sys.executable] + sys.argv)
    raise Usage(f"the photographs' packages are missing; install them with:\n"
                f"  sudo apt-get install --no-install-recommends {' '.join(miss)}")


def package_versions():
    out = {}
    for pkg in PACKAGES:
        r = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True,
                           text=True)
        out[pkg] = r.stdout.strip() if r.returncode == 0 else None
    return out


def held_size(size):
    """The size a photograph of `size` is held at: scaled so that its long
    side is at most LONG_MAX."""
    w, h = size
    f = min(1.0, LONG_MAX / max(w, h))
    return max(1, round(w * f)), max(1, round(h * f))


def sources():
    """[{package, path, bytes, size, held}] of PHOTOS, read from their headers."""
    from PIL import Image
    out = []
    for pkg, rel in PHOTOS:
        path = os.path.join(SHARE, rel)
        with Image.open(path) as im:
            size = im.size
        out.append({"package": pkg, "path": path, "bytes": os.path.getsize(path),
                    "size": list(size), "held": list(held_size(size))})
    return out


def load(src):
    """A photograph as RGB at its held size (JPEG draft mode first: the
    decoder's own 1/2, 1/4, 1/8 scaling, then a resampling to the size)."""
    from PIL import Image
    w, h = src["held"]
    with Image.open(src["path"]) as im:
        im.draft("RGB", (w, h))
        im = im.convert("RGB")
        if im.size != (w, h):
            im = im.resize((w, h), Image.LANCZOS, reducing_gap=3.0)
    return im


# ---- the plan: every image's parameters, from the seed ----------------------------------------

def class_photos(n_photos, classes):
    """[[photo indices] per class]: photograph j is in class j mod classes;
    with more classes than photographs, class k takes photograph k mod n."""
    if classes <= n_photos:
        return [list(range(k, n_photos, classes)) for k in range(classes)]
    return [[k % n_photos] for k in range(classes)]


def plan_one(i, seed, classes, per_class, srcs):
    """Image i's recipe: class, photograph, crop box, output size, flip,
    jitter and quality, drawn from its own generator (seed, i)."""
    import random
    rng = random.Random(f"batchd-imagefolder:{seed}:{i}")
    k = i % classes
    j = rng.choice(per_class[k])
    hw, hh = srcs[j]["held"]
    aspect = rng.choices([a for a, _ in ASPECTS], [w for _, w in ASPECTS])[0]
    aspect *= math.exp(rng.uniform(-0.05, 0.05))
    short = rng.randint(*SHORT)
    w, h = (round(short * aspect), short) if aspect >= 1 else (short, round(short / aspect))
    zmax = min(ZOOM[1], hw / w, hh / h)
    if zmax < 1.0:                     # a small photograph: the output shrinks to fit it
        w, h = max(1, int(w * zmax)), max(1, int(h * zmax))
        zmax = 1.0
    z = rng.uniform(min(ZOOM[0], zmax), zmax)
    cw, ch = min(hw, w * z), min(hh, h * z)
    x0, y0 = rng.uniform(0, hw - cw), rng.uniform(0, hh - ch)
    return {"i": i, "cls": k, "photo": j, "box": [x0, y0, x0 + cw, y0 + ch], "size": [w, h],
            "flip": rng.random() < 0.5,
            "jitter": [rng.uniform(1 - JITTER, 1 + JITTER) for _ in range(3)],
            "quality": round(rng.triangular(*QUALITY))}


def class_name(k, classes):
    return f"c{k:0{max(2, len(str(classes - 1)))}d}"


def image_path(out, r, classes, n):
    return os.path.join(out, class_name(r["cls"], classes), f"{r['i']:0{max(6, len(str(n - 1)))}d}.jpg")


# ---- making the images ------------------------------------------------------------------------

def render(im, r):
    """The JPEG bytes of recipe r cut from the held photograph im."""
    from PIL import Image, ImageEnhance
    out = im.resize(tuple(r["size"]), Image.BICUBIC, box=tuple(r["box"]), reducing_gap=2.0)
    if r["flip"]:
        out = out.transpose(Image.FLIP_LEFT_RIGHT)
    for enh, f in zip((ImageEnhance.Brightness, ImageEnhance.Contrast, ImageEnhance.Color),
                      r["jitter"]):
        out = enh(out).enhance(f)
    buf = io.BytesIO()
    out.save(buf, "JPEG", quality=r["quality"])
    return buf.getvalue()


def make_photo(job):
    """One photograph's images (a worker's task): (count, bytes)."""
    src, recipes, out, classes, n = job
    im = load(src)
    total = 0
    for r in recipes:
        data = render(im, r)
        with open(image_path(out, r, classes, n), "wb") as f:
            f.write(data)
        total += len(data)
    return len(recipes), total


def make(out, args, srcs):
    per_class = class_photos(len(srcs), args.classes)
    plan = [plan_one(i, args.seed, args.classes, per_class, srcs) for i in range(args.n)]
    for k in range(args.classes):
        os.makedirs(os.path.join(out, class_name(k, args.classes)))
    jobs = []
    for j, src in enumerate(srcs):
        mine = [r for r in plan if r["photo"] == j]
        if mine:
            jobs.append((src, mine, out, args.classes, args.n))
    jobs.sort(key=lambda t: -len(t[1]))           # the longest first: the pool ends together
    count = nbytes = 0
    t0 = time.perf_counter()
    with multiprocessing.Pool(args.jobs) as pool:
        for c, b in pool.imap_unordered(make_photo, jobs):
            count += c
            nbytes += b
            if sys.stderr.isatty():
                print(f"\r  {count}/{args.n} images, {nbytes / 1e6:.0f} MB, "
                      f"{time.perf_counter() - t0:.0f} s", end="", file=sys.stderr)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    used = sorted({r["photo"] for r in plan})
    return count, nbytes, len(used)


# ---- the manifest -----------------------------------------------------------------------------

def read_manifest(out):
    try:
        with open(out + MANIFEST) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def count_images(out, classes):
    n = 0
    for k in range(classes):
        try:
            n += sum(1 for e in os.scandir(os.path.join(out, class_name(k, classes)))
                     if e.name.endswith(".jpg"))
        except OSError:
            return -1
    return n


def clear(out, old):
    """Empty OUT of a tree this script made (its manifest first, so that an
    interruption leaves no manifest over a partial tree)."""
    os.unlink(out + MANIFEST)
    for name in old.get("class_names", []):
        if "/" not in name and name not in ("", ".", ".."):
            shutil.rmtree(os.path.join(out, name), ignore_errors=True)


def prepare_out(out, key):
    """The manifest when OUT already holds this tree; else OUT emptied of
    an older tree of ours (or made) and None. Usage when OUT is someone
    else's directory."""
    old = read_manifest(out)
    if old is not None and old.get("key") == key and \
            count_images(out, key["classes"]) == key["n"]:
        return old
    if old is not None and old.get("made_by") == "make-imagefolder":
        clear(out, old)
    if os.path.isdir(out) and os.listdir(out):
        raise Usage(f"{out} holds files this script did not make (no {out + MANIFEST} of "
                    f"its own): pass an empty or new --out")
    os.makedirs(out, exist_ok=True)
    return None


def imagefolder(args):
    """Make (or reuse) the tree; the manifest."""
    ensure_packages()
    import PIL
    srcs = sources()
    out = os.path.abspath(args.out).rstrip("/") or "/"
    key = {"format": FORMAT, "n": args.n, "classes": args.classes, "seed": args.seed,
           "recipe": {"short": SHORT, "aspects": ASPECTS, "zoom": ZOOM, "quality": QUALITY,
                      "jitter": JITTER, "long_max": LONG_MAX},
           "sources": [{"path": s["path"], "bytes": s["bytes"]} for s in srcs]}
    key = json.loads(json.dumps(key))          # as a manifest reads back: lists, not tuples
    m = None if args.force else prepare_out(out, key)
    if m is not None:
        log(f"{out}: reusing {m['images']} images ({m['bytes'] / 1e6:.0f} MB, made in "
            f"{m['seconds']:.0f} s)")
        return m
    if args.force:
        old = read_manifest(out)
        if old is not None:
            clear(out, old)
        prepare_out(out, key)
    t0 = time.perf_counter()
    count, nbytes, used = make(out, args, srcs)
    dt = time.perf_counter() - t0
    m = {"made_by": "make-imagefolder", "key": key, "images": count, "bytes": nbytes,
         "mean_bytes": nbytes / max(1, count), "seconds": round(dt, 1), "jobs": args.jobs,
         "photos_used": used, "class_names": [class_name(k, args.classes)
                                              for k in range(args.classes)],
         "packages": package_versions(), "pillow": PIL.__version__}
    tmp = out + MANIFEST + ".tmp"
    with open(tmp, "w") as f:
        json.dump(m, f, indent=1)
    os.rename(tmp, out + MANIFEST)
    log(f"{out}: {count} images in {args.classes} classes from {used} photographs "
        f"({', '.join(PACKAGES)}): {nbytes / 1e6:.0f} MB, {nbytes / max(1, count) / 1e3:.0f} KB "
        f"on average, made in {dt:.1f} s on {args.jobs} process(es)")
    return m


def count_arg(least, most=None):
    def parse(s):
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{s}' is not a whole number")
        if v < least or (most is not None and v > most):
            raise argparse.ArgumentTypeError(f"{v} is not in {least}..{most or 'any'}")
        return v
    return parse


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].split(": ", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--out", required=True, help="the tree's directory (made; a tree of ours "
                    "there is reused or remade)")
    ap.add_argument("--n", type=count_arg(1, 10_000_000), default=3000, help="images (3000)")
    ap.add_argument("--classes", type=count_arg(1, 100_000), default=10, help="class folders (10)")
    ap.add_argument("--seed", type=count_arg(0), default=0)
    ap.add_argument("--jobs", type=count_arg(1, 256), default=os.cpu_count() or 1,
                    help="processes (default: the CPUs)")
    ap.add_argument("--force", action="store_true", help="remake the tree even if it matches")
    ap.add_argument("--json", action="store_true", help="print the manifest (OUT.manifest.json)")
    args = ap.parse_args()
    try:
        m = imagefolder(args)
    except Usage as e:
        log(str(e))
        return 2
    if args.json:
        print(json.dumps(m, indent=1))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, ValueError, subprocess.CalledProcessError) as e:
        log(str(e))
        sys.exit(1)
