#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bundle.sh - everything tests/gpu/run.sh needs on a GPU machine that has no
# network, no compiler and none of batchd's libraries: a release build's
# binaries, the test programs of the gpu, daemon and protocol suites, and
# every shared library they load beyond the allow-list below, in one
# directory that runs wherever it is copied.
#
#   tests/gpu/bundle.sh [--build DIR] OUTDIR
#
# Without --build it configures and builds build-bundle/ (release, CUDA
# required, no fault injection); with it, it bundles an existing build
# directory as it is (the test suite bundles its own build that way).
#
# OUTDIR gets bin/ (batchd, batchd-pack, batchctl, batchd-bench, gpu-json),
# tests/ (the test programs), lib/ (the libraries), data/ (source-tree
# files the tests take as arguments: the protocol fuzz corpus), tests.tsv (each test's
# name, timeout, program, arguments and environment, from `meson introspect
# --tests`, build paths rewritten into the bundle), run.sh, README.md and
# VERSION. Every ELF file gets RPATH $ORIGIN/../lib (programs) or $ORIGIN
# (libraries), so nothing depends on LD_LIBRARY_PATH or ld.so.conf there.
# Not bundled, because the machine provides them and a copy from here would
# be wrong there: glibc (libc, libm, libdl, libpthread, librt, the dynamic
# loader), the C++ runtime (libstdc++, libgcc_s) and the NVIDIA driver
# (libcuda.so.1, libnvidia-ml.so.1). The CUDA runtime (libcudart.so.13) is
# bundled: it is redistributable, small, and its location on the GPU
# machine need not be in the loader's path.
set -euo pipefail
export LC_ALL=C

usage() { echo "usage: $0 [--build DIR] OUTDIR" >&2; exit 2; }
build=""
if [[ ${1:-} == --build ]]; then
	[[ $# -ge 2 ]] || usage
	build=$2
	shift 2
fi
[[ $# -eq 1 ]] || usage
src=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)

for tool in patchelf ldd python3; do
	command -v "$tool" >/dev/null || {
		echo "bundle.sh: $tool is missing (tools/deps.sh installs patchelf)" >&2
		exit 1
	}
done

if [[ -z $build ]]; then
	build=$src/build-bundle
	opts=(-Dcuda=enabled -Dfault_injection=false --buildtype=release)
	if [[ -f $build/build.ninja ]]; then
		meson setup --reconfigure "$build" "${opts[@]}" >/dev/null
	else
		meson setup "$build" "$src" "${opts[@]}" >/dev/null
	fi
	ninja -C "$build" >/dev/null
fi
build=$(cd "$build" && pwd)
[[ -x $build/daemon/batchd && -x $build/tests/test-gpu ]] || {
	echo "bundle.sh: $build has no batchd or no tests/test-gpu (a build with CUDA is needed)" >&2
	exit 1
}

rm -rf "$out/bin" "$out/tests" "$out/lib"
mkdir -p "$out/bin" "$out/tests" "$out/lib"
cp "$build/daemon/batchd" "$build/tools/batchd-pack" "$build/tools/batchctl" \
	"$build/tools/batchd-bench" "$build/tests/gpu/gpu-json" "$out/bin/"
cp "$build/client/libbatchclient.so.0" "$out/lib/"

# The suites run.sh runs: their programs and how meson runs them.
meson introspect "$build" --tests >"$out/.tests.json"
rm -rf "$out/data"
BUNDLE_SRC=$src python3 - "$build" "$out" "$out/.tests.json" >"$out/.programs" <<'PYEOF'
import json, os, shutil, sys
build, out, tests = sys.argv[1:4]
src = os.environ["BUNDLE_SRC"]
bins = {os.path.join(build, p): "bin/" + os.path.basename(p) for p in
        ("daemon/batchd", "tools/batchd-pack", "tools/batchctl", "tools/batchd-bench")}
rows = []
for t in json.load(open(tests)):
    suites = {x.split(":")[-1] for x in t["suite"]}    # "batchd:daemon"
    if not suites & {"gpu", "daemon", "protocol"} or "gpu-fake" in suites:
        continue
    exe = t["cmd"][0]
    if not exe.startswith(build + "/") or not os.path.isfile(exe):
        continue
    dest = "tests/" + os.path.basename(exe)
    shutil.copy2(exe, os.path.join(out, dest))
    print(exe)
    env = []
    for k, v in sorted(t["env"].items()):
        if k == "LD_LIBRARY_PATH":
            # meson's way to the build tree's libraries; RPATH does it here.
            v = ":".join(p for p in v.split(":") if p and not p.startswith(build))
            if not v:
                continue
        for path, rel in bins.items():
            v = v.replace(path, "@BUNDLE@/" + rel)
        if build in v:
            sys.exit(f"bundle.sh: test {t['name']}: {k}={v} points into the build tree")
        env.append(f"{k}={v}")
    args = []
    for a in t["cmd"][1:]:
        if a.startswith(src + "/") and os.path.exists(a):
            # A file of the source tree (a fuzz corpus): it travels as data/.
            rel = "data/" + os.path.relpath(a, src)
            if not os.path.exists(os.path.join(out, rel)):
                (shutil.copytree if os.path.isdir(a) else shutil.copy2)(a, os.path.join(out, rel))
            a = "@BUNDLE@/" + rel
        if any(c in a for c in "\t ") or build in a or src in a:
            sys.exit(f"bundle.sh: test {t['name']}: argument {a!r} cannot be bundled")
        args.append(a)
    rows.append("\t".join([t["name"], str(int(t["timeout"])), dest, " ".join(args),
                           " ".join(env)]))
with open(os.path.join(out, "tests.tsv"), "w") as f:
    f.write("# name\ttimeout_s\tprogram\targuments\tenvironment (@BUNDLE@ = this directory)\n")
    f.write("".join(r + "\n" for r in rows))
PYEOF
programs=("$build/daemon/batchd" "$build/tools/batchd-pack" "$build/tools/batchctl"
	"$build/tools/batchd-bench" "$build/tests/gpu/gpu-json" "$build/client/libbatchclient.so.0")
mapfile -t -O ${#programs[@]} programs <"$out/.programs"
rm -f "$out/.tests.json" "$out/.programs"

# The allow-list: what the GPU machine has and a copy would break.
provided() {
	case $1 in
	libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | ld-linux*.so.* | \
		libstdc++.so.* | libgcc_s.so.* | libcuda.so.* | libnvidia-ml.so.* | linux-vdso.so.*)
		return 0 ;;
	esac
	return 1
}

# Every library any bundled ELF loads (ldd lists them transitively), found
# where the build tree's copies find them.
for f in "${programs[@]}"; do
	while read -r name arrow path _; do
		[[ $arrow == "=>" ]] || continue
		provided "$name" && continue
		[[ $name == libbatchclient.so.0 ]] && continue
		[[ $path == /* ]] || { echo "bundle.sh: $f needs $name, which is not found here" >&2; exit 1; }
		[[ -e $out/lib/$name ]] || cp -L "$path" "$out/lib/$name"
	done < <(ldd "$f")
done

for f in "$out"/bin/* "$out"/tests/*; do
	strip --strip-unneeded "$f" 2>/dev/null || true
	patchelf --force-rpath --set-rpath '$ORIGIN/../lib' "$f"
done
for f in "$out"/lib/*; do
	patchelf --force-rpath --set-rpath '$ORIGIN' "$f"
done

cp "$src/tests/gpu/run.sh" "$src/tests/gpu/README.md" "$out/"
chmod +x "$out/run.sh"
{
	git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown
	git -C "$src" diff --quiet 2>/dev/null || echo "(with uncommitted changes)"
	echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -srm) from $build"
} >"$out/VERSION"
echo "bundle.sh: $out: $(du -sh "$out" | cut -f1), $(ls "$out/lib" | wc -l) libraries, $(($(wc -l <"$out/tests.tsv") - 1)) tests"
