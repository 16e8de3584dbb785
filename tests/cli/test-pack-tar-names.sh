#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# test-pack-tar-names.sh - hostile tar member names and hard links
# (issue 34, item 16), end to end.
#
#   bash tests/cli/test-pack-tar-names.sh PATH/TO/batchd-pack
#
# A member's path becomes a key, so it is made a plain relative path: a
# leading '/' is removed with one warning an archive, a leading "./",
# "." and empty components are dropped, and the keys `ls` lists are
# checked; a member with a ".." component ("../../x", "a/../b") is
# refused naming it, and so is a hard-link member (naming its target),
# where it used to be dropped without a word; all of it for plain tars
# and for --group-by key. Archives are written with python's tarfile,
# which stores names as given.
#
# Each check prints "ok - ..." or "FAIL - ..."; the last line is
# "N passed, M failed". Exit status 0 when nothing failed, 1 otherwise.
# shellcheck disable=SC2016 # expect ... eval '...' expands when the check runs, on purpose
set -euo pipefail
export LC_ALL=C

# shellcheck source=hostile-lib.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/hostile-lib.sh"
hostile_init "PATH/TO/batchd-pack" 1 "$@"

mkdir -p "$T/dst"

# mktar TAR SPEC...: members in order; SPEC is NAME (a file holding "bytes of NAME")
# or NAME=>TARGET (a hard link to TARGET).
mktar() {
	python3 - "$@" <<'PY'
import io, sys, tarfile
with tarfile.open(sys.argv[1], "w", format=tarfile.GNU_FORMAT) as t:
    for spec in sys.argv[2:]:
        name, _, target = spec.partition("=>")
        ti = tarfile.TarInfo(name)
        if target:
            ti.type, ti.linkname = tarfile.LNKTYPE, target
            t.addfile(ti)
        else:
            data = ("bytes of %s\n" % name).encode()
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
PY
}
# refused DESC NEEDLE ARGS...: create $T/dst/x.bpk ARGS is refused naming NEEDLE.
refused() {
	create_refused "$1" "$T/dst/x.bpk" "${@:2}"
}

# ---- names made plain --------------------------------------------------------------------

echo "# member paths made plain relative keys"
mktar "$T/plain.tar" ./a /abs/y b/./c//d /abs/z ./e/f
run create "$T/dst/plain.bpk" "$T/plain.tar"
if [[ $RC -eq 0 ]]; then
	got=$(pack_keys "$T/dst/plain.bpk")
	expect "keys in archive order, '/', './', '.' and '//' gone ($got)" test "$got" = "a abs/y b/c/d abs/z e/f "
	expect "the bytes are the member's (cat abs/y)" \
		eval '[[ $("$BIN" cat "$T/dst/plain.bpk" --key abs/y) == "bytes of /abs/y" ]]'
	expect "one warning for the archive, naming the first absolute member and its new name" \
		eval '[[ $(grep -c "leading '"'"'/'"'"' removed" "$T/err") -eq 1 ]] && err_has "member '"'"'/abs/y'"'"' is packed as '"'"'abs/y'"'"'"'
else
	bad "a tar of '/', './' and '.' names: exit $RC $(err)"
fi
mktar "$T/rel.tar" ./a ./b/c
run create "$T/dst/rel.bpk" "$T/rel.tar"
expect "'./' alone (tar -C DIR .): keys without it, and no warning ($(pack_keys "$T/dst/rel.bpk" 2>/dev/null))" \
	eval '[[ $RC -eq 0 && $(pack_keys "$T/dst/rel.bpk") == "a b/c " && ! -s $T/err ]]'
mktar "$T/dup.tar" ./a a
refused "'./a' and 'a': the same key once plain" "duplicate key 'a'" "$T/dup.tar"

# ---- refused ------------------------------------------------------------------------------

echo "# '..' and hard links refused"
mktar "$T/up.tar" a ../../x
refused "a '../../x' member" "$T/up.tar: member '../../x' has a '..' component" "$T/up.tar"
mktar "$T/mid.tar" a b/../../c
refused "a 'b/../../c' member" "member 'b/../../c' has a '..' component" "$T/mid.tar"
mktar "$T/mid2.tar" a/../b
refused "'a/../b', which stays inside, is refused as well" "member 'a/../b' has a '..' component" "$T/mid2.tar"
refused "... also with --no-keys" "member 'a/../b' has a '..' component" "$T/mid2.tar" --no-keys
mktar "$T/hard.tar" one 'two=>one' three
refused "a hard-link member" "$T/hard.tar: member 'two' is a hard link to 'one'" "$T/hard.tar"
expect "... saying what to do instead" err_has "--hard-dereference"

# ---- the same for --group-by key ------------------------------------------------------------

echo "# --group-by key"
mktar "$T/wds.tar" /s/000.jpg /s/000.txt ./s/001.jpg ./s/001.txt
run create "$T/dst/wds.bpk" "$T/wds.tar" --group-by key
expect "grouped: keys of plain paths ($(pack_keys "$T/dst/wds.bpk" 2>/dev/null)), warned once" \
	eval '[[ $RC -eq 0 && $(pack_keys "$T/dst/wds.bpk") == "s/000 s/001 " && $(grep -c "leading" "$T/err") -eq 1 ]]'
mktar "$T/wds-up.tar" s/000.jpg ../s/001.jpg
refused "grouped: a '..' member" "member '../s/001.jpg' has a '..' component" "$T/wds-up.tar" --group-by key
mktar "$T/wds-hard.tar" s/000.jpg 's/001.jpg=>s/000.jpg'
refused "grouped: a hard-link member" "member 's/001.jpg' is a hard link to 's/000.jpg'" "$T/wds-hard.tar" --group-by key

echo "$PASS passed, $FAILED failed"
[[ $FAILED -eq 0 ]]
