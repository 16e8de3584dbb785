#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""CSV and JSONL manifests (`batchd-pack create OUT --manifest FILE`) read
through batchclient: a `path` column naming real files, int, float and
str columns typed by their values, and a float32 column typed by
--column. batch[...] gives every value exactly (int64 beyond 2^53,
float64 to the bit, float32 as the packer rounded it, text with commas,
quotes, newlines and non-ASCII), keyed by the path as written; selecting
only the scalar and str fields gives the same values. The C client
(`batchctl consume --print-samples`, libbatchclient's bc_batch_field_sample
and bc_batch_sample_key) prints the same values and the bytes' XXH3."""
import csv
import json
import os
import shutil
import subprocess

import numpy as np

import batchd_testlib as T

N = 57


def rows_from(files):
    """One manifest row per file, with values that stress each type."""
    ints = [0, 7, -3, 2 ** 53 + 1, -(2 ** 62), 2 ** 63 - 1, -(2 ** 63)]
    floats = [0.1, -1.5e-7, 1e300, 3.0, -0.0, 2.5e-310, 123456.789]
    rows = []
    for i, path in enumerate(files):
        with open(path, "rb") as f:
            first = f.readline().decode("utf-8", "replace").strip() or os.path.basename(path)
        caption = [first, f"{first}, with a comma", f'say "{first}"', f"two\nlines: {first}",
                   f"caf\u00e9 \u2014 {first}"][i % 5]
        rows.append({"path": f"files/{i % 4}/{i:03d}-{os.path.basename(path)}",
                     "label": ints[i % len(ints)] if i < 3 * len(ints) else i * 1000003,
                     "weight": floats[i % len(floats)] * (i + 1),
                     "caption": caption,
                     "score": i / 7})
    return rows


class Manifest(T.DaemonCase):
    @classmethod
    def make_datasets(cls, d):
        files = T.real_files(["/usr/share/doc/*/copyright", "/usr/share/common-licenses/*"], N)
        base = os.path.join(cls.tmp, "man")
        cls.rows = rows_from(files)
        cls.data = {}
        for row, src in zip(cls.rows, files):
            dst = os.path.join(base, row["path"])
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copyfile(src, dst)
            cls.data[row["path"]] = T.read(src)
        columns = ["path", "label", "weight", "caption", "score"]
        with open(os.path.join(base, "train.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, columns)
            w.writeheader()
            for row in cls.rows:
                w.writerow({**row, "weight": repr(row["weight"]), "score": repr(row["score"])})
        with open(os.path.join(base, "train.jsonl"), "w") as f:
            for row in cls.rows:
                f.write(json.dumps(row) + "\n")
        for name in ("train.csv", "train.jsonl"):
            T.pack(d.path(name.replace(".", "-") + ".bpk"),
                   extra=["--manifest", os.path.join(base, name), "--column", "score:float32"])

    def collect(self, dataset, fields=None):
        """{key: {field: value}} over one shuffled epoch."""
        got = {}
        ld = self.loader(dataset, 10, shuffle="global", seed=2, keys=True, fields=fields)
        for b in ld:
            label, weight, score = b["label"], b["weight"], b["score"]
            self.assertEqual((label.dtype, weight.dtype, score.dtype),
                             (np.dtype(np.int64), np.dtype(np.float64), np.dtype(np.float32)))
            captions = b["caption"]
            self.assertTrue(all(isinstance(c, str) for c in captions))
            data = b["data"] if "data" in b else [None] * len(b)
            for k, x in enumerate(b.keys):
                self.assertNotIn(x, got, f"{dataset}: {x} delivered twice")
                got[x] = {"label": int(label[k]), "weight": weight[k], "score": score[k],
                          "caption": captions[k],
                          "data": None if data[k] is None else bytes(data[k])}
        return got

    def check_values(self, dataset, fields=None):
        got = self.collect(dataset, fields)
        self.assertEqual(sorted(got), sorted(r["path"] for r in self.rows), dataset)
        for row in self.rows:
            g = got[row["path"]]
            ctx = f"{dataset} {row['path']}"
            self.assertEqual(g["label"], row["label"], ctx)
            # float64 to the bit (the sign of -0.0 included), float32 as rounded once.
            self.assertEqual(np.float64(row["weight"]).tobytes(), g["weight"].tobytes(), ctx)
            self.assertEqual(np.float32(row["score"]).tobytes(), g["score"].tobytes(), ctx)
            self.assertEqual(g["caption"], row["caption"], ctx)
            if fields is None:
                T.same_bytes(self, g["data"], self.data[row["path"]], ctx)

    def test_schema(self):
        for dataset in ("train-csv.bpk", "train-jsonl.bpk"):
            ld = self.loader(dataset, 10)
            self.assertEqual([(f.name, f.type) for f in ld.schema],
                             [("data", "bytes"), ("label", "int64"), ("weight", "float64"),
                              ("caption", "str"), ("score", "float32")], dataset)
            self.assertIsNone(ld.classes)
            self.assertEqual(ld.samples, N)

    def test_csv_values_exact(self):
        self.check_values("train-csv.bpk")

    def test_jsonl_values_exact(self):
        self.check_values("train-jsonl.bpk")

    def test_columns_without_the_bytes(self):
        fields = ["caption", "score", "weight", "label"]
        self.check_values("train-csv.bpk", fields)
        self.check_values("train-jsonl.bpk", fields)

    def test_c_client_values(self):
        """The same values through libbatchclient's C API, as batchctl prints them."""
        import xxhash
        batchctl = os.path.join(os.path.dirname(T.BATCHD_PACK), "batchctl")
        by_path = {r["path"]: r for r in self.rows}
        for dataset in ("train-csv.bpk", "train-jsonl.bpk"):
            out = subprocess.run([batchctl, "-s", self.daemon.sock, "consume", dataset,
                                  "--batch-size", "10", "--epochs", "1", "--shuffle", "global",
                                  "--keys", "--print-samples"], capture_output=True, text=True,
                                 check=True, timeout=60).stdout
            seen = set()
            for line in out.splitlines():
                words = line.split()
                values = dict(w.split("=", 1) for w in words[4:])
                row = by_path[values["key"]]
                ctx = f"{dataset} {values['key']}"
                self.assertNotIn(values["key"], seen, ctx)
                seen.add(values["key"])
                self.assertEqual(int(words[3], 16),
                                 xxhash.xxh3_64_intdigest(self.data[row["path"]]), ctx)
                self.assertEqual(int(values["label"]), row["label"], ctx)
                self.assertEqual(np.float64(float(values["weight"])).tobytes(),
                                 np.float64(row["weight"]).tobytes(), ctx)
                self.assertEqual(np.float32(float(values["score"])).tobytes(),
                                 np.float32(row["score"]).tobytes(), ctx)
            self.assertEqual(seen, set(by_path), dataset)


if __name__ == "__main__":
    T.main()
