#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Images decoded in the daemon: Loader(decode={"data": Image(...)}).

An ImageFolder of real pictures (Adwaita's icons at photo-like sizes, as
JPEG, progressive JPEG, PNG and WebP) packed with its labels by
batchd-pack, served by a real batchd to a real client. Every sample's
tensor is compared byte for byte with what image-transform (the same
library, run alone on the file the sample's key names) makes for (seed,
epoch, id): so two runs, a restart and a resume at another world size all
see the same crops, and each label is its image's class. A corrupt image
fails its batch naming the sample by id and key, or with on_error="skip"
is left out of it (the rest of the batch intact, its id in
batch.skipped, the daemon's count); an image stored in frames fails its
batch;
a decode of a field that is not bytes, or a spec out of range, is refused
at open.
"""
import errno
import glob
import json
import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import batchd_testlib as T  # noqa: E402
import batchclient  # noqa: E402

try:
    import numpy as np
    from PIL import Image as PIL
except ImportError:
    np = None

TOOL = os.environ.get("IMAGE_TRANSFORM", "")
ICONS = sorted(glob.glob("/usr/share/icons/Adwaita/512x512/*/*.png"))
CLASSES = ("birds", "cats", "dogs")
SEED = 5


def make_tree(root):
    """ImageFolder root/<class>/<n>.<ext>; @return {key: class index}."""
    labels = {}
    kinds = [("jpg", dict(format="JPEG", quality=90)),
             ("jpg", dict(format="JPEG", quality=80, progressive=True)),
             ("png", dict(format="PNG")), ("webp", dict(format="WEBP", quality=85))]
    for i, src in enumerate(ICONS[:36]):
        cls = i % len(CLASSES)
        ext, kw = kinds[i % len(kinds)]
        im = PIL.open(src).convert("RGB").resize((300 + 17 * (i % 9), 240 + 13 * (i % 7)))
        key = f"{CLASSES[cls]}/{i:03d}.{ext}"
        os.makedirs(os.path.join(root, CLASSES[cls]), exist_ok=True)
        im.save(os.path.join(root, key), **kw)
        labels[key] = cls
    return labels


@unittest.skipIf(np is None, "needs NumPy and PIL (python3-numpy, python3-pil)")
class Images(T.DaemonCase):
    @classmethod
    def make_datasets(cls, d):
        if not TOOL or len(ICONS) < 36:
            raise unittest.SkipTest("needs IMAGE_TRANSFORM and adwaita-icon-theme's icons")
        d.memory = "1G"
        cls.tree = os.path.join(cls.tmp, "tree")
        cls.labels = make_tree(cls.tree)
        T.pack(d.path("photos.bpk"), cls.tree, extra=["--labels", "dirname"])
        bad = os.path.join(cls.tmp, "bad")
        os.makedirs(os.path.join(bad, "x"))
        for i in range(8):
            with open(os.path.join(bad, "x", f"{i}.jpg"), "wb") as f:
                with open(os.path.join(cls.tree, "birds", "000.jpg"), "rb") as g:
                    b = g.read()
                # Sample 5 is cut short: it cannot be decoded.
                f.write(b[: len(b) // 3] if i == 5 else b)
        T.pack(d.path("bad.bpk"), bad, extra=["--labels", "dirname"])
        # Every image over 4 KiB stored as frames of 4 KiB.
        T.pack(d.path("framed.bpk"), cls.tree, extra=["--labels", "dirname", "--frame-size", "4K"])

    def expected(self, key, epoch, sid, *args):
        out = subprocess.run([TOOL, "-S", str(SEED), "-E", str(epoch), "-I", str(sid), *args,
                              os.path.join(self.tree, key)], capture_output=True, check=True)
        return out.stdout

    def loader(self, *args, **kw):
        kw.setdefault("seed", SEED)
        kw.setdefault("timeout", 60)
        return super().loader(*args, **kw)

    def check_epochs(self, ld, spec_args, shape, epochs=(0, 1), counts=None):
        for e in epochs:
            ld.set_epoch(e)
            for b in ld:
                x, y = b.torch("data"), b.torch("label")
                self.assertEqual(tuple(x.shape), (len(b),) + shape)
                self.assertEqual(str(x.dtype), "torch.uint8")
                for i, (sid, key) in enumerate(zip(b.ids, b.keys)):
                    self.assertEqual(int(y[i]), self.labels[key], key)
                    want = self.expected(key, e, sid, *spec_args)
                    self.assertEqual(x[i].numpy().tobytes(), want,
                                     f"epoch {e} sample {sid} ({key})")
                    if counts is not None:
                        counts[e] = counts.get(e, 0) + 1

    def test_random_resized_crop_is_every_samples_own(self):
        spec = batchclient.Image(64)
        ld = self.loader("photos.bpk", 8, fields=["data", "label"], keys=True,
                         decode={"data": spec})
        self.assertEqual({f.name: f.shape for f in ld.schema}["data"], (3, 64, 64))
        self.check_epochs(ld, ["-c", "random", "-s", "64", "-f", "0.5"], (3, 64, 64))
        ld.close()

    def test_a_resume_at_another_world_size_sees_the_same_crops(self):
        spec = batchclient.Image((48, 40), layout="NHWC")
        args = ["-c", "random", "-s", "48x40", "-f", "0.5", "-n"]
        counts = {}
        for rank in range(2):
            ld = self.loader("photos.bpk", 5, fields=["data", "label"], keys=True,
                             decode={"data": spec}, rank=rank, world=2)
            self.check_epochs(ld, args, (48, 40, 3), epochs=(1,), counts=counts)
            ld.close()
        self.assertEqual(counts[1], 36)

    def test_center_crop_for_evaluation(self):
        spec = batchclient.Image(56, crop="center", resize=64)
        ld = self.loader("photos.bpk", 7, fields=["data", "label"], keys=True, shuffle="none",
                         decode={"data": spec})
        self.check_epochs(ld, ["-c", "center", "-s", "56", "-r", "64"], (3, 56, 56), epochs=(0,))
        ld.close()

    def test_batchd_dataset_gives_image_and_label_tensors(self):
        # The same through BatchdDataset and batchclient.torch.DataLoader with
        # two workers: to_tensors gives (x [B, 3, H, W], y [B]), each x the
        # sample's own crop (keys come from a second Loader of the same seed).
        from batchclient.torch import BatchdDataset, DataLoader
        spec = batchclient.Image(40)
        ds = BatchdDataset("photos.bpk", 6, seed=SEED, socket=self.daemon.sock, timeout=60,
                           fields=["data", "label"], decode={"data": spec})
        keyed = self.loader("photos.bpk", 6, fields=["data", "label"], keys=True,
                            decode={"data": spec})
        want = {}
        for b in keyed:
            for i, key in enumerate(b.keys):
                want[self.labels[key], b.torch("data")[i].numpy().tobytes()] = key
        seen = 0
        for x, y in DataLoader(ds, num_workers=2):
            self.assertEqual(tuple(x.shape[1:]), (3, 40, 40))
            self.assertEqual(x.shape[0], y.shape[0])
            for i in range(len(y)):
                self.assertIn((int(y[i]), x[i].numpy().tobytes()), want)
                seen += 1
        self.assertEqual(seen, 36)

    def test_batchctl_consume_decodes_the_same(self):
        # batchctl consume --decode prints each sample's XXH3 of its tensor.
        import xxhash
        batchctl = os.environ.get("BATCHCTL", "")
        if not batchctl:
            self.skipTest("BATCHCTL is not set")
        r = subprocess.run([batchctl, "-s", self.daemon.sock, "consume", "photos.bpk",
                            "--batch-size", "6", "--seed", str(SEED), "--fields", "data,label",
                            "--keys", "--decode", "data=jpeg:40:random-resized",
                            "--print-samples"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = [ln.split() for ln in r.stdout.splitlines() if ln.startswith("0 ")]
        self.assertEqual(len(lines), 36, r.stdout)
        for ln in lines:
            epoch, sid, digest = int(ln[0]), int(ln[2]), ln[3]
            key = next(f[4:] for f in ln if f.startswith("key="))
            want = self.expected(key, epoch, sid, "-c", "random", "-s", "40", "-f", "0.5")
            self.assertEqual(digest, f"{xxhash.xxh3_64_intdigest(want):016x}", key)
        r = subprocess.run([batchctl, "-s", self.daemon.sock, "consume", "photos.bpk",
                            "--batch-size", "6", "--decode", "data=gif:40:random-resized"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("kind 'gif' is not jpeg, png, webp or image", r.stderr)
        # --skip-bad: the corrupt image left out and counted, the batch kept.
        r = subprocess.run([batchctl, "-s", self.daemon.sock, "consume", "bad.bpk",
                            "--batch-size", "4", "--shuffle", "none", "--fields", "data,label",
                            "--decode", "data=jpeg:32:random-resized", "--skip-bad", "--json"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        got = json.loads(r.stdout)
        self.assertEqual((got["batches"], got["samples"], got["skipped"], got["failed"]),
                         (2, 7, 1, 0), r.stdout)

    def lost_batch(self, dataset, errno_want):
        """The BatchError of the first batch of dataset (unshuffled, 4 a
        batch, decoded at 32): its errno and index checked; @return its text."""
        ld = self.loader(dataset, 4, fields=["data", "label"], shuffle="none",
                         decode={"data": batchclient.Image(32)})
        served = []
        with self.assertRaises(batchclient.BatchError) as cm:
            for b in ld:
                b.torch("data")
                served.append(list(b.ids))
        ld.close()
        e = cm.exception
        self.assertEqual(e.errno, errno_want, str(e))
        # The batches before the lost one came whole, in order.
        self.assertEqual(served, [list(range(4 * k, 4 * k + 4)) for k in range(e.batch)])
        return str(e)

    def test_the_decode_scratch_is_charged_to_the_session(self):
        # Each decode worker may hold 48 MiB of image scratch: a session that
        # decodes images is charged that for every worker, on its heap share.
        st = batchclient.status(self.daemon.sock)
        workers = st["threads"]["decode"]
        plain = self.loader("photos.bpk", 4, fields=["data", "label"])
        s, = self.daemon.sessions()
        self.assertLess(s["memory_heap"], 48 << 20)
        plain.close()
        self.wait_sessions(0)
        img = self.loader("photos.bpk", 4, fields=["data", "label"],
                          decode={"data": batchclient.Image(32)})
        s, = self.daemon.sessions()
        self.assertGreaterEqual(s["memory_heap"], workers * (48 << 20))
        self.assertGreaterEqual(s["memory"], s["memory_heap"])
        img.close()

    def test_a_corrupt_image_fails_its_batch_naming_the_sample(self):
        why = self.lost_batch("bad.bpk", errno.EBADMSG)
        self.assertIn("dataset bad.bpk: sample 5 (key x/5.jpg): JPEG", why)

    def test_skip_leaves_a_bad_image_out_and_counts_it(self):
        ld = self.loader("bad.bpk", 3, fields=["data", "label"], keys=True, shuffle="none",
                         decode={"data": batchclient.Image(32, on_error="skip")})
        bad = os.path.join(self.tmp, "bad")
        for e in (0, 1):
            ld.set_epoch(e)
            seen = []
            for b in ld:
                x, y = b.torch("data"), b.torch("label")
                self.assertEqual(tuple(x.shape), (len(b), 3, 32, 32))
                self.assertEqual(tuple(y.shape), (len(b),))
                seen.append((list(b.ids), list(b.skipped)))
                for i, (sid, key) in enumerate(zip(b.ids, b.keys)):
                    # The kept samples' tensors, labels and keys stay together.
                    self.assertEqual(key, f"x/{sid}.jpg")
                    self.assertEqual(int(y[i]), 0)
                    want = subprocess.run([TOOL, "-S", str(SEED), "-E", str(e), "-I", str(sid),
                                           "-c", "random", "-s", "32", "-f", "0.5",
                                           os.path.join(bad, key)],
                                          capture_output=True, check=True).stdout
                    self.assertEqual(x[i].numpy().tobytes(), want, f"epoch {e} sample {sid}")
            # Sample 5 (the middle batch's last) is left out, the others come whole.
            self.assertEqual(seen, [([0, 1, 2], []), ([3, 4], [5]), ([6, 7], [])])
        # Counted as batches are built, prefetched ones too: once for each
        # middle batch built, of the two epochs taken and any staged ahead.
        s, = self.daemon.sessions()
        self.assertGreaterEqual(s["skipped"], 2)
        self.assertLessEqual(s["skipped"], s["planned"] // 3 + 1)
        self.assertEqual(s["failed"], 0)
        before = batchclient.status(self.daemon.sock)["ended"]
        del x, y, b  # the last batch's tensors would keep the stream open
        ld.close()
        # Its count joins the ended sessions' once it ends (its reads in flight done).
        deadline = time.monotonic() + 10
        while (after := batchclient.status(self.daemon.sock)["ended"])["sessions"] == \
                before["sessions"] and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(after["sessions"], before["sessions"] + 1)
        self.assertGreaterEqual(after["skipped"], before["skipped"] + s["skipped"])

    def test_a_framed_image_fails_its_batch_saying_how_to_repack(self):
        why = self.lost_batch("framed.bpk", errno.EFBIG)
        self.assertIn("sample 0", why)
        self.assertIn("--frame-size", why)

    def test_bad_specs_are_refused_at_open(self):
        with self.assertRaises(batchclient.BatchdError) as cm:
            self.loader("photos.bpk", 4, fields=["data", "label"],
                        decode={"label": batchclient.Image(32)})
        self.assertIn("not a bytes field", str(cm.exception))
        with self.assertRaises(batchclient.BatchdError) as cm:
            self.loader("photos.bpk", 4, fields=["label"], decode={"data": batchclient.Image(32)})
        self.assertIn("not among the fields selected", str(cm.exception))
        with self.assertRaises(ValueError):
            batchclient.Image(0)
        with self.assertRaises(ValueError):
            batchclient.Image(32, crop="center", resize=16)
        with self.assertRaises(ValueError):
            batchclient.Loader("photos.bpk", 4, socket=self.daemon.sock,
                               decode={"data": batchclient.Image(8), "x": batchclient.Image(8)})


@unittest.skipIf(np is None, "needs NumPy and PIL (python3-numpy, python3-pil)")
class Bombs(T.DaemonCase):
    """[images] max_pixels: an image with more pixels than that, told by its
    header, is refused before it is decoded; its batch fails saying so and
    naming it, or with on_error="skip" it is left out."""

    @classmethod
    def make_datasets(cls, d):
        if len(ICONS) < 4:
            raise unittest.SkipTest("needs adwaita-icon-theme's icons")
        conf = os.path.join(cls.tmp, "batchd.conf")
        with open(conf, "w") as f:
            f.write("[images]\nmax_pixels = 64K\n")
        d.extra = ["--config", conf]
        tree = os.path.join(cls.tmp, "tree")
        os.makedirs(os.path.join(tree, "x"))
        # 200x200 (40,000 pixels) within 64K (65,536); 300x240 (72,000) over it.
        for i, side in enumerate([(200, 200), (300, 240), (200, 200), (300, 240)]):
            PIL.open(ICONS[i]).convert("RGB").resize(side).save(
                os.path.join(tree, "x", f"{i}.jpg"), quality=90)
        T.pack(d.path("sizes.bpk"), tree, extra=["--labels", "dirname"])

    def test_a_bomb_fails_its_batch_naming_the_limit(self):
        ld = self.loader("sizes.bpk", 4, fields=["data", "label"], shuffle="none", timeout=60,
                         decode={"data": batchclient.Image(32)})
        with self.assertRaises(batchclient.BatchError) as cm:
            next(iter(ld))
        self.assertEqual(cm.exception.errno, errno.E2BIG, str(cm.exception))
        why = str(cm.exception)
        self.assertRegex(why, r"sample [13] \(key x/[13]\.jpg\)")
        self.assertIn("300x240", why)
        self.assertIn("max_pixels", why)
        ld.close()

    def test_bombs_are_left_out_with_skip(self):
        ld = self.loader("sizes.bpk", 4, fields=["data", "label"], shuffle="none", timeout=60,
                         decode={"data": batchclient.Image(32, on_error="skip")})
        b = next(iter(ld))
        self.assertEqual((list(b.ids), sorted(b.skipped)), ([0, 2], [1, 3]))
        self.assertEqual(tuple(b.torch("data").shape), (2, 3, 32, 32))
        b.release()
        ld.close()


if __name__ == "__main__":
    unittest.main()
