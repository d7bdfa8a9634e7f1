"""The fast paths: each operator that has one compiled, once per node, into a numpy function of
the node's input columns (:class:`~tabloader.serving.columns.Column`) to its output columns.

A function raises :class:`~tabloader.serving.columns.Unsupported` for inputs it does not take,
and its node then runs the DataFrame path.

Example:
    >>> import numpy as np
    >>> from tabloader import ops
    >>> from tabloader.serving.columns import Column
    >>> step = FAST_OPERATORS[ops.LogOp](ops.LogOp(), ["x"])
    >>> step({"x": Column(np.array([0.0, 9.0]))})["x"].values.round(4).tolist()
    [0.0, 2.3026]
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from tabloader import backend
from tabloader.ops import (AddProperties, AddTags, Bucketize, Categorify, Clip, FillMedian, FillMissing, HashBucket,
                           HashedCross, LogOp, Normalize, NormalizeMinMax, Rename)
from tabloader.ops.categorical_columns import param_for
from tabloader.ops.fill import FILLED_SUFFIX, not_held_exactly
from tabloader.serving.columns import Column, Unsupported, from_arrow_elements, numeric_values

#: A compiled node: its operator's input columns -> its output columns.
Step = Callable[[dict[str, Column]], dict[str, Column]]


def by_dtype(arrays: dict[str, np.ndarray], transform: Callable[[str, np.ndarray], np.ndarray]) -> dict[str, Any]:
    """``transform(name, values)`` of each array, the arrays of one dtype stacked into one call
    (named by the first of them): for element-wise transforms that are the same for every
    column of a dtype, where a call costs far more than a small request's values.

    Example:
        >>> out = by_dtype({"a": np.array([1.0]), "b": np.array([4.0])}, lambda name, v: np.sqrt(v))
        >>> {k: v.tolist() for k, v in out.items()}
        {'a': [1.0], 'b': [2.0]}
    """
    groups: dict[np.dtype, list[str]] = {}
    for name, values in arrays.items():
        groups.setdefault(values.dtype, []).append(name)
    out: dict[str, Any] = {}
    for names in groups.values():
        if len(names) == 1:
            out[names[0]] = transform(names[0], arrays[names[0]])
        else:
            out.update(zip(names, transform(names[0], np.stack([arrays[n] for n in names]))))
    return out


def _compile_elementwise(op: Any, inputs: list) -> Step:
    """Normalize, NormalizeMinMax, Bucketize (fitted per column): ``op.transform_values`` on
    each column's numeric values."""
    names = _flat(inputs)

    def step(cols: dict[str, Column]) -> dict[str, Column]:
        return {name: Column(op.transform_values(name, numeric_values(cols[name]))) for name in names}

    return step


def _compile_log(op: LogOp, inputs: list) -> Step:
    names = _flat(inputs)

    def step(cols: dict[str, Column]) -> dict[str, Column]:
        out = by_dtype({name: numeric_values(cols[name]) for name in names}, op.transform_values)
        return {name: Column(out[name]) for name in names}

    return step


def _compile_clip(op: Clip, inputs: list) -> Step:
    names = _flat(inputs)

    def step(cols: dict[str, Column]) -> dict[str, Column]:
        for name in names:
            numeric_values(cols[name])  # refuses what Clip refuses
        # a nullable column keeps its nulls: Clip clips its values, whatever those under the mask
        out = by_dtype({name: cols[name].values for name in names}, op.transform_values)
        return {name: Column(out[name], cols[name].mask, cols[name].nullable) for name in names}

    return step


def _compile_passthrough(op: Any, inputs: list) -> Step:
    """Rename, AddTags, AddProperties: the data is unchanged (under new names for Rename)."""
    renamed = list(zip(op.output_column_names(inputs), _flat(inputs)))
    return lambda cols: {new: cols[old] for new, old in renamed}


def _compile_fill(op: Any, inputs: list) -> Step:
    """FillMissing, FillMedian: ``Series.fillna`` where the result keeps the column's dtype."""
    median = isinstance(op, FillMedian)
    values = {name: op.medians_[name] if median else op.fill_val for name in _flat(inputs)}
    float_fills: dict[tuple, Any] = {}  # (column, dtype) -> the fill value as that float dtype

    def fill_floats(name: str, data: np.ndarray) -> np.ndarray:
        fill = float_fills.get((name, data.dtype))
        if fill is None:
            fill = float_fills[name, data.dtype] = _same_float(values[name], data.dtype)
        return np.where(np.isnan(data), fill, data)

    def step(cols: dict[str, Column]) -> dict[str, Column]:
        floats = {name: cols[name].values for name in values
                  if isinstance(cols[name].values, np.ndarray) and cols[name].values.dtype.kind == "f"}
        if median:  # a value per column
            filled = {name: fill_floats(name, data) for name, data in floats.items()}
        else:  # one value: every float column of a dtype in one call
            filled = by_dtype(floats, fill_floats)
        out = {name: Column(filled[name]) if name in filled else _filled(cols[name], value, median)
               for name, value in values.items()}
        if op.add_binary_cols:
            out.update((name + FILLED_SUFFIX, Column(_null_rows(cols[name]))) for name in values)
        return out

    return step


def _null_rows(col: Column) -> np.ndarray:
    kind = col.kind
    if kind == "number":
        if col.values.dtype.kind == "f":
            return np.isnan(col.values)
        return col.mask.copy() if col.mask is not None else np.zeros(len(col.values), bool)
    if kind in ("string", "list"):
        return col.values.is_null().to_numpy(zero_copy_only=False)
    raise Unsupported("an opaque column")


def _filled(col: Column, value: Any, float_fallback: bool) -> Column:
    """``Series.fillna(value)`` where the result keeps the column's dtype (what pandas does for
    these cases); Unsupported where pandas would change the dtype or refuse."""
    kind = col.kind
    if kind == "string":
        if not isinstance(value, str):
            raise Unsupported("a non-string fill value")
        import pyarrow.compute as pc

        return Column(pc.fill_null(col.values, value))
    if kind != "number" or isinstance(value, (bool, np.bool_)) and col.values.dtype.kind != "b":
        raise Unsupported("lists, or a boolean fill value for numbers")
    values, dtype = col.values, col.values.dtype
    if dtype.kind == "f":
        fill = _same_float(value, dtype)
        return Column(np.where(np.isnan(values), fill, values))
    if not col.nullable:  # a plain integer or boolean column holds no null: fillna changes nothing,
        if not float_fallback and not_held_exactly(dtype, value):  # but a value it could not hold is refused
            raise Unsupported("a fill value the dtype cannot hold")
        return col
    if float_fallback and dtype.kind in "iu" and not float(value).is_integer():
        return _filled(Column(numeric_values(col)), value, False)  # as FillMedian: float64, then filled
    fill = _same_integer(value, dtype)
    if col.mask is None:
        return col
    out = values.copy()
    out[col.mask] = fill
    return Column(out, None, nullable=True)


def _same_float(value: Any, dtype: np.dtype) -> Any:
    if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, (bool, np.bool_)):
        raise Unsupported("a non-numeric fill value")
    with np.errstate(over="ignore"):
        fill = dtype.type(value)
    if np.isinf(fill) and math.isfinite(value):
        raise Unsupported("a fill value beyond the dtype")
    return fill


def _same_integer(value: Any, dtype: np.dtype) -> Any:
    if dtype.kind == "b":
        if not isinstance(value, (bool, np.bool_)):
            raise Unsupported("a non-boolean fill value")
        return bool(value)
    if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, (bool, np.bool_)) \
            or not float(value).is_integer():
        raise Unsupported("a non-integral fill value")
    info = np.iinfo(dtype)
    if not info.min <= int(value) <= info.max:
        raise Unsupported("a fill value beyond the dtype")
    return dtype.type(int(value))


def _compile_categorify(op: Categorify, inputs: list) -> Step:
    enc = backend.encoding_for(np.zeros(0))
    encoders = op.encoders(inputs, enc)  # the operator's own lookups, built once per process
    list_columns = getattr(op, "list_columns_", ())

    def step(cols: dict[str, Column]) -> dict[str, Column]:
        out: dict[str, Column] = {}
        for kind, names, outputs, lookup, nb in encoders:
            if kind == "combo":
                normalized = [_normalized(enc, cols[n]) for n in names]
                ids = enc.assign_ids(lookup.positions(normalized), enc.null_mask(normalized, "any"), nb,
                                     normalized, op.dtype)
                out[outputs[0]] = Column(ids)
                continue
            for name in names:
                col = cols[name]
                if (col.kind == "list") != (name in list_columns):
                    raise Unsupported("a list column that was not one at fit, or the reverse")

                def encode(c: Any) -> np.ndarray:
                    return enc.assign_ids(lookup.positions([c]), c.mask, nb, [c], op.dtype)

                out[name] = _map_elements(enc, col, encode)
        return out

    return step


def _compile_hash_bucket(op: HashBucket, inputs: list) -> Step:
    enc = backend.encoding_for(np.zeros(0))
    names = _flat(inputs)

    def step(cols: dict[str, Column]) -> dict[str, Column]:
        out = {}
        for name in names:
            nb = param_for(op.num_buckets, name, None)
            if nb is None:
                raise Unsupported("no num_buckets for the column")  # the DataFrame path says which

            def encode(c: Any, nb: np.uint64 = np.uint64(int(nb) - 1)) -> np.ndarray:
                ids = (enc.hash_values(c) % nb + np.uint64(1)).astype(op.dtype)
                if c.mask is not None:
                    ids[c.mask] = 0
                return ids

            out[name] = _map_elements(enc, cols[name], encode)
        return out

    return step


def _compile_hashed_cross(op: HashedCross, inputs: list) -> Step:
    enc = backend.encoding_for(np.zeros(0))
    # Groups were checked when the workflow was fit: tuples, or the plain names as one group.
    groups = list(zip([tuple(c) for c in inputs if isinstance(c, (list, tuple))] or [tuple(inputs)],
                      op.output_column_names(inputs)))

    def step(cols: dict[str, Column]) -> dict[str, Column]:
        out = {}
        for group, name in groups:
            nb = param_for(op.num_buckets, name, None)
            if nb is None:
                raise Unsupported("no num_buckets for the group")
            normalized = [_normalized(enc, cols[c]) for c in group]
            ids = (enc.cross_hash(normalized) % np.uint64(int(nb) - 1) + np.uint64(1)).astype(op.dtype)
            all_null = enc.null_mask(normalized, "all")
            if all_null is not None:
                ids[all_null] = 0
            out[name] = Column(ids)
        return out

    return step


def _normalized(enc: Any, col: Column) -> Any:
    """The encoding module's NormalizedColumn of a scalar column (what ``normalize_column``
    gives for its Series): integers as int64 (uint64 kept), floats as float64 with NaN masked,
    strings as a pyarrow array; booleans as 0/1."""
    kind = col.kind
    if kind == "string":
        values = col.values
        return enc.NormalizedColumn("str", values, values.is_null().to_numpy(zero_copy_only=False)
                                    if values.null_count else None)
    if kind != "number":
        raise Unsupported("a list or opaque column")
    return _normalized_number(enc, col)


def _normalized_number(enc: Any, col: Column) -> Any:
    values = col.values
    if values.dtype.kind == "f":
        nan = np.isnan(values)
        if nan.any():
            return enc.NormalizedColumn("float", np.where(nan, 0.0, values).astype(np.float64), nan)
        return enc.NormalizedColumn("float", values.astype(np.float64, copy=False), None)
    wide = np.uint64 if values.dtype == np.uint64 else np.int64
    return enc.NormalizedColumn("int", values.astype(wide, copy=False), col.mask)


def _map_elements(enc: Any, col: Column, encode: Callable[[Any], np.ndarray]) -> Column:
    """``encode`` applied to a scalar column, or to the elements of a list column (lists kept)."""
    if isinstance(col.values, np.ndarray):  # the common case first: no kind to work out
        return Column(encode(_normalized_number(enc, col)))
    if col.kind != "list":
        return Column(encode(_normalized(enc, col)))
    import pyarrow as pa

    arr = col.values
    offsets = arr.offsets.to_numpy()
    elements = from_arrow_elements(arr.values.slice(offsets[0], offsets[-1] - offsets[0]))
    ids = pa.array(encode(_normalized(enc, elements)))
    rebuilt = pa.ListArray.from_arrays(pa.array(offsets - offsets[0], pa.int32()), ids,
                                       mask=arr.is_null() if arr.null_count else None)
    return Column(rebuilt)


def _flat(inputs: list) -> list[str]:
    out: list[str] = []
    for c in inputs:
        out += list(c) if isinstance(c, (list, tuple)) else [c]
    return list(dict.fromkeys(out))


#: The operators with a fast path, and the function compiling a fitted one (given its node's
#: input columns) into a step.
FAST_OPERATORS: dict[type, Callable[[Any, list], Step]] = {
    Categorify: _compile_categorify,
    HashBucket: _compile_hash_bucket,
    HashedCross: _compile_hashed_cross,
    FillMissing: _compile_fill,
    FillMedian: _compile_fill,
    Normalize: _compile_elementwise,
    NormalizeMinMax: _compile_elementwise,
    LogOp: _compile_log,
    Bucketize: _compile_elementwise,
    Clip: _compile_clip,
    Rename: _compile_passthrough,
    AddTags: _compile_passthrough,
    AddProperties: _compile_passthrough,
}


