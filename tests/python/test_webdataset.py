#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A WebDataset tar (`batchd-pack create OUT ARCHIVE --group-by key`) read
through batchclient: members jpg, cls, json and seg.png made with Python's
tarfile from real files. Every sample's key and every field exact (the
decimal cls as an int64 array, the others as bytes), a selection of
fields, the same through a gzip tar, and a member set missing a field
refused by the packer (its exit status and message, no output left), or
stored empty with --allow-missing."""
import collections
import io
import os
import tarfile

import numpy as np

import batchd_testlib as T

N = 46
FIELDS = ("cls", "jpg", "json", "seg.png")


def key_of(i):
    return f"shard{i // 20}/{i:06d}"


def make_samples():
    """[(key, {extension: bytes})] from real files: images where the system has
    them (copyright notices otherwise), JSON documents likewise."""
    images = T.real_files(["/usr/share/**/*.jpg", "/usr/share/**/*.png",
                           "/usr/share/doc/*/copyright"], 2 * N, max_size=256 << 10)
    docs = T.real_files(["/usr/share/**/*.json", "/usr/share/doc/*/copyright"], N)
    out = []
    for i in range(N):
        # Integers as a writer leaves them: with and without a final newline.
        cls = f"{i % 10}\n" if i % 3 else f"{i * 37}"
        out.append((key_of(i), {"jpg": T.read(images[2 * i]), "cls": cls.encode(),
                                "json": T.read(docs[i]), "seg.png": T.read(images[2 * i + 1])}))
    return out


def write_tar(path, samples, mode="w", skip=None):
    """The samples' members, adjacent per sample as WebDataset has them;
    skip=(key, extension) leaves that member out."""
    with tarfile.open(path, mode, format=tarfile.PAX_FORMAT) as tar:
        for key, members in samples:
            for ext in ("jpg", "cls", "json", "seg.png"):
                if (key, ext) == skip:
                    continue
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(members[ext])
                info.mtime = 1700000000
                tar.addfile(info, io.BytesIO(members[ext]))


class WebDataset(T.DaemonCase):
    @classmethod
    def make_datasets(cls, d):
        cls.samples = make_samples()
        cls.by_key = dict(cls.samples)
        tar = os.path.join(cls.tmp, "train.tar")
        write_tar(tar, cls.samples)
        T.pack(d.path("wds.bpk"), tar, extra=["--group-by", "key"])
        tgz = os.path.join(cls.tmp, "train.tar.gz")
        write_tar(tgz, cls.samples, "w:gz")
        T.pack(d.path("wds-gz"), tgz, block_size="64K", shard_size="256K",
               extra=["--group-by", "key"])
        cls.broken = os.path.join(cls.tmp, "broken.tar")
        write_tar(cls.broken, cls.samples, skip=(key_of(7), "json"))

    def check_epoch(self, dataset, fields=None):
        """One shuffled epoch: every sample once, its selected fields exact."""
        ld = self.loader(dataset, 8, shuffle="global", seed=4, keys=True, fields=fields)
        want_fields = FIELDS if fields is None else tuple(f for f in FIELDS if f in fields)
        seen = collections.Counter()
        for b in ld:
            self.assertEqual(b.fields, want_fields)
            keys = b.keys
            seen.update(keys)
            if "cls" in want_fields:
                cls = b["cls"]
                self.assertEqual((cls.dtype, cls.shape), (np.dtype(np.int64), (len(b),)))
                self.assertEqual(cls.tolist(), [int(self.by_key[k]["cls"]) for k in keys])
            for name in (f for f in want_fields if f != "cls"):
                views = b[name]
                self.assertEqual(len(views), len(b))
                for k, v in zip(keys, views):
                    T.same_bytes(self, v, self.by_key[k][name], f"{dataset} {k} {name}")
        self.assertEqual(seen, collections.Counter(k for k, _ in self.samples))

    def test_schema(self):
        for dataset in ("wds.bpk", "wds-gz"):
            ld = self.loader(dataset, 8)
            self.assertEqual(tuple(f.name for f in ld.schema), FIELDS)
            self.assertEqual(tuple(f.type for f in ld.schema),
                             ("int64", "bytes", "bytes", "bytes"))
            self.assertTrue(all(f.selected and f.classes is None for f in ld.schema))
            self.assertIsNone(ld.classes)
            self.assertEqual(ld.samples, N)

    def test_fields_and_keys_exact(self):
        self.check_epoch("wds.bpk")
        self.check_epoch("wds-gz")

    def test_selected_fields(self):
        # Given in any order, delivered in schema order.
        self.check_epoch("wds.bpk", fields=["json", "cls"])
        self.check_epoch("wds-gz", fields=["seg.png"])
        ld = self.loader("wds.bpk", 8, fields=["jpg"])
        b = next(iter(ld))
        with self.assertRaisesRegex(KeyError, "'cls'.*not selected"):
            b["cls"]
        with self.assertRaisesRegex(ValueError, "keys=True"):
            b.keys

    def test_missing_field_refused(self):
        out = os.path.join(self.tmp, "broken.bpk")
        rc, err = T.pack_fails(out, self.broken, "--group-by", "key")
        self.assertEqual(rc, 1, err)
        self.assertIn(key_of(7), err)
        self.assertIn("json", err)
        self.assertFalse(os.path.exists(out), "a refused pack left its output behind")
        # --allow-missing stores the lacking bytes field empty; nothing else changes.
        T.pack(self.daemon.path("allow.bpk"), self.broken, extra=["--group-by", "key",
                                                                    "--allow-missing"])
        got = {}
        for b in self.loader("allow.bpk", 16, shuffle="global", seed=8, keys=True):
            for k, cls, doc in zip(b.keys, b["cls"], b["json"]):
                got[k] = (int(cls), bytes(doc))
        self.assertEqual(sorted(got), sorted(self.by_key))
        for k, (cls, doc) in got.items():
            self.assertEqual(cls, int(self.by_key[k]["cls"]), k)
            T.same_bytes(self, doc, b"" if k == key_of(7) else self.by_key[k]["json"], k)


if __name__ == "__main__":
    T.main()
