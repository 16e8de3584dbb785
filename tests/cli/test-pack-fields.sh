#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# test-pack-fields.sh - batchd-pack's samples with fields, end to end.
#
#   bash tests/cli/test-pack-fields.sh PATH/TO/batchd-pack
#
# Packs real files nobody here wrote (/usr/share/zoneinfo,
# /usr/share/common-licenses, /usr/share/doc) as class folders
# (--labels dirname), WebDataset tars (--group-by key, tars made with
# python's tarfile), CSV and JSONL manifests (--manifest) and plain
# directories with keys; then checks what `ls`, `cat` (by id and by key,
# each field) and `info --json` report against the sources, computed
# independently in python; and that every bad input is refused with a
# message naming the file and line, key or member, leaving no output.
#
# Each check prints "ok - ..." or "FAIL - ..."; the last line is
# "N passed, M failed". Exit status 0 when nothing failed, 1 otherwise.
# shellcheck disable=SC2016 # expect ... eval '...' expands when the check runs, on purpose
set -euo pipefail
export LC_ALL=C

if [[ $# -ne 1 ]]; then
	echo "usage: $0 PATH/TO/batchd-pack" >&2
	exit 2
fi
BIN=$(realpath -- "$1")
T=$(mktemp -d "${TMPDIR:-/tmp}/pack-fields.XXXXXX")
trap 'rm -rf "$T"' EXIT

# shellcheck source=cli-lib.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/cli-lib.sh"

# check NAME SCRIPT ARGS...: run a python check; ok with its one-line verdict, else FAIL with it.
check() {
	local name=$1 script=$2 msg
	shift 2
	if msg=$(python3 "$T/lib.py" "$script" "$@" 2>&1); then
		ok "$name: $msg"
	else
		bad "$name: $msg"
	fi
}

# refused DESC OUT NEEDLE ARGS...: create OUT ARGS must fail naming NEEDLE and leave OUT's
# directory as it was (no output, no temporary file).
refused() {
	local desc=$1 out=$2 needle=$3 before after
	shift 3
	before=$(ls -A "$(dirname "$out")")
	run create "$out" "$@"
	after=$(ls -A "$(dirname "$out")")
	expect "$desc: refused (exit $RC) naming '$needle', nothing written: $(err)" \
		eval 'clean_fail && [[ $RC -eq 1 ]] && err_has "$needle" && [[ $before == "$after" && ! -e $out ]]'
}

# ---- python side: parse `ls`, compare with the sources ----------------------------

cat >"$T/lib.py" <<'PY'
import json, os, struct, subprocess, sys

BIN = os.environ["BIN"]

def unquote(s, i):
    """A token at s[i:]: <N bytes>, bare up to a blank, or "..." with C escapes. Returns (bytes, next)."""
    if s[i:i + 1] == b"<":
        j = s.index(b">", i) + 1
        return s[i:j], j
    if s[i:i + 1] != b'"':
        j = s.find(b" ", i)
        j = len(s) if j < 0 else j
        return s[i:j], j
    out, i = bytearray(), i + 1
    while s[i:i + 1] != b'"':
        c = s[i:i + 1]
        if c == b"\\":
            e = s[i + 1:i + 2]
            if e == b"x":
                out.append(int(s[i + 2:i + 4], 16)); i += 4; continue
            out += {b"n": b"\n", b"t": b"\t", b"r": b"\r"}.get(e, e); i += 2; continue
        out += c; i += 1
    return bytes(out), i + 1

def ls(pack, *extra):
    """`ls` as [(id, key bytes or None, {field: bytes value})]."""
    r = subprocess.run([BIN, "ls", pack, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode:
        sys.exit("ls failed: %s" % r.stderr.decode(errors="replace")[:300])
    rows = []
    for line in r.stdout.split(b"\n")[:-1]:
        sid, rest = line.split(b" ", 1)
        key, i = unquote(rest, 0)
        vals = {}
        while i < len(rest):
            eq = rest.index(b"=", i + 1)
            name = rest[i + 1:eq].decode()
            vals[name], i = unquote(rest, eq + 1)
        rows.append((int(sid), None if key == b"-" and not rest.startswith(b'"') else key, vals))
    return rows

def cat(pack, *args):
    r = subprocess.run([BIN, "cat", pack, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode:
        sys.exit("cat %s failed: %s" % (" ".join(args), r.stderr.decode(errors="replace")[:300]))
    return r.stdout

def info(pack):
    r = subprocess.run([BIN, "info", pack, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode:
        sys.exit("info failed: %s" % r.stderr.decode(errors="replace")[:300])
    return json.loads(r.stdout)

def footer_version(pack):
    if os.path.isdir(pack):
        pack = os.path.join(pack, sorted(os.listdir(pack))[0])
    b = open(pack, "rb").read()
    return struct.unpack_from("<I", b, len(b) - 80 + 56)[0]

def fields_of(d):
    return [(f["name"], f["type"]) for f in d["fields"]]

def fail(msg):
    sys.exit(msg)

exec(compile(open(sys.argv[1]).read(), sys.argv[1], "exec"))
PY
export BIN

# ---- 1. class folders (ImageFolder) -------------------------------------------------

echo "# 1. --labels dirname"
IF=$T/if/in
mkdir -p "$IF/cat" "$IF/dog/deeper" "$IF/empty" "$IF/zebra" "$T/if/out"
n=0
while IFS= read -r -d '' f; do
	case $((n % 3)) in
	0) cp -- "$f" "$IF/cat/" ;;
	1) cp -- "$f" "$IF/dog/deeper/" ;;
	2) cp -- "$f" "$IF/zebra/" ;;
	esac
	n=$((n + 1))
	[[ $n -ge 30 ]] && break
done < <(find /usr/share/zoneinfo/America -maxdepth 1 -type f -print0 | sort -z)
cp /usr/share/common-licenses/Apache-2.0 "$IF/dog/"
cp /usr/share/common-licenses/GPL-3 "$IF/zebra/GPL 3 with space"
ln -s /usr/share/common-licenses "$IF/linked-class" # a symlink: not a class
expect "class folders: $n zoneinfo files copied" test "$n" -ge 30
run create "$T/if/out/p.bpk" "$IF" --labels dirname
expect "create --labels dirname: exit $RC $(err)" test "$RC" -eq 0
cat >"$T/if.py" <<'PY'
root, pack = sys.argv[2], sys.argv[3]
classes = sorted(e for e in os.listdir(root) if os.path.isdir(os.path.join(root, e)) and not os.path.islink(os.path.join(root, e)))
classes = sorted(c.encode() for c in classes)
files = []
for d, _, names in os.walk(root.encode()):
    for nm in names:
        p = os.path.join(d, nm)
        if os.path.isfile(p) and not os.path.islink(p):
            files.append(os.path.relpath(p, root.encode()))
files.sort()
rows = ls(pack)
if len(rows) != len(files):
    fail("%d rows for %d files" % (len(rows), len(files)))
for (sid, key, vals), rel in zip(rows, files):
    want_label = classes.index(rel.split(b"/")[0])
    size = os.path.getsize(os.path.join(root.encode(), rel))
    if key != rel or vals != {"data": b"<%d bytes>" % size, "label": b"%d" % want_label}:
        fail("row %d: %r %r; want %r label %d size %d" % (sid, key, vals, rel, want_label, size))
    want = open(os.path.join(root.encode(), rel), "rb").read()
    if cat(pack, rel.decode()) != want or cat(pack, str(sid)) != want or cat(pack, "--key", rel.decode()) != want:
        fail("cat of %r (id %d) differs from the file" % (rel, sid))
    if sid == 1 and cat(pack, str(sid), "--field", "label") != b"%d\n" % want_label:
        fail("cat --field label of %d" % sid)
d = info(pack)
want_fields = [{"name": "data", "type": "bytes", "min": None, "max": None, "classes": 0, "fixed_size": 0},
               {"name": "label", "type": "int64", "min": 0, "max": len(classes) - 1, "classes": len(classes), "fixed_size": 0}]
if d["fields"] != want_fields or d["keys"] is not True or d["samples"] != len(files):
    fail("info: %r keys %r; want %r" % (d["fields"], d["keys"], want_fields))
if footer_version(pack) != 3:
    fail("footer version %d, not 3" % footer_version(pack))
print("%d files in %d classes %s: keys, labels, sizes exact; cat by key and id byte-identical; info fields exact" % (len(files), len(classes), b",".join(classes).decode()))
PY
[[ $RC -eq 0 ]] && check "class folders" "$T/if.py" "$IF" "$T/if/out/p.bpk"
run info "$T/if/out/p.bpk"
expect "info text: label line with its classes ($(grep '^field' "$T/out" | tr '\n' ' '))" \
	grep -q '^field         label int64 min 0 max 3 classes 4 (cat dog empty zebra)$' "$T/out"
run verify "$T/if/out/p.bpk"
expect "verify a labelled pack: exit $RC $(err)" test "$RC" -eq 0
run cat "$T/if/out/p.bpk" "no/such/key"
expect "cat of an absent key fails naming it" eval 'clean_fail && err_has "no sample has key '"'"'no/such/key'"'"'"'
run cat "$T/if/out/p.bpk" 0 --field nosuch
expect "cat --field of an absent field lists the fields" eval 'clean_fail && err_has "no field '"'"'nosuch'"'"' (fields: data label)"'
run ls "$T/if/out/p.bpk" --range 2:5
expect "ls --range 2:5: ids 2 3 4 ($(cut -d' ' -f1 "$T/out" | tr '\n' ' '))" \
	test "$(cut -d' ' -f1 "$T/out" | tr '\n' ' ')" = "2 3 4 "
cp /usr/share/common-licenses/BSD "$IF/loose-file"
refused "--labels: a file outside any class directory" "$T/if/out/q.bpk" "$IF/loose-file: not inside a class directory" "$IF" --labels dirname
rm "$IF/loose-file"
run create "$T/if/out/nk.bpk" "$IF" --labels dirname --no-keys
if [[ $RC -eq 0 ]]; then
	run ls "$T/if/out/nk.bpk" --range 0:1
	expect "--labels --no-keys: ls prints - for the key ($(cat "$T/out"))" grep -q '^0 - data=<[0-9]* bytes> label=0$' "$T/out"
	run cat "$T/if/out/nk.bpk" --key cat/x
	expect "cat --key without keys says there are none" eval 'clean_fail && err_has "stores no keys"'
else
	bad "--labels --no-keys: exit $RC $(err)"
fi

# ---- 2. WebDataset tars ------------------------------------------------------------

echo "# 2. --group-by key"
WD=$T/wd
mkdir -p "$WD/out"
# mk_tar OUT MODE: a WebDataset tar of real files; MODE varies one thing.
cat >"$T/mktar.py" <<'PY'
import glob, io, tarfile
out, mode = sys.argv[2], sys.argv[3]
docs = sorted(glob.glob("/usr/share/doc/*/copyright"))[:40]
zones = sorted(p for p in glob.glob("/usr/share/zoneinfo/Europe/*") if os.path.isfile(p) and not os.path.islink(p))[:20]
def add(t, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    t.addfile(ti, io.BytesIO(data))
want = []
with tarfile.open(out, "w:gz" if out.endswith(".gz") else "w") as t:
    for k in range(20):
        key = "shard0/%06d" % k
        jpg = open(zones[k], "rb").read()
        js = open(docs[k], "rb").read()
        cls = b"%d\n" % (k % 7) if mode != "badcls" or k != 5 else b"seven\n"
        members = [("json", js), ("cls", cls), ("jpg", jpg)] if k % 2 else [("jpg", jpg), ("cls", cls), ("json", js)]
        members.insert(k % 3, ("seg.png", jpg[:100 + k]))
        members.append(("id.bin", b"%016d" % k))
        if mode == "missing" and k == 2:
            members = [m for m in members if m[0] != "json"]
        if mode == "missingcls" and k == 4:
            members = [m for m in members if m[0] != "cls"]
        for ext, data in members:
            add(t, "%s.%s" % (key, ext), data)
        if mode == "apart" and k == 6:
            add(t, "shard0/000004.txt", b"late")
        want.append((key, members))
json.dump([(k, [(e, d.hex()) for e, d in m]) for k, m in want], open(out + ".want", "w"))
print("made")
PY
cat >"$T/wd.py" <<'PY'
pack, want_file, mode = sys.argv[2], sys.argv[3], sys.argv[4]
want = json.load(open(want_file))
rows = ls(pack)
exts = sorted({e for _, m in want for e, _ in m})
if [f for f, _ in fields_of(info(pack))] != exts:
    fail("fields %r, want %r (bytewise)" % (fields_of(info(pack)), exts))
types = dict(fields_of(info(pack)))
fixed = {f["name"]: f["fixed_size"] for f in info(pack)["fields"]}
if fixed != {e: 16 if e == "id.bin" else 0 for e in exts}:
    fail("fixed sizes %r: want 16 for id.bin (every one 16 bytes), else 0" % fixed)
if types.get("cls") != "int64" or any(types[e] != "bytes" for e in exts if e != "cls"):
    fail("types %r" % types)
for (sid, key, vals), (wkey, members) in zip(rows, want):
    m = {e: bytes.fromhex(h) for e, h in members}
    if key != wkey.encode():
        fail("sample %d key %r, want %r" % (sid, key, wkey))
    for e in exts:
        if e == "cls":
            want_v = b"%d" % int(m["cls"]) if "cls" in m else b"-1"
            if vals["cls"] != want_v:
                fail("%s cls=%r want %r" % (wkey, vals["cls"], want_v))
            continue
        data = m.get(e, b"")
        if vals[e] != b"<%d bytes>" % len(data):
            fail("%s %s=%r want %d bytes" % (wkey, e, vals[e], len(data)))
        if sid % 3 == 0 or e == "seg.png" or not data:
            if cat(pack, wkey, "--field", e) != data:
                fail("cat %s --field %s differs from the member" % (wkey, e))
    first = [e for e in exts if types[e] == "bytes"][0]
    if cat(pack, str(sid)) != m.get(first, b""):
        fail("cat %d (the first bytes field, %s) differs" % (sid, first))
if len(rows) != len(want):
    fail("%d samples, want %d" % (len(rows), len(want)))
print("%d samples, fields %s: keys, values, sizes, fixed_size exact; cat of each field byte-identical" % (len(rows), ",".join(exts)))
PY
for tf in wd.tar wd.tar.gz; do
	python3 "$T/lib.py" "$T/mktar.py" "$WD/$tf" plain >/dev/null
	run create "$WD/out/$tf.bpk" "$WD/$tf" --group-by key
	if [[ $RC -eq 0 ]]; then
		check "$tf --group-by key" "$T/wd.py" "$WD/out/$tf.bpk" "$WD/$tf.want" plain
	else
		bad "$tf --group-by key: exit $RC $(err)"
	fi
done
if command -v zstd >/dev/null; then
	zstd -q -f "$WD/wd.tar" -o "$WD/wd.tar.zst"
	run create "$WD/out/wd.tar.zst.bpk" "$WD/wd.tar.zst" --group-by key
	expect "wd.tar.zst --group-by key: the same pack bytes as from wd.tar: exit $RC $(err)" \
		cmp -s "$WD/out/wd.tar.zst.bpk" "$WD/out/wd.tar.bpk"
else
	skip "wd.tar.zst (no zstd command)"
fi
run verify "$WD/out/wd.tar.bpk"
expect "verify a grouped pack: exit $RC $(err)" test "$RC" -eq 0
python3 "$T/lib.py" "$T/mktar.py" "$WD/missing.tar" missing >/dev/null
refused "--group-by: a sample lacking a field" "$WD/out/m.bpk" "key shard0/000002 has no .json member" "$WD/missing.tar" --group-by key
expect "... and the message says --allow-missing" err_has "--allow-missing"
run create "$WD/out/m.bpk" "$WD/missing.tar" --group-by key --allow-missing
if [[ $RC -eq 0 ]]; then
	check "--allow-missing: the missing json is empty" "$T/wd.py" "$WD/out/m.bpk" "$WD/missing.tar.want" missing
else
	bad "--allow-missing: exit $RC $(err)"
fi
python3 "$T/lib.py" "$T/mktar.py" "$WD/missingcls.tar" missingcls >/dev/null
refused "--allow-missing: a lacking int64 needs --missing-int" "$WD/out/mc.bpk" "key shard0/000004 has no .cls member" "$WD/missingcls.tar" --group-by key --allow-missing
expect "... and the message says --missing-int" err_has "--missing-int VALUE"
run create "$WD/out/mc.bpk" "$WD/missingcls.tar" --group-by key --allow-missing --missing-int -1
if [[ $RC -eq 0 ]]; then
	check "--missing-int -1: the missing cls is -1" "$T/wd.py" "$WD/out/mc.bpk" "$WD/missingcls.tar.want" missingcls
else
	bad "--missing-int -1: exit $RC $(err)"
fi
python3 "$T/lib.py" "$T/mktar.py" "$WD/badcls.tar" badcls >/dev/null
refused "--group-by: a .cls that is not an integer" "$WD/out/b.bpk" "$WD/badcls.tar:shard0/000005.cls: a .cls member holds a decimal integer" "$WD/badcls.tar" --group-by key
python3 "$T/lib.py" "$T/mktar.py" "$WD/apart.tar" apart >/dev/null
refused "--group-by: a sample's members apart" "$WD/out/a.bpk" "duplicate key 'shard0/000004'" "$WD/apart.tar" --group-by key
expect "... and the message says members must be adjacent" err_has "must be adjacent"
run create "$WD/out/plain.bpk" "$WD/wd.tar"
if [[ $RC -eq 0 ]]; then
	run ls "$WD/out/plain.bpk" --range 0:2
	expect "a tar without --group-by: a sample per member, keyed by member path ($(tr '\n' ' ' <"$T/out"))" \
		eval '[[ $(cut -d" " -f1,2 "$T/out" | tr "\n" " ") == "0 shard0/000000.seg.png 1 shard0/000000.jpg " ]]'
else
	bad "a tar without --group-by: exit $RC $(err)"
fi

# ---- 3. manifests -------------------------------------------------------------------

echo "# 3. --manifest"
M=$T/man
mkdir -p "$M/files/sub" "$M/out" "$T/outside"
i=0
for f in /usr/share/common-licenses/*; do
	[[ -f $f && ! -L $f ]] || continue
	cp -- "$f" "$M/files/sub/$(basename "$f")"
	i=$((i + 1))
done
cp /usr/share/common-licenses/BSD "$T/outside/secret"
ln -s "$T/outside/secret" "$M/files/link-out"
ln -s sub/BSD "$M/files/link-in"
cat >"$T/mkman.py" <<'PY'
import csv
d, mode = sys.argv[2], sys.argv[3]
names = sorted(os.listdir(os.path.join(d, "files/sub")))
rows = []
for k, n in enumerate(names):
    rows.append({"path": "files/sub/" + n, "label": k * 3 - 5, "score": [0.5, -2.25, 1e-7, 3.0, 123456.789][k % 5] * (k + 1),
                 "caption": ['plain', 'with, comma', 'a "quoted" word', 'two\nlines', 'ünïcode ✓'][k % 5] + str(k)})
rows.append({"path": "files/link-in", "label": 7, "score": 1.5, "caption": "through a link"})
bad_row = None
if mode == "missing":
    bad_row = {"path": "files/sub/nope", "label": 1, "score": 1.0, "caption": "x"}
elif mode == "dotdot":
    bad_row = {"path": "../outside/secret", "label": 1, "score": 1.0, "caption": "x"}
elif mode == "absolute":
    bad_row = {"path": "/usr/share/common-licenses/BSD", "label": 1, "score": 1.0, "caption": "x"}
elif mode == "symlink":
    bad_row = {"path": "files/link-out", "label": 1, "score": 1.0, "caption": "x"}
elif mode == "notint":
    bad_row = {"path": "files/sub/" + names[0], "label": "abc", "score": 1.0, "caption": "x"}
elif mode == "overflow":
    bad_row = {"path": "files/sub/" + names[0], "label": 1, "score": "1e999", "caption": "x"}
elif mode == "dup":
    bad_row = dict(rows[1])
if bad_row:
    rows.insert(3, bad_row)
with open(os.path.join(d, "m-%s.csv" % mode), "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["path", "label", "score", "caption"])
    for r in rows:
        w.writerow([r["path"], r["label"], repr(r["score"]) if isinstance(r["score"], float) else r["score"], r["caption"]])
    if mode == "columns":
        f.write("files/sub/%s,1,2.0\n" % names[0])
with open(os.path.join(d, "m-%s.jsonl" % mode), "w") as f:
    for r in rows:
        f.write(json.dumps(r) + "\n")
json.dump(rows, open(os.path.join(d, "m-%s.want" % mode), "w"))
print("made")
PY
cat >"$T/man.py" <<'PY'
pack, d, mode, score_type = sys.argv[2:6]
want = json.load(open(os.path.join(d, "m-%s.want" % mode)))
got = fields_of(info(pack))
if got != [("data", "bytes"), ("label", "int64"), ("score", score_type), ("caption", "str")]:
    fail("fields %r" % got)
rows = ls(pack)
if len(rows) != len(want):
    fail("%d rows, want %d" % (len(rows), len(want)))
import array
for (sid, key, vals), w in zip(rows, want):
    size = os.path.getsize(os.path.join(d, w["path"]))
    s, g = float(w["score"]), float(vals["score"])
    if score_type == "float32":
        s, g = array.array("f", [s])[0], array.array("f", [g])[0]
    if key != w["path"].encode() or vals["data"] != b"<%d bytes>" % size or int(vals["label"]) != w["label"] \
       or g != s or vals["caption"] != w["caption"].encode():
        fail("row %d: %r %r; want %r" % (sid, key, vals, w))
    if cat(pack, w["path"]) != open(os.path.join(d, w["path"]), "rb").read():
        fail("cat %s differs from the file" % w["path"])
    if cat(pack, w["path"], "--field", "caption") != w["caption"].encode():
        fail("cat --field caption of %s" % w["path"])
d2 = info(pack)
lab = [f for f in d2["fields"] if f["name"] == "label"][0]
sc = [f for f in d2["fields"] if f["name"] == "score"][0]
labels = [w["label"] for w in want]
if lab["min"] != min(labels) or lab["max"] != max(labels):
    fail("label min/max %r %r, want %d %d" % (lab["min"], lab["max"], min(labels), max(labels)))
if score_type == "float64" and (sc["min"] != min(float(w["score"]) for w in want) or sc["max"] != max(float(w["score"]) for w in want)):
    fail("score min/max %r %r" % (sc["min"], sc["max"]))
print("%d rows: keys, int64, %s and str values exact, cat by key byte-identical, info min/max exact" % (len(rows), score_type))
PY
python3 "$T/lib.py" "$T/mkman.py" "$M" good >/dev/null
for fmt in csv jsonl; do
	run create "$M/out/g-$fmt.bpk" --manifest "$M/m-good.$fmt"
	if [[ $RC -eq 0 ]]; then
		check "--manifest m.$fmt" "$T/man.py" "$M/out/g-$fmt.bpk" "$M" good float64
	else
		bad "--manifest m.$fmt: exit $RC $(err)"
	fi
done
run create "$M/out/f32.bpk" --manifest "$M/m-good.csv" --column score:float32
if [[ $RC -eq 0 ]]; then
	check "--column score:float32" "$T/man.py" "$M/out/f32.bpk" "$M" good float32
else
	bad "--column score:float32: exit $RC $(err)"
fi
run create "$M/out/s.bpk" --manifest "$M/m-good.csv" --column label:str
if [[ $RC -eq 0 ]]; then
	run ls "$M/out/s.bpk" --range 0:1
	expect "--column label:str: the label is text ($(cat "$T/out"))" grep -q ' label=-5 ' "$T/out"
	run info "$M/out/s.bpk" --json
	expect "--column label:str: info types it str" grep -q '"name": "label", "type": "str"' "$T/out"
else
	bad "--column label:str: exit $RC $(err)"
fi
# The same rows with CRLF line ends and a byte-order mark, as spreadsheets write them: the same pack.
python3 - "$M" <<'PY'
import csv, json, os, sys
d = sys.argv[1]
rows = json.load(open(os.path.join(d, "m-good.want")))
with open(os.path.join(d, "m-crlf.csv"), "w", newline="", encoding="utf-8-sig") as f:
    w = csv.writer(f, lineterminator="\r\n", quoting=csv.QUOTE_ALL)
    w.writerow(["path", "label", "score", "caption"])
    for r in rows:
        w.writerow([r["path"], r["label"], repr(r["score"]), r["caption"]])
PY
run create "$M/out/crlf.bpk" --manifest "$M/m-crlf.csv" --column label:int64 --column score:float64
expect "CSV with CRLF, a BOM and every field quoted: the same pack bytes as the plain CSV: exit $RC $(err)" \
	cmp -s "$M/out/crlf.bpk" "$M/out/g-csv.bpk"
rm -f "$M/out/crlf.bpk"
printf '{"path": "files/sub/BSD",\n "label": 1}\n' >"$M/m-split.jsonl"
refused "JSONL: an object over two lines" "$M/out/x.bpk" "$M/m-split.jsonl:1: not one JSON object: it does not end on this line" --manifest "$M/m-split.jsonl"

# Bad inputs: each refused naming the file and line (the header is line 1; bad rows are the 4th data row).
for mode in missing dotdot absolute symlink notint overflow dup columns; do
	python3 "$T/lib.py" "$T/mkman.py" "$M" "$mode" >/dev/null
done
refused "manifest row whose file is missing" "$M/out/x.bpk" "$M/m-missing.csv:5: path 'files/sub/nope': No such file" --manifest "$M/m-missing.csv"
refused "manifest row escaping by .." "$M/out/x.bpk" "$M/m-dotdot.csv:5: path '../outside/secret' escapes the manifest's directory" --manifest "$M/m-dotdot.csv"
refused "manifest row with an absolute path" "$M/out/x.bpk" "$M/m-absolute.csv:5: path '/usr/share/common-licenses/BSD': paths are relative" --manifest "$M/m-absolute.csv"
refused "manifest row escaping by a symlink" "$M/out/x.bpk" "$M/m-symlink.csv:5: path 'files/link-out' escapes the manifest's directory" --manifest "$M/m-symlink.csv"
refused "--column label:int64 with 'abc'" "$M/out/x.bpk" "$M/m-notint.csv:5: column label: 'abc' is not an int64" --manifest "$M/m-notint.csv" --column label:int64
refused "float overflow in a float64 column" "$M/out/x.bpk" "$M/m-overflow.csv:5: column score: '1e999' does not fit float64" --manifest "$M/m-overflow.csv" --column score:float64
printf 'path,score\nfiles/sub/BSD,1e39\n' >"$M/m-f32.csv"
refused "a float32 column with a value over FLT_MAX" "$M/out/x.bpk" "$M/m-f32.csv:2: column score: '1e39' does not fit float32" --manifest "$M/m-f32.csv" --column score:float32
refused "duplicate paths (keys)" "$M/out/x.bpk" "duplicate key 'files/sub/" --manifest "$M/m-dup.csv"
expect "... naming both lines" eval 'err_has "$M/m-dup.csv:3" && err_has "$M/m-dup.csv:5"'
refused "a CSV row with the wrong column count" "$M/out/x.bpk" "3 fields; the header has 4 columns" --manifest "$M/m-columns.csv"
expect "... naming the file and line" grep -qE "m-columns.csv:[0-9]+: 3 fields" "$T/err"
refused "JSONL: a missing file" "$M/out/x.bpk" "$M/m-missing.jsonl:4: path 'files/sub/nope': No such file" --manifest "$M/m-missing.jsonl"
refused "JSONL: --column label:int64 with \"abc\"" "$M/out/x.bpk" "$M/m-notint.jsonl:4: column label: 'abc' is not an int64" --manifest "$M/m-notint.jsonl" --column label:int64
printf '{"path": "files/sub/BSD", "label": true}\n' >"$M/m-bool.jsonl"
refused "JSONL: a boolean value" "$M/out/x.bpk" "$M/m-bool.jsonl:1: 'label' is a JSON boolean" --manifest "$M/m-bool.jsonl"
printf 'path,label\n"files/sub/BSD,1\n' >"$M/m-open.csv"
refused "CSV: an unclosed quote" "$M/out/x.bpk" "$M/m-open.csv:2: a quoted field is not closed" --manifest "$M/m-open.csv"
printf 'file,label\nfiles/sub/BSD,1\n' >"$M/m-nopath.csv"
refused "CSV: no path column" "$M/out/x.bpk" "$M/m-nopath.csv:1: no 'path' column" --manifest "$M/m-nopath.csv"
run create "$M/out/x.bpk" --manifest "$M/m-good.csv" --column nosuch:int64
expect "--column naming no column is refused: $(err)" eval 'clean_fail && err_has "--column nosuch: no such column" && [[ ! -e $M/out/x.bpk ]]'
expect "no temporary file left in the output directory ($(ls -A "$M/out" | tr '\n' ' '))" \
	eval '! ls -A "$M/out" | grep -q "^\.x\.bpk"'

# ---- 4. plain files and members: keys by default ------------------------------------

echo "# 4. keys by default, --no-keys, --records"
P=$T/plain
mkdir -p "$P/in/a" "$P/in/123" "$P/out"
cp /usr/share/common-licenses/Apache-2.0 "$P/in/a/apache"
cp /usr/share/common-licenses/GPL-2 "$P/in/123/gpl"
cp /usr/share/common-licenses/BSD "$P/in/7"
printf 'odd\n' >"$P/in/"$'tab\tand "quote"'
run create "$P/out/k.bpk" "$P/in"
run create "$P/out/nk.bpk" "$P/in" --no-keys
cat >"$T/plain.py" <<'PY'
k, nk, root = sys.argv[2:5]
names = sorted(os.listdir(root.encode()))
files = sorted(os.path.relpath(os.path.join(d, n), root.encode()) for d, _, ns in os.walk(root.encode()) for n in ns)
rows = ls(k)
if [r[1] for r in rows] != files:
    fail("keys %r, want %r" % ([r[1] for r in rows], files))
if footer_version(k) != 3 or footer_version(nk) != 1:
    fail("footer versions %d (keys) %d (--no-keys); want 3 and 1" % (footer_version(k), footer_version(nk)))
dk, dn = info(k), info(nk)
if dk["keys"] is not True or dn["keys"] is not False or fields_of(dk) != [("data", "bytes")] or fields_of(dn) != [("data", "bytes")]:
    fail("info keys %r / %r, fields %r / %r" % (dk["keys"], dn["keys"], dk["fields"], dn["fields"]))
if [r[1] for r in ls(nk)] != [None] * len(files):
    fail("--no-keys ls keys %r" % [r[1] for r in ls(nk)])
for i, f in enumerate(files):
    want = open(os.path.join(root.encode(), f), "rb").read()
    if cat(k, str(i)) != want or cat(nk, str(i)) != want or cat(k, "--key", f.decode()) != want:
        fail("cat of %r differs" % f)
# "7" is all digits: an id unless --key says otherwise.
if cat(k, "--key", "7") != open(os.path.join(root, "7"), "rb").read() or cat(k, "--id", "1") != open(os.path.join(root.encode(), files[1]), "rb").read():
    fail("--key 7 / --id 1")
if dk["fingerprint"] == dn["fingerprint"]:
    fail("keys do not change the fingerprint")
print("%d files: keys are relative paths (quoted where needed), footer 3 with keys, 1 with --no-keys, cat by id, key, --key and --id" % len(files))
PY
if [[ -f $P/out/k.bpk && -f $P/out/nk.bpk ]]; then
	check "plain directory" "$T/plain.py" "$P/out/k.bpk" "$P/out/nk.bpk" "$P/in"
else
	bad "plain create: $(err)"
fi
run cat "$P/out/k.bpk" 123/gpl
expect "cat KEY with a slash: a key ($(wc -c <"$T/out") bytes)" cmp -s "$T/out" "$P/in/123/gpl"
run cat "$P/out/k.bpk" 7
expect "cat 7: an id, and there is no sample 7: $(err)" eval 'clean_fail && err_has "no sample 7 (the dataset has 4)"'
run ls "$P/out/k.bpk"
expect "ls quotes a key with a tab and quotes ($(grep -c tab "$T/out") lines)" grep -qF '"tab\tand \"quote\"" data=<4 bytes>' "$T/out"
cp /usr/share/common-licenses/BSD "$P/r.bin"
truncate -s 3000 "$P/r.bin"
run create "$P/out/r.bpk" --records 100 "$P/r.bin" "$P/in"
if [[ $RC -eq 0 ]]; then
	run info "$P/out/r.bpk" --json
	expect "--records: no keys (info keys false)" grep -q '"keys": false' "$T/out"
else
	bad "--records with a directory: exit $RC $(err)"
fi
mkdir -p "$P/in2/a"
cp /usr/share/common-licenses/BSD "$P/in2/a/apache"
refused "two inputs with the same relative path" "$P/out/d.bpk" "duplicate key 'a/apache' ($P/in/a/apache and $P/in2/a/apache)" "$P/in" "$P/in2"
run create "$P/out/d.bpk" "$P/in" "$P/in2" --no-keys
expect "... accepted with --no-keys: exit $RC $(err)" test "$RC" -eq 0
run create "$P/out/u.bpk" "$P/in" --labels other
expect "--labels other: usage error" eval '[[ $RC -eq 2 ]] && err_has "dirname"'
run create "$P/out/u.bpk" "$P/in" --group-by key
expect "--group-by with a directory: usage error" eval '[[ $RC -eq 2 ]] && err_has "a tar archive"'
run create "$P/out/u.bpk" "$P/in" --column x:int64
expect "--column without --manifest: usage error" eval '[[ $RC -eq 2 ]] && err_has "only with --manifest"'

# Framed samples with keys and fields; the same bytes whatever the threads.
run create "$P/out/fr.bpk" "$P/in" --frame-size 4K --threads 2
cat >"$T/framed.py" <<'PY'
pack, root = sys.argv[2:4]
d = info(pack)
if d["framed_samples"] < 2 or footer_version(pack) != 3 or d["keys"] is not True:
    fail("framed_samples %d, footer %d, keys %r" % (d["framed_samples"], footer_version(pack), d["keys"]))
for sid, key, vals in ls(pack):
    want = open(os.path.join(root.encode(), key), "rb").read()
    if cat(pack, "--key", key.decode()) != want or vals["data"] != b"<%d bytes>" % len(want):
        fail("framed sample %r differs" % key)
print("%d framed samples, footer 3: cat by key byte-identical" % d["framed_samples"])
PY
if [[ $RC -eq 0 ]]; then
	check "--frame-size 4K with keys" "$T/framed.py" "$P/out/fr.bpk" "$P/in"
else
	bad "--frame-size 4K with keys: exit $RC $(err)"
fi
run create "$P/out/fr1.bpk" "$P/in" --frame-size 4K --threads 1
expect "framed with keys: --threads 1 and 2 give identical files" cmp -s "$P/out/fr1.bpk" "$P/out/fr.bpk"
run create "$M/out/t1.bpk" --manifest "$M/m-good.csv" --threads 1 --block-size 8K
run create "$M/out/t2.bpk" --manifest "$M/m-good.csv" --threads 2 --block-size 8K
expect "manifest pack: --threads 1 and 2 give identical files" cmp -s "$M/out/t1.bpk" "$M/out/t2.bpk"

# Sharded with keys: ids and keys across shards.
run create "$T/sh.d" "$IF" --labels dirname --shard-size 20K
if [[ $RC -eq 0 ]]; then
	nparts=$(find "$T/sh.d" -name 'part-*.bpk' | wc -l)
	expect "--labels --shard-size 20K: $nparts shards (> 1)" test "$nparts" -gt 1
	check "sharded class folders" "$T/if.py" "$IF" "$T/sh.d"
else
	bad "sharded --labels: exit $RC $(err)"
fi

# ---- 5. verify covers fields and keys ---------------------------------------------

echo "# 5. verify: a flipped byte in any section is caught"
cat >"$T/flip.py" <<'PY'
pack, d = sys.argv[2], sys.argv[3]
b = open(pack, "rb").read()
idx_off, idx_size, nblocks, nsamples = struct.unpack_from("<QQQQ", b, len(b) - 80)
k = (idx_size - 56 * nblocks - 16 * nsamples) // 32
kinds = set()
missed = []
tried = 0
for i in range(k):
    kind, field, off, size, h = struct.unpack_from("<IIQQQ", b, idx_off + 56 * nblocks + 16 * nsamples + 32 * i)
    kinds.add(kind)
    for o in sorted({off, off + size // 2, off + size - 1}):
        c = bytearray(b)
        c[o] ^= 0x55
        path = os.path.join(d, "flip-%d.bpk" % o)
        open(path, "wb").write(c)
        r = subprocess.run([BIN, "verify", path], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        tried += 1
        if r.returncode != 1 or path.encode() not in r.stderr:
            missed.append("section %d (kind %d) byte %d: exit %d %r" % (i, kind, o, r.returncode, r.stderr[:200]))
        os.unlink(path)
if missed:
    fail("; ".join(missed[:5]))
if not {1, 2, 3, 5, 6, 7, 8} <= kinds:
    fail("section kinds %r: expected schema, column, str and the four key sections" % sorted(kinds))
print("%d flips over %d sections (kinds %s): verify exits 1 naming the file" % (tried, k, ",".join(map(str, sorted(kinds)))))
PY
mkdir -p "$T/flips"
check "a manifest pack's sections" "$T/flip.py" "$M/out/g-csv.bpk" "$T/flips"

echo "$PASS passed, $FAILED failed"
[[ $FAILED -eq 0 ]]
