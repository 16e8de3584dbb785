# SPDX-License-Identifier: MIT
"""pack_cli.py - what the Python end-to-end tests of batchd-pack share
(test_pack_max_side.py, test_pack_tokens.py): the binary named on their
command line, and running it."""
import os
import subprocess

BIN = None


def take_bin(argv):
    """The binary: argv[1], taken out of argv so unittest does not see it
    (build/tools/batchd-pack when none is given)."""
    global BIN
    BIN = os.path.abspath(argv.pop(1) if len(argv) > 1 else "build/tools/batchd-pack")
    return BIN


def pack(*args):
    """batchd-pack ARGS: (exit status, stdout, stderr)."""
    p = subprocess.run([BIN, *args], capture_output=True, timeout=120)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def packed(*args):
    """batchd-pack ARGS' stdout; an AssertionError with its stderr when it fails."""
    rc, out, err = pack(*args)
    if rc:
        raise AssertionError(f"batchd-pack {' '.join(args)}: exit {rc}: {err}")
    return out
