# SPDX-License-Identifier: MIT
"""batchclient.torch: a batchd stream as a torch IterableDataset for DataLoader.

Why this module exists: trainers feed torch.utils.data.DataLoader, which
wants a Dataset, runs CPU transforms (decoding, augmentation) in worker
processes and pins memory for the GPU copy. A Loader is none of that; this
module wraps one so that

    ds = batchclient.torch.BatchdDataset("train", 256, fields=["data", "label"])
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=4,
                                     pin_memory=True, persistent_workers=True)
    for epoch in range(epochs):
        ds.set_epoch(epoch)
        for x, y in dl:          # uint8 [B, n], int64 [B]
            ...

works as it does for any dataset. batch_size=None is required: batchd
makes the batches, DataLoader must not batch them again.

Worker shares. With num_workers=N > 0 each worker opens its own stream
(never one made in the parent: it is opened lazily, in the worker) at this
rank's rank and world, and reads a contiguous run of this rank's batches:
worker k of N takes batches [b0 + R*k//N, b0 + R*(k+1)//N) of the epoch,
R = len(ds) - b0, b0 the position the iteration starts from (0 but after a
mid-epoch resume). The runs are disjoint and together they are exactly the
batches a Loader of this rank yields that epoch, batch for batch, for any
N and any world: no sample twice, none lost. (A split of the world into
world*N "ranks" would not be: the daemon gives each rank one contiguous
slice of the epoch's order, ceil(n / world) long, padded by wrapping, so
world*N slices are padded differently and their union is not this rank's
slice.) DataLoader takes one batch from each worker in turn, so the epoch
arrives interleaved; each worker's stream stages up to `prefetch` batches
past its run that it does not use. num_workers=0 is the fast path: one
stream, in the training process, no copy. A worker's batch reaches the
training process the way DataLoader moves every tensor, through new shared
memory per tensor (a copy and fresh pages, several times a memcpy), so
workers pay off where a CPU transform costs more than that.

Lifetimes. With num_workers=0 the collate hook's output is yielded as the
Loader yields batches: zero-copy views of shared memory, valid until the
next iteration step (see batchclient.batch); keep data longer with
.clone(). In a worker, DataLoader pickles what the worker yields, so the
worker copies every tensor, array and memoryview of the collate output
that lies in the batch's shared memory, releases the batch, and yields the
copy. collate must return tensors, arrays, bytes, memoryviews, numbers or
str, or dicts, lists and tuples of them; a result that still references
the batch after that (a view inside some other object) is refused with
TypeError.

Epochs and positions. The dataset holds a position, (epoch, batch), in
shared memory made at construction, so that set_epoch() and
load_state_dict() in the training process reach workers, persistent
(persistent_workers=True keeps the workers' own copies of the dataset) or
not. Each iteration reads it when it starts. An iteration that delivers a
whole epoch moves it to the next epoch's start, as a Loader does, so
without set_epoch() consecutive epochs still differ; set_epoch(e) makes
the next iteration run epoch e.
state_dict() is in Loader's format (Loader.load_state_dict() takes it, and
the other way round). With num_workers=0 it is exact anywhere: taken after
the step on a batch it resumes after that batch. With workers it is exact
at epoch boundaries only (taken after an epoch's loop, it resumes at the
next epoch's first batch): inside an epoch it is the position that epoch's
iteration started from, because the training process does not see which
batches the workers have handed over; resuming from it delivers those
batches again. Breaking out of an epoch with workers likewise leaves the
position at that epoch's start. Loading a mid-epoch state (from a
num_workers=0 run or a Loader) before an iteration with workers is exact:
the workers share the rest of that epoch.

rank and world are settled at construction (arguments, else torchrun's
$RANK / $WORLD_SIZE, else Slurm's $SLURM_PROCID / $SLURM_NTASKS; see
batchclient.rank_and_world), so workers use the training process's values.
$LOCAL_RANK names the GPU, which is the trainer's business, not the data's.

pin_memory=True is DataLoader's: it copies the yielded tensors into
page-locked memory when CUDA is available; without CUDA, torch 1.13's
DataLoader leaves them as they are.

Importing this module needs torch; `import batchclient` does not.
"""
import ctypes
import gc
import multiprocessing
import os

try:
    import torch
    from torch.utils.data import IterableDataset, get_worker_info
except ImportError as e:     # pragma: no cover - exercised where torch is missing
    raise ImportError(f"batchclient.torch needs PyTorch ({e}); install python3-torch or "
                      "`pip install torch`, or use batchclient.Loader") from None

from . import _lib
from .loader import Loader, check_state, rank_and_world, resume_guard, _int

__all__ = ["BatchdDataset", "to_tensors", "to_dict"]

# A worker's "finished" bit lives in a 63-bit mask.
MAX_WORKERS = 63

# The shared position: epoch and batch the next iteration starts from, then
# the bookkeeping of the iteration with workers that runs from it: which
# workers have delivered their whole share, and which iteration they belong
# to (worker count, DataLoader seed, the worker's count of iterations).
_EPOCH, _BATCH, _DONE, _WORKERS, _SEED, _RUN = range(6)


# ---- collate hooks -----------------------------------------------------------------------------


def _selected(batch):
    """The batch's selected fields (schema.Field), or () where the library has no fields."""
    if not _lib.has_fields():
        return ()
    return tuple(batch._stream.field(n) for n in batch.fields)


def _label_field(fields):
    ints = [f for f in fields if f.type == "int64"]
    labelled = [f for f in ints if f.classes is not None]
    return (labelled or ints or [None])[0]


def _tensor(batch, f):
    try:
        if f.type == "bytes" and not f.fixed_size:
            # The first selected bytes field is what batch.torch() shows; it
            # checks that this batch's samples are all of one size.
            return batch.torch()
        return batch.torch(f.name)
    except ValueError as e:
        raise ValueError(f"{e}; to_tensors() makes one [B, n] tensor of it: pass collate= a "
                         "function that decodes each sample (e.g. from batch[name])") from None


def to_tensors(batch):
    """The default collate hook: (x, y) from a batch with fields.

    x is the first selected bytes field as a uint8 tensor [B, n], n its
    samples' size (Field.fixed_size, or else every sample's of this batch:
    a --records pack's "data"); y the label,
    the first selected int64 field with class names (else the first int64
    field), as an int64 tensor [B]. Without a label field: x alone; with
    no bytes field selected: y alone. Samples of differing sizes:
    ValueError (decode them in a collate hook of your own)."""
    fields = _selected(batch)
    if not fields:              # a library without fields: the samples, all of one size
        return batch.torch()
    x = next((f for f in fields if f.type == "bytes"), None)
    y = _label_field(fields)
    if x is None and y is None:
        raise ValueError(f"to_tensors(): the batch carries no bytes or int64 field (fields "
                         f"{list(batch.fields)}): use to_dict() or a collate hook of your own")
    if y is None:
        return _tensor(batch, x)
    if x is None:
        return _tensor(batch, y)
    return _tensor(batch, x), _tensor(batch, y)


def to_dict(batch):
    """A collate hook: every selected field by name. Scalars and bytes of
    fixed size are tensors ([B], [B, fixed_size]); bytes of differing
    sizes a list of B memoryviews; str a list of B str; with keys=True the
    samples' keys under "__key__"."""
    fields = _selected(batch)
    if not fields:
        out = {"data": list(batch.samples)}
    else:
        out = {}
        for f in fields:
            fixed = f.type in ("int64", "float32", "float64") or (f.type == "bytes"
                                                                 and f.fixed_size)
            out[f.name] = batch.torch(f.name) if fixed else batch[f.name]
    if batch._stream.keys:
        out["__key__"] = batch.keys
    return out


# ---- copying a worker's output out of shared memory ---------------------------------------------


def _inside(addr, regions):
    return any(lo <= addr < lo + n for lo, n in regions)


def _copy_out(obj, regions):
    """obj with every tensor and array that lies in regions copied, and
    every memoryview turned into bytes (containers rebuilt, others kept)."""
    if isinstance(obj, torch.Tensor):
        return obj.clone() if _inside(obj.data_ptr(), regions) else obj
    if isinstance(obj, memoryview):
        return obj.tobytes()
    if type(obj).__module__ == "numpy" and hasattr(obj, "__array_interface__"):
        if _inside(obj.__array_interface__["data"][0], regions):
            return obj.copy()
        return obj
    if isinstance(obj, dict):
        return type(obj)((k, _copy_out(v, regions)) for k, v in obj.items())
    if isinstance(obj, list):
        return [_copy_out(v, regions) for v in obj]
    if isinstance(obj, tuple):
        items = [_copy_out(v, regions) for v in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    return obj


def _detached(batch, collate):
    """collate(batch) with nothing left in shared memory; the batch is released."""
    try:
        out = collate(batch)
        regions = [(ctypes.addressof(e), ctypes.sizeof(e)) for e in batch._live_exporters()]
        out = _copy_out(out, regions)
    finally:
        batch.release()
    if batch.pinned:
        gc.collect()          # reference cycles may be all that keeps a view alive
    if batch.pinned:
        raise TypeError(f"collate's result for batch {batch.epoch}:{batch.index} still "
                        f"references the batch's shared memory inside a {type(out).__name__} "
                        "(or the hook kept a view): a worker can hand over only copies; "
                        "return tensors, arrays, bytes, or dicts, lists and tuples of them")
    return out


# ---- the dataset -------------------------------------------------------------------------------


class BatchdDataset(IterableDataset):
    """A batchd stream as a torch IterableDataset; see the module doc.

    Arguments are Loader's (dataset, batch_size, shuffle, seed, rank,
    world, drop_last, prefetch, socket, window, timeout, fields, keys; see
    batchclient.Loader), except collate: a function called with each Batch
    (in the worker, with workers) whose result is what the DataLoader
    yields; default to_tensors, to_dict gives a dict. Use it with
    DataLoader(ds, batch_size=None, ...).

    Construction opens the dataset once in this process (to check the
    arguments and learn its length) and closes it again: the process that
    iterates opens its own stream. len(ds) is this rank's batches per
    epoch, what a DataLoader over it yields per epoch for any num_workers.
    ds.classes is the label field's class names (None without one).
    """

    def __init__(self, dataset, batch_size, shuffle="global", seed=0, rank=None, world=None,
                 drop_last=False, prefetch=None, socket=None, *, window=None, collate=None,
                 timeout=None, fields=None, keys=False):
        super().__init__()
        rank, world = rank_and_world(rank, world)
        if collate is None:
            collate = to_tensors
        if not callable(collate):
            raise ValueError(f"collate {collate!r} must be callable (a function of a Batch)")
        self._kw = dict(dataset=dataset, batch_size=batch_size, shuffle=shuffle, seed=seed,
                        rank=rank, world=world, drop_last=drop_last, prefetch=prefetch,
                        socket=socket, window=window, timeout=timeout, fields=fields, keys=keys)
        self._collate = collate
        if prefetch is not None and not 1 <= _int(prefetch, "prefetch") <= 1022:
            raise ValueError(f"prefetch {prefetch} must be in 1 .. 1022 (or None)")
        # The probe stages one batch, not `prefetch`: nobody reads it.
        probe = Loader(**dict(self._kw, prefetch=1))
        try:
            self._len = len(probe)
            self._state = probe.state_dict()
            self.classes = probe.classes if _lib.has_fields() else None
        finally:
            probe.close()
        # Spawn's lock also crosses into workers of a 'spawn' or 'forkserver'
        # DataLoader (a lock made for fork is refused there), and fork's.
        self._pos = multiprocessing.get_context("spawn").Array("q", 6)
        self._loader = None      # the stream of the process that iterates, opened there
        self._pid = None
        self._runs = 0           # iterations this worker started (its copy of the dataset)
        self._resume = None      # the position load_state_dict asked for (loader.resume_guard)

    def __getstate__(self):
        s = self.__dict__.copy()
        s["_loader"] = s["_pid"] = None   # a stream never crosses processes
        return s

    rank = property(lambda self: self._kw["rank"])
    world = property(lambda self: self._kw["world"])
    batch_size = property(lambda self: self._state["batch_size"])

    def __len__(self):
        return self._len

    def __repr__(self):
        return (f"<batchclient.torch.BatchdDataset {self._state['dataset']!r} batch_size="
                f"{self._state['batch_size']} rank={self.rank}/{self.world}>")

    # -- the position --

    def _put(self, epoch, batch):
        """Set the shared position (lock held), forgetting any iteration's bookkeeping."""
        if batch >= self._len:
            epoch, batch = epoch + 1, 0
        self._pos[:] = [epoch, batch, 0, 0, 0, 0]

    @property
    def position(self):
        """(epoch, batch) the next iteration starts from."""
        with self._pos.get_lock():
            return self._pos[_EPOCH], self._pos[_BATCH]

    @property
    def epoch(self):
        return self.position[0]

    def set_epoch(self, epoch):
        """Make the next iteration run epoch `epoch` from its first batch, in
        this process and in DataLoader workers (persistent ones too). Right
        after load_state_dict the saved epoch resumes where the state was
        taken, and another epoch is a ValueError (loader.resume_guard)."""
        epoch = _int(epoch, "epoch")
        if epoch < 0:
            raise ValueError(f"epoch {epoch} must be >= 0")
        with self._pos.get_lock():
            if resume_guard(epoch, self._resume, (self._pos[_EPOCH], self._pos[_BATCH])):
                return
            self._resume = None
            self._put(epoch, 0)

    def state_dict(self):
        """The position with the settings that fix the schedule, in
        Loader.state_dict()'s format (exactness: see the module doc)."""
        e, b = self.position
        return dict(self._state, epoch=e, batch=b)

    def load_state_dict(self, state):
        """Resume at a state_dict() position (of this dataset or of a Loader
        with the same schedule): ValueError naming what differs otherwise."""
        e, b = check_state(state, self._state, self._len)
        with self._pos.get_lock():
            self._put(e, b)
        self._resume = (e, b)

    def close(self):
        """Close this process's stream, if it opened one (iterating again reopens it)."""
        ld, self._loader = self._loader, None
        if ld is not None and self._pid == os.getpid():
            ld.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- iteration --

    def _here(self):
        """This process's Loader, opened on first use (a forked worker's
        copy of the parent's is dropped: the parent's stream is not its to use)."""
        if self._loader is None or self._pid != os.getpid():
            self._loader = Loader(**self._kw)
            self._pid = os.getpid()
        return self._loader

    def _seek(self, epoch, batch):
        ld = self._here()
        if ld.position != (epoch, batch):
            ld.load_state_dict(dict(self._state, epoch=epoch, batch=batch))
        return ld

    def __iter__(self):
        info = get_worker_info()
        if info is None:
            return self._serve(*self.position)
        n = info.num_workers
        if n > MAX_WORKERS:
            raise ValueError(f"num_workers={n}: batchclient.torch supports up to "
                             f"{MAX_WORKERS} workers per DataLoader")
        # Which iteration this is: the DataLoader's seed differs for every
        # iterator, and persistent workers count their iterations alike.
        self._runs += 1
        run = (n, info.seed - info.id, self._runs)
        e, b0 = self.position
        rest = self._len - b0
        lo, hi = b0 + rest * info.id // n, b0 + rest * (info.id + 1) // n
        return self._share(e, b0, lo, hi, info.id, run)

    def _serve(self, epoch, batch):
        """num_workers=0: the epoch from (epoch, batch), zero-copy."""
        ld = self._seek(epoch, batch)
        for b in ld:
            with self._pos.get_lock():
                self._put(epoch, b.index + 1)
            yield self._collate(b)

    def _share(self, epoch, b0, lo, hi, k, run):
        """Worker k: batches [lo, hi) of the epoch, copied out; then mark
        its share delivered (the last worker of the iteration moves the
        position on)."""
        if hi > lo:
            it = iter(self._seek(epoch, lo))
            for _ in range(hi - lo):
                yield _detached(next(it), self._collate)
        with self._pos.get_lock():
            p = self._pos
            if (p[_EPOCH], p[_BATCH]) != (epoch, b0):
                return          # set_epoch() or load_state_dict() moved it meanwhile
            if (p[_WORKERS], p[_SEED], p[_RUN]) != run:
                p[_DONE] = 0
                p[_WORKERS], p[_SEED], p[_RUN] = run
            p[_DONE] |= 1 << k
            if p[_DONE] == (1 << run[0]) - 1:
                self._put(epoch + 1, 0)
