# SPDX-License-Identifier: MIT
"""The tokens workload's data: real text this machine ships, tokenized once
with a byte-level BPE trained on it, as nanoGPT-style token files, and
written out in each loader's own format by that loader's own writer.

Why this module exists: a comparison of LLM-pretraining loaders needs the
shape of real pretraining data (documents of every length, several
sources of different character, an end-of-document id) in the layout
each loader's users write, and a way to check that an epoch delivered
every window once. Nothing is downloaded: the text is what Debian and the
tools installed here put under /usr (CORPUS says where), the tokenizer is
trained here with the `tokenizers` package.

Three sources, each file one document (gzipped files read whole,
members of the JDK's src.zip one each), exact duplicates dropped (the
first in path order kept), files that are not UTF-8 text or hold a NUL
skipped, none cut or repeated:
  web   prose: Debian's /usr/share/doc (READMEs, changelogs, copyright
        files, HTML and Markdown manuals), the man pages (troff source,
        every language), info manuals, Vim's help, CMake's and LLVM's
        reStructuredText, Perl's POD
  code  source: C/C++ headers (/usr/include, LLVM's, GCC's), Python
        (Debian's dist-packages and stdlib, the Google Cloud SDK's), Perl
        modules, Free Pascal's sources, the JDK's src.zip (one JDK: the
        newest), JavaScript (minified files left out), Vim script, CMake
        modules, Tcl, Ada
  data  structured data and tables: JSON and YAML (the Cloud SDK's API
        descriptions, botocore's service models, iso-codes), locale
        definitions and charmaps (/usr/share/i18n), Unicode's tables
        (Perl's unicore), time-zone tables, XML catalogs, SQL, logs
There is no mathematics corpus on the machine to speak of, so the third
source is data rather than math.

Tokenizer: a byte-level BPE (tokenizers.ByteLevelBPETokenizer, GPT-2's
pre-tokenizer) of VOCAB - 1 ids trained on a sample of SAMPLE_BYTES per
source (documents picked by their hash); id VOCAB - 1 is the end of a
document (EOS), appended after each one and produced by nothing else.
Each source's documents, in an order shuffled once (seed), are written
end to end as little-endian uint16 ids: SOURCE.bin, as nanoGPT's
prepare.py writes train.bin.

Formats, each from those ids (prepare_formats):
  bpk      `batchd-pack create SOURCE.bpk --tokens uint16 --eos EOS
           SOURCE.bin` (batchd)
  litdata  litdata.optimize(fn yielding each document's ids as a uint16
           tensor, item_loader=TokensLoader(), chunk_size=2049 * 8012
           tokens: litData's README recipe for LLM pretraining)
  mds      streaming.MDSWriter shards of the .bin's windows of seq_len + 1
           tokens (column `tokens`, ndarray:uint16:ROW), the tail left out,
           the writer's default shard size (64 MiB), no compression
The memmap peers read the .bin itself.

Windows: row k of a source is ids [k*ROW, (k+1)*ROW) of its .bin (ROW =
seq_len + 1), the last len % ROW ids in none: batchd's `windows`
sequences, the MDS samples and the memmap permutation's windows. A window
is checked by its fingerprint (fingerprints()): the sum of its ids times
fixed odd 64-bit weights mod 2^64, so that a change of any one id always
changes it. litData's TokensLoader cuts its own windows, chunk by chunk
(each chunk's tail left out); their fingerprints are read from its chunk
files (litdata_fps).
"""
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile

import data

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VERSION = 1               # bump when what the corpus or a format holds changes
SOURCES = ("web", "code", "data")
# The whole corpus as one source: the three .bin files end to end, in
# SOURCES' order (tokens-cold: a pack larger than the page cache it gets).
ALL = "all"
VOCAB = 32768             # ids 0 .. VOCAB-2 from the BPE, VOCAB-1 the end of a document
SAMPLE_BYTES = 24 << 20   # text per source the tokenizer is trained on
MAX_DOC = 32 << 20        # a file larger than this is left out (and counted)
LIT_CHUNK_TOKENS = 2049 * 8012   # litData's README: tokens a chunk for TokensLoader
MDS_SHARD = 1 << 26              # MDSWriter's default size_limit
FP_SEED = 0x62617463686421

# Directories walked (globs), in this order. A path under one of SKIP is
# left out: the Cloud SDK's bundled CPython is another copy of the
# standard library, moment-timezone ships every old release of the same
# time-zone database (latest.json is kept), the package lists are lists of
# names, not text.
CORPUS = (
    "/usr/share/doc", "/usr/share/man", "/usr/share/info", "/usr/share/vim",
    "/usr/share/cmake-*", "/usr/share/perl", "/usr/share/perl5", "/usr/lib/x86_64-linux-gnu/perl*",
    "/usr/include", "/usr/lib/python3", "/usr/lib/python3.*", "/usr/share/fpcsrc",
    "/usr/share/javascript", "/usr/lib/node_modules", "/usr/lib/llvm-*", "/usr/lib/gcc",
    "/usr/lib/google-cloud-sdk", "/usr/share/tcltk", "/usr/lib/git-core", "/usr/share/i18n",
    "/usr/share/iso-codes", "/usr/share/xml", "/usr/share/postgresql", "/usr/share/zoneinfo",
    "/usr/share/publicsuffix", "/usr/share/misc",
)
SKIP = ("/usr/lib/google-cloud-sdk/platform/bundledpythonunix/",)
JDK_SRC = "/usr/lib/jvm/*/lib/src.zip"

CODE_EXT = {
    "py", "pyi", "pyx", "pxd", "pl", "pm", "t", "h", "hh", "hpp", "hxx", "c", "cc", "cpp",
    "cxx", "inc", "def", "td", "pas", "pp", "lpr", "dpr", "js", "mjs", "cjs", "ts", "java",
    "vim", "cmake", "sh", "bash", "zsh", "tcl", "tk", "el", "lua", "rb", "go", "rs", "adb",
    "ads", "php", "s", "asm", "m4", "awk", "sed", "mk", "f", "f90", "scm", "lisp", "ph", "xs",
    "bat", "ps1", "cs", "kt", "scala", "swift", "m", "mm", "r", "jl", "hs", "ml", "d", "v",
    "sv", "vhd", "proto", "thrift", "gradle", "groovy", "cmd", "tmpl",
}
DATA_EXT = {
    "json", "jsonl", "yaml", "yml", "csv", "tsv", "xml", "xsd", "dtd", "sql", "dat", "tab",
    "ids", "rsj", "log", "zi", "list", "toml", "ini", "cfg", "conf", "properties", "svg",
    "catalog", "ent",
}
PROSE_EXT = {
    "", "txt", "md", "markdown", "rst", "html", "htm", "xhtml", "pod", "tex", "texi", "info",
    "text", "rdoc", "adoc", "asciidoc", "org", "1", "2", "3", "4", "5", "6", "7", "8", "9",
    "readme", "news", "changes", "changelog", "copyright", "faq", "todo", "authors", "thanks",
    "old", "debian",
}
LEAVE_OUT = {"ps", "pdf", "eps", "pem", "crt", "key", "mo", "po", "pot", "map", "lock", "sum",
             "patch", "diff"}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---- the corpus ----------------------------------------------------------------------------------

def classify(path):
    """The source a file of the corpus goes to, or None (left out)."""
    name = os.path.basename(path).lower()
    if name.endswith(".gz"):
        name = name[:-3]
    ext = name.rsplit(".", 1)[-1] if "." in name else ""
    if path.startswith(("/usr/share/man/", "/usr/share/info/")):
        return "web"
    if path.startswith("/usr/share/i18n/") or "/unicore/" in path:
        return "data"
    if path.startswith("/usr/share/zoneinfo/"):
        return "data" if ext in ("tab", "zi", "list") else None
    if "/moment-timezone/data/" in path:
        return "data" if name == "latest.json" else None
    if ext in LEAVE_OUT or name.endswith((".min.js", ".min.css")):
        return None
    if ext in CODE_EXT:
        return "code"
    if ext in DATA_EXT:
        return "data"
    if ext in PROSE_EXT and path.startswith(("/usr/share/doc/", "/usr/share/vim/",
                                             "/usr/share/perl", "/usr/lib/llvm-",
                                             "/usr/share/cmake-")):
        return "web"
    if ext in ("rst", "md", "txt", "html", "pod") and not path.startswith("/usr/include/"):
        return "web"
    return None


def text_of(raw):
    """raw's text when it is UTF-8 text without a NUL, else None."""
    if b"\0" in raw:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


_ZIPS = {}


def read_doc(doc):
    """The bytes of a corpus document: (path,) a file (gunzipped when
    .gz) or (zip path, member)."""
    if len(doc) == 2:
        if doc[0] not in _ZIPS:        # opened once: its directory is read at open
            _ZIPS[doc[0]] = zipfile.ZipFile(doc[0])
        return _ZIPS[doc[0]].read(doc[1])
    if doc[0].endswith(".gz"):
        with gzip.open(doc[0], "rb") as f:
            return f.read(MAX_DOC + 1)
    with open(doc[0], "rb") as f:
        return f.read(MAX_DOC + 1)


def walk():
    """Every candidate document, in a fixed order: (source, doc) with doc
    (path,) or (src.zip, member)."""
    import glob
    roots = []
    for g in CORPUS:
        roots += sorted(p for p in glob.glob(g) if os.path.isdir(p) and not os.path.islink(p))
    for root in roots:
        for dirpath, dirs, names in os.walk(root):
            dirs.sort()
            if (dirpath + "/").startswith(SKIP):
                dirs[:] = []
                continue
            for nm in sorted(names):
                p = os.path.join(dirpath, nm)
                src = classify(p)
                if src and not os.path.islink(p) and os.path.isfile(p):
                    yield src, (p,)
    jdks = sorted((p for p in glob.glob(JDK_SRC) if os.path.isfile(p)), key=os.path.getmtime)
    if jdks:     # one JDK: the others' sources are mostly the same files at other versions
        with zipfile.ZipFile(jdks[-1]) as z:
            for m in sorted(z.namelist()):
                if m.endswith(".java"):
                    yield "code", (jdks[-1], m)


def gather(log=log):
    """The corpus: per source its documents (deduplicated) and a training
    sample for the tokenizer. @return (docs {source: [doc]}, stats,
    sample {source: [text]})."""
    seen = set()
    docs = {s: [] for s in SOURCES}
    stats = {s: {"documents": 0, "bytes": 0} for s in SOURCES}
    left = {"not_text": 0, "duplicate": 0, "too_large": 0, "unreadable": 0, "empty": 0}
    sample = {s: [] for s in SOURCES}
    room = {s: SAMPLE_BYTES for s in SOURCES}
    t0 = time.perf_counter()
    for k, (src, doc) in enumerate(walk()):
        try:
            raw = read_doc(doc)
        except (OSError, zipfile.BadZipFile, EOFError, gzip.BadGzipFile):
            left["unreadable"] += 1
            continue
        if len(raw) > MAX_DOC:
            left["too_large"] += 1
            continue
        if not raw.strip():
            left["empty"] += 1
            continue
        h = hashlib.blake2b(raw, digest_size=16).digest()
        if h in seen:
            left["duplicate"] += 1
            continue
        seen.add(h)
        text = text_of(raw)
        if text is None:
            left["not_text"] += 1
            continue
        docs[src].append(doc)
        stats[src]["documents"] += 1
        stats[src]["bytes"] += len(raw)
        # the sample: about 1 in 8 documents by hash, up to the source's room
        if h[0] < 32 and room[src] > 0:
            sample[src].append(text)
            room[src] -= len(raw)
        if k % 20000 == 0 and k:
            log(f"  corpus: {k} files looked at, {sum(v['bytes'] for v in stats.values()) / 1e6:.0f} "
                f"MB kept, {time.perf_counter() - t0:.0f} s")
    return docs, {"sources": stats, "left_out": left, "walk_s": time.perf_counter() - t0}, sample


def train_tokenizer(sample, path):
    """A byte-level BPE of VOCAB - 1 ids trained on sample's texts, saved
    to path. @return the tokenizer (a tokenizers.Tokenizer)."""
    from tokenizers import ByteLevelBPETokenizer
    tok = ByteLevelBPETokenizer(add_prefix_space=False)
    texts = [t for s in SOURCES for t in sample[s]]
    tok.train_from_iterator(texts, vocab_size=VOCAB - 1, min_frequency=2, show_progress=False)
    if tok.get_vocab_size() > VOCAB - 1:
        raise RuntimeError(f"the tokenizer has {tok.get_vocab_size()} ids, expected <= {VOCAB - 1}")
    tok.save(path)
    from tokenizers import Tokenizer
    return Tokenizer.from_file(path)     # the plain Tokenizer: encode_batch_fast (no offsets)


def encode_source(tok, docs, eos, out, seed, log=log):
    """docs encoded in an order shuffled by seed, each followed by eos,
    to out as uint16. @return (tokens, documents)."""
    import numpy as np
    order = np.random.default_rng(seed).permutation(len(docs))
    n = 0
    tmp = out + ".tmp"
    t0 = time.perf_counter()
    with open(tmp, "wb") as f:
        for lo in range(0, len(order), 256):
            texts = [text_of(read_doc(docs[i])) for i in order[lo:lo + 256]]
            for enc in tok.encode_batch_fast(texts):
                ids = np.asarray(enc.ids, np.uint16)
                f.write(ids.tobytes())
                f.write(np.uint16(eos).tobytes())
                n += len(ids) + 1
            if lo % (256 * 64) == 0 and lo:
                log(f"  {os.path.basename(out)}: {lo} of {len(order)} documents, {n / 1e6:.0f}M "
                    f"tokens, {time.perf_counter() - t0:.0f} s")
    os.replace(tmp, out)
    return n, len(docs)


def corpus_key(seed):
    return {"version": VERSION, "vocab": VOCAB, "sample_bytes": SAMPLE_BYTES, "seed": seed,
            "max_doc": MAX_DOC}


def prepare_corpus(work, seed=0, log=log):
    """SOURCE.bin for every source and the tokenizer under work, made once:
    corpus.json records how, and a later call with the same key reuses
    them without looking at the corpus again. @return corpus.json's dict
    (eos, per source tokens and documents, ...)."""
    os.makedirs(work, exist_ok=True)
    meta = os.path.join(work, "corpus.json")
    key = corpus_key(seed)
    try:
        with open(meta) as f:
            m = json.load(f)
        if m["key"] == key and all(os.path.exists(os.path.join(work, s + ".bin"))
                                   for s in SOURCES):
            return m
    except (OSError, ValueError, KeyError):
        pass
    t0 = time.perf_counter()
    log("  tokens: gathering the corpus (tokens_data.CORPUS)")
    docs, stats, sample = gather(log)
    log(f"  tokens: corpus in {stats['walk_s']:.0f} s: " + ", ".join(
        f"{s} {v['documents']} documents, {v['bytes'] / 1e6:.0f} MB"
        for s, v in stats["sources"].items()) + f"; left out {stats['left_out']}")
    t1 = time.perf_counter()
    tok = train_tokenizer(sample, os.path.join(work, "tokenizer.json"))
    eos = tok.get_vocab_size()
    stats["tokenizer"] = {"kind": "tokenizers.ByteLevelBPETokenizer", "ids": eos + 1,
                          "eos": eos, "trained_on_bytes": {s: sum(len(t.encode()) for t in sample[s])
                                                          for s in SOURCES},
                          "train_s": time.perf_counter() - t1}
    log(f"  tokens: tokenizer trained in {time.perf_counter() - t1:.0f} s, {eos} ids + EOS")
    del sample
    for i, s in enumerate(SOURCES):
        t1 = time.perf_counter()
        n, d = encode_source(tok, docs[s], eos, os.path.join(work, s + ".bin"), seed + i, log)
        st = stats["sources"][s]
        st.update(tokens=n, bytes_per_token=st["bytes"] / max(1, n - d),
                  encode_s=time.perf_counter() - t1)
        log(f"  tokens: {s}.bin: {n:,} tokens, {d:,} documents, "
            f"{st['bytes_per_token']:.2f} bytes of text a token, {st['encode_s']:.0f} s")
    m = {"key": key, "eos": eos, "dtype": "uint16", "made_s": time.perf_counter() - t0, **stats}
    with open(meta, "w") as f:
        json.dump(m, f, indent=1)
    return m


# ---- windows and their fingerprints -------------------------------------------------------------

def fp_weights(row):
    """row odd 64-bit weights, fixed."""
    import numpy as np
    w = np.random.default_rng(FP_SEED).integers(0, 1 << 63, size=row, dtype=np.uint64)
    return w * np.uint64(2) + np.uint64(1)


def fingerprints(a, w):
    """Per-row fingerprints of an integer array [rows, len(w)]: sum of ids
    times w mod 2^64."""
    import numpy as np
    return np.asarray(a).astype(np.uint64) @ w


def window_fps(tokens, row, w, step=4096):
    """Fingerprints of the windows of a token array (rows of row ids, the
    tail left out)."""
    import numpy as np
    n = len(tokens) // row
    out = np.empty(n, np.uint64)
    rows = np.asarray(tokens[:n * row]).reshape(n, row)
    for lo in range(0, n, step):
        out[lo:lo + step] = fingerprints(rows[lo:lo + step], w)
    return out


def concat_bins(work, log=log):
    """ALL.bin: the sources' .bin files end to end (SOURCES' order), made
    once (remade when its size is not their sum). @return its path."""
    parts = [os.path.join(work, s + ".bin") for s in SOURCES]
    out = os.path.join(work, ALL + ".bin")
    want = sum(os.path.getsize(p) for p in parts)
    if os.path.exists(out) and os.path.getsize(out) == want:
        return out
    t0 = time.perf_counter()
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        for p in parts:
            with open(p, "rb") as src:
                shutil.copyfileobj(src, f, 8 << 20)
    os.replace(tmp, out)
    log(f"  tokens: {ALL}.bin, {' + '.join(SOURCES)}: {want / 1e6:.0f} MB in "
        f"{time.perf_counter() - t0:.1f} s")
    return out


def bin_tokens(path):
    import numpy as np
    return np.memmap(path, dtype=np.uint16, mode="r")


# ---- each loader's own writer ------------------------------------------------------------------

def write_bpk(out, src_bin, eos, build):
    os.makedirs(out, exist_ok=True)
    name = os.path.basename(src_bin)[:-4] + ".bpk"
    argv = [os.path.join(build, "tools", "batchd-pack"), "create", os.path.join(out, name),
            "--tokens", "uint16", "--eos", str(eos), src_bin]
    p = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode:
        raise RuntimeError(f"{' '.join(argv[1:3])} ... exited {p.returncode}: "
                           + " ".join(p.stderr.strip().splitlines()[:2]))


def doc_groups(src_bin, eos, groups):
    """The documents of a .bin as `groups` ranges of whole documents:
    [(path, first id, end id)], for litdata.optimize's inputs."""
    import numpy as np
    t = bin_tokens(src_bin)
    ends = np.flatnonzero(t == eos) + 1
    cuts = [0] + [int(ends[min(len(ends) - 1, (len(ends) * g) // groups)]) for g in range(1, groups)]
    cuts.append(len(t))
    return [(src_bin, a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


def lit_documents(arg):
    """litdata.optimize's fn: a range of whole documents to each document's
    ids (EOS included) as a uint16 tensor. Module level, so that
    optimize's worker processes can import it."""
    import numpy as np
    import torch
    path, a, b = arg
    t = bin_tokens(path)
    part = np.asarray(t[a:b])
    ends = np.flatnonzero(part == lit_documents.eos) + 1
    lo = 0
    for e in ends:
        yield torch.from_numpy(part[lo:e].copy())
        lo = e


def write_litdata(out, src_bin, eos, workers):
    import litdata
    from litdata import TokensLoader
    lit_documents.eos = eos
    litdata.optimize(fn=lit_documents, inputs=doc_groups(src_bin, eos, 64), output_dir=out,
                     chunk_size=LIT_CHUNK_TOKENS, item_loader=TokensLoader(),
                     num_workers=workers, mode="overwrite", start_method="fork", verbose=False)


def litdata_fps(d, row, w):
    """The fingerprints of the windows litData's TokensLoader(block_size=
    row) serves from the chunks under d: each chunk's ids cut into rows,
    its tail left out (item_loader.py: TokensLoader.generate_intervals,
    the header skipped as _load_chunk skips it)."""
    import numpy as np
    with open(os.path.join(d, "index.json")) as f:
        idx = json.load(f)
    dtype = np.dtype(np.uint16)
    out = []
    for c in idx["chunks"]:
        off = (1 + c["chunk_size"] + 1) * 4
        t = np.memmap(os.path.join(d, c["filename"]), dtype=dtype, mode="r", offset=off,
                      shape=(c["dim"],))
        out.append(window_fps(t, row, w))
    return np.concatenate(out) if out else np.empty(0, np.uint64)


def write_mds(out, src_bin, row):
    import numpy as np
    from streaming import MDSWriter
    t = bin_tokens(src_bin)
    n = len(t) // row
    with MDSWriter(out=out, columns={"tokens": f"ndarray:uint16:{row}"}, compression=None,
                   size_limit=MDS_SHARD, progress_bar=False) as wr:
        for k in range(n):
            wr.write({"tokens": np.asarray(t[k * row:(k + 1) * row])})


# ---- all of them, once --------------------------------------------------------------------------

FORMATS = ("bin", "bpk", "litdata", "mds")


def prepare_formats(work, row, formats, build, seed=0, log=log, sources=SOURCES):
    """The corpus (prepare_corpus) and, per source of sources (SOURCES, or
    ALL: the three end to end), every format of formats and the
    fingerprints of its windows, each made unless its manifest says it
    was made from the same corpus already. A writer that fails loses only
    its format: its error is in "failed".
    @return {"corpus": corpus.json's dict, "row", "sources": {source:
    {"bin", "fps", "windows", format: path...}}, "failed": {format: why}}."""
    import numpy as np
    corpus = prepare_corpus(work, seed, log)
    eos = corpus["eos"]
    w = fp_weights(row)
    out = {"corpus": corpus, "row": row, "sources": {}, "failed": {}}
    base = {"corpus": corpus["key"], "eos": eos,
            "tokens": {s: corpus["sources"][s]["tokens"] for s in SOURCES}}
    for s in sources:
        src_bin = concat_bins(work, log) if s == ALL else os.path.join(work, s + ".bin")
        ent = {"bin": src_bin}
        fps = os.path.join(work, f"{s}.row{row}.fps.npy")
        if not os.path.exists(fps):
            np.save(fps, window_fps(bin_tokens(src_bin), row, w))
        ent["fps"] = fps
        ent["windows"] = len(bin_tokens(src_bin)) // row
        ent["tokens"] = len(bin_tokens(src_bin))
        out["sources"][s] = ent
    for fmt in formats:
        if fmt == "bin":
            continue
        if fmt in out["failed"]:
            continue
        # bpk: one directory of SOURCE.bpk (the daemon's root); the others a
        # directory per source; MDS's samples are windows, so per row too.
        tag = f"{fmt}.row{row}" if fmt == "mds" else fmt
        key = dict(base, row=row) if fmt == "mds" else base
        for s in sources:
            d = os.path.join(work, tag) if fmt == "bpk" else os.path.join(work, tag, s)
            mpath = os.path.join(work, f"{tag}-{s}.made.json")
            target = os.path.join(d, s + ".bpk") if fmt == "bpk" else d
            try:
                with open(mpath) as f:
                    if json.load(f) == key and os.path.exists(target):
                        out["sources"][s][fmt] = target
                        continue
            except (OSError, ValueError):
                pass
            if fmt != "bpk":
                shutil.rmtree(d, ignore_errors=True)
            elif os.path.exists(target):
                os.unlink(target)
            t0 = time.perf_counter()
            try:
                if fmt == "bpk":
                    write_bpk(d, out["sources"][s]["bin"], eos, build)
                elif fmt == "litdata":
                    write_litdata(d, out["sources"][s]["bin"], eos, min(2, os.cpu_count() or 1))
                elif fmt == "mds":
                    write_mds(d, out["sources"][s]["bin"], row)
                else:
                    raise ValueError(f"no format {fmt}")
            except Exception as e:        # one writer's failure loses only its format
                out["failed"][fmt] = f"writing {s}: {type(e).__name__}: {e}"
                log(f"  tokens: {fmt} of {s} FAILED: {out['failed'][fmt]}")
                break
            with open(mpath, "w") as f:
                json.dump(key, f)
            log(f"  tokens: {fmt} of {s} written in {time.perf_counter() - t0:.1f} s "
                f"({data.du(target) / 1e6:.0f} MB in {target})")
            out["sources"][s][fmt] = target
        if fmt == "litdata" and fmt not in out["failed"]:
            for s in sources:
                p = os.path.join(work, f"litdata-{s}.row{row}.fps.npy")
                if not os.path.exists(p) or os.path.getmtime(p) < os.path.getmtime(
                        os.path.join(out["sources"][s]["litdata"], "index.json")):
                    np.save(p, litdata_fps(out["sources"][s]["litdata"], row, w))
                out["sources"][s]["litdata_fps"] = p
    return out


def main():
    import argparse
    ap = argparse.ArgumentParser(description="the tokens workload's corpus and formats")
    ap.add_argument("--workdir", required=True, help="where the .bin files and formats go")
    ap.add_argument("--build", default="build", help="batchd's build (batchd-pack)")
    ap.add_argument("--formats", default="bin", help=f"comma-separated of {','.join(FORMATS)}")
    ap.add_argument("--sources", default=",".join(SOURCES),
                    help=f"comma-separated of {','.join(SOURCES + (ALL,))} (default the three)")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    out = prepare_formats(os.path.abspath(a.workdir), a.seq_len + 1, a.formats.split(","),
                          os.path.abspath(a.build), a.seed, sources=a.sources.split(","))
    json.dump(out, sys.stdout, indent=1, default=str)
    print()
    return 1 if out["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
