#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `meson install` puts every file where docs/operations.md says: the exact paths
# `meson introspect --installed` reports for this build, and for two fresh
# configurations of the source tree (--prefix=/usr, where systemd looks,
# and --prefix=/opt/batchd-test, which must keep everything inside it,
# with systemd.pc and without).
# The systemd units pass `systemd-analyze verify`, with and without the
# metrics and remote-dataset drop-ins, and `systemd-analyze security` rates
# them 3.0 or better.
# Exit 77 (skip) without systemd-analyze, for the unit part only.
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

# 1. meson install into a staging directory: every file lands. (It exists
# even when the install fails, so that the checks below report each file.)
mkdir "$tmp/root"
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
# The systemd files, at the exact paths systemd searches under the prefix.
for want in lib/systemd/system/batchd.service lib/systemd/system/batchd.socket \
	lib/sysusers.d/batchd.conf lib/tmpfiles.d/batchd.conf share/batchd/batchd-metrics.conf \
	share/batchd/batchd-remote.conf share/batchd/slurm/train.sbatch share/batchd/batchd-alerts.yml share/batchd/batchd-grafana.json; do
	[ -f "$tmp/root$prefix/$want" ] && ok "installed $prefix/$want" ||
		bad "not installed: $prefix/$want (found: $(find "$tmp/root" -name "${want##*/}" | sed "s|^$tmp/root||"))"
done
# The Slurm scripts run by path (slurm.conf's Prolog=, sbatch): executable.
for f in batchd-node.sh batchd-prolog.sh batchd-epilog.sh train.sbatch; do
	[ -x "$tmp/root$prefix/share/batchd/slurm/$f" ] && ok "installed share/batchd/slurm/$f, executable" ||
		bad "share/batchd/slurm/$f not installed or not executable"
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
	# Only bc_* may be exported, and the version nodes of batchclient.map.
	others=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^bc_' |
		grep -Ev '^BATCHCLIENT_0(\.[0-9]+)?$' || true)
	[ -z "$others" ] && ok "libbatchclient exports only bc_*" || bad "exported: $others"
else
	bad "no libbatchclient.so.0"
fi
grep -qs "ExecStart=$prefix/sbin/batchd" "$(find "$tmp/root" -name batchd.service -print -quit)" &&
	ok "unit runs the installed batchd" || bad "unit ExecStart does not point into the prefix"

# 2. The exact install path of each file, from the introspection of a
# build directory: the prefix's sbin/, systemd's own layout under the
# prefix, sysconfdir and datadir as the directory was configured.
layout() {
	local dir=$1 line
	while IFS= read -r line; do
		case $line in
		ok\ *) ok "${line#ok }" ;;
		*) bad "$line" ;;
		esac
	done < <(meson introspect "$dir" --installed --buildoptions | /usr/bin/python3 -c '
import json, os, sys
intro = json.load(sys.stdin)
opt = {o["name"]: o["value"] for o in intro["buildoptions"]}
prefix = opt["prefix"]
under = lambda d: d if d.startswith("/") else os.path.join(prefix, d)
want = {
    "daemon/batchd": os.path.join(under(opt["sbindir"]), "batchd"),
    "conf/batchd.service": prefix + "/lib/systemd/system/batchd.service",
    "conf/batchd.socket": prefix + "/lib/systemd/system/batchd.socket",
    "conf/batchd.sysusers": prefix + "/lib/sysusers.d/batchd.conf",
    "conf/batchd.tmpfiles": prefix + "/lib/tmpfiles.d/batchd.conf",
    "conf/batchd.conf": os.path.join(under(opt["sysconfdir"]), "batchd", "batchd.conf"),
    "conf/batchd-metrics.conf": os.path.join(under(opt["datadir"]), "batchd", "batchd-metrics.conf"),
    "conf/batchd-remote.conf": os.path.join(under(opt["datadir"]), "batchd", "batchd-remote.conf"),
    **{"conf/slurm/" + f: os.path.join(under(opt["datadir"]), "batchd", "slurm", f)
       for f in ("batchd-node.sh", "batchd-prolog.sh", "batchd-epilog.sh", "train.sbatch")},
    "conf/prometheus/batchd-alerts.yml": os.path.join(under(opt["datadir"]), "batchd", "batchd-alerts.yml"),
    "conf/grafana/batchd.json": os.path.join(under(opt["datadir"]), "batchd", "batchd-grafana.json"),
}
for name, path in want.items():
    got = [v for k, v in intro["installed"].items() if k.endswith("/" + name)]
    if got == [path]:
        print(f"ok prefix {prefix}: {name} -> {path}")
    else:
        where = ", ".join(got) or "nowhere"
        print(f"prefix {prefix}: {name} installs to {where}, not {path}")
')
}
layout "$build"
# Configure only (introspection needs no compiling), without the tests and
# CUDA probes that conf/ does not depend on, to keep this quick.
for p in /usr /opt/batchd-test; do
	dir="$tmp/setup${p//\//-}"
	if meson setup --prefix="$p" -Dtests=false -Dcuda=disabled "$src" "$dir" >"$dir.log" 2>&1; then
		layout "$dir"
	else
		bad "meson setup --prefix=$p: $(tail -3 "$dir.log")"
	fi
done
# Without systemd.pc (a pkg-config that knows every package but systemd):
# systemd's layout under the prefix all the same.
printf '#!/bin/sh\nfor a; do [ "$a" = systemd ] && exit 1; done\nexec pkg-config "$@"\n' >"$tmp/pkg-config"
chmod +x "$tmp/pkg-config"
dir="$tmp/setup-no-systemd-pc"
if PKG_CONFIG="$tmp/pkg-config" meson setup --prefix=/opt/batchd-test -Dtests=false -Dcuda=disabled \
	"$src" "$dir" >"$dir.log" 2>&1; then
	grep -q 'Run-time dependency systemd found: NO' "$dir.log" &&
		ok "configured without systemd.pc" || bad "systemd.pc was found through the wrapper"
	layout "$dir"
else
	bad "meson setup without systemd.pc: $(tail -3 "$dir.log")"
fi
# What an operator's `systemctl enable batchd` finds: spelled out for /usr.
usr=$(meson introspect "$tmp/setup-usr" --installed 2>/dev/null || true)
for path in /usr/lib/systemd/system/batchd.service /usr/lib/systemd/system/batchd.socket \
	/usr/lib/sysusers.d/batchd.conf /usr/lib/tmpfiles.d/batchd.conf /usr/sbin/batchd \
	/etc/batchd/batchd.conf /usr/share/batchd/batchd-metrics.conf /usr/share/batchd/batchd-remote.conf \
	/usr/share/batchd/slurm/batchd-prolog.sh /usr/share/batchd/slurm/train.sbatch \
	/usr/share/batchd/batchd-alerts.yml /usr/share/batchd/batchd-grafana.json; do
	grep -qF "\"$path\"" <<<"$usr" && ok "--prefix=/usr installs $path" ||
		bad "--prefix=/usr does not install $path"
done
# 3. systemd-analyze verify on the units (the test copy runs the build tree's batchd).
if ! command -v systemd-analyze >/dev/null; then
	echo "$pass passed, $fail failed"
	echo "skip: systemd-analyze is not installed"
	[ "$fail" -eq 0 ] && exit 77 || exit 1
fi
mkdir "$tmp/units"
cp "$build/conf/batchd-test.service" "$tmp/units/batchd.service"
cp "$src/conf/batchd.socket" "$tmp/units/batchd.socket"
verify() {
	local dir=$1 what=$2 out
	if out=$(cd "$dir" && SYSTEMD_LOG_LEVEL=notice systemd-analyze verify batchd.service batchd.socket 2>&1) &&
		! grep -qiE "unknown|invalid|failed|error" <<<"$out"; then
		ok "systemd-analyze verify $what"
	else
		bad "systemd-analyze verify $what: $out"
	fi
}
verify "$tmp/units" "batchd.service batchd.socket"
# The unit as docs/operations.md has the operator extend it for [metrics] listen.
mkdir -p "$tmp/units-metrics/batchd.service.d"
cp "$tmp/units/batchd.service" "$tmp/units/batchd.socket" "$tmp/units-metrics/"
cp "$src/conf/batchd-metrics.conf" "$tmp/units-metrics/batchd.service.d/metrics.conf"
verify "$tmp/units-metrics" "batchd.service batchd.socket with batchd-metrics.conf"
# For remote datasets: alone, and with the metrics drop-in beside it.
mkdir -p "$tmp/units-remote/batchd.service.d" "$tmp/units-both/batchd.service.d"
cp "$tmp/units/batchd.service" "$tmp/units/batchd.socket" "$tmp/units-remote/"
cp "$tmp/units/batchd.service" "$tmp/units/batchd.socket" "$tmp/units-both/"
cp "$src/conf/batchd-remote.conf" "$tmp/units-remote/batchd.service.d/remote.conf"
cp "$src/conf/batchd-remote.conf" "$tmp/units-both/batchd.service.d/remote.conf"
cp "$src/conf/batchd-metrics.conf" "$tmp/units-both/batchd.service.d/metrics.conf"
verify "$tmp/units-remote" "batchd.service batchd.socket with batchd-remote.conf"
verify "$tmp/units-both" "batchd.service batchd.socket with batchd-remote.conf and batchd-metrics.conf"

# 4. systemd's own rating of the sandbox, 0 (safe) .. 10 (exposed): at most
# 3.0 with and without the metrics and remote-dataset drop-ins. Where systemd-analyze is too
# old for --offline, this part is skipped.
exposure() {
	(cd "$1" && systemd-analyze security --offline=true --no-pager ./batchd.service 2>&1) |
		sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\) .*/\1/p'
}
if systemd-analyze security --help 2>/dev/null | grep -q -- --offline; then
	declare -A levels
	for dir in units units-metrics units-remote units-both; do
		level=$(exposure "$tmp/$dir")
		levels[$dir]=$level
		if [ -z "$level" ]; then
			bad "$dir: no \"Overall exposure level\" from systemd-analyze security --offline=true"
		elif awk -v l="$level" 'BEGIN { exit !(l <= 3.0) }'; then
			ok "$dir: systemd-analyze security exposure $level (at most 3.0)"
		else
			bad "$dir: systemd-analyze security exposure $level, above 3.0:
$(cd "$tmp/$dir" && systemd-analyze security --offline=true --no-pager ./batchd.service | grep '✗')"
		fi
	done
	# The drop-in was read: it opens the network, so the rating rises.
	awk -v a="${levels[units]:-0}" -v b="${levels[units-metrics]:-0}" 'BEGIN { exit !(b > a) }' &&
		ok "batchd-metrics.conf applies (exposure ${levels[units]} -> ${levels[units-metrics]})" ||
		bad "batchd-metrics.conf changes nothing systemd-analyze security sees"
	awk -v a="${levels[units]:-0}" -v b="${levels[units-remote]:-0}" 'BEGIN { exit !(b > a) }' &&
		ok "batchd-remote.conf applies (exposure ${levels[units]} -> ${levels[units-remote]})" ||
		bad "batchd-remote.conf changes nothing systemd-analyze security sees"
	# What it opens, check by check: the host's network, IPv4 and IPv6
	# sockets, addresses beyond localhost; and what it leaves shut.
	sec=$(cd "$tmp/units-remote" && systemd-analyze security --offline=true --no-pager ./batchd.service 2>&1)
	for want in '✗ PrivateNetwork=' '✗ RestrictAddressFamilies=~AF_(INET|INET6)' '✗ IPAddressDeny=' \
		'✓ RestrictAddressFamilies=~AF_NETLINK' '✓ RestrictAddressFamilies=~AF_PACKET' \
		'✓ ProtectSystem=' '✓ CapabilityBoundingSet=~CAP_NET_ADMIN' '✓ SystemCallFilter=~@mount'; do
		grep -qF "$want" <<<"$sec" && ok "batchd-remote.conf: $want" ||
			bad "batchd-remote.conf: systemd-analyze security does not say $want"
	done
else
	echo "skip: systemd-analyze security has no --offline here"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
