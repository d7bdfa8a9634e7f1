"""The source of parquet files: whole row groups, grouped across files into partitions of about
``part_size`` bytes once decoded, read by pyarrow on the CPU and cuDF on the GPU.

Example:
    >>> import os, tempfile, pyarrow as pa, pyarrow.parquet as pq
    >>> from tabloader.dataset.files import FileSet
    >>> d = tempfile.mkdtemp()
    >>> pq.write_table(pa.table({"id": [1, None, 3, 4]}), os.path.join(d, "a.parquet"), row_group_size=2)
    >>> source = ParquetSource(FileSet.find(d), part_size=16)
    >>> source.partition_sizes(), str(source.meta().dtypes["id"]), source.read_arrow(1).column("id").to_pylist()
    ([2, 2], 'Int64', [3, 4])
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import gc
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from tabloader import backend
from tabloader.allocator import hand_back_freed_memory
from tabloader.dataset.files import FileSet, check_same_schema, for_each_file
from tabloader.dataset.partition_filters import kept_files
from tabloader.dataset.parquet_layout import (Footer, columns_that_may_hold_nulls, dictionary_coded, file_fields,
                                              fixed_list_widths, fixed_widths, hive_keys, in_memory_bytes,
                                              int96_columns, key_columns, names_by_field_id, offset_width_free,
                                              read_footer, value_chunks)
from tabloader.dataset.source import SchemaMismatchError, Source, checked_columns, conform_dtypes, error_message
from tabloader.filesystems import is_local


@dataclasses.dataclass(frozen=True)
class Piece:
    """Some row groups of one parquet file (all of them when ``row_groups`` is None).

    ``partition`` holds the file's hive partition keys, ``(name, value)`` pairs parsed from
    its ``name=value`` folders: every row of the piece has these values.
    """

    path: str
    row_groups: tuple[int, ...] | None
    num_rows: int
    nbytes: int
    partition: tuple[tuple[str, Any], ...] = ()
    coded: frozenset[str] = frozenset()  # string columns stored as dictionary codes only in these row groups


# From this many files on, the footers' memory is given back as the dataset is opened (see __init__).
_FILES_WORTH_A_COLLECTION = 64


class ParquetSource(Source):
    """Parquet files, read as their writer (pyarrow, Spark, DuckDB, polars, pandas) left them.

    Integer and boolean columns that may hold nulls (the files' statistics say so, or say
    nothing) are pandas nullable dtypes (``Int64``, ``boolean``...) in every partition, the
    others numpy; ``key=value`` folders (hive partitioning) become columns; files may order
    their columns differently (the first file's order is used); dictionary-encoded columns are
    read as their values. Files disagreeing on their columns or types (only ``columns`` when
    given) are refused with a :class:`~tabloader.dataset.SchemaMismatchError` naming both.
    All of it is decided here, from the folders and footers, before any data is read.

    Args:
        files: the parquet files.
        part_size: target decoded bytes of a partition (whole row groups, across files).
        device: ``"cpu"`` (pandas frames) or ``"cuda"`` (cuDF frames) for :meth:`read_frame`.
        columns: read only these columns, in this order (by default every column).
        partition_types: the types of some hive keys (name -> type), or of all (one type), instead
            of those inferred from their values: see :func:`~tabloader.dataset.parquet_layout.hive_keys`.
        filters: keep only the files whose hive keys pass these conditions (see
            :mod:`~tabloader.dataset.partition_filters`); the others are never opened.
    """

    engine = "parquet"
    _coded: frozenset = frozenset()  # the columns read as codes where stored so (with_coded_strings)
    _element_paths: dict = {}  # file -> {list column: the path of its elements}, for the columns above

    def __init__(self, files: FileSet, part_size: int, device: str = "cpu",
                 columns: Sequence[str] | None = None, partition_types: Mapping[str, Any] | str | None = None,
                 filters: Any = None) -> None:
        super().__init__(device)
        if filters is not None:
            files = _filtered(files, partition_types, filters)
        self.files = files
        footers = for_each_file(lambda path: read_footer(path, files.fs), files.paths)
        if files.table_schema is None:
            keys = self._layout_by_name(footers, columns, partition_types)
        else:
            keys = self._layout_by_field_id(footers, columns, partition_types)
        metadata = [f.metadata for f in footers]
        # INT96 columns (stored names) are decoded on the host for cuDF; the CPU reader needs no list
        self._int96 = frozenset().union(*(int96_columns(m) for m in metadata)) if self.device == "cuda" else frozenset()
        # cuDF reads the pieces of a partition in one call when their files share a parquet schema
        # (kept as a number per distinct schema: the source travels to Dask's workers)
        schemas: dict[str, int] = {}
        self._schema_ids = {p: schemas.setdefault(schema_text(m), len(schemas)) for p, m in zip(files.paths, metadata)}
        names_in_files = None if self._names_in_files is None else [self._names_in_files[p] for p in files.paths]
        self.nullable = columns_that_may_hold_nulls(metadata, self._arrow_schema, keys, names_in_files)
        widths = fixed_widths(self._arrow_schema)
        strings = self._codable_columns()
        chunks = [value_chunks(f, strings) if strings else {} for f in metadata]
        # a list's elements are read as codes under their own path, which each file names its own way
        elements = [{name: leaf for name, (_, leaf) in found.items() if leaf != name} for found in chunks]
        self._element_paths = {path: paths for path, paths in zip(files.paths, elements) if paths}
        pieces = [Piece(path, (i,), f.row_group(i).num_rows, in_memory_bytes(f.row_group(i), widths), pairs,
                        dictionary_coded(f.row_group(i), {name: at for name, (at, _) in found.items()}))
                  for path, f, pairs, found in zip(files.paths, metadata, keys, chunks)
                  for i in range(f.num_row_groups)]
        self.partitions = _group_pieces(pieces, part_size)
        # A footer's FileMetaData and the ParquetSchema its .schema made refer to each other: only
        # the cycle collector frees them, maybe much later (1 GB held for 1,000 files of 100 columns).
        del footers, metadata, chunks
        if len(files.paths) >= _FILES_WORTH_A_COLLECTION:
            gc.collect()
            hand_back_freed_memory()

    def _layout_by_name(self, footers: Sequence[Footer], columns: Sequence[str] | None,
                        partition_types: Mapping[str, Any] | str | None) -> list[tuple]:
        """The columns of files matched by name, hive keys from their folders; returns each
        file's ``(key, value)`` pairs. The columns are those a table's log declares when it
        does (a Delta table's, see :meth:`_declared_columns`), else the files' own."""
        import pyarrow as pa

        files = self.files
        stored = [file_fields(f.arrow_schema) for f in footers]
        key_types, keys = hive_keys(files.paths, files.bases, _given_key_types(files, partition_types), stored,
                                    known=list(files.key_types))
        fields = [{n: t for n, t in found.items() if n not in key_types} for found in stored]  # keys: from folders
        if files.declared_columns is None:
            # The dataset's types are the first file's; a file declaring a string or list with wider
            # offsets (or narrower) is the same column, cast as it is read (_conform).
            check_same_schema(files.paths, [{**{n: offset_width_free(t) for n, t in found.items()},
                                             **{k: key_types[k] for k, _ in pairs}}
                                            for found, pairs in zip(fields, keys)], columns)
            # A key the files also store keeps its place among their columns (as polars and DuckDB show it).
            order, types = list(stored[0]), fields[0]
            self._names_in_files = None
        else:
            order, types = self._declared_columns(fields)
        names = checked_columns([*order, *(k for k in key_types if k not in order)], columns, self.describe())
        self._arrow_schema = pa.schema([pa.field(n, types[n] if n in types else key_types[n]) for n in names])
        self.partition_keys = tuple(n for n in names if n in key_types)
        widths = fixed_list_widths(footers[0].arrow_schema) if footers else {}
        self._list_widths = {n: w for n, w in widths.items() if n in names}
        return keys

    def _declared_columns(self, fields: Sequence[dict[str, Any]]) -> tuple[list[str], dict[str, Any]]:
        """The names and types of the columns a table's log declares (``declared_columns``),
        whatever each file stores (``fields``: per file, its columns but the hive keys): a
        file written before a column was added lacks it (null in its rows), a narrower type
        (int where the log says long) is cast as it is read; a column the log does not declare
        is refused, naming the file."""
        declared = self.files.declared_columns
        types = {f.name: f.type for f in declared}
        for path, found in zip(self.files.paths, fields):
            undeclared = [n for n in found if n not in types]
            if undeclared:
                raise SchemaMismatchError(f"{path} stores the column(s) {undeclared}, which the log of the table at "
                                          f"{self.files.directory} does not declare (its columns: {declared.names})")
        lacking = any(len(found) < len(types) for found in fields)
        # only when some file lacks a column: files storing them all read as plain parquet (codes, GPU runs)
        self._names_in_files = {path: {n: n for n in found} for path, found in zip(self.files.paths, fields)} \
            if lacking else None
        return declared.names, types

    def _layout_by_field_id(self, footers: Sequence[Footer], columns: Sequence[str] | None,
                            partition_types: Mapping[str, Any] | str | None) -> list[tuple]:
        """The columns of a table's schema (Iceberg's), matched in each file by field id: a
        column under an older name is renamed, one a file lacks is null there, a narrower type
        (int -> long) is cast. No hive keys: a table keeps its own partition values."""
        import pyarrow as pa

        files = self.files
        if partition_types is not None:
            raise ValueError(f"partition_types={partition_types!r} types the key=value folders of parquet files; the "
                             f"table at {files.directory} keeps its partition columns in its files, typed by its schema")
        names = checked_columns(files.table_schema.names, columns, "the table")
        self._arrow_schema = pa.schema([files.table_schema.field(n).remove_metadata() for n in names])
        self.partition_keys = ()
        self._list_widths = {}
        required = files.required or [()] * len(files.paths)
        self._names_in_files = {path: names_by_field_id(f.arrow_schema, files.table_schema, path, must, files.name_ids)
                                for path, f, must in zip(files.paths, footers, required)}
        return [()] * len(files.paths)

    def _codable_columns(self) -> list[str]:
        """The string columns, and list columns of strings, that the CPU reader may give as
        dictionary codes: stored under their own names (no table renames them), not hive keys."""
        if self.device == "cuda" or self.files.table_schema is not None:
            return []
        return [f.name for f in self._arrow_schema if _holds_strings(f.type) and f.name not in self.partition_keys]

    def coded_row_groups(self) -> tuple[dict[str, int], int] | None:
        """Per string column the CPU reader may give as codes, the row groups that store it as
        codes only (:func:`~tabloader.dataset.parquet_layout.dictionary_coded`), and the number
        of row groups; None on the GPU, whose reader decodes strings itself.

        Example:
            >>> import os, tempfile, pyarrow as pa, pyarrow.parquet as pq
            >>> from tabloader.dataset.files import FileSet
            >>> d = tempfile.mkdtemp()
            >>> pq.write_table(pa.table({"s": ["a", "b"] * 50, "x": range(100)}), os.path.join(d, "a.parquet"))
            >>> ParquetSource(FileSet.find(d), part_size=1 << 20).coded_row_groups()
            ({'s': 1}, 1)
        """
        if self.device == "cuda":
            return None
        pieces = [piece for part in self.partitions for piece in part]
        return {name: sum(name in piece.coded for piece in pieces) for name in self._codable_columns()}, len(pieces)

    def with_coded_strings(self, columns: Sequence[str]) -> "ParquetSource":
        """This source, reading the string ``columns`` as dictionary codes (a ``pd.ArrowDtype``
        of arrow dictionary type) in the partitions whose row groups store them as codes only
        (:func:`~tabloader.dataset.parquet_layout.dictionary_coded`), and as strings elsewhere.
        For readers that take such columns: the categorical encoders
        (:mod:`tabloader.encoding.cpu.coded_strings`). This source itself is left as it is."""
        coded = frozenset(columns) & frozenset().union(*(p.coded for part in self.partitions for p in part))
        if coded == self._coded:
            return self
        new = copy.copy(self)
        new._coded = coded
        return new

    def _coded_columns(self, pieces: Sequence[Piece], target: Any) -> list[str]:
        """The columns of ``target`` to read as codes from ``pieces`` (every piece stores them so:
        one partition's chunks must share a type)."""
        if not self._coded or not pieces:
            return []
        stored = frozenset(self._coded).intersection(*(p.coded for p in pieces))
        return [name for name in target.names if name in stored]

    @property
    def npartitions(self) -> int:
        return len(self.partitions)

    def partition_sizes(self) -> list[int]:
        return [sum(p.num_rows for p in part) for part in self.partitions]

    @property
    def arrow_schema(self) -> Any:
        return self._arrow_schema

    def list_widths(self) -> dict[str, int]:
        return self._list_widths

    def meta(self) -> Any:
        return backend.from_arrow(self._arrow_schema.empty_table(), self.device, self.nullable)

    def read_arrow(self, index: int, columns: Sequence[str] | None = None, memory_pool: Any = None) -> Any:
        """Partition ``index`` as a pyarrow Table laid out as the dataset yields it (its column
        order, hive keys added, dictionary-encoded columns decoded but those asked for as codes,
        see :meth:`with_coded_strings`), decoded into ``memory_pool`` (default: pyarrow's)."""
        import pyarrow as pa

        target = self.target_schema(columns)
        pieces = _merge_pieces(self.partitions[index])
        coded = self._coded_columns(pieces, target)
        if coded:
            target = pa.schema([f.with_type(_coded_type(f.type)) if f.name in coded else f for f in target])
        tables = [self._read_piece(piece, target, memory_pool, coded) for piece in pieces]
        if not tables:  # a dataset without row groups
            return target.empty_table()
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables, memory_pool=memory_pool)

    def read_frame(self, index: int, columns: Sequence[str] | None = None) -> Any:
        if self.device != "cuda":
            # The partition's table is ours alone: its columns need not be copied into the frame.
            return backend.from_arrow(self.read_arrow(index, columns), nullable=self.nullable, copy=False,
                                      dictionaries=self._coded)
        target = self.target_schema(columns)
        pieces = _merge_pieces(self.partitions[index])
        runs = read_together(pieces, self._reads_together) if target.names else [[piece] for piece in pieces]
        frames = [self._read_piece_frame(run[0], target) if len(run) == 1 else self._read_run_frame(run, target)
                  for run in runs]
        if not frames:
            return backend.from_arrow(target.empty_table(), self.device)
        return frames[0] if len(frames) == 1 else backend.concat(frames, ignore_index=True)

    def describe(self, index: int | None = None) -> str:
        if index is None:
            return self.files.paths[0] if self.files.paths else self.files.directory  # a table without files
        return ", ".join(sorted({p.path for p in self.partitions[index]})) or "no row groups"

    @property
    def summary(self) -> str:
        return f"{len(self.files.paths)} parquet file(s)"

    def target_schema(self, columns: Sequence[str] | None) -> Any:
        """The arrow schema of ``columns`` (default: all) as this source yields them."""
        import pyarrow as pa

        if columns is None:
            return self._arrow_schema
        names = checked_columns(self._arrow_schema.names, columns, "the dataset")
        return pa.schema([self._arrow_schema.field(c) for c in names])

    def _file_columns(self, path: str, target: Any) -> dict[str, str]:
        """The columns of ``target`` to read from the file ``path``: the dataset's name -> the
        file's (partition keys, and columns a table's older file lacks, are not in it)."""
        if self._names_in_files is None:
            return {n: n for n in target.names if n not in self.partition_keys}
        stored = self._names_in_files[path]
        return {n: stored[n] for n in target.names if n in stored}

    def _read_piece(self, piece: Piece, target: Any, memory_pool: Any, coded: Sequence[str] = ()) -> Any:
        try:
            names = self._file_columns(piece.path, target)
            elements = self._element_paths.get(piece.path, {})
            table = backend.read_parquet_arrow(piece.path, list(names.values()), piece.row_groups,
                                               filesystem=self.files.fs, memory_pool=memory_pool,
                                               read_dictionary=[elements.get(c, c) for c in coded])
            return _conform(_renamed(table, names), piece, target)
        except Exception as exc:
            raise _naming(exc, f"{piece.path}: could not read row groups {piece.row_groups}") from exc

    def _read_piece_frame(self, piece: Piece, target: Any) -> Any:
        import pyarrow as pa

        names = self._file_columns(piece.path, target)
        keys = key_columns(piece.partition, target, 1)  # one row, repeated on the device
        frame = None
        if names or not keys.num_columns:  # cuDF reads no rows without a column: keys alone make the rows
            try:
                # the paths are spelled as the dataset's file system spells them
                frame = backend.read_parquet(piece.path, list(names.values()), piece.row_groups, device=self.device,
                                             filesystem=self.files.fs, host_columns=self._int96)
            except Exception as exc:
                raise _naming(exc, f"{piece.path}: could not read row groups {piece.row_groups}") from exc
            if any(name != stored for name, stored in names.items()):  # a table's older names
                # in place: cuDF's rename would copy every column
                frame.columns = [{stored: name for name, stored in names.items()}.get(c, c) for c in frame.columns]
        if keys.num_columns:
            rows = piece.num_rows if frame is None else len(frame)
            one_row = backend.from_arrow(keys, self.device)
            repeated = {name: one_row[name].repeat(rows).reset_index(drop=True) for name in keys.column_names}
            if frame is None:
                frame = backend.frame_from_columns(repeated, None, like=one_row)
            else:
                for name, values in repeated.items():
                    frame[name] = values
        absent = [f for f in target if f.name not in names and f.name not in keys.column_names]
        if absent:  # columns added to a table after the file was written: null in its rows
            # piece.num_rows: a file read for no column at all may give a frame without rows
            nulls = backend.from_arrow(pa.table({f.name: pa.nulls(piece.num_rows, f.type) for f in absent}),
                                       self.device)
            for field in absent:
                frame[field.name] = nulls[field.name]
        # The dtypes of the meta, whatever the file's own: as _conform does for arrow tables.
        return conform_dtypes(frame, self._device_dtypes[target.names], piece.path)

    def _reads_together(self, first: Piece, second: Piece) -> bool:
        """Whether cuDF can read ``second`` in the same call as ``first``: files of one parquet
        schema on the local disk (remote files would be fetched whole for uneven row group
        selections), columns under their own names, no hive keys or INT96 columns to add."""
        return (self._names_in_files is None and not self.partition_keys and not self._int96
                and first.row_groups is not None and second.row_groups is not None and is_local(self.files.fs)
                and self._schema_ids[first.path] == self._schema_ids[second.path])

    def _read_run_frame(self, run: Sequence[Piece], target: Any) -> Any:
        """The pieces of ``run`` (files that read together) as one frame on the device, by one
        cuDF read: libcudf reads and decodes all their column chunks at once, with no call and
        no concatenation copy per file."""
        paths = [piece.path for piece in run]
        try:
            frame = backend.read_parquet_files(paths, list(target.names), [piece.row_groups for piece in run],
                                               device=self.device, filesystem=self.files.fs)
        except Exception:  # read them one by one: the error names the file it comes from
            return backend.concat([self._read_piece_frame(piece, target) for piece in run], ignore_index=True)
        return conform_dtypes(frame, self._device_dtypes[target.names], paths[0])

    @functools.cached_property
    def _device_dtypes(self) -> Any:
        """The dtypes of the frames :meth:`read_frame` gives (those of the meta), by column name."""
        return self.meta().dtypes


def _given_key_types(files: FileSet, partition_types: Mapping[str, Any] | str | None) -> Any:
    """The key types the user's ``partition_types`` give, over those of a Delta table's log."""
    if files.key_types and not isinstance(partition_types, str):
        return {**files.key_types, **(partition_types or {})}
    return partition_types


def _filtered(files: FileSet, partition_types: Mapping[str, Any] | str | None, filters: Any) -> FileSet:
    """``files`` less those whose partition keys do not pass ``filters``."""
    if files.table_schema is not None:
        raise ValueError(f"filters={filters!r} keep or drop the files of key=value folders; the table at "
                         f"{files.directory} is read from its metadata: give its scan a row_filter on identity "
                         "partition columns instead (tl.Dataset(table.scan(row_filter=...)))")
    given, stored = _given_key_types(files, partition_types), _stored_columns_of_one(files)
    kept, types = kept_files(files.paths, files.bases, given, filters, files.directory, stored, list(files.key_types))
    # A key typed from its folders' values keeps the type all of them give: dropping `zip=01234`
    # must not make the other zips numbers (a fitted workflow would then refuse the dataset).
    inferred = {} if isinstance(given, str) else {name: str(t) for name, t in types.items()
                                                   if name not in (given or {}) and not any(name in s for s in stored)}
    return dataclasses.replace(files, paths=[files.paths[i] for i in kept], bases=[files.bases[i] for i in kept],
                               urls=[files.urls[i] for i in kept], key_types={**files.key_types, **inferred})


def _stored_columns_of_one(files: FileSet) -> list[dict[str, Any]]:
    """The column types of the first file whose footer reads (a list of one, or none): a hive key
    the files also store (polars' and DuckDB's partitioned writes) is typed as that column, by
    the filters as by the dataset. A file that cannot be read is passed over: it may be one the
    filters drop, which is never read otherwise."""
    for path in files.paths:
        try:
            return [file_fields(read_footer(path, files.fs).arrow_schema)]
        except Exception:  # noqa: BLE001 -- any unreadable file: the next one tells as well
            continue
    return []


def _holds_strings(arrow_type: Any) -> bool:
    """True for string columns and list columns of strings (what may be read as codes)."""
    import pyarrow as pa

    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        arrow_type = arrow_type.value_type
    return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)


def _coded_type(arrow_type: Any) -> Any:
    """The type a column of ``arrow_type`` (see :func:`_holds_strings`) is read as codes: pyarrow
    reads a dictionary's strings with 32-bit offsets, large_string columns too; lists stay lists.

    Example:
        >>> import pyarrow as pa
        >>> str(_coded_type(pa.large_string()))
        'dictionary<values=string, indices=int32, ordered=0>'
        >>> str(_coded_type(pa.large_list(pa.string())))
        'large_list<item: dictionary<values=string, indices=int32, ordered=0>>'
    """
    import pyarrow as pa

    codes = pa.dictionary(pa.int32(), pa.string())
    if pa.types.is_large_list(arrow_type):
        return pa.large_list(codes)
    return pa.list_(codes) if pa.types.is_list(arrow_type) else codes


def _conform(table: Any, piece: Piece, target: Any) -> Any:
    """A table read from ``piece`` as the dataset yields it: the columns of ``target`` in its
    order, whatever the file's order, with the partition keys added and dictionary-encoded
    columns decoded (but where ``target`` asks for a dictionary type)."""
    import pyarrow as pa

    keys = key_columns(piece.partition, target, table.num_rows)
    key_names, stored = set(keys.column_names), set(table.column_names)  # column_names builds a new list per call
    # a column neither a key nor in the file was added to a table after the file was written: null in its rows
    arrays = [keys.column(f.name) if f.name in key_names else table.column(f.name) if f.name in stored
              else pa.nulls(table.num_rows, f.type) for f in target]
    return pa.Table.from_arrays([a if a.type == f.type else a.cast(f.type) for a, f in zip(arrays, target)],
                                schema=target)


def _renamed(table: Any, names: Mapping[str, str]) -> Any:
    """``table`` read with the file's column names, under the dataset's (``names``: dataset's -> file's)."""
    import pyarrow as pa

    if all(name == stored for name, stored in names.items()):
        return table
    return pa.table({name: table.column(stored) for name, stored in names.items()})


def _naming(exc: Exception, where: str) -> Exception:
    """``exc`` with ``where`` in front of its message, of the same type (raise it ``from exc``)."""
    return type(exc)(f"{where}: {error_message(exc)}")


def schema_text(metadata: Any) -> str:
    """A parquet file's schema (``FileMetaData``) as text: columns, physical and logical types,
    repetition; files with equal texts have the schema libcudf asks of files read together.

    Example:
        >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "a.parquet")
        >>> pq.write_table(pa.table({"id": [1]}), path)
        >>> print(schema_text(pq.read_metadata(path)), end="")
        required group field_id=-1 schema {
          optional int64 field_id=-1 id;
        }
    """
    return str(metadata.schema).partition("\n")[2]  # the first line is the Python object's address


def read_together(pieces: Sequence[Piece], together: Callable[[Piece, Piece], bool]) -> list[list[Piece]]:
    """``pieces`` cut into runs of consecutive pieces that one call reads: a piece joins the run
    of the piece before it when ``together(before, piece)``.

    Example:
        >>> pieces = [Piece(p, (0,), 1, 1) for p in ["a", "b", "c"]]
        >>> [[p.path for p in run] for run in read_together(pieces, lambda x, y: y.path != "c")]
        [['a', 'b'], ['c']]
    """
    runs: list[list[Piece]] = []
    for piece in pieces:
        if runs and together(runs[-1][-1], piece):
            runs[-1].append(piece)
        else:
            runs.append([piece])
    return runs


def _merge_pieces(pieces: Sequence[Piece]) -> list[Piece]:
    """Consecutive row groups of one file as one piece (one open and footer parse per file)."""
    merged: list[Piece] = []
    for piece in pieces:
        last = merged[-1] if merged else None
        if last is not None and last.path == piece.path and last.row_groups is not None and piece.row_groups is not None:
            merged[-1] = dataclasses.replace(last, row_groups=last.row_groups + piece.row_groups,
                                             num_rows=last.num_rows + piece.num_rows, nbytes=last.nbytes + piece.nbytes,
                                             coded=last.coded & piece.coded)
        else:
            merged.append(piece)
    return merged


def _group_pieces(pieces: Sequence[Piece], part_size: int) -> list[list[Piece]]:
    """Consecutive row groups, across files, at most ``part_size`` bytes per partition, in as
    few partitions as that allows, balanced in size.

    Filling each partition up to ``part_size`` leaves the remainder to the last one (13 full
    partitions and a small one): workers running them in parallel then wait on the full ones
    at the end. The same number of partitions cut where the running size is nearest each
    equal share keeps every worker busy to the end. Row groups larger than ``part_size`` are
    partitions of their own either way.
    """
    greedy = _fill_partitions(pieces, part_size)
    count = len(greedy)
    if count < 2:
        return greedy
    total = sum(piece.nbytes for piece in pieces)
    ends = np.cumsum([piece.nbytes for piece in pieces])
    shares = total * np.arange(1, count) / count
    # the piece boundary nearest each share (the end of piece i is ends[i])
    after = np.searchsorted(ends, shares)
    below = np.maximum(after - 1, 0)
    cuts = np.where(np.abs(ends[below] - shares) <= np.abs(ends[after] - shares), below, after) + 1
    balanced = [list(pieces[start:stop]) for start, stop in zip(np.r_[0, cuts], np.r_[cuts, len(pieces)])
                if stop > start]
    if len(balanced) != count or any(len(part) > 1 and sum(p.nbytes for p in part) > part_size for part in balanced):
        return greedy  # irregular row groups: the nearest cuts would overfill a partition
    return balanced


def _fill_partitions(pieces: Sequence[Piece], part_size: int) -> list[list[Piece]]:
    """Consecutive row groups, each partition filled up to ``part_size`` bytes."""
    partitions: list[list[Piece]] = []
    current: list[Piece] = []
    size = 0
    for piece in pieces:
        if current and size + piece.nbytes > part_size:
            partitions.append(current)
            current, size = [], 0
        current.append(piece)
        size += piece.nbytes
    if current:
        partitions.append(current)
    return partitions or [[]]
