"""JoinExternal: join side features from a parquet file or a DataFrame on key columns.

Safe by construction: the side table is read once, when the operator is built, and saved
*into* the workflow's directory as the operator's state (parquet). A saved workflow records
no path of it and ``Workflow.load`` reads nothing outside the directory; a saved config that
names a table anyway is refused.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tabloader import backend
from tabloader.ops.base import CachedLookups, Columns, Operator, cached_entry, flatten_columns
from tabloader.schema import ColumnSchema, Schema

HOWS = ("left", "inner")
_ROW = "__tabloader_row__"  # a temporary column: the input row number


class JoinExternal(CachedLookups, Operator):
    """Add the columns of a side table whose keys ``on_ext`` equal the rows' ``on`` columns.

    The side table's keys must be unique (one side row per key; ``drop_duplicates_ext=True``
    keeps the first row of each key), so a row is never repeated: ``how="left"`` keeps every
    row (side columns are null where no key matches; integer and boolean side columns are
    nullable), ``how="inner"`` drops the rows without a match (then the operator changes the
    rows). Rows keep their order and index.

    Args:
        df_ext: the side table: a pandas/cuDF DataFrame or the path of a parquet file or
            directory, read now (None only when a saved workflow restores it). A cuDF table
            stays on the GPU; another is kept on the host and copied to the GPU once, when a
            cuDF partition first needs it.
        on: the key column(s) of the data (read from the input data when not selected).
        how: ``"left"`` or ``"inner"``.
        on_ext: the side table's key column(s), paired with ``on`` (default: ``on``).
        columns_ext: the side columns to add (default: all but the keys).
        drop_duplicates_ext: keep the first side row of a repeated key instead of raising.

    Example:
        >>> import pandas as pd
        >>> side = pd.DataFrame({"item": [1, 2], "price": [9.5, 3.0]})
        >>> op = JoinExternal(side, on="item")
        >>> op.transform(["item"], pd.DataFrame({"item": [2, 7, 1]}))["price"].tolist()
        [3.0, nan, 9.5]
    """

    device_note = "Joins with cuDF; a cuDF side table stays on the GPU, a pandas one is copied there once per process."

    def __init__(self, df_ext: Any, on: str | Sequence[str], how: str = "left",
                 on_ext: str | Sequence[str] | None = None, columns_ext: Sequence[str] | None = None,
                 drop_duplicates_ext: bool = False) -> None:
        self.on = [on] if isinstance(on, str) else list(on)
        self.how = how
        self.on_ext = self.on if on_ext is None else [on_ext] if isinstance(on_ext, str) else list(on_ext)
        self.columns_ext = None if columns_ext is None else list(columns_ext)
        self.drop_duplicates_ext = drop_duplicates_ext
        if how not in HOWS:
            raise ValueError(f"JoinExternal: how must be one of {HOWS}, got {how!r}")
        if len(self.on_ext) != len(self.on):
            raise ValueError(f"JoinExternal: on {self.on} and on_ext {self.on_ext} must pair up")
        self.preserves_rows = how == "left"
        self._table = None if df_ext is None else self._side_table(df_ext)

    # --- the side table --------------------------------------------------------------------
    def _side_table(self, df_ext: Any) -> Any:
        import pyarrow as pa
        import pyarrow.parquet as pq

        where = f"JoinExternal side table {df_ext!r}" if isinstance(df_ext, str) else "JoinExternal side table"
        if backend.is_frame(df_ext) and backend.is_gpu_object(df_ext):
            return self._checked(df_ext, where)  # stays on the GPU: cuDF's columns are nullable already
        if isinstance(df_ext, str):
            # its columns as they are: pandas' metadata would make an index of the key column of a
            # frame written after set_index or a groupby (pandas' unnamed index columns are no data)
            arrow = pq.read_table(df_ext).replace_schema_metadata(None)
            arrow = arrow.drop_columns([n for n in arrow.column_names if n.startswith("__index_level_")])
        elif backend.is_frame(df_ext):
            arrow = pa.Table.from_pandas(df_ext, preserve_index=False)
        else:
            raise TypeError(f"JoinExternal: df_ext must be a DataFrame or a parquet path, got {type(df_ext).__name__}")
        table = backend.from_arrow(arrow, nullable=arrow.column_names)  # a missing match is a null, not a float
        return self._checked(table, where)

    def _checked(self, table: Any, where: str) -> Any:
        missing = [c for c in self.on_ext + (self.columns_ext or []) if c not in table.columns]
        if missing:
            raise KeyError(f"{where} lacks column(s) {missing}; it has {list(table.columns)}")
        columns = self.columns_ext if self.columns_ext is not None else [c for c in table.columns
                                                                          if c not in self.on_ext]
        table = table[self.on_ext + [c for c in columns if c not in self.on_ext]]
        repeated = table.duplicated(subset=self.on_ext)
        if bool(repeated.any()):
            if not self.drop_duplicates_ext:
                key = backend.to_host(table[self.on_ext][repeated].head(1)).iloc[0].tolist()  # one row, to name it
                raise ValueError(f"{where}: key {key} of {self.on_ext} appears more than once; "
                                 "pass drop_duplicates_ext=True to keep the first row of each key")
            table = table[~repeated]
        return table.reset_index(drop=True)

    @property
    def side_columns(self) -> list[str]:
        return [c for c in self._require_table().columns if c not in self.on_ext]

    def _require_table(self) -> Any:
        if self._table is None:
            raise ValueError("JoinExternal has no side table: pass df_ext (a saved workflow restores it)")
        return self._table

    def _table_on(self, device: str) -> Any:
        """The side table on ``device`` (converted once), its numpy integer columns as pandas'
        nullable integers: a left join's missing match is then a null, where pandas -- and cuDF
        26.10, which follows it in ``merge`` -- turn a numpy integer column into float64 (not
        exact beyond 2**53)."""
        def build() -> Any:
            table = backend.to_frame_device(self._require_table(), device)
            ints = {c: backend.nullable_integer_name(d.name) for c, d in table.dtypes.items()
                    if c not in self.on_ext and isinstance(d, np.dtype) and d.kind in "iu"}  # keys as they are
            return table.astype(ints) if ints else table

        key = (device, backend.current_gpu(not backend.is_host(device)))  # a copy per GPU it is used on
        return cached_entry(self, key, build)

    # --- graph -----------------------------------------------------------------------------
    def dependencies(self) -> list[str]:
        return list(self.on)

    def output_column_names(self, columns: Columns) -> list[str]:
        selected = flatten_columns(columns)
        clash = [c for c in self.side_columns if c in selected]
        if clash:
            raise ValueError(f"JoinExternal: side column(s) {clash} have the names of selected columns; "
                             "choose columns_ext or rename one side")
        return selected + self.side_columns

    def compute_output_schema(self, input_schema: Schema, columns: Columns) -> Schema:
        side = Schema.from_frame(self._require_table())
        return Schema(side[c] if c in self.side_columns else input_schema[c] if c in input_schema else ColumnSchema(c)
                      for c in self.output_column_names(columns))

    def transform(self, columns: Columns, frame: Any) -> Any:
        selected = flatten_columns(columns)
        table = self._table_on(backend.frame_device(frame))
        xp = backend.array_lib(backend.frame_device(frame))
        keys = frame[self.on].reset_index(drop=True).assign(**{_ROW: xp.arange(len(frame))})
        try:
            joined = keys.merge(table, left_on=self.on, right_on=self.on_ext, how=self.how)
        except (TypeError, ValueError) as exc:
            types = {c: str(frame[c].dtype) for c in self.on}, {c: str(table[c].dtype) for c in self.on_ext}
            raise TypeError(f"JoinExternal cannot join {self.on} {types[0]} with the side table's "
                            f"{self.on_ext} {types[1]}: {exc}") from exc
        joined = joined.sort_values(_ROW)
        rows = backend.column_values(joined[_ROW])
        out = frame[selected].iloc[rows]
        side = joined[self.side_columns].reset_index(drop=True)
        side.index = out.index  # the rows' own labels (pandas and cuDF alike)
        return backend.concat([out, side], axis=1)

    # --- saved workflows ---------------------------------------------------------------------
    def get_config(self) -> dict[str, Any]:
        return {"df_ext": None, "on": self.on, "how": self.how, "on_ext": self.on_ext,
                "columns_ext": self.columns_ext, "drop_duplicates_ext": self.drop_duplicates_ext}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "JoinExternal":
        if config.get("df_ext") is not None:
            raise ValueError("JoinExternal: a saved workflow carries its side table in its directory; "
                             f"a config naming one ({config['df_ext']!r}) is refused")
        return cls(**config)

    def get_state(self) -> dict[str, Any]:
        return {"table": self._require_table()}

    def set_state(self, state: dict[str, Any]) -> None:
        if "table" in state:
            self._table = self._checked(state["table"], "JoinExternal saved side table")
            self._lookup = {}
