# SPDX-License-Identifier: MIT
"""One mini-batch in shared memory, and the views that read it without a copy.

Why this module exists: a batch is bytes in a ring that batchd reuses once
the batch is given back, and unmaps when the stream closes. Python must be
able to look at those bytes with no copy (memoryviews, NumPy arrays, torch
tensors), yet must never read a slot after it was reused or unmapped.

The lifetime scheme ("pinning"):

* Every view of a batch is built on a ctypes array over the batch's
  payload, the *exporter* (one per contiguous region: the payload, and
  each field's values that batch[name] shows). Each memoryview on it, and everything made from
  such a memoryview (slices, casts, NumPy arrays from np.frombuffer, arrays
  derived from those, tensors from torch.from_numpy), keeps a reference
  chain to the exporter. The batch keeps only a weak reference to it, so
  the exporter is alive exactly as long as some view of the batch is.
* Releasing a batch (batch.release(), the next step of the iteration, or
  closing the loader) *revokes* the views the batch handed out itself:
  batch.data and batch.samples are memoryview.release()d, so using them
  raises ValueError, and the batch's methods raise ReleasedError. The
  memoryviews batch[name] gives for a bytes field are revoked the same way.
* Views the batch cannot revoke (NumPy arrays and tensors, memoryviews the
  caller sliced or cast from batch.samples) *pin* the batch: while the
  exporter is alive the loader does not give the slot back to the daemon,
  and does not close the stream (unmapping the ring) either. The bytes
  such a view shows therefore stay valid and unchanged for as long as the
  view exists; it is never pointed at freed or reused memory. When the
  last view dies, the slot is given back at the loader's next step (or, for
  a closed loader, the stream is closed then).
* The daemon reclaims slots strictly in order, so an old pinned batch
  stops it from staging new ones. The loader therefore lets only the most
  recently yielded batch stay pinned while it takes the next one (exactly
  what `x = batch.numpy(...)` still bound during the next step does), and
  raises PinnedBatchError otherwise, instead of waiting forever. Keep data
  beyond one step with arr.copy(), tensor.clone() or bytes(view).

In-place ops: the views show the batch through libbatchclient's
writable view (bc_batch_data_writable): a copy-on-write mapping of the
session's memory, private to this process. Tensors from torch() and
torch(name), and arrays from numpy(..., writable=True), may be modified in
place (t.sub_(mean), t[:] = 0, relu(t, inplace=True)); a page written
becomes this process's own copy, so the daemon, other sessions and later
batches never see the change, and every view of the same batch (data,
samples, numpy(), batch[name]) does. The other views are read-only
(memoryviews, NumPy arrays with writeable=False), so a stray write there
raises instead. Releasing the batch drops the written copies; since a
live tensor pins its batch (above), no tensor can write memory that a
later batch uses. Where the kernel refuses such a mapping, torch() and
numpy(writable=True) return a copy instead (with a RuntimeWarning).

GPU batches (a Loader opened with device=N) are also in that GPU's memory,
copied there by batchd asynchronously:

    s = torch.cuda.current_stream()
    batch.wait_stream(s)                           # first: s waits for the copy (GPU side)
    x = torch.as_tensor(batch, device="cuda")      # uint8 [nbytes] over device memory, no copy

wait_stream() must come before any work that reads the device bytes, on
the stream that does it (kernels on other streams must be ordered after
that stream by the caller). __cuda_array_interface__ (torch.as_tensor,
cupy.asarray) first waits on the host until the copy has landed, so the
"stream": None it exports (version 3: the consumer need not synchronize)
is true. Releasing the batch records,
on that stream, the event batchd waits for before it copies another batch
into the same device memory: work queued on the stream before the release
is safe, anything later is not. Device views do not pin the batch (the
GPU keeps no Python references), so a tensor over device memory is valid
until the batch is released, that is until the next step: .clone() what
you keep longer. The host views above stay available on GPU batches too.
"""
import ctypes
import errno
import math
import warnings
import weakref

from . import _deps, _lib
from .errors import BatchdError


class ReleasedError(ValueError):
    """The batch was released: its views are revoked and its memory may be
    reused. Take data out before releasing (copy), or keep using views
    made while it was held (they pin it; see batchclient.batch)."""


def _stream_handle(stream):
    """A CUstream / cudaStream_t value from None, an int, or an object with
    .cuda_stream (torch.cuda.Stream)."""
    if stream is None:
        return None
    handle = getattr(stream, "cuda_stream", stream)
    if isinstance(handle, bool) or not isinstance(handle, int) or handle < 0:
        raise TypeError(f"stream {stream!r}: need None (the legacy default stream), a "
                        "CUstream handle as an int, or an object with .cuda_stream "
                        "(torch.cuda.Stream)")
    return handle or None


def _from_numpy(arr):
    return _deps.need("torch", "a batch as a tensor needs PyTorch").from_numpy(arr)


def _sample_shape(f):
    """One sample's shape of dense field f: () for a scalar."""
    if f.type != "bytes":
        return ()
    return tuple(f.shape) if f.shape else (f.fixed_size,)


class Batch:
    """A batch delivered by batchd, valid until released.

    Attributes: epoch, index (within the epoch, for this rank), ids (global
    sample ids, a tuple of ints), skipped (ids of bad images left out of
    it, with Image(on_error="skip"); else ()), nbytes (payload bytes), device_nbytes
    (bytes in device memory: nbytes on GPU streams, else 0). len(batch) is
    the number of samples. Views: data, samples, numpy(), torch(); on GPU
    streams also device_ptr, wait_stream() and __cuda_array_interface__.
    data, samples, numpy() and torch(dtype, shape) show the first selected
    bytes field (the whole sample of a pack made from plain files).

    Fields: batch[name] (arrays for scalars and fixed-size bytes, lists
    otherwise), torch(name), `name in batch`, fields (the selected names)
    and keys (with Loader(keys=True)).
    """

    def __init__(self, stream, handle):
        L = _lib.lib()
        n = ctypes.c_size_t()
        self._stream = stream
        self._h = handle
        self.epoch = L.bc_batch_epoch(handle)
        self.index = L.bc_batch_index(handle)
        count = L.bc_batch_count(handle)
        addr = L.bc_batch_data(handle, ctypes.byref(n))
        sid = L.bc_batch_sample_id
        self.ids = tuple(sid(handle, i) for i in range(count))
        self.skipped = ()         # ids of the bad images left out (Image(on_error="skip"))
        if not L.missing_skips:
            left = ctypes.POINTER(ctypes.c_uint64)()
            k = L.bc_batch_skipped(handle, ctypes.byref(left))
            self.skipped = tuple(left[i] for i in range(k))
        self._count = count
        self._ro_addr = addr or 0  # the read-only view's address, which the C calls speak of
        self._wdelta = None       # writable view's address minus the read-only's, once known
        self.nbytes = n.value
        dev = L.bc_batch_device_data(handle, ctypes.byref(n))
        self._dev = dev or None   # device address, None for host batches
        self.device_nbytes = n.value if dev else 0
        self._released = False
        self._exps = {}           # region ("data" or a field index) -> weakref to its exporter
        self._views = []          # memoryviews to revoke at release
        self._data = None
        self._samples = None
        self._np_mv = None
        self._np_wmv = None
        self._spans = None        # (offset, size) per sample
        self._fviews = {}         # (field index, writable) -> (address, memoryview) of its region
        self._fvalues = {}        # field index -> list of sample views, or of str
        self._keys = None

    def __len__(self):
        return self._count

    def __repr__(self):
        state = "released" if self._released else "held"
        where = f" cuda:{self._stream.device}" if self._dev is not None else ""
        return (f"<batchclient.Batch epoch={self.epoch} index={self.index} "
                f"samples={self._count} bytes={self.nbytes}{where} {state}>")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    @property
    def released(self):
        return self._released

    @property
    def pinned(self):
        """True while a view of this batch is alive (see the module doc)."""
        return bool(self._live_exporters())

    def _live_exporters(self):
        return [e for e in (r() for r in self._exps.values()) if e is not None]

    # ---- views ---------------------------------------------------------------------

    def _check(self):
        if self._released:
            raise ReleasedError(f"batch {self.epoch}:{self.index} was released; its views "
                                "are gone (copy what you need before releasing)")

    def _delta(self):
        """How far the writable view lies from the read-only one: every view
        of the batch is made there (see the module doc), so they all show
        the same bytes. None where the kernel refused the mapping: the
        views are then over the read-only memory."""
        if self._wdelta is None:
            self._check()
            L = _lib.lib()
            p = ctypes.c_void_p()
            n = ctypes.c_size_t()
            r = L.bc_batch_data_writable(self._h, ctypes.byref(p), ctypes.byref(n))
            if r == -errno.EINVAL:
                raise BatchdError(-r, _lib.text(L.bc_strerror(r)),
                                  f"writable view of batch {self.epoch}:{self.index}")
            self._wdelta = (p.value or 0) - self._ro_addr if r == 0 else False
            if r < 0:
                self._no_writable = self._stream.error() or _lib.text(L.bc_strerror(r))
        return self._wdelta if self._wdelta is not False else None

    @property
    def _addr(self):
        """The payload's address in the memory the views show."""
        return self._ro_addr + (self._delta() or 0)

    def _copy_instead(self, arr):
        """A writable copy of arr, where the batch has no writable view."""
        warnings.warn(f"batch {self.epoch}:{self.index} has no writable view "
                      f"({self._no_writable}): a copy is returned", RuntimeWarning, stacklevel=3)
        return arr.copy()

    def _check_payload(self):
        """The sample views show the first selected bytes field: refuse them,
        rather than show empty samples, when the Loader selected none."""
        self._check()
        if not self._stream.has_bytes:
            raise ValueError(f"the Loader selected no bytes field (fields="
                             f"{list(self._stream.selected)}): data, samples, numpy() and "
                             "torch(dtype) show the first selected bytes field; read the "
                             "fields with batch[name]")

    def _exporter(self, region, addr, nbytes):
        """The exporter of one contiguous region: the payload ("data") or a
        field's values (its index). Each region has its own, so a view of
        any of them pins the batch."""
        self._check()
        ref = self._exps.get(region)
        exp = ref() if ref is not None else None
        if exp is None:
            if nbytes == 0:
                exp = (ctypes.c_ubyte * 0)()
            else:
                exp = (ctypes.c_ubyte * nbytes).from_address(addr)
            self._exps[region] = weakref.ref(exp)
        return exp

    def _memoryview(self, region="data", addr=None, nbytes=None, writable=False):
        """A fresh byte memoryview of a region (its own buffer export; the
        payload by default), read-only unless writable, recorded for
        revocation."""
        if region == "data":
            addr, nbytes = self._addr, self.nbytes
        exp = self._exporter(region, addr, nbytes)
        w = memoryview(exp)
        v = (w if writable else w.toreadonly()).cast("B")
        w.release()
        self._views.append(v)
        return v

    @property
    def data(self):
        """All samples' bytes, back to back, as a read-only memoryview (no copy)."""
        self._check_payload()
        if self._data is None:
            self._data = self._memoryview()
        return self._data

    def _load_spans(self):
        if self._spans is None:
            L = _lib.lib()
            p = ctypes.c_void_p()
            n = ctypes.c_size_t()
            spans = []
            for i in range(self._count):
                r = L.bc_batch_sample(self._h, i, ctypes.byref(p), ctypes.byref(n))
                if r < 0:
                    raise BatchdError(-r, _lib.text(L.bc_strerror(r)),
                                      f"sample {i} of batch {self.epoch}:{self.index}")
                off = (p.value or self._ro_addr) - self._ro_addr
                if off < 0 or off + n.value > self.nbytes:
                    raise BatchdError(74, "sample lies outside its batch",  # EBADMSG
                                      f"sample {i} of batch {self.epoch}:{self.index}")
                spans.append((off, n.value))
            self._spans = spans
        return self._spans

    @property
    def sizes(self):
        """Each sample's size in bytes (a tuple)."""
        self._check_payload()
        return tuple(s for _, s in self._load_spans())

    @property
    def samples(self):
        """One read-only memoryview per sample (no copy), revoked at release."""
        self._check_payload()
        if self._samples is None:
            base = self.data
            views = [base[o:o + s] for o, s in self._load_spans()]
            self._views.extend(views)
            self._samples = views
        return list(self._samples)

    def _sample_bytes(self, itemsize, shape):
        """Bytes per sample for a dense [count, *shape] view, checked exactly."""
        count = self._count
        if shape is None:
            if count == 0:
                return 0, (0,)
            sb = self.nbytes // count
        else:
            shape = (shape,) if isinstance(shape, int) else tuple(int(d) for d in shape)
            if any(d < 0 for d in shape):
                raise ValueError(f"shape {shape}: dimensions must be >= 0")
            sb = math.prod(shape) * itemsize
        if self.nbytes != sb * count:
            each = self.nbytes // count if count else 0
            if count and each * count == self.nbytes and self._stream.max_sample == each:
                raise ValueError(f"samples are {each} bytes, but shape {shape} of "
                                 f"{itemsize}-byte items is {sb} bytes")
            raise ValueError(f"batch {self.epoch}:{self.index}: {self.nbytes} bytes are not "
                             f"{count} samples of {sb} bytes; samples differ in size: use "
                             "batch.samples or a collate hook")
        # Every sample <= max_sample and they sum to count * sb: when max_sample
        # is sb, every sample is exactly sb. Otherwise look at each one.
        if count and self._stream.max_sample != sb:
            bad = [i for i, (_, s) in enumerate(self._load_spans()) if s != sb]
            if bad:
                raise ValueError(f"batch {self.epoch}:{self.index}: sample {bad[0]} has "
                                 f"{self._spans[bad[0]][1]} bytes, not {sb}; samples differ "
                                 "in size: use batch.samples or a collate hook")
        if sb % itemsize:
            raise ValueError(f"samples of {sb} bytes do not divide into items of {itemsize}")
        if shape is None:
            shape = (sb // itemsize,)
        return sb, shape

    def numpy(self, dtype="uint8", shape=None, writable=False):
        """The batch as a NumPy array of shape (len(batch), *shape), over
        the shared memory (no copy). shape is one sample's shape; None
        means 1-D (bytes per sample / itemsize). Needs fixed-size samples.
        Read-only (writeable=False) unless writable: then in-place ops
        change this process's view only (see the module doc). The array
        pins the batch while it lives."""
        np = _deps.need("numpy", "batch.numpy() is a NumPy array")
        self._check_payload()
        dt = np.dtype(dtype)
        if dt.itemsize == 0 or dt.hasobject:
            raise ValueError(f"dtype {dt}: need a fixed-size plain data type")
        sb, shape = self._sample_bytes(dt.itemsize, shape)
        if writable and self._delta() is not None:
            if self._np_wmv is None:
                self._np_wmv = self._memoryview(writable=True)
            mv = self._np_wmv
        else:
            if self._np_mv is None:
                self._np_mv = self._memoryview()
            mv = self._np_mv
        flat = np.frombuffer(mv, dtype=dt, count=self.nbytes // dt.itemsize)
        arr = flat.reshape((self._count,) + tuple(shape))
        return self._copy_instead(arr) if writable and not arr.flags.writeable else arr

    def torch(self, dtype=None, shape=None):
        """The batch as a torch tensor of shape (len(batch), *shape) over the
        shared memory (no copy; torch.from_numpy of numpy()). dtype is a
        torch dtype (default torch.uint8). In-place ops on the tensor change
        this process's view of the batch only (see the module doc).

        torch(name) is field `name` as a tensor, the same memory as
        batch[name]: int64 [B] for a label, float32/float64 [B], uint8
        [B, fixed_size] for a fixed-size bytes field, uint8 [B, 3, H, W]
        (or [B, H, W, 3]) for an image the daemon decoded."""
        self._check()
        if isinstance(dtype, str):
            return self._field_tensor(dtype, shape)
        self._check_payload()
        np = _deps.need("numpy", "batch.torch() is made from a NumPy array")
        torch = _deps.need("torch", "batch.torch() is a tensor")
        dtype = torch.uint8 if dtype is None else dtype
        itemsize = torch.empty((), dtype=dtype).element_size()
        sb, shape = self._sample_bytes(itemsize, shape)
        t = _from_numpy(self.numpy(np.uint8, (sb,), writable=True))
        if dtype != torch.uint8:
            t = t.view(dtype)
        return t.reshape((self._count,) + tuple(shape))

    def _field_tensor(self, name, shape):
        if shape is not None:
            raise TypeError(f"torch({name!r}) takes no shape: a field's shape is in the schema "
                            f"(reshape the tensor instead)")
        f = self._field(name)
        if f.flat:
            return _from_numpy(self._flat(f, writable=True))
        if f.type == "str" or (f.type == "bytes" and not f.fixed_size):
            what = "text" if f.type == "str" else "bytes of differing sizes"
            raise ValueError(f"field {name!r} holds {what}: torch() needs a scalar field or a "
                             f"bytes field of fixed size; use batch[{name!r}] (a list)")
        return _from_numpy(self._dense(f, f.dtype or "uint8", _sample_shape(f), writable=True))

    # ---- fields ------------------------------------------------------------------------

    @property
    def sources(self):
        """A mixture's batch (Loader([(path, weight), ...])): each sample's
        source, its index in the Loader's list, as an int64 array [B];
        None for a batch of one dataset."""
        self._check()
        if not self._stream.mixture:
            return None
        return self["source"]

    @property
    def fields(self):
        """The names of the fields this batch carries (the Loader's selection,
        in schema order)."""
        self._check()
        return self._stream.selected

    def __contains__(self, name):
        return isinstance(name, str) and name in self._stream.selected

    # A batch is not a sequence of samples: batch[name] is a field.
    __iter__ = None

    def __getitem__(self, name):
        """Field `name` of every sample of the batch, with no copy where the
        values are contiguous in shared memory:

        int64 / float32 / float64: a read-only NumPy array of shape [B];
        bytes of fixed size (Field.fixed_size): a uint8 array [B, fixed_size];
        an image decoded in the daemon (Loader(decode=...)): uint8 [B, *Field.shape];
        bytes of varying size: a list of B read-only memoryviews;
        str: a list of B str (UTF-8; undecodable bytes kept as surrogates).

        Arrays and memoryviews follow the lifetime rules of the module doc
        (they pin the batch; the memoryviews are revoked at release).
        KeyError for a field the dataset lacks or the Loader did not select."""
        f = self._field(name)
        if f.flat:
            return self._flat(f)
        if f.type == "str":
            return list(self._values(f))
        if f.type == "bytes" and not f.fixed_size:
            return list(self._values(f))
        return self._dense(f, f.dtype or "uint8", _sample_shape(f))

    def _field(self, name):
        self._check()
        return self._stream.field(name)

    def _where(self, f):
        return f"field {f.name!r} of batch {self.epoch}:{self.index}"

    def _field_region(self, f):
        """(address, bytes) of field f's values in the batch."""
        L = _lib.lib()
        p = ctypes.c_void_p()
        n = ctypes.c_size_t()
        r = L.bc_batch_field(self._h, f.index, ctypes.byref(p), ctypes.byref(n))
        if r < 0:
            raise BatchdError(-r, _lib.text(L.bc_strerror(r)), self._where(f))
        return (p.value + (self._delta() or 0) if p.value else 0), n.value

    def _field_view(self, f, writable=False):
        """(address, memoryview) of field f's values, read-only unless writable."""
        key = (f.index, writable)
        got = self._fviews.get(key)
        if got is None:
            addr, n = self._field_region(f)
            got = self._fviews[key] = (addr, self._memoryview(f.index, addr, n, writable))
        return got

    def _dense(self, f, dtype, shape, writable=False):
        np = _deps.need("numpy", f"batch[{f.name!r}] is a NumPy array")
        dt = np.dtype(dtype)
        per = dt.itemsize * math.prod(shape)
        mv = self._field_view(f, writable and self._delta() is not None)[1]
        if len(mv) != per * self._count:
            raise BatchdError(errno.EBADMSG, f"{len(mv)} bytes are not {self._count} values "
                              f"of {per} bytes", self._where(f))
        flat = np.frombuffer(mv, dtype=dt, count=len(mv) // dt.itemsize)
        arr = flat.reshape((self._count,) + shape)
        return self._copy_instead(arr) if writable and not arr.flags.writeable else arr

    def _flat(self, f, writable=False):
        """Field f's values end to end as one 1-D array of its element type
        (a token session's cu_seqlens)."""
        np = _deps.need("numpy", f"batch[{f.name!r}] is a NumPy array")
        dt = np.dtype(f.dtype)
        mv = self._field_view(f, writable and self._delta() is not None)[1]
        if len(mv) % dt.itemsize:
            raise BatchdError(errno.EBADMSG, f"{len(mv)} bytes are no whole number of "
                              f"{dt.itemsize}-byte values", self._where(f))
        arr = np.frombuffer(mv, dtype=dt, count=len(mv) // dt.itemsize)
        return self._copy_instead(arr) if writable and not arr.flags.writeable else arr

    def _values(self, f):
        """Field f's per-sample values: memoryviews (bytes) or str (str)."""
        out = self._fvalues.get(f.index)
        if out is not None:
            return out
        L = _lib.lib()
        p = ctypes.c_void_p()
        n = ctypes.c_size_t()
        addr, base = self._field_view(f) if f.type == "bytes" else (0, None)
        out = []
        for i in range(self._count):
            r = L.bc_batch_field_sample(self._h, f.index, i, ctypes.byref(p), ctypes.byref(n))
            if r < 0:
                raise BatchdError(-r, _lib.text(L.bc_strerror(r)),
                                  f"sample {i} of {self._where(f)}")
            if base is None:
                out.append(ctypes.string_at(p.value, n.value).decode("utf-8", "surrogateescape")
                           if n.value else "")
                continue
            # The C call names the read-only view; base is the writable one (_delta).
            off = (p.value + (self._delta() or 0) if p.value else addr) - addr
            if off < 0 or off + n.value > len(base):
                raise BatchdError(errno.EBADMSG, "sample lies outside its field's values",
                                  f"sample {i} of {self._where(f)}")
            v = base[off:off + n.value]
            self._views.append(v)
            out.append(v)
        self._fvalues[f.index] = out
        return out

    @property
    def keys(self):
        """Each sample's key (a list of str: its relative path, or its
        WebDataset key; UTF-8, undecodable bytes kept as surrogates, like
        os.fsdecode). Needs a Loader made with keys=True."""
        self._check()
        if self._keys is None:
            if not self._stream.keys:
                raise ValueError("sample keys were not asked for: make the Loader with "
                                 "keys=True to receive them")
            L = _lib.lib()
            p = ctypes.c_void_p()
            n = ctypes.c_size_t()
            keys = []
            for i in range(self._count):
                r = L.bc_batch_sample_key(self._h, i, ctypes.byref(p), ctypes.byref(n))
                if r < 0:
                    raise BatchdError(-r, self._stream.error() or _lib.text(L.bc_strerror(r)),
                                      f"key of sample {i} of batch {self.epoch}:{self.index}")
                keys.append(ctypes.string_at(p.value, n.value).decode("utf-8", "surrogateescape")
                            if n.value else "")
            self._keys = keys
        return list(self._keys)

    # ---- device memory (GPU streams) -------------------------------------------------

    @property
    def device_ptr(self):
        """The batch's bytes in the GPU's memory, as an int address (all
        samples back to back, at the same offsets as data), or None for a
        host batch. Valid until release; read it only on a stream that
        wait_stream() made wait (see the module doc)."""
        self._check()
        return self._dev

    def wait_stream(self, stream=None):
        """Make `stream` wait, on the GPU, until the batch's bytes have landed
        in device memory; the CPU does not block. Call it before queueing
        any work that reads them, with the stream that does: None (the
        legacy default stream), a CUstream as an int, or a torch.cuda.Stream
        (anything with .cuda_stream). The batch remembers the stream and, at
        release, records there the event batchd waits for before reusing
        the memory. Returns the batch. ValueError for a host batch;
        BatchdError (EIO) when CUDA refuses, with the driver's reason."""
        self._check()
        if self._dev is None:
            raise ValueError(f"batch {self.epoch}:{self.index} is in host memory: open the "
                             "Loader with device=... for batches in GPU memory")
        handle = _stream_handle(stream)
        L = _lib.lib()
        r = L.bc_batch_wait_stream(self._h, handle)
        if r < 0:
            raise BatchdError(-r, self._stream.error() or _lib.text(L.bc_strerror(r)),
                              f"batch {self.epoch}:{self.index}: waiting on stream "
                              f"{handle or 0:#x}")
        return self

    @property
    def __cuda_array_interface__(self):
        """The device bytes for CUDA array consumers (version 3): a 1-D uint8
        array of device_nbytes, so torch.as_tensor(batch, device='cuda') or
        cupy.asarray(batch) is a view with no copy; view/reshape it to the
        samples' type. Under version 3, stream None means the consumer
        need not synchronize, so this first blocks until the batch's copy
        has completed (bc_batch_sync; usually long done, batches are staged
        ahead); wait_stream() on the consuming stream stays the way to order
        without blocking. Absent (AttributeError) on host batches; BatchdError
        (EIO) when CUDA refuses the wait."""
        if self._dev is None:
            raise AttributeError("a host batch has no __cuda_array_interface__: open the "
                                 "Loader with device=... for batches in GPU memory")
        self._check()
        L = _lib.lib()
        r = L.bc_batch_sync(self._h)
        if r < 0:
            raise BatchdError(-r, self._stream.error() or _lib.text(L.bc_strerror(r)),
                              f"batch {self.epoch}:{self.index}: waiting for its copy")
        return {"version": 3, "shape": (self.device_nbytes,), "typestr": "|u1",
                "data": (self._dev, False), "strides": None, "stream": None}

    # ---- lifetime ---------------------------------------------------------------------

    def _revoke(self):
        """Mark released and release the memoryviews we handed out. Views we
        cannot release (a buffer export is live on them) stay and keep the
        exporter alive: that pins the batch instead."""
        if self._released:
            return
        self._released = True
        for v in self._views:
            try:
                v.release()
            except BufferError:
                pass
        self._views = []
        self._data = self._samples = self._np_mv = self._np_wmv = None
        self._fviews = {}
        self._fvalues = {}

    def release(self):
        """Give the batch back. Its memoryviews are revoked now; arrays and
        tensors made from it keep the bytes valid until they die (the slot
        is given back then). Releasing twice is harmless."""
        if self._released:
            return
        self._revoke()
        self._stream._give_back(self)
