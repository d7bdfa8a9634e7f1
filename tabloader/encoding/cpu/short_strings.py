"""Short strings of one length as 64-bit integers, so that the integer paths count and look
them up: raw Criteo's 8-character hex ids (``"68fd1e64"``), country codes and other
fixed-width codes. Sorting or hashing 8-byte integers is about twice as fast as pyarrow's
hashing of the strings, and the integers come from the string array's own data buffer.

Strings of one byte length ``width`` <= 8 map one to one onto the little-endian uint64 of
their bytes (zeros above ``width`` bytes). A string array qualifies when its non-null strings
all have that length and its null rows none (as pyarrow and parquet readers leave them): its
data buffer is then the non-null strings back to back, ``width`` bytes each, read without
looking at the offsets row by row.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: The longest strings (in UTF-8 bytes) that fit one uint64.
MAX_WIDTH = 8


def pack_strings(values: Any, mask: np.ndarray | None, width: int | None = None) -> tuple[np.ndarray, int] | None:
    """The uint64 codes of the non-null strings of the pyarrow string array ``values`` (in row
    order) and their byte length, or None when they do not all have one length in
    ``[1, MAX_WIDTH]`` (``width`` when given), a null row holds bytes, or ``values`` is no
    (non-empty) string or large_string array. ``mask`` is True exactly at the null rows of
    ``values`` (None when there are none). The codes may be a read-only view of ``values``'
    buffer.

    Example:
        >>> import pyarrow as pa
        >>> codes, width = pack_strings(pa.array(["ab", None, "ba"]), np.array([False, True, False]))
        >>> [hex(int(c)) for c in codes], width
        (['0x6261', '0x6162'], 2)
        >>> pack_strings(pa.array(["ab", "abc"]), None) is None
        True
    """
    import pyarrow as pa

    if not isinstance(values, pa.Array) or not len(values) or not (
            pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        return None
    offsets = _offsets(values)
    start, end = int(offsets[0]), int(offsets[-1])
    valid = len(values) - (0 if mask is None else int(np.count_nonzero(mask)))
    # Strings of one width fill exactly width bytes per valid row: most columns fail this at once,
    # before the per-row lengths are computed (a pass over every offset of a long column).
    if width is None:
        if not valid or (end - start) % valid:
            return None
        width = (end - start) // valid
    if not 1 <= width <= MAX_WIDTH or end - start != width * valid:
        return None
    lengths = np.diff(offsets)
    fits = lengths == width
    if not (fits.all() if mask is None else np.array_equal(fits, ~mask)):
        return None
    if start == end:  # every row null
        return np.zeros(0, np.uint64), width
    data = np.frombuffer(values.buffers()[2], dtype=np.uint8)[start:end]
    if width == MAX_WIDTH:  # the buffer itself (copied only where it is not 8-byte aligned)
        return np.require(data.view("<u8"), requirements="A"), width
    words = np.zeros((len(data) // width, MAX_WIDTH), dtype=np.uint8)
    words[:, :width] = data.reshape(-1, width)
    return words.view("<u8").ravel(), width


def unpack_strings(codes: np.ndarray, width: int, type: Any) -> Any:
    """The pyarrow array (of ``type``: string or large_string, no nulls) of the strings whose
    :func:`pack_strings` codes of ``width`` bytes are ``codes``.

    Example:
        >>> import pyarrow as pa
        >>> unpack_strings(pack_strings(pa.array(["ab", "ba"]), None)[0], 2, pa.string()).to_pylist()
        ['ab', 'ba']
    """
    import pyarrow as pa

    n = len(codes)
    data = np.ascontiguousarray(codes.astype("<u8", copy=False).view(np.uint8).reshape(n, MAX_WIDTH)[:, :width])
    offsets = np.arange(n + 1, dtype=np.int64 if pa.types.is_large_string(type) else np.int32) * width
    return pa.Array.from_buffers(type, n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _offsets(values: Any) -> np.ndarray:
    import pyarrow as pa

    dtype = np.dtype(np.int64 if pa.types.is_large_string(values.type) else np.int32)
    return np.frombuffer(values.buffers()[1], dtype=dtype, count=len(values) + 1,
                         offset=values.offset * dtype.itemsize)
