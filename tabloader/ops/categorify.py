"""Categorify: encode categorical values as contiguous integer ids, by frequency.

Encoding contract (see ``DESIGN.md``):

* ``0``: padding, only ever written by loaders padding list columns (never produced here);
* ``1``: null / missing;
* ``[2, 2 + num_buckets)``: out-of-vocabulary values (count below ``freq_threshold``, beyond
  ``max_size``, or unseen at fit). With ``num_buckets == 1`` every such value is ``2``; with
  more, a value goes to ``2 + hash(value) % num_buckets`` with the hashes of
  :mod:`tabloader.ops.hashing` (identical on CPU and GPU);
* ``2 + num_buckets + i``: the ``i``-th vocabulary value, the vocabulary being sorted by
  descending count, ties by ascending value (numbers numerically -- integers by their true
  value whatever their width and signedness, so uint64 values >= 2**63 come after small ones
  --, strings by code point; combinations by their values in column order).

Lookups match by value: an integer the vocabulary's type cannot hold (a negative id against
a uint64 vocabulary, a non-integral float) is unseen and goes to OOV.

The module also holds the key machinery (:class:`ValueLookup`, :func:`factorize_rows`) that
:mod:`~tabloader.ops.groupby` and :mod:`~tabloader.ops.target_encoding` share.

Example:
    >>> import pandas as pd, tabloader as tl
    >>> from tabloader.workflow import Workflow
    >>> wf = Workflow(["c"] >> Categorify(), progress=False)
    >>> wf.fit_transform(pd.DataFrame({"c": ["b", "a", "b", None]}))["c"].tolist()
    [3, 4, 3, 1]
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from tabloader import backend
from tabloader.ops.base import CachedLookups, Columns, NotFittedError, StatOperator, group_name
from tabloader.ops.hashing import (NormalizedColumn, _categorical_schema, check_id_range, common_int_dtype, cross_hash,
                                   exact_ints, hash_values, integer_dtype, map_column, new_frame, normalize_column,
                                   param_for)
from tabloader.ops.lists import as_list_column, holds_lists
from tabloader.schema import ColumnSchema, Schema, Tags

NULL_ID = 1
OOV_START = 2
ENCODE_TYPES = ("joint", "combo")


# --- key machinery shared by the categorical stat operators -------------------------------
def as_pandas(col: NormalizedColumn) -> Any:
    """The values of a normalized column as something ``pd.factorize``/``pd.DataFrame`` take."""
    if col.kind == "str":
        return pd.Series(col.values.to_pandas(), copy=False)
    return col.values


def _kind_of_dtype(dtype: Any) -> str:
    from pandas.api import types as pdt

    if pdt.is_integer_dtype(dtype) or pdt.is_bool_dtype(dtype):
        return "int"
    if pdt.is_float_dtype(dtype):
        return "float"
    if pdt.is_string_dtype(dtype):
        return "str"
    return "null"


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


class ValueLookup:
    """Positions of values (or combinations of values) in a fixed list of unique keys.

    ``keys`` are one pandas Series per key column (normalized values: int64, float64 or
    strings, no nulls, unique rows). :meth:`positions` maps normalized query columns to the
    row of ``keys`` they equal, or -1. Integers and floats match by value; strings only match
    strings (a string key queried with numbers raises a TypeError naming the column).
    Built once per fitted operator and cached; the lookups are vectorized (a hash index for
    numbers, pyarrow's ``index_in`` for strings).
    """

    def __init__(self, keys: Sequence[Any], op: Any = None, what: Any = None) -> None:
        self.op, self.what = op, what
        self.kinds = [_kind_of_dtype(k.dtype) for k in keys]
        self.size = len(keys[0]) if keys else 0
        if len(keys) == 1:
            self.levels = [self._level(keys[0], self.kinds[0])]
            self.combined = None
        else:
            uniques = [pd.unique(k.to_numpy() if self.kinds[i] != "str" else k) for i, k in enumerate(keys)]
            self.levels = [self._level(pd.Series(u), kind) for u, kind in zip(uniques, self.kinds)]
            codes = [self._positions1(level, kind, normalize_column(op, what, k))
                     for level, kind, k in zip(self.levels, self.kinds, keys)]
            self.combined = pd.Index(self._combine(codes))

    @staticmethod
    def _level(values: Any, kind: str) -> Any:
        import pyarrow as pa

        if kind == "str":
            return pa.array(values.to_numpy(dtype=object) if len(values) else [], type=pa.string())
        if kind == "int":  # uint64 stays uint64: its values >= 2**63 are no negative numbers
            ints = values.to_numpy()
            return pd.Index(ints if ints.dtype == np.uint64 else ints.astype(np.int64))
        if kind == "float":
            return pd.Index(values.to_numpy(dtype=np.float64))
        return pd.Index(np.zeros(0, np.int64))

    def _combine(self, codes: list[np.ndarray]) -> np.ndarray:
        out = np.zeros(len(codes[0]), dtype=np.int64)
        missing = np.zeros(len(codes[0]), dtype=bool)
        for code, level in zip(codes, self.levels):
            out = out * max(len(level), 1) + code
            missing |= code < 0
        out[missing] = -1
        return out

    def _positions1(self, level: Any, kind: str, col: NormalizedColumn) -> np.ndarray:
        import pyarrow.compute as pc

        n = len(col)
        if len(level) == 0 or col.kind == "null":
            return np.full(n, -1, dtype=np.int64)
        if kind == "str" or col.kind == "str":
            if kind != col.kind:
                raise TypeError(f"{getattr(self.op, 'label', self.op)}: column {self.what!r} was fit on "
                                f"{'strings' if kind == 'str' else 'numbers'} but now holds "
                                f"{'strings' if col.kind == 'str' else 'numbers'}")
            pos = pc.index_in(col.values, value_set=level)
            return pos.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        values = col.values
        if kind == "int":  # match by value: a query the level's dtype cannot hold is unseen
            values, fits = exact_ints(values, level.dtype)
            pos = level.get_indexer(values).astype(np.int64, copy=False)
            return pos if fits is None else np.where(fits, pos, -1)
        if col.kind == "int":
            values = values.astype(np.float64)
        return level.get_indexer(values).astype(np.int64, copy=False)

    def positions(self, cols: Sequence[NormalizedColumn]) -> np.ndarray:
        """Row of ``keys`` equal to each query row (-1 where none; null rows give -1 too)."""
        if self.combined is None:
            pos = self._positions1(self.levels[0], self.kinds[0], cols[0])
        else:
            codes = [self._positions1(level, kind, col) for level, kind, col in zip(self.levels, self.kinds, cols)]
            combined = self._combine(codes)
            pos = np.where(combined >= 0, self.combined.get_indexer(combined), -1)
        if any(c.mask is not None for c in cols):
            pos = pos.copy() if not pos.flags.writeable else pos
            for c in cols:
                if c.mask is not None:
                    np.putmask(pos, c.mask, -1)
        return pos


def null_mask(cols: Sequence[NormalizedColumn], how: str = "any") -> np.ndarray | None:
    masks = [c.mask for c in cols if c.mask is not None]
    if how == "all" and len(masks) < len(cols):
        return None
    if not masks:
        return None
    return np.logical_or.reduce(masks) if how == "any" else np.logical_and.reduce(masks)


# --- Categorify ----------------------------------------------------------------------------
class Categorify(CachedLookups, StatOperator):
    """Encode categorical columns as integer ids, most frequent values first.

    Ids follow the contract of :mod:`tabloader.ops.categorify`: ``1`` null, ``[2, 2 +
    num_buckets)`` out-of-vocabulary, then the vocabulary by descending count (ties by value).
    Unseen values at transform time go to the OOV bucket(s), never an error.

    Columns may be integers (any width, nullable), booleans, strings, categoricals, floats
    (encoded by value; an integral float equals the integer of that value), or list columns of
    those (``pd.ArrowDtype(pa.list_(...))``, or an object column of Python lists or numpy
    arrays as ``pd.read_parquet`` and serving requests give): each element is encoded, a null
    element gets the null id 1, a null list stays a null list, the counts are over elements,
    and the output is an ArrowDtype list column. Other dtypes raise a TypeError naming the
    column and dtype.

    Groups of columns are selected as tuples: with ``encode_type="joint"`` (default) the
    columns of ``("a", "b")`` share one vocabulary (outputs keep each column's name and get
    the same cardinality); with ``encode_type="combo"`` the combination of their values is
    encoded as one new column ``a_b`` (a row with a null in any of them is null).

    Parameters
    ----------
    freq_threshold : int or dict
        Values seen fewer times go to OOV; a dict maps a column (or group name ``a_b``) to its
        threshold. 0 keeps every value.
    max_size : int or dict
        At most this many vocabulary values (the most frequent) per column; 0 means no limit.
        The embedding table then has at most ``2 + num_buckets + max_size`` rows.
    num_buckets : int or dict
        Number of OOV buckets (>= 1).
    encode_type : {"joint", "combo"}
        How tuple groups are encoded (see above).
    vocabs : dict, optional
        User-given vocabularies: column (or group name) -> list of values, in id order (for a
        combo group, a list of tuples). Those columns need no fit; counts are then unknown.
    dtype : str
        Output integer dtype (checked against the cardinality at fit).

    Attributes
    ----------
    vocabularies_ : dict
        Per column (or group name): a DataFrame of the vocabulary in id order -- the value
        column(s) (``value``, or the group's column names for a combo) and ``count``.
    null_counts_ : dict
        Per column (or group name): the number of nulls seen at fit.
    cardinalities_ : dict
        Per output column: embedding rows, ``2 + num_buckets + len(vocabulary)``.
    list_columns_ : list
        The input columns that held lists at fit (their outputs are list columns in every
        partition, even one holding only null lists).

    The output schema marks each output ``categorical`` and records ``cardinality``,
    ``embedding_dim`` (``min(512, round(1.6 * cardinality ** 0.56))``), ``num_buckets``,
    ``freq_threshold`` and ``embedding_table`` (the name of the vocabulary it uses; joint
    columns share one).

    Examples
    --------
    >>> import pandas as pd
    >>> from tabloader.workflow import Workflow
    >>> df = pd.DataFrame({"a": [5, 7, 7, None], "b": ["x", "y", "y", "z"]}).astype({"a": "Int64"})
    >>> wf = Workflow(["a", "b"] >> Categorify(freq_threshold=2), progress=False)
    >>> out = wf.fit_transform(df)
    >>> out["a"].tolist(), out["b"].tolist()
    ([2, 3, 3, 1], [2, 3, 3, 2])
    >>> wf.output_schema["a"].properties["cardinality"]
    4
    """

    def __init__(self, freq_threshold: int | dict[str, int] = 0, max_size: int | dict[str, int] = 0,
                 num_buckets: int | dict[str, int] = 1, encode_type: str = "joint",
                 vocabs: dict[str, list] | None = None, dtype: str = "int64") -> None:
        self.freq_threshold = freq_threshold
        self.max_size = max_size
        self.num_buckets = num_buckets
        self.encode_type = encode_type
        self.vocabs = vocabs
        self.dtype = dtype
        if encode_type not in ENCODE_TYPES:
            raise ValueError(f"Categorify: encode_type must be one of {ENCODE_TYPES}, got {encode_type!r}")
        for nb in (num_buckets.values() if isinstance(num_buckets, Mapping) else [num_buckets]):
            if isinstance(nb, bool) or not isinstance(nb, (int, np.integer)) or nb < 1:
                raise ValueError(f"Categorify: num_buckets must be an integer >= 1, got {nb!r}")
        integer_dtype(self, dtype)

    # --- plan: which vocabulary each selected column uses ----------------------------------
    def _plan(self, columns: Columns) -> list[tuple[str, str, tuple[str, ...], list[str]]]:
        """(kind, key, input columns, output columns) per vocabulary."""
        plan = []
        for col in columns:
            if isinstance(col, (tuple, list)) and len(col) > 1:
                group = tuple(col)
                if self.encode_type == "combo":
                    plan.append(("combo", group_name(group), group, [group_name(group)]))
                else:
                    plan.append(("joint", group_name(group), group, list(group)))
            else:
                name = col[0] if isinstance(col, (tuple, list)) else col
                plan.append(("single", name, (name,), [name]))
        return plan

    def output_column_names(self, columns: Columns) -> list[str]:
        out: list[str] = []
        for _, _, _, outputs in self._plan(columns):
            out += [o for o in outputs if o not in out]
        return out

    def _buckets(self, key: str) -> int:
        return int(param_for(self.num_buckets, key, 1))

    def _user_vocab(self, key: str) -> Any:
        return self.vocabs.get(key) if isinstance(self.vocabs, Mapping) else None

    # --- fit -------------------------------------------------------------------------------
    def fit_partial(self, columns: Columns, frame: Any) -> dict[str, Any]:
        stats: dict[str, Any] = {}
        list_columns = []  # remembered so that a partition holding only null lists still gives lists
        for kind, key, inputs, _ in self._plan(columns):
            list_columns += [c for c in inputs if kind != "combo" and holds_lists(frame[c])]
            if self._user_vocab(key) is not None:
                stats[key] = None
                continue
            if kind == "combo":
                cols = [self._normalize_scalar(c, frame[c]) for c in inputs]
                stats[key] = count_values(cols, null_mask(cols, "any"))
            else:
                parts = []
                for c in inputs:
                    lists = as_list_column(self, c, frame[c])
                    series = frame[c] if lists is None else backend.list_flatten(lists)[0]
                    col = normalize_column(self, c, series)
                    parts.append(count_values([col], col.mask))
                merged = parts[0]
                for p in parts[1:]:
                    merged = self._merge_counts(merged, p, key)
                stats[key] = merged
        return {"counts": stats, "list_columns": list_columns}

    def _normalize_scalar(self, name: str, series: Any) -> NormalizedColumn:
        if holds_lists(series):
            raise TypeError(f"{self.label} cannot combine list column {name!r} (dtype {series.dtype}) "
                            "with encode_type='combo'")
        return normalize_column(self, name, series)

    def merge(self, left: dict[str, Any], right: dict[str, Any]) -> dict[str, Any]:
        counts = {key: self._merge_counts(left["counts"][key], right["counts"][key], key) for key in left["counts"]}
        return {"counts": counts, "list_columns": sorted(set(left["list_columns"]) | set(right["list_columns"]))}

    def _merge_counts(self, a: Any, b: Any, key: str) -> Any:
        return merge_counts(a, b, self, key)

    def finalize(self, columns: Columns, merged: dict[str, Any]) -> None:
        vocabularies, nulls, cards = {}, {}, {}
        for kind, key, inputs, outputs in self._plan(columns):
            user = self._user_vocab(key)
            if user is not None:
                vocab = self._vocab_from_user(kind, key, inputs, user)
                nulls[key] = None
            else:
                stats = merged["counts"][key]
                vocab = self._vocab_from_counts(kind, key, inputs, stats)
                nulls[key] = int(stats["nulls"])
            vocabularies[key] = vocab
            card = OOV_START + self._buckets(key) + len(vocab)
            check_id_range(self, f"column {key!r}", card - 1, self.dtype, "use a wider dtype or set max_size")
            for out in outputs:
                cards[out] = card
        self.vocabularies_ = vocabularies
        self.null_counts_ = nulls
        self.cardinalities_ = cards
        self.list_columns_ = list(merged["list_columns"])
        self._lookup = {}

    def _value_columns(self, kind: str, inputs: tuple[str, ...]) -> list[str]:
        cols = list(inputs) if kind == "combo" else ["value"]
        if "count" in cols:
            raise ValueError(f"{self.label}: a combo of a column named 'count' is not supported")
        return cols

    def _vocab_from_counts(self, kind: str, key: str, inputs: tuple[str, ...], stats: Any) -> pd.DataFrame:
        import pyarrow as pa
        import pyarrow.compute as pc

        value_cols = self._value_columns(kind, inputs)
        if stats is None or not len(stats["counts"]):
            return pd.DataFrame({**{c: pd.Series([], dtype=object) for c in value_cols},
                                 "count": pd.Series([], dtype=np.int64)})
        counts = stats["counts"]
        keep = np.ones(len(counts), dtype=bool)
        threshold = int(param_for(self.freq_threshold, key, 0) or 0)
        if threshold > 1:
            keep = counts >= threshold
        table = pa.table({**{f"k{i}": pa.array(k) for i, k in enumerate(stats["keys"])},
                          "count": pa.array(counts)}).filter(pa.array(keep))
        order = pc.sort_indices(table, sort_keys=[("count", "descending")] +
                                [(f"k{i}", "ascending") for i in range(len(stats["keys"]))])
        max_size = int(param_for(self.max_size, key, 0) or 0)
        if max_size > 0:
            order = order[:max_size]
        table = table.take(order)
        out = {c: _arrow_to_pandas(table.column(f"k{i}")) for i, c in enumerate(value_cols)}
        out["count"] = table.column("count").to_numpy()
        return pd.DataFrame(out)

    def _vocab_from_user(self, kind: str, key: str, inputs: tuple[str, ...], values: Any) -> pd.DataFrame:
        value_cols = self._value_columns(kind, inputs)
        rows = list(values)
        if kind == "combo":
            frame = pd.DataFrame([tuple(r) for r in rows], columns=value_cols) if rows else \
                pd.DataFrame({c: [] for c in value_cols})
        else:
            frame = pd.DataFrame({"value": pd.Series(rows)})
        normalized = {}
        for c in value_cols:
            col = normalize_column(self, key, frame[c])
            if col.mask is not None:
                raise ValueError(f"{self.label}: the vocabulary given for {key!r} contains nulls")
            normalized[c] = as_pandas(col)
        frame = pd.DataFrame(normalized)
        if frame.duplicated().any():
            dup = frame[frame.duplicated()].iloc[0].tolist()
            raise ValueError(f"{self.label}: the vocabulary given for {key!r} repeats {dup}")
        max_size = int(param_for(self.max_size, key, 0) or 0)
        if max_size > 0:
            frame = frame.iloc[:max_size]
        frame["count"] = pd.array([None] * len(frame), dtype="Int64")
        return frame.reset_index(drop=True)

    # --- fitted state ----------------------------------------------------------------------
    def _vocabulary(self, kind: str, key: str, inputs: tuple[str, ...]) -> pd.DataFrame:
        fitted = getattr(self, "vocabularies_", None)
        if fitted is not None and key in fitted:
            return fitted[key]
        user = self._user_vocab(key)
        if user is not None:
            return self._vocab_from_user(kind, key, inputs, user)
        raise NotFittedError(f"{self.label} on {list(inputs)} is not fitted: call Workflow.fit(dataset) "
                             "before transform")

    def check_is_fitted(self, columns: Columns | None = None) -> None:
        if columns is None:
            return super().check_is_fitted(columns)
        for kind, key, inputs, _ in self._plan(columns):
            self._vocabulary(kind, key, inputs)

    def _get_lookup(self, kind: str, key: str, inputs: tuple[str, ...]) -> ValueLookup:
        cache = self.__dict__.setdefault("_lookup", {})
        lookup = cache.get(key)
        if lookup is None:
            vocab = self._vocabulary(kind, key, inputs)
            value_cols = self._value_columns(kind, inputs)
            lookup = ValueLookup([vocab[c] for c in value_cols], self, key)
            cache[key] = lookup  # two threads building it at once is harmless
        return lookup

    def get_state(self) -> dict[str, Any]:
        return {"vocabularies": self.vocabularies_, "null_counts": self.null_counts_,
                "cardinalities": self.cardinalities_, "list_columns": self.list_columns_}

    def set_state(self, state: dict[str, Any]) -> None:
        if not state:
            return
        self.vocabularies_ = dict(state["vocabularies"])
        self.null_counts_ = dict(state["null_counts"])
        self.cardinalities_ = dict(state["cardinalities"])
        self.list_columns_ = list(state.get("list_columns", []))  # absent from workflows saved before it existed
        self._lookup = {}

    # --- transform -------------------------------------------------------------------------
    def transform(self, columns: Columns, frame: Any) -> Any:
        out: dict[str, Any] = {}
        for kind, key, inputs, outputs in self._plan(columns):
            lookup = self._get_lookup(kind, key, inputs)
            nb = self._buckets(key)
            base = OOV_START + nb
            if kind == "combo":
                cols = [self._normalize_scalar(c, frame[c]) for c in inputs]
                pos = lookup.positions(cols)
                out[outputs[0]] = self._ids(pos, base, nb, null_mask(cols, "any"), lambda rows: cross_hash(
                    [c.take(rows) for c in cols]))
                continue
            list_columns = getattr(self, "list_columns_", ())
            for name in inputs:
                def encode(col: NormalizedColumn) -> np.ndarray:
                    pos = lookup.positions([col])
                    return self._ids(pos, base, nb, col.mask, lambda rows: hash_values(col.take(rows)))

                out[name] = map_column(self, name, frame[name], encode, is_list=name in list_columns)
        return new_frame(frame, out)

    def _ids(self, pos: np.ndarray, base: int, nb: int, mask: np.ndarray | None, hasher: Any) -> np.ndarray:
        # In place on the fresh ``pos`` array: fewer passes and allocations (this is the hot loop).
        oov = pos < 0
        ids = pos if pos.flags.writeable and pos.dtype == np.int64 else pos.astype(np.int64)
        ids += base
        np.putmask(ids, oov, OOV_START)
        if nb > 1:
            if mask is not None:
                oov &= ~mask
            rows = np.flatnonzero(oov)
            if len(rows):
                ids[rows] = (hasher(rows) % np.uint64(nb)).astype(np.int64) + OOV_START
        if mask is not None:
            np.putmask(ids, mask, NULL_ID)
        return ids if ids.dtype == np.dtype(self.dtype) else ids.astype(self.dtype)

    # --- schema ----------------------------------------------------------------------------
    def compute_output_schema(self, input_schema: Schema, columns: Columns) -> Schema:
        cards = getattr(self, "cardinalities_", {})
        out = []
        for kind, key, inputs, outputs in self._plan(columns):
            card = cards.get(outputs[0])
            if card is None and self._user_vocab(key) is not None:
                card = OOV_START + self._buckets(key) + len(self._vocabulary(kind, key, inputs))
            for name in outputs:
                col = input_schema[name] if (kind != "combo" and name in input_schema) else ColumnSchema(name)
                props = {"num_buckets": self._buckets(key), "freq_threshold": int(param_for(self.freq_threshold, key, 0)
                                                                                    or 0),
                         "embedding_table": key}
                if card is not None:
                    col = _categorical_schema(col, card, self.dtype, **props)
                else:  # before fit: the cardinality is not known yet
                    col = col.without_tags(Tags.CONTINUOUS).with_tags(Tags.CATEGORICAL).with_dtype(self.dtype)
                    col = col.with_properties(**props)
                out.append(col)
        return Schema(out)


def _arrow_to_pandas(arr: Any) -> Any:
    out = arr.to_pandas()
    return out.to_numpy() if out.dtype.kind in "iuf" else pd.Series(out, copy=False)


def count_values(cols: Sequence[NormalizedColumn], mask: np.ndarray | None) -> dict[str, Any]:
    """Partial statistics of Categorify: counts of the non-null rows' values (or combinations).

    ``{"keys": [one array per column], "counts": int64 array, "nulls": int, "kinds": [...]}``.
    One numeric column: keys are sorted unique values (np.unique), so merges are linear.
    Strings are pyarrow arrays; combinations are grouped with :func:`factorize_rows`.
    """
    import pyarrow.compute as pc

    nulls = int(mask.sum()) if mask is not None else 0
    if mask is not None:
        cols = [c.filter(~mask) for c in cols]
    kinds = [c.kind for c in cols]
    if "null" in kinds or len(cols[0]) == 0:
        return {"keys": None, "counts": np.zeros(0, np.int64), "nulls": nulls, "kinds": kinds}
    if len(cols) == 1 and kinds[0] in ("int", "float"):
        keys, counts = np.unique(cols[0].values, return_counts=True)
        return {"keys": [keys], "counts": counts.astype(np.int64), "nulls": nulls, "kinds": kinds}
    if len(cols) == 1:
        vc = pc.value_counts(cols[0].values)
        return {"keys": [vc.field("values")], "counts": vc.field("counts").to_numpy(zero_copy_only=False),
                "nulls": nulls, "kinds": kinds}
    codes, first = factorize_rows([as_pandas(c) for c in cols])
    keys = [c.take(first).values for c in cols]
    return {"keys": keys, "counts": np.bincount(codes, minlength=len(first)).astype(np.int64),
            "nulls": nulls, "kinds": kinds}


def merge_counts(a: Any, b: Any, op: Any, what: Any) -> Any:
    """Add two partials of :func:`count_values` (associative and commutative)."""
    import pyarrow as pa

    if a is None or b is None:
        return a if b is None else b
    if a["keys"] is None or b["keys"] is None:
        out = dict(a if b["keys"] is None else b)
        out["nulls"] = a["nulls"] + b["nulls"]
        return out
    keys, kinds = concat_keys(a["keys"], a["kinds"], b["keys"], b["kinds"], op, what)
    counts = np.concatenate([a["counts"], b["counts"]])
    if len(kinds) == 1 and kinds[0] != "str":
        order = np.argsort(keys[0], kind="stable")  # two sorted runs: a linear merge
        k, c = keys[0][order], counts[order]
        starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]]) if len(k) else np.zeros(0, np.int64)
        merged_keys, merged_counts = [k[starts]], np.add.reduceat(c, starts) if len(k) else c
    else:
        codes, first, merged_keys = group_keys(keys)
        merged_counts = _sum_int(codes, counts, len(first))
    return {"keys": merged_keys, "counts": merged_counts.astype(np.int64), "nulls": a["nulls"] + b["nulls"],
            "kinds": kinds}


def concat_keys(a_keys: list, a_kinds: list, b_keys: list, b_kinds: list, op: Any, what: Any) -> tuple[list, list]:
    """Concatenate the key arrays of two partials (numbers: float64 if either is float, else
    int64 or uint64, see :func:`~tabloader.ops.hashing.common_int_dtype`)."""
    import pyarrow as pa

    kinds = []
    for ka, kb in zip(a_kinds, b_kinds):
        if (ka == "str") != (kb == "str"):
            raise TypeError(f"{op.label}: column {what!r} holds strings in some partitions and numbers in others")
        kinds.append("float" if "float" in (ka, kb) else ka)
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


def group_keys(keys: list) -> tuple[np.ndarray, np.ndarray, list]:
    """Group equal key rows: (group of each row, first row of each group, unique keys)."""
    import pyarrow as pa

    pandas_keys = [pd.Series(k.to_pandas(), copy=False) if isinstance(k, pa.Array) else k for k in keys]
    codes, first = factorize_rows(pandas_keys)
    unique = [k.take(pa.array(first)) if isinstance(k, pa.Array) else k[first] for k in keys]
    return codes, first, unique


def _sum_int(codes: np.ndarray, weights: np.ndarray, n: int) -> np.ndarray:
    """Exact int64 group sums (np.bincount would go through float64)."""
    out = np.zeros(n, dtype=np.int64)
    if not len(codes):
        return out
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
    out[sorted_codes[starts]] = np.add.reduceat(weights[order].astype(np.int64), starts)
    return out
