#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""gen-remote-map-corpus.py - the seed corpus of tests/fuzz/fuzz-remote-map.c:
remote cache map files (BDCMAP3, daemon/remote/remote_map.c) for chunks of
64 KiB, good and broken one rule at a time. The closing hash is left zero:
the target replaces it with the right one too. Run by hand, output committed:

    tests/fuzz/gen-remote-map-corpus.py tests/fuzz/corpus/remote-map
"""
import os
import struct
import sys

CHUNK = 64 << 10


def mapfile(size, present, bucket=b"bkt", key=b"ds/a.bpk", etag=b'"e1"', chunk=CHUNK,
            nchunks=None, count=None, magic=b"BDCMAP3\n"):
    n = (size + chunk - 1) // chunk if nchunks is None else nchunks
    head = magic + struct.pack("<IIQHHHH", chunk, n, size, len(bucket), len(key), len(etag), 0)
    body = bucket + key + etag + struct.pack("<I", len(present) if count is None else count)
    body += b"".join(struct.pack("<IQ", i, 0x1234567890ABCDEF ^ i) for i in present)
    return head + body + bytes(8)


CASES = {
    "good.map": mapfile(5 * CHUNK + 100, [0, 2, 5]),
    "good-none.map": mapfile(CHUNK, []),
    "good-plain-url.map": mapfile(3 * CHUNK, [1], bucket=b"", key=b"https://h/x.bpk"),
    "unsorted.map": mapfile(5 * CHUNK, [3, 1]),
    "repeated.map": mapfile(5 * CHUNK, [1, 1]),
    "index-past-end.map": mapfile(5 * CHUNK, [0, 5]),
    "count-over-chunks.map": mapfile(2 * CHUNK, [0, 1], count=3),
    "count-huge.map": mapfile(2 * CHUNK, [0], count=0xFFFFFFFF),
    "nchunks-wrong.map": mapfile(5 * CHUNK, [0], nchunks=6),
    "other-chunk.map": mapfile(5 * CHUNK, [0], chunk=4 << 20),
    "over-5tib.map": mapfile((5 << 40) + 1, [0], nchunks=((5 << 40) + CHUNK) // CHUNK),
    "5tib.map": mapfile(5 << 40, [0, (5 << 40) // CHUNK - 1]),
    "empty-key.map": mapfile(CHUNK, [0], key=b""),
    "long-etag.map": mapfile(CHUNK, [0], etag=b'"' + b"e" * 300 + b'"'),
    "old-magic.map": mapfile(CHUNK, [0], magic=b"BDCMAP1\n"),
    "truncated.map": mapfile(5 * CHUNK, [0, 2])[:60],
    "header-only.map": mapfile(CHUNK, [0])[:32],
}


def main(out):
    os.makedirs(out, exist_ok=True)
    for name, data in CASES.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main(sys.argv[1])
