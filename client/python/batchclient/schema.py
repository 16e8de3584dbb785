# SPDX-License-Identifier: MIT
"""A dataset's schema as Python sees it: its named, typed fields.

Why this module exists: a sample of a pack is a record of fields (proto/
PACK.md §Fields): `bytes` fields (an image, a JSON document) in the
compressed blocks, and `int64`, `float32`, `float64` and `str` fields in
dense columns beside them. libbatchclient hands the schema over as C
structs that live as long as the stream; this module copies it into
immutable Python objects once per stream, so a Loader can show it after
the stream is gone and a Batch can find a field by name without calling
into C.

A pack made before fields existed reads as one bytes field, "data".
"""
import ctypes
import dataclasses
import errno

from . import _lib
from .errors import BatchdError

# The NumPy dtype of one value of each scalar type (little-endian, as stored).
SCALAR_DTYPES = {"int64": "<i8", "float32": "<f4", "float64": "<f8"}


def _text(b):
    """Names from the pack: field names are ASCII; class names are the bytes of
    directory names, decoded as os.fsdecode would (undecodable bytes kept)."""
    return b.decode("utf-8", "surrogateescape")


@dataclasses.dataclass(frozen=True)
class Field:
    """One field of a dataset's schema.

    name: the field's name ("data", "label", "jpg", ...).
    type: "bytes", "int64", "float32", "float64" or "str".
    classes: for an int64 label field made from directory names, the class
        names (a tuple: value i is classes[i]); otherwise None.
    fixed_size: for a bytes field whose samples all have the same size,
        that size in bytes (batch[name] is then one [B, fixed_size] array);
        0 otherwise.
    selected: whether the Loader delivers it (Loader(fields=...)).
    index: its position in the schema.
    shape: for a bytes field the daemon decodes into an image
        (Loader(decode=...)), one sample's tensor shape, (3, H, W) or
        (H, W, 3); for a token session's "tokens" and "position_ids"
        (Loader(seq_len=...)), (seq_len + 1,); None otherwise.
    element: the NumPy dtype of a bytes field's elements when they are not
        bytes: '<i4' for a token session's fields; None otherwise.
    flat: the batch's values of the field end to end are one 1-D array
        (a token session's "cu_seqlens"), whatever each sample holds.
    """

    name: str
    type: str
    classes: tuple = None
    fixed_size: int = 0
    selected: bool = True
    index: int = 0
    shape: tuple = None
    element: str = None
    flat: bool = False

    @property
    def dtype(self):
        """The NumPy dtype string of a scalar field ('<i8', '<f4', '<f8') or of
        a token field's elements ('<i4'), else None."""
        return self.element or SCALAR_DTYPES.get(self.type)


def read(handle):
    """The schema of an open bc_stream, as a tuple of Field in schema order."""
    L = _lib.lib()
    count = ctypes.c_uint32()
    infos = L.bc_stream_schema(handle, ctypes.byref(count))
    if not infos or count.value == 0:
        raise BatchdError(errno.EPROTO, "libbatchclient gave the stream no schema")
    out = []
    for i in range(count.value):
        info = infos[i]
        name = _text(info.name or b"")
        kind = _lib.FIELD_TYPES.get(info.type)
        if kind is None:
            raise BatchdError(errno.EPROTO, f"field {name!r} has type {info.type}, which this "
                              "batchclient does not know: upgrade the Python package with batchd")
        classes = None
        if info.class_count:
            classes = tuple(_text(info.classes[k] or b"") for k in range(info.class_count))
        out.append(Field(name, kind, classes, int(info.fixed_size) if kind == "bytes" else 0,
                         bool(info.selected), i))
    return tuple(out)
