"""Tables whose folders keep parquet files beside a log of which are current, written by the real
libraries (tests/data/tables, made by tests/data/make_table_format_files.py): a Delta table
overwritten and checkpointed (its folders hold 9 rows, the table 3), one appended to and deleted
from (JSON commits only), and an Iceberg table overwritten. Read as folders of parquet files they
would give every version's rows, silently. tabloader reads a Delta table's current version from
its log, compared here with the rows deltalake itself reads, and an Iceberg table's current
snapshot from its metadata (tests/test_iceberg.py has more); it refuses Hudi."""

from __future__ import annotations

import glob
import json
import os
import shutil

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tabloader as tl
from tabloader.dataset.delta import DeltaTableError
from tabloader.dataset.table_formats import TableFormatError
from tabloader import backend
from tabloader.backend import STRING_DTYPE

TABLES = os.path.join(os.path.dirname(__file__), "data", "tables")


def table_path(folder: str) -> str:
    """A path relative to the working directory, as users type them (errors quote it)."""
    return os.path.relpath(os.path.join(TABLES, folder))


def deltalake_rows(name: str) -> list[dict]:
    with open(os.path.join(TABLES, f"{name}.jsonl")) as lines:
        return [json.loads(line) for line in lines]


def test_a_delta_table_is_its_current_version_not_every_file_in_its_folders():
    files = glob.glob(os.path.join(TABLES, "delta", "dt=*", "*.parquet"))
    assert sum(pq.read_metadata(f).num_rows for f in files) == 9  # every version's files are still there
    rows = deltalake_rows("delta")
    expected = pd.DataFrame({"id": [r["id"] for r in rows], "x": [r["x"] for r in rows],
                             "dt": pd.Series([r["dt"] for r in rows], dtype=STRING_DTYPE)})
    ds = tl.Dataset(table_path("delta"))
    pd.testing.assert_frame_equal(ds.compute().sort_values("id", ignore_index=True), expected)


def test_a_delta_table_of_commits_only_with_deletes_and_typed_partition_columns():
    """``shop`` holds digits but is a string column of the table, ``k`` a long with a null: the
    key types are the log's, not what the folder names alone suggest (int32 for both)."""
    rows = deltalake_rows("delta_commits")
    ds = tl.Dataset(table_path("delta_commits"))
    assert ds.meta().dtypes.astype(str).to_dict() == {"id": "int64", "shop": str(STRING_DTYPE), "k": "Int64"}
    expected = pd.DataFrame({"id": [r["id"] for r in rows],
                             "shop": pd.Series([r["shop"] for r in rows], dtype=STRING_DTYPE),
                             "k": pd.array([r["k"] for r in rows], dtype="Int64")})
    pd.testing.assert_frame_equal(ds.compute().sort_values("id", ignore_index=True), expected)
    # partition_types still has the last word
    assert str(tl.Dataset(table_path("delta_commits"), partition_types={"shop": "int32"}).meta()["shop"].dtype) == \
        "int32"


def test_a_delta_table_feeds_a_workflow_and_the_loader():
    out = tl.Workflow(["id"] + (["shop"] >> tl.ops.Categorify()), progress=False).fit_transform(
        tl.Dataset(table_path("delta_commits")))
    ids = np.concatenate([features["id"] for features, _ in tl.Loader(out, 4, categorical=["id", "shop"])])
    assert sorted(ids.tolist()) == [r["id"] for r in deltalake_rows("delta_commits")]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cudf)])
def test_a_delta_table_whose_schema_gained_columns_reads_them_as_nulls_in_older_files(device):
    """``clicks`` and ``tag`` came with a ``schema_mode="merge"`` append (Spark's mergeSchema),
    ``score`` with an ALTER TABLE ADD COLUMNS and no data: the older files lack them. They were
    refused as files of different columns, or (``score``, in no file) left out of the dataset:
    the log's schema is the table's. ``clicks`` is an Int64 in every partition (on the CPU),
    also in those of older files only, as for any integer column that holds a null."""
    ds = tl.Dataset(table_path("delta_evolved"), part_size=1, device=device)
    assert ds.npartitions == 3
    assert ds.schema.column_names == ["id", "x", "clicks", "tag", "score", "shop"]  # partition columns last
    integers = "Int64" if device == "cpu" else "int64"  # cuDF's integers hold nulls themselves
    assert all(str(ds.read_partition(i)["clicks"].dtype) == integers for i in range(3))
    assert rows_of(ds.compute()) == deltalake_rows("delta_evolved")
    only_added = tl.Dataset(table_path("delta_evolved"), columns=["id", "score"], device=device).compute()
    assert rows_of(only_added) == [{"id": r["id"], "score": None} for r in deltalake_rows("delta_evolved")]


def rows_of(frame) -> list[dict]:
    """A pandas or cuDF frame's rows as Python values sorted by ``id`` (nulls and NaN as None)."""
    table = frame.to_arrow(preserve_index=False) if backend.is_gpu_object(frame) else \
        pa.Table.from_pandas(frame, preserve_index=False)
    return table.sort_by("id").to_pylist()


def test_a_delta_table_without_files_is_an_empty_dataset_with_its_columns():
    """Every row deleted: the version has no files (its folders still hold the deleted ones).
    It crashed on the first file's schema; it is empty with the log's columns and types, the
    partition column ``dt`` typed as the log declares it (and filtered as such), and fits and
    transforms as empty; the loader refuses it, as any dataset without rows."""
    assert deltalake_rows("delta_emptied") == []
    assert glob.glob(os.path.join(TABLES, "delta_emptied", "dt=*", "*.parquet"))
    ds = tl.Dataset(table_path("delta_emptied"))
    assert len(ds) == 0 and [(c.name, c.dtype) for c in ds.schema] == [("id", "int64"), ("x", "float64"),
                                                                       ("dt", "date32[day]")]
    assert ds.compute().empty
    out = tl.Workflow((["id"] >> tl.ops.Categorify()) + ["x"], progress=False).fit_transform(ds)
    assert out.compute().empty and list(out.compute().columns) == ["id", "x"]
    with pytest.raises(ValueError, match="the dataset has no rows to load"):  # as for any dataset without rows
        tl.Loader(out, 4, categorical=["id"], continuous=["x"])
    assert str(tl.Dataset(table_path("delta_emptied"), partition_types={"dt": "string"}).meta()["dt"].dtype) == \
        str(STRING_DTYPE)
    assert tl.Dataset(table_path("delta_emptied"), filters=[("dt", "==", "2024-01-01")]).compute().empty


def write_delta_log(root, fields, partition_columns, files) -> None:
    """A Delta table at ``root`` written as Spark writes one (by hand: deltalake is not
    needed): its schema (name, Delta type) and ``files``, (folder, arrow table) pairs."""
    schema = {"type": "struct", "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in fields]}
    actions = [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
               {"metaData": {"id": "x", "format": {"provider": "parquet", "options": {}},
                             "schemaString": json.dumps(schema), "partitionColumns": partition_columns,
                             "configuration": {}, "createdTime": 0}}]
    for i, (folder, table) in enumerate(files):
        os.makedirs(root / folder, exist_ok=True)
        pq.write_table(table, root / folder / f"p{i}.parquet")
        values = dict(part.split("=", 1) for part in folder.split("/") if "=" in part)
        actions.append({"add": {"path": f"{folder}/p{i}.parquet".lstrip("/"), "partitionValues": values,
                                "size": 1, "modificationTime": 0, "dataChange": True}})
    os.makedirs(root / "_delta_log")
    (root / "_delta_log" / ("0" * 20 + ".json")).write_text("".join(json.dumps(a) + "\n" for a in actions))


def test_a_delta_tables_columns_have_the_types_its_log_declares(tmp_path):
    """A file storing an int where the log says long (and a float where it says double, a
    naive timestamp where it says an instant) is cast to the log's type, as Delta's readers
    give it; the log's array, decimal and timestamp_ntz columns keep their types."""
    root = tmp_path / "table"
    fields = [("id", "long"), ("f", "double"), ("ts", "timestamp"), ("local", "timestamp_ntz"),
              ("price", "decimal(9,2)"), ("tags", {"type": "array", "elementType": "string", "containsNull": True}),
              ("small", "short")]
    stamps = pa.array([0, 86_400_000_000], pa.timestamp("us"))
    table = pa.table({"id": pa.array([1, 2], pa.int32()), "f": pa.array([0.5, 1.5], pa.float32()), "ts": stamps,
                      "local": stamps, "price": pa.array([1, 2], pa.decimal128(9, 2)), "tags": [["a"], []],
                      "small": pa.array([3, 4], pa.int16())})
    write_delta_log(root, fields, [], [("", table)])
    got = tl.Dataset(str(root)).source.read_arrow(0)
    assert got.schema == pa.schema([("id", pa.int64()), ("f", pa.float64()), ("ts", pa.timestamp("us", tz="UTC")),
                                    ("local", pa.timestamp("us")), ("price", pa.decimal128(9, 2)),
                                    ("tags", pa.list_(pa.string())), ("small", pa.int16())])
    assert got.to_pydict() == table.cast(got.schema).to_pydict()


def test_a_delta_file_storing_a_column_the_log_does_not_declare_is_refused_naming_both(tmp_path):
    root = tmp_path / "table"
    write_delta_log(root, [("id", "long")], [], [("", pa.table({"id": [1]})), ("", pa.table({"id": [2], "y": [3]}))])
    with pytest.raises(tl.dataset.SchemaMismatchError, match=r"p1\.parquet stores the column\(s\) \['y'\], which the "
                                                             r"log of the table at .*table does not declare"):
        tl.Dataset(str(root))


@pytest.mark.parametrize("folder, message", [
    ("delta/dt=2024-01-01", r"dt=2024-01-01' is inside a Delta Lake table, .*delta \(it has _delta_log/\).*rows "
                            r"the table does not hold\. Read the table's folder"),
    ("iceberg/data", r"iceberg/data' is inside an Apache Iceberg table, .*iceberg \(it has metadata/\).*Read the "
                     r"table's folder"),
])
def test_folders_inside_tables_are_refused_saying_why_and_what_to_do(folder, message):
    with pytest.raises(TableFormatError, match=message):
        tl.Dataset(table_path(folder))


def test_an_iceberg_table_folder_is_its_current_snapshot_not_every_file_in_it():
    """Refused before (told to materialise the table with pyiceberg): now read as its current
    snapshot, the rows the generator's overwrite left (10..12), not the 9 rows of its files.
    The table was moved after it was written (its metadata names the old place)."""
    files = glob.glob(os.path.join(TABLES, "iceberg", "data", "*.parquet"))
    assert sum(pq.read_metadata(f).num_rows for f in files) == 9
    ds = tl.Dataset(table_path("iceberg"))
    expected = pd.DataFrame({"id": [10, 11, 12], "x": [5.0, 5.5, 6.0],
                             "dt": pd.Series(["2024-01-01", "2024-01-02", "2024-01-01"], dtype=STRING_DTYPE)})
    pd.testing.assert_frame_equal(ds.compute().sort_values("id", ignore_index=True), expected)


def test_a_hudi_table_folder_is_refused(tmp_path):
    (tmp_path / "t" / ".hoodie").mkdir(parents=True)
    (tmp_path / "t" / ".hoodie" / "hoodie.properties").write_text("hoodie.table.name=t\n")
    pq.write_table(pa.table({"x": [1]}), tmp_path / "t" / "a.parquet")
    with pytest.raises(TableFormatError, match=r"is an Apache Hudi table \(it has \.hoodie/\).*Spark or Hudi's own"):
        tl.Dataset(str(tmp_path / "t"))


def test_a_glob_reads_the_files_it_names_and_no_log_file():
    """The user's explicit choice: every data file under the table's folder, not the parquet
    checkpoint in ``_delta_log/`` (it would not even have the data's columns)."""
    assert glob.glob(os.path.join(TABLES, "delta", "_delta_log", "*.parquet"))
    ds = tl.Dataset(os.path.join(TABLES, "delta", "**", "*.parquet"))
    files = sorted(glob.glob(os.path.join(TABLES, "delta", "dt=*", "*.parquet")))
    assert sorted(ds.compute()["id"]) == sorted(pd.concat([pq.read_table(f).to_pandas() for f in files])["id"])


def test_folders_that_only_look_like_tables_are_read(tmp_path):
    """A ``metadata`` folder without Iceberg's metadata files, and partition or ``data``
    folders whose parents are no table, are plain folders of parquet files."""
    (tmp_path / "t" / "metadata").mkdir(parents=True)
    (tmp_path / "t" / "metadata" / "notes.json").write_text("{}")
    (tmp_path / "t" / "data" / "dt=1").mkdir(parents=True)
    pq.write_table(pa.table({"x": [1, 2]}), tmp_path / "t" / "data" / "dt=1" / "a.parquet")
    assert tl.Dataset(str(tmp_path / "t" / "data")).compute()["x"].tolist() == [1, 2]
    assert tl.Dataset(str(tmp_path / "t" / "data" / "dt=1")).compute()["x"].tolist() == [1, 2]


# What a plain parquet reader cannot honour, in copies of a real table's log edited as other
# writers (Spark, Databricks) leave them.
def edited_copy(tmp_path, edit) -> str:
    """A copy of ``delta_commits`` whose first commit's actions went through ``edit``."""
    root = str(tmp_path / "table")
    shutil.copytree(os.path.join(TABLES, "delta_commits"), root)
    first = os.path.join(root, "_delta_log", "00000000000000000000.json")
    with open(first) as lines:
        actions = [json.loads(line) for line in lines]
    with open(first, "w") as out:
        out.writelines(json.dumps(a) + "\n" for a in edit(actions))
    return root


def with_added(actions, **fields):
    return [{"add": {**a["add"], **fields}} if "add" in a else a for a in actions]


DELETION_VECTOR = {"storageType": "u", "pathOrInlineDv": "ab", "sizeInBytes": 4, "cardinality": 1}


def spark_delete(actions):
    """``actions`` and a DELETE of one row of the first file as Spark writes it: the file added
    again with its deletion vector, then removed without one (Delta keys files by path and
    deletion vector, so the remove leaves the new add in place)."""
    first = next(a["add"] for a in actions if "add" in a)
    return actions + [{"add": {**first, "deletionVector": DELETION_VECTOR}},
                      {"remove": {"path": first["path"], "dataChange": True, "deletionTimestamp": 1}}]


@pytest.mark.parametrize("edit, message", [
    (lambda acts: with_added(acts, deletionVector=DELETION_VECTOR), r"has rows deleted by a deletion vector"),
    (spark_delete, r"has rows deleted by a deletion vector"),
    (lambda acts: with_added(acts, path="s3://elsewhere/part-0.parquet"), r"names the data file 's3://elsewhere/"
                                                                             r"part-0\.parquet', outside the table's"),
    (lambda acts: with_added(acts, path="..%2F..%2Fsecret.parquet"), r"outside the table's folder"),
    (lambda acts: with_added(acts, path="ab/part-0.parquet"), r"'ab/part-0\.parquet', not under column=value "
                                                               r"folders for its partition column\(s\) \['shop', 'k'\]"),
    (lambda acts: acts + [{"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                                        "readerFeatures": ["variantType"], "writerFeatures": ["variantType"]}}],
     r"reader feature\(s\) \['variantType'\]"),
    (lambda acts: acts + [{"metaData": {"id": "x", "format": {"provider": "parquet", "options": {}},
                                        "schemaString": '{"type":"struct","fields":[]}', "partitionColumns": [],
                                        "configuration": {"delta.columnMapping.mode": "name"}}}],
     r"column mapping \(delta\.columnMapping\.mode=name\)"),
])
def test_what_a_parquet_reader_cannot_honour_is_refused_naming_it(tmp_path, edit, message):
    root = edited_copy(tmp_path, edit)
    with pytest.raises(DeltaTableError, match=rf"{root}.*{message}"):
        tl.Dataset(root)


def test_a_log_missing_a_commit_is_refused(tmp_path):
    root = edited_copy(tmp_path, lambda actions: actions)
    os.remove(os.path.join(root, "_delta_log", "00000000000000000001.json"))
    with pytest.raises(DeltaTableError, match=r"_delta_log: commit 1 is missing \(after checkpoint -1\)"):
        tl.Dataset(root)


def test_a_data_file_symlinked_outside_the_table_is_refused(tmp_path):
    """The log names a file inside the folder, but the file is a symlink to one outside it."""
    root = edited_copy(tmp_path, lambda actions: actions)
    secret = tmp_path / "secret.parquet"
    pq.write_table(pa.table({"secret": ["SSN-123"]}), secret)
    for data_file in [p for p in glob.glob(os.path.join(root, "**", "*.parquet"), recursive=True)
                      if "_delta_log" not in p]:  # every one, so that the current version's are among them
        os.remove(data_file)
        os.symlink(secret, data_file)
    with pytest.raises(DeltaTableError, match="outside the table's folder"):
        tl.Dataset(root).compute()


def test_a_delta_tables_boolean_short_and_float_partition_columns_are_typed_as_declared(tmp_path):
    """A log written as Spark writes one (by hand here: deltalake is not needed): boolean keys are
    booleans, not the strings "true" and "false"; short and float keys hold their values in int32
    and float64."""
    root = tmp_path / "table"
    fields = [("id", "long"), ("flag", "boolean"), ("s", "short"), ("f", "float")]
    schema = {"type": "struct", "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in fields]}
    adds = []
    for i, (flag, s, f) in enumerate([("true", "1", "0.5"), ("false", "-3", "2.25")]):
        folder = f"flag={flag}/s={s}/f={f}"
        os.makedirs(root / folder)
        pq.write_table(pa.table({"id": pa.array([i], pa.int64())}), root / folder / "p.parquet")
        adds.append({"add": {"path": f"{folder}/p.parquet", "partitionValues": {"flag": flag, "s": s, "f": f},
                             "size": 1, "modificationTime": 0, "dataChange": True}})
    actions = [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
               {"metaData": {"id": "x", "format": {"provider": "parquet", "options": {}},
                             "schemaString": json.dumps(schema), "partitionColumns": ["flag", "s", "f"],
                             "configuration": {}, "createdTime": 0}}] + adds
    os.makedirs(root / "_delta_log")
    (root / "_delta_log" / ("0" * 20 + ".json")).write_text("".join(json.dumps(a) + "\n" for a in actions))
    ds = tl.Dataset(str(root))
    assert [(c.name, c.dtype) for c in ds.schema] == [("id", "int64"), ("flag", "bool"), ("s", "int32"),
                                                      ("f", "float64")]
    rows = ds.compute().sort_values("id")
    assert rows["flag"].tolist() == [True, False] and rows["s"].tolist() == [1, -3]
    assert rows["f"].tolist() == [0.5, 2.25]
    assert tl.Dataset(str(root), filters=[("flag", "==", True)]).compute()["id"].tolist() == [0]
