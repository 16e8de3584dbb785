#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# test-remote-threads.sh - the remote cache's threads together (the
# fetcher, the I/O and decode threads, the opens' workers) in a sanitizer
# build: no Python, so ThreadSanitizer's build runs it too (suite
# 'threads'). A pack of 80 MB in 64 KiB chunks under a 64 MiB cache: two
# sessions on the remote dataset read at once while chunks are fetched,
# pinned, evicted and punched out, then a restarted daemon reads from what
# the cache kept. Each session's samples (ids and XXH3 of their bytes,
# which do not depend on the layout) must equal a local copy's, and the
# daemon must stop with status 0, which a sanitizer's report would change.
#
#   BATCHD=... BATCHD_PACK=... BATCHCTL=... bash tests/remote/test-remote-threads.sh
set -euo pipefail
export LC_ALL=C

HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=s3lib.sh
. "$HERE/s3lib.sh"
s3_require

base=${TMPDIR:-/tmp}
[[ ${#base} -lt 40 ]] || base=/tmp
T=$(mktemp -d "$base/bd-s3t.XXXXXX")
daemon=
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
	[[ -z $daemon ]] || kill -KILL "$daemon" 2>/dev/null || true
	if [[ $1 -eq 0 ]]; then rm -rf "$T"; else echo "logs kept in $T" >&2; fi
}
trap 'cleanup $?' EXIT
BIN=$BATCHD_PACK
# shellcheck source=../cli/cli-lib.sh
. "$HERE/../cli/cli-lib.sh"
s3_start "$T/s3"

# 320 samples of 256 KB, each its own block, in shards of about 8 MB.
mkdir -p "$T/in"
for i in $(seq -w 1 320); do head -c 262144 /dev/urandom >"$T/in/s$i.bin"; done
"$BATCHD_PACK" create "$T/local.bpk" "$T/in" --shard-size 8M >/dev/null
for f in "$T"/local.bpk/*.bpk; do
	curl -sf -o /dev/null --aws-sigv4 "aws:amz:$AWS_DEFAULT_REGION:s3" \
		--user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
		-H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -T "$f" \
		"$S3_ENDPOINT/$S3_BUCKET/t/ds/$(basename "$f")"
done
cat >"$T/batchd.conf" <<EOF
[datasets]
root = $T
remote = s3://$S3_BUCKET/t
[remote]
endpoint = $S3_ENDPOINT
requests = 8
[cache]
dir = $T/cache
max_size = 64M
chunk = 64K
EOF

start() {
	"$BATCHD" --no-config -c "$T/batchd.conf" --socket "$T/b.sock" --log-level info \
		2>>"$T/batchd.log" &
	daemon=$!
	for _ in $(seq 600); do [[ -S $T/b.sock ]] && return 0; sleep 0.05; done
	bad "batchd did not start: $(tail -3 "$T/batchd.log")"
	exit 1
}
stop() {
	local rc=0
	kill -TERM "$daemon"
	wait "$daemon" || rc=$?
	daemon=
	expect "batchd stopped with status 0 ($1)" test "$rc" -eq 0
}
# consume NAME DATASET SEED: one epoch's "EPOCH BATCH ID HASH" lines, sorted.
consume() {
	"$BATCHCTL" -s "$T/b.sock" consume "$2" --batch-size 8 --epochs 1 --seed "$3" \
		--print-samples >"$T/$1.raw" 2>"$T/$1.err" || return 1
	grep -E '^[0-9]+ [0-9]+ [0-9]+ [0-9a-f]+$' "$T/$1.raw" | sort >"$T/$1"
}

start
consume local1 local.bpk 1
consume local2 local.bpk 2
expect "the local copy reads 320 samples an epoch" test "$(wc -l <"$T/local1")" -eq 320
# Two sessions on the remote dataset at once: shared chunks, waits, evictions.
consume remote1 ds 1 &
one=$!
consume remote2 ds 2 &
two=$!
expect "session 1 on the remote dataset read its epoch" wait "$one"
expect "session 2 on the remote dataset read its epoch" wait "$two"
expect "session 1's samples are the local copy's" cmp -s "$T/remote1" "$T/local1"
expect "session 2's samples are the local copy's" cmp -s "$T/remote2" "$T/local2"
"$BATCHCTL" -s "$T/b.sock" status --json >"$T/status.json"
evicted=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["remote"]["cache"]["evicted_bytes"])' "$T/status.json")
expect "chunks were evicted under max_size (evicted $evicted bytes)" test "$evicted" -gt 0
stop "after the sessions"

# What the cache kept serves a new daemon; the rest is fetched again.
start
consume again ds 1
expect "after a restart the samples are the local copy's" cmp -s "$T/again" "$T/local1"
stop "after the restart"
expect "no sanitizer report in batchd's log" \
	bash -c "! grep -q -E 'ThreadSanitizer|AddressSanitizer|runtime error' '$T/batchd.log'"

echo "$PASS passed, $FAILED failed"
[[ $FAILED -eq 0 ]]
