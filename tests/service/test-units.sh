#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The systemd units pass `systemd-analyze verify`, and `meson install`
# puts every file where the README says. Exit 77 (skip) without
# systemd-analyze, for the unit part only.
#
#   test-units.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() { echo "ok - $*"; pass=$((pass + 1)); }
bad() { echo "FAIL - $*"; fail=$((fail + 1)); }

# 1. meson install into a staging directory: every file lands.
if DESTDIR="$tmp/root" meson install -C "$build" --no-rebuild >"$tmp/install.log" 2>&1; then
	ok "meson install"
else
	bad "meson install: $(tail -3 "$tmp/install.log")"
fi
prefix=$(meson introspect "$build" --buildoptions |
	/usr/bin/python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"))')
for want in sbin/batchd bin/batchd-pack bin/batchctl include/batchclient.h \
	lib/x86_64-linux-gnu/pkgconfig/batchclient.pc etc/batchd/batchd.conf; do
	found=$(find "$tmp/root" -path "*/$want" -print -quit 2>/dev/null || true)
	[ -n "$found" ] && ok "installed $want" || bad "not installed: $want"
done
for f in batchd.service batchd.socket; do
	[ -n "$(find "$tmp/root" -path "*systemd/system/$f" -print -quit)" ] && ok "installed unit $f" ||
		bad "not installed: unit $f"
done
[ -n "$(find "$tmp/root" -path '*sysusers.d/batchd.conf' -print -quit)" ] && ok "sysusers snippet" ||
	bad "no sysusers snippet"
[ -n "$(find "$tmp/root" -path '*tmpfiles.d/batchd.conf' -print -quit)" ] && ok "tmpfiles snippet" ||
	bad "no tmpfiles snippet"
lib=$(find "$tmp/root" -name 'libbatchclient.so.0' -print -quit)
if [ -n "$lib" ]; then
	# Only bc_* may be exported.
	others=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^bc_' | grep -v '^BATCHCLIENT_0$' || true)
	[ -z "$others" ] && ok "libbatchclient exports only bc_*" || bad "exported: $others"
else
	bad "no libbatchclient.so.0"
fi
grep -q "ExecStart=$prefix/sbin/batchd" "$(find "$tmp/root" -name batchd.service -print -quit)" &&
	ok "unit runs the installed batchd" || bad "unit ExecStart does not point into the prefix"

# 2. systemd-analyze verify on the units (the test copy runs the build tree's batchd).
if ! command -v systemd-analyze >/dev/null; then
	echo "$pass passed, $fail failed"
	echo "skip: systemd-analyze is not installed"
	[ "$fail" -eq 0 ] && exit 77 || exit 1
fi
mkdir "$tmp/units"
cp "$build/conf/batchd-test.service" "$tmp/units/batchd.service"
cp "$src/conf/batchd.socket" "$tmp/units/batchd.socket"
if out=$(cd "$tmp/units" && SYSTEMD_LOG_LEVEL=notice systemd-analyze verify batchd.service batchd.socket 2>&1) &&
	! grep -qiE "unknown|invalid|failed|error" <<<"$out"; then
	ok "systemd-analyze verify batchd.service batchd.socket"
else
	bad "systemd-analyze verify: $out"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
