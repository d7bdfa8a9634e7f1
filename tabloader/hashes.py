"""The 64-bit hashes of the categorical encoding: the same bits from numpy on the CPU and CuPy on the GPU.

* integers: splitmix64 (:func:`hash_int64`); floats: integral ones as those integers, others
  by their bits (:func:`hash_float64`);
* strings: ``splitmix64(FNV-1a-64(UTF-8 bytes))`` (:func:`hash_strings`; the GPU module
  :mod:`tabloader.encoding.gpu.hashing` computes the same bits in a CuPy kernel);
* several columns: ``splitmix64(h * 31 + h_i)`` (:func:`hash_combine`).

The hash values are part of the encoding contract (a value lands in the same bucket on every
device and in every release), so never change them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

FNV64_OFFSET = 0xCBF29CE484222325
FNV64_PRIME = 0x100000001B3


def _array_lib(values: Any) -> Any:
    from tabloader import backend  # the seam decides numpy or CuPy

    return backend.array_lib(values)


def hash_int64(values: np.ndarray) -> np.ndarray:
    """Hash int64 values to uint64 with splitmix64: the same bits on numpy and CuPy.

    Used by hashing operators so that a value lands in the same bucket on CPU and GPU.
    """
    xp = _array_lib(values)
    with np.errstate(over="ignore"):
        z = values.astype(xp.uint64) + xp.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> xp.uint64(30))) * xp.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> xp.uint64(27))) * xp.uint64(0x94D049BB133111EB)
        return z ^ (z >> xp.uint64(31))


def hash_float64(values: Any) -> Any:
    """Hash float64 values to uint64, the same bits on numpy and CuPy: an integral value as that
    integer (``3.0`` as ``3``: ``-2**63 <= v < 2**63`` as an int64, ``2**63 <= v < 2**64`` as a
    uint64, whose bits are its value mod 2**64 as a uint64 column's are), any other value as its
    float64 bits (``-0.0`` as ``0``).

    Example:
        >>> ints = hash_int64(np.array([-(2**63), 3], dtype=np.int64)).tolist()
        >>> hash_float64(np.array([-(2.0**63), 3.0])).tolist() == ints
        True
        >>> bool(hash_float64(np.array([2.0**63]))[0] == hash_int64(np.array([2**63], dtype=np.uint64))[0])
        True
    """
    xp = _array_lib(values)
    integral = (xp.floor(values) == values) & (values >= -(2.0**63)) & (values < 2.0**64)
    wrapped = xp.where(values >= 2.0**63, values - 2.0**64, values)  # a uint64 id's bits as an int64 (exact)
    as_int = xp.where(integral, wrapped, 0).astype(xp.int64)
    bits = xp.where(values == 0, 0.0, values).view(xp.int64)  # -0.0 hashes as 0
    return hash_int64(xp.where(integral, as_int, bits))


def hash_strings(values: Any) -> np.ndarray:
    """Hash strings to uint64: ``splitmix64(FNV-1a-64(UTF-8 bytes))``, the same on CPU and GPU.

    ``values`` is anything pyarrow can turn into a string array (a list, a pandas/cuDF string
    Series, a pyarrow array) without nulls. FNV-1a runs vectorized over byte positions in numpy,
    so call it on unique values only; the splitmix64 finalizer (:func:`hash_int64`) spreads
    FNV's weak low bits. GPU values are hashed on the host and copied back.

    Example:
        >>> fnv_a = np.array([0xAF63DC4C8601EC8C], dtype=np.uint64)  # FNV-1a-64 of b"a"
        >>> bool(hash_strings(["a"])[0] == hash_int64(fnv_a)[0])
        True
    """
    import pyarrow as pa

    from tabloader import backend

    gpu = backend.is_gpu_object(values)
    if gpu:
        values = values.to_arrow()
    elif isinstance(values, (pd.Series, pd.Index)):
        values = pa.array(values.array if isinstance(values, pd.Series) else values.to_numpy(), from_pandas=True)
    arr = pa.array(values) if not isinstance(values, (pa.Array, pa.ChunkedArray)) else values
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks else pa.array([], pa.string())
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        arr = arr.cast(pa.string())
    if arr.null_count:
        raise ValueError("hash_strings got nulls; hash only the non-null values")
    arr = arr.cast(pa.large_string())
    n = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset:arr.offset + n + 1]
    data = arr.buffers()[2]
    data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    starts, lengths = offsets[:-1], np.diff(offsets)
    h = np.full(n, FNV64_OFFSET, dtype=np.uint64)
    prime = np.uint64(FNV64_PRIME)
    with np.errstate(over="ignore"):
        active = np.arange(n)
        for j in range(int(lengths.max()) if n else 0):
            active = active[lengths[active] > j]
            h[active] = (h[active] ^ data[starts[active] + j].astype(np.uint64)) * prime
    out = hash_int64(h.view(np.int64))
    return backend.cupy().asarray(out) if gpu else out


def hash_combine(seed: Any, value: Any) -> Any:
    """Mix the uint64 hash ``value`` into ``seed``: ``splitmix64(seed * 31 + value)`` (mod 2**64).

    Pure integer arithmetic, so numpy and CuPy give the same bits. Used for crosses of columns.

    Example:
        >>> a = np.array([1, 2], dtype=np.uint64)
        >>> bool((hash_combine(a, a) == hash_int64(a * np.uint64(32))).all())
        True
    """
    xp = _array_lib(seed)
    with np.errstate(over="ignore"):
        mixed = seed.astype(xp.uint64) * xp.uint64(31) + value.astype(xp.uint64)
    return hash_int64(mixed)
