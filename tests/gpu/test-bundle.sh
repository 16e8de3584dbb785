#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The GPU bundle is what a GPU machine without network or compiler gets:
# bundle this build (tests/gpu/bundle.sh --build), check that it stays
# under 64 MiB and that every bundled program resolves only into the bundle
# and to the allow-list (glibc, the C++ runtime, the NVIDIA driver), then
# run the bundle's run.sh from an empty environment, away from the build
# tree, and check its summary: every step reported, the host steps passed,
# each GPU step passed or skipped with a reason.
#
#   test-bundle.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() { echo "ok - $*"; pass=$((pass + 1)); }
bad() { echo "FAIL - $*"; fail=$((fail + 1)); }

if ! "$src/tests/gpu/bundle.sh" --build "$build" "$tmp/bundle" >"$tmp/bundle.log" 2>&1; then
	cat "$tmp/bundle.log"
	echo "FAIL - bundle.sh"
	exit 1
fi
ok "bundle.sh: $(tail -n 1 "$tmp/bundle.log")"

size=$(du -sb "$tmp/bundle" | cut -f1)
[[ $size -lt $((64 << 20)) ]] && ok "bundle is $((size >> 20)) MiB (< 64)" ||
	bad "bundle is $((size >> 20)) MiB, over 64"

# Every library of every bundled ELF: inside the bundle, or on the allow-list.
allowed='^(linux-vdso\.so\.1|/lib64/ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libstdc\+\+\.so\.6|libgcc_s\.so\.1|libcuda\.so\.1|libnvidia-ml\.so\.1)$'
n=0
for f in "$tmp"/bundle/bin/* "$tmp"/bundle/tests/* "$tmp"/bundle/lib/*; do
	n=$((n + 1))
	while read -r name arrow path _; do
		[[ $name == statically ]] && continue        # a data-only library
		if [[ $arrow == "=>" && $path == /* ]]; then
			path=$(realpath "$path")
			[[ $path == "$tmp/bundle/lib/"* ]] && continue
		fi
		[[ $name =~ $allowed && $path != "not" ]] && continue
		bad "$(basename "$f") loads $name from ${path:-nowhere} (not the bundle, not allowed)"
	done < <(ldd "$f" | sed 's/ (0x[0-9a-f]*)$//')
	# RPATH, not LD_LIBRARY_PATH: the bundle's own directories only.
	rp=$(patchelf --print-rpath "$f")
	[[ $rp == '$ORIGIN/../lib' || $rp == '$ORIGIN' ]] || bad "$(basename "$f") has RPATH '$rp'"
done
[[ $fail -eq 0 ]] && ok "$n bundled ELF files resolve only into the bundle and to the allow-list"
for want in bin/batchd bin/batchd-pack bin/batchctl bin/batchd-bench bin/gpu-json tests/test-gpu \
	tests/test-daemon lib/libbatchclient.so.0 run.sh README.md VERSION tests.tsv; do
	[[ -e $tmp/bundle/$want ]] || bad "bundle lacks $want"
done
grep -q $'^gpu\t' "$tmp/bundle/tests.tsv" && grep -q $'^daemon\t' "$tmp/bundle/tests.tsv" &&
	ok "tests.tsv lists the gpu and daemon suites" || bad "tests.tsv: $(cat "$tmp/bundle/tests.tsv")"
if grep -q "$build\|$src" "$tmp/bundle/tests.tsv"; then
	bad "tests.tsv points into the build or source tree"
fi

# The run, as on the GPU machine: empty environment, elsewhere, no build tree.
mv "$tmp/bundle" "$tmp/moved"
rc=0
(cd / && env -i PATH=/usr/bin:/bin "$tmp/moved/run.sh" "$tmp/out" --no-suites --data-mib 32) \
	>"$tmp/run.log" 2>&1 || rc=$?
s=$tmp/out/summary.txt
[[ -s $s ]] || { cat "$tmp/run.log"; bad "no summary.txt"; exit 1; }
[[ $rc -eq 0 ]] && grep -q '^RESULT: PASS' "$s" && ok "run.sh passed (exit 0)" ||
	bad "run.sh exit $rc: $(tail -n 1 "$s")"
for st in libraries data batchd-start pipeline-host batchd-idle batchd-stop; do
	grep -Eq "^$st +ok " "$s" && ok "step $st ok" || bad "step $st: $(grep "^$st " "$s" || echo missing)"
done
for st in batchd-cuda h2d pipeline-gpu pipeline-touch consume-gpu; do
	l=$(grep -E "^$st " "$s" || true)
	if [[ $l =~ ^$st\ +ok\  ]]; then
		ok "step $st ok"
	elif [[ $l =~ ^$st\ +skipped\ +[0-9]+\ s\ +[^\ ].{10,} ]]; then
		ok "step $st skipped with a reason: ${l##*s  }"
	else
		bad "step $st: ${l:-missing}"
	fi
done
grep -q '^figures:' "$s" && grep -q '^ratios:' "$s" && grep -q '^GPU sessions' "$s" &&
	ok "summary has figures, ratios and GPU sessions" || bad "summary lacks a section"
host=$(grep 'host pipeline (pipeline, host memory)' "$s" | awk '{print $(NF-1)}')
[[ $host =~ ^[0-9]+\.[0-9]+$ ]] && ok "host pipeline figure: $host GB/s" || bad "host pipeline figure '$host'"

echo "# $pass passed, $fail failed"
[[ $fail -eq 0 ]]
