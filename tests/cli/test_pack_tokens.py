#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""batchd-pack create --tokens, end to end.

Each input kind is written here with known ids (NumPy): a flat nanoGPT
.bin, a Megatron-LM .bin/.idx pair (by a small writer of Megatron's
_IndexWriter format, named by either file or the prefix), 1-D and 2-D
.npy arrays of several dtypes, JSONL arrays and objects; packed; and read
back with `batchd-pack cat` (every document's exact ids), `ls` (every
document's size) and `info --json` (documents, tokens, width, eos, largest
id, ratio). --eos splits flat streams and is appended where a document
lacks it; kinds mix in command-line order; --shard-size and framed
documents keep the ids. What must be refused is, naming the file and where,
with nothing left behind: an id over uint16 (suggesting uint32), a
negative one, an .idx that disagrees with its .bin, an empty document
(--allow-empty leaves it out, counted), a flat file without --eos, bad
.npy headers, a JSONL value that is no integer, and the usage errors.
`verify` passes on every pack made and fails on a flipped byte of the
TOKENS section.

Run with Debian's python3 (NumPy): test_pack_tokens.py BATCHD_PACK
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

from pack_cli import pack, packed, take_bin

BIN = take_bin(sys.argv)
EOS = 50256


def info(path):
    return json.loads(packed("info", path, "--json"))


def documents(path, dtype):
    """Every document of path as an array of ids, through `ls` (the count) and `cat`."""
    n = info(path)["samples"]
    lines = packed("ls", path).splitlines()
    assert len(lines) == n, (len(lines), n)
    docs = []
    for i, line in enumerate(lines):
        size = int(re.search(r"tokens=<(\d+) bytes>", line).group(1))
        p = subprocess.run([BIN, "cat", path, str(i)], capture_output=True, check=True)
        assert len(p.stdout) == size, (i, len(p.stdout), size)
        docs.append(np.frombuffer(p.stdout, dtype="<" + dtype))
    return docs


def write_megatron(prefix, seqs, dtype=np.int32, code=4, bin_extra=b""):
    """PREFIX.bin and PREFIX.idx as Megatron-LM's _IndexWriter writes them."""
    item = np.dtype(dtype).itemsize
    sizes = [len(s) for s in seqs]
    pointers, at = [], 0
    for n in sizes:
        pointers.append(at)
        at += n * item
    doc_idx = list(range(len(seqs) + 1))
    with open(prefix + ".bin", "wb") as f:
        for s in seqs:
            f.write(np.asarray(s, dtype=dtype).tobytes())
        f.write(bin_extra)
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", code))
        f.write(struct.pack("<Q", len(sizes)))
        f.write(struct.pack("<Q", len(doc_idx)))
        f.write(np.array(sizes, dtype=np.int32).tobytes())
        f.write(np.array(pointers, dtype=np.int64).tobytes())
        f.write(np.array(doc_idx, dtype=np.int64).tobytes())


class Tokens(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="pack-tokens.")
        rng = np.random.default_rng(7)
        # Documents of 1..400 ids, small ids most often as a tokenizer's are, EOS last.
        cls.docs = []
        for _ in range(120):
            n = int(rng.integers(1, 400))
            ids = np.minimum(rng.zipf(1.2, n) - 1, 50000).astype(np.uint16)
            cls.docs.append(np.append(ids, EOS).astype(np.uint16))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir)

    def path(self, name):
        return os.path.join(self.dir, name)

    def verified(self, out):
        self.assertIn(": OK: ", packed("verify", out))

    def assertDocs(self, out, want, dtype="u2"):
        got = documents(out, dtype)
        self.assertEqual(len(got), len(want))
        for i, (g, w) in enumerate(zip(got, want)):
            self.assertTrue(np.array_equal(g, np.asarray(w)), f"document {i}: {g[:8]} != {w[:8]}")

    def assertTokens(self, out, docs, width, eos):
        t = info(out)["tokens"]
        self.assertEqual(t["dtype"], "uint16" if width == 2 else "uint32")
        self.assertEqual(t["documents"], len(docs))
        self.assertEqual(t["tokens"], sum(len(d) for d in docs))
        self.assertEqual(t["eos"], eos)
        self.assertEqual(t["max_id"], max(int(np.max(d)) for d in docs))
        self.assertEqual(t["longest_document"], max(len(d) for d in docs))
        i = info(out)
        self.assertAlmostEqual(i["ratio"], i["raw_bytes"] / i["stored_bytes"], places=3)
        self.assertEqual(i["raw_bytes"], sum(len(d) for d in docs) * width)
        self.assertFalse(i["keys"])
        self.assertEqual([f["name"] for f in i["fields"]], ["tokens"])

    # ---- each kind --------------------------------------------------------------------

    def test_flat_bin_split_after_each_eos(self):
        flat = self.path("flat.bin")
        np.concatenate(self.docs).tofile(flat)
        out = self.path("flat.bpk")
        summary = packed("create", out, "--tokens", "uint16", "--eos", str(EOS), flat)
        total = sum(len(d) for d in self.docs)
        self.assertRegex(summary, rf"^{re.escape(out)}: 120 documents, {total} tokens "
                         rf"\(uint16, eos {EOS}\) in \d+ blocks; [\d.]+ MB raw, [\d.]+ MB stored "
                         rf"\(ratio \d+\.\d\d\)")
        self.assertDocs(out, self.docs)
        self.assertTokens(out, self.docs, 2, EOS)
        self.verified(out)
        # The token stream is the file: the documents end to end.
        with open(flat, "rb") as f:
            self.assertEqual(b"".join(d.tobytes() for d in documents(out, "u2")), f.read())

    def test_flat_bin_uint32_and_a_trailing_run(self):
        docs = [np.array([5, 2**31 - 1, 7], np.uint32), np.array([7], np.uint32),
                np.array([7], np.uint32), np.array([1, 2, 3], np.uint32)]
        flat = self.path("flat32.bin")
        np.concatenate(docs).tofile(flat)
        out = self.path("flat32.bpk")
        packed("create", out, "--tokens", "uint32", "--eos", "7", flat)
        # Two ids 7 in a row: a document of just the id; the last run has none and is kept.
        self.assertDocs(out, docs, "u4")
        self.assertTokens(out, docs, 4, 7)
        self.verified(out)

    def test_megatron_pair_by_prefix_bin_and_idx(self):
        seqs = [d[:-1].astype(np.int32) for d in self.docs[:40]]
        prefix = self.path("meg")
        write_megatron(prefix, seqs)
        want = [np.append(s, EOS).astype(np.uint16) for s in seqs]
        for name in (prefix, prefix + ".bin", prefix + ".idx"):
            with self.subTest(input=name):
                out = self.path(os.path.basename(name) + ".bpk")
                summary = packed("create", out, "--tokens", "uint16", "--eos", str(EOS), name)
                self.assertIn("eos appended to 40", summary)
                self.assertDocs(out, want)
                self.assertTokens(out, want, 2, EOS)
                self.verified(out)
        # Without --eos the sequences are the documents as they are.
        out = self.path("meg-plain.bpk")
        packed("create", out, "--tokens", "uint32", prefix)
        self.assertDocs(out, seqs, "u4")
        self.assertEqual(info(out)["tokens"]["eos"], None)

    def test_megatron_uint16_keeps_an_eos_already_there(self):
        seqs = [[1, 2, 9], [3], [9]]
        prefix = self.path("meg16")
        write_megatron(prefix, seqs, np.uint16, 8)
        out = self.path("meg16.bpk")
        summary = packed("create", out, "--tokens", "uint16", "--eos", "9", prefix)
        self.assertIn("eos appended to 1;", summary)
        self.assertDocs(out, [[1, 2, 9], [3, 9], [9]])

    def test_npy_2d_1d_and_dtypes(self):
        rows = np.arange(6 * 5, dtype=np.int64).reshape(6, 5) * 1000
        two = self.path("rows.npy")
        np.save(two, rows)
        out = self.path("rows.bpk")
        packed("create", out, "--tokens", "uint32", two)
        self.assertDocs(out, list(rows), "u4")
        self.assertEqual(info(out)["fields"][0]["fixed_size"], 20)
        self.verified(out)
        one = self.path("stream.npy")
        np.save(one, np.concatenate(self.docs[:10]).astype(np.int32))
        out = self.path("stream.bpk")
        packed("create", out, "--tokens", "uint16", "--eos", str(EOS), one)
        self.assertDocs(out, self.docs[:10])
        for dtype in (np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.uint64):
            with self.subTest(dtype=dtype):
                arr = self.path(f"small-{np.dtype(dtype).name}.npy")
                np.save(arr, np.array([[1, 2, 3], [4, 5, 6]], dtype=dtype))
                out = arr + ".bpk"
                packed("create", out, "--tokens", "uint16", "--eos", "6", arr)
                self.assertDocs(out, [[1, 2, 3, 6], [4, 5, 6]])

    def test_jsonl_arrays_and_objects(self):
        src = self.path("docs.jsonl")
        with open(src, "w") as f:
            f.write("[1, 2, 3]\n")
            f.write('{"text": "ignored", "input_ids": [4, 5]}\n')
            f.write("\n   \n")
            f.write('{"tokens": [6, 50256]}\r\n')
            f.write('{"ids": [65535]}\n')
        out = self.path("jsonl.bpk")
        summary = packed("create", out, "--tokens", "uint16", "--eos", str(EOS), src)
        self.assertIn("4 documents, 11 tokens", summary)
        self.assertIn("eos appended to 3", summary)
        self.assertDocs(out, [[1, 2, 3, EOS], [4, 5, EOS], [6, EOS], [65535, EOS]])
        self.assertEqual(info(out)["tokens"]["max_id"], 65535)
        self.verified(out)

    def test_kinds_mix_in_command_line_order(self):
        prefix = self.path("mixm")
        write_megatron(prefix, [[10, 11], [12]])
        jsonl = self.path("mix.jsonl")
        with open(jsonl, "w") as f:
            f.write("[20]\n[21, 22]\n")
        flat = self.path("mix.bin")
        np.array([30, 0, 31, 32, 0], np.uint16).tofile(flat)
        npy = self.path("mix.npy")
        np.save(npy, np.array([[40, 41]], np.uint8))
        out = self.path("mix.bpk")
        packed("create", out, "--tokens", "uint16", "--eos", "0", jsonl, prefix, flat, npy)
        self.assertDocs(out, [[20, 0], [21, 22, 0], [10, 11, 0], [12, 0], [30, 0], [31, 32, 0],
                              [40, 41, 0]])

    def test_shards_frames_and_blocks_keep_the_ids(self):
        docs = self.docs[:60] + [np.append(np.arange(3 * 2**20) % 50000, EOS).astype(np.uint16)]
        flat = self.path("big.bin")
        np.concatenate(docs).tofile(flat)
        out = self.path("big.bpk")
        summary = packed("create", out, "--tokens", "uint16", "--eos", str(EOS), flat)
        self.assertIn("(1 documents in frames)", summary)
        self.assertDocs(out, docs)
        self.verified(out)
        out = self.path("big-shards")
        summary = packed("create", out, "--tokens", "uint16", "--eos", str(EOS), flat,
                         "--shard-size", "2K", "--block-size", "4K", "--frame-size", "1M")
        self.assertRegex(summary, r"; \d+ shards")
        self.assertGreater(info(out)["shards"], 1)
        self.assertDocs(out, docs)
        self.assertTokens(out, docs, 2, EOS)
        self.verified(out)
        # The 128K default: blocks of whole documents, no dictionary.
        i = info(self.path("big.bpk"))
        self.assertEqual(i["dict_bytes"], 0)
        self.assertLessEqual(i["max_block"], 4 << 20)

    # ---- what is refused ------------------------------------------------------------

    def refused(self, args, *needles, rc=1):
        out = self.path("refused.bpk")
        code, _, err = pack("create", out, *args)
        self.assertEqual(code, rc, err)
        for needle in needles:
            self.assertIn(needle, err)
        self.assertFalse(os.path.exists(out))
        self.assertEqual([f for f in os.listdir(self.dir) if f.startswith(".refused")], [])
        return err

    def test_an_id_over_uint16_names_file_document_token_and_fix(self):
        prefix = self.path("wide")
        write_megatron(prefix, [[1, 2, 3], [4, 5, 70000, 6]])
        self.refused(["--tokens", "uint16", prefix],
                     f"{prefix}.bin: sequence 1, token 2: id 70000 does not fit uint16 "
                     "(0..65535): use --tokens uint32")
        out = self.path("wide.bpk")
        packed("create", out, "--tokens", "uint32", prefix)
        self.assertDocs(out, [[1, 2, 3], [4, 5, 70000, 6]], "u4")
        jsonl = self.path("wide.jsonl")
        with open(jsonl, "w") as f:
            f.write("[1]\n[2, 3, 65536]\n")
        self.refused(["--tokens", "uint16", jsonl],
                     f"{jsonl}:2: token 2: id 65536 does not fit uint16", "use --tokens uint32")
        npy = self.path("wide.npy")
        np.save(npy, np.array([[1, 2], [3, 2**31]], np.int64))
        self.refused(["--tokens", "uint32", npy], f"{npy}: row 1, token 1: id 2147483648 "
                     "does not fit uint32 as batchd delivers ids (int32: 0..2147483647)")

    def test_negative_and_non_integer_ids(self):
        prefix = self.path("neg")
        write_megatron(prefix, [[1, -2]])
        self.refused(["--tokens", "uint32", prefix],
                     f"{prefix}.bin: sequence 0, token 1: id -2 is negative")
        jsonl = self.path("float.jsonl")
        with open(jsonl, "w") as f:
            f.write('[1]\n{"input_ids": [1, 2.5]}\n')
        self.refused(["--tokens", "uint16", jsonl], f"{jsonl}:2: token 1 is 2.5, not an integer id")
        with open(jsonl, "w") as f:
            f.write('["7"]\n')
        self.refused(["--tokens", "uint16", jsonl], f"{jsonl}:1: token 0 is \"7\" (a JSON string)")
        with open(jsonl, "w") as f:
            f.write('{"text": "no ids"}\n')
        self.refused(["--tokens", "uint16", jsonl], f"{jsonl}:1: neither a JSON array")

    def test_an_idx_that_disagrees_with_its_bin(self):
        prefix = self.path("short")
        write_megatron(prefix, [[1, 2, 3], [4, 5]])
        with open(prefix + ".bin", "r+b") as f:
            f.truncate(14)
        self.refused(["--tokens", "uint16", prefix],
                     f"{prefix}.idx: sequence 1 ends at byte 20, past {prefix}.bin's 14 bytes: "
                     "the .idx does not belong to this .bin; rebuild it")
        write_megatron(prefix, [[1, 2, 3]], bin_extra=b"\0" * 8)
        self.refused(["--tokens", "uint16", prefix],
                     f"{prefix}.idx: its sequences end at byte 12, but {prefix}.bin has 20 bytes")
        os.remove(prefix + ".bin")
        self.refused(["--tokens", "uint16", prefix + ".idx"], "needs its", ".bin beside it")

    def test_an_empty_document(self):
        prefix = self.path("holes")
        write_megatron(prefix, [[1], [], [2]])
        self.refused(["--tokens", "uint16", prefix],
                     f"{prefix}.bin: sequence 1: an empty document", "--allow-empty")
        jsonl = self.path("holes.jsonl")
        with open(jsonl, "w") as f:
            f.write("[1]\n[]\n[2]\n")
        self.refused(["--tokens", "uint16", jsonl], f"{jsonl}:2: an empty document")
        out = self.path("holes.bpk")
        summary = packed("create", out, "--tokens", "uint16", "--allow-empty", prefix, jsonl)
        self.assertIn("2 empty documents left out", summary)
        self.assertDocs(out, [[1], [2], [1], [2]])

    def test_a_flat_file_needs_eos(self):
        flat = self.path("noeos.bin")
        np.array([1, 2, 3], np.uint16).tofile(flat)
        self.refused(["--tokens", "uint16", flat],
                     f"{flat}: a flat token file has no document boundaries: give --eos ID "
                     "(the id that ends each document), or pack a .idx/.jsonl")
        npy = self.path("noeos.npy")
        np.save(npy, np.array([1, 2, 3], np.uint16))
        self.refused(["--tokens", "uint16", npy], f"{npy}: a 1-D array is a flat token stream")
        odd = self.path("odd.bin")
        with open(odd, "wb") as f:
            f.write(b"\1\0\2\0\3")
        self.refused(["--tokens", "uint16", "--eos", "3", odd],
                     f"{odd}: size 5 is not a multiple of 2 bytes")

    def test_bad_npy_headers(self):
        cases = {
            "float": (np.zeros((2, 2), np.float32), "holds floating-point numbers"),
            "big-endian": (np.zeros((2, 2), ">u2"), "is big-endian"),
            "fortran": (np.asfortranarray(np.zeros((2, 3), np.uint16)), "Fortran-ordered"),
            "3d": (np.zeros((1, 2, 2), np.uint16), "more than 2 dimensions"),
        }
        for name, (arr, needle) in cases.items():
            with self.subTest(case=name):
                npy = self.path(f"bad-{name}.npy")
                np.save(npy, arr)
                self.refused(["--tokens", "uint16", "--eos", "0", npy], f"{npy}: ", needle)
        npy = self.path("bad-truncated.npy")
        np.save(npy, np.zeros((4, 4), np.uint16))
        with open(npy, "r+b") as f:
            f.truncate(os.path.getsize(npy) - 2)
        self.refused(["--tokens", "uint16", npy], "shape (4, 4) of uint16 needs 32 bytes")
        with open(npy, "r+b") as f:
            f.seek(10)
            f.write(b"{'descr': '<u2', 'fortran_order': False, 'shape': (4, 4), 'x': 1}")
        self.refused(["--tokens", "uint16", npy], "header key 'x' is not one of")
        with open(npy, "wb") as f:
            f.write(b"\x93NUMPY\x01\x00\xff\xff")
        self.refused(["--tokens", "uint16", npy], "header of 65535 bytes")

    def test_usage_errors(self):
        flat = self.path("usage.bin")
        np.array([1, 2], np.uint16).tofile(flat)
        for args, needle in [
                (["--tokens", "int8", flat], "--tokens: 'int8' is not a token type"),
                (["--eos", "1", flat], "--eos: only with --tokens"),
                (["--tokens", "uint16", "--eos", "65536", flat],
                 "--eos: 65536 is not a uint16 token id (0..65535)"),
                (["--tokens", "uint32", "--eos", str(2**31), flat], "(0..2147483647)"),
                (["--tokens", "uint16", "--eos", "1", "--labels", "dirname", flat],
                 "--tokens: not with --labels"),
                (["--tokens", "uint16", "--eos", "1", "--group-by", "key", flat],
                 "--tokens: not with --group-by"),
                (["--tokens", "uint16", "--records", "4", flat], "--tokens: not with --records"),
                (["--tokens", "uint16", "--eos", "1", "--max-side", "64", flat],
                 "--tokens: not with --max-side"),
                (["--tokens", "uint16", "--eos", "1", "--check-images", flat],
                 "--tokens: not with --check-images"),
                (["--tokens", "uint16", "--eos", "1", "--no-keys", flat],
                 "--tokens: not with --no-keys"),
                (["--tokens", "uint32", "--eos", "1", "--frame-size", "4098", flat],
                 "--frame-size: with --tokens uint32, a multiple of 4 bytes")]:
            with self.subTest(args=args):
                err = self.refused(args, needle, rc=2)
                self.assertEqual(len(err.strip().splitlines()), 2, err)
                self.assertIn("Try 'batchd-pack --help'", err)

    def test_a_file_changed_after_the_scan(self):
        """What the scan saw is what is packed: a document boundary moved or a file grown
        between the scan and the reads stops the pack (needs -Dfault_injection=true:
        BATCHD_PACK_AFTER_SCAN runs there, else skipped)."""
        flat = self.path("moving.bin")
        jsonl = self.path("moving.jsonl")
        marker = self.path("after-scan-ran")
        edit = ("import numpy as np, sys; a = np.fromfile(sys.argv[1], np.uint16); "
                "a[int(sys.argv[2])] = int(sys.argv[3]); a.tofile(sys.argv[1])")
        np.array([5, 0], np.uint16).tofile(flat)
        subprocess.run([BIN, "create", self.path("probe.bpk"), "--tokens", "uint16", "--eos",
                        "0", flat], capture_output=True, timeout=60,
                       env=dict(os.environ, BATCHD_PACK_AFTER_SCAN=f"touch {marker}"))
        if not os.path.exists(marker):
            self.skipTest("built without -Dfault_injection=true")
        os.remove(marker)
        cases = [
            ([flat, "1", "0"], "its document boundaries are not those the scan found"),
            ([flat, "0", "0"], "its document boundaries are not those the scan found"),
        ]
        for argv, needle in cases:
            with self.subTest(argv=argv):
                np.array([5, 6, 0, 7, 0], np.uint16).tofile(flat)
                cmd = f"touch {marker} && /usr/bin/python3 -c '{edit}' {' '.join(argv)}"
                out = self.path("moving.bpk")
                p = subprocess.run([BIN, "create", out, "--tokens", "uint16", "--eos", "0", flat],
                                   capture_output=True, text=True, timeout=60,
                                   env=dict(os.environ, BATCHD_PACK_AFTER_SCAN=cmd))
                os.remove(marker)
                self.assertEqual(p.returncode, 1, p.stderr)
                self.assertIn(f"{flat}: document 0: " + needle, p.stderr)
                self.assertIn("the input changed while packing", p.stderr)
                self.assertFalse(os.path.exists(out))
        with open(jsonl, "w") as f:
            f.write("[1, 2]\n[3]\n")
        cmd = f"touch {marker} && printf '[1, 2, 4]\\n[3]\\n' > {jsonl}"
        p = subprocess.run([BIN, "create", self.path("moving2.bpk"), "--tokens", "uint16", jsonl],
                           capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, BATCHD_PACK_AFTER_SCAN=cmd))
        self.assertTrue(os.path.exists(marker))
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn(f"{jsonl}: changed size since the scan", p.stderr)
        self.assertFalse(os.path.exists(self.path("moving2.bpk")))

    # ---- verify ---------------------------------------------------------------------

    def test_verify_fails_on_a_flipped_byte_of_the_tokens_section(self):
        flat = self.path("v.bin")
        np.concatenate(self.docs[:20]).tofile(flat)
        out = self.path("v.bpk")
        packed("create", out, "--tokens", "uint16", "--eos", str(EOS), flat)
        self.verified(out)
        with open(out, "rb") as f:
            data = bytearray(f.read())
        # The section table entry of kind 9 says where the section is (PACK.md).
        index_offset, index_size, blocks, samples = struct.unpack_from("<4Q", data, len(data) - 80)
        table = index_offset + blocks * 56 + samples * 16
        entries = [struct.unpack_from("<IIQQQ", data, table + 32 * i)
                   for i in range((index_size - blocks * 56 - samples * 16) // 32)]
        sec = [e for e in entries if e[0] == 9]
        self.assertEqual(len(sec), 1)
        self.assertEqual(sec[0][3], 48)
        for at in (0, 24, 32, 47):
            with self.subTest(byte=at):
                bad = bytearray(data)
                bad[sec[0][2] + at] ^= 0x01
                broken = self.path("v-broken.bpk")
                with open(broken, "wb") as f:
                    f.write(bad)
                rc, _, err = pack("verify", broken)
                self.assertEqual(rc, 1, err)
                self.assertIn("section checksum mismatch", err)
                os.remove(broken)


if __name__ == "__main__":
    unittest.main()
