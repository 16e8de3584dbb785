# SPDX-License-Identifier: MIT
"""The PEP 517 build backend of the batchclient package, standard library only.

Why in-tree: `pip install ./client/python` must work offline, in any venv,
conda or pyenv Python, with pip's build isolation on. An isolated build
installs the backend's requirements first, and with PyPI out of reach
setuptools or flit cannot be fetched; this backend needs nothing
(pyproject.toml: requires = [], backend-path = ["backend"]). The package
is pure Python over ctypes, so a wheel is a zip of batchclient/*.py with
its metadata (core metadata 2.1), a WHEEL file and a RECORD of sha256s.

One version: the meson project version of the checkout (../../meson.build).
The sdist carries it in PKG-INFO, so a wheel built from an unpacked sdist
has the same. The wheel's batchclient/_buildconfig.py comes from the same
template meson fills at install time, with the version and no recorded
library path: a pip-installed package finds libbatchclient through
$BATCHCLIENT_LIB or the installed library (batchclient._lib).

The wheel ships no copy of libbatchclient.so.0: the library speaks the
daemon's shared-memory protocol, so it belongs with the daemon it was built
with (meson install), and the wheel stays py3-none-any, buildable without a
compiler or a build tree.

Hooks (PEP 517, PEP 660): build_wheel, build_sdist, build_editable, their
get_requires_for_* (none) and prepare_metadata_for_build_*.
"""
import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile

NAME = "batchclient"
SUMMARY = "Mini-batches from the batchd data-loader daemon for NumPy and PyTorch trainers"
REQUIRES_PYTHON = ">=3.8"
CLASSIFIERS = (
    "License :: OSI Approved :: MIT License",
    "Operating System :: POSIX :: Linux",
    "Programming Language :: Python :: 3",
)
# NumPy: batches as arrays (batch["label"], batch.numpy()) and what
# batch.torch() builds on. torch only for batchclient.torch and tensors,
# hence an extra: `pip install batchclient[torch]`. Both are imported where
# used, so `import batchclient` stays cheap and an install made with
# --no-deps (offline, no NumPy wheel at hand) still streams bytes.
REQUIRES = ("numpy",)
EXTRAS = {"torch": ("torch",)}
TAG = "py3-none-any"
# The source directory: pip runs the hooks from it (in-tree builds).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, NAME)
TEMPLATE = "_buildconfig.py.in"


# ---- what goes in ---------------------------------------------------------------------------


def version():
    """The project version: PKG-INFO's in an unpacked sdist, else the
    `version:` of project() in the checkout's meson.build."""
    pkg_info = os.path.join(ROOT, "PKG-INFO")
    if os.path.exists(pkg_info):
        with open(pkg_info, encoding="utf-8") as f:
            m = re.search(r"^Version: *(\S+)", f.read(), re.M)
        if not m:
            raise RuntimeError(f"{pkg_info} has no Version: line")
        return m.group(1)
    meson = os.path.join(os.path.dirname(os.path.dirname(ROOT)), "meson.build")
    try:
        with open(meson, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise RuntimeError(f"batchclient's version is the meson project version, but {meson} "
                           f"cannot be read ({e.strerror}): build from a batchd checkout "
                           "(client/python) or from its sdist") from None
    m = re.search(r"project\s*\((?:[^()]|\([^()]*\))*?\bversion\s*:\s*'([^']+)'", text, re.S)
    if not m:
        raise RuntimeError(f"{meson}: no version: '...' in project()")
    return m.group(1)


def licence():
    """COPYING: the checkout's (../../COPYING) or the sdist's. None if neither."""
    for path in (os.path.join(ROOT, "COPYING"),
                 os.path.join(os.path.dirname(os.path.dirname(ROOT)), "COPYING")):
        if os.path.exists(path):
            with open(path, "rb") as f:
                return f.read()
    return None


def modules():
    """The package's sources, sorted: batchclient/*.py (not the template)."""
    names = sorted(n for n in os.listdir(PACKAGE)
                   if n.endswith(".py") and n != "_buildconfig.py")
    return [f"{NAME}/{n}" for n in names]


def buildconfig(ver):
    """batchclient/_buildconfig.py for a wheel: the version, no library path."""
    with open(os.path.join(PACKAGE, TEMPLATE), encoding="utf-8") as f:
        text = f.read()
    return text.replace("@VERSION@", ver).replace("@LIBRARY@", "").encode()


def metadata(ver):
    """METADATA / PKG-INFO, core metadata 2.1."""
    lines = ["Metadata-Version: 2.1", f"Name: {NAME}", f"Version: {ver}",
             f"Summary: {SUMMARY}", "License: MIT", f"Requires-Python: {REQUIRES_PYTHON}"]
    lines += [f"Classifier: {c}" for c in CLASSIFIERS]
    lines += [f"Requires-Dist: {r}" for r in REQUIRES]
    for extra, reqs in EXTRAS.items():
        lines += [f"Provides-Extra: {extra}"]
        lines += [f"Requires-Dist: {r}; extra == \"{extra}\"" for r in reqs]
    lines += ["Description-Content-Type: text/plain", ""]
    with open(os.path.join(PACKAGE, "__init__.py"), encoding="utf-8") as f:
        m = re.search(r'"""(.*?)"""', f.read(), re.S)
    return ("\n".join(lines) + "\n" + (m.group(1).strip() + "\n" if m else "")).encode()


def wheel_file():
    return (f"Wheel-Version: 1.0\nGenerator: {NAME}_backend\nRoot-Is-Purelib: true\n"
            f"Tag: {TAG}\n").encode()


def dist_info(ver):
    return f"{NAME}-{ver}.dist-info"


def meta_files(ver):
    """{path in the wheel: bytes} of the .dist-info directory, RECORD aside."""
    di = dist_info(ver)
    out = {f"{di}/METADATA": metadata(ver), f"{di}/WHEEL": wheel_file()}
    lic = licence()
    if lic is not None:
        out[f"{di}/COPYING"] = lic
    return out


# ---- writing --------------------------------------------------------------------------------


def stamp():
    """File times: $SOURCE_DATE_EPOCH when set (reproducible builds), else 1980-01-01,
    zip's earliest, so that two builds of one tree are the same bytes."""
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))
    return max(epoch, 315532800)


def record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}\n"


def write_wheel(directory, files, ver):
    """Zip files ({path: bytes}) and the dist-info's RECORD. @return the wheel's name."""
    name = f"{NAME}-{ver}-{TAG}.whl"
    record = f"{dist_info(ver)}/RECORD"
    when = time.gmtime(stamp())[:6]
    tmp = os.path.join(directory, f".{name}.part")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        lines = []
        for path, data in files.items():
            info = zipfile.ZipInfo(path, when)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
            lines.append(record_line(path, data))
        lines.append(f"{record},,\n")
        info = zipfile.ZipInfo(record, when)
        info.external_attr = 0o644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        z.writestr(info, "".join(lines))
    os.replace(tmp, os.path.join(directory, name))
    return name


def read(path):
    with open(os.path.join(ROOT, path), "rb") as f:
        return f.read()


def package_files(ver):
    files = {p: read(p) for p in modules()}
    files[f"{NAME}/_buildconfig.py"] = buildconfig(ver)
    return files


# ---- the hooks ------------------------------------------------------------------------------


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    ver = version()
    for path, data in meta_files(ver).items():
        os.makedirs(os.path.join(metadata_directory, os.path.dirname(path)), exist_ok=True)
        with open(os.path.join(metadata_directory, path), "wb") as f:
            f.write(data)
    return dist_info(ver)


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    ver = version()
    files = package_files(ver)
    files.update(meta_files(ver))
    return write_wheel(wheel_directory, files, ver)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel holding only batchclient.pth, naming this source directory:
    the package imports from the checkout, edits take effect at once, and
    (no _buildconfig.py there) it finds the checkout's build tree."""
    ver = version()
    files = {f"{NAME}.pth": (ROOT + "\n").encode()}
    files.update(meta_files(ver))
    return write_wheel(wheel_directory, files, ver)


def sdist_members():
    """The source paths of an sdist, relative to ROOT, sorted."""
    out = ["pyproject.toml", "backend/batchclient_backend.py",
           f"{NAME}/{TEMPLATE}"] + modules()
    examples = os.path.join(ROOT, "examples")
    if os.path.isdir(examples):
        out += [f"examples/{n}" for n in os.listdir(examples) if n.endswith(".py")]
    return sorted(out)


def build_sdist(sdist_directory, config_settings=None):
    ver = version()
    base = f"{NAME}-{ver}"
    name = f"{base}.tar.gz"
    files = {p: read(p) for p in sdist_members()}
    files["PKG-INFO"] = metadata(ver)
    lic = licence()
    if lic is not None:
        files["COPYING"] = lic
    tmp = os.path.join(sdist_directory, f".{name}.part")
    with tarfile.open(tmp, "w:gz", format=tarfile.PAX_FORMAT) as t:
        for path in sorted(files):
            info = tarfile.TarInfo(f"{base}/{path}")
            info.size = len(files[path])
            info.mtime = stamp()
            info.mode = 0o755 if path.startswith("examples/") else 0o644
            t.addfile(info, io.BytesIO(files[path]))
    os.replace(tmp, os.path.join(sdist_directory, name))
    return name
