"""Stateless hashing of categorical columns: :class:`HashBucket` and :class:`HashedCross`.

Hash functions (all in :mod:`tabloader.backend`, the same bits on numpy and CuPy):

* integers (any width, signed or unsigned, nullable or not; booleans as 0/1):
  ``splitmix64(int64 value)`` (:func:`tabloader.backend.hash_int64`);
* floats: an integral value hashes as that integer (so ``3.0`` and ``3`` agree, and a CSV
  column read as float64 hashes like the same column read as Int64); a non-integral value
  hashes as ``splitmix64(its float64 bits)``;
* strings: ``splitmix64(FNV-1a-64(UTF-8 bytes))`` (:func:`tabloader.backend.hash_strings`),
  computed on the unique values of a partition only;
* crosses of several columns: ``h = h_1``, then ``h = splitmix64(h * 31 + h_i)`` for each
  further column (:func:`tabloader.backend.hash_combine`); a null component takes the fixed
  hash :data:`NULL_HASH`.

The helpers here (:func:`normalize_column`, :func:`hash_values`, :func:`embedding_dim`) are
shared by the other categorical operators.

Example:
    >>> import pandas as pd
    >>> from tabloader.ops.hashing import HashBucket
    >>> out = HashBucket(10).transform(["c"], pd.DataFrame({"c": ["a", None, "a"]}))
    >>> out["c"].tolist()[1], out["c"].iloc[0] == out["c"].iloc[2], 1 <= out["c"].iloc[0] < 10
    (0, np.True_, np.True_)
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from tabloader import backend
from tabloader.ops.base import Columns, Operator, flatten_columns, group_name
from tabloader.ops.lists import as_list_column, holds_lists
from tabloader.schema import ColumnSchema, Schema, Tags

#: The hash a null component contributes to a cross (an arbitrary fixed 64-bit constant).
NULL_HASH = np.uint64(0x9AE16A3B2F90404F)

KINDS = ("int", "float", "str", "null")


def embedding_dim(cardinality: int) -> int:
    """Suggested embedding width for a table of ``cardinality`` rows.

    ``min(512, round(1.6 * cardinality ** 0.56))`` -- the rule of thumb of fast.ai and
    NVTabular, at least 1.

    Example:
        >>> embedding_dim(10), embedding_dim(1000), embedding_dim(10**9)
        (6, 77, 512)
    """
    return int(max(1, min(512, round(1.6 * float(cardinality) ** 0.56))))


@dataclasses.dataclass
class NormalizedColumn:
    """A column as plain arrays: ``values`` (numpy int64, uint64 or float64, or a pyarrow string
    array), ``mask`` (True where null, or None when there are no nulls) and ``kind`` (one of
    :data:`KINDS`). Integers are int64, except 64-bit unsigned ones, which stay uint64 so that
    values >= 2**63 keep their order and never equal a negative integer."""

    kind: str
    values: Any
    mask: np.ndarray | None

    def __len__(self) -> int:
        return len(self.values)

    def valid_values(self) -> Any:
        """The non-null values (same kind)."""
        if self.mask is None:
            return self.values
        if self.kind == "str":
            return self.values.filter(_arrow_bool(~self.mask))
        return self.values[~self.mask]

    def filter(self, keep: np.ndarray) -> "NormalizedColumn":
        """The rows where the boolean array ``keep`` is True."""
        values = self.values.filter(_arrow_bool(keep)) if self.kind == "str" else self.values[keep]
        return NormalizedColumn(self.kind, values, None if self.mask is None else self.mask[keep])

    def take(self, positions: np.ndarray) -> "NormalizedColumn":
        values = self.values.take(positions) if self.kind == "str" else self.values[positions]
        return NormalizedColumn(self.kind, values, None if self.mask is None else self.mask[positions])


def _arrow_bool(keep: np.ndarray) -> Any:
    import pyarrow as pa

    return pa.array(keep)


def _type_error(op: Any, name: Any, dtype: Any, detail: str = "") -> TypeError:
    label = getattr(op, "label", str(op))
    return TypeError(f"{label} cannot encode column {name!r} of dtype {dtype}: it takes integer, boolean, float, "
                     f"string or categorical columns (or lists of those){detail}")


def normalize_column(op: Any, name: Any, series: Any) -> NormalizedColumn:
    """Turn a pandas/cuDF Series into a :class:`NormalizedColumn`.

    Raises a TypeError naming the operator, the column and its dtype when the dtype is not one
    the categorical operators can encode (datetimes, timedeltas, complex numbers, lists of
    lists, objects that are not strings, ...).
    """
    import pyarrow as pa
    from pandas.api import types as pdt

    series = backend.to_host(series)  # GPU frames are encoded on the host (one copy per column)
    dtype = series.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        codes = series.cat.codes.to_numpy()
        missing = codes < 0
        if len(dtype.categories) == 0:
            return NormalizedColumn("null", np.zeros(len(codes)), np.ones(len(codes), bool))
        taken = normalize_column(op, name, pd.Series(dtype.categories)).take(np.where(missing, 0, codes))
        mask = missing if taken.mask is None else (missing | taken.mask)
        return NormalizedColumn(taken.kind, taken.values, mask if mask.any() else None)
    if pdt.is_bool_dtype(dtype) or pdt.is_integer_dtype(dtype):
        mask = series.isna().to_numpy() if series.hasnans else None
        unsigned64 = pdt.is_unsigned_integer_dtype(dtype) and str(dtype).lower().startswith("uint64")
        values = series.to_numpy(dtype="uint64" if unsigned64 else "int64", na_value=0)
        return NormalizedColumn("int", values, mask)
    if pdt.is_float_dtype(dtype):
        values = series.to_numpy(dtype="float64", na_value=np.nan)
        nan = np.isnan(values)
        mask = nan if nan.any() else None
        if mask is not None:
            values = np.where(nan, 0.0, values)
        return NormalizedColumn("float", values, mask)
    if pdt.is_string_dtype(dtype) and not isinstance(dtype, pd.ArrowDtype) or _is_arrow_string(dtype):
        if dtype == object:
            inferred = pd.api.types.infer_dtype(series, skipna=True)
            if inferred == "empty":
                return NormalizedColumn("null", np.zeros(len(series)), np.ones(len(series), bool))
            if inferred != "string":
                raise _type_error(op, name, dtype, f" (its values are {inferred}, not strings)")
        arr = pa.array(series.array if dtype != object else series.to_numpy(), from_pandas=True)
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        if not pa.types.is_string(arr.type) and not pa.types.is_large_string(arr.type):
            arr = arr.cast(pa.string())
        mask = arr.is_null().to_numpy(zero_copy_only=False) if arr.null_count else None
        return NormalizedColumn("str", arr, mask)
    raise _type_error(op, name, dtype)


def common_int_dtype(arrays: Sequence[np.ndarray], op: Any, what: Any) -> np.dtype:
    """int64 or uint64, whichever holds every value of these integer arrays exactly.

    Raises a TypeError naming the operator and column when neither does (negative values
    beside unsigned values >= 2**63).
    """
    if all(a.dtype == np.int64 for a in arrays):
        return np.dtype(np.int64)
    negative = any(a.dtype.kind == "i" and len(a) and a.min() < 0 for a in arrays)
    above_int64 = any(a.dtype.kind == "u" and len(a) and a.max() > np.iinfo(np.int64).max for a in arrays)
    if negative and above_int64:
        raise TypeError(f"{getattr(op, 'label', op)}: column {what!r} holds negative integers and unsigned integers "
                        ">= 2**63 (in different partitions or columns); no 64-bit integer type holds both: "
                        "cast the column to one integer type")
    return np.dtype(np.uint64 if above_int64 else np.int64)


def exact_ints(values: np.ndarray, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray | None]:
    """``values`` (int64, uint64 or float64) as the integer ``dtype`` (int64 or uint64), and a
    mask of the values that ``dtype`` holds exactly (None when all are).

    The values it cannot hold (a negative number as uint64, 2**63 as int64, a non-integral or
    out-of-range float) are 0 in the result: callers must mask them out, never match them.

    Example:
        >>> cast, fits = exact_ints(np.array([-1, 5], dtype=np.int64), np.dtype(np.uint64))
        >>> cast.tolist(), fits.tolist()
        ([0, 5], [False, True])
    """
    if values.dtype == dtype:
        return values, None
    if values.dtype.kind == "f":
        low, high = (-(2.0**63), 2.0**63) if dtype.kind == "i" else (0.0, 2.0**64)
        fits = (np.floor(values) == values) & (values >= low) & (values < high)
    elif dtype.kind == "u":
        fits = values >= 0
    else:
        fits = values <= np.iinfo(np.int64).max
    return np.where(fits, values, 0).astype(dtype), None if fits.all() else fits


def _is_arrow_string(dtype: Any) -> bool:
    import pyarrow as pa

    return isinstance(dtype, pd.ArrowDtype) and (pa.types.is_string(dtype.pyarrow_dtype)
                                                 or pa.types.is_large_string(dtype.pyarrow_dtype))


def hash_values(col: NormalizedColumn) -> np.ndarray:
    """uint64 hashes of every row of ``col`` (null rows get :data:`NULL_HASH`); see the module docs."""
    import pyarrow.compute as pc

    if col.kind == "int":
        out = backend.hash_int64(col.values)
    elif col.kind == "float":
        values = col.values
        integral = (np.floor(values) == values) & (np.abs(values) < 2.0**63)
        as_int = np.where(integral, values, 0).astype(np.int64)
        bits = np.where(values == 0, 0.0, values).view(np.int64)  # -0.0 hashes as 0
        out = backend.hash_int64(np.where(integral, as_int, bits))
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


def param_for(value: Any, key: str, default: Any) -> Any:
    """A per-column parameter: ``value`` itself, or ``value[key]`` (``default`` when absent) for a dict."""
    if isinstance(value, Mapping):
        return value.get(key, default)
    return default if value is None else value


def new_frame(like: Any, columns: dict[str, Any]) -> Any:
    """A DataFrame of the same library and index as ``like``."""
    lib = backend.dataframe_lib(backend.frame_device(like))
    return lib.DataFrame(columns, index=like.index, copy=False)  # no consolidation copy


def map_column(op: Any, name: Any, series: Any, encode: Any, is_list: bool = False) -> Any:
    """Apply ``encode(NormalizedColumn) -> ndarray`` to a column; list columns element-wise (lists
    kept; an object column of lists gives an ArrowDtype list column, see
    :func:`~tabloader.ops.lists.as_list_column`, which also explains ``is_list``)."""
    lists = as_list_column(op, name, series, is_list)
    if lists is not None:
        values, rebuild = backend.list_flatten(lists)
        return rebuild(encode(normalize_column(op, name, values)))
    return encode(normalize_column(op, name, series))


def integer_dtype(op: Any, dtype: Any) -> np.dtype:
    """``dtype`` as a numpy integer dtype, or a ValueError naming the operator."""
    try:
        out = np.dtype(dtype)
    except TypeError:
        out = None
    if out is None or out.kind not in "iu":
        raise ValueError(f"{op.label}: dtype must be a numpy integer dtype (int32, int64, ...), got {dtype!r}")
    return out


def check_id_range(op: Any, what: str, max_id: int, dtype: Any, fix: str) -> None:
    """Raise a ValueError when ``dtype`` cannot hold ``max_id``: ids that wrapped around would
    be negative or collide while the schema promises ``max_id + 1`` rows."""
    if max_id > np.iinfo(np.dtype(dtype)).max:
        raise ValueError(f"{op.label}: {what} needs ids up to {max_id}, which dtype {dtype} cannot hold "
                         f"(its maximum is {np.iinfo(np.dtype(dtype)).max}); {fix}")


def _check_buckets(op: Any, num_buckets: Any, dtype: Any) -> None:
    """num_buckets must be integers >= 2 whose ids ``0 .. num_buckets - 1`` fit ``dtype``."""
    integer_dtype(op, dtype)
    items = num_buckets.items() if isinstance(num_buckets, Mapping) else [(None, num_buckets)]
    for name, nb in items:
        if isinstance(nb, bool) or not isinstance(nb, (int, np.integer)) or nb < 2:
            raise ValueError(f"{type(op).__name__}: num_buckets must be an integer >= 2 (bucket 0 is for nulls), "
                             f"got {nb!r}")
        where = "every column" if name is None else f"column {name!r}"
        check_id_range(op, f"{where} with num_buckets={nb}", int(nb) - 1, dtype,
                       "use a wider dtype or fewer buckets")


# Properties describing the raw values; they no longer hold once a column is encoded.
_RAW_VALUE_PROPERTIES = ("domain", "max_distinct")


def _categorical_schema(col: ColumnSchema, cardinality: int, dtype: str, **properties: Any) -> ColumnSchema:
    kept = {k: v for k, v in col.properties.items() if k not in _RAW_VALUE_PROPERTIES}
    out = ColumnSchema(col.name, dtype, col.tags - {str(Tags.CONTINUOUS)} | {str(Tags.CATEGORICAL)}, kept, col.is_list)
    return out.with_properties(cardinality=int(cardinality), embedding_dim=embedding_dim(cardinality),
                               domain={"min": 0, "max": int(cardinality) - 1}, **properties)


class HashBucket(Operator):
    """Hash categorical values into a fixed number of buckets (no fit needed).

    The output of a value is ``1 + hash(value) % (num_buckets - 1)``, and a null is ``0`` (the
    convention of Keras' ``Hashing`` layer with a mask value), so the embedding table has
    exactly ``num_buckets`` rows and nulls have a row of their own. Hashes are those described
    in :mod:`tabloader.ops.hashing`: identical on CPU and GPU, and the same for a value stored
    as int32, int64, Int64 or an integral float. List columns are hashed element-wise.

    Parameters
    ----------
    num_buckets : int or dict
        Number of buckets (>= 2), or a dict column -> number of buckets.
    dtype : str
        Output integer dtype.

    Examples
    --------
    >>> import pandas as pd
    >>> out = HashBucket(100).transform(["c"], pd.DataFrame({"c": [7, None, 7]}, dtype="Int64"))
    >>> out["c"].tolist()[1], out["c"].iloc[0] == out["c"].iloc[2]
    (0, np.True_)
    """

    def __init__(self, num_buckets: int | dict[str, int], dtype: str = "int64") -> None:
        self.num_buckets = num_buckets
        self.dtype = dtype
        _check_buckets(self, num_buckets, dtype)

    def _buckets(self, name: str) -> int:
        nb = param_for(self.num_buckets, name, None)
        if nb is None:
            raise KeyError(f"HashBucket: num_buckets has no entry for column {name!r}")
        return int(nb)

    def transform(self, columns: Columns, frame: Any) -> Any:
        out = {}
        for name in flatten_columns(columns):
            nb = np.uint64(self._buckets(name) - 1)

            def encode(col: NormalizedColumn, nb: np.uint64 = nb) -> np.ndarray:
                ids = (hash_values(col) % nb + np.uint64(1)).astype(self.dtype)
                if col.mask is not None:
                    ids[col.mask] = 0
                return ids

            out[name] = map_column(self, name, frame[name], encode)
        return new_frame(frame, out)

    def compute_output_schema(self, input_schema: Schema, columns: Columns) -> Schema:
        out = []
        for name in flatten_columns(columns):
            col = input_schema[name] if name in input_schema else ColumnSchema(name)
            nb = self._buckets(name)
            out.append(_categorical_schema(col, nb, self.dtype, num_buckets=nb))
        return Schema(out)


class HashedCross(Operator):
    """Hash the combination of two or more categorical columns into buckets (no fit needed).

    Select groups as tuples, ``[("a", "b"), ("a", "c")] >> HashedCross(1000)``; a plain list
    of names, ``["a", "b"] >> HashedCross(1000)``, is one group. Each group gives one column
    named ``a_b``. Its value is ``1 + h % (num_buckets - 1)`` with ``h`` the combined hash of
    the row's values (``h = splitmix64(h * 31 + h_i)``, see :mod:`tabloader.ops.hashing`); a
    null component hashes as :data:`NULL_HASH`; a row whose values are all null gets ``0``.

    Parameters
    ----------
    num_buckets : int or dict
        Number of buckets (>= 2), or a dict output name (``"a_b"``) -> number of buckets.
    dtype : str
        Output integer dtype.

    Examples
    --------
    >>> import pandas as pd
    >>> df = pd.DataFrame({"a": [1, 1, None], "b": ["x", "x", None]})
    >>> out = HashedCross(50).transform([("a", "b")], df)
    >>> out.columns.tolist(), out["a_b"].iloc[0] == out["a_b"].iloc[1], out["a_b"].iloc[2]
    (['a_b'], np.True_, np.int64(0))
    """

    def __init__(self, num_buckets: int | dict[str, int], dtype: str = "int64") -> None:
        self.num_buckets = num_buckets
        self.dtype = dtype
        _check_buckets(self, num_buckets, dtype)

    @staticmethod
    def _groups(columns: Columns) -> list[tuple[str, ...]]:
        groups = [tuple(c) for c in columns if isinstance(c, (tuple, list))]
        plain = [c for c in columns if not isinstance(c, (tuple, list))]
        if groups and plain:
            raise ValueError(f"HashedCross: select either groups (tuples) or plain names, not both: {list(columns)}")
        groups = groups or [tuple(plain)]
        for g in groups:
            if len(g) < 2:
                raise ValueError(f"HashedCross crosses two or more columns, got the group {g}")
        return groups

    def output_column_names(self, columns: Columns) -> list[str]:
        return [group_name(g) for g in self._groups(columns)]

    def transform(self, columns: Columns, frame: Any) -> Any:
        out = {}
        for group in self._groups(columns):
            name = group_name(group)
            nb = param_for(self.num_buckets, name, None)
            if nb is None:
                raise KeyError(f"HashedCross: num_buckets has no entry for {name!r}")
            for c in group:
                if holds_lists(frame[c]):
                    raise TypeError(f"HashedCross cannot cross list column {c!r} (dtype {frame[c].dtype})")
            cols = [normalize_column(self, c, frame[c]) for c in group]
            ids = (cross_hash(cols) % np.uint64(int(nb) - 1) + np.uint64(1)).astype(self.dtype)
            masks = [c.mask for c in cols]
            if all(m is not None for m in masks):
                ids[np.logical_and.reduce(masks)] = 0
            out[name] = ids
        return new_frame(frame, out)

    def dependencies(self) -> list[str]:
        return []

    def compute_output_schema(self, input_schema: Schema, columns: Columns) -> Schema:
        out = []
        for group in self._groups(columns):
            name = group_name(group)
            nb = int(param_for(self.num_buckets, name, 0))
            out.append(_categorical_schema(ColumnSchema(name), nb, self.dtype, num_buckets=nb) if nb
                       else ColumnSchema(name, self.dtype, {Tags.CATEGORICAL}))
        return Schema(out)
