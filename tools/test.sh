#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Install what is missing, build with --werror and run the whole suite; then
# build and run it again under AddressSanitizer + UndefinedBehaviorSanitizer,
# and the threaded suites under ThreadSanitizer. Exits non-zero on any failure.
# Needs PyPI once, for the S3 test server (tests/remote), the torch 2.x venv
# and kubernetes-validate (tests/deploy).
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/deps.sh
batchd_install_deps
# The S3 test server for tests/remote (moto, in a venv of its own), once,
# before the suites run it; and those tests fail rather than skip if it
# cannot be installed after all.
. tests/remote/s3lib.sh
s3_install
export BATCHD_S3_REQUIRED=1
# The python tests that import torch or numpy run twice in the plain build:
# under Debian's python3 and its torch 1.13, and under a venv's torch 2.x
# from PyPI (suite python-torch2, tests/python/requirements-torch2.txt; made
# once, 5.4 GiB, reused until the file changes). No venv is a failure, not
# a skip. The sanitizer builds run only the first, for time (the second
# costs about as much again): the library code they check is the same
# under either torch.
torch2_venv=$(batchd_venv torch2 tests/python/requirements-torch2.txt) || {
	echo "test.sh: could not make the torch 2.x venv (tools/deps.sh batchd_venv torch2)" >&2
	exit 1
}
# The Kubernetes API's schemas (kubernetes-validate, 143 MiB) that
# tests/deploy/test-kubernetes.py checks conf/kubernetes against; the test
# makes the venv itself when it is missing, and fails when it cannot.
batchd_venv k8s-validate tests/deploy/requirements.txt >/dev/null || {
	echo "test.sh: could not make the kubernetes-validate venv (tools/deps.sh batchd_venv k8s-validate)" >&2
	exit 1
}

jobs=$(nproc)

run_suite() {
	local dir=$1
	shift
	echo "== $dir: build"
	batchd_setup "$dir" --werror "$@"
	ninja -C "$dir"
	echo "== $dir: test"
	meson test -C "$dir" --print-errorlogs --num-processes "$jobs" ${BATCHD_SUITE:+--suite "$BATCHD_SUITE"}
}

run_suite build-test -Dfault_injection=true -Dtorch2_python="$torch2_venv/bin/python"
BATCHD_SUITE= run_suite build-asan -Dfault_injection=true -Db_sanitize=address,undefined -Db_lundef=false
BATCHD_SUITE=threads run_suite build-tsan -Dfault_injection=true -Db_sanitize=thread -Db_lundef=false
echo "== all suites passed"
