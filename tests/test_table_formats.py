"""Folders that are Delta Lake or Apache Iceberg tables, written by the real libraries
(tests/data/tables, made by tests/data/make_table_format_files.py): each was overwritten, so
its folders hold 9 rows of which the table holds 3. Read as a folder of parquet files they
would give the 9, silently; tabloader refuses them, and reads a glob the user names."""

from __future__ import annotations

import glob
import json
import os

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tabloader as tl
from tabloader.dataset.table_formats import TableFormatError

TABLES = os.path.join(os.path.dirname(__file__), "data", "tables")


@pytest.mark.parametrize("folder, root, kind, marker", [
    ("delta", "delta", "a Delta Lake table", "_delta_log"),
    ("delta/dt=2024-01-01", "delta", "inside a Delta Lake table", "_delta_log"),
    ("iceberg", "iceberg", "an Apache Iceberg table", "metadata"),
    ("iceberg/data", "iceberg", "inside an Apache Iceberg table", "metadata"),
])
def test_a_table_folder_is_refused_saying_why_and_what_to_do(folder, root, kind, marker):
    with pytest.raises(TableFormatError, match=rf"{folder}' is {kind}.*\(it has {marker}/\).*rows the table does "
                                               rf"not hold.*Dataset\('.*{root}/\*\*/\*\.parquet'\)"):
        tl.Dataset(folder_path(folder))


def folder_path(folder: str) -> str:
    """A path relative to the working directory, as users type them (the error quotes it)."""
    return os.path.relpath(os.path.join(TABLES, folder))


def test_why_the_delta_folder_is_refused():
    """The folder holds every version's files, the table (as deltalake reads it) only the last."""
    current = [json.loads(line) for line in open(os.path.join(TABLES, "delta.jsonl"))]
    files = glob.glob(os.path.join(TABLES, "delta", "dt=*", "*.parquet"))
    assert sum(pq.read_metadata(f).num_rows for f in files) == 9 and len(current) == 3


def test_a_glob_reads_the_files_it_names_and_no_log_file():
    """The user's explicit choice: every data file under the table's folder, not the parquet
    checkpoint in ``_delta_log/`` (it would not even have the data's columns)."""
    assert glob.glob(os.path.join(TABLES, "delta", "_delta_log", "*.parquet"))
    ds = tl.Dataset(os.path.join(TABLES, "delta", "**", "*.parquet"))
    files = sorted(glob.glob(os.path.join(TABLES, "delta", "dt=*", "*.parquet")))
    expected = pd.concat([pq.read_table(f).to_pandas() for f in files])
    assert sorted(ds.compute()["id"]) == sorted(expected["id"]) and len(expected) == 9


def test_folders_that_only_look_like_tables_are_read(tmp_path):
    """A ``metadata`` folder without Iceberg's metadata files, and partition or ``data``
    folders whose parents are no table, are plain folders of parquet files."""
    (tmp_path / "t" / "metadata").mkdir(parents=True)
    (tmp_path / "t" / "metadata" / "notes.json").write_text("{}")
    (tmp_path / "t" / "data" / "dt=1").mkdir(parents=True)
    pq.write_table(pa.table({"x": [1, 2]}), tmp_path / "t" / "data" / "dt=1" / "a.parquet")
    assert tl.Dataset(str(tmp_path / "t" / "data")).compute()["x"].tolist() == [1, 2]
    assert tl.Dataset(str(tmp_path / "t" / "data" / "dt=1")).compute()["x"].tolist() == [1, 2]
