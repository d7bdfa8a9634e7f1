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

__all__ = ["count_values", "count_values_each", "merge_counts", "merge_counts_each", "vocabulary", "group_rows",
           "union_keys", "sum_int", "MERGE_ON"]

MERGE_ON = os.environ.get("TABLOADER_GPU_MERGE", "device")
if MERGE_ON not in ("device", "host"):
    raise ValueError(f"TABLOADER_GPU_MERGE must be 'device' or 'host', got {MERGE_ON!r}")


def _sort_key(values: Any) -> Any:
    """A CuPy array whose entries are equal where the rows of ``values`` (a CuPy array, or a
    cuDF string Series) are: numbers as they are, strings by their codes.

    cuDF's ``factorize`` waits for the device (libcudf sizes its distinct strings itself): the one
    wait left in grouping a string column (the strings' own null rows get -1).
    """
    cp = backend.cupy()
    return values if isinstance(values, cp.ndarray) else cp.asarray(values.factorize()[0])


def _grouped(arrays: Sequence[Any], mask: Any) -> tuple[Any, Any, Any]:
    """Group rows by the values of several equal-length, non-empty columns (CuPy arrays or cuDF
    string Series), leaving the rows where the CuPy bool ``mask`` is True out, without reading
    the device (no row selection, whose size would be read back; no ``cupy.unique``).

    The rows are sorted by every column (stable sorts, least significant first, the masked rows
    last), and each run of equal rows is a group. Returns ``codes`` (int64, the group of each
    row: ``0..size-1`` in sorted order, and ``size`` for every masked row), ``first`` (the first
    row of each group at the front of an int64 array as long as the rows, the tail padding) and
    ``size`` (the number of groups, a 0-d array).
    """
    cp = backend.cupy()
    n = len(arrays[0])
    keys = [_sort_key(a) for a in arrays]
    if mask is not None:  # masked rows all alike, in a group of their own sorted last
        keys = [mask] + [cp.where(mask, k.dtype.type(0), k) for k in keys]
    order = cp.arange(n, dtype=cp.int64)
    for key in reversed(keys):
        order = order[cp.argsort(key[order], kind="stable")]  # equal rows stay in row order
    begins = cp.zeros(n, dtype=bool)
    begins[:1] = True
    for key in keys:
        ordered = key[order]
        begins[1:] |= ordered[1:] != ordered[:-1]
    run, starts, size = _runs(begins)
    codes = cp.empty(n, dtype=cp.int64)
    codes[order] = run
    if mask is not None:
        size = cp.where(cp.any(mask), size - 1, size)  # the last run was the masked rows'
    return codes, order[cp.minimum(starts, n - 1)], size


def factorize_rows(arrays: Sequence[Any]) -> tuple[Any, Any]:
    """Group rows by the values of several equal-length columns (no nulls), on the device.

    Returns ``codes`` (the group of each row) and ``first`` (the position of each group's first
    row), as :func:`tabloader.encoding.cpu.counting.factorize_rows` does (groups may be numbered
    in another order: only the grouping is the contract). Waits for the device once, for the
    number of groups.
    """
    if not len(arrays[0]):
        return backend.cupy().zeros(0, dtype=np.int64), backend.cupy().zeros(0, dtype=np.int64)
    codes, first, size = _grouped(arrays, None)
    return codes, first[:int(backend.host_floats([size])[0])]


def group_rows(cols: list[NormalizedColumn]) -> tuple[Any, Any, Any, list]:
    """Group the rows of key columns: (null mask, group codes of non-null rows, unique keys, kinds).

    Waits for the device once, for the number of groups and of null rows together: the rows are
    grouped with the null rows in it (:func:`_grouped`), and the non-null rows' codes gathered by
    positions found with their count (``backend.flatnonzero``) rather than selected by the mask
    (a wait each).
    """
    cp = backend.cupy()
    mask = null_mask(cols, "any")
    kinds = [c.kind for c in cols]
    if not len(cols[0]) or "null" in kinds:
        return mask, cp.zeros(0, dtype=cp.int64), None, kinds
    codes, first, size = _grouped([c.values for c in cols], mask)
    size, nulls = (int(x) for x in backend.host_floats([size, 0 if mask is None else cp.count_nonzero(mask)]))
    if not size:
        return mask, cp.zeros(0, dtype=cp.int64), None, kinds
    if nulls:
        codes = codes[backend.flatnonzero(~mask, len(codes) - nulls)]
    return mask, codes, [_take(c.values, first[:size]) for c in cols], kinds


def count_values(cols: Sequence[NormalizedColumn], mask: Any) -> dict[str, Any]:
    """Partial statistics of Categorify on the device (see the CPU function for the layout).

    With :data:`MERGE_ON` ``"host"`` the partial is returned in the CPU layout instead.
    """
    return count_values_each([(cols, mask)])[0]


def count_values_each(jobs: Sequence[tuple[Sequence[NormalizedColumn], Any]]) -> list[dict[str, Any]]:
    """:func:`count_values` of each ``(cols, mask)`` job, waiting for the device once for all.

    A partial's size (its number of distinct values) and its null count are only known on the
    device: read one by one (as ``cupy.unique`` and a boolean filter do), every column of a
    partition would stall the host. The numbers are counted with their sizes kept on the device
    (:func:`_count_numbers`), and so are combinations and strings under another column's mask
    (:func:`_grouped`: no rows selected); every job's sizes are read back together
    (:func:`_settled`). A string column waits for the device in cuDF's ``factorize`` (libcudf
    sizes its results itself).
    """
    return _settled([_count(cols, mask) for cols, mask in jobs])


def _count(cols: Sequence[NormalizedColumn], mask: Any) -> dict[str, Any]:
    """One job of :func:`count_values_each`; numbers with their size (``"size"``) and null count on the device."""
    cp = backend.cupy()
    kinds = [c.kind for c in cols]
    nulls = 0 if mask is None else cp.count_nonzero(mask)
    if "null" in kinds or not len(cols[0]):
        return {"keys": None, "counts": cp.zeros(0, dtype=cp.int64), "nulls": nulls, "kinds": kinds}
    if len(cols) == 1 and kinds[0] in ("int", "float"):
        keys, counts, size = _count_numbers(cols[0].values, mask, nulls)
        return {"keys": [keys], "counts": counts, "nulls": nulls, "kinds": kinds, "size": size}
    if len(cols) == 1 and kinds[0] == "str" and (mask is None or mask is cols[0].mask):
        return {**_count_strings(cols[0].values), "nulls": nulls, "kinds": kinds}  # its own nulls: no filter
    codes, first, size = _grouped([c.values for c in cols], mask)  # the masked rows' code: size, in the padding
    return {"keys": [_take(c.values, first) for c in cols], "counts": _code_counts(codes, len(codes)), "nulls": nulls,
            "kinds": kinds, "size": size}


def _count_strings(values: Any) -> dict[str, Any]:
    """The distinct strings of a cuDF string Series (nulls left out) and their counts."""
    codes, distinct = values.factorize()  # a null's code is -1
    if not len(distinct):
        return {"keys": None, "counts": backend.cupy().zeros(0, dtype=np.int64)}
    counts = _code_counts(backend.cupy().where(codes < 0, len(distinct), codes), len(distinct) + 1)[:-1]
    return {"keys": [distinct.to_series().reset_index(drop=True)], "counts": counts}


def _code_counts(codes: Any, n: int) -> Any:
    """How many times each code ``0..n-1`` occurs, as int64 (``cupy.bincount`` reads the
    largest code back, and whether any is negative)."""
    cp = backend.cupy()
    return sum_int(codes, cp.ones(len(codes), dtype=cp.int64), n)


def _count_numbers(values: Any, mask: Any, nulls: Any) -> tuple[Any, Any, Any]:
    """The sorted distinct values of the rows outside ``mask`` (``nulls`` of them, a 0-d array)
    and their int64 counts, both as long as ``values`` (the tail past the distinct values is
    padding), and how many distinct values there are (a 0-d array): nothing is read back.

    Null rows are not filtered out (the result's size would be read back): they stand in as
    the largest valid value (which sorts last), whose count is corrected afterwards.
    """
    cp = backend.cupy()
    n = len(values)
    if mask is not None:
        lowest = values.dtype.type(-np.inf if values.dtype.kind == "f" else np.iinfo(values.dtype).min)
        values = cp.where(mask, cp.where(mask, lowest, values).max(), values)
    ordered = cp.sort(values)
    starts, size = _run_starts(ordered)
    counts = cp.diff(cp.concatenate([starts, cp.full(1, n, dtype=cp.int64)]))  # the tail: n - n = 0
    if mask is not None:
        counts -= cp.where(cp.arange(n) == size - 1, nulls, 0)  # the stand-ins, counted in the last run
        size = cp.where(nulls == n, 0, size)  # only nulls: the one run was theirs
    return ordered[cp.minimum(starts, n - 1)], counts, size


def _run_starts(ordered: Any) -> tuple[Any, Any]:
    """The runs of equal values of a sorted, non-empty CuPy array, found without reading the
    device: the first position of each run, in order, at the front of an int64 array as long
    as ``ordered`` (the tail holds ``len(ordered)``), and the number of runs (a 0-d array)."""
    cp = backend.cupy()
    begins = cp.empty(len(ordered), dtype=bool)
    begins[:1] = True
    cp.not_equal(ordered[1:], ordered[:-1], out=begins[1:])
    _, starts, size = _runs(begins)
    return starts, size


def _runs(begins: Any) -> tuple[Any, Any, Any]:
    """The runs of a sorted, non-empty CuPy array whose bool ``begins`` marks the first position
    of each run, without reading the device: each position's run (int64), the first position
    of each run at the front of an int64 array as long as ``begins`` (the tail holds its
    length), and the number of runs (a 0-d array)."""
    cp = backend.cupy()
    n = len(begins)
    run = cp.cumsum(begins, dtype=cp.int64) - 1
    starts = cp.full(n + 1, n, dtype=cp.int64)  # slot n takes the positions that begin no run
    starts[cp.where(begins, run, n)] = cp.arange(n, dtype=cp.int64)
    return run, starts[:n], run[-1] + 1


def _run_sums(starts: Any, weights: Any) -> Any:
    """The int64 sums of ``weights`` over the runs of :func:`_run_starts` (0 in the padding),
    as differences of a running total: no scatter, no atomics."""
    cp = backend.cupy()
    n = len(starts)
    last = cp.concatenate([starts[1:], cp.full(1, n, dtype=cp.int64)]) - 1  # each run's last position
    totals = cp.cumsum(weights, dtype=cp.int64)[last]
    return cp.diff(cp.concatenate([cp.zeros(1, dtype=cp.int64), totals]))


def _settled(partials: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The partials with their null counts on the host and, where their size was on the device,
    their keys and counts cut to it: everything still on the device is read back together (one
    wait for the device for all)."""
    pending = [p for p in partials if "size" in p or backend.is_gpu_object(p["nulls"])]
    numbers = iter(backend.host_floats([x for p in pending for x in (p.get("size", -1), p["nulls"])]))
    read = {id(p): (int(next(numbers)), int(next(numbers))) for p in pending}
    return [_placed(_cut(p, *read[id(p)]) if id(p) in read else p) for p in partials]


def _cut(partial: dict[str, Any], size: int, nulls: int) -> dict[str, Any]:
    """``partial`` with the null count ``nulls`` and, for a ``size`` read back (not -1), its keys
    and counts cut to that many (no keys when 0)."""
    out = {k: v for k, v in partial.items() if k != "size"}
    out["nulls"] = nulls
    if size == 0:
        out["keys"], out["counts"] = None, partial["counts"][:0]
    elif size > 0:  # copies, so that the padding's memory is freed (a low-cardinality column's is most of it)
        out["keys"], out["counts"] = [k[:size].copy() for k in partial["keys"]], partial["counts"][:size].copy()
    return out


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
    return merge_counts_each([(a, b, what)], op)[0]


def merge_counts_each(jobs: Sequence[tuple[dict[str, Any], dict[str, Any], Any]], op: Any) -> list[dict[str, Any]]:
    """:func:`merge_counts` of each ``(a, b, what)`` job, waiting for the device once for all
    (and in cuDF's ``factorize`` of string keys, as :func:`count_values_each` says)."""
    return _settled([_merge(a, b, op, what) for a, b, what in jobs])


def _merge(a: dict[str, Any], b: dict[str, Any], op: Any, what: Any) -> dict[str, Any]:
    """One job of :func:`merge_counts_each`; numbers with their size on the device."""
    cp = backend.cupy()
    if a["keys"] is None or b["keys"] is None:
        out = dict(a if b["keys"] is None else b)
        out["nulls"] = a["nulls"] + b["nulls"]
        return out
    keys, kinds = concat_keys(a["keys"], a["kinds"], b["keys"], b["kinds"], op, what)
    counts = cp.concatenate([a["counts"], b["counts"]])
    nulls = a["nulls"] + b["nulls"]
    if len(kinds) == 1 and kinds[0] != "str":
        order = cp.argsort(keys[0])
        ordered = keys[0][order]
        starts, size = _run_starts(ordered)
        return {"keys": [ordered[cp.minimum(starts, len(ordered) - 1)]], "counts": _run_sums(starts, counts[order]),
                "nulls": nulls, "kinds": kinds, "size": size}
    codes, first, size = _grouped(keys, None)
    return {"keys": [_take(k, first) for k in keys], "counts": sum_int(codes, counts, len(codes)), "nulls": nulls,
            "kinds": kinds, "size": size}


def _take(keys: Any, positions: Any) -> Any:
    return keys[positions] if isinstance(keys, backend.cupy().ndarray) else keys.take(positions).reset_index(drop=True)


def concat_keys(a_keys: list, a_kinds: list, b_keys: list, b_kinds: list, op: Any, what: Any) -> tuple[list, list]:
    """Concatenate the key columns of two device partials (numbers: float64 if either is float,
    else int64 or uint64, see :func:`~tabloader.encoding.cpu.columns.common_int_dtype`)."""
    cp = backend.cupy()
    kinds = check_kinds_merge(a_kinds, b_kinds, op, what)
    keys = []
    for i, kind in enumerate(kinds):
        if kind == "str":
            keys.append(backend.cudf().concat([a_keys[i], b_keys[i]], ignore_index=True))
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
    """Exact int64 group sums on the arrays' device (``add.at`` on uint64 views, which give
    int64's bits: CuPy before 14 takes no int64 in ``add.at``, and pyproject allows cupy 13.6;
    bincount would go through float64)."""
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
