"""Numeric operators: FillMissing, FillMedian (and its quantile sketch), Normalize,
NormalizeMinMax, LogOp, Clip, Bucketize.

Every expected value is computed here with pandas/numpy, independently of the operators.
"""

from __future__ import annotations

import decimal
import math
import re
import warnings

import numpy as np
import pandas as pd
import pytest

from tabloader.dataset import Dataset
from tabloader.ops.base import NotFittedError
from tabloader.ops.fill import FillMedian, FillMissing
from tabloader.ops.normalize import Normalize, NormalizeMinMax
from tabloader.ops.numeric import Bucketize, Clip, LogOp
from tabloader.ops.sketch import QuantileSketch
from tabloader.schema import ColumnSchema, Schema, Tags
from tabloader.workflow import Workflow
from tabloader.backend import STRING_DTYPE

from op_cases import BUCKETIZE_BOUNDS, numeric_frame


make_frame = numeric_frame


SCHEMA = Schema([ColumnSchema("a", "float64", {Tags.CONTINUOUS}), ColumnSchema("b", "float32", {Tags.CONTINUOUS}),
                 ColumnSchema("c", "int64", {Tags.CATEGORICAL}), ColumnSchema("d", "Int64"),
                 ColumnSchema("const", "float64"), ColumnSchema("allnull", "float64"),
                 ColumnSchema("label", "int32", {Tags.TARGET})])


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return make_frame()


def many_parts(df: pd.DataFrame) -> Dataset:
    ds = Dataset(df, part_size=2000, schema=SCHEMA)
    assert ds.npartitions >= 8
    return ds


def fit_one_and_many(build, df: pd.DataFrame) -> tuple[Workflow, Workflow]:
    """The same graph fit on one partition and on many partitions."""
    one = Workflow(build(), progress=False).fit(Dataset(df, schema=SCHEMA))
    many = Workflow(build(), progress=False).fit(many_parts(df))
    return one, many


def save_load(wf: Workflow, tmp_path) -> Workflow:
    path = str(tmp_path / "wf")
    wf.save(path)
    return Workflow.load(path)


def assert_frames_identical(left: pd.DataFrame, right: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(left, right, check_exact=True)


# --- FillMissing --------------------------------------------------------------------------------
def test_fill_missing_matches_pandas_and_keeps_dtypes(frame):
    out = Workflow(["a", "b", "c", "d", "allnull"] >> FillMissing(-1), progress=False).fit_transform(frame)
    for col in ["a", "b", "c", "d", "allnull"]:
        expected = frame[col].where(frame[col].notna(), -1)
        np.testing.assert_array_equal(out[col].to_numpy(dtype="float64"), expected.to_numpy(dtype="float64"))
        assert out[col].dtype == frame[col].dtype, col
    assert (out["allnull"] == -1).all()


def test_fill_missing_indicator_and_schema(frame):
    wf = Workflow(["a", "b"] >> FillMissing(0.5, add_binary_cols=True), progress=False).fit(Dataset(frame, schema=SCHEMA))
    out = wf.transform(frame)
    assert list(out.columns) == ["a", "b", "a_filled", "b_filled"]
    np.testing.assert_array_equal(out["a_filled"].to_numpy(), np.isnan(frame["a"].to_numpy()))
    assert out["b_filled"].dtype == bool
    assert out.loc[frame["b"].isna(), "b"].eq(0.5).all()
    schema = wf.output_schema
    assert schema["a_filled"].dtype == "bool" and schema["a_filled"].has_tag(Tags.BINARY)
    assert schema["a"].has_tag(Tags.CONTINUOUS)


def test_fill_missing_keeps_inf():
    df = pd.DataFrame({"x": [np.inf, np.nan, -np.inf]})
    assert FillMissing(0).transform(["x"], df)["x"].tolist() == [np.inf, 0.0, -np.inf]



@pytest.mark.parametrize("value", [0, -1, 0.5, 0.1, 1e-50, 2**70, -2**60 + 1, np.float32(0.25), np.float64(0.1),
                                   np.int64(-3), np.inf])
def test_fill_missing_float_columns_match_fillna_by_hand(value):
    """Every number fills a float column as a number of the column's dtype, as pandas 3 (and numpy 2)
    cast a Python number (a numpy float64 too: pandas would make a float32 column float64, which the
    output schema does not say); NaN only is filled."""
    x = np.array([1.5, np.nan, -np.inf, np.inf, -0.0, np.nan], dtype=np.float64)
    df = pd.DataFrame({"f64": x, "f32": x.astype(np.float32)})
    out = FillMissing(value).transform(["f64", "f32"], df)
    for col in ["f64", "f32"]:
        with np.errstate(over="ignore"):
            expected = pd.Series(np.where(np.isnan(df[col]), df[col].dtype.type(value), df[col]), name=col)
        pd.testing.assert_series_equal(out[col], expected, check_exact=True)


NAIVE_DAY = pd.Timestamp("2024-01-02")
REFUSED_FILLS = {  # column values (a null among them), a fill value its dtype cannot hold
    "text in floats": (pd.Series([1.5, None, 3.0]), "unknown"),
    "a number in datetimes": (pd.Series(pd.to_datetime(["2024-01-01", None])), 0),
    "a naive time in zoned times": (pd.Series(pd.to_datetime(["2024-01-01", None], utc=True)), NAIVE_DAY),
    "a number in strings": (pd.Series(["a", None], dtype=STRING_DTYPE), 0),
    "a finer time than the column's unit": (pd.Series(pd.to_datetime(["2024-01-01", None]).as_unit("s")),
                                            pd.Timestamp("2024-01-01 00:00:00.5")),
    # numpy integers hold no null, but another partition (or a serving request) of the column may
    "text in numpy integers": (pd.Series([1, 2]), "unknown"),
    "a fraction in numpy integers": (pd.Series([1, 2]), 0.5),
}


@pytest.mark.parametrize("case", REFUSED_FILLS)
def test_fill_missing_refuses_a_value_the_columns_dtype_cannot_hold(case):
    """pandas' fillna turned such a column into objects of mixed types (or another dtype) while the
    output schema still said its dtype; a partition without a null is refused as one with."""
    values, fill = REFUSED_FILLS[case]
    for part in (values, values.dropna()):
        with pytest.raises(TypeError, match=re.escape(f"FillMissing cannot fill column 'x' (dtype {values.dtype}) "
                                                      f"with {fill!r}")):
            FillMissing(fill).transform(["x"], pd.DataFrame({"x": part}))
    data = Dataset(pd.DataFrame({"x": values}))
    wf = Workflow(["x"] >> FillMissing(fill), progress=False).fit(data)
    with pytest.raises(TypeError, match="FillMissing cannot fill column 'x'"):
        wf.transform(data).compute()


def test_fill_missing_with_a_value_of_the_columns_dtype_keeps_it():
    """What fits is filled, the dtype kept: a timestamp in a datetime column, text in a string one."""
    times = pd.Series(pd.to_datetime(["2024-01-01", None]))
    texts = pd.Series(["a", None], dtype=STRING_DTYPE)
    out = FillMissing(NAIVE_DAY).transform(["t"], pd.DataFrame({"t": times}))["t"]
    assert out.tolist() == [pd.Timestamp("2024-01-01"), NAIVE_DAY] and out.dtype == times.dtype
    out = FillMissing("z").transform(["s"], pd.DataFrame({"s": texts}))["s"]
    assert out.tolist() == ["a", "z"] and out.dtype == texts.dtype


def test_fill_a_float32_column_with_a_python_float_keeps_float32():
    """pandas 2's fillna made float64 of an all-null float32 column filled with 0.1 (pandas 3 does not)."""
    df = pd.DataFrame({"f": np.array([np.nan, np.nan], dtype=np.float32)})
    for op in [FillMissing(0.1), FillMedian()]:
        wf = Workflow(["f"] >> op, progress=False).fit(pd.DataFrame({"f": np.array([0.1, np.nan], np.float32)}))
        out = wf.transform(df)["f"]
        assert out.dtype == np.float32
        np.testing.assert_array_equal(out.to_numpy(), np.full(2, 0.1, dtype=np.float32))


def arrow_floats_with_nan(tmp_path) -> pd.DataFrame:
    """float64 and float32 columns holding NaN values and nulls, as ``pd.read_parquet(...,
    dtype_backend="pyarrow")`` gives them (arrow-backed: NaN and null kept apart)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    values = [1.0, float("nan"), None, 3.0, 7.0, float("nan")]
    table = pa.table({"f64": pa.array(values, pa.float64(), from_pandas=False),
                      "f32": pa.array(values, pa.float32(), from_pandas=False)})
    pq.write_table(table, tmp_path / "nan.parquet")
    frame = pd.read_parquet(tmp_path / "nan.parquet", dtype_backend="pyarrow")
    assert frame["f64"].isna().tolist() == [False, False, True, False, False, False]  # arrow's NaN is no null
    return frame


def test_fill_missing_and_fill_median_fill_the_nan_of_arrow_float_columns(tmp_path):
    """The docs say nulls and NaN are filled: an arrow-backed float column's NaN were left, and
    its ``_filled`` indicator said False there."""
    frame = arrow_floats_with_nan(tmp_path)
    missing = [False, True, True, False, False, True]  # NaN or null, by hand
    finite = [1.0, 3.0, 7.0]
    for op, fill in [(FillMissing(0.5, add_binary_cols=True), 0.5),
                     (FillMedian(add_binary_cols=True), float(np.median(finite)))]:
        for data in (frame, Dataset(frame)):
            wf = Workflow(["f64", "f32"] >> op, progress=False).fit(data)
            out = wf.transform(data)
            out = out.compute() if isinstance(out, Dataset) else out
            for col in ["f64", "f32"]:
                expected = [fill if gone else v for gone, v in zip(missing, [1.0, None, None, 3.0, 7.0, None])]
                assert out[col].tolist() == expected, (op, col)
                assert out[col].dtype == frame[col].dtype, (op, col)
                assert out[f"{col}_filled"].tolist() == missing, (op, col)
    assert wf.stat_nodes[0].op.medians_ == {"f64": 3.0, "f32": 3.0}


def rows_from_loader(loader, name):
    """The list rows of column ``name`` over one epoch, rebuilt from the (values, offsets) pairs."""
    rows = []
    for features, _ in loader:
        values, offsets = features[name]
        rows += [values[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])]
    return rows


def test_fill_missing_fills_null_lists_and_the_loader_takes_them(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tabloader.loader import Loader, LoaderReadError

    ints = [[3, None, 1], None, [], [4], None, [None, None], [7, 8]]
    other = [None, [1, 2], None, [], [5], None, [6]]
    table = pa.table({"l": pa.array(ints, type=pa.list_(pa.int64())), "m": pa.array(other, type=pa.list_(pa.int32())),
                      "y": pa.array(np.arange(len(ints), dtype=np.float32))})
    pq.write_table(table, tmp_path / "raw.parquet", row_group_size=3)  # pyarrow, no pandas metadata
    raw = Dataset(str(tmp_path / "raw.parquet"), part_size=1)
    assert raw.npartitions == 3
    with pytest.raises(LoaderReadError, match=r"'l'.*FillMissing\(\[\.\.\.\]\) fills null lists"):
        list(Loader(raw, batch_size=4, shuffle=False, categorical=["l"], continuous=[], target="y"))

    wf = Workflow((["l"] >> FillMissing()) + (["m"] >> FillMissing([-1, -2], add_binary_cols=True)) + ["y"],
                  progress=False).fit(raw)
    assert wf.output_schema["l"].is_list and wf.output_schema["m"].is_list
    loader = Loader(wf.transform(raw), batch_size=4, shuffle=False, categorical=["l", "m"], continuous=[], target="y")
    # by hand: FillMissing() -> null lists [] and null elements 0; FillMissing([-1, -2]) -> null lists [-1, -2]
    assert rows_from_loader(loader, "l") == [[3, 0, 1], [], [], [4], [], [0, 0], [7, 8]]
    assert rows_from_loader(loader, "m") == [[-1, -2], [1, 2], [-1, -2], [], [5], [-1, -2], [6]]
    out = wf.transform(raw).compute()
    assert out["m_filled"].tolist() == [row is None for row in other]
    assert "list" not in wf.output_schema["m_filled"].tags  # one flag a row
    wf.transform(raw).to_parquet(str(tmp_path / "out"), progress=False)
    assert Dataset(str(tmp_path / "out")).schema == wf.output_schema
    assert out["m"].dtype.pyarrow_dtype == pa.list_(pa.int32())

    # object columns of Python lists (a serving request, pd.read_parquet) come out as list columns too
    request = pd.DataFrame({"l": pd.Series([[1, None], np.nan, None], dtype=object),
                            "m": pd.Series([None, [9], None], dtype=object), "y": [0.0, 1.0, 2.0]})
    served = wf.transform(request)
    assert [list(v) for v in served["l"]] == [[1, 0], [], []]
    assert [list(v) for v in served["m"]] == [[-1, -2], [9], [-1, -2]]
    with pytest.raises(TypeError, match=r"FillMissing cannot fill list column 's'.*'x'"):
        FillMissing("x").transform(["s"], pd.DataFrame({"s": pd.Series([[1, None]], dtype=object)}))


def test_fill_missing_empty_partition():
    df = pd.DataFrame({"x": np.array([], dtype=np.float64)})
    out = Workflow(["x"] >> FillMissing(0, add_binary_cols=True), progress=False).fit_transform(df)
    assert len(out) == 0 and list(out.columns) == ["x", "x_filled"]


@pytest.mark.parametrize("values, dtype, fill", [([1, None, 3], "Int8", 1000), ([1, None, 3], "UInt8", -1),
                                                 ([1, None], "Int64", 2**63), ([1, None], "int64[pyarrow]", 2**63)])
def test_fill_missing_refuses_an_integer_outside_the_columns_range_naming_it(values, dtype, fill):
    """A bare OverflowError named neither the operator, the column nor the value."""
    with pytest.raises(TypeError, match=re.escape(f"FillMissing cannot fill column 'x' (dtype {dtype}) with {fill}")):
        FillMissing(fill).transform(["x"], pd.DataFrame({"x": pd.Series(values, dtype=dtype)}))


# --- the quantile sketch -----------------------------------------------------------------------
@pytest.mark.parametrize("dist", ["lognormal", "normal_mixed_sign", "integers"])
def test_sketch_median_within_documented_bound(dist):
    rng = np.random.default_rng(1)
    n = 400_001
    x = {"lognormal": rng.lognormal(2.0, 3.0, n),
         "normal_mixed_sign": rng.normal(0.3, 5.0, n),
         "integers": rng.integers(0, 1000, n).astype(np.float64)}[dist]
    a = 1e-3
    sketch = None
    for part in np.array_split(x, 37):  # merged from partial sketches of uneven parts
        s = QuantileSketch.from_values(part, relative_accuracy=a)
        sketch = s if sketch is None else sketch.merge(s)
    assert not sketch.is_exact and sketch.count == n
    srt = np.sort(x)
    for q in (0.5, 0.1, 0.9, 0.0, 1.0):
        h = q * (n - 1)
        bound = a * max(abs(srt[math.floor(h)]), abs(srt[math.ceil(h)])) * (1 + 1e-9)
        assert abs(sketch.quantile(q) - np.quantile(x, q)) <= bound, (dist, q)


def test_sketch_is_exact_when_small_and_independent_of_partitioning():
    rng = np.random.default_rng(2)
    x = rng.normal(size=1000)
    x[::17] = np.nan
    x[::31] = np.inf
    finite = x[np.isfinite(x)]
    s = QuantileSketch.from_values(x)
    assert s.is_exact and s.count == finite.size
    for q in (0.0, 0.25, 0.5, 0.77, 1.0):
        assert s.quantile(q) == np.quantile(finite, q)
    big = rng.lognormal(size=50_000)
    whole = QuantileSketch.from_values(big)
    parts = [QuantileSketch.from_values(p) for p in np.array_split(big, 13)]
    left = parts[0]
    for p in parts[1:]:
        left = left.merge(p)
    right = parts[-1]
    for p in reversed(parts[:-1]):
        right = p.merge(right)
    for q in (0.1, 0.5, 0.9):
        assert whole.quantile(q) == left.quantile(q) == right.quantile(q)
    assert math.isnan(QuantileSketch.from_values(np.array([np.nan])).quantile(0.5))


# --- FillMedian ---------------------------------------------------------------------------------
def test_fill_median_small_is_exact_and_partition_independent(frame, tmp_path):
    def build():
        return ["a", "b", "d"] >> FillMedian(add_binary_cols=True)

    one, many = fit_one_and_many(build, frame)
    expected = {c: float(np.median(frame[c].dropna().to_numpy(dtype="float64"))) for c in ["a", "b", "d"]}
    op_one = one.stat_nodes[0].op
    assert op_one.medians_ == expected == many.stat_nodes[0].op.medians_
    out = one.transform(frame)
    for c in ["a", "b", "d"]:
        fill = np.float32(expected[c]) if c == "b" else expected[c]  # a float32 column holds it as float32
        np.testing.assert_array_equal(out[c].to_numpy(dtype="float64"),
                                      frame[c].astype("float64").fillna(float(fill)).to_numpy())
        np.testing.assert_array_equal(out[f"{c}_filled"].to_numpy(), frame[c].isna().to_numpy())
    assert out["a"].dtype == np.float64 and out["b"].dtype == np.float32
    assert_frames_identical(save_load(one, tmp_path).transform(frame), out)
    assert one.output_schema["d"].has_tag(Tags.CONTINUOUS)


def test_fill_median_large_within_bound_and_partition_independent():
    rng = np.random.default_rng(3)
    n = 120_000
    x = rng.lognormal(1.0, 2.0, n)
    x[rng.random(n) < 0.05] = np.nan
    x[:10] = np.inf
    df = pd.DataFrame({"x": x})
    medians = []
    for ds in (Dataset(df), Dataset(df, part_size=64_000)):
        wf = Workflow(["x"] >> FillMedian(), progress=False).fit(ds)
        medians.append(wf.stat_nodes[0].op.medians_["x"])
    assert medians[0] == medians[1]
    finite = np.sort(x[np.isfinite(x)])
    m = finite.size
    assert abs(medians[0] - np.median(finite)) <= 1e-3 * max(finite[(m - 1) // 2], finite[m // 2]) * (1 + 1e-9)


@pytest.mark.parametrize("dtype, extreme", [("Int64", 2**63 - 1), ("Int64", -(2**63)), ("UInt64", 2**64 - 1),
                                            ("int64[pyarrow]", 2**63 - 1)])
def test_fill_median_of_an_integer_column_at_its_extremes_fills_it_in_its_dtype(dtype, extreme):
    """The float64 median of [2**63 - 1] is 2**63, beyond int64 (pandas' "Python int too large to
    convert to C long"): a whole median fills an integer column in its dtype, within its range."""
    values = pd.Series([extreme, None, extreme], dtype=dtype)
    assert values.tolist()[0] == extreme
    out = Workflow(["x"] >> FillMedian(), progress=False).fit_transform(pd.DataFrame({"x": values}))["x"]
    assert out.dtype == values.dtype and out.tolist() == [extreme] * 3  # by hand: the only value is the median


def test_fill_median_all_null_warns_and_leaves_nulls(frame):
    with pytest.warns(RuntimeWarning, match="allnull"):
        wf = Workflow(["allnull", "const"] >> FillMedian(), progress=False).fit(frame)
    out = wf.transform(frame)
    assert out["allnull"].isna().all() and (out["const"] == 7.5).all()


def test_fill_median_before_fit_and_wrong_dtype_names_op_column_dtype(frame):
    with pytest.raises(NotFittedError, match="FillMedian"):
        FillMedian().transform(["a"], frame)
    with pytest.raises(NotFittedError):
        Workflow(["a"] >> FillMedian(), progress=False).transform(frame)
    df = pd.DataFrame({"s": pd.Series(["x", None, "y"], dtype=STRING_DTYPE)})
    with pytest.raises(TypeError, match=r"FillMedian.*'s'.*str"):
        Workflow(["s"] >> FillMedian(), progress=False).fit(df)


# --- Normalize ----------------------------------------------------------------------------------
def test_normalize_matches_numpy_on_many_partitions(frame, tmp_path):
    def build():
        return ["a", "b", "c", "d"] >> Normalize()

    one, many = fit_one_and_many(build, frame)
    for c in ["a", "b", "c", "d"]:
        v = frame[c].to_numpy(dtype="float64", na_value=np.nan)
        v = v[np.isfinite(v)]
        for wf in (one, many):
            op = wf.stat_nodes[0].op
            assert op.means_[c] == pytest.approx(v.mean(), rel=1e-6)
            assert op.stds_[c] == pytest.approx(v.std(), rel=1e-6)
    out = many.transform(frame)
    for c in ["a", "b", "c", "d"]:
        v = frame[c].to_numpy(dtype="float64", na_value=np.nan)
        fv = v[np.isfinite(v)]
        expected = (v - fv.mean()) / fv.std()
        assert out[c].dtype == np.float32
        np.testing.assert_allclose(out[c].to_numpy(), expected, rtol=1e-5, atol=1e-5)
        assert np.array_equal(np.isnan(out[c].to_numpy()), np.isnan(v))
    assert_frames_identical(save_load(many, tmp_path).transform(frame), out)
    schema = many.output_schema
    assert schema["c"].has_tag(Tags.CONTINUOUS) and not schema["c"].has_tag(Tags.CATEGORICAL)
    assert schema["a"].dtype == "float32"


def test_normalize_single_value_all_null_inf_and_empty(frame):
    df = pd.DataFrame({"const": [7.5, 7.5, np.nan, 7.5], "allnull": [np.nan] * 4,
                       "inf": [1.0, np.inf, 3.0, -np.inf]})
    with pytest.warns(RuntimeWarning, match="allnull"):
        wf = Workflow(["const", "allnull", "inf"] >> Normalize(out_dtype="float64"), progress=False).fit(df)
    out = wf.transform(df)
    assert out["const"].tolist()[:2] == [0.0, 0.0] and np.isnan(out["const"][2])
    assert out["allnull"].isna().all()
    op = wf.stat_nodes[0].op
    assert op.means_["inf"] == 2.0 and op.stds_["inf"] == 1.0  # inf excluded from the statistics
    assert out["inf"].tolist() == [-1.0, np.inf, 1.0, -np.inf]
    assert out.dtypes.eq(np.float64).all()
    # unseen finite values of a degenerate column still map to 0 (never NaN/inf)
    other = pd.DataFrame({"const": [1.0, 1e9], "allnull": [3.0, -np.inf], "inf": [2.0, 2.0]})
    out2 = wf.transform(other)
    assert out2["const"].tolist() == [0.0, 0.0] and out2["allnull"].tolist() == [0.0, 0.0]
    empty = wf.transform(df.iloc[:0])
    assert len(empty) == 0 and empty.dtypes.eq(np.float64).all()


@pytest.mark.parametrize("value", [0.1, 3.3, 0.7, 1e10 + 0.1, -2.675])
@pytest.mark.parametrize("part_size", [None, 3000])
def test_a_column_of_one_value_normalizes_to_zero_however_it_is_partitioned(value, part_size):
    """The mean of many copies of a value that binary floats cannot hold exactly rounds away
    from it: its std must still come out 0 (not ~1e-17), and its rows 0 (not +-1)."""
    df = pd.DataFrame({"x": np.full(1000, value), "y": np.r_[np.full(999, value), np.nan]})
    wf = Workflow(["x", "y"] >> Normalize(), progress=False).fit(Dataset(df, part_size=part_size))
    op = wf.stat_nodes[0].op
    assert op.means_ == {"x": value, "y": value} and op.stds_ == {"x": 0.0, "y": 0.0}
    out = wf.transform(df)
    assert out["x"].tolist() == [0.0] * 1000 and out["y"].tolist()[:999] == [0.0] * 999


def test_normalize_transform_before_fit_and_wrong_dtype(frame):
    wf = Workflow(["a"] >> Normalize(), progress=False)
    with pytest.raises(NotFittedError):
        wf.transform(frame)
    with pytest.raises(NotFittedError, match="Normalize"):
        Normalize().transform(["a"], frame)
    df = pd.DataFrame({"flag": [True, False], "s": ["u", "v"]})
    with pytest.raises(TypeError, match=r"Normalize.*'flag'.*bool"):
        Workflow(["flag"] >> Normalize(), progress=False).fit(df)
    with pytest.raises(ValueError, match="float"):
        Normalize(out_dtype="int32")


def test_normalize_empty_partitions_merge(frame):
    empty = frame.iloc[:0]
    op = Normalize()
    cols = ["a", "b"]
    full = op.fit_partial(cols, frame)
    merged = op.merge(op.merge(op.fit_partial(cols, empty), full), op.fit_partial(cols, empty))
    assert merged == full
    with pytest.warns(RuntimeWarning, match="no finite value"):
        wf = Workflow(["a"] >> Normalize(), progress=False).fit(empty)
    assert wf.transform(empty).shape == (0, 1)


def test_normalize_minmax_matches_numpy(frame, tmp_path):
    def build():
        return ["a", "b", "c", "const"] >> NormalizeMinMax()

    one, many = fit_one_and_many(build, frame)
    out = many.transform(frame)
    assert_frames_identical(out, one.transform(frame))
    for c in ["a", "b", "c"]:
        v = frame[c].to_numpy(dtype="float64", na_value=np.nan)
        lo, hi = np.nanmin(v), np.nanmax(v)
        np.testing.assert_allclose(out[c].to_numpy(), (v - lo) / (hi - lo), rtol=1e-6, atol=1e-7)
        assert out[c].dtype == np.float32
    assert (out["const"] == 0).all()
    assert_frames_identical(save_load(many, tmp_path).transform(frame), out)
    with pytest.raises(NotFittedError):
        NormalizeMinMax().transform(["a"], frame)


# --- LogOp, Clip, Bucketize --------------------------------------------------------------------
def test_logop_matches_log1p_keeps_float32(frame):
    out = Workflow(["a", "b", "c", "d"] >> LogOp, progress=False).fit_transform(frame.fillna({"a": 0}))
    with np.errstate(invalid="ignore", divide="ignore"):
        a = np.log1p(frame["a"].fillna(0).to_numpy())
        b = np.log1p(frame["b"].to_numpy().astype(np.float64)).astype(np.float32)
        c = np.log1p(frame["c"].to_numpy().astype(np.float64))
        d = np.log1p(frame["d"].to_numpy(dtype="float64", na_value=np.nan))
    np.testing.assert_array_equal(out["a"].to_numpy(), a)
    assert out["b"].dtype == np.float32
    np.testing.assert_array_equal(out["b"].to_numpy(), b)
    np.testing.assert_array_equal(out["c"].to_numpy(), c)  # NaN below -1, -inf at -1
    np.testing.assert_array_equal(out["d"].to_numpy(), d)
    edge = LogOp().transform(["x"], pd.DataFrame({"x": [-1.0, -2.0, np.inf, np.nan]}))["x"].to_numpy()
    assert edge[0] == -np.inf and np.isnan(edge[1]) and edge[2] == np.inf and np.isnan(edge[3])
    with pytest.raises(TypeError, match=r"LogOp.*'s'"):
        LogOp().transform(["s"], pd.DataFrame({"s": ["x"]}))


@pytest.mark.parametrize("share_of_counts", [1.0, 0.95, 0.5, 0.0])
def test_logop_float32_counts_equal_the_float64_formula(share_of_counts):
    """float32 integers (counts) and other values, in any mix, give float32(log(float64(x) + 1))."""
    rng = np.random.default_rng(5)
    n = 20_000
    counts = np.concatenate([np.arange(66_000), [0, -0.0, 65_535, 65_536, 2**24, 2**31, 3e9]])
    other = np.array([np.nan, np.inf, -np.inf, -1, -2, -3e9, 0.5, 1e-9, 1e38, 65_535.5])
    x = np.where(rng.random(n) < share_of_counts, rng.choice(counts, n), rng.choice(other, n)).astype(np.float32)
    x = np.concatenate([x, counts.astype(np.float32)]) if share_of_counts == 1.0 else x
    out = LogOp().transform(["x"], pd.DataFrame({"x": x}))["x"].to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        expected = np.log(x.astype(np.float64) + 1.0).astype(np.float32)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, expected)


def test_clip_matches_numpy(frame):
    out = Workflow(["a", "b", "c", "d"] >> Clip(min_value=0.5, max_value=6.5), progress=False).fit_transform(frame)
    np.testing.assert_array_equal(out["a"].to_numpy(), np.clip(frame["a"].to_numpy(), 0.5, 6.5))
    np.testing.assert_array_equal(out["b"].to_numpy(), np.clip(frame["b"].to_numpy(), np.float32(0.5), np.float32(6.5)))
    assert out["b"].dtype == np.float32 and out["c"].dtype == np.int64
    np.testing.assert_array_equal(out["c"].to_numpy(), np.clip(frame["c"].to_numpy(), 1, 6))
    d = frame["d"].to_numpy(dtype="float64", na_value=np.nan)
    np.testing.assert_array_equal(out["d"].to_numpy(dtype="float64", na_value=np.nan), np.clip(d, 1, 6))
    lower = Clip(min_value=0).transform(["x"], pd.DataFrame({"x": [-np.inf, -1.0, np.nan, np.inf]}))["x"]
    assert lower.tolist()[:2] == [0.0, 0.0] and np.isnan(lower[2]) and lower[3] == np.inf
    with pytest.raises(ValueError):
        Clip()
    with pytest.raises(TypeError, match=r"Clip.*'s'"):
        Clip(0, 1).transform(["s"], pd.DataFrame({"s": ["x"]}))


def cents(texts) -> pd.Series:
    """A decimal(10, 2) column (arrow-backed, as a parquet file's DECIMAL reads) of the given texts (None: null)."""
    import pyarrow as pa

    values = [None if t is None else decimal.Decimal(t) for t in texts]
    return pd.Series(pd.array(values, dtype=pd.ArrowDtype(pa.decimal128(10, 2))))


@pytest.mark.parametrize("low, high", [(-0.5, 100.0), (0.0, 1.0), (0.001, None), (None, 1.259), (-1e300, 1e300),
                                       (-np.inf, -0.995)])
def test_clip_of_a_decimal_column_keeps_it_and_rounds_the_bounds_to_its_scale(low, high):
    """Clip(0.0, 100.0) failed on a decimal column (pandas refuses a float bound, in an error naming
    neither operator nor column). The bounds are decimals of the column's scale: the lower one
    rounded up, the upper one down, so that the clipped values are the decimals in [low, high]."""
    amount = cents(["1.25", None, "-3.00", "0.00", "99999999.99"])
    out = Clip(low, high).transform(["amount"], pd.DataFrame({"amount": amount}))["amount"]
    assert out.dtype == amount.dtype

    def clipped(v):  # by hand: a value below low becomes the first cent above it, one above high the last below
        cent = decimal.Decimal("0.01")
        if low is not None and v < decimal.Decimal(str(low)):
            return decimal.Decimal(str(low)).quantize(cent, rounding=decimal.ROUND_CEILING)
        if high is not None and v > decimal.Decimal(str(high)):
            return decimal.Decimal(str(high)).quantize(cent, rounding=decimal.ROUND_FLOOR)
        return v

    assert out.tolist() == [v if v is pd.NA else clipped(v) for v in amount.tolist()]
    with pytest.raises(ValueError, match=r"Clip: no value of column 'amount' .* lies in \[0.001, 0.009\]"):
        Clip(0.001, 0.009).transform(["amount"], pd.DataFrame({"amount": amount}))


@pytest.mark.parametrize("value", [0.5, 0, -7, 0.1, decimal.Decimal("2.50"), np.float32(0.25)])
def test_fill_missing_fills_a_decimal_column_with_a_number_it_holds(value):
    """FillMissing(0.5) was refused on a decimal(10, 2) column, which holds 0.50 exactly: the value
    is taken as written (0.1 is 0.10, not the float's binary fraction), the dtype kept."""
    amount = cents(["1.25", None])
    out = FillMissing(value).transform(["amount"], pd.DataFrame({"amount": amount}))["amount"]
    assert out.dtype == amount.dtype
    assert out.tolist() == [decimal.Decimal("1.25"), decimal.Decimal(str(value))]


@pytest.mark.parametrize("value", [0.125, decimal.Decimal("0.001"), 1e12, np.nan])
def test_fill_missing_refuses_a_number_a_decimal_column_does_not_hold_exactly(value):
    """Rounding a fill value silently would fill a value nobody asked for."""
    with pytest.raises(TypeError, match=re.escape(f"FillMissing cannot fill column 'amount' "
                                                  f"(dtype decimal128(10, 2)[pyarrow]) with {value!r}")):
        FillMissing(value).transform(["amount"], pd.DataFrame({"amount": cents(["1.25", None])}))


def test_bucketize_matches_digitize_and_schema(frame, tmp_path):
    bounds = BUCKETIZE_BOUNDS
    wf = Workflow(["a", "c"] >> Bucketize(bounds), progress=False).fit(Dataset(frame, schema=SCHEMA))
    out = wf.transform(frame)
    for c, b in bounds.items():
        x = frame[c].to_numpy(dtype=np.float64)
        expected = np.where(np.isnan(x), len(b) + 1, np.digitize(x, b, right=False))
        np.testing.assert_array_equal(out[c].to_numpy(), expected)
        assert out[c].dtype == np.int64
        col = wf.output_schema[c]
        assert col.properties["cardinality"] == len(b) + 2
        assert col.has_tag(Tags.CATEGORICAL) and not col.has_tag(Tags.CONTINUOUS)
    assert_frames_identical(save_load(wf, tmp_path).transform(frame), out)
    same = Bucketize([1.0, 2.0]).transform(["x"], pd.DataFrame({"x": [1.0, 2.0, np.inf, 0.999]}))["x"].tolist()
    assert same == [1, 2, 2, 0]  # left-closed buckets
    with pytest.raises(ValueError, match="increasing"):
        Bucketize([2.0, 1.0])
    with pytest.raises(KeyError, match="'b'"):
        Bucketize({"a": [1.0]}).transform(["b"], frame)


def test_bucketize_nulls_get_their_own_id_not_the_top_bucket(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    bounds = [0.0, 10.0]
    floats = [5.0, None, 99.0, -np.inf, np.inf, float("nan"), 10.0]
    ints = [5, None, 99, -3, 10, None, 0]
    table = pa.table({"f": pa.array(floats, type=pa.float64(), from_pandas=False),
                      "f32": pa.array(floats, type=pa.float32()), "i": pa.array(ints, type=pa.int64())})
    pq.write_table(table, tmp_path / "data.parquet")  # pyarrow, no pandas metadata: "i" has nulls
    wf = Workflow(["f", "f32", "i"] >> Bucketize(bounds), progress=False)
    out = wf.fit(Dataset(str(tmp_path / "data.parquet"))).transform(Dataset(str(tmp_path / "data.parquet"))).compute()

    def by_hand(values):  # numpy.digitize for values, a dedicated id after the top bucket for nulls
        return [len(bounds) + 1 if v is None or v != v else int(np.digitize(v, bounds)) for v in values]

    assert out["f"].tolist() == out["f32"].tolist() == by_hand(floats) == [1, 3, 2, 0, 2, 3, 2]
    assert out["i"].tolist() == by_hand(ints) == [1, 3, 2, 0, 2, 3, 1]
    nullable = pd.DataFrame({"n": pd.array([1, None, 20], dtype="Int32"), "o": pd.Series([1.0, None, 20.0])})
    assert Bucketize(bounds).transform(["n", "o"], nullable).values.tolist() == [[1, 1], [3, 3], [2, 2]]
    for name in ["f", "f32", "i"]:
        props = wf.output_schema[name].properties
        assert props["cardinality"] == len(bounds) + 2
        assert props["domain"] == {"min": 0, "max": len(bounds) + 1}
        assert out[name].max() < props["cardinality"] and out[name].dtype == np.int64


# --- distributed --------------------------------------------------------------------------------
def test_two_worker_cluster_gives_identical_results(frame):
    distributed = pytest.importorskip("distributed")

    def build():
        conts = ["a", "b", "d"] >> FillMedian() >> Clip(min_value=0) >> LogOp >> Normalize()
        return conts + (["c"] >> NormalizeMinMax()) + (["c"] >> Bucketize([0, 10]) >> Rename_c()) + ["label"]

    local = Workflow(build(), progress=False).fit(many_parts(frame))
    expected = local.transform(frame)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cl, \
                distributed.Client(cl):
            remote = Workflow(build(), progress=False).fit(many_parts(frame))
            got = remote.transform(many_parts(frame)).compute()
    assert_frames_identical(got, expected.reset_index(drop=True))


def Rename_c():  # noqa: N802 - a small factory keeping the graph above readable
    from tabloader.ops.columns import Rename

    return Rename(postfix="_bucket")


def test_fill_median_nullable_int_with_fractional_median_is_float64_in_every_partition(tmp_path):
    df = pd.DataFrame({"k": pd.array([1, 2, 3, 4, None, 1, 2, 3, 4, None], dtype="Int64")})
    wf = Workflow(["k"] >> FillMedian(), progress=False).fit(df)
    assert wf.stat_nodes[0].op.medians_ == {"k": 2.5}
    whole, no_nulls = wf.transform(df), wf.transform(df.iloc[:4])
    assert whole["k"].dtype == no_nulls["k"].dtype == np.float64
    assert whole["k"].tolist() == [1.0, 2.0, 3.0, 4.0, 2.5] * 2
    assert_frames_identical(save_load(wf, tmp_path).transform(df), whole)
