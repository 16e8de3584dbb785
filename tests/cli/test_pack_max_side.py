#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""batchd-pack create --max-side N, end to end.

Real pictures (Adwaita's icons, from adwaita-icon-theme: pictures no test
drew) are written as an ImageFolder in every kind lib/image decodes, some
larger than N and some not, beside files that are no image; packed with
--max-side; and read back with `batchd-pack ls` and `cat`. Each larger
image must come back as an RGB JPEG whose longer side is N, its aspect
kept (the shorter side rounded to the nearest), near PIL's own resize of
the original; each other file byte for byte; keys and labels as they
were. The JPEGs must not depend on how the pack was cut (threads, block
and frame sizes). A WebDataset tar's image fields are fitted alike, its
other fields left alone. A corrupt large JPEG fails the pack naming its
path, leaving nothing, or with --on-error=skip is left out, named; a
corrupt small one is stored as it is (it is not decoded). Bad --max-side and --jpeg-quality are usage errors.

Run with Debian's python3 (PIL, NumPy): test_pack_max_side.py BATCHD_PACK
"""
import glob
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest

import numpy as np
from PIL import Image

from pack_cli import pack, packed, take_bin

BIN = take_bin(sys.argv)
ICONS = sorted(glob.glob("/usr/share/icons/Adwaita/512x512/*/*.png"))
N = 256


def ls(path):
    """{key: {field: value}} from `ls` (keys and values here have no blanks or quotes)."""
    rows = {}
    for line in packed("ls", path).splitlines():
        _, key, rest = line.split(" ", 2)
        rows[key] = dict(re.findall(r"(\S+?)=(<\d+ bytes>|\S+)", rest))
    return rows


def cat(path, key, field=None):
    p = subprocess.run([BIN, "cat", path, "--key", key] + (["--field", field] if field else []),
                       capture_output=True, timeout=60)
    if p.returncode:
        raise AssertionError(f"cat {key}: {p.stderr.decode()}")
    return p.stdout


def fit_size(w, h, side):
    """The size --max-side gives: the longer side to side, the other to the
    nearest (halves up), at least 1; within it, the image's own."""
    if max(w, h) <= side:
        return w, h
    s = max(1, (min(w, h) * side * 2 + max(w, h)) // (2 * max(w, h)))
    return (side, s) if w >= h else (s, side)


def scratch(cls, prefix):
    """A temporary directory for test class cls, removed after it; skip the
    class when the pictures are not installed."""
    if len(ICONS) < 8:
        raise unittest.SkipTest("adwaita-icon-theme's 512x512 icons are missing")
    d = tempfile.mkdtemp(prefix=prefix)
    cls.addClassCleanup(shutil.rmtree, d, ignore_errors=True)
    return d


def photo(i, size):
    """Icon i as an RGB picture of size (its alpha dropped, as PIL's convert("RGB"))."""
    return Image.open(ICONS[i]).convert("RGB").resize(size, Image.BILINEAR)


def encoded(im, **kw):
    buf = io.BytesIO()
    im.save(buf, **kw)
    return buf.getvalue()


def gray16_png(i, size):
    """A 16-bit grayscale PNG whose high bytes are icon i in gray, and that gray image."""
    gray = photo(i, size).convert("L")
    a = np.asarray(gray).astype(np.uint16) * 257
    return encoded(Image.fromarray(a, "I;16"), format="PNG"), gray


class MaxSide(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = scratch(cls, "bd-max-side-")
        cls.root = os.path.join(cls.dir, "in")
        g16, g16_ref = gray16_png(5, (700, 520))
        rgba = Image.open(ICONS[2]).convert("RGBA").resize((300, 700), Image.BILINEAR)
        # path below root: (bytes, larger than N, the RGB picture PIL's resize starts from)
        cls.files = {
            "cat/wide.jpg": (encoded(photo(0, (640, 480)), format="JPEG", quality=92), True),
            "cat/small.jpg": (encoded(photo(1, (200, 150)), format="JPEG", quality=90), False),
            "cat/cmyk.jpg": (encoded(photo(3, (900, 600)).convert("CMYK"), format="JPEG",
                                     quality=95), True),
            "cat/readme.txt": (b"not an image, though it sits among them\n", False),
            "dog/alpha.png": (encoded(rgba, format="PNG"), True),
            "dog/exactly-n.png": (encoded(photo(4, (N, 100)), format="PNG"), False),
            "dog/gray.jpg": (encoded(photo(6, (257, 1000)).convert("L"), format="JPEG",
                                     quality=90), True),
            "dog/gray16.png": (g16, True),
            "eel/lossy.webp": (encoded(photo(7, (800, 301)), format="WEBP", quality=85), True),
            "eel/small.webp": (encoded(photo(7, (120, 256)), format="WEBP", lossless=True),
                               False),
            "eel/anim.gif": (encoded(photo(1, (600, 400)).convert("P"), format="GIF"), False),
        }
        cls.refs = {"dog/gray16.png": g16_ref.convert("RGB")}
        for rel, (data, _) in cls.files.items():
            os.makedirs(os.path.dirname(os.path.join(cls.root, rel)), exist_ok=True)
            with open(os.path.join(cls.root, rel), "wb") as f:
                f.write(data)
        cls.out = os.path.join(cls.dir, "fit.bpk")
        cls.summary = packed("create", cls.out, cls.root, "--labels", "dirname",
                             "--max-side", str(N), "--threads", "2")
        cls.plain = os.path.join(cls.dir, "plain.bpk")
        packed("create", cls.plain, cls.root, "--labels", "dirname")

    def reference(self, rel):
        if rel in self.refs:
            return self.refs[rel]
        return Image.open(os.path.join(self.root, rel)).convert("RGB")

    def test_larger_images_come_back_as_jpegs_of_side_n(self):
        for rel, (data, larger) in self.files.items():
            if not larger:
                continue
            with self.subTest(rel=rel):
                got = cat(self.out, rel)
                im = Image.open(io.BytesIO(got))
                src = Image.open(io.BytesIO(data))
                w, h = fit_size(*src.size, N)
                self.assertEqual((im.format, im.mode, im.size), ("JPEG", "RGB", (w, h)))
                self.assertEqual(max(im.size), N)
                # The aspect kept: the shorter side within half a pixel of exact.
                self.assertLessEqual(abs(min(w, h) - min(src.size) * N / max(src.size)), 0.5)
                # 4:2:0, as the option promises: chroma at half size both ways.
                self.assertEqual(im.layer[0][1:3], (2, 2))
                self.assertEqual(im.layer[1][1:3], (1, 1))
                # Near PIL's resize of the original: only the JPEG's loss between.
                want = np.asarray(self.reference(rel).resize((w, h), Image.BILINEAR), int)
                diff = np.abs(np.asarray(im.convert("RGB"), int) - want)
                self.assertLess(diff.mean(), 3.0, f"mean {diff.mean():.2f}")

    def test_everything_else_is_stored_byte_for_byte(self):
        for rel, (data, larger) in self.files.items():
            if not larger:
                with self.subTest(rel=rel):
                    self.assertEqual(cat(self.out, rel), data)

    def test_keys_and_labels_are_as_they_were(self):
        fit, plain = ls(self.out), ls(self.plain)
        self.assertEqual(sorted(fit), sorted(self.files))
        self.assertEqual({k: v["label"] for k, v in fit.items()},
                         {k: v["label"] for k, v in plain.items()})
        self.assertEqual({fit[k]["label"] for k in fit if k.startswith("dog/")}, {"1"})
        rc, out, err = pack("verify", self.out)
        self.assertEqual(rc, 0, err)

    def test_the_summary_counts_what_became_of_each(self):
        larger = sum(1 for _, big in self.files.values() if big)
        self.assertIn(f"--max-side {N}: re-encoded {larger} (JPEG quality 90), kept 3, "
                      "not images 2", self.summary)

    def test_the_jpegs_do_not_depend_on_how_the_pack_is_cut(self):
        # One thread; samples many to a block; frames of 4 KiB (a large image
        # re-encoded on the main thread, stored whole or in frames after).
        first = {rel: cat(self.out, rel) for rel in self.files}
        for i, args in enumerate([["--threads", "1", "--block-size", "1M"],
                                  ["--frame-size", "4K", "--threads", "3"],
                                  ["--no-keys", "--block-size", "64K"]]):
            with self.subTest(args=args):
                out = os.path.join(self.dir, f"cut{i}.bpk")
                packed("create", out, self.root, "--max-side", str(N), *args)
                if "--no-keys" in args:
                    ids = {rel: str(n) for n, rel in enumerate(sorted(self.files))}
                    got = {rel: subprocess.run([BIN, "cat", out, "--id", ids[rel]],
                                               capture_output=True).stdout for rel in ids}
                else:
                    got = {rel: cat(out, rel) for rel in self.files}
                self.assertEqual(got, first)
                if "--frame-size" in args:
                    info = packed("info", out)
                    self.assertRegex(info, r"framed\s+[1-9]")

    def test_quality_is_the_one_asked(self):
        out = os.path.join(self.dir, "q40.bpk")
        packed("create", out, self.root, "--max-side", str(N), "--jpeg-quality", "40")
        low, high = cat(out, "cat/wide.jpg"), cat(self.out, "cat/wide.jpg")
        self.assertLess(len(low), len(high))
        self.assertEqual(Image.open(io.BytesIO(low)).size, (N, 192))


class WebDataset(unittest.TestCase):
    """--group-by key: each bytes field is fitted on its own; int fields stay."""

    @classmethod
    def setUpClass(cls):
        cls.dir = scratch(cls, "bd-max-side-wds-")

    def test_image_fields_fitted_other_fields_alone(self):
        d = self.dir
        tar = os.path.join(d, "shard.tar")
        members = {}
        for k in range(3):
            key = f"s/{k:04d}"
            members[key + ".jpg"] = encoded(photo(k, (500 + 40 * k, 300)), format="JPEG")
            members[key + ".seg.png"] = encoded(photo(k + 1, (64, 48)), format="PNG")
            members[key + ".cls"] = f"{k * 7}\n".encode()
            members[key + ".json"] = b'{"w": %d}' % (500 + 40 * k)
        with tarfile.open(tar, "w") as t:
            for name, data in members.items():
                ti = tarfile.TarInfo(name)
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
        out = os.path.join(d, "wds.bpk")
        summary = packed("create", out, tar, "--group-by", "key", "--max-side", "128")
        self.assertIn("re-encoded 3 (JPEG quality 90), kept 3, not images 3", summary)
        rows = ls(out)
        self.assertEqual(sorted(rows), [f"s/{k:04d}" for k in range(3)])
        for k in range(3):
            key = f"s/{k:04d}"
            self.assertEqual(rows[key]["cls"], str(k * 7))
            im = Image.open(io.BytesIO(cat(out, key, "jpg")))
            self.assertEqual(im.size, fit_size(500 + 40 * k, 300, 128))
            self.assertEqual(rows[key]["jpg"], f"<{len(cat(out, key, 'jpg'))} bytes>")
            self.assertEqual(cat(out, key, "seg.png"), members[key + ".seg.png"])
            self.assertEqual(cat(out, key, "json"), members[key + ".json"])


class Refusals(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = scratch(cls, "bd-max-side-bad-")
        cls.jpeg = encoded(photo(0, (640, 480)), format="JPEG", quality=90)

    def folder(self, name, files):
        root = os.path.join(self.dir, name)
        for rel, data in files.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "wb") as f:
                f.write(data)
        return root

    def test_a_corrupt_larger_image_fails_the_pack_naming_it(self):
        root = self.folder("corrupt", {"a/good.jpg": self.jpeg,
                                       "b/broken.jpg": self.jpeg[: len(self.jpeg) // 2]})
        out = os.path.join(self.dir, "corrupt.bpk")
        # On a worker; and, over the frame size, on the main thread before it is cut.
        for args in [[], ["--frame-size", "4K"]]:
            with self.subTest(args=args):
                rc, _, err = pack("create", out, root, "--labels", "dirname",
                                  "--max-side", str(N), *args)
                self.assertEqual(rc, 1, err)
                self.assertIn(os.path.join(root, "b/broken.jpg") + ": cannot fit it within "
                              f"--max-side {N}: JPEG: ", err)
                self.assertIn("repair, shrink or remove it, or pack without --max-side "
                              "(--on-error=skip leaves it out)", err)
                self.assertEqual(err.count("\n"), 1, err)
                self.assertEqual(os.listdir(self.dir).count("corrupt.bpk"), 0)
                self.assertEqual([f for f in os.listdir(self.dir) if f.startswith(".")], [])
                # --on-error=skip: left out, named; the good one packed, re-encoded.
                rc, summary, err = pack("create", out, root, "--labels", "dirname",
                                        "--max-side", str(N), "--on-error=skip", *args)
                self.assertEqual(rc, 0, err)
                self.assertRegex(err, "^batchd-pack: " + re.escape(os.path.join(
                    root, "b/broken.jpg")) + r": left out: does not decode: JPEG: [^\n]+\n$")
                self.assertIn(": 1 samples in ", summary)
                self.assertIn("1 left out (1 image that does not decode); ", summary)
                self.assertEqual(sorted(ls(out)), ["a/good.jpg"])
                os.unlink(out)

    def test_a_corrupt_field_of_a_tar_is_named_by_key_and_field(self):
        tar = os.path.join(self.dir, "bad.tar")
        with tarfile.open(tar, "w") as t:
            for name, data in [("k/1.jpg", self.jpeg), ("k/1.txt", b"fine"),
                               ("k/2.jpg", self.jpeg[: len(self.jpeg) // 2]), ("k/2.txt", b"x")]:
                ti = tarfile.TarInfo(name)
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
        rc, _, err = pack("create", os.path.join(self.dir, "bad.bpk"), tar, "--group-by", "key",
                          "--max-side", str(N))
        self.assertEqual(rc, 1, err)
        self.assertIn(f"{tar}: key k/2: field jpg: cannot fit it within --max-side {N}: JPEG: ",
                      err)

    def test_a_corrupt_image_within_n_is_stored_as_it_is(self):
        small = encoded(photo(1, (200, 150)), format="JPEG", quality=90)
        root = self.folder("small", {"a/cut.jpg": small[: len(small) // 2]})
        out = os.path.join(self.dir, "small.bpk")
        packed("create", out, root, "--max-side", str(N))
        self.assertEqual(cat(out, "a/cut.jpg"), small[: len(small) // 2])

    def test_usage_errors(self):
        root = self.folder("usage", {"a/x.jpg": self.jpeg})
        out = os.path.join(self.dir, "usage.bpk")
        for args, needle in [(["--jpeg-quality", "80"], "--jpeg-quality: only with --max-side"),
                             (["--max-side", "0"], "--max-side: '0' is not a side in pixels"),
                             (["--max-side", "15"], "(16..65535)"),
                             (["--max-side", "65536"], "(16..65535)"),
                             (["--max-side", "2x"], "--max-side: '2x'"),
                             (["--max-side", "64", "--jpeg-quality", "0"],
                              "--jpeg-quality: '0' is not a JPEG quality (1..100)"),
                             (["--max-side", "64", "--jpeg-quality", "101"], "(1..100)")]:
            with self.subTest(args=args):
                rc, _, err = pack("create", out, root, *args)
                self.assertEqual(rc, 2, err)
                self.assertIn(needle, err)
                self.assertFalse(os.path.exists(out))
        rec = os.path.join(self.dir, "records.bin")
        with open(rec, "wb") as f:
            f.write(bytes(64))
        rc, _, err = pack("create", out, "--records", "16", rec, "--max-side", "64")
        self.assertEqual(rc, 2, err)
        self.assertIn("--max-side: not with --records", err)


if __name__ == "__main__":
    unittest.main()
