# SPDX-License-Identifier: MIT
"""batchclient.check() and `python -m batchclient`: where the package
stands on this machine, said in one report.

Why: `import batchclient` loads nothing (libbatchclient is loaded at first
use, NumPy and torch where a batch becomes an array or a tensor), so a
library that cannot be found, a NumPy that is missing or a daemon on
another socket shows up only in the middle of a trainer. check() looks at
each of them now: the library (the file loaded, its version, and every
place the loader looked, in order, with why each failed: the loader's own
reasons, batchclient._lib), NumPy and torch (versions, or what to install
for this interpreter), and the socket a Loader would connect to and
whether a daemon answers there. It raises nothing for what it finds
missing: that is what it reports.
"""
import importlib
import os
import re
import sys

from . import _deps, _lib

# bc_connect's default socket (client/connection.c, default_socket()).
RUN_SOCKET = "/run/batchd/batchd.sock"


class Report(dict):
    """check()'s findings as a dict; its str() and repr() are the text
    `python -m batchclient` prints, so that check() at a prompt reads as
    the report. ok: the library is usable."""

    @property
    def ok(self):
        return self["library"]["ok"]

    def __str__(self):
        return "\n".join(_lines(self)) + "\n"

    __repr__ = __str__


def _mapped():
    """The real paths of the libbatchclient files mapped into this process."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            rows = [line.split(None, 5) for line in f]
    except OSError:
        return []
    return sorted({os.path.realpath(r[5].strip()) for r in rows
                   if len(r) == 6 and os.path.basename(r[5].strip()).startswith("libbatchclient")})


def library():
    """The library: ok, path and place (as the loader found it), file (the
    real file mapped) and version (from its name, libbatchclient.so.X.Y.Z;
    None when it does not say), tried (why each earlier place failed) or,
    when none loaded, error."""
    try:
        so = _lib.lib()
    except ImportError as e:
        return {"ok": False, "error": getattr(e, "why", str(e)), "tried": getattr(e, "tried", [])}
    # The file mapped is the truth (a soname names none); one path given is the next best.
    files = _mapped()
    if len(files) == 1:
        real = files[0]
    else:
        real = os.path.realpath(so.path) if os.sep in so.path else so.path
    m = re.fullmatch(r"libbatchclient\.so\.(\d+\.\d+\.\d+)", os.path.basename(real))
    return {"ok": True, "path": so.path, "place": so.place, "file": real,
            "version": m.group(1) if m else None, "tried": list(so.tried)}


def module(name):
    """NumPy or torch: version, or None with error and install (what to run)."""
    try:
        m = importlib.import_module(name)
    except Exception as e:      # a broken install raises more than ImportError
        return {"version": None, "error": f"{type(e).__name__}: {e}",
                "install": _deps.install_hint(name)}
    return {"version": str(getattr(m, "__version__", "unknown")), "path": m.__file__}


def default_socket(socket=None):
    """(path, how it was chosen) of the socket bc_connect would use; the
    same steps as client/connection.c's default_socket() and its words."""
    if socket is not None:
        return os.fspath(socket), "the socket path given"
    env = os.environ.get("BATCHD_SOCKET")
    if env:
        return env, "from $BATCHD_SOCKET"
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if os.access(RUN_SOCKET, os.F_OK) or not xdg:
        return RUN_SOCKET, "the system default: $BATCHD_SOCKET is unset"
    return (os.path.join(xdg, "batchd.sock"), "$XDG_RUNTIME_DIR/batchd.sock: $BATCHD_SOCKET "
            f"is unset and there is no {RUN_SOCKET}")


def daemon(socket, usable):
    """The socket a Loader would use, how it was chosen, and whether a batchd
    answers there (its version, pid and sessions), or error saying why not."""
    path, how = default_socket(socket)
    out = {"socket": path, "how": how, "answers": False}
    if not usable:
        out["error"] = "not tried: there is no libbatchclient to connect with"
        return out
    from .errors import BatchdError
    from .loader import status
    try:
        st = status(socket)
    except BatchdError as e:
        out["error"] = str(e)
        return out
    out.update(answers=True, version=st.get("version"), pid=st.get("pid"),
               sessions=len(st.get("sessions", [])))
    return out


def check(socket=None):
    """Where batchclient stands here: the library, NumPy, torch and the
    daemon. socket: the one to try (None: as Loader, $BATCHD_SOCKET then
    the defaults). Loads the library (as a Loader would) and imports NumPy
    and torch; raises nothing for what is missing.

    @return a Report: a dict with "package", "python", "library", "numpy",
    "torch" and "daemon"; .ok when the library is usable; print it (or
    look at it at a prompt) for the text of `python -m batchclient`."""
    from . import __version__
    lib = library()
    return Report(
        package={"version": __version__, "path": os.path.dirname(os.path.abspath(__file__))},
        python={"version": sys.version.split()[0], "executable": sys.executable,
                "pip": _deps.pip_python()},
        library=lib, numpy=module("numpy"), torch=module("torch"),
        daemon=daemon(socket, lib["ok"]))


def _lines(r):
    """The report as text lines."""
    py = r["python"]
    kind = ("installs packages with pip" if py["pip"] else
            "Debian's python3: packages come from apt-get")
    out = [f"batchclient {r['package']['version']} at {r['package']['path']}",
           f"python {py['version']} at {py['executable']} ({kind})"]
    lib = r["library"]
    if lib["ok"]:
        version = f"version {lib['version']}" if lib["version"] else "version not in its name"
        out.append(f"library: {lib['path']} ({lib['file']}, {version})")
    else:
        out.append(f"library: NOT USABLE: {lib['error']}")
    out.append("  looked in, in order:")
    out += [f"    {i}. {t}" for i, t in enumerate(lib["tried"], 1)]
    if lib["ok"]:
        out.append(f"    {len(lib['tried']) + 1}. {lib['place']}: {lib['path']} (loaded)")
    for name in ("numpy", "torch"):
        m = r[name]
        if m["version"] is not None:
            out.append(f"{name}: {m['version']} ({m['path']})")
        else:
            out.append(f"{name}: not available ({m['error']}): {m['install']}")
    d = r["daemon"]
    out.append(f"daemon: {d['socket']} ({d['how']})")
    if d["answers"]:
        out.append(f"  answers: batchd {d['version']}, pid {d['pid']}, "
                   f"{d['sessions']} session{'' if d['sessions'] == 1 else 's'}")
    else:
        out.append(f"  no answer: {d['error']}")
    return out


def main(argv=None):
    """python -m batchclient [--socket PATH] [--json]. @return 0 when the
    library is usable, 1 when not."""
    import argparse
    import json
    p = argparse.ArgumentParser(prog="python -m batchclient",
                                description="Where batchclient stands here: the library, "
                                "NumPy, torch and the daemon (batchclient.check()).")
    p.add_argument("--socket", help="the daemon's socket (default: as a Loader: "
                   "$BATCHD_SOCKET, then the defaults)")
    p.add_argument("--json", action="store_true", help="the report as JSON")
    args = p.parse_args(argv)
    r = check(args.socket)
    if args.json:
        print(json.dumps(r, indent=2))
    else:
        print(r, end="")
    return 0 if r.ok else 1
