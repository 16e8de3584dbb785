# SPDX-License-Identifier: MIT
"""Exceptions of the batchclient package.

Every failure reported by libbatchclient or the daemon becomes a
BatchdError: an OSError whose errno is the (positive) errno of the failure,
whose `message` is the daemon's own text (bc_client_error() or
bc_stream_error()) when it gave one, and whose str() reads as one
sentence: what was being done, why it failed, and the errno's name.
Subclasses say what the caller can do about it.
"""
import errno as _errno

from . import _lib


class BatchdError(OSError):
    """A request to batchd failed. `errno` is the errno, `message` the
    daemon's or the library's explanation, `context` what was being done."""

    def __init__(self, err, message, context=""):
        err = abs(int(err))
        super().__init__(err, message)
        self.message = message
        self.context = context

    def __str__(self):
        name = _errno.errorcode.get(self.errno, f"errno {self.errno}")
        head = f"{self.context}: " if self.context else ""
        return f"{head}{self.message} ({name})"

    def __reduce__(self):
        return (type(self), (self.errno, self.message, self.context))


class ConnectError(BatchdError):
    """No batchd answered at the socket (not running, wrong path, refused).
    `message` is libbatchclient's: the socket tried, how it was chosen
    (the argument, $BATCHD_SOCKET, /run/batchd/batchd.sock or
    $XDG_RUNTIME_DIR) and the likely fix."""


class DaemonGoneError(BatchdError):
    """The daemon stopped the stream (EPIPE: it died; ESHUTDOWN: it shut
    down or ended the session). Reconnect with a new Loader to go on;
    state_dict() taken before still resumes exactly."""


class BatchError(BatchdError):
    """The daemon could not build one batch (e.g. a corrupt block); the
    stream has moved past it, so iterating again continues with the next
    batch. `epoch` and `batch` name the batch that was lost."""

    def __init__(self, err, message, context="", epoch=None, batch=None):
        super().__init__(err, message, context)
        self.epoch = epoch
        self.batch = batch

    def __reduce__(self):
        return (type(self), (self.errno, self.message, self.context, self.epoch, self.batch))


class PinnedBatchError(BatchdError):
    """Arrays, tensors or memoryviews made from an older batch are still
    alive. Batches live in a ring the daemon reuses in order, so an old
    batch that cannot be given back stops the daemon from staging new ones.
    Copy what you keep (arr.copy(), tensor.clone(), bytes(view)) or drop
    the references."""


def from_code(r, message, context="", cls=None):
    """The exception for a negative errno r from libbatchclient."""
    if not message:
        message = _lib.text(_lib.lib().bc_strerror(r))
    if cls is None:
        if -r in (_errno.EPIPE, _errno.ESHUTDOWN, _errno.EPROTO):
            cls = DaemonGoneError
        else:
            cls = BatchdError
    return cls(-r, message, context)


def connect_error(r, where):
    """The ConnectError for bc_connect's negative errno r, with the
    library's own explanation (bc_client_error(NULL), read on the thread
    that called bc_connect); `where` names the socket if it gave none."""
    message = _lib.text(_lib.lib().bc_client_error(None))
    if not message:
        return from_code(r, "", f"cannot connect to batchd at {where}", ConnectError)
    return ConnectError(-r, message)
