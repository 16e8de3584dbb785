#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""batchd-pack create says what it leaves out, end to end.

An ImageFolder tree as a new user's first one looks: a good JPEG, a
truncated JPEG, an empty file, a FIFO, a file that cannot be read
(chmod 000), a dangling symlink, a .DS_Store at the top and a hidden
directory inside a class. Packed with --on-error fail and skip, with
--labels dirname and without, with --check-images and --allow-empty,
each run must name on stderr exactly what it leaves out and why, count
it on the summary line, exit 1 (fail) or 0 (skip), and leave in the
pack exactly the samples `batchd-pack ls` and `cat` then show, byte for
byte. The FIFO must never be opened (opening it would block: the run's
time limit catches that). --check-images must name the truncated JPEG
with the decoder's reason, fail on it or leave it out, on the workers
and (a sample over --frame-size) on the main thread alike. Hidden class
directories are compared with torchvision's own find_classes where
torchvision imports.

Root reads a chmod 000 file regardless (CAP_DAC_OVERRIDE): as root,
batchd-pack runs under setpriv without CAP_DAC_OVERRIDE and
CAP_DAC_READ_SEARCH, where the mode holds for root too; where that
cannot be had, the unreadable file is left out of the tree and the
checks that need it are skipped, saying why.

Run with Debian's python3 (PIL): test_pack_left_out.py BATCHD_PACK
"""
import glob
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

from PIL import Image

BIN = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else "build/tools/batchd-pack")
ICONS = sorted(glob.glob("/usr/share/icons/Adwaita/512x512/*/*.png"))
DROP = ["--bounding-set=-dac_override,-dac_read_search"]
LINK = "left out: a symbolic link (nothing below an input is followed)"
EMPTY = "empty (0 bytes), packed as an empty sample (--allow-empty: no warning)"


def jpeg(i, size):
    """Icon i (or a gradient when the icons are missing) as a JPEG of size."""
    if i < len(ICONS):
        im = Image.open(ICONS[i]).convert("RGB").resize(size, Image.BILINEAR)
    else:
        im = Image.linear_gradient("L").convert("RGB").resize(size)
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def no_dac(scratch):
    """The argv prefix under which chmod 000 stops a read of batchd-pack's:
    [] when not root; setpriv dropping the capabilities that let root read
    anything, when that works here; None when neither."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if not setpriv:
        return None
    probe = os.path.join(scratch, "probe")
    with open(probe, "w") as f:
        f.write("x")
    os.chmod(probe, 0)
    try:
        p = subprocess.run([setpriv, *DROP, "cat", probe], capture_output=True, timeout=30)
    finally:
        os.unlink(probe)
    return [setpriv, *DROP] if p.returncode != 0 else None


class LeftOut(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="bd-left-out-")
        cls.addClassCleanup(shutil.rmtree, cls.dir, ignore_errors=True)
        cls.prefix = no_dac(cls.dir)
        cls.root = root = os.path.join(cls.dir, "in")
        good = jpeg(0, (400, 300))
        assert len(good) > 8192, "a JPEG over twice --frame-size 4K, for the main thread's path"
        cls.data = {
            "cat/good.jpg": good,
            "cat/cut.jpg": good[: len(good) // 2],
            "cat/empty.jpg": b"",
            "dog/note.txt": b"not an image, and kept\n",
        }
        for rel, data in cls.data.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "wb") as f:
                f.write(data)
        os.mkfifo(os.path.join(root, "cat/fifo"))
        os.symlink("/nonexistent", os.path.join(root, "dog/dangling"))
        with open(os.path.join(root, ".DS_Store"), "wb") as f:
            f.write(b"Bud1\0\0\0")
        os.makedirs(os.path.join(root, "cat/.hidden"))
        with open(os.path.join(root, "cat/.hidden/x.jpg"), "wb") as f:
            f.write(good)
        if cls.prefix is not None:
            secret = os.path.join(root, "dog/secret.jpg")
            with open(secret, "wb") as f:
                f.write(good)
            os.chmod(secret, 0)
            cls.addClassCleanup(os.chmod, secret, 0o644)

    def need_unreadable(self):
        if self.prefix is None:
            self.skipTest("running as root, and setpriv cannot drop CAP_DAC_OVERRIDE here: "
                          "a chmod 000 file stays readable, so there is none to leave out")

    def pack(self, *args):
        """batchd-pack ARGS (without root's read-anything capabilities):
        (exit status, stdout, stderr lines)."""
        p = subprocess.run([*(self.prefix or []), BIN, *args], capture_output=True,
                           timeout=120, stdin=subprocess.DEVNULL)
        return p.returncode, p.stdout.decode(), p.stderr.decode().splitlines()

    def create(self, name, *args, want=0):
        out = os.path.join(self.dir, name)
        rc, summary, err = self.pack("create", out, self.root, "--threads", "2", *args)
        self.assertEqual(rc, want, "\n".join(err))
        return out, summary, err

    def keys(self, out):
        p = subprocess.run([BIN, "ls", out], capture_output=True, timeout=60, check=True)
        return [line.split(" ")[1] for line in p.stdout.decode().splitlines()]

    def cat(self, out, key):
        p = subprocess.run([BIN, "cat", out, "--key", key], capture_output=True, timeout=60,
                           check=True)
        return p.stdout

    def at(self, rel):
        return os.path.join(self.root, rel)

    def scan_lines(self):
        """What the scan says with --on-error skip, in bytewise order of path."""
        lines = [f"batchd-pack: {self.at('cat/fifo')}: left out: not a regular file (a FIFO)",
                 f"batchd-pack: {self.at('dog/dangling')}: {LINK}"]
        if self.prefix is not None:
            lines.append(f"batchd-pack: {self.at('dog/secret.jpg')}: left out: cannot open: "
                         "Permission denied")
        return lines

    def left(self, *more):
        """The summary's "N left out (...)" for the scan's and more."""
        why = ["1 special file", "1 symlink"] + (["1 unreadable"] if self.prefix is not None
                                                 else []) + list(more)
        return f"{len(why)} left out ({', '.join(why)})"

    def assert_packed(self, out, keys):
        self.assertEqual(self.keys(out), keys)
        for key in keys:
            self.assertEqual(self.cat(out, key), self.data[key], key)

    def test_fail_names_the_unreadable_file_and_packs_nothing(self):
        self.need_unreadable()
        out, summary, err = self.create("fail.bpk", want=1)
        self.assertEqual(err, [f"batchd-pack: {self.at('dog/secret.jpg')}: cannot open: "
                               "Permission denied (--on-error=skip would leave it out)"])
        self.assertEqual(summary, "")
        self.assertFalse(os.path.exists(out))
        self.assertEqual([f for f in os.listdir(self.dir) if f.startswith(".")], [])
        # --on-error fail is the default, said or not.
        rc, _, err2 = self.pack("create", out, self.root, "--on-error", "fail")
        self.assertEqual((rc, err2), (1, err))

    def test_skip_names_and_counts_each_left_out(self):
        out, summary, err = self.create("skip.bpk", "--on-error=skip")
        self.assertEqual(err, self.scan_lines() +
                         [f"batchd-pack: warning: {self.at('cat/empty.jpg')}: {EMPTY}"])
        self.assertTrue(summary.startswith(
            f"{out}: 4 samples in 4 blocks; {self.left()}; 2 hidden ignored (names starting "
            "with '.'); 1 empty (0 bytes); "), summary)
        self.assertEqual(summary.count("\n"), 1)
        self.assert_packed(out, ["cat/cut.jpg", "cat/empty.jpg", "cat/good.jpg", "dog/note.txt"])

    def test_allow_empty_packs_it_without_a_word(self):
        out, summary, err = self.create("quiet.bpk", "--on-error=skip", "--allow-empty")
        self.assertEqual(err, self.scan_lines())
        self.assertIn("; 1 empty (0 bytes); ", summary)
        self.assertEqual(self.cat(out, "cat/empty.jpg"), b"")

    def test_labels_dirname_ignores_hidden_names_at_every_level(self):
        out, summary, err = self.create("labels.bpk", "--on-error=skip", "--labels", "dirname")
        self.assertEqual(err, self.scan_lines() +
                         [f"batchd-pack: warning: {self.at('cat/empty.jpg')}: {EMPTY}"])
        self.assertIn(f"4 samples in 4 blocks; {self.left()}; 2 hidden ignored", summary)
        p = subprocess.run([BIN, "ls", out], capture_output=True, timeout=60, check=True)
        self.assertEqual(p.stdout.decode().splitlines(), [
            f"0 cat/cut.jpg data=<{len(self.data['cat/cut.jpg'])} bytes> label=0",
            "1 cat/empty.jpg data=<0 bytes> label=0",
            f"2 cat/good.jpg data=<{len(self.data['cat/good.jpg'])} bytes> label=0",
            f"3 dog/note.txt data=<{len(self.data['dog/note.txt'])} bytes> label=1",
        ])

    def test_check_images_skip_leaves_the_truncated_jpeg_out(self):
        # On the workers (a sample a block, then many), and over --frame-size 4K
        # on the main thread before it would be cut into frames.
        for i, args in enumerate([[], ["--block-size", "1M"], ["--frame-size", "4K"]]):
            with self.subTest(args=args):
                out, summary, err = self.create(f"check{i}.bpk", "--check-images",
                                                "--on-error=skip", *args)
                self.assertEqual(err, self.scan_lines() + [
                    f"batchd-pack: warning: {self.at('cat/empty.jpg')}: {EMPTY}",
                    f"batchd-pack: {self.at('cat/cut.jpg')}: left out: does not decode: "
                    "JPEG: Premature end of JPEG file"])
                self.assertRegex(summary, r": 3 samples in [0-9]+ blocks( \(1 samples in "
                                 r"frames\))?; " + re.escape(self.left("1 image that does "
                                                                        "not decode") + "; "))
                # good.jpg decoded; the empty file and the text are no images, and kept.
                self.assertIn("; --check-images: decoded 1, not images 2; ", summary)
                self.assert_packed(out, ["cat/empty.jpg", "cat/good.jpg", "dog/note.txt"])
                rc, _, verr = self.pack("verify", out)
                self.assertEqual(rc, 0, verr)

    def test_check_images_fail_names_the_truncated_jpeg(self):
        # Readable inputs only, so that it is the image that fails the pack.
        root = os.path.join(self.dir, "images")
        for rel in ["a/good.jpg", "a/cut.jpg", "b/note.txt"]:
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "wb") as f:
                f.write(self.data["cat/" + os.path.basename(rel)] if rel.startswith("a/")
                        else self.data["dog/note.txt"])
        for args in [[], ["--frame-size", "4K"]]:
            with self.subTest(args=args):
                out = os.path.join(self.dir, "check-fail.bpk")
                rc, summary, err = self.pack("create", out, root, "--check-images", *args)
                self.assertEqual(rc, 1, err)
                self.assertEqual(err, [f"batchd-pack: {root}/a/cut.jpg: does not decode: JPEG: "
                                       "Premature end of JPEG file; repair or remove it, or pass "
                                       "--on-error=skip to leave it out"])
                self.assertFalse(os.path.exists(out))
        # Without --check-images it is packed as it is: nothing decodes it.
        out = os.path.join(self.dir, "unchecked.bpk")
        rc, _, err = self.pack("create", out, root)
        self.assertEqual((rc, err), (0, []))
        self.assertEqual(self.cat(out, "a/cut.jpg"), self.data["cat/cut.jpg"])

    def test_usage_errors(self):
        out = os.path.join(self.dir, "usage.bpk")
        rec = os.path.join(self.dir, "records.bin")
        with open(rec, "wb") as f:
            f.write(bytes(64))
        for args, needle in [
                ([self.root, "--on-error", "maybe"],
                 "--on-error: 'maybe' is not a policy; 'fail' (the default) or 'skip'"),
                (["--records", "16", rec, "--check-images"],
                 "--check-images: not with --records")]:
            with self.subTest(args=args):
                rc, _, err = self.pack("create", out, *args)
                self.assertEqual(rc, 2, err)
                self.assertIn(needle, "\n".join(err))
                self.assertFalse(os.path.exists(out))


class HiddenClasses(unittest.TestCase):
    """A hidden first-level directory is no class, named; --include-hidden
    makes it one, as torchvision's find_classes does."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="bd-hidden-")
        cls.addClassCleanup(shutil.rmtree, cls.dir, ignore_errors=True)
        cls.root = os.path.join(cls.dir, "in")
        for rel in ["cat/a.jpg", "dog/b.jpg", ".ipynb_checkpoints/c.jpg", "dog/.x/d.jpg"]:
            os.makedirs(os.path.dirname(os.path.join(cls.root, rel)), exist_ok=True)
            with open(os.path.join(cls.root, rel), "wb") as f:
                f.write(rel.encode())

    def classes(self, out):
        """The class names of field label, as `info` lists them (these have no blanks)."""
        p = subprocess.run([BIN, "info", out], capture_output=True, timeout=60, check=True)
        m = re.search(r"^field +label int64 .* classes (\d+) \((.*)\)$", p.stdout.decode(), re.M)
        self.assertIsNotNone(m, p.stdout.decode())
        names = m.group(2).split(" ")
        self.assertEqual(len(names), int(m.group(1)))
        return names

    def torchvision_classes(self):
        try:
            from torchvision.datasets.folder import find_classes
        except ImportError as e:
            self.skipTest(f"torchvision does not import here ({e})")
        return find_classes(self.root)[0]

    def test_a_hidden_directory_is_no_class_and_is_named(self):
        out = os.path.join(self.dir, "default.bpk")
        p = subprocess.run([BIN, "create", out, self.root, "--labels", "dirname"],
                           capture_output=True, timeout=120)
        err = p.stderr.decode().splitlines()
        self.assertEqual(p.returncode, 0, err)
        self.assertEqual(err, [f"batchd-pack: {self.root}/.ipynb_checkpoints: hidden directory, "
                               "not a class; torchvision's ImageFolder counts it as one, moving "
                               "the labels of the classes after it (--include-hidden counts it "
                               "too)"])
        self.assertRegex(p.stdout.decode(), r": 2 samples in 2 blocks; 2 hidden ignored \(")
        self.assertEqual(self.classes(out), ["cat", "dog"])

    def test_include_hidden_gives_torchvisions_classes(self):
        out = os.path.join(self.dir, "hidden.bpk")
        p = subprocess.run([BIN, "create", out, self.root, "--labels", "dirname",
                            "--include-hidden"], capture_output=True, timeout=120)
        self.assertEqual((p.returncode, p.stderr), (0, b""))
        self.assertRegex(p.stdout.decode(), r": 4 samples in 4 blocks; [0-9]")
        self.assertEqual(self.classes(out), [".ipynb_checkpoints", "cat", "dog"])
        self.assertEqual(self.classes(out), self.torchvision_classes())


if __name__ == "__main__":
    unittest.main()
