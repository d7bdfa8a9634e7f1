"""``to_parquet(partition_on=...)``: ``key=value`` folders that pyarrow, DuckDB, polars and
tabloader read back as the rows written (expected values are the input frame's, by hand)."""

from __future__ import annotations

import datetime
import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads
import pytest

import tabloader as tl
from tabloader import ops

duckdb = pytest.importorskip("duckdb")
polars = pytest.importorskip("polars")


def events(n: int = 400, seed: int = 0) -> pd.DataFrame:
    """Days (with nulls), shops whose names need escaping, a nullable integer key, values."""
    rng = np.random.default_rng(seed)
    days = [None if rng.random() < 0.05 else datetime.date(2024, 12, 1) + datetime.timedelta(days=int(d))
            for d in rng.integers(0, 5, n)]
    shops = pd.Series(rng.choice(["a/b", "x=y", "50%", "é", "plain"], n), dtype="str")
    shops[rng.random(n) < 0.05] = None
    region = pd.array(rng.integers(0, 3, n), dtype="Int64")
    region[rng.random(n) < 0.05] = pd.NA
    return pd.DataFrame({"id": np.arange(n), "dt": pd.Series(pd.array(days, dtype=pd.ArrowDtype(pa.date32()))),
                         "shop": shops, "region": region, "x": rng.normal(size=n)})


def by_id(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values("id", ignore_index=True)


def as_lists(frame: pd.DataFrame, columns: list[str]) -> dict[str, list]:
    """The columns' values, nulls as None and dates as dates, whatever each reader's types."""
    def plain(v):
        if v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and np.isnan(v)):
            return None
        if isinstance(v, (pd.Timestamp, datetime.datetime)):
            return v.date()
        return int(v) if isinstance(v, (np.integer,)) else v
    return {c: [plain(v) for v in frame[c].tolist()] for c in columns}


def test_folders_read_back_as_the_rows_by_pyarrow_duckdb_polars_and_tabloader(tmp_path):
    frame = events()
    out = str(tmp_path / "out")
    tl.Dataset(frame, part_size=4096).to_parquet(out, partition_on=["dt", "shop", "region"], progress=False)
    expected = as_lists(frame, ["id", "dt", "shop", "region", "x"])
    assert os.path.isdir(os.path.join(out, "dt=2024-12-01", "shop=a%2Fb"))
    assert os.path.isdir(os.path.join(out, "dt=__HIVE_DEFAULT_PARTITION__"))

    ours = by_id(tl.Dataset(out, partition_types={"shop": "string"}).compute())
    arrow = by_id(pads.dataset(out, format="parquet", partitioning="hive", exclude_invalid_files=True)
                  .to_table().to_pandas())
    duck = by_id(duckdb.sql(f"SELECT * FROM read_parquet('{out}/**/*.parquet', hive_partitioning=true)").df())
    polar = by_id(polars.read_parquet(f"{out}/**/*.parquet", hive_partitioning=True).to_pandas())
    for reader, got in [("tabloader", ours), ("pyarrow", arrow), ("duckdb", duck), ("polars", polar)]:
        assert as_lists(got, ["id", "x"]) == {"id": expected["id"], "x": expected["x"]}, reader
        if reader != "pyarrow":  # pyarrow leaves keys as strings and their escapes as they are
            assert as_lists(got, ["dt", "shop", "region"]) == {k: expected[k] for k in ("dt", "shop", "region")}, reader
    assert str(ours["dt"].dtype) == "date32[day][pyarrow]"


def test_a_workflows_output_by_day_feeds_filters_and_the_loader(tmp_path):
    frame = events()
    wf = tl.Workflow(["id", "dt"] + (["shop"] >> ops.Categorify()) + (["x"] >> ops.Normalize()), progress=False)
    wf.fit(tl.Dataset(frame))
    out = str(tmp_path / "daily")
    wf.transform(tl.Dataset(frame, part_size=2048)).to_parquet(out, partition_on=["dt"], output_files=2,
                                                               shuffle=True, seed=3, progress=False)
    assert sorted(os.listdir(os.path.join(out, "dt=2024-12-02"))) == ["part_00000.parquet", "part_00001.parquet"]
    last_day = tl.Dataset(out, filters=[("dt", "==", "2024-12-05")])
    want = frame[frame["dt"] == datetime.date(2024, 12, 5)]
    assert sorted(last_day.compute()["id"]) == sorted(want["id"])
    batches = list(tl.Loader(last_day, batch_size=1000, categorical=["shop"], continuous=["x", "id"], shuffle=False))
    got = pd.DataFrame({k: np.asarray(v) for k, v in batches[0][0].items()}).sort_values("id")
    x = frame["x"].to_numpy()
    np.testing.assert_allclose(got["x"], ((want["x"] - x.mean()) / x.std()).to_numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("column, values, message", [
    ("f", [0.5, 1.5], r"column 'f' .* has dtype float64, which key=value folders do not keep exactly"),
    ("b", [True, False], r"column 'b' .* has dtype bool"),
    ("t", pd.to_datetime(["2024-01-01", "2024-01-02"]).tz_localize("UTC"), r"column 't' .*datetime64\[.*UTC\]"),
])
def test_keys_folders_cannot_keep_exactly_are_refused(tmp_path, column, values, message):
    frame = pd.DataFrame({column: values, "x": [1, 2]})
    with pytest.raises(TypeError, match=message):
        tl.Dataset(frame).to_parquet(str(tmp_path / "out"), partition_on=[column], progress=False)
    assert not os.path.exists(tmp_path / "out")


def test_timestamp_keys_with_nanoseconds_are_refused_rather_than_merged(tmp_path):
    """Two keys a nanosecond apart would both be written (and read back) as 10:00:00: refused,
    naming the column and the value; whole microseconds are written as before."""
    keys = pd.to_datetime(["2024-01-01 10:00:00.000000001", "2024-01-01 10:00:00.000000002"])
    frame = pd.DataFrame({"k": keys, "x": [1, 2]})
    with pytest.raises(ValueError, match=r"column 'k': the timestamp 2024-01-01 10:00:00.000000001 has nanoseconds"):
        tl.Dataset(frame).to_parquet(str(tmp_path / "out"), partition_on=["k"], progress=False)
    assert not os.path.exists(tmp_path / "out")
    frame["k"] = keys.floor("us") + pd.to_timedelta([0, 5], unit="us")
    tl.Dataset(frame).to_parquet(str(tmp_path / "us"), partition_on=["k"], progress=False)
    back = tl.Dataset(str(tmp_path / "us")).compute().sort_values("x")
    assert back["k"].tolist() == frame["k"].tolist()


def test_unknown_keys_and_keys_that_leave_no_column_are_refused(tmp_path):
    frame = pd.DataFrame({"k": [1, 2], "x": [1.0, 2.0]})
    with pytest.raises(ValueError, match=r"partition_on=\['day'\]: \['day'\] not among the columns"):
        tl.Dataset(frame).to_parquet(str(tmp_path / "a"), partition_on=["day"], progress=False)
    with pytest.raises(ValueError, match=r"names every column"):
        tl.Dataset(frame).to_parquet(str(tmp_path / "b"), partition_on=["k", "x"], progress=False)


def test_folder_names_are_spelled_as_spark_spells_them():
    """Spark 4.0.1 wrote tests/data/spark/hive_typed: our spelling of each date, timestamp and
    null it read back there is its folder name."""
    from tabloader.dataset.hive_folders import folder_value

    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "spark", "hive_typed")
    frame = tl.Dataset(root, columns=["dt", "at"]).compute()
    sparks = set()
    for folder, _, files in os.walk(root):
        if any(f.endswith(".parquet") for f in files):
            parts = dict(p.split("=", 1) for p in os.path.relpath(folder, root).split(os.sep))
            sparks.add((parts["dt"], parts["at"]))
    ours = {(folder_value(d), folder_value(a)) for d, a in zip(frame["dt"], frame["at"])}
    assert ours == sparks
    assert any("%3A" in a and "." in a for _, a in sparks)  # a timestamp with a fraction, as Spark trims it
