#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# test-s3-server.sh - batchd-pack against a real S3 server (moto).
#
#   bash tests/remote/test-s3-server.sh PATH/TO/batchd-pack
#
# tests/unit/test-s3.c checks the S3 client's parts without a server; this
# script checks what a user of batchd-pack sees against one: a sharded
# dataset and a pack large enough for a multipart upload of 3 parts are
# created straight to s3://, `info --json` of each there says exactly what
# it says of the same inputs packed locally, `verify` reads every byte
# back, `info` of a large pack fetches only part of it (when the harness's
# proxy is there to count), a missing key and an unknown access key fail
# naming the key and the HTTP status and code, an existing OUT is refused,
# the remote flags are refused for a local path, and nothing is left in
# $TMPDIR.
#
# The server comes from tests/remote/s3lib.sh (s3_install, s3_start,
# s3_stop). When moto cannot be installed from PyPI the test is skipped
# (exit 77), or fails under BATCHD_S3_REQUIRED=1 (tools/test.sh). Output as tests/cli: "ok - ..." / "FAIL - ..." lines, then
# "N passed, M failed".
set -euo pipefail
export LC_ALL=C

if [[ $# -ne 1 ]]; then
	echo "usage: $0 PATH/TO/batchd-pack" >&2
	exit 2
fi
BIN=$(realpath -- "$1")
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
T=$(mktemp -d "${TMPDIR:-/tmp}/s3-server.XXXXXX")
started=0
cleanup() {
	if [[ $started -eq 1 ]]; then s3_stop || true; fi
	rm -rf "$T"
}
trap cleanup EXIT

# shellcheck source=tests/cli/cli-lib.sh
. "$HERE/../cli/cli-lib.sh"
# shellcheck source=tests/remote/s3lib.sh
. "$HERE/s3lib.sh"
# Installed, or skipped (77) only where moto cannot be installed
# (BATCHD_S3_REQUIRED, which tools/test.sh sets, makes that a failure).
s3_require
s3_start "$T/server"
started=1
E=(--endpoint "$S3_ENDPOINT")
B=$S3_BUCKET
mkdir -p "$T/tmp"
export TMPDIR=$T/tmp

# ---- inputs: many small samples, and a few large incompressible ones ------------------

mkdir -p "$T/small/a" "$T/small/b" "$T/big"
for i in $(seq 1 60); do
	head -c $((i * 97)) /dev/urandom >"$T/small/$([[ $((i % 2)) -eq 0 ]] && echo a || echo b)/f$i"
done
for i in 1 2 3 4; do head -c 3500000 /dev/urandom >"$T/big/s$i"; done

run create "$T/local-ds" "$T/small" --shard-size 16K
expect "local sharded create" [ "$RC" -eq 0 ]
run create "$T/local-big.bpk" "$T/big"
expect "local big create" [ "$RC" -eq 0 ]

# ---- create to s3:// ---------------------------------------------------------------------

run create "s3://$B/sets/ds" "$T/small" --shard-size 16K "${E[@]}"
if [[ $RC -eq 0 ]] && grep -q "^s3://$B/sets/ds: uploaded [0-9]* objects" "$T/out"; then
	ok "sharded create to s3:// uploads every shard"
else
	bad "sharded create to s3://: rc $RC, $(err) $(head -c 300 "$T/out")"
fi
nshards=$(find "$T/local-ds" -name '*.bpk' | wc -l)
expect "as many objects as local shards ($nshards), a PUT each" \
	grep -q "uploaded $nshards objects, [0-9]* bytes, $nshards parts\$" "$T/out"

run create "s3://$B/big.bpk" "$T/big" --part-size 5M "${E[@]}"
# 14 MB in 5 MiB parts: 3 parts.
if [[ $RC -eq 0 ]] && grep -q 'uploaded 1 object, [0-9]* bytes, 3 parts (ETag "[0-9a-f-]*")' "$T/out"; then
	ok "create of a 14 MB pack is a multipart upload of 3 parts"
else
	bad "multipart create: rc $RC, $(err) $(head -c 300 "$T/out")"
fi
left=$(find "$T/tmp" -mindepth 1 | head -3)
expect "create leaves nothing in TMPDIR ($left)" [ -z "$left" ]

# ---- info and verify there ------------------------------------------------------------------

same_info() { # LOCAL REMOTE DESC
	run info "$1" --json
	cp "$T/out" "$T/local.json"
	run info "$2" --json "${E[@]}"
	if [[ $RC -eq 0 ]] && cmp -s "$T/local.json" "$T/out"; then
		ok "$3"
	else
		bad "$3: rc $RC, $(err) $(diff "$T/local.json" "$T/out" | head -c 300)"
	fi
}
same_info "$T/local-ds" "s3://$B/sets/ds" "info --json of the s3:// prefix equals the local dataset's"
same_info "$T/local-ds" "s3://$B/sets/ds/" "... and with a trailing /"
same_info "$T/local-big.bpk" "s3://$B/big.bpk" "info --json of the multipart object equals the local pack's"

run info "s3://$B/sets/ds" "${E[@]}"
expect "info names the s3:// dataset" grep -q "^dataset       s3://$B/sets/ds\$" "$T/out"
run verify "s3://$B/sets/ds" "${E[@]}"
expect "verify of the s3:// prefix" grep -q "^s3://$B/sets/ds: OK: 60 samples, 60 blocks, $nshards shards" "$T/out"
run verify "s3://$B/big.bpk" "${E[@]}"
expect "verify of the multipart object" grep -q "^s3://$B/big.bpk: OK: 4 samples" "$T/out"
left=$(find "$T/tmp" -mindepth 1 | head -3)
expect "info and verify leave nothing in TMPDIR ($left)" [ -z "$left" ]

# A public object by its plain URL: no listing, no signing.
s3_public big.bpk
plain=${S3_DIRECT:-$S3_ENDPOINT}/$B/big.bpk
RC=0
env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY timeout -k 5 120 "$BIN" info "$plain" --json \
	>"$T/out" 2>"$T/err" </dev/null || RC=$?
expect "info --json of the object's http:// URL equals the local pack's" eval '[ "$RC" -eq 0 ] && cmp -s "$T/local.json" "$T/out"'
RC=0
env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY timeout -k 5 120 "$BIN" verify "$plain" \
	>"$T/out" 2>"$T/err" </dev/null || RC=$?
expect "verify of the http:// URL" grep -q "^$plain: OK: 4 samples" "$T/out"
run info "${plain%.bpk}-missing.bpk"
expect "a missing http:// object fails naming the URL and the 404" eval 'clean_fail && grep -q "${plain%.bpk}-missing.bpk: HTTP 404" "$T/err"'

# Through the harness's proxy: info reads the pack's metadata, not its 14 MB of blocks.
if [[ -n ${S3_PROXY_CTL:-} ]]; then
	curl -fsS -X POST "$S3_PROXY_CTL/reset" >/dev/null
	run info "s3://$B/big.bpk" "${E[@]}"
	curl -fsS "$S3_PROXY_CTL/stats" >"$T/stats.json"
	if python3 - "$T/stats.json" <<'EOF'; then
import json, sys
s = json.load(open(sys.argv[1]))
gets = [g for g in s["gets"] if g["key"].endswith("big.bpk")]
spans = []
for g in gets:
    a, b = g["range"].split("=")[1].split("-")
    spans.append(int(b) - int(a) + 1)
assert s["bad_signatures"] == 0, s
assert 1 <= len(gets) <= 6 and sum(spans) < 1 << 20, (len(gets), spans)
EOF
		ok "info of the 14 MB pack fetches under 1 MiB, in at most 6 signed GETs"
	else
		bad "info's GETs: $(head -c 400 "$T/stats.json")"
	fi
else
	skip "info's GET count (no proxy in front of the server to count them)"
fi

# ---- failures ---------------------------------------------------------------------------------

run info "s3://$B/sets/missing.bpk" "${E[@]}"
if clean_fail && grep -q "s3://$B/sets/missing.bpk: HTTP 404 NoSuchKey" "$T/err"; then
	ok "a missing key fails naming it and the 404"
else
	bad "missing key: rc $RC, $(err)"
fi
run info "s3://$B/sets/nothing" "${E[@]}"
if clean_fail && grep -q "s3://$B/sets/nothing: no such object (HTTP 404" "$T/err" &&
	grep -q "no \*.bpk objects under s3://$B/sets/nothing/" "$T/err"; then
	ok "a name that is neither an object nor a prefix of packs says both"
else
	bad "missing name: rc $RC, $(err)"
fi
run verify "s3://no-such-bucket-here/x.bpk" "${E[@]}"
expect "a missing bucket fails naming NoSuchBucket" eval 'clean_fail && grep -q "s3://no-such-bucket-here/x.bpk: HTTP 404 NoSuchBucket" "$T/err"'

RC=0
AWS_ACCESS_KEY_ID=nobody timeout -k 5 120 "$BIN" info "s3://$B/big.bpk" "${E[@]}" \
	>"$T/out" 2>"$T/err" </dev/null || RC=$?
if clean_fail && grep -q "s3://$B/big.bpk: HTTP 403 InvalidAccessKeyId" "$T/err"; then
	ok "an unknown access key fails naming the key and the 403"
else
	bad "unknown access key: rc $RC, $(err)"
fi
RC=0
AWS_ACCESS_KEY_ID=nobody timeout -k 5 120 "$BIN" create "s3://$B/never.bpk" "$T/small" "${E[@]}" \
	>"$T/out" 2>"$T/err" </dev/null || RC=$?
expect "create with an unknown access key fails before packing, naming the 403" eval \
	'clean_fail && grep -q "s3://$B/never.bpk: HTTP 403 InvalidAccessKeyId" "$T/err" && [ ! -s "$T/out" ]'

run create "s3://$B/big.bpk" "$T/big" "${E[@]}"
expect "create refuses an existing object" eval 'clean_fail && grep -q "already exists" "$T/err"'
run create "s3://$B/sets/ds" "$T/small" --shard-size 16K "${E[@]}"
expect "create refuses a prefix holding objects" eval 'clean_fail && grep -q "already holds" "$T/err"'
run create "s3://$B/sets/" "$T/small" "${E[@]}"
expect "create refuses a prefix as a one-file OUT" eval 'clean_fail && grep -q "s3://BUCKET/KEY" "$T/err"'
run info "$T/local-big.bpk" --region eu-west-1
expect "remote flags on a local path are a usage error" [ "$RC" -eq 2 ]
run info "s3://$B/big.bpk" --addressing sideways "${E[@]}"
expect "a bad --addressing is a usage error" eval '[ "$RC" -eq 2 ] && grep -q "auto, path or virtual" "$T/err"'
run create "s3://$B/p.bpk" "$T/small" --part-size 1M "${E[@]}"
expect "a --part-size below 5M is a usage error" eval '[ "$RC" -eq 2 ] && grep -q "5M to 5G" "$T/err"'
run info "s3://Bad_Bucket/x.bpk" "${E[@]}"
expect "a bad bucket name is refused naming the rule" eval 'clean_fail && grep -q "lowercase" "$T/err"'
left=$(find "$T/tmp" -mindepth 1 | head -3)
expect "the failures leave nothing in TMPDIR ($left)" [ -z "$left" ]

echo "$PASS passed, $FAILED failed"
[[ $FAILED -eq 0 ]]
