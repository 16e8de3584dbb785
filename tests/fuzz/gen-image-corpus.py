#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Writes fuzz-image's seed corpus: small real images (an Adwaita icon, from
adwaita-icon-theme) in every kind the library decodes, and broken ones:
truncated, bytes flipped, a header claiming 60000 x 60000. Run by hand with
Debian's python3 (PIL); the output is committed:
    tests/fuzz/gen-image-corpus.py tests/fuzz/corpus/image
"""
import io
import os
import struct
import sys
import zlib

from PIL import Image

SRC = "/usr/share/icons/Adwaita/48x48/places/folder-documents.png"


def main(out):
    os.makedirs(out, exist_ok=True)
    icon = Image.open(SRC)
    rgb = icon.convert("RGB").resize((40, 30))
    good = {}
    for name, im, kw in [
            ("baseline.jpg", rgb, dict(format="JPEG", quality=80)),
            ("progressive.jpg", rgb, dict(format="JPEG", quality=80, progressive=True)),
            ("gray.jpg", rgb.convert("L"), dict(format="JPEG")),
            ("cmyk.jpg", rgb.convert("CMYK"), dict(format="JPEG")),
            ("subsampled.jpg", rgb.resize((37, 29)), dict(format="JPEG", subsampling=2)),
            ("rgb.png", rgb, dict(format="PNG")),
            ("rgba.png", icon.convert("RGBA").resize((24, 24)), dict(format="PNG")),
            ("palette.png", rgb.convert("P"), dict(format="PNG")),
            ("interlaced.png", rgb, dict(format="PNG", interlace=1)),
            ("gray.png", rgb.convert("L"), dict(format="PNG")),
            ("lossy.webp", rgb, dict(format="WEBP", quality=70)),
            ("lossless.webp", rgb, dict(format="WEBP", lossless=True))]:
        buf = io.BytesIO()
        im.save(buf, **kw)
        good[name] = buf.getvalue()
    for name, b in good.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(b)
        with open(os.path.join(out, "truncated-" + name), "wb") as f:
            f.write(b[: len(b) * 2 // 3])
        flipped = bytearray(b)
        for i in range(len(b) // 3, len(b), 41):
            flipped[i] ^= 0x24
        with open(os.path.join(out, "flipped-" + name), "wb") as f:
            f.write(bytes(flipped))
    j = bytearray(good["baseline.jpg"])
    sof = j.index(b"\xff\xc0")
    j[sof + 5:sof + 9] = struct.pack(">HH", 60000, 60000)
    with open(os.path.join(out, "bomb.jpg"), "wb") as f:
        f.write(bytes(j))
    p = bytearray(good["rgb.png"])
    p[16:24] = struct.pack(">II", 60000, 60000)
    p[29:33] = struct.pack(">I", zlib.crc32(bytes(p[12:29])))
    with open(os.path.join(out, "bomb.png"), "wb") as f:
        f.write(bytes(p))
    with open(os.path.join(out, "gif"), "wb") as f:
        f.write(b"GIF89a\x01\x00\x01\x00\x00\x00\x00;")


if __name__ == "__main__":
    main(sys.argv[1])
