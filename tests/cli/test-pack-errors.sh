#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# test-pack-errors.sh - end-to-end tests of batchd-pack, the dataset tool:
# what it refuses, and what a failure leaves behind.
#
#   bash tests/cli/test-pack-errors.sh PATH/TO/batchd-pack
#
# Corrupts and truncates a real pack and expects `verify` to name the
# shard, the block and the byte (and `info` and `cat` to fail cleanly);
# then gives `create`, `cat` and `info` every kind of bad input, path,
# option and id, interrupts creates part-way and fills the disk under
# them, and checks each failure names what was wrong, exits cleanly and
# leaves nothing behind. What batchd-pack packs and reads back is
# test-pack-cli.sh's; the inputs and helpers both use are
# pack-cli-lib.sh's.
#
# Each check prints "ok - ...", "FAIL - ..." or "skip - ... (why)"; the last
# line is "N passed, M failed". Exit status 0 when nothing failed, 1 otherwise.
# Needs bash, coreutils, tar, gzip and python3 (standard library only); the
# disk-full check needs root and a tmpfs mount, and is skipped without them.
# shellcheck disable=SC2016 # expect ... eval '...' expands when the check runs, on purpose
set -euo pipefail
export LC_ALL=C # bytewise sort order, and English strerror() text

# shellcheck source=pack-cli-lib.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/pack-cli-lib.sh"
pack_cli_start pack-errors "$@"

# layout PACK: the shard's structure parsed independently with struct, as
# lines "size N", "dict OFF SIZE", "data OFF", "index OFF SIZE BLOCKS SAMPLES",
# "block K OFF STORED RAW FIRST COUNT".
layout() {
	python3 - "$1" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
dict_off, dict_size = struct.unpack_from("<QQ", b, 24)
data_off = struct.unpack_from("<Q", b, 48)[0]
idx_off, idx_size, nblocks, nsamples = struct.unpack_from("<QQQQ", b, len(b) - 80)
print("size", len(b))
print("dict", dict_off, dict_size)
print("data", data_off)
print("index", idx_off, idx_size, nblocks, nsamples)
for k in range(nblocks):
    off, stored, raw, first, count = struct.unpack_from("<QQQQQ", b, idx_off + 56 * k)
    print("block", k, off, stored, raw, first, count)
PY
}

# flip_copies PRISTINE DIR OFFSET...: DIR/at-OFFSET.bpk = PRISTINE with the byte
# at OFFSET inverted, one copy per offset.
flip_copies() {
	python3 - "$@" <<'PY'
import os, sys
src, d = sys.argv[1], sys.argv[2]
data = open(src, "rb").read()
for o in map(int, sys.argv[3:]):
    b = bytearray(data)
    b[o] ^= 0xFF
    open(os.path.join(d, "at-%d.bpk" % o), "wb").write(b)
PY
}

# ---- inputs ----------------------------------------------------------------------

# The files, archives and records the error cases start from.
make_tree
make_tars
make_records

# ---- 6. corruption and truncation ---------------------------------------------------------

echo "# 6. verify catches corruption (at ${SECONDS}s)"
COR=$T/cor
mkdir -p "$COR/in" "$COR/flip"
# 48 small text samples in 16 KiB blocks: a dictionary and several blocks.
grep -z '\.py$' "$T/tree.list" >"$COR/py.list" || true
head -z -n 48 "$COR/py.list" | while IFS= read -r -d '' f; do
	cp -- "$TREE/$f" "$COR/in/$(echo "$f" | tr / _)"
done
list_files "$COR/in" "$COR/in.list"
PRISTINE=$COR/pristine.bpk
# --no-keys: the layout checked here is that of a pack without sections
# (footer version 1); test-pack-fields.sh flips bytes in one with them.
run create "$PRISTINE" "$COR/in" --dict --block-size 16K --no-keys
if [[ $RC -ne 0 ]]; then
	bad "corruption: create of the test pack failed: exit $RC: $(err)"
else
	declare -a BOFF BSTORED BFIRST
	SIZE=0 DOFF=0 DSIZE=0 DATA=0 IOFF=0 ISIZE=0 NBLK=0 NSMP=0
	while read -r tag a b c d e f; do
		case $tag in
		size) SIZE=$a ;;
		dict) DOFF=$a DSIZE=$b ;;
		data) DATA=$a ;;
		index) IOFF=$a ISIZE=$b NBLK=$c NSMP=$d ;;
		block) BOFF[a]=$b BSTORED[a]=$c BFIRST[a]=$e ;;
		esac
	done < <(layout "$PRISTINE")
	info "$PRISTINE" "$COR/info.json" || true
	read -r blocks samples dictb < <(jget "$COR/info.json" blocks samples dict_bytes) || true
	expect "corruption: test pack has a dictionary ($DSIZE bytes) and several blocks ($NBLK)" \
		test "$DSIZE" -gt 0 -a "$NBLK" -ge 4 -a "$NBLK" -eq "$blocks" -a "$NSMP" -eq "$samples" -a "$DSIZE" -eq "$dictb"
	# The documented layout: header, dictionary, contiguous blocks, index, footer.
	lay=""
	[[ $DOFF -eq 64 && $DATA -eq $((64 + DSIZE)) ]] || lay="$lay dict at $DOFF/data at $DATA;"
	at=$DATA
	for ((k = 0; k < NBLK; k++)); do
		[[ ${BOFF[k]} -eq $at ]] || lay="$lay block $k at ${BOFF[k]} not $at;"
		at=$((at + BSTORED[k]))
	done
	[[ $IOFF -eq $at ]] || lay="$lay index at $IOFF not $at;"
	[[ $ISIZE -eq $((56 * NBLK + 16 * NSMP)) ]] || lay="$lay index size $ISIZE;"
	[[ $((IOFF + ISIZE + 80)) -eq $SIZE ]] || lay="$lay footer not at the end;"
	expect "corruption: layout is header, dict, contiguous blocks, index (56/16-byte entries), 80-byte footer${lay}" \
		test -z "$lay"
	SIZE=$(stat -c %s "$PRISTINE")

	# flip_region DESC OFFSET...: every flipped copy fails verify naming the
	# shard and a byte offset; every fourth one is also tried with info.
	flip_region() {
		local desc=$1 o n=0 missed=""
		shift
		rm -f "$COR/flip"/*
		flip_copies "$PRISTINE" "$COR/flip" "$@"
		for o in "$@"; do
			run verify "$COR/flip/at-$o.bpk"
			if ! clean_fail || ! err_has "at-$o.bpk" || ! err_has "byte"; then
				missed="$missed verify@$o(exit $RC: $(err))"
			fi
			if [[ $((n++ % 4)) -eq 0 ]]; then
				run info "$COR/flip/at-$o.bpk"
				if ! clean_fail || ! err_has "at-$o.bpk"; then
					missed="$missed info@$o(exit $RC: $(err))"
				fi
			fi
		done
		if [[ -z $missed ]]; then
			ok "corruption: $desc: all $# byte flips rejected by verify (and info), naming the shard and the byte"
		else
			bad "corruption: $desc: not rejected properly:$(echo "$missed" | head -c 600)"
		fi
	}
	if [[ $NBLK -lt 2 || $DSIZE -eq 0 || $IOFF -le $DATA || ${#BOFF[@]} -ne $NBLK ]]; then
		bad "corruption: byte flips not tried: the test pack's layout is unusable"
	else
		flip_region "header (every byte 0..63)" $(seq 0 63)
		step=$((DSIZE / 24 + 1))
		flip_region "dictionary ($DSIZE bytes from $DOFF)" $(seq "$DOFF" "$step" $((DOFF + DSIZE - 1))) $((DOFF + DSIZE - 1))
		step=$((ISIZE / 40 + 1))
		flip_region "index ($ISIZE bytes from $IOFF)" $(seq "$IOFF" "$step" $((IOFF + ISIZE - 1))) $((IOFF + ISIZE - 1))
		flip_region "footer (every byte of the last 80)" $(seq $((SIZE - 80)) $((SIZE - 1)))

		# Blocks: verify names the block K holding the flipped byte, at a byte
		# inside it; cat fails for its samples and still works for other blocks.
		for k in 0 $((NBLK / 2)) $((NBLK - 1)); do
			lo=${BOFF[k]} hi=$((BOFF[k] + BSTORED[k] - 1))
			offs=("$lo" $(((lo + hi) / 2)) "$hi")
			rm -f "$COR/flip"/*
			flip_copies "$PRISTINE" "$COR/flip" "${offs[@]}"
			missed=""
			for o in "${offs[@]}"; do
				run verify "$COR/flip/at-$o.bpk"
				at=$(grep -oE "block $k at byte [0-9]+" "$T/err" | grep -oE '[0-9]+$' || true)
				if ! clean_fail || ! err_has "at-$o.bpk"; then
					missed="$missed @$o(exit $RC: $(err))"
				elif [[ -z $at ]]; then
					missed="$missed @$o(no 'block $k at byte N': $(err))"
				elif [[ $at -lt $lo || $at -gt $hi ]]; then
					missed="$missed @$o(byte $at outside block $k [$lo, $hi])"
				fi
			done
			if [[ -z $missed ]]; then
				ok "corruption: block $k [$lo, $hi]: flips at its first, middle and last byte make verify report 'block $k at byte N' with N inside it"
			else
				bad "corruption: block $k [$lo, $hi]:$missed"
			fi
			mid=$COR/flip/at-$(((lo + hi) / 2)).bpk
			run cat "$mid" "${BFIRST[k]}"
			expect "corruption: cat of sample ${BFIRST[k]} in corrupt block $k fails naming the block: $(err)" \
				eval 'clean_fail && err_has "block $k"'
			other=$(((k + 1) % NBLK))
			oid=${BFIRST[other]}
			oname=$(tr '\0' '\n' <"$COR/in.list" | sed -n "$((oid + 1))p")
			run cat "$mid" "$oid"
			intact=false
			[[ $RC -eq 0 ]] && cmp -s "$T/out" "$COR/in/$oname" && intact=true
			expect "corruption: cat of sample $oid in intact block $other still returns its bytes" $intact
		done
	fi

	echo "# 6b. truncated and extended packs (at ${SECONDS}s)"
	missed=""
	for len in 0 10 63 64 100 $((SIZE - 81)) $((SIZE - 80)) $((SIZE - 1)) $((SIZE + 1)); do
		v=$COR/flip/len-$len.bpk
		if [[ $len -le $SIZE ]]; then
			head -c "$len" "$PRISTINE" >"$v"
		else
			{ cat "$PRISTINE"; printf 'x'; } >"$v"
		fi
		for cmd in verify info; do
			run "$cmd" "$v"
			if ! clean_fail || ! err_has "len-$len.bpk"; then
				missed="$missed $cmd@$len(exit $RC: $(err))"
			fi
		done
		run cat "$v" 0
		if ! clean_fail; then
			missed="$missed cat@$len(exit $RC: $(err))"
		fi
	done
	if [[ -z $missed ]]; then
		ok "truncation to 0, 10, 63, 64, 100, size-81, size-80, size-1 and one extra byte: verify, info and cat fail with a message naming the file, no crash"
	else
		bad "truncation:$missed"
	fi
fi

# ---- 7. error messages -------------------------------------------------------------------

echo "# 7. errors (at ${SECONDS}s)"
E=$T/err.d
mkdir -p "$E/out" "$E/emptyin/sub"
ln -s /nonexistent "$E/emptyin/link"
SMALL=$COR/in # a small valid input

run create "$E/out/a.bpk" "$T/does-not-exist"
expect "missing input: exit $RC, names the path: $(err)" eval 'clean_fail && err_has "$T/does-not-exist"'
expect "missing input: nothing left in the output directory" test -z "$(listing "$E/out")"

run create "$E/out/a.bpk" "$E/emptyin"
expect "directory with no regular files: exit $RC, names it: $(err)" eval 'clean_fail && err_has "$E/emptyin"'
expect "empty directory: nothing left in the output directory" test -z "$(listing "$E/out")"

echo "precious" >"$E/out/exists.bpk"
run create "$E/out/exists.bpk" "$SMALL"
expect "existing OUT: exit $RC, names OUT: $(err)" eval 'clean_fail && err_has "$E/out/exists.bpk"'
expect "existing OUT: the file is untouched and nothing else appeared" \
	eval '[[ $(cat "$E/out/exists.bpk") == precious && $(listing "$E/out") == exists.bpk ]]'
rm -f "$E/out/exists.bpk"

mkdir "$E/out/dir"
run create "$E/out/dir" "$SMALL" --shard-size 64K
expect "existing OUT directory with --shard-size: exit $RC, names it, left empty: $(err)" \
	eval 'clean_fail && err_has "$E/out/dir" && [[ -z $(listing "$E/out/dir") && $(listing "$E/out") == dir ]]'
rmdir "$E/out/dir"

run create "$T/no-such-dir/x.bpk" "$SMALL"
expect "OUT in a missing directory: exit $RC, names OUT as given: $(err)" \
	eval 'clean_fail && err_has "$T/no-such-dir/x.bpk" && [[ ! -e $T/no-such-dir ]]'

for cmd in info verify "cat"; do
	args=("$T/no-such.bpk")
	[[ $cmd == cat ]] && args+=(0)
	run "$cmd" "${args[@]}"
	expect "$cmd of a missing path: exit $RC, names it, says why: $(err)" \
		eval 'clean_fail && err_has "$T/no-such.bpk" && err_has "No such file"'
done

ln -s "$E/elsewhere.bpk" "$E/out/link.bpk"
run create "$E/out/link.bpk" "$SMALL"
expect "OUT is a dangling symlink: exit $RC, not written through: $(err)" \
	eval 'clean_fail && [[ ! -e $E/elsewhere.bpk && -L $E/out/link.bpk ]]'
rm -f "$E/out/link.bpk"

if [[ $(id -u) -eq 0 ]]; then
	skip "unreadable input file (running as root, which can read a mode-000 file)"
else
	mkdir -p "$E/unreadable"
	cp -r "$SMALL/." "$E/unreadable/"
	locked=$E/unreadable/$(listing "$E/unreadable" | sed -n 3p)
	chmod 000 "$locked"
	run create "$E/out/a.bpk" "$E/unreadable"
	expect "unreadable input file: exit $RC, names the file: $(err)" eval 'clean_fail && err_has "$locked"'
	expect "unreadable input file: nothing left in the output directory" test -z "$(listing "$E/out")"
	chmod 644 "$locked"
	mkdir "$E/unreadable/locked-dir"
	echo inside >"$E/unreadable/locked-dir/f"
	chmod 000 "$E/unreadable/locked-dir"
	run create "$E/out/a.bpk" "$E/unreadable"
	expect "unreadable input directory: exit $RC, names it: $(err)" \
		eval 'clean_fail && err_has "$E/unreadable/locked-dir" && [[ -z $(listing "$E/out") ]]'
	chmod 755 "$E/unreadable/locked-dir"
fi

head -c 5000 /dev/urandom >"$E/junk.tar"
run create "$E/out/a.bpk" "$E/junk.tar"
expect "not a tar archive: exit $RC, names it: $(err)" eval 'clean_fail && err_has "$E/junk.tar"'
# A plain file of lines: not a tar, and the message says what to pass instead.
printf 'first line\nsecond line\n' >"$E/lines.txt"
run create "$E/out/a.bpk" "$E/lines.txt"
expect "plain file: exit $RC, says it is not a tar and suggests --records or a directory: $(err)" \
	eval 'clean_fail && err_has "$E/lines.txt is not a tar archive (libarchive: " &&
	      err_has "use --records SIZE $E/lines.txt" && err_has "for a directory of files pass the directory" &&
	      [[ -z $(listing "$E/out") ]]'
(cd "$E/emptyin" && tar -cf "$E/noregular.tar" .)
run create "$E/out/a.bpk" "$E/noregular.tar"
expect "tar with no regular members: exit $RC, names it: $(err)" eval 'clean_fail && err_has "$E/noregular.tar"'
for tf in in.tar in.tar.gz; do
	head -c $(($(stat -c %s "$T/$tf") / 2)) "$T/$tf" >"$E/truncated-$tf"
	run create "$E/out/a.bpk" "$E/truncated-$tf"
	expect "truncated $tf: exit $RC, names it: $(err)" eval 'clean_fail && err_has "$E/truncated-$tf"'
done
expect "bad tar inputs: nothing left in the output directory" test -z "$(listing "$E/out")"

run create "$E/out/a.bpk" "$REC/small" --dict
expect "--dict with 2 samples (too few to train): exit $RC, says why, leaves nothing: $(err)" \
	eval 'clean_fail && err_has "dictionary" && [[ -z $(listing "$E/out") ]]'

# cat out of range and malformed ids.
pack=$COR/pristine.bpk
if [[ -f $pack ]]; then
	n=$(jget "$COR/info.json" samples)
	for id in "$n" 18446744073709551615 99999999999999999999; do
		run cat "$pack" "$id"
		want=$([[ $id == 99999999999999999999 ]] && echo 2 || echo 1)
		expect "cat id $id of $n samples: exit $RC (want $want), a message, no output: $(err)" \
			eval '[[ $RC -eq $want && -s $T/err && ! -s $T/out ]]'
	done
	for id in -1 abc "" 1x; do
		run cat "$pack" "$id"
		expect "cat id '$id': usage error, exit $RC (want 2): $(err)" test "$RC" -eq 2
	done
	if [[ -w /dev/full ]]; then
		RC=0
		timeout 60 "$BIN" cat "$pack" 0 >/dev/full 2>"$T/err" || RC=$?
		expect "cat to a full stdout: exit $RC, says so: $(err)" eval 'clean_fail && err_has "No space left"'
	fi
fi

# Usage errors: exit 2, the option named, nothing created.
usage_case() {
	local desc=$1 opt=$2
	shift 2
	run create "$E/out/u.bpk" "$@"
	if [[ $RC -eq 2 ]] && err_has "$opt" && [[ -z $(listing "$E/out") ]]; then
		ok "usage: $desc: exit 2 naming $opt"
	else
		bad "usage: $desc: exit $RC (want 2), stderr: $(err)"
	fi
}
for v in 0 23 -1 abc 3x ""; do
	usage_case "--level '$v'" --level "$SMALL" --level "$v"
done
for v in abc 1X -1 "" 257M 1T; do
	usage_case "--block-size '$v'" --block-size "$SMALL" --block-size "$v"
done
usage_case "--threads 0" --threads "$SMALL" --threads 0
usage_case "--shard-size 0" --shard-size "$SMALL" --shard-size 0
usage_case "--records 0 FILE" --records --records 0 "$REC/r37"
run create "$E/out/u.bpk"
expect "usage: create without INPUT: exit $RC (want 2)" test "$RC" -eq 2
run frobnicate
expect "usage: unknown command: exit $RC (want 2)" test "$RC" -eq 2
run create "$E/out/u.bpk" "$SMALL" --no-such-option
expect "usage: unknown option: exit $RC (want 2)" test "$RC" -eq 2
run info "$E/emptyin"
expect "info on a directory holding no shards: exit $RC, names it: $(err)" eval 'clean_fail && err_has "$E/emptyin"'

# A create stopped part-way (SIGTERM once the temporary output exists)
# removes its temporary file or directory.
INT=$T/int
mkdir -p "$INT/out"
head -c 24M /dev/urandom >"$INT/big"
for mode in file shards; do
	extra=()
	[[ $mode == shards ]] && extra=(--shard-size 1M)
	"$BIN" create "$INT/out/big.bpk" --records 64K "$INT/big" --level 19 --threads 1 \
		--block-size 256K "${extra[@]}" >"$T/out" 2>"$T/err" &
	pid=$!
	seen=0
	for _ in $(seq 1 200); do
		if [[ -n $(listing "$INT/out") ]]; then
			seen=1
			break
		fi
		sleep 0.02
	done
	sleep 0.2
	kill -TERM "$pid" 2>/dev/null || true
	RC=0
	wait "$pid" || RC=$?
	if [[ $seen -eq 0 || $RC -eq 0 ]]; then
		skip "interrupted create ($mode): it finished or never started before the signal (exit $RC)"
		rm -rf "${INT:?}/out/"*
		continue
	fi
	expect "interrupted create ($mode): exit $RC, says so, and leaves nothing (left: $(listing "$INT/out" | tr '\n' ' ')): $(err)" \
		eval '[[ $RC -ne 0 && $RC -lt 128 ]] && err_has "interrupted" && [[ -z $(listing "$INT/out") ]]'
done
rm -f "$INT/big"

# ---- 8. disk full -----------------------------------------------------------------------------

echo "# 8. disk full (at ${SECONDS}s)"
FULL=$T/full
mkdir -p "$FULL" "$T/fullin"
if [[ $(id -u) -ne 0 ]]; then
	skip "disk full (needs root to mount a 1 MiB tmpfs)"
elif ! mount -t tmpfs -o size=1m batchd-pack-test "$FULL" 2>/dev/null; then
	skip "disk full (mount -t tmpfs is not permitted here)"
else
	MNT=$FULL
	for i in 0 1 2 3 4 5; do
		head -c 512K /dev/urandom >"$T/fullin/r$i"
	done
	run create "$FULL/big.bpk" "$T/fullin"
	expect "disk full: 3 MiB pack on a 1 MiB file system: exit $RC, 'No space left': $(err)" \
		eval 'clean_fail && err_has "No space left"'
	expect "disk full: nothing left behind ($(listing "$FULL" | tr '\n' ' '))" test -z "$(listing "$FULL")"
	run create "$FULL/big.d" "$T/fullin" --shard-size 256K
	expect "disk full, sharded: exit $RC, 'No space left': $(err)" eval 'clean_fail && err_has "No space left"'
	expect "disk full, sharded: nothing left behind ($(listing "$FULL" | tr '\n' ' '))" test -z "$(listing "$FULL")"
	umount "$FULL" && MNT=""
fi

echo "$PASS passed, $FAILED failed"
[[ $FAILED -eq 0 ]]
