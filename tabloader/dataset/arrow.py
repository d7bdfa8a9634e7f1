"""A source of Arrow data in memory: a pyarrow Table or RecordBatch, or anything that exports the
Arrow C stream interface (``__arrow_c_stream__``: a polars DataFrame, a DuckDB result), read
the way parquet files of the same columns are read.

Example:
    >>> import polars as pl
    >>> source = ArrowSource(pl.DataFrame({"a": [1, None, 3], "s": ["x", "y", "x"]}), part_size=2**20)
    >>> meta = source.meta()  # strings: pandas 3's str (backend.STRING_DTYPE), on pandas 2 too
    >>> source.npartitions, str(meta["a"].dtype), meta["s"].dtype == backend.STRING_DTYPE
    (1, 'Int64', True)
    >>> source.read_frame(0)["a"].tolist()
    [1, <NA>, 3]
"""

from __future__ import annotations

from typing import Any, Sequence

from tabloader import backend
from tabloader.dataset.parquet_layout import decoded, fixed_list_widths
from tabloader.dataset.frames import RowRangeSource
from tabloader.dataset.source import checked_columns, refuse_unsupported_types


def is_arrow_data(obj: Any) -> bool:
    """True for a pyarrow Table or RecordBatch, or an object exporting an Arrow C stream."""
    import pyarrow as pa

    return isinstance(obj, (pa.Table, pa.RecordBatch)) or hasattr(obj, "__arrow_c_stream__")


def _without_views(arrow_type: Any) -> Any:
    """``arrow_type`` with string and binary views (what polars exports) as plain strings and
    binaries, as a parquet file's columns are read (also inside lists)."""
    import pyarrow as pa

    if pa.types.is_string_view(arrow_type):
        return pa.string()
    if pa.types.is_binary_view(arrow_type):
        return pa.binary()
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or pa.types.is_list_view(arrow_type):
        field = arrow_type.value_field.with_type(_without_views(arrow_type.value_type))
        return pa.large_list(field) if pa.types.is_large_list(arrow_type) else pa.list_(field)
    return arrow_type


def _plain(column: Any, arrow_type: Any) -> Any:
    """``column`` cast to ``arrow_type``; a dictionary's values first (arrow cannot decode a
    dictionary of string views in one cast)."""
    import pyarrow as pa

    if column.type == arrow_type:
        return column
    if pa.types.is_dictionary(column.type):
        chunks = [pa.DictionaryArray.from_arrays(c.indices, c.dictionary.cast(arrow_type)).dictionary_decode()
                  for c in column.chunks]
        return pa.chunked_array(chunks, arrow_type)
    return column.cast(arrow_type)


class ArrowSource(RowRangeSource):
    """In-memory Arrow data (see :func:`is_arrow_data`), cut into consecutive row ranges of
    about ``part_size`` bytes, read without copying it until a partition becomes a frame.

    Its columns come out as a parquet file's would: dictionary-encoded columns (polars'
    ``Categorical``) as their values, string views (polars' strings) as strings; integer and
    boolean columns holding a null as pandas nullable dtypes in every partition (the others
    numpy); dates, decimals and lists arrow-backed. Struct and map columns are refused, naming the column.
    """

    what = "the Arrow table"

    def __init__(self, data: Any, part_size: int, device: str = "cpu", columns: Sequence[str] | None = None) -> None:
        import pyarrow as pa

        super().__init__(device)
        table = pa.table(data) if not isinstance(data, pa.RecordBatch) else pa.Table.from_batches([data])
        table = table.select(checked_columns(table.column_names, columns, "the Arrow table"))
        self.table = table
        self._arrow_schema = pa.schema([f.with_type(_without_views(decoded(f.type))) for f in table.schema])
        refuse_unsupported_types(self._arrow_schema, "the Arrow table")
        self.nullable = frozenset(f.name for f, column in zip(table.schema, table.columns)
                                  if backend.has_nullable_dtype(decoded(f.type)) and column.null_count)
        # Not table.nbytes: it raises for string views (polars' strings) up to pyarrow 18 at least.
        self._cut(table.num_rows, table.get_total_buffer_size(), part_size)

    @property
    def arrow_schema(self) -> Any:
        return self._arrow_schema

    def list_widths(self) -> dict[str, int]:
        return fixed_list_widths(self.table.schema)

    def meta(self) -> Any:
        return backend.from_arrow(self._arrow_schema.empty_table(), self.device, self.nullable)

    def read_arrow(self, index: int, columns: Sequence[str] | None = None, memory_pool: Any = None) -> Any:
        """Rows of partition ``index``, ``columns`` only, dictionary columns decoded (a slice of
        the data: no copy where no column is decoded)."""
        import pyarrow as pa

        start, stop = self.row_ranges[index]
        names = checked_columns(self.table.column_names, columns, "the Arrow table")
        part = self.table.slice(start, stop - start).select(names)
        target = pa.schema([self._arrow_schema.field(name) for name in names])
        if part.schema == target:
            return part
        return pa.table([_plain(column, field.type) for column, field in zip(part.columns, target)], schema=target)

    def read_frame(self, index: int, columns: Sequence[str] | None = None) -> Any:
        return backend.from_arrow(self.read_arrow(index, columns), self.device, self.nullable)

    @property
    def summary(self) -> str:
        return "an Arrow table"
