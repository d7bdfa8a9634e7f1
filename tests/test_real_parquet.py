"""Parquet and CSV as other tools write them: pyarrow, polars and DuckDB files without pandas
metadata, hive ``key=value`` folders, columns in another order, dictionary-encoded columns,
decimal/date/binary columns, nested columns, integer columns with nulls.

Expected values are written out by hand here (Python lists, pandas frames built from them, or
pandas/Python arithmetic on them), never taken from tabloader.
"""

from __future__ import annotations

import datetime
import decimal
import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pds
import pyarrow.parquet as pq
import pytest

import tabloader as tl
from tabloader import Dataset, ops
from tabloader.dataset import SchemaMismatchError
from tabloader.backend import STRING_DTYPE

from pandas_versions import read_by_pandas

# The lent GPU image has neither: skip this (CPU-only) module there instead of failing the
# whole `pytest -m gpu tests` collection.
duckdb = pytest.importorskip("duckdb")
pl = pytest.importorskip("polars")

BIG = 2**60  # ids above 2**53 merge when they pass through float64


def check_dtypes_agree(ds: Dataset) -> None:
    """meta(), every partition and the Dask frame have the same dtypes."""
    meta = ds.meta().dtypes
    for i, part in enumerate(ds.to_iter()):
        pd.testing.assert_series_equal(part.dtypes, meta, obj=f"dtypes of partition {i}")
    pd.testing.assert_series_equal(ds.to_ddf().dtypes, meta, obj="dtypes of to_ddf()")
    pd.testing.assert_series_equal(ds.to_ddf().compute().dtypes, meta, obj="dtypes of to_ddf().compute()")


def check_reads(ds: Dataset, expected: pd.DataFrame) -> None:
    """Everything the dataset yields equals ``expected``, with the same dtypes everywhere."""
    check_dtypes_agree(ds)
    pd.testing.assert_frame_equal(ds.compute(), expected)
    pd.testing.assert_frame_equal(pd.concat(list(ds.to_iter()), ignore_index=True), expected)
    pd.testing.assert_frame_equal(ds.to_ddf().compute().reset_index(drop=True), expected)
    pd.testing.assert_frame_equal(ds.head(1), expected.head(1))  # head() reads the first partition


def loader_column(ds, name: str, **kwargs) -> list:
    loader = tl.Loader(ds, batch_size=7, shuffle=False, categorical=[name], continuous=[], target=[], **kwargs)
    return np.concatenate([features[name] for features, _ in loader]).tolist()


# --- 1. integer columns with nulls ------------------------------------------------------------
IDS = [None, None] + [BIG + 1 + i % 5 for i in range(48)]  # nulls only in the first row group
SMALL = [i if i % 9 else None for i in range(50)]  # a null in most row groups, not all
FLAGS = [None if i == 30 else i % 3 == 0 for i in range(50)]


def write_int_file(path, **kwargs) -> None:
    pq.write_table(pa.table({
        "id": pa.array(IDS, pa.int64()),
        "small": pa.array(SMALL, pa.int32()),
        "flag": pa.array(FLAGS, pa.bool_()),
        "count": pa.array(range(50), pa.int64()),
        "x": pa.array(np.arange(50) * 0.5),
    }), str(path), row_group_size=10, **kwargs)


INT_FRAME = pd.DataFrame({
    "id": pd.array(IDS, dtype="Int64"),
    "small": pd.array(SMALL, dtype="Int32"),
    "flag": pd.array(FLAGS, dtype="boolean"),
    "count": np.arange(50, dtype=np.int64),  # no nulls anywhere: stays numpy
    "x": np.arange(50) * 0.5,
})


def test_pyarrow_integers_with_nulls_are_nullable_in_every_partition(tmp_path):
    write_int_file(tmp_path / "ints.parquet")
    ds = Dataset(str(tmp_path / "ints.parquet"), part_size=1)  # one row group per partition
    assert ds.npartitions == 5
    check_reads(ds, INT_FRAME)
    assert ds.compute()["id"].dropna().nunique() == 5
    assert [(c.name, c.dtype) for c in ds.schema] == [("id", "int64"), ("small", "int32"), ("flag", "bool"),
                                                      ("count", "int64"), ("x", "float64")]


def test_missing_statistics_mean_nulls_are_possible(tmp_path):
    optional = pa.field("maybe", pa.int64())
    required = pa.field("never", pa.int64(), nullable=False)
    table = pa.table([pa.array([BIG + 1, BIG + 2]), pa.array([1, 2])], schema=pa.schema([optional, required]))
    pq.write_table(table, str(tmp_path / "f.parquet"), write_statistics=False)
    ds = Dataset(str(tmp_path / "f.parquet"))
    expected = pd.DataFrame({"maybe": pd.array([BIG + 1, BIG + 2], dtype="Int64"), "never": np.array([1, 2])})
    check_reads(ds, expected)


def test_an_empty_file_beside_others_leaves_their_integers_plain(tmp_path):
    """pyarrow writes an empty table as one row group of 0 rows without statistics: it holds no
    null, so the column stays int64 (the dtype the other files give alone)."""
    pq.write_table(pa.table({"a": [1, 2, 3]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"a": pa.array([], pa.int64())}), tmp_path / "b.parquet")
    assert pq.read_metadata(tmp_path / "b.parquet").row_group(0).column(0).statistics is None
    check_reads(Dataset(str(tmp_path)), pd.DataFrame({"a": np.array([1, 2, 3])}))

def test_polars_and_duckdb_integers_with_nulls(tmp_path):
    pl.DataFrame({"id": pl.Series(IDS, dtype=pl.Int64), "x": np.arange(50) * 0.5}).write_parquet(
        tmp_path / "polars.parquet", row_group_size=10)
    expected = pd.DataFrame({"id": pd.array(IDS, dtype="Int64"), "x": np.arange(50) * 0.5})
    check_reads(Dataset(str(tmp_path / "polars.parquet"), part_size=1), expected)

    duckdb.sql(f"COPY (SELECT CASE WHEN i < 2 THEN NULL ELSE {BIG + 1} + (i - 2) % 5 END AS id, i * 0.5::DOUBLE AS x "
               f"FROM range(50) t(i) ORDER BY i) TO '{tmp_path / 'duck.parquet'}' (FORMAT PARQUET)")
    check_reads(Dataset(str(tmp_path / "duck.parquet")), expected)


def encode_by_hand(values: list) -> list:
    """Categorify's contract: 1 null, 2 the one OOV bucket, then values by descending count,
    ties by value, from 3."""
    counts: dict = {}
    for v in values:
        if v is not None:
            counts[v] = counts.get(v, 0) + 1
    order = sorted(counts, key=lambda v: (-counts[v], v))
    ids = {v: 3 + i for i, v in enumerate(order)}
    return [1 if v is None else ids[v] for v in values]


def test_categorify_and_joingroupby_keep_ids_above_2_53(tmp_path):
    rng = np.random.default_rng(0)
    ids = [BIG + k for k in range(1, 6) for _ in range(7 - k)] + [None] * 3  # counts 6, 5, 4, 3, 2
    ids = [ids[i] for i in rng.permutation(len(ids))]
    x = [float(i) for i in range(len(ids))]
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "x": x}), str(tmp_path / "f.parquet"), row_group_size=4)
    ds = Dataset(str(tmp_path / "f.parquet"), part_size=1)

    encoded = tl.Workflow(["id"] >> ops.Categorify(num_buckets=1), progress=False).fit_transform(ds).compute()
    assert encoded["id"].tolist() == encode_by_hand(ids)
    assert encoded["id"][encoded["id"] > 2].nunique() == 5

    joined = tl.Workflow(["id"] >> ops.JoinGroupby(["x"], stats=["count", "sum"]), progress=False)
    out = joined.fit_transform(ds).compute()
    count: dict = {}
    total: dict = {}
    for v, xv in zip(ids, x):  # the null group is a group of its own
        count[v] = count.get(v, 0) + 1
        total[v] = total.get(v, 0.0) + xv
    assert out["id_count"].tolist() == [count[v] for v in ids]
    assert out["id_x_sum"].tolist() == [total[v] for v in ids]


def test_loader_gets_exact_ids_through_a_workflow(tmp_path):
    write_int_file(tmp_path / "ints.parquet")
    ds = Dataset(str(tmp_path / "ints.parquet"), part_size=1)
    filled = tl.Workflow(["id"] >> ops.FillMissing(0), progress=False).fit_transform(ds)
    assert loader_column(filled, "id") == [0 if v is None else v for v in IDS]
    assert loader_column(ds, "count") == list(range(50))  # no nulls: read straight from the files


def write_csv(path, rows: list[list]) -> None:
    with open(path, "w") as f:
        f.write("id,x,s,n\n")
        for row in rows:
            f.write(",".join("" if v is None else str(v) for v in row) + "\n")


def test_csv_integers_with_blanks_are_exact_in_every_block(tmp_path):
    n = 400
    rows = [[None if i % 50 == 7 else BIG + i,  # blanks in some blocks only
             None if i % 3 == 0 else i * 0.25,
             None if i % 11 == 0 else f"s{i % 13}",
             i] for i in range(n)]
    write_csv(tmp_path / "a.csv", rows[:250])
    write_csv(tmp_path / "b.csv", rows[250:])
    ds = Dataset(str(tmp_path / "*.csv"), part_size="2KB")
    assert ds.npartitions > 4
    expected = pd.DataFrame({
        "id": pd.array([r[0] for r in rows], dtype="Int64"),
        "x": np.array([np.nan if r[1] is None else r[1] for r in rows]),
        "s": pd.Series([r[2] for r in rows], dtype=STRING_DTYPE),
        "n": pd.array([r[3] for r in rows], dtype="Int64"),
    })
    check_reads(ds, expected)
    assert ds.schema["id"].dtype == "int64" and ds.schema["s"].dtype == "string"



def test_a_csv_value_that_does_not_parse_is_named_with_its_file(tmp_path):
    """The type of a column is inferred from the first file's first rows; a later block holding
    a value of another type fails in Dask's own task, which named no file (Criteo's day_17)."""
    rows = [[i, i * 0.5, f"s{i % 3}", i] for i in range(300)]
    write_csv(tmp_path / "a.csv", rows[:150])
    write_csv(tmp_path / "b.csv", rows[150:280] + [["oops", 0.5, "s0", 1]] + rows[280:])
    ds = Dataset(str(tmp_path / "*.csv"), part_size="1KB")
    assert ds.npartitions >= 4
    named = r"(?s)'oops'.*\[partition \d+ \(block \d+ of .*b\.csv\)\]"
    with pytest.raises(ValueError, match=named):
        tl.Workflow(["id"] >> ops.Categorify(), progress=False).fit(ds)
    with pytest.raises(ValueError, match=named):
        ds.compute()
    with pytest.raises(ValueError, match=named):
        ds.to_parquet(str(tmp_path / "out"), progress=False)
    assert not os.path.exists(tmp_path / "out")

# --- 2. hive partitioning ---------------------------------------------------------------------
def test_hive_folders_written_by_pyarrow(tmp_path):
    n = 40
    table = pa.table({"row": pa.array(range(n), pa.int64()), "v": np.arange(n) * 1.5,
                      "country": [["de", "fr", "us"][i % 3] for i in range(n)],
                      "year": [2023 + i % 2 for i in range(n)]})
    root = tmp_path / "hive"
    pds.write_dataset(table, root, format="parquet", partitioning=["country", "year"], partitioning_flavor="hive")
    assert sorted(os.listdir(root)) == ["country=de", "country=fr", "country=us"]
    ds = Dataset(str(root), part_size=1)
    assert ds.npartitions == 6
    # pyarrow's hive partitioning types the keys: string and int32; they come after the file's columns
    assert [(c.name, c.dtype) for c in ds.schema] == [("row", "int64"), ("v", "float64"), ("country", "string"),
                                                      ("year", "int32")]
    expected = pd.DataFrame({"row": np.arange(n), "v": np.arange(n) * 1.5,
                             "country": pd.Series([["de", "fr", "us"][i % 3] for i in range(n)], dtype=STRING_DTYPE),
                             "year": np.array([2023 + i % 2 for i in range(n)], dtype=np.int32)})
    check_dtypes_agree(ds)
    pd.testing.assert_frame_equal(ds.compute().sort_values("row", ignore_index=True), expected)
    assert list(ds.read_partition(0, columns=["year", "row"]).columns) == ["year", "row"]

    ds.to_parquet(str(tmp_path / "out"), progress=False)
    written = read_by_pandas(lambda: pq.read_table(tmp_path / "out").to_pandas())
    pd.testing.assert_frame_equal(written.sort_values("row", ignore_index=True), expected)

    rows = loader_column(ds, "row")
    years = loader_column(ds, "year")
    assert sorted(zip(rows, years)) == [(i, 2023 + i % 2) for i in range(n)]


def test_hive_folders_written_by_duckdb_and_a_null_key(tmp_path):
    root = tmp_path / "duck"
    duckdb.sql(f"COPY (SELECT i AS v, i % 3 AS k, 'p' || (i % 2)::VARCHAR AS q FROM range(12) t(i)) "
               f"TO '{root}' (FORMAT PARQUET, PARTITION_BY (k, q))")
    ds = Dataset(str(root))
    expected = pd.DataFrame({"v": np.arange(12), "k": np.arange(12).astype(np.int32) % 3,
                             "q": pd.Series([f"p{i % 2}" for i in range(12)], dtype=STRING_DTYPE)})
    pd.testing.assert_frame_equal(ds.compute().sort_values("v", ignore_index=True), expected)
    check_dtypes_agree(ds)

    # Spark and pyarrow write a null key as __HIVE_DEFAULT_PARTITION__: an int key with nulls is Int32
    table = pa.table({"v": [1, 2, 3], "k": pa.array([5, None, 6], pa.int64())})
    pds.write_dataset(table, tmp_path / "nulls", format="parquet", partitioning=["k"], partitioning_flavor="hive")
    assert "k=__HIVE_DEFAULT_PARTITION__" in os.listdir(tmp_path / "nulls")
    ds = Dataset(str(tmp_path / "nulls"), part_size=1)
    check_dtypes_agree(ds)
    pd.testing.assert_frame_equal(ds.compute().sort_values("v", ignore_index=True),
                                  pd.DataFrame({"v": [1, 2, 3], "k": pd.array([5, None, 6], dtype="Int32")}))


def test_hive_keys_beyond_int32_are_int64_not_strings(tmp_path):
    # Spark types such a key long; pyarrow's own partitioning would make it a string
    for uid, day in [(3_000_000_000, -5), (7, 2**40)]:
        folder = tmp_path / "t" / f"uid={uid}" / f"day={day}"
        folder.mkdir(parents=True)
        pq.write_table(pa.table({"v": [uid % 10]}), folder / "part-0.parquet")
    (tmp_path / "t" / "uid=__HIVE_DEFAULT_PARTITION__" / "day=1").mkdir(parents=True)
    pq.write_table(pa.table({"v": [9]}), tmp_path / "t" / "uid=__HIVE_DEFAULT_PARTITION__" / "day=1" / "p.parquet")
    ds = Dataset(str(tmp_path / "t"))
    assert [(c.name, c.dtype) for c in ds.schema] == [("v", "int64"), ("uid", "int64"), ("day", "int64")]
    got = ds.compute().sort_values("v", ignore_index=True)
    pd.testing.assert_frame_equal(got, pd.DataFrame({"v": [0, 7, 9],
                                                     "uid": pd.array([3_000_000_000, 7, None], dtype="Int64"),
                                                     "day": [-5, 2**40, 1]}))
    check_dtypes_agree(ds)


# dates, timestamps and floats as pyarrow, polars and DuckDB write them into folder names
DAYS = [datetime.date(2024, 1, 1), datetime.date(2024, 1, 2), None]
TIMES = [datetime.datetime(2024, 1, 1, 10), datetime.datetime(2024, 1, 1, 11, 30, 0, 500_000), None]
SCORES = [1.5, 2.0, None]


def write_typed_hive(writer: str, root, table: pa.Table, keys: list[str]) -> None:
    if writer == "pyarrow":  # d=2024-01-01, ts=2024-01-01 10%3A00%3A00.000000, x=2
        pds.write_dataset(table, root, format="parquet", partitioning=keys, partitioning_flavor="hive")
    elif writer == "polars":  # ts=2024-01-01%2010%3A00%3A00.000000, x=2.0
        pl.from_arrow(table).write_parquet(pl.PartitionBy(str(root), key=keys, include_key=False), mkdir=True)
    else:  # duckdb: ts=2024-01-01 10%3A00%3A00, ts=2024-01-01 11%3A30%3A00.5
        con = duckdb.connect()
        con.register("rows", table)
        con.sql(f"COPY rows TO '{root}' (FORMAT PARQUET, PARTITION_BY ({', '.join(keys)}))")


@pytest.mark.parametrize("writer", ["pyarrow", "polars", "duckdb"])
def test_date_timestamp_and_float_keys_as_other_tools_write_them(tmp_path, writer):
    """Spark and polars read such keys back as a date, a timestamp and a float (DuckDB the date
    only, the others as strings): so does tabloader, with the dtypes of such columns in a file."""
    n = 9
    table = pa.table({"row": pa.array(range(n), pa.int64()),
                      "d": pa.array([DAYS[i % 3] for i in range(n)], pa.date32()),
                      "ts": pa.array([TIMES[i // 3] for i in range(n)], pa.timestamp("us")),
                      "x": pa.array([SCORES[(i + 1) % 3] for i in range(n)], pa.float64())})
    write_typed_hive(writer, tmp_path / "hive", table, ["d", "ts", "x"])
    ds = Dataset(str(tmp_path / "hive"), part_size=1)
    assert [(c.name, c.dtype) for c in ds.schema] == [("row", "int64"), ("d", "date32[day]"),
                                                      ("ts", "datetime64[us]"), ("x", "float64")]
    expected = pd.DataFrame({"row": np.arange(n),
                             "d": pd.Series(pd.arrays.ArrowExtensionArray(table.column("d").combine_chunks())),
                             "ts": pd.Series([TIMES[i // 3] for i in range(n)], dtype="datetime64[us]"),
                             "x": [np.nan if SCORES[(i + 1) % 3] is None else SCORES[(i + 1) % 3] for i in range(n)]})
    check_dtypes_agree(ds)
    pd.testing.assert_frame_equal(ds.compute().sort_values("row", ignore_index=True), expected)
    # the same dtypes as the same columns read from a file
    pq.write_table(table, tmp_path / "flat.parquet")
    pd.testing.assert_series_equal(ds.meta().dtypes, Dataset(str(tmp_path / "flat.parquet")).meta().dtypes)
    assert list(ds.read_partition(0, columns=["d", "row"]).columns) == ["d", "row"]
    # written back (as columns), they read back alike
    ds.to_parquet(str(tmp_path / "out"), progress=False)
    back = Dataset(str(tmp_path / "out"))
    pd.testing.assert_frame_equal(back.compute().sort_values("row", ignore_index=True), expected)


def write_folders(root, folders: list[str]) -> None:
    """One tiny file in each folder (``k=v/j=w``), its ``row`` the folder's position."""
    for i, folder in enumerate(folders):
        (root / folder).mkdir(parents=True)
        pq.write_table(pa.table({"row": [i]}), root / folder / "part-0.parquet")


def test_hive_keys_typed_only_when_every_value_parses_strictly(tmp_path):
    # zip codes and months keep their leading zero (Spark and polars read them as integers,
    # losing it; DuckDB keeps the string); dates only as YYYY-MM-DD, real ones; dates and
    # timestamps together are timestamps, integers and fractions together floats
    write_folders(tmp_path / "t", [
        "zip=01234/month=07/d=2024-1-5/bad=2024-02-30/mix=2024-01-01/num=1/sci=1e3/neg=-2",
        "zip=10115/month=12/d=2024-01-05/bad=2024-02-28/mix=2024-01-01 10%3A00%3A00/num=0.25/sci=5/neg=-0.5",
    ])
    ds = Dataset(str(tmp_path / "t"))
    assert {c.name: c.dtype for c in ds.schema} == {
        "row": "int64", "zip": "string", "month": "string", "d": "string", "bad": "string",
        "mix": "datetime64[us]", "num": "float64", "sci": "float64", "neg": "float64"}
    got = ds.compute().sort_values("row", ignore_index=True)
    assert got["zip"].tolist() == ["01234", "10115"] and got["month"].tolist() == ["07", "12"]
    assert got["mix"].tolist() == [pd.Timestamp("2024-01-01"), pd.Timestamp("2024-01-01 10:00")]
    assert got["num"].tolist() == [1.0, 0.25] and got["sci"].tolist() == [1000.0, 5.0]


def test_partition_types_override_inference(tmp_path):
    write_folders(tmp_path / "t", ["zip=01234/dt=2024-01-01/n=3", "zip=10115/dt=2024-01-02/n=4"])
    ds = Dataset(str(tmp_path / "t"), partition_types={"zip": "int32", "n": pa.float64()})
    assert {c.name: c.dtype for c in ds.schema} == {"row": "int64", "zip": "int32", "dt": "date32[day]",
                                                    "n": "float64"}
    got = ds.compute().sort_values("row", ignore_index=True)
    assert got["zip"].tolist() == [1234, 10115] and got["n"].tolist() == [3.0, 4.0]
    # one type for every key: no inference at all
    strings = Dataset(str(tmp_path / "t"), partition_types="string").compute().sort_values("row", ignore_index=True)
    assert strings["dt"].tolist() == ["2024-01-01", "2024-01-02"] and strings["n"].tolist() == ["3", "4"]
    check_dtypes_agree(Dataset(str(tmp_path / "t"), partition_types={"dt": "timestamp[us]"}))


def test_partition_types_errors_name_the_key_and_value(tmp_path):
    write_folders(tmp_path / "t", ["zip=01234/dt=2024-01-01", "zip=1011A/dt=2024-01-02"])
    with pytest.raises(ValueError, match=r"partition_types names \['day'\].*keys .* are \['zip', 'dt'\]"):
        Dataset(str(tmp_path / "t"), partition_types={"day": "date32"})
    with pytest.raises(ValueError, match=r"partition_types\['dt'\] = 'date'.*expected one of .*'date32'"):
        Dataset(str(tmp_path / "t"), partition_types={"dt": "date"})
    with pytest.raises(ValueError, match=r"zip=1011A/dt=2024-01-02/part-0\.parquet: partition key 'zip' has the "
                                         r"value '1011A' \(folder 'zip=1011A'\), which does not parse as int32"):
        Dataset(str(tmp_path / "t"), partition_types={"zip": "int32"})
    with pytest.raises(ValueError, match=r"partition_types=.*parquet files; this source is"):
        Dataset(pd.DataFrame({"a": [1]}), partition_types="string")


def test_hive_keys_must_be_in_every_file(tmp_path):
    (tmp_path / "d" / "k=1").mkdir(parents=True)
    pq.write_table(pa.table({"v": [1]}), tmp_path / "d" / "k=1" / "a.parquet")
    pq.write_table(pa.table({"v": [2]}), tmp_path / "d" / "b.parquet")
    with pytest.raises(SchemaMismatchError, match=r"a\.parquet does not match .*b\.parquet: extra columns \['k'\]"):
        Dataset(str(tmp_path / "d"))

    # a file storing the key as a column, outside any k= folder, has no value for the key
    pq.write_table(pa.table({"v": [2], "k": [3]}), tmp_path / "d" / "b.parquet")
    with pytest.raises(SchemaMismatchError, match=r"a\.parquet does not match .*b\.parquet: extra columns \['k'\]"):
        Dataset(str(tmp_path / "d"))


def test_keys_the_files_also_store_as_polars_writes_them(tmp_path):
    """polars' partitioned write (and DuckDB's with WRITE_PARTITION_COLUMNS) also stores each key
    in the files: the key keeps the files' type and place among their columns, and its value is
    the folder's, as Spark, polars and DuckDB read it."""
    n = 8
    frame = pl.DataFrame({"dt": [DAYS[i % 2] for i in range(n)], "row": range(n), "m": [7 + i % 4 for i in range(n)]})
    frame.write_parquet(tmp_path / "pl", partition_by=["dt", "m"])
    stored = pq.read_schema(next((tmp_path / "pl").rglob("*.parquet")))
    assert stored.names == ["dt", "row", "m"]  # what this test is about: the keys are in the files too
    ds = Dataset(str(tmp_path / "pl"), part_size=1)
    assert [(c.name, c.dtype) for c in ds.schema] == [("dt", "date32[day]"), ("row", "int64"), ("m", "int64")]
    expected = frame.to_pandas(use_pyarrow_extension_array=False)
    expected["dt"] = pd.Series(pd.arrays.ArrowExtensionArray(frame["dt"].to_arrow()))
    pd.testing.assert_frame_equal(ds.compute().sort_values("row", ignore_index=True), expected)
    check_dtypes_agree(ds)

    # the folder's value wins over a file's own (as in polars and DuckDB), typed as the file's column
    (tmp_path / "odd" / "m=8").mkdir(parents=True)
    pq.write_table(pa.table({"row": [1, 2], "m": pa.array([7, 7], pa.int16())}), tmp_path / "odd" / "m=8" / "a.parquet")
    pd.testing.assert_frame_equal(Dataset(str(tmp_path / "odd")).compute(),
                                  pd.DataFrame({"row": [1, 2], "m": np.array([8, 8], np.int16)}))
    # a folder value the file's type cannot hold is refused, naming the file, the key and the value
    (tmp_path / "odd" / "m=x").mkdir()
    pq.write_table(pa.table({"row": [3], "m": pa.array([7], pa.int16())}), tmp_path / "odd" / "m=x" / "b.parquet")
    with pytest.raises(ValueError, match=r"m=x/b\.parquet: partition key 'm' has the value 'x'.*does not parse as "
                                         r"int16, the type the files store it as"):
        Dataset(str(tmp_path / "odd"))


def test_key_value_folders_above_the_dataset_are_not_keys(tmp_path):
    root = tmp_path / "run=3" / "data"
    root.mkdir(parents=True)
    pq.write_table(pa.table({"v": [1, 2]}), root / "a.parquet")
    assert Dataset(str(root)).schema.column_names == ["v"]
    assert Dataset(str(root / "*.parquet")).schema.column_names == ["v"]
    assert Dataset(str(root / "a.parquet")).schema.column_names == ["v"]


# --- 3. CSV files that disagree -------------------------------------------------------------
def test_csv_file_missing_a_column_fails_at_construction(tmp_path):
    pd.DataFrame({"a": [1, 2], "x": [0.5, 1.5]}).to_csv(tmp_path / "a.csv", index=False)
    pd.DataFrame({"a": [3, 4]}).to_csv(tmp_path / "b.csv", index=False)
    with pytest.raises(SchemaMismatchError, match=r"b\.csv.*a\.csv.*missing columns \['x'\]"):
        Dataset(str(tmp_path / "*.csv"))


def test_csv_file_with_columns_in_another_order_fails_at_construction(tmp_path):
    pd.DataFrame({"a": [1, 2], "x": [0.5, 1.5]}).to_csv(tmp_path / "a.csv", index=False)
    pd.DataFrame({"x": [2.5], "a": [3]}).to_csv(tmp_path / "b.csv", index=False)
    with pytest.raises(SchemaMismatchError, match=r"b\.csv.*orders its columns differently.*\['x', 'a'\]"):
        Dataset(str(tmp_path / "*.csv"))


# --- 4. decimal, date and binary columns ----------------------------------------------------
PASSTHROUGH = pa.table({
    "id": pa.array([10, 11, 12, 10], pa.int64()),
    "price": pa.array([decimal.Decimal("1.25"), None, decimal.Decimal("-3.50"), decimal.Decimal("0.01")],
                      pa.decimal128(10, 2)),
    "day": pa.array([datetime.date(2024, 1, 1), datetime.date(1999, 12, 31), None, datetime.date(2024, 2, 29)],
                    pa.date32()),
    "blob": pa.array([b"\xff\xfe\x00", None, b"plain", b""], pa.binary()),  # not UTF-8
    "at": pa.array([datetime.time(1, 2, 3), None, datetime.time(23, 59), datetime.time(0)], pa.time64("us")),
})


def check_written_like_passthrough(out, names) -> None:
    written = pq.read_table(out)
    for name in names:
        assert written.schema.field(name).type == PASSTHROUGH.schema.field(name).type, name
        assert written.column(name).to_pylist() == PASSTHROUGH.column(name).to_pylist(), name


def test_decimal_date_time_binary_keep_their_type(tmp_path):
    pq.write_table(PASSTHROUGH, tmp_path / "in.parquet", row_group_size=2)
    ds = Dataset(str(tmp_path / "in.parquet"), part_size=1)
    ds.to_parquet(str(tmp_path / "out"), progress=False)
    check_written_like_passthrough(tmp_path / "out", PASSTHROUGH.column_names)
    back = pd.read_parquet(tmp_path / "out")  # pandas reads what tabloader wrote
    assert back["price"].tolist()[0] == decimal.Decimal("1.25")

    assert [c.dtype for c in ds.schema] == ["int64", "decimal128(10, 2)", "date32[day]", "binary", "time64[us]"]
    check_dtypes_agree(ds)
    assert ds.compute()["blob"].tolist()[:1] == [b"\xff\xfe\x00"]

    wf = tl.Workflow((["id"] >> ops.Categorify()) + ["price", "day", "blob", "at"], progress=False)
    wf.fit_transform(ds).to_parquet(str(tmp_path / "wf_out"), progress=False)
    check_written_like_passthrough(tmp_path / "wf_out", ["price", "day", "blob", "at"])
    assert pq.read_table(tmp_path / "wf_out").column("id").to_pylist() == encode_by_hand([10, 11, 12, 10])


# --- 5. columns in another order ------------------------------------------------------------
def test_files_with_columns_in_another_order_are_aligned_by_name(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    pq.write_table(pa.table({"a": [1, 2], "b": [0.5, 1.5], "s": ["x", "y"]}), d / "p0.parquet")
    pq.write_table(pa.table({"s": ["z"], "b": [2.5], "a": [3]}), d / "p1.parquet")
    expected = pd.DataFrame({"a": [1, 2, 3], "b": [0.5, 1.5, 2.5], "s": pd.Series(["x", "y", "z"], dtype=STRING_DTYPE)})
    for part_size in ("128MB", 1):
        ds = Dataset(str(d), part_size=part_size)
        assert ds.schema.column_names == ["a", "b", "s"]
        check_reads(ds, expected)
    ds.to_parquet(str(tmp_path / "out"), progress=False)
    pd.testing.assert_frame_equal(read_by_pandas(lambda: pq.read_table(tmp_path / "out").to_pandas()), expected)
    assert loader_column(ds, "a") == [1, 2, 3]



def test_files_declaring_large_strings_and_lists_read_with_files_that_do_not(tmp_path):
    """polars and pandas 3 declare large_string / large_list, Spark, DuckDB and pyarrow not; the
    parquet columns are the same, so one dataset reads both, as pyarrow.dataset does."""
    d = tmp_path / "d"
    d.mkdir()
    pl.DataFrame({"user": ["a", "b"], "tags": [["x"], ["y", "z"]]}).write_parquet(d / "p0.parquet")
    duckdb.sql(f"COPY (SELECT 'c' AS user, ['w'] AS tags) TO '{d / 'p1.parquet'}' (FORMAT PARQUET)")
    assert pq.read_schema(d / "p0.parquet").field("tags").type != pq.read_schema(d / "p1.parquet").field("tags").type
    expected = pds.dataset(str(d)).to_table(columns=["user", "tags"]).to_pydict()
    for part_size in ("128MB", 1):
        out = Dataset(str(d), part_size=part_size).compute()
        assert out["user"].tolist() == expected["user"]
        assert [list(t) for t in out["tags"]] == expected["tags"]
    wf = tl.Workflow(["user", "tags"] >> ops.Categorify())
    wf.fit(Dataset(str(d)))
    assert wf.output_schema["tags"].properties["cardinality"] == 3 + 4  # padding, null, one bucket; w x y z

# --- 6. dictionary-encoded and nested columns -----------------------------------------------
def test_dictionary_columns_are_read_as_strings(tmp_path):
    values = ["x", "y", None, "x", "z", "y"]
    pd.DataFrame({"c": pd.Categorical(values), "v": range(6)}).to_parquet(tmp_path / "pandas.parquet")
    pl.DataFrame({"c": pl.Series(values, dtype=pl.Categorical), "v": range(6)}).write_parquet(tmp_path / "pl.parquet")
    expected = pd.DataFrame({"c": pd.Series(values, dtype=STRING_DTYPE), "v": np.arange(6)})
    for name in ("pandas.parquet", "pl.parquet"):
        assert pa.types.is_dictionary(pq.read_schema(tmp_path / name).field("c").type)
        ds = Dataset(str(tmp_path / name), part_size=1)
        assert ds.schema["c"].dtype == "string"
        check_reads(ds, expected)
        out = tmp_path / f"out_{name}"
        ds.to_parquet(str(out), progress=False)
        assert pq.read_table(out).column("c").to_pylist() == values
        encoded = tl.Workflow(["c"] >> ops.Categorify(), progress=False).fit_transform(ds).compute()
        assert encoded["c"].tolist() == encode_by_hand(values)


@pytest.mark.parametrize("column", [
    pa.array([{"a": 1}, {"a": 2}]),
    pa.array([[("k", 1)], []], pa.map_(pa.string(), pa.int64())),
    pa.array([[[1, 2]], [[3]]], pa.list_(pa.list_(pa.int64()))),
], ids=["struct", "map", "list_of_lists"])
def test_nested_columns_are_refused_naming_them_and_the_way_out(tmp_path, column):
    path = tmp_path / "f.parquet"
    pq.write_table(pa.table({"v": [1, 2], "nested": column}), path)
    with pytest.raises(TypeError) as info:
        Dataset(str(path))
    message = str(info.value)
    file_type = pq.read_schema(path).field("nested").type
    assert "'nested'" in message and str(file_type) in message and "f.parquet" in message
    assert "columns=" in message
    pd.testing.assert_frame_equal(Dataset(str(path), columns=["v"]).compute(), pd.DataFrame({"v": [1, 2]}))


def test_columns_argument_selects_and_orders(tmp_path):
    pq.write_table(pa.table({"a": [1, 2], "b": [0.5, 1.5], "c": ["x", "y"]}), tmp_path / "f.parquet")
    ds = Dataset(str(tmp_path / "f.parquet"), columns=["c", "a"])
    check_reads(ds, pd.DataFrame({"c": pd.Series(["x", "y"], dtype=STRING_DTYPE), "a": [1, 2]}))
    with pytest.raises(KeyError, match=r"\['nope'\].*f\.parquet"):
        Dataset(str(tmp_path / "f.parquet"), columns=["a", "nope"])
    pd.DataFrame({"a": [1, 2], "b": [0.5, 1.5]}).to_csv(tmp_path / "f.csv", index=False)
    check_reads(Dataset(str(tmp_path / "f.csv"), columns=["b"]), pd.DataFrame({"b": [0.5, 1.5]}))
    frame = pd.DataFrame({"a": [1], "b": [2]})
    assert Dataset(frame, columns=["b"]).schema.column_names == ["b"]
