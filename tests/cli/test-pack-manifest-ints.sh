#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# test-pack-manifest-ints.sh - integers in a manifest are stored exactly
# or refused, never rounded through float64 (issue 34, item 15).
#
#   bash tests/cli/test-pack-manifest-ints.sh PATH/TO/batchd-pack
#
# A column of integers with one beyond int64 used to become float64,
# rounding its other values (9007199254740993 stored as ...992). Now:
# values within int64 read back exactly (`ls`; `info` types them int64); a
# column with 2^63 or a longer integer is refused naming the file, line
# and column and pointing at --column NAME:str, which then keeps the
# digits as text; JSONL integers beyond what json-c carries (int64 and
# uint64), which json-c would saturate without a word, are refused
# whatever --column says, pointing at writing them as JSON strings.
#
# Each check prints "ok - ..." or "FAIL - ..."; the last line is
# "N passed, M failed". Exit status 0 when nothing failed, 1 otherwise.
# shellcheck disable=SC2016 # expect ... eval '...' expands when the check runs, on purpose
set -euo pipefail
export LC_ALL=C

# shellcheck source=hostile-lib.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/hostile-lib.sh"
hostile_init "PATH/TO/batchd-pack" 1 "$@"

M=$T/m
mkdir -p "$M/files" "$T/dst"
for f in a b c d; do
	printf '%s\n' "$f" >"$M/files/$f"
done

# values PACK COLUMN: COLUMN's values in sample order, as `ls` prints them, space-separated.
values() {
	"$BIN" ls "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | tr '\n' ' '
}
# refused DESC NEEDLE ARGS...: create $T/dst/x.bpk ARGS is refused naming NEEDLE.
refused() {
	create_refused "$1" "$T/dst/x.bpk" "${@:2}"
}
# as_text DESC OUT WANT ARGS...: create OUT ARGS succeeds and column id reads back WANT.
as_text() {
	# shellcheck disable=SC2034 # want is read by the eval
	local desc=$1 out=$2 want=$3
	shift 3
	run create "$out" "$@"
	expect "$desc ($(values "$out" id 2>/dev/null))" \
		eval '[[ $RC -eq 0 && $(values "$out" id) == "$want" ]]'
}

# ---- within int64: exact ---------------------------------------------------------------

echo "# integers within int64"
EXACT="9007199254740993 9223372036854775807 -9223372036854775808 -9007199254740993 "
printf 'path,id,score\nfiles/a,9007199254740993,1.5\nfiles/b,9223372036854775807,2\nfiles/c,-9223372036854775808,3\nfiles/d,-9007199254740993,4\n' >"$M/ok.csv"
printf '{"path": "files/a", "id": 9007199254740993}\n{"path": "files/b", "id": 9223372036854775807}\n{"path": "files/c", "id": -9223372036854775808}\n{"path": "files/d", "id": -9007199254740993}\n' >"$M/ok.jsonl"
for fmt in csv jsonl; do
	run create "$T/dst/ok-$fmt.bpk" --manifest "$M/ok.$fmt"
	if [[ $RC -ne 0 ]]; then
		bad "$fmt: int64 extremes and 2^53+1: exit $RC $(err)"
		continue
	fi
	got=$(values "$T/dst/ok-$fmt.bpk" id)
	expect "$fmt: 2^53+1, int64's max and min read back exactly ($got)" test "$got" = "$EXACT"
	# info's min and max go through a double in the reader (bp_dataset_field_range), so
	# only the type is asked of it; `ls` prints the stored int64 itself.
	"$BIN" info "$T/dst/ok-$fmt.bpk" --json >"$T/info.json"
	expect "$fmt: info types id int64, not float64" python3 - "$T/info.json" <<'PY'
import json, sys
f = [f for f in json.load(open(sys.argv[1]))["fields"] if f["name"] == "id"][0]
sys.exit(f["type"] != "int64")
PY
done
expect "csv: a column of numbers that are not all integers is still float64 ($(values "$T/dst/ok-csv.bpk" score))" \
	eval '[[ $(values "$T/dst/ok-csv.bpk" score) == "1.5 2 3 4 " ]] && "$BIN" info "$T/dst/ok-csv.bpk" | grep -q "score.*float64"'

# ---- beyond int64: refused, or text when asked ---------------------------------------

echo "# integers beyond int64"
printf 'path,id\nfiles/a,9007199254740993\nfiles/b,9223372036854775808\n' >"$M/two63.csv"
refused "csv: 2^63 beside 2^53+1" "$M/two63.csv:3: column id: '9223372036854775808' does not fit int64" \
	--manifest "$M/two63.csv"
expect "... saying how to keep it (--column id:str), never as float64" \
	eval 'err_has "never rounded to a float" && err_has "--column id:str"'
printf 'path,id\nfiles/a,9007199254740993\nfiles/b,-123456789012345678901234567890\nfiles/c,7\n' >"$M/long.csv"
refused "csv: a 30-digit negative integer" "$M/long.csv:3: column id: '-123456789012345678901234567890' does not fit int64" \
	--manifest "$M/long.csv"
as_text "csv: --column id:str keeps both as text, digit for digit" "$T/dst/str.bpk" \
	"9007199254740993 9223372036854775808 " --manifest "$M/two63.csv" --column id:str
printf 'path,id\n"files/a",  12\n' >"$M/blank.csv"
run create "$T/dst/blank.bpk" --manifest "$M/blank.csv"
expect "csv: an integer with blanks is not an integer: str, as before ($(values "$T/dst/blank.bpk" id 2>/dev/null))" \
	eval '[[ $RC -eq 0 ]] && "$BIN" info "$T/dst/blank.bpk" | grep -q "id.*str"'

printf '{"path": "files/a", "id": 9007199254740993}\n{"path": "files/b", "id": 9223372036854775808}\n' >"$M/two63.jsonl"
refused "jsonl: 2^63 (a uint64 to json-c)" "$M/two63.jsonl:2: column id: '9223372036854775808' does not fit int64" \
	--manifest "$M/two63.jsonl"
as_text "jsonl: --column id:str keeps 2^63 exactly" "$T/dst/str2.bpk" \
	"9007199254740993 9223372036854775808 " --manifest "$M/two63.jsonl" --column id:str
printf '{"path": "files/a", "id": 9007199254740993}\n{"path": "files/b", "id": 99999999999999999999}\n' >"$M/huge.jsonl"
refused "jsonl: beyond uint64 (json-c would saturate it)" \
	"$M/huge.jsonl:2: member 'id': the integer 99999999999999999999 is beyond" --manifest "$M/huge.jsonl"
expect "... saying to write it as a JSON string" err_has '"99999999999999999999"'
refused "jsonl: ... and with --column id:str too (the digits are already lost to json-c)" \
	"member 'id': the integer 99999999999999999999" --manifest "$M/huge.jsonl" --column id:str
printf '{"path": "files/a", "id": -9223372036854775809, "note": "-99999999999999999999"}\n' >"$M/neg.jsonl"
refused "jsonl: one below int64's min (json-c would make it the min)" \
	"$M/neg.jsonl:1: member 'id': the integer -9223372036854775809" --manifest "$M/neg.jsonl"
printf '{"path": "files/a", "id": "99999999999999999999", "note": "-99999999999999999999 in a string"}\n' >"$M/asstr.jsonl"
as_text "jsonl: written as a JSON string, kept exactly; digits inside strings are not numbers" \
	"$T/dst/asstr.bpk" "99999999999999999999 " --manifest "$M/asstr.jsonl" --column id:str

echo "$PASS passed, $FAILED failed"
[[ $FAILED -eq 0 ]]
