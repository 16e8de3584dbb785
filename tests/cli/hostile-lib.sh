# SPDX-License-Identifier: MIT
#
# hostile-lib.sh - what batchd-pack's hostile-input scripts (issue 34:
# test-pack-confined.sh and the test-pack-*.sh beside it that source
# this) share beyond cli-lib.sh: their setup, the check that a create is
# refused leaving nothing behind, and the keys a pack lists. Kept apart
# from cli-lib.sh so that test-pack-cli.sh's helpers stay its own.
# Sourced before BIN and T exist: hostile_init sets them, then sources
# cli-lib.sh.
# shellcheck shell=bash

# hostile_init USAGE NARGS ARGS...: exit 2 with "usage: SCRIPT USAGE" unless ARGS are
# NARGS; else BIN is the first, made absolute, and T a scratch directory removed on exit.
hostile_init() {
	local usage=$1 nargs=$2
	shift 2
	if [[ $# -ne $nargs ]]; then
		echo "usage: $0 $usage" >&2
		exit 2
	fi
	BIN=$(realpath -- "$1")
	T=$(mktemp -d "${TMPDIR:-/tmp}/$(basename "$0" .sh).XXXXXX")
	trap 'rm -rf "$T"' EXIT
	# shellcheck source=cli-lib.sh
	. "$(dirname -- "${BASH_SOURCE[0]}")/cli-lib.sh"
}

# create_refused DESC OUT NEEDLE ARGS...: create OUT ARGS must fail (exit 1) naming
# NEEDLE and leave OUT's directory as it was (no output, no temporary file).
# shellcheck disable=SC2034 # needle and before are read by the eval
create_refused() {
	local desc=$1 out=$2 needle=$3 before
	shift 3
	before=$(ls -A "$(dirname "$out")")
	run create "$out" "$@"
	# shellcheck disable=SC2016 # expanded when expect runs it
	expect "$desc: refused (exit $RC) naming '$needle', nothing written: $(err)" \
		eval 'clean_fail && [[ $RC -eq 1 ]] && err_has "$needle" &&
			[[ $(ls -A "$(dirname "$out")") == "$before" && ! -e $out ]]'
}

# pack_keys PACK: the keys `ls` lists, each followed by a blank.
pack_keys() {
	"$BIN" ls "$1" | cut -d' ' -f2 | tr '\n' ' '
}
