"""Serving: the fast path for small requests equals Workflow.transform on the same rows.

The expected output is ``Workflow.transform`` of the DataFrame the request stands for, built
here by hand with pandas (integer columns holding a null become nullable ``Int64``..., float
columns hold NaN, strings pandas' ``str``, lists arrow lists), converted to numpy by hand the
way a model takes it. Every built-in operator has a case: it either has a fast path (and then
must not fall back) or runs the DataFrame path for its node (and must say so in
``Server.fallbacks``).
"""

from __future__ import annotations

import datetime

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tabloader as tl
from tabloader import ops, synthetic
from tabloader.backend import STRING_DTYPE

RNG = np.random.default_rng(0)
N = 200


# --- module-level functions (operators that take one are saved by name) -------------------------
def positive(frame: pd.DataFrame) -> pd.Series:
    return frame["f"] > 0


def twice(column: pd.Series) -> pd.Series:
    return column * 2


# --- a training frame with every kind of column ---------------------------------------------------
def training_frame() -> pd.DataFrame:
    rng = np.random.default_rng(1)
    i = pd.array(rng.integers(-5, 20, N), dtype="Int64")
    i[rng.random(N) < 0.1] = pd.NA
    f = rng.normal(2.0, 3.0, N).astype(np.float32)
    f[rng.random(N) < 0.1] = np.nan
    s = pd.array([f"s{k}" for k in rng.integers(0, 12, N)], dtype=STRING_DTYPE)
    s[rng.random(N) < 0.1] = pd.NA
    lists = [None if rng.random() < 0.05 else rng.integers(0, 9, rng.integers(0, 4)).tolist() for _ in range(N)]
    frame = pd.DataFrame({
        "i": i, "f": f, "s": s, "g": rng.integers(0, 6, N), "t": rng.random(N).astype(np.float32),
        "l": pd.Series(lists, dtype=pd.ArrowDtype(pa.list_(pa.int64()))),
    })
    frame["d"] = pd.Series(request_times(rng, N, rng.random(N) < 0.1), dtype="datetime64[us]")
    return frame


def request_times(rng: np.random.Generator, n: int, null_rows: np.ndarray) -> list:
    """Event times (Python datetimes, as a JSON decoder's caller would give them) or None."""
    seconds = rng.integers(1_600_000_000, 1_700_000_000, n)
    return [None if null else datetime.datetime(1970, 1, 1) + datetime.timedelta(seconds=int(s), microseconds=7)
            for s, null in zip(seconds, null_rows)]


TRAIN = training_frame()
SCHEMA = {"i": ("int", "Int64"), "f": ("float", "float32"), "s": ("str", "str"), "g": ("int", "int64"),
          "t": ("float", "float32"), "l": ("list", "int64"), "d": ("time", "datetime64[us]")}

# operator case -> (graph, whether every node of it has a fast path)
CASES = {
    "Categorify": (lambda: ["i", "f", "s", "g", "l"] >> ops.Categorify(freq_threshold=2, num_buckets=3), True),
    "Categorify-joint": (lambda: [("i", "g")] >> ops.Categorify(max_size=5), True),
    "Categorify-combo": (lambda: [("s", "g")] >> ops.Categorify(encode_type="combo", num_buckets=2), True),
    "HashBucket": (lambda: ["i", "f", "s", "l"] >> ops.HashBucket(17), True),
    "HashedCross": (lambda: [("i", "s"), ("g", "f")] >> ops.HashedCross(31), True),
    "FillMissing": (lambda: ["i", "f", "g"] >> ops.FillMissing(3, add_binary_cols=True), True),
    "FillMissing-str": (lambda: (["s"] >> ops.FillMissing("zz") >> ops.Categorify()), True),
    "FillMissing-float-value": (lambda: ["f"] >> ops.FillMissing(0.1), True),
    "FillMissing-list": (lambda: ["l"] >> ops.FillMissing(0), False),  # lists: no fast path
    "FillMissing-lossy": (lambda: ["i"] >> ops.FillMissing(0.5) >> ops.LogOp, False),  # pandas refuses: an error
    "FillMedian": (lambda: ["i", "f", "g"] >> ops.FillMedian(add_binary_cols=True), True),
    "Normalize": (lambda: ["i", "f", "g"] >> ops.Normalize(), True),
    "NormalizeMinMax": (lambda: ["i", "f", "g"] >> ops.NormalizeMinMax(out_dtype="float64"), True),
    "LogOp": (lambda: ["i", "f", "g", "t"] >> ops.LogOp, True),
    "Clip": (lambda: ["f", "g", "t"] >> ops.Clip(min_value=0.5, max_value=4.5), True),
    "Clip-nullable": (lambda: ["i"] >> ops.Clip(min_value=0) >> ops.FillMissing(-1), True),
    "Bucketize": (lambda: ["i", "f", "g"] >> ops.Bucketize({"i": [0, 5], "f": [-1.0, 0.0, 2.5], "g": [3]}), True),
    "Rename": (lambda: ["g", "f"] >> ops.Rename(postfix="_r"), True),
    "AddTags": (lambda: ["g", "f"] >> ops.AddTags(["user"]), True),
    "AddProperties": (lambda: ["g", "f"] >> ops.AddProperties(note="x"), True),
    "ReduceDtypeSize": (lambda: ["g", "f"] >> ops.ReduceDtypeSize(), False),
    "AsType": (lambda: (["i", "f"] >> ops.AsType("float64")) + (["g"] >> ops.AsType("int32"))
               + (["i"] >> ops.AsType("string") >> ops.Rename(postfix="_s") >> ops.Categorify()), False),
    "DatetimeFeatures": (lambda: ["d"] >> ops.DatetimeFeatures(["day_of_week", "hour", "weekend", "epoch_seconds"]),
                         False),
    "DatetimeFeatures-Categorify": (lambda: ["d"] >> ops.DatetimeFeatures(["month"]) >> ops.Categorify(), False),
    "LambdaOp": (lambda: ["f"] >> ops.LambdaOp(twice) >> ops.Normalize(), False),
    "Filter": (lambda: (["f"] >> ops.Filter(positive)) + ["g"], False),
    "Dropna": (lambda: ["f", "g"] >> ops.Dropna(), False),
    "DifferenceLag": (lambda: ["f"] >> ops.DifferenceLag("g", shift=1), False),
    "JoinGroupby": (lambda: ["g"] >> ops.JoinGroupby(cont_cols=["f"], stats=["count", "mean"]), False),
    "TargetEncoding": (lambda: ["g"] >> ops.TargetEncoding("t", kfold=1), False),
    "ValueCount": (lambda: (["l"] >> ops.ValueCount()) + ["g"], False),
    "ListSlice": (lambda: ["l"] >> ops.ListSlice(0, 2) >> ops.Categorify(), False),
    "Groupby": (lambda: ["g", "f", "t"] >> ops.Groupby("g", sort_cols="t", aggs={"f": ["mean", "first"], "t": "count"}),
                False),
    "JoinExternal": (lambda: ["g", "f"] >> ops.JoinExternal(pd.DataFrame({"g": [0, 1, 2, 3], "w": [0.5, 1.5, 2.5, 3.5]}),
                                                          on="g"), False),
    "DropLowCardinality": (lambda: ((["s", "g"] >> ops.Categorify(freq_threshold={"g": 1000})) + ["f"])
                           >> ops.DropLowCardinality(), False),
    "DataStats": (lambda: ["f", "i", "g"] >> ops.DataStats(), False),
    "LogOp-list": (lambda: ["l"] >> ops.LogOp >> ops.Normalize() >> ops.NormalizeMinMax(), False),  # lists: no fast path
}


def test_every_builtin_operator_has_a_case():
    exported = {getattr(ops, name) for name in ops.__all__ if isinstance(getattr(ops, name), type)} \
        - {ops.Operator, ops.StatOperator, ops.NotFittedError}  # functions (get_embedding_sizes) are no operators
    covered = {getattr(ops, name.split("-")[0]) for name in CASES}
    assert exported == covered, f"add a serving case for {sorted(c.__name__ for c in exported - covered)}"
    from tabloader.serving import FAST_OPERATORS

    fast = {getattr(ops, name.split("-")[0]) for name, (_, is_fast) in CASES.items() if is_fast}
    assert set(FAST_OPERATORS) == fast


# --- requests and the expected output, by hand ------------------------------------------------------
def request_values(kind: str, draw_index: np.ndarray, null_rows: np.ndarray, unseen_rows: np.ndarray) -> list:
    """Values of a column for the rows ``draw_index`` of TRAIN, with nulls and unseen values."""
    if kind == "int":
        values = [int(v) for v in RNG.integers(-5, 20, len(draw_index))]
        return [None if n else (10_000 + v if u else v) for v, n, u in zip(values, null_rows, unseen_rows)]
    if kind == "float":
        values = RNG.normal(2.0, 3.0, len(draw_index)).tolist()
        return [(None if k % 2 else float("nan")) if n else v for k, (v, n) in enumerate(zip(values, null_rows))]
    if kind == "time":
        return request_times(RNG, len(draw_index), null_rows)
    if kind == "str":
        return [None if n else ("never-seen" if u else f"s{k % 12}") for k, n, u in zip(draw_index, null_rows, unseen_rows)]
    lists = []
    for n, u in zip(null_rows, unseen_rows):
        row = RNG.integers(0, 9, RNG.integers(0, 4)).tolist()
        if RNG.random() < 0.5 * null_rows.mean():
            row.append(None)  # a null element
        lists.append(None if n else (row + [99] if u else row))
    return lists


def make_request(rows: int, null_rate: float, unseen_rate: float, columns: list[str]) -> dict:
    index = RNG.integers(0, N, rows)
    return {c: request_values(SCHEMA[c][0], index, RNG.random(rows) < null_rate, RNG.random(rows) < unseen_rate)
            for c in columns}


def frame_by_hand(request: dict, schema: dict) -> pd.DataFrame:
    """The DataFrame a request stands for: each column as its training dtype, nullable for
    integers holding a null."""
    out = {}
    for name, values in request.items():
        kind, dtype = schema[name]
        if kind == "list":
            out[name] = pd.Series(values, dtype=pd.ArrowDtype(pa.list_(pa.from_numpy_dtype(np.dtype(dtype)))))
        elif kind == "int":
            has_null = any(v is None or v != v for v in values)
            out[name] = pd.array([None if v is None or v != v else int(v) for v in values],
                                 dtype=dtype.capitalize() if has_null else dtype.lower())
        elif kind == "float":
            out[name] = np.array([np.nan if v is None else v for v in values], dtype=dtype)
        elif kind == "time":
            out[name] = pd.Series(values, dtype=dtype)
        else:
            out[name] = pd.array(values, dtype=STRING_DTYPE)
    return pd.DataFrame(out)


def model_arrays_by_hand(frame: pd.DataFrame) -> dict:
    """Each output column as a model takes it; None where it holds a null a model cannot take."""
    out = {}
    for name in frame.columns:
        series = frame[name].reset_index(drop=True)
        if isinstance(series.dtype, pd.ArrowDtype):
            arr = pa.array(series.array).combine_chunks() if isinstance(pa.array(series.array), pa.ChunkedArray) \
                else pa.array(series.array)
            if arr.null_count or arr.flatten().null_count:
                out[name] = None
            else:
                offsets = np.asarray(arr.offsets, dtype=np.int64)
                out[name] = (arr.flatten().to_numpy(), offsets - offsets[0])
        elif isinstance(series.dtype, np.dtype):
            out[name] = series.to_numpy()
        else:  # pandas nullable
            out[name] = None if series.isna().any() else series.to_numpy(dtype=series.dtype.numpy_dtype)
    return out


def assert_same(got: dict, expected: dict) -> None:
    assert list(got) == list(expected)
    for name, want in expected.items():
        have = got[name]
        if isinstance(want, tuple):
            for h, w in zip(have, want):
                assert h.dtype == w.dtype, name
                np.testing.assert_array_equal(h, w, err_msg=name)
        else:
            assert have.dtype == want.dtype, (name, have.dtype, want.dtype)
            np.testing.assert_array_equal(have, want, err_msg=name)


def check_request(server, wf, request: dict, schema: dict) -> None:
    try:
        expected = model_arrays_by_hand(wf.transform(frame_by_hand(request, schema)))
    except (TypeError, ValueError) as exc:  # the DataFrame path refuses: so must the fast path
        with pytest.raises(type(exc)):
            server.transform(request)
        return
    if any(v is None for v in expected.values()):
        with pytest.raises(ValueError, match="output column"):
            server.transform(request)
        return
    assert_same(server.transform(request), expected)


# --- every operator: a fast path equal to transform, or the DataFrame path ------------------------
@pytest.mark.parametrize("case", sorted(CASES))
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=st.integers(1, 12), null_rate=st.sampled_from([0.0, 0.3]), unseen_rate=st.sampled_from([0.0, 0.3]))
def test_each_operator_serves_what_transform_gives(case, rows, null_rate, unseen_rate):
    from tabloader.serving import Server

    graph, is_fast = CASES[case]
    wf = tl.Workflow(graph(), progress=False).fit(TRAIN)
    server = Server(wf)
    check_request(server, wf, make_request(rows, null_rate, unseen_rate, wf.input_columns), SCHEMA)
    if is_fast:
        assert not server.fallbacks, server.fallbacks


@pytest.mark.parametrize("graph", [
    lambda: (["i", "f"] >> ops.FillMissing(0))["f"] + (["t"] >> ops.LogOp()),
    lambda: ((["i", "f"] >> ops.FillMissing(0)) + (["s"] >> ops.Categorify()))[["s", "i"]],
    lambda: ((["i", "f", "g"] >> ops.FillMissing(0)) - ["g"]) >> ops.Normalize(),
], ids=["pick", "pick-several", "drop"])
def test_picked_and_dropped_columns_are_served_as_transform_gives_them(graph):
    """``node["a"]`` and ``node - ["b"]`` are graph syntax like any other: the server takes the
    picked (or kept) columns of the node's output, on the fast path."""
    from tabloader.serving import Server

    wf = tl.Workflow(graph(), progress=False).fit(TRAIN)
    server = Server(wf)
    for rows, null_rate in ((1, 0.0), (7, 0.3)):
        check_request(server, wf, make_request(rows, null_rate, 0.3, wf.input_columns), SCHEMA)
    assert not server.fallbacks, server.fallbacks


def test_output_dtypes_are_those_of_the_output_schema_whatever_nulls_a_request_holds(tmp_path):
    """An integer column that may hold nulls (nullable Int64 in the files) filled with a median
    of 3.5 is float64 in the workflow's output; a request without a null reads it as int64, which
    FillMedian leaves alone: the server still hands the model float64 (as the Dataset gives)."""
    from tabloader.serving import Server

    frame = pd.DataFrame({"n": pd.Series([1, 2, None, 3, 4, 10, 11], dtype="Int64"), "m": np.arange(7)})
    frame.to_parquet(tmp_path / "a.parquet")
    ds = tl.Dataset(str(tmp_path))
    wf = tl.Workflow(["n", "m"] >> ops.FillMedian(), progress=False).fit(ds)
    assert wf.transform(ds).compute()["n"].dtype == np.float64
    server = Server(wf)
    for request in ({"n": [5], "m": [1]}, {"n": [None], "m": [2]}, {"n": [5, None], "m": [1, 2]}):
        out = server.transform(request)
        assert out["n"].dtype == np.float64 and out["m"].dtype == np.int64, request
        expected = [3.5 if v is None else float(v) for v in request["n"]]
        assert out["n"].tolist() == expected and out["m"].tolist() == request["m"]


def test_operators_without_a_fast_path_say_so():
    from tabloader.serving import Server

    for case, (graph, is_fast) in CASES.items():
        if is_fast:
            continue
        wf = tl.Workflow(graph(), progress=False).fit(TRAIN)
        server = Server(wf)
        request = make_request(8, 0.5, 0.0, wf.input_columns)  # nulls: FillMissing(0.5) then needs pandas
        for values in request.values():  # at least one in each column, whatever the random draw gave
            values[0] = None
        try:
            server.transform(request)
        except (TypeError, ValueError):
            pass
        assert server.fallbacks, case


# --- the Criteo workflow -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def criteo(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("criteo") / "raw")
    synthetic.write_criteo(path, rows=3000, num_files=1, seed=0)
    cats = [f"C{i}" for i in range(1, 27)] >> ops.Categorify(freq_threshold=2)
    conts = tl.Tags.CONTINUOUS >> ops.FillMissing(0) >> ops.Clip(min_value=0) >> ops.LogOp >> ops.Normalize()
    cross = [("C1", "C2")] >> ops.HashedCross(1000)
    wf = tl.Workflow(cats + conts + cross + ["label"], progress=False).fit(tl.Dataset(path))
    data = tl.Dataset(path).compute()
    schema = {c: ("float" if c.startswith("I") else "int", str(wf.input_schema_[c].dtype)) for c in wf.input_columns}
    return wf, data, schema


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=st.integers(1, 30), null_rate=st.sampled_from([0.0, 0.2, 1.0]), unseen_rate=st.sampled_from([0.0, 0.5]),
       seed=st.integers(0, 2**16))
def test_criteo_requests_equal_transform(criteo, rows, null_rate, unseen_rate, seed):
    from tabloader.serving import Server

    wf, data, schema = criteo
    rng = np.random.default_rng(seed)
    picked = data.iloc[rng.integers(0, len(data), rows)]
    request = {}
    for c in wf.input_columns:
        values = [None if pd.isna(v) else (int(v) if schema[c][0] == "int" else float(v)) for v in picked[c]]
        nulls, unseen = rng.random(rows) < null_rate, rng.random(rows) < unseen_rate
        if c != "label":
            values = [None if n else (-(v + 7) if u and c.startswith("C") and v is not None else v)
                      for v, n, u in zip(values, nulls, unseen)]
        request[c] = values
    server = Server(wf)
    check_request(server, wf, request, schema)
    assert not server.fallbacks


def test_criteo_from_numpy_arrays_and_as_torch(criteo):
    torch = pytest.importorskip("torch")
    from tabloader.serving import Server

    wf, data, _ = criteo
    rows = data.iloc[:5]
    request = {c: rows[c].to_numpy(dtype="float64") if c.startswith("I") else rows[c].to_numpy(dtype="int64",
                                                                                                na_value=0)
               for c in wf.input_columns}
    server = Server(wf)
    expected = model_arrays_by_hand(wf.transform(server.frame(request)))
    tensors = server.transform(request, as_torch=True)
    for name, want in expected.items():
        assert isinstance(tensors[name], torch.Tensor)
        np.testing.assert_array_equal(tensors[name].numpy(), want)
    assert tensors["I1"].dtype == torch.float32 and tensors["C1"].dtype == torch.int64


def test_a_saved_and_loaded_workflow_serves_the_same(criteo, tmp_path):
    from tabloader.serving import Server

    wf, data, _ = criteo
    wf.save(str(tmp_path / "wf"))
    request = {c: [None if pd.isna(v) else v.item() if hasattr(v, "item") else v for v in data[c].iloc[:3]]
               for c in wf.input_columns}
    assert_same(Server(tl.Workflow.load(str(tmp_path / "wf"))).transform(request), Server(wf).transform(request))


# --- list columns, requests as numpy object arrays --------------------------------------------------
def test_list_column_request_as_lists_and_arrays():
    from tabloader.serving import Server

    wf = tl.Workflow((["l"] >> ops.Categorify()) + ["g"], progress=False).fit(TRAIN)
    request = {"l": [[1, 2], np.array([8, 99]), [], [None, 3]], "g": np.array([1, 2, 3, 4])}
    out = Server(wf).transform(request)
    vocab = wf.output_node.parents[0].op.vocabularies_["l"]["value"].tolist()  # values in id order
    ids = {v: 3 + k for k, v in enumerate(vocab)}  # 0 pad, 1 null, 2 OOV
    values, offsets = out["l"]
    assert values.tolist() == [ids[1], ids[2], ids[8], 2, 1, ids[3]] and offsets.tolist() == [0, 2, 4, 4, 6]
    assert out["g"].tolist() == [1, 2, 3, 4]


# --- other dtypes: uint64, booleans, int32, float64; numpy arrays; columns of nulls only ----------
OTHER = pd.DataFrame({"u": np.array([1, 2**63 + 5, 7, 7], dtype=np.uint64),
                      "b": pd.array([True, False, None, True], dtype="boolean"),
                      "i32": np.array([1, 2, 3, 4], dtype=np.int32), "f64": [0.5, np.nan, 2.0, 3.0]})
OTHER_SCHEMA = {"u": ("int", "uint64"), "b": ("bool", "boolean"), "i32": ("int", "int32"), "f64": ("float", "float64")}


@pytest.mark.parametrize("request_", [
    {"u": [7, 2**63 + 5], "b": [True, None], "i32": [3, 9], "f64": [2.0, None]},
    {"u": [None, None], "b": [None, None], "i32": [None, None], "f64": [None, None]},
    {"u": [1, 5], "b": [False, True], "i32": [1.0, float("nan")], "f64": [1, 2]},  # JSON numbers
    {"u": np.array([7, 1], dtype=np.uint64), "b": np.array([True, False]), "i32": np.array([3, 2**20]),
     "f64": np.array([1.5, np.nan], dtype=np.float32)},
])
def test_other_dtypes_and_columns_of_nulls(request_):
    from tabloader.serving import Server

    graph = ((["u", "b", "i32", "f64"] >> ops.Categorify()) + (["i32", "f64"] >> ops.Rename(postfix="_n") >> ops.Normalize())
             + (["u"] >> ops.HashBucket(10) >> ops.Rename(postfix="_h")))
    wf = tl.Workflow(graph, progress=False).fit(OTHER)
    server = Server(wf)
    by_hand = {}
    for name, values in request_.items():
        kind, dtype = OTHER_SCHEMA[name]
        values = [None if v is None or v != v else v for v in np.asarray(values, dtype=object)]
        if kind == "float":
            by_hand[name] = np.array([np.nan if v is None else v for v in values], dtype=dtype)
        elif any(v is None for v in values):  # pandas' nullable dtypes
            nullable = {"boolean": "boolean", "int32": "Int32", "uint64": "UInt64"}[dtype]
            by_hand[name] = pd.array([v if v is None else (bool(v) if kind == "bool" else int(v)) for v in values],
                                     dtype=nullable)
        else:
            by_hand[name] = np.array([int(v) for v in values], dtype="bool" if kind == "bool" else dtype)
    assert_same(server.transform(request_), model_arrays_by_hand(wf.transform(pd.DataFrame(by_hand))))
    assert not server.fallbacks


# --- bad requests and workflows ---------------------------------------------------------------------
def test_bad_requests_name_the_column_and_value():
    from tabloader.serving import Server

    server = Server(tl.Workflow(["i", "f", "s"] >> ops.Categorify(), progress=False).fit(TRAIN))
    good = {"i": [1], "f": [0.5], "s": ["a"]}
    with pytest.raises(KeyError, match=r"lacks column\(s\) \['s'\]"):
        server.transform({"i": [1], "f": [0.5]})
    with pytest.raises(TypeError, match=r"'i' holds 'x'"):
        server.transform({**good, "i": ["x"]})
    with pytest.raises(TypeError, match=r"'i' holds 2\.5"):
        server.transform({**good, "i": [2.5]})
    with pytest.raises(TypeError, match=r"'i' holds 18446744073709551615"):
        server.transform({**good, "i": [2**64 - 1]})
    with pytest.raises(TypeError, match=r"'f' holds 'x'"):
        server.transform({**good, "f": [1.0, "x"], "i": [1, 2], "s": ["a", "b"]})
    with pytest.raises(TypeError, match=r"'s' cannot be read as string"):
        server.transform({**good, "s": [3]})
    with pytest.raises(ValueError, match="different lengths"):
        server.transform({**good, "s": ["a", "b"]})
    with pytest.raises(TypeError, match="must be a list or a numpy array"):
        server.transform({**good, "s": "a"})
    assert server.transform({**good, "i": [3.0]})["i"].tolist() == server.transform(good | {"i": [3]})["i"].tolist()


def test_workflows_a_server_refuses():
    from tabloader.serving import Server

    with pytest.raises(tl.ops.NotFittedError):
        Server(tl.Workflow(["i"] >> ops.Categorify(), progress=False))
    with pytest.raises(TypeError, match=r"output column 's' has dtype 'string'"):
        Server(tl.Workflow(["s", "g"] >> ops.Rename(postfix=""), progress=False).fit(TRAIN))
    server = Server(tl.Workflow(["i"] >> ops.Rename(postfix="_raw"), progress=False).fit(TRAIN))
    with pytest.raises(ValueError, match="output column 'i_raw' has a null in row 1"):
        server.transform({"i": [1, None]})


@pytest.mark.parametrize("rows, where", [([[1, 2], [3], None, [None]], "a null list in row 2"),
                                         ([[1, 2], [3, None], None], "a null element in row 1")])
def test_a_null_in_a_list_output_is_refused_naming_its_row(rows, where):
    from tabloader.serving import Server

    train = pd.DataFrame({"l": pd.arrays.ArrowExtensionArray(pa.array([[1, 2], [3]], pa.list_(pa.int64())))})
    server = Server(tl.Workflow(["l"] >> ops.Rename(postfix="_raw"), progress=False).fit(train))
    with pytest.raises(ValueError, match=f"output column 'l_raw' holds {where}"):
        server.transform({"l": rows})


def test_serving_imports_no_framework():
    code = ("import sys, pandas as pd, tabloader as tl; from tabloader import ops; from tabloader.serving import Server;"
            "wf = tl.Workflow(['x'] >> ops.LogOp, progress=False).fit(pd.DataFrame({'x': [1.0]}));"
            "Server(wf).transform({'x': [2.0]});"
            "print(__import__('json').dumps(sorted(m for m in ('torch', 'tensorflow') if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


# --- the lookup of small queries (binary search) agrees with the hash index -----------------------
@pytest.mark.parametrize("dtype", ["int64", "uint64"])
def test_small_and_large_integer_queries_find_the_same_keys(dtype):
    from tabloader.encoding.cpu.lookup import SMALL_QUERY, IntKeys

    info = np.iinfo(dtype)
    keys = np.unique(np.concatenate([RNG.integers(info.min, info.max, 5000, dtype=dtype, endpoint=True),
                                     np.array([info.min, info.max], dtype=dtype)]))
    RNG.shuffle(keys)
    index = IntKeys(keys)
    assert index.table is None  # sparse keys: the hash index, or the binary search
    query = np.concatenate([keys[:300], RNG.integers(info.min, info.max, 300, dtype=dtype, endpoint=True),
                            np.array([info.min, info.max], dtype=dtype)])
    expected = {int(k): p for p, k in enumerate(keys)}
    want = [expected.get(int(q), -1) for q in query]
    assert len(query) <= SMALL_QUERY
    assert index.find(query).tolist() == want  # binary search
    assert index.find(np.tile(query, SMALL_QUERY // len(query) + 1)).tolist() == want * (SMALL_QUERY // len(query) + 1)


def test_times_in_a_request_are_read_as_at_fit_even_all_null_or_as_text():
    from tabloader.serving import Server

    wf = tl.Workflow(["d"] >> ops.DatetimeFeatures(["hour", "day_of_week"]) >> ops.FillMissing(-1),
                     progress=False).fit(TRAIN)
    server = Server(wf)
    got = server.transform({"d": [None, "2024-06-01 18:30:00", datetime.datetime(2024, 6, 3, 7)]})
    assert got["d_hour"].tolist() == [-1, 18, 7] and got["d_day_of_week"].tolist() == [-1, 5, 0]
    assert server.transform({"d": [None]})["d_hour"].tolist() == [-1]  # pandas alone would infer object
    with pytest.raises(TypeError, match=r"request column 'd' cannot be read as datetime64\[us\]"):
        server.transform({"d": ["noon"]})
