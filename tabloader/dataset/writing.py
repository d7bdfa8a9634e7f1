"""Writing a dataset as parquet files plus ``_schema.json``, atomically.

The directory is assembled under a temporary name and renamed when every file is complete
(:func:`tabloader.atomic_files.atomic_directory`); each output file is written by one Dask task
streaming its group of partitions, one partition in memory at a time (a GPU file with naive
timestamps is written whole: see :class:`_DeviceFileWriter`). A source with Dask tasks of its own
(a Dask DataFrame, a frame scattered to a cluster) written a file per partition, or under a
distributed client, gives each task its partitions computed by Dask from one graph (see
:class:`_Partitions`). Host partitions (pandas) are written by pyarrow's writer, GPU partitions
(cuDF) by cuDF's writer, from the device: a
partition never travels to the host to be written -- except those of a dataset with dates or
time-zoned timestamps, which cuDF's writer would give other types than the CPU's (dates as
timestamps, zones lost): they are copied to the host and written by pyarrow.

Example:
    >>> import os, tempfile, pandas as pd, pyarrow.parquet as pq, tabloader as tl
    >>> out = os.path.join(tempfile.mkdtemp(), "out")
    >>> _ = write_parquet(tl.Dataset(pd.DataFrame({"a": range(5)}), part_size=16), out, progress=False)
    >>> sorted(os.listdir(out)), pq.read_table(out).num_rows
    (['_schema.json', 'part_00000.parquet', 'part_00001.parquet', 'part_00002.parquet'], 5)
"""

from __future__ import annotations

import json
import warnings
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np

from tabloader import backend
from tabloader.atomic_files import atomic_directory
from tabloader.dataset.dictionary_encoding import dictionary_columns
from tabloader.dataset.hive_folders import check_keys, split_by_keys
from tabloader.dataset.source import conform_dtypes
from tabloader.filesystems import filesystem, is_local, join
from tabloader.schema import SCHEMA_FILE_NAME, Schema

if TYPE_CHECKING:
    from tabloader.dataset.core import Dataset


def write_parquet(dataset: "Dataset", path: str, output_files: int | None = None, shuffle: bool = False,
                  row_group_size: int | None = None, overwrite: bool = False, seed: int | None = None,
                  progress: bool = True, compression: str = "snappy", partition_on: Sequence[str] | None = None) -> str:
    """Write the rows of ``dataset`` under directory ``path``: see :meth:`Dataset.to_parquet`."""
    from tabloader.dataset.core import delayed_from_source
    from tabloader.scheduler import active_client, compute_tasks, shared_calls

    n_files = min(dataset.npartitions if output_files is None else output_files, dataset.npartitions)
    if n_files < 1:
        raise ValueError(f"output_files must be >= 1, got {output_files}")
    order = np.arange(dataset.npartitions)
    if shuffle:
        order = np.random.default_rng(seed).permutation(order)
    groups = [g.tolist() for g in np.array_split(order, n_files)]
    # A source with Dask tasks of its own gives its partitions from one graph (work they share
    # runs once) when each file holds one partition, or under a distributed client (a task
    # computing its partitions on the cluster waits for threads that tasks like it hold). Else
    # a file's task, which would hold its partitions all at once, computes them one at a time.
    frames = (delayed_from_source(dataset) if n_files == dataset.npartitions or active_client() is not None
              else None)
    # Given frames, the writer holds no dataset: it would copy the source's graph into the writer.
    partitions = _Partitions(dataset if frames is None else None, shuffle, seed)
    meta = dataset.meta()
    if partition_on is not None:
        writer: Any = _partitioned_writer(dataset, meta, partition_on, path, row_group_size, compression, partitions)
    elif backend.is_gpu_object(meta) and not _written_from_the_host(meta, dataset.schema):
        writer = _DeviceFileWriter(partitions, meta.dtypes, row_group_size, cudf_compression(compression))
    elif backend.is_gpu_object(meta):
        writer = _FileWriter(partitions, _host_arrow_schema(meta, dataset.schema), row_group_size, compression)
    else:
        writer = _FileWriter(partitions, output_arrow_schema(meta, dataset.schema), row_group_size, compression)
    with atomic_directory(path, overwrite=overwrite) as tmp:
        files = [join(tmp, f"part_{i:05d}.parquet") for i in range(n_files)]
        # The source's frames are the inputs of the tasks of their files, so that one compute
        # computes their graph once (a shuffle feeding every partition runs once, not per partition).
        tasks = shared_calls(writer, [(group, file) if frames is None else (group, file, [frames[i] for i in group])
                                      for group, file in zip(groups, files)], "write")
        compute_tasks(tasks, f"writing {path}", progress=progress, device=dataset.device)
        dataset.schema.save(join(tmp, SCHEMA_FILE_NAME))
    return path


class _Partitions:
    """The partitions of a file's group, one at a time, on the dataset's device, their rows
    shuffled when asked: the order is drawn on the host from ``[seed, index]``, so a seed gives the
    same files on CPU and GPU, and whether a partition was read here or computed by Dask.

    Without ``computed`` frames, each partition is read here (one in memory at a time). A
    source with Dask tasks of its own (:func:`~tabloader.dataset.core.delayed_from_source`),
    written a file per partition or under a distributed client, gives them computed instead:
    the write task's inputs, so that one compute runs the source's graph once (under a client,
    a file's task then holds its partitions together). ``dataset`` is then None.
    """

    def __init__(self, dataset: "Dataset | None", shuffle: bool, seed: int | None) -> None:
        self.dataset, self.shuffle, self.seed = dataset, shuffle, seed

    def __call__(self, indexes: list[int], computed: list[Any] | None) -> Iterator[Any]:
        from tabloader.dataset.core import read_partition_naming_it
        from tabloader.scheduler import check_not_stopped

        for position, index in enumerate(indexes):
            check_not_stopped()
            frame = read_partition_naming_it(self.dataset, index) if computed is None else computed[position]
            yield _shuffled(frame, index, self.shuffle, self.seed)


class _FileWriter:
    """Streams a group of partitions into one parquet file (see :class:`_Partitions`)."""

    def __init__(self, partitions: _Partitions, arrow_schema: Any, row_group_size: int | None,
                 compression: str) -> None:
        self.partitions, self.arrow_schema = partitions, arrow_schema
        self.row_group_size, self.compression = row_group_size, compression

    def __call__(self, indexes: list[int], path: str, computed: list[Any] | None = None) -> int:
        fs, fs_path = filesystem(path)
        rows = 0
        # Local files are written by pyarrow's native writer (no Python file object, no GIL). The
        # file is opened here, not by the writer: a writer whose close fails (a full disk) leaves
        # its own file open until garbage collection, holding the space of the deleted temporary.
        sink = _open_sink(fs, fs_path)
        writer = None  # opened at the first partition, whose values choose the dictionary-encoded columns
        with sink as f:
            try:
                for frame in self.partitions(indexes, computed):
                    table = _cast_to(arrow_table(backend.to_host(frame)), self.arrow_schema, path)
                    if writer is None:
                        writer = self._parquet_writer(f, table)
                    writer.write_table(table, row_group_size=self.row_group_size)
                    rows += len(table)
                if writer is None:  # no partition: an empty file of the schema
                    writer = self._parquet_writer(f, None)
            finally:
                if writer is not None:
                    writer.close()
        return rows

    def _parquet_writer(self, sink: Any, first_table: Any) -> Any:
        """pyarrow's writer of one file into ``sink``, dictionary-encoding the columns
        :func:`dictionary_columns` picks from the file's ``first_table`` (all without one)."""
        import pyarrow.parquet as pq

        use_dictionary = True if first_table is None else dictionary_columns(first_table)
        return pq.ParquetWriter(sink, self.arrow_schema, compression=self.compression, use_dictionary=use_dictionary)


def _written_from_the_host(meta: Any, schema: Schema) -> list[str]:
    """The columns of a cuDF ``meta`` that cuDF's writer would not write as the CPU does, so that
    its partitions are written from the host: dates (cuDF holds them as ``datetime64[s]`` and
    writes timestamps) and time-zoned timestamps (written as naive beside a naive one, without
    their zone name otherwise)."""
    return [name for name, dtype in meta.dtypes.items()
            if getattr(dtype, "tz", None) is not None or _date_type(schema, name) is not None]


def _date_type(schema: Schema, name: str) -> Any:
    """The arrow date type the dataset's schema records for column ``name``, or None (timestamps,
    spelled ``datetime64[...]``, are no dates)."""
    import pyarrow as pa

    dtype = str(schema[name].dtype or "") if name in schema else ""
    return {"date32": pa.date32(), "date64": pa.date64()}.get(dtype.split("[")[0])


def _host_arrow_schema(meta: Any, schema: Schema) -> Any:
    """The CPU writer's arrow schema for the rows of a cuDF ``meta``: its host meta's, with the
    dates the dataset's schema records as dates (cuDF holds them as ``datetime64[s]``), in the
    arrow types and in pandas' metadata alike."""
    import pandas as pd

    host = backend.to_host(meta)
    dates = {name: pd.ArrowDtype(date) for name in host.columns if (date := _date_type(schema, name)) is not None}
    return output_arrow_schema(host.astype(dates), schema)


def _partitioned_writer(dataset: "Dataset", meta: Any, partition_on: Sequence[str], path: str,
                        row_group_size: int | None, compression: str, partitions: _Partitions) -> Any:
    if backend.is_gpu_object(meta):
        raise ValueError(f"partition_on: {path} would be written from a dataset on the GPU, and key=value folders "
                         "are written from the host only so far: read the data with device='cpu' to write them")
    keys = check_keys(meta, partition_on, f"the dataset written to {path}")
    schema = output_arrow_schema(meta.drop(columns=keys), dataset.schema)
    return _PartitionedFileWriter(partitions, schema, keys, row_group_size, compression)


class _PartitionedFileWriter(_FileWriter):
    """Streams a group of partitions into one file per combination of the keys' values, in its
    ``key=value`` folders (see :mod:`tabloader.dataset.hive_folders`), under the group's file
    name: ``dt=2024-12-01/part_00003.parquet`` holds that day's rows of group 3."""

    def __init__(self, partitions: _Partitions, arrow_schema: Any, keys: list[str], row_group_size: int | None,
                 compression: str) -> None:
        super().__init__(partitions, arrow_schema, row_group_size, compression)
        self.keys = keys

    def __call__(self, indexes: list[int], path: str, computed: list[Any] | None = None) -> int:
        directory, name = path.rsplit("/", 1)
        fs, _ = filesystem(path)
        sinks: dict[str, Any] = {}
        writers: dict[str, Any] = {}
        rows = 0
        try:
            for frame in self.partitions(indexes, computed):
                for folder, part in split_by_keys(backend.to_host(frame), self.keys):
                    table = _cast_to(arrow_table(part), self.arrow_schema, path)
                    if folder not in writers:
                        file_path = join(join(directory, folder), name)
                        fs_path = filesystem(file_path)[1]
                        fs.makedirs(fs_path.rsplit("/", 1)[0], exist_ok=True)
                        sinks[folder] = _open_sink(fs, fs_path)
                        writers[folder] = self._parquet_writer(sinks[folder], table)
                    writers[folder].write_table(table, row_group_size=self.row_group_size)
                    rows += len(part)
        finally:
            for folder in writers:
                writers[folder].close()
            for sink in sinks.values():
                sink.close()
        return rows


def _open_sink(fs: Any, fs_path: str) -> Any:
    """A file to write: local ones by pyarrow's native writer (no Python file object, no GIL)."""
    import pyarrow as pa

    return pa.OSFile(fs_path, "wb") if is_local(fs) else fs.open(fs_path, "wb")


# libcudf's default page fragment, in rows: the unit its parquet writer builds row groups from.
CUDF_FRAGMENT_ROWS = 5000


class _DeviceFileWriter:
    """Writes a group of cuDF partitions into one parquet file with cuDF's writer, from the device.

    The file's column types are those of the dataset's (cuDF) meta, ``dtypes``: a partition
    whose columns differ is cast, or refused naming the file and the column. The partitions are
    streamed through cuDF's chunked writer, one at a time, unless a timestamp column has no time
    zone: that writer marks every timestamp as adjusted to UTC (libcudf's default, which cuDF
    does not let its callers change), so pyarrow, Spark and DuckDB would read such a column as
    zoned where the CPU writes it naive. Those files are written whole by cuDF's one-table
    writer (``DataFrame.to_parquet``, which writes naive timestamps as naive), their partitions
    concatenated on the device first.

    cuDF's writer builds row groups from whole page fragments of 5,000 rows (libcudf's default, which
    cuDF does not let its callers change): a ``row_group_size`` below that gives row groups of up
    to 5,000 rows, and a warning says so.
    """

    def __init__(self, partitions: _Partitions, dtypes: Any, row_group_size: int | None,
                 compression: str | None) -> None:
        if row_group_size is not None and row_group_size < CUDF_FRAGMENT_ROWS:
            warnings.warn(f"row_group_size={row_group_size}: cuDF's parquet writer (a dataset on the GPU) makes row "
                          f"groups of whole {CUDF_FRAGMENT_ROWS:,}-row page fragments, so its row groups hold up to "
                          f"{CUDF_FRAGMENT_ROWS:,} rows; write from the CPU (device='cpu') for smaller ones",
                          UserWarning, stacklevel=4)
        self.partitions, self.dtypes = partitions, dtypes
        self.row_group_size, self.compression = row_group_size, compression
        self.whole = bool(_naive_timestamps(dtypes))

    def __call__(self, indexes: list[int], path: str, computed: list[Any] | None = None) -> int:
        fs, fs_path = filesystem(path)
        local = is_local(fs)
        sink = fs_path if local else fs.open(fs_path, "wb")  # local files: cuDF's native writer
        options = {"index": False, "compression": self.compression}
        if self.row_group_size is not None:
            options["row_group_size_rows"] = self.row_group_size
        frames = (conform_dtypes(frame, self.dtypes, path) for frame in self.partitions(indexes, computed))
        try:
            if self.whole:
                frame = backend.concat(list(frames), ignore_index=True)
                frame.to_parquet(sink, **options)
                return len(frame)
            return _write_chunks(backend.cudf().io.parquet.ParquetWriter(sink, **options), frames)
        finally:
            if not local:
                sink.close()


def _write_chunks(writer: Any, frames: Any) -> int:
    """Write ``frames`` with cuDF's chunked ``writer``, one at a time; the number of rows."""
    rows = 0
    try:
        for frame in frames:
            writer.write_table(frame)
            rows += len(frame)
    finally:
        writer.close()
    return rows


def _naive_timestamps(dtypes: Any) -> list[str]:
    """The columns of ``dtypes`` (name -> dtype) holding timestamps without a time zone."""
    return [name for name, dtype in dtypes.items()
            if getattr(dtype, "kind", "") == "M" and getattr(dtype, "tz", None) is None]


def _shuffled(frame: Any, index: int, shuffle: bool, seed: int | None) -> Any:
    """Partition ``index``, ``frame``, its rows shuffled when asked, in the order drawn from ``[seed, index]``."""
    if shuffle:
        order = np.random.default_rng(None if seed is None else [seed, index]).permutation(len(frame))
        frame = frame.take(backend.asarray(order, backend.frame_device(frame)))
    return frame


# cuDF's writer names its codecs differently from pyarrow's and knows fewer of them.
_CUDF_CODECS = {"snappy": "snappy", "zstd": "ZSTD", "lz4": "LZ4", "none": None}


def cudf_compression(compression: str | None) -> str | None:
    """cuDF's name of the parquet codec ``compression`` (pyarrow's names, as ``to_parquet`` takes).

    Example:
        >>> cudf_compression("zstd"), cudf_compression(None)
        ('ZSTD', None)
    """
    key = "none" if compression is None else str(compression).lower()
    if key not in _CUDF_CODECS:
        raise ValueError(f"compression={compression!r} is not one cuDF's parquet writer has (a dataset on the GPU is "
                         f"written by cuDF): choose one of {sorted(_CUDF_CODECS)}")
    return _CUDF_CODECS[key]


def arrow_table(frame: Any) -> Any:
    """A pandas partition as the arrow table ``pa.Table.from_pandas`` makes of it (NaN as null,
    no index), with numeric numpy columns wrapped rather than converted: a float column is
    scanned for NaN and wrapped as it is when it has none. pandas' conversion inspects and
    scans every column (14 ms for a 40-column partition of 393K rows against 3 ms).

    Example:
        >>> import pandas as pd
        >>> arrow_table(pd.DataFrame({"x": [1.5, float("nan")], "s": ["a", None]})).to_pydict()
        {'x': [1.5, None], 's': ['a', None]}
    """
    import pyarrow as pa

    if not (frame.columns.is_unique and all(isinstance(name, str) for name in frame.columns)):
        return pa.Table.from_pandas(frame, preserve_index=False)  # pandas names and refuses them
    arrays: dict[str, Any] = {}
    for name, dtype in frame.dtypes.items():
        if isinstance(dtype, np.dtype) and dtype.kind in "iuf":
            values = frame[name].to_numpy()
            arrays[name] = pa.array(values, from_pandas=bool(dtype.kind == "f" and np.isnan(values).any()))
    if len(arrays) == len(frame.columns):
        return pa.table(arrays)
    converted = pa.Table.from_pandas(frame[[c for c in frame.columns if c not in arrays]], preserve_index=False)
    return pa.table({name: arrays[name] if name in arrays else converted.column(name) for name in frame.columns})


def _cast_to(table: Any, schema: Any, path: str) -> Any:
    table = table.select(schema.names)
    if table.schema.equals(schema):
        return table
    try:
        return table.cast(schema)
    except Exception as exc:
        raise TypeError(f"{path}: a partition does not match the output schema: {exc}") from exc


def output_arrow_schema(meta: Any, schema: Schema) -> Any:
    """The arrow schema of the files written for rows like ``meta`` (an empty pandas frame:
    partitions are written from the host) whose :class:`~tabloader.schema.Schema` is
    ``schema``, with pandas' metadata when it restores dtypes (``Int64``, ``boolean``...) on read."""
    import pyarrow as pa

    arrow_schema = pa.Schema.from_pandas(meta, preserve_index=False)
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
