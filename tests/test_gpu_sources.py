"""The GPU (cuDF) path of the dataset's newer sources and layouts, against the CPU path on the same
files: hive keys typed int32/int64/float64/date32/timestamp[us] (Spark's folders, pandas-written
files with several row groups, keys alone), keys that polars also stores in the files, Delta
tables, Arrow data in memory, fixed-size lists, Spark's INT96/decimal/date/zoned columns, globs
skipping ``_`` folders, ``Filter`` masks holding nulls and the loader's refusals of dates and
decimals.

Every cuDF partition must equal the CPU partition converted to cuDF (``cudf.DataFrame.from_arrow``
of its arrow table: cuDF has no date type, its dates are datetime64[s] on both sides), dtypes and
values. The tests marked ``cudf`` (``gpu`` tests needing cuDF) skip where no CUDA device or no
cuDF is usable; the others check on the CPU the helpers the GPU path relies on.
"""

from __future__ import annotations

import datetime
import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tabloader as tl
from tabloader import backend, ops
from tabloader.dataset.parquet_layout import int96_columns
from tabloader.dataset.source import conform_dtypes
from tabloader.loader import Loader

gpu = pytest.mark.cudf  # a gpu test needing cuDF (the root conftest.py)
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
SPARK_TYPES = ["id", "byte", "short", "int", "long", "float", "double", "flag", "color", "day", "ts", "ts_ntz",
               "dec_int32", "dec_int64", "dec_fixed", "ints", "words"]  # all but the binary column


def polars():
    """polars, or a skip: the GPU machines' image has none (the GPU kit does not carry it)."""
    return pytest.importorskip("polars")


def spark_path(name: str) -> str:
    return os.path.join(DATA, "spark", name)


def converted(frame: pd.DataFrame):
    """A CPU frame as cuDF holds it (the test's own conversion, through arrow; cuDF's lists have
    32-bit offsets: large lists, polars' lists, as lists)."""
    import cudf

    table = pa.Table.from_pandas(frame, preserve_index=False)
    schema = pa.schema([f.with_type(pa.list_(f.type.value_field)) if pa.types.is_large_list(f.type) else f
                        for f in table.schema])
    return cudf.DataFrame.from_arrow(table.cast(schema))


def assert_gpu_reads_as_cpu(path_or_data, **options) -> None:
    """The dataset on the GPU has the partitions of the CPU one, converted: dtypes (the meta's
    too) and values, partition by partition."""
    import cudf

    on_cpu = tl.Dataset(path_or_data, device="cpu", **options)
    on_gpu = tl.Dataset(path_or_data, device="cuda", **options)
    assert on_gpu.npartitions == on_cpu.npartitions
    assert on_gpu.meta().dtypes.to_dict() == converted(on_cpu.meta()).dtypes.to_dict()
    for i in range(on_cpu.npartitions):
        got, expected = on_gpu.read_partition(i), converted(on_cpu.read_partition(i))
        where = on_gpu.describe_partition(i)
        assert isinstance(got, cudf.DataFrame), where
        assert got.dtypes.to_dict() == expected.dtypes.to_dict(), where
        assert got.to_arrow().to_pylist() == expected.to_arrow().to_pylist(), where


# --- hive keys ------------------------------------------------------------------------------------
@gpu
@pytest.mark.parametrize("options", [
    {},  # dt: date32, at: timestamp[us], score: float64, zip: string (leading zeros), nulls among them
    {"partition_types": {"zip": "int32"}},
    {"columns": ["zip", "dt", "at"]},  # keys alone: cuDF reads no rows without a column of the files
])
def test_spark_typed_keys_on_the_gpu(options):
    assert_gpu_reads_as_cpu(spark_path("hive_typed"), part_size=1, **options)


def write_keyed_pandas_files(root) -> str:
    """Files written by pandas (its metadata records a RangeIndex) under int32, int64, float64,
    date and timestamp keys, three row groups each."""
    for k, (n, day, at) in enumerate([(3, "2024-01-01", "2024-01-01 10%3A00%3A00"),
                                      (4, "2024-02-29", "2024-03-01 00%3A00%3A00.5")]):
        folder = os.path.join(root, f"n={n}", f"big={5_000_000_000 + k}", f"f={0.5 + k}", f"d={day}", f"t={at}")
        os.makedirs(folder)
        frame = pd.DataFrame({"v": np.arange(30) + 100 * k, "s": [f"s{i % 4}" for i in range(30)]})
        frame.to_parquet(os.path.join(folder, "part.parquet"), row_group_size=10)
    return str(root)


@gpu
@pytest.mark.parametrize("columns", [None, ["v", "t", "n"], ["big", "d"]])
def test_keys_of_pandas_written_row_groups_on_the_gpu(tmp_path, columns):
    """cuDF numbers a row group's rows from where pandas' stored RangeIndex puts them: the keys,
    repeated on the device, must still land on every row (not on the labels 0..n only)."""
    path = write_keyed_pandas_files(tmp_path / "keyed")
    types = {c.name: c.dtype for c in tl.Dataset(path).schema}
    assert [types[k] for k in ("n", "big", "f", "d", "t")] == ["int32", "int64", "float64", "date32[day]",
                                                               "datetime64[us]"]
    assert_gpu_reads_as_cpu(path, part_size=1, columns=columns)


@gpu
def test_keys_polars_also_stores_in_the_files_on_the_gpu(tmp_path):
    """polars stores its partition keys in the files too (an int64 ``m`` under ``m=7``): cuDF's
    own hive discovery failed on those, merging int64 with the int32 it inferred."""
    pl = polars()
    days = [datetime.date(2024, 1, 1), datetime.date(2024, 1, 2)]
    frame = pl.DataFrame({"dt": [days[i % 2] for i in range(8)], "row": range(8), "m": [7 + i % 4 for i in range(8)]})
    frame.write_parquet(tmp_path / "pl", partition_by=["dt", "m"])
    assert pq.read_schema(next((tmp_path / "pl").rglob("*.parquet"))).names == ["dt", "row", "m"]
    assert_gpu_reads_as_cpu(str(tmp_path / "pl"), part_size=1)
    # the folder's value wins over the file's own, typed as the file's column
    (tmp_path / "odd" / "m=8").mkdir(parents=True)
    pq.write_table(pa.table({"row": [1, 2], "m": pa.array([7, 7], pa.int16())}), tmp_path / "odd" / "m=8" / "a.parquet")
    assert_gpu_reads_as_cpu(str(tmp_path / "odd"))
    assert tl.Dataset(str(tmp_path / "odd"), device="cuda").compute()["m"].to_arrow().to_pylist() == [8, 8]


# --- other sources --------------------------------------------------------------------------------
@gpu
@pytest.mark.parametrize("name", ["delta", "delta_commits"])
def test_delta_tables_on_the_gpu(name):
    assert_gpu_reads_as_cpu(os.path.join(DATA, "tables", name), part_size=1)


def arrow_data(kind: str):
    pl = polars() if kind == "polars" else None
    n = 40
    vectors = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    columns = {"id": np.arange(n), "n": [None if i % 6 == 0 else i for i in range(n)],
               "city": [["berlin", "paris", None][i % 3] for i in range(n)],
               "day": [datetime.date(2024, 1, 1 + i % 28) for i in range(n)],
               "items": [list(range(i % 4)) for i in range(n)]}
    if kind == "polars":  # Categorical, string views, Array, large lists
        return pl.DataFrame({**columns, "emb": vectors}, schema_overrides={"city": pl.Categorical,
                                                                           "emb": pl.Array(pl.Float32, 4)})
    table = pa.table(columns)
    emb = pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 4)
    return table.set_column(2, "city", table.column("city").dictionary_encode()).append_column("emb", emb)


@gpu
@pytest.mark.parametrize("kind", ["pyarrow", "polars"])
def test_arrow_data_on_the_gpu(kind):
    data = arrow_data(kind)
    assert_gpu_reads_as_cpu(data, part_size=512)
    assert tl.Dataset(data, device="cuda").source.list_widths() == {"emb": 4}


@gpu
@pytest.mark.parametrize("writer", ["pyarrow", "polars"])
def test_fixed_size_lists_read_by_cudf_are_lists_of_their_width(tmp_path, writer):
    n, width = 30, 8
    vectors = np.arange(n * width, dtype=np.float32).reshape(n, width)
    if writer == "pyarrow":
        emb = pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), width)
        pq.write_table(pa.table({"id": np.arange(n), "emb": emb}), tmp_path / "v.parquet", row_group_size=10)
    else:
        pl = polars()
        pl.DataFrame({"id": np.arange(n), "emb": vectors}, schema={"id": pl.Int64, "emb": pl.Array(pl.Float32, width)}
                     ).write_parquet(tmp_path / "v.parquet", row_group_size=10)
    assert_gpu_reads_as_cpu(str(tmp_path / "v.parquet"), part_size=1)
    ds = tl.Dataset(str(tmp_path / "v.parquet"), device="cuda")
    assert ds.schema["emb"].properties["value_count"] == {"min": width, "max": width}
    assert ds.compute()["emb"].to_arrow().to_pylist() == vectors.tolist()


@gpu
@pytest.mark.parametrize("writer", ["pyarrow", "polars"])
def test_large_lists_on_the_gpu(tmp_path, writer):
    """Large lists (polars' lists, in memory and in the arrow schema of its files), which
    cuDF's from_arrow gave no dtype: the GPU meta of such files failed."""
    columns = {"id": list(range(6)), "items": [[1, 2], [], [3], [4, 5, 6], [7], [8]],
               "words": [["a"], ["b", "c"], [], ["d"], ["e"], ["f", "g"]]}
    if writer == "polars":
        data = polars().DataFrame(columns)
        data.write_parquet(tmp_path / "l.parquet", row_group_size=2)
    else:
        data = pa.table({"id": columns["id"], "items": pa.array(columns["items"], pa.large_list(pa.int64())),
                         "words": pa.array(columns["words"], pa.large_list(pa.string()))})
        pq.write_table(data, tmp_path / "l.parquet", row_group_size=2)
    assert pa.types.is_large_list(pq.read_schema(tmp_path / "l.parquet").field("items").type)
    assert_gpu_reads_as_cpu(str(tmp_path / "l.parquet"), part_size=1)
    assert_gpu_reads_as_cpu(data, part_size=64)


@gpu
def test_a_date64_column_in_memory_is_read_as_midnight_timestamps_on_the_gpu():
    days = [datetime.date(2024, 1, 2), None, datetime.date(1999, 12, 31)]
    got = tl.Dataset(pa.table({"d": pa.array(days, pa.date64())}), device="cuda").compute()["d"]
    assert got.to_arrow().to_pylist() == [None if d is None else datetime.datetime(d.year, d.month, d.day)
                                          for d in days]


# --- Spark's types --------------------------------------------------------------------------------
@gpu
@pytest.mark.parametrize("name", ["types", "legacy", "micros"])  # INT96 / legacy lists and decimals / zoned micros
def test_spark_types_on_the_gpu(name):
    assert_gpu_reads_as_cpu(spark_path(name), part_size=2000, columns=SPARK_TYPES)


@gpu
def test_int96_dates_past_2262_do_not_wrap_on_the_gpu():
    """cuDF decodes INT96 in nanoseconds (9999-12-31 became a day of 1816): read through pyarrow."""
    frame = tl.Dataset(spark_path("types"), device="cuda", columns=["id", "ts"]).compute().to_pandas().set_index("id")
    assert frame.loc[0, "ts"] == pd.Timestamp(datetime.datetime(9999, 12, 31, 23, 59, 59, 999_999))
    assert frame.loc[1, "ts"] == pd.Timestamp(datetime.datetime(1901, 1, 1, 0, 0, 0, 1))


@gpu
def test_a_binary_column_is_refused_on_the_gpu_naming_it():
    with pytest.raises(TypeError, match=r"column 'blob' has type binary, and cuDF has no binary type.*"
                                        r"columns=\[\.\.\.\]"):
        tl.Dataset(spark_path("types"), device="cuda")


# --- globs, Filter, the loader --------------------------------------------------------------------
@gpu
def test_a_glob_skips_underscore_folders_on_the_gpu(tmp_path):
    for folder, start in [("a", 0), ("_temporary", 100), ("b", 200)]:
        (tmp_path / folder).mkdir()
        pq.write_table(pa.table({"v": np.arange(start, start + 5)}), tmp_path / folder / "part.parquet")
    pattern = str(tmp_path / "*" / "*.parquet")
    assert_gpu_reads_as_cpu(pattern)
    rows = tl.Dataset(pattern, device="cuda").compute()["v"].to_arrow().to_pylist()
    assert sorted(rows) == [*range(5), *range(200, 205)]


def above_two(frame):
    return frame["x"] > 2  # null where x is null: such rows are not kept


@gpu
def test_filter_with_a_mask_holding_nulls_on_the_gpu(tmp_path):
    table = pa.table({"x": pa.array([1, None, 3, 4, None, 2, 5], pa.int64()), "y": np.arange(7.0)})
    pq.write_table(table, tmp_path / "f.parquet")
    wf = tl.Workflow(["x", "y"] >> ops.Filter(above_two), progress=False)
    got = wf.fit_transform(tl.Dataset(str(tmp_path), device="cuda")).compute()
    assert got["y"].to_arrow().to_pylist() == [2.0, 3.0, 6.0]  # by hand: x = 3, 4, 5
    on_cpu = wf.fit_transform(tl.Dataset(str(tmp_path), device="cpu")).compute()
    assert got.to_arrow().to_pylist() == converted(on_cpu.reset_index(drop=True)).to_arrow().to_pylist()


def as_is(col):
    return col


@gpu
@pytest.mark.parametrize("column, advice", [("day", r"numbers first.*DatetimeFeatures"),
                                            ("dec_int32", r"cast it to a float.*AsType")])
def test_the_loader_refuses_dates_and_decimals_of_gpu_datasets(column, advice):
    """As read, and after a workflow on the GPU (whose schema then comes from cuDF's dtypes:
    datetime64[s] for a date, decimal128 for a decimal), with the CPU's advice."""
    ds = tl.Dataset(spark_path("types"), device="cuda", columns=["id", column])
    with pytest.raises(TypeError, match=rf"column '{column}' has dtype .*{advice}"):
        next(iter(Loader(ds, batch_size=4, continuous=[column])))
    out = tl.Workflow([column] >> ops.LambdaOp(as_is), progress=False).fit_transform(ds)
    with pytest.raises(TypeError, match=rf"column '{column}' has dtype .*{advice}"):
        next(iter(Loader(out, batch_size=4, continuous=[column])))


@gpu
@pytest.mark.parametrize("column", ["day", "dec_int32"])
def test_the_loaders_advice_gives_the_cpus_values_on_the_gpu(column):
    """What the refusal suggests (ops.DatetimeFeatures for a date, ops.AsType for a decimal)
    works on cuDF partitions, as on pandas ones (a decimal's float within a float32 rounding:
    libcudf and arrow need not round the same way)."""
    op = ops.DatetimeFeatures(["day_of_week", "month"]) if column == "day" else ops.AsType("float32")
    on_cpu, on_gpu = (tl.Workflow(([column] >> op) + ["id"], progress=False).fit_transform(
        tl.Dataset(spark_path("types"), device=device, columns=["id", column])).compute() for device in ("cpu", "cuda"))
    expected = converted(on_cpu)
    assert on_gpu.dtypes.to_dict() == expected.dtypes.to_dict()
    if column == "day":
        assert on_gpu.to_arrow().to_pylist() == expected.to_arrow().to_pylist()
    else:
        np.testing.assert_array_equal(on_gpu["id"].to_numpy(), on_cpu["id"].to_numpy())
        np.testing.assert_allclose(on_gpu[column].to_pandas().to_numpy(dtype=np.float64, na_value=np.nan),
                                   on_cpu[column].to_numpy(dtype=np.float64), rtol=1e-6)


# --- on the CPU: the helpers the GPU path relies on -----------------------------------------------
def test_zoned_timestamps_given_naive_are_cast_as_utc_instants():
    """cuDF reads a zoned parquet column (Spark's TIMESTAMP_MICROS) as its naive UTC values; the
    dataset's dtype is zoned: conforming takes the values as UTC instants (pandas does the same)."""
    utc = ["2024-01-01 12:00:00", "2024-07-01 12:00:00.000001", None]
    naive = pd.DataFrame({"ts": pd.Series(pd.to_datetime(utc, format="ISO8601")).astype("datetime64[us]")})
    got = conform_dtypes(naive, pd.Series({"ts": pd.DatetimeTZDtype("us", "Europe/Berlin")}), "f.parquet")
    expected = [None if v is None else pd.Timestamp(v, tz="UTC").tz_convert("Europe/Berlin") for v in utc]
    assert str(got["ts"].dtype) == "datetime64[us, Europe/Berlin]"
    assert [None if pd.isna(v) else v for v in got["ts"]] == expected
    assert str(got["ts"][0]) == "2024-01-01 13:00:00+01:00"


@pytest.mark.parametrize("arrow_type, lacking", [
    (pa.binary(), "binary"), (pa.large_binary(), "binary"), (pa.binary(4), "binary"),
    (pa.list_(pa.binary()), "binary"), (pa.dictionary(pa.int32(), pa.binary()), "binary"),
    (pa.time64("us"), "time of day"), (pa.decimal256(40, 2), "256-bit decimal"), (pa.float16(), "float16"),
])
def test_types_cudf_lacks_are_refused_on_the_gpu_only(arrow_type, lacking):
    schema = pa.schema([("ok", pa.int64()), ("col", arrow_type)])
    backend.refuse_device_types(schema, "cpu", "f.parquet")
    with pytest.raises(TypeError, match=rf"f\.parquet: column 'col' has type .*cuDF has no {lacking} type.*"
                                        r"columns=\[\.\.\.\].*device='cpu'"):
        backend.refuse_device_types(schema, "cuda", "f.parquet")


@pytest.mark.parametrize("arrow_type", [pa.date32(), pa.timestamp("us", tz="UTC"), pa.decimal128(25, 5),
                                        pa.list_(pa.float32(), 8), pa.large_string(), pa.duration("ms")])
def test_types_cudf_has_pass(arrow_type):
    backend.refuse_device_types(pa.schema([("col", arrow_type)]), "cuda", "f.parquet")


@pytest.mark.parametrize("name, expected", [("types", {"ts"}), ("legacy", {"ts"}), ("micros", set())])
def test_int96_columns_are_found_in_the_footer(name, expected):
    first = sorted(f for f in os.listdir(spark_path(name)) if f.endswith(".parquet"))[0]
    assert int96_columns(pq.ParquetFile(os.path.join(spark_path(name), first)).metadata) == expected


def write_int96_lists(path) -> list:
    """A list of INT96 timestamps past 2262 (as Spark writes an array of timestamps)."""
    stamps = [[datetime.datetime(9999, 12, 31, 23, 59, 59, 999_999), None], [], None,
              [datetime.datetime(1901, 1, 1, 0, 0, 0, 1)]]
    table = pa.table({"id": [0, 1, 2, 3], "stamps": pa.array(stamps, pa.list_(pa.timestamp("us")))})
    pq.write_table(table, path, use_deprecated_int96_timestamps=True)
    return stamps


def test_int96_list_elements_are_found_in_the_footer(tmp_path):
    write_int96_lists(tmp_path / "l.parquet")
    assert int96_columns(pq.ParquetFile(tmp_path / "l.parquet").metadata) == {"stamps"}


@gpu
def test_int96_list_elements_past_2262_do_not_wrap_on_the_gpu(tmp_path):
    stamps = write_int96_lists(tmp_path / "l.parquet")
    assert_gpu_reads_as_cpu(str(tmp_path / "l.parquet"))
    got = tl.Dataset(str(tmp_path / "l.parquet"), device="cuda").compute()["stamps"].to_arrow().to_pylist()
    assert got == stamps


def test_large_lists_and_date64_are_given_to_cudf_as_types_it_has():
    days = [datetime.date(2024, 1, 2), None, datetime.date(1999, 12, 31)]
    table = pa.table({"items": pa.array([[1, 2], None, [3]], pa.large_list(pa.int64())), "n": [1, 2, 3],
                      "d": pa.array(days, pa.date64())})
    out = backend.cudf_arrow_table(table)
    assert out.schema.field("items").type == pa.list_(pa.field("item", pa.int64()))
    assert out.schema.field("d").type == pa.timestamp("ms")
    assert out.column("items").to_pylist() == [[1, 2], None, [3]] and out.column("n").to_pylist() == [1, 2, 3]
    assert out.column("d").to_pylist() == [None if d is None else datetime.datetime(d.year, d.month, d.day)
                                           for d in days]
