# SPDX-License-Identifier: MIT
"""Exceptions of the batchclient package.

Every failure reported by libbatchclient or the daemon becomes a
BatchdError: an OSError whose errno is the (positive) errno of the failure,
whose `message` is the daemon's own text (bc_client_error() or
bc_stream_error()) when it gave one, and whose str() reads as one
sentence: what was being done, why it failed, and the errno's name.
Subclasses say what the caller can do about it.

Which is which: libbatchclient's errnos overlap (EPROTO is a ring broken
by the client, and also a remote server's reply that broke the protocol;
ETIMEDOUT a wait that ran out, and also a remote fetch that did), so the
exception is chosen by what happened, not by the errno alone: a batch
that failed has moved the stream on (BatchError, or RemoteError when its
reason names a remote object), a stream the daemon stopped or a daemon
that died has not (DaemonGoneError).
"""
import errno as _errno
import re as _re

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
    down or ended the session; EPROTO: it ended the session because the
    client broke the ring protocol). Reconnect with a new Loader to go on;
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


# The faults of the remote path, as batchd and its S3 client report them, and what each means.
REMOTE_FAULTS = {
    _errno.EPROTO: "the server's reply broke the protocol",
    _errno.ETIMEDOUT: "timed out",
    _errno.EIO: "the transfer failed",
    _errno.EAGAIN: "a timeout, 5xx or dropped connection that outlasted the retries",
}

# A remote location in a message: s3://BUCKET/KEY or an http(s):// URL, up to
# the ": " that ends it in batchd's messages (or a space or parenthesis).
_LOCATION = _re.compile(r"(?:s3|https?)://[^\s()]+?(?=:\s|[\s()]|:?$)")


def remote_object(message, dataset=""):
    """The remote object a failure's message names: the last s3:// or
    http(s):// location in it (batchd names the dataset first and the
    object that failed last), else dataset when it is one; None when
    neither names one."""
    found = _LOCATION.findall(message or "")
    if found:
        return found[-1]
    if _LOCATION.match(dataset or ""):
        return dataset
    return None


class RemoteError(BatchError):
    """batchd is running, but the object store behind a remote dataset
    failed it: `object` is the object (s3://BUCKET/KEY or its URL), errno
    the fault (REMOTE_FAULTS: EPROTO, ETIMEDOUT, EIO, EAGAIN) and
    `message` batchd's account of it. A failed batch is a BatchError like
    any other (`epoch` and `batch` name it; the stream has moved past it,
    so iterating again goes on), and once the server is fixed the next
    batches come; a failed open has `epoch` and `batch` None. Nothing to
    reconnect: the daemon did not go away."""

    def __init__(self, err, message, context="", epoch=None, batch=None, obj=None):
        super().__init__(err, message, context, epoch, batch)
        self.object = obj

    def __str__(self):
        name = _errno.errorcode.get(self.errno, f"errno {self.errno}")
        head = f"{self.context}: " if self.context else ""
        fault = REMOTE_FAULTS.get(self.errno, "it failed")
        return f"{head}remote object {self.object}: {fault}: {self.message} ({name})"

    def __reduce__(self):
        return (type(self), (self.errno, self.message, self.context, self.epoch, self.batch,
                             self.object))


def remote_error(r, message, context, dataset, epoch=None, batch=None):
    """The RemoteError for negative errno r when it is a remote fault
    whose message (or dataset) names a remote object; None otherwise."""
    if -r not in REMOTE_FAULTS:
        return None
    obj = remote_object(message, dataset)
    if obj is None:
        return None
    return RemoteError(-r, message or _lib.text(_lib.lib().bc_strerror(r)), context, epoch,
                       batch, obj)


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
        # Not EPROTO: from a request it is the daemon's answer (a remote
        # server's fault, say); only a ring stop means the session is gone,
        # and the Loader tells that from a failed batch itself.
        if -r in (_errno.EPIPE, _errno.ESHUTDOWN):
            cls = DaemonGoneError
        else:
            cls = BatchdError
    return cls(-r, message, context)


def open_error(r, message, dataset):
    """The exception for bc_open's negative errno r: a RemoteError when
    the remote path failed it, else as from_code."""
    context = f"cannot open dataset {dataset!r}"
    return remote_error(r, message, context, dataset) or from_code(r, message, context)


def connect_error(r, where):
    """The ConnectError for bc_connect's negative errno r, with the
    library's own explanation (bc_client_error(NULL), read on the thread
    that called bc_connect); `where` names the socket if it gave none."""
    message = _lib.text(_lib.lib().bc_client_error(None))
    if not message:
        return from_code(r, "", f"cannot connect to batchd at {where}", ConnectError)
    return ConnectError(-r, message)
