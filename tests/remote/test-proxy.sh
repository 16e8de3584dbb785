#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# test-proxy.sh - the S3 test harness itself: moto behind s3proxy.py, as
# tests/remote/s3lib.sh starts them, checked with curl's own SigV4 signer
# (an implementation independent of the proxy's): a good signature passes
# (PUT, chunked PUT, ranged and whole GET, HEAD, ListObjectsV2), a wrong
# secret and a wrong payload hash are refused with S3's XML errors and
# counted, If-Match is enforced, every fault happens at the configured
# count, keep-alive holds, and the stats count what was sent. Runs once
# per interpreter: Debian's /usr/bin/python3 and python3 on PATH when that
# is another one (a pyenv build, say).
#
#   bash tests/remote/test-proxy.sh
#
# Each check prints "ok - ..." or "FAIL - ..."; the last line is "N passed,
# M failed". Exit 0 when nothing failed, 1 otherwise, 77 (skip) when moto
# cannot be installed (unless BATCHD_S3_REQUIRED=1). Needs curl 7.75 or later.
# shellcheck disable=SC2016 # expect ... eval '...' expands when the check runs, on purpose
set -euo pipefail
export LC_ALL=C

HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../cli/cli-lib.sh
. "$HERE/../cli/cli-lib.sh"
# shellcheck source=s3lib.sh
. "$HERE/s3lib.sh"

s3_require

T=$(mktemp -d "${TMPDIR:-/tmp}/s3proxy-test.XXXXXX")
cleanup() { rm -rf "$T"; }
trap cleanup EXIT

SIG=(--aws-sigv4 "aws:amz:us-east-1:s3" --user BATCHDTEST:BATCHDTEST)
UNSIGNED_PAYLOAD=(-H 'x-amz-content-sha256: UNSIGNED-PAYLOAD')

# s3 CURL-ARGS...: a signed curl with UNSIGNED-PAYLOAD; the body in $T/body,
# the status in CODE (000: no reply) and curl's exit status in CURL_RC.
s3() {
	CURL_RC=0
	CODE=$(curl -sS -o "$T/body" -w '%{http_code}' --max-time 30 "${SIG[@]}" "${UNSIGNED_PAYLOAD[@]}" \
		"$@" 2>"$T/curl.err") || CURL_RC=$?
}
# put FILE KEY [CURL-ARGS...]: a signed PUT whose x-amz-content-sha256 is FILE's hash.
put() {
	local file=$1 key=$2 sha
	shift 2
	sha=$(sha256sum <"$file" | cut -d' ' -f1)
	CODE=$(curl -sS -o "$T/body" -w '%{http_code}' --max-time 60 "${SIG[@]}" \
		-H "x-amz-content-sha256: $sha" -T "$file" "$@" "$S3_ENDPOINT/$S3_BUCKET/$key")
}
ctl() { curl -sS --max-time 10 "$@"; }
faults() { ctl -X POST -H 'Content-Type: application/json' --data "$1" -o "$T/faults" -w '%{http_code}' "$S3_PROXY_CTL/faults"; }
reset() { ctl -X POST -o /dev/null "$S3_PROXY_CTL/reset"; }
# stats_of EXPR: a Python expression over the proxy's stats s, printed.
stats_of() {
	ctl "$S3_PROXY_CTL/stats" >"$T/stats"
	python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$T/stats" "$1"
}
xml_code() { sed -n 's:.*<Code>\([^<]*\)</Code>.*:\1:p' "$T/body"; }
range_of() { dd if="$1" bs=1 skip="$2" count="$3" status=none; }

check_signing() {
	# public-read: the unsigned GET below reads it as anyone may (moto applies ACLs).
	put "$T/obj" data/obj.bin -H "x-amz-acl: public-read"
	expect "PUT with a good signature and payload hash: 200" test "$CODE" = 200
	# curl -T - sends a chunked body: the proxy decodes it before hashing.
	local sha
	sha=$(sha256sum <"$T/small" | cut -d' ' -f1)
	CODE=$(curl -sS -o /dev/null -w '%{http_code}' "${SIG[@]}" -H "x-amz-content-sha256: $sha" -T - \
		"$S3_ENDPOINT/$S3_BUCKET/data/chunked.bin" <"$T/small")
	s3 "$S3_DIRECT/$S3_BUCKET/data/chunked.bin"
	expect "chunked PUT stored byte for byte" cmp -s "$T/body" "$T/small"
	s3 -r 1000-5095 "$S3_ENDPOINT/$S3_BUCKET/data/obj.bin"
	range_of "$T/obj" 1000 4096 >"$T/want"
	expect "ranged GET: 206 and the object's bytes 1000..5095" \
		eval '[[ $CODE == 206 ]] && cmp -s "$T/body" "$T/want"'
	s3 "$S3_ENDPOINT/$S3_BUCKET/data/obj.bin"
	expect "whole GET: 200 and every byte" eval '[[ $CODE == 200 ]] && cmp -s "$T/body" "$T/obj"'
	s3 -I "$S3_ENDPOINT/$S3_BUCKET/data/obj.bin"
	expect "HEAD: 200" test "$CODE" = 200
	# The query goes out encoded: the canonical query encodes '/' in values.
	s3 "$S3_ENDPOINT/$S3_BUCKET?delimiter=%2F&list-type=2&prefix=data%2F"
	expect "ListObjectsV2 lists both keys" \
		eval '[[ $CODE == 200 ]] && grep -q "<Key>data/obj.bin</Key>" "$T/body" && grep -q "<Key>data/chunked.bin</Key>" "$T/body"'
	expect "no request refused so far" test "$(stats_of 's["bad_signatures"]')" = 0

	CURL_RC=0
	CODE=$(curl -sS -o "$T/body" -w '%{http_code}' --aws-sigv4 "aws:amz:us-east-1:s3" --user BATCHDTEST:WRONG \
		"${UNSIGNED_PAYLOAD[@]}" "$S3_ENDPOINT/$S3_BUCKET/data/obj.bin") || CURL_RC=$?
	expect "a wrong secret: 403 SignatureDoesNotMatch" \
		eval '[[ $CODE == 403 && $(xml_code) == SignatureDoesNotMatch ]]'
	expect "the refusal is counted" test "$(stats_of 's["bad_signatures"], s["refused"]')" = "(1, {'SignatureDoesNotMatch': 1})"
	CODE=$(curl -sS -o "$T/body" -w '%{http_code}' --aws-sigv4 "aws:amz:us-east-1:s3" --user OTHER:BATCHDTEST \
		"${UNSIGNED_PAYLOAD[@]}" "$S3_ENDPOINT/$S3_BUCKET/data/obj.bin")
	expect "an unknown access key: 403 InvalidAccessKeyId" \
		eval '[[ $CODE == 403 && $(xml_code) == InvalidAccessKeyId ]]'
	CODE=$(curl -sS -o "$T/body" -w '%{http_code}' --aws-sigv4 "aws:amz:eu-west-1:s3" --user BATCHDTEST:BATCHDTEST \
		"${UNSIGNED_PAYLOAD[@]}" "$S3_ENDPOINT/$S3_BUCKET/data/obj.bin")
	expect "another region: 400 AuthorizationHeaderMalformed" \
		eval '[[ $CODE == 400 && $(xml_code) == AuthorizationHeaderMalformed ]]'
	CODE=$(curl -sS -o "$T/body" -w '%{http_code}' "${SIG[@]}" -T "$T/small" \
		-H "x-amz-content-sha256: $(sha256sum <"$T/obj" | cut -d' ' -f1)" "$S3_ENDPOINT/$S3_BUCKET/data/bad.bin")
	expect "a payload hash that is not the body's: 400 XAmzContentSHA256Mismatch" \
		eval '[[ $CODE == 400 && $(xml_code) == XAmzContentSHA256Mismatch ]]'
	s3 "$S3_DIRECT/$S3_BUCKET/data/bad.bin"
	expect "... and nothing was stored" test "$CODE" = 404
	CODE=$(curl -sS -o "$T/body" -w '%{http_code}' "${SIG[@]}" "$S3_ENDPOINT/$S3_BUCKET/data/obj.bin")
	expect "no x-amz-content-sha256: 400 InvalidRequest" eval '[[ $CODE == 400 && $(xml_code) == InvalidRequest ]]'
	CODE=$(curl -sS -o "$T/body" -w '%{http_code}' \
		"$S3_ENDPOINT/$S3_BUCKET/data/obj.bin?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=00")
	expect "a presigned URL is not forwarded unchecked: 501" test "$CODE" = 501
	CODE=$(curl -sS -o "$T/body" -w '%{http_code}' "$S3_ENDPOINT/$S3_BUCKET/data/obj.bin")
	expect "an unsigned GET is forwarded (public reads)" eval '[[ $CODE == 200 ]] && cmp -s "$T/body" "$T/obj"'
	expect "... and counted as unsigned" test "$(stats_of 's["unsigned"]')" = 1
	expect "require_signature set" test "$(faults '{"require_signature": true}')" = 200
	CODE=$(curl -sS -o "$T/body" -w '%{http_code}' "$S3_ENDPOINT/$S3_BUCKET/data/obj.bin")
	expect "require_signature: an unsigned GET gets 403 AccessDenied" \
		eval '[[ $CODE == 403 && $(xml_code) == AccessDenied ]]'
	check_crafted
}

# What curl cannot send: an x-amz-* header left out of SignedHeaders and a
# request dated an hour ago, both otherwise signed right (with the proxy's
# own signer, which check_signing has shown to agree with curl's).
check_crafted() {
	"${BATCHD_S3_PYTHON:-python3}" - "$HERE" "$S3_ENDPOINT" "$S3_BUCKET" >"$T/crafted" <<'PY'
import datetime, hashlib, http.client, sys, urllib.parse
sys.path.insert(0, sys.argv[1])
import s3proxy
up = urllib.parse.urlsplit(sys.argv[2])
path = f"/{sys.argv[3]}/data/obj.bin"
def send(when, extra):
    d = when.strftime("%Y%m%dT%H%M%SZ")
    h = {"host": [up.netloc], "x-amz-content-sha256": ["UNSIGNED-PAYLOAD"], "x-amz-date": [d]}
    signed = sorted(h)
    creq = s3proxy.canonical_request("GET", path, [], h, signed, "UNSIGNED-PAYLOAD")
    sig, _ = s3proxy.sign("BATCHDTEST", d, (d[:8], "us-east-1", "s3", "aws4_request"), creq)
    auth = (f"AWS4-HMAC-SHA256 Credential=BATCHDTEST/{d[:8]}/us-east-1/s3/aws4_request, "
            f"SignedHeaders={';'.join(signed)}, Signature={sig}")
    c = http.client.HTTPConnection(up.hostname, up.port, timeout=10)
    c.request("GET", path, headers={"x-amz-content-sha256": "UNSIGNED-PAYLOAD", "x-amz-date": d,
                                    "Authorization": auth, **extra})
    r = c.getresponse()
    body = r.read().decode("utf-8", "replace")
    code = body.split("<Code>")[1].split("</Code>")[0] if "<Code>" in body else "-"
    print(r.status, code)
now = datetime.datetime.now(datetime.timezone.utc)
send(now, {})
send(now, {"x-amz-meta-unsigned": "1"})
send(now - datetime.timedelta(hours=1), {})
PY
	expect "the crafted request, signed right: 200" test "$(sed -n 1p "$T/crafted")" = "200 -"
	expect "an x-amz-* header left unsigned: 403 AccessDenied" test "$(sed -n 2p "$T/crafted")" = "403 AccessDenied"
	expect "dated an hour ago: 403 RequestTimeTooSkewed" test "$(sed -n 3p "$T/crafted")" = "403 RequestTimeTooSkewed"
}

check_if_match() {
	local etag
	s3 -I -D "$T/head" "$S3_ENDPOINT/$S3_BUCKET/data/obj.bin"
	etag=$(sed -n 's/^[Ee][Tt]ag: *\([^[:space:]]*\).*/\1/p' "$T/head")
	s3 -r 0-99 -H "If-Match: $etag" "$S3_ENDPOINT/$S3_BUCKET/data/obj.bin"
	expect "If-Match with the object's ETag: 206" test "$CODE" = 206
	s3 -r 0-99 -H 'If-Match: "0123456789abcdef0123456789abcdef"' "$S3_ENDPOINT/$S3_BUCKET/data/obj.bin"
	expect "If-Match with another ETag: 412 PreconditionFailed" \
		eval '[[ $CODE == 412 && $(xml_code) == PreconditionFailed ]]'
}

# GETs numbered from 1 after each POST faults; n % every == 0 is hit.
check_faults() {
	local i codes=""
	reset
	expect "faults: status_every 3 set" test "$(faults '{"status_every": 3, "status": 503}')" = 200
	for i in 1 2 3 4 5 6 7; do
		s3 -r 0-99 "$S3_ENDPOINT/$S3_BUCKET/data/obj.bin"
		codes+="$CODE"
		[[ $CODE != 503 ]] || cp "$T/body" "$T/503"
	done
	expect "every 3rd GET is 503, the others 206" test "$codes" = "206206503206206503206"
	expect "the 503 body is S3's SlowDown" grep -q '<Code>SlowDown</Code>' "$T/503"
	s3 -I "$S3_ENDPOINT/$S3_BUCKET/data/obj.bin"
	expect "HEADs do not count towards status_every" test "$CODE" = 200
	expect "stats: 7 GETs with their statuses and faults" test "$(stats_of '[(g["status"], g["fault"]) for g in s["gets"]]')" = \
		"[(206, None), (206, None), (503, 'status'), (206, None), (206, None), (503, 'status'), (206, None)]"
	expect "status 500 every 2nd" test "$(faults '{"status_every": 2, "status": 500}')" = 200
	s3 "$S3_ENDPOINT/$S3_BUCKET/data/obj.bin"
	codes=$CODE
	s3 "$S3_ENDPOINT/$S3_BUCKET/data/obj.bin"
	expect "a new faults object restarts the count: 200 then 500 InternalError" \
		eval '[[ $codes$CODE == 200500 && $(xml_code) == InternalError ]]'

	expect "drop_every 2 after 1000 bytes" test "$(faults '{"drop_every": 2, "drop_after_bytes": 1000}')" = 200
	local sizes="" rcs=""
	for i in 1 2 3 4; do
		s3 "$S3_ENDPOINT/$S3_BUCKET/data/obj.bin"
		sizes+="$(stats_of -c %s "$T/body" 2>/dev/null || wc -c <"$T/body") "
		rcs+="$CURL_RC "
	done
	expect "every 2nd GET ends after 1000 bytes (curl: partial file), the others whole" \
		test "$rcs/$sizes" = "0 18 0 18 /$(wc -c <"$T/obj") 1000 $(wc -c <"$T/obj") 1000 "
	range_of "$T/obj" 0 1000 >"$T/want"
	expect "... and those 1000 bytes are the object's first" cmp -s "$T/body" "$T/want"
	s3 -r 0-99 "$S3_ENDPOINT/$S3_BUCKET/data/obj.bin"
	s3 -r 0-99 "$S3_ENDPOINT/$S3_BUCKET/data/obj.bin"
	expect "GET 6, a drop's turn, but 100 bytes < drop_after_bytes: whole" \
		eval '[[ $CODE == 206 && $CURL_RC == 0 && $(wc -c <"$T/body") == 100 ]]'

	expect "key_status 403 and 404" \
		test "$(faults '{"key_status": {"data/obj.bin": 403, "batchd-test/data/chunked.bin": 404}}')" = 200
	s3 "$S3_ENDPOINT/$S3_BUCKET/data/obj.bin"
	expect "key_status: GET answers 403 AccessDenied" eval '[[ $CODE == 403 && $(xml_code) == AccessDenied ]]'
	s3 -I "$S3_ENDPOINT/$S3_BUCKET/data/obj.bin"
	expect "key_status: HEAD answers 403 too" test "$CODE" = 403
	s3 "$S3_ENDPOINT/$S3_BUCKET/data/chunked.bin"
	expect "key_status by bucket/key: 404 NoSuchKey" eval '[[ $CODE == 404 && $(xml_code) == NoSuchKey ]]'
	put "$T/small" data/other.bin
	s3 "$S3_ENDPOINT/$S3_BUCKET/data/other.bin"
	expect "another key is served" eval '[[ $CODE == 200 ]] && cmp -s "$T/body" "$T/small"'

	expect "delay_ms 300" test "$(faults '{"delay_ms": 300}')" = 200
	local t
	t=$(curl -sS -o /dev/null -w '%{time_total}' "${SIG[@]}" "${UNSIGNED_PAYLOAD[@]}" -r 0-9 \
		"$S3_ENDPOINT/$S3_BUCKET/data/obj.bin")
	expect "a request takes at least delay_ms (${t}s)" python3 -c "import sys; sys.exit(not $t >= 0.3)"

	expect "an unknown fault member: 400 naming it" \
		eval '[[ $(faults "{\"stauts_every\": 3}") == 400 ]] && grep -q stauts_every "$T/faults"'
	expect "a status outside 400..599: 400" test "$(faults '{"status_every": 1, "status": 200}')" = 400
	expect "faults reset" test "$(faults '{}')" = 200
}

check_stats() {
	reset
	put "$T/small" data/s1.bin
	s3 -r 0-9 "$S3_ENDPOINT/$S3_BUCKET/data/obj.bin"
	s3 -r 10-19 "$S3_ENDPOINT/$S3_BUCKET/data/obj.bin"
	s3 -I "$S3_ENDPOINT/$S3_BUCKET/data/obj.bin"
	s3 "$S3_ENDPOINT/$S3_BUCKET?list-type=2&prefix=data%2F"
	expect "stats: requests and by_method" \
		test "$(stats_of 's["requests"], sorted(s["by_method"].items())')" = "(5, [('GET', 3), ('HEAD', 1), ('PUT', 1)])"
	expect "stats: each GET's key, range and status (the listing's key empty)" \
		test "$(stats_of '[(g["key"], g["range"], g["status"]) for g in s["gets"]]')" = \
		"[('data/obj.bin', 'bytes=0-9', 206), ('data/obj.bin', 'bytes=10-19', 206), ('', None, 200)]"
	expect "stats: the listing's query" test "$(stats_of 's["gets"][2]["query"]')" = "list-type=2&prefix=data%2F"
	expect "control requests are not counted" test "$(stats_of 's["requests"]')" = 5
	ctl -X POST -o /dev/null "$S3_PROXY_CTL/reset?what=stats"
	expect "reset?what=stats clears the stats" test "$(stats_of 's["requests"], s["gets"]')" = "(0, [])"
	# Two URLs in one curl: the second rides the first one's connection.
	curl -sS -o /dev/null -o /dev/null -w '%{num_connects} ' "${SIG[@]}" "${UNSIGNED_PAYLOAD[@]}" \
		"$S3_ENDPOINT/$S3_BUCKET/data/obj.bin" "$S3_ENDPOINT/$S3_BUCKET/data/obj.bin" >"$T/conns"
	expect "keep-alive: the second request opens no connection" test "$(cat "$T/conns")" = "1 0 "
}

run_with() {
	export BATCHD_S3_PYTHON=$1
	echo "# proxy under $1 ($("$1" --version 2>&1))"
	mkdir -p "$T/work-$2"
	s3_start "$T/work-$2"
	check_signing
	check_if_match
	check_faults
	check_stats
	s3_stop
}

head -c 3000000 /dev/urandom >"$T/obj"
head -c 70000 /dev/urandom >"$T/small"
pythons=(/usr/bin/python3)
path_python=$(command -v python3 || true)
if [[ -n $path_python && $(realpath -- "$path_python") != $(realpath /usr/bin/python3) ]]; then
	# pyenv's shim names a script, not the interpreter: ask it which one it runs.
	pythons+=("$("$path_python" -c 'import sys; print(sys.executable)')")
fi
i=0
for py in "${pythons[@]}"; do
	[[ -x $py ]] || continue
	run_with "$py" "$i"
	i=$((i + 1))
done
echo "$PASS passed, $FAILED failed"
[[ $FAILED -eq 0 ]]
