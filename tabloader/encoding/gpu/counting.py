"""Value counts of columns (or combinations of columns) and their merge, on the device.

Partials have the layout of :func:`tabloader.encoding.cpu.counting.count_values` with CuPy
arrays (numbers, counts) and cuDF string Series (strings) in place of numpy and pyarrow arrays,
so the operators' ``merge`` calls stay on the GPU: :func:`tabloader.backend.encoding_for`
chooses by the arrays a partial holds.

Where partial counts are merged is a switch, :data:`MERGE_ON` (environment variable
``TABLOADER_GPU_MERGE``):

* ``"device"`` (the default): partials stay CuPy/cuDF and are merged by a sort on the GPU. A
  partition of a Criteo column holds up to millions of distinct values, so its partial is no
  small table: keeping it on the device saves a device-to-host copy per partition and merges
  on the GPU's sort rather than the host's (and with dask-cuda, device partials spill to host
  memory by themselves when the GPU runs short).
* ``"host"``: each partition's counts are copied to the host once, in the CPU layout, and
  merged and finalized by :mod:`tabloader.encoding.cpu` -- worth it when partials are small
  (low-cardinality columns) and a host merge overlaps with GPU work. Which is faster is for a
  GPU benchmark to measure (``benchmarks/workflow.py --device cuda`` with either value).
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from tabloader import backend
from tabloader.encoding.cpu.columns import common_int_dtype, null_mask
from tabloader.encoding.cpu.counting import check_kinds_merge
from tabloader.encoding.gpu.columns import NormalizedColumn

__all__ = ["count_values", "merge_counts", "vocabulary", "group_rows", "union_keys", "sum_int", "MERGE_ON"]

MERGE_ON = os.environ.get("TABLOADER_GPU_MERGE", "device")
if MERGE_ON not in ("device", "host"):
    raise ValueError(f"TABLOADER_GPU_MERGE must be 'device' or 'host', got {MERGE_ON!r}")


def _factorize(values: Any) -> tuple[Any, int]:
    """Codes 0..k-1 of a CuPy array or cuDF Series without nulls, and k."""
    cp = backend.cupy()
    if isinstance(values, cp.ndarray):
        uniques, codes = cp.unique(values, return_inverse=True)
        return codes.astype(cp.int64, copy=False), len(uniques)
    codes, uniques = values.factorize()
    return cp.asarray(codes).astype(cp.int64, copy=False), len(uniques)


def factorize_rows(arrays: Sequence[Any]) -> tuple[Any, Any]:
    """Group rows by the values of several equal-length columns (no nulls), on the device.

    Returns ``codes`` (the group of each row) and ``first`` (the position of each group's first
    row), as :func:`tabloader.encoding.cpu.counting.factorize_rows` does (groups may be numbered
    in another order: only the grouping is the contract).
    """
    codes, ngroups = None, 0
    for arr in arrays:
        c, k = _factorize(arr)
        # Renumbered after every column, so combined codes stay below rows**2.
        codes, ngroups = (c, k) if codes is None else _factorize(codes * k + c)
    return codes, first_rows(codes, ngroups)


# CuPy before 14 takes no int64 in ``add.at`` / ``minimum.at`` (TypeError; pyproject allows
# cupy 13.6), but takes uint64: the two helpers below scatter on uint64 views, which give int64's
# bits (two's-complement sums wrap alike; positions are never negative). They take numpy arrays too.
def first_rows(codes: Any, ngroups: int) -> Any:
    """The position (int64) of the first row of each group ``0..ngroups-1`` of ``codes``
    (``len(codes)`` for a group without rows), on the arrays' device."""
    xp = backend.array_lib(codes)
    n = len(codes)
    first = xp.full(ngroups, n, dtype=xp.uint64)
    if n:
        xp.minimum.at(first, codes, xp.arange(n, dtype=xp.uint64))
    return first.view(xp.int64)


def group_rows(cols: list[NormalizedColumn]) -> tuple[Any, Any, Any, list]:
    """Group the rows of key columns: (null mask, group codes of non-null rows, unique keys, kinds)."""
    cp = backend.cupy()
    mask = null_mask(cols, "any")
    valid = cols if mask is None else [c.filter(~mask) for c in cols]
    if not len(valid[0]) or any(c.kind == "null" for c in valid):
        return mask, cp.zeros(0, dtype=cp.int64), None, [c.kind for c in cols]
    codes, first = factorize_rows([c.values for c in valid])
    return mask, codes, [c.take(first).values for c in valid], [c.kind for c in cols]


def count_values(cols: Sequence[NormalizedColumn], mask: Any) -> dict[str, Any]:
    """Partial statistics of Categorify on the device (see the CPU function for the layout).

    With :data:`MERGE_ON` ``"host"`` the partial is returned in the CPU layout instead.
    """
    cp = backend.cupy()
    kinds = [c.kind for c in cols]
    rows = len(cols[0])
    if "null" in kinds:
        nulls = int(cp.count_nonzero(mask)) if mask is not None else 0
        return _placed({"keys": None, "counts": cp.zeros(0, dtype=cp.int64), "nulls": nulls, "kinds": kinds})
    if mask is not None:  # the rows kept are counted on the host anyway: the nulls are the others
        cols = [c.filter(~mask) for c in cols]
    nulls = rows - len(cols[0])
    if not len(cols[0]):
        return _placed({"keys": None, "counts": cp.zeros(0, dtype=cp.int64), "nulls": nulls, "kinds": kinds})
    if len(cols) == 1 and kinds[0] in ("int", "float"):
        keys, counts = cp.unique(cols[0].values, return_counts=True)  # sorted unique values
        return _placed({"keys": [keys], "counts": counts.astype(cp.int64), "nulls": nulls, "kinds": kinds})
    codes, first = factorize_rows([c.values for c in cols])
    return _placed({"keys": [c.take(first).values for c in cols],
                    "counts": cp.bincount(codes, minlength=len(first)).astype(cp.int64), "nulls": nulls,
                    "kinds": kinds})


def _placed(partial: dict[str, Any]) -> dict[str, Any]:
    """The partial where :data:`MERGE_ON` merges it: as it is, or in the CPU layout on the host."""
    if MERGE_ON == "device":
        return partial
    import pyarrow as pa

    keys = partial["keys"]
    host_keys = None if keys is None else [pa.array(backend.stats_to_host(k), from_pandas=True) if kind == "str"
                                            else backend.stats_to_host(k) for k, kind in zip(keys, partial["kinds"])]
    return {**partial, "keys": host_keys, "counts": backend.stats_to_host(partial["counts"])}


def merge_counts(a: dict[str, Any], b: dict[str, Any], op: Any, what: Any) -> dict[str, Any]:
    """Add two device partials of :func:`count_values` (associative and commutative)."""
    cp = backend.cupy()
    if a["keys"] is None or b["keys"] is None:
        out = dict(a if b["keys"] is None else b)
        out["nulls"] = a["nulls"] + b["nulls"]
        return out
    keys, kinds = concat_keys(a["keys"], a["kinds"], b["keys"], b["kinds"], op, what)
    codes, first = factorize_rows(keys)
    merged_keys = [_take(k, first) for k in keys]
    merged_counts = sum_int(codes, cp.concatenate([a["counts"], b["counts"]]), len(first))
    return {"keys": merged_keys, "counts": merged_counts, "nulls": a["nulls"] + b["nulls"], "kinds": kinds}


def _take(keys: Any, positions: Any) -> Any:
    return keys[positions] if isinstance(keys, backend.cupy().ndarray) else keys.take(positions).reset_index(drop=True)


def concat_keys(a_keys: list, a_kinds: list, b_keys: list, b_kinds: list, op: Any, what: Any) -> tuple[list, list]:
    """Concatenate the key columns of two device partials (numbers: float64 if either is float,
    else int64 or uint64, see :func:`~tabloader.encoding.cpu.columns.common_int_dtype`)."""
    cp, cudf = backend.cupy(), backend.cudf()
    kinds = check_kinds_merge(a_kinds, b_kinds, op, what)
    keys = []
    for i, kind in enumerate(kinds):
        if kind == "str":
            keys.append(cudf.concat([a_keys[i], b_keys[i]], ignore_index=True))
        else:
            pair = [a_keys[i], b_keys[i]]
            dtype = np.float64 if kind == "float" else common_int_dtype(pair, op, what)
            keys.append(cp.concatenate([k.astype(dtype, copy=False) for k in pair]))
    return keys, kinds


def union_keys(a: dict[str, Any], b: dict[str, Any], op: Any, what: Any) -> tuple[Any, list, list]:
    """The keys of two device partials as one set of keys: (group of each key row, unique keys, kinds)."""
    keys, kinds = concat_keys(a["keys"], a["kinds"], b["keys"], b["kinds"], op, what)
    codes, first = factorize_rows(keys)
    return codes, [_take(k, first) for k in keys], kinds


def sum_int(codes: Any, weights: Any, n: int) -> Any:
    """Exact int64 group sums on the arrays' device (``add.at`` on uint64 views, see
    :func:`first_rows`; bincount would go through float64)."""
    xp = backend.array_lib(codes)
    out = xp.zeros(n, dtype=xp.uint64)
    if len(codes):
        xp.add.at(out, codes, weights.astype(xp.int64, copy=False).view(xp.uint64))
    return out.view(xp.int64)


def vocabulary(counted: dict[str, Any], freq_threshold: int, max_size: int) -> tuple[list, Any]:
    """The vocabulary of merged device counts, in id order, sorted on the device: ``(keys,
    counts)`` with the ordering contract of the CPU function (descending count, ties by
    ascending value: integers by their true value, strings by code point, which is the byte
    order cuDF sorts UTF-8 strings by)."""
    cudf = backend.cudf()
    names = [f"k{i}" for i in range(len(counted["keys"]))]
    table = cudf.DataFrame({**dict(zip(names, counted["keys"])), "count": counted["counts"]})
    if freq_threshold > 1:
        table = table[table["count"] >= freq_threshold]
    table = table.sort_values(["count"] + names, ascending=[False] + [True] * len(names))
    if max_size > 0:
        table = table.head(max_size)
    table = table.reset_index(drop=True)
    keys = [table[n] if kind == "str" else table[n].values for n, kind in zip(names, counted["kinds"])]
    return keys, table["count"].values
