"""Dataset: files or frames, cut into partitions that fit in memory, with a schema.

A Dataset is lazy: it knows its files (parquet or CSV, local or any fsspec URL), its row groups,
and how to read one partition at a time. A fitted workflow's ``transform`` returns a new Dataset
that applies the workflow to each partition as it is read, so nothing is materialized until
``to_parquet``, ``to_iter``, ``compute`` or a loader asks for it.

The package's rooms: :mod:`~tabloader.dataset.core` (the :class:`Dataset`: a source, its
transforms and schema), :mod:`~tabloader.dataset.source` (the :class:`Source` interface every
kind of data shares), one module per kind of data (:mod:`~tabloader.dataset.parquet` with the
rules of :mod:`~tabloader.dataset.parquet_layout`, :mod:`~tabloader.dataset.csv`,
:mod:`~tabloader.dataset.frames`), :mod:`~tabloader.dataset.files` (finding files) and
:mod:`~tabloader.dataset.writing` (``to_parquet``).

Example:
    >>> import pandas as pd, tabloader as tl
    >>> ds = tl.Dataset(pd.DataFrame({"a": [1, 2, 3], "b": [0.5, 1.5, 2.5]}))
    >>> ds.num_rows, ds.schema.column_names
    (3, ['a', 'b'])
"""

from tabloader.dataset.core import Dataset, PartitionTransform
from tabloader.dataset.csv import CsvSource
from tabloader.dataset.files import ENGINES
from tabloader.dataset.frames import DaskSource, FrameSource
from tabloader.dataset.parquet import ParquetSource
from tabloader.dataset.source import SchemaMismatchError, Source

__all__ = ["ENGINES", "CsvSource", "DaskSource", "Dataset", "FrameSource", "ParquetSource", "PartitionTransform",
           "SchemaMismatchError", "Source"]
