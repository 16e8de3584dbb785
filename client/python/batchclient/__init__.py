# SPDX-License-Identifier: MIT
"""batchclient: mini-batches from batchd for NumPy and PyTorch trainers.

batchd reads, checks and decompresses a dataset ahead of the trainer and
stages each batch in shared memory; this package hands those bytes to
Python with no copy. Switching a PyTorch loop over is three lines:

    import batchclient
    loader = batchclient.Loader("mnist.bpk", batch_size=128, shuffle="global")
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader:
            x = batch.torch(torch.uint8, (28 * 28 + 1,))   # a view, not a copy
            ...

What a batch offers (batchclient.batch.Batch): ids, epoch, index, data
(one memoryview), samples (a memoryview per sample), numpy(dtype, shape)
and torch(dtype, shape) for fixed-size samples; for datasets with fields
(labels, several bytes fields, text, keys):

    loader = batchclient.Loader("train", 256, fields=["data", "label"], keys=True)
    loader.classes                      # the label field's class names
    for batch in loader:
        y = batch.torch("label")        # int64 [B], no copy
        images = batch["data"]          # B memoryviews (or one [B, n] array)
        names = batch.keys              # each sample's relative path

Images decoded and augmented in the daemon (batchclient.image):

    loader = batchclient.Loader("train", 64, fields=["data", "label"],
                                decode={"data": batchclient.Image(224)})
    for batch in loader:
        x = batch.torch("data")         # uint8 [B, 3, 224, 224]

Views stay valid while
they live; the batch's own memoryviews are revoked when it is released
(at the next step of the iteration, at batch.release() or Loader.close()),
see batchclient.batch for the full lifetime rules.

GPU placement: Loader(..., device=0) has batchd copy every batch into that
GPU's memory as well; call batch.wait_stream(stream) before reading it on
`stream`, then torch.as_tensor(batch, device="cuda") is a uint8 view of
the device bytes (batch.__cuda_array_interface__), valid until the batch
is released. See batchclient.batch.

The package is pure Python over libbatchclient (ctypes); see
batchclient._lib for how the library is found ($BATCHCLIENT_LIB first).
Importing it loads nothing: the library is loaded at first use, NumPy and
torch where a batch becomes an array or a tensor. batchclient.check() (or
`python -m batchclient`) says now where the library was found or why not,
whether NumPy and torch are there, and whether a daemon answers.
"""
from ._check import check
from ._deps import install_hint
from .batch import Batch, ReleasedError
from .errors import (BatchdError, BatchError, ConnectError, DaemonGoneError,
                     PinnedBatchError, RemoteError)
from .image import Image
from .loader import Loader, WaitTimeout, rank_and_world, status
from .schema import Field


def _version():
    """The meson project version: recorded in _buildconfig.py by meson
    install or the wheel builder; in a source checkout (PYTHONPATH or
    pip install -e), read from the checkout's meson.build."""
    try:
        from ._buildconfig import VERSION
        return VERSION
    except ImportError:
        pass
    import os
    import re
    meson = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, os.pardir, "meson.build")
    try:
        with open(meson, encoding="utf-8") as f:
            m = re.search(r"project\s*\((?:[^()]|\([^()]*\))*?\bversion\s*:\s*'([^']+)'", f.read())
    except OSError:
        m = None
    return m.group(1) if m else "0+unknown"


__version__ = _version()

__all__ = [
    "Batch", "Image", "BatchError", "BatchdError", "ConnectError", "DaemonGoneError", "Field", "Loader",
    "PinnedBatchError", "ReleasedError", "RemoteError", "WaitTimeout", "check", "install_hint",
    "rank_and_world", "status",
]
