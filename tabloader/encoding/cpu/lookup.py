"""Key lookup: positions of values (or combinations of values) in a fixed list of keys."""

from __future__ import annotations

import threading
from typing import Any, Sequence

import numpy as np
import pandas as pd

from tabloader import backend
from tabloader.encoding.contract import NULL_ID, OOV_START, label_of
from tabloader.encoding.cpu.coded_strings import CodedStrings
from tabloader.encoding.cpu.columns import NormalizedColumn, arrow_null_mask, exact_ints, normalize_column
from tabloader.encoding.cpu.hashing import cross_hash
from tabloader.encoding.cpu.short_strings import pack_strings


def _kind_of_dtype(dtype: Any) -> str:
    from pandas.api import types as pdt

    if pdt.is_integer_dtype(dtype) or pdt.is_bool_dtype(dtype):
        return "int"
    if pdt.is_float_dtype(dtype):
        return "float"
    if pdt.is_string_dtype(dtype):
        return "str"
    return "null"


class ValueLookup:
    """Positions of values (or combinations of values) in a fixed list of unique keys.

    ``keys`` are one pandas Series per key column (normalized values: int64, float64 or
    strings, no nulls, unique rows). :meth:`positions` maps normalized query columns to the
    row of ``keys`` they equal, or -1. Integers and floats match by value; strings only match
    strings (a string key queried with numbers raises a TypeError naming the column).

    Built once per fitted operator and process, and reused by every partition: the index of
    each key column (:class:`IntKeys`, :class:`FloatKeys`, :class:`StringKeys`) is built on
    construction or first use, never per partition.
    """

    def __init__(self, keys: Sequence[Any], op: Any = None, what: Any = None) -> None:
        self.op, self.what = op, what
        kinds = [_kind_of_dtype(k.dtype) for k in keys]
        self.size = len(keys[0]) if keys else 0
        if len(keys) == 1:
            self.levels = [_key_index(keys[0], kinds[0])]
            self.combined = None
        else:
            self.levels = [_key_index(pd.Series(level_values(k, kind)), kind) for k, kind in zip(keys, kinds)]
            codes = [self._find(level, normalize_column(op, what, k)) for level, k in zip(self.levels, keys)]
            self.combined = _hashed_index(self._combine(codes))

    def _combine(self, codes: list[np.ndarray]) -> np.ndarray:
        out = np.zeros(len(codes[0]), dtype=np.int64)
        missing = np.zeros(len(codes[0]), dtype=bool)
        for code, level in zip(codes, self.levels):
            out = out * max(len(level), 1) + code
            missing |= code < 0
        out[missing] = -1
        return out

    def _find(self, level: Any, col: NormalizedColumn) -> np.ndarray:
        if len(level) == 0 or col.kind == "null":
            return np.full(len(col), -1, dtype=np.int64)
        check_query_kind(self.op, self.what, level.kind, col.kind)
        if isinstance(col, CodedStrings) and len(col.dictionary) <= len(col):
            return col.decode(level.find(col.dictionary))  # each distinct string looked up once
        return level.find(col.values)

    def positions(self, cols: Sequence[NormalizedColumn]) -> np.ndarray:
        """Row of ``keys`` equal to each query row (-1 where none; null rows give -1 too), a
        fresh writable int64 array."""
        if self.combined is None:
            pos = self._find(self.levels[0], cols[0])
        else:
            codes = [self._find(level, col) for level, col in zip(self.levels, cols)]
            combined = self._combine(codes)
            pos = np.where(combined >= 0, self.combined.get_indexer(combined), -1)
        for c in cols:
            if c.mask is not None:
                np.putmask(pos, c.mask, -1)
        return pos


def check_query_kind(op: Any, what: Any, key_kind: str, query_kind: str) -> None:
    """A TypeError naming the operator and column when strings are looked up among numbers or back."""
    if (key_kind == "str") != (query_kind == "str"):
        raise TypeError(f"{label_of(op)}: column {what!r} was fit on {'strings' if key_kind == 'str' else 'numbers'} "
                        f"but now holds {'strings' if query_kind == 'str' else 'numbers'}")


def level_values(key: pd.Series, kind: str) -> Any:
    """The distinct values of one column of a combination's keys, in the order ``pd.unique``
    gives them (the combined codes, on the CPU and GPU alike, count in that order). Strings go
    as tabloader's text dtype: pandas 2's Python strings hash only up to a NUL byte."""
    if kind == "str":
        return pd.Series(key, dtype=backend.STRING_DTYPE).unique()
    return pd.unique(key.to_numpy())


def _key_index(values: pd.Series, kind: str) -> Any:
    """The index of one key column (unique values, no nulls) for its kind."""
    if kind == "str":
        return StringKeys(values)
    if kind == "int":
        return IntKeys(values.to_numpy())
    if kind == "float":
        return FloatKeys(values.to_numpy(dtype=np.float64))
    return IntKeys(np.zeros(0, np.int64))


# Parts of an index built on first use are built by one thread while the others wait: threads of
# a transform all query a fresh index at once, and each built its own copy.
_BUILDING = threading.Lock()


def _built_once(owner: Any, attribute: str, build: Any) -> Any:
    """``owner.<attribute>``, set to ``build()`` first if it is None, by one thread at a time."""
    value = getattr(owner, attribute)
    if value is None:
        with _BUILDING:
            value = getattr(owner, attribute)
            if value is None:
                value = build()
                setattr(owner, attribute, value)
    return value


def _hashed_index(keys: np.ndarray) -> pd.Index:
    """A ``pd.Index`` of ``keys`` with its hash table built now, before threads share it: pandas
    builds it on first use without a lock, and threads querying a fresh Index at once saw it
    holding duplicates (InvalidIndexError from get_indexer), or each built one (8 threads: 8
    tables of millions of keys). ``is_unique`` alone does not build it for sorted keys (a
    vocabulary of values seen once each), a lookup does."""
    return _with_hash_table(pd.Index(keys))


def _with_hash_table(index: pd.Index) -> pd.Index:
    """``index`` (of unique keys) with its hash table built (see :func:`_hashed_index`)."""
    index.is_unique  # noqa: B018
    index.get_indexer(index[:1])
    return index


#: Queries of at most this many values (serving requests, small partitions) are found by binary
#: search: a hash lookup costs ~80 us of pandas overhead per call whatever the query's size.
SMALL_QUERY = 1024


class IntKeys:
    """Unique integer keys (int64, or uint64 whose values >= 2**63 are no negative numbers).

    Keys spanning a range at most a few times their number get a direct-address table (a
    query is one subtraction, a clip and a gather: 2.5-5x faster than a hash lookup); others a
    hash index (``pd.Index.get_indexer``, its hash table built with the keys and kept), or for
    queries of at most :data:`SMALL_QUERY` values a binary search in the sorted keys.
    """

    kind = "int"

    def __init__(self, keys: np.ndarray) -> None:
        self.dtype = np.dtype(np.uint64 if keys.dtype == np.uint64 else np.int64)
        keys = keys.astype(self.dtype, copy=False)
        self.size = len(keys)
        self.table = None
        if self.size:
            low, span = keys.min(), int(keys.max()) - int(keys.min())
            if span <= max(4 * self.size, 65536):
                self.low_bits = low.astype(self.dtype).view(np.uint64)
                self.table = np.full(span + 2, -1, dtype=np.int64)  # [span + 1]: every value outside
                self.table[(keys.view(np.uint64) - self.low_bits).view(np.int64)] = np.arange(self.size)
        self.index = _hashed_index(keys) if self.table is None else None
        self._sorted: tuple[np.ndarray, np.ndarray] | None = None  # (order, sorted keys), built on first use

    def __len__(self) -> int:
        return self.size

    def find(self, values: np.ndarray) -> np.ndarray:
        if not len(values):  # an empty frame's schema is asked for after every fit: no index to build
            return np.zeros(0, np.int64)
        values, fits = exact_ints(values, self.dtype)  # match by value: a query the dtype cannot hold is unseen
        if self.table is not None:
            # Wrapping uint64 arithmetic: a value below the range becomes huge, so one clip sends
            # every value outside the range to the last entry.
            offsets = values.view(np.uint64) - self.low_bits
            np.minimum(offsets, np.uint64(len(self.table) - 1), out=offsets)
            pos = self.table.take(offsets.view(np.int64))
        elif len(values) <= SMALL_QUERY:
            pos = self._search(values)
        else:
            pos = self.index.get_indexer(values).astype(np.int64, copy=False)
        if fits is not None:
            np.putmask(pos, ~fits, -1)
        return pos

    def _search(self, values: np.ndarray) -> np.ndarray:
        def build() -> tuple[np.ndarray, np.ndarray]:
            keys = self.index.to_numpy()
            order = np.argsort(keys, kind="stable")
            return order, keys[order]

        order, keys = _built_once(self, "_sorted", build)
        if not len(keys):
            return np.full(len(values), -1, dtype=np.int64)
        at = np.minimum(keys.searchsorted(values), len(keys) - 1)
        return np.where(keys[at] == values, order[at], -1)


class FloatKeys:
    """Unique float64 keys, found by value (an integer query equals the float of its value)."""

    kind = "float"

    def __init__(self, keys: np.ndarray) -> None:
        self.index = _hashed_index(keys)

    def __len__(self) -> int:
        return len(self.index)

    def find(self, values: np.ndarray) -> np.ndarray:
        return self.index.get_indexer(values.astype(np.float64, copy=False)).astype(np.int64, copy=False)


class StringKeys:
    """Unique string keys, found by pyarrow, or as integers when they are short.

    Keys of one byte length of at most 8 (hex ids, codes) are looked up as integers
    (:mod:`~tabloader.encoding.cpu.short_strings`, an :class:`IntKeys` of their codes built
    once) in every query whose non-null strings all have that length. Otherwise a partition
    holding more rows than there are keys is looked up with ``index_in``, which builds a hash
    set of the keys on every call. Against a larger vocabulary that would cost O(vocabulary)
    per partition, so then only the partition's distinct strings are looked up, by their
    64-bit hashes (``backend.hash_strings``) in a hash index of the keys' hashes built once,
    and checked for equality (a colliding string is no match).
    """

    kind = "str"

    def __init__(self, keys: pd.Series) -> None:
        import pyarrow as pa

        arr = pa.array(keys.array if len(keys) else [], type=pa.string(), from_pandas=True)
        self.keys = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
        self._by_hash: Any = None  # built on first use; False when two keys share a hash
        self._short: Any = None  # (IntKeys of the codes, width), built on first use; False when not short

    def __len__(self) -> int:
        return len(self.keys)

    def find(self, values: Any) -> np.ndarray:
        import pyarrow.compute as pc

        short = self._short_keys()
        if short:
            pos = _find_short(short, values)
            if pos is not None:
                return pos
        if len(self.keys) <= len(values) or self._hash_index() is False:
            pos = pc.index_in(values, value_set=self.keys)
            return pos.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        encoded = pc.dictionary_encode(values)
        distinct = encoded.dictionary
        found = self._hash_index().get_indexer(backend.hash_strings(distinct)).astype(np.int64, copy=False)
        same = pc.equal(distinct, self.keys.take(np.maximum(found, 0))).to_numpy(zero_copy_only=False)
        np.putmask(found, ~same, -1)
        indices = encoded.indices.fill_null(0).to_numpy(zero_copy_only=False)  # null rows: masked by the caller
        return found[indices] if len(found) else np.full(len(values), -1, np.int64)

    def _short_keys(self) -> Any:
        def build() -> Any:
            packed = pack_strings(self.keys, None)
            return (IntKeys(packed[0]), packed[1]) if packed is not None else False

        return _built_once(self, "_short", build)

    def _hash_index(self) -> Any:
        def build() -> Any:
            index = pd.Index(backend.hash_strings(self.keys))
            return _with_hash_table(index) if index.is_unique else False

        return _built_once(self, "_by_hash", build)


def _find_short(short: tuple[IntKeys, int], values: Any) -> np.ndarray | None:
    """Positions of the strings ``values`` among short keys (their :class:`IntKeys` and byte
    length), or None when the non-null ``values`` do not all have that length."""
    keys, width = short
    mask = arrow_null_mask(values)
    packed = pack_strings(values, mask, width)
    if packed is None:
        return None
    found = keys.find(packed[0])
    if mask is None:
        return found
    pos = np.full(len(values), -1, dtype=np.int64)  # null rows: masked by the caller
    pos[~mask] = found
    return pos


def assign_ids(pos: np.ndarray, mask: np.ndarray | None, num_buckets: int, cols: Sequence[NormalizedColumn],
               dtype: Any) -> np.ndarray:
    """Ids of the encoding contract from vocabulary positions (see :mod:`tabloader.encoding.contract`).

    ``pos`` is the vocabulary position of each row (-1: out of vocabulary), reused for the
    result when it is a writable int64 array; ``mask`` the null rows; ``cols`` the key columns
    (one, or a combination's), whose out-of-vocabulary rows are hashed into the buckets
    (:func:`~tabloader.encoding.cpu.hashing.cross_hash`; of one column, its ``hash_values``)
    when ``num_buckets > 1``. The id of position ``i`` is ``2 + num_buckets + i``.

    Example:
        >>> assign_ids(np.array([0, -1, 1, 0]), np.array([False, False, False, True]), 1, [], "int64").tolist()
        [3, 2, 4, 1]
    """
    ids = pos if pos.flags.writeable and pos.dtype == np.int64 else pos.astype(np.int64)
    oov = ids < 0 if num_buckets > 1 else None
    # One pass for the common case: position -1 becomes OOV_START + num_buckets - 1, the one OOV
    # id when num_buckets == 1 (with more buckets, every such row is hashed below).
    ids += OOV_START + num_buckets
    if oov is not None:
        if mask is not None:
            oov &= ~mask
        rows = np.flatnonzero(oov)
        if len(rows):
            ids[rows] = (cross_hash([c.take(rows) for c in cols]) % np.uint64(num_buckets)).astype(np.int64) + OOV_START
    if mask is not None:
        np.putmask(ids, mask, NULL_ID)
    return ids if ids.dtype == np.dtype(dtype) else ids.astype(dtype)
