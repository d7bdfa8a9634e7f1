"""What a parquet dataset's folders and footers say, read before any data: its hive partition
keys, its columns' types as they are read, which integer and boolean columns may hold nulls,
and how large a row group is once decoded.

These rules make files as other tools write them (pyarrow, Spark, DuckDB, polars, pandas) read
alike: see :class:`~tabloader.dataset.parquet.ParquetSource`.

Example:
    >>> types, keys = hive_keys(["/d/day=1/a.parquet", "/d/day=2/b.parquet"], ["/d", "/d"])
    >>> types, keys
    ({'day': DataType(int32)}, [(('day', 1),), (('day', 2),)])
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import numpy as np

from tabloader import backend
from tabloader.dataset.source import SchemaMismatchError

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"  # how Spark, Hive and pyarrow write a null partition key


class Footer(NamedTuple):
    """What a parquet file's footer says: its ``metadata`` (row groups, statistics) and its
    columns as pyarrow reads them (``arrow_schema``, INT96 timestamps in
    :data:`~tabloader.backend.INT96_UNIT`, as :func:`~tabloader.backend.read_parquet_arrow`
    reads them)."""

    metadata: Any
    arrow_schema: Any


def read_footer(path: str, fs: Any) -> Footer:
    """The footer of ``path``; a ValueError naming it if it is not parquet."""
    import pyarrow.parquet as pq

    try:
        with fs.open(path, "rb") as f:
            file = pq.ParquetFile(f, coerce_int96_timestamp_unit=backend.INT96_UNIT)
            return Footer(file.metadata, file.schema_arrow)
    except Exception as exc:
        raise ValueError(f"{path} is not a readable parquet file: {exc}") from exc


# Hive partition keys.
def hive_keys(paths: Sequence[str], bases: Sequence[str]) -> tuple[dict[str, Any], list[tuple]]:
    """The hive partition keys of each file: the ``name=value`` folders between the folder it
    was found under and the file.

    A key's values are typed as pyarrow's hive partitioning types them -- int32 when every value
    parses as one (arrow's own cast decides), else string -- except that integers beyond int32
    (user ids, epoch seconds) are int64, as Spark types them, not strings;
    ``__HIVE_DEFAULT_PARTITION__`` is null. Returns the key types (name -> arrow type) and per
    file its ``(name, value)`` pairs.
    """
    from urllib.parse import unquote

    found = []
    for path, base in zip(paths, bases):
        folders = path[len(base):].strip("/").split("/")[:-1] if path.startswith(base) else []
        found.append([tuple(unquote(part) for part in folder.split("=", 1)) for folder in folders if "=" in folder])
    types: dict[str, Any] = {}
    typed: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(k for keys in found for k, _ in keys):
        values = sorted({v for keys in found for k, v in keys if k == name and v != HIVE_NULL})
        parsed = _typed_key_values(values)
        types[name], typed[name] = parsed.type, dict(zip(values, parsed.to_pylist()))
    return types, [tuple((k, typed[k].get(v)) for k, v in keys) for keys in found]


def _typed_key_values(values: list[str]) -> Any:
    """A key's folder values as an arrow array: int32, else int64, else the strings."""
    import pyarrow as pa

    strings = pa.array(values, pa.string())
    for integer in (pa.int32(), pa.int64()):
        try:
            return strings.cast(integer)
        except pa.ArrowInvalid:
            continue
    return strings


def key_columns(keys: Sequence[tuple[str, Any]], target: Any, num_rows: int) -> Any:
    """The partition key columns among the fields of ``target``, ``num_rows`` rows of the
    ``(name, value)`` pairs ``keys`` (a table without columns when there are none)."""
    import pyarrow as pa

    values = dict(keys)
    fields = [f for f in target if f.name in values]
    if not fields:
        return pa.table({})
    repeat = pa.array(np.zeros(num_rows, dtype=np.int32))
    return pa.table({f.name: pa.array([values[f.name]], f.type).take(repeat) for f in fields})


# Column types as read.
def file_fields(arrow_schema: Any, path: str, key_types: dict[str, Any]) -> dict[str, Any]:
    """Name -> type of a file's columns as they are read: dictionary-encoded columns decoded,
    pandas' stored index left out. A column named like a partition key is refused."""
    fields = {f.name: decoded(f.type) for f in arrow_schema if not f.name.startswith("__index_level_")}
    clash = [k for k in key_types if k in fields]
    if clash:
        raise SchemaMismatchError(f"{path}: column(s) {clash} are in the file and also the names of partition "
                                  "folders (name=value) of this dataset; rename the folders or the columns")
    return fields


def decoded(arrow_type: Any) -> Any:
    """The type a column is read as: dictionary-encoded values (also list elements) decoded,
    so that every partition, and the meta, has the values' dtype rather than a categorical;
    list elements nullable, whether or not a file declares them required (Spark's
    ``containsNull=false``), so that files differing only in that agree.

    Example:
        >>> import pyarrow as pa
        >>> decoded(pa.list_(pa.field("element", pa.dictionary(pa.int32(), pa.string()), nullable=False)))
        ListType(list<element: string>)
    """
    import pyarrow as pa

    if pa.types.is_dictionary(arrow_type):
        return arrow_type.value_type
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        field = arrow_type.value_field.with_type(decoded(arrow_type.value_type)).with_nullable(True)
        return pa.list_(field) if pa.types.is_list(arrow_type) else pa.large_list(field)
    return arrow_type


# Nulls.
def columns_that_may_hold_nulls(footers: Sequence[Any], arrow_schema: Any, keys: Sequence[tuple]) -> frozenset[str]:
    """The integer and boolean columns that may hold a null somewhere in the dataset.

    Decided once, from the footers, so that every partition (also one without a null) and the
    meta read such a column as the same nullable dtype. A row group may hold nulls when its
    statistics count some or do not say; a column the file declares required holds none; a
    partition key may be null in a ``__HIVE_DEFAULT_PARTITION__`` folder.
    """
    candidates = {f.name for f in arrow_schema if backend.has_nullable_dtype(f.type)}
    found = {name for pairs in keys for name, value in pairs if value is None and name in candidates}
    for footer in footers:
        leaves = [footer.schema.column(j) for j in range(footer.num_columns)]
        optional = [(j, leaf.path) for j, leaf in enumerate(leaves)
                    if leaf.path in candidates and leaf.max_definition_level > 0]
        for i in range(footer.num_row_groups):
            row_group = footer.row_group(i)
            for j, name in optional:
                if name not in found and _may_hold_nulls(row_group.column(j).statistics):
                    found.add(name)
    return frozenset(found)


def _may_hold_nulls(statistics: Any) -> bool:
    return statistics is None or not statistics.has_null_count or statistics.null_count > 0


# Decoded sizes.
def fixed_widths(arrow_schema: Any) -> dict[str, int]:
    """Bytes per row in memory of each fixed-width top-level column (integers and booleans
    count one more byte: pandas' nullable dtypes carry a byte mask)."""
    import pyarrow as pa

    widths = {}
    for field in arrow_schema:
        try:
            width = field.type.bit_width // 8
        except ValueError:  # variable width (strings, lists): measured from the file instead
            continue
        if width <= 0:
            continue
        widths[field.name] = width + (1 if pa.types.is_integer(field.type) or pa.types.is_boolean(field.type) else 0)
    return widths


def in_memory_bytes(row_group: Any, widths: dict[str, int]) -> int:
    """An estimate of the in-memory size of a decoded row group.

    The parquet ``total_byte_size`` is the encoded size, which dictionary and run-length
    encoding make several times smaller than the decoded columns (4-5x for Criteo-like data),
    so partitions grouped by it would be several times ``part_size`` in memory. Fixed-width
    columns count ``rows * width``; the others their uncompressed encoded size.
    """
    n = row_group.num_rows
    total = 0
    for j in range(row_group.num_columns):
        chunk = row_group.column(j)
        top = chunk.path_in_schema.split(".", 1)[0]
        total += n * widths[top] if top in widths and "." not in chunk.path_in_schema else chunk.total_uncompressed_size
    return max(total, row_group.total_byte_size)
