#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# test-remote.sh - remote datasets through real batchd daemons: starts
# moto and the proxy (tests/remote/s3lib.sh), then runs
# tests/remote/test_remote.py (or the test file named first: test_cache.py)
# against them, which starts its own daemons.
#
#   BATCHD=build/daemon/batchd BATCHD_PACK=build/tools/batchd-pack \
#   BATCHCLIENT_LIB=build/client/libbatchclient.so.0 PYTHONPATH=client/python \
#   bash tests/remote/test-remote.sh [test_cache.py] [TestCase[.test_name]...]
#
# (meson test sets the environment.) Exit status: the Python test's; 77
# (skip) when moto cannot be installed, unless BATCHD_S3_REQUIRED=1.
set -euo pipefail
export LC_ALL=C

HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
# Sanitizer builds preload their runtime for python3 (tests/python/meson.build);
# moto, curl and the proxy are not instrumented and run without it.
preload=${LD_PRELOAD:-}
unset LD_PRELOAD

# shellcheck source=s3lib.sh
. "$HERE/s3lib.sh"
s3_require

# A short path: the daemons' sockets live below it (sun_path is 108 bytes).
base=${TMPDIR:-/tmp}
[[ ${#base} -lt 40 ]] || base=/tmp
W=$(mktemp -d "$base/bd-s3.XXXXXX")
# shellcheck disable=SC2317 # called by the EXIT trap
keep() {
	# The logs of a failed run stay for reading; a passing run leaves nothing.
	if [[ $1 -eq 0 ]]; then rm -rf "$W"; else echo "logs kept in $W" >&2; fi
}
trap 'keep $?' EXIT
s3_start "$W"
export PYTHONPATH="$HERE/../python${PYTHONPATH:+:$PYTHONPATH}"
export S3_WORKDIR=$W
rc=0
script=test_remote.py
if [[ ${1:-} == *.py ]]; then
	script=$1
	shift
fi
LD_PRELOAD=$preload "${BATCHD_TEST_PYTHON:-/usr/bin/python3}" "$HERE/$script" "$@" || rc=$?
s3_stop
exit "$rc"
