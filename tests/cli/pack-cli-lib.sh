# SPDX-License-Identifier: MIT
#
# pack-cli-lib.sh - what the batchd-pack end-to-end scripts
# (test-pack-cli.sh, test-pack-errors.sh) share: their start (the
# argument, a scratch directory, the cleanup), readers of `info --json`
# and of file lists, and the inputs both pack: a bounded slice of real
# files with awkward names, two tar archives with awkward members, record
# files. A script sources this file and calls pack_cli_start "$@" first.
# shellcheck shell=bash

# ---- start -----------------------------------------------------------------------

# pack_cli_start NAME ARGS...: the scripts' one argument (PATH/TO/batchd-pack)
# into BIN, and a scratch directory T ($TMPDIR/NAME.XXXXXX) removed on exit,
# the file system mounted at MNT (when set) unmounted first; then cli-lib.sh
# (ok, bad, expect, run ...), which wants BIN and T.
pack_cli_start() {
	local name=$1
	shift
	if [[ $# -ne 1 ]]; then
		echo "usage: $0 PATH/TO/batchd-pack" >&2
		exit 2
	fi
	BIN=$(realpath -- "$1")
	if [[ ! -x $BIN ]]; then
		echo "FAIL - $1 is not an executable"
		echo "0 passed, 1 failed"
		exit 1
	fi

	T=$(mktemp -d "${TMPDIR:-/tmp}/$name.XXXXXX")
	MNT=""
	trap cleanup EXIT
	# shellcheck source=cli-lib.sh
	. "$(dirname -- "${BASH_SOURCE[0]}")/cli-lib.sh"
}

# cleanup: the EXIT trap pack_cli_start sets.
cleanup() {
	if [[ -n $MNT ]]; then
		umount "$MNT" 2>/dev/null || true
	fi
	chmod -R u+rwX "$T" 2>/dev/null || true
	rm -rf "$T"
}

# ---- helpers ---------------------------------------------------------------------

# listing DIR: the entries of DIR, hidden ones included, one per line.
listing() { ls -A -- "$1"; }

# jget FILE KEY...: values from a JSON object, space-separated ("a.b" reaches in).
jget() {
	python3 - "$@" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
out = []
for key in sys.argv[2:]:
    v = d
    for part in key.split("."):
        v = v.get(part, "missing") if isinstance(v, dict) else "missing"
    out.append(str(v))
print(" ".join(out))
PY
}

# info PATH FILE: `info --json` into FILE (parsed once to prove it is JSON).
info() {
	run info "$1" --json
	[[ $RC -eq 0 ]] && cp "$T/out" "$2" && python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$2"
}

# list_files ROOT LIST: the regular files below ROOT, symlinks not followed
# and names starting with '.' ignored at every level (as create walks it), as
# paths relative to ROOT, NUL-separated, in bytewise order.
list_files() {
	(cd -- "$1" && find . -mindepth 1 -name '.*' -prune -o -type f -printf '%P\0') | sort -z >"$2"
}

# stats ROOT LIST: "count total max" of the files named in LIST.
stats() {
	python3 - "$1" "$2" <<'PY'
import os, sys
root = os.fsencode(sys.argv[1])
names = [n for n in open(sys.argv[2], "rb").read().split(b"\0") if n]
sizes = [os.path.getsize(os.path.join(root, n)) for n in names]
print(len(sizes), sum(sizes), max(sizes, default=0))
PY
}

# ---- inputs ----------------------------------------------------------------------

# make_tree: TREE, its list $T/tree.list, and N, TOTAL and MAX (count, bytes,
# largest) of its regular files.
make_tree() {
	# A bounded slice of real files: the first 300 (bytewise path order) of at most
	# 32 KiB from the Python standard library, with their nested directories
	# (about 3 MiB: level 19 and dictionary training stay quick).
	SRC=""
	for d in /usr/lib/python3.[0-9]*/ /usr/lib/python3/ /usr/share/; do
		if [[ -d $d ]]; then
			SRC=$d
			break
		fi
	done
	TREE=$T/tree
	mkdir -p "$TREE/py"
	: >"$T/src.list"
	if [[ -n $SRC ]]; then
		(cd "$SRC" && find . -type f -size -33k -readable -printf '%P\0' 2>/dev/null | sort -z) >"$T/src.list" || true
		head -z -n 300 "$T/src.list" | (cd "$SRC" && xargs -0 -r cp --parents -t "$TREE/py" -- 2>/dev/null) || true
	fi

	# A sample larger than most block sizes, awkward names, and non-samples.
	seq 1 60000 >"$TREE/big-numbers.txt"
	: >"$TREE/empty"
	printf 'a name with spaces\n' >"$TREE/with space.txt"
	printf 'a UTF-8 name\n' >"$TREE/héllo wörld ✓.txt"
	printf 'a name that is not UTF-8\n' >"$TREE/"$'raw\xff\xfe.bin'
	printf 'a name with a newline\n' >"$TREE/"$'new\nline'
	printf 'hidden\n' >"$TREE/.hidden" # ignored, as is all below a hidden directory
	mkdir -p "$TREE/a/.cache"
	printf 'hidden too\n' >"$TREE/a/.cache/x"
	# "a-b" < "a.b" < "a/b" < "a0": bytewise order of whole paths, not a walk order.
	mkdir -p "$TREE/a" "$TREE/d1/d2/d3/d4/d5" "$TREE/emptydir/sub"
	echo slash >"$TREE/a/b"
	echo dash >"$TREE/a-b"
	echo dot >"$TREE/a.b"
	echo zero >"$TREE/a0"
	echo upper >"$TREE/A"
	echo deep >"$TREE/d1/d2/d3/d4/d5/leaf"
	ln "$TREE/a/b" "$TREE/hardlink-to-a-b" # a second name: a sample of its own
	ln -s "with space.txt" "$TREE/link-to-file"
	ln -s py "$TREE/link-to-dir"
	ln -s /nonexistent "$TREE/dangling-link"
	mkfifo "$TREE/fifo"

	list_files "$TREE" "$T/tree.list"
	read -r N TOTAL MAX < <(stats "$TREE" "$T/tree.list")
	echo "# input: $N regular files, $TOTAL bytes (largest $MAX) from ${SRC:-nowhere} and hand-made names"
	if [[ $N -lt 100 ]]; then
		bad "setup: only $N input files found under ${SRC:-/usr/lib/python3*}"
	fi
}

# make_tars: the members in TS, archived in $T/in.tar and (pax, gzip) $T/in.tar.gz.
make_tars() {
	TS=$T/tarsrc
	LONG=long-directory-name-$(printf 'x%.0s' {1..50})/long-file-name-$(printf 'y%.0s' {1..60}).txt
	mkdir -p "$TS/sub/deeper" "$TS/${LONG%/*}"
	printf 'first\n' >"$TS/one.txt"
	head -c 50000 /dev/urandom >"$TS/sub/two.bin"
	cp "$TREE/py/$(head -z -n 1 "$T/src.list" | tr -d '\0')" "$TS/sub/deeper/three" 2>/dev/null ||
		echo three >"$TS/sub/deeper/three"
	seq 1 5000 >"$TS/sub/numbers"
	: >"$TS/zero"
	printf 'spaced\n' >"$TS/with space"
	printf 'a path over 100 bytes\n' >"$TS/$LONG"
	ln -s one.txt "$TS/sym"
	# (Hard-link members are refused: tests/cli/test-pack-tar-names.sh.)
	# Not in bytewise order, so archive order is what is being tested.
	(cd "$TS" && tar -cf "$T/in.tar" zero sub 'with space' one.txt sym "${LONG%%/*}")
	(cd "$TS" && tar --format=pax -czf "$T/in.tar.gz" zero sub 'with space' one.txt sym "${LONG%%/*}")
}

# make_records: record files in REC (r37, r1k), two small files in REC/small,
# and REC/out for what is packed from them.
make_records() {
	REC=$T/rec
	mkdir -p "$REC/out" "$REC/small"
	head -c $((37 * 64)) /dev/urandom >"$REC/r37"
	seq -w 1 1024 >"$REC/r1k" # 5 records of 1 KiB
	echo one >"$REC/small/x"
	echo two >"$REC/small/y"
}
