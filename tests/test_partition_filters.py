"""``Dataset(path, filters=...)``: files kept or dropped by their hive keys, before any is opened.

Data: Spark's typed hive folders (tests/data/spark/hive_typed: a date, a timestamp, a double,
null keys), a Delta table written by delta-rs, and daily folders written here. Expected rows
are chosen from Spark's and deltalake's own renderings of the rows (the .jsonl files) with
Python's comparisons.
"""

from __future__ import annotations

import datetime
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tabloader as tl

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
HIVE_TYPED = os.path.join(DATA, "spark", "hive_typed")
DELTA = os.path.join(DATA, "tables", "delta")


def rows_of(jsonl: str) -> list[dict]:
    with open(jsonl) as f:
        return [json.loads(line) for line in f]


def ids(ds: tl.Dataset) -> list[int]:
    return sorted(ds.compute()["id"].tolist())


def day(text: str | None) -> datetime.date | None:
    return None if text is None else datetime.date.fromisoformat(text[:10])


def test_sparks_date_timestamp_and_double_keys_filter_as_their_types():
    rows = rows_of(HIVE_TYPED + ".jsonl")
    first = datetime.date(2024, 1, 1)
    cases = [
        ([("dt", "==", "2024-01-02")], lambda r: day(r["dt"]) == datetime.date(2024, 1, 2)),
        ([("dt", ">", first)], lambda r: r["dt"] is not None and day(r["dt"]) > first),
        ([("dt", "!=", first)], lambda r: r["dt"] is not None and day(r["dt"]) != first),  # null keys: unknown
        ([("score", ">=", 0.5), ("dt", "in", ["2024-01-01"])],
         lambda r: r["score"] is not None and r["score"] >= 0.5 and day(r["dt"]) == first),
        ([[("score", "<", 0)], [("at", ">=", datetime.datetime(2024, 1, 2, 11))]],  # either
         lambda r: (r["score"] is not None and r["score"] < 0)
         or (r["at"] is not None and datetime.datetime.fromisoformat(r["at"]) >= datetime.datetime(2024, 1, 2, 11))),
        ([("score", "not in", [2.0, -1.25])], lambda r: r["score"] is not None and r["score"] not in (2.0, -1.25)),
    ]
    for filters, keep in cases:
        expected = sorted(r["id"] for r in rows if keep(r))
        assert expected and len(expected) < len(rows), filters  # the case keeps some rows, not all
        assert ids(tl.Dataset(HIVE_TYPED, filters=filters)) == expected, filters


def test_a_delta_tables_partition_values_filter_its_current_files():
    rows = rows_of(DELTA + ".jsonl")
    ds = tl.Dataset(DELTA, filters=[("dt", "==", "2024-01-02")])
    assert ids(ds) == sorted(r["id"] for r in rows if r["dt"] == "2024-01-02")
    assert ds.num_rows == len(ids(ds))


def write_days(root, days: int, corrupt_day: int | None = None) -> list[datetime.date]:
    dates = [datetime.date(2024, 12, 1) + datetime.timedelta(days=k) for k in range(days)]
    for k, date in enumerate(dates):
        folder = root / f"dt={date.isoformat()}"
        folder.mkdir(parents=True)
        if k == corrupt_day:
            (folder / "part-0.parquet").write_bytes(b"not parquet at all")
            continue
        pq.write_table(pa.table({"id": np.arange(k * 10, k * 10 + 10), "x": np.full(10, float(k))}),
                       folder / "part-0.parquet")
    return dates


def test_the_dropped_files_are_never_opened(tmp_path):
    write_days(tmp_path, 5, corrupt_day=0)  # day 0 could not even be read
    ds = tl.Dataset(str(tmp_path), filters=[("dt", ">=", "2024-12-02"), ("dt", "<", "2024-12-04")])
    assert ids(ds) == list(range(10, 30)) and ds.num_rows == 20
    assert all("dt=2024-12-01" not in p for p in ds.source.files.paths)
    with pytest.raises(Exception, match="dt=2024-12-01"):  # unfiltered, the broken file is met (and named)
        tl.Dataset(str(tmp_path)).compute()


def test_training_days_and_the_next_day_feed_a_workflow_and_the_loader(tmp_path):
    write_days(tmp_path / "raw", 6)
    train = tl.Dataset(str(tmp_path / "raw"), filters=[("dt", "<", "2024-12-05")])
    valid = tl.Dataset(str(tmp_path / "raw"), filters=[("dt", "==", "2024-12-05")])
    wf = tl.Workflow(["id"] + (["x"] >> tl.ops.Normalize()), progress=False).fit(train)
    x = np.repeat(np.arange(4.0), 10)  # the training days' x, by hand
    out = np.concatenate([np.asarray(f["x"]) for f, _ in tl.Loader(wf.transform(valid), batch_size=4,
                                                                   continuous=["x"], shuffle=False)])
    np.testing.assert_allclose(out, np.full(10, (4.0 - x.mean()) / x.std()), rtol=1e-6)


@pytest.mark.parametrize("filters, message", [
    ([("x", ">", 1)], r"filters name 'x', which is not a partition key of .* \(its partition keys are \['dt'\]\).*ops.Filter"),
    ([("dt", "~", 1)], r"has the operator '~'; expected one of"),
    ([("dt", "in", "2024-12-01")], r"'in' takes a list of values"),
    ([("dt", ">", "yesterday")], r"'yesterday' is not a value of the key 'dt', which is date32"),
    ([("dt", ">", "2030-01-01")], r"keep none of the 3 files of .*'dt': \[datetime.date\(2024, 12, 1\)"),
    ([], r"expected a non-empty list"),
    ([("dt", "==")], r"is not a \(key, op, value\) condition"),
])
def test_bad_filters_are_refused_naming_the_key_and_value(tmp_path, filters, message):
    write_days(tmp_path, 3)
    with pytest.raises(ValueError, match=message):
        tl.Dataset(str(tmp_path), filters=filters)


def write_months(root) -> None:
    """month=01 .. month=12: the leading zero keeps the key text (it would be lost as a number)."""
    for month in range(1, 13):
        (root / f"month={month:02d}").mkdir(parents=True)
        pq.write_table(pa.table({"id": [month]}), root / f"month={month:02d}" / "part-0.parquet")


@pytest.mark.parametrize("op", ["<", "==", "in"])
def test_a_number_for_a_text_key_is_refused_not_compared_as_text(tmp_path, op):
    """As text, "10" < 7 and "07" != 7: the filter would keep the wrong months without a word.
    The message says how to filter: the folders' spelling, or the key typed."""
    write_months(tmp_path)
    with pytest.raises(ValueError, match=r"the key 'month' is text .* partition_types=\{'month': 'int32'\}"):
        tl.Dataset(str(tmp_path), filters=[("month", op, [7] if op == "in" else 7)])
    assert ids(tl.Dataset(str(tmp_path), filters=[("month", "<", "07")])) == [1, 2, 3, 4, 5, 6]
    assert ids(tl.Dataset(str(tmp_path), filters=[("month", "<", 7)], partition_types={"month": "int32"})) == \
        [1, 2, 3, 4, 5, 6]


def test_a_key_keeps_the_type_of_all_its_folders_whichever_files_filters_keep(tmp_path):
    """zip=01234 keeps every zip text; a filter dropping that folder must not make the others
    numbers: a workflow fitted on the whole folder then refused the filtered one."""
    for k, zip_code in enumerate(["01234", "10115", "20095"]):
        (tmp_path / f"zip={zip_code}").mkdir()
        pq.write_table(pa.table({"id": [k]}), tmp_path / f"zip={zip_code}" / "part-0.parquet")
    whole = tl.Dataset(str(tmp_path))
    valid = tl.Dataset(str(tmp_path), filters=[("zip", "==", "10115")])
    assert whole.schema["zip"].dtype == valid.schema["zip"].dtype
    assert valid.compute()["zip"].tolist() == ["10115"]
    wf = tl.Workflow(["zip"] >> tl.ops.Categorify(), progress=False)
    wf.fit(whole)
    ids_of_whole = dict(zip(whole.compute()["zip"], wf.transform(whole).compute()["zip"]))
    assert wf.transform(valid).compute()["zip"].tolist() == [ids_of_whole["10115"]]

def test_filters_on_a_source_without_folders_are_refused():
    import pandas as pd

    with pytest.raises(ValueError, match=r"filters=.* applies to the key=value folders of parquet files"):
        tl.Dataset(pd.DataFrame({"dt": [1]}), filters=[("dt", "==", 1)])


@pytest.mark.parametrize("writer", ["polars", "pyarrow"])
def test_a_key_the_files_also_store_filters_as_the_type_of_that_column(tmp_path, writer):
    """polars' partition_by stores the key column in the files too: a string here, though the
    folder values look like numbers. The dataset types the key as that column, and so do the
    filters (a string comparison: "10115" < "3"), as polars' own hive reader does."""
    frame = {"zip": ["10115", "2", "10115"], "x": [1.0, 2.0, 3.0]}
    if writer == "polars":
        pytest.importorskip("polars").DataFrame(frame).write_parquet(str(tmp_path), partition_by=["zip"])
    else:
        for zip_code in ("10115", "2"):
            rows = [i for i, z in enumerate(frame["zip"]) if z == zip_code]
            os.makedirs(tmp_path / f"zip={zip_code}")
            pq.write_table(pa.table({"zip": [zip_code] * len(rows), "x": [frame["x"][i] for i in rows]}),
                           tmp_path / f"zip={zip_code}" / "part-0.parquet")
    assert tl.Dataset(str(tmp_path)).schema["zip"].dtype == "string"
    kept = tl.Dataset(str(tmp_path), filters=[("zip", "<", "3")]).compute()
    assert sorted(kept["x"]) == [1.0, 2.0, 3.0]
    assert sorted(tl.Dataset(str(tmp_path), filters=[("zip", "==", "2")]).compute()["x"]) == [2.0]


def test_integer_keys_past_int64_stay_exact_and_bounds_past_int32_still_compare(tmp_path):
    """uid=18446744073709551616 and ...617 are two values (strings, as pyarrow reads them), not one
    float; epoch-second folders that fit int32 still compare with a bound past the int32 range."""
    for uid, ts in (("18446744073709551616", "1700000000"), ("18446744073709551617", "1800000000")):
        os.makedirs(tmp_path / "big" / f"uid={uid}")
        pq.write_table(pa.table({"x": [float(uid[-1])]}), tmp_path / "big" / f"uid={uid}" / "p.parquet")
        os.makedirs(tmp_path / "epoch" / f"ts={ts}")
        pq.write_table(pa.table({"x": [float(ts[1])]}), tmp_path / "epoch" / f"ts={ts}" / "p.parquet")
    big = tl.Dataset(str(tmp_path / "big"))
    assert big.schema["uid"].dtype == "string"
    assert big.compute()["uid"].tolist() == ["18446744073709551616", "18446744073709551617"]
    kept = tl.Dataset(str(tmp_path / "big"), filters=[("uid", "==", "18446744073709551617")])
    assert kept.compute()["x"].tolist() == [7.0]
    with pytest.raises(ValueError, match=r"the key 'uid' is text .* 18446744073709551617 would compare as text"):
        tl.Dataset(str(tmp_path / "big"), filters=[("uid", "==", 18446744073709551617)])
    assert tl.Dataset(str(tmp_path / "epoch")).schema["ts"].dtype == "int32"
    assert tl.Dataset(str(tmp_path / "epoch"), filters=[("ts", "<", 3_000_000_000)]).num_rows == 2
    assert tl.Dataset(str(tmp_path / "epoch"), filters=[("ts", ">", 1.75e9)]).compute()["x"].tolist() == [8.0]
