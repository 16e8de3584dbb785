# SPDX-License-Identifier: MIT
"""batchclient.torch: a batchd stream as a torch IterableDataset for DataLoader.

Why this module exists: trainers feed torch.utils.data.DataLoader, which
wants a Dataset, runs CPU transforms (decoding, augmentation) in worker
processes and pins memory for the GPU copy. A Loader is none of that; this
module wraps one so that

    ds = batchclient.torch.BatchdDataset("train", 256, fields=["data", "label"])
    dl = batchclient.torch.DataLoader(ds, num_workers=4, pin_memory=True,
                                      persistent_workers=True)
    for epoch in range(epochs):
        ds.set_epoch(epoch)
        for x, y in dl:          # uint8 [B, n], int64 [B]
            ...

works as it does for any dataset. batchclient.torch.DataLoader is torch's
DataLoader (a subclass, the same arguments) that also counts the batches
it hands to the training loop, which makes state_dict() exact anywhere;
torch.utils.data.DataLoader(ds, batch_size=None, ...) works too.
batch_size=None is required: batchd makes the batches, DataLoader must not
batch them again.

Worker shares. With num_workers=N > 0 each worker opens its own stream
(never one made in the parent: it is opened lazily, in the worker) at this
rank's rank and world, and serves every N-th batch of this rank's
schedule: worker k of N opens its stream at batch b0 + k with a batch
stride of N (libbatchclient's batch_stride), so it reads batches b0 + k,
b0 + k + N, ... of the epoch, b0 the position the iteration starts from
(0 but after a mid-epoch resume). DataLoader takes one batch from each
worker in turn, so the training loop receives this rank's batches in
order, exactly the batches a Loader of this rank yields that epoch, batch
for batch, for any N and any world: no sample twice, none lost. A worker
with no batch left in the epoch (fewer batches than workers) yields none.
A persistent worker's stream runs on into the next epoch along its
stride; where the next epoch needs another phase (the epoch's batch count
is not a multiple of N, or the iteration starts mid-epoch) it reopens its
stream at the batch it needs. Each worker's stream stages up to `prefetch`
batches ahead of its share. num_workers=0 is the fast path: one stream,
in the training process, no copy. A worker's batch reaches the training
process the way DataLoader moves every tensor, through new shared memory
per tensor (a copy and fresh pages, several times a memcpy), so workers
pay off where a CPU transform costs more than that.

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
the other way round), and like a Loader's it resumes at another world size
or batch size too (Loader.load_state_dict). It is exact anywhere with
num_workers=0 and with batchclient.torch.DataLoader for any num_workers:
taken after the step on the m-th batch of an epoch, resuming continues at
the batch after it. The count is the DataLoader iterator's, so a `break`
leaves the position after the last batch handed over (the next iteration
continues there), and a new iterator started mid-epoch continues from the
old one's count (the old one then refuses to go on). Under a plain torch
DataLoader with workers the training process cannot know which of the
batches the workers have handed over (DataLoader asks them for batches
ahead of the loop) the loop has consumed: state_dict() inside such an
epoch raises RuntimeError naming batchclient.torch.DataLoader; after the
epoch's loop (all workers done) it is exact, the next epoch's first batch.
A break out of such an epoch leaves the position at the epoch's start, and
state_dict() raises until set_epoch(), load_state_dict() or a whole epoch
moves it. (Near an epoch's end, once every worker has delivered its share
but the loop has not taken the last few, a plain DataLoader's state_dict()
already names the next epoch: only the counting DataLoader is exact
there.) Loading a mid-epoch state before an iteration with workers is
exact: the workers share the rest of that epoch.

rank and world are settled at construction (arguments, else torchrun's
$RANK / $WORLD_SIZE, else Slurm's $SLURM_PROCID / $SLURM_NTASKS; see
batchclient.rank_and_world), so workers use the training process's values.
$LOCAL_RANK names the GPU, which is the trainer's business, not the data's.

pin_memory=True is DataLoader's: it copies the yielded tensors into
page-locked memory where there is a device to pin for (torch 1.13: CUDA;
torch 2.x: torch.accelerator) and leaves them as they are elsewhere,
where torch 2.x also warns (UserWarning, once per iterator; fatal under
-W error, so pass pin_memory only where a GPU is).

Importing this module needs torch; `import batchclient` does not.
"""
import ctypes
import gc
import multiprocessing
import os

from . import _deps

try:
    import torch
    from torch.utils.data import IterableDataset, get_worker_info
except ImportError as e:     # pragma: no cover - exercised where torch is missing
    raise ImportError(f"batchclient.torch needs PyTorch ({e}): install it "
                      f"({_deps.install_hint('torch')}), or use batchclient.Loader") from None

from . import _lib
from .loader import (Loader, check_state, position_state, rank_and_world, resume_guard,
                     resume_place, _int)

__all__ = ["BatchdDataset", "DataLoader", "to_tensors", "to_dict"]

# A worker's "finished" bit lives in a 63-bit mask.
MAX_WORKERS = 63

# The shared position: epoch and batch the next iteration starts from, the
# sample that epoch's schedule starts from and its batch count (a full
# epoch's but in an epoch resumed mid-way at another world size); then the
# bookkeeping of an iteration with workers of a plain DataLoader that runs
# from it: which workers have delivered their whole share, and which
# iteration they belong to (worker count, DataLoader seed, the worker's
# count of iterations; a worker count of 0: no such iteration). _FROM: the
# four position slots again, where the newest iteration of a
# batchclient.torch.DataLoader started: its workers start from there
# (a worker may start after the training loop took a batch and its count
# moved the position on).
_EPOCH, _BATCH, _START, _COUNT, _DONE, _WORKERS, _SEED, _RUN, _FROM = range(9)
_PLACE = slice(_EPOCH, _COUNT + 1)


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


def _token_tensors(batch):
    """A token batch (Loader(seq_len=...)): its rows, and packed, their
    positions and boundaries."""
    if "position_ids" not in batch.fields:
        return batch.torch("tokens")
    return batch.torch("tokens"), batch.torch("position_ids"), batch.torch("cu_seqlens")


def to_tensors(batch):
    """The default collate hook: (x, y) from a batch with fields.

    x is the first selected bytes field as a uint8 tensor [B, n], n its
    samples' size (Field.fixed_size, or else every sample's of this batch:
    a --records pack's "data"), or [B, 3, H, W] for an image the daemon
    decodes (decode=); y the label,
    the first selected int64 field with class names (else the first int64
    field; never a mixture's "source": batch.sources has it), as an int64
    tensor [B]. Without a label field: x alone; with
    no bytes field selected: y alone. Samples of differing sizes:
    ValueError (decode them in a collate hook of your own). A token batch
    (seq_len=) gives its int32 tokens [B, seq_len + 1], and packed the
    tuple (tokens, position_ids, cu_seqlens); to_dict gives a mixture's
    "source" too."""
    fields = _selected(batch)
    if not fields:              # a library without fields: the samples, all of one size
        return batch.torch()
    if batch._stream.seq_len is not None:
        return _token_tensors(batch)
    x = next((f for f in fields if f.type == "bytes"), None)
    # A mixture's "source" says where a sample came from: no label (to_dict has it).
    y = _label_field([f for f in fields if not (batch._stream.mixture and f.name == "source")])
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
    world, drop_last, prefetch, socket, window, timeout, fields, keys,
    decode, seq_len, sequences, epoch_samples; see batchclient.Loader), except collate: a function called with each Batch
    (in the worker, with workers) whose result is what the DataLoader
    yields; default to_tensors, to_dict gives a dict. Use it with
    batchclient.torch.DataLoader(ds, ...) (exact state_dict() anywhere) or
    torch's DataLoader(ds, batch_size=None, ...).

    Construction opens the dataset once in this process (to check the
    arguments and learn its length) and closes it again: the process that
    iterates opens its own stream. len(ds) is this rank's batches per
    epoch, what a DataLoader over it yields per epoch for any num_workers
    (an epoch resumed at another world size yields fewer:
    epoch_batches()). ds.classes is the label field's class names (None
    without one).
    """

    def __init__(self, dataset, batch_size, shuffle="global", seed=0, rank=None, world=None,
                 drop_last=False, prefetch=None, socket=None, *, window=None, collate=None,
                 timeout=None, fields=None, keys=False, decode=None, seq_len=None,
                 sequences="windows", epoch_samples=None):
        super().__init__()
        rank, world = rank_and_world(rank, world)
        if collate is None:
            collate = to_tensors
        if not callable(collate):
            raise ValueError(f"collate {collate!r} must be callable (a function of a Batch)")
        self._kw = dict(dataset=dataset, batch_size=batch_size, shuffle=shuffle, seed=seed,
                        rank=rank, world=world, drop_last=drop_last, prefetch=prefetch,
                        socket=socket, window=window, timeout=timeout, fields=fields, keys=keys,
                        decode=decode, seq_len=seq_len, sequences=sequences,
                        epoch_samples=epoch_samples)
        self._collate = collate
        if prefetch is not None and not 1 <= _int(prefetch, "prefetch") <= 1022:
            raise ValueError(f"prefetch {prefetch} must be in 1 .. 1022 (or None)")
        probe = self._probe()
        try:
            self._len = len(probe)
            self._samples = probe.samples
            self._state = probe.state_dict()
            for k in ("epoch", "batch", "sample"):
                del self._state[k]
            self.classes = probe.classes if _lib.has_fields() else None
        finally:
            probe.close()
        # Spawn's lock also crosses into workers of a 'spawn' or 'forkserver'
        # DataLoader (a lock made for fork is refused there), and fork's.
        self._pos = multiprocessing.get_context("spawn").Array("q", _FROM + 4)
        self._put(0, 0)
        self._loader = None      # the stream of the process that iterates, opened there
        self._pid = None
        self._runs = 0           # iterations this worker started (its copy of the dataset)
        self._resume = None      # the position load_state_dict asked for (loader.resume_guard)
        self._counted = False    # in workers of a batchclient.torch.DataLoader: it moves the position
        self._count_gen = 0      # the newest DataLoader iteration counting over this dataset

    def _probe(self):
        # A probe stages one batch, not `prefetch`: nobody reads it.
        return Loader(**dict(self._kw, prefetch=1))

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

    def _normal(self, epoch, batch, start=0, count=None):
        """(epoch, batch, start, count) as the shared position holds it: batch
        in the schedule of `count` batches (default: a full epoch's) begun at
        sample `start`; past its last batch, the next epoch's start."""
        count = self._len if count is None else count
        if batch >= count:
            return epoch + 1, 0, 0, self._len
        return epoch, batch, start, count

    def _put(self, *place):
        """Set the shared position (lock held) to _normal(*place), forgetting
        any iteration's bookkeeping."""
        self._pos[:_FROM] = [*self._normal(*place), 0, 0, 0, 0]

    def _place(self):
        """(epoch, batch, start_sample, batches of that epoch's schedule)."""
        with self._pos.get_lock():
            return tuple(self._pos[_PLACE])

    @property
    def position(self):
        """(epoch, batch) the next iteration starts from."""
        return self._place()[:2]

    @property
    def epoch(self):
        return self.position[0]

    def epoch_batches(self):
        """The batches an iteration over the position's epoch yields from
        its start: len(self), but fewer in an epoch resumed at another world
        size (see Loader.epoch_batches)."""
        return self._place()[3]

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
        Loader.state_dict()'s format: exact anywhere with num_workers=0 or
        batchclient.torch.DataLoader. RuntimeError while workers of a plain
        torch DataLoader are inside an epoch, since which of their batches
        the trainer has consumed is known to that DataLoader only (see the
        module doc)."""
        with self._pos.get_lock():
            p = self._pos
            if p[_WORKERS]:
                raise RuntimeError(
                    f"state_dict() inside epoch {p[_EPOCH]} read by {p[_WORKERS]} workers of a "
                    "torch DataLoader: only that DataLoader knows which of the batches its "
                    "workers have handed over the training loop has consumed. Iterate with "
                    "batchclient.torch.DataLoader(ds, num_workers=...), which counts them (exact "
                    "anywhere), or take the state after the epoch's loop")
            e, b, start = p[_EPOCH], p[_BATCH], p[_START]
        return position_state(self._state, e, b, start)

    def load_state_dict(self, state):
        """Resume at a state_dict() position: of this dataset, of a Loader,
        or of any rank of a run at another world size or batch size, as
        Loader.load_state_dict() does; ValueError naming what differs."""
        e, sample = check_state(state, self._state, self._len, self._samples)
        place = resume_place(e, sample, self.batch_size, self.world, self._len)
        count = self._len
        if place[2]:
            # The library counts the batches of a schedule begun at a sample.
            probe = self._probe()
            try:
                probe.load_state_dict(state)
                place, count = probe._place(), probe.epoch_batches()
            finally:
                probe.close()
        with self._pos.get_lock():
            self._put(*place, count)
        self._resume = place[:2]

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

    def _here(self, place, stride):
        """This process's Loader at place (epoch, batch, start_sample),
        serving every stride-th batch; opened on first use (a forked
        worker's copy of the parent's is dropped: the parent's stream is
        not its to use), reopened only where its stream stands elsewhere."""
        if self._loader is None or self._pid != os.getpid():
            self._loader = Loader(**self._kw, _place=place, _stride=stride)
            self._pid = os.getpid()
        else:
            self._loader._seek(place, stride)
        return self._loader

    def __iter__(self):
        info = get_worker_info()
        if info is None:
            return self._serve(self._place(), self._counted)
        n = info.num_workers
        if n > MAX_WORKERS:
            raise ValueError(f"num_workers={n}: batchclient.torch supports up to "
                             f"{MAX_WORKERS} workers per DataLoader")
        run = None
        with self._pos.get_lock():
            if self._counted:
                place = tuple(self._pos[_FROM:_FROM + 4])
            else:
                place = tuple(self._pos[_PLACE])
                # Which iteration this is: the DataLoader's seed differs for every
                # iterator, and persistent workers count their iterations alike.
                # (The position stays put until the last worker is done.)
                self._runs += 1
                run = (n, info.seed - info.id, self._runs)
                if tuple(self._pos[_WORKERS:_RUN + 1]) != run:
                    self._pos[_DONE] = 0
                    self._pos[_WORKERS:_RUN + 1] = run
        return self._share(place, info.id, n, run)

    def _serve(self, place, counted):
        """num_workers=0: the epoch from place, zero-copy."""
        epoch, b0, start, count = place
        for b in self._here((epoch, b0, start), 1):
            if not counted:
                with self._pos.get_lock():
                    self._put(epoch, b.index + 1, start, count)
            yield self._collate(b)

    def _share(self, place, k, n, run):
        """Worker k of n: batches b0 + k, b0 + k + n, ... of the epoch,
        copied out. Under a plain DataLoader (run: this iteration's
        identity) it then marks its share delivered, and the last worker
        of the iteration moves the position to the next epoch."""
        epoch, b0, start, count = place
        if b0 + k < count:
            for b in self._here((epoch, b0 + k, start), n):
                yield _detached(b, self._collate)
        if run is None:
            return
        with self._pos.get_lock():
            p = self._pos
            if tuple(p[_PLACE]) != place or tuple(p[_WORKERS:_RUN + 1]) != run:
                return          # set_epoch(), load_state_dict() or a newer iteration meanwhile
            p[_DONE] |= 1 << k
            if p[_DONE] == (1 << n) - 1:
                self._put(epoch + 1, 0)


# ---- a DataLoader that knows what the training loop consumed -----------------------------------


class DataLoader(torch.utils.data.DataLoader):
    """torch.utils.data.DataLoader over a BatchdDataset, counting the batches
    its iterators hand to the training loop, so that ds.state_dict() (and
    dl.state_dict()) is exact at any point, with any num_workers: taken
    after the step on the m-th batch of an epoch, resuming continues at
    the batch after it. Arguments are torch's, by keyword (num_workers,
    pin_memory, persistent_workers, prefetch_factor, multiprocessing_context,
    timeout, worker_init_fn, ...); batch_size must stay None (batchd makes
    the batches) and sampler, batch_sampler and shuffle unset (the dataset
    orders them). Breaking out of an epoch leaves the position after the
    last batch handed over; the next iteration (or a new iterator started
    mid-epoch, which supersedes the old one) continues from there.
    """

    def __init__(self, dataset, batch_size=None, **kwargs):
        if not isinstance(dataset, BatchdDataset):
            raise TypeError(f"batchclient.torch.DataLoader reads a BatchdDataset, not a "
                            f"{type(dataset).__name__}: use torch.utils.data.DataLoader for "
                            "other datasets")
        if batch_size is not None:
            raise ValueError(f"batch_size={batch_size!r}: batchd makes the batches (the "
                             f"BatchdDataset's batch_size, {dataset.batch_size}); leave the "
                             "DataLoader's batch_size None")
        for k in ("sampler", "batch_sampler", "shuffle"):
            if kwargs.get(k) not in (None, False):
                raise ValueError(f"{k}={kwargs[k]!r}: a BatchdDataset orders its batches "
                                 "itself (its shuffle and seed); leave the DataLoader's unset")
        super().__init__(dataset, batch_size=None, **kwargs)

    def __iter__(self):
        ds = self.dataset
        counted = _Counted(ds)
        # Workers started now (copies of ds, forked or pickled) leave the
        # position to the count; persistent ones keep that for good.
        ds._counted = True
        try:
            counted._it = super().__iter__()
        finally:
            ds._counted = False
        return counted

    def state_dict(self):
        """The dataset's state_dict(): exact at any point (see the class doc)."""
        return self.dataset.state_dict()

    def load_state_dict(self, state):
        """The dataset's load_state_dict(): the next iteration resumes there."""
        self.dataset.load_state_dict(state)


class _Counted:
    """One iteration of a batchclient.torch.DataLoader: torch's iterator,
    moving the dataset's position past each batch it hands over. The
    batches arrive in the rank's order (worker k of n serves every n-th
    batch from b0 + k and DataLoader takes one from each in turn), so the
    m-th handed over is batch b0 + m - 1."""

    def __init__(self, ds):
        self._ds = ds
        self._it = None
        with ds._pos.get_lock():
            self._place = tuple(ds._pos[_PLACE])
            # From here the count is exact: a plain DataLoader's iteration
            # (its bookkeeping) is over, and this one's workers start here.
            ds._put(*self._place)
            ds._pos[_FROM:_FROM + 4] = self._place
        self._taken = 0
        self._moved = False
        ds._count_gen += 1
        self._gen = ds._count_gen

    def __iter__(self):
        return self

    def __next__(self):
        ds = self._ds
        if self._gen != ds._count_gen:
            raise RuntimeError("a newer iteration over this BatchdDataset has started "
                               "(iter(dataloader) again): continue with that one")
        item = next(self._it)
        epoch, b0, start, count = self._place
        with ds._pos.get_lock():       # a recursive lock: _place() takes it too
            if not self._moved and ds._place() == ds._normal(epoch, b0 + self._taken, start,
                                                             count):
                self._taken += 1
                ds._put(epoch, b0 + self._taken, start, count)
            else:
                # set_epoch() or load_state_dict() moved it meanwhile: theirs stands.
                self._moved = True
        return item

