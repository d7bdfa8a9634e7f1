"""DatetimeFeatures on the dates and timestamps users' files hold: Spark's DATE, TIMESTAMP (UTC
instants, years 1901-9999) and TIMESTAMP_NTZ, hive `dt=` folders typed as dates, time-zoned
pandas columns. Expected values come from Python's ``datetime`` on Spark's own rendering of
every row (tests/data/spark/types.jsonl), never from pandas' ``.dt``.
"""

from __future__ import annotations

import datetime
import json
import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tabloader as tl
from tabloader import ops
from tabloader.backend import STRING_DTYPE
from tabloader.ops.datetime_features import FEATURES

SPARK_TYPES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "spark", "types")
EPOCH = datetime.datetime(1970, 1, 1)


def spark_times() -> dict[int, dict[str, datetime.datetime | None]]:
    """Each row's day, ts and ts_ntz as Spark rendered them (session time zone UTC), by id."""
    with open(SPARK_TYPES + ".jsonl") as f:
        rows = [json.loads(line) for line in f]
    parse = {"day": lambda t: datetime.datetime.fromisoformat(t + "T00:00:00"), "ts": datetime.datetime.fromisoformat,
             "ts_ntz": datetime.datetime.fromisoformat}
    return {row["id"]: {c: None if row[c] is None else parse[c](row[c]) for c in parse} for row in rows}


def by_hand(moment: datetime.datetime | None, feature: str) -> float | None:
    if moment is None:
        return None
    if feature == "epoch_seconds":
        return (moment - EPOCH) / datetime.timedelta(seconds=1)
    return {"year": moment.year, "month": moment.month, "day_of_month": moment.day, "day_of_week": moment.weekday(),
            "day_of_year": moment.timetuple().tm_yday, "hour": moment.hour, "minute": moment.minute,
            "second": moment.second, "weekend": int(moment.weekday() >= 5)}[feature]


def plain(values: pd.Series) -> list:
    return [None if pd.isna(v) else v for v in values.tolist()]


def test_every_feature_of_sparks_dates_and_timestamps_equals_pythons_datetime():
    columns = ["day", "ts", "ts_ntz"]
    ds = tl.Dataset(SPARK_TYPES, columns=["id", *columns])
    wf = tl.Workflow(["id"] + (columns >> ops.DatetimeFeatures(list(FEATURES))), progress=False)
    out = wf.fit_transform(ds).compute().sort_values("id", ignore_index=True)
    rows = spark_times()
    assert any(row["ts"] is not None and row["ts"].year == 9999 for row in rows.values())  # past 2262
    for col in columns:
        moments = [rows[i][col] for i in out["id"]]
        assert any(m is None for m in moments), f"{col}: the fixture should hold a null"
        for feature in FEATURES:
            got, name = out[f"{col}_{feature}"], f"{col}_{feature}"
            expected = [by_hand(m, feature) for m in moments]
            if feature == "epoch_seconds":
                want = np.array([np.nan if e is None else e for e in expected])
                np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-15, atol=1e-6, err_msg=name)
                assert got.dtype == np.float64 and "continuous" in wf.output_schema[name].tags
            else:
                assert plain(got) == expected, name
                assert str(got.dtype) == "Int16" and wf.output_schema[name].dtype == "int16", name


def test_a_hive_date_folder_gives_its_day_of_week(tmp_path):
    days = [datetime.date(2024, 1, 1) + datetime.timedelta(days=k) for k in range(9)]
    for k, day in enumerate(days):
        folder = tmp_path / f"dt={day.isoformat()}"
        folder.mkdir()
        pq.write_table(pa.table({"v": [k, k]}), folder / "part.parquet")
    out = tl.Workflow(["v"] + (["dt"] >> ops.DatetimeFeatures(["day_of_week", "weekend"])), progress=False) \
        .fit_transform(tl.Dataset(str(tmp_path))).compute().sort_values("v")
    assert out["dt_day_of_week"].tolist() == [d.weekday() for d in days for _ in range(2)]
    assert out["dt_weekend"].tolist() == [int(d.weekday() >= 5) for d in days for _ in range(2)]


def test_a_time_zoned_column_gives_its_local_parts_and_utc_seconds():
    utc = pd.Series(pd.to_datetime(["2024-03-09 23:30:00", "2024-03-10 12:00:00", None]).tz_localize("UTC"))
    tokyo = utc.dt.tz_convert("Asia/Tokyo")  # 9 hours ahead: the first is Sunday 08:30 there
    out = ops.DatetimeFeatures(["day_of_week", "hour", "epoch_seconds"]).transform(["t"], pd.DataFrame({"t": tokyo}))
    assert plain(out["t_day_of_week"]) == [6, 6, None] and plain(out["t_hour"]) == [8, 21, None]
    seconds = [(datetime.datetime(2024, 3, 9, 23, 30) - EPOCH).total_seconds(),
               (datetime.datetime(2024, 3, 10, 12) - EPOCH).total_seconds()]
    np.testing.assert_array_equal(out["t_epoch_seconds"].to_numpy()[:2], seconds)


def test_partitions_with_and_without_nulls_get_one_dtype_and_the_loader_takes_the_categories(tmp_path):
    times = pd.Series(pd.to_datetime([f"2024-05-{d:02d} {h:02d}:00" for d in range(1, 31) for h in (3, 15)]))
    frame = pd.DataFrame({"at": times.astype("datetime64[us]"), "label": np.arange(60) % 2})
    frame.loc[frame.index[-5:], "at"] = pd.NaT  # only the last partition has nulls
    path = tmp_path / "raw"
    path.mkdir()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path / "part.parquet", row_group_size=20)
    ds = tl.Dataset(str(path), part_size=1)
    wf = tl.Workflow((["at"] >> ops.DatetimeFeatures(["hour"]) >> ops.Categorify()) + ["label"], progress=False)
    wf.fit(ds)
    parts = list(wf.transform(ds).to_iter())
    assert len(parts) == 3
    hours = [None if pd.isna(t) else t.hour for t in frame["at"]]
    assert {str(p.dtypes["at_hour"]) for p in parts} == {"int64"}  # Categorify's ids, nulls included
    wf.transform(ds).to_parquet(str(tmp_path / "out"), progress=False)
    loader = tl.Loader(tl.Dataset(str(tmp_path / "out")), batch_size=64, categorical=["at_hour"], shuffle=False)
    ids = next(iter(loader))[0]["at_hour"]
    count = {h: hours.count(h) for h in (3, 15)}  # Categorify: nulls 1, then ids by count
    assert count == {3: 28, 15: 27}
    order = sorted(count, key=lambda h: (-count[h], h))
    expected = [1 if h is None else 3 + order.index(h) for h in hours]
    assert np.asarray(ids).tolist() == expected


def test_wrong_features_and_columns_are_refused_naming_them():
    with pytest.raises(ValueError, match=r"features=\['hour', 'fortnight'\]\): expected one or more of"):
        ops.DatetimeFeatures(["hour", "fortnight"])
    text = pd.Series(["2024-01-01"], dtype=STRING_DTYPE)
    with pytest.raises(TypeError, match=rf"needs date or timestamp columns, but column 'when' has dtype {STRING_DTYPE}"):
        ops.DatetimeFeatures().transform(["when"], pd.DataFrame({"when": text}))


def test_a_saved_workflow_loads_without_trusting_anything(tmp_path):
    ds = tl.Dataset(SPARK_TYPES, columns=["ts"])
    wf = tl.Workflow(["ts"] >> ops.DatetimeFeatures(["hour", "epoch_seconds"]) >> ops.FillMissing(-1),
                     progress=False).fit(ds)
    wf.save(str(tmp_path / "wf"))
    loaded = tl.Workflow.load(str(tmp_path / "wf"))
    pd.testing.assert_frame_equal(loaded.transform(ds).compute(), wf.transform(ds).compute())
