#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench.sh [run.py options] - the peers' harness in one command: the venv
# (setup.sh), then run.py with its python. --build as run.py takes it
# (default build), also given to setup.sh.
#
#   tools/peers/bench.sh --workload all --build build --workdir /var/tmp/peers
#   tools/peers/bench.sh --workload tokens,tokens-mix --build build --workdir /var/tmp/peers
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build
prev=
for a in "$@"; do
	[[ $prev == --build ]] && build=$a
	[[ $a == --build=* ]] && build=${a#--build=}
	prev=$a
done
venv=$(tools/peers/setup.sh "$build")
exec "$venv/bin/python" tools/peers/run.py "$@"
