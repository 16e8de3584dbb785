# SPDX-License-Identifier: MIT
"""What the Python benchmarks under tools/ share: a batchd of their own.

The scripts run from the source tree (tools/bench/ is on their sys.path as the
directory of the script), with batchclient importable from
client/python.
"""
import subprocess
import time


def start_batchd(argv, sock, log, preexec_fn=None, timeout_s=5):
    """Start batchd with argv (its socket is sock, its output goes to the
    file object log; preexec_fn runs in the child before exec, as
    subprocess's) and wait until it answers a status request; the Popen.
    RuntimeError when it exits or does not answer within timeout_s.
    --no-config goes right after argv[0], so that a batchd.conf on the
    machine cannot change what is measured (a -c FILE in argv still wins:
    the later of the two does)."""
    import batchclient
    argv = [argv[0], "--no-config", *argv[1:]]
    p = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                         preexec_fn=preexec_fn)
    for _ in range(int(timeout_s * 100)):
        if p.poll() is not None:
            raise RuntimeError(f"batchd exited with {p.returncode}; see {log.name}")
        try:
            batchclient.status(sock)
            return p
        except batchclient.ConnectError:
            time.sleep(0.01)
    p.kill()
    raise RuntimeError(f"batchd did not answer on {sock}; see {log.name}")
