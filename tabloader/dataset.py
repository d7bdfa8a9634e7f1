"""Dataset: files or frames, cut into partitions that fit in memory, with a schema.

A Dataset is lazy: it knows its files (parquet or CSV, local or any fsspec URL), its row groups,
and how to read one partition at a time. A fitted workflow's ``transform`` returns a new Dataset
that applies the workflow to each partition as it is read, so nothing is materialized until
``to_parquet``, ``to_iter``, ``compute`` or a loader asks for it.

Example:
    >>> import pandas as pd, tabloader as tl
    >>> ds = tl.Dataset(pd.DataFrame({"a": [1, 2, 3], "b": [0.5, 1.5, 2.5]}))
    >>> ds.num_rows, ds.schema.column_names
    (3, ['a', 'b'])
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import math
import os
import re
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pandas as pd

from tabloader import backend
from tabloader.atomic_files import atomic_directory
from tabloader.filesystems import filesystem, join
from tabloader.schema import SCHEMA_FILE_NAME, Schema

ENGINES = ("parquet", "csv")
_EXTENSIONS = {".parquet": "parquet", ".parq": "parquet", ".pq": "parquet", ".csv": "csv", ".tsv": "csv"}


class SchemaMismatchError(ValueError):
    """Files of one dataset disagree on their columns or dtypes."""


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


@dataclasses.dataclass(frozen=True)
class PartitionTransform:
    """A function applied to every partition as it is read (a fitted workflow, for instance)."""

    function: Callable[[Any], Any]
    input_columns: tuple[str, ...] | None  # columns the function reads; None means all
    preserves_rows: bool  # False when it can drop rows (filters), so row counts need a pass


class Dataset:
    """A tabular dataset read partition by partition.

    Args:
        source: a parquet or CSV path, directory, glob or list of them (local or fsspec URL),
            a pandas or cuDF DataFrame, or a Dask DataFrame.
        engine: ``"parquet"`` or ``"csv"``; inferred from file extensions when None.
        part_size: target in-memory size of a partition, such as ``"128MB"`` or a byte count.
        schema: a :class:`~tabloader.schema.Schema` (or the path of a schema JSON file) giving
            tags and properties; by default read from ``_schema.json`` beside the data, else
            inferred from the dtypes.
        device: ``"cpu"`` (pandas), ``"cuda"`` (cuDF) or None for cuDF when it is usable.
        columns: read only these columns, in this order (by default every column).
        **read_kwargs: passed to the CSV reader (``sep``, ``names``, ...).

    Parquet files are read as their writer (pyarrow, Spark, DuckDB, polars, pandas) left
    them: integer and boolean columns that may hold nulls (the files' statistics say so, or
    say nothing) are pandas nullable dtypes (``Int64``, ``boolean``...) in every partition,
    the others numpy; ``key=value`` folders (hive partitioning) become columns; files may
    order their columns differently (the first file's order is used); dictionary-encoded
    columns are read as their values. Struct, map and list-of-list columns are refused here,
    naming the column: leave them out with ``columns=``.

    Example:
        >>> import pandas as pd, tabloader as tl
        >>> ds = tl.Dataset(pd.DataFrame({"x": range(10)}), part_size=16)
        >>> ds.npartitions, [len(p) for p in ds.to_iter()][:2]
        (5, [2, 2])
    """

    def __init__(self, source: Any, engine: str | None = None, part_size: int | str = "128MB",
                 schema: Schema | str | None = None, device: str | None = None,
                 columns: Sequence[str] | None = None, **read_kwargs: Any) -> None:
        self.part_size = _parse_part_size(part_size)
        self.device = _dataset_device(device)
        self.engine = engine
        self._transforms: tuple[PartitionTransform, ...] = ()
        self._frame = None
        self._ddf = None
        self._partitions: list[list[Piece]] = []
        self._row_slices: list[tuple[int, int]] = []
        self._num_rows: int | None = None
        self._fs = None
        self._nullable: frozenset[str] = frozenset()  # parquet: integer/boolean columns read as nullable dtypes
        self._partition_keys: tuple[str, ...] = ()  # parquet: hive partition key columns
        if engine is not None and engine not in ENGINES:
            raise ValueError(f"unknown engine {engine!r}; expected one of {ENGINES}")
        if isinstance(columns, str):
            columns = [columns]
        if _is_dask_frame(source):
            self._ddf = _select(source, columns, "the Dask DataFrame")
        elif isinstance(source, pd.DataFrame) or backend.is_gpu_object(source):
            self._init_frame(_select(source, columns, "the DataFrame"))
        else:
            self._init_files(source, engine, columns, read_kwargs)
        self._base_schema = self._infer_schema(schema)
        self._schema = self._base_schema

    # --- construction -----------------------------------------------------------------------
    def _init_frame(self, frame: Any) -> None:
        if self.device == "cuda" and not backend.is_gpu_object(frame):
            frame = backend.to_device(frame, "cuda")
        self._frame = frame.reset_index(drop=True)
        n = len(frame)
        nbytes = int(frame.memory_usage(deep=True, index=False).sum()) if n else 0
        parts = max(1, min(n, math.ceil(nbytes / self.part_size)))
        bounds = np.linspace(0, n, parts + 1).astype(int)
        self._row_slices = [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
        self._num_rows = n

    def _init_files(self, source: Any, engine: str | None, columns: Sequence[str] | None, read_kwargs: dict) -> None:
        import pyarrow as pa

        paths, self._fs, self.source_dir, bases = _resolve_paths(source)
        self.paths = paths
        self.engine = engine or _infer_engine(paths)
        if self.engine == "csv":
            urls = [self._fs.unstrip_protocol(p) if "://" in str(source) else p for p in paths]
            self._ddf = _read_csv(paths, urls, self.part_size, columns, read_kwargs)
            return
        metadata = _for_each_file(lambda p: _read_one_metadata(p, self._fs), paths)
        key_fields, partitions = _hive_partitions(paths, bases)
        schemas = [_file_fields(m.schema.to_arrow_schema(), path, key_fields) for m, path in zip(metadata, paths)]
        _check_same_schema(paths, [{**fields, **{k: key_fields[k] for k, _ in keys}}
                                   for fields, keys in zip(schemas, partitions)])
        names = _checked_columns([*schemas[0], *key_fields], columns, paths[0])
        self._arrow_schema = pa.schema([pa.field(n, schemas[0][n] if n in schemas[0] else key_fields[n]) for n in names])
        self._partition_keys = tuple(n for n in names if n in key_fields)
        self._nullable = _columns_that_may_hold_nulls(metadata, self._arrow_schema, partitions)
        widths = _fixed_widths(self._arrow_schema)
        pieces = [Piece(p, (i,), m.row_group(i).num_rows, _in_memory_bytes(m.row_group(i), widths), keys)
                  for p, m, keys in zip(paths, metadata, partitions) for i in range(m.num_row_groups)]
        self._partitions = _group_pieces(pieces, self.part_size)
        self._num_rows = sum(p.num_rows for p in pieces)

    def _infer_schema(self, schema: Schema | str | None) -> Schema:
        if isinstance(schema, str):
            schema = Schema.load(schema)
        if self._frame is not None:
            arrow_schema, where = backend.frame_arrow_schema(self._frame), "the DataFrame"
        elif self._partitions:
            arrow_schema, where = self._arrow_schema, self.paths[0]
        else:
            arrow_schema = backend.frame_arrow_schema(self._ddf)
            where = self.paths[0] if hasattr(self, "paths") else "the Dask DataFrame"
        _refuse_unsupported_types(arrow_schema, where)
        inferred = Schema.from_arrow(arrow_schema)
        if schema is None:
            schema = self._schema_file_beside_data()
        if schema is None:
            return inferred
        # The data decides which columns exist and their dtypes; the given schema adds roles.
        return Schema(schema[c.name].with_dtype(c.dtype, c.is_list) if c.name in schema else c for c in inferred)

    def _schema_file_beside_data(self) -> Schema | None:
        directory = getattr(self, "source_dir", None)
        if directory is None:
            return None
        path = join(directory, SCHEMA_FILE_NAME)
        return Schema.load(path, fs=self._fs) if self._fs.exists(path) else None

    # --- properties -------------------------------------------------------------------------
    @property
    def schema(self) -> Schema:
        """Column names, dtypes, tags and properties of the rows this dataset yields."""
        return self._schema

    @property
    def npartitions(self) -> int:
        if self._partitions:
            return len(self._partitions)
        if self._frame is not None:
            return len(self._row_slices)
        return self._ddf.npartitions

    @property
    def num_rows(self) -> int:
        """Number of rows (from parquet metadata when no transform can drop rows)."""
        if self._num_rows is None or not all(t.preserves_rows for t in self._transforms):
            counts = self._map_partitions_compute(len, "counting rows")
            if all(t.preserves_rows for t in self._transforms):
                self._num_rows = int(sum(counts))
            return int(sum(counts))
        return self._num_rows

    def __len__(self) -> int:
        return self.num_rows

    def __repr__(self) -> str:
        kind = f"{len(self.paths)} {self.engine} file(s)" if hasattr(self, "paths") else (
            "a DataFrame" if self._frame is not None else "a Dask DataFrame")
        return (f"Dataset({kind}, {self.npartitions} partition(s), device={self.device!r}, "
                f"columns={self.schema.column_names}{', transformed' if self._transforms else ''})")

    # --- reading ----------------------------------------------------------------------------
    def partition_sizes(self) -> list[int] | None:
        """Rows per partition when known without reading data (file or frame sources)."""
        if self._transforms and not all(t.preserves_rows for t in self._transforms):
            return None
        if self._partitions:
            return [sum(p.num_rows for p in part) for part in self._partitions]
        if self._frame is not None:
            return [b - a for a, b in self._row_slices]
        return None

    def read_partition(self, index: int, columns: Sequence[str] | None = None) -> Any:
        """Partition ``index`` as a DataFrame (pandas, or cuDF on the GPU), transforms applied."""
        read_columns = self._transforms[0].input_columns if self._transforms else columns
        frame = self._read_base_partition(index, read_columns)
        for transform in self._transforms:
            frame = transform.function(frame)
        return frame[list(columns)] if columns is not None and self._transforms else frame

    def read_partition_arrow(self, index: int, columns: Sequence[str] | None = None) -> Any:
        """Partition ``index`` as a pyarrow Table. Untransformed parquet is read without pandas."""
        import pyarrow as pa

        if self._partitions and not self._transforms:
            return self._read_base_arrow(index, columns)
        frame = backend.to_host(self.read_partition(index, columns))
        return pa.Table.from_pandas(frame, preserve_index=False)

    def _read_base_arrow(self, index: int, columns: Sequence[str] | None) -> Any:
        """The untransformed rows of file partition ``index`` as a pyarrow Table."""
        import pyarrow as pa

        tables = [self._read_piece(piece, columns) for piece in _merge_pieces(self._partitions[index])]
        if not tables:  # a dataset without row groups
            return self._target_schema(columns).empty_table()
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables)

    def _target_schema(self, columns: Sequence[str] | None) -> Any:
        """The arrow schema of ``columns`` (default: all) as this file dataset yields them."""
        import pyarrow as pa

        if columns is None:
            return self._arrow_schema
        names = _checked_columns(self._arrow_schema.names, columns, "the dataset")
        return pa.schema([self._arrow_schema.field(c) for c in names])

    def _file_columns(self, columns: Sequence[str] | None) -> list[str]:
        """The columns to read from the files for ``columns`` (partition keys are not in them)."""
        return [n for n in self._target_schema(columns).names if n not in self._partition_keys]

    def _conform(self, table: Any, piece: Piece, columns: Sequence[str] | None) -> Any:
        """A table read from ``piece`` as the dataset yields it: ``columns`` (default all) in
        the dataset's order, whatever the file's order, with the partition keys added and
        dictionary-encoded columns decoded. Used by the loader's reader too."""
        import pyarrow as pa

        target = self._target_schema(columns)
        keys = _partition_key_table(piece, target, table.num_rows)
        arrays = [keys.column(f.name) if f.name in keys.column_names else table.column(f.name) for f in target]
        return pa.Table.from_arrays([a if a.type == f.type else a.cast(f.type) for a, f in zip(arrays, target)],
                                    schema=target)

    def _read_base_partition(self, index: int, columns: Sequence[str] | None) -> Any:
        if self._partitions:
            pieces = self._partitions[index]
            if self.device == "cuda":
                frames = [self._read_piece_frame(p, columns) for p in pieces]
                return frames[0] if len(frames) == 1 else backend.concat(frames, ignore_index=True)
            return backend.from_arrow(self._read_base_arrow(index, columns), nullable=self._nullable)
        if self._frame is not None:
            start, stop = self._row_slices[index]
            part = self._frame.iloc[start:stop]
            return part[list(columns)] if columns is not None else part
        part = self._ddf.get_partition(index)
        part = part[list(columns)] if columns is not None else part
        frame = part.compute(scheduler="sync")
        return backend.to_device(frame, "cuda") if self.device == "cuda" and not backend.is_gpu_object(frame) else frame

    def _read_piece(self, piece: Piece, columns: Sequence[str] | None) -> Any:
        file_columns = self._file_columns(columns)
        try:
            # Local files are read by pyarrow's native reader (no Python file object, no GIL).
            fs = None if _is_local(self._fs) else self._fs
            table = backend.read_parquet_arrow(piece.path, file_columns, piece.row_groups, filesystem=fs)
            return self._conform(table, piece, columns)
        except Exception as exc:
            raise type(exc)(f"{piece.path}: could not read row groups {piece.row_groups}: {exc}") from exc

    def _read_piece_frame(self, piece: Piece, columns: Sequence[str] | None) -> Any:
        target = self._target_schema(columns)
        try:
            frame = backend.read_parquet(piece.path, self._file_columns(columns), piece.row_groups, device=self.device)
        except Exception as exc:
            raise type(exc)(f"{piece.path}: could not read row groups {piece.row_groups}: {exc}") from exc
        keys = _partition_key_table(piece, target, len(frame))
        if keys.num_columns:
            key_frame = backend.from_arrow(keys, self.device)
            for name in keys.column_names:
                frame[name] = key_frame[name]
            frame = frame[target.names]
        return frame

    def to_iter(self, columns: Sequence[str] | None = None) -> Iterator[Any]:
        """Yield one partition at a time (memory is bounded by the partition size)."""
        for i in range(self.npartitions):
            yield self.read_partition(i, columns)

    def compute(self) -> Any:
        """All rows as one DataFrame (only for data that fits in memory)."""
        return backend.concat(list(self.to_iter()), ignore_index=True)

    def head(self, n: int = 5) -> Any:
        return self.read_partition(0).head(n)

    def meta(self) -> Any:
        """An empty DataFrame with the columns and dtypes this dataset yields."""
        if self._partitions:
            empty = backend.from_arrow(self._arrow_schema.empty_table(), self.device, self._nullable)
        elif self._frame is not None:
            empty = self._frame.iloc[:0]
        else:
            empty = self._ddf._meta
        if self._transforms and self._transforms[0].input_columns is not None:
            empty = empty[list(self._transforms[0].input_columns)]
        for transform in self._transforms:
            empty = transform.function(empty)
        return empty

    def to_ddf(self, columns: Sequence[str] | None = None) -> Any:
        """A Dask DataFrame over the partitions (transforms applied lazily in each task)."""
        import dask.dataframe as dd

        if self._ddf is not None and not self._transforms:
            return self._ddf[list(columns)] if columns is not None else self._ddf
        import dask

        meta = self.meta()
        meta = meta[list(columns)] if columns is not None else meta
        # The partitions keep the dtypes read_partition gives them (no string[pyarrow] conversion).
        # from_delayed over to_delayed: the reader (and a workflow in it) is one shared key, so a
        # worker builds its lookup tables once, not once per partition.
        with dask.config.set({"dataframe.convert-string": False}):
            return dd.from_delayed(self.to_delayed(columns), meta=meta, verify_meta=False)

    def to_delayed(self, columns: Sequence[str] | None = None) -> list[Any]:
        """One Dask delayed object per partition."""
        from tabloader.scheduler import shared_calls

        return shared_calls(_PartitionReader(self, columns), [(i,) for i in range(self.npartitions)], "read")

    def _map_partitions_compute(self, function: Callable[[Any], Any], desc: str, progress: bool = False) -> list:
        import dask

        from tabloader.scheduler import compute_tasks

        tasks = [dask.delayed(function)(part) for part in self.to_delayed()]
        return compute_tasks(tasks, desc, progress=progress)

    # --- transforms -------------------------------------------------------------------------
    def with_transform(self, function: Callable[[Any], Any], schema: Schema,
                       input_columns: Sequence[str] | None = None, preserves_rows: bool = True) -> "Dataset":
        """A new Dataset that applies ``function`` to each partition as it is read.

        ``schema`` is the schema of the transformed rows; ``input_columns`` the columns the
        function reads (the reader loads only those).
        """
        new = object.__new__(Dataset)
        new.__dict__.update(self.__dict__)
        if self._transforms and input_columns is not None:
            input_columns = None  # the first transform decides which columns are read
        new._transforms = self._transforms + (PartitionTransform(
            function, tuple(input_columns) if input_columns is not None else None, preserves_rows),)
        new._schema = schema
        return new

    @property
    def is_transformed(self) -> bool:
        return bool(self._transforms)

    # --- writing ----------------------------------------------------------------------------
    def to_parquet(self, path: str, output_files: int | None = None, shuffle: bool = False,
                   row_group_size: int | None = None, overwrite: bool = False, seed: int | None = None,
                   progress: bool = True, compression: str = "snappy") -> str:
        """Write the rows as parquet files plus ``_schema.json``, atomically.

        The directory is assembled under a temporary name and renamed when every file is
        complete, so a failure never leaves a directory that looks complete.

        Args:
            path: output directory (local or fsspec URL).
            output_files: number of files (default: one per partition, at most that many).
            shuffle: shuffle rows within each partition and the order of partitions.
            row_group_size: rows per parquet row group (default: pyarrow's).
            overwrite: replace an existing directory (only after the new one is complete).
            seed: seed of the shuffle.
            progress: show a progress bar.

        Example:
            >>> import pandas as pd, tabloader as tl, tempfile, os
            >>> out = os.path.join(tempfile.mkdtemp(), "out")
            >>> _ = tl.Dataset(pd.DataFrame({"a": range(5)})).to_parquet(out, progress=False)
            >>> tl.Dataset(out).num_rows
            5
        """
        from tabloader.scheduler import compute_tasks, shared_calls

        n_files = min(self.npartitions if output_files is None else output_files, self.npartitions)
        if n_files < 1:
            raise ValueError(f"output_files must be >= 1, got {output_files}")
        order = np.arange(self.npartitions)
        if shuffle:
            order = np.random.default_rng(seed).permutation(order)
        groups = [g.tolist() for g in np.array_split(order, n_files)]
        arrow_schema = _arrow_schema_of(self.meta(), self.schema)
        with atomic_directory(path, overwrite=overwrite) as tmp:
            writer = _FileWriter(self, arrow_schema, row_group_size, compression, shuffle, seed)
            tasks = shared_calls(writer, [(group, join(tmp, f"part_{i:05d}.parquet")) for i, group in enumerate(groups)],
                                 "write")
            compute_tasks(tasks, f"writing {path}", progress=progress)
            self.schema.save(join(tmp, SCHEMA_FILE_NAME))
        return path


class _PartitionReader:
    """A picklable callable reading one partition (for Dask tasks)."""

    def __init__(self, dataset: Dataset, columns: Sequence[str] | None) -> None:
        self.dataset, self.columns = dataset, columns

    def __call__(self, index: int) -> Any:
        return self.dataset.read_partition(index, self.columns)


class _FileWriter:
    """Streams a group of partitions into one parquet file (one partition in memory at a time)."""

    def __init__(self, dataset: Dataset, arrow_schema: Any, row_group_size: int | None, compression: str,
                 shuffle: bool, seed: int | None) -> None:
        self.dataset, self.arrow_schema = dataset, arrow_schema
        self.row_group_size, self.compression = row_group_size, compression
        self.shuffle, self.seed = shuffle, seed

    def __call__(self, partitions: list[int], path: str) -> int:
        import pyarrow as pa
        import pyarrow.parquet as pq

        fs, fs_path = filesystem(path)
        rows = 0
        # Local files are written by pyarrow's native writer (no Python file object, no GIL). The
        # file is opened here, not by the writer: a writer whose close fails (a full disk) leaves
        # its own file open until garbage collection, holding the space of the deleted temporary.
        sink = pa.OSFile(fs_path, "wb") if _is_local(fs) else fs.open(fs_path, "wb")
        with sink as f, pq.ParquetWriter(f, self.arrow_schema, compression=self.compression) as w:
            for index in partitions:
                frame = backend.to_host(self.dataset.read_partition(index))
                if self.shuffle:
                    rng = np.random.default_rng(None if self.seed is None else [self.seed, index])
                    frame = frame.take(rng.permutation(len(frame)))
                table = pa.Table.from_pandas(frame, preserve_index=False)
                w.write_table(_cast_to(table, self.arrow_schema, path), row_group_size=self.row_group_size)
                rows += len(frame)
        return rows


def _cast_to(table: Any, schema: Any, path: str) -> Any:
    table = table.select(schema.names)
    if table.schema.equals(schema):
        return table
    try:
        return table.cast(schema)
    except Exception as exc:
        raise TypeError(f"{path}: a partition does not match the output schema: {exc}") from exc


def _arrow_schema_of(frame: Any, schema: Schema) -> Any:
    import pyarrow as pa

    if backend.is_gpu_object(frame):
        return frame.to_arrow().schema.remove_metadata()
    arrow_schema = pa.Schema.from_pandas(frame, preserve_index=False)
    # Columns of an empty frame with object dtype (Python lists, strings) have no element type:
    # take it from the dataset's schema, else call them strings.
    fields = [pa.field(f.name, _arrow_type_for(schema[f.name] if f.name in schema else None))
              if pa.types.is_null(f.type) else f for f in arrow_schema]
    return pa.schema(fields, metadata=_portable_pandas_metadata(arrow_schema))


def _portable_pandas_metadata(arrow_schema: Any) -> dict | None:
    """pandas' metadata (it restores ``Int64``, ``boolean``... on read) that pandas can read back.

    pandas records an arrow-backed list column as ``list<item: int64>[pyarrow]``, which its own
    ``read_parquet`` then fails to parse; such columns are recorded as ``object`` instead (the
    arrow type in the file says the rest).
    """
    import json

    import pyarrow as pa

    meta = arrow_schema.pandas_metadata
    if meta is None:
        return None
    nested = {f.name for f in arrow_schema if pa.types.is_nested(f.type) or pa.types.is_null(f.type)}
    for col in meta.get("columns", []):
        if col.get("field_name", col.get("name")) in nested:
            col["pandas_type"], col["numpy_type"], col["metadata"] = "object", "object", None
    return {b"pandas": json.dumps(meta).encode()}


def _arrow_type_for(column: Any) -> Any:
    import pyarrow as pa

    value_type = pa.string()
    if column is not None and column.dtype not in (None, "string", "object", "str"):
        try:
            value_type = pa.from_numpy_dtype(np.dtype(column.dtype))
        except (TypeError, ValueError, NotImplementedError, pa.ArrowException):
            pass
    return pa.list_(value_type) if column is not None and column.is_list else value_type


# --- helpers ------------------------------------------------------------------------------
def _parse_part_size(part_size: int | str) -> int:
    from dask.utils import parse_bytes

    try:
        if isinstance(part_size, bool) or not isinstance(part_size, (str, int, float, np.integer, np.floating)):
            raise TypeError(f"expected a string or a number, got {type(part_size).__name__}")
        if isinstance(part_size, str) and not any(ch.isdigit() for ch in part_size):
            raise ValueError("no number in it")  # dask reads '' and 'MB' as one unit
        size = int(part_size) if not isinstance(part_size, str) else parse_bytes(part_size)
    except (ValueError, TypeError, OverflowError) as exc:
        raise ValueError(f"part_size={part_size!r} is not a size such as '128MB' or 1000000 ({exc})") from None
    if size <= 0:
        raise ValueError(f"part_size must be positive, got {part_size!r}")
    return size


def _dataset_device(device: str | None) -> str:
    if device is None:
        return "cuda" if backend.cudf_available() else "cpu"
    resolved = backend.resolve_device(device)
    if resolved == "cuda":
        backend.cudf()  # datasets on the GPU are cuDF frames: fail early with the install hint
    return resolved


def _is_dask_frame(obj: Any) -> bool:
    return type(obj).__module__.split(".")[0] in ("dask", "dask_expr", "dask_cudf") and hasattr(obj, "npartitions")


def _has_glob(path: str) -> bool:
    return any(ch in path for ch in "*?[")


def _is_data_file(path: str) -> bool:
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return not name.startswith(("_", "."))


def _resolve_paths(source: Any) -> tuple[list[str], Any, str | None, list[str]]:
    """Expand paths, directories and globs into a sorted file list; also the data directory,
    and for each file the folder it was found under (its ``key=value`` subfolders below that
    folder are hive partitions)."""
    if isinstance(source, (str, os.PathLike)):
        source = [source]
    if not isinstance(source, (list, tuple)) or not source:
        raise TypeError(f"Dataset source must be a path, a list of paths or a DataFrame, got {type(source).__name__}")
    files: list[str] = []
    bases: list[str] = []
    fs = None
    directory = None
    for item in source:
        item = str(item)
        fs, path = filesystem(item)
        if _has_glob(path):
            matched = sorted(p for p in fs.glob(path) if fs.isfile(p) and _is_data_file(p))
            if not matched:
                raise FileNotFoundError(f"no files match {item!r}")
            files += matched
            bases += [re.split(r"[*?\[]", path, maxsplit=1)[0].rsplit("/", 1)[0]] * len(matched)
            directory = directory or matched[0].rsplit("/", 1)[0]
        elif fs.isdir(path):
            found = sorted(p for p in fs.find(path) if _is_data_file(p) and not _in_hidden_dir(p, path))
            if not found:
                raise FileNotFoundError(f"directory {item!r} has no data files")
            files += found
            bases += [path.rstrip("/")] * len(found)
            directory = directory or path
        elif fs.exists(path):
            files.append(path)
            bases.append(path.rsplit("/", 1)[0])
            directory = directory or path.rsplit("/", 1)[0]
        else:
            raise FileNotFoundError(f"no such file or directory: {item!r}")
    return files, fs, directory, bases


def _in_hidden_dir(path: str, root: str) -> bool:
    rel = path[len(root.rstrip("/")) + 1:]
    return any(part.startswith((".", "_")) for part in rel.split("/")[:-1])


def _infer_engine(paths: Sequence[str]) -> str:
    engines = {_EXTENSIONS.get(os.path.splitext(p.removesuffix(".gz"))[1].lower()) for p in paths}
    engines.discard(None)
    if len(engines) > 1:
        raise ValueError(f"the files mix parquet and CSV ({paths[0]} ...); pass engine= and one kind of file")
    return engines.pop() if engines else "parquet"


def _read_one_metadata(path: str, fs: Any) -> Any:
    import pyarrow.parquet as pq

    try:
        with fs.open(path, "rb") as f:
            return pq.ParquetFile(f).metadata
    except Exception as exc:
        raise ValueError(f"{path} is not a readable parquet file: {exc}") from exc


def _fixed_widths(arrow_schema: Any) -> dict[str, int]:
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


def _in_memory_bytes(row_group: Any, widths: dict[str, int]) -> int:
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


def _for_each_file(read: Callable[[str], Any], paths: Sequence[str]) -> list:
    """``read(path)`` for every path, on threads (footers and headers: mostly waiting on I/O)."""
    if len(paths) == 1:
        return [read(paths[0])]
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(paths))) as pool:
        return list(pool.map(read, paths))


def _check_same_schema(paths: Sequence[str], schemas: Sequence[dict[str, Any]]) -> None:
    """Every file must have the columns and types (name -> type; None when unknown) of the
    first, in any order; the error names both files."""
    reference = schemas[0]
    for path, fields in zip(paths[1:], schemas[1:]):
        missing = [c for c in reference if c not in fields]
        extra = [c for c in fields if c not in reference]
        changed = [f"{c} ({reference[c]} vs {fields[c]})" for c in reference if c in fields and reference[c] != fields[c]]
        if missing or extra or changed:
            details = "; ".join(filter(None, [
                f"missing columns {missing}" if missing else "",
                f"extra columns {extra}" if extra else "",
                f"different types: {', '.join(changed)}" if changed else ""]))
            raise SchemaMismatchError(f"{path} does not match {paths[0]}: {details}")


# --- file layouts: hive keys, column selection and order, nulls, types ------------------------
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"  # how Spark, Hive and pyarrow write a null partition key


def _hive_partitions(paths: Sequence[str], bases: Sequence[str]) -> tuple[dict[str, Any], list[tuple]]:
    """The hive partition keys of each file: the ``name=value`` folders between the folder it
    was found under and the file.

    A key's values are typed as pyarrow's hive partitioning types them: int32 when every value
    parses as one (arrow's own cast decides), else string; ``__HIVE_DEFAULT_PARTITION__`` is
    null. Returns the key types (name -> arrow type) and per file its ``(name, value)`` pairs.
    """
    from urllib.parse import unquote

    import pyarrow as pa

    found = []
    for path, base in zip(paths, bases):
        folders = path[len(base):].strip("/").split("/")[:-1] if path.startswith(base) else []
        found.append([tuple(unquote(part) for part in folder.split("=", 1)) for folder in folders if "=" in folder])
    types: dict[str, Any] = {}
    typed: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(k for keys in found for k, _ in keys):
        values = sorted({v for keys in found for k, v in keys if k == name and v != HIVE_NULL})
        try:
            parsed = pa.array(values, pa.string()).cast(pa.int32())
        except pa.ArrowInvalid:
            parsed = pa.array(values, pa.string())
        types[name], typed[name] = parsed.type, dict(zip(values, parsed.to_pylist()))
    return types, [tuple((k, typed[k].get(v)) for k, v in keys) for keys in found]


def _file_fields(arrow_schema: Any, path: str, key_fields: dict[str, Any]) -> dict[str, Any]:
    """Name -> type of a file's columns as they are read: dictionary-encoded columns decoded,
    pandas' stored index left out. A column named like a partition key is refused."""
    fields = {f.name: _decoded(f.type) for f in arrow_schema if not f.name.startswith("__index_level_")}
    clash = [k for k in key_fields if k in fields]
    if clash:
        raise SchemaMismatchError(f"{path}: column(s) {clash} are in the file and also the names of partition "
                                  "folders (name=value) of this dataset; rename the folders or the columns")
    return fields


def _decoded(arrow_type: Any) -> Any:
    """The type a column is read as: dictionary-encoded values (also list elements) decoded,
    so that every partition, and the meta, has the values' dtype rather than a categorical."""
    import pyarrow as pa

    if pa.types.is_dictionary(arrow_type):
        return arrow_type.value_type
    if (pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)) and pa.types.is_dictionary(arrow_type.value_type):
        field = arrow_type.value_field.with_type(arrow_type.value_type.value_type)
        return pa.list_(field) if pa.types.is_list(arrow_type) else pa.large_list(field)
    return arrow_type


def _checked_columns(available: Sequence[Any], columns: Sequence[str] | None, where: str) -> list:
    """``columns`` (by default all of ``available``), each checked to be in ``where``."""
    available = list(available)
    if columns is None:
        return available
    missing = [c for c in columns if c not in available]
    if missing:
        raise KeyError(f"columns={missing} are not in {where}; its columns are {available}")
    return list(columns)


def _select(frame: Any, columns: Sequence[str] | None, where: str) -> Any:
    return frame if columns is None else frame[_checked_columns(frame.columns, columns, where)]


def _columns_that_may_hold_nulls(metadata: Sequence[Any], arrow_schema: Any, partitions: Sequence[tuple]) -> frozenset[str]:
    """The integer and boolean columns that may hold a null somewhere in the dataset.

    Decided once, from the footers, so that every partition (also one without a null) and the
    meta read such a column as the same nullable dtype. A row group may hold nulls when its
    statistics count some or do not say; a column the file declares required holds none.
    """
    candidates = {f.name for f in arrow_schema if backend.has_nullable_dtype(f.type)}
    found = {name for keys in partitions for name, value in keys if value is None and name in candidates}
    for m in metadata:
        leaves = [m.schema.column(j) for j in range(m.num_columns)]
        optional = [(j, leaf.path) for j, leaf in enumerate(leaves)
                    if leaf.path in candidates and leaf.max_definition_level > 0]
        for i in range(m.num_row_groups):
            row_group = m.row_group(i)
            for j, name in optional:
                if name not in found and _may_hold_nulls(row_group.column(j).statistics):
                    found.add(name)
    return frozenset(found)


def _may_hold_nulls(statistics: Any) -> bool:
    return statistics is None or not statistics.has_null_count or statistics.null_count > 0


def _partition_key_table(piece: Piece, target: Any, num_rows: int) -> Any:
    """The partition key columns among the fields of ``target``, ``num_rows`` rows of the
    values of ``piece`` (a table without columns when there are none)."""
    import pyarrow as pa

    keys = dict(piece.partition)
    fields = [f for f in target if f.name in keys]
    if not fields:
        return pa.table({})
    repeat = pa.array(np.zeros(num_rows, dtype=np.int32))
    return pa.table({f.name: pa.array([keys[f.name]], f.type).take(repeat) for f in fields})


def _refuse_unsupported_types(arrow_schema: Any, where: str) -> None:
    """Refuse, before anything is read, columns of a type no reader or operator handles."""
    from tabloader.schema import is_supported_arrow_type

    for field in arrow_schema:
        if not is_supported_arrow_type(field.type):
            raise TypeError(
                f"{where}: column {field.name!r} has type {field.type}, which tabloader does not read (it reads "
                "numbers, booleans, strings, binary, decimals, dates, times, timestamps and lists of those; not "
                "structs, maps or lists of lists): leave it out with Dataset(..., columns=[...]), or flatten it "
                "first (for instance with pyarrow.Table.flatten for a struct)")


# --- CSV ------------------------------------------------------------------------------------
# Arguments of Dask's read_csv that pandas' does not take (left out when reading a header).
_DASK_ONLY_CSV_ARGS = ("blocksize", "sample", "sample_rows", "assume_missing", "include_path_column")


def _read_csv(paths: Sequence[str], urls: Sequence[str], part_size: int, columns: Sequence[str] | None,
              read_kwargs: dict) -> Any:
    """CSV files as a Dask DataFrame with the dtypes parquet sources have.

    Each file's header is read first: a file missing a column, or ordering them differently
    (Dask would read its later blocks with the first file's header), is refused naming it.
    Values are parsed with pandas' nullable dtypes, so an integer column with blanks is
    ``Int64`` in every block (pandas alone makes it float64, merging integers above 2**53,
    and only in the blocks with a blank); nullable floats and strings go back to float64 and
    ``str``. CSV has no statistics telling which columns have blanks: every integer column is
    ``Int64`` and every boolean one ``boolean``.
    """
    import dask
    import dask.dataframe as dd

    header_kwargs = {k: v for k, v in read_kwargs.items() if k not in _DASK_ONLY_CSV_ARGS}
    headers = _for_each_file(lambda url: _csv_header(url, header_kwargs), urls)
    _check_same_schema(paths, [dict.fromkeys(header) for header in headers])
    for path, header in zip(paths[1:], headers[1:]):
        if header != headers[0]:
            raise SchemaMismatchError(f"{path} orders its columns differently from {paths[0]} ({header} vs "
                                      f"{headers[0]}); CSV files of one dataset must have the same header")
    names = _checked_columns(headers[0], columns, paths[0])
    # Keep pandas' own string dtype (as parquet sources have), not Dask's string[pyarrow].
    with dask.config.set({"dataframe.convert-string": False}):
        ddf = dd.read_csv(list(urls), blocksize=part_size, **{"dtype_backend": "numpy_nullable", **read_kwargs})
        ddf = ddf[names] if columns is not None else ddf
        usual = {c: _usual_dtype(d) for c, d in ddf.dtypes.items() if _usual_dtype(d) is not None}
        return ddf.astype(usual) if usual else ddf


def _csv_header(url: str, kwargs: dict) -> list:
    try:
        return list(pd.read_csv(url, **{**kwargs, "nrows": 0}).columns)
    except Exception as exc:
        raise ValueError(f"{url}: could not read its CSV header: {exc}") from exc


def _usual_dtype(dtype: Any) -> Any:
    """numpy floats for pandas' nullable floats and ``str`` for its NA-string dtype (the dtypes
    parquet sources have); None for dtypes to keep."""
    if isinstance(dtype, (pd.Float32Dtype, pd.Float64Dtype)):
        return dtype.numpy_dtype
    if isinstance(dtype, pd.StringDtype) and dtype.na_value is pd.NA:
        return "str"
    return None


def _is_local(fs: Any) -> bool:
    from fsspec.implementations.local import LocalFileSystem

    return isinstance(fs, LocalFileSystem)


def _merge_pieces(pieces: Sequence[Piece]) -> list[Piece]:
    """Consecutive row groups of one file as one piece (one open and footer parse per file)."""
    merged: list[Piece] = []
    for piece in pieces:
        last = merged[-1] if merged else None
        if last is not None and last.path == piece.path and last.row_groups is not None and piece.row_groups is not None:
            merged[-1] = dataclasses.replace(last, row_groups=last.row_groups + piece.row_groups,
                                             num_rows=last.num_rows + piece.num_rows, nbytes=last.nbytes + piece.nbytes)
        else:
            merged.append(piece)
    return merged


def _group_pieces(pieces: Sequence[Piece], part_size: int) -> list[list[Piece]]:
    """Consecutive row groups, across files, up to ``part_size`` bytes per partition."""
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
