#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""client/python/examples/train_cnn.py, the example the demo runs, end to
end on a few real PNG files from /usr/share (adwaita-icon-theme, which
tools/deps.sh installs, has hundreds): it packs them, starts its own
batchd from the build tree and trains with all four loaders; the table
has one row per loader with a positive epoch time, a wait fraction within
0-100% and a finite loss, over exactly the images it was given. Too few
images and a missing build tree exit 2 naming what is wrong.
Exits 77 (skip) without PyTorch or PIL, or with too few PNGs here."""
import math
import os
import subprocess
import sys
import tempfile
import unittest

import batchd_testlib as T

try:
    import torch  # noqa: F401
    import PIL  # noqa: F401
except ImportError as e:
    T.skip(f"{e.name} is not installed (apt-get install python3-torch python3-pil)")

T.require_tools()
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "client",
                      "python", "examples", "train_cnn.py")
BUILD = os.path.dirname(os.path.dirname(os.path.abspath(T.BATCHD)))
IMAGES = 40
ROWS = ("a. DataLoader", "b. batchd", "c. batchd", "d. batchd")


def example(*args):
    return subprocess.run([sys.executable, SCRIPT, "--build", BUILD, *args],
                          capture_output=True, text=True, timeout=110)


class ExampleCnn(unittest.TestCase):
    def test_trains_with_every_loader(self):
        r = example("--short", "--epochs", "1", "--max-images", str(IMAGES), "--min-images",
                    "16", "--min-per-class", "4", "--batch-size", "8")
        if r.returncode == 2 and "too few images" in r.stderr:
            T.skip(r.stderr.strip())
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertTrue(lines[0].startswith(f"{IMAGES} images, "), lines[0])
        rows = [ln for ln in lines if ln.startswith(ROWS)]
        self.assertEqual([ln[:len(p)] for ln, p in zip(rows, ROWS)], list(ROWS), r.stdout)
        for ln, workers in zip(rows, ("0|2|4", "0", "2", "0")):
            w, epoch_s, wait, loss = ln[44:].split()
            self.assertIn(w, workers.split("|"), ln)
            self.assertGreater(float(epoch_s), 0, ln)
            self.assertTrue(wait.endswith("%") and 0 <= float(wait[:-1]) <= 100, ln)
            self.assertTrue(math.isfinite(float(loss)) and float(loss) > 0, ln)

    def test_too_few_images(self):
        with tempfile.TemporaryDirectory() as empty:
            r = example("--source", empty)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("too few images: 0 PNG files over 2 KiB in 0 classes", r.stderr)
        self.assertIn(empty, r.stderr)

    def test_no_build_tree(self):
        r = subprocess.run([sys.executable, SCRIPT, "--build", "/nonexistent/build"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("/nonexistent/build/daemon/batchd is missing: build first", r.stderr)


if __name__ == "__main__":
    unittest.main()
