# SPDX-License-Identifier: MIT
#
# s3lib.sh - an S3 server for the remote-dataset tests: s3rver (a real S3
# protocol server on a directory, from npm) behind tests/remote/s3proxy.py
# (which verifies SigV4 signatures, which s3rver does not, and injects
# faults). Why s3rver: it is small, installs with npm in seconds and speaks
# the S3 REST protocol (ranged GET, HEAD, ListObjectsV2, multipart upload,
# ETags); radosgw needs a Ceph cluster and MinIO is not in Debian. See
# tests/remote/README.md for what it does not check.
#
#   . tests/remote/s3lib.sh
#   s3_install          # s3rver@3.7.1 into $BATCHD_S3RVER_DIR (default
#                       # build-deps/s3rver under the repository root) if missing
#   s3_require          # s3_install, or exit 77 (no node/npm) or 1 (failed)
#   s3_start WORKDIR    # s3rver + proxy on free loopback ports (WORKDIR made
#                       # if missing); exports
#                       # S3_ENDPOINT (the proxy: clients use it), S3_DIRECT
#                       # (s3rver itself), S3_BUCKET (empty bucket batchd-test),
#                       # S3_PROXY_CTL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
#                       # AWS_DEFAULT_REGION; logs and data in WORKDIR
#   s3_stop             # also run at exit (s3_start chains it onto the EXIT trap)
#
# Call s3_start from the script's own shell, not from a subshell or $(...):
# the servers die with the shell that started them (PR_SET_PDEATHSIG through
# setpriv), even when it is killed with SIGKILL.
#
# Environment: BATCHD_S3RVER_DIR (where s3rver is installed), BATCHD_S3_PYTHON
# (the interpreter running the proxy; default python3), BATCHD_S3_REQUIRED=1
# (s3_available fails instead of skipping when node or npm is missing:
# tools/test.sh sets it, so CI never skips these tests silently).
# shellcheck shell=bash

S3RVER_VERSION=3.7.1
S3_BUCKET_NAME=batchd-test
S3__LIB_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
S3__ROOT=$(cd -- "$S3__LIB_DIR/../.." && pwd)
S3__PIDS=()

s3__dir() { printf '%s\n' "${BATCHD_S3RVER_DIR:-$S3__ROOT/build-deps/s3rver}"; }
s3__bin() { printf '%s/node_modules/s3rver/bin/s3rver.js\n' "$(s3__dir)"; }

# The installed s3rver's version, or nothing.
s3__installed_version() {
	local pkg
	pkg="$(s3__dir)/node_modules/s3rver/package.json"
	[[ -f $pkg ]] || return 0
	node -e 'process.stdout.write(require(process.argv[1]).version)' "$pkg" 2>/dev/null || true
}

# s3_available: 0 when node and npm are there; otherwise says why and returns
# 77 (skip), or 1 with BATCHD_S3_REQUIRED=1.
s3_available() {
	local tool
	for tool in node npm; do
		if ! command -v "$tool" >/dev/null 2>&1; then
			if [[ ${BATCHD_S3_REQUIRED:-0} == 1 ]]; then
				echo "s3lib: $tool is not installed, and BATCHD_S3_REQUIRED=1 forbids skipping" \
					"(tools/deps.sh batchd_install_node installs Debian's nodejs and npm)" >&2
				return 1
			fi
			echo "s3lib: $tool is not installed (Debian: apt-get install nodejs npm," \
				"or run tools/test.sh, which installs them)" >&2
			return 77
		fi
	done
}

# s3_install: npm install s3rver@$S3RVER_VERSION into $(s3__dir) unless that
# version is there. Concurrent callers wait for each other (flock). Returns
# non-zero with npm's output on stderr when the install fails.
s3_install() {
	local dir lock rc=0
	s3_available || return
	dir=$(s3__dir)
	mkdir -p -- "$dir" || return
	lock="$dir/.install.lock"
	(
		flock 9 || exit 1
		[[ $(s3__installed_version) == "$S3RVER_VERSION" ]] && exit 0
		# A package.json of its own keeps npm from climbing to another project's.
		printf '{"name": "batchd-test-s3rver", "private": true}\n' >"$dir/package.json"
		echo "s3lib: installing s3rver@$S3RVER_VERSION into $dir" >&2
		if ! npm install --prefix "$dir" --no-audit --no-fund --no-save --loglevel=error \
			"s3rver@$S3RVER_VERSION" >"$dir/npm-install.log" 2>&1; then
			echo "s3lib: npm install s3rver@$S3RVER_VERSION failed (is the npm registry reachable?" \
				"set BATCHD_S3RVER_DIR to an installed copy otherwise):" >&2
			tail -n 20 "$dir/npm-install.log" >&2
			exit 1
		fi
		[[ $(s3__installed_version) == "$S3RVER_VERSION" ]] || {
			echo "s3lib: npm ran but $(s3__bin) is not s3rver $S3RVER_VERSION" >&2
			exit 1
		}
	) 9>"$lock" || rc=$?
	return "$rc"
}

# s3_require: s3_install for a test script, which it ends when that fails:
# exit 77 (skip) when node or npm is missing (s3_available), else exit 1.
s3_require() {
	local rc=0
	s3_install || rc=$?
	if [[ $rc -eq 77 ]]; then
		echo "SKIP: node or npm missing (see above)"
		exit 77
	elif [[ $rc -ne 0 ]]; then
		echo "s3lib: s3_install failed (see above)" >&2
		exit 1
	fi
}

# s3__spawn LOG CMD...: CMD in the background, its output in LOG, killed
# when this shell dies; its pid in S3__PID.
s3__spawn() {
	local log=$1
	shift
	if command -v setpriv >/dev/null 2>&1; then
		setpriv --pdeathsig KILL -- "$@" </dev/null >>"$log" 2>&1 &
	else
		"$@" </dev/null >>"$log" 2>&1 &
	fi
	S3__PID=$!
	S3__PIDS+=("$S3__PID")
}

# s3__wait_port LOG PATTERN PID: the port that LOG's line "PATTERN HOST:PORT"
# names, once the process PID has written it (30 s at most).
s3__wait_port() {
	local log=$1 pattern=$2 pid=$3 i port
	for ((i = 0; i < 300; i++)); do
		port=$(sed -n "s/^$pattern [0-9.]*:\([0-9][0-9]*\).*/\1/p" "$log" 2>/dev/null | tail -n 1)
		if [[ -n $port ]]; then
			printf '%s\n' "$port"
			return 0
		fi
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "s3lib: $pattern exited before listening; $log:" >&2
			tail -n 20 "$log" >&2
			return 1
		fi
		sleep 0.1
	done
	echo "s3lib: no '$pattern' line in $log after 30 s" >&2
	return 1
}

# s3__answers URL WHAT: wait until a signed HEAD of URL answers 200 (10 s at most).
s3__answers() {
	local url=$1 what=$2 i code
	for ((i = 0; i < 100; i++)); do
		code=$(curl -s -o /dev/null -w '%{http_code}' -I --max-time 2 \
			--aws-sigv4 "aws:amz:$AWS_DEFAULT_REGION:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
			-H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$url" || true)
		[[ $code == 200 ]] && return 0
		sleep 0.1
	done
	echo "s3lib: $what never answered 200 to HEAD $url (last: $code)" >&2
	return 1
}

# s3__chain_exit_trap: run s3_stop at exit, before what the EXIT trap did already.
s3__chain_exit_trap() {
	local cur sig
	cur=$(trap -p EXIT)
	cur=${cur#"trap -- "}
	cur=${cur%" EXIT"}
	if [[ -n $cur ]]; then
		eval "cur=$cur"
	fi
	[[ $cur == *s3_stop* ]] && return 0
	# The earlier trap still sees the exit status in $? (and set -e never
	# cuts the chain short).
	# shellcheck disable=SC2064,SC2154 # expanded now, on purpose: the earlier trap's text; s3__status is set by the trap
	trap "s3__status=\$?; s3_stop || :; (exit \$s3__status) && :; $cur" EXIT
	# A signal runs the EXIT trap only when the shell exits through a trap of its own.
	for sig in INT TERM HUP; do
		[[ -n $(trap -p "$sig") ]] || trap "exit 129" "$sig"
	done
}

# s3_start WORKDIR: start s3rver and the proxy (see the top of the file).
s3_start() {
	local work=$1 s3port pport
	if [[ -z $work ]]; then
		echo "usage: s3_start WORKDIR" >&2
		return 2
	fi
	if [[ ! -f $(s3__bin) ]]; then
		echo "s3lib: $(s3__bin) missing: run s3_install first" >&2
		return 1
	fi
	mkdir -p -- "$work/s3data" || return
	work=$(cd -- "$work" && pwd) || return
	s3__chain_exit_trap
	export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_DEFAULT_REGION=us-east-1
	export AWS_REGION=us-east-1
	# Port 0: the kernel picks a free port when the server binds, so two test
	# runs can never race for one; each server then prints the port it got.
	s3__spawn "$work/s3rver.log" node "$(s3__bin)" -d "$work/s3data" -a 127.0.0.1 -p 0 \
		--configure-bucket "$S3_BUCKET_NAME" --silent
	S3__S3RVER_PID=$S3__PID
	s3port=$(s3__wait_port "$work/s3rver.log" "S3rver listening on" "$S3__S3RVER_PID") || return
	export S3_DIRECT="http://127.0.0.1:$s3port"
	s3__spawn "$work/s3proxy.log" "${BATCHD_S3_PYTHON:-python3}" "$S3__LIB_DIR/s3proxy.py" \
		--upstream "$S3_DIRECT" --listen 127.0.0.1:0 --access-key "$AWS_ACCESS_KEY_ID" \
		--secret "$AWS_SECRET_ACCESS_KEY" --region "$AWS_DEFAULT_REGION" --log "$work/s3proxy.requests"
	S3__PROXY_PID=$S3__PID
	pport=$(s3__wait_port "$work/s3proxy.log" "s3proxy listening on" "$S3__PROXY_PID") || return
	export S3_ENDPOINT="http://127.0.0.1:$pport"
	export S3_PROXY_CTL="$S3_ENDPOINT/__proxy"
	export S3_BUCKET=$S3_BUCKET_NAME
	s3__answers "$S3_DIRECT/$S3_BUCKET" "s3rver" || return
	s3__answers "$S3_ENDPOINT/$S3_BUCKET" "the proxy" || return
	# The readiness probes are not the test's requests.
	curl -sf -X POST -o /dev/null "$S3_PROXY_CTL/reset"
}

# s3_stop: stop what s3_start started (TERM, then KILL after 5 s).
s3_stop() {
	local pid i
	for pid in "${S3__PIDS[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${S3__PIDS[@]}"; do
		for ((i = 0; i < 50; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	S3__PIDS=()
}
