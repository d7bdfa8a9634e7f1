"""The source of CSV files: read by Dask in blocks of about ``part_size`` bytes, with the
dtypes parquet sources have.

Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "a.csv")
    >>> _ = open(path, "w").write("id,x|1,0.5|,1.5|3,|".replace("|", chr(10)))
    >>> source = CsvSource(FileSet.find(path), part_size=1_000_000)
    >>> [str(d) for d in source.meta().dtypes], source.describe(0) == path
    (['Int64', 'float64'], True)
"""

from __future__ import annotations

from typing import Any, Sequence

import pandas as pd

from tabloader import backend
from tabloader.dataset.files import FileSet, check_same_schema, for_each_file
from tabloader.dataset.frames import DaskSource
from tabloader.dataset.source import SchemaMismatchError, checked_columns

# Arguments of Dask's read_csv that pandas' does not take (left out when reading a header).
_DASK_ONLY_CSV_ARGS = ("blocksize", "sample", "sample_rows", "assume_missing", "include_path_column")


class CsvSource(DaskSource):
    """CSV files as a Dask DataFrame with the dtypes parquet sources have.

    Each file's header is read first: a file missing a column, or ordering them differently
    (Dask would read its later blocks with the first file's header), is refused naming it.
    Values are parsed with pandas' nullable dtypes, so an integer column with blanks is
    ``Int64`` in every block (pandas alone makes it float64, merging integers above 2**53,
    and only in the blocks with a blank); nullable floats and strings go back to float64 and
    ``str``. CSV has no statistics telling which columns have blanks: every integer column is
    ``Int64`` and every boolean one ``boolean``.

    Args:
        files: the CSV files.
        part_size: bytes of file per partition (Dask's ``blocksize``).
        columns: read only these columns, in this order.
        read_kwargs: passed to Dask's ``read_csv`` (``sep``, ``names``...).
    """

    engine = "csv"

    def __init__(self, files: FileSet, part_size: int, device: str = "cpu", columns: Sequence[str] | None = None,
                 read_kwargs: dict | None = None) -> None:
        super().__init__(_read_csv(files, part_size, columns, read_kwargs or {}), device)
        self.files = files
        self._block_paths = _block_paths(files, part_size, read_kwargs or {}, self.ddf.npartitions)
        self._readers: dict[tuple | None, _BlockReader] = {}  # per column selection

    def describe(self, index: int | None = None) -> str:
        paths = self.files.paths
        if index is None or len(paths) == 1:
            return paths[0]
        if self._block_paths is not None:
            path = self._block_paths[index]
            return f"block {index - self._block_paths.index(path)} of {path}"
        return f"a block of one of the {len(paths)} CSV files {paths[0]} ... {paths[-1]}"

    # Partitions are computed from the collection's graph, materialized once: a parse error then
    # names the block's file (Dask's own tasks name none), and no partition goes through dask-expr's
    # expressions, which Python 3.11 threads may only use one at a time (see DaskSource).
    def _computed(self, index: int, columns: Sequence[str] | None) -> Any:
        return self._reader(columns)(index)

    def _partitions_delayed(self, columns: Sequence[str] | None) -> list[Any]:
        from tabloader.scheduler import shared_calls

        return shared_calls(self._reader(columns), [(i,) for i in range(self.npartitions)], "read-csv")

    def _reader(self, columns: Sequence[str] | None) -> "_BlockReader":
        key = None if columns is None else tuple(columns)
        if key not in self._readers:
            from tabloader.dataset.frames import _DASK_EXPRESSIONS

            with _DASK_EXPRESSIONS:
                ddf = (self.ddf[list(columns)] if columns is not None else self.ddf).optimize()
                graph, keys = dict(ddf.__dask_graph__()), ddf.__dask_keys__()
            self._readers[key] = _BlockReader(graph, keys, [self.describe(i) for i in range(self.npartitions)])
        return self._readers[key]

    @property
    def summary(self) -> str:
        return f"{len(self.files.paths)} csv file(s)"


def _read_csv(files: FileSet, part_size: int, columns: Sequence[str] | None, read_kwargs: dict) -> Any:
    import dask
    import dask.dataframe as dd

    header_kwargs = {k: v for k, v in read_kwargs.items() if k not in _DASK_ONLY_CSV_ARGS}
    headers = for_each_file(lambda url: _csv_header(url, header_kwargs), files.urls)
    check_same_schema(files.paths, [dict.fromkeys(header) for header in headers])
    for path, header in zip(files.paths[1:], headers[1:]):
        if header != headers[0]:
            raise SchemaMismatchError(f"{path} orders its columns differently from {files.paths[0]} ({header} vs "
                                      f"{headers[0]}); CSV files of one dataset must have the same header")
    names = checked_columns(headers[0], columns, files.paths[0])
    # Keep pandas' own string dtype (as parquet sources have), not Dask's string[pyarrow].
    with dask.config.set({"dataframe.convert-string": False}):
        ddf = dd.read_csv(list(files.urls), blocksize=part_size, **{"dtype_backend": "numpy_nullable", **read_kwargs})
        ddf = ddf[names] if columns is not None else ddf
        usual = {c: _usual_dtype(d) for c, d in ddf.dtypes.items() if _usual_dtype(d) is not None}
        return ddf.astype(usual) if usual else ddf


def _csv_header(url: str, kwargs: dict) -> list:
    try:
        return list(pd.read_csv(url, **{**kwargs, "nrows": 0}).columns)
    except Exception as exc:
        raise ValueError(f"{url}: could not read its CSV header: {exc}") from exc


def _usual_dtype(dtype: Any) -> Any:
    """numpy floats for pandas' nullable floats and ``str`` (:data:`backend.STRING_DTYPE`) for its
    NA-string dtype (the dtypes parquet sources have); None for dtypes to keep."""
    if isinstance(dtype, (pd.Float32Dtype, pd.Float64Dtype)):
        return dtype.numpy_dtype
    if isinstance(dtype, pd.StringDtype) and dtype.na_value is pd.NA:
        return backend.STRING_DTYPE
    return None


class _BlockReader:
    """The partitions of a CSV collection from its graph (a plain dict): partition ``i`` is key
    ``keys[i]``, read from ``places[i]``, which its errors name."""

    def __init__(self, graph: dict, keys: list, places: list[str]) -> None:
        self.graph, self.keys, self.places = graph, keys, places

    def __call__(self, index: int) -> Any:
        import dask
        from dask.optimization import cull

        from tabloader.dataset.core import naming_partition

        key = self.keys[index]
        try:
            # only the partition's own tasks: Dask before 2025 ran every task of a graph it was given
            return dask.get(cull(self.graph, [key])[0], key)
        except Exception as exc:
            raise naming_partition(exc, f"partition {index} ({self.places[index]})")


def _block_paths(files: FileSet, part_size: int, read_kwargs: dict, npartitions: int) -> list[str] | None:
    """The file of each partition as Dask's read_csv cuts them (an uncompressed file in blocks of
    ``part_size`` bytes, a compressed one whole); None where that count is not the collection's."""
    from dask.bytes import read_bytes
    from fsspec.utils import infer_compression

    compression = read_kwargs.get("compression", "infer")
    counts = []
    for path, url in zip(files.paths, files.urls):
        if (infer_compression(url) if compression == "infer" else compression) is not None:
            counts.append(1)
        else:
            _, blocks = read_bytes(url, delimiter=b"\n", blocksize=read_kwargs.get("blocksize", part_size), sample=False)
            counts.append(len(blocks[0]))
    paths = [path for path, count in zip(files.paths, counts) for _ in range(count)]
    return paths if len(paths) == npartitions else None
