#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""batchclient installs with pip, offline, into Pythons other than the
system's, and finds libbatchclient from there.

Why real pip and fresh venvs: what breaks an install (a build backend pip
cannot fetch, a file missing from the wheel, a wrong RECORD, a version
that disagrees with meson's) only shows when pip itself builds and
installs the package into an environment that has never seen the source
tree. Each venv then imports the package from outside the checkout and
streams batches from a real batchd, checking the bytes. The discovery
tests run the package from copies laid out as a checkout, an installed
package and a stray copy, in fresh interpreters, so that each place
libbatchclient is looked for is exercised and the error names them all.
"""
import base64
import csv
import email.parser
import glob
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import unittest
import zipfile

import batchd_testlib as T

SRC = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                    os.pardir, "client", "python"))
VERSION = os.environ.get("BATCHD_VERSION", "")
LIB = os.environ.get("BATCHCLIENT_LIB", "")
NREC, SIZE, SEED, BATCH, TAKE = 200, 100, 6, 16, 4

# Run in a venv or a copy of the package: the library the package loaded
# (its own word and the file mapped), its version, and TAKE batches of
# the dataset as [ids, sha256 of each sample]; "numpy": the first batch's
# length as an array, or the ImportError saying what to install.
PROBE = r"""
import hashlib, json, os, sys
try:
    import batchclient
    from batchclient import _lib
    so = _lib.lib()
except ImportError as e:
    print(str(e))
    sys.exit(3)
with open("/proc/self/maps") as f:
    mapped = sorted({os.path.realpath(l.split(None, 5)[5].strip()) for l in f
                     if "libbatchclient" in l and len(l.split(None, 5)) == 6})
out = {"file": batchclient.__file__, "version": batchclient.__version__, "lib": so.path,
       "mapped": mapped, "batches": []}
if len(sys.argv) == 3:
    ld = batchclient.Loader(sys.argv[2], %d, shuffle="none", socket=sys.argv[1], timeout=20)
    try:
        for b in ld:
            if not out["batches"]:
                try:
                    out["numpy"] = len(b.numpy())
                except ImportError as e:
                    out["numpy"] = str(e)
            out["batches"].append([list(b.ids),
                                   [hashlib.sha256(bytes(s)).hexdigest() for s in b.samples]])
            if len(out["batches"]) == %d:
                break
    finally:
        ld.close()
print(json.dumps(out))
""" % (BATCH, TAKE)


def clean_env(**extra):
    """The environment minus everything that would find the package or the
    library behind pip's back; pkg-config sees only an empty directory."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "BATCHCLIENT_LIB", "LD_LIBRARY_PATH",
                        "PKG_CONFIG_PATH", "VIRTUAL_ENV") and not k.startswith("PIP_")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", PIP_NO_CACHE_DIR="1")
    env.update(extra)
    return env


def run(argv, env, cwd, what):
    p = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise AssertionError(f"{what}: {' '.join(argv)}: exit {p.returncode}\n"
                             f"{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p.stdout


def second_python():
    """An interpreter other than /usr/bin/python3 with venv and ensurepip:
    python3 on PATH when it is another one, else the newest pyenv version.
    @return its path, or None."""
    system = os.path.realpath("/usr/bin/python3")
    cands = [shutil.which("python3") or ""]
    cands += sorted(glob.glob("/root/.pyenv/versions/*/bin/python3"), reverse=True,
                    key=lambda p: [int(x) if x.isdigit() else 0
                                   for x in p.split("/")[-3].split(".")])
    for cand in cands:
        if not cand:
            continue
        p = subprocess.run([cand, "-c", "import sys, venv, ensurepip; "
                            "print(sys.executable if sys.version_info >= (3, 8) else '')"],
                           capture_output=True, text=True, env=clean_env())
        exe = p.stdout.strip()
        if p.returncode == 0 and exe and os.path.realpath(exe) != system:
            return exe
    return None


def have_numpy(python):
    """Whether python imports NumPy (Debian's python3 with python3-numpy)."""
    return subprocess.run([python, "-c", "import numpy"], env=clean_env(),
                          capture_output=True).returncode == 0


def digest(data):
    return hashlib.sha256(data).hexdigest()


class Install(T.DaemonCase):
    @classmethod
    def make_datasets(cls, d):
        if not VERSION or not LIB:
            raise RuntimeError("set BATCHD_VERSION and BATCHCLIENT_LIB (meson test does)")
        rec = os.path.join(cls.tmp, "rec.bin")
        T.write_records(rec, NREC, SIZE, seed=SEED)
        T.pack(d.path("rec.bpk"), records=(SIZE, rec))
        cls.outside = os.path.join(cls.tmp, "elsewhere")
        os.makedirs(cls.outside)
        cls.probe = os.path.join(cls.tmp, "probe.py")
        with open(cls.probe, "w") as f:
            f.write(PROBE)

    def want_batches(self):
        return [[list(range(b * BATCH, (b + 1) * BATCH)),
                 [digest(T.record_bytes(i, SIZE, SEED)) for i in range(b * BATCH, (b + 1) * BATCH)]]
                for b in range(TAKE)]

    def probe_in(self, python, env, stream=True):
        argv = [python, self.probe] + ([self.daemon.sock, "rec.bpk"] if stream else [])
        return json.loads(run(argv, env, self.outside, "the probe"))

    def venv(self, base, name, *flags):
        path = os.path.join(self.tmp, name)
        run([base, "-m", "venv", *flags, path], clean_env(), self.outside, "python -m venv")
        return os.path.join(path, "bin", "python")

    def check_venv(self, base, name, system_numpy):
        """pip install SRC into a fresh venv of base; stream from it. With
        system_numpy the venv sees base's site-packages, whose NumPy meets
        the wheel's dependency offline; without, no NumPy wheel is at hand
        offline, so pip installs with --no-deps and the venv has none: the
        bytes still stream, and an array names pip's package. @return its python."""
        py = self.venv(base, name, *(["--system-site-packages"] if system_numpy else []))
        run([py, "-m", "pip", "install", "--no-index", *([] if system_numpy else ["--no-deps"]),
             SRC], clean_env(), self.outside, "pip install")
        venv_dir = os.path.dirname(os.path.dirname(py))
        got = self.probe_in(py, clean_env(BATCHCLIENT_LIB=LIB))
        self.assertTrue(got["file"].startswith(venv_dir + os.sep), got["file"])
        self.assertEqual(got["version"], VERSION)
        self.assertEqual(got["lib"], LIB)
        self.assertEqual(got["mapped"], [os.path.realpath(LIB)])
        self.assertEqual(got["batches"], self.want_batches())
        if system_numpy:
            self.assertEqual(got["numpy"], BATCH)
        else:
            self.assertEqual(got["numpy"], "batch.numpy() is a NumPy array: install NumPy "
                             "(pip install numpy)")
        # python -m batchclient in the venv: this library, a daemon that
        # answers, and NumPy as the venv has it.
        report = run([py, "-m", "batchclient", "--socket", self.daemon.sock],
                     clean_env(BATCHCLIENT_LIB=LIB), self.outside, "python -m batchclient")
        self.assertIn(f"library: {LIB} ({os.path.realpath(LIB)}, version {VERSION})", report)
        self.assertIn(f"daemon: {self.daemon.sock} (the socket path given)\n  answers: "
                      f"batchd {VERSION}", report)
        if system_numpy:
            self.assertRegex(report, r"\nnumpy: \d")
        else:
            self.assertRegex(report, r"\nnumpy: not available \(.*\): pip install numpy\n")
        # No $BATCHCLIENT_LIB: the installed library by its soname, here
        # through LD_LIBRARY_PATH, as after meson install to a prefix the
        # loader searches.
        got = self.probe_in(py, clean_env(LD_LIBRARY_PATH=os.path.dirname(LIB)), stream=False)
        self.assertEqual(got["lib"], "libbatchclient.so.0")
        self.assertEqual(got["mapped"], [os.path.realpath(LIB)])
        return py

    # ---- the wheel and the sdist ------------------------------------------------------------

    def build_wheel(self, src, name):
        out = os.path.join(self.tmp, name)
        run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index", "-w", out, src],
            clean_env(), self.outside, "pip wheel")
        wheels = os.listdir(out)
        self.assertEqual(wheels, [f"batchclient-{VERSION}-py3-none-any.whl"])
        return os.path.join(out, wheels[0])

    def check_record(self, z):
        record = f"batchclient-{VERSION}.dist-info/RECORD"
        rows = list(csv.reader(io.StringIO(z.read(record).decode())))
        self.assertEqual(sorted(r[0] for r in rows), sorted(z.namelist()))
        for path, hashed, size in rows:
            if path == record:
                self.assertEqual((hashed, size), ("", ""))
                continue
            data = z.read(path)
            want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            self.assertEqual(hashed, f"sha256={want}", path)
            self.assertEqual(int(size), len(data), path)

    def test_wheel_holds_the_package_its_version_and_a_true_record(self):
        with zipfile.ZipFile(self.build_wheel(SRC, "wheel")) as z:
            names = set(z.namelist())
            sources = sorted(n for n in os.listdir(os.path.join(SRC, "batchclient"))
                             if n.endswith(".py"))
            self.assertIn("loader.py", sources)
            for n in sources:
                self.assertEqual(z.read(f"batchclient/{n}"), T.read(os.path.join(SRC, "batchclient", n)),
                                 f"batchclient/{n}")
            di = f"batchclient-{VERSION}.dist-info"
            want = {f"batchclient/{n}" for n in sources} | {"batchclient/_buildconfig.py"}
            want |= {f"{di}/METADATA", f"{di}/WHEEL", f"{di}/RECORD"}
            self.assertEqual(names - {f"{di}/COPYING"}, want)
            meta = email.parser.Parser().parsestr(z.read(f"{di}/METADATA").decode())
            self.assertEqual((meta["Metadata-Version"], meta["Name"], meta["Version"]),
                             ("2.1", "batchclient", VERSION))
            # NumPy is a dependency, torch the extra of `pip install batchclient[torch]`.
            self.assertEqual(meta.get_all("Requires-Dist"), ["numpy", 'torch; extra == "torch"'])
            self.assertEqual(meta.get_all("Provides-Extra"), ["torch"])
            wheel = email.parser.Parser().parsestr(z.read(f"{di}/WHEEL").decode())
            self.assertEqual((wheel["Root-Is-Purelib"], wheel["Tag"]), ("true", "py3-none-any"))
            config = {}
            exec(z.read("batchclient/_buildconfig.py").decode(), config)
            self.assertEqual((config["VERSION"], config["LIBRARY"]), (VERSION, ""))
            self.check_record(z)

    def test_sdist_builds_the_same_wheel(self):
        out = os.path.join(self.tmp, "sdist")
        os.makedirs(out)
        code = ("import sys; sys.path.insert(0, 'backend'); import batchclient_backend as b; "
                f"print(b.build_sdist({out!r}))")
        name = run([sys.executable, "-c", code], clean_env(), SRC, "build_sdist").strip()
        self.assertEqual(name, f"batchclient-{VERSION}.tar.gz")
        shutil.unpack_archive(os.path.join(out, name), out)
        unpacked = os.path.join(out, f"batchclient-{VERSION}")
        self.assertTrue(os.path.exists(os.path.join(unpacked, "PKG-INFO")))
        from_tree = self.build_wheel(SRC, "wheel-tree")
        from_sdist = self.build_wheel(unpacked, "wheel-sdist")
        with zipfile.ZipFile(from_tree) as a, zipfile.ZipFile(from_sdist) as b:
            self.assertEqual(sorted(a.namelist()), sorted(b.namelist()))
            for n in a.namelist():
                self.assertEqual(a.read(n), b.read(n), n)

    # ---- venvs ----------------------------------------------------------------------------

    def test_system_python_venv(self):
        self.check_venv("/usr/bin/python3", "venv-system",
                        system_numpy=have_numpy("/usr/bin/python3"))

    def test_second_python_venv_and_editable(self):
        base = second_python()
        if base is None:
            self.skipTest("no Python other than /usr/bin/python3 with venv (pyenv, python3 on PATH)")
        py = self.check_venv(base, "venv-other", system_numpy=False)
        run([py, "-m", "pip", "install", "--no-index", "--no-deps", "-e", SRC], clean_env(),
            self.outside, "pip install -e")
        got = self.probe_in(py, clean_env(BATCHCLIENT_LIB=LIB))
        self.assertEqual(got["file"], os.path.join(SRC, "batchclient", "__init__.py"))
        self.assertEqual(got["version"], VERSION)
        self.assertEqual(got["batches"], self.want_batches())


class Discovery(unittest.TestCase):
    """Where the package looks for libbatchclient, in fresh interpreters over
    copies of the package: a checkout's layout, an installed copy with a
    recorded path, and a stray copy that can find nothing."""

    def setUp(self):
        self.tmp = T.tmpdir("disc")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.empty = os.path.join(self.tmp, "empty")
        os.makedirs(self.empty)
        self.probe = os.path.join(self.tmp, "probe.py")
        with open(self.probe, "w") as f:
            f.write(PROBE)

    def copy(self, where, checkout):
        """The package under where/client/python (checkout: with client/batchclient.h
        and a meson.build of version 4.5.6). @return the directory to put on PYTHONPATH."""
        top = os.path.join(self.tmp, where, "client", "python")
        shutil.copytree(os.path.join(SRC, "batchclient"), os.path.join(top, "batchclient"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        if checkout:
            open(os.path.join(self.tmp, where, "client", "batchclient.h"), "w").close()
            with open(os.path.join(self.tmp, where, "meson.build"), "w") as f:
                f.write("project('batchd', 'c',\n  version: '4.5.6',\n  license: 'MIT')\n")
        return top

    def link(self, *parts):
        """A symlink to the built library at tmp/parts... @return its path."""
        path = os.path.join(self.tmp, *parts)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.symlink(LIB, path)
        return path

    def load(self, pythonpath, **env):
        """(exit status, probe output) of loading the library from that copy."""
        env = clean_env(PYTHONPATH=pythonpath, PKG_CONFIG_LIBDIR=self.empty, **env)
        p = subprocess.run([sys.executable, self.probe], env=env, cwd=self.empty,
                           capture_output=True, text=True, timeout=60)
        if p.returncode == 0:
            return 0, json.loads(p.stdout)
        self.assertEqual(p.returncode, 3, p.stderr)
        return 3, p.stdout

    def installed_elsewhere(self):
        p = subprocess.run([sys.executable, "-c", "import ctypes; ctypes.CDLL('libbatchclient.so.0')"],
                           env=clean_env(), capture_output=True)
        return p.returncode == 0

    def test_nothing_found_names_every_place_tried(self):
        if self.installed_elsewhere():
            self.skipTest("libbatchclient.so.0 is installed on this machine: something is found")
        top = self.copy("stray", checkout=False)
        rc, msg = self.load(top)
        self.assertEqual(rc, 3, msg)
        for want in ("$BATCHCLIENT_LIB (not set)",
                     "the path recorded at install time (batchclient/_buildconfig.py) "
                     "(none: this copy of the package was not installed)",
                     "the dynamic loader (LD_LIBRARY_PATH, ld.so.cache): libbatchclient.so.0 (",
                     "pkg-config --variable=libdir batchclient (no batchclient.pc",
                     f"the build tree of a source checkout ({top}/batchclient is not in a "
                     "batchd checkout)",
                     "meson install", "set BATCHCLIENT_LIB"):
            self.assertIn(want, msg)
        # In a checkout without a build: the build tree's path, not there.
        top = self.copy("unbuilt", checkout=True)
        rc, msg = self.load(top)
        self.assertEqual(rc, 3, msg)
        built = os.path.join(self.tmp, "unbuilt", "build", "client", "libbatchclient.so.0")
        self.assertIn(f"the build tree of a source checkout: {built} (no such file)", msg)

    def test_build_tree_then_recorded_path_then_environment(self):
        top = self.copy("ck", checkout=True)
        built = self.link("ck", "build", "client", "libbatchclient.so.0")
        rc, got = self.load(top)
        self.assertEqual((rc, got["lib"], got["mapped"]), (0, built, [os.path.realpath(LIB)]))
        self.assertEqual(got["version"], "4.5.6")      # the checkout's meson.build
        # meson install's _buildconfig.py: its recorded path comes first.
        recorded = self.link("prefix", "lib", "libbatchclient.so.0")
        with open(os.path.join(SRC, "batchclient", "_buildconfig.py.in")) as f:
            template = f.read()
        config = os.path.join(top, "batchclient", "_buildconfig.py")
        with open(config, "w") as f:
            f.write(template.replace("@VERSION@", "9.8.7").replace("@LIBRARY@", recorded))
        rc, got = self.load(top)
        self.assertEqual((rc, got["lib"], got["version"]), (0, recorded, "9.8.7"))
        # A recorded path gone: the next places, down to the build tree.
        os.unlink(recorded)
        rc, got = self.load(top)
        self.assertEqual((rc, got["lib"]), (0, built))
        # $BATCHCLIENT_LIB before all of them.
        rc, got = self.load(top, BATCHCLIENT_LIB=LIB)
        self.assertEqual((rc, got["lib"]), (0, LIB))

    def test_an_unusable_batchclient_lib_is_the_error(self):
        top = self.copy("ck", checkout=True)
        self.link("ck", "build", "client", "libbatchclient.so.0")
        nowhere = os.path.join(self.tmp, "nowhere", "libbatchclient.so.0")
        rc, msg = self.load(top, BATCHCLIENT_LIB=nowhere)
        self.assertEqual(rc, 3, msg)
        self.assertIn(f"tried: $BATCHCLIENT_LIB: {nowhere} (no such file)", msg)
        self.assertIn("no fall-back", msg)
        self.assertNotIn("build tree", msg)
        # Not a shared object: the loader's own reason.
        rc, msg = self.load(top, BATCHCLIENT_LIB=self.probe)
        self.assertEqual(rc, 3, msg)
        self.assertIn(f"$BATCHCLIENT_LIB: {self.probe} (", msg)

    def test_pkg_config_libdir(self):
        if not shutil.which("pkg-config"):
            self.skipTest("no pkg-config")
        if self.installed_elsewhere():
            self.skipTest("libbatchclient.so.0 is installed on this machine: the loader finds it")
        top = self.copy("stray", checkout=False)
        libdir = os.path.join(self.tmp, "opt", "lib")
        found = self.link("opt", "lib", "libbatchclient.so.0")
        pc = os.path.join(self.tmp, "pc")
        os.makedirs(pc)
        with open(os.path.join(pc, "batchclient.pc"), "w") as f:
            f.write(f"libdir={libdir}\n\nName: batchclient\nDescription: test\nVersion: {VERSION}\n"
                    "Libs: -L${libdir} -lbatchclient\n")
        rc, got = self.load(top, PKG_CONFIG_PATH=pc)
        self.assertEqual((rc, got["lib"], got["mapped"]), (0, found, [os.path.realpath(LIB)]))


if __name__ == "__main__":
    T.main()
