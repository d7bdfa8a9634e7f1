"""The partition interface every kind of data behind a :class:`~tabloader.dataset.Dataset` shares.

A :class:`Source` is rows cut into partitions that fit in memory: it says how many partitions
there are and (when it knows without reading) how many rows each holds, reads one partition as
a DataFrame on its device or as a pyarrow Table, gives the columns' types, and describes itself
or one partition for error messages. The kinds of data are subclasses: parquet files
(:class:`~tabloader.dataset.parquet.ParquetSource`), CSV files
(:class:`~tabloader.dataset.csv.CsvSource`), an in-memory DataFrame
(:class:`~tabloader.dataset.frames.FrameSource`) and a Dask DataFrame
(:class:`~tabloader.dataset.frames.DaskSource`). A new kind of data is one more subclass.

Example:
    >>> import pandas as pd
    >>> from tabloader.dataset.frames import FrameSource
    >>> source = FrameSource(pd.DataFrame({"a": range(4)}), part_size=16)
    >>> source.npartitions, source.partition_sizes(), source.describe(1)
    (2, [2, 2], 'rows [2, 4) of the DataFrame')
    >>> source.read_arrow(1, ["a"]).column("a").to_pylist()
    [2, 3]
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, Sequence

from tabloader import backend

if TYPE_CHECKING:
    from tabloader.dataset.files import FileSet
    from tabloader.schema import Schema


class SchemaMismatchError(ValueError):
    """Files of one dataset disagree on their columns or dtypes."""

    __module__ = "tabloader.dataset"  # its public home (tracebacks, pickles)


class Source(abc.ABC):
    """Rows cut into partitions, read one partition at a time.

    Args:
        device: where :meth:`read_frame` puts its frames, ``"cpu"`` (pandas) or ``"cuda"`` (cuDF).
    """

    engine: str | None = None  # "parquet" or "csv" for files
    files: "FileSet | None" = None  # the files read, for sources of files

    def __init__(self, device: str = "cpu") -> None:
        self.device = device

    @property
    @abc.abstractmethod
    def npartitions(self) -> int:
        """The number of partitions."""

    def partition_sizes(self) -> list[int] | None:
        """Rows per partition when known without reading data, else None."""
        return None

    @property
    @abc.abstractmethod
    def arrow_schema(self) -> Any:
        """The pyarrow schema of the rows (known without reading data)."""

    @abc.abstractmethod
    def meta(self) -> Any:
        """An empty DataFrame on the device with the columns and dtypes of every partition."""

    @abc.abstractmethod
    def read_frame(self, index: int, columns: Sequence[str] | None = None) -> Any:
        """Partition ``index`` as a DataFrame on the device (``columns`` only, in that order)."""

    def read_arrow(self, index: int, columns: Sequence[str] | None = None, memory_pool: Any = None) -> Any:
        """Partition ``index`` as a pyarrow Table. Sources that decode arrow themselves decode
        it into ``memory_pool`` (default: pyarrow's); the others convert :meth:`read_frame`."""
        import pyarrow as pa

        return pa.Table.from_pandas(backend.to_host(self.read_frame(index, columns)), preserve_index=False)

    @abc.abstractmethod
    def describe(self, index: int | None = None) -> str:
        """What partition ``index`` is made of (its files, its rows), or with None the whole
        source, as error messages name it."""

    @property
    @abc.abstractmethod
    def summary(self) -> str:
        """A few words for ``repr``: ``"3 parquet file(s)"``, ``"a DataFrame"``."""

    def list_widths(self) -> dict[str, int]:
        """Name -> width of the list columns whose lists all have one length (fixed-size lists)."""
        return {}

    def coded_row_groups(self) -> tuple[dict[str, int], int] | None:
        """For sources of files that store string columns as dictionary codes: per string
        column, how many row groups hold it as codes only, and the number of row groups. None
        for the others."""
        return None

    def with_coded_strings(self, columns: Sequence[str]) -> "Source":
        """This source, reading the string ``columns`` as dictionary codes where it can (see
        :meth:`~tabloader.dataset.parquet.ParquetSource.with_coded_strings`); the others read
        strings as strings and return themselves."""
        return self

    def dask_frame(self) -> Any:
        """The Dask DataFrame this source is, if it is one (else None)."""
        return None

    def delayed_frames(self, columns: Sequence[str] | None = None) -> list[Any] | None:
        """The partitions as Dask delayed frames on the device, for sources that are a Dask
        collection: its own tasks (persisted data, a shuffle's output), not a reader that would
        compute each partition apart. None for the others, read by :meth:`read_frame`."""
        return None

    def saved_schema(self) -> "Schema | None":
        """A schema saved beside the data (``_schema.json`` beside files), if there is one."""
        return None if self.files is None else self.files.saved_schema()


def checked_columns(available: Sequence[Any], columns: Sequence[str] | None, where: str) -> list:
    """``columns`` (by default all of ``available``), each checked to be in ``where``."""
    available = list(available)
    if columns is None:
        return available
    missing = [c for c in columns if c not in available]
    if missing:
        raise KeyError(f"columns={missing} are not in {where}; its columns are {available}")
    return list(columns)


def select(frame: Any, columns: Sequence[str] | None, where: str) -> Any:
    """The ``columns`` of ``frame`` (all of it when None), each checked to be in ``where``."""
    return frame if columns is None else frame[checked_columns(frame.columns, columns, where)]


def refuse_unsupported_types(arrow_schema: Any, where: str) -> None:
    """Refuse, before anything is read, columns of a type no reader or operator handles."""
    from tabloader.schema import is_supported_arrow_type

    for field in arrow_schema:
        if not is_supported_arrow_type(field.type):
            raise TypeError(
                f"{where}: column {field.name!r} has type {field.type}, which tabloader does not read (it reads "
                "numbers, booleans, strings, binary, decimals, dates, times, timestamps and lists of those; not "
                "structs, maps or lists of lists): leave it out with Dataset(..., columns=[...]), or flatten it "
                "first (for instance with pyarrow.Table.flatten for a struct)")


def error_message(exc: BaseException) -> str:
    """The message of ``exc`` as it was written (``str`` of a KeyError quotes it, and escapes
    the quotes inside, which then nest badly in a message naming a file)."""
    if isinstance(exc, KeyError) and len(exc.args) == 1:
        return str(exc.args[0])
    return str(exc)


def conform_dtypes(frame: Any, dtypes: Any, where: str) -> Any:
    """``frame`` (pandas or cuDF) with the columns of ``dtypes`` (name -> dtype), in its order,
    each cast to its dtype where it differs; a column that cannot be is refused naming ``where``.

    Example:
        >>> import pandas as pd
        >>> conform_dtypes(pd.DataFrame({"b": [1.5], "a": [1]}), pd.Series({"a": "float64"}), "f").dtypes.tolist()
        [dtype('float64')]
    """
    frame = frame[list(dtypes.index)]
    casts = {name: dtype for name, dtype in dtypes.items() if frame[name].dtype != dtype}
    for name, dtype in casts.items():
        try:
            frame[name] = backend.cast_column(frame[name], dtype)
        except Exception as exc:
            raise TypeError(f"{where}: column {name!r} of a partition has dtype {frame[name].dtype}, which does not "
                            f"convert to the dataset's {dtype}: {exc}") from exc
    return frame
