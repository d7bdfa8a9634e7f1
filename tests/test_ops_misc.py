"""Column, row, lambda, lag and list operators: LambdaOp, Rename, AddTags, AddProperties,
ReduceDtypeSize, Filter, Dropna, DifferenceLag, ValueCount, ListSlice.

Functions used by saved workflows are defined at module level here, so they are saved by name
(``test_ops_misc:times_ten``) and a loaded workflow gets them from ``trusted=[this module]``.
"""

from __future__ import annotations

import datetime
import sys
import warnings

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from tabloader.dataset import Dataset
from tabloader.ops.base import NotFittedError
from tabloader.ops.columns import AddProperties, AddTags, ReduceDtypeSize, Rename
from tabloader.ops.difference_lag import DifferenceLag
from tabloader.ops.lambdaop import LambdaOp
from tabloader.ops.lists import ListSlice, ValueCount
from tabloader.ops.rows import Dropna, Filter
from tabloader.schema import ColumnSchema, Schema, Tags
from tabloader.registry import function_name
from tabloader.workflow import Workflow

from op_cases import LIST_SLICES, misc_frame


# --- module-level functions (saved by module:qualname) ----------------------------------------
def times_ten(col):
    return col * 10


def minus_dep(col, deps):
    return col - deps["b"]


def upper_name(name):
    return name.upper()


def keep_positive_a(df):
    return df["a"] > 0


def not_a_mask(df):
    return df["a"] * 2


# --- data -------------------------------------------------------------------------------------
make_frame = misc_frame


SCHEMA = Schema([ColumnSchema("user", "int64", {Tags.USER, Tags.CATEGORICAL}), ColumnSchema("ts", "int64"),
                 ColumnSchema("a", "float64", {Tags.CONTINUOUS}), ColumnSchema("b", "float64", {Tags.CONTINUOUS}),
                 ColumnSchema("small", "int64"), ColumnSchema("mid", "int64"), ColumnSchema("big", "int64"),
                 ColumnSchema("u8", "uint64"), ColumnSchema("nullable", "Int64"), ColumnSchema("s", "string"),
                 ColumnSchema("genres", "int64", {Tags.LIST}, is_list=True)])


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return make_frame()


def one_part(df: pd.DataFrame) -> Dataset:
    return Dataset(df, schema=SCHEMA)


def many_parts(df: pd.DataFrame) -> Dataset:
    ds = Dataset(df, part_size=4000, schema=SCHEMA)
    assert ds.npartitions >= 8
    return ds


def save_load(wf: Workflow, tmp_path) -> Workflow:
    path = str(tmp_path / "wf")
    wf.save(path)
    return Workflow.load(path, trusted=[sys.modules[__name__]])  # this module's functions


def assert_identical(left: pd.DataFrame, right: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(left, right, check_exact=True)


# --- LambdaOp ---------------------------------------------------------------------------------
def test_this_module_functions_are_saved_by_name():
    assert function_name(times_ten) == "test_ops_misc:times_ten"


def test_lambdaop_applies_function_dtype_tags_and_round_trips(frame, tmp_path):
    graph = (["small", "a"] >> LambdaOp(times_ten, dtype="float32", tags=["scaled"])) + \
            (["a"] >> LambdaOp(minus_dep, dependency="b", label="a_minus_b") >> Rename(postfix="_mb"))
    wf = Workflow(graph, progress=False).fit(one_part(frame))
    out = wf.transform(frame)
    np.testing.assert_array_equal(out["small"].to_numpy(), (frame["small"].to_numpy() * 10).astype(np.float32))
    np.testing.assert_array_equal(out["a"].to_numpy(), (frame["a"].to_numpy() * 10).astype(np.float32))
    np.testing.assert_array_equal(out["a_mb"].to_numpy(), frame["a"].to_numpy() - frame["b"].to_numpy())
    assert out["a"].dtype == np.float32
    assert wf.output_schema["a"].has_tag("scaled") and wf.output_schema["a"].has_tag(Tags.CONTINUOUS)
    assert "a_minus_b" in repr(wf)
    loaded = save_load(wf, tmp_path)
    assert_identical(loaded.transform(frame), out)
    assert loaded.output_schema == wf.output_schema


def test_lambdaop_anonymous_lambda_refused_at_save(frame, tmp_path):
    wf = Workflow(["a"] >> LambdaOp(lambda col: col + 1), progress=False).fit(frame)
    assert wf.transform(frame)["a"].equals(frame["a"] + 1)  # it works in memory
    with pytest.raises(ValueError, match="anonymous lambda"):
        wf.save(str(tmp_path / "wf"))


def test_lambdaop_bad_return_names_column(frame):
    def scalar(col):
        return 1.0

    with pytest.raises(ValueError, match=r"one value per row for column 'a'"):
        LambdaOp(scalar).transform(["a"], frame)


# --- Rename, AddTags, AddProperties -----------------------------------------------------------
def test_rename_function_postfix_name(frame, tmp_path):
    graph = (["a", "b"] >> Rename(upper_name)) + (["user"] >> Rename(name="uid")) + (["ts"] >> Rename(postfix="_x"))
    wf = Workflow(graph, progress=False).fit(one_part(frame))
    out = wf.transform(frame)
    assert list(out.columns) == ["A", "B", "uid", "ts_x"]
    np.testing.assert_array_equal(out["uid"].to_numpy(), frame["user"].to_numpy())
    assert wf.output_schema["uid"].tags == SCHEMA["user"].tags
    assert_identical(save_load(wf, tmp_path).transform(frame), out)
    with pytest.raises(ValueError, match="exactly one"):
        Rename(postfix="_a", name="b")
    with pytest.raises(ValueError, match="one column"):
        Workflow(["a", "b"] >> Rename(name="z"), progress=False).fit(frame)


def test_add_tags_and_properties_schema_only(frame, tmp_path):
    graph = ["a", "b"] >> AddTags([Tags.TARGET, "custom"]) >> AddProperties(domain={"min": 0, "max": 1}, note="n")
    wf = Workflow(graph, progress=False).fit(one_part(frame))
    out = wf.transform(frame)
    assert_identical(out, frame[["a", "b"]])
    col = wf.output_schema["a"]
    assert {"target", "custom", "continuous"} <= set(col.tags)
    assert col.properties == {"domain": {"min": 0, "max": 1}, "note": "n"}
    loaded = save_load(wf, tmp_path)
    assert loaded.output_schema == wf.output_schema
    assert_identical(loaded.transform(frame), out)


# --- ReduceDtypeSize --------------------------------------------------------------------------
def test_reduce_dtype_size(frame, tmp_path):
    cols = ["small", "mid", "big", "u8", "nullable", "a", "s"]

    def build():
        return cols >> ReduceDtypeSize()

    one = Workflow(build(), progress=False).fit(one_part(frame))
    many = Workflow(build(), progress=False).fit(many_parts(frame))
    out = one.transform(frame)
    assert_identical(many.transform(frame), out)
    expected = {"small": "int8", "mid": "int32", "big": "int64", "u8": "int16", "nullable": "Int8", "a": "float32",
                "s": str(frame["s"].dtype)}
    assert {c: str(out[c].dtype) for c in cols} == expected
    for c in cols:
        if c == "s":
            assert out[c].equals(frame[c])
        else:
            np.testing.assert_array_equal(out[c].to_numpy(dtype="float64", na_value=np.nan),
                                          frame[c].to_numpy(dtype="float64", na_value=np.nan).astype(
                                              np.float32 if c == "a" else np.float64))
    op = one.stat_nodes[0].op
    assert op.ranges_["small"] == [int(frame["small"].min()), int(frame["small"].max())]
    assert one.output_schema["nullable"].dtype == "int8"  # schema dtypes are arrow-derived names
    assert_identical(save_load(one, tmp_path).transform(frame), out)
    with pytest.raises(ValueError, match=r"'small'.*int8"):
        one.transform(frame.assign(small=frame["small"] + 1000))
    with pytest.raises(NotFittedError):
        ReduceDtypeSize().transform(["small"], frame)
    keep = Workflow(["a"] >> ReduceDtypeSize(float_dtype=None), progress=False).fit_transform(frame)
    assert keep["a"].dtype == np.float64


def test_reduce_dtype_size_empty_partitions_and_empty_data(frame):
    import dask.dataframe as dd

    ddf = dd.concat([dd.from_pandas(frame.iloc[:0], npartitions=1), dd.from_pandas(frame, npartitions=3),
                     dd.from_pandas(frame.iloc[:0], npartitions=1)])
    wf = Workflow(["small", "mid"] >> ReduceDtypeSize(), progress=False).fit(Dataset(ddf))
    assert wf.stat_nodes[0].op.dtypes_ == {"small": "int8", "mid": "int32"}
    empty = Workflow(["small"] >> ReduceDtypeSize(), progress=False).fit(frame.iloc[:0])
    assert str(empty.transform(frame.iloc[:0])["small"].dtype) == "int8"


def test_nullable_unsigned_ids_above_the_int64_range_stay_nullable():
    """UInt64 ids past 2**63 keep uint64, and their nulls (pandas has no "Uint64" dtype)."""
    df = pd.DataFrame({"id": pd.Series([2**63 + 1, None, 5], dtype="UInt64"),
                       "small": pd.Series([3, None, 250], dtype="UInt64")})
    out = Workflow(["id", "small"] >> ReduceDtypeSize(), progress=False).fit_transform(df)
    assert str(out["id"].dtype) == "UInt64" and out["id"].tolist() == [2**63 + 1, pd.NA, 5]
    assert str(out["small"].dtype) == "Int16" and out["small"].tolist() == [3, pd.NA, 250]


# --- Filter, Dropna ---------------------------------------------------------------------------
def from_january_2(df):
    return df["dt"] >= datetime.date(2024, 1, 2)


def test_filter_takes_the_mask_of_an_arrow_backed_column(tmp_path):
    """Comparing a date column as parquet gives it (arrow-backed) yields a bool[pyarrow] mask,
    null where the date is: a null keeps nothing."""
    import pyarrow.parquet as pq

    days = [datetime.date(2024, 1, 1), None, datetime.date(2024, 1, 2), datetime.date(2024, 1, 3)]
    pq.write_table(pa.table({"dt": pa.array(days, pa.date32()), "row": range(4)}), tmp_path / "a.parquet")
    out = Workflow((["dt", "row"] >> Filter(from_january_2)), progress=False).fit_transform(
        Dataset(str(tmp_path / "a.parquet"))).compute()
    assert out["row"].tolist() == [i for i, d in enumerate(days) if d is not None and d >= datetime.date(2024, 1, 2)]


def test_filter_drops_rows_in_every_branch_and_round_trips(frame, tmp_path):
    graph = (["a", "b"] >> Filter(keep_positive_a)) + ["user"]
    wf = Workflow(graph, progress=False).fit(one_part(frame))
    out = wf.transform(frame)
    keep = frame["a"] > 0
    assert_identical(out, frame.loc[keep, ["a", "b", "user"]])
    ds_out = wf.transform(many_parts(frame))
    assert ds_out.num_rows == int(keep.sum())
    assert_identical(ds_out.compute(), frame.loc[keep, ["a", "b", "user"]].reset_index(drop=True))
    assert_identical(save_load(wf, tmp_path).transform(frame), out)
    assert Filter(keep_positive_a).preserves_rows is False
    with pytest.raises(TypeError, match="boolean mask"):
        Filter(not_a_mask).transform(["a"], frame)
    with pytest.raises(ValueError, match="anonymous lambda"):
        Workflow(["a"] >> Filter(lambda df: df["a"] > 0), progress=False).fit(frame).save(str(tmp_path / "x"))


def test_dropna(frame, tmp_path):
    graph = (["a", "nullable"] >> Dropna()) + ["ts"]
    wf = Workflow(graph, progress=False).fit(one_part(frame))
    out = wf.transform(frame)
    keep = frame["a"].notna() & frame["nullable"].notna()
    assert_identical(out, frame.loc[keep, ["a", "nullable", "ts"]])
    assert_identical(save_load(wf, tmp_path).transform(frame), out)
    assert len(Dropna().transform(["a"], frame.iloc[:0])) == 0


def test_dropna_drops_the_nan_of_an_arrow_float_column(tmp_path):
    """An arrow-backed float column (``pd.read_parquet(..., dtype_backend="pyarrow")``) keeps NaN
    apart from nulls, and pandas' dropna drops the nulls only: a NaN is a null to Dropna."""
    import pyarrow.parquet as pq

    values = [1.0, float("nan"), None, 3.0]
    pq.write_table(pa.table({"x": pa.array(values, pa.float64(), from_pandas=False), "row": range(4)}),
                   tmp_path / "nan.parquet")
    frame = pd.read_parquet(tmp_path / "nan.parquet", dtype_backend="pyarrow")
    kept = [i for i, v in enumerate(values) if v is not None and not np.isnan(v)]  # by hand
    for data in (frame, Dataset(frame)):
        out = Workflow(["x", "row"] >> Dropna(), progress=False).fit_transform(data)
        out = out.compute() if isinstance(out, Dataset) else out
        assert out["row"].tolist() == kept and out["x"].tolist() == [values[i] for i in kept]
        assert out["x"].dtype == frame["x"].dtype


# --- DifferenceLag ----------------------------------------------------------------------------
def test_difference_lag_matches_groupby_diff(frame, tmp_path):
    graph = ["ts", "a"] >> DifferenceLag("user", shift=[1, 2, -1])
    wf = Workflow(graph, progress=False).fit(one_part(frame))
    out = wf.transform(frame)
    assert list(out.columns) == [f"{c}_difference_lag_{s}" for s in (1, 2, -1) for c in ("ts", "a")]
    for s in (1, 2, -1):
        for c in ("ts", "a"):
            expected = frame.groupby("user")[c].diff(s).to_numpy(dtype="float64")
            np.testing.assert_array_equal(out[f"{c}_difference_lag_{s}"].to_numpy(), expected)
    assert wf.output_schema["ts_difference_lag_1"].has_tag(Tags.CONTINUOUS)
    assert_identical(save_load(wf, tmp_path).transform(frame), out)
    # keys given as a list, and read from the data when not selected; empty partitions work
    two_keys = DifferenceLag(["user", "half"]).transform(["ts"], frame.assign(half=frame["user"] // 2))
    np.testing.assert_array_equal(two_keys["ts_difference_lag_1"].to_numpy(), out["ts_difference_lag_1"].to_numpy())
    assert len(DifferenceLag("user").transform(["ts"], frame.iloc[:0])) == 0
    with pytest.raises(TypeError, match=r"DifferenceLag.*'s'"):
        DifferenceLag("user").transform(["s"], frame)
    with pytest.raises(ValueError):
        DifferenceLag("user", shift=0)



@pytest.mark.parametrize("dtype", ["int64", "Int64"])
def test_difference_lag_of_large_integers_is_exact(dtype):
    """Nanosecond timestamps as int64 (~1.7e18) lose their last 8 bits as float64: integers are
    subtracted as integers, nulls give NaN."""
    ts = np.array([1_717_243_200_000_000_001, 1_717_243_200_000_000_002, 1_717_243_200_000_000_300,
                   1_717_243_200_000_000_301])
    frame = pd.DataFrame({"user": [1, 1, 1, 1], "ts": pd.array(ts, dtype=dtype)})
    if dtype == "Int64":
        frame.loc[3, "ts"] = pd.NA
    out = DifferenceLag("user", shift=[1, -1]).transform(["ts"], frame)
    later = [np.nan, 1.0, 298.0, 1.0 if dtype == "int64" else np.nan]
    np.testing.assert_array_equal(out["ts_difference_lag_1"].to_numpy(), later)
    np.testing.assert_array_equal(out["ts_difference_lag_-1"].to_numpy(), [-v for v in later[1:]] + [np.nan])

# --- ValueCount, ListSlice --------------------------------------------------------------------
def test_value_count_min_max_lengths(frame, tmp_path):
    lengths = [len(x) for x in frame["genres"].tolist() if x is not None and x is not pd.NA]
    expected = {"min": min(lengths), "max": max(lengths)}
    for ds in (one_part(frame), many_parts(frame)):
        wf = Workflow(["genres"] >> ValueCount(), progress=False).fit(ds)
        assert wf.stat_nodes[0].op.stats_ == {"genres": expected}
        assert wf.output_schema["genres"].properties["value_count"] == expected
    out = wf.transform(frame)
    assert out["genres"].equals(frame["genres"])
    loaded = save_load(wf, tmp_path)
    assert loaded.output_schema["genres"].properties["value_count"] == expected
    assert loaded.stat_nodes[0].op.stats_ == {"genres": expected}
    with pytest.raises(NotFittedError):
        ValueCount().transform(["genres"], frame)
    with pytest.raises(TypeError, match=r"ValueCount.*'a'.*float64"):
        Workflow(["a"] >> ValueCount(), progress=False).fit(frame)
    objects = pd.DataFrame({"l": [[1, 2, 3], [], [4]]})  # Python lists are accepted too
    assert Workflow(["l"] >> ValueCount(), progress=False).fit(objects).stat_nodes[0].op.stats_ == \
        {"l": {"min": 0, "max": 3}}


def _python_slice(rows, start, end, pad, pad_value):
    out = []
    for row in rows:
        if row is None or row is pd.NA:
            out.append(None if not pad else [pad_value] * width_of(start, end))
            continue
        sliced = list(row)[start:end]
        if pad:
            sliced = sliced + [pad_value] * (width_of(start, end) - len(sliced))
        out.append(sliced)
    return out


def width_of(start, end):
    return -start if end is None else end - start


@pytest.mark.parametrize("start,end,pad", LIST_SLICES)
def test_list_slice_matches_python_slicing(frame, start, end, pad):
    out = ListSlice(start, end, pad=pad, pad_value=-7).transform(["genres"], frame)
    got = [None if x is None or x is pd.NA else list(x) for x in out["genres"].tolist()]
    assert got == _python_slice(frame["genres"].tolist(), start, end, pad, -7)
    assert isinstance(out["genres"].dtype, pd.ArrowDtype)
    assert out["genres"].dtype.pyarrow_dtype == pa.list_(pa.int64())



@pytest.mark.parametrize("start,end,pad", LIST_SLICES)
def test_list_slice_value_count_is_that_of_the_sliced_lists(frame, start, end, pad):
    """ValueCount's lengths, sliced: the loader pads lists to the schema's max (a max left at
    the unsliced 6 padded every batch to 6). Bounds that slicing leaves unknown are dropped."""
    wf = Workflow(["genres"] >> ValueCount() >> ListSlice(start, end, pad=pad), progress=False).fit(one_part(frame))
    lengths = [len(x) for x in _python_slice(frame["genres"].tolist(), start, end, pad, 0) if x is not None]
    counts = wf.output_schema["genres"].properties.get("value_count")
    if start < 0 <= (end if end is not None else -1):
        assert counts is None
    else:
        assert counts["max"] == max(lengths) and counts["min"] <= min(lengths)

def test_list_slice_workflow_large_list_sliced_arrays_and_errors(frame, tmp_path):
    wf = Workflow(["genres"] >> ListSlice(0, 2, pad=True), progress=False).fit(many_parts(frame))
    out = wf.transform(many_parts(frame)).compute()
    assert all(len(x) == 2 for x in out["genres"].tolist())
    assert wf.output_schema["genres"].properties["value_count"] == {"min": 2, "max": 2}
    assert wf.output_schema["genres"].is_list
    assert_identical(save_load(wf, tmp_path).transform(frame), wf.transform(frame))
    large = pa.array([["1", "2", "3"], None, ["4", "5"]], type=pa.large_list(pa.string()))
    df = pd.DataFrame({"l": pd.arrays.ArrowExtensionArray(large.slice(1))}, index=[10, 20])
    out = ListSlice(-1).transform(["l"], df)
    assert out["l"].dtype.pyarrow_dtype == pa.large_list(pa.string())
    assert out["l"].tolist()[0] is pd.NA or out["l"].tolist()[0] is None
    assert list(out["l"].tolist()[1]) == ["5"] and list(out.index) == [10, 20]
    with pytest.raises(ValueError, match="fixed length"):
        ListSlice(1, pad=True)
    with pytest.raises(TypeError, match=r"ListSlice.*'a'"):
        ListSlice(0, 1).transform(["a"], frame)
    assert len(ListSlice(0, 2, pad=True).transform(["genres"], frame.iloc[:0])) == 0


# --- distributed ------------------------------------------------------------------------------
def test_two_worker_cluster_gives_identical_results(frame):
    distributed = pytest.importorskip("distributed")

    def build():
        return ((["small", "mid", "nullable"] >> ReduceDtypeSize())
                + (["genres"] >> ValueCount() >> ListSlice(-3, pad=True))
                + (["a", "b"] >> LambdaOp(times_ten) >> Filter(keep_positive_a))
                + (["ts"] >> DifferenceLag("user")))

    local = Workflow(build(), progress=False).fit(many_parts(frame))
    expected = local.transform(many_parts(frame)).compute()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cl, \
                distributed.Client(cl):
            remote = Workflow(build(), progress=False).fit(many_parts(frame))
            got = remote.transform(many_parts(frame)).compute()
    assert remote.output_schema == local.output_schema
    assert_identical(got, expected)


def test_list_ops_take_object_columns_whose_null_lists_are_nan():
    # pd.read_parquet and pandas reindexing give NaN (not None) for a missing list
    rows = [[1, 2, 3], np.nan, [4], None, []]
    df = pd.DataFrame({"l": pd.Series(rows, dtype=object)})
    sliced = ListSlice(0, 2).transform(["l"], df)["l"].tolist()
    assert [None if x is pd.NA else list(x) for x in sliced] == [[1, 2], None, [4], None, []]
    stats = Workflow(["l"] >> ValueCount(), progress=False).fit(df).stat_nodes[0].op.stats_
    assert stats == {"l": {"min": 0, "max": 3}}
    with pytest.raises(TypeError, match=r"ListSlice: column 'l' holds lists in some rows and other values"):
        ListSlice(0, 1).transform(["l"], pd.DataFrame({"l": pd.Series([[1], 5], dtype=object)}))


def test_object_list_columns_stay_lists_in_partitions_of_only_null_lists():
    """pd.read_parquet's object columns of numpy arrays, cut into partitions whose first ones
    hold only null lists: every operator sees a list column in every partition (as one
    partition of the same column in arrow form gives), and so does transform_frame of a few
    rows of null lists."""
    from tabloader.ops import FillMissing, HashBucket

    pattern = [np.array(["a", "b"], dtype=object), np.array(["b"], dtype=object), None, np.array([], dtype=object)]
    rows = [None] * 400 + pattern * 300
    objects = pd.DataFrame({"l": pd.Series(rows, dtype=object), "n": np.arange(len(rows))})
    arrow = objects.assign(l=pd.Series([None if r is None else list(r) for r in rows],
                                       dtype=pd.ArrowDtype(pa.list_(pa.string()))))
    for op in (FillMissing("z"), HashBucket(10)):
        parts = Dataset(objects, part_size="4KB")
        assert parts.npartitions > 3 and parts.read_partition(0)["l"].isna().all()
        wf = Workflow((["l"] >> op) + ["n"], progress=False).fit(parts)
        expected = Workflow((["l"] >> op) + ["n"], progress=False).fit(arrow).transform(arrow)
        got = wf.transform(parts).compute()
        assert got["l"].dtype == expected["l"].dtype
        assert got["l"].tolist() == expected["l"].tolist()
        assert wf.transform_frame(objects.iloc[:3])["l"].tolist() == expected["l"].tolist()[:3]
    counts = Workflow(["l"] >> ValueCount(), progress=False).fit(Dataset(objects, part_size="4KB"))
    assert counts.stat_nodes[0].op.stats_ == {"l": {"min": 0, "max": 2}}
