#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""s3proxy: a small threaded HTTP/1.1 reverse proxy in front of an S3 test
server (moto, tests/remote/s3server.py), for the remote-dataset tests.

Why it exists: moto is a real S3 protocol server, but it does not verify
AWS Signature Version 4 (it accepts any V4 Authorization header) and
cannot misbehave on purpose; its If-Match check is a second line behind
the proxy's own. A daemon that signs wrongly, or that mishandles a 503 or a
connection dropped mid-body, would pass against it. The proxy closes those
gaps: it verifies the SigV4 signature of every signed request with the
known secret (the canonical request of the AWS documentation: method,
URI-encoded path, sorted query, signed headers lower-cased and trimmed,
payload hash from x-amz-content-sha256, which it also checks against the
body) and answers S3's own XML errors when it is wrong; it answers 412 to
a GET or HEAD whose If-Match names another ETag than the object's; it
injects faults (a status every Nth GET, a connection dropped after K body
bytes every Nth GET, a delay per request, a fixed status per key, the last
body byte of every GET of a key flipped, or of the first GET of a range
starting at a given offset); and it counts what it saw.

Control endpoint (never signed, never counted), under /__proxy:
  GET  /__proxy/stats    {"requests": N, "by_method": {...}, "gets": [...],
                          "bad_signatures": N, "unsigned": N, "refused": {CODE: N}}
                         each GET: {"bucket", "key" ("" for a listing),
                          "query", "range", "if_match", "status", "bytes"
                          (body bytes sent), "fault": null, "status",
                          "drop", "key_status", "refused" (the proxy's own
                          answer: a signature, If-Match) or "client-closed"}
  GET  /__proxy/faults   the faults in force
  POST /__proxy/faults   a JSON object replacing them (absent members: off):
                         {"status_every": N, "status": 503, "drop_every": N,
                          "drop_after_bytes": K, "delay_ms": D,
                          "key_status": {"KEY": 403}, "flip_keys": ["KEY"],
                          "flip_once": {"KEY": [OFFSET, ...]},
                          "require_signature": false}
                         and restarting the GET count the *_every members use
  POST /__proxy/reset    stats and faults both cleared (?what=stats: stats only)

Faults count GETs that passed verification and carry no key_status; GET
number n gets the status fault when status_every divides n, else the drop
when drop_every does. A key_status KEY is the object key ("prefix/a.bpk")
or "bucket/key"; it answers every method on that object.

Python 3.7 or later, standard library only (Debian's python3 or any
interpreter on PATH: nothing is imported from site-packages).

    s3proxy.py --upstream http://127.0.0.1:4569 [--listen 127.0.0.1:0]
               [--access-key BATCHDTEST --secret BATCHDTEST] [--region us-east-1]
               [--port-file FILE] [--log FILE]
"""
import argparse
import datetime
import email.utils
import hashlib
import hmac
import http.client
import json
import os
import socket
import sys
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from xml.sax.saxutils import escape

CONTROL = "/__proxy"
ALGORITHM = "AWS4-HMAC-SHA256"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
SKEW_SECONDS = 15 * 60  # S3 refuses requests dated further from its clock
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authenticate",
              "proxy-authorization", "te", "trailer", "trailers", "transfer-encoding",
              "upgrade", "expect", "content-length"}
CODES = {400: ("InvalidRequest", "Bad Request"), 403: ("AccessDenied", "Access Denied"),
         404: ("NoSuchKey", "The specified key does not exist."),
         412: ("PreconditionFailed", "At least one of the pre-conditions you specified did not hold"),
         416: ("InvalidRange", "The requested range is not satisfiable"),
         429: ("SlowDown", "Please reduce your request rate."),
         500: ("InternalError", "We encountered an internal error. Please try again."),
         503: ("SlowDown", "Please reduce your request rate.")}
FAULT_KEYS = {"status_every", "status", "drop_every", "drop_after_bytes", "delay_ms", "key_status",
              "flip_keys", "flip_once", "require_signature"}
SPOOL_MEMORY = 8 << 20  # request bodies above this wait on disk for their hash check
BLOCK = 64 << 10


class Refusal(Exception):
    """A request the proxy answers itself with an S3 XML error."""

    def __init__(self, status, code, message, **extra):
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message, self.extra = status, code, message, extra


# ---- SigV4 ------------------------------------------------------------------------------------


def uri_encode(s, slash):
    """AWS's UriEncode: every byte but A-Z a-z 0-9 - _ . ~ (and '/' when slash) as %XY."""
    return urllib.parse.quote(s, safe="/" if slash else "", encoding="utf-8", errors="surrogateescape")


def query_pairs(raw):
    """The decoded (name, value) pairs of a raw query string, in order."""
    out = []
    for part in raw.split("&"):
        if part:
            k, _, v = part.partition("=")
            out.append((urllib.parse.unquote(k), urllib.parse.unquote(v)))
    return out


def canonical_query(pairs):
    enc = sorted((uri_encode(k, False), uri_encode(v, False)) for k, v in pairs)
    return "&".join(f"{k}={v}" for k, v in enc)


def canonical_request(method, raw_path, pairs, headers, signed, payload):
    """The canonical request of the AWS SigV4 documentation (S3 flavour:
    the path is normalised once, not twice). headers maps a lower-case
    name to the list of its values."""
    lines = [method, uri_encode(urllib.parse.unquote(raw_path), True), canonical_query(pairs)]
    for name in signed:
        values = headers.get(name, [])
        lines.append(name + ":" + ",".join(" ".join(v.split()) for v in values))
    return "\n".join(lines) + "\n\n" + ";".join(signed) + "\n" + payload


def signing_key(secret, date, region, service):
    k = ("AWS4" + secret).encode()
    for part in (date, region, service, "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    return k


def sign(secret, amz_date, scope, creq):
    sts = "\n".join([ALGORITHM, amz_date, "/".join(scope),
                     hashlib.sha256(creq.encode("utf-8", "surrogateescape")).hexdigest()])
    date, region, service, _ = scope
    return hmac.new(signing_key(secret, date, region, service), sts.encode(), hashlib.sha256).hexdigest(), sts


def parse_authorization(value):
    """Credential, SignedHeaders and Signature of an AWS4-HMAC-SHA256 Authorization header."""
    algo, _, rest = value.strip().partition(" ")
    if algo != ALGORITHM:
        raise Refusal(400, "InvalidArgument",
                      f"the proxy verifies {ALGORITHM} (SigV4) only, not '{algo}'")
    parts = {}
    for item in rest.split(","):
        k, _, v = item.strip().partition("=")
        parts[k] = v
    for need in ("Credential", "SignedHeaders", "Signature"):
        if not parts.get(need):
            raise Refusal(400, "AuthorizationHeaderMalformed",
                          f"the authorization header lacks {need}=")
    return parts["Credential"], parts["SignedHeaders"], parts["Signature"]


def amz_time(value):
    """An X-Amz-Date (20061212T120000Z) or an HTTP Date header as a UTC datetime, or None."""
    try:
        return datetime.datetime.strptime(value, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
    except (TypeError, ValueError):
        pass
    try:
        return email.utils.parsedate_to_datetime(value).astimezone(datetime.timezone.utc)
    except (TypeError, ValueError, IndexError):
        return None


class Verifier:
    """Checks requests against the one key pair and region the proxy knows."""

    def __init__(self, access_key, secret, region):
        self.access_key, self.secret, self.region = access_key, secret, region

    def scope(self, credential, amz_date):
        akid, *scope = credential.split("/")
        if akid != self.access_key:
            raise Refusal(403, "InvalidAccessKeyId",
                          "The AWS Access Key Id you provided does not exist in our records.",
                          AWSAccessKeyId=akid)
        if len(scope) != 4 or scope[3] != "aws4_request" or scope[2] != "s3":
            raise Refusal(400, "AuthorizationHeaderMalformed",
                          f"the credential scope '{'/'.join(scope)}' must be DATE/REGION/s3/aws4_request")
        if scope[1] != self.region:
            raise Refusal(400, "AuthorizationHeaderMalformed",
                          f"the region '{scope[1]}' is wrong; expecting '{self.region}'",
                          Region=self.region)
        if scope[0] != amz_date[:8]:
            raise Refusal(403, "SignatureDoesNotMatch",
                          f"the credential date {scope[0]} is not the request's date {amz_date[:8]}")
        return scope

    def verify(self, method, raw_path, raw_query, headers, body_sha256):
        """None for an unsigned request, True for a good signature; Refusal otherwise.
        headers maps lower-case names to lists of values."""
        pairs = query_pairs(raw_query)
        q = dict(pairs)
        auth = headers.get("authorization")
        if auth:
            credential, signed, provided = parse_authorization(auth[0])
            date_hdr = headers.get("x-amz-date") or headers.get("date")
            amz_date = date_hdr[0] if date_hdr else ""
            if "x-amz-content-sha256" not in headers:
                raise Refusal(400, "InvalidRequest",
                              "Missing required header for this request: x-amz-content-sha256")
            payload = headers["x-amz-content-sha256"][0].strip()
        elif "X-Amz-Signature" in q or "X-Amz-Algorithm" in q:
            # Never forwarded unchecked: that would pass a wrong signature.
            raise Refusal(501, "NotImplemented", "the proxy does not verify presigned (query) signatures")
        else:
            return None
        when = amz_time(amz_date)
        if when is None:
            raise Refusal(403, "AccessDenied", "AWS authentication requires a valid Date or x-amz-date header")
        if "x-amz-date" not in headers:
            amz_date = when.strftime("%Y%m%dT%H%M%SZ")
        now = datetime.datetime.now(datetime.timezone.utc)
        if abs((now - when).total_seconds()) > SKEW_SECONDS:
            raise Refusal(403, "RequestTimeTooSkewed",
                          "The difference between the request time and the current time is too large.",
                          RequestTime=amz_date, ServerTime=now.strftime("%Y%m%dT%H%M%SZ"))
        scope = self.scope(credential, amz_date)
        names = signed.split(";")
        if names != sorted(names) or any(n != n.lower() for n in names) or "host" not in names:
            raise Refusal(403, "SignatureDoesNotMatch",
                          f"SignedHeaders '{signed}' must be lower-case, sorted and include host")
        unsigned = sorted(n for n in headers if n.startswith("x-amz-") and n not in names)
        if unsigned:
            raise Refusal(403, "AccessDenied",
                          "There were headers present in the request which were not signed",
                          HeadersNotSigned=", ".join(unsigned))
        self.payload(payload, body_sha256)
        creq = canonical_request(method, raw_path, pairs, headers, names, payload)
        want, sts = sign(self.secret, amz_date, scope, creq)
        if not hmac.compare_digest(want, provided):
            raise Refusal(403, "SignatureDoesNotMatch",
                          "The request signature we calculated does not match the signature you "
                          "provided. Check your key and signing method.",
                          AWSAccessKeyId=self.access_key, StringToSign=sts, CanonicalRequest=creq,
                          SignatureProvided=provided)
        return True

    @staticmethod
    def payload(payload, body_sha256):
        if payload == "UNSIGNED-PAYLOAD":
            return
        if payload.startswith("STREAMING-"):
            raise Refusal(501, "NotImplemented", f"the proxy does not verify {payload} (aws-chunked) bodies")
        if len(payload) != 64 or any(c not in "0123456789abcdef" for c in payload):
            raise Refusal(400, "InvalidArgument",
                          "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-..., or a valid sha256 value.")
        if payload != body_sha256:
            raise Refusal(400, "XAmzContentSHA256Mismatch",
                          "The provided 'x-amz-content-sha256' header does not match what was computed.",
                          ClientComputedContentSHA256=payload, S3ComputedContentSHA256=body_sha256)


# ---- shared state ---------------------------------------------------------------------------


def parse_range_start(value):
    """The first byte of a "bytes=A-B" Range; None without one."""
    if not value or not value.startswith("bytes="):
        return None
    a = value[6:].partition("-")[0]
    return int(a) if a.isdigit() else None


def check_faults(f):
    """A validated copy of a faults object. @raise ValueError naming the bad member."""
    if not isinstance(f, dict):
        raise ValueError("faults must be a JSON object")
    unknown = sorted(set(f) - FAULT_KEYS)
    if unknown:
        raise ValueError(f"unknown fault member(s) {unknown}; known: {sorted(FAULT_KEYS)}")
    out = {"status_every": 0, "status": 503, "drop_every": 0, "drop_after_bytes": 0, "delay_ms": 0,
           "key_status": {}, "flip_keys": [], "flip_once": {}, "require_signature": False}
    limits = {"status_every": (0, 1 << 31), "status": (400, 599), "drop_every": (0, 1 << 31),
              "drop_after_bytes": (0, 1 << 62), "delay_ms": (0, 60000)}
    for k, (lo, hi) in limits.items():
        if k in f:
            v = f[k]
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                raise ValueError(f"{k} must be an integer in {lo}..{hi}, not {v!r}")
            out[k] = v
    ks = f.get("key_status", {})
    if not isinstance(ks, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and 400 <= v <= 599
            for k, v in ks.items()):
        raise ValueError("key_status must map keys to HTTP statuses 400..599")
    out["key_status"] = dict(ks)
    fk = f.get("flip_keys", [])
    if not isinstance(fk, list) or not all(isinstance(k, str) for k in fk):
        raise ValueError("flip_keys must be a list of keys")
    out["flip_keys"] = list(fk)
    fo = f.get("flip_once", {})
    if not isinstance(fo, dict) or not all(
            isinstance(k, str) and isinstance(v, list) and all(isinstance(x, int) for x in v)
            for k, v in fo.items()):
        raise ValueError("flip_once must map keys to lists of range start offsets")
    out["flip_once"] = {k: list(v) for k, v in fo.items()}
    if "require_signature" in f:
        if not isinstance(f["require_signature"], bool):
            raise ValueError("require_signature must be true or false")
        out["require_signature"] = f["require_signature"]
    return out


class State:
    """Stats and faults, shared by the handler threads under one lock."""

    def __init__(self):
        self.lock = threading.Lock()
        self.faults = check_faults({})
        self.get_count = 0
        self.reset_stats()

    def reset_stats(self):
        self.requests = 0
        self.by_method = {}
        self.gets = []
        self.bad_signatures = 0
        self.unsigned = 0
        self.refused = {}

    def set_faults(self, f):
        with self.lock:
            self.faults = check_faults(f)
            self.get_count = 0

    def snapshot(self):
        with self.lock:
            return {"requests": self.requests, "by_method": dict(self.by_method),
                    "gets": [dict(g) for g in self.gets], "bad_signatures": self.bad_signatures,
                    "unsigned": self.unsigned, "refused": dict(self.refused)}

    def arrived(self, method):
        with self.lock:
            self.requests += 1
            self.by_method[method] = self.by_method.get(method, 0) + 1
            return self.faults["delay_ms"], self.faults["require_signature"]

    def refuse(self, code):
        with self.lock:
            self.bad_signatures += 1
            self.refused[code] = self.refused.get(code, 0) + 1

    def fault_for(self, method, bucket, key, first=None):
        """What to do to this request: (None | "key_status" | "status" | "drop" | "flip", status, K)."""
        with self.lock:
            f = self.faults
            for name in (key, f"{bucket}/{key}"):
                if key and name in f["key_status"]:
                    return "key_status", f["key_status"][name], 0
            if method != "GET":
                return None, 0, 0
            self.get_count += 1
            n = self.get_count
            if f["status_every"] and n % f["status_every"] == 0:
                return "status", f["status"], 0
            if f["drop_every"] and n % f["drop_every"] == 0:
                return "drop", 0, f["drop_after_bytes"]
            if key in f["flip_keys"] or f"{bucket}/{key}" in f["flip_keys"]:
                return "flip", 0, 0
            once = f["flip_once"].get(key, [])
            if first in once:
                once.remove(first)
                return "flip", 0, 0
            return None, 0, 0

    def record_get(self, entry):
        with self.lock:
            self.gets.append(entry)


# ---- the handler ------------------------------------------------------------------------------


def error_xml(code, message, resource, request_id, extra):
    items = "".join(f"<{k}>{escape(str(v))}</{k}>" for k, v in extra.items())
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>{escape(message)}</Message>{items}<Resource>{escape(resource)}</Resource>"
            f"<RequestId>{request_id}</RequestId></Error>").encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, on both sides
    server_version = "s3proxy"
    upstream = None                # this connection's own keep-alive connection to the server

    def log_message(self, fmt, *args):
        self.server.log(f"{self.address_string()} {fmt % args}")

    def finish(self):
        super().finish()
        self.drop_upstream()

    def do_any(self):
        raw_path, _, raw_query = self.path.partition("?")
        if raw_path == CONTROL or raw_path.startswith(CONTROL + "/"):
            return self.control(raw_path[len(CONTROL):], raw_query)
        state = self.server.state
        body = sha = None
        try:
            body, sha = self.read_body()
        except (ValueError, OSError) as e:
            self.close_connection = True
            return self.s3_error(Refusal(400, "IncompleteBody", f"the request body could not be read: {e}"))
        try:
            self.serve(state, raw_path, raw_query, body, sha)
        finally:
            if body is not None:
                body.close()

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_any

    def serve(self, state, raw_path, raw_query, body, sha):
        delay_ms, require_signed = state.arrived(self.command)
        if delay_ms:
            time.sleep(delay_ms / 1000)
        bucket, _, key = urllib.parse.unquote(raw_path.lstrip("/")).partition("/")
        entry = {"bucket": bucket, "key": key, "query": raw_query, "range": self.headers.get("Range"),
                 "if_match": self.headers.get("If-Match"), "status": None, "fault": None, "bytes": 0}
        try:
            if self.signed(state, raw_path, raw_query, sha) is None and require_signed:
                raise Refusal(403, "AccessDenied", "Anonymous access is refused (require_signature)")
            rng = parse_range_start(self.headers.get("Range"))
            fault, status, after = state.fault_for(self.command, bucket, key, rng)
            if fault in ("key_status", "status"):
                entry["fault"] = fault
                raise Refusal(status, *CODES.get(status, ("InternalError", f"injected status {status}")),
                              Key=key)
            if key and self.command in ("GET", "HEAD"):
                self.check_if_match(raw_path)
            entry["status"], entry["bytes"], entry["fault"] = self.forward(
                body, after if fault == "drop" else None, fault == "flip")
        except Refusal as r:
            entry["status"] = r.status
            entry["fault"] = entry["fault"] or "refused"
            self.s3_error(r)
        finally:
            if self.command == "GET":
                state.record_get(entry)
            self.server.log(f"{self.command} {self.path} range={entry['range']} if-match={entry['if_match']}"
                            f" -> {entry['status']} fault={entry['fault']} bytes={entry['bytes']}")

    def signed(self, state, raw_path, raw_query, sha):
        headers = {}
        for k, v in self.headers.items():
            headers.setdefault(k.lower(), []).append(v)
        try:
            ok = self.server.verifier.verify(self.command, raw_path, raw_query, headers, sha)
        except Refusal as r:
            state.refuse(r.code)
            raise
        if ok is None:
            with state.lock:
                state.unsigned += 1
        return ok

    def read_body(self):
        """The request body spooled (Content-Length or chunked) and its sha256; (None, sha of b'')."""
        te = self.headers.get("Transfer-Encoding", "").lower()
        length = self.headers.get("Content-Length")
        if "chunked" not in te and length is None:
            return None, EMPTY_SHA256
        spool = tempfile.SpooledTemporaryFile(SPOOL_MEMORY)
        h = hashlib.sha256()

        def take(n):
            while n > 0:
                data = self.rfile.read(min(n, BLOCK))
                if not data:
                    raise ValueError("the connection closed inside the body")
                h.update(data)
                spool.write(data)
                n -= len(data)

        if "chunked" in te:
            while True:
                size = int(self.rfile.readline(1024).split(b";")[0].strip() or b"x", 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                take(size)
                self.rfile.readline(16)
        else:
            take(int(length))
        spool.seek(0)
        return spool, h.hexdigest()

    def check_if_match(self, raw_path):
        """412 when If-Match names none of the object's current ETag (checked here too, so that no server lets a stale read pass)."""
        want = self.headers.get("If-Match")
        if not want:
            return
        status, headers, _ = self.upstream_request("HEAD", raw_path, [], None)
        if status != 200:
            return  # the GET itself says what is wrong (404, ...)
        etag = headers.get("etag", "")
        tags = [t.strip() for t in want.split(",")]
        if "*" not in tags and etag not in tags and etag.strip('"') not in [t.strip('"') for t in tags]:
            raise Refusal(412, "PreconditionFailed",
                          "At least one of the pre-conditions you specified did not hold",
                          Condition="If-Match", ETag=etag)

    # -- upstream --

    def up_conn(self):
        if self.upstream is None:
            host, port = self.server.upstream_addr
            self.upstream = http.client.HTTPConnection(host, port, timeout=120)
        return self.upstream

    def drop_upstream(self):
        if self.upstream is not None:
            self.upstream.close()
            self.upstream = None

    def upstream_request(self, method, path, headers, body):
        """Send and read a whole small reply: (status, lower-case headers, body)."""
        resp = self.send_upstream(method, path, headers, body)
        data = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data

    def send_upstream(self, method, path, headers, body):
        """The upstream response to a request, once more on a fresh connection
        when a kept-alive one turns out closed."""
        for attempt in (0, 1):
            conn = self.up_conn()
            try:
                conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
                for k, v in headers:
                    conn.putheader(k, v)
                if not any(k.lower() == "host" for k, _ in headers):
                    conn.putheader("Host", "%s:%d" % self.server.upstream_addr)
                if body is not None:
                    body.seek(0, os.SEEK_END)
                    conn.putheader("Content-Length", str(body.tell()))
                    body.seek(0)
                conn.endheaders()
                while body is not None:
                    data = body.read(BLOCK)
                    if not data:
                        break
                    conn.send(data)
                return conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.drop_upstream()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def forward(self, body, drop_after, flip=False):
        """Relay the request and stream the reply back; with drop_after, close the
        client's connection after that many body bytes (when the body is longer);
        with flip, a 2xx body's last byte inverted (its length as it was).
        @return (status, body bytes sent, None | "drop" | "flip" | "client-closed")."""
        headers = [(k, v) for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP]
        try:
            resp = self.send_upstream(self.command, self.path, headers, body)
        except OSError as e:
            self.drop_upstream()
            raise Refusal(502, "BadGateway", f"the S3 server did not answer: {e}")
        length = resp.getheader("Content-Length")
        bodyless = self.command == "HEAD" or resp.status in (204, 304) or resp.status < 200
        chunked = length is None and not bodyless
        self.send_response_only(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in HOP_BY_HOP:
                self.send_header(k, v)
        if length is not None:
            self.send_header("Content-Length", length)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        sent = 0
        try:
            self.end_headers()
            if bodyless:
                resp.read()
                return resp.status, 0, None
            while True:
                data = resp.read(BLOCK)
                if drop_after is not None and sent + len(data) >= drop_after:
                    self.wfile.write(data[:drop_after - sent])
                    self.wfile.flush()
                    self.drop_client()
                    return resp.status, drop_after, "drop"
                if not data:
                    break
                if flip and 200 <= resp.status < 300 and length and sent + len(data) == int(length):
                    data = data[:-1] + bytes([data[-1] ^ 0xFF])
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
                sent += len(data)
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up on the reply (a cancelled transfer).
            self.close_connection = True
            self.drop_upstream()
            return resp.status, sent, "client-closed"
        return resp.status, sent, "flip" if flip else None

    def drop_client(self):
        """End this connection mid-reply, as a network would; the upstream
        reply is unread, so that connection goes too."""
        self.close_connection = True
        self.drop_upstream()
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # -- replies --

    def s3_error(self, r):
        rid = "%016X" % (id(r) ^ int(time.monotonic_ns()))
        body = error_xml(r.code, r.message, self.path.partition("?")[0], rid, r.extra)
        self.server.log(f"{self.command} {self.path}: {r.code}: {r.message}")
        self.send_response_only(r.status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-amz-request-id", rid)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def reply_json(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def control(self, what, raw_query):
        state = self.server.state
        body, _ = self.read_body()
        data = body.read() if body is not None else b""
        if self.command == "GET" and what == "/stats":
            return self.reply_json(200, state.snapshot())
        if self.command == "GET" and what == "/faults":
            with state.lock:
                return self.reply_json(200, dict(state.faults))
        if self.command == "POST" and what == "/faults":
            try:
                state.set_faults(json.loads(data or b"{}"))
            except ValueError as e:
                return self.reply_json(400, {"error": str(e)})
            with state.lock:
                return self.reply_json(200, dict(state.faults))
        if self.command == "POST" and what == "/reset":
            stats_only = dict(query_pairs(raw_query)).get("what") == "stats"
            with state.lock:
                state.reset_stats()
            if not stats_only:
                state.set_faults({})
            return self.reply_json(200, state.snapshot())
        return self.reply_json(404, {"error": f"{self.command} {CONTROL}{what}: no such control; "
                                              "GET stats|faults, POST faults|reset"})


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, listen, upstream_addr, verifier, log):
        super().__init__(listen, Handler)
        self.upstream_addr = upstream_addr
        self.verifier = verifier
        self.state = State()
        self.log_file = log
        self.log_lock = threading.Lock()

    def log(self, line):
        if self.log_file is None:
            return
        stamp = datetime.datetime.now().strftime("%H:%M:%S.%f")[:-3]
        with self.log_lock:
            self.log_file.write(f"{stamp} {line}\n")
            self.log_file.flush()


def host_port(s, what):
    host, sep, port = s.rpartition(":")
    if not sep or not port.isdigit():
        raise SystemExit(f"s3proxy: {what} '{s}' must be HOST:PORT")
    return host or "127.0.0.1", int(port)


def main(argv=None):
    ap = argparse.ArgumentParser(description="SigV4-verifying, fault-injecting S3 proxy for tests")
    ap.add_argument("--upstream", required=True, help="the S3 server, http://HOST:PORT")
    ap.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (port 0: any free one)")
    ap.add_argument("--access-key", default="BATCHDTEST")
    ap.add_argument("--secret", default="BATCHDTEST")
    ap.add_argument("--region", default="us-east-1")
    ap.add_argument("--port-file", help="write the port here once listening")
    ap.add_argument("--log", help="a line per request here (default: none)")
    a = ap.parse_args(argv)
    up = urllib.parse.urlsplit(a.upstream)
    if up.scheme != "http" or not up.hostname or not up.port:
        raise SystemExit(f"s3proxy: --upstream '{a.upstream}' must be http://HOST:PORT")
    log = open(a.log, "a", encoding="utf-8") if a.log else None
    srv = Server(host_port(a.listen, "--listen"), (up.hostname, up.port),
                 Verifier(a.access_key, a.secret, a.region), log)
    port = srv.server_address[1]
    if a.port_file:
        tmp = a.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{port}\n")
        os.replace(tmp, a.port_file)  # readers never see half a number
    print(f"s3proxy listening on {srv.server_address[0]}:{port}, upstream {a.upstream}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
