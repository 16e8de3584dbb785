#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# fuzz.sh - build one libFuzzer target with clang, ASan and UBSan, and run it.
#
#   tools/test/fuzz.sh NAME SECONDS [LIBFUZZER-FLAG...]
#
# NAME is pack, protocol, config, remote-map, s3xml or image
# (tests/fuzz/fuzz-NAME.c). The target is built in its own directory
# (build-fuzz, or $BATCHD_FUZZ_BUILD) so the ordinary gcc build is left
# alone, then run for SECONDS on a scratch copy
# of its seed corpus (tests/fuzz/corpus/NAME), so the inputs it finds do not
# pile up in the repository. Extra arguments go to libFuzzer (e.g. -jobs=2).
#
# Exits 0 when the run ends without a finding; otherwise prints the path of
# the crashing input (kept under the scratch directory, which is then not
# removed) and exits 1. To keep a finding as a regression case, fix the bug
# and copy the input into tests/fuzz/corpus/NAME/: the replay tests in
# `meson test` run it from then on.
#
# Needs clang and compiler-rt (the libFuzzer runtime); as root it installs
# the Debian packages clang and libclang-rt-14-dev when they are missing.
set -euo pipefail

usage() {
	echo "usage: $0 pack|protocol|config|remote-map|s3xml|image SECONDS [LIBFUZZER-FLAG...]" >&2
	exit 2
}

[ $# -ge 2 ] || usage
name=$1
seconds=$2
shift 2
case $name in
pack | protocol | config | remote-map | s3xml | image) ;;
*) usage ;;
esac
case $seconds in
'' | *[!0-9]*) usage ;;
esac

cd "$(dirname "$0")/../.."
src=$PWD
builddir=${BATCHD_FUZZ_BUILD:-build-fuzz}

# ---- toolchain ---------------------------------------------------------------

have_libfuzzer() {
	command -v clang >/dev/null || return 1
	# Link a trivial target: proves clang finds the fuzzer runtime.
	local t
	t=$(mktemp -d)
	printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
		'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);' \
		'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' \
		>"$t/t.c"
	clang -fsanitize=fuzzer,address,undefined "$t/t.c" -o "$t/t" >/dev/null 2>&1
	local r=$?
	rm -rf "$t"
	return $r
}

if ! have_libfuzzer; then
	pkgs=(clang libclang-rt-14-dev)
	if [ "$(id -u)" -ne 0 ]; then
		echo "fuzz.sh: clang with libFuzzer is missing; install it: sudo apt-get install ${pkgs[*]}" >&2
		exit 2
	fi
	echo "fuzz.sh: installing ${pkgs[*]}"
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${pkgs[@]}"
	have_libfuzzer || { echo "fuzz.sh: clang still cannot link a libFuzzer target" >&2; exit 2; }
fi

# ---- build ---------------------------------------------------------------------

opts=(-Dfuzzers=true -Db_sanitize=address,undefined -Db_lundef=false --werror)
if [ -f "$builddir/build.ninja" ]; then
	meson configure "$builddir" "${opts[@]}" >/dev/null
else
	CC=clang meson setup "$builddir" "${opts[@]}" >/dev/null
fi
# A directory configured earlier with gcc would silently build no fuzzers.
if ! grep -q "^ *build tests/fuzz/fuzz-$name:" "$builddir/build.ninja"; then
	echo "fuzz.sh: $builddir has no fuzz-$name target (configured with another compiler?);" \
		"remove it or set BATCHD_FUZZ_BUILD" >&2
	exit 2
fi
ninja -C "$builddir" "tests/fuzz/fuzz-$name" >/dev/null
case $builddir in /*) fuzzer=$builddir/tests/fuzz/fuzz-$name ;; *) fuzzer=$src/$builddir/tests/fuzz/fuzz-$name ;; esac

# ---- run -----------------------------------------------------------------------

scratch=$(mktemp -d "${TMPDIR:-/tmp}/batchd-fuzz-$name.XXXXXX")
keep=0
cleanup() { [ $keep -eq 1 ] || rm -rf "$scratch"; }
trap cleanup EXIT
mkdir "$scratch/corpus" "$scratch/artifacts"
cp "$src/tests/fuzz/corpus/$name"/. "$scratch/corpus/" -R

# One process, one worker (libFuzzer's default: no -jobs/-workers, whose
# fork mode would send the output to fuzz-N.log files instead).
flags=(
	-max_total_time="$seconds"
	-artifact_prefix="$scratch/artifacts/"
	-print_final_stats=1
	-timeout=25
	-rss_limit_mb=2048
)
[ "$name" = config ] && flags+=(-dict="$src/tests/fuzz/config.dict")

# Make UBSan findings crashes (libFuzzer then saves the input), and let
# leaks count as findings too.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}

echo "fuzz.sh: fuzz-$name for ${seconds}s, corpus $scratch/corpus"
cd "$scratch"
set +e
# The whole log is kept; the terminal gets the progress lines and the verdict.
"$fuzzer" "${flags[@]}" "$@" "$scratch/corpus" 2>&1 | tee "$scratch/fuzz.log" |
	grep --line-buffered -E '^#[0-9]+[[:space:]]+(INITED|DONE|pulse)|^==[0-9]+==|^SUMMARY|^stat::|^Done |^INFO: Seed'
status=${PIPESTATUS[0]}
set -e
cd "$src"

crashes=$(find "$scratch/artifacts" -type f | sort)
if [ "$status" -ne 0 ] || [ -n "$crashes" ]; then
	keep=1
	echo "fuzz.sh: fuzz-$name failed (exit $status); log: $scratch/fuzz.log" >&2
	if [ -n "$crashes" ]; then
		echo "fuzz.sh: crashing input(s):" >&2
		echo "$crashes" >&2
		echo "fuzz.sh: reproduce: $fuzzer ${crashes%%$'\n'*}" >&2
	fi
	exit 1
fi
echo "fuzz.sh: fuzz-$name: no crash in ${seconds}s ($(find "$scratch/corpus" -type f | wc -l) corpus files)"
