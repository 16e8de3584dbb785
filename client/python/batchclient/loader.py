# SPDX-License-Identifier: MIT
"""Loader: a stream of batches from batchd, as a Python iterable of epochs.

Why this module exists: a trainer wants `for batch in loader:` to be one
epoch, `set_epoch` and `state_dict` to behave like PyTorch's
DistributedSampler and checkpointing, and rank/world to come from torchrun
or Slurm. libbatchclient gives a stream of (epoch, batch) positions that
can be reopened anywhere; this module maps one onto the other.

Positions: the loader's position is the (epoch, batch) that the next
iteration step yields, for this rank. A new iteration runs from that
position to the end of its epoch: after a full epoch that is the start of
the next epoch; after a `break` it is the rest of the interrupted epoch.
set_epoch(e) moves it to (e, 0); load_state_dict() to the saved position.
Moving it reopens the stream only when the stream is not already there
(after epoch e the stream stands at (e + 1, 0), with the next batches
already staged, so the usual set_epoch loop never reopens).

Elastic resume: ranks stripe each epoch's global order (batch j of rank r
is positions j*B*W + r*B .. + B of it), so after k steps taken in
lockstep, as DDP takes them, every rank has consumed the same prefix of
the order, k*B*W samples long. state_dict() records that count ("sample"),
so a state saved at one world size (and batch size) resumes at another:
the new ranks share the rest of the epoch from there, every sample once
(plus the padding of the tail), and later epochs are those of a fresh run
at the new world size. Where the count is a whole number of this loader's
global batches (always, at the same world and batch size) that is batch
k of the full epoch, an ordinary start_batch; otherwise the stream starts
the epoch's schedule at that sample (libbatchclient's start_sample), its
batches counted from there, and that epoch has fewer of them
(epoch_batches()).

Thread rules: a Loader and its batches belong to one thread at a time.
Finalizers that close a stream whose views outlived Loader.close() may run
in any thread; they touch only that closed stream.
"""
import ctypes
import dataclasses
import errno
import gc
import math
import os
import threading
import time
import weakref

from . import _lib, image, schema
from .batch import Batch
from .errors import (BatchdError, BatchError, DaemonGoneError, PinnedBatchError,
                     connect_error, from_code, open_error, remote_error)

STATE_VERSION = 1
_WAIT_SLICE_MS = 200   # bc_next waits in slices so that Ctrl-C and timeouts work


class WaitTimeout(BatchdError, TimeoutError):
    """No batch arrived within the Loader's timeout."""


def rank_and_world(rank=None, world=None):
    """The data-parallel (rank, world) a Loader uses: the arguments when
    given, else $RANK / $WORLD_SIZE (torchrun), else $SLURM_PROCID /
    $SLURM_NTASKS (srun), else (0, 1). Raises ValueError on a bad value."""
    def pick(value, names, default, what):
        if value is not None:
            return _int(value, what), what
        for n in names:
            v = os.environ.get(n, "").strip()
            if v:
                return _int(v, f"${n}"), f"${n}"
        return default, "default"

    r, rsrc = pick(rank, ("RANK", "SLURM_PROCID"), 0, "rank")
    w, wsrc = pick(world, ("WORLD_SIZE", "SLURM_NTASKS"), 1, "world")
    if w < 1 or w > 0xFFFFFFFF:
        raise ValueError(f"world {w} (from {wsrc}) must be 1 .. 2^32-1")
    if r < 0 or r >= w:
        raise ValueError(f"rank {r} (from {rsrc}) must be in 0 .. world-1 = {w - 1} "
                         f"(world from {wsrc})")
    return r, w


def _int(v, what):
    try:
        if isinstance(v, bool):
            raise ValueError
        return int(v)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: {v!r} is not an integer") from None


def _device(device):
    """BC_HOST or a CUDA ordinal from None / 'cpu' / N / 'cuda' / 'cuda:N' / torch.device."""
    if device is None:
        return _lib.BC_HOST
    if hasattr(device, "type") and hasattr(device, "index"):   # torch.device
        device = device.type if device.index is None else f"{device.type}:{device.index}"
    if isinstance(device, str):
        d = device.strip().lower()
        if d == "cpu":
            return _lib.BC_HOST
        if d == "cuda":
            return 0
        if d.startswith("cuda:") and d[5:].isdigit():
            return int(d[5:])
        raise ValueError(f"device {device!r}: use None, 'cpu', a CUDA ordinal, or 'cuda:N'")
    n = _int(device, "device")
    if n < -1 or n > 255:
        raise ValueError(f"device {n}: CUDA ordinals are 0 .. 255 (-1 = host)")
    return n


def _fields(fields):
    """None (every field) or a tuple of field names."""
    if fields is None:
        return None
    if isinstance(fields, str):
        fields = [fields]
    try:
        names = tuple(fields)
    except TypeError:
        raise ValueError(f"fields {fields!r}: give a list of field names (or None for all)") \
            from None
    if not names:
        raise ValueError("fields=[] selects no field: name at least one (None means all)")
    for n in names:
        if not isinstance(n, str) or not n or "," in n or "\0" in n:
            raise ValueError(f"fields: {n!r} is not a field name (names are non-empty, with no "
                             "',' or NUL; give a list such as ['jpg', 'cls'])")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"fields: {', '.join(map(repr, dup))} named more than once")
    return names


def _shuffle(shuffle):
    if shuffle is True:
        return "global"
    if shuffle is False or shuffle is None:
        return "none"
    s = str(shuffle).lower()
    if s not in _lib.SHUFFLE:
        raise ValueError(f"shuffle {shuffle!r}: use 'none', 'global' or 'block'")
    return s


# ---- the connection and one stream ---------------------------------------------------------


class _Client:
    """One bc_client, shared by a loader and the streams it opened; it is
    disconnected when the last of them lets go (streams must close first)."""

    def __init__(self, socket):
        L = _lib.lib()
        h = ctypes.c_void_p()
        path = os.fspath(socket) if socket is not None else None
        r = L.bc_connect(path.encode() if path is not None else None, ctypes.byref(h))
        if r < 0:
            raise connect_error(r, path or os.environ.get("BATCHD_SOCKET") or "the default socket")
        self.h = h.value
        self._users = 1
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def error(self):
        return _lib.text(_lib.lib().bc_client_error(self.h))

    def ref(self):
        with self._lock:
            self._users += 1

    def unref(self):
        with self._lock:
            self._users -= 1
            h = None
            if self._users == 0:
                h, self.h = self.h, None
        # A forked child shares the parent's socket: only the parent may close it.
        if h and os.getpid() == self._pid:
            _lib.lib().bc_disconnect(h)


class _Stream:
    """One bc_stream and the batches taken from it that were not given back."""

    def __init__(self, client, cfg, place, stride=1):
        """place: (epoch, batch, start_sample) to start from; stride: serve
        every stride-th batch from there (DataLoader workers)."""
        start_epoch, start_batch, start_sample = place
        L = _lib.lib()
        o = _lib.StreamOpts()
        L.bc_stream_opts_init(ctypes.byref(o))
        if o.struct_size > ctypes.sizeof(o):
            raise BatchdError(errno.EOVERFLOW, f"libbatchclient's bc_stream_opts is "
                              f"{o.struct_size} bytes, more than this binding knows")
        if cfg["sources"] is None:
            o.dataset = cfg["dataset"].encode()
        else:
            what = f"a mixture of {len(cfg['sources'])} sources"
            _lib.need_sources(what)
            if o.struct_size < _lib.OPTS_SOURCES_SIZE:
                raise BatchdError(errno.EOVERFLOW, f"{what}: libbatchclient's bc_stream_opts "
                                  f"({o.struct_size} bytes) has no sources member")
            srcs = (_lib.Source * len(cfg["sources"]))()
            for i, (path, weight) in enumerate(cfg["sources"]):
                srcs[i].dataset = path.encode()
                srcs[i].weight = weight
            self._srcs = srcs    # alive as long as o
            o.sources = srcs
            o.nsources = len(srcs)
            o.epoch_samples = cfg["epoch_samples"] or 0
        o.batch_size = cfg["batch_size"]
        o.shuffle = _lib.SHUFFLE[cfg["shuffle"]]
        o.seed = cfg["seed"]
        o.start_epoch = start_epoch
        o.start_batch = start_batch
        o.rank = cfg["rank"]
        o.world = cfg["world"]
        o.drop_last = cfg["drop_last"]
        o.prefetch = cfg["prefetch"] or 0
        o.window = cfg["window"] or 0
        o.device = cfg["device"]
        if cfg["fields"] is not None or cfg["keys"]:
            what = "Loader(fields=...)" if cfg["fields"] is not None else "Loader(keys=True)"
            _lib.need_fields(what)
            if o.struct_size < _lib.OPTS_FIELDS_SIZE:
                raise BatchdError(errno.EOVERFLOW, f"{what}: libbatchclient's bc_stream_opts "
                                  f"({o.struct_size} bytes) has no fields/keys members")
            if cfg["fields"] is not None:
                o.fields = ",".join(cfg["fields"]).encode()
            o.keys = cfg["keys"]
        if cfg["decode"] is not None:
            field, spec = cfg["decode"]
            if o.struct_size < _lib.OPTS_DECODE_SIZE:
                raise BatchdError(errno.EOVERFLOW, f"decode={{{field!r}: ...}}: libbatchclient's "
                                  f"bc_stream_opts ({o.struct_size} bytes) has no decode member: "
                                  "install the libbatchclient of this batchclient")
            if spec.on_error == "skip":
                _lib.need_skips(f"decode={{{field!r}: Image(on_error='skip')}}")
            spec.fill(field, o.decode)
        if cfg["seq_len"] is not None:
            if o.struct_size < _lib.OPTS_SEQUENCES_SIZE:
                raise BatchdError(errno.EOVERFLOW, f"seq_len={cfg['seq_len']}: libbatchclient's "
                                  f"bc_stream_opts ({o.struct_size} bytes) has no sequences "
                                  "member: install the libbatchclient of this batchclient")
            o.sequences = _lib.SEQUENCES[cfg["sequences"]]
            o.seq_len = cfg["seq_len"]
        if start_sample or stride != 1:
            what = (f"resuming at sample {start_sample}" if start_sample
                    else f"a batch stride of {stride}")
            _lib.need_elastic(what)
            if o.struct_size < _lib.OPTS_ELASTIC_SIZE:
                raise BatchdError(errno.EOVERFLOW, f"{what}: libbatchclient's bc_stream_opts "
                                  f"({o.struct_size} bytes) has no start_sample/batch_stride")
            o.start_sample = start_sample
            o.batch_stride = stride
        h = ctypes.c_void_p()
        r = L.bc_open(client.h, ctypes.byref(o), ctypes.byref(h))
        if r < 0:
            raise open_error(r, client.error(), cfg["dataset"])
        self.client = client
        self.h = h.value
        self.dataset = cfg["dataset"]
        self.start_epoch = start_epoch
        self.start_sample = start_sample
        self.stride = stride
        self.batches_per_epoch = L.bc_stream_batches_per_epoch(self.h)
        self.samples = L.bc_stream_samples(self.h)
        self.fingerprint = L.bc_stream_fingerprint(self.h)
        self.max_sample = L.bc_stream_max_sample(self.h)
        self.device = L.bc_stream_device(self.h)     # BC_HOST or the CUDA ordinal
        self.keys = cfg["keys"]
        self.mixture = cfg["sources"] is not None
        self.seq_len = cfg["seq_len"]
        self.schema = None       # a tuple of schema.Field, where the library has fields
        self.selected = ()
        self.has_bytes = True    # a bytes field is selected: data/samples show the first
        if _lib.has_fields():
            try:
                self.schema = schema.read(self.h)
            except BaseException:
                L.bc_close(self.h)
                raise
            if cfg["decode"] is not None:
                # The decoded field's samples are tensors of one shape now.
                field, spec = cfg["decode"]
                self.schema = tuple(dataclasses.replace(f, fixed_size=spec.nbytes,
                                                        shape=spec.shape)
                                    if f.name == field else f for f in self.schema)
            if cfg["seq_len"] is not None:
                self.schema = _token_schema(self.schema, cfg["seq_len"])
            self.selected = tuple(f.name for f in self.schema if f.selected)
            self.has_bytes = any(f.selected and f.type == "bytes" for f in self.schema)
            self._by_name = {f.name: f for f in self.schema}
        client.ref()
        self.held = []           # taken, not yet given back (user-held or pinned)
        self.closed = False      # close() was asked for
        self._freed = False      # bc_close done
        # Re-entrant: a finalizer may fire (and call _maybe_free) inside close().
        self._lock = threading.RLock()

    def position(self):
        if self._freed:
            raise RuntimeError("the stream is closed")
        e, b = ctypes.c_uint64(), ctypes.c_uint64()
        _lib.lib().bc_stream_position(self.h, ctypes.byref(e), ctypes.byref(b))
        return e.value, b.value

    def place(self):
        """position() with the sample its epoch's schedule starts from:
        start_sample in the start epoch, 0 in every later one."""
        e, b = self.position()
        return e, b, self.start_sample if e == self.start_epoch else 0

    def epoch_batches(self, epoch):
        """Batches the schedule has in epoch (fewer in a start epoch begun
        at a sample; a full epoch's in any later one)."""
        if self._freed:
            raise RuntimeError("the stream is closed")
        if epoch == self.start_epoch and self.start_sample:
            return _lib.lib().bc_stream_epoch_batches(self.h, epoch)
        return self.batches_per_epoch

    def error(self):
        return _lib.text(_lib.lib().bc_stream_error(self.h))

    def field(self, name):
        """The selected field called name (a schema.Field); KeyError saying
        why when there is none."""
        if not isinstance(name, str):
            raise TypeError(f"batch[{name!r}]: a batch is indexed by field name (batch.fields "
                            "lists them); batch.samples[i] is sample i's bytes")
        if self.schema is None:
            _lib.need_fields(f"batch[{name!r}]")
        f = self._by_name.get(name)
        if f is None:
            raise KeyError(f"{self.dataset!r} has no field {name!r}; its fields: "
                           + ", ".join(x.name for x in self.schema))
        if not f.selected:
            raise KeyError(f"field {name!r} of {self.dataset!r} was not selected: add it to the "
                           f"Loader's fields (now {list(self.selected)})")
        return f

    # -- giving batches back --

    def _release(self, batch):
        """bc_release, forgetting the batch. On a GPU stream the release also
        records the event batchd waits for before it reuses the device
        memory; when CUDA refuses that (the batch is released all the same)
        the caller hears of it, since work still queued may then read
        overwritten bytes."""
        L = _lib.lib()
        r = L.bc_release(batch._h)
        batch._h = None
        self.held.remove(batch)
        if r < 0:
            raise from_code(r, self.error(),
                            f"releasing batch {batch.epoch}:{batch.index} of {self.dataset!r}")

    def _give_back(self, batch):
        """Called by Batch.release(): hand the slot back unless a view pins it."""
        if self.closed or batch._h is None:
            return
        if not batch.pinned:
            self._release(batch)

    def reclaim(self):
        """Give back released batches whose last view has died. @return the ones still pinned."""
        pinned = []
        for b in list(self.held):
            if b.released:
                if b.pinned:
                    pinned.append(b)
                else:
                    self._release(b)
        return pinned

    # -- taking batches --

    def take(self, timeout, exempt):
        """The next batch. Only `exempt` (the batch yielded last) may still be
        pinned; see batchclient.batch for why. timeout: seconds or None."""
        pinned = [b for b in self.reclaim() if b is not exempt]
        if pinned:
            gc.collect()   # reference cycles may be all that keeps a view alive
            pinned = [b for b in self.reclaim() if b is not exempt]
        if pinned:
            b = pinned[0]
            raise PinnedBatchError(
                errno.ENOBUFS,
                f"batch {b.epoch}:{b.index}"
                + (f" (and {len(pinned) - 1} more)" if len(pinned) > 1 else "")
                + " is still referenced by a NumPy array, tensor or memoryview made from it; "
                "batchd reuses slots in order, so it could stage no further batch. Keep views "
                "for one step at most and copy what you keep longer (arr.copy(), "
                "tensor.clone(), bytes(view))", f"reading {self.dataset!r}")
        L = _lib.lib()
        h = ctypes.c_void_p()
        deadline = None if timeout is None else time.monotonic() + timeout
        pos = self.position()
        while True:
            wait = _WAIT_SLICE_MS
            if deadline is not None:
                wait = max(0, min(wait, int((deadline - time.monotonic()) * 1000)))
            r = L.bc_next(self.h, ctypes.byref(h), wait)
            if r == 0:
                b = Batch(self, h.value)
                self.held.append(b)
                return b
            if r == _lib.BC_EPOCH_END:
                # The loader stops at the last batch by position; this is the
                # marker between that epoch and the one it now starts.
                continue
            # A batch that failed moved the stream on; a wait that ran out, a
            # stop and a death did not, whatever errno each gave (batchclient.h).
            failed = self.position() != pos
            if r == -errno.ETIMEDOUT and not failed:
                if deadline is not None and time.monotonic() >= deadline:
                    raise WaitTimeout(errno.ETIMEDOUT, f"no batch within {timeout} s",
                                      f"reading {self.dataset!r} at {pos[0]}:{pos[1]}")
                continue
            msg = self.error()
            if not failed and -r in (errno.EPIPE, errno.ESHUTDOWN, errno.EPROTO):
                raise from_code(r, msg, f"reading {self.dataset!r}", DaemonGoneError)
            if r == -errno.ENOBUFS:
                raise from_code(r, "", f"reading {self.dataset!r}")
            where = f"batch {pos[0]}:{pos[1]} of {self.dataset!r}"
            if failed:
                e = remote_error(r, msg, where, self.dataset, pos[0], pos[1])
                if e is not None:
                    raise e
            raise BatchError(-r, msg or _lib.text(L.bc_strerror(r)), where, pos[0], pos[1])

    # -- closing --

    def close(self):
        """Revoke every batch; close now, or when the last pinning view dies."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            for b in self.held:
                b._revoke()
            exporters = [e for b in self.held for e in b._live_exporters()]
            for e in exporters:
                weakref.finalize(e, self._maybe_free)
            del exporters
        self._maybe_free()

    def _maybe_free(self):
        with self._lock:
            if self._freed or any(b.pinned for b in self.held):
                return
            self._freed = True
            for b in self.held:
                b._h = None
            self.held = []
        if os.getpid() == self.client._pid:    # not in a forked child: the session is the parent's
            _lib.lib().bc_close(self.h)
        self.client.unref()


# ---- the loader ------------------------------------------------------------------------------


def _sources(dataset):
    """Loader's dataset as (name, sources): a path gives (path, None); a list
    of (path, weight) a mixture, ValueError saying what is wrong with it."""
    if isinstance(dataset, (str, bytes, os.PathLike)):
        return os.fsdecode(dataset), None
    try:
        pairs = [(os.fsdecode(p), w) for p, w in dataset]
    except (TypeError, ValueError):
        raise ValueError("dataset must be a path, or a list of (path, weight) pairs for a "
                         "mixture") from None
    if not 2 <= len(pairs) <= 64:
        raise ValueError(f"a mixture has 2 .. 64 sources, not {len(pairs)}")
    out = []
    for p, w in pairs:
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) \
                or w <= 0:
            raise ValueError(f"source {p!r}: weight {w!r} must be a finite number above 0 "
                             "(weights are relative: 0.7, 0.2, 0.1 or 7, 2, 1)")
        out.append((p, float(w)))
    return " + ".join(f"{p}:{w:g}" for p, w in out), out


def _token_schema(fields, seq_len):
    """A token session's fields as arrays (docs/tokens.md): tokens and
    position_ids int32 [seq_len + 1] a sample, cu_seqlens one int32 array."""
    row = (seq_len + 1,)
    out = []
    for f in fields:
        if f.name == "cu_seqlens":
            f = dataclasses.replace(f, element="<i4", flat=True)
        elif f.name in ("tokens", "position_ids"):
            f = dataclasses.replace(f, element="<i4", shape=row)
        out.append(f)      # a mixture's "source": an int64 column as any
    return tuple(out)


def _sequences(seq_len, sequences):
    """Loader(seq_len=, sequences=) checked: (seq_len or None, mode)."""
    if sequences not in _lib.SEQUENCES:
        raise ValueError(f"sequences={sequences!r} must be 'windows' (the token stream cut "
                         "into seq_len + 1 windows) or 'packed' (whole documents packed)")
    if seq_len is None:
        return None, sequences
    seq_len = _int(seq_len, "seq_len")
    if seq_len < 1 or seq_len > 1 << 20:
        raise ValueError(f"seq_len {seq_len} must be in 1 .. 2^20 (tokens a sequence; each "
                         "sample holds seq_len + 1: the inputs and the shifted targets)")
    return seq_len, sequences


def resume_guard(epoch, resume, position):
    """What set_epoch(epoch) does while a loaded state is pending: True when
    it must keep the position (epoch is the saved one), False when no state
    is pending (resume is None, or an iteration has moved on from it: the
    position is no longer the saved one); ValueError when epoch is another
    epoch, which would replay or skip part of the saved epoch's rest."""
    if resume is None or tuple(position) != tuple(resume):
        return False
    e, b = resume
    if epoch == e:
        return True
    what = "replay" if epoch < e else "skip"
    raise ValueError(f"set_epoch({epoch}) after load_state_dict: the state resumes epoch {e} "
                     f"at batch {b}, and epoch {epoch} would {what} part of the schedule; "
                     f"call set_epoch({e}) for the saved epoch (loop over epochs from "
                     f"loader.position[0]), or iterate without set_epoch")


def check_state(state, mine, batches_per_epoch, samples):
    """(epoch, sample) of a saved state: its epoch and the samples of that
    epoch's global order every rank had consumed, for the schedule `mine`
    (a state_dict() of now) to resume from. The dataset (fingerprint),
    shuffle, seed and drop_last must match; the world size, batch size
    and rank may differ (the position is global: every rank's state at
    one lockstep step is the same). A state from before "sample" was
    recorded counts batch x batch_size x world at the world it was saved
    at. ValueError naming what differs, or a position that is not in an
    epoch of `samples` samples (batches_per_epoch batches at this world
    and batch size)."""
    if state.get("version") != STATE_VERSION:
        raise ValueError(f"state version {state.get('version')!r}: expected {STATE_VERSION}")
    check_sources(state.get("sources"), mine.get("sources"))
    diff = [k for k in ("fingerprint", "shuffle", "seed", "drop_last", "seq_len", "sequences")
            if state.get(k) != mine.get(k)]
    if diff:
        raise ValueError("cannot resume: the state was saved with a different "
                         + ", ".join(f"{k} ({state.get(k)!r}, now {mine[k]!r})" for k in diff))
    e, b = _int(state.get("epoch"), "epoch"), _int(state.get("batch"), "batch")
    bs, world = _int(state.get("batch_size"), "batch_size"), _int(state.get("world"), "world")
    if e < 0 or b < 0 or bs < 1 or world < 1:
        raise ValueError(f"state: position {e}:{b} at batch_size {bs}, world {world}: epoch and "
                         "batch must be >= 0, batch_size and world >= 1")
    if (bs, world) == (mine["batch_size"], mine["world"]) and b >= batches_per_epoch:
        raise ValueError(f"position {e}:{b} is outside an epoch of {batches_per_epoch} batches")
    before = b * bs * world
    sample = _int(state["sample"], "sample") if "sample" in state else before
    if sample < before:
        raise ValueError(f"state: sample {sample} is before the first sample of its batch {b} "
                         f"({b} x batch_size {bs} x world {world} = {before}): the state was "
                         "edited by hand; save it again with state_dict()")
    if sample >= samples:
        raise ValueError(f"state: sample {sample} is past the end of the epoch ({samples} "
                         f"samples): resume at epoch {e + 1} (set_epoch) instead")
    return e, sample


def check_sources(saved, mine):
    """A mixture resumes only as itself: ValueError naming each source whose
    dataset or weight differs from the saved state's (positions of the
    mixed stream mean other rows under other weights)."""
    if saved is None and mine is None:
        return
    if saved is None or mine is None:
        raise ValueError("cannot resume: the state was saved by "
                         + ("a single dataset, this Loader reads a mixture" if saved is None
                            else "a mixture, this Loader reads a single dataset"))
    old = [(s.get("dataset"), s.get("weight")) for s in saved]
    new = [(s["dataset"], s["weight"]) for s in mine]
    if old == new:
        return
    said = [f"source {i}: {o[0]!r} weight {o[1]!r}, now {n[0]!r} weight {n[1]!r}"
            for i, (o, n) in enumerate(zip(old, new)) if o != n]
    if len(old) != len(new):
        said.append(f"{len(old)} sources, now {len(new)}")
    raise ValueError("cannot resume: the mixture changed (" + "; ".join(said) + "). A mixture "
                     "resumes exactly only with the sources and weights it was saved with "
                     "(docs/tokens.md, Mixtures)")


def resume_place(epoch, sample, batch_size, world, batches_per_epoch):
    """(epoch, batch, start_sample) that resumes a schedule of batch_size
    and world at global position `sample` of epoch: a whole number k of
    global batches is batch k of the full epoch (the same batches as a
    schedule begun at that sample, numbered as in an uninterrupted run),
    or the next epoch where drop_last left no batch after it; any other
    count begins the epoch's schedule at that sample."""
    step = batch_size * world
    if sample % step:
        return epoch, 0, sample
    if sample // step >= batches_per_epoch:
        return epoch + 1, 0, 0
    return epoch, sample // step, 0


def position_state(base, epoch, batch, start_sample):
    """A state_dict(): base (the settings that fix the schedule) with the
    position (epoch, batch) of a schedule begun at start_sample, and the
    global samples all ranks consumed before it ("sample"); every rank is
    taken to have stepped in lockstep with this one, as DDP does."""
    return dict(base, epoch=epoch, batch=batch,
                sample=start_sample + batch * base["batch_size"] * base["world"])


class Loader:
    """Batches of a dataset served by batchd, one epoch per iteration.

        loader = batchclient.Loader("imagenet/train", 256, shuffle="global", seed=0)
        for epoch in range(10):
            loader.set_epoch(epoch)
            for batch in loader:
                x = batch.torch(torch.uint8, (3, 224, 224))   # no copy
                ...

    dataset: a path relative to a daemon root, or absolute under one.
    batch_size: samples per batch (the last batch of an epoch may be short
        unless drop_last).
    shuffle: 'global' (a fresh permutation per epoch), 'block' (shuffled
        blocks, mixed within a window; for big-block packs), 'none'; True
        and False mean 'global' and 'none'.
    seed: the schedule's key, with the dataset's fingerprint.
    rank, world: data-parallel split; default from $RANK/$WORLD_SIZE, else
        $SLURM_PROCID/$SLURM_NTASKS, else 0 of 1 (see rank_and_world()).
    drop_last: drop the uneven tail instead of padding by wrapping.
    prefetch: batches staged ahead (None: the daemon's default).
    device: None or 'cpu' for host memory, or a CUDA device of this
        process (an ordinal, 'cuda', 'cuda:N' or a torch.device): batchd
        then also copies every batch into that GPU's memory, and batches
        offer device_ptr, wait_stream() and __cuda_array_interface__ (see
        batchclient.batch). Without a usable CUDA device, here or in the
        daemon, BatchdError with errno ENODEV and the reason.
    socket: the daemon's socket (None: $BATCHD_SOCKET, then the defaults).
    window: blocks per shuffle window for 'block' (None: the daemon's).
    collate: if given, iteration yields collate(batch) instead of the batch
        (the batch is still released at the next step).
    timeout: seconds to wait for one batch before WaitTimeout (None: no limit).
    fields: the names of the fields to deliver (None: all of the schema's);
        batch[name] reads one (see Batch.__getitem__), and a Loader that
        selects only scalar fields (labels) has the daemon read no block
        at all. A name the dataset lacks: BatchdError ENOENT naming its fields.
    keys: deliver each sample's key too (batch.keys). A dataset packed
        without keys (--no-keys): BatchdError ENODATA.
    seq_len: a token pack (batchd-pack create --tokens) read as rows of
        seq_len + 1 token ids (docs/tokens.md): batch.torch("tokens") is an
        int32 tensor [B, seq_len + 1] (int32: half of int64's bytes, what
        nn.Embedding and FlashAttention take; the loss wants y.long()).
    sequences: "windows" (default: the stream of documents cut into rows,
        every token in one row an epoch) or "packed" (whole documents
        packed into rows, with batch.torch("position_ids") [B, seq_len + 1]
        and batch.torch("cu_seqlens"), the batch's document boundaries
        over the first seq_len tokens of each row).
    A mixture: dataset a list of (path, weight) pairs, e.g.
        [("web.bpk", 0.7), ("code.bpk", 0.2), ("math.bpk", 0.1)]: token
        packs with seq_len, or packs of one schema (images, records) without:
        every run of samples of one period holds exactly the weights'
        shares, each source shuffled and cycled in passes of its own;
        batch.sources says each sample's source (its index in the list);
        epoch_samples sets the samples of an epoch (default: the sources'
        summed). A mixture carries no keys.

    loader.schema describes the dataset's fields (a tuple of Field: name,
    type, classes, fixed_size, selected); loader.classes the class names of
    its label field.

    Raises ConnectError when no daemon answers, BatchdError (with the
    daemon's message) when the dataset cannot be opened, ValueError for bad
    arguments. len(loader) is the number of batches per epoch for this rank
    (a full epoch's: an epoch resumed at another world size has fewer, see
    epoch_batches()).
    """

    def __init__(self, dataset, batch_size, shuffle="global", seed=0, rank=None, world=None,
                 drop_last=False, prefetch=None, device=None, socket=None, *, window=None,
                 collate=None, timeout=None, fields=None, keys=False, decode=None,
                 seq_len=None, sequences="windows", epoch_samples=None, _place=(0, 0, 0),
                 _stride=1):
        # _place, _stride: where the first stream opens (batchclient.torch's
        # workers open at their share at once instead of at (0, 0) and again).
        self._stream = None
        self._client = None
        self._closed = True
        rank, world = rank_and_world(rank, world)
        batch_size = _int(batch_size, "batch_size")
        if batch_size < 1 or batch_size > 0xFFFFFFFF:
            raise ValueError(f"batch_size {batch_size} must be >= 1")
        seed = _int(seed, "seed")
        if seed < 0 or seed >= 1 << 64:
            raise ValueError(f"seed {seed} must be in 0 .. 2^64-1")
        if prefetch is not None:
            prefetch = _int(prefetch, "prefetch")
            if prefetch < 1 or prefetch > 1022:
                raise ValueError(f"prefetch {prefetch} must be in 1 .. 1022 (or None)")
        if window is not None:
            window = _int(window, "window")
            if window < 1 or window > 0xFFFFFFFF:
                raise ValueError(f"window {window} must be >= 1 (or None)")
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout {timeout!r} must be > 0 seconds (or None)")
        if collate is not None and not callable(collate):
            raise ValueError("collate must be callable")
        seq_len, sequences = _sequences(seq_len, sequences)
        name, sources = _sources(dataset)
        if sources is not None and keys:
            raise ValueError("a mixture's samples are named by batch.sources and batch.ids, "
                             "not by key: drop keys=")
        if epoch_samples is not None:
            epoch_samples = _int(epoch_samples, "epoch_samples")
            if sources is None or epoch_samples < 1:
                raise ValueError(f"epoch_samples={epoch_samples}: the rows of a mixture's "
                                 "epoch, >= 1 (and only for a mixture)")
        if seq_len is not None and (keys or decode is not None):
            raise ValueError("seq_len: a token pack's sequences have no keys and decode no "
                             "images; drop keys= and decode=")
        self._cfg = {
            "dataset": name,
            "sources": sources,
            "epoch_samples": epoch_samples,
            "batch_size": batch_size,
            "shuffle": _shuffle(shuffle),
            "seed": seed,
            "rank": rank,
            "world": world,
            "drop_last": bool(drop_last),
            "prefetch": prefetch,
            "window": window,
            "device": _device(device),
            "fields": _fields(fields),
            "keys": bool(keys),
            "decode": image.parse(decode),
            "seq_len": seq_len,
            "sequences": sequences,
        }
        self._collate = collate
        self._timeout = timeout
        self._want = None        # (epoch, batch, start_sample) asked for by set_epoch / load_state_dict
        self._stride = _stride   # serve every _stride-th batch (batchclient.torch's workers)
        self._resume = None      # the position load_state_dict asked for (resume_guard)
        self._current = None     # the batch yielded last, until the next step
        self._last = None        # the batch yielded last (may stay pinned)
        self._gen = 0
        self._client = _Client(socket)
        try:
            self._stream = self._open(_place)
        except BaseException:
            self._client.unref()
            self._client = None
            raise
        self._closed = False

    def _open(self, place):
        return _Stream(self._client, self._cfg, place, self._stride)

    # -- properties --

    dataset = property(lambda self: self._cfg["dataset"])
    batch_size = property(lambda self: self._cfg["batch_size"])
    shuffle = property(lambda self: self._cfg["shuffle"])
    seed = property(lambda self: self._cfg["seed"])
    rank = property(lambda self: self._cfg["rank"])
    world = property(lambda self: self._cfg["world"])
    drop_last = property(lambda self: self._cfg["drop_last"])

    @property
    def device(self):
        """None for host memory, else the CUDA ordinal batches are delivered to."""
        d = self._cfg["device"]
        return None if d == _lib.BC_HOST else d

    @property
    def samples(self):
        """Samples in the dataset (all ranks)."""
        return self._live().samples

    @property
    def fingerprint(self):
        """The dataset fingerprint (lib/pack/PACK.md), which keys the schedule."""
        return self._live().fingerprint

    @property
    def max_sample(self):
        """The largest sample's size in bytes."""
        return self._live().max_sample

    @property
    def schema(self):
        """The dataset's fields in schema order, a tuple of batchclient.Field
        (name, type, classes, fixed_size, selected, index). A pack made
        from plain files has one bytes field, "data"."""
        s = self._live()
        if s.schema is None:
            _lib.need_fields("Loader.schema")
        return s.schema

    @property
    def classes(self):
        """The class names of the dataset's label field (the first int64
        field with class names, e.g. `label` of `batchd-pack create
        --labels dirname`): a tuple, value i is classes[i]. None if none."""
        for f in self.schema:
            if f.type == "int64" and f.classes is not None:
                return f.classes
        return None

    def _place(self):
        """(epoch, batch, start_sample): position, with the sample its
        epoch's schedule starts from (0 but in an epoch resumed mid-way at
        another world size)."""
        return self._want if self._want is not None else self._live().place()

    @property
    def position(self):
        """(epoch, batch) the next iteration step yields."""
        e, b, _ = self._place()
        return e, b

    def epoch_batches(self, epoch=None):
        """The batches an iteration over epoch `epoch` (default: the
        position's) yields from its start: len(self), but fewer in an epoch
        that load_state_dict() resumed mid-way at a position that is no
        whole number of this loader's global batches (batch_size x world),
        counted from that position on (none where drop_last leaves none)."""
        e, _, start = self._place()
        epoch = e if epoch is None else _int(epoch, "epoch")
        if self._want is not None and not start:
            return self._live().batches_per_epoch
        self._settle()
        return self._live().epoch_batches(epoch)

    @property
    def epoch(self):
        return self.position[0]

    def __len__(self):
        return self._live().batches_per_epoch

    def __repr__(self):
        c = self._cfg
        return (f"<batchclient.Loader {c['dataset']!r} batch_size={c['batch_size']} "
                f"shuffle={c['shuffle']} rank={c['rank']}/{c['world']}"
                f"{' closed' if self._closed else ''}>")

    def _live(self):
        if self._closed:
            raise RuntimeError("the Loader is closed")
        if os.getpid() != self._client._pid:
            raise RuntimeError("this Loader was created before a fork; its stream belongs to "
                               "the parent: create a Loader in each process")
        return self._stream

    # -- positioning --

    def set_epoch(self, epoch):
        """Make the next iteration yield epoch `epoch` from its first batch.
        Right after load_state_dict, the saved epoch resumes where the state
        was taken instead, and any other epoch is a ValueError (it would
        replay or skip part of the schedule): see resume_guard."""
        epoch = _int(epoch, "epoch")
        if epoch < 0:
            raise ValueError(f"epoch {epoch} must be >= 0")
        self._live()
        if resume_guard(epoch, self._resume, self.position):
            return
        self._resume = None
        self._want, self._stride = (epoch, 0, 0), 1

    def state_dict(self):
        """Where this loader stands, to resume exactly: the next batch it
        would yield ("epoch", "batch") and the samples of that epoch's
        global order all ranks consumed before it ("sample": every rank is
        taken to step in lockstep with this one, as DDP's do), with the
        settings that fix the schedule. Taken inside the loop, after the
        step on a batch, it resumes after that batch, at this world size
        or another (load_state_dict)."""
        c = self._cfg
        base = {"version": STATE_VERSION, "dataset": c["dataset"],
                "fingerprint": self._live().fingerprint, "batch_size": c["batch_size"],
                "shuffle": c["shuffle"], "seed": c["seed"], "rank": c["rank"],
                "world": c["world"], "drop_last": c["drop_last"]}
        if c["seq_len"] is not None:
            base.update(seq_len=c["seq_len"], sequences=c["sequences"])
        state = position_state(base, *self._place())
        if c["sources"] is not None:
            state["sources"] = self._sources_used(state["epoch"], state["sample"])
        return state

    def _sources_used(self, epoch, sample):
        """A mixture's sources, with the rows of each that all ranks consumed
        before (epoch, sample) of the mixed stream."""
        s, L, out = self._live(), _lib.lib(), []
        for i, (path, weight) in enumerate(self._cfg["sources"]):
            used = ctypes.c_uint64()
            r = L.bc_stream_source_used(s.h, i, epoch, sample, ctypes.byref(used))
            if r < 0:
                raise BatchdError(-r, _lib.text(L.bc_strerror(r)), f"source {i} ({path})")
            out.append({"dataset": path, "weight": weight, "used": used.value})
        return out

    def load_state_dict(self, state):
        """Resume at a state_dict() position, of this loader or of any rank
        of a run at another world size or batch size. Dataset fingerprint,
        shuffle, seed and drop_last must match, else ValueError naming what
        differs. At the same world and batch size the rest is exactly what
        the saved run would have read next. At another, this rank's share
        of the rest of the saved epoch follows from the state's "sample"
        (the samples all ranks had consumed): the ranks of the new world
        together read each remaining sample once (plus the tail's padding);
        the global batch (batch_size x world) need not be the saved one, so
        a job that lost ranks picks the batch size nearest the old global
        batch it wants. Later epochs are those of a fresh run at this world
        size. A state saved before "sample" existed counts batch x
        batch_size x world at its own world."""
        s = self._live()
        epoch, sample = check_state(state, self.state_dict(), s.batches_per_epoch, s.samples)
        self._want = resume_place(epoch, sample, self.batch_size, self.world,
                                  s.batches_per_epoch)
        self._stride = 1
        if self._want[2]:
            # Only the library knows how many batches a schedule begun at a
            # sample has (with drop_last, none moves it to the next epoch):
            # open it now, so that position and epoch_batches() say (an
            # iteration in progress ends: its stream is gone).
            self._settle()
            self._gen += 1
        self._resume = self.position

    def _seek(self, place, stride=1):
        """Make the next iteration start at place, (epoch, batch,
        start_sample), serving every stride-th batch (batchclient.torch's
        worker share); reopens only when the stream stands elsewhere."""
        self._live()
        self._resume = None
        self._want, self._stride = place, stride

    def _settle(self):
        """Reopen the stream at the wanted position unless it stands there."""
        want, self._want = self._want, None
        if want is None or (want == self._stream.place() and self._stream.stride == self._stride):
            return
        self._retire()
        old = self._stream
        self._stream = None
        old.close()       # deferred while views of its batches live
        self._last = None
        try:
            self._stream = self._open(want)
        except BaseException:
            self.close()
            raise

    # -- iteration --

    def __iter__(self):
        self._live()
        self._settle()
        self._gen += 1
        return _EpochIter(self, self._gen, self._stream.position()[0])

    def _retire(self):
        b, self._current = self._current, None
        if b is not None:
            b.release()

    def close(self):
        """Close the stream and the connection. Views still alive keep their
        bytes valid; the stream is closed when the last of them dies."""
        if self._closed:
            return
        self._closed = True
        self._current = self._last = None
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        if self._client is not None:
            self._client.unref()
            self._client = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class _EpochIter:
    """One epoch of a Loader, from its position to the epoch's last batch."""

    def __init__(self, loader, gen, epoch):
        self._loader = loader
        self._gen = gen
        self._epoch = epoch
        self._done = False

    def __iter__(self):
        return self

    def __next__(self):
        L = self._loader
        if self._done:
            raise StopIteration
        L._live()
        if self._gen != L._gen:
            raise RuntimeError("a newer iteration over this Loader has started")
        L._retire()
        if L._closed:
            self._done = True
            raise StopIteration
        s = L._stream
        e, _ = s.position()
        if e != self._epoch:
            self._done = True
            raise StopIteration
        batch = s.take(L._timeout, L._last)
        L._current = L._last = batch
        return L._collate(batch) if L._collate is not None else batch


def status(socket=None):
    """The daemon's status as a dict (the JSON of `batchctl status --json`)."""
    import json
    c = _Client(socket)
    try:
        p = ctypes.c_void_p()
        r = _lib.lib().bc_status(c.h, ctypes.byref(p))
        if r < 0:
            raise from_code(r, c.error(), "status")
        try:
            return json.loads(ctypes.string_at(p.value).decode("utf-8", "replace"))
        finally:
            _lib.free(p.value)
    finally:
        c.unref()
