"""Columns as plain arrays: :class:`NormalizedColumn` and the conversions from pandas."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np
import pandas as pd

from tabloader import backend
from tabloader.encoding.contract import label_of
from tabloader.encoding.cpu.coded_strings import CodedStrings, from_dictionary_array
from tabloader.encoding.lists import as_list_column

KINDS = ("int", "float", "str", "null")


@dataclasses.dataclass
class NormalizedColumn:
    """A column as plain arrays: ``values`` (numpy int64, uint64 or float64, or a pyarrow string
    array), ``mask`` (True where null, or None when there are no nulls) and ``kind`` (one of
    :data:`KINDS`). Integers are int64, except 64-bit unsigned ones, which stay uint64 so that
    values >= 2**63 keep their order and never equal a negative integer. The numbers of null
    rows are arbitrary (they may be views of the column's buffers, read-only): honour the mask.
    Strings are null exactly where the mask is True."""

    kind: str
    values: Any
    mask: np.ndarray | None

    def __len__(self) -> int:
        return len(self.values)

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
    label = label_of(op)
    if not detail and backend.is_decimal_dtype(dtype):
        detail = ("; cast a decimal first: ops.AsType('string') for ids of any size (or 'int64' when they fit), "
                  "ops.AsType('float64') for amounts")
    return TypeError(f"{label} cannot encode column {name!r} of dtype {dtype}: it takes integer, boolean, float, "
                     f"string or categorical columns (or lists of those){detail}")


def normalize_column(op: Any, name: Any, series: Any) -> NormalizedColumn:
    """Turn a pandas/cuDF Series into a :class:`NormalizedColumn`.

    Raises a TypeError naming the operator, the column and its dtype when the dtype is not one
    the categorical operators can encode (datetimes, timedeltas, complex numbers, lists of
    lists, objects that are not strings, ...).
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    from pandas.api import types as pdt

    series = backend.to_host(series)  # GPU frames are encoded on the host (one copy per column)
    dtype = series.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        codes = series.cat.codes.to_numpy()
        missing = codes < 0
        if len(dtype.categories) == 0:
            return NormalizedColumn("null", np.zeros(len(codes)), np.ones(len(codes), bool))
        categories = normalize_column(op, name, pd.Series(dtype.categories))
        codes = np.where(missing, 0, codes)
        if categories.kind == "str":  # the codes are kept: counted and looked up per category
            return CodedStrings(codes, categories.values, missing if missing.any() else None)
        taken = categories.take(codes)
        mask = missing if taken.mask is None else (missing | taken.mask)
        values = taken.values
        if taken.kind == "str" and missing.any():  # strings are null where the mask says so
            values = pc.if_else(pa.array(missing), pa.scalar(None, values.type), values)
        return NormalizedColumn(taken.kind, values, mask if mask.any() else None)
    if isinstance(dtype, pd.ArrowDtype) and pa.types.is_null(dtype.pyarrow_dtype):  # arrow's all-null type
        return NormalizedColumn("null", np.zeros(len(series)), np.ones(len(series), bool))
    if isinstance(dtype, pd.ArrowDtype) and pa.types.is_dictionary(dtype.pyarrow_dtype):
        return _normalize_dictionary(op, name, series)
    if pdt.is_bool_dtype(dtype) or pdt.is_integer_dtype(dtype):
        unsigned64 = pdt.is_unsigned_integer_dtype(dtype) and str(dtype).lower().startswith("uint64")
        values, mask = _masked_buffers(series)
        if values is None:
            mask = series.isna().to_numpy() if series.hasnans else None
            # The null rows' value is arbitrary, but it must be of the column's type (arrow refuses 0 for a boolean).
            na_value = False if pdt.is_bool_dtype(dtype) else 0
            values = series.to_numpy(dtype="uint64" if unsigned64 else "int64", na_value=na_value)
        return NormalizedColumn("int", values.astype(np.uint64 if unsigned64 else np.int64, copy=False), mask)
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
        if len(arr) and arr.null_count == len(arr):  # no string at all: as an all-None object column
            return NormalizedColumn("null", np.zeros(len(arr)), np.ones(len(arr), bool))
        return NormalizedColumn("str", arr, arrow_null_mask(arr))
    raise _type_error(op, name, dtype)


def _normalize_dictionary(op: Any, name: Any, series: pd.Series) -> Any:
    """A column of arrow dictionary type (as parquet files store strings): strings as their
    :class:`~tabloader.encoding.cpu.coded_strings.CodedStrings`, other values decoded."""
    import pyarrow as pa

    arr = pa.array(series.array)  # the ArrowExtensionArray's own chunks (not copied)
    coded = from_dictionary_array(arr)
    if coded is not None:
        return coded
    decoded = arr.cast(arr.type.value_type)
    return normalize_column(op, name, pd.Series(pd.arrays.ArrowExtensionArray(decoded), copy=False))


def arrow_null_mask(arr: Any) -> np.ndarray | None:
    """True at the null rows of the pyarrow array ``arr``, None when it has none: its validity
    bitmap unpacked (10x faster than ``arr.is_null().to_numpy()``, which builds a boolean array
    first).

    Example:
        >>> import pyarrow as pa
        >>> arrow_null_mask(pa.array(["a", None, "c"])[1:]).tolist(), arrow_null_mask(pa.array(["a"]))
        ([True, False], None)
    """
    if not arr.null_count:
        return None
    bits = np.frombuffer(arr.buffers()[0], dtype=np.uint8)
    return np.unpackbits(bits, count=arr.offset + len(arr), bitorder="little")[arr.offset:] == 0


def _masked_buffers(series: pd.Series) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The values and null mask (None without nulls) of a pandas nullable integer or boolean
    column, as read-only views of its own buffers; ``(None, None)`` for other columns.

    Copying them (``to_numpy(na_value=0)``, ``isna()``) cost more than counting the values: the
    values under the mask are arbitrary, so every consumer of a NormalizedColumn honours the mask.
    """
    array = series.array
    if not isinstance(array, (pd.arrays.IntegerArray, pd.arrays.BooleanArray)):
        return None, None
    values, mask = array._data.view(), array._mask.view()  # pandas' masked-array buffers (not copied)
    values.flags.writeable = mask.flags.writeable = False
    return values, mask if mask.any() else None


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
        raise TypeError(f"{label_of(op)}: column {what!r} holds negative integers and unsigned integers "
                        ">= 2**63 (in different partitions or columns); no 64-bit integer type holds both: "
                        "cast the column to one integer type")
    return np.dtype(np.uint64 if above_int64 else np.int64)


def exact_ints(values: np.ndarray, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray | None]:
    """``values`` (int64, uint64 or float64) as the integer ``dtype`` (int64 or uint64), and a
    mask of the values that ``dtype`` holds exactly (None when all are; for CuPy ``values``
    whenever their dtype differs: checking the mask would wait for the device).

    The values it cannot hold (a negative number as uint64, 2**63 as int64, a non-integral or
    out-of-range float) are 0 in the result: callers must mask them out, never match them.

    Example:
        >>> cast, fits = exact_ints(np.array([-1, 5], dtype=np.int64), np.dtype(np.uint64))
        >>> cast.tolist(), fits.tolist()
        ([0, 5], [False, True])
    """
    if values.dtype == dtype:
        return values, None
    xp = backend.array_lib(values)  # numpy, or CuPy for the GPU implementation
    if values.dtype.kind == "f":
        low, high = (-(2.0**63), 2.0**63) if dtype.kind == "i" else (0.0, 2.0**64)
        fits = (xp.floor(values) == values) & (values >= low) & (values < high)
    elif dtype.kind == "u":
        fits = values >= 0
    else:
        fits = values <= np.iinfo(np.int64).max
    cast = xp.where(fits, values, 0).astype(dtype)
    if xp is not np:
        return cast, fits
    return cast, None if fits.all() else fits


def _is_arrow_string(dtype: Any) -> bool:
    import pyarrow as pa

    return isinstance(dtype, pd.ArrowDtype) and (pa.types.is_string(dtype.pyarrow_dtype)
                                                 or pa.types.is_large_string(dtype.pyarrow_dtype))


def null_mask(cols: Sequence[Any], how: str = "any") -> Any:
    """Rows null in ``any`` (or ``all``) of the normalized columns ``cols``; None when there are
    none. Numpy or CuPy masks alike.

    Example:
        >>> cols = [NormalizedColumn("int", np.zeros(2), np.array([True, False])),
        ...         NormalizedColumn("int", np.zeros(2), None)]
        >>> null_mask(cols).tolist(), null_mask(cols, "all")
        ([True, False], None)
    """
    masks = [c.mask for c in cols if c.mask is not None]
    if how == "all" and len(masks) < len(cols):
        return None
    if not masks:
        return None
    out = masks[0]
    for mask in masks[1:]:
        out = (out | mask) if how == "any" else (out & mask)
    return out


def as_pandas(col: NormalizedColumn) -> Any:
    """The values of a normalized column as something ``pd.factorize``/``pd.DataFrame`` take.

    Strings as tabloader's text dtype (arrow-backed) on every pandas version: pandas 2 would
    give Python objects, whose hashing stops at a NUL byte (``"a"`` and ``"a\\x00b"`` would be
    one key on the CPU and two on the GPU)."""
    return text_series(col.values) if col.kind == "str" else col.values


def text_series(strings: Any) -> pd.Series:
    """A pyarrow string array as a pandas Series of tabloader's text dtype (arrow-backed), which
    ``pd.factorize`` hashes whole on every pandas version (see :func:`as_pandas`).

    Example:
        >>> import pyarrow as pa
        >>> pd.factorize(text_series(pa.array(["", "\\x00", ""])))[0].tolist()
        [0, 1, 0]
    """
    return pd.Series(strings.to_pandas(types_mapper=lambda arrow_type: backend.STRING_DTYPE), copy=False)


def keys_to_pandas(arr: Any) -> Any:
    """Key values (a numpy array or a pyarrow array) as a numpy array (numbers) or a pandas
    Series (strings), for the fitted tables."""
    if isinstance(arr, np.ndarray):
        return arr
    out = arr.to_pandas()
    return out.to_numpy() if out.dtype.kind in "iuf" else pd.Series(out, copy=False)


def normalize_elements(op: Any, name: Any, series: Any) -> NormalizedColumn:
    """:func:`normalize_column` of a column's values, or of its elements for a list column."""
    lists = as_list_column(op, name, series)
    return normalize_column(op, name, series if lists is None else backend.list_flatten(lists)[0])


def map_column(op: Any, name: Any, series: Any, encode: Any, is_list: bool = False) -> Any:
    """Apply ``encode(NormalizedColumn) -> ndarray`` to a column; list columns element-wise (lists
    kept; an object column of lists gives an ArrowDtype list column, see
    :func:`~tabloader.encoding.lists.as_list_column`, which also explains ``is_list``)."""
    lists = as_list_column(op, name, series, is_list)
    if lists is not None:
        values, rebuild = backend.list_flatten(lists)
        return rebuild(encode(normalize_column(op, name, values)))
    return encode(normalize_column(op, name, series))
