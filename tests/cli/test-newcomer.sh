#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A newcomer's first hour, from an install: the build installed to a
# private prefix (meson install --destdir, then moved: nothing may depend
# on where it was built or on the environment), every program's --help
# from a clean environment, a dataset packed with the installed
# batchd-pack, a batchd started by hand as a user (not root) on its
# default socket and a consume that finds it with no flag, and the
# refusals a newcomer meets, each message asserted: what was wrong and
# what to change, the usage error still on the screen.
#
#   test-newcomer.sh MESON BUILD_DIR
set -euo pipefail
meson=$1 build=$2
tmp=$(mktemp -d /tmp/batchd-newcomer.XXXXXX)
daemon=""
cleanup() {
	[[ -n $daemon ]] && kill -KILL $daemon 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
pass=0 fail=0
ok() { echo "ok - $*"; pass=$((pass + 1)); }
bad() { echo "FAIL - $*"; fail=$((fail + 1)); }

"$meson" install -C "$build" --destdir "$tmp/stage" --no-rebuild --quiet >/dev/null
# Moved away from where it was installed: a relocated prefix.
prefix=$(dirname "$(find "$tmp/stage" -path '*/bin/batchctl' -print -quit)")/..
mv "$(realpath "$prefix")" "$tmp/opt"
prefix=$tmp/opt
chmod 755 "$tmp"

clean() { env -i PATH=/usr/bin:/bin "$@"; }
for prog in sbin/batchd bin/batchd-pack bin/batchctl bin/batchd-bench; do
	rc=0
	out=$(clean "$prefix/$prog" --help 2>&1) || rc=$?
	if [[ $rc -eq 0 && $out == *sage* ]]; then
		ok "$prog --help from a clean environment"
	else
		bad "$prog --help: exit $rc: $(head -n 2 <<<"$out")"
	fi
done

# batchctl reaches CUDA through the runtime loader (a --device run only): it
# starts where no libcudart is found.
if command -v readelf >/dev/null; then
	! readelf -d "$prefix/bin/batchctl" | grep -q 'NEEDED.*libcudart' &&
		ok "batchctl does not link the CUDA runtime" ||
		bad "batchctl links libcudart: $(readelf -d "$prefix/bin/batchctl" | grep NEEDED)"
fi

mkdir -p "$tmp/data"
head -c 65536 /dev/urandom >"$tmp/raw"
clean "$prefix/bin/batchd-pack" create "$tmp/data/d.bpk" --records 256 "$tmp/raw" >/dev/null &&
	ok "the installed batchd-pack packs" || bad "the installed batchd-pack failed"
chmod -R a+rX "$tmp/data"

# A user, not root: nobody when the test runs as root.
as_user=()
if [[ $(id -u) -eq 0 ]]; then
	as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
fi
mkdir -p "$tmp/xdg"
[[ $(id -u) -eq 0 ]] && chown 65534:65534 "$tmp/xdg"
chmod 700 "$tmp/xdg"
as_user+=(env -i PATH=/usr/bin:/bin XDG_RUNTIME_DIR="$tmp/xdg")
user() { "${as_user[@]}" "$@"; }
# In the background, batchd itself in $daemon (a function would leave a subshell there).
user_bg() { "${as_user[@]}" "$@" & daemon=$!; }

user_bg "$prefix/sbin/batchd" --no-config --root "$tmp/data" >"$tmp/user.log" 2>&1
for _ in $(seq 200); do [[ -S $tmp/xdg/batchd.sock ]] && break; sleep 0.05; done
[[ -S $tmp/xdg/batchd.sock ]] && ok "batchd started by hand as a user listens on \$XDG_RUNTIME_DIR/batchd.sock" ||
	bad "no socket in \$XDG_RUNTIME_DIR: $(tail -n 3 "$tmp/user.log")"
if ! grep -q "BATCHD_SOCKET=" "$tmp/user.log"; then
	ok "on the default socket, no word about BATCHD_SOCKET"
else
	bad "the default socket was said to need BATCHD_SOCKET: $(grep BATCHD_SOCKET "$tmp/user.log")"
fi
rc=0
out=$(user "$prefix/bin/batchctl" consume d.bpk --batch-size 16 2>&1) || rc=$?
[[ $rc -eq 0 && $out == *"256 samples"* ]] && ok "a consume with no socket flag finds it" ||
	bad "consume on the default socket: exit $rc: $out"

# Stopped with SIGTERM mid-run, consume still says what it measured.
"${as_user[@]}" "$prefix/bin/batchctl" consume d.bpk --batch-size 16 --epochs 100000 --step-ms 5 \
	>"$tmp/term.out" 2>&1 &
consumer=$!
sleep 1
kill -TERM $consumer
rc=0
wait $consumer || rc=$?
if [[ $rc -eq 143 ]] && grep -q "stopped by SIGTERM after [1-9][0-9]* batches" "$tmp/term.out" &&
	grep -q "batches, [0-9]* samples" "$tmp/term.out"; then
	ok "consume stopped by SIGTERM prints its summary"
else
	bad "consume on SIGTERM: exit $rc: $(cat "$tmp/term.out")"
fi

# Is my GPU starving? A trainer with a 20 ms step is not; one with none is.
doctor_with() {
	"${as_user[@]}" "$prefix/bin/batchctl" consume d.bpk --batch-size 16 --epochs 100000 "$@" \
		>/dev/null 2>&1 &
	consumer=$!
	sleep 0.5
	user "$prefix/bin/batchctl" doctor --seconds 1 >"$tmp/doctor.out" 2>&1 || true
	kill -TERM $consumer
	wait $consumer || true
}
doctor_with --step-ms 20
if grep -q "^waiting on data:  no: the trainer waited" "$tmp/doctor.out" &&
	grep -q "^what to change:   nothing on batchd's side" "$tmp/doctor.out" &&
	grep -q "^where time goes:  trainer" "$tmp/doctor.out"; then
	ok "doctor: a trainer with a step is not waiting on data"
else
	bad "doctor, trainer-bound: $(cat "$tmp/doctor.out")"
fi
doctor_with
if grep -q "^waiting on data:  YES: the trainer waited" "$tmp/doctor.out" &&
	grep -q "^what it costs:" "$tmp/doctor.out" && grep -q "^what to change:" "$tmp/doctor.out"; then
	ok "doctor: a trainer with no step is waiting, and is told what to change"
else
	bad "doctor, data-bound: $(cat "$tmp/doctor.out")"
fi

# As root, batchd started by hand makes /run/batchd, its own directory, where
# a client looks with no flag: in a mount namespace with a /run of its own.
if [[ $(id -u) -eq 0 ]] && unshare --mount true 2>/dev/null; then
	rc=0
	out=$(unshare --mount env -i PATH=/usr/bin:/bin PREFIX="$prefix" DATA="$tmp/data" bash -c '
		mount -t tmpfs tmpfs /run || exit 3
		"$PREFIX/sbin/batchd" --no-config --root "$DATA" 2>/run/log &
		for _ in $(seq 200); do [[ -S /run/batchd/batchd.sock ]] && break; sleep 0.05; done
		"$PREFIX/bin/batchctl" consume d.bpk --batch-size 16 || echo "consume failed: $(cat /run/log)"
		stat -c "%a %U" /run/batchd
		kill -TERM $! && wait $!' 2>&1) || rc=$?
	if [[ $rc -eq 0 && $out == *"256 samples"* && $out == *"755 root"* ]]; then
		ok "root batchd by hand: /run/batchd made, the default socket found"
	else
		bad "root batchd by hand: exit $rc: $out"
	fi
else
	echo "ok - # SKIP root batchd by hand (not root, or no mount namespace here)"
fi

# Each refusal: exit status, what it says, and nothing scrolled over it.
expect_refusal() {
	local desc=$1 want_rc=$2 want=$3 rc=0 out
	shift 3
	out=$("$@" 2>&1) || rc=$?
	if [[ $rc -eq $want_rc && $out == *"$want"* ]]; then
		ok "$desc"
	else
		bad "$desc: exit $rc (want $want_rc), said: $out"
	fi
	LAST=$out
}
ctl() { user "$prefix/bin/batchctl" "$@"; }
expect_refusal "doctor with no session open says to start the trainer" 1 \
	"no session of yours is open: start the trainer" ctl doctor --seconds 0.5
expect_refusal "doctor of a session id that is no number" 2 "'x1' is not a session id" \
	ctl doctor x1
expect_refusal "--world 0 says what a world is" 2 \
	"consume: --world 0: give the number of ranks (processes) sharing the epoch, 1 or more" \
	ctl consume d.bpk --batch-size 4 --world 0
[[ $(wc -l <<<"$LAST") -eq 2 && $LAST == *"Try 'batchctl --help'"* ]] &&
	ok "a usage error is two lines, the error and where the usage is" ||
	bad "a usage error printed $(wc -l <<<"$LAST") lines: $LAST"
expect_refusal "--rank beyond --world names both" 2 "--rank 3 is not below --world 2: ranks are 0 .. 1" \
	ctl consume d.bpk --batch-size 4 --world 2 --rank 3
expect_refusal "a misspelt dataset: the roots searched and the nearest name" 1 \
	"d.bkp: no such dataset under the roots $tmp/data; nearest: d.bpk" \
	ctl consume d.bkp --batch-size 4
[[ $LAST != *"d.bkp: d.bkp"* ]] && ok "the dataset is named once" || bad "named twice: $LAST"
expect_refusal "keys of a --records pack: why it has none, what to do" 1 \
	"stores no keys (a pack of --records has none, and one made with --no-keys leaves them out): open it without keys" \
	ctl consume d.bpk --batch-size 4 --keys
expect_refusal "batchd-pack: a usage error in two lines" 2 "Try 'batchd-pack --help'" \
	clean "$prefix/bin/batchd-pack" create "$tmp/x.bpk" --level 99 "$tmp/raw"
[[ $(wc -l <<<"$LAST") -eq 2 ]] && ok "batchd-pack's usage error is two lines" ||
	bad "batchd-pack printed $(wc -l <<<"$LAST") lines: $LAST"
kill -TERM $daemon
wait $daemon && ok "batchd stopped cleanly" || bad "batchd exit status $?"
daemon=""

# A socket in a directory that does not exist: said, with the flag to use.
expect_refusal "a socket whose directory is missing names --socket" 1 \
	"its directory does not exist: create it, or give another socket with --socket PATH" \
	user "$prefix/sbin/batchd" --no-config --root "$tmp/data" --socket "$tmp/none/b.sock"
# A socket clients do not look in: batchd says how they will find it.
user_bg "$prefix/sbin/batchd" --no-config --root "$tmp/data" --socket "$tmp/xdg/other.sock" \
	>"$tmp/other.log" 2>&1
for _ in $(seq 200); do [[ -S $tmp/xdg/other.sock ]] && break; sleep 0.05; done
grep -q "give them BATCHD_SOCKET=$tmp/xdg/other.sock (or batchctl -s $tmp/xdg/other.sock)" "$tmp/other.log" &&
	ok "a socket off the default path: batchd says BATCHD_SOCKET" ||
	bad "no BATCHD_SOCKET hint: $(tail -n 3 "$tmp/other.log")"
kill -TERM $daemon
wait $daemon || true
daemon=""

echo "# $pass passed, $fail failed"
[[ $fail -eq 0 ]]
