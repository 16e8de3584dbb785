#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The main job, end to end on this machine: install what is missing, build,
# pack a sample dataset made of real files (the Python standard library
# sources), verify it, start batchd on it, and consume shuffled epochs
# through libbatchclient (the waits of a loader alone: p50, p99, max);
# then what a user cares about: a trainer that computes (an MLP's forward
# and backward on each batch, on the CPU) fed by batchd and by PyTorch's
# DataLoader over the same files, in turns, and how much of its step time
# each one leaves it waiting (tools/demo-trainer.py), a CNN on real
# images, the images/s of a vision input pipeline against torchvision's
# (tools/bench/bench-images.py), ending with the side-by-side table and a
# verdict.
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

sock="$PWD/$work/batchd.sock"
echo "== starting batchd (socket $sock, datasets under $work)"
build/daemon/batchd --no-config --socket "$sock" --root "$PWD/$work" --log-level notice &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null; wait $daemon 2>/dev/null' EXIT
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
ctl=build/tools/batchctl
echo "== the loader alone: two epochs of batch 64, globally shuffled, one sample per block"
echo "   (no training step, so the run is all waiting: what counts is each wait, p50 to max)"
"$ctl" -s "$sock" consume stdlib.bpk --batch-size 64 --epochs 2 --shuffle global --seed 1
echo "== the same with block shuffling over 1 MiB blocks (decoded blocks are cached)"
"$ctl" -s "$sock" consume stdlib-1M.bpk --batch-size 64 --epochs 2 --shuffle block --seed 1
echo "== a step of 10 ms away from the loader (a GPU's): batchd keeps ahead, so the stall is small"
"$ctl" -s "$sock" consume stdlib.bpk --batch-size 64 --epochs 1 --shuffle global --step-ms 10
echo "== a trainer on GPU 0: every batch lands in device memory and is checked by copying it back"
# Without a GPU batchd refuses with its reason, and host sessions carry on.
"$ctl" -s "$sock" consume stdlib.bpk --batch-size 64 --epochs 1 --shuffle global --device 0 ||
	echo "   (no GPU session here: batchd serves host memory only, as the message says)"
echo "== a trainer that computes: an MLP step on the CPU for every batch of the same files,"
echo "   fed by batchd (stdlib.bpk) and by torch's DataLoader reading the files (0/2/4 workers),"
echo "   one epoch each in turns after a warm-up round (tools/demo-trainer.py --short)"
trained=0
/usr/bin/python3 tools/demo-trainer.py --build build --socket "$sock" --dataset stdlib.bpk \
	--files "$src" --short | tee "$work/trainer.txt" && trained=1 ||
	echo "   (skipped: tools/demo-trainer.py says what it needs above)"
echo "== batchctl stats"
"$ctl" -s "$sock" stats
kill -TERM $daemon
wait $daemon
trap - EXIT
echo "== batchd stopped cleanly"
echo "== a small CNN on real PNG images (class folders from /usr/share, PIL decode to 32x32):"
echo "   epoch time and data wait with DataLoader over the files (best of 0/2/4 workers) and"
echo "   with batchd, decoding in the collate hook, in 2 workers, and in the daemon (train_cnn.py --short)"
/usr/bin/python3 client/python/examples/train_cnn.py --short ||
	echo "   (skipped: client/python/examples/train_cnn.py says what it needs above)"
echo "== images/s of a vision trainer's input: JPEG decode, RandomResizedCrop(224), flip, uint8"
echo "   [64, 3, 224, 224] and labels, torchvision's ImageFolder + DataLoader (2 workers) against"
echo "   batchd decoding in the daemon, on 600 real photographs, A B A B (tools/bench/bench-images.py;"
echo "   the full comparison, DALI's CPU pipeline included, is in docs/benchmarks.md)"
/usr/bin/python3 tools/bench/bench-images.py --build build --workdir "$work/images" --n 600 \
	--arms torchvision,batchd --workers 2 --pairs 2 ||
	echo "   (skipped: tools/bench/bench-images.py says what it needs above)"
if [ $trained = 1 ]; then
	echo "== side by side: the same trainer, the same files, batchd against DataLoader"
	sed -n '/^loader /,$p' "$work/trainer.txt"
fi
