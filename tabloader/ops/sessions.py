"""Groupby: aggregate rows by key into one row per group (sessions, users), NVTabular's ``Groupby``.

Each partition is aggregated on its own, as NVTabular does: a group whose rows lie in several
partitions gives one row per partition. Write the data partitioned by key (every row of a key
in one file or row group, e.g. sorted by key and cut at key boundaries) or read it as one
partition when groups must be whole.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from tabloader import backend
from tabloader.ops.base import Columns, Operator, flatten_columns
from tabloader.schema import ColumnSchema, Schema, Tags

#: Aggregations that give list columns or pick an element of the group's list.
LIST_AGGS = ("list", "first", "last")
#: Aggregations pandas (and cuDF) compute per group; nulls are left out, as in pandas.
REDUCE_AGGS = ("count", "sum", "mean", "min", "max", "std", "var")
_ROW = "__tabloader_row__"  # a temporary column: the input row number


class Groupby(Operator):
    """One row per group of ``groupby_cols``, with aggregations of the other selected columns.

    Rows are first sorted by ``sort_cols`` (stably: ties keep the input order), so ``list``
    gives each group's values in that order, and ``first`` / ``last`` its first / last value
    (a null included, as NVTabular takes the list's first element). ``count``, ``sum``,
    ``mean``, ``min``, ``max``, ``std`` and ``var`` (ddof=1) leave nulls out, as pandas does.
    Outputs are the key columns, then ``{column}{name_sep}{agg}`` per aggregation; groups come
    sorted by key, rows with a null key are dropped (pandas' and NVTabular's default). The
    operator changes the rows (``preserves_rows = False``): combine its output with other
    branches only through its own columns. Groups are aggregated per partition (see
    :mod:`tabloader.ops.sessions`).

    Args:
        groupby_cols: the key column(s).
        sort_cols: columns to sort the rows by before aggregating (none: input order).
        aggs: an aggregation or a list of them for every non-key column, or a dict column ->
            aggregation(s).
        name_sep: separator of the output names.

    Example:
        >>> import pandas as pd
        >>> frame = pd.DataFrame({"user": [2, 1, 2, 1], "t": [4, 3, 1, 2], "item": [10, 11, 12, 13]})
        >>> out = Groupby("user", sort_cols="t", aggs={"item": ["list", "last"], "t": "count"}).transform(
        ...     ["user", "t", "item"], frame)
        >>> out.columns.tolist(), out["item_list"].tolist(), out["item_last"].tolist(), out["t_count"].tolist()
        (['user', 'item_list', 'item_last', 't_count'], [[13, 11], [12, 10]], [11, 10], [2, 2])
    """

    preserves_rows = False
    keeps_input_rows = False
    device_note = ("Sorts, groups and reduces with cuDF; list aggregations are built on the device from the "
                   "grouped rows' offsets (backend.build_list).")

    def __init__(self, groupby_cols: str | Sequence[str], sort_cols: str | Sequence[str] | None = None,
                 aggs: str | Sequence[str] | Mapping[str, str | Sequence[str]] = "list", name_sep: str = "_") -> None:
        self.groupby_cols = [groupby_cols] if isinstance(groupby_cols, str) else list(groupby_cols)
        self.sort_cols = [] if sort_cols is None else [sort_cols] if isinstance(sort_cols, str) else list(sort_cols)
        self.aggs = dict(aggs) if isinstance(aggs, Mapping) else aggs
        self.name_sep = name_sep
        if not self.groupby_cols:
            raise ValueError("Groupby needs at least one groupby column")
        for col, names in self._agg_items(["?"]):
            unknown = [a for a in names if a not in LIST_AGGS + REDUCE_AGGS]
            if unknown:
                raise ValueError(f"Groupby: unknown aggregation(s) {unknown} for {col!r}; "
                                 f"the aggregations are {list(LIST_AGGS + REDUCE_AGGS)}")

    def _agg_items(self, values: Sequence[str]) -> list[tuple[str, list[str]]]:
        """(column, aggregations) for the non-key ``values`` columns."""
        def as_list(a: Any) -> list[str]:
            return [a] if isinstance(a, str) else list(a)

        if isinstance(self.aggs, Mapping):
            return [(c, as_list(a)) for c, a in self.aggs.items()]
        return [(c, as_list(self.aggs)) for c in values]

    def _plan(self, columns: Columns) -> list[tuple[str, str]]:
        cols = flatten_columns(columns)
        missing = [c for c in self.groupby_cols + self.sort_cols if c not in cols]
        if missing:
            raise KeyError(f"Groupby: column(s) {missing} (groupby_cols / sort_cols) are not selected; selected: {cols}")
        values = [c for c in cols if c not in self.groupby_cols]
        plan = [(c, a) for c, aggs in self._agg_items(values) for a in aggs]
        absent = sorted({c for c, _ in plan if c not in values})
        if absent:
            raise KeyError(f"Groupby: aggregations of column(s) {absent}, which are not selected non-key columns; "
                           f"those are {values}")
        return plan

    def output_column_names(self, columns: Columns) -> list[str]:
        return self.groupby_cols + [f"{c}{self.name_sep}{a}" for c, a in self._plan(columns)]

    def transform(self, columns: Columns, frame: Any) -> Any:
        plan = self._plan(columns)
        frame = frame.reset_index(drop=True)
        xp = backend.array_lib(backend.frame_device(frame))
        if self.sort_cols:
            frame = self._sorted(frame, xp)
        reduced = frame.groupby(self.groupby_cols, sort=True, dropna=True)
        group = backend.column_values(reduced.ngroup().fillna(-1).astype("int64"))  # -1: a null key, dropped
        kept = xp.flatnonzero(group >= 0)
        order = kept[xp.argsort(group[kept], kind="stable")]  # rows of group 0, then 1, ...; sorted order within
        # CuPy before 14.2 cannot bincount an empty array (all keys null, or the empty meta frame).
        sizes = xp.bincount(group[kept], minlength=int(group.max()) + 1) if len(kept) else xp.zeros(0, xp.int64)
        offsets = xp.concatenate([xp.zeros(1, dtype=xp.int64), xp.cumsum(sizes)])
        firsts, lasts = order[offsets[:-1]], order[offsets[1:] - 1]
        out = {k: frame[k].iloc[firsts].reset_index(drop=True) for k in self.groupby_cols}
        index = out[self.groupby_cols[0]].index
        for col, agg in plan:
            name = f"{col}{self.name_sep}{agg}"
            if agg == "list":
                out[name] = backend.build_list(offsets, _elements(frame[col].iloc[order]), None, index, name,
                                               like=frame[col])
            elif agg in ("first", "last"):
                out[name] = frame[col].iloc[firsts if agg == "first" else lasts].reset_index(drop=True)
            else:
                out[name] = _float_when_averaged(reduced[col].agg(agg).reset_index(drop=True), agg)
        return backend.frame_from_columns(out, index, like=frame)

    def _sorted(self, frame: Any, xp: Any) -> Any:
        """``frame`` sorted by ``sort_cols``, missing values last, ties in row order (the row
        number breaks them: a stable sort on pandas and cuDF alike). Float keys sort with their
        NaN as nulls: pandas counts both as missing, where cuDF would put NaN before the nulls."""
        keys = {f"{_ROW}{i}": backend.nans_as_nulls(frame[c]) for i, c in enumerate(self.sort_cols)
                if frame[c].dtype.kind == "f"}
        by = [f"{_ROW}{i}" if f"{_ROW}{i}" in keys else c for i, c in enumerate(self.sort_cols)]
        frame = frame.assign(**keys, **{_ROW: xp.arange(len(frame))}).sort_values(by + [_ROW])
        return frame.drop(columns=[*keys, _ROW]).reset_index(drop=True)

    def compute_output_schema(self, input_schema: Schema, columns: Columns) -> Schema:
        out = [input_schema[k] if k in input_schema else ColumnSchema(k) for k in self.groupby_cols]
        for col, agg in self._plan(columns):
            name = f"{col}{self.name_sep}{agg}"
            base = input_schema[col] if col in input_schema else ColumnSchema(col)
            if agg in LIST_AGGS:  # the column's values: its properties (a Categorify's cardinality) hold
                properties = {k: v for k, v in base.properties.items() if not (agg == "list" and k == "value_count")}
                out.append(ColumnSchema(name, base.dtype, base.tags, properties, is_list=agg == "list"))
            else:
                out.append(ColumnSchema(name, tags={str(Tags.CONTINUOUS)}))
        return Schema(out)


def _float_when_averaged(result: Any, agg: str) -> Any:
    """``mean``, ``std`` and ``var`` as float64 whatever the frame library gave: cuDF keeps an
    integer column's dtype for them when the frame is empty (the output schema is computed on
    an empty frame), pandas gives float64."""
    if agg in ("mean", "std", "var") and getattr(result.dtype, "kind", "f") != "f":
        return result.astype("float64")
    return result


def _elements(values: Any) -> Any:
    """A column's values as :func:`tabloader.backend.build_list` takes elements: a cuDF Series as
    it is, a pandas one as a pyarrow array (nulls kept)."""
    if backend.is_gpu_object(values):
        return values.reset_index(drop=True)
    import pyarrow as pa

    elements = pa.array(values.reset_index(drop=True), from_pandas=True)
    return elements.combine_chunks() if isinstance(elements, pa.ChunkedArray) else elements

