#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A new user's first hour with the package: `import batchclient` loads
nothing; `python -m batchclient` and batchclient.check() say where the
library was found (or every place looked at, and why not), NumPy's and
torch's state and whether a daemon answers, exiting 0 only with a usable
library; and a missing NumPy or torch is named as this interpreter
installs it: pip's package in a venv, Debian's python3-* outside.

The interpreters are real: Debian's /usr/bin/python3 with NumPy made to
fail (sys.modules['numpy'] = None), and a fresh venv of it (made without
pip, in well under a second), which has no NumPy at all.
"""
import json
import os
import re
import shutil
import subprocess
import sys

import batchclient
import batchd_testlib as T
from batchclient import _deps

SRC = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                    os.pardir, "client", "python"))
LIB = os.environ.get("BATCHCLIENT_LIB", "")
DEBIAN = "/usr/bin/python3"

# batch["label"] of the first batch without NumPy: the ImportError's text.
NO_NUMPY = r"""
import sys
if sys.argv[3] == "block":
    sys.modules["numpy"] = None
import batchclient
ld = batchclient.Loader(sys.argv[1], 4, socket=sys.argv[2], fields=["data", "label"])
b = next(iter(ld))
try:
    b["label"]
    print("no error")
except ImportError as e:
    print(e)
b.release()
ld.close()
"""


def env(**extra):
    """os.environ without a venv's marks or $BATCHD_SOCKET, plus extra."""
    out = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "BATCHD_SOCKET")}
    out.update(extra)
    return out


class FirstHour(T.DaemonCase):
    @classmethod
    def make_datasets(cls, d):
        if not LIB:
            raise RuntimeError("set BATCHCLIENT_LIB (meson test does)")
        src = os.path.join(cls.tmp, "src")
        for i, label in enumerate(("cat", "dog")):
            T.write_files(os.path.join(src, label), [64 + i] * 6, seed=i + 3)
        T.pack(d.path("pets.bpk"), src, extra=["--labels", "dirname"])
        cls.venv_python = None

    def run_py(self, argv, python=None, **extra):
        return subprocess.run([python or sys.executable, *argv], env=env(**extra),
                              cwd=self.tmp, capture_output=True, text=True, timeout=120)

    def venv(self):
        """A venv of Debian's python3 without pip (it sees PYTHONPATH, not
        Debian's site-packages). @return its python."""
        if not os.access(DEBIAN, os.X_OK):
            self.skipTest(f"no {DEBIAN}")
        if FirstHour.venv_python is None:
            path = os.path.join(self.tmp, "venv")
            p = subprocess.run([DEBIAN, "-m", "venv", "--without-pip", path], env=env(),
                               capture_output=True, text=True, timeout=60)
            if p.returncode != 0:
                self.skipTest(f"python3 -m venv failed (python3-venv?): {p.stderr.strip()}")
            FirstHour.venv_python = os.path.join(path, "bin", "python")
        return FirstHour.venv_python

    # ---- import is cheap ------------------------------------------------------------------

    def test_import_loads_neither_the_library_nor_numpy_nor_torch(self):
        code = ("import sys, batchclient\n"
                "maps = open('/proc/self/maps').read()\n"
                "print(sorted(m for m in ('numpy', 'torch') if m in sys.modules), "
                "'libbatchclient' in maps)\n")
        p = self.run_py(["-c", code], BATCHCLIENT_LIB="/nowhere/libbatchclient.so.0")
        self.assertEqual((p.returncode, p.stdout), (0, "[] False\n"), p.stderr)

    # ---- python -m batchclient ------------------------------------------------------------

    def test_report_names_the_library_and_a_daemon_that_answers(self):
        p = self.run_py(["-m", "batchclient", "--socket", self.daemon.sock])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        out = p.stdout
        self.assertIn(f"library: {LIB} ({os.path.realpath(LIB)}, version "
                      f"{batchclient.__version__})", out)
        self.assertIn(f"  looked in, in order:\n    1. $BATCHCLIENT_LIB: {LIB} (loaded)\n", out)
        self.assertIn(f"daemon: {self.daemon.sock} (the socket path given)\n"
                      f"  answers: batchd {batchclient.__version__}, pid {self.daemon.proc.pid}, ",
                      out)
        self.assertRegex(out, r"\nnumpy: (\d|not available)")
        self.assertRegex(out, r"\ntorch: (\d|not available)")
        # As a Loader would: $BATCHD_SOCKET when no socket is given; --json says the same.
        p = self.run_py(["-m", "batchclient", "--json"], BATCHD_SOCKET=self.daemon.sock)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        r = json.loads(p.stdout)
        self.assertEqual((r["library"]["ok"], r["library"]["path"], r["library"]["place"]),
                         (True, LIB, "$BATCHCLIENT_LIB"))
        self.assertEqual((r["daemon"]["socket"], r["daemon"]["how"], r["daemon"]["answers"]),
                         (self.daemon.sock, "from $BATCHD_SOCKET", True))

    def test_report_says_why_no_daemon_answers(self):
        gone = os.path.join(self.tmp, "no-such.sock")
        p = self.run_py(["-m", "batchclient", "--socket", gone])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)    # the library is usable
        self.assertIn(f"daemon: {gone} (the socket path given)\n  no answer: cannot connect "
                      f"to batchd at {gone}", p.stdout)
        self.assertIn("is batchd running?", p.stdout)

    def test_an_unloadable_batchclient_lib_exits_1_saying_why(self):
        nowhere = os.path.join(self.tmp, "nowhere", "libbatchclient.so.0")
        p = self.run_py(["-m", "batchclient", "--socket", self.daemon.sock],
                        BATCHCLIENT_LIB=nowhere)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("library: NOT USABLE: batchclient: cannot load libbatchclient: "
                      "$BATCHCLIENT_LIB is set but does not load", p.stdout)
        self.assertIn(f"  looked in, in order:\n    1. $BATCHCLIENT_LIB: {nowhere} "
                      "(no such file)\n", p.stdout)
        self.assertIn(f"daemon: {self.daemon.sock} (the socket path given)\n  no answer: not "
                      "tried: there is no libbatchclient to connect with", p.stdout)

    def stray_report(self, name, **extra):
        """python -m batchclient from a copy of the package outside any checkout
        (as pip installs it), with no variable pointing at the library; skipped
        where the library is installed (the loader finds it first). @return
        (the copy's directory, the finished process)."""
        probe = subprocess.run([sys.executable, "-c", "import ctypes; "
                                "ctypes.CDLL('libbatchclient.so.0')"], capture_output=True,
                               env=env(BATCHCLIENT_LIB="", LD_LIBRARY_PATH=""))
        if probe.returncode == 0:
            self.skipTest("libbatchclient.so.0 is installed on this machine: something is found")
        stray = os.path.join(self.tmp, name)
        shutil.copytree(os.path.join(SRC, "batchclient"), os.path.join(stray, "batchclient"),
                        ignore=shutil.ignore_patterns("__pycache__", "_buildconfig.py"))
        empty = os.path.join(self.tmp, name + "-cwd")
        os.makedirs(empty, exist_ok=True)
        clean = {k: v for k, v in env().items()
                 if k not in ("BATCHCLIENT_LIB", "LD_LIBRARY_PATH", "PKG_CONFIG_PATH")}
        clean.update(PYTHONPATH=stray, PKG_CONFIG_LIBDIR=empty, **extra)
        return stray, subprocess.run([sys.executable, "-m", "batchclient", "--socket",
                                      self.daemon.sock], env=clean, cwd=empty,
                                     capture_output=True, text=True, timeout=60)

    def test_nothing_found_lists_every_place_in_order(self):
        """A copy of the package outside any checkout, with nothing to find:
        each place the loader tries, numbered in its order, with its reason."""
        stray, p = self.stray_report("stray")
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("library: NOT USABLE: batchclient: cannot load libbatchclient.so.0: "
                      "build batchd and install it", p.stdout)
        listed = re.findall(r"^    (\d+)\. (.*)$", p.stdout, re.M)
        self.assertEqual([int(n) for n, _ in listed], list(range(1, len(listed) + 1)), p.stdout)
        places = [t for _, t in listed]
        want = ["$BATCHCLIENT_LIB (not set)",
                "the path recorded at install time (batchclient/_buildconfig.py) "
                "(none: this copy of the package was not installed)",
                "the dynamic loader (LD_LIBRARY_PATH, ld.so.cache): libbatchclient.so.0 (",
                "pkg-config --variable=libdir batchclient (",
                "beside batchctl on $PATH (PREFIX/lib*) (",
                f"the build tree of a source checkout ({stray}/batchclient is not in a "
                "batchd checkout)"]
        # find_library may name another file between the loader and pkg-config.
        places = [t for t in places if not t.startswith("ctypes.util.find_library")]
        self.assertEqual(len(places), len(want), p.stdout)
        for got, w in zip(places, want):
            self.assertTrue(got.startswith(w), f"{got!r} should start with {w!r}")
        self.assertIn("no answer: not tried", p.stdout)

    def test_a_private_prefix_on_path_is_found(self):
        """batchd installed in a private prefix, its bin/ on $PATH: a pip
        install of the package (a copy outside any checkout) finds the
        library in that prefix, with no LD_LIBRARY_PATH or PKG_CONFIG_PATH."""
        prefix = os.path.join(self.tmp, "opt")
        libdir = os.path.join(prefix, "lib", "x86_64-linux-gnu")
        os.makedirs(libdir, exist_ok=True)
        os.makedirs(os.path.join(prefix, "bin"), exist_ok=True)
        shutil.copy(LIB, os.path.join(libdir, "libbatchclient.so.0"))
        with open(os.path.join(prefix, "bin", "batchctl"), "w") as f:
            f.write("#!/bin/sh\n")
        os.chmod(os.path.join(prefix, "bin", "batchctl"), 0o755)
        _, p = self.stray_report("stray2", PATH=os.path.join(prefix, "bin") + ":/usr/bin:/bin")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn(os.path.join(libdir, "libbatchclient.so.0"), p.stdout)
        self.assertIn("beside batchctl on $PATH", p.stdout)

    def test_check_returns_the_report(self):
        r = batchclient.check(self.daemon.sock)
        self.assertTrue(r.ok)
        self.assertEqual((r["library"]["path"], r["library"]["file"]),
                         (LIB, os.path.realpath(LIB)))
        self.assertEqual((r["daemon"]["answers"], r["daemon"]["version"]),
                         (True, batchclient.__version__))
        self.assertEqual(r["python"]["executable"], sys.executable)
        self.assertEqual(repr(r), str(r))
        self.assertTrue(str(r).startswith(f"batchclient {batchclient.__version__} at "), str(r))

    # ---- what to install ------------------------------------------------------------------

    def test_install_hint_follows_the_interpreter(self):
        cases = [
            # (prefix, base_prefix, executable): pip?
            (("/usr", "/usr", "/usr/bin/python3"), False),
            (("/usr", "/usr", "/usr/bin/python3.11"), False),
            (("/home/u/venv", "/usr", "/home/u/venv/bin/python"), True),
            (("/home/u/venv", "/usr", "/usr/bin/python3"), True),     # a venv's python, resolved
            (("/usr/local", "/usr/local", "/usr/local/bin/python3"), True),
            (("/opt/conda", "/opt/conda", "/opt/conda/bin/python3.12"), True),
            (("/root/.pyenv/versions/3.12.1",) * 2 + ("/root/.pyenv/versions/3.12.1/bin/python3",),
             True),
        ]
        for (prefix, base, exe), pip in cases:
            where = dict(prefix=prefix, base_prefix=base, executable=exe)
            self.assertEqual(_deps.pip_python(**where), pip, where)
            self.assertEqual(batchclient.install_hint("numpy", **where),
                             "pip install numpy" if pip else "apt-get install python3-numpy", where)
            self.assertEqual(batchclient.install_hint("torch", **where),
                             "pip install torch" if pip else "apt-get install python3-torch", where)
            self.assertEqual(batchclient.install_hint("PIL", **where),
                             "pip install pillow" if pip else "apt-get install python3-pil", where)

    def no_numpy(self, python, block):
        p = self.run_py(["-c", NO_NUMPY, "pets.bpk", self.daemon.sock,
                         "block" if block else "-"], python=python)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout.strip()

    def test_missing_numpy_names_python3_numpy_in_debians_python(self):
        if not os.access(DEBIAN, os.X_OK):
            self.skipTest(f"no {DEBIAN}")
        self.assertEqual(self.no_numpy(DEBIAN, block=True),
                         "batch['label'] is a NumPy array: install NumPy "
                         "(apt-get install python3-numpy)")

    def test_missing_numpy_names_pip_in_a_venv(self):
        py = self.venv()
        self.assertEqual(self.no_numpy(py, block=False),
                         "batch['label'] is a NumPy array: install NumPy (pip install numpy)")
        # The venv's report says the same, and that this Python installs with pip.
        p = self.run_py(["-m", "batchclient", "--socket", self.daemon.sock], python=py)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertRegex(p.stdout, rf"\npython [\d.]+ at {re.escape(py)} \(installs packages "
                         r"with pip\)\n")
        self.assertRegex(p.stdout, r"\nnumpy: not available \(ModuleNotFoundError: .*\): "
                         r"pip install numpy\n")
        self.assertRegex(p.stdout, r"\ntorch: not available \(.*\): pip install torch\n")

    def test_batchclient_torch_without_torch_names_the_package(self):
        code = ("import sys; sys.modules['torch'] = None\n"
                "try:\n"
                "    import batchclient.torch\n"
                "except ImportError as e:\n"
                "    print(e)\n")
        if os.access(DEBIAN, os.X_OK):
            p = self.run_py(["-c", code], python=DEBIAN)
            self.assertIn("): install it (apt-get install python3-torch), or use "
                          "batchclient.Loader", p.stdout)
        p = self.run_py(["-c", code], python=self.venv())
        self.assertIn("): install it (pip install torch), or use batchclient.Loader", p.stdout)

    # ---- meson install ---------------------------------------------------------------------

    def test_meson_installs_every_module(self):
        """client/python/meson.build names the package's files one by one:
        a module missing there is missing from Debian's python3 after meson
        install (python -m batchclient with no __main__.py)."""
        with open(os.path.join(SRC, "meson.build"), encoding="utf-8") as f:
            named = set(re.findall(r"'batchclient/([^'/]+\.py)'", f.read()))
        here = {n for n in os.listdir(os.path.join(SRC, "batchclient")) if n.endswith(".py")}
        self.assertEqual(named, here)


if __name__ == "__main__":
    T.main()
