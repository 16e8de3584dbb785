#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# batchd on a dataset in an S3 bucket: the first epoch from the bucket
# (cold cache), later epochs from the cache on local disk, and the same
# pack on local disk, side by side in one run; then, with a 20 ms round
# trip to the bucket, how many GETs in flight keep up with decode.
#
#   tools/bench/bench-remote.sh OUTDIR [--size-mb MB] [--repeat R] [--sweep LIST]
#       [--delay-ms D] [--nice N]
#
# A pack of about MB megabytes of generated samples (default 1024; 256 KiB
# samples, half random bytes, half text: about 1.7x compression) is
# uploaded to a local S3 server (tests/remote/s3lib.sh: moto behind the
# proxy that counts requests and injects delays), and a copy kept on local
# disk. Then R (default 3) alternating rounds of three runs, each a fresh
# batchd (its default settings but the remote ones below) and
# `batchd-bench pipeline --epochs 1` through it (global shuffle, batch 16):
#   cold   the cache directory emptied: every block fetched from the bucket
#   cache  the cache kept from the run before, the daemon new (its memory
#          empty): every block read from the cache's files
#   local  the local copy, a root of the same daemon configuration
# each after dropping the page cache (root only; otherwise said, and the
# cache and local runs read from memory). Reported: raw MB/s delivered,
# cold/local and cache/local as the median of the rounds' ratios with min
# and max, the load average of each run, and per cold and cache epoch the
# GETs the proxy saw (and their bytes) and the daemon's remote counters.
# Then the sweep: the proxy delays every request by D ms (default 20), and
# for [remote] requests in LIST (default 1,4,8,16,32,64) one cold epoch
# each, R rounds alternating over LIST: delivered MB/s against the local
# figure, and which keeps up (>= 0.9 of it) - whether the default, 32, does.
# Speeds are those of moto and a Python proxy on this machine, not of a
# cloud bucket: what the sweep shows is the GETs in flight a round trip
# needs. Per-run JSON, the daemons' logs and the table's lines are left in
# OUTDIR. Needs PyPI once (moto, s3_install), and a batchd with remote datasets.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tools/bench/bench-lib.sh
. tools/bench/bench-lib.sh
# shellcheck source=tests/remote/s3lib.sh
. tests/remote/s3lib.sh

size_mb=1024 repeat=3 sweep=1,4,8,16,32,64 delay_ms=20
bl_args "OUTDIR [--size-mb MB] [--repeat R] [--sweep LIST] [--delay-ms D] [--nice N]" \
	"size-mb repeat sweep delay-ms" -- "$@"
[[ $size_mb =~ ^[1-9][0-9]*$ && $repeat =~ ^[1-9][0-9]*$ && $delay_ms =~ ^[0-9]+$ &&
	$sweep =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] ||
	{ echo "$0: --size-mb, --repeat, --delay-ms take numbers, --sweep a list like 1,4,32" >&2; exit 2; }
"$BATCHD" --help | grep -q -- --cache-dir ||
	{ echo "$0: $BATCHD has no remote datasets (no --cache-dir): build a batchd that has" >&2; exit 1; }
s3_install
mkdir -p "$out/s3" "$out/local" "$out/cache"
s3_start "$out/s3"
res=$out/remote.jsonl
: >"$res"

sample=262144
n=$((size_mb * 1000000 / sample))
bl_make_pack "$out/local/local.bpk" "$n" "$sample"
bl_pack_line "$out/local/local.bpk"
"$PACKER" info "$out/local/local.bpk" --json >"$out/pack.info.json"
curl -sSf -o /dev/null --aws-sigv4 "aws:amz:$AWS_DEFAULT_REGION:s3" \
	--user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' \
	-T "$out/local/local.bpk" "$S3_DIRECT/$S3_BUCKET/bench/remote.bpk"
echo "uploaded as s3://$S3_BUCKET/bench/remote.bpk"
# The bucket's keys for batchd, in a file only this user reads.
(umask 077 && printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' \
	"$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" >"$out/s3.credentials")
dropped=yes
echo 3 >/proc/sys/vm/drop_caches 2>/dev/null ||
	{ dropped=no; echo "note: cannot drop the page cache (needs root): cache and local runs read from memory"; }

# conf REQUESTS: the daemon's configuration, with [remote] requests = REQUESTS.
conf() {
	cat >"$out/remote.conf" <<-EOF
		[datasets]
		remote = s3://$S3_BUCKET/bench
		[remote]
		endpoint = $S3_ENDPOINT
		region = $AWS_DEFAULT_REGION
		addressing = path
		credentials = $out/s3.credentials
		requests = $1
		[cache]
		dir = $out/cache
		max_size = $((2 * size_mb + 64))M
	EOF
}

drop() { [[ $dropped == no ]] || bl_drop_caches; }
proxy() { curl -sSf "${@:2}" "$S3_PROXY_CTL/$1"; }

# run CASE SIDE ROUND DATASET: one epoch through a fresh batchd; its line in the results.
run() {
	local case=$1 side=$2 round=$3 ds=$4 load
	drop
	proxy 'reset?what=stats' -X POST -o /dev/null -d ''
	bl_daemon_start "$out/local" --config "$out/remote.conf"
	load=$(bl_load)
	bl_run "$BENCH" pipeline "$ds" --socket "$out/local/batchd.sock" --batch-size 16 --epochs 1 \
		--json >"$out/$case-$side$round.json"
	"$CTL" -s "$out/local/batchd.sock" status --json >"$out/$case-$side$round.status.json"
	proxy stats >"$out/$case-$side$round.proxy.json"
	cat "$out/local/batchd.log" >>"$out/batchd-all.log"
	bl_daemon_stop
	bl_record "$res" "$("$PY" - "$case" "$side" "$round" "$out/$case-$side$round" "$load" \
		"$(bl_tier "$out/local")" <<-'PYEOF'
		import json, sys
		case, side, rnd, base, load, tier = sys.argv[1:7]
		j = json.load(open(base + ".json"))
		st = json.load(open(base + ".status.json")).get("remote", {})
		px = json.load(open(base + ".proxy.json"))
		gets = [g for g in px["gets"] if g["status"] in (200, 206)]
		print(json.dumps({"case": case, "pair": int(rnd), "side": side, "unit": "MB/s",
		                  "value": j["total"]["bytes_per_s"] / 1e6, "load": load,
		                  "gets": len(gets), "ranged_gets": sum(1 for g in gets if g.get("range")),
		                  "get_bytes": sum(g.get("bytes") or 0 for g in gets),
		                  "requests": px["requests"], "remote": st, "tier": tier}))
	PYEOF
	)"
}

# 1. Side by side: cold, cache, local, R rounds.
conf 32
for r in $(seq "$repeat"); do
	rm -rf "${out:?}/cache"
	mkdir "$out/cache"
	run cold A "$r" remote.bpk
	run cache A "$r" remote.bpk
	run local B "$r" "$out/local/local.bpk"
	# Each remote side against this round's local run: copies of its line.
	lline=$(tail -1 "$res")
	printf '%s\n' "${lline/\"case\": \"local\"/\"case\": \"cold\"}" \
		"${lline/\"case\": \"local\"/\"case\": \"cache\"}" >>"$res"
	grep -E "\"pair\": $r," "$res" | "$PY" -c 'import json, sys
rows = {(r["case"], r["side"]): r for r in map(json.loads, sys.stdin)}
c, w, l = rows["cold", "A"], rows["cache", "A"], rows["local", "B"]
print("  round %s: cold %.0f MB/s (%d GETs, %.0f MB), cache %.0f MB/s (%d GETs), local %.0f MB/s: cold/local %.3f, cache/local %.3f" % (
    c["pair"], c["value"], c["gets"], c["get_bytes"] / 1e6, w["value"], w["gets"], l["value"],
    c["value"] / l["value"], w["value"] / l["value"]))'
done
echo "A = the remote pack (cold: from the bucket; cache: from the cache), B = the same pack local:"
grep -v '"case": "local"' "$res" >"$out/summary.jsonl"
bl_summary "$out/summary.jsonl"
"$PY" - "$res" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for case in ("cold", "cache"):
    a = [r for r in rows if r["case"] == case and r["side"] == "A"]
    rem = [r["remote"] for r in a]
    print(f"    {case}: GETs per epoch {statistics.median(r['gets'] for r in a):.0f}, "
          f"{statistics.median(r['ranged_gets'] for r in a):.0f} of them ranged "
          f"({statistics.median(r['get_bytes'] for r in a) / 1e6:.0f} MB), daemon: requests "
          f"{statistics.median(x.get('requests', 0) for x in rem):.0f}, cache hit "
          f"{statistics.median(x.get('cache', {}).get('hit_bytes', 0) for x in rem) / 1e6:.0f} MB, "
          f"fetched {statistics.median(x.get('cache', {}).get('fetched_bytes', 0) for x in rem) / 1e6:.0f} MB")
PYEOF
local_mbs=$("$PY" -c 'import json, statistics, sys
print(statistics.median(r["value"] for r in map(json.loads, open(sys.argv[1])) if r["case"] == "local"))' "$res")

# 2. The sweep: a round trip of D ms, [remote] requests from LIST.
proxy faults -X POST -o /dev/null -H 'Content-Type: application/json' -d "{\"delay_ms\": $delay_ms}"
IFS=, read -ra points <<<"$sweep"
for r in $(seq "$repeat"); do
	for q in "${points[@]}"; do
		conf "$q"
		rm -rf "${out:?}/cache"
		mkdir "$out/cache"
		run "sweep-$q" A "$r" remote.bpk
		tail -1 "$res" | "$PY" -c 'import json, sys
r = json.loads(sys.stdin.read())
print("  round %d, requests %s: %.0f MB/s (%d GETs, load %s)" % (r["pair"], sys.argv[1], r["value"], r["gets"], r["load"]))' "$q"
	done
done
proxy faults -X POST -o /dev/null -H 'Content-Type: application/json' -d '{}'
echo "sweep: every request delayed $delay_ms ms, cold cache, against local $local_mbs MB/s:"
"$PY" - "$res" "$local_mbs" "$sweep" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
local = float(sys.argv[2])
first = None
for q in sys.argv[3].split(","):
    v = [r["value"] for r in rows if r["case"] == f"sweep-{q}"]
    m = statistics.median(v)
    keeps = m >= 0.9 * local
    if keeps and first is None:
        first = q
    print(f"  requests {q:>3}: {m:7.0f} MB/s (min {min(v):.0f}, max {max(v):.0f}), "
          f"{m / local:.3f} of local{': keeps up' if keeps else ''}")
d = [r["value"] for r in rows if r["case"] == "sweep-32"]
if first:
    print(f"  the fewest that keep up (>= 0.9 of local): {first}")
else:
    print("  none keeps up (>= 0.9 of local)")
if d:
    print(f"  the default, 32: {'keeps up' if statistics.median(d) >= 0.9 * local else 'does not keep up'}")
PYEOF
