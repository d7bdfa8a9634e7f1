"""Dataset: one source of rows, the transforms applied as partitions are read, and a schema.

Example:
    >>> import pandas as pd, tabloader as tl
    >>> ds = tl.Dataset(pd.DataFrame({"a": [1, 2, 3]}), part_size=16)
    >>> ds.npartitions, ds.describe_partition(1), ds.read_partition_arrow(1).column("a").to_pylist()
    (2, 'rows [1, 3) of the DataFrame', [2, 3])
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterator, Mapping, Sequence


from tabloader import backend
from tabloader.dataset import iceberg
from tabloader.dataset.arrow import ArrowSource, is_arrow_data
from tabloader.dataset.csv import CsvSource
from tabloader.dataset.files import ENGINES, FileSet
from tabloader.dataset.frames import DaskSource, FrameSource
from tabloader.dataset.parquet import ParquetSource
from tabloader.dataset.source import Source, refuse_unsupported_types, select
from tabloader.schema import Schema, Tags
from tabloader.sizes import parse_size


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
            a pandas or cuDF DataFrame, a Dask DataFrame, Arrow data in memory (a pyarrow
            Table, a polars DataFrame, a DuckDB result: anything with ``__arrow_c_stream__``),
            or an Apache Iceberg table (a pyiceberg ``Table`` or ``DataScan``, or its folder).
        engine: ``"parquet"`` or ``"csv"``; inferred from file extensions when None.
        part_size: target in-memory size of a partition, such as ``"128MB"`` or a byte count;
            by default 128MB on the CPU and, on a GPU, 1/64 of its memory between 128MB and 1GB
            (:func:`tabloader.backend.default_part_size`: a GPU wants few large partitions).
        schema: a :class:`~tabloader.schema.Schema` (or the path of a schema JSON file) giving
            tags and properties; by default read from ``_schema.json`` beside the data, else
            inferred from the dtypes.
        device: ``"cpu"`` (pandas), ``"cuda"`` (cuDF) or None for cuDF when it is usable.
        columns: read only these columns, in this order (by default every column).
        partition_types: the types of hive partition keys (parquet ``key=value`` folders),
            instead of those inferred from their values: a dict (key name -> ``"string"``,
            ``"int32"``, ``"int64"``, ``"float64"``, ``"date32"``, ``"timestamp[us]"`` or that
            pyarrow type), or one of these types for every key (``"string"``: no inference).
        filters: read only the files whose partition keys (``key=value`` folders, a Delta
            table's partition columns) pass, as in ``pandas.read_parquet(filters=...)``: a list
            of ``(key, op, value)`` that must all hold, or a list of such lists any of which may
            hold; ops ``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``in``, ``not in``; values of
            the key's type (a date key takes ``"2024-12-01"`` too). Whole files are kept or
            dropped, the others never opened; a null key passes nothing. Rows are kept by
            other columns' values with ``ops.Filter`` in a workflow.
        **read_kwargs: passed to the CSV reader (``sep``, ``names``, ...).

    Parquet files are read as their writer (pyarrow, Spark, DuckDB, polars, pandas) left
    them: integer and boolean columns that may hold nulls (the files' statistics say so, or
    say nothing) are pandas nullable dtypes (``Int64``, ``boolean``...) in every partition,
    the others numpy; ``key=value`` folders (hive partitioning) become columns, typed as
    Spark, DuckDB and polars type them: integers, floats, dates (``dt=2024-01-31``) and
    timestamps (``2024-01-31 10:00:00``) when every value of the key parses as one, without
    leading zeros (``zip=01234`` stays a string), else strings (``partition_types`` overrides
    that; a key the files also store keeps their column's type); files may order their columns
    differently (the first file's order is used); dictionary-encoded columns are read as their
    values. Struct, map and list-of-list columns are refused here,
    naming the column: leave them out with ``columns=``. A Delta Lake table's folder is read as
    its current version (the files its log lists); Hudi table folders are refused.

    An Apache Iceberg table (``pip install "tabloader[iceberg]"``) is read as the data files
    pyiceberg plans for its current snapshot, or a scan's (``table.scan(snapshot_id=...,
    selected_fields=...)``: time travel, columns), partitioned by row group like any parquet,
    its columns matched in each file by field id (renamed, added and promoted columns come
    out as the table has them now). Its folder is read from its newest metadata file, only
    from inside the folder; a catalog's pointer is the truth (a folder cannot know about a
    rollback done in the catalog), so ``Dataset(catalog.load_table(name))`` is the exact way.
    Row-level deletes, and a scan's ``row_filter`` keeping only some rows of a file, are
    refused (see :mod:`tabloader.dataset.iceberg`).

    The rows come from a :attr:`source` (:class:`~tabloader.dataset.ParquetSource`,
    :class:`~tabloader.dataset.CsvSource`, :class:`~tabloader.dataset.FrameSource` or
    :class:`~tabloader.dataset.DaskSource`); a transformed dataset (a fitted workflow's
    ``transform``) applies its transforms to each partition as it is read.

    Example:
        >>> import pandas as pd, tabloader as tl
        >>> ds = tl.Dataset(pd.DataFrame({"x": range(10)}), part_size=16)
        >>> ds.npartitions, [len(p) for p in ds.to_iter()][:2]
        (5, [2, 2])

        Daily folders: ``dt`` is a date, ``zip`` kept a string, as ``partition_types`` asks:

        >>> import os, tempfile, pyarrow as pa, pyarrow.parquet as pq
        >>> root = tempfile.mkdtemp()
        >>> for dt, zip_code in [("2024-01-01", "10115"), ("2024-01-02", "01234")]:
        ...     os.makedirs(os.path.join(root, f"dt={dt}", f"zip={zip_code}"))
        ...     pq.write_table(pa.table({"x": [1.5]}), os.path.join(root, f"dt={dt}", f"zip={zip_code}", "p.parquet"))
        >>> ds = tl.Dataset(root, partition_types={"zip": "string"})
        >>> ds.schema["dt"].dtype, ds.schema["zip"].dtype, ds.head()["zip"].tolist()
        ('date32[day]', 'string', ['10115', '01234'])
    """

    def __init__(self, source: Any, engine: str | None = None, part_size: int | str | None = None,
                 schema: Schema | str | None = None, device: str | None = None,
                 columns: Sequence[str] | None = None, partition_types: Mapping[str, Any] | str | None = None,
                 filters: Any = None, **read_kwargs: Any) -> None:
        self.device = backend.resolve_frame_device(device)
        if self.device == "cuda":
            backend.ensure_rmm_pool()  # before the first partition is read: every cuDF buffer comes from it
        self.part_size = (backend.default_part_size(self.device) if part_size is None
                          else parse_size(part_size, "part_size"))
        if engine is not None and engine not in ENGINES:
            raise ValueError(f"unknown engine {engine!r}; expected one of {ENGINES}")
        self._source = _open_source(source, engine, self.part_size, self.device,
                                    [columns] if isinstance(columns, str) else columns, partition_types, filters,
                                    read_kwargs)
        self.engine = self._source.engine or engine
        self._transforms: tuple[PartitionTransform, ...] = ()
        self._progress = True  # the default of to_parquet's bar (a workflow's transform passes its own)
        sizes = self._source.partition_sizes()
        self._num_rows: int | None = None if sizes is None else sum(sizes)
        self._schema = self._infer_schema(schema)

    def _infer_schema(self, schema: Schema | str | None) -> Schema:
        if isinstance(schema, str):
            schema = Schema.load(schema)
        arrow_schema = self._source.arrow_schema
        refuse_unsupported_types(arrow_schema, self._source.describe())
        backend.refuse_device_types(arrow_schema, self.device, self._source.describe())
        widths = self._source.list_widths()  # vectors keep their width: lists={"emb": "schema"} works
        inferred = Schema(c.with_properties(value_count={"min": widths[c.name], "max": widths[c.name]})
                          if c.name in widths else c for c in Schema.from_arrow(arrow_schema))
        if schema is None:
            schema = self._source.saved_schema()
        if schema is None:
            return inferred
        # The data decides which columns exist, their dtypes and which are lists (the LIST tag
        # follows: a saved schema's own may disagree); the given schema adds roles.
        return Schema(_with_data_shape(schema[c.name], c) if c.name in schema else c for c in inferred)

    # --- properties -------------------------------------------------------------------------
    @property
    def source(self) -> Source:
        """Where the rows come from: files, a DataFrame or a Dask DataFrame, as partitions."""
        return self._source

    @property
    def schema(self) -> Schema:
        """Column names, dtypes, tags and properties of the rows this dataset yields."""
        return self._schema

    @property
    def paths(self) -> list[str]:
        """The data files (datasets of files only)."""
        return self._files().paths

    @property
    def source_dir(self) -> str:
        """The folder of the data files, where ``_schema.json`` is looked for (files only)."""
        return self._files().directory

    def _files(self) -> FileSet:
        if self._source.files is None:
            raise AttributeError(f"a Dataset of {self._source.summary} has no files")
        return self._source.files

    @property
    def npartitions(self) -> int:
        return self._source.npartitions

    @property
    def num_rows(self) -> int:
        """Number of rows (from parquet metadata when no transform can drop rows)."""
        if self._num_rows is None or not self._preserves_rows():
            counts = self._map_partitions_compute(len, "counting rows")
            if self._preserves_rows():
                self._num_rows = int(sum(counts))
            return int(sum(counts))
        return self._num_rows

    def _preserves_rows(self) -> bool:
        return all(t.preserves_rows for t in self._transforms)

    def __len__(self) -> int:
        return self.num_rows

    def __repr__(self) -> str:
        return (f"Dataset({self._source.summary}, {self.npartitions} partition(s), device={self.device!r}, "
                f"columns={self.schema.column_names}{', transformed' if self._transforms else ''})")

    # --- reading ----------------------------------------------------------------------------
    def partition_sizes(self) -> list[int] | None:
        """Rows per partition when known without reading data (file or frame sources)."""
        return self._source.partition_sizes() if self._preserves_rows() else None

    def read_partition(self, index: int, columns: Sequence[str] | None = None) -> Any:
        """Partition ``index`` as a DataFrame (pandas, or cuDF on the GPU), transforms applied."""
        return _transformed(self._source.read_frame(index, _read_columns(self._transforms, columns)),
                            self._transforms, columns)

    def read_partition_arrow(self, index: int, columns: Sequence[str] | None = None, memory_pool: Any = None) -> Any:
        """Partition ``index`` as a pyarrow Table, transforms applied.

        Untransformed parquet is read without pandas, decoded into ``memory_pool`` (a pyarrow
        ``MemoryPool``; default: pyarrow's). The loader passes a pool that keeps its pages.

        Example:
            >>> import pandas as pd, pyarrow as pa, tabloader as tl
            >>> ds = tl.Dataset(pd.DataFrame({"a": [1, 2], "b": [0.5, 1.5]}))
            >>> ds.read_partition_arrow(0, ["b"], memory_pool=pa.default_memory_pool()).to_pydict()
            {'b': [0.5, 1.5]}
        """
        import pyarrow as pa

        if not self._transforms:
            return self._source.read_arrow(index, columns, memory_pool)
        frame = backend.to_host(self.read_partition(index, columns))
        return pa.Table.from_pandas(frame, preserve_index=False)

    def describe_partition(self, index: int) -> str:
        """What partition ``index`` is read from (its files, or its rows), for messages."""
        return self._source.describe(index)

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
        empty = self._source.meta()
        if self._transforms and self._transforms[0].input_columns is not None:
            empty = empty[list(self._transforms[0].input_columns)]
        for transform in self._transforms:
            empty = transform.function(empty)
        return empty

    def to_ddf(self, columns: Sequence[str] | None = None) -> Any:
        """A Dask DataFrame over the partitions (transforms applied lazily in each task): a
        dask-cudf collection for a dataset on the GPU."""
        import dask
        import dask.dataframe as dd

        ddf = self._source.dask_frame()
        if ddf is not None and not self._transforms:
            return ddf[list(columns)] if columns is not None else ddf
        meta = self.meta()
        meta = meta[list(columns)] if columns is not None else meta
        if backend.is_gpu_object(meta):
            backend.dask_cudf()  # registers dask-cudf's collection for cuDF metas (from_delayed then builds one)
        # The partitions keep the dtypes read_partition gives them (no string[pyarrow] conversion).
        # from_delayed over to_delayed: the reader (and a workflow in it) is one shared key, so a
        # worker builds its lookup tables once, not once per partition.
        with dask.config.set({"dataframe.convert-string": False}):
            return dd.from_delayed(self.to_delayed(columns), meta=meta, verify_meta=False)

    def to_delayed(self, columns: Sequence[str] | None = None) -> list[Any]:
        """One Dask delayed object per partition."""
        from tabloader.scheduler import shared_calls

        frames = delayed_from_source(self, columns)
        if frames is not None:
            return frames
        return shared_calls(_PartitionReader(self, columns), [(i,) for i in range(self.npartitions)], "read")

    def _map_partitions_compute(self, function: Callable[[Any], Any], desc: str, progress: bool = False) -> list:
        import dask

        from tabloader.scheduler import compute_tasks

        tasks = [dask.delayed(function)(part) for part in self.to_delayed()]
        return compute_tasks(tasks, desc, progress=progress, device=self.device)

    # --- transforms -------------------------------------------------------------------------
    def with_transform(self, function: Callable[[Any], Any], schema: Schema,
                       input_columns: Sequence[str] | None = None, preserves_rows: bool = True,
                       progress: bool | None = None) -> "Dataset":
        """A new Dataset that applies ``function`` to each partition as it is read.

        ``schema`` is the schema of the transformed rows; ``input_columns`` the columns the
        function reads (the reader loads only those); ``progress`` the default of
        :meth:`to_parquet`'s bar (None: this dataset's).
        """
        if self._transforms and input_columns is not None:
            input_columns = None  # the first transform decides which columns are read
        return self._replaced(_transforms=self._transforms + (PartitionTransform(
            function, tuple(input_columns) if input_columns is not None else None, preserves_rows),), _schema=schema,
            _progress=self._progress if progress is None else progress)

    def with_coded_strings(self, columns: Sequence[str]) -> "Dataset":
        """This dataset, with the string ``columns`` read as dictionary codes (an arrow dictionary
        ``pd.ArrowDtype``) where its files store them so, when nothing but the categorical encoders
        read them: a workflow asks it for the columns only its encoders consume
        (:attr:`tabloader.plan.Plan.encoded_only_columns`), which then skip decoding a string
        per row. Other datasets, and GPU or transformed ones, are returned as they are.

        Example:
            >>> import pandas as pd, tabloader as tl
            >>> ds = tl.Dataset(pd.DataFrame({"c": ["a", "b"]}))
            >>> ds.with_coded_strings(["c"]) is ds
            True
        """
        source = self._source.with_coded_strings(columns) if not self._transforms else self._source
        return self if source is self._source else self._replaced(_source=source)

    def _replaced(self, **attributes: Any) -> "Dataset":
        """A shallow copy of this dataset with some attributes replaced (the source, the files and
        the cached row count are shared)."""
        new = object.__new__(Dataset)
        new.__dict__.update(self.__dict__)
        new.__dict__.update(attributes)
        return new

    @property
    def is_transformed(self) -> bool:
        return bool(self._transforms)

    # --- writing ----------------------------------------------------------------------------
    def to_parquet(self, path: str, output_files: int | None = None, shuffle: bool = False,
                   row_group_size: int | None = None, overwrite: bool = False, seed: int | None = None,
                   progress: bool | None = None, compression: str = "snappy",
                   partition_on: Sequence[str] | None = None) -> str:
        """Write the rows as parquet files plus ``_schema.json``, atomically.

        The directory is assembled under a temporary name and renamed when every file is
        complete, so a failure never leaves a directory that looks complete.

        Args:
            path: output directory (local or fsspec URL).
            output_files: number of files (default: one per partition, at most that many). A
                file's partitions are read one at a time. From a Dask DataFrame written a file
                per partition, Dask computes them from one graph, so that work they share (a
                shuffle, a merge) runs once; with fewer files, each partition is computed on its
                own, that shared work with it -- except under a distributed client, where a
                file's partitions come from one graph and its task holds them together.
            shuffle: shuffle rows within each partition and the order of partitions.
            row_group_size: rows per parquet row group (default: pyarrow's; for a dataset on the GPU
                cuDF's, whose writer groups rows in whole 5,000-row fragments: a smaller size warns).
            overwrite: replace an existing directory (only after the new one is complete).
            seed: seed of the shuffle.
            progress: show a progress bar (default: yes, or as the workflow that transformed this
                dataset says, ``Workflow(progress=...)``).
            partition_on: write these columns as ``key=value`` folders (Hive's and Spark's
                layout: ``dt=2024-12-01/part_00000.parquet``), each file holding the rows of
                one combination of their values, without the key columns; integer, string,
                date and naive timestamp columns (see :mod:`tabloader.dataset.hive_folders`).
                ``Dataset(path, filters=...)`` then reads only the folders it needs.

        Example:
            >>> import pandas as pd, tabloader as tl, tempfile, os
            >>> out = os.path.join(tempfile.mkdtemp(), "out")
            >>> _ = tl.Dataset(pd.DataFrame({"a": range(5)})).to_parquet(out, progress=False)
            >>> tl.Dataset(out).num_rows
            5
            >>> days = os.path.join(tempfile.mkdtemp(), "days")
            >>> frame = pd.DataFrame({"day": ["mon", "tue", "mon"], "x": [1.0, 2.0, 3.0]})
            >>> _ = tl.Dataset(frame).to_parquet(days, partition_on=["day"], progress=False)
            >>> sorted(os.listdir(days)), tl.Dataset(days, filters=[("day", "==", "mon")]).compute()["x"].tolist()
            (['_schema.json', 'day=mon', 'day=tue'], [1.0, 3.0])
        """
        from tabloader.dataset.writing import write_parquet

        progress = getattr(self, "_progress", True) if progress is None else progress  # older pickles lack it
        return write_parquet(self, path, output_files, shuffle, row_group_size, overwrite, seed, progress, compression,
                             partition_on)


def _with_data_shape(given: Any, found: Any) -> Any:
    """The column schema ``given`` (roles, properties) with the dtype and list shape of the
    column ``found`` in the data, and the LIST tag exactly when it is a list."""
    column = given.with_dtype(found.dtype, found.is_list)
    return column.with_tags(Tags.LIST) if found.is_list else column.without_tags(Tags.LIST)


def _read_columns(transforms: Sequence[Any], columns: Sequence[str] | None) -> Sequence[str] | None:
    """The columns to read from the source for ``columns`` of the transformed rows."""
    return transforms[0].input_columns if transforms else columns


def _transformed(frame: Any, transforms: Sequence[Any], columns: Sequence[str] | None) -> Any:
    """A partition as read, with the dataset's transforms applied (and ``columns`` kept)."""
    for transform in transforms:
        frame = transform.function(frame)
    return frame[list(columns)] if columns is not None and transforms else frame


def delayed_from_source(dataset: Dataset, columns: Sequence[str] | None = None) -> list[Any] | None:
    """The partitions of ``dataset`` as Dask delayed objects made of its source's own tasks (a Dask
    collection's graph, a frame scattered to a cluster), transforms applied; None for a source
    without them, whose partitions are read one by one (:meth:`Dataset.read_partition`).

    Computed together, they share the collection's graph: work upstream of several partitions (a
    shuffle, a merge) runs once, where computing the partitions one by one runs it for each."""
    from tabloader.scheduler import shared_calls

    frames = dataset._source.delayed_frames(_read_columns(dataset._transforms, columns))
    if frames is None or not dataset._transforms:
        return frames
    where = [partition_name(dataset, i) for i in range(len(frames))]
    return shared_calls(_Transforms(dataset._transforms, columns), list(zip(frames, where)), "transform")


class _Transforms:
    """A picklable callable applying a dataset's transforms to a partition read by Dask (it holds
    the transforms, not the source: a Dask collection's graph is not copied into it); an error
    names the partition (``where``)."""

    def __init__(self, transforms: Sequence[Any], columns: Sequence[str] | None) -> None:
        self.transforms, self.columns = list(transforms), columns

    def __call__(self, frame: Any, where: str) -> Any:
        try:
            return _transformed(frame, self.transforms, self.columns)
        except Exception as exc:
            raise naming_partition(exc, where)


class _PartitionReader:
    """A picklable callable reading one partition (for Dask tasks); an error names the partition."""

    def __init__(self, dataset: Dataset, columns: Sequence[str] | None) -> None:
        self.dataset, self.columns = dataset, columns

    def __call__(self, index: int) -> Any:
        return read_partition_naming_it(self.dataset, index, self.columns)


def read_partition_naming_it(dataset: Dataset, index: int, columns: Sequence[str] | None = None) -> Any:
    """``dataset.read_partition(index, columns)``, an error in it (a transform refusing a value)
    naming the partition and its files (:func:`naming_partition`)."""
    try:
        return dataset.read_partition(index, columns)
    except Exception as exc:
        raise naming_partition(exc, partition_name(dataset, index))


def partition_name(dataset: Dataset, index: int) -> str:
    """Partition ``index`` of ``dataset`` and what it is read from, as an error names it."""
    return f"partition {index} ({dataset.describe_partition(index)})"


def naming_partition(exc: Exception, where: str) -> Exception:
    """``exc`` itself, its message ending with ``where`` (the partition it happened in) when it
    has one message and does not name it yet: its type, attributes and traceback are kept, so
    that callers catching it (``except TypeError``) still do.

    Example:
        >>> str(naming_partition(ValueError("bad value 7"), "partition 2 (a.parquet)"))
        'bad value 7 [partition 2 (a.parquet)]'
    """
    if len(exc.args) == 1 and isinstance(exc.args[0], str) and where not in exc.args[0]:
        exc.args = (f"{exc.args[0]} [{where}]",)
    return exc


def _open_source(source: Any, engine: str | None, part_size: int, device: str, columns: Sequence[str] | None,
                 partition_types: Mapping[str, Any] | str | None, filters: Any, read_kwargs: dict) -> Source:
    """The :class:`Source` for what the user gave: the one place the kinds of data are told apart."""
    if _is_dask_frame(source):
        opened: Source = DaskSource(select(source, columns, "the Dask DataFrame"), device)
    elif backend.is_frame(source):
        opened = FrameSource(select(source, columns, "the DataFrame"), part_size, device)
    elif is_arrow_data(source):  # after frames: pandas' own exports an Arrow stream too
        opened = ArrowSource(source, part_size, device, columns)
    elif iceberg.is_iceberg_table(source):
        return ParquetSource(iceberg.scan_files(source), part_size, device, columns, partition_types, filters)
    else:
        files = FileSet.find(source)
        if (engine or files.infer_engine()) != "csv":
            return ParquetSource(files, part_size, device, columns, partition_types, filters)
        opened = CsvSource(files, part_size, device, columns, read_kwargs)
    for name, given in (("partition_types", partition_types), ("filters", filters)):
        if given is not None:
            raise ValueError(f"{name}={given!r} applies to the key=value folders of parquet files; "
                             f"this source is {opened.summary}")
    return opened


def _is_dask_frame(obj: Any) -> bool:
    return type(obj).__module__.split(".")[0] in ("dask", "dask_expr", "dask_cudf") and hasattr(obj, "npartitions")
