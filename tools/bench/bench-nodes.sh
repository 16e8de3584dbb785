#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# What each node of a multi-node job fetches from a bucket in the first
# epoch, against its share: N batchd daemons ("nodes", each with its own
# cache directory and socket) serving the W ranks of one job over one
# pack in a local S3 server.
#
#   tools/bench/bench-nodes.sh OUTDIR [--size-mb MB] [--sample BYTES] [--world W]
#       [--nodes LIST] [--shuffles LIST] [--chunk BYTES] [--nice N]
#
# A pack of about MB megabytes (default 1024) of generated samples of
# BYTES each (default 65536; half random bytes, half text) is uploaded to
# moto behind the counting proxy (tests/remote/s3lib.sh). Then for each
# node count in LIST (default 2,4) and each shuffle in LIST (default
# global,block,none): N fresh daemons with empty caches ([cache] chunk =
# BYTES, default the daemon's), the W ranks (default 8) split evenly over
# them, each rank a `batchctl consume --rank R --world W` of one epoch,
# all at once; then a second epoch the same way.
#
# Reported per node: the bytes it fetched in the first epoch (the daemon's
# remote.cache.fetched_bytes) against its share of the stored bytes (the
# pack's stored bytes x its ranks / W: what a node would fetch if it
# fetched only the blocks its ranks read, since every rank reads about
# W-th of the blocks), the requests it sent, its ranks' slowest first
# batch, and the job's GETs in the second epoch (0: served from the
# cache; the ranks' opens still send a HEAD each). And for
# the job: all nodes' fetches over the pack's size (N when each node
# fetches the whole bucket, 1 when the job fetches it once).
# Speeds are moto's on this machine, so only bytes and counts are
# reported. Needs PyPI once (moto), a batchd with remote datasets and
# about N x MB of free disk in OUTDIR.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tools/bench/bench-lib.sh
. tools/bench/bench-lib.sh
# shellcheck source=tests/remote/s3lib.sh
. tests/remote/s3lib.sh

size_mb=1024 sample=65536 world=8 nodes=2,4 shuffles=global,block,none chunk=""
bl_args "OUTDIR [--size-mb MB] [--sample BYTES] [--world W] [--nodes LIST] [--shuffles LIST] [--chunk BYTES] [--nice N]" \
	"size-mb sample world nodes shuffles chunk" -- "$@"
[[ $size_mb =~ ^[1-9][0-9]*$ && $sample =~ ^[1-9][0-9]*$ && $world =~ ^[1-9][0-9]*$ &&
	$nodes =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ && $shuffles =~ ^[a-z]+(,[a-z]+)*$ &&
	$chunk =~ ^([1-9][0-9]*[KM]?)?$ ]] ||
	{ echo "$0: --size-mb, --sample, --world take numbers, --nodes a list like 2,4, --shuffles one like global,block,none, --chunk a size like 64K" >&2; exit 2; }
IFS=, read -ra node_counts <<<"$nodes"
IFS=, read -ra shuffle_list <<<"$shuffles"
for n in "${node_counts[@]}"; do
	((n <= world)) || { echo "$0: --nodes $n is more than --world $world: every node needs a rank" >&2; exit 2; }
done
"$BATCHD" --help | grep -q -- --cache-dir ||
	{ echo "$0: $BATCHD has no remote datasets (no --cache-dir): build a batchd that has" >&2; exit 1; }
s3_install
pids=()
stop_nodes() {
	local p
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}
# s3_start chains its s3_stop before this.
trap stop_nodes EXIT
# A fresh server: s3lib reads its port from the log.
rm -rf "${out:?}/s3"
mkdir -p "$out/s3" "$out/pack"
s3_start "$out/s3"
res=$out/nodes.jsonl
: >"$res"

count=$((size_mb * 1000000 / sample))
bl_make_pack "$out/pack/nodes.bpk" "$count" "$sample"
bl_pack_line "$out/pack/nodes.bpk"
"$PACKER" info "$out/pack/nodes.bpk" --json >"$out/pack.info.json"
pack_bytes=$(stat -c %s "$out/pack/nodes.bpk")
curl -sSf -o /dev/null --aws-sigv4 "aws:amz:$AWS_DEFAULT_REGION:s3" \
	--user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' \
	-T "$out/pack/nodes.bpk" "$S3_DIRECT/$S3_BUCKET/bench/nodes.bpk"
echo "uploaded as s3://$S3_BUCKET/bench/nodes.bpk ($pack_bytes bytes)"
(umask 077 && printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' \
	"$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" >"$out/s3.credentials")
cat >"$out/node.conf" <<EOF
[datasets]
remote = s3://$S3_BUCKET/bench
[remote]
endpoint = $S3_ENDPOINT
region = $AWS_DEFAULT_REGION
addressing = path
credentials = $out/s3.credentials
[cache]
max_size = $((size_mb + size_mb / 4 + 64))M
${chunk:+chunk = $chunk}
EOF


# epoch N SHUFFLE E: every rank's epoch E at once, rank r on node r * N / W;
# each rank's report in $run/rank-R.E.json.
epoch() {
	local n=$1 shuffle=$2 e=$3 r node rpids=()
	for ((r = 0; r < world; r++)); do
		node=$((r * n / world))
		bl_run "$CTL" -s "$run/node$node/batchd.sock" consume nodes.bpk --rank "$r" \
			--world "$world" --shuffle "$shuffle" --batch-size 16 --start-epoch "$e" \
			--epochs 1 --json >"$run/rank-$r.$e.json" &
		rpids+=($!)
	done
	for r in "${rpids[@]}"; do wait "$r"; done
}

# status N E: each node's status after epoch E in $run/node-K.E.status.json.
status() {
	local k
	for ((k = 0; k < $1; k++)); do
		"$CTL" -s "$run/node$k/batchd.sock" status --json >"$run/node-$k.$2.status.json"
	done
}

for n in "${node_counts[@]}"; do
	for shuffle in "${shuffle_list[@]}"; do
		run=$out/n$n-$shuffle
		rm -rf "$run"
		for ((k = 0; k < n; k++)); do
			mkdir -p "$run/node$k/cache"
			bl_daemon_start "$run/node$k" --config "$out/node.conf" --cache-dir "$run/node$k/cache"
			pids+=("$DAEMON_PID")
			DAEMON_PID=""
		done
		epoch "$n" "$shuffle" 0
		status "$n" 0
		curl -sSf -X POST -o /dev/null -d '' "$S3_PROXY_CTL/reset?what=stats"
		epoch "$n" "$shuffle" 1
		status "$n" 1
		curl -sSf -o "$run/later.proxy.json" "$S3_PROXY_CTL/stats"
		stop_nodes
		"$PY" - "$run" "$n" "$world" "$shuffle" "$out/pack.info.json" "$pack_bytes" <<'PYEOF' >>"$res"
import json, sys
run, n, world, shuffle, info, pack_bytes = sys.argv[1:7]
n, world, pack_bytes = int(n), int(world), int(pack_bytes)
stored = json.load(open(info))["stored_bytes"]
ranks = [json.load(open(f"{run}/rank-{r}.0.json")) for r in range(world)]
again = [json.load(open(f"{run}/rank-{r}.1.json")) for r in range(world)]
samples = sum(r["samples"] for r in ranks)
px = json.load(open(f"{run}/later.proxy.json"))
later_gets = sum(1 for g in px["gets"] if g["status"] in (200, 206))
for k in range(n):
    mine = [r for r in range(world) if r * n // world == k]
    s0 = json.load(open(f"{run}/node-{k}.0.status.json"))["remote"]
    s1 = json.load(open(f"{run}/node-{k}.1.status.json"))["remote"]
    share = stored * len(mine) / world
    print(json.dumps({
        "nodes": n, "shuffle": shuffle, "node": k, "ranks": len(mine),
        "fetched": s0["cache"]["fetched_bytes"], "share": share,
        "ratio": s0["cache"]["fetched_bytes"] / share, "requests": s0["requests"],
        "later_requests": s1["requests"] - s0["requests"], "later_gets_job": later_gets,
        "first_batch_ms": max(ranks[r]["first_batch_ms"] for r in mine),
        "samples": samples, "samples_again": sum(r["samples"] for r in again),
        "failed": sum(r["failed"] for r in ranks + again),
        "pack_bytes": pack_bytes}))
PYEOF
		"$PY" - "$res" "$n" "$shuffle" <<'PYEOF'
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1]))
        if r["nodes"] == int(sys.argv[2]) and r["shuffle"] == sys.argv[3]]
total = sum(r["fetched"] for r in rows)
print(f"{sys.argv[2]} nodes, shuffle {sys.argv[3]}: the job fetched "
      f"{total / rows[0]['pack_bytes']:.2f} x the pack; per node "
      + ", ".join(f"{r['fetched'] / 1e6:.0f} MB = {r['ratio']:.2f} x its share "
                  f"({r['requests']} requests, first batch {r['first_batch_ms']:.0f} ms)"
                  for r in rows)
      + f"; second epoch {rows[0]['later_gets_job']} GETs "
        f"({sum(r['later_requests'] for r in rows)} requests: the ranks' opens)"
      + (f"; {rows[0]['failed']} batches FAILED" if rows[0]["failed"] else ""))
PYEOF
	done
done
echo "per-run reports, status and daemon logs in $out; one line per node in $res"
