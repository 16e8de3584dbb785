#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Prometheus side of batchd, checked with promtool (Debian's
# prometheus package): the alerting rules load (check rules) and behave
# (test rules on tests/prometheus/batchd-alerts-test.yml); a real batchd's
# metrics, scraped while a session runs with a GPU-hour price set, pass
# `promtool check metrics`; every batchd_* name the rules and the Grafana
# dashboard use is one the daemon exports (the NVML GPU names only when
# it has NVML); and the dashboard's queries parse as PromQL.
# Exit 77 (skip) without promtool.
#
#   test-prometheus.sh rules|unit|metrics SOURCE_DIR [BUILD_DIR]
set -euo pipefail
what=$1
src=$2
build=${3:-}
alerts=$src/conf/prometheus/batchd-alerts.yml
dashboard=$src/conf/grafana/batchd.json
if ! command -v promtool >/dev/null; then
	echo "skip: promtool is not installed (Debian package prometheus)"
	exit 77
fi

case $what in
rules)
	promtool check rules "$alerts"
	exit
	;;
unit)
	promtool test rules "$src/tests/prometheus/batchd-alerts-test.yml"
	exit
	;;
metrics) ;;
*)
	echo "usage: $0 rules|unit|metrics SOURCE_DIR [BUILD_DIR]" >&2
	exit 2
	;;
esac

batchd=$build/daemon/batchd
pack=$build/tools/batchd-pack
ctl=$build/tools/batchctl
tmp=$(mktemp -d)
daemon_pid=
consumer_pid=
cleanup() {
	[ -n "$consumer_pid" ] && kill "$consumer_pid" 2>/dev/null || true
	[ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
pass=0
fail=0
ok() { echo "ok - $*"; pass=$((pass + 1)); }
bad() { echo "FAIL - $*"; fail=$((fail + 1)); }

# A dataset of 400 samples, a daemon with a price, a trainer that keeps a session open.
mkdir -p "$tmp/in" "$tmp/root"
for i in $(seq -w 1 400); do
	head -c $((100 + 10#$i)) /dev/urandom >"$tmp/in/$i"
done
"$pack" create "$tmp/root/train.bpk" "$tmp/in" >"$tmp/pack.log" 2>&1 ||
	{ cat "$tmp/pack.log"; exit 1; }
cat >"$tmp/batchd.conf" <<CONF
[daemon]
socket = $tmp/sock
[datasets]
root = $tmp/root
[metrics]
gpu_hour_price = 2.50
CONF
"$batchd" -c "$tmp/batchd.conf" 2>"$tmp/batchd.log" &
daemon_pid=$!
for _ in $(seq 100); do
	"$ctl" -s "$tmp/sock" status >/dev/null 2>&1 && break
	kill -0 "$daemon_pid" 2>/dev/null || { cat "$tmp/batchd.log"; exit 1; }
	sleep 0.1
done
"$ctl" -s "$tmp/sock" consume train.bpk --batch-size 8 --epochs 100000 --step-ms 5 >/dev/null 2>&1 &
consumer_pid=$!
for _ in $(seq 100); do
	"$ctl" -s "$tmp/sock" metrics >"$tmp/metrics.txt"
	grep -q '^batchd_session_stall_seconds_total{' "$tmp/metrics.txt" && break
	sleep 0.1
done
grep -q '^batchd_session_stall_seconds_total{' "$tmp/metrics.txt" &&
	grep -q '^batchd_session_stall_cost_total{' "$tmp/metrics.txt" &&
	grep -q '^batchd_stall_cost_total ' "$tmp/metrics.txt" &&
	ok "the scrape has the per-session stall and cost series" ||
	bad "no per-session stall or cost series in the scrape: $(grep stall "$tmp/metrics.txt" | head -5)"

# 1. The exposition passes promtool's checks and lint.
if out=$(promtool check metrics <"$tmp/metrics.txt" 2>&1); then
	ok "promtool check metrics on a real batchd's metrics ($(grep -c '^# TYPE' "$tmp/metrics.txt") families)"
else
	bad "promtool check metrics: $out"
fi

# 2. Every batchd_* name the rules and the dashboard use is exported.
"$ctl" -s "$tmp/sock" status --json >"$tmp/status.json"
if python3 - "$alerts" "$dashboard" "$tmp/metrics.txt" "$tmp/status.json" "$tmp/dash-rules.yml" <<'PY'
import json, re, sys
alerts, dashboard, metrics, status, rules_out = sys.argv[1:]
exported = set(re.findall(r"^# TYPE (\S+)", open(metrics).read(), re.M))
st = json.load(open(status))
nvml = st.get("nvml", {}).get("available", False)
# The NVML telemetry: exported only where the daemon has NVML.
gpu = {"batchd_gpu_utilization_ratio", "batchd_gpu_memory_used_bytes",
       "batchd_gpu_memory_total_bytes", "batchd_gpu_temperature_celsius",
       "batchd_gpu_power_watts", "batchd_gpu_throttle_reasons", "batchd_gpu_ecc_errors_total"}
d = json.load(open(dashboard))
exprs = [t["expr"] for p in d["panels"] for t in p.get("targets", [])]
used = set()
for text in [open(alerts).read()] + exprs:
    for name in re.findall(r"\bbatchd_[a-z0-9_]+", text):
        used.add(re.sub(r"_(bucket|sum|count)$", "", name) if name.startswith("batchd_client_wait") else name)
# Per CUDA device: exported only where the daemon has CUDA devices.
cuda = st.get("cuda", {}).get("available", False)
per_device = {"batchd_cuda_device_lost"}
missing = sorted(n for n in used if n not in exported and (nvml or n not in gpu)
                 and (cuda or n not in per_device))
if missing:
    print("not exported by batchd: " + ", ".join(missing))
    sys.exit(1)
print("%d names used, all exported%s" % (len(used), "" if nvml else " (NVML GPU names: no NVML here)"))
# The dashboard's queries as recording rules, Grafana's variables filled in, for promtool.
with open(rules_out, "w") as f:
    f.write("groups:\n  - name: dashboard\n    rules:\n")
    for i, e in enumerate(exprs):
        e = e.replace("$__range", "1h").replace("$__rate_interval", "5m").replace("$instance", ".*")
        f.write("      - record: dashboard:query%d\n        expr: %s\n" % (i, json.dumps(e)))
PY
then
	ok "the rules and the dashboard use only exported names"
else
	bad "the rules or the dashboard use a name batchd does not export"
fi

# 3. The dashboard's queries parse.
if out=$(promtool check rules "$tmp/dash-rules.yml" 2>&1); then
	ok "the dashboard's $(grep -c 'record:' "$tmp/dash-rules.yml") queries parse as PromQL"
else
	bad "dashboard queries: $out"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
