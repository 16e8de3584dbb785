# SPDX-License-Identifier: MIT
# shellcheck shell=bash
#
# bench-lib.sh - what tools/bench/bench-cold.sh and tools/bench/bench-cpu-trainer.sh
# share: packs of generated samples, a batchd with its default settings on
# a directory, the CPU time each of its threads used, the page cache
# dropped, and the table of alternating pairs.
#
# Why: both scripts compare batchd against a baseline that runs no loader
# (decode only; the trainer's loop over batches already in memory), on a
# machine shared with other work. Each measures in alternating pairs A B A
# B ... so that a change in the machine's load hits both sides alike, and
# reports the median ratio with its spread, the load average of every run
# and where the daemon's CPU time went. Sourced from the repository root,
# after `ninja -C build`.

BENCH=build/tools/batchd-bench
PACKER=build/tools/batchd-pack
BATCHD=build/daemon/batchd
CTL=build/tools/batchctl
PY=${PYTHON:-/usr/bin/python3}
DAEMON_PID=""
WATCH_PID=""
# The niceness both sides run at (--nice): below 0, other jobs on a shared
# machine take less from either side; the daemon and the trainer keep the
# same weight against each other. Where the kernel groups tasks by session
# (autogroup), a task's nice weighs only against its own session's tasks:
# the script then runs in a session of its own and gives that session's
# group the same niceness.
BL_NICE=0

# bl_run COMMAND...: COMMAND at niceness BL_NICE.
bl_run() { nice -n "$BL_NICE" "$@"; }

# bl_args USAGE NAMES -- OUTDIR [--NAME VALUE]...: OUTDIR into $out (made,
# absolute) and each --NAME VALUE into the variable NAME (dashes as
# underscores) for the names listed, plus --nice into BL_NICE; anything
# else prints USAGE and exits 2. Then checks the build is there.
bl_args() {
	local usage=$1 names=" ${2//-/_} nice " name
	shift 3
	local args=("$@")
	[[ $# -ge 1 && $1 != -* ]] || { echo "usage: $0 $usage" >&2; exit 2; }
	out=$1
	shift
	while [[ $# -gt 0 ]]; do
		name=${1#--}
		name=${name//-/_}
		if [[ $# -lt 2 || $1 != --* || $names != *" $name "* ]]; then
			echo "usage: $0 $usage" >&2
			exit 2
		fi
		[[ $name == nice ]] && name=BL_NICE
		printf -v "$name" '%s' "$2"
		shift 2
	done
	bl_own_session "${args[@]}"
	bl_need_build
	mkdir -p "$out"
	out=$(cd "$out" && pwd)
	trap 'bl_watch_stop; bl_daemon_stop' EXIT
}

# bl_own_session ARGS...: for a --nice under autogroup, the script again
# with ARGS (its own, as given) in a new session whose group gets BL_NICE.
# The scripts run from the repository root, where they are tools/NAME.
bl_own_session() {
	[[ $BL_NICE != 0 && $(cat /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null) == 1 ]] || return 0
	if [[ -z ${BL_SESSION:-} ]]; then
		BL_SESSION=1 exec setsid -w "tools/bench/$(basename "$0")" "$@"
	fi
	echo "$BL_NICE" >/proc/self/autogroup
}

bl_need_build() {
	local b
	for b in "$BENCH" "$PACKER" "$BATCHD" "$CTL"; do
		[[ -x $b ]] || { echo "$0: $b is missing: build first (ninja -C build)" >&2; exit 1; }
	done
}

# bl_make_pack OUT N SIZE [BATCHD-PACK ARGS...]: OUT made of N samples of SIZE
# bytes (half random bytes, half text: about 1.7x compression), packed with
# batchd-pack's defaults and ARGS, unless an OUT of the same making exists.
bl_make_pack() {
	bl__make_pack mixed "$@"
}

# bl_make_random_pack OUT N SIZE [BATCHD-PACK ARGS...]: the same with samples of
# random bytes only: incompressible, stored raw, so that decoding them costs
# a hash and a copy.
bl_make_random_pack() {
	bl__make_pack random "$@"
}

# bl__make_pack mixed|random OUT N SIZE [ARGS...]: what the two above share (seed 1).
bl__make_pack() {
	local kind=$1 out=$2 n=$3 size=$4 want have=""
	shift 4
	want="$n x $size, $* (seed 1)"
	[[ $kind == random ]] && want="random $want"
	[[ -f $out.made ]] && have=$(cat "$out.made")
	if [[ -e $out && $have == "$want" ]]; then return 0; fi
	rm -rf "$out" "$out.made"
	"$PY" - "$out.records" "$n" "$size" "$kind" <<'PYEOF'
import random, sys
out, n, size, kind = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rng = random.Random(1)
with open(out, "wb") as f:
    if kind == "random":
        for _ in range(n):
            f.write(rng.randbytes(size))
        sys.exit(0)
    words = b"batch daemon sample tensor gpu zstd block epoch queue loader shard stream ring".split()
    text = b" ".join(rng.choice(words) for _ in range(1 << 18))
    half = size // 2
    for _ in range(n):
        at = rng.randrange(0, len(text) - (size - half))
        f.write(rng.randbytes(half) + text[at:at + size - half])
PYEOF
	"$PACKER" create "$out" --records "$size" "$out.records" "$@" >/dev/null
	rm -f "$out.records"
	echo "$want" >"$out.made"
}

# bl_pack_line PACK: one line of what PACK holds.
bl_pack_line() {
	"$PACKER" info "$1" --json | "$PY" -c 'import json, sys
j = json.load(sys.stdin)
print("%s: %d samples in %d blocks, %.1f MB raw, %.1f MB stored" % (sys.argv[1], j["samples"], j["blocks"], j["raw_bytes"] / 1e6, j["stored_bytes"] / 1e6))' "$(basename "$1")"
}

# bl_daemon_start ROOT [BATCHD ARGS...]: a batchd with its default settings
# (but ARGS) serving ROOT on ROOT/batchd.sock (log in ROOT/batchd.log);
# DAEMON_PID is its pid. --no-config: the machine's batchd.conf must not
# change the run (a --config FILE in ARGS comes later and wins).
bl_daemon_start() {
	local root=$1
	shift
	rm -f "$root/batchd.sock"
	nice -n "$BL_NICE" "$BATCHD" --no-config "$@" --socket "$root/batchd.sock" --root "$root" >"$root/batchd.log" 2>&1 &
	DAEMON_PID=$!
	for _ in $(seq 500); do
		[[ -S $root/batchd.sock ]] && return 0
		kill -0 "$DAEMON_PID" 2>/dev/null || break
		sleep 0.02
	done
	echo "$0: batchd did not start:" >&2
	cat "$root/batchd.log" >&2
	exit 1
}

# bl_watch_start FILE: from now until bl_watch_stop, the CPU seconds every
# thread of the daemon has used since it started ({"TID NAME": seconds},
# tid == pid named "main"), looked at every 100 ms and kept for threads
# that end before the run does, in FILE as JSON.
bl_watch_start() {
	"$PY" - "$DAEMON_PID" "$(getconf CLK_TCK)" "$1" <<'PYEOF' &
import json, os, signal, sys, time
pid, hz, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
seen = {}
def look():
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in tids:
        try:
            stat = open(f"/proc/{pid}/task/{tid}/stat").read()
            comm = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
        except OSError:
            continue
        f = stat[stat.rindex(")") + 2:].split()
        seen[f"{tid} {'main' if tid == pid else comm}"] = (int(f[11]) + int(f[12])) / hz
def done(*_):
    look()
    out = dict(sorted(seen.items(), key=lambda kv: int(kv[0].split()[0])))
    with open(path, "w") as fh:
        json.dump(out, fh)
    sys.exit(0)
signal.signal(signal.SIGTERM, done)
while True:
    look()
    time.sleep(0.1)
PYEOF
	WATCH_PID=$!
}

# bl_watch_stop: the watch ends with its file written. Not in a $(...):
# only this shell can wait for it.
bl_watch_stop() {
	[[ -n $WATCH_PID ]] || return 0
	kill -TERM "$WATCH_PID" 2>/dev/null || true
	wait "$WATCH_PID" || true
	WATCH_PID=""
}

bl_daemon_stop() {
	[[ -n $DAEMON_PID ]] || return 0
	kill -TERM "$DAEMON_PID" 2>/dev/null || true
	wait "$DAEMON_PID" 2>/dev/null || true
	DAEMON_PID=""
}

# bl_tier ROOT: the tiers batchd's log gave its datasets ("stored: tier ram").
bl_tier() {
	grep -o "stored: tier [a-z]*" "$1/batchd.log" | sed 's/.*tier //' | sort -u | paste -sd/ -
}

bl_drop_caches() {
	sync
	if ! echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; then
		echo "$0: cannot drop the page cache (needs root)" >&2
		exit 1
	fi
}

bl_load() { cut -d' ' -f1-3 /proc/loadavg; }

# bl_record FILE JSON: one run's line of the results.
bl_record() { printf '%s\n' "$2" >>"$1"; }

# bl_summary FILE: one row per case from the results' lines, each
# {"case", "pair", "side": "A"|"B"|"C", "value", "unit", "load", ...}: the
# median of A, of B and of the pairs' A/B ratios with their min and max,
# the load averages; A/C the same way where there are "C" lines (their
# "what" says what C is); then the same ratio of "first" and "steady" where
# both sides have them, the medians of A's "stall_pct" and "daemon_cpu_s",
# A's daemon threads' CPU seconds in the last pair, and A's tiers.
bl_summary() {
	"$PY" - "$1" <<'PYEOF'
import json, statistics, sys
med = statistics.median
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def spread(v, fmt):
    return f"median {fmt % med(v)} (min {fmt % min(v)}, max {fmt % max(v)})"
for c in dict.fromkeys(r["case"] for r in rows):
    pairs = {}
    for r in rows:
        if r["case"] == c:
            pairs.setdefault(r["pair"], {})[r["side"]] = r
    whole = [(p["A"], p["B"]) for _, p in sorted(pairs.items()) if "A" in p and "B" in p]
    if not whole:
        continue
    u = whole[0][0]["unit"]
    loads = [float(x["load"].split()[0]) for ab in whole for x in ab]
    print(f"{c}: A {med(a['value'] for a, _ in whole):.4g} {u}, "
          f"B {med(b['value'] for _, b in whole):.4g} {u}, "
          f"A/B {spread([a['value'] / b['value'] for a, b in whole], '%.3f')}, "
          f"{len(whole)} pairs, load {min(loads):.2f}-{max(loads):.2f}")
    withc = [(p["A"], p["C"]) for _, p in sorted(pairs.items()) if "A" in p and "C" in p]
    if withc:
        print(f"    C {med(x['value'] for _, x in withc):.4g} {u} ({withc[0][1]['what']}), "
              f"A/C {spread([a['value'] / x['value'] for a, x in withc], '%.3f')}")
    for k in ("first", "steady"):
        if k in whole[0][0] and k in whole[0][1]:
            print(f"    {k} A/B: " + spread([a[k] / b[k] for a, b in whole], "%.3f"))
    for k in ("stall_pct", "daemon_cpu_s"):
        if k in whole[0][0]:
            print(f"    A {k}: " + spread([a[k] for a, _ in whole], "%.2f"))
    if "threads" in whole[-1][0]:
        t = whole[-1][0]["threads"]
        print("    A daemon threads, CPU s (last pair): " +
              ", ".join(f"{k} {v:.2f}" for k, v in sorted(t.items(), key=lambda kv: -kv[1])))
    print("    A tier: " + "/".join(sorted({a.get("tier") or "?" for a, _ in whole})))
PYEOF
}
