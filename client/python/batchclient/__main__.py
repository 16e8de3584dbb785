# SPDX-License-Identifier: MIT
"""`python -m batchclient [--socket PATH] [--json]`: batchclient.check()'s
report (the library and where it was looked for, NumPy, torch, the daemon's
socket and whether it answers). Exit status 0 when libbatchclient is
usable, 1 when not: a setup script can test it."""
import sys

from ._check import main

sys.exit(main())
