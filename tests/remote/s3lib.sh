# SPDX-License-Identifier: MIT
#
# s3lib.sh - an S3 server for the remote-dataset tests: moto's S3 server
# (tests/remote/s3server.py; moto from PyPI, pinned in requirements.txt, in a
# venv of its own) behind tests/remote/s3proxy.py (which verifies SigV4
# signatures, which moto does not, and injects faults). Why moto: it speaks
# the S3 REST protocol (ranged GET, HEAD, ListObjectsV2, multipart upload,
# ETags, If-Match, ACLs) and installs from PyPI in half a minute; radosgw
# needs a Ceph cluster and MinIO is not in Debian. See tests/remote/README.md
# for what it does not check.
#
#   . tests/remote/s3lib.sh
#   s3_install          # the venv with moto (tools/deps.sh batchd_venv) if
#                       # missing or out of date; S3__PYTHON is its python
#   s3_require          # s3_install, or exit 77 (cannot install, and not
#                       # BATCHD_S3_REQUIRED) or 1 (failed)
#   s3_start WORKDIR    # moto + proxy on free loopback ports (WORKDIR made
#                       # if missing); exports
#                       # S3_ENDPOINT (the proxy: clients use it), S3_DIRECT
#                       # (moto itself), S3_BUCKET (empty bucket batchd-test),
#                       # S3_PROXY_CTL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
#                       # AWS_DEFAULT_REGION; logs in WORKDIR
#   s3_public KEY       # make the object KEY of S3_BUCKET public-read, as it
#                       # must be on S3 for an unsigned GET
#   s3_stop             # also run at exit (s3_start chains it onto the EXIT trap)
#
# Call s3_start from the script's own shell, not from a subshell or $(...):
# the servers die with the shell that started them (PR_SET_PDEATHSIG through
# setpriv), even when it is killed with SIGKILL.
#
# Environment: BATCHD_VENV_DIR (where tools/deps.sh keeps its venvs; default
# ~/.cache/batchd/venv), BATCHD_S3_PYTHON (the interpreter running the proxy;
# default python3), BATCHD_S3_REQUIRED=1 (s3_require fails instead of
# skipping when the server cannot be installed: tools/test.sh sets it, so CI
# never skips these tests silently).
# shellcheck shell=bash

S3_BUCKET_NAME=batchd-test
S3__LIB_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
S3__ROOT=$(cd -- "$S3__LIB_DIR/../.." && pwd)
S3__PIDS=()
S3__PYTHON=
# shellcheck source=../../tools/deps.sh
. "$S3__ROOT/tools/deps.sh"

# s3_install: the venv of tests/remote/requirements.txt (moto[server]), made
# or brought up to date by batchd_venv; sets S3__PYTHON to its interpreter.
# Returns 77 when Debian's python3 cannot make a venv at all (python3-venv
# missing; tools/deps.sh installs it), 1 when pip failed (its output is on
# stderr), 0 when the server is ready to start.
s3_install() {
	local dir
	if ! /usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null; then
		echo "s3lib: Debian's python3 cannot make a venv (apt-get install python3-venv," \
			"or run tools/test.sh, which installs it)" >&2
		return 77
	fi
	dir=$(batchd_venv s3-moto "$S3__LIB_DIR/requirements.txt") || {
		echo "s3lib: could not install moto from PyPI (is it reachable? BATCHD_VENV_DIR" \
			"may name a directory where the venv s3-moto is already made)" >&2
		return 1
	}
	S3__PYTHON="$dir/bin/python"
}

# s3_require: s3_install for a test script, which it ends when that fails:
# exit 77 (skip) when it cannot be installed here and BATCHD_S3_REQUIRED is
# not 1, else exit 1.
s3_require() {
	local rc=0
	s3_install || rc=$?
	[[ $rc -eq 0 ]] && return 0
	if [[ ${BATCHD_S3_REQUIRED:-0} == 1 ]]; then
		echo "s3lib: s3_install failed (see above), and BATCHD_S3_REQUIRED=1 forbids skipping" >&2
		exit 1
	fi
	echo "SKIP: the S3 test server could not be installed (see above)"
	exit 77
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

# s3_start WORKDIR: start moto and the proxy (see the top of the file).
s3_start() {
	local work=$1 s3port pport
	if [[ -z $work ]]; then
		echo "usage: s3_start WORKDIR" >&2
		return 2
	fi
	if [[ ! -x $S3__PYTHON ]]; then
		echo "s3lib: no S3 server installed: run s3_install (or s3_require) first" >&2
		return 1
	fi
	mkdir -p -- "$work" || return
	work=$(cd -- "$work" && pwd) || return
	s3__chain_exit_trap
	export AWS_ACCESS_KEY_ID=BATCHDTEST AWS_SECRET_ACCESS_KEY=BATCHDTEST AWS_DEFAULT_REGION=us-east-1
	export AWS_REGION=us-east-1
	# Port 0: the kernel picks a free port when the server binds, so two test
	# runs can never race for one; each server then prints the port it got.
	s3__spawn "$work/s3server.log" "$S3__PYTHON" "$S3__LIB_DIR/s3server.py" \
		--listen 127.0.0.1:0 --bucket "$S3_BUCKET_NAME"
	S3__SERVER_PID=$S3__PID
	s3port=$(s3__wait_port "$work/s3server.log" "moto listening on" "$S3__SERVER_PID") || return
	export S3_DIRECT="http://127.0.0.1:$s3port"
	s3__spawn "$work/s3proxy.log" "${BATCHD_S3_PYTHON:-python3}" "$S3__LIB_DIR/s3proxy.py" \
		--upstream "$S3_DIRECT" --listen 127.0.0.1:0 --access-key "$AWS_ACCESS_KEY_ID" \
		--secret "$AWS_SECRET_ACCESS_KEY" --region "$AWS_DEFAULT_REGION" --log "$work/s3proxy.requests"
	S3__PROXY_PID=$S3__PID
	pport=$(s3__wait_port "$work/s3proxy.log" "s3proxy listening on" "$S3__PROXY_PID") || return
	export S3_ENDPOINT="http://127.0.0.1:$pport"
	export S3_PROXY_CTL="$S3_ENDPOINT/__proxy"
	export S3_BUCKET=$S3_BUCKET_NAME
	s3__answers "$S3_DIRECT/$S3_BUCKET" "moto" || return
	s3__answers "$S3_ENDPOINT/$S3_BUCKET" "the proxy" || return
	# The readiness probes are not the test's requests.
	curl -sf -X POST -o /dev/null "$S3_PROXY_CTL/reset"
}

# s3_public KEY: the object KEY of $S3_BUCKET readable by anyone (its ACL
# public-read, set through moto directly).
s3_public() {
	local code
	code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT --max-time 10 \
		--aws-sigv4 "aws:amz:$AWS_DEFAULT_REGION:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
		-H 'x-amz-acl: public-read' "$S3_DIRECT/$S3_BUCKET/$1?acl") || true
	[[ $code == 200 ]] || {
		echo "s3lib: PUT ?acl public-read of $S3_BUCKET/$1 answered $code" >&2
		return 1
	}
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
