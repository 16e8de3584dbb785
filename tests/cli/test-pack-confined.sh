#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# test-pack-confined.sh - batchd-pack reads nothing outside its input
# trees (issue 34, item 9), end to end.
#
#   bash tests/cli/test-pack-confined.sh PATH/TO/batchd-pack FAULT_INJECTION
#
# An input directory holding a symlinked directory that leads out, and a
# manifest naming a file through one, never pack the secret beside the
# tree; a symlink that stays inside a manifest's directory still works.
# Then the race itself, made deterministic: in a -Dfault_injection=true
# build (FAULT_INJECTION "true"), batchd-pack runs $BATCHD_PACK_AFTER_SCAN
# between its scan and its reads, and the hook swaps a scanned directory
# for a symlink to an outside directory holding a same-sized secret at the
# same relative path (so the size check cannot be what catches it), or a
# scanned file for a FIFO. Each must stop the pack naming the file, leave
# no output, and never put the secret's bytes anywhere.
#
# Each check prints "ok - ..." or "FAIL - ..."; the last line is
# "N passed, M failed". Exit status 0 when nothing failed, 1 otherwise.
# shellcheck disable=SC2016 # expect ... eval '...' expands when the check runs, on purpose
set -euo pipefail
export LC_ALL=C

# shellcheck source=hostile-lib.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/hostile-lib.sh"
hostile_init "PATH/TO/batchd-pack true|false" 2 "$@"
FAULTS=$2

SECRET='SECRET-0123456789'
# fresh: a tree in $T/in (in/sub/f and in/top, 18 bytes each like the secret),
# and $T/outside/sub/f and $T/outside/f holding the secret, mode 600.
fresh() {
	rm -rf "$T/in" "$T/outside" "$T/dst"
	mkdir -p "$T/in/sub" "$T/outside/sub" "$T/dst"
	printf 'inside-sub-f-abcd\n' >"$T/in/sub/f"
	printf 'inside-top-abcdef\n' >"$T/in/top"
	printf '%s\n' "$SECRET" >"$T/outside/sub/f"
	printf '%s\n' "$SECRET" >"$T/outside/f"
	chmod 600 "$T/outside/sub/f" "$T/outside/f"
}
# no_secret PACK: no sample's bytes hold the secret.
no_secret() {
	local k
	for k in $(pack_keys "$1"); do
		if "$BIN" cat "$1" --key "$k" | grep -qF "$SECRET"; then
			return 1
		fi
	done
}
# refused_race DESC NEEDLE ARGS...: create $T/dst/r.bpk ARGS is refused naming NEEDLE.
refused_race() {
	create_refused "$1" "$T/dst/r.bpk" "${@:2}"
}

# ---- 1. symlinks in the tree at the scan -----------------------------------------------

echo "# 1. symlinks present at the scan"
fresh
ln -s ../outside "$T/in/out-dir"
ln -s ../outside/f "$T/in/out-file"
run create "$T/dst/a.bpk" "$T/in"
if [[ $RC -eq 0 ]]; then
	got=$(pack_keys "$T/dst/a.bpk")
	expect "directory with symlinks leading out: only the tree's own files (keys: $got)" \
		test "$got" = "sub/f top "
	expect "... and no sample holds the secret" no_secret "$T/dst/a.bpk"
else
	bad "directory with symlinks leading out: exit $RC $(err)"
fi

M=$T/in
printf 'path,n\nsub/f,1\nout-dir/sub/f,2\n' >"$M/through-dir.csv"
refused_race "manifest row through a symlinked directory leading out" \
	"through-dir.csv:3: path 'out-dir/sub/f' escapes the manifest's directory" \
	--manifest "$M/through-dir.csv"
ln -s sub "$T/in/in-dir"
printf 'path,n\ntop,1\nin-dir/f,2\n' >"$M/inside.csv"
run create "$T/dst/m.bpk" --manifest "$M/inside.csv"
if [[ $RC -eq 0 ]]; then
	expect "manifest row through a symlink that stays inside: packed, keyed as written ($(pack_keys "$T/dst/m.bpk"))" \
		test "$(pack_keys "$T/dst/m.bpk")" = "top in-dir/f "
	expect "... holding the file it leads to" \
		eval '[[ $("$BIN" cat "$T/dst/m.bpk" --key in-dir/f) == inside-sub-f-abcd ]]'
else
	bad "manifest row through an inside symlink: exit $RC $(err)"
fi

# ---- 2. the race: the tree changes between the scan and the reads ---------------------

echo "# 2. a directory swapped for a symlink after the scan"
if [[ $FAULTS != true ]]; then
	skip "the race needs BATCHD_PACK_AFTER_SCAN, built only with -Dfault_injection=true"
else
	# Without a change the hook is harmless: the same pack as without it.
	fresh
	BATCHD_PACK_AFTER_SCAN=true run create "$T/dst/h.bpk" "$T/in"
	expect "the hook alone changes nothing: exit $RC $(err)" \
		eval '[[ $RC -eq 0 && $(pack_keys "$T/dst/h.bpk") == "sub/f top " ]]'

	fresh
	swap="mv '$T/in/sub' '$T/in/sub.old' && ln -s '$T/outside/sub' '$T/in/sub'"
	BATCHD_PACK_AFTER_SCAN=$swap refused_race "directory input, sub/ swapped for a symlink out" \
		"$T/in/sub/f: cannot open: a symlink is on its path now" "$T/in"
	expect "... the swap did happen (in/sub is a symlink to the secret's directory)" \
		eval '[[ -L $T/in/sub && $(cat "$T/in/sub/f") == "$SECRET" ]]'

	fresh
	swap="mv '$T/in/sub' '$T/in/sub.old' && ln -s ../outside/sub '$T/in/sub'"
	BATCHD_PACK_AFTER_SCAN=$swap refused_race "directory input, a relative symlink swapped in" \
		"$T/in/sub/f: cannot open: a symlink is on its path now" "$T/in" --threads 1

	fresh
	swap="mv '$T/in' '$T/in.old' && ln -s '$T/outside' '$T/in'"
	BATCHD_PACK_AFTER_SCAN=$swap run create "$T/dst/root.bpk" "$T/in"
	expect "the input directory itself swapped: the tree scanned is the tree read (exit $RC $(err))" \
		eval '[[ $RC -eq 0 && $(pack_keys "$T/dst/root.bpk") == "sub/f top " ]] && no_secret "$T/dst/root.bpk"'
	rm -f "$T/in"
	mv "$T/in.old" "$T/in"

	fresh
	printf 'path,n\ntop,1\nsub/f,2\n' >"$T/in/m.csv"
	swap="mv '$T/in/sub' '$T/in/sub.old' && ln -s '$T/outside/sub' '$T/in/sub'"
	BATCHD_PACK_AFTER_SCAN=$swap refused_race "--manifest, sub/ swapped for a symlink out" \
		"sub/f (" --manifest "$T/in/m.csv"
	expect "... saying a symlink is on its path and naming the manifest's line" \
		eval 'err_has "m.csv:3)" && err_has "a symlink is on its path now"'

	fresh
	swap="rm '$T/in/top' && mkfifo '$T/in/top'"
	BATCHD_PACK_AFTER_SCAN=$swap refused_race "a file swapped for a FIFO: no hang" \
		"$T/in/top: no longer a regular file" "$T/in"
fi

echo "$PASS passed, $FAILED failed"
[[ $FAILED -eq 0 ]]
