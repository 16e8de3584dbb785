#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""tools/bench/bench-vs-torch.py reads its --record-size as batchd reads a size
(lib/proto/units.c, bp_parse_size; docs/operations.md, configuration): K, M, G, T and
KiB..TiB are powers of 1024, KB..TB powers of 1000, letters in any case,
blanks before the unit, a fraction only with a unit (rounded down to whole
bytes). A size batchd would refuse is refused with the forms it takes.

usage: test-bench-sizes.py TOOLS_DIR
Prints "ok - ..." or "FAIL - ..." a check; exit status 0 when none failed.
"""
import argparse
import importlib.util
import os
import sys

ACCEPTED = {
    "4096": 4096, "1": 1, "10B": 10, "10 b": 10,
    "8K": 8 << 10, "8k": 8 << 10, "8KiB": 8 << 10, "8kib": 8 << 10, "8 KiB": 8 << 10,
    "512M": 512 << 20, "1.5 GiB": 1610612736, "1.5G": 1610612736, "2T": 2 << 40,
    "1KB": 1000, "2GB": 2 * 10 ** 9, "1.5 MB": 1500000, "3TB": 3 * 10 ** 12,
    "1.0001K": 1024, "0.5KiB": 512,
}
FORMS = "K, M, G, T or KiB, MiB, GiB, TiB (powers of 1024), KB, MB, GB, TB (powers of 1000)"
REFUSED = {t: FORMS for t in ("", "x", "K", "-1", "1.5", "1.5B", ".5K", "1.K", "8KX", "8 K B",
                              "8Ki", "1P", " 8K", "8K ")}
REFUSED.update({"0": "must be at least 1 byte", "0K": "must be at least 1 byte"})


def main(argv):
    sys.path.insert(0, argv[1])
    spec = importlib.util.spec_from_file_location("bench_vs_torch",
                                                  os.path.join(argv[1], "bench-vs-torch.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    failed = 0
    for text, want in ACCEPTED.items():
        try:
            got = mod.size_arg(text)
        except argparse.ArgumentTypeError as e:
            got = f"refused: {e}"
        if got == want:
            print(f"ok - {text!r} is {want} bytes")
        else:
            print(f"FAIL - {text!r}: {got}, expected {want} bytes")
            failed += 1
    for text in REFUSED:
        try:
            got = mod.size_arg(text)
            print(f"FAIL - {text!r} is accepted as {got} bytes")
            failed += 1
        except argparse.ArgumentTypeError as e:
            if REFUSED[text] in str(e) and repr(text) in str(e):
                print(f"ok - {text!r} is refused: {e}")
            else:
                print(f"FAIL - {text!r} is refused without naming it and \"{REFUSED[text]}\": {e}")
                failed += 1
    print(f"{len(ACCEPTED) + len(REFUSED) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
