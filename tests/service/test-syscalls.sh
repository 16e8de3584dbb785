#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Every system call batchd makes is one its unit's SystemCallFilter= lets
# through. Under the unit a call outside the filter fails with EPERM, and
# some failures are quiet (io_uring refused: the pread engine instead;
# mincore refused: a dataset's tier chosen blind), so a new call in the
# daemon must show up here, not on an operator's machine. batchd runs under
# `strace -f` through sessions on both read engines (global and block
# shuffling, a GPU session on the fake CUDA where it is built, the HTTP
# listener, a reload, status and metrics, a drain), and each call in the
# trace is looked up in the filter as systemd-analyze expands it.
# Exit 77 (skip) without strace or systemd-analyze, or where ptrace is not
# allowed.
#
#   test-syscalls.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
command -v strace >/dev/null || { echo "skip: strace is not installed"; exit 77; }
command -v systemd-analyze >/dev/null || { echo "skip: systemd-analyze is not installed"; exit 77; }
strace -f -qq -o /dev/null true 2>/dev/null || { echo "skip: ptrace is not allowed here"; exit 77; }
tmp=$(mktemp -d)
daemon=
trap '[ -z "$daemon" ] || kill -KILL "$daemon" 2>/dev/null; rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() { echo "ok - $*"; pass=$((pass + 1)); }
bad() { echo "FAIL - $*"; fail=$((fail + 1)); }
ctl=$build/tools/batchctl

# Samples: this source tree's C files, one per block and in 1 MiB blocks.
"$build/tools/batchd-pack" create "$tmp/small.bpk" "$src/daemon" >/dev/null
"$build/tools/batchd-pack" create "$tmp/large.bpk" "$src/daemon" --block-size 1M >/dev/null
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
fake=$build/tests/fakecuda
[ -e "$fake/libcuda.so.1" ] || fake=

# One daemon under strace, with [io] engine = ENGINE, through a session mix.
session() {
	local engine=$1 sock=$tmp/$1.sock pid
	cat >"$tmp/$engine.conf" <<-EOF
		[daemon]
		socket = $sock
		socket_group = $(id -g)
		[datasets]
		root = $tmp
		[io]
		engine = $engine
		[metrics]
		listen = 127.0.0.1:$port
	EOF
	# LeakSanitizer cannot run under ptrace: the sanitizer builds check leaks elsewhere.
	ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 \
		LD_LIBRARY_PATH=${fake}${fake:+:}${LD_LIBRARY_PATH:-} strace -f -qq -o "$tmp/trace.$engine" \
			"$build/daemon/batchd" -c "$tmp/$engine.conf" --log-level notice 2>"$tmp/$engine.log" &
	daemon=$!
	# Slow under strace on a loaded machine: up to 30 s.
	for _ in $(seq 600); do [ -S "$sock" ] && break; sleep 0.05; done
	pid=$(pgrep -P "$daemon" -x batchd || true)
	if [ ! -S "$sock" ] || [ -z "$pid" ]; then
		bad "$engine: batchd did not start: $(tail -3 "$tmp/$engine.log")"
		kill -KILL "$daemon" 2>/dev/null || true
		wait "$daemon" 2>/dev/null || true
		daemon=
		return
	fi
	"$ctl" -s "$sock" consume small.bpk --batch-size 16 --epochs 2 --shuffle global --seed 1 >/dev/null &&
		"$ctl" -s "$sock" consume large.bpk --batch-size 16 --epochs 2 --shuffle block --seed 1 >/dev/null &&
		ok "$engine: host sessions" || bad "$engine: a host session failed"
	if [ -n "$fake" ]; then
		LD_LIBRARY_PATH=$fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
			"$ctl" -s "$sock" consume small.bpk --batch-size 16 --epochs 1 --device 0 >/dev/null &&
			ok "$engine: GPU session (fake CUDA)" || bad "$engine: the GPU session failed"
	fi
	kill -HUP "$pid"
	"$ctl" -s "$sock" stats >/dev/null && "$ctl" -s "$sock" sessions >/dev/null &&
		"$ctl" -s "$sock" metrics >/dev/null && ok "$engine: status and metrics" ||
		bad "$engine: status or metrics failed"
	if grep -q 'metrics on http' "$tmp/$engine.log"; then
		/usr/bin/python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/metrics', timeout=5).read()" &&
			ok "$engine: HTTP /metrics" || bad "$engine: HTTP /metrics failed"
	fi
	kill -TERM "$pid"
	if wait "$daemon"; then ok "$engine: batchd drained and exited 0"; else bad "$engine: batchd exited $?"; fi
	daemon=
	# auto is io_uring wherever the kernel allows it; say so where it does not.
	if grep -q "I/O $engine" "$tmp/$engine.log"; then
		ok "$engine: served with the $engine engine"
	elif [ "$engine" = auto ] && grep -q "I/O io_uring" "$tmp/$engine.log"; then
		ok "$engine: served with the io_uring engine"
	elif [ "$engine" = auto ]; then
		echo "note: io_uring is unavailable here, so its calls are not in the trace:" \
			"$(grep -m1 listening "$tmp/$engine.log")"
	else
		bad "$engine: not served with the $engine engine: $(grep -m1 listening "$tmp/$engine.log")"
	fi
}
session auto
session pread

# Remote datasets: the fetcher's libcurl (sockets, name lookup, poll), the
# cache's writes, fdatasync, renames and punched holes, through a session
# on a dataset in a bucket (moto from tests/remote/s3lib.sh) whose cache
# is smaller than it, and a second daemon reading what the cache kept.
remote() {
	local sock=$tmp/remote.sock pid run
	# shellcheck source=../remote/s3lib.sh
	. "$src/tests/remote/s3lib.sh"
	s3_require
	s3_start "$tmp/s3"
	"$build/tools/batchd-pack" create "s3://$S3_BUCKET/sys/large" "$src/daemon" --block-size 1M \
		--endpoint "$S3_ENDPOINT" >/dev/null
	cat >"$tmp/remote.conf" <<-EOF
		[daemon]
		socket = $sock
		[datasets]
		remote = s3://$S3_BUCKET/sys
		[remote]
		endpoint = $S3_ENDPOINT
		[cache]
		dir = $tmp/cache
		max_size = 64M
		chunk = 64K
	EOF
	for run in cold cached; do
		ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 \
			strace -f -qq -o "$tmp/trace.remote-$run" \
				"$build/daemon/batchd" -c "$tmp/remote.conf" --log-level notice \
				2>"$tmp/remote-$run.log" &
		daemon=$!
		for _ in $(seq 600); do [ -S "$sock" ] && break; sleep 0.05; done
		pid=$(pgrep -P "$daemon" -x batchd || true)
		if [ ! -S "$sock" ] || [ -z "$pid" ]; then
			bad "remote: batchd did not start: $(tail -3 "$tmp/remote-$run.log")"
			kill -KILL "$daemon" 2>/dev/null || true
			daemon=
			return
		fi
		"$ctl" -s "$sock" consume large --batch-size 16 --epochs 2 --shuffle global --seed 1 \
			>/dev/null && ok "remote: a session on a dataset in a bucket ($run cache)" ||
			bad "remote: the session failed ($run cache)"
		kill -TERM "$pid"
		if wait "$daemon"; then ok "remote: batchd drained and exited 0 ($run cache)"
		else bad "remote: batchd exited $? ($run cache)"; fi
		daemon=
		rm -f "$sock"
	done
}
remote

# The calls in the traces, against the unit's filter: an allow-list (the
# first SystemCallFilter= line) less the ~ lines, groups expanded.
missing=$(/usr/bin/python3 - "$build/conf/batchd-test.service" "$tmp"/trace.* <<-'EOF'
	import re, subprocess, sys
	out = subprocess.run(["systemd-analyze", "syscall-filter", "--no-pager"],
	                     capture_output=True, text=True, check=True).stdout
	groups, cur = {}, None
	for line in out.splitlines():
	    word = line.strip()
	    if line.startswith("@"):
	        cur = groups.setdefault(word, [])
	    elif word and not word.startswith("#") and cur is not None:
	        cur.append(word)
	def expand(name, seen=()):
	    if not name.startswith("@"):
	        return {name}
	    return set().union(*(expand(m, seen + (name,)) for m in groups[name] if m not in seen))
	allowed = None
	for line in open(sys.argv[1]):
	    if not line.startswith("SystemCallFilter="):
	        continue
	    value = line.split("=", 1)[1].strip()
	    deny = value.startswith("~")
	    names = set().union(*(expand(n) for n in value.lstrip("~").split()))
	    if allowed is None and deny:
	        sys.exit("the unit's filter is a deny-list: this test checks an allow-list")
	    allowed = (allowed - names) if deny else (allowed or set()) | names
	if allowed is None:
	    sys.exit("the unit has no SystemCallFilter=")
	used = set()
	for path in sys.argv[2:]:
	    for line in open(path):
	        m = re.match(r"\d+\s+([a-z0-9_]+)\(", line)
	        if m:
	            used.add(m.group(1))
	print(" ".join(sorted(used - allowed)) or "-", len(used))
	EOF
) || missing=
if [ -z "$missing" ]; then
	bad "could not check the calls against the unit's filter"
elif [ "${missing%% *}" = "-" ]; then
	ok "all ${missing#* } system calls batchd made are in its unit's SystemCallFilter="
else
	bad "system calls batchd made that its unit's SystemCallFilter= refuses: ${missing% *}"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
