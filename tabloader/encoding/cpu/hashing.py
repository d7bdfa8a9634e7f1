"""Hashes of normalized columns (the bits are :mod:`tabloader.backend`'s, identical on the GPU).

* integers (any width, signed or unsigned, nullable or not; booleans as 0/1):
  ``splitmix64(int64 value)`` (:func:`tabloader.hashes.hash_int64`);
* floats: an integral value hashes as that integer (so ``3.0`` and ``3`` agree, and a CSV
  column read as float64 hashes like the same column read as Int64 or UInt64: in
  ``[-2**63, 2**63)`` as an int64, in ``[2**63, 2**64)`` as a uint64); a non-integral value
  hashes as ``splitmix64(its float64 bits)`` (:func:`tabloader.hashes.hash_float64`);
* strings: ``splitmix64(FNV-1a-64(UTF-8 bytes))`` (:func:`tabloader.hashes.hash_strings`),
  computed on the unique values of a partition only;
* crosses of several columns: ``h = h_1``, then ``h = splitmix64(h * 31 + h_i)`` for each
  further column (:func:`tabloader.hashes.hash_combine`); a null component takes the fixed
  hash :data:`~tabloader.encoding.contract.NULL_HASH`.
"""

from __future__ import annotations

import numpy as np

from tabloader import backend
from tabloader.encoding.contract import NULL_HASH
from tabloader.encoding.cpu.coded_strings import CodedStrings
from tabloader.encoding.cpu.columns import NormalizedColumn


def hash_values(col: NormalizedColumn) -> np.ndarray:
    """uint64 hashes of every row of ``col`` (null rows get :data:`NULL_HASH`); see the module docs."""
    import pyarrow.compute as pc

    if col.kind == "int":
        out = backend.hash_int64(col.values)
    elif col.kind == "float":
        out = backend.hash_float64(col.values)
    elif isinstance(col, CodedStrings) and len(col.dictionary) <= len(col):  # each distinct string hashed once
        out = col.decode(backend.hash_strings(col.dictionary))
    elif col.kind == "str":
        encoded = pc.dictionary_encode(col.values)
        dictionary = encoded.dictionary
        unique_hashes = backend.hash_strings(dictionary) if len(dictionary) else np.zeros(0, np.uint64)
        indices = encoded.indices.to_numpy(zero_copy_only=False)
        indices = np.nan_to_num(indices, nan=0).astype(np.int64) if indices.dtype.kind == "f" else indices
        out = unique_hashes[indices] if len(unique_hashes) else np.zeros(len(col), np.uint64)
    else:
        out = np.zeros(len(col), np.uint64)
    if col.mask is not None:
        out = np.where(col.mask, NULL_HASH, out)
    return out


def cross_hash(cols: list[NormalizedColumn]) -> np.ndarray:
    """Hash of the combination of several columns: ``h = splitmix64(h * 31 + h_i)``."""
    h = hash_values(cols[0])
    for col in cols[1:]:
        h = backend.hash_combine(h, hash_values(col))
    return h
