#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The interpreter running this has exactly the packages a requirements file
pins, and imports what the python tests need from them: the first test of a
second run of the suite (tests/python/meson.build), so that a venv without
torch, or with another torch than the one pinned, fails there instead of
letting every torch test skip (exit 77) or pass against the wrong version.

    python check_pins.py tests/python/requirements-torch2.txt
"""
import importlib
import importlib.metadata
import re
import sys
import time


def pins(path):
    """{distribution name, normalized: version} of every NAME==VERSION line."""
    out = {}
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            m = re.fullmatch(r"([A-Za-z0-9._-]+)(\[[^]]*\])?==([^\s;]+)", line)
            if not m:
                raise SystemExit(f"{path}: not a NAME==VERSION pin: {line!r}")
            out[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(3)
    return out


def main():
    want = pins(sys.argv[1])
    bad = []
    for name, version in sorted(want.items()):
        try:
            have = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            have = None
        if have != version:
            bad.append(f"{name}: pinned {version}, installed {have}")
    # Each import's time goes to stderr as it ends (unbuffered), so a run
    # that overruns its timeout shows whether an import or the exit took it.
    for mod in ("torch", "numpy", "PIL", "xxhash"):
        start = time.monotonic()
        try:
            importlib.import_module(mod)
        except ImportError as e:
            bad.append(f"import {mod}: {e}")
        print(f"import {mod}: {time.monotonic() - start:.1f} s", file=sys.stderr)
    if bad:
        print(f"{sys.executable} does not hold {sys.argv[1]}:\n  " + "\n  ".join(bad))
        return 1
    import torch
    print(f"{sys.executable}: {len(want)} pins as in {sys.argv[1]}; torch {torch.__version__}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
