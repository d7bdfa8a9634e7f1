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

import re
from typing import Any, Mapping, NamedTuple, Sequence
from urllib.parse import unquote

import numpy as np

from tabloader import backend

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
# The types a key's folder values are tried as, in order: the first that every value of the key
# parses as wins (Spark's order: integers, then fractions, then dates and timestamps; a key with
# dates and timestamps is a timestamp, as Spark widens them), else string. Beyond arrow's own
# cast (which checks the values: no 2024-02-30), a value must look like the type, strictly:
# integers and fractions without leading zeros (zip=01234, month=07 stay strings: reading them
# as numbers would lose the zero; DuckDB does the same), dates as YYYY-MM-DD and timestamps as
# YYYY-MM-DD HH:MM:SS[.ffffff], as Spark, pyarrow, polars and DuckDB write them (naive: the
# folder holds a wall-clock time, no time zone).
_NUMBER = r"-?(0|[1-9][0-9]*)"
_DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
_INFERRED = [("int32", _NUMBER), ("int64", _NUMBER), ("float64", _NUMBER + r"(\.[0-9]*)?([eE][-+]?[0-9]+)?"),
             ("date32", _DATE), ("timestamp[us]", _DATE + r"( [0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?)?")]


def key_types() -> dict[str, Any]:
    """The types a partition key can be given (``Dataset(partition_types=...)``), by name:
    pyarrow's names, and the names :class:`~tabloader.schema.Schema` shows.

    Example:
        >>> sorted(key_types())  # doctest: +NORMALIZE_WHITESPACE
        ['bool', 'date32', 'date32[day]', 'datetime64[us]', 'double', 'float64', 'int32', 'int64', 'string',
         'timestamp[us]']
    """
    import pyarrow as pa

    types = [pa.string(), pa.bool_(), pa.int32(), pa.int64(), pa.float64(), pa.date32(), pa.timestamp("us")]
    return {"date32": pa.date32(), "float64": pa.float64(), "datetime64[us]": pa.timestamp("us"),
            **{str(t): t for t in types}}


def hive_keys(paths: Sequence[str], bases: Sequence[str], partition_types: Mapping[str, Any] | str | None = None,
              stored: Sequence[Mapping[str, Any]] = (), known: Sequence[str] = ()
              ) -> tuple[dict[str, Any], list[tuple]]:
    """The hive partition keys of each file: the ``name=value`` folders between the folder it
    was found under and the file.

    A key's type is the first of int32, int64, float64, date32 (``2024-01-31``) and
    timestamp[us] (``2024-01-31 10:00:00``, naive) that every one of its values parses as,
    strictly (no leading zeros: ``zip=01234`` stays a string; integers past int64 are no
    float64), else string, as Spark, DuckDB and polars type them;
    ``__HIVE_DEFAULT_PARTITION__`` is null. ``partition_types`` gives
    the type of some keys (name -> type, see :func:`key_types`) or of all (one type, such as
    ``"string"``) instead. A key that the files also store as a column (polars' and DuckDB's
    partitioned writes do) has the type of that column: ``stored`` holds each file's column
    types (name -> arrow type); the value is still the folder's, as Spark, polars and DuckDB
    read it. ``known`` names keys beyond those of the folders, each typed by ``partition_types``
    (a Delta table's partition columns: an empty table has them too). Returns the key types
    (name -> arrow type) and per file its ``(name, value)`` pairs.

    Example:
        >>> paths = ["/d/dt=2024-01-01/zip=01234/a.parquet", "/d/dt=2024-01-02/zip=10115/b.parquet"]
        >>> types, keys = hive_keys(paths, ["/d", "/d"], {"zip": "int32"})
        >>> types
        {'dt': DataType(date32[day]), 'zip': DataType(int32)}
        >>> keys[0]
        (('dt', datetime.date(2024, 1, 1)), ('zip', 1234))
    """
    found = []
    for path, base in zip(paths, bases):
        folders = path[len(base):].strip("/").split("/")[:-1] if path.startswith(base) else []
        found.append([tuple(unquote(part) for part in folder.split("=", 1)) for folder in folders if "=" in folder])
    names = list(dict.fromkeys([*(k for keys in found for k, _ in keys), *known]))
    given, in_files = _wanted_key_types(partition_types, names, paths), _stored_key_types(names, stored)
    types: dict[str, Any] = {}
    typed: dict[str, dict[str, Any]] = {}
    for name in names:
        values = sorted({v for keys in found for k, v in keys if k == name and v != HIVE_NULL})
        wanted = (given[name], "partition_types gives it") if name in given else \
            (in_files[name], "the files store it as") if name in in_files else None
        parsed = _typed_key_values(name, values, wanted, paths)
        types[name], typed[name] = parsed.type, dict(zip(values, parsed.to_pylist()))
    return types, [tuple((k, typed[k].get(v)) for k, v in keys) for keys in found]


def _stored_key_types(names: Sequence[str], stored: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The type of each key that a file also stores as a column (the first such file's)."""
    types: dict[str, Any] = {}
    for fields in stored:
        types.update({name: fields[name] for name in names if name in fields and name not in types})
    return types


def _wanted_key_types(partition_types: Mapping[str, Any] | str | None, names: Sequence[str],
                      paths: Sequence[str]) -> dict[str, Any]:
    """``partition_types`` as name -> arrow type, checked: known keys, known types."""
    if partition_types is None:
        return {}
    if isinstance(partition_types, str) or not isinstance(partition_types, Mapping):
        partition_types = dict.fromkeys(names, partition_types)
    unknown = [k for k in partition_types if k not in names]
    if unknown:
        where = f"the key=value folders of {paths[0]} and the other files" if paths else "no files"
        raise ValueError(f"partition_types names {unknown}, which are not partition keys of this dataset; "
                         f"its keys ({where}) are {names}")
    return {name: _key_type(name, given) for name, given in partition_types.items()}


def _key_type(name: str, given: Any) -> Any:
    import pyarrow as pa

    known = key_types()
    if isinstance(given, str) and given in known:
        return known[given]
    if isinstance(given, pa.DataType) and given in known.values():
        return given
    raise ValueError(f"partition_types[{name!r}] = {given!r} is not a type a partition key can have; "
                     f"expected one of {sorted(known)} (or that pyarrow type)")


def _typed_key_values(name: str, values: list[str], wanted: tuple[Any, str] | None, paths: Sequence[str]) -> Any:
    """A key's folder values as an arrow array of the type ``wanted`` gives (with the reason for
    it: a value that does not parse is refused naming both), else of the first type of
    :data:`_INFERRED` they all parse as, else the strings."""
    import pyarrow as pa

    strings = pa.array(values, pa.string())
    if wanted is not None:
        return _cast_key_values(name, strings, *wanted, paths)
    known = key_types()
    integers = all(re.fullmatch(_NUMBER, v) for v in values)
    for type_name, shape in _INFERRED:
        if type_name == "float64" and integers:  # integers past int64 stay exact strings (as pyarrow reads them)
            continue
        if all(re.fullmatch(shape, v) for v in values):
            try:
                return strings.cast(known[type_name])
            except pa.ArrowInvalid:
                continue
    return strings


def _cast_key_values(name: str, strings: Any, wanted: Any, why: str, paths: Sequence[str]) -> Any:
    """``strings`` cast to ``wanted``; the first value that does not parse is refused, naming
    a file under its folder."""
    import pyarrow as pa

    for value in strings.to_pylist():
        try:
            pa.scalar(value).cast(wanted)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            folder = f"{name}={value}"
            path = next((p for p in paths if f"/{folder}/" in unquote(p)), paths[0])
            raise ValueError(f"{path}: partition key {name!r} has the value {value!r} (folder {folder!r}), which does "
                             f"not parse as {wanted}, the type {why}") from None
    return strings.cast(wanted)


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
def file_fields(arrow_schema: Any) -> dict[str, Any]:
    """Name -> type of a file's columns as they are read: dictionary-encoded columns decoded,
    pandas' stored index left out (a partition key the file also stores is among them; the
    dataset reads it from its folder, see :func:`hive_keys`)."""
    return {f.name: decoded(f.type) for f in arrow_schema if not f.name.startswith("__index_level_")}


def int96_columns(metadata: Any) -> set[str]:
    """The columns a file stores as INT96 timestamps (Spark's, Hive's and Impala's default),
    also as list elements: the GPU reads them through pyarrow (see
    :func:`tabloader.backend.read_parquet`).

    Example:
        >>> import io, pyarrow as pa, pyarrow.parquet as pq
        >>> buffer = io.BytesIO()
        >>> stamps = pa.array([[0]], pa.list_(pa.timestamp("us")))
        >>> table = pa.table({"ts": pa.array([0], pa.timestamp("us")), "many": stamps, "n": [1]})
        >>> pq.write_table(table, buffer, use_deprecated_int96_timestamps=True)
        >>> sorted(int96_columns(pq.ParquetFile(buffer).metadata))
        ['many', 'ts']
    """
    leaves = (metadata.schema.column(j) for j in range(metadata.num_columns))
    return {leaf.path.split(".")[0] for leaf in leaves if leaf.physical_type == "INT96"}


def fixed_list_widths(arrow_schema: Any) -> dict[str, int]:
    """Name -> width of the fixed-size list columns (vectors) of ``arrow_schema``: read as lists
    (:func:`decoded`), they keep their width as the schema's ``value_count``.

    Example:
        >>> import pyarrow as pa
        >>> fixed_list_widths(pa.schema([("emb", pa.list_(pa.float32(), 8)), ("ids", pa.list_(pa.int64()))]))
        {'emb': 8}
    """
    import pyarrow as pa

    return {f.name: f.type.list_size for f in arrow_schema if pa.types.is_fixed_size_list(f.type)}


def decoded(arrow_type: Any) -> Any:
    """The type a column is read as: dictionary-encoded values (also list elements) decoded,
    so that every partition, and the meta, has the values' dtype rather than a categorical;
    fixed-size lists (vectors: polars' ``Array``, embeddings) as lists; list elements nullable,
    whether or not a file declares them required (Spark's ``containsNull=false``), so that files
    differing only in that agree.

    Example:
        >>> import pyarrow as pa
        >>> decoded(pa.list_(pa.field("element", pa.dictionary(pa.int32(), pa.string()), nullable=False)))
        ListType(list<element: string>)
    """
    import pyarrow as pa

    if pa.types.is_dictionary(arrow_type):
        return arrow_type.value_type
    if pa.types.is_fixed_size_list(arrow_type):  # vectors (polars' Array, embeddings): lists of one length
        return decoded(pa.list_(arrow_type.value_field))
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        field = arrow_type.value_field.with_type(decoded(arrow_type.value_type)).with_nullable(True)
        return pa.list_(field) if pa.types.is_list(arrow_type) else pa.large_list(field)
    return arrow_type


def offset_width_free(arrow_type: Any) -> Any:
    """``arrow_type`` with its 64-bit offset variants (``large_string``, ``large_binary``,
    ``large_list``, also inside lists) as the 32-bit ones: parquet stores both alike, and only
    the arrow schema a writer adds tells them apart (pandas 3 and polars write the large ones,
    Spark, DuckDB and pyarrow the others), so that files of one table compare equal.

    Example:
        >>> import pyarrow as pa
        >>> offset_width_free(pa.large_list(pa.large_string())) == pa.list_(pa.string())
        True
    """
    import pyarrow as pa

    if pa.types.is_large_string(arrow_type):
        return pa.string()
    if pa.types.is_large_binary(arrow_type):
        return pa.binary()
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return pa.list_(arrow_type.value_field.with_type(offset_width_free(arrow_type.value_type)))
    return arrow_type


# Columns matched by field id (Iceberg): the file's names may be older than the table's.
FIELD_ID = b"PARQUET:field_id"


def names_by_field_id(file_schema: Any, table_schema: Any, path: str, required: Sequence[str] = (),
                      name_ids: Mapping[str, int] | None = None) -> dict[str, str]:
    """The table's column name -> the file's name for the same field id, for the columns of
    ``table_schema`` (whose fields carry their id in ``PARQUET:field_id`` metadata) that the
    file stores: a file written before a rename has the old name; one written before a column
    was added lacks it (the column is null in its rows), unless ``required`` names it. A file
    storing its columns without field ids (added from elsewhere, a migrated table) has them
    from the table's name mapping ``name_ids`` (a name the file uses -> field id; a column it
    does not name is not the table's); without one it is refused, naming it and the column.

    Example:
        >>> import pyarrow as pa
        >>> def field(name, id): return pa.field(name, pa.int64(), metadata={FIELD_ID: str(id)})
        >>> names_by_field_id(pa.schema([field("old", 1)]), pa.schema([field("new", 1), field("added", 2)]), "f")
        {'new': 'old'}
        >>> names_by_field_id(pa.schema([("a", pa.int64())]), pa.schema([field("b", 1)]), "f", name_ids={"a": 1})
        {'b': 'a'}
    """
    stored: dict[int, str] = {}
    for field in file_schema:
        if FIELD_ID in (field.metadata or {}):
            stored[int(field.metadata[FIELD_ID])] = field.name
        elif name_ids is None:
            raise ValueError(f"{path}: column {field.name!r} has no field id (PARQUET:field_id), which Iceberg tables "
                             "match columns by, and the table has no name mapping (schema.name-mapping.default) "
                             "to give it one: rewrite the file with the table's writer")
        elif field.name in name_ids:
            stored[name_ids[field.name]] = field.name
    names = {f.name: stored[int(f.metadata[FIELD_ID])] for f in table_schema if int(f.metadata[FIELD_ID]) in stored}
    missing = [c for c in required if c not in names]
    if missing:
        raise ValueError(f"{path} does not store the column(s) {missing}, whose values the table keeps as partition "
                         "values only (a migrated table?); tabloader reads columns from the files: rewrite them with "
                         "the table's writer")
    return names


# Nulls.
def columns_that_may_hold_nulls(footers: Sequence[Any], arrow_schema: Any, keys: Sequence[tuple],
                                names_in_files: Sequence[Mapping[str, str]] | None = None) -> frozenset[str]:
    """The integer and boolean columns that may hold a null somewhere in the dataset.

    Decided once, from the footers, so that every partition (also one without a null) and the
    meta read such a column as the same nullable dtype. A row group may hold nulls when its
    statistics count some or do not say; a column the file declares required holds none; a
    partition key may be null in a ``__HIVE_DEFAULT_PARTITION__`` folder. ``names_in_files``
    (a table's columns that some files lack, matched by name or by field id, see
    :func:`names_by_field_id`): per file, the dataset's column name -> the file's; a column a
    file lacks is null in all its rows.
    """
    candidates = {f.name for f in arrow_schema if backend.has_nullable_dtype(f.type)}
    found = {name for pairs in keys for name, value in pairs if value is None and name in candidates}
    in_files = candidates - {name for pairs in keys for name, _ in pairs}  # a key is read from its folders
    for i, footer in enumerate(footers):
        as_read = {n: n for n in in_files} if names_in_files is None else \
            {stored: name for name, stored in names_in_files[i].items()}
        found |= {name for name in in_files if name not in as_read.values()}  # absent from the file: null
        leaves = [footer.schema.column(j) for j in range(footer.num_columns)]
        optional = [(j, as_read[leaf.path]) for j, leaf in enumerate(leaves)
                    if leaf.path in as_read and as_read[leaf.path] in in_files and leaf.max_definition_level > 0]
        for g in range(footer.num_row_groups):
            row_group = footer.row_group(g)
            if row_group.num_rows == 0:  # pyarrow writes an empty table as one such group, without statistics
                continue
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
    columns count ``rows * width``; strings (and binary) at least an 8-byte offset plus the mean
    length of their smallest and largest value per value (exact for ids of one width: their
    dictionary encoding is 4-30x smaller than the decoded column), for the elements of a list
    column of strings (tags) per element, plus the list's 4-byte offset per row; the others
    their uncompressed encoded size.
    """
    n = row_group.num_rows
    total = 0
    for j in range(row_group.num_columns):
        chunk = row_group.column(j)
        top, nested = chunk.path_in_schema.split(".", 1)[0], "." in chunk.path_in_schema
        if top in widths and not nested:
            total += n * widths[top]
        elif chunk.physical_type == "BYTE_ARRAY":
            decoded = (chunk.num_values if nested else n) * (8 + _mean_extreme_length(chunk.statistics))
            total += max(chunk.total_uncompressed_size, decoded + (4 * n if nested else 0))
        else:
            total += chunk.total_uncompressed_size
    return max(total, row_group.total_byte_size)


def _mean_extreme_length(statistics: Any) -> int:
    """The mean byte length of a string column chunk's smallest and largest value (0 unknown),
    from their raw bytes: decoding them as text would fail on a writer's bytes that are not
    UTF-8 (Latin-1 text left by Hive or Impala), in any column, read or not."""
    if statistics is None or not statistics.has_min_max:
        return 0
    return (_byte_length(statistics.min_raw) + _byte_length(statistics.max_raw)) // 2


def _byte_length(value: Any) -> int:
    """The byte length of a statistics value: bytes as they are, strings in UTF-8, anything else
    a logical type made of the bytes (a decimal, say) by its text."""
    return len(value) if isinstance(value, (bytes, bytearray)) else len(str(value).encode())


#: The bytes per value (uncompressed, the dictionary page counted at its compressed size) below
#: which a string column chunk is taken to hold dictionary codes in every data page. Codes take
#: at most ~2.5 bytes per value for the 1M-entry dictionaries writers allow; a chunk whose
#: dictionary outgrew its page and went on in PLAIN pages takes a 4-byte length plus the
#: string's bytes per value there. Counting the dictionary page at its compressed size bounds
#: the codes' share from above, whatever the codec.
CODED_BYTES_PER_VALUE = 4.0


def value_chunks(metadata: Any, names: Sequence[str]) -> dict[str, tuple[int, str]]:
    """The column chunk holding the values of each top-level column of ``names`` that a parquet
    file (``FileMetaData``) stores in one chunk -- the column itself, or a list's elements
    (``tags.list.element``; ``list.item`` in older pyarrow files) -- as name -> (its position
    among the file's chunks, its path, as ``read_dictionary`` takes it). Columns the file lacks,
    and columns of several chunks (structs, maps), are left out.

    Example:
        >>> import os, tempfile, pyarrow as pa, pyarrow.parquet as pq
        >>> path = os.path.join(tempfile.mkdtemp(), "a.parquet")
        >>> pq.write_table(pa.table({"x": [1], "s": ["a"], "tags": [["a", "b"]]}), path)
        >>> value_chunks(pq.read_metadata(path), ["s", "tags", "t"])
        {'s': (1, 's'), 'tags': (2, 'tags.list.element')}
    """
    wanted = set(names)
    schema = metadata.schema
    found: dict[str, list[tuple[int, str]]] = {}
    for j in range(metadata.num_columns):
        path = schema.column(j).path
        # a top-level name may hold dots itself: the whole path first, then the names it starts with
        owners = [path] if path in wanted else [n for n in wanted if path.startswith(n + ".")]
        for name in owners:
            found.setdefault(name, []).append((j, path))
    return {name: chunks[0] for name, chunks in found.items() if len(chunks) == 1}


def dictionary_coded(row_group: Any, positions: Mapping[str, int]) -> frozenset[str]:
    """The columns among ``positions`` (name -> position of its value chunk, see
    :func:`value_chunks`) whose chunk in ``row_group`` (a pyarrow ``RowGroupMetaData``)
    holds dictionary codes only, with no PLAIN fallback pages: read as codes
    (:mod:`tabloader.encoding.cpu.coded_strings`), they skip decoding strings per row.

    The footer cannot say it outright (its encodings list PLAIN for the dictionary page itself;
    page headers would have to be read), so it is judged by the size of the data pages per
    value (:data:`CODED_BYTES_PER_VALUE`).

    Example:
        >>> import os, tempfile, numpy as np, pyarrow as pa, pyarrow.parquet as pq
        >>> path = os.path.join(tempfile.mkdtemp(), "a.parquet")
        >>> ids = np.arange(200_000)
        >>> pq.write_table(pa.table({"few": (ids % 100).astype(str), "many": ids.astype(str)}), path)
        >>> sorted(dictionary_coded(pq.read_metadata(path).row_group(0), {"few": 0, "many": 1}))
        ['few']
    """
    return frozenset(name for name, j in positions.items() if _holds_codes_only(row_group.column(j)))


def _holds_codes_only(chunk: Any) -> bool:
    dictionary_at, data_at = chunk.dictionary_page_offset, chunk.data_page_offset
    if not chunk.has_dictionary_page or not dictionary_at or data_at is None or data_at <= dictionary_at:
        return False
    data_bytes = chunk.total_uncompressed_size - (data_at - dictionary_at)
    return data_bytes < CODED_BYTES_PER_VALUE * max(chunk.num_values, 1)
