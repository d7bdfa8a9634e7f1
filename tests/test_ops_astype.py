"""AsType: decimals, floats and integers cast to the types a model or Categorify takes, checked
so that no value changes silently; and the decimal paths of FillMedian, Categorify and the loader.

Decimals come from parquet written by real Apache Spark (tests/data/spark/types, with Spark's own
rendering of every row as JSON) and by DuckDB; expected values are computed here from those
texts with Python's ``decimal`` and ``int``.
"""

from __future__ import annotations

import decimal
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
from tabloader.ops.astype import TARGETS

duckdb = pytest.importorskip("duckdb")

SPARK_TYPES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "spark", "types")
DECIMALS = ["dec_int32", "dec_int64", "dec_fixed"]  # decimal(7,2), (15,3), (25,5)


def spark_text(name: str) -> dict[int, dict[str, str | None]]:
    """Each row's decimals as the text Spark wrote for them, by id."""
    with open(SPARK_TYPES + ".jsonl") as f:
        rows = [json.loads(line, parse_float=str) for line in f]
    return {row["id"]: {c: row[c] for c in DECIMALS} for row in rows}


def by_id(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values("id", ignore_index=True)


def test_spark_decimals_become_sparks_own_text_and_the_nearest_floats():
    ds = tl.Dataset(SPARK_TYPES, columns=["id", *DECIMALS])
    wf = tl.Workflow(["id"] + (DECIMALS >> ops.AsType("string") >> ops.Rename(postfix="_text"))
                     + (DECIMALS >> ops.AsType("float64")), progress=False)
    out = by_id(wf.fit_transform(ds).compute())
    texts = spark_text(SPARK_TYPES)
    assert sorted(out["id"]) == sorted(texts)
    for col in DECIMALS:
        expected_text = [texts[i][col] for i in out["id"]]
        assert [None if pd.isna(v) else v for v in out[col + "_text"]] == expected_text, col
        expected = np.array([np.nan if t is None else float(decimal.Decimal(t)) for t in expected_text])
        np.testing.assert_allclose(out[col].to_numpy(), expected, rtol=1e-15, err_msg=col)
        assert out[col].dtype == np.float64 and wf.output_schema[col].dtype == "float64"
        assert "continuous" in wf.output_schema[col].tags


def test_a_fraction_is_refused_by_an_integer_cast_naming_the_column_and_the_value():
    texts = spark_text(SPARK_TYPES)
    ds = tl.Dataset(SPARK_TYPES, columns=["dec_int32"])
    with pytest.raises(ValueError, match=r"column 'dec_int32' holds (-?[0-9]+\.[0-9]+) .*has a fraction") as caught:
        tl.Workflow(["dec_int32"] >> ops.AsType("int64"), progress=False).fit_transform(ds).compute()
    named = caught.value.args[0].split(" holds ")[1].split(" ")[0]
    assert named in {row["dec_int32"] for row in texts.values()}
    assert decimal.Decimal(named) % 1 != 0


def write_duckdb_ids(path: str) -> None:
    """Ids as a database keeps them: DECIMAL(38,0) beyond int64, DECIMAL(18,0) within it, an
    amount DECIMAL(10,2); nulls in each; one file per 50 rows."""
    os.makedirs(path)
    for part in range(2):
        duckdb.sql(f"""COPY (SELECT
            CASE WHEN i % 7 = 3 THEN NULL ELSE CAST('1{'0' * 25}' AS DECIMAL(38,0)) + i % 9 END AS big_id,
            CASE WHEN i % 5 = 1 THEN NULL ELSE CAST(9000000000000000 + i % 4 AS DECIMAL(18,0)) END AS id18,
            CAST(i * 1.25 AS DECIMAL(10,2)) AS amount
            FROM range({part * 50}, {part * 50 + 50}) t(i)) TO '{path}/part{part}.parquet' (FORMAT PARQUET)""")


def test_database_decimal_ids_become_categories_as_their_exact_values(tmp_path):
    path = str(tmp_path / "ids")
    write_duckdb_ids(path)
    raw = pa.concat_tables([pq.read_table(f"{path}/part{p}.parquet") for p in range(2)]).to_pylist()
    wf = tl.Workflow(((["big_id"] >> ops.AsType("string")) + (["id18"] >> ops.AsType("int64"))) >> ops.Categorify(),
                     progress=False)
    out = wf.fit_transform(tl.Dataset(path)).compute()

    for col, key in (("big_id", str), ("id18", int)):  # Categorify's order: null 1, OOV 2, then by count, value
        values = [None if row[col] is None else key(row[col]) for row in raw]
        counts = pd.Series([v for v in values if v is not None]).value_counts()
        order = sorted(counts.index, key=lambda v: (-counts[v], v))
        ids = {v: 3 + i for i, v in enumerate(order)}
        assert out[col].tolist() == [1 if v is None else ids[v] for v in values], col
    # the 9 ids of 26 digits stayed apart (as floats they would all be 1e25), plus the nulls' id
    assert out["big_id"].nunique() == 10


def test_integer_casts_keep_nulls_with_one_dtype_in_every_partition(tmp_path):
    path = str(tmp_path / "ids")
    write_duckdb_ids(path)
    ds = tl.Dataset(path, part_size=1)  # one partition per row group: some without nulls
    out = tl.Workflow(["id18"] >> ops.AsType("int64"), progress=False).fit(ds).transform(ds)
    parts = list(out.to_iter())
    assert len(parts) >= 2 and {str(p["id18"].dtype) for p in parts} == {"Int64"}
    expected = [None if i % 5 == 1 else 9000000000000000 + i % 4 for i in range(100)]
    assert [None if v is pd.NA else int(v) for v in pd.concat(parts)["id18"]] == expected


@pytest.mark.parametrize("values, dtype, named", [
    (pd.Series([1.0, 2.5]), "int32", "2.5 .*has a fraction"),
    (pd.Series([1.0, np.inf]), "int64", "inf .*outside int64's range"),
    # 2**63 is int64's max + 1: a float compared with the integer max (rounded up to 2**63) passed it
    (pd.Series([1.0, 2.0**63]), "int64", r"9.223372036854776e\+18 .*outside int64's range"),
    (pd.Series([1, 300]), "int8", "300 .*outside int8's range"),
    (pd.Series([3, -1], dtype="Int64"), "uint32", "-1 .*outside uint32's range"),
    (pd.Series(np.array([1, 2**64 - 1], dtype=np.uint64)), "int64", "18446744073709551615 .*outside int64's range"),
    (pd.Series(pd.array([decimal.Decimal("1"), decimal.Decimal("99999999999999999999")],
                        dtype=pd.ArrowDtype(pa.decimal128(20, 0)))), "uint64", "99999999999999999999 .*outside"),
    (pd.Series(pd.array([decimal.Decimal("3000000000.00"), None], dtype=pd.ArrowDtype(pa.decimal128(12, 2)))),
     "int32", r"3000000000.00 .*outside int32's range"),
    (pd.Series(pd.array([decimal.Decimal("-1")], dtype=pd.ArrowDtype(pa.decimal128(3, 0)))), "uint8", "-1 .*outside"),
])
def test_an_integer_cast_that_would_change_a_value_is_refused(values, dtype, named):
    with pytest.raises(ValueError, match=f"column 'x' holds {named}"):
        ops.AsType(dtype).transform(["x"], pd.DataFrame({"x": values}))


def test_a_fraction_is_named_before_a_value_outside_the_range():
    with pytest.raises(ValueError, match=r"column 'x' holds 2.5 \(1 such value\(s\)\), which has a fraction"):
        ops.AsType("int8").transform(["x"], pd.DataFrame({"x": [1e30, 2.5, 3.0]}))


@pytest.fixture
def reductions(monkeypatch):
    """The names of the reductions asked of any Series: on cuDF each one's answer is read back
    from the device (a wait per column and partition)."""
    asked = []
    for name in ("any", "all", "sum", "min", "max", "count", "nunique"):
        def counted(self, *args, _name=name, _original=getattr(pd.Series, name), **kwargs):
            asked.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(pd.Series, name, counted)
    return asked


@pytest.mark.parametrize("values, dtype", [
    (pd.Series([1.0, np.nan, -3.0, 2.0**40]), "int64"),  # a fraction, or a value outside the range?
    (pd.Series(pd.array([decimal.Decimal("12.00"), None, decimal.Decimal("-7.00")],
                        dtype=pd.ArrowDtype(pa.decimal128(12, 2)))), "int32"),
    (pd.Series([5, None, -100], dtype="Int64"), "int8"),  # only the range
])
def test_an_integer_cast_asks_one_question_of_a_column_that_passes(values, dtype, reductions):
    out = ops.AsType(dtype).transform(["x"], pd.DataFrame({"x": values}))["x"]
    assert reductions == ["any"]
    expected = [None if pd.isna(v) else int(v) for v in values.tolist()]  # every value whole and in range
    assert [None if pd.isna(v) else v for v in out.tolist()] == expected


@pytest.mark.parametrize("dtype", ["int64", "int8", "uint32"])
def test_floats_at_the_integer_bounds_are_cast(dtype):
    info = np.iinfo(dtype)
    top = float(info.max)  # int64's max rounds up to 2**63, out of range: the largest float below it then
    top = top if int(top) <= info.max else float(np.nextafter(top, 0))
    values = pd.Series([float(info.min), 0.0, top])
    out = ops.AsType(dtype).transform(["x"], pd.DataFrame({"x": values}))
    assert [int(v) for v in out["x"]] == [int(v) for v in values]


@pytest.mark.parametrize("values, dtype, expected, expected_dtype", [
    (pd.Series([1.0, np.nan, -3.0]), "int16", [1, None, -3], "Int16"),
    (pd.Series([0, 255]), "uint8", [0, 255], "uint8"),
    (pd.Series([True, False]), "int8", [1, 0], "int8"),
    (pd.Series([2**64 - 1], dtype="uint64"), "uint64", [2**64 - 1], "uint64"),
    (pd.Series([7, None], dtype="Int64"), "string", ["7", None], str(STRING_DTYPE)),
    (pd.Series([True, None], dtype="boolean"), "float32", [1.0, None], "float32"),
])
def test_casts_that_change_no_value(values, dtype, expected, expected_dtype):
    out = ops.AsType(dtype).transform(["x"], pd.DataFrame({"x": values}))["x"]
    assert str(out.dtype) == expected_dtype
    assert [None if pd.isna(v) else v for v in out.tolist()] == expected


def test_wrong_targets_and_inputs_are_refused_saying_what_is_taken():
    with pytest.raises(ValueError, match=r"AsType\(dtype='datetime64'\): expected one of"):
        ops.AsType("datetime64")
    with pytest.raises(TypeError, match=r"cannot cast column 'x' of dtype float64 to string: .*integer first"):
        ops.AsType("string").transform(["x"], pd.DataFrame({"x": [1.5]}))
    with pytest.raises(TypeError, match=rf"cannot cast column 's' of dtype {STRING_DTYPE} to float32"):
        ops.AsType("float32").transform(["s"], pd.DataFrame({"s": pd.Series(["a"], dtype=STRING_DTYPE)}))
    assert "string" in TARGETS and ops.AsType(str).dtype == "string"


def test_a_saved_workflow_with_casts_loads_and_runs_without_trusting_anything(tmp_path):
    ds = tl.Dataset(SPARK_TYPES, columns=["id", "dec_int64"])
    wf = tl.Workflow(["id"] + (["dec_int64"] >> ops.AsType("float32") >> ops.Normalize()), progress=False).fit(ds)
    wf.save(str(tmp_path / "wf"))
    loaded = tl.Workflow.load(str(tmp_path / "wf"))  # no trusted=: AsType is saved as its dtype name
    pd.testing.assert_frame_equal(loaded.transform(ds).compute(), wf.transform(ds).compute())


def test_the_loaders_advice_for_a_decimal_column_works(tmp_path):
    path = str(tmp_path / "ids")
    write_duckdb_ids(path)
    with pytest.raises(TypeError, match=r"column 'amount' has dtype .*decimal.*ops.AsType\('float32'\)"):
        tl.Loader(tl.Dataset(path, columns=["amount"]), batch_size=16, continuous=["amount"])
    out = tl.Workflow(["amount"] >> ops.AsType("float32"), progress=False).fit(tl.Dataset(path))
    out.transform(tl.Dataset(path)).to_parquet(str(tmp_path / "out"), progress=False)
    loader = tl.Loader(tl.Dataset(str(tmp_path / "out")), batch_size=16, continuous=["amount"], shuffle=False)
    got = np.concatenate([np.asarray(batch[0]["amount"]).ravel() for batch in loader])
    np.testing.assert_array_equal(got, np.arange(100, dtype=np.float32) * np.float32(1.25))


def test_categorify_of_a_decimal_says_to_cast_it_first():
    frame = pd.DataFrame({"id": pd.array([decimal.Decimal("5")], dtype=pd.ArrowDtype(pa.decimal128(38, 0)))})
    with pytest.raises(TypeError, match=r"column 'id' of dtype .*decimal.*ops.AsType\('string'\)"):
        tl.Workflow(["id"] >> ops.Categorify(), progress=False).fit(frame)


def test_fill_median_of_a_decimal_column_fills_it_as_float64():
    cents = [None, "1.25", "3.50", None, "10.00"]
    frame = pd.DataFrame({"price": pd.array([None if c is None else decimal.Decimal(c) for c in cents],
                                            dtype=pd.ArrowDtype(pa.decimal128(10, 2)))})
    out = tl.Workflow(["price"] >> ops.FillMedian(), progress=False).fit_transform(frame)
    median = float(np.median([1.25, 3.5, 10.0]))
    assert out["price"].dtype == np.float64
    assert out["price"].tolist() == [median, 1.25, 3.5, median, 10.0]
