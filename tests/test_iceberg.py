"""Apache Iceberg tables written by pyiceberg itself, here, read by tabloader as a pyiceberg Table,
a scan of one, or the table's folder: the rows must be those pyiceberg's own reader
(``scan().to_arrow()``) gives, never the files replaced by later snapshots, with the table's column
names and types whatever names and types older files have. What a parquet reader cannot honour
(row-level deletes, a row filter) and files outside a table's folder are refused, naming them."""

from __future__ import annotations

import datetime
import glob
import json
import os
import shutil
import sys

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyiceberg")

from pyiceberg.catalog import MetastoreCatalog  # noqa: E402
from pyiceberg.exceptions import NoSuchTableError  # noqa: E402
from pyiceberg.io import load_file_io  # noqa: E402
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC  # noqa: E402
from pyiceberg.serializers import FromInputFile  # noqa: E402
from pyiceberg.table import CommitTableResponse, Table  # noqa: E402
from pyiceberg.transforms import DayTransform  # noqa: E402
from pyiceberg.types import DoubleType, LongType, StringType  # noqa: E402

import tabloader as tl  # noqa: E402
from tabloader import backend  # noqa: E402
from tabloader.dataset.iceberg import IcebergTableError  # noqa: E402


class FolderCatalog(MetastoreCatalog):
    """pyiceberg's own commit path (metadata files written by pyiceberg), the pointer to each
    table's current metadata kept in a dict: SqlCatalog and InMemoryCatalog need sqlalchemy."""

    def __init__(self, warehouse):
        super().__init__("test", warehouse=f"file://{warehouse}")
        self.pointers = {}

    def create_table(self, identifier, schema, location=None, partition_spec=UNPARTITIONED_PARTITION_SPEC, **kwargs):
        staged = self._create_staged_table(identifier, schema, location, partition_spec, **kwargs)
        self._write_metadata(staged.metadata, staged.io, staged.metadata_location)
        self.pointers[staged.name()] = staged.metadata_location
        return self.load_table(identifier)

    def load_table(self, identifier):
        name = self.identifier_to_tuple(identifier)
        if name not in self.pointers:
            raise NoSuchTableError(str(name))
        io = load_file_io(self.properties, self.pointers[name])
        metadata = FromInputFile.table_metadata(io.new_input(self.pointers[name]))
        return Table(name, metadata, self.pointers[name], io, self)

    def commit_table(self, table, requirements, updates):
        staged = self._update_and_stage_table(self.load_table(table.name()), table.name(), requirements, updates)
        self._write_metadata(staged.metadata, staged.io, staged.metadata_location)
        self.pointers[table.name()] = staged.metadata_location
        return CommitTableResponse(metadata=staged.metadata, metadata_location=staged.metadata_location)

    def load_namespace_properties(self, namespace):
        return {}

    def _not_needed(self, *args, **kwargs):
        raise NotImplementedError

    create_namespace = drop_namespace = list_namespaces = update_namespace_properties = _not_needed
    list_tables = drop_table = rename_table = register_table = _not_needed
    list_views = drop_view = view_exists = load_view = register_view = _not_needed


@pytest.fixture
def catalog(tmp_path):
    return FolderCatalog(str(tmp_path / "warehouse"))


def folder(table) -> str:
    return table.location().removeprefix("file://")


def events(ids, **extra) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "x": pa.array([i * 0.5 for i in ids], pa.float64()),
                     "shop": pa.array([f"s{i % 2}" for i in ids], pa.string()), **extra})


def records(frame) -> list[dict]:
    """A tabloader partition's rows as dicts (nulls as None), sorted by id."""
    host = backend.to_host(frame)
    rows = host.astype(object).where(host.notna(), None).to_dict("records")
    return sorted(rows, key=lambda r: r["id"])


def pyiceberg_records(scan) -> list[dict]:
    """What pyiceberg's own reader returns: the independent reference."""
    return sorted(scan.to_arrow().to_pylist(), key=lambda r: r["id"])


def test_a_table_is_its_current_snapshot_not_every_file_in_its_folder(catalog, device):
    table = catalog.create_table("db.events", events([]).schema)
    table.append(events(range(0, 4)))
    table.append(events(range(4, 6)))
    table.overwrite(events(range(10, 13)))
    on_disk = glob.glob(os.path.join(folder(table), "data", "*.parquet"))
    assert sum(pq.read_metadata(f).num_rows for f in on_disk) == 9  # the replaced files are still there
    expected = pyiceberg_records(table.scan())
    assert [r["id"] for r in expected] == [10, 11, 12]
    for source in (table, table.scan(), folder(table)):
        ds = tl.Dataset(source, device=device)
        assert records(ds.compute()) == expected
        assert ds.schema.column_names == ["id", "x", "shop"]


def test_the_folder_reads_the_newest_metadata_or_the_version_hint(catalog):
    table = catalog.create_table("db.events", events([]).schema)
    table.append(events(range(3)))
    first = table.metadata_location.removeprefix("file://")
    table.append(events(range(3, 5)))
    assert len(tl.Dataset(folder(table))) == 5
    with open(os.path.join(folder(table), "metadata", "version-hint.text"), "w") as hint:
        hint.write(os.path.basename(first))  # as a Hadoop catalog points at the version it holds current
    assert sorted(tl.Dataset(folder(table)).compute()["id"]) == [0, 1, 2]


def test_time_travel_and_selected_fields_come_from_the_scan(catalog):
    table = catalog.create_table("db.events", events([]).schema)
    table.append(events(range(3)))
    first = table.current_snapshot().snapshot_id
    table.overwrite(events(range(10, 12)))
    scan = table.scan(snapshot_id=first, selected_fields=("id", "shop"))
    ds = tl.Dataset(scan)
    assert ds.schema.column_names == ["id", "shop"]
    assert records(ds.compute()) == pyiceberg_records(scan)
    assert tl.Dataset(scan, columns=["shop"]).schema.column_names == ["shop"]


def test_partition_folders_are_not_read_again_as_hive_keys(catalog):
    """pyiceberg writes ``data/shop=s0/``, the files holding ``shop`` themselves (as a long
    partition ``k`` would be typed int32 from its folder); files added by day are under
    ``ts_day=2024-01-01/``: no ``ts_day`` column appears, every column keeps the table's type.
    (The added files have no field ids: the table's name mapping gives them theirs.)"""
    schema = events([], ts=pa.array([], pa.timestamp("us"))).schema
    table = catalog.create_table("db.events", schema)
    with table.update_spec() as update:
        update.add_identity("shop")
    day = lambda d: pa.array([datetime.datetime(2024, 1, d, 10)] * 2, pa.timestamp("us"))  # noqa: E731
    table.append(events(range(4), ts=pa.concat_arrays([day(1), day(2)])))
    assert glob.glob(os.path.join(folder(table), "data", "shop=s0", "*.parquet"))
    with table.update_spec() as update:
        update.add_field("ts", DayTransform(), "ts_day")  # pyiceberg writes day() only with pyiceberg-core: add files
    added = []
    for d, ids in ((1, [10, 12]), (2, [14, 16])):
        path = os.path.join(folder(table), "data", "shop=s0", f"ts_day=2024-01-0{d}", "added.parquet")
        os.makedirs(os.path.dirname(path))
        pq.write_table(events(ids, ts=day(d)), path)
        added.append(path)
    table.add_files(added)
    for source in (table, folder(table)):
        ds = tl.Dataset(source)
        assert ds.schema.column_names == ["id", "x", "shop", "ts"]
        with pytest.raises(ValueError, match=r"partition_types=.*keeps its partition columns in its files"):
            tl.Dataset(source, partition_types="string")
        assert ds.meta().dtypes.astype(str).to_dict() == {"id": "int64", "x": "float64", "shop": str(backend.STRING_DTYPE),
                                                          "ts": "datetime64[us]"}
        got = records(ds.compute())
        expected = pyiceberg_records(table.scan())
        assert len(expected) == 8
        assert [(r["id"], r["x"], r["shop"], r["ts"].to_pydatetime()) for r in got] == \
            [(r["id"], r["x"], r["shop"], r["ts"]) for r in expected]


def test_columns_are_matched_by_field_id_across_renames_additions_and_promotions(catalog, device):
    """Files written before a rename hold the old name, before an addition lack the column
    (null there), before int -> long and float -> double the narrower types: all come out
    under the table's current names and types. The new ``x`` (added after ``x`` was renamed to
    ``price``) is another column: the old files' ``x`` must not be read as it."""
    first = pa.table({"id": pa.array([1, 2], pa.int32()), "x": pa.array([0.5, 1.5], pa.float32())})
    table = catalog.create_table("db.events", first.schema)
    table.append(first)
    with table.update_schema() as update:
        update.update_column("id", LongType())
        update.update_column("x", DoubleType())
        update.rename_column("x", "price")
    with table.update_schema() as update:
        update.add_column("x", StringType())
    table.append(pa.table({"id": pa.array([3], pa.int64()), "price": [2.5], "x": ["new"]}))
    ds = tl.Dataset(table, device=device)
    assert tl.Dataset(table).meta().dtypes.astype(str).to_dict() == {"id": "int64", "price": "float64",
                                                                     "x": str(backend.STRING_DTYPE)}
    expected = pyiceberg_records(table.scan())
    assert expected == [{"id": 1, "price": 0.5, "x": None}, {"id": 2, "price": 1.5, "x": None},
                        {"id": 3, "price": 2.5, "x": "new"}]
    assert records(ds.compute()) == expected
    assert records(tl.Dataset(folder(table), columns=["x", "id"]).compute()) == \
        [{"x": r["x"], "id": r["id"]} for r in expected]
    only_added = tl.Dataset(table, columns=["x"], device=device)  # the old file is read for no column at all
    assert len(only_added) == 3
    assert sorted(backend.to_host(only_added.compute())["x"].isna().tolist()) == [False, True, True]


def test_an_added_integer_column_is_nullable_in_every_partition(catalog):
    table = catalog.create_table("db.events", events([]).schema)
    table.append(events(range(2)))
    with table.update_schema() as update:
        update.add_column("clicks", LongType())
    table.append(events(range(2, 4), clicks=pa.array([7, 8], pa.int64())))
    ds = tl.Dataset(table, part_size=1)
    assert ds.npartitions == 2
    assert all(str(ds.read_partition(i)["clicks"].dtype) == "Int64" for i in range(2))
    assert [r["clicks"] for r in records(ds.compute())] == [None, None, 7, 8]


def test_an_empty_table_is_an_empty_dataset_with_its_columns(catalog):
    table = catalog.create_table("db.events", events([]).schema)
    for source in (table, folder(table)):
        ds = tl.Dataset(source)
        assert len(ds) == 0 and ds.schema.column_names == ["id", "x", "shop"]
        assert ds.compute().empty


def add_file(table, path, content, record_count, partition=()):
    """Add the file ``path`` to ``table`` as pyiceberg's writers would not: a delete file
    (merge-on-read, as Spark writes them), a data file without field ids and no name mapping,
    or one without its identity partition column (its value only in the metadata)."""
    from pyiceberg.manifest import DataFile, FileFormat
    from pyiceberg.typedef import Record

    data_file = DataFile.from_args(content=content, file_path=f"file://{path}", file_format=FileFormat.PARQUET,
                                   partition=Record(*partition), record_count=record_count,
                                   file_size_in_bytes=os.path.getsize(path), spec_id=table.spec().spec_id)
    with table.transaction() as transaction, transaction.update_snapshot().fast_append() as append:
        append.append_data_file(data_file)


def test_row_level_deletes_are_refused_naming_the_data_file(catalog):
    """A positional delete file hides rows of a data file that stays in place: reading the
    file would return them."""
    from pyiceberg.manifest import DataFileContent

    table = catalog.create_table("db.events", events([]).schema)
    table.append(events(range(3)))
    data_file = next(iter(table.scan().plan_files())).file.file_path
    deletes = os.path.join(folder(table), "data", "deletes.parquet")
    pq.write_table(pa.table({"file_path": [data_file], "pos": pa.array([1], pa.int64())}), deletes)
    add_file(table, deletes, DataFileContent.POSITION_DELETES, 1)
    assert [r["id"] for r in pyiceberg_records(table.scan())] == [0, 2]  # pyiceberg applies it
    for source in (table, folder(table)):
        with pytest.raises(IcebergTableError, match=rf"rows of the data file {data_file} are deleted by the delete "
                                                    r"file\(s\) \['file://.*deletes\.parquet'\].*compact"):
            tl.Dataset(source)


def test_a_file_without_field_ids_and_no_name_mapping_is_refused_naming_it(catalog):
    from pyiceberg.manifest import DataFileContent

    table = catalog.create_table("db.events", events([]).schema)
    path = os.path.join(folder(table), "data", "foreign.parquet")
    os.makedirs(os.path.dirname(path))
    pq.write_table(events(range(2)), path)
    add_file(table, path, DataFileContent.DATA, 2)
    with pytest.raises(ValueError, match=rf"{path}: column 'id' has no field id .*no name mapping"):
        tl.Dataset(table)


def test_a_file_without_its_identity_partition_column_is_refused_naming_it(catalog):
    """Iceberg lets a file leave out an identity partition column (its value is in the
    metadata, as in tables migrated from Hive): tabloader would read it as null, so it refuses."""
    from pyiceberg.manifest import DataFileContent

    table = catalog.create_table("db.events", events([]).schema)
    with table.update_spec() as update:
        update.add_identity("shop")
    path = os.path.join(folder(table), "data", "shop=s0", "migrated.parquet")
    os.makedirs(os.path.dirname(path))
    with_ids = pa.schema([pa.field("id", pa.int64(), metadata={b"PARQUET:field_id": b"1"}),
                          pa.field("x", pa.float64(), metadata={b"PARQUET:field_id": b"2"})])
    pq.write_table(events([0, 2]).select(["id", "x"]).cast(with_ids), path)
    add_file(table, path, DataFileContent.DATA, 2, partition=("s0",))
    assert [r["shop"] for r in pyiceberg_records(table.scan())] == ["s0", "s0"]  # pyiceberg fills it in
    with pytest.raises(ValueError, match=rf"{path} does not store the column\(s\) \['shop'\], whose values the "
                                         r"table keeps as partition values only"):
        tl.Dataset(table)


def test_a_row_filter_is_read_exactly_on_partitions_and_refused_inside_files(catalog):
    """A filter on an identity partition column keeps or drops whole files (pyiceberg's
    residual is always-true): read exactly. One that keeps some rows of a file is refused,
    never ignored."""
    table = catalog.create_table("db.events", events([]).schema)
    with table.update_spec() as update:
        update.add_identity("shop")
    table.append(events(range(6)))
    by_shop = table.scan(row_filter="shop == 's0'")
    assert records(tl.Dataset(by_shop).compute()) == pyiceberg_records(by_shop)
    assert [r["id"] for r in pyiceberg_records(by_shop)] == [0, 2, 4]
    with pytest.raises(IcebergTableError, match=r"row_filter=.*id.* keeps only some rows of the data file .*shop=s"):
        tl.Dataset(table.scan(row_filter="id > 0"))



@pytest.mark.parametrize("row_filter", ["shop != 's0'", "not shop == 's0'", "shop not in ('s0')",
                                        "day != '2024-01-01'", "shop is null or shop != 's0'"])
def test_a_null_partition_passes_a_filter_as_pyicebergs_reader_and_sql_say(catalog, row_filter):
    """pyiceberg plans the files of a null partition value for ``!=`` (its residual is
    always-true), where its reader, as SQL, keeps none of their rows: null != 's0' is not true."""
    day = pa.array([datetime.date(2024, 1, 1), datetime.date(2024, 1, 2), None, datetime.date(2024, 1, 2)])
    rows = pa.table({"id": pa.array([1, 2, 3, 4], pa.int64()), "shop": pa.array(["s0", "s1", None, "s1"]),
                     "day": day})
    table = catalog.create_table("db.events", rows.schema)
    with table.update_spec() as update:
        update.add_identity("shop")
        update.add_identity("day")
    table.append(rows)
    scan = table.scan(row_filter=row_filter)
    assert records(tl.Dataset(scan).compute()) == pyiceberg_records(scan)

def test_files_outside_the_table_folder_are_refused_naming_them(catalog, tmp_path):
    """A table's metadata may name files anywhere (added files, a manifest list edited): from a
    folder, tabloader reads only inside it."""
    table = catalog.create_table("db.events", events([]).schema)
    outside = str(tmp_path / "elsewhere.parquet")
    pq.write_table(events(range(3)), outside)
    table.add_files([outside])
    with pytest.raises(IcebergTableError, match=rf"names the data file '{outside}', outside the table's folder"):
        tl.Dataset(folder(table))
    # the user's catalog's table is read wherever its IO finds its files
    assert records(tl.Dataset(table).compute()) == pyiceberg_records(table.scan())

    table = catalog.create_table("db.moved", events([]).schema)
    table.append(events(range(3)))
    metadata_file = table.metadata_location.removeprefix("file://")
    with open(metadata_file) as text:
        metadata = json.load(text)
    metadata["snapshots"][0]["manifest-list"] = str(tmp_path / "list.avro")
    with open(metadata_file, "w") as text:
        json.dump(metadata, text)
    with pytest.raises(IcebergTableError, match=r"names the file '.*list\.avro', outside the table's folder"):
        tl.Dataset(folder(table))


def test_a_moved_table_folder_is_read_where_it_is(catalog, tmp_path):
    table = catalog.create_table("db.events", events([]).schema)
    table.append(events(range(3)))
    expected = pyiceberg_records(table.scan())
    moved = str(tmp_path / "moved")
    shutil.move(folder(table), moved)
    assert records(tl.Dataset(moved).compute()) == expected


def test_an_iceberg_table_feeds_a_workflow_and_the_loader(catalog):
    table = catalog.create_table("db.events", events([]).schema)
    table.append(events(range(4)))
    table.overwrite(events(range(10, 16)))
    workflow = tl.Workflow(["id"] + (["shop"] >> tl.ops.Categorify()) + (["x"] >> tl.ops.Normalize()), progress=False)
    out = workflow.fit_transform(tl.Dataset(table))
    x = np.array([r["x"] for r in pyiceberg_records(table.scan())])
    batches = list(tl.Loader(out, 4, categorical=["id", "shop"], continuous=["x"]))
    ids = np.concatenate([features["id"] for features, _ in batches])
    normalized = np.concatenate([features["x"] for features, _ in batches])
    assert sorted(ids.tolist()) == list(range(10, 16))
    order = np.argsort(ids)
    np.testing.assert_allclose(normalized[order].ravel(), (x - x.mean()) / x.std(), rtol=1e-5)


def test_a_table_folder_behind_an_fsspec_url_is_read_through_that_file_system(catalog):
    table = catalog.create_table("db.events", events([]).schema)
    table.append(events(range(3)))
    table.overwrite(events(range(10, 12)))
    memory = fsspec.filesystem("memory")
    memory.put(folder(table), "/iceberg-test/events", recursive=True)
    try:
        ds = tl.Dataset("memory://iceberg-test/events")
        assert all(p.startswith("/iceberg-test/events/data/") for p in ds.paths)
        assert records(ds.compute()) == pyiceberg_records(table.scan())
    finally:
        memory.rm("/iceberg-test", recursive=True)


def test_without_pyiceberg_a_table_folder_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyiceberg.catalog.noop", None)  # as if pyiceberg were not installed
    with pytest.raises(ImportError, match=r"is an Apache Iceberg table, .*pip install \"tabloader\[iceberg\]\""):
        tl.Dataset(os.path.join(os.path.dirname(__file__), "data", "tables", "iceberg"))
