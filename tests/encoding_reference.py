"""An independent pure-Python/pandas reference of the categorical encoding contract and its
hashes, shared by the encoding and operator tests (never calls tabloader)."""

from __future__ import annotations

import struct

import numpy as np
import pandas as pd

M64 = (1 << 64) - 1
NULL_HASH = 0x9AE16A3B2F90404F


def splitmix64(x: int) -> int:
    z = (x + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def fnv1a(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & M64
    return h


def is_null(v) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v))


def py_hash(value) -> int:
    """strings: splitmix64(FNV-1a(UTF-8)); integers and the integral floats an int64 or a uint64
    holds (-2**63 <= v < 2**64): splitmix64 of the integer mod 2**64; other floats: splitmix64 of
    their float64 bits."""
    if isinstance(value, str):
        return splitmix64(fnv1a(value.encode("utf-8")))
    if isinstance(value, float):
        if value.is_integer() and -(2.0**63) <= value < 2.0**64:
            value = int(value)
        else:
            return splitmix64(struct.unpack("<Q", struct.pack("<d", value))[0])
    return splitmix64(int(value) & M64)


def py_cross(values) -> int:
    hs = [NULL_HASH if is_null(v) else py_hash(v) for v in values]
    h = hs[0]
    for x in hs[1:]:
        h = splitmix64((h * 31 + x) & M64)
    return h


def reference_vocabulary(values, freq_threshold=0, max_size=0) -> list[tuple]:
    """(value, count) in id order: counts of the non-null values, at least ``freq_threshold``,
    by descending count then ascending value, the first ``max_size``. Values are Python
    objects (tuples for combinations); equal numbers are one value whatever their type."""
    fit = pd.Series(list(values), dtype=object)
    counts = fit[~fit.map(lambda v: is_null(v) or isinstance(v, tuple) and any(is_null(x) for x in v))]
    counts = counts.value_counts()
    table = sorted(zip(counts.index, counts.to_numpy().tolist()), key=lambda vc: (-vc[1], vc[0]))
    if freq_threshold:
        table = [vc for vc in table if vc[1] >= freq_threshold]
    return table[:max_size] if max_size else table


def expected_ids(values, fit_values=None, freq_threshold=0, max_size=0, num_buckets=1):
    """Categorify ids of ``values`` after a fit on ``fit_values`` (default: ``values``), and the cardinality."""
    table = reference_vocabulary(values if fit_values is None else fit_values, freq_threshold, max_size)
    ids = {v: 2 + num_buckets + i for i, (v, _) in enumerate(table)}
    out = []
    for v in values:
        if is_null(v) or isinstance(v, tuple) and any(is_null(x) for x in v):
            out.append(1)
        elif v in ids:
            out.append(ids[v])
        else:
            h = py_cross(v) if isinstance(v, tuple) else py_hash(v)
            out.append(2 + (h % num_buckets if num_buckets > 1 else 0))
    return out, 2 + num_buckets + len(ids)
