#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# test-pack-cli.sh - end-to-end tests of batchd-pack, the dataset tool:
# what it packs and reads back.
#
#   bash tests/cli/test-pack-cli.sh PATH/TO/batchd-pack
#
# The unit tests check lib/pack/pack.c one function at a time; this script checks
# what a user sees: it packs real files (a bounded slice of the Python
# standard library plus hand-made awkward names), tar archives and record
# files, then reads every sample back with `batchd-pack cat` and compares
# it byte for byte with its source, checks `info --json` counts against the inputs,
# splits datasets into shards, packs the same input to the same bytes
# whatever the threads, and packs samples larger than --frame-size as
# frames. What batchd-pack refuses (corrupt and truncated packs, bad
# inputs and options, interrupted creates, a full disk) is
# test-pack-errors.sh's; the inputs and helpers both use are
# pack-cli-lib.sh's.
#
# Each check prints "ok - ...", "FAIL - ..." or "skip - ... (why)"; the last
# line is "N passed, M failed". Exit status 0 when nothing failed, 1 otherwise.
# Needs bash, coreutils, tar, gzip and python3 (standard library only).
# shellcheck disable=SC2016 # expect ... eval '...' expands when the check runs, on purpose
set -euo pipefail
export LC_ALL=C # bytewise sort order, and English strerror() text

# shellcheck source=pack-cli-lib.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/pack-cli-lib.sh"
pack_cli_start pack-cli "$@"

# roundtrip PACK ROOT LIST: `cat PACK i` must equal ROOT/<i-th name of LIST>
# for every i, and id <count> must not exist. Prints the first mismatch or the
# count. Python only drives the processes and compares bytes (a few at a time,
# to use the cores); every sample still goes through `batchd-pack cat`.
roundtrip() {
	python3 - "$BIN" "$@" <<'PY'
import os, subprocess, sys
from concurrent.futures import ThreadPoolExecutor
binary, pack, root, lst = sys.argv[1:5]
names = [n for n in open(lst, "rb").read().split(b"\0") if n]

def check(i):
    try:
        r = subprocess.run([binary, "cat", pack, str(i)], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    except subprocess.TimeoutExpired:
        return "cat %d hung for 60 s" % i
    if r.returncode:
        return "cat %d failed (exit %d): %s" % (i, r.returncode, r.stderr[:300].decode(errors="replace"))
    with open(os.path.join(os.fsencode(root), names[i]), "rb") as f:
        want = f.read()
    if r.stdout != want:
        return "sample %d (%d bytes) differs from %r (%d bytes)" % (
            i, len(r.stdout), names[i].decode(errors="replace"), len(want))
    return None

with ThreadPoolExecutor(max_workers=min(4, (os.cpu_count() or 1) + 1)) as pool:
    for msg in pool.map(check, range(len(names))):
        if msg:
            print(msg)
            sys.exit(1)
r = subprocess.run([binary, "cat", pack, str(len(names))], stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if r.returncode == 0:
    print("sample %d exists past the last input" % len(names))
    sys.exit(1)
print("%d samples byte-identical" % len(names))
PY
}

# size_bytes SIZE: K/M suffixes to bytes.
size_bytes() {
	case $1 in
	*K) echo $((${1%K} << 10)) ;;
	*M) echo $((${1%M} << 20)) ;;
	*) echo "$1" ;;
	esac
}

# ---- inputs ----------------------------------------------------------------------

make_tree

# ---- 1. directory round trips -----------------------------------------------------

echo "# 1. directory round trip at several block sizes, levels and dictionary modes (at ${SECONDS}s)"
mkdir "$T/rt"
# What the walk leaves out is named on stderr, in bytewise order of path,
# and counted on the summary line; so are hidden names, not walked, and
# empty files, packed.
run create "$T/rt/walk.bpk" "$TREE"
hidden=$(cd "$TREE" && find . -mindepth 1 -name '.*' -prune -printf . | wc -c)
empty=$(cd "$TREE" && find . -mindepth 1 -name '.*' -prune -o -type f -empty -printf . | wc -c)
link="left out: a symbolic link (nothing below an input is followed)"
want="batchd-pack: $TREE/dangling-link: $link
batchd-pack: $TREE/fifo: left out: not a regular file (a FIFO)
batchd-pack: $TREE/link-to-dir: $link
batchd-pack: $TREE/link-to-file: $link"
expect "create names the FIFO and the 3 symlinks it leaves out, in path order: $(err)" \
	eval '[[ $RC -eq 0 && $(grep "left out" "$T/err") == "$want" ]]'
expect "... and warns of each of the $empty empty files by name" \
	eval '[[ $(grep -c ": empty (0 bytes), packed as an empty sample (--allow-empty: no warning)$" "$T/err") -eq $empty ]] && err_has "batchd-pack: warning: $TREE/empty: empty (0 bytes)"'
expect "... the summary: $N samples; 4 left out (1 special file, 3 symlinks); $hidden hidden ignored; $empty empty: $(head -c 300 "$T/out")" \
	grep -qF "walk.bpk: $N samples in $N blocks; 4 left out (1 special file, 3 symlinks); $hidden hidden ignored (names starting with '.'); $empty empty (0 bytes); " "$T/out"
run create "$T/rt/quiet.bpk" "$TREE" --allow-empty
expect "--allow-empty: no warning of empty files, still counted" \
	eval '[[ $RC -eq 0 ]] && ! grep -q "empty" "$T/err" && grep -qF "; $empty empty (0 bytes); " "$T/out"'
all=$(cd "$TREE" && find . -type f -printf . | wc -c)
run create "$T/rt/hidden.bpk" "$TREE" --include-hidden
expect "--include-hidden packs all $all regular files, hidden ones and those below hidden directories: $(head -c 200 "$T/out")" \
	eval '[[ $RC -eq 0 ]] && grep -qF "hidden.bpk: $all samples in $all blocks; 4 left out (1 special file, 3 symlinks); " "$T/out" && ! grep -q "hidden ignored" "$T/out"'
rm -f "$T/rt/walk.bpk" "$T/rt/hidden.bpk" "$T/rt/quiet.bpk"
# Every block size, level and dictionary mode, each block size with two
# dictionary modes. Level 19 only without a dictionary: with one it costs
# seconds per MiB here, for no extra coverage of the format.
COMBOS=(
	"0 1 --dict" "0 19 --no-dict"
	"4K 3 default" "4K 19 --no-dict"
	"64K 3 --dict" "64K 1 default"
	"1M 3 --dict" "1M 1 --no-dict"
)
for combo in "${COMBOS[@]}"; do
	read -r bs lvl dm <<<"$combo"
	name="--block-size $bs --level $lvl ${dm/#default/(dict default)}"
	pack=$T/rt/p-$bs-$lvl.bpk
	opts=(--block-size "$bs" --level "$lvl")
	[[ $dm != default ]] && opts+=("$dm")
	run create "$pack" "$TREE" "${opts[@]}"
	if [[ $RC -ne 0 || ! -f $pack ]]; then
		bad "create $name: exit $RC: $(err)"
		continue
	fi
	if ! info "$pack" "$T/rt/info.json"; then
		bad "info $name: exit $RC: $(err)"
		continue
	fi
	read -r samples raw maxs blocks maxb dictb zd zstd rawb codec < <(jget "$T/rt/info.json" \
		samples raw_bytes max_sample blocks max_block dict_bytes codec_blocks.zstd+dict \
		codec_blocks.zstd codec_blocks.raw codec) || true
	expect "info $name: samples $samples == $N files, raw_bytes $raw == $TOTAL, max_sample $maxs == $MAX" \
		test "$samples" -eq "$N" -a "$raw" -eq "$TOTAL" -a "$maxs" -eq "$MAX"
	expect "info $name: codec_blocks raw $rawb + zstd $zstd + zstd+dict $zd == blocks $blocks" \
		test $((rawb + zstd + zd)) -eq "$blocks"
	case $dm in
	--dict) expect "info $name: dictionary used (dict_bytes $dictb, zstd+dict blocks $zd, codec $codec)" \
		test "$dictb" -gt 0 -a "$zd" -gt 0 ;;
	--no-dict) expect "info $name: no dictionary (dict_bytes $dictb, zstd+dict blocks $zd)" \
		test "$dictb" -eq 0 -a "$zd" -eq 0 ;;
	*) expect "info $name: dictionary and zstd+dict blocks agree (dict_bytes $dictb, zstd+dict $zd)" \
		test \( "$dictb" -gt 0 -a "$zd" -gt 0 \) -o \( "$dictb" -eq 0 -a "$zd" -eq 0 \) ;;
	esac
	run info "$pack"
	if [[ $bs == 0 ]]; then
		expect "info $name: one sample per block ($blocks blocks, $samples samples)" \
			test "$blocks" -eq "$samples"
		expect "info $name: no shuffle advice for one sample per block" \
			grep -q '^shuffle       any: about one sample per block' "$T/out"
	else
		b=$(size_bytes "$bs")
		expect "info $name: samples share blocks ($blocks < $samples) and max_block $maxb < $b + $MAX" \
			test "$blocks" -lt "$samples" -a "$maxb" -lt $((b + MAX))
		# Shared blocks: global shuffle's cost and the block size that avoids it.
		if [[ $((samples / blocks)) -ge 2 ]]; then
			expect "info $name: advises a block size for global shuffle" \
				grep -q '^shuffle       global decodes a block of .* repack with --block-size 0 (one sample per block' "$T/out"
		fi
	fi
	run verify "$pack"
	expect "verify $name: exit $RC$([[ $RC -ne 0 ]] && echo ": $(err)")" test "$RC" -eq 0
	if msg=$(roundtrip "$pack" "$TREE" "$T/tree.list"); then
		ok "cat $name: $msg"
	else
		bad "cat $name: $msg"
	fi
	rm -f "$pack"
done

# ---- 2. incompressible data --------------------------------------------------------

echo "# 2. random data is stored raw (at ${SECONDS}s)"
RND=$T/random
mkdir -p "$RND/sub"
for i in 0 1 2 3 4 5; do
	head -c $((20000 + i * 7777)) /dev/urandom >"$RND/r$i"
done
head -c 300000 /dev/urandom >"$RND/sub/big"
list_files "$RND" "$T/random.list"
read -r RN RTOTAL _ < <(stats "$RND" "$T/random.list")
for bs in 0 64K; do
	pack=$T/random-$bs.bpk
	run create "$pack" "$RND" --block-size "$bs"
	if [[ $RC -ne 0 ]]; then
		bad "random data --block-size $bs: create exit $RC: $(err)"
		continue
	fi
	if info "$pack" "$T/random.json"; then
		read -r samples blocks rawb raw stored < <(jget "$T/random.json" samples blocks \
			codec_blocks.raw raw_bytes stored_bytes) || true
		expect "random data --block-size $bs: all $blocks blocks raw (codec_blocks raw $rawb > 0), stored $stored == raw $raw == $RTOTAL, $samples == $RN samples" \
			test "$rawb" -gt 0 -a "$rawb" -eq "$blocks" -a "$stored" -eq "$raw" -a "$raw" -eq "$RTOTAL" -a "$samples" -eq "$RN"
	else
		bad "random data --block-size $bs: info exit $RC: $(err)"
	fi
	run verify "$pack"
	expect "random data --block-size $bs: verify passes" test "$RC" -eq 0
	if msg=$(roundtrip "$pack" "$RND" "$T/random.list"); then
		ok "random data --block-size $bs: $msg"
	else
		bad "random data --block-size $bs: $msg"
	fi
done

# ---- 3. tar archives -----------------------------------------------------------------

echo "# 3. tar archives: regular members in archive order (at ${SECONDS}s)"
make_tars
for tf in in.tar in.tar.gz; do
	# Expected: regular members in archive order, named as in the archive.
	python3 - "$T/$tf" >"$T/$tf.list" <<'PY'
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    for m in t:
        if m.isreg():
            sys.stdout.buffer.write(m.name.encode("utf-8", "surrogateescape") + b"\0")
PY
	want=$(tr -cd '\0' <"$T/$tf.list" | wc -c)
	listed=$(tar -tvf "$T/$tf" | grep -c '^-' || true)
	expect "$tf: tar -tvf lists $listed regular members, python tarfile $want" test "$want" -eq "$listed" -a "$want" -ge 7
	pack=$T/$tf.bpk
	run create "$pack" "$T/$tf"
	if [[ $RC -ne 0 ]]; then
		bad "$tf: create exit $RC: $(err)"
		continue
	fi
	if info "$pack" "$T/tar.json"; then
		read -r samples raw < <(jget "$T/tar.json" samples raw_bytes) || true
		want_raw=$(python3 -c 'import sys, tarfile; print(sum(m.size for m in tarfile.open(sys.argv[1]) if m.isreg()))' "$T/$tf")
		expect "$tf: info samples $samples == $want regular members, raw_bytes $raw == $want_raw" \
			test "$samples" -eq "$want" -a "$raw" -eq "$want_raw"
	else
		bad "$tf: info exit $RC: $(err)"
	fi
	if msg=$(roundtrip "$pack" "$TS" "$T/$tf.list"); then
		ok "$tf: cat in archive order: $msg"
	else
		bad "$tf: cat in archive order: $msg"
	fi
	run verify "$pack"
	expect "$tf: verify passes" test "$RC" -eq 0
done
# The same members in the same order are the same dataset.
if info "$T/in.tar.bpk" "$T/t1.json" && info "$T/in.tar.gz.bpk" "$T/t2.json"; then
	f1=$(jget "$T/t1.json" fingerprint)
	f2=$(jget "$T/t2.json" fingerprint)
	expect "tar and pax .tar.gz of the same members: same fingerprint ($f1, $f2)" test "$f1" = "$f2"
else
	bad "tar fingerprints: info failed: $(err)"
fi

# ---- 4. record files ----------------------------------------------------------------

echo "# 4. --records SIZE FILE (at ${SECONDS}s)"
make_records
run create "$REC/out/r.bpk" --records 37 "$REC/r37" "$REC/small" --records 1K "$REC/r1k" --block-size 1K
if [[ $RC -eq 0 ]]; then
	ok "create --records 37 FILE DIR --records 1K FILE"
	info "$REC/out/r.bpk" "$REC/r.json" || true
	read -r samples raw < <(jget "$REC/r.json" samples raw_bytes) || true
	expect "records: info samples $samples == 64 + 2 + 5, raw_bytes $raw == $((37 * 64 + 8 + 5120))" \
		test "$samples" -eq 71 -a "$raw" -eq $((37 * 64 + 8 + 5120))
	msg=""
	for i in $(seq 0 63); do
		dd if="$REC/r37" of="$REC/want" bs=37 skip="$i" count=1 status=none
		if ! "$BIN" cat "$REC/out/r.bpk" "$i" >"$REC/got" 2>/dev/null || ! cmp -s "$REC/want" "$REC/got"; then
			msg="record $i of r37 differs from dd's"
			break
		fi
	done
	# Inputs keep command-line order: the directory's files, then r1k's records.
	for i in 0 1; do
		f=$([[ $i == 0 ]] && echo x || echo y)
		if [[ -z $msg ]] && ! { "$BIN" cat "$REC/out/r.bpk" $((64 + i)) 2>/dev/null | cmp -s - "$REC/small/$f"; }; then
			msg="sample $((64 + i)) is not small/$f"
		fi
	done
	for i in 0 1 2 3 4; do
		dd if="$REC/r1k" of="$REC/want" bs=1024 skip="$i" count=1 status=none
		if [[ -z $msg ]] && ! { "$BIN" cat "$REC/out/r.bpk" $((66 + i)) 2>/dev/null | cmp -s - "$REC/want"; }; then
			msg="sample $((66 + i)) is not record $i of r1k"
		fi
	done
	if [[ -z $msg ]]; then
		ok "records: all 71 samples equal dd-extracted records and files, in command-line order"
	else
		bad "records: $msg"
	fi
else
	bad "create --records: exit $RC: $(err)"
fi
head -c $((37 * 10 + 5)) /dev/urandom >"$REC/odd"
run create "$REC/out/odd.bpk" --records 37 "$REC/odd"
expect "records: size 375 not a multiple of 37 fails (exit $RC) naming the file: $(err)" \
	eval 'clean_fail && err_has "$REC/odd"'
expect "records: the failed create left nothing in the output directory" \
	test "$(listing "$REC/out")" = "r.bpk"

# ---- 5. shards -------------------------------------------------------------------------

echo "# 5. --shard-size (at ${SECONDS}s)"
SH=$T/shards.d
run create "$SH" "$TREE" --shard-size 384K --block-size 16K
if [[ $RC -eq 0 && -d $SH ]]; then
	ok "create --shard-size 384K: $(head -c 200 "$T/out")"
	nparts=$(find "$SH" -mindepth 1 -maxdepth 1 -name 'part-*.bpk' -type f | wc -l)
	nall=$(listing "$SH" | wc -l)
	expect "shards: OUT holds $nparts part-*.bpk files (> 1) and nothing else ($nall entries)" \
		test "$nparts" -gt 1 -a "$nall" -eq "$nparts"
	if info "$SH" "$T/sh.json"; then
		read -r shards samples raw < <(jget "$T/sh.json" shards samples raw_bytes) || true
		expect "shards: info shards $shards == $nparts, samples $samples == $N, raw_bytes $raw == $TOTAL" \
			test "$shards" -eq "$nparts" -a "$samples" -eq "$N" -a "$raw" -eq "$TOTAL"
	else
		bad "shards: info exit $RC: $(err)"
	fi
	# Each shard is a pack of its own; their counts add up, and the samples on
	# either side of each boundary are the right files.
	first=0
	bounds=()
	for p in "$SH"/part-*.bpk; do
		n=0
		if info "$p" "$T/part.json"; then
			n=$(jget "$T/part.json" samples)
		fi
		[[ $n =~ ^[0-9]+$ ]] || n=0
		first=$((first + n))
		bounds+=("$first")
	done
	expect "shards: per-shard sample counts add up to $first == $N" test "$first" -eq "$N"
	mapfile -d '' names <"$T/tree.list"
	msg=""
	for b in "${bounds[@]:0:${#bounds[@]}-1}"; do
		for i in $((b - 1)) "$b"; do
			if ! { "$BIN" cat "$SH" "$i" 2>/dev/null | cmp -s - "$TREE/${names[i]}"; }; then
				msg="$msg sample $i (boundary $b) differs;"
			fi
		done
	done
	if [[ -z $msg ]]; then
		ok "shards: samples either side of ${#bounds[@]}-1 shard boundaries are correct"
	else
		bad "shards:$msg"
	fi
	if msg=$(roundtrip "$SH" "$TREE" "$T/tree.list"); then
		ok "shards: cat over the whole dataset: $msg"
	else
		bad "shards: cat over the whole dataset: $msg"
	fi
	run verify "$SH"
	expect "shards: verify passes: $(head -c 200 "$T/out")" test "$RC" -eq 0
else
	bad "create --shard-size 384K: exit $RC: $(err)"
fi

# Modes follow the umask, as open(2) and mkdir(2) would make them: a batchd
# running as its own user must be able to open what a user packed.
mkdir -p "$T/mask-in"
printf 'one' >"$T/mask-in/a"
printf 'two' >"$T/mask-in/b"
for mask in 022 027 077; do
	(umask "$mask" && "$BIN" create "$T/mask$mask.d" "$T/mask-in" --shard-size 64K >/dev/null 2>&1 &&
		"$BIN" create "$T/mask$mask.bpk" "$T/mask-in" >/dev/null 2>&1) || true
	want_dir=$(printf '%o' $((0755 & ~0$mask)))
	want_file=$(printf '%o' $((0644 & ~0$mask)))
	got_dir=$(stat -c %a "$T/mask$mask.d" 2>/dev/null || echo missing)
	got_part=$(stat -c %a "$T/mask$mask.d/part-000000.bpk" 2>/dev/null || echo missing)
	got_file=$(stat -c %a "$T/mask$mask.bpk" 2>/dev/null || echo missing)
	expect "umask $mask: shard directory $got_dir == $want_dir, shard $got_part and file $got_file == $want_file" \
		test "$got_dir" = "$want_dir" -a "$got_part" = "$want_file" -a "$got_file" = "$want_file"
done

# ---- 9. determinism ---------------------------------------------------------------------------

echo "# 9. determinism (at ${SECONDS}s)"
DET=$T/det
mkdir -p "$DET"
det_create() { # det_create OUT ARGS...: create, failing the check on error
	run create "$@"
	[[ $RC -eq 0 ]] || bad "determinism: create $1 failed: exit $RC: $(err)"
}
# --dict so that dictionary training is part of what must be repeatable.
det_create "$DET/a.bpk" "$TREE" --block-size 16K --dict
det_create "$DET/b.bpk" "$TREE" --block-size 16K --dict
det_create "$DET/t1.bpk" "$TREE" --block-size 16K --dict --threads 1
det_create "$DET/t4.bpk" "$TREE/" --block-size 16K --dict --threads 4
det_create "$DET/n1.bpk" "$TREE" --no-dict --level 7 --threads 1
det_create "$DET/n4.bpk" "$TREE" --no-dict --level 7 --threads 4
det_create "$DET/s1" "$TREE" --no-dict --threads 1 --shard-size 256K --block-size 32K
det_create "$DET/s4" "$TREE" --no-dict --threads 4 --shard-size 256K --block-size 32K
fp() { info "$1" "$DET/fp.json" >/dev/null 2>&1 && jget "$DET/fp.json" fingerprint; }
expect "determinism: the same input packed twice gives identical files" cmp -s "$DET/a.bpk" "$DET/b.bpk"
expect "determinism: ... and identical fingerprints ($(fp "$DET/a.bpk"), $(fp "$DET/b.bpk"))" \
	eval '[[ -n $(fp "$DET/a.bpk") && $(fp "$DET/a.bpk") == $(fp "$DET/b.bpk") ]]'
expect "determinism: --dict with --threads 1 and --threads 4 (and INPUT/ with a slash) gives identical files" \
	eval 'cmp -s "$DET/t1.bpk" "$DET/t4.bpk" && cmp -s "$DET/a.bpk" "$DET/t1.bpk"'
expect "determinism: --no-dict with --threads 1 and --threads 4 gives identical files" cmp -s "$DET/n1.bpk" "$DET/n4.bpk"
expect "determinism: sharded output with --threads 1 and --threads 4 is identical, shard by shard" \
	eval '[[ -d $DET/s1 ]] && diff -r "$DET/s1" "$DET/s4" >/dev/null'
expect "determinism: fingerprints of sharded datasets agree ($(fp "$DET/s1"), $(fp "$DET/s4"))" \
	eval '[[ -n $(fp "$DET/s1") && $(fp "$DET/s1") == $(fp "$DET/s4") ]]'

# A one-character relative directory name, with and without its slash (it was taken for "/").
mkdir -p "$T/short/d"
printf 'one' >"$T/short/d/1"
printf 'two!' >"$T/short/d/2"
for in in d d/; do
	( cd "$T/short" && timeout -k 5 60 "$BIN" create "out-${in%/}$([[ $in == */ ]] && echo s).bpk" "$in" \
		>/dev/null 2>"$T/err" ) && RC=0 || RC=$?
	expect "create from '$in': exit $RC$([[ $RC -ne 0 ]] && echo ": $(err)")" test "$RC" -eq 0
done
for p in out-d.bpk out-ds.bpk; do
	if info "$T/short/$p" "$T/short/info.json"; then
		read -r samples raw < <(jget "$T/short/info.json" samples raw_bytes) || true
		expect "info $p: 2 samples of 7 bytes ($samples, $raw)" test "$samples" -eq 2 -a "$raw" -eq 7
	else
		bad "info $p: exit $RC: $(err)"
	fi
done

# ---- 10. framed samples -----------------------------------------------------------------

# Samples over --frame-size are stored as frames of that size, a block each:
# info counts them, verify and cat see them whole, the footer says version 2,
# each framed sample's first frame holds its frame count, and a shard
# boundary never falls inside one.
echo "# 10. --frame-size (at ${SECONDS}s)"
FR=$T/frames
mkdir -p "$FR/in"
python3 - "$FR/in" <<'PY'
import os, random, sys
d = sys.argv[1]
rng = random.Random(8)
words = [b"frame", b"block", b"sample", b"decode", b"thread", b"zstd", b"batch"]
def text(n):
    out = bytearray()
    while len(out) < n:
        out += rng.choice(words) + b" "
    return bytes(out[:n])
sizes = {"a-small": 100, "b-random": 300000, "c-empty": 0, "d-text": 200001,
         "e-exact": 65536, "f-over": 65537, "g-small": 3000, "h-text": 1 << 20}
for name, n in sizes.items():
    data = rng.randbytes(n) if name.endswith("random") else text(n)
    open(os.path.join(d, name), "wb").write(data)
PY
list_files "$FR/in" "$FR/list"
read -r FRN FRTOTAL _ < <(stats "$FR/in" "$FR/list")
# Files over 64 KiB: 300000 (5 frames), 200001 (4), 65537 (2), 1 MiB (16).
# --no-keys: footer version 2 is that of framed samples without sections
# (test-pack-fields.sh packs framed samples with keys).
run create "$FR/f.bpk" "$FR/in" --frame-size 64K --block-size 16K --threads 4 --no-keys
if [[ $RC -eq 0 ]]; then
	ok "create --frame-size 64K: $(head -c 200 "$T/out")"
	expect "create --frame-size 64K: the summary counts 4 samples in frames" grep -q '(4 samples in frames)' "$T/out"
	if info "$FR/f.bpk" "$FR/f.json"; then
		read -r samples raw framed fblocks maxb blocks < <(jget "$FR/f.json" samples raw_bytes \
			framed_samples frame_blocks max_block blocks) || true
		expect "frames: info $samples samples == $FRN, raw $raw == $FRTOTAL, framed_samples $framed == 4, frame_blocks $fblocks == 27, max_block $maxb == 65536, blocks $blocks > samples" \
			test "$samples" -eq "$FRN" -a "$raw" -eq "$FRTOTAL" -a "$framed" -eq 4 -a \
			"$fblocks" -eq 27 -a "$maxb" -eq 65536 -a "$blocks" -gt "$samples"
	else
		bad "frames: info exit $RC: $(err)"
	fi
	run info "$FR/f.bpk"
	expect "frames: info text says 'framed        4 samples in 27 frames'" \
		grep -q '^framed        4 samples in 27 frames$' "$T/out"
	run verify "$FR/f.bpk"
	expect "frames: verify passes: $(head -c 200 "$T/out")" test "$RC" -eq 0
	if msg=$(roundtrip "$FR/f.bpk" "$FR/in" "$FR/list"); then
		ok "frames: cat: $msg"
	else
		bad "frames: cat: $msg"
	fi
	# Read independently of pack.c: footer version 2, frames fields 5 4 3 2 1 on b-random.
	fields=$(python3 - "$FR/f.bpk" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
idx_off, _, nblocks, _ = struct.unpack_from("<QQQQ", b, len(b) - 80)
version = struct.unpack_from("<I", b, len(b) - 80 + 56)[0]
frames = [struct.unpack_from("<I", b, idx_off + 56 * k + 52)[0] for k in range(nblocks)]
firsts = [struct.unpack_from("<Q", b, idx_off + 56 * k + 24)[0] for k in range(nblocks)]
print(version, " ".join("%d:%d" % (f, n) for f, n in zip(firsts, frames) if n))
PY
)
	expect "frames: footer version 2, sample 1 in frames 5..1 ($fields)" \
		eval '[[ $fields == "2 1:5 1:4 1:3 1:2 1:1 "* ]]'
else
	bad "create --frame-size 64K: exit $RC: $(err)"
fi
# The default frame size (4M) leaves every one of these samples whole.
run create "$FR/d.bpk" "$FR/in"
if [[ $RC -eq 0 ]] && info "$FR/d.bpk" "$FR/d.json"; then
	read -r framed blocks < <(jget "$FR/d.json" framed_samples blocks) || true
	expect "frames: default frame size: framed_samples $framed == 0, blocks $blocks == $FRN" \
		test "$framed" -eq 0 -a "$blocks" -eq "$FRN"
else
	bad "frames: default create/info exit $RC: $(err)"
fi
# Deterministic whatever the threads; shards close between samples, never inside one.
run create "$FR/t1.bpk" "$FR/in" --frame-size 64K --block-size 16K --threads 1 --no-keys
expect "frames: --threads 1 and --threads 4 give identical files" cmp -s "$FR/t1.bpk" "$FR/f.bpk"
run create "$FR/s.d" "$FR/in" --frame-size 16K --shard-size 40K
if [[ $RC -eq 0 ]]; then
	nparts=$(find "$FR/s.d" -name 'part-*.bpk' -type f | wc -l)
	framed=missing
	if info "$FR/s.d" "$FR/s.json"; then
		framed=$(jget "$FR/s.json" framed_samples)
	fi
	expect "frames: --shard-size 40K --frame-size 16K: $nparts shards (> 1), framed_samples $framed == 5" \
		test "$nparts" -gt 1 -a "$framed" = 5
	if msg=$(roundtrip "$FR/s.d" "$FR/in" "$FR/list"); then
		ok "frames: sharded cat: $msg"
	else
		bad "frames: sharded cat: $msg"
	fi
	run verify "$FR/s.d"
	expect "frames: sharded verify passes" test "$RC" -eq 0
else
	bad "frames: sharded create exit $RC: $(err)"
fi
for fs in 1K 4095 257M x; do
	run create "$FR/bad.bpk" "$FR/in" --frame-size "$fs"
	expect "frames: --frame-size $fs refused with a message naming the range, nothing created" \
		eval 'clean_fail && err_has "--frame-size" && err_has "4K to 256M" && [[ ! -e $FR/bad.bpk ]]'
done

echo "$PASS passed, $FAILED failed"
[[ $FAILED -eq 0 ]]
