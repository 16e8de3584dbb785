#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# setup.sh [BUILD] - the peers' venv: the loaders of tools/peers/requirements.txt
# (torch, torchvision, DALI, litData, Mosaic streaming, WebDataset,
# torchdata, matplotlib; the whole closure pinned) in a venv of Debian's
# python3 made by tools/deps.sh's batchd_venv (kept under
# ~/.cache/batchd/venv/peers, remade when the file changes). Checks that
# batchclient imports in it against BUILD's libbatchclient (default build)
# and prints the venv's directory.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tools/deps.sh
. tools/deps.sh
build=${1:-build}
venv=$(batchd_venv peers tools/peers/requirements.txt)
if [[ -e $build/client/libbatchclient.so.0 ]]; then
	BATCHCLIENT_LIB=$build/client/libbatchclient.so.0 PYTHONPATH=client/python \
		"$venv/bin/python" -c 'import batchclient' ||
		{ echo "$0: batchclient does not import in $venv" >&2; exit 1; }
fi
printf '%s\n' "$venv"
