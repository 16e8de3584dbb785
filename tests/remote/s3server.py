#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""s3server.py - moto's S3 server on a loopback port, with one empty bucket.

The remote-dataset tests' S3 server (tests/remote/s3lib.sh starts it, behind
s3proxy.py). moto (pinned in tests/remote/requirements.txt, installed into a
venv of its own by s3_install) implements the S3 REST protocol in memory:
HEAD, ranged GET, ListObjectsV2 with continuation tokens, PUT, multipart
upload with S3's part-size minimum, ETags, If-Match, S3's XML errors. This
file only starts it where the harness wants it:

    s3server.py --listen 127.0.0.1:0 --bucket batchd-test

Port 0 lets the kernel pick a free port; once the bucket exists the server
prints "moto listening on HOST:PORT" (s3lib.sh waits for that line) and runs
until SIGTERM or SIGINT. It runs under the venv's python, never Debian's.

One change to moto's behaviour, for speed and not for what it answers: moto
reads a whole object into memory to answer a ranged GET of it, so a test
that reads an 80 MB object in 64 KiB chunks would copy 100 GB. The range is
cut from the object's buffer instead (FakeKey.value is read through a
seek). The bytes, status and headers are moto's own (ranged_value below).
"""
import argparse
import signal
import sys
import threading

from moto.moto_server.threaded_moto_server import ThreadedMotoServer


def patch_ranged_reads():
    """Ranged GETs read only their range of the object's buffer.

    moto's S3Response answers a Range header by slicing key.value, the whole
    object. This wraps the GET handler so that, for one satisfiable
    "bytes=B-E" range, key.value yields a view object whose slice reads
    only bytes B..E of the buffer; anything else (suffix ranges, several
    ranges, no range) goes through moto untouched.
    """
    from moto.s3 import models

    class RangedValue:
        """What key.value returns while a ranged GET is answered: len() is the
        object's size and [b:e] reads those bytes of the buffer alone."""

        def __init__(self, key):
            self.key = key

        def __len__(self):
            return self.key.contentsize

        def __getitem__(self, s):
            if not isinstance(s, slice) or s.step not in (None, 1):
                return self.key.full_value()[s]
            b, e, _ = s.indices(self.key.contentsize)
            with self.key.lock:
                self.key._value_buffer.seek(b)
                return self.key._value_buffer.read(max(0, e - b))

        def __bytes__(self):
            return self.key.full_value()

    local = threading.local()
    orig_value = models.FakeKey.value

    def value(self):
        if getattr(local, "ranged", False):
            return RangedValue(self)
        return orig_value.fget(self)

    models.FakeKey.full_value = lambda self: orig_value.fget(self)
    models.FakeKey.value = property(value, orig_value.fset)

    from moto.s3 import responses

    orig_range = responses.S3Response._handle_range_header
    orig_key_response = responses.S3Response.key_response

    def handle_range(self, request, response_headers, response_content):
        # A reply that is not one "bytes=B-E" range gets the whole object
        # as bytes, as moto gives it.
        if isinstance(response_content, RangedValue):
            rng = request.headers.get("range", "").replace(" ", "")
            if not (rng.startswith("bytes=") and "," not in rng and not rng[6:].startswith("-")):
                response_content = bytes(response_content)
        return orig_range(self, request, response_headers, response_content)

    def key_response(self, request, full_url, headers):
        local.ranged = request.method == "GET" and bool(request.headers.get("range"))
        try:
            status, headers, body = orig_key_response(self, request, full_url, headers)
        finally:
            local.ranged = False
        if isinstance(body, RangedValue):  # not answered as a range after all
            body = bytes(body)
        return status, headers, body

    responses.S3Response._handle_range_header = handle_range
    responses.S3Response.key_response = key_response


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (port 0: any free one)")
    ap.add_argument("--bucket", action="append", default=[], help="a bucket to create (repeatable)")
    ap.add_argument("--no-range-patch", action="store_true",
                    help="answer ranged GETs as moto does, reading the whole object")
    args = ap.parse_args()
    host, _, port = args.listen.rpartition(":")
    if not args.no_range_patch:
        patch_ranged_reads()

    server = ThreadedMotoServer(ip_address=host, port=int(port), verbose=False)
    server.start()
    host, port = server.get_host_and_port()

    import boto3
    from botocore.config import Config
    s3 = boto3.client("s3", endpoint_url=f"http://{host}:{port}", region_name="us-east-1",
                      aws_access_key_id="setup", aws_secret_access_key="setup",
                      config=Config(retries={"max_attempts": 1}))
    for b in args.bucket:
        s3.create_bucket(Bucket=b)

    print(f"moto listening on {host}:{port}", flush=True)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
