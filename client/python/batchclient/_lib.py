# SPDX-License-Identifier: MIT
"""ctypes bindings to libbatchclient (client/batchclient.h).

Why ctypes: the package must install from Debian packages alone, with no
compiler and no python3-dev; libbatchclient's API is small, plain C and
stable (only bc_* symbols, soname libbatchclient.so.0), so a thin ctypes
layer is all a binding needs. Everything that knows the C types and
signatures lives here; the rest of the package calls `lib()`.

Where the library is found, first hit wins:
  1. $BATCHCLIENT_LIB, a path to the shared object (tests point it at the
     build tree). An explicit choice: when it does not load, that is the
     error, with no fall-back to some other copy;
  2. the path recorded at install time in _buildconfig.py: meson install
     writes the installed library's; a wheel (pip) records none;
  3. the installed library by its soname, through the dynamic loader
     (LD_LIBRARY_PATH, ld.so.cache, /lib and /usr/lib), then
     ctypes.util.find_library('batchclient') where it names another file;
  4. pkg-config's libdir of batchclient.pc (--variable=libdir), for a
     prefix the loader does not search (PKG_CONFIG_PATH=<prefix>/lib/...);
  5. a build tree next to the package's source checkout
     (<src>/build/client/libbatchclient.so.0, for PYTHONPATH=client/python
     and pip install -e).
No copy of the library ships inside the wheel: it must match the daemon it
talks to, which is installed with it. When nothing loads, ImportError
names every place tried and why each failed (its .tried lists them, for
batchclient.check); the loaded library keeps the same as .tried, with .path
and .place of the hit.
"""
import ctypes
import ctypes.util
import glob
import os
import shutil
import subprocess
import threading

BC_EPOCH_END = 1
BC_HOST = -1
SHUFFLE = {"none": 0, "global": 1, "block": 2}

SONAME = "libbatchclient.so.0"


class DecodeOpts(ctypes.Structure):
    """struct bc_decode: an image field decoded in the daemon."""
    _fields_ = [
        ("field", ctypes.c_char_p),
        ("height", ctypes.c_uint32),
        ("width", ctypes.c_uint32),
        ("crop", ctypes.c_int),
        ("resize", ctypes.c_uint32),
        ("scale_min", ctypes.c_float),
        ("scale_max", ctypes.c_float),
        ("ratio_min", ctypes.c_float),
        ("ratio_max", ctypes.c_float),
        ("flip", ctypes.c_float),
        ("nhwc", ctypes.c_bool),
        ("skip_bad", ctypes.c_bool),
    ]


class Source(ctypes.Structure):
    """struct bc_source: one dataset of a mixture and its weight."""
    _fields_ = [
        ("dataset", ctypes.c_char_p),
        ("weight", ctypes.c_double),
    ]


class StreamOpts(ctypes.Structure):
    """struct bc_stream_opts. bc_stream_opts_init() writes struct_size bytes:
    the trailing reserve keeps a newer library's larger struct inside our
    buffer (its fields past ours keep their defaults)."""
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("dataset", ctypes.c_char_p),
        ("batch_size", ctypes.c_uint32),
        ("shuffle", ctypes.c_int),
        ("seed", ctypes.c_uint64),
        ("start_epoch", ctypes.c_uint64),
        ("start_batch", ctypes.c_uint64),
        ("rank", ctypes.c_uint32),
        ("world", ctypes.c_uint32),
        ("drop_last", ctypes.c_bool),
        ("prefetch", ctypes.c_uint32),
        ("window", ctypes.c_uint32),
        ("device", ctypes.c_int),
        ("fields", ctypes.c_char_p),
        ("keys", ctypes.c_bool),
        ("start_sample", ctypes.c_uint64),
        ("batch_stride", ctypes.c_uint32),
        ("decode", DecodeOpts),
        ("sequences", ctypes.c_int),
        ("seq_len", ctypes.c_uint32),
        ("sources", ctypes.POINTER(Source)),
        ("nsources", ctypes.c_uint32),
        ("epoch_samples", ctypes.c_uint64),
        ("_reserve", ctypes.c_uint8 * 512),
    ]


# bc_stream_opts_init's struct_size when the library knows .fields and .keys.
OPTS_FIELDS_SIZE = StreamOpts.keys.offset + ctypes.sizeof(ctypes.c_bool)
# ... and when it knows .start_sample and .batch_stride (elastic resume, workers).
OPTS_ELASTIC_SIZE = StreamOpts.batch_stride.offset + ctypes.sizeof(ctypes.c_uint32)
# ... and when it knows .decode (images decoded in the daemon).
OPTS_DECODE_SIZE = StreamOpts.decode.offset + ctypes.sizeof(DecodeOpts)
# ... and when it knows .sequences and .seq_len (token packs).
OPTS_SEQUENCES_SIZE = StreamOpts.seq_len.offset + ctypes.sizeof(ctypes.c_uint32)
# ... and when it knows .sources (mixtures).
OPTS_SOURCES_SIZE = StreamOpts.epoch_samples.offset + ctypes.sizeof(ctypes.c_uint64)

# enum bc_sequences
SEQUENCES = {"windows": 1, "packed": 2}

# enum bc_field_type
FIELD_TYPES = {1: "bytes", 2: "int64", 3: "float32", 4: "float64", 5: "str"}


class FieldInfo(ctypes.Structure):
    """struct bc_field_info, one per schema field (bc_stream_schema)."""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("type", ctypes.c_uint32),
        ("class_count", ctypes.c_uint32),
        ("classes", ctypes.POINTER(ctypes.c_char_p)),
        ("fixed_size", ctypes.c_uint64),
        ("selected", ctypes.c_bool),
    ]


_p = ctypes.c_void_p
_SIGNATURES = {
    # name: (restype, argtypes)
    "bc_stream_opts_init": (None, [ctypes.POINTER(StreamOpts)]),
    "bc_connect": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_p)]),
    "bc_disconnect": (None, [_p]),
    "bc_client_error": (ctypes.c_char_p, [_p]),
    "bc_status": (ctypes.c_int, [_p, ctypes.POINTER(_p)]),
    "bc_open": (ctypes.c_int, [_p, ctypes.POINTER(StreamOpts), ctypes.POINTER(_p)]),
    "bc_next": (ctypes.c_int, [_p, ctypes.POINTER(_p), ctypes.c_int]),
    "bc_release": (ctypes.c_int, [_p]),
    "bc_batch_epoch": (ctypes.c_uint64, [_p]),
    "bc_batch_index": (ctypes.c_uint64, [_p]),
    "bc_batch_count": (ctypes.c_uint32, [_p]),
    "bc_batch_sample_id": (ctypes.c_uint64, [_p, ctypes.c_uint32]),
    "bc_batch_sample": (ctypes.c_int, [_p, ctypes.c_uint32, ctypes.POINTER(_p),
                                       ctypes.POINTER(ctypes.c_size_t)]),
    "bc_batch_data": (_p, [_p, ctypes.POINTER(ctypes.c_size_t)]),
    "bc_batch_data_writable": (ctypes.c_int, [_p, ctypes.POINTER(_p),
                                              ctypes.POINTER(ctypes.c_size_t)]),
    "bc_batch_field_writable": (ctypes.c_int, [_p, ctypes.c_uint32, ctypes.POINTER(_p),
                                               ctypes.POINTER(ctypes.c_size_t)]),
    "bc_stream_position": (None, [_p, ctypes.POINTER(ctypes.c_uint64),
                                  ctypes.POINTER(ctypes.c_uint64)]),
    "bc_stream_batches_per_epoch": (ctypes.c_uint64, [_p]),
    "bc_stream_samples": (ctypes.c_uint64, [_p]),
    "bc_stream_fingerprint": (ctypes.c_uint64, [_p]),
    "bc_stream_max_sample": (ctypes.c_uint64, [_p]),
    "bc_stream_error": (ctypes.c_char_p, [_p]),
    "bc_stream_device": (ctypes.c_int, [_p]),
    "bc_batch_device_data": (_p, [_p, ctypes.POINTER(ctypes.c_size_t)]),
    "bc_batch_wait_stream": (ctypes.c_int, [_p, _p]),
    "bc_batch_sync": (ctypes.c_int, [_p]),
    "bc_close": (ctypes.c_int, [_p]),
    "bc_strerror": (ctypes.c_char_p, [ctypes.c_int]),
}

# Samples with fields (schema, field arrays, keys). A library older than
# them still serves one-field datasets: these are looked up when present,
# and need_fields() names those missing when a caller asks for fields.
_FIELDS = {
    "bc_stream_schema": (ctypes.POINTER(FieldInfo), [_p, ctypes.POINTER(ctypes.c_uint32)]),
    "bc_stream_field_index": (ctypes.c_int, [_p, ctypes.c_char_p]),
    "bc_batch_field": (ctypes.c_int, [_p, ctypes.c_uint32, ctypes.POINTER(_p),
                                      ctypes.POINTER(ctypes.c_size_t)]),
    "bc_batch_field_sample": (ctypes.c_int, [_p, ctypes.c_uint32, ctypes.c_uint32,
                                             ctypes.POINTER(_p),
                                             ctypes.POINTER(ctypes.c_size_t)]),
    "bc_batch_sample_key": (ctypes.c_int, [_p, ctypes.c_uint32, ctypes.POINTER(_p),
                                           ctypes.POINTER(ctypes.c_size_t)]),
}

# Elastic positions (start_sample) and batch strides: a library older than
# them still resumes at the same world; need_elastic() names what it lacks.
_ELASTIC = {
    "bc_stream_epoch_batches": (ctypes.c_uint64, [_p, ctypes.c_uint64]),
}

# Bad images left out of their batches (Image(on_error="skip")): a library
# older than that fails their batches; need_skips() names what it lacks.
_SKIPS = {
    "bc_batch_skipped": (ctypes.c_uint32, [_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_uint64))]),
}

# Mixtures (Loader([(path, weight), ...])): a library older than them has no
# sources in bc_stream_opts; need_sources() says so.
_SOURCES = {
    "bc_stream_sources": (ctypes.c_uint32, [_p]),
    "bc_stream_source_used": (ctypes.c_int, [_p, ctypes.c_uint32, ctypes.c_uint64,
                                             ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64)]),
}

_lock = threading.Lock()
_lib = None
_libc = None


def _recorded():
    """Step 2: (place, path or None, why not)."""
    place = "the path recorded at install time (batchclient/_buildconfig.py)"
    try:
        from . import _buildconfig
    except ImportError:
        return place, None, "none: this copy of the package was not installed"
    path = getattr(_buildconfig, "LIBRARY", "")
    return place, path or None, "none: installed by pip, which records no path"


def _pkg_config():
    """Step 4: (place, path or None, why not)."""
    place = "pkg-config --variable=libdir batchclient"
    try:
        p = subprocess.run(["pkg-config", "--variable=libdir", "batchclient"],
                           capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        return place, None, f"pkg-config did not run: {e}"
    libdir = p.stdout.strip()
    if p.returncode != 0 or not libdir:
        return place, None, "no batchclient.pc on pkg-config's path"
    return place, os.path.join(libdir, SONAME), ""


def _beside_batchctl():
    """Step 5: (place, path or None, why not). A batchd installed in a private
    prefix whose bin/ is on $PATH (how its batchctl is run): the library in
    that prefix's lib directories, as its programs' RUNPATH finds it."""
    place = "beside batchctl on $PATH (PREFIX/lib*)"
    exe = shutil.which("batchctl")
    if not exe:
        return place, None, "no batchctl on $PATH"
    prefix = os.path.dirname(os.path.dirname(os.path.realpath(exe)))
    found = sorted(glob.glob(os.path.join(prefix, "lib*", SONAME)) +
                   glob.glob(os.path.join(prefix, "lib*", "*", SONAME)))
    if not found:
        return place, None, f"no {SONAME} under {prefix}/lib*"
    return place, found[0], ""


def _build_tree():
    """Step 6: (place, path or None, why not)."""
    place = "the build tree of a source checkout"
    here = os.path.dirname(os.path.abspath(__file__))
    src = os.path.dirname(os.path.dirname(here))          # <src>/client
    if not os.path.exists(os.path.join(src, "batchclient.h")):
        return place, None, f"{here} is not in a batchd checkout"
    return place, os.path.join(os.path.dirname(src), "build", "client", SONAME), ""


def _places():
    """Where to look after $BATCHCLIENT_LIB: (place, path or None, why not),
    in order; a step computes its path only when the earlier ones failed."""
    yield _recorded()
    yield "the dynamic loader (LD_LIBRARY_PATH, ld.so.cache)", SONAME, ""
    found = ctypes.util.find_library("batchclient")
    if found and found != SONAME:
        yield "ctypes.util.find_library('batchclient')", found, ""
    yield _pkg_config()
    yield _beside_batchctl()
    yield _build_tree()


def _try(path, tried, place):
    """ctypes.CDLL(path), or None with the failure appended to tried."""
    if os.sep in path and not os.path.exists(path):
        tried.append(f"{place}: {path} (no such file)")
        return None
    try:
        return ctypes.CDLL(path)
    except OSError as e:
        tried.append(f"{place}: {path} ({e})")
        return None


def _not_found(why, tried, listed=True):
    """The ImportError of a failed search: why, then (listed) the places tried.
    batchclient.check reads .why and .tried (why each place failed, in order)."""
    e = ImportError(why + ("; tried: " + "; ".join(tried) if listed else ""))
    e.why = why
    e.tried = tried
    return e


def _load():
    """Search the places in order. @return (library, path, place, tried): tried
    holds why each earlier place failed. Raises ImportError (with .tried)."""
    tried = []
    env = os.environ.get("BATCHCLIENT_LIB")
    if env:
        so = _try(env, tried, "$BATCHCLIENT_LIB")
        if so is not None:
            return so, env, "$BATCHCLIENT_LIB", tried
        raise _not_found("batchclient: cannot load libbatchclient: $BATCHCLIENT_LIB is set "
                         "but does not load, and an explicit choice has no fall-back: point it "
                         "at a built libbatchclient.so.0 (<build>/client/libbatchclient.so.0) "
                         "or unset it to search the installed places", tried)
    tried.append("$BATCHCLIENT_LIB (not set)")
    for place, path, why in _places():
        if path is None:
            tried.append(f"{place} ({why})")
            continue
        so = _try(path, tried, place)
        if so is not None:
            return so, path, place, tried
    raise _not_found("batchclient: cannot load libbatchclient.so.0: build batchd and install "
                     "it (meson setup build && ninja -C build && meson install -C build), or "
                     "set BATCHCLIENT_LIB to the built <build>/client/libbatchclient.so.0",
                     tried)


def _declare(so, table):
    """Declare the signatures of table's functions that so has. @return the names it lacks."""
    missing = []
    for name, (res, args) in table.items():
        fn = getattr(so, name, None)
        if fn is None:
            missing.append(name)
        else:
            fn.restype = res
            fn.argtypes = args
    return missing


def lib():
    """The loaded library with every signature declared (loaded once)."""
    global _lib, _libc
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            so, path, place, tried = _load()
            for name, (res, args) in _SIGNATURES.items():
                try:
                    fn = getattr(so, name)
                except AttributeError:
                    raise _not_found(f"batchclient: {path} lacks {name}: not libbatchclient, "
                                     "or too old", tried + [f"{place}: {path} (lacks {name})"],
                                     listed=False) from None
                fn.restype = res
                fn.argtypes = args
            so.missing = _declare(so, _FIELDS)
            so.missing_elastic = _declare(so, _ELASTIC)
            so.missing_skips = _declare(so, _SKIPS)
            so.missing_sources = _declare(so, _SOURCES)
            so.path = path
            so.place = place
            so.tried = tried
            _libc = ctypes.CDLL(None)
            _libc.free.argtypes = [_p]
            _libc.free.restype = None
            _lib = so
    return _lib


def has_fields():
    """Whether the loaded library serves fields (schema, field arrays, keys)."""
    return not lib().missing


def need_fields(what):
    """The library, or NotImplementedError when it predates fields."""
    so = lib()
    if so.missing:
        raise NotImplementedError(f"{what} needs a libbatchclient with fields; {so.path} lacks "
                                  f"{', '.join(so.missing)}: install a newer batchd")
    return so


def _need(missing, what, able):
    """The library, or NotImplementedError naming what `able` needs that it lacks."""
    so = lib()
    if getattr(so, missing):
        raise NotImplementedError(f"{what} needs a libbatchclient {able}; {so.path} lacks "
                                  f"{', '.join(getattr(so, missing))}: install a newer batchd")
    return so


def need_elastic(what):
    """The library, or NotImplementedError when it predates start_sample and batch_stride."""
    return _need("missing_elastic", what, "with elastic positions")


def need_skips(what):
    """The library, or NotImplementedError when it cannot leave bad images out."""
    return _need("missing_skips", what, "that leaves bad images out")


def need_sources(what):
    """The library, or NotImplementedError when it cannot read mixtures."""
    return _need("missing_sources", what, "that reads mixtures of sources")


def free(ptr):
    """free(3) for memory libbatchclient hands to its caller (bc_status)."""
    lib()
    _libc.free(ptr)


def text(b):
    """A C string from the library as str ('' for NULL)."""
    return b.decode("utf-8", "replace") if b else ""
