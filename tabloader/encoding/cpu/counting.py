"""Value counts of columns (or combinations of columns) and their merge across partitions."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from tabloader.encoding.contract import label_of
from tabloader.encoding.cpu.coded_strings import CodedStrings
from tabloader.encoding.cpu.columns import NormalizedColumn, as_pandas, common_int_dtype, null_mask, text_series
from tabloader.encoding.cpu.short_strings import pack_strings, unpack_strings


def factorize_rows(arrays: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Group rows by the values of several equal-length arrays (no nulls).

    Returns ``codes`` (the group of each row, groups numbered by first appearance) and
    ``first`` (the position of each group's first row).
    """
    codes = None
    for arr in arrays:
        c, uniques = pd.factorize(arr)
        codes = c.astype(np.int64) if codes is None else pd.factorize(codes * len(uniques) + c)[0]
    n = len(codes)
    first = np.full(int(codes.max()) + 1 if n else 0, n, dtype=np.int64)
    _first_positions(first, codes)
    return codes, first


def _first_positions(first: np.ndarray, codes: np.ndarray) -> None:
    # Last write wins in fancy assignment, so assign in reverse order to keep the first row.
    rev = np.arange(len(codes) - 1, -1, -1, dtype=np.int64)
    first[codes[rev]] = rev


def _row_keys(col: NormalizedColumn) -> Any:
    """What rows of ``col`` are grouped by: a coded column's codes (its dictionary holds each
    string once, so equal codes are equal strings), else its values."""
    return col.codes if isinstance(col, CodedStrings) else as_pandas(col)


def group_rows(cols: list[NormalizedColumn]) -> tuple[np.ndarray | None, np.ndarray, list, np.ndarray]:
    """Group the rows of key columns: (null mask, group codes of non-null rows, unique keys, kinds).

    A row with a null in any key column belongs to the null group, kept apart.
    """
    mask = null_mask(cols, "any")
    valid = cols if mask is None else [c.filter(~mask) for c in cols]
    if not len(valid[0]) or any(c.kind == "null" for c in valid):
        return mask, np.zeros(0, np.int64), None, [c.kind for c in cols]
    codes, first = factorize_rows([_row_keys(c) for c in valid])
    keys = [c.take(first).values for c in valid]
    return mask, codes, keys, [c.kind for c in cols]


def count_values(cols: Sequence[NormalizedColumn], mask: np.ndarray | None) -> dict[str, Any]:
    """Partial statistics of Categorify: counts of the non-null rows' values (or combinations).

    ``{"keys": [one array per column], "counts": int64 array, "nulls": int, "kinds": [...]}``.
    One numeric column: keys are sorted unique values, so merges are linear.
    Strings are pyarrow arrays; combinations are grouped with :func:`factorize_rows`.
    """
    import pyarrow.compute as pc

    nulls = int(np.count_nonzero(mask)) if mask is not None else 0
    kinds = [c.kind for c in cols]
    if "null" in kinds or nulls == len(cols[0]):
        return {"keys": None, "counts": np.zeros(0, np.int64), "nulls": nulls, "kinds": kinds}
    if len(cols) == 1 and kinds[0] in ("int", "float"):
        keys, counts = _count_numbers(cols[0].values, mask, nulls)
        return {"keys": [keys], "counts": counts, "nulls": nulls, "kinds": kinds}
    if len(cols) == 1 and isinstance(cols[0], CodedStrings):
        keys, counts = _count_coded(cols[0], mask)
        return {"keys": [keys], "counts": counts, "nulls": nulls, "kinds": kinds}
    if len(cols) == 1:  # strings: null where their own mask says so, so only another mask needs filtering
        col = cols[0] if mask is None or mask is cols[0].mask else cols[0].filter(~mask)
        packed = pack_strings(col.values, col.mask)
        if packed is not None:  # short strings of one length: counted as integers
            keys, counts = _count_all(packed[0], owned=False)
            return {"keys": [unpack_strings(keys, packed[1], col.values.type)], "counts": counts, "nulls": nulls,
                    "kinds": kinds}
        vc = pc.value_counts(col.values)
        vc = vc.filter(vc.field("values").is_valid())
        return {"keys": [vc.field("values")], "counts": vc.field("counts").to_numpy(zero_copy_only=False),
                "nulls": nulls, "kinds": kinds}
    if mask is not None:
        cols = [c.filter(~mask) for c in cols]
    codes, first = factorize_rows([_row_keys(c) for c in cols])
    keys = [c.take(first).values for c in cols]
    return {"keys": keys, "counts": np.bincount(codes, minlength=len(first)).astype(np.int64),
            "nulls": nulls, "kinds": kinds}


def count_values_each(jobs: Sequence[tuple[Sequence[NormalizedColumn], Any]]) -> list[dict[str, Any]]:
    """:func:`count_values` of each ``(cols, mask)`` job: what an operator counting several
    columns of a partition calls (the GPU implementation then waits for the device once for all).

    Example:
        >>> col = NormalizedColumn("int", np.array([3, 1, 3]), None)
        >>> [p["counts"].tolist() for p in count_values_each([([col], None), ([col], np.array([1, 0, 0], bool))])]
        [[1, 2], [1, 1]]
    """
    return [count_values(cols, mask) for cols, mask in jobs]


def _count_coded(col: CodedStrings, mask: np.ndarray | None) -> tuple[Any, np.ndarray]:
    """The strings of the rows outside ``mask`` and their int64 counts, by counting the codes.
    Short strings of one length come in the order of their integer codes (as
    :func:`count_values` gives them), so that merging partials is a merge of sorted runs."""
    own = col.mask  # null rows hold code 0: left out whatever the caller's mask
    counts = col.code_counts(own if mask is None else mask if own is None or mask is own else mask | own)
    seen = np.flatnonzero(counts)
    keys, counts = col.dictionary.take(seen), counts[seen]
    packed = pack_strings(keys, None)
    if packed is not None:
        order = np.argsort(packed[0])
        keys, counts = keys.take(order), counts[order]
    return keys, counts


def _count_numbers(values: np.ndarray, mask: np.ndarray | None, nulls: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique values of the rows outside ``mask`` (``nulls`` rows, not all), and their int64 counts.

    Null rows are not filtered out (a slow boolean gather): they stand in as the first valid
    value, whose count is corrected afterwards. Integers spanning a range not much wider than
    their number are counted by direct address (``np.bincount``, linear). Others are sorted: as
    uint32 offsets from the smallest value when they span less than 2**32 (half the bytes of
    int64, twice as fast to sort), else as they are.
    """
    if mask is not None:
        stand_in = values[np.argmin(mask)]  # the first valid value
        values = np.where(mask, stand_in, values)
    keys, counts = _count_all(values, owned=mask is not None)
    if mask is not None:
        counts[np.searchsorted(keys, stand_in)] -= nulls
    return keys, counts


def _count_all(values: np.ndarray, owned: bool) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique values and their int64 counts; ``values`` may be sorted in place when ``owned``."""
    n = len(values)
    if values.dtype.kind in "iu":
        low = values.min()
        span = int(values.max()) - int(low)
        if span <= 2 * n + 65536:
            counts = np.bincount((values - low).astype(np.intp, copy=False))
            seen = np.flatnonzero(counts)
            return seen.astype(values.dtype) + low, counts[seen].astype(np.int64, copy=False)
        if span < 2**32:
            keys, counts = _sorted_runs((values - low).astype(np.uint32))
            return keys.astype(values.dtype) + low, counts
    return _sorted_runs(values if owned else values.copy())


def _sorted_runs(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort ``values`` in place; its unique values and their int64 counts."""
    values.sort()
    starts = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
    return values[starts], np.diff(np.r_[starts, len(values)]).astype(np.int64, copy=False)


def merge_counts(a: dict[str, Any], b: dict[str, Any], op: Any, what: Any) -> dict[str, Any]:
    """Add two partials of :func:`count_values` (associative and commutative)."""
    import pyarrow as pa

    if a["keys"] is None or b["keys"] is None:
        out = dict(a if b["keys"] is None else b)
        out["nulls"] = a["nulls"] + b["nulls"]
        return out
    counts = np.concatenate([a["counts"], b["counts"]])
    short = _short_string_keys(a, b, op, what)
    if short is not None:  # short strings of one length: merged as integers
        codes, width = short
        merged, merged_counts = _merge_runs(codes, counts)
        return {"keys": [unpack_strings(merged, width, pa.large_string())], "counts": merged_counts,
                "nulls": a["nulls"] + b["nulls"], "kinds": ["str"]}
    keys, kinds = concat_keys(a["keys"], a["kinds"], b["keys"], b["kinds"], op, what)
    if len(kinds) == 1 and kinds[0] != "str":
        merged, merged_counts = _merge_runs(keys[0], counts)
        merged_keys = [merged]
    else:
        codes, first, merged_keys = group_keys(keys)
        merged_counts = sum_int(codes, counts, len(first))
    return {"keys": merged_keys, "counts": merged_counts.astype(np.int64), "nulls": a["nulls"] + b["nulls"],
            "kinds": kinds}


def _merge_runs(keys: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique ``keys`` and their summed ``counts`` (keys are two sorted runs: a linear merge)."""
    order = np.argsort(keys, kind="stable")
    k, c = keys[order], counts[order]
    if not len(k):
        return k, c
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    return k[starts], np.add.reduceat(c, starts)


def _short_string_keys(a: dict[str, Any], b: dict[str, Any], op: Any, what: Any) -> tuple[np.ndarray, int] | None:
    """The keys of two partials of one string column as uint64 codes (``a``'s, then ``b``'s) and
    their byte length, when all of them have one length that :func:`pack_strings` takes."""
    if len(a["kinds"]) != 1 or check_kinds_merge(a["kinds"], b["kinds"], op, what) != ["str"]:
        return None
    packed_a = pack_strings(a["keys"][0], None)
    packed_b = pack_strings(b["keys"][0], None, packed_a[1]) if packed_a is not None else None
    return None if packed_b is None else (np.concatenate([packed_a[0], packed_b[0]]), packed_a[1])


def merge_counts_each(jobs: Sequence[tuple[dict[str, Any], dict[str, Any], Any]], op: Any) -> list[dict[str, Any]]:
    """:func:`merge_counts` of each ``(a, b, what)`` job (on the GPU with one wait for the device for all)."""
    return [merge_counts(a, b, op, what) for a, b, what in jobs]


def vocabulary(counted: dict[str, Any], freq_threshold: int, max_size: int) -> tuple[list, np.ndarray]:
    """The vocabulary of merged counts, in id order: ``(keys, counts)``, one key array per column.

    Values seen fewer than ``freq_threshold`` times are left out, the rest sorted by descending
    count, ties by ascending value (numbers numerically, strings by code point, combinations
    column by column), and cut to the ``max_size`` most frequent (0: no limit).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    counts = counted["counts"]
    table = pa.table({**{f"k{i}": pa.array(k) for i, k in enumerate(counted["keys"])}, "count": pa.array(counts)})
    if freq_threshold > 1:
        table = table.filter(pa.array(counts >= freq_threshold))
    order = pc.sort_indices(table, sort_keys=[("count", "descending")] +
                            [(f"k{i}", "ascending") for i in range(len(counted["keys"]))])
    if max_size > 0:
        order = order[:max_size]
    table = table.take(order)
    return [table.column(f"k{i}") for i in range(len(counted["keys"]))], table.column("count").to_numpy()


def union_keys(a: dict[str, Any], b: dict[str, Any], op: Any, what: Any) -> tuple[np.ndarray, list, list]:
    """The keys of two partials (``{"keys": [...], "kinds": [...]}``) as one set of keys.

    Returns the group of each key row (``a``'s rows, then ``b``'s), the unique key rows (one
    array per column, in group order) and the merged kinds.
    """
    keys, kinds = concat_keys(a["keys"], a["kinds"], b["keys"], b["kinds"], op, what)
    codes, _, unique = group_keys(keys)
    return codes, unique, kinds


def concat_keys(a_keys: list, a_kinds: list, b_keys: list, b_kinds: list, op: Any, what: Any) -> tuple[list, list]:
    """Concatenate the key arrays of two partials (numbers: float64 if either is float, else
    int64 or uint64, see :func:`~tabloader.encoding.cpu.columns.common_int_dtype`)."""
    import pyarrow as pa

    kinds = check_kinds_merge(a_kinds, b_kinds, op, what)
    keys = []
    for i, kind in enumerate(kinds):
        if kind == "str":
            keys.append(pa.concat_arrays([pa.array(a_keys[i]).cast(pa.large_string()),
                                          pa.array(b_keys[i]).cast(pa.large_string())]))
        else:
            pair = [np.asarray(a_keys[i]), np.asarray(b_keys[i])]
            dtype = np.float64 if kind == "float" else common_int_dtype(pair, op, what)
            keys.append(np.concatenate([k.astype(dtype, copy=False) for k in pair]))
    return keys, kinds


def check_kinds_merge(a_kinds: list, b_kinds: list, op: Any, what: Any) -> list:
    """The kinds of the key columns of two merged partials (float if either is float); a
    TypeError naming the operator and column when one holds strings and the other numbers."""
    kinds = []
    for ka, kb in zip(a_kinds, b_kinds):
        if (ka == "str") != (kb == "str"):
            raise TypeError(f"{label_of(op)}: column {what!r} holds strings in some partitions and numbers in others")
        kinds.append("float" if "float" in (ka, kb) else ka)
    return kinds


def group_keys(keys: list) -> tuple[np.ndarray, np.ndarray, list]:
    """Group equal key rows: (group of each row, first row of each group, unique keys)."""
    import pyarrow as pa

    # strings as tabloader's text dtype: pandas 2's Python strings hash only up to a NUL byte
    pandas_keys = [text_series(k) if isinstance(k, pa.Array) else k for k in keys]
    codes, first = factorize_rows(pandas_keys)
    unique = [k.take(pa.array(first)) if isinstance(k, pa.Array) else k[first] for k in keys]
    return codes, first, unique


def sum_int(codes: np.ndarray, weights: np.ndarray, n: int) -> np.ndarray:
    """Exact int64 group sums (np.bincount would go through float64)."""
    out = np.zeros(n, dtype=np.int64)
    if not len(codes):
        return out
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
    out[sorted_codes[starts]] = np.add.reduceat(weights[order].astype(np.int64), starts)
    return out
