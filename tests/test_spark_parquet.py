"""Parquet written by real Apache Spark 4.0.1 (tests/data/spark, made by
tests/data/make_spark_files.py): part files with UUIDs, ``_SUCCESS`` and ``.crc`` side files,
``partitionBy`` folders with ``__HIVE_DEFAULT_PARTITION__``, INT96 timestamps, decimals as
INT32/INT64/FIXED_LEN_BYTE_ARRAY, 3-level and legacy 2-level lists, nested columns, appends.

The expected values are Spark's own: beside each dataset Spark wrote the same rows as JSON
(``<name>.jsonl``, sorted by ``id``); the expected frames are built from them here by hand.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import os
import shutil

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import tabloader as tl
from tabloader import ops
from tabloader.dataset import SchemaMismatchError
from tabloader.loader import Loader
from tabloader.backend import STRING_DTYPE

SPARK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "spark")


def spark_path(name: str) -> str:
    return os.path.join(SPARK, name)


def spark_rows(name: str) -> list[dict]:
    """The rows Spark rendered as JSON, decimals kept exact."""
    with open(os.path.join(SPARK, f"{name}.jsonl")) as f:
        return [json.loads(line, parse_float=decimal.Decimal) for line in f]


def values(rows: list[dict], name: str, convert=lambda v: v) -> list:
    return [None if row[name] is None else convert(row[name]) for row in rows]


def arrow_column(rows: list[dict], name: str, arrow_type, convert=lambda v: v) -> pd.Series:
    return pd.Series(pd.arrays.ArrowExtensionArray(pa.array(values(rows, name, convert), arrow_type)), name=name)


def read_sorted(ds: tl.Dataset) -> pd.DataFrame:
    """Every row the dataset yields, by ``id``, after checking that every partition and the
    meta agree on the dtypes."""
    meta = ds.meta().dtypes
    parts = list(ds.to_iter())
    for i, part in enumerate(parts):
        pd.testing.assert_series_equal(part.dtypes, meta, obj=f"dtypes of partition {i}")
    return pd.concat(parts, ignore_index=True).sort_values("id", ignore_index=True)


def timestamps(rows: list[dict], name: str, utc: bool = False) -> pd.Series:
    """Spark renders timestamps in the session time zone (UTC), to the microsecond."""
    parsed = values(rows, name, datetime.datetime.fromisoformat)
    series = pd.Series(pd.array(parsed, dtype="datetime64[us]"), name=name)
    return series.dt.tz_localize("UTC") if utc else series


# --- every Spark type, three ways of writing it ---------------------------------------------
def typed_expected(rows: list[dict], utc: bool) -> pd.DataFrame:
    def floats(name: str, dtype) -> np.ndarray:
        return np.array([np.nan if v is None else float(v) for v in values(rows, name)], dtype=dtype)

    return pd.DataFrame({
        "id": np.array(values(rows, "id"), dtype=np.int64),  # required in the files: numpy
        "byte": pd.array(values(rows, "byte"), dtype="Int8"),
        "short": pd.array(values(rows, "short"), dtype="Int16"),
        "int": pd.array(values(rows, "int"), dtype="Int32"),
        "long": pd.array(values(rows, "long"), dtype="Int64"),  # above 2**53: exact
        "float": floats("float", np.float32),
        "double": floats("double", np.float64),
        "flag": pd.array(values(rows, "flag"), dtype="boolean"),
        "color": pd.Series(values(rows, "color"), dtype=STRING_DTYPE),
        "day": arrow_column(rows, "day", pa.date32(), datetime.date.fromisoformat),
        "ts": timestamps(rows, "ts", utc),
        "ts_ntz": timestamps(rows, "ts_ntz"),
        "dec_int32": arrow_column(rows, "dec_int32", pa.decimal128(7, 2)),
        "dec_int64": arrow_column(rows, "dec_int64", pa.decimal128(15, 3)),
        "dec_fixed": arrow_column(rows, "dec_fixed", pa.decimal128(25, 5)),
        "blob": arrow_column(rows, "blob", pa.binary(), base64.b64decode),
        "ints": arrow_column(rows, "ints", pa.list_(pa.int32())),
        "words": arrow_column(rows, "words", pa.list_(pa.string())),
    })


@pytest.mark.parametrize("name, utc", [
    ("types", False),  # INT96, Spark's default: in microseconds, as Spark wrote them
    ("legacy", False),  # writeLegacyFormat: 2-level lists, every decimal fixed-length
    ("micros", True),  # TIMESTAMP_MICROS, adjusted to UTC
])
def test_every_spark_type_reads_as_spark_wrote_it(name, utc):
    rows = spark_rows("types")
    ds = tl.Dataset(spark_path(name), part_size=2000)
    assert ds.npartitions > 1
    pd.testing.assert_frame_equal(read_sorted(ds), typed_expected(rows, utc))
    pd.testing.assert_frame_equal(ds.to_ddf().compute().sort_values("id", ignore_index=True),
                                  typed_expected(rows, utc))


@pytest.mark.parametrize("memory_pool", [None, pa.default_memory_pool()], ids=["file_reader", "fragment_reader"])
def test_int96_sentinel_dates_do_not_overflow(memory_pool):
    """9999-12-31 (a warehouse's "valid until") is beyond what nanoseconds hold (year 2262):
    read as nanoseconds it silently became a date in 1816. Both arrow readers (the loader
    passes a memory pool) and the pandas partitions read it as Spark wrote it."""
    ds = tl.Dataset(spark_path("types"), part_size=1)
    tables = [ds.read_partition_arrow(i, ["id", "ts"], memory_pool=memory_pool) for i in range(ds.npartitions)]
    by_id = dict(zip(*pa.concat_tables(tables).to_pydict().values()))
    frame = ds.compute().set_index("id")["ts"]
    for row_id, expected in [(0, datetime.datetime(9999, 12, 31, 23, 59, 59, 999_999)),
                             (1, datetime.datetime(1901, 1, 1, 0, 0, 0, 1))]:
        assert by_id[row_id] == expected and frame[row_id] == pd.Timestamp(expected)


def test_side_files_are_not_data():
    ds = tl.Dataset(spark_path("types"))
    names = sorted(os.listdir(spark_path("types")))
    assert "_SUCCESS" in names and any(n.endswith(".crc") for n in names)
    assert sorted(os.path.basename(p) for p in ds.paths) == [n for n in names if n.startswith("part-")]


def test_dataset_without_rows():
    ds = tl.Dataset(spark_path("empty"))
    expected = pd.DataFrame({"id": np.array([], np.int64), "x": np.array([], np.float64),
                             "s": pd.Series([], dtype=STRING_DTYPE)})
    pd.testing.assert_frame_equal(ds.compute().reset_index(drop=True), expected)


@pytest.mark.parametrize("name", ["types", "legacy"])  # 3-level lists, legacy 2-level lists
def test_spark_arrays_reach_the_loader_as_values_and_offsets(name):
    """FillMissing(0) fills null elements and makes null arrays empty; the loader then hands
    each row's array whole, as (values, offsets)."""
    rows = spark_rows("types")
    filled = {row["id"]: [0 if v is None else v for v in row["ints"] or []] for row in rows}
    out = tl.Workflow((["ints"] >> ops.FillMissing(0)) + ["id"], progress=False).fit_transform(
        tl.Dataset(spark_path(name), part_size=2000))
    seen = {}
    for features, _ in Loader(out, batch_size=9, seed=2, categorical=["id", "ints"], continuous=[], target=[]):
        values, offsets = (np.asarray(a) for a in features["ints"])
        for row_id, start, stop in zip(np.asarray(features["id"]), offsets[:-1], offsets[1:]):
            assert row_id not in seen
            seen[row_id] = values[start:stop].tolist()
    assert seen == filled
    assert any(row["ints"] is None for row in rows) and any(None in (row["ints"] or []) for row in rows)


# --- hive folders ---------------------------------------------------------------------------
def test_partition_folders_with_escaped_and_null_keys():
    """Spark escapes ``/ = % :`` in key values and writes a null key as
    ``__HIVE_DEFAULT_PARTITION__``; a date key is a date, as Spark reads it back (it used to be
    a string, as pyarrow types it)."""
    rows = spark_rows("partitioned")
    ds = tl.Dataset(spark_path("partitioned"), part_size=1)
    assert ds.npartitions == 10
    expected = pd.DataFrame({"id": np.array(values(rows, "id"), np.int64),
                             "v": np.array([float(v) for v in values(rows, "v")]),
                             "country": pd.Series(values(rows, "country"), dtype=STRING_DTYPE),
                             "date": arrow_column(rows, "date", pa.date32(), datetime.date.fromisoformat)})
    pd.testing.assert_frame_equal(read_sorted(ds), expected)
    assert {"a b/c=d", "100%", "x:y"} <= set(expected["country"].dropna())


# Spark's names of the types it infers for hive keys -> the Schema's dtype names
SPARK_DTYPES = {"bigint": "int64", "int": "int32", "double": "float64", "date": "date32[day]",
                "timestamp": "datetime64[us]", "string": "string"}


def hive_typed_expected(rows: list[dict]) -> pd.DataFrame:
    """The rows as Spark read them back, but for ``zip``: Spark reads ``zip=01234`` as the
    integer 1234; tabloader keeps the folder's string (every zip code has 5 digits)."""
    return pd.DataFrame({"id": np.array(values(rows, "id"), np.int64),
                         "x": np.array(values(rows, "x"), np.float64),
                         "dt": arrow_column(rows, "dt", pa.date32(), datetime.date.fromisoformat),
                         "at": timestamps(rows, "at"),
                         "score": np.array([np.nan if v is None else float(v) for v in values(rows, "score")]),
                         "zip": pd.Series([f"{v:05d}" for v in values(rows, "zip")], dtype=STRING_DTYPE)})


def test_hive_keys_are_typed_as_spark_reads_them_back():
    """Date, timestamp (``:`` escaped, a fraction of a second) and double keys, nulls among
    them, have the types Spark infers from the folder names and Spark's values."""
    rows = spark_rows("hive_typed")
    with open(os.path.join(SPARK, "hive_typed.schema.json")) as f:
        spark_types = json.load(f)
    assert spark_types["zip"] == "int"  # Spark drops the leading zero of zip=01234; tabloader keeps the string
    ds = tl.Dataset(spark_path("hive_typed"), part_size=1)
    assert ds.npartitions == 8
    assert {c.name: c.dtype for c in ds.schema} == {**{k: SPARK_DTYPES[t] for k, t in spark_types.items()},
                                                    "zip": "string"}
    expected = hive_typed_expected(rows)
    assert expected["dt"].isna().any() and expected["at"].isna().any() and expected["score"].isna().any()
    pd.testing.assert_frame_equal(read_sorted(ds), expected)
    pd.testing.assert_frame_equal(ds.to_ddf().compute().sort_values("id", ignore_index=True), expected)
    tables = [ds.read_partition_arrow(i, ["dt", "at"]) for i in range(ds.npartitions)]
    assert {(t.schema.field("dt").type, t.schema.field("at").type) for t in tables} == {(pa.date32(),
                                                                                         pa.timestamp("us"))}

    # asked to, the zip code is an integer, as Spark reads it
    as_spark = tl.Dataset(spark_path("hive_typed"), partition_types={"zip": "int32"})
    np.testing.assert_array_equal(read_sorted(as_spark)["zip"].to_numpy(), np.array(values(rows, "zip"), np.int32))


def test_date_and_timestamp_keys_have_the_dtypes_of_such_columns_in_a_file(device):
    """A key and a file's column of the same arrow type are one dtype: pandas' (or cuDF's) for
    a date32 / timestamp[us] column, whichever the source, so frames of both concatenate; on
    the GPU every partition (keys repeated on the device) has them too."""
    keys = tl.Dataset(spark_path("hive_typed"), part_size=1, device=device)
    # day: DATE, ts_ntz: TIMESTAMP_NTZ (not the binary column, which cuDF has no type for)
    columns = tl.Dataset(spark_path("types"), device=device, columns=["day", "ts_ntz"]).meta().dtypes
    meta = keys.meta().dtypes
    assert (meta["dt"], meta["at"]) == (columns["day"], columns["ts_ntz"])
    for i in range(keys.npartitions):
        assert keys.read_partition(i).dtypes.equals(meta), f"dtypes of partition {i}"


@pytest.mark.parametrize("name, column", [("types", "day"), ("hive_typed", "dt")])
def test_the_loader_refuses_a_date_key_as_it_refuses_a_date_column(name, column):
    with pytest.raises(TypeError, match=rf"column '{column}' has dtype 'date32\[day\]'.*numbers first.*DatetimeFeatures"):
        next(iter(Loader(tl.Dataset(spark_path(name)), batch_size=4, continuous=[column])))


def test_the_loaders_advice_for_dates_works():
    """What the loader's refusal suggests for a date key and a timestamp key (DatetimeFeatures'
    day of the week; nulls filled) gives Spark's dates' weekdays, batch by batch."""
    rows = sorted(spark_rows("hive_typed"), key=lambda r: r["id"])
    out = tl.Workflow((["dt", "at"] >> ops.DatetimeFeatures(["day_of_week"]) >> ops.FillMissing(7)) + ["id"],
                      progress=False).fit_transform(tl.Dataset(spark_path("hive_typed")))
    got = pd.concat([pd.DataFrame(features) for features, _ in
                     Loader(out, batch_size=3, continuous=["id", "dt_day_of_week", "at_day_of_week"], shuffle=False)])
    got = got.sort_values("id", ignore_index=True)
    day = lambda text: 7 if text is None else datetime.date.fromisoformat(text[:10]).weekday()  # noqa: E731
    assert got["dt_day_of_week"].tolist() == [day(r["dt"]) for r in rows]
    assert got["at_day_of_week"].tolist() == [day(r["at"]) for r in rows]


def test_a_workflow_and_the_loader_over_typed_keys(tmp_path):
    """Keys as features (a double filled and normalized, a zip code encoded), dates filtered
    on and passed through to the written files, which read back with the same dtypes."""
    rows = spark_rows("hive_typed")
    expected = hive_typed_expected(rows)
    kept = [day != "2024-01-02" for day in values(rows, "dt")]  # null days kept
    expected = expected[kept].reset_index(drop=True)
    filled = expected["score"].fillna(0.0).to_numpy()
    wf = tl.Workflow((["score"] >> ops.FillMissing(0.0) >> ops.Normalize()) + (["zip"] >> ops.Categorify())
                     + ["id", "dt", "at"], progress=False)
    dataset = tl.Workflow(["id", "x", "dt", "at", "score", "zip"] >> ops.Filter(not_the_second_day),
                          progress=False).fit_transform(tl.Dataset(spark_path("hive_typed"), part_size=1))
    out = wf.fit_transform(dataset)
    out.to_parquet(str(tmp_path / "out"), progress=False)
    back = tl.Dataset(str(tmp_path / "out"))
    got = read_sorted(back)
    pd.testing.assert_series_equal(got["dt"], expected["dt"])
    pd.testing.assert_series_equal(got["at"], expected["at"])
    np.testing.assert_allclose(got["score"], (filled - filled.mean()) / filled.std(), rtol=1e-6)
    zips = sorted(set(expected["zip"]), key=lambda z: (-(expected["zip"] == z).sum(), z))
    np.testing.assert_array_equal(got["zip"], [3 + zips.index(z) for z in expected["zip"]])

    loader = Loader(back, batch_size=3, seed=0, categorical=["zip", "id"], continuous=["score"])
    ids = np.concatenate([np.asarray(features["id"]) for features, _ in loader])
    assert sorted(ids.tolist()) == expected["id"].tolist()


def not_the_second_day(frame):
    # a comparison of an arrow-backed date column is an arrow boolean, which Filter does not take
    return (frame["dt"] != datetime.date(2024, 1, 2)).fillna(True).to_numpy(dtype=bool)


# --- a Criteo-like dataset, partitioned by day, through a workflow and the loader --------------
INTS = ["I1", "I2", "I3"]
CATS = ["C1", "C2", "C3"]
FREQ_THRESHOLD = 3


def criteo_expected(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame({"id": np.array(values(rows, "id"), np.int64),
                          "label": np.array(values(rows, "label"), np.int32)})
    for name in INTS:
        frame[name] = pd.array(values(rows, name), dtype="Int32")
    for name in CATS:
        frame[name] = pd.Series(values(rows, name), dtype=STRING_DTYPE)
    frame["day"] = pd.array(values(rows, "day"), dtype="Int32")  # a null day: __HIVE_DEFAULT_PARTITION__
    return frame


def test_criteo_partitioned_by_day_reads_every_row():
    rows = spark_rows("criteo")
    ds = tl.Dataset(spark_path("criteo"), part_size=1)
    assert ds.npartitions == 8  # 4 day folders (one the null day), 2 part files each
    assert [(c.name, c.dtype) for c in ds.schema][-1] == ("day", "int32")
    pd.testing.assert_frame_equal(read_sorted(ds), criteo_expected(rows))
    assert any(row["day"] is None for row in rows)


def categorify_by_hand(column: list) -> list[int]:
    """1 null, 2 the one bucket of values seen fewer than FREQ_THRESHOLD times, then the
    others by descending count, ties by value, from 3."""
    counts: dict = {}
    for v in column:
        if v is not None:
            counts[v] = counts.get(v, 0) + 1
    kept = sorted((v for v in counts if counts[v] >= FREQ_THRESHOLD), key=lambda v: (-counts[v], v))
    ids = {v: 3 + i for i, v in enumerate(kept)}
    return [1 if v is None else ids.get(v, 2) for v in column]


def criteo_transformed_by_hand(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame({"id": np.array(values(rows, "id"), np.int64)})
    for name in CATS:
        frame[name] = np.array(categorify_by_hand(values(rows, name)), np.int64)
    for name in INTS:
        filled = np.array([0 if v is None else v for v in values(rows, name)], np.float64)
        frame[name] = ((filled - filled.mean()) / filled.std()).astype(np.float32)
    frame["label"] = np.array(values(rows, "label"), np.int32)
    return frame


def criteo_workflow() -> tl.Workflow:
    return tl.Workflow((CATS >> ops.Categorify(freq_threshold=FREQ_THRESHOLD))
                       + (INTS >> ops.FillMissing(0) >> ops.Normalize()) + ["label", "id"], progress=False)


def test_criteo_workflow_and_loader_give_every_row_once(tmp_path):
    rows = spark_rows("criteo")
    expected = criteo_transformed_by_hand(rows)
    wf = criteo_workflow()
    wf.fit(tl.Dataset(spark_path("criteo"), part_size=1))
    assert wf.plan_.encoded_only_columns == CATS
    out = wf.transform(tl.Dataset(spark_path("criteo"), part_size=1))
    # Spark's dictionary pages: the ids are read as codes in every partition
    coded = tl.Dataset(spark_path("criteo"), part_size=1).with_coded_strings(CATS)
    assert all(str(coded.read_partition(i)[c].dtype).startswith("dictionary")
               for i in range(coded.npartitions) for c in CATS)
    got = out.compute().sort_values("id", ignore_index=True)[list(expected.columns)]
    pd.testing.assert_frame_equal(got, expected, check_exact=False, rtol=1e-6, atol=1e-6)
    assert (expected[CATS] == 2).any().all() and (expected[CATS] == 1).any().all()  # rare values and nulls

    out.to_parquet(str(tmp_path / "train"), progress=False)
    loader = Loader(tl.Dataset(str(tmp_path / "train")), batch_size=17, seed=3, categorical=CATS + ["id"],
                    continuous=INTS, target=["label"])
    batches = [({k: np.asarray(v) for k, v in features.items()}, np.asarray(target)) for features, target in loader]
    ids = np.concatenate([features["id"] for features, _ in batches])
    assert sorted(ids.tolist()) == expected["id"].tolist()  # every row exactly once
    by_id = expected.set_index("id")
    for features, target in batches:
        rows_of_batch = by_id.loc[features["id"]]
        for name in CATS:
            np.testing.assert_array_equal(features[name], rows_of_batch[name].to_numpy())
        for name in INTS:
            np.testing.assert_allclose(features[name], rows_of_batch[name].to_numpy(), rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(target.ravel(), rows_of_batch["label"].to_numpy())


def test_torch_loader_reads_the_transformed_criteo_rows_once():
    torch = pytest.importorskip("torch")
    import tabloader.torch  # noqa: F401

    rows = spark_rows("criteo")
    wf = criteo_workflow()
    out = wf.fit_transform(tl.Dataset(spark_path("criteo"), part_size=1))
    loader = tl.torch.Loader(out, batch_size=32, seed=1, categorical=CATS + ["id"], continuous=INTS, target=["label"])
    ids = torch.cat([features["id"] for features, _ in loader])
    assert sorted(ids.tolist()) == values(rows, "id")


# --- what tabloader does not read, and tables whose files differ --------------------------------
@pytest.mark.parametrize("column, shown", [
    ("point", "struct<x: int32, y: string>"),
    ("attrs", "map<string, int32"),
    ("matrix", "list<element: list<element: int32>>"),
    ("events", "list<element: struct<kind: string>>"),
])
def test_nested_columns_are_refused_naming_them(column, shown):
    with pytest.raises(TypeError) as info:
        tl.Dataset(spark_path("nested"), columns=["id", column])
    message = str(info.value)
    assert f"column {column!r}" in message and shown in message and "columns=" in message
    assert os.path.join("nested", "part-00000-") in message


def test_nested_columns_can_be_left_out():
    got = tl.Dataset(spark_path("nested"), columns=["id"]).compute()
    pd.testing.assert_frame_equal(got, pd.DataFrame({"id": np.array(values(spark_rows("nested"), "id"), np.int64)}))


def test_appends_differing_only_in_contains_null_read_as_one_table():
    """``split`` writes arrays whose elements cannot be null, ``array(...)`` arrays whose
    elements may be: the same column to Spark, which reads the folder as one table."""
    rows = spark_rows("appended")
    ds = tl.Dataset(spark_path("appended"), part_size=1)
    expected = pd.DataFrame({"id": np.array(values(rows, "id"), np.int64),
                             "words": arrow_column(rows, "words", pa.list_(pa.string()))})
    pd.testing.assert_frame_equal(read_sorted(ds), expected)
    assert any(None in row["words"] for row in rows)


def test_schema_evolution_is_refused_naming_the_files_and_the_column():
    """Later appends adding a column (what Spark reads with ``mergeSchema``) are refused,
    as tabloader documents for files disagreeing on their columns: the message names both
    files and the column."""
    first, second = sorted(p for p in os.listdir(spark_path("evolved")) if p.startswith("part-"))
    with pytest.raises(SchemaMismatchError) as info:
        tl.Dataset(spark_path("evolved"))
    message = str(info.value)
    assert first in message and second in message and "'version'" in message


def test_columns_every_append_has_read_from_an_evolved_table():
    """Leaving the added column out reads every row: files may differ in columns not read.
    The added column itself is still refused, naming a file and the column."""
    rows = spark_rows("evolved")
    got = read_sorted(tl.Dataset(spark_path("evolved"), columns=["id", "score"], part_size=1))
    expected = pd.DataFrame({"id": np.array(values(rows, "id"), np.int64),
                             "score": np.array([float(v) for v in values(rows, "score")])})
    pd.testing.assert_frame_equal(got, expected)
    with pytest.raises((SchemaMismatchError, KeyError)) as info:
        tl.Dataset(spark_path("evolved"), columns=["id", "version"])
    assert "version" in str(info.value) and os.path.join("evolved", "part-00000-") in str(info.value)


def test_int96_and_micros_appends_are_refused_naming_the_column(tmp_path):
    """A table whose writer switched ``outputTimestampType`` from INT96 to TIMESTAMP_MICROS:
    INT96 says nothing of a time zone (Impala writes local times in it), TIMESTAMP_MICROS is
    UTC, so the two are not silently mixed."""
    first = sorted(p for p in os.listdir(spark_path("types")) if p.startswith("part-"))[0]
    second = sorted(p for p in os.listdir(spark_path("micros")) if p.startswith("part-"))[1]
    shutil.copy(os.path.join(spark_path("types"), first), tmp_path / "a.parquet")
    shutil.copy(os.path.join(spark_path("micros"), second), tmp_path / "b.parquet")
    with pytest.raises(SchemaMismatchError, match=r"b\.parquet does not match .*a\.parquet: different types: "
                                                  r"ts \(timestamp\[us\] vs timestamp\[us, tz=UTC\]\)"):
        tl.Dataset(str(tmp_path))
    both = tl.Dataset(str(tmp_path), columns=["id", "ts_ntz"]).compute()  # the other columns agree
    assert len(both) == len(spark_rows("types"))
