#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""s3hostile: an S3 server that lies on purpose, for tests/remote/test_hostile.py.

Why it exists: moto (tests/remote/s3server.py) is an honest S3 server and
s3proxy.py can only spoil what moto says. The remote path must also hold
against a server that claims sizes it does not have, trickles its bytes,
pages a listing forever, redirects elsewhere or puts header bytes in an
ETag. This one serves a bucket from a JSON description and does what the
description says, unsigned (the daemons under test run without
credentials), and counts what it was asked.

Control endpoint (under /__hostile, never counted):
  POST /__hostile/config  replaces the bucket, a JSON object:
      {"objects": {KEY: OBJ, ...}, "listings": {PREFIX: LIST, ...}}
    OBJ: {"file": PATH (the bytes; default none: zeros),
          "claim": N (the size HEAD and listings say; default the file's),
          "etag": "\\"...\\"" (default a hash of the key),
          "rate": BYTES_PER_SECOND (a GET's body trickles at that rate),
          "slow_from": OFFSET, "slow_to": OFFSET (only GETs whose range
            starts in [slow_from, slow_to) trickle; default all),
          "status": CODE (every request on it answers CODE),
          "location": URL (with status 301/307: the Location header),
          "region": NAME (x-amz-bucket-region on that reply)}
    LIST: {"endless": true (every page truncated, with a new token),
           "generate": {"count": N, "size": S, "suffix": ".bpk"}
             (N keys PREFIXk000000.bpk... of claimed size S, bytes zeros),
           "etag": "..." (the ETag listed for generated keys)}
    Objects below a prefix are listed under it too.
  GET  /__hostile/stats   {"requests": N, "by_method": {...}, "lists": N,
                           "gets": N, "trickling": GETs trickling now,
                           "trickling_keys": {KEY: GETs of it trickling now},
                           "headers": [[NAME, VALUE]...] of every request
                           (the last 1000), "open": live connections}
  POST /__hostile/reset   the counts cleared (trickling and open are gauges: kept)

    s3hostile.py [--listen 127.0.0.1:0] [--port-file FILE]

Standard library only.
"""
import argparse
import hashlib
import http.server
import json
import os
import re
import socketserver
import sys
import threading
import time
import urllib.parse
from xml.sax.saxutils import escape

PAGE = 1000


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.config = {"objects": {}, "listings": {}}
        # Gauges of what is going on now: a reset leaves them be.
        self.trickling = 0
        self.trickling_keys = {}
        self.open = 0
        self.reset()

    def reset(self):
        """The counts cleared (not the gauges, trickling and open)."""
        with self.lock:
            self.requests = 0
            self.by_method = {}
            self.lists = 0
            self.gets = 0
            self.headers = []

    def counted(self, method, headers):
        with self.lock:
            self.requests += 1
            self.by_method[method] = self.by_method.get(method, 0) + 1
            self.headers.extend(headers)
            del self.headers[:-1000]


STATE = State()


def default_etag(key):
    return '"' + hashlib.md5(key.encode()).hexdigest() + '"'


def object_size(obj):
    if "claim" in obj:
        return int(obj["claim"])
    return os.path.getsize(obj["file"]) if "file" in obj else 0


def generated(prefix, spec, start, n):
    """(key, size, etag) of generated keys start..start+n below prefix."""
    out = []
    for i in range(start, min(start + n, spec["count"])):
        key = f"{prefix}k{i:06d}{spec.get('suffix', '.bpk')}"
        out.append((key, spec["size"], spec.get("etag", default_etag(key))))
    return out


def lookup(key):
    """OBJ for key: configured, or generated under a listing's prefix; None when neither."""
    cfg = STATE.config
    if key in cfg["objects"]:
        return cfg["objects"][key]
    for prefix, lst in cfg["listings"].items():
        spec = lst.get("generate")
        m = re.fullmatch(re.escape(prefix) + r"k(\d{6})" + re.escape(spec.get("suffix", ".bpk")), key) \
            if spec else None
        if m and int(m.group(1)) < spec["count"]:
            return {"claim": spec["size"], "etag": spec.get("etag", default_etag(key))}
    return None


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def setup(self):
        super().setup()
        with STATE.lock:
            STATE.open += 1

    def finish(self):
        try:
            super().finish()
        finally:
            with STATE.lock:
                STATE.open -= 1

    def reply(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def control(self, what):
        if what == "stats":
            with STATE.lock:
                body = json.dumps({"requests": STATE.requests, "by_method": STATE.by_method,
                                   "lists": STATE.lists, "gets": STATE.gets,
                                   "trickling": STATE.trickling,
                                   "trickling_keys": dict(STATE.trickling_keys),
                                   "headers": STATE.headers, "open": STATE.open}).encode()
            return self.reply(200, body, [("Content-Type", "application/json")])
        n = int(self.headers.get("Content-Length") or 0)
        data = self.rfile.read(n) if n else b""
        if what == "reset":
            STATE.reset()
        elif what == "config":
            cfg = json.loads(data or b"{}")
            cfg.setdefault("objects", {})
            cfg.setdefault("listings", {})
            with STATE.lock:
                STATE.config = cfg
        else:
            return self.reply(404)
        return self.reply(200, b"{}", [("Content-Type", "application/json")])

    def do_POST(self):
        path = urllib.parse.urlsplit(self.path).path
        if path.startswith("/__hostile/"):
            return self.control(path[len("/__hostile/"):])
        self.reply(405)

    def do_GET(self):
        self.serve()

    def do_HEAD(self):
        self.serve()

    def serve(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path.startswith("/__hostile/"):
            return self.control(url.path[len("/__hostile/"):])
        STATE.counted(self.command, [[k, v] for k, v in self.headers.items()])
        bucket, _, key = urllib.parse.unquote(url.path.lstrip("/")).partition("/")
        query = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        if not key and "list-type" in query:
            return self.listing(bucket, query)
        obj = lookup(key)
        if obj is None:
            return self.reply(404, b"<Error><Code>NoSuchKey</Code><Message>none</Message></Error>",
                              [("Content-Type", "application/xml")])
        if "status" in obj:
            headers = [("Content-Type", "application/xml")]
            if "location" in obj:
                headers.append(("Location", obj["location"]))
            if "region" in obj:
                headers.append(("x-amz-bucket-region", obj["region"]))
            return self.reply(int(obj["status"]), b"<Error><Code>Hostile</Code>"
                              b"<Message>as configured</Message></Error>", headers)
        size = object_size(obj)
        etag = obj.get("etag", default_etag(key))
        if self.command == "HEAD":
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.send_header("ETag", etag)
            self.end_headers()
            return
        with STATE.lock:
            STATE.gets += 1
        first, last = 0, size - 1
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if m:
            first = int(m.group(1))
            last = min(int(m.group(2)) if m.group(2) else size - 1, size - 1)
        if first > last:
            return self.reply(416)
        self.send_response(206 if m else 200)
        self.send_header("Content-Length", str(last - first + 1))
        if m:
            self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
        self.send_header("ETag", etag)
        self.end_headers()
        self.body(obj, first, last - first + 1, key)

    def body(self, obj, off, n, key):
        data = b""
        if "file" in obj:
            with open(obj["file"], "rb") as f:
                f.seek(off)
                data = f.read(n)
        data += bytes(n - len(data))
        rate = obj.get("rate")
        if rate and not obj.get("slow_from", 0) <= off < obj.get("slow_to", 1 << 62):
            rate = None
        try:
            if not rate:
                self.wfile.write(data)
                return
            # A trickle: a few bytes at a time, rate bytes a second.
            with STATE.lock:
                STATE.trickling += 1
                STATE.trickling_keys[key] = STATE.trickling_keys.get(key, 0) + 1
            try:
                step = max(1, int(rate) // 10)
                for i in range(0, len(data), step):
                    self.wfile.write(data[i:i + step])
                    self.wfile.flush()
                    time.sleep(step / rate)
            finally:
                with STATE.lock:
                    STATE.trickling -= 1
                    STATE.trickling_keys[key] -= 1
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def listing(self, bucket, query):
        with STATE.lock:
            STATE.lists += 1
        prefix = query.get("prefix", "")
        token = query.get("continuation-token", "")
        start = int(token) if token.isdigit() else 0
        cfg = STATE.config
        rows = [(k, object_size(o), o.get("etag", default_etag(k)))
                for k, o in sorted(cfg["objects"].items()) if k.startswith(prefix)]
        endless = False
        for p, lst in cfg["listings"].items():
            if p.startswith(prefix) or prefix.startswith(p):
                endless |= bool(lst.get("endless"))
                if "generate" in lst:
                    rows += generated(p, lst["generate"], 0, lst["generate"]["count"])
        page = rows[start:start + PAGE]
        more = endless or start + PAGE < len(rows)
        items = "".join(f"<Contents><Key>{escape(k)}</Key><Size>{s}</Size><ETag>{escape(e)}</ETag>"
                        f"</Contents>" for k, s, e in page)
        nxt = f"<NextContinuationToken>{start + PAGE}</NextContinuationToken>" if more else ""
        body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult><Name>{escape(bucket)}</Name>'
                f"<Prefix>{escape(prefix)}</Prefix><IsTruncated>{'true' if more else 'false'}</IsTruncated>"
                f"{nxt}{items}</ListBucketResult>").encode()
        self.reply(200, body, [("Content-Type", "application/xml")])


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--port-file")
    a = ap.parse_args(argv)
    host, _, port = a.listen.rpartition(":")
    srv = Server((host, int(port)), Handler)
    if a.port_file:
        with open(a.port_file + ".tmp", "w") as f:
            f.write(f"{srv.server_address[1]}\n")
        os.replace(a.port_file + ".tmp", a.port_file)
    print(f"s3hostile listening on {host}:{srv.server_address[1]}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
