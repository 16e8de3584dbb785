# SPDX-License-Identifier: MIT
"""What to install for a Python module the package needs: pip's package in
a venv or any Python but Debian's, Debian's python3-* package in Debian's.

Why it matters: a venv does not see Debian's packages (unless made with
--system-site-packages), so "python3-numpy" sends its user nowhere; and
Debian's own python3 refuses pip outside a venv (PEP 668), so "pip install
numpy" is no better there. Every "install X" message of the package and its
examples comes from install_hint(), so they all tell the same story.

NumPy is a dependency of the wheel and torch its extra
(`pip install batchclient[torch]`), but both are imported only where used:
`import batchclient` stays cheap, and a loader that only reads bytes runs
without either.
"""
import importlib
import sys

# module: (its name in prose, its pip package, its Debian package)
PACKAGES = {
    "numpy": ("NumPy", "numpy", "python3-numpy"),
    "torch": ("PyTorch", "torch", "python3-torch"),
    "PIL": ("Pillow", "pillow", "python3-pil"),
}


def pip_python(prefix=None, base_prefix=None, executable=None):
    """Whether this interpreter installs packages with pip: a venv
    (sys.prefix differs from sys.base_prefix), or an interpreter other
    than Debian's /usr/bin/python3*. The arguments default to sys's
    (prefix, base_prefix, executable); tests pass others."""
    prefix = sys.prefix if prefix is None else prefix
    base_prefix = sys.base_prefix if base_prefix is None else base_prefix
    executable = sys.executable if executable is None else executable
    debian = executable.startswith("/usr/bin/python3") and "/" not in executable[9:]
    return prefix != base_prefix or not debian


def install_hint(module, **where):
    """How to install module here: "pip install numpy" or "apt-get install
    python3-numpy" (keys of PACKAGES; `where`: pip_python's arguments)."""
    _, pip, deb = PACKAGES[module]
    return f"pip install {pip}" if pip_python(**where) else f"apt-get install {deb}"


def need(module, why):
    """import module, or ImportError "<why>: install NumPy (pip install numpy)",
    whose __cause__ is the import's own error."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{why}: install {PACKAGES[module][0]} ({install_hint(module)})") \
            from e
