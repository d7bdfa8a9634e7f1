"""Writes tests/data/tables: tiny tables in the formats that keep parquet files beside a log of
which of them are current (Delta Lake, Apache Iceberg), written by the real libraries, and
beside each Delta table its rows as deltalake reads them (``<name>.jsonl``, sorted by ``id``).

Reading such a folder as plain parquet returns rows the table no longer holds: an overwrite, a
delete or a compaction leaves the old files in place until they are vacuumed. The tests check
that tabloader reads a Delta table's current version from its log and an Iceberg table's from
its metadata. CI lacks deltalake (a 50 MB wheel), so the files are committed; this script is
how they were made::

    python3 -m venv /tmp/lake-venv
    /tmp/lake-venv/bin/pip install deltalake==1.6.6 "pyiceberg[sql-sqlite,pyarrow]==0.12.0" pyarrow
    /tmp/lake-venv/bin/python tests/data/make_table_format_files.py tests/data/tables

(followed by names of tables, it writes only those, leaving the others as they are).

- ``delta``: written by deltalake (delta-rs) partitioned by ``dt``, rows 0..5, then overwritten
  by rows 10..12, and checkpointed: the table holds 3 rows, its folders 9 (``delta.jsonl``: the
  current rows), its ``_delta_log/`` a checkpoint in parquet.
- ``delta_commits``: appended twice, then rows deleted (their files rewritten), no checkpoint;
  partitioned by ``shop`` (digits, but a string) and ``k`` (a long, null once).
- ``delta_evolved``: appended to, partitioned by ``shop``, then appended to with columns added
  (``schema_mode="merge"``, Spark's ``mergeSchema``: ``clicks``, a long, and ``tag``), then a
  column added without data (``ALTER TABLE ADD COLUMNS``: ``score``): the older files lack them.
- ``delta_emptied``: partitioned by ``dt`` (a date), then every row deleted: its current
  version has no files, its folders still hold the deleted ones.
- ``iceberg``: an Iceberg table (pyiceberg, a SQLite catalog left out) appended twice and then
  overwritten: its ``data/`` folder holds every version's files.
"""

from __future__ import annotations

import json
import os
import shutil
import sys


def rows(ids: range) -> dict:
    return {"id": list(ids), "x": [i * 0.5 for i in ids], "dt": [f"2024-01-0{1 + i % 2}" for i in ids]}


def write_delta(root: str) -> None:
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    path = os.path.join(root, "delta")
    write_deltalake(path, pa.table(rows(range(6))), partition_by=["dt"])
    write_deltalake(path, pa.table(rows(range(10, 13))), partition_by=["dt"], mode="overwrite")
    DeltaTable(path).create_checkpoint()  # a parquet file in _delta_log/, which no glob of the data may read
    _write_rows(root, "delta", DeltaTable(path).to_pyarrow_table())


def write_delta_commits(root: str) -> None:
    """No checkpoint: the version is the JSON commits alone. Appends, a delete that rewrites a
    file, a null partition value, and partition columns that the folder names alone would type
    otherwise (``shop`` is a string of digits, ``k`` a long of small values)."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    path = os.path.join(root, "delta_commits")
    for ids in (range(0, 4), range(4, 8)):
        table = pa.table({"id": pa.array(ids, pa.int64()), "shop": [str(5 + i % 2) for i in ids],
                          "k": pa.array([None if i == 7 else i % 3 for i in ids], pa.int64())})
        write_deltalake(path, table, partition_by=["shop", "k"], mode="append")
    DeltaTable(path).delete("id = 2 OR id = 5")
    _write_rows(root, "delta_commits", DeltaTable(path).to_pyarrow_table())


def write_delta_evolved(root: str) -> None:
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake
    from deltalake.schema import Field, PrimitiveType

    path = os.path.join(root, "delta_evolved")
    first = pa.table({"id": pa.array([0, 1, 2], pa.int64()), "x": pa.array([10, 11, 12], pa.int64()),
                      "shop": ["a", "b", "a"]})
    write_deltalake(path, first, partition_by=["shop"])
    added = pa.table({"id": pa.array([3, 4], pa.int64()), "x": pa.array([13, 14], pa.int64()), "shop": ["b", "b"],
                      "clicks": pa.array([7, 8], pa.int64()), "tag": ["new", None]})
    write_deltalake(path, added, partition_by=["shop"], mode="append", schema_mode="merge")
    DeltaTable(path).alter.add_columns([Field("score", PrimitiveType("double"), nullable=True)])
    _write_rows(root, "delta_evolved", DeltaTable(path).to_pyarrow_table())


def write_delta_emptied(root: str) -> None:
    import datetime

    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    path = os.path.join(root, "delta_emptied")
    days = [datetime.date(2024, 1, 1), datetime.date(2024, 1, 2)]
    write_deltalake(path, pa.table({"id": pa.array([0, 1], pa.int64()), "x": [0.5, 1.5], "dt": days}),
                    partition_by=["dt"])
    DeltaTable(path).delete()  # every row: the version has no files
    _write_rows(root, "delta_emptied", DeltaTable(path).to_pyarrow_table())


def _write_rows(root: str, name: str, table) -> None:
    with open(os.path.join(root, f"{name}.jsonl"), "w") as out:
        out.writelines(json.dumps(row) + "\n" for row in table.sort_by("id").to_pylist())


def write_iceberg(root: str) -> None:
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    warehouse = os.path.join(root, "_warehouse")
    os.makedirs(warehouse)
    catalog = SqlCatalog("fixtures", uri=f"sqlite:///{warehouse}/catalog.db", warehouse=f"file://{warehouse}")
    catalog.create_namespace("db")
    table = catalog.create_table("db.events", schema=pa.table(rows(range(1))).schema)
    table.append(pa.table(rows(range(3))))
    table.append(pa.table(rows(range(3, 6))))
    table.overwrite(pa.table(rows(range(10, 13))))
    shutil.move(os.path.join(warehouse, "db", "events"), os.path.join(root, "iceberg"))
    shutil.rmtree(warehouse)  # the catalog: not part of the table's folder


WRITERS = {"delta": write_delta, "delta_commits": write_delta_commits, "delta_evolved": write_delta_evolved,
           "delta_emptied": write_delta_emptied, "iceberg": write_iceberg}


def main(root: str, names: list[str]) -> None:
    """Write the tables ``names`` (all of them when none) into ``root``, replacing their files."""
    if not names:
        shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root, exist_ok=True)
    for name in names or WRITERS:
        shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        WRITERS[name](root)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
