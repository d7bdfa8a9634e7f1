"""Hashes of normalized columns on the device: the bits of :mod:`tabloader.encoding.cpu.hashing`.

Integers and floats go through :func:`tabloader.hashes.hash_int64` (splitmix64 as CuPy array
arithmetic, the same code as on numpy). Strings are hashed by one CuPy kernel, a thread per
row, running FNV-1a-64 over the UTF-8 bytes between the string's offsets in the
cuDF column's chars and finishing with splitmix64 -- the CPU's ``backend.hash_strings``.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from tabloader import backend
from tabloader.encoding.contract import NULL_HASH
from tabloader.encoding.gpu.columns import NormalizedColumn

__all__ = ["hash_values", "cross_hash", "hash_strings"]

# One thread per string: FNV-1a-64 over bytes chars[offsets[i]:offsets[i + 1]], then splitmix64
# (x + golden ratio, then two xor-shift-multiply rounds and a final xor-shift), as on the CPU.
_STRING_HASH_SOURCE = r"""
extern "C" __global__
void fnv1a_splitmix64(const long long* offsets, const unsigned char* chars, unsigned long long* out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned long long h = 0xCBF29CE484222325ULL;               // FNV-1a-64 offset basis
    for (long long j = offsets[i]; j < offsets[i + 1]; ++j) {
        h = (h ^ chars[j]) * 0x100000001B3ULL;                  // FNV-1a-64 prime
    }
    h += 0x9E3779B97F4A7C15ULL;                                 // splitmix64 finalizer
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ULL;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBULL;
    out[i] = h ^ (h >> 31);
}
"""
_THREADS = 256


@functools.lru_cache(maxsize=None)
def _string_kernel() -> Any:
    return backend.cupy().RawKernel(_STRING_HASH_SOURCE, "fnv1a_splitmix64")


def span_bytes(span: Any) -> int:
    """The size in bytes of a pylibcudf device buffer (a ``gpumemoryview``): ``nbytes`` in
    every cuDF release; ``size`` only from 26.02 (so it cannot be getattr's default, which
    Python evaluates first)."""
    nbytes = getattr(span, "nbytes", None)
    return int(span.size if nbytes is None else nbytes)


def string_buffers(strings: Any) -> tuple[Any, Any]:
    """The offsets (int64, one more than the rows, absolute into the chars) and the chars (uint8)
    of a cuDF string Series, as CuPy views of the column's device buffers."""
    cp = backend.cupy()
    column, _ = strings.to_pylibcudf()
    n = column.size()
    if n == 0 or column.num_children() == 0:
        return cp.zeros(n + 1, dtype=cp.int64), cp.zeros(0, dtype=cp.uint8)
    offsets = backend.cudf().Series.from_pylibcudf(column.child(0)).values
    offsets = offsets[column.offset():column.offset() + n + 1].astype(cp.int64)
    data = column.data()  # the chars: a span (a device pointer and a size in bytes)
    nbytes = 0 if data is None else span_bytes(data)
    if nbytes == 0:
        return offsets, cp.zeros(0, dtype=cp.uint8)
    memory = cp.cuda.UnownedMemory(data.ptr, nbytes, data)  # a view: the span keeps the chars alive
    return offsets, cp.ndarray((nbytes,), dtype=cp.uint8, memptr=cp.cuda.MemoryPointer(memory, 0))


def hash_strings(strings: Any) -> Any:
    """uint64 hashes ``splitmix64(FNV-1a-64(UTF-8 bytes))`` of every row of a cuDF string Series,
    computed on the device: the bits of :func:`tabloader.hashes.hash_strings` (a null row gets
    the hash of whatever bytes its offsets span: replace it)."""
    cp = backend.cupy()
    n = len(strings)
    out = cp.empty(n, dtype=cp.uint64)
    if n:
        offsets, chars = string_buffers(strings)
        blocks = (n + _THREADS - 1) // _THREADS
        _string_kernel()((blocks,), (_THREADS,), (offsets, chars, out, np.int64(n)))
    return out


def hash_values(col: NormalizedColumn) -> Any:
    """uint64 hashes of every row of ``col`` (null rows get :data:`NULL_HASH`), on the device."""
    cp = backend.cupy()
    if col.kind == "int":
        out = backend.hash_int64(col.values)
    elif col.kind == "float":
        out = backend.hash_float64(col.values)
    elif col.kind == "str":
        # Every row's bytes, one thread a row (null rows are set below). Not each distinct string
        # once: cuDF's factorize waits for the device (its unique values and their join back).
        out = hash_strings(col.values)
    else:
        out = cp.zeros(len(col), dtype=cp.uint64)
    if col.mask is not None:
        out = cp.where(col.mask, cp.uint64(NULL_HASH), out)
    return out


def cross_hash(cols: list[NormalizedColumn]) -> Any:
    """Hash of the combination of several columns: ``h = splitmix64(h * 31 + h_i)``."""
    h = hash_values(cols[0])
    for col in cols[1:]:
        h = backend.hash_combine(h, hash_values(col))
    return h
