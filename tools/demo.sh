#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The main job, end to end on this machine: install what is missing, build,
# pack a sample dataset made of real files (the Python standard library
# sources), verify it, and show what was made and how fast.
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/deps.sh
batchd_install_deps

batchd_setup build
ninja -C build >/dev/null
pack=build/tools/batchd-pack

src=$(ls -d /usr/lib/python3.[0-9]* 2>/dev/null | sort -V | tail -n 1)
[ -n "$src" ] || { echo "demo: no Python standard library under /usr/lib to pack" >&2; exit 1; }
work=${BATCHD_DEMO_DIR:-build/demo}
mkdir -p "$work"
rm -rf "$work/stdlib.bpk" "$work/stdlib-1M.bpk"

echo "== packing $src: one sample per file, for global shuffling"
"$pack" create "$work/stdlib.bpk" "$src"
echo "== packing it again in 1 MiB blocks, for sequential reading"
"$pack" create "$work/stdlib-1M.bpk" "$src" --block-size 1M
echo "== verifying every checksum and block"
"$pack" verify "$work/stdlib.bpk"
"$pack" verify "$work/stdlib-1M.bpk"
echo "== info"
"$pack" info "$work/stdlib.bpk"
echo "== sample 0 read back ($("$pack" cat "$work/stdlib.bpk" 0 | wc -c) bytes)"
