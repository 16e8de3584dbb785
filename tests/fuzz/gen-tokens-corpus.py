#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""gen-tokens-corpus.py - the seed corpus of tests/fuzz/fuzz-tokens.c: a
selector byte (0 .npy, 1 .idx, 2 TOKENS section, 3 JSONL line, 4 ids to
convert) then the input, good and broken one rule at a time. The .npy
headers are written here by hand as numpy writes them (so no numpy is
needed), the .idx files as Megatron-LM's _IndexWriter writes them. Run by
hand, output committed:

    tests/fuzz/gen-tokens-corpus.py tests/fuzz/corpus/tokens
"""
import os
import struct
import sys


def npy(descr, shape, data, fortran=False, version=1):
    dims = "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    head = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, dims)
    pre = 10 if version == 1 else 12
    head += " " * ((64 - (pre + len(head) + 1) % 64) % 64) + "\n"
    size = struct.pack("<H", len(head)) if version == 1 else struct.pack("<I", len(head))
    return b"\x00" + b"\x93NUMPY" + bytes([version, 0]) + size + head.encode() + data


def u16(*ids):
    return b"".join(struct.pack("<H", i) for i in ids)


def idx(seqs, item=4, code=4, bin_size=None, doc_count=None, lie=None):
    sizes = [len(s) for s in seqs]
    ptrs, at = [], 0
    for n in sizes:
        ptrs.append(at)
        at += n * item
    if lie:
        ptrs[lie] += item
    docs = list(range(len(seqs) + 1))
    body = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, code, len(sizes),
                                             len(docs) if doc_count is None else doc_count)
    body += b"".join(struct.pack("<i", n) for n in sizes)
    body += b"".join(struct.pack("<q", p) for p in ptrs)
    body += b"".join(struct.pack("<q", d) for d in docs)
    return b"\x01" + struct.pack("<Q", at if bin_size is None else bin_size) + body


def tokens(version=1, width=2, eos=50256, count=1000, docs=7, max_id=50256, reserved=0):
    return b"\x02" + struct.pack("<IIQQQQQ", version, width, eos, count, docs, max_id, reserved)


CASES = {
    "npy-u16-1d": npy("<u2", (6,), u16(1, 2, 50256, 3, 4, 50256)),
    "npy-i32-2d": npy("<i4", (2, 3), struct.pack("<6i", 1, 2, 3, 4, 5, 6)),
    "npy-u1-2d-v2": npy("|u1", (2, 2), bytes([1, 2, 3, 4]), version=2),
    "npy-i8-v3": npy("<i8", (1,), struct.pack("<q", -1), version=3),
    "npy-fortran": npy("<u2", (2, 2), u16(1, 2, 3, 4), fortran=True),
    "npy-bigendian": npy(">u2", (2,), b"\x00\x01\x00\x02"),
    "npy-float": npy("<f4", (1,), b"\x00" * 4),
    "npy-3d": npy("<u2", (1, 1, 1), u16(1)),
    "npy-short": npy("<u2", (4,), u16(1, 2)),
    "npy-zero-cols": npy("<u2", (3, 0), b""),
    "npy-no-magic": b"\x00" + b"NUMPY" + bytes(40),
    "idx-good": idx([[1, 2, 3], [4, 5], [6]]),
    "idx-uint16": idx([[1, 2], [3]], item=2, code=8),
    "idx-empty-seq": idx([[1], [], [2]]),
    "idx-short-bin": idx([[1, 2, 3], [4]], bin_size=12),
    "idx-gap": idx([[1, 2], [3, 4]], lie=1),
    "idx-float": idx([[1]], item=8, code=6),
    "idx-doc-count": idx([[1], [2]], doc_count=2),
    "tokens-good": tokens(),
    "tokens-no-eos": tokens(width=4, eos=(1 << 64) - 1, max_id=(1 << 31) - 1),
    "tokens-wide-id": tokens(width=4, max_id=1 << 31),
    "tokens-width3": tokens(width=3),
    "tokens-reserved": tokens(reserved=1),
    "jsonl-array": b"\x03\x00[1, 2, 3, 50256]",
    "jsonl-object": b'\x03\x01{"text": "x", "input_ids": [70000, 1]}',
    "jsonl-float": b"\x03\x00[1, 2.5]",
    "jsonl-big": b"\x03\x00[99999999999999999999999]",
    "jsonl-negative": b"\x03\x00[-1]",
    "jsonl-not-json": b"\x03\x00[1, 2",
    "convert-u16": b"\x04\x02" + u16(1, 2, 65535),
    "convert-i32-wide": b"\x04\x0d" + struct.pack("<3i", 5, -1, 7),
    "convert-u64": b"\x04\x0e" + struct.pack("<2Q", 3, 1 << 40),
}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, data in CASES.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
        print(f"{name:24} {len(data):5} bytes")


if __name__ == "__main__":
    main()
