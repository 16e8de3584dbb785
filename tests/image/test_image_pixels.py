#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""libbatchimage's pixels against PIL's, which are torchvision's.

torchvision's transforms on PIL images are PIL calls: Resize is
Image.resize(BILINEAR), CenterCrop an integer crop, RandomResizedCrop a
crop then that resize, RandomHorizontalFlip a transpose. Each test writes
real images (Adwaita's icons, from adwaita-icon-theme: real pictures no
test drew) in every kind libbatchimage decodes, runs them through
image-transform and compares the tensor with PIL's, byte for byte where
the decode is the same, within the stated bounds where it is not (a
JPEG decoded at a DCT scale). Bad images fail with their errno named.

Run with Debian's python3 (PIL, NumPy); IMAGE_TRANSFORM names the tool.
"""
import glob
import io
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np
from PIL import Image

TOOL = os.environ.get("IMAGE_TRANSFORM", "build/tests/image/image-transform")
ICONS = sorted(glob.glob("/usr/share/icons/Adwaita/512x512/*/*.png"))[:12]


def run(path, *args):
    p = subprocess.run([TOOL, *args, path], capture_output=True)
    return p.returncode, p.stdout, p.stderr.decode()


def tensor(path, size, *args):
    rc, out, err = run(path, "-s", f"{size[0]}x{size[1]}", *args)
    if rc:
        raise AssertionError(f"{path}: {err}")
    return np.frombuffer(out, np.uint8).reshape(3, size[0], size[1]).astype(int)


def pil_center(im, size, resize):
    w, h = im.size
    if w <= h:
        nw, nh = resize, int(resize * h / w)
    else:
        nh, nw = resize, int(resize * w / h)
    im = im.resize((nw, nh), Image.BILINEAR)
    top, left = int(round((nh - size[0]) / 2.0)), int(round((nw - size[1]) / 2.0))
    return np.asarray(im.crop((left, top, left + size[1], top + size[0]))).transpose(2, 0, 1)


def on_photo_like(src):
    """An icon as RGB, its alpha dropped as PIL's convert("RGB") drops it."""
    return Image.open(src).convert("RGB")


class Kinds(unittest.TestCase):
    """Every kind decodes to PIL's pixels (Resize 256 + CenterCrop 224)."""

    @classmethod
    def setUpClass(cls):
        if len(ICONS) < 4:
            raise unittest.SkipTest("adwaita-icon-theme's 512x512 icons are missing")
        cls.dir = tempfile.mkdtemp(prefix="bd-image-")
        cls.files = {}
        for i, src in enumerate(ICONS[:4]):
            rgb = on_photo_like(src).resize((600 - 40 * i, 450 + 30 * i), Image.BILINEAR)
            rgba = Image.open(src).convert("RGBA")
            kinds = {
                "baseline.jpg": (rgb, dict(format="JPEG", quality=90)),
                "progressive.jpg": (rgb, dict(format="JPEG", quality=85, progressive=True)),
                "gray.jpg": (rgb.convert("L"), dict(format="JPEG", quality=90)),
                "cmyk.jpg": (rgb.convert("CMYK"), dict(format="JPEG", quality=95)),
                "rgb.png": (rgb, dict(format="PNG")),
                "rgba.png": (rgba, dict(format="PNG")),
                "palette.png": (rgb.convert("P"), dict(format="PNG")),
                "interlaced.png": (rgb, dict(format="PNG", interlace=1)),
                "gray.png": (rgb.convert("L"), dict(format="PNG")),
                "lossless.webp": (rgb, dict(format="WEBP", lossless=True)),
            }
            for name, (im, kw) in kinds.items():
                path = os.path.join(cls.dir, f"{i}-{name}")
                im.save(path, **kw)
                cls.files[path] = im

    def check(self, path, exact=True):
        want = pil_center(Image.open(path).convert("RGB"), (224, 224), 256).astype(int)
        got = tensor(path, (224, 224), "-c", "center", "-r", "256")
        diff = np.abs(got - want)
        if exact:
            self.assertEqual(diff.max(), 0, f"{path}: mean {diff.mean():.3f}")
        else:
            self.assertLessEqual(diff.mean(), 1.0, path)
            self.assertLessEqual(diff.max(), 2, path)

    def test_every_kind_is_pils_pixels(self):
        for path in self.files:
            with self.subTest(path=os.path.basename(path)):
                # CMYK: PIL's conversion rounds differently by a level.
                self.check(path, exact="cmyk" not in path)

    def test_sixteen_bit_png_is_its_high_byte(self):
        a = (np.arange(300 * 200 * 3, dtype=np.uint32) * 2654435761 % 65536).astype(">u2")
        path = os.path.join(self.dir, "rgb16.png")
        write_png16(path, a.reshape(200, 300, 3))
        ref = Image.fromarray((a.reshape(200, 300, 3) >> 8).astype(np.uint8), "RGB")
        ref.save(os.path.join(self.dir, "rgb16-ref.png"))
        got = tensor(path, (64, 64), "-c", "center", "-r", "64")
        want = tensor(os.path.join(self.dir, "rgb16-ref.png"), (64, 64), "-c", "center", "-r", "64")
        self.assertTrue(np.array_equal(got, want))

    def test_random_resized_crop_is_pils_crop_and_resize(self):
        path = next(p for p in self.files if p.endswith("0-baseline.jpg"))
        flips = 0
        for i in range(24):
            args = ["-c", "random", "-f", "0.5", "-S", "11", "-E", "3", "-I", str(i)]
            rc, out, _ = run(path, "-p", *args)
            x, y, w, h, flip = out.split()
            x, y, w, h = (int(float(v)) for v in (x, y, w, h))
            im = Image.open(path).convert("RGB").crop((x, y, x + w, y + h))
            im = im.resize((224, 224), Image.BILINEAR)
            if flip == b"1":
                flips += 1
                im = im.transpose(Image.FLIP_LEFT_RIGHT)
            want = np.asarray(im).transpose(2, 0, 1).astype(int)
            # Decoded at full scale: PIL's pixels, byte for byte (the crop's
            # edge too: its chroma is upsampled from decoded neighbours).
            diff = np.abs(tensor(path, (224, 224), "-d", "off", *args) - want)
            self.assertEqual(diff.max(), 0, f"sample {i}: mean {diff.mean():.3f}")
            # At a DCT scale: what DALI and FFCV trade for speed.
            diff = np.abs(tensor(path, (224, 224), "-d", "on", *args) - want)
            self.assertLessEqual(diff.mean(), 3.0, f"sample {i} at a DCT scale")
        self.assertTrue(4 <= flips <= 20, f"{flips} of 24 flipped at p = 0.5")

    def test_a_large_image_fits_a_decode_threads_scratch(self):
        # 4000 x 3000 (36 MB of pixels) centre-cropped whole within the 48 MiB
        # a decode thread has: the resize then works on the rows as they are.
        path = os.path.join(self.dir, "large.png")
        on_photo_like(ICONS[0]).resize((4000, 3000), Image.BILINEAR).save(path, compress_level=1)
        want = pil_center(Image.open(path).convert("RGB"), (32, 32), 32).astype(int)
        got = tensor(path, (32, 32), "-c", "center", "-r", "32", "-x", str(48 << 20))
        self.assertEqual(np.abs(got - want).max(), 0)

    def test_layouts_are_transposes(self):
        path = next(iter(self.files))
        nchw = tensor(path, (96, 128), "-c", "center", "-r", "128")
        rc, out, err = run(path, "-s", "96x128", "-c", "center", "-r", "128", "-n")
        self.assertEqual(rc, 0, err)
        nhwc = np.frombuffer(out, np.uint8).reshape(96, 128, 3).astype(int)
        self.assertTrue(np.array_equal(nchw, nhwc.transpose(2, 0, 1)))


def write_png16(path, a):
    """A 16-bit RGB PNG of a (h, w, 3) big-endian array, written by hand:
    PIL writes none."""
    import zlib
    h, w, _ = a.shape
    raw = b"".join(b"\0" + a[y].tobytes() for y in range(h))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


class Determinism(unittest.TestCase):
    def test_same_key_same_bytes_other_key_other_crop(self):
        d = tempfile.mkdtemp(prefix="bd-image-")
        path = os.path.join(d, "a.jpg")
        on_photo_like(ICONS[0]).resize((500, 375)).save(path, quality=90)
        base = ["-c", "random", "-f", "0.5", "-S", "5", "-E", "2"]
        a = run(path, *base, "-I", "17")[1]
        self.assertEqual(a, run(path, *base, "-I", "17")[1])
        self.assertNotEqual(a, run(path, *base, "-I", "18")[1])
        self.assertNotEqual(a, run(path, "-c", "random", "-f", "0.5", "-S", "5", "-E", "3",
                                "-I", "17")[1])
        self.assertNotEqual(a, run(path, "-c", "random", "-f", "0.5", "-S", "6", "-E", "2",
                                "-I", "17")[1])


class Refusals(unittest.TestCase):
    """Bad images fail with the errno and a reason, never a crash."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="bd-image-")
        buf = io.BytesIO()
        on_photo_like(ICONS[0]).resize((400, 300)).save(buf, "JPEG", quality=90)
        cls.jpeg = buf.getvalue()
        buf = io.BytesIO()
        on_photo_like(ICONS[0]).resize((400, 300)).save(buf, "PNG")
        cls.png = buf.getvalue()

    def refused(self, data, errno_name, *args):
        path = os.path.join(self.dir, f"bad-{errno_name}-{len(data)}")
        with open(path, "wb") as f:
            f.write(data)
        rc, out, err = run(path, "-c", "center", "-s", "64", *args)
        self.assertEqual(rc, 1, f"accepted: {err}")
        self.assertEqual(out, b"")
        self.assertTrue(err.startswith(errno_name + ":"), err)
        return err

    def test_truncated_jpeg(self):
        self.refused(self.jpeg[: len(self.jpeg) // 2], "EBADMSG")

    def test_jpeg_with_flipped_entropy_bytes(self):
        b = bytearray(self.jpeg)
        for i in range(len(b) // 2, len(b) - 4, 97):
            b[i] ^= 0x55
        self.refused(bytes(b), "EBADMSG")

    def test_truncated_png(self):
        self.refused(self.png[: len(self.png) // 2], "EBADMSG")

    def test_png_with_a_bad_crc(self):
        b = bytearray(self.png)
        b[40] ^= 1  # inside the first IDAT: its CRC no longer matches
        self.refused(bytes(b), "EBADMSG")

    def test_gif_and_text_are_not_images(self):
        err = self.refused(b"GIF89a" + b"\0" * 64, "ENOTSUP")
        self.assertIn("GIF", err)
        self.refused(b"hello, world\n", "ENOTSUP")
        self.refused(b"", "ENOTSUP")

    def test_a_bomb_is_refused_before_it_is_decoded(self):
        # A header claiming 60000 x 60000 (3.6 GP), nothing behind it.
        b = bytearray(self.jpeg)
        sof = b.index(b"\xff\xc0")
        b[sof + 5:sof + 9] = struct.pack(">HH", 60000, 60000)
        err = self.refused(bytes(b), "E2BIG")
        self.assertIn("60000x60000", err)
        self.assertIn("max_pixels", err)
        # And a PNG claiming the same, its IHDR's CRC made right.
        import zlib
        p = bytearray(self.png)
        p[16:24] = struct.pack(">II", 60000, 60000)
        p[29:33] = struct.pack(">I", zlib.crc32(bytes(p[12:29])))
        self.assertIn("60000x60000", self.refused(bytes(p), "E2BIG"))


def fit_size(w, h, side):
    """bi_fit_size: the longer side to side, the other to the nearest (halves up), >= 1."""
    if max(w, h) <= side:
        return w, h
    s = max(1, (min(w, h) * side * 2 + max(w, h)) // (2 * max(w, h)))
    return (side, s) if w >= h else (s, side)


def fitted(path, side, *args):
    """image-transform -F: (width, height, [H, W, 3] ints) of bi_fit's output."""
    rc, out, err = run(path, "-F", str(side), *args)
    if rc:
        raise AssertionError(f"{path}: {err}")
    im = Image.open(io.BytesIO(out))
    return im.size[0], im.size[1], np.asarray(im).astype(int)


class Fit(unittest.TestCase):
    """bi_fit (batchd-pack create --max-side): the whole image shrunk so its
    longer side is the size, PIL's resize of PIL's decode, every kind."""

    @classmethod
    def setUpClass(cls):
        if len(ICONS) < 2:
            raise unittest.SkipTest("adwaita-icon-theme's 512x512 icons are missing")
        cls.dir = tempfile.mkdtemp(prefix="bd-fit-")
        rgb = on_photo_like(ICONS[1]).resize((517, 301), Image.BILINEAR)
        tall = on_photo_like(ICONS[2]).resize((150, 401), Image.BILINEAR)
        rgba = Image.open(ICONS[1]).convert("RGBA").resize((517, 301), Image.BILINEAR)
        cls.files = {}
        for name, im, kw in [
                ("wide.jpg", rgb, dict(format="JPEG", quality=90)),
                ("tall.jpg", tall, dict(format="JPEG", quality=90)),
                ("progressive.jpg", rgb, dict(format="JPEG", quality=85, progressive=True)),
                ("gray.jpg", rgb.convert("L"), dict(format="JPEG", quality=90)),
                ("cmyk.jpg", rgb.convert("CMYK"), dict(format="JPEG", quality=95)),
                ("rgba.png", rgba, dict(format="PNG")),
                ("palette.png", rgb.convert("P"), dict(format="PNG")),
                ("interlaced.png", tall, dict(format="PNG", interlace=1)),
                ("lossy.webp", rgb, dict(format="WEBP", quality=80)),
                ("alpha.webp", rgba, dict(format="WEBP", lossless=True))]:
            path = os.path.join(cls.dir, name)
            im.save(path, **kw)
            cls.files[path] = im.size

    def test_every_kind_is_pils_resize(self):
        for path, (w, h) in self.files.items():
            for side in (256, 100, 17):
                with self.subTest(path=os.path.basename(path), side=side):
                    ow, oh, got = fitted(path, side)
                    self.assertEqual((ow, oh), fit_size(w, h, side))
                    self.assertEqual(max(ow, oh), side)
                    want = np.asarray(Image.open(path).convert("RGB").resize(
                        (ow, oh), Image.BILINEAR)).astype(int)
                    diff = np.abs(got - want)
                    # CMYK: PIL's conversion rounds differently by a level.
                    self.assertLessEqual(diff.max(), 1 if "cmyk" in path else 0,
                                         f"mean {diff.mean():.3f}")

    def test_sizes_round_to_the_nearest(self):
        self.assertEqual(fit_size(517, 301, 256), (256, 149))   # 149.04
        self.assertEqual(fit_size(150, 401, 256), (96, 256))    # 95.76
        self.assertEqual(fit_size(300, 3, 100), (100, 1))       # exactly 1
        self.assertEqual(fit_size(4000, 1, 100), (100, 1))      # 0.025, at least 1
        self.assertEqual(fit_size(100, 100, 100), (100, 100))   # within: kept
        path = os.path.join(self.dir, "line.png")
        on_photo_like(ICONS[1]).resize((4000, 1), Image.BILINEAR).save(path)
        self.assertEqual(fitted(path, 100)[:2], (100, 1))

    def test_within_the_size_is_decoded_as_it_is(self):
        path = next(p for p in self.files if p.endswith("wide.jpg"))
        w, h, got = fitted(path, 517)
        self.assertEqual((w, h), (517, 301))
        want = np.asarray(Image.open(path).convert("RGB")).astype(int)
        self.assertEqual(np.abs(got - want).max(), 0)

    def test_a_bomb_and_a_corrupt_image_are_refused(self):
        path = next(p for p in self.files if p.endswith("wide.jpg"))
        rc, out, err = run(path, "-F", "64", "-m", str(517 * 301 - 1))
        self.assertEqual((rc, out), (1, b""))
        self.assertTrue(err.startswith("E2BIG:") and "517x301" in err, err)
        with open(path, "rb") as f:
            data = f.read()
        bad = os.path.join(self.dir, "truncated.jpg")
        with open(bad, "wb") as f:
            f.write(data[: len(data) // 2])
        rc, out, err = run(bad, "-F", "64")
        self.assertEqual((rc, out), (1, b""))
        self.assertTrue(err.startswith("EBADMSG: JPEG:"), err)


if __name__ == "__main__":
    unittest.main()
