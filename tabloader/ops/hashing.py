"""Stateless hashing of categorical columns: :class:`HashBucket` and :class:`HashedCross`.

The hashes are those of :mod:`tabloader.encoding.cpu.hashing` (splitmix64 of integers,
FNV-1a-64 then splitmix64 of strings, ``h = splitmix64(h * 31 + h_i)`` for crosses): identical
on CPU and GPU. The schema and parameter helpers the categorical operators share live in
:mod:`tabloader.ops.categorical_columns`.

Example:
    >>> import pandas as pd
    >>> from tabloader.ops.hashing import HashBucket
    >>> out = HashBucket(10).transform(["c"], pd.DataFrame({"c": ["a", None, "a"]}))
    >>> out["c"].tolist()[1], bool(out["c"].iloc[0] == out["c"].iloc[2]), bool(1 <= out["c"].iloc[0] < 10)
    (0, True, True)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tabloader import backend
from tabloader.encoding.contract import check_id_range, integer_dtype
from tabloader.encoding.lists import holds_lists
from tabloader.ops.base import Columns, Operator, flatten_columns, group_name
from tabloader.ops.categorical_columns import (  # noqa: F401  (embedding_dim: imported from here before)
    categorical_schema, check_num_buckets, embedding_dim, param_for)
from tabloader.schema import ColumnSchema, Schema, Tags


def _check_buckets(op: Any, num_buckets: Any, dtype: Any) -> None:
    """num_buckets must be integers >= 2 whose ids ``0 .. num_buckets - 1`` fit ``dtype``."""
    integer_dtype(op, dtype)
    for name, nb in check_num_buckets(op, num_buckets, 2, " (bucket 0 is for nulls)"):
        where = "every column" if name is None else f"column {name!r}"
        check_id_range(op, f"{where} with num_buckets={nb}", int(nb) - 1, dtype,
                       "use a wider dtype or fewer buckets")


def _null_bucket(ids: Any, nulls: Any) -> Any:
    """``ids`` with bucket 0 in the rows where ``nulls`` (a numpy/CuPy bool array, or None) is True.

    By ``where``, not ``ids[nulls] = 0``: on CuPy a boolean-mask assignment reads the mask's count
    back from the device, a wait per column and partition.
    """
    if nulls is None:
        return ids
    return backend.array_lib(ids).where(nulls, ids.dtype.type(0), ids)


class HashBucket(Operator):
    """Hash categorical values into a fixed number of buckets (no fit needed).

    The output of a value is ``1 + hash(value) % (num_buckets - 1)``, and a null is ``0`` (the
    convention of Keras' ``Hashing`` layer with a mask value), so the embedding table has
    exactly ``num_buckets`` rows and nulls have a row of their own. Hashes are those described
    in :mod:`tabloader.encoding.cpu.hashing`: identical on CPU and GPU, and the same for a value stored
    as int32, int64, Int64, UInt64 or an integral float. List columns are hashed element-wise.

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
    >>> out["c"].tolist()[1], bool(out["c"].iloc[0] == out["c"].iloc[2])
    (0, True)
    """

    takes_coded_strings = True  # normalized by the encoding module; outputs ids only

    device_note = "Hashes with CuPy (strings by a CuPy kernel over the cuDF column's bytes): the CPU's bits."

    def __init__(self, num_buckets: int | dict[str, int], dtype: str = "int64") -> None:
        self.num_buckets = num_buckets
        self.dtype = dtype
        _check_buckets(self, num_buckets, dtype)
        self.dtype = str(np.dtype(dtype))  # np.int32 given: saved by its name

    def _buckets(self, name: str) -> int:
        nb = param_for(self.num_buckets, name, None)
        if nb is None:
            raise KeyError(f"HashBucket: num_buckets has no entry for column {name!r}")
        return int(nb)

    def transform(self, columns: Columns, frame: Any) -> Any:
        enc = backend.encoding_for(frame)
        out = {}
        for name in flatten_columns(columns):
            nb = np.uint64(self._buckets(name) - 1)

            def encode(col: Any, nb: np.uint64 = nb) -> Any:
                return _null_bucket((enc.hash_values(col) % nb + np.uint64(1)).astype(self.dtype), col.mask)

            out[name] = enc.map_column(self, name, frame[name], encode)
        return backend.frame_from_columns(out, frame.index, like=frame)

    def compute_output_schema(self, input_schema: Schema, columns: Columns) -> Schema:
        out = []
        for name in flatten_columns(columns):
            col = input_schema[name] if name in input_schema else ColumnSchema(name)
            nb = self._buckets(name)
            out.append(categorical_schema(col, nb, self.dtype, num_buckets=nb))
        return Schema(out)


class HashedCross(Operator):
    """Hash the combination of two or more categorical columns into buckets (no fit needed).

    Select groups as tuples, ``[("a", "b"), ("a", "c")] >> HashedCross(1000)``; a plain list
    of names, ``["a", "b"] >> HashedCross(1000)``, is one group. Each group gives one column
    named ``a_b``. Its value is ``1 + h % (num_buckets - 1)`` with ``h`` the combined hash of
    the row's values (``h = splitmix64(h * 31 + h_i)``, see
    :mod:`tabloader.encoding.cpu.hashing`); a null component hashes as
    :data:`~tabloader.encoding.contract.NULL_HASH`; a row whose values are all null gets ``0``.

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
    >>> out.columns.tolist(), bool(out["a_b"].iloc[0] == out["a_b"].iloc[1]), int(out["a_b"].iloc[2])
    (['a_b'], True, 0)
    """

    takes_coded_strings = True  # keys normalized by the encoding module; outputs new columns only

    device_note = "Hashes with CuPy (strings by a CuPy kernel over the cuDF column's bytes): the CPU's bits."

    def __init__(self, num_buckets: int | dict[str, int], dtype: str = "int64") -> None:
        self.num_buckets = num_buckets
        self.dtype = dtype
        _check_buckets(self, num_buckets, dtype)
        self.dtype = str(np.dtype(dtype))  # np.int32 given: saved by its name

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
        enc = backend.encoding_for(frame)
        out = {}
        for group in self._groups(columns):
            name = group_name(group)
            nb = param_for(self.num_buckets, name, None)
            if nb is None:
                raise KeyError(f"HashedCross: num_buckets has no entry for {name!r}")
            for c in group:
                if holds_lists(frame[c]):
                    raise TypeError(f"HashedCross cannot cross list column {c!r} (dtype {frame[c].dtype})")
            cols = [enc.normalize_column(self, c, frame[c]) for c in group]
            ids = (enc.cross_hash(cols) % np.uint64(int(nb) - 1) + np.uint64(1)).astype(self.dtype)
            out[name] = _null_bucket(ids, enc.null_mask(cols, "all"))
        return backend.frame_from_columns(out, frame.index, like=frame)

    def dependencies(self) -> list[str]:
        return []

    def compute_output_schema(self, input_schema: Schema, columns: Columns) -> Schema:
        out = []
        for group in self._groups(columns):
            name = group_name(group)
            nb = int(param_for(self.num_buckets, name, 0))
            out.append(categorical_schema(ColumnSchema(name), nb, self.dtype, num_buckets=nb) if nb
                       else ColumnSchema(name, self.dtype, {Tags.CATEGORICAL}))
        return Schema(out)
