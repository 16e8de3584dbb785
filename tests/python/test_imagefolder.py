#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""An ImageFolder tree (`batchd-pack create OUT DIR --labels dirname`) read
through batchclient: real files from /usr/share copied into class
subfolders. Every delivered sample's label is its subfolder's index in
bytewise order, its bytes are the file's, its key the relative path, over
two shuffled epochs (global and block shuffles, one shard and several),
for one rank and for three (the union exact); the
schema and class names; batch["label"] and torch("label") over the shared
memory; field selection, unknown fields and keys asked of a pack without
them refused; a fixed-size bytes field as one [B, n] array; the lifetime
rules for field views."""
import ast
import collections
import errno
import os
import shutil
import subprocess
import sys

import numpy as np

import batchclient
import batchd_testlib as T

# Labels follow the bytewise order of the names: uppercase before
# lowercase, a prefix before what extends it, UTF-8 names by their bytes.
CLASSES = ["delta", "caf\u00e9", "alpha beta", "alpha", "Zeta"]
ORDER = sorted(CLASSES, key=os.fsencode)
CHUNK = 64
BAD_NAME = b"caf\xe9-latin1.txt"          # not UTF-8: the key must come back as os.fsdecode has it

try:
    import torch
except ImportError:
    torch = None


def copy_tree(src_root, files):
    """Copy files round-robin into class folders (every 7th one level deeper).
    @return {relative path: (label, bytes)}."""
    expect = {}
    for i, path in enumerate(files):
        cls = CLASSES[i % len(CLASSES)]
        parent = os.path.basename(os.path.dirname(path))
        name = os.path.basename(path) if parent == "common-licenses" else f"{parent}.copyright"
        rel = os.path.join(cls, "more", name) if i % 7 == 3 else os.path.join(cls, name)
        os.makedirs(os.path.join(src_root, os.path.dirname(rel)), exist_ok=True)
        shutil.copyfile(path, os.path.join(src_root, rel))
        expect[rel] = (ORDER.index(cls), T.read(path))
    # A name that is not UTF-8, with a real file's bytes.
    bad = os.path.join(os.fsencode(src_root), b"delta", BAD_NAME)
    shutil.copyfile(files[0], bad)
    expect[os.fsdecode(os.path.join(b"delta", BAD_NAME))] = (ORDER.index("delta"),
                                                             T.read(files[0]))
    return expect


class ImageFolder(T.DaemonCase):
    @classmethod
    def make_datasets(cls, d):
        files = T.real_files(["/usr/share/common-licenses/*", "/usr/share/doc/*/copyright"], 160)
        src = os.path.join(cls.tmp, "folder")
        cls.expect = copy_tree(src, files)
        T.pack(d.path("folder.bpk"), src, extra=["--labels", "dirname"])
        T.pack(d.path("folder-shards"), src, block_size="16K", shard_size="128K",
               extra=["--labels", "dirname"])
        T.pack(d.path("plain.bpk"), src)
        T.pack(d.path("nokeys.bpk"), src, extra=["--no-keys"])
        # A real file cut into CHUNK-byte pieces: a bytes field of fixed size.
        gpl = T.real_files(["/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/*"],
                           1, min_size=CHUNK * 100)[0]
        text = T.read(gpl)
        cls.chunks = [text[k:k + CHUNK] for k in range(0, len(text) - CHUNK + 1, CHUNK)]
        chunk_dir = os.path.join(cls.tmp, "chunks")
        for i, c in enumerate(cls.chunks):
            os.makedirs(os.path.join(chunk_dir, f"c{i % 3}"), exist_ok=True)
            with open(os.path.join(chunk_dir, f"c{i % 3}", f"{i:05d}"), "wb") as f:
                f.write(c)
        T.pack(d.path("chunks.bpk"), chunk_dir, extra=["--labels", "dirname"])

    def check_batch(self, b, seen):
        """Every sample of b against its file; records id -> key in seen."""
        labels, data, keys = b["label"], b["data"], b.keys
        self.assertIsInstance(labels, np.ndarray)
        self.assertEqual((labels.dtype, labels.shape), (np.dtype(np.int64), (len(b),)))
        self.assertFalse(labels.flags.writeable)
        self.assertEqual(len(data), len(b))
        self.assertEqual(len(keys), len(b))
        for k, label, view, sid in zip(keys, labels, data, b.ids):
            self.assertIn(k, self.expect, f"key {k!r} names no packed file")
            want_label, want = self.expect[k]
            self.assertEqual(int(label), want_label, k)
            self.assertTrue(view.readonly)
            T.same_bytes(self, view, want, k)
            self.assertEqual(seen.setdefault(sid, k), k, f"sample {sid} changed its key")

    def epochs(self, dataset, world, mode, epochs=2):
        """[Counter of keys per epoch], and the key order rank 0 saw per epoch."""
        counts = [collections.Counter() for _ in range(epochs)]
        order = [[] for _ in range(epochs)]
        seen = {}
        for rank in range(world):
            ld = self.loader(dataset, 16, shuffle=mode, seed=5, rank=rank, world=world,
                             keys=True, window=2)
            for e in range(epochs):
                ld.set_epoch(e)
                for b in ld:
                    self.check_batch(b, seen)
                    counts[e].update(b.keys)
                    if rank == 0:
                        order[e] += b.keys
            ld.close()
        self.assertEqual(len(seen), len(self.expect))
        return counts, order

    def test_every_sample_exact_two_epochs_world_1_and_3(self):
        n = len(self.expect)
        for dataset, mode in (("folder.bpk", "global"), ("folder-shards", "global"),
                              ("folder-shards", "block")):
            for world in (1, 3):
                counts, order = self.epochs(dataset, world, mode)
                per_rank = -(-n // world)
                for e, c in enumerate(counts):
                    ctx = f"{dataset} {mode} world {world} epoch {e}"
                    self.assertEqual(set(c), set(self.expect), ctx)
                    # The padding repeats world * per_rank - n samples once more.
                    self.assertEqual(sum(c.values()), world * per_rank, ctx)
                    self.assertLessEqual(max(c.values()), 2, ctx)
                    if world == 1:
                        self.assertTrue(all(v == 1 for v in c.values()), ctx)
                if world == 1:
                    self.assertNotEqual(order[0], order[1],
                                        f"{dataset} {mode}: epochs not reshuffled")
                    self.assertEqual(sorted(order[0]), sorted(order[1]))

    def test_schema_and_classes(self):
        ld = self.loader("folder.bpk", 8)
        self.assertEqual(ld.schema, (
            batchclient.Field("data", "bytes", None, 0, True, 0),
            batchclient.Field("label", "int64", tuple(ORDER), 0, True, 1)))
        self.assertEqual(ld.classes, ("Zeta", "alpha", "alpha beta", "caf\u00e9", "delta"))
        self.assertEqual(ld.schema[1].dtype, "<i8")
        b = next(iter(ld))
        self.assertEqual(b.fields, ("data", "label"))
        self.assertIn("label", b)
        self.assertIn("data", b)
        self.assertNotIn("jpg", b)
        self.assertNotIn(1, b)
        # The first bytes field is what data/samples/numpy() show, as before fields.
        self.assertEqual([bytes(v) for v in b["data"]], [bytes(s) for s in b.samples])
        with self.assertRaisesRegex(KeyError, "no field 'jpg'.*data, label"):
            b["jpg"]
        with self.assertRaisesRegex(TypeError, "indexed by field name"):
            b[0]
        with self.assertRaises(TypeError):
            iter(b)
        with self.assertRaisesRegex(ValueError, "keys=True"):
            b.keys

    def test_plain_pack_has_data_and_keys(self):
        ld = self.loader("plain.bpk", 32, shuffle="global", keys=True)
        self.assertEqual(ld.schema, (batchclient.Field("data", "bytes", None, 0, True, 0),))
        self.assertIsNone(ld.classes)
        got = {}
        for b in ld:
            self.assertEqual(b.fields, ("data",))
            for k, v in zip(b.keys, b["data"]):
                got[k] = bytes(v)
        self.assertEqual(sorted(got), sorted(self.expect))
        for k, (_, want) in self.expect.items():
            T.same_bytes(self, got[k], want, k)

    def test_keys_refused_without_keys_in_the_pack(self):
        with self.assertRaises(batchclient.BatchdError) as cm:
            self.loader("nokeys.bpk", 8, keys=True)
        self.assertEqual(cm.exception.errno, errno.ENODATA)
        self.assertIn("--no-keys", str(cm.exception))
        # Without keys=True the same pack serves, as before fields.
        b = next(iter(self.loader("nokeys.bpk", 8)))
        self.assertEqual(b.fields, ("data",))

    def test_unknown_field_refused_naming_the_fields(self):
        with self.assertRaises(batchclient.BatchdError) as cm:
            self.loader("folder.bpk", 8, fields=["label", "cls"])
        self.assertEqual(cm.exception.errno, errno.ENOENT)
        msg = str(cm.exception)
        self.assertIn("cls", msg)
        self.assertIn("data", msg)
        self.assertIn("label", msg)
        for bad, why in (([], "selects no field"), (["a,b"], "not a field name"),
                         (["label", "label"], "more than once"), ([""], "not a field name")):
            with self.assertRaisesRegex(ValueError, why):
                batchclient.Loader("folder.bpk", 8, socket=self.daemon.sock, fields=bad)

    def test_label_only_selection(self):
        ld = self.loader("folder-shards", 16, shuffle="global", seed=9, fields=["label"],
                         keys=True)
        self.assertEqual([f.selected for f in ld.schema], [False, True])
        seen = collections.Counter()
        for b in ld:
            self.assertEqual(b.fields, ("label",))
            self.assertNotIn("data", b)
            with self.assertRaisesRegex(KeyError, "'data'.*not selected"):
                b["data"]
            for view in ("data", "samples", "sizes"):
                with self.assertRaisesRegex(ValueError, "selected no bytes field"):
                    getattr(b, view)
            with self.assertRaisesRegex(ValueError, "selected no bytes field"):
                b.numpy()
            for k, label in zip(b.keys, b["label"]):
                self.assertEqual(int(label), self.expect[k][0], k)
                seen[k] += 1
        self.assertEqual(seen, collections.Counter(list(self.expect)))

    def test_label_tensor(self):
        if torch is None:
            print("torch is not installed: the tensor check is skipped")
            return
        ld = self.loader("folder.bpk", 16, shuffle="global", seed=3, keys=True)
        for b in ld:
            arr = b["label"]
            t = b.torch("label")
            self.assertEqual(t.dtype, torch.int64)
            self.assertEqual(tuple(t.shape), (len(b),))
            self.assertEqual(t.tolist(), [self.expect[k][0] for k in b.keys])
            self.assertEqual(t.data_ptr(), arr.__array_interface__["data"][0])  # no copy
            with self.assertRaisesRegex(ValueError, "differing sizes"):
                b.torch("data")
            del t, arr

    def test_fixed_size_field_is_one_array(self):
        ld = self.loader("chunks.bpk", 50, shuffle="global", seed=1, keys=True)
        data_field = ld.schema[0]
        self.assertEqual((data_field.name, data_field.fixed_size), ("data", CHUNK))
        self.assertEqual(ld.classes, ("c0", "c1", "c2"))
        got = 0
        for b in ld:
            a = b["data"]
            self.assertEqual((a.dtype, a.shape), (np.dtype(np.uint8), (len(b), CHUNK)))
            self.assertTrue(np.shares_memory(a, b.numpy()))
            for row, k, label in zip(a, b.keys, b["label"]):
                cls, name = k.split("/")
                i = int(name)
                T.same_bytes(self, row.tobytes(), self.chunks[i], k)
                self.assertEqual((cls, int(label)), (f"c{i % 3}", i % 3))
                got += 1
            if torch is not None:
                t = b.torch("data")
                self.assertEqual((t.dtype, tuple(t.shape)), (torch.uint8, (len(b), CHUNK)))
                del t
            del a
        self.assertEqual(got, len(self.chunks))

    def test_field_views_follow_the_lifetime_rules(self):
        ld = self.loader("folder.bpk", 8, shuffle="none", keys=True)
        it = iter(ld)
        b = next(it)
        labels = b["label"]
        views = b["data"]
        want = [self.expect[k] for k in b.keys]
        b.release()
        with self.assertRaises(batchclient.ReleasedError):
            b["label"]
        with self.assertRaises(batchclient.ReleasedError):
            b.keys
        with self.assertRaises(ValueError):
            bytes(views[0])                  # revoked at release
        # The array pins the batch: its values stay exact until it dies.
        self.assertTrue(b.pinned)
        self.assertEqual(labels.tolist(), [lab for lab, _ in want])
        b2 = next(it)                        # the last batch may stay pinned
        self.assertEqual(len(b2["label"]), len(b2))
        with self.assertRaises(batchclient.PinnedBatchError):
            next(it)                         # an older one may not
        del labels
        self.assertFalse(b.pinned)
        self.assertEqual(len(next(it)), 8)

    def test_without_numpy(self):
        # The package imports and serves bytes, str and keys without NumPy;
        # scalar fields then say what they need.
        code = (
            "import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] in ('numpy', 'torch'):\n"
            "            raise ImportError(name + ' is blocked')\n"
            "sys.meta_path.insert(0, Block())\n"
            "import batchclient\n"
            "ld = batchclient.Loader(sys.argv[1], 8, socket=sys.argv[2], keys=True)\n"
            "b = next(iter(ld))\n"
            "print(ascii([ld.classes[0], b.keys[0], len(bytes(b['data'][0]))]))\n"
            "try:\n"
            "    b['label']\n"
            "except ImportError as e:\n"
            "    print('ImportError:', e)\n"
            "b.release()\n"
            "ld.close()\n")
        p = subprocess.run([sys.executable, "-c", code, "folder.bpk", self.daemon.sock],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        first, second = p.stdout.splitlines()
        cls, key, size = ast.literal_eval(first)
        self.assertEqual(cls, "Zeta")
        self.assertEqual(size, len(self.expect[key][1]))
        self.assertRegex(second, r"^ImportError: batch\['label'\] is a NumPy array: install NumPy")


if __name__ == "__main__":
    T.main()
