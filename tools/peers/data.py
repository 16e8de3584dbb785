# SPDX-License-Identifier: MIT
"""The peers' data: one set of source files, written out in every loader's
own format by that loader's own writer.

Why this module exists: a comparison of loaders is fair only when each reads
the same bytes, stored the way its users store them. The source is a
directory of one file per sample (sample i is the file %08d), made by
tools/bench/bench-vs-torch.py's generator (half random bytes, half text of a
fixed vocabulary, deterministic from the seed); from it:
  raw      the files themselves (torch's DataLoader and DALI's file reader)
  bpk      `batchd-pack create` with its defaults (batchd)
  wds      WebDataset tars written by webdataset.ShardWriter
  litdata  litData chunks written by litdata.optimize
  mds      Mosaic MDS shards written by streaming.MDSWriter
Shard formats get shards of about SHARD_BYTES (8 MiB): small enough that
a dataset of 160 MB has 20 of them for 1..4 workers to share, large enough
to be read in long runs (their defaults, 64 MB, would leave 3 shards).

Each sample is checked by its fingerprint: the sum of its little-endian
64-bit words mod 2^64. fps.npy holds them in id order; an epoch is right
when the sorted fingerprints it delivered equal the sorted expected ones
(every sample once, its bytes unchanged; random halves make two samples'
sums collide with odds of 2^-64).

A manifest per format records how it was made; prepare() remakes only the
formats whose manifest differs, so a --workdir is reused across runs.
"""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DATA_VERSION = 1          # bump when what a format holds changes
SHARD_BYTES = 8 << 20
FORMATS = ("raw", "bpk", "wds", "litdata", "mds")


def bench_vs_torch():
    """tools/bench/bench-vs-torch.py as a module (its generator, its Dataset over
    files, its argument parsers)."""
    if "bench_vs_torch" in sys.modules:
        return sys.modules["bench_vs_torch"]
    sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))  # its bench_daemon
    spec = importlib.util.spec_from_file_location("bench_vs_torch",
                                                  os.path.join(ROOT, "tools", "bench", "bench-vs-torch.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_vs_torch"] = mod
    spec.loader.exec_module(mod)
    return mod


def fingerprints(a):
    """Per-sample fingerprints of a [batch, size] uint8 array (size a
    multiple of 8): each row's 64-bit little-endian words summed mod 2^64."""
    import numpy as np
    a = np.ascontiguousarray(a)
    return a.view("<u8").sum(axis=1, dtype=np.uint64)


def sample_name(i):
    return f"{i:08d}"


# ---- the source files ---------------------------------------------------------------------------

def make_raw(out, n, size, seed):
    """n samples of size bytes as files out/%08d, the same bytes
    bench-vs-torch.py makes for that seed. @return their fingerprints."""
    import numpy as np
    fps = np.empty(n, np.uint64)
    os.makedirs(out)
    for i, data in enumerate(bench_vs_torch().gen_samples(n, size, seed)):
        fps[i] = fingerprints(np.frombuffer(data, np.uint8).reshape(1, -1))[0]
        with open(os.path.join(out, sample_name(i)), "wb") as f:
            f.write(data)
    return fps


def read_raw(raw, i):
    with open(os.path.join(raw, sample_name(i)), "rb") as f:
        return f.read()


# ---- each loader's own writer -------------------------------------------------------------------

def write_bpk(out, raw, build):
    os.makedirs(out)
    subprocess.run([os.path.join(build, "tools", "batchd-pack"), "create",
                    os.path.join(out, "data.bpk"), raw], check=True, stdout=subprocess.DEVNULL)


def write_wds(out, raw, n):
    import webdataset as wds
    os.makedirs(out)
    with wds.ShardWriter(os.path.join(out, "shard-%06d.tar"), maxsize=SHARD_BYTES,
                         maxcount=1 << 30, verbose=0) as w:
        for i in range(n):
            w.write({"__key__": sample_name(i), "bin": read_raw(raw, i)})


def _litdata_item(arg):
    """litdata.optimize's fn: one input (raw dir, id) to one item. Module
    level, so that optimize's worker processes can import it."""
    raw, i = arg
    return {"id": i, "data": read_raw(raw, i)}


def write_litdata(out, raw, n, workers):
    import litdata
    litdata.optimize(fn=_litdata_item, inputs=[(raw, i) for i in range(n)], output_dir=out,
                     chunk_bytes=SHARD_BYTES, num_workers=workers, mode="overwrite",
                     start_method="fork", verbose=False)


def write_mds(out, raw, n):
    from streaming import MDSWriter
    with MDSWriter(out=out, columns={"id": "int", "data": "bytes"}, compression=None,
                   size_limit=SHARD_BYTES, progress_bar=False) as w:
        for i in range(n):
            w.write({"id": i, "data": read_raw(raw, i)})


# ---- all of them, once --------------------------------------------------------------------------

def prepare(work, n, size, seed, formats, build, log=print):
    """The source files and every format in formats under work, each made
    unless its manifest says it was made from the same source already.
    @return {"n", "size", "fps" (array), format: directory...}."""
    import numpy as np
    if size % 8:
        raise ValueError(f"samples of {size} B: the check needs a multiple of 8 bytes")
    os.makedirs(work, exist_ok=True)
    key = {"version": DATA_VERSION, "samples": n, "size": size, "seed": seed}
    out = {"n": n, "size": size}
    for fmt in ("raw",) + tuple(f for f in formats if f != "raw"):
        d = os.path.join(work, fmt)
        mpath = os.path.join(work, fmt + ".made.json")
        try:
            with open(mpath) as f:
                if json.load(f) == key and os.path.isdir(d):
                    out[fmt] = d
                    continue
        except (OSError, ValueError):
            pass
        shutil.rmtree(d, ignore_errors=True)
        if os.path.exists(mpath):
            os.unlink(mpath)
        t0 = time.perf_counter()
        if fmt == "raw":
            np.save(os.path.join(work, "fps.npy"), make_raw(d, n, size, seed))
        elif fmt == "bpk":
            write_bpk(d, out["raw"], build)
        elif fmt == "wds":
            write_wds(d, out["raw"], n)
        elif fmt == "litdata":
            write_litdata(d, out["raw"], n, min(2, os.cpu_count() or 1))
        elif fmt == "mds":
            write_mds(d, out["raw"], n)
        else:
            raise ValueError(f"no format {fmt}")
        with open(mpath, "w") as f:
            json.dump(key, f)
        log(f"  data: {fmt} written in {time.perf_counter() - t0:.1f} s "
            f"({du(d) / 1e6:.0f} MB in {d})")
        out[fmt] = d
    out["fps"] = np.load(os.path.join(work, "fps.npy"))
    return out


def du(path):
    """Bytes in the files under path (or of the file path)."""
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for dirpath, _, names in os.walk(path):
        for nm in names:
            try:
                total += os.lstat(os.path.join(dirpath, nm)).st_size
            except OSError:
                pass
    return total
