# SPDX-License-Identifier: MIT
"""What the Python benchmarks under tools/ share: a batchd of their own.

The scripts run from the source tree (tools/ is on their sys.path as the
directory of the script), with batchclient importable from
client/python.
"""
import subprocess
import time


def start_batchd(argv, sock, log):
    """Start batchd with argv (its socket is sock, its output goes to log)
    and wait until it answers a status request; the Popen. RuntimeError
    when it exits or does not answer within 5 s. --no-config goes right
    after argv[0], so that a batchd.conf on the machine cannot change what
    is measured (a -c FILE in argv still wins: the later of the two does)."""
    import batchclient
    argv = [argv[0], "--no-config", *argv[1:]]
    p = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    for _ in range(500):
        if p.poll() is not None:
            raise RuntimeError(f"batchd exited with {p.returncode}; see {log.name}")
        try:
            batchclient.status(sock)
            return p
        except batchclient.ConnectError:
            time.sleep(0.01)
    p.kill()
    raise RuntimeError(f"batchd did not answer on {sock}")
