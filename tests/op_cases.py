"""Operator cases shared by the CPU operator tests (tests/test_ops_*.py) and the GPU parity
tests (tests/test_gpu_ops.py): the data the CPU tests use, and the tables of parameters they are
parametrized with. A parameter added to a table here is a CPU case and a GPU parity case at once.

Functions used by operators (LambdaOp, Filter) are module-level, so saved workflows name them
``op_cases:<name>`` and load them with ``trusted=[op_cases]``.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
from typing import Any, Callable

import numpy as np
import pandas as pd
import pyarrow as pa

from tabloader import ops
from tabloader.backend import STRING_DTYPE
from tabloader.ops.datetime_features import FEATURES as DATETIME_FEATURES

# --- data ---------------------------------------------------------------------------------
def categorical_frame(n: int = 400, seed: int = 0) -> pd.DataFrame:
    """Nullable integers, strings (some non-ASCII), small integers, floats and a label."""
    rng = np.random.default_rng(seed)
    ints = pd.array(rng.zipf(1.5, n) % 50, dtype="Int64")
    ints[rng.random(n) < 0.1] = pd.NA
    strs = pd.Series(rng.choice(["apple", "pear", "fig", "kiwi", "plum", "é"], n), dtype=STRING_DTYPE)
    strs[rng.random(n) < 0.05] = None
    return pd.DataFrame({
        "i": ints,
        "s": strs,
        "j": rng.integers(0, 8, n),
        "x": rng.normal(size=n),
        "label": rng.integers(0, 2, n).astype(np.int64),
    })


def numeric_frame(n: int = 600, seed: int = 0) -> pd.DataFrame:
    """Floats with NaN (float64 and float32), integers, nullable integers, a constant and an all-NaN column."""
    rng = np.random.default_rng(seed)
    a = rng.normal(3.0, 2.0, n)
    a[rng.random(n) < 0.1] = np.nan
    b = rng.exponential(5.0, n).astype(np.float32)
    b[rng.random(n) < 0.2] = np.nan
    c = rng.integers(-5, 50, n).astype(np.int64)
    d = pd.array(rng.integers(0, 9, n), dtype="Int64")
    d[rng.random(n) < 0.15] = pd.NA
    return pd.DataFrame({"a": a, "b": b, "c": c, "d": d, "const": np.full(n, 7.5),
                         "allnull": np.full(n, np.nan), "label": rng.integers(0, 2, n).astype(np.int32)})


def list_array(rng: np.random.Generator, n: int, null_every: int = 0) -> pa.Array:
    rows = [list(rng.integers(1, 100, rng.integers(0, 7))) for _ in range(n)]
    if null_every:
        rows = [None if i % null_every == 3 else r for i, r in enumerate(rows)]
    return pa.array(rows, type=pa.list_(pa.int64()))


def misc_frame(n: int = 400, seed: int = 0) -> pd.DataFrame:
    """Users with sorted timestamps, floats, integers of several ranges, strings and a list column."""
    rng = np.random.default_rng(seed)
    user = np.sort(rng.integers(0, 40, n))
    ts = np.zeros(n, dtype=np.int64)
    for u in np.unique(user):  # sorted by time within user
        idx = np.flatnonzero(user == u)
        ts[idx] = np.sort(rng.integers(0, 10_000, idx.size))
    a = rng.normal(0, 1, n)
    a[::13] = np.nan
    nullable = pd.array(rng.integers(-100, 100, n), dtype="Int64")
    nullable[::7] = pd.NA
    return pd.DataFrame({
        "user": user, "ts": ts, "a": a, "b": rng.normal(5, 2, n),
        "small": rng.integers(-3, 120, n).astype(np.int64), "mid": rng.integers(0, 40_000, n).astype(np.int64),
        "big": rng.integers(-2**40, 2**40, n), "u8": rng.integers(0, 200, n).astype(np.uint64),
        "nullable": nullable, "s": pd.Series(rng.choice(["x", "y", None], n), dtype=STRING_DTYPE),
        "genres": pd.arrays.ArrowExtensionArray(list_array(rng, n, null_every=11)),
    })


def decimal_frame(n: int = 300, seed: int = 0) -> pd.DataFrame:
    """Decimals as Spark and databases write them (amounts with cents, whole amounts, ids beyond
    int64), with nulls; whole floats with NaN, nullable integers and booleans."""
    rng = np.random.default_rng(seed)
    missing = rng.random(n) < 0.1

    def decimals(values: list, precision: int, scale: int) -> pd.Series:
        rows = [None if m else decimal.Decimal(v) for v, m in zip(values, missing)]
        return pd.Series(pd.array(rows, dtype=pd.ArrowDtype(pa.decimal128(precision, scale))))

    cents = rng.integers(-10**6, 10**6, n)
    ids = [str(10**30 + int(i)) for i in rng.integers(0, 12, n)]  # few, huge: as Oracle NUMBER(38) ids
    whole = rng.normal(0, 1000, n).round()
    whole[missing] = np.nan
    counts = pd.array(rng.integers(0, 9, n), dtype="Int64")
    counts[rng.random(n) < 0.15] = pd.NA
    return pd.DataFrame({"amount": decimals([f"{c / 100:.2f}" for c in cents], 12, 2),
                         "whole": decimals([f"{c // 100}.00" for c in cents], 18, 2), "id": decimals(ids, 38, 0),
                         "f": whole, "n": counts, "flag": rng.random(n) < 0.5})


def times_frame(n: int = 300, seed: int = 0) -> pd.DataFrame:
    """Event times in microseconds (as parquet stores them) and dates (arrow-backed, as read from
    parquet), both with nulls, over 1965-2040 and past 2262 (beyond nanoseconds)."""
    rng = np.random.default_rng(seed)
    micros = rng.integers(-5 * 10**17 // 1000, 22 * 10**17 // 1000, n)
    times = pd.Series(micros.astype("datetime64[us]"))
    times[rng.random(n) < 0.1] = pd.NaT
    days = [None if rng.random() < 0.1 else datetime.date(1965, 1, 1) + datetime.timedelta(days=int(d))
            for d in rng.integers(0, 160_000, n)]
    return pd.DataFrame({"at": times, "day": pd.Series(pd.array(days, dtype=pd.ArrowDtype(pa.date32())))})


FRAMES = {"categorical": categorical_frame, "numeric": numeric_frame, "misc": misc_frame, "decimals": decimal_frame,
          "times": times_frame}


# --- functions operators are given -----------------------------------------------------------
def times_ten(col):
    return col * 10


def minus_dep(col, deps):
    return col - deps["b"]


def keep_positive_a(df):
    return df["a"] > 0


def user_features() -> pd.DataFrame:
    """Side features of every other user of :func:`misc_frame` (a join leaves the others null or out)."""
    users = np.arange(0, 40, 2)
    return pd.DataFrame({"user": users, "age": users * 3 + 18, "tier": [f"t{u % 3}" for u in users]})


# --- parameter tables (the CPU tests are parametrized with these) -----------------------------
CATEGORIFY_KWARGS = [{}, {"freq_threshold": 5}, {"max_size": 4}, {"num_buckets": 7, "freq_threshold": 3}]
JOIN_GROUPBY_STATS = [["sum", "mean", "max"], ["std"], ["min", "count", "var"]]
ALL_GROUPBY_STATS = ["count", "sum", "mean", "std", "var", "min", "max"]
TARGET_ENCODING_KFOLDS = [1, 3]
LIST_SLICES = [(0, 3, False), (1, None, False), (-2, None, False), (2, 5, False), (-4, -1, False), (1, -1, False),
               (0, 3, True), (-3, None, True), (2, 4, True), (-5, -2, True)]
BUCKETIZE_BOUNDS = {"a": [0.0, 2.0, 4.5], "c": [0, 10, 20, 30]}


# --- cases: one graph on one frame ------------------------------------------------------------
@dataclasses.dataclass
class OpCase:
    """A graph of operators (``build()`` gives a fresh one) applied to one of :data:`FRAMES`."""

    id: str
    frame: str
    build: Callable[[], Any]


def _cases() -> list[OpCase]:
    cases = [OpCase(f"Categorify-{kw}", "categorical", lambda kw=kw: ["i", "s"] >> ops.Categorify(**kw))
             for kw in CATEGORIFY_KWARGS]
    cases += [
        OpCase("Categorify-joint", "categorical",
               lambda: ["i", "s", ("j", "i")] >> ops.Categorify(num_buckets={"i": 3}, freq_threshold=2)),
        OpCase("Categorify-combo", "categorical",
               lambda: [("s", "j"), ("i", "s")] >> ops.Categorify(encode_type="combo", num_buckets=3)),
        OpCase("Categorify-vocabs", "categorical",
               lambda: ["s", "i"] >> ops.Categorify(vocabs={"s": ["fig", "kiwi"]}, dtype="int32")),
        OpCase("Categorify-floats", "numeric", lambda: ["a", "b"] >> ops.Categorify(num_buckets=4)),
        OpCase("Categorify-list", "misc", lambda: ["genres"] >> ops.Categorify(freq_threshold=3, num_buckets=2)),
        OpCase("HashBucket", "categorical", lambda: ["i", "s", "x"] >> ops.HashBucket({"i": 17, "s": 5, "x": 9})),
        OpCase("HashBucket-list", "misc", lambda: ["genres"] >> ops.HashBucket(100)),
        OpCase("HashedCross", "categorical", lambda: [("i", "s"), ("s", "j", "x")] >> ops.HashedCross(101)),
    ]
    cases += [OpCase(f"JoinGroupby-{stats}", "categorical",
                     lambda stats=stats: ["i", ("s", "j")] >> ops.JoinGroupby(["x", "label"], stats=stats))
              for stats in JOIN_GROUPBY_STATS + [ALL_GROUPBY_STATS]]
    cases += [OpCase(f"TargetEncoding-kfold{k}", "categorical",
                     lambda k=k: ["i", "s", ("s", "j")] >> ops.TargetEncoding("label", kfold=k, p_smooth=10))
              for k in TARGET_ENCODING_KFOLDS]
    cases += [
        OpCase("FillMissing", "numeric", lambda: ["a", "b", "c", "d", "allnull"] >> ops.FillMissing(-1)),
        OpCase("FillMissing-indicator", "numeric", lambda: ["a", "b"] >> ops.FillMissing(0.5, add_binary_cols=True)),
        OpCase("FillMissing-list-elements", "misc", lambda: ["genres"] >> ops.FillMissing()),
        OpCase("FillMissing-list-rows", "misc", lambda: ["genres"] >> ops.FillMissing([-1, -2], add_binary_cols=True)),
        OpCase("FillMedian", "numeric", lambda: ["a", "b", "d"] >> ops.FillMedian(add_binary_cols=True)),
        OpCase("Normalize", "numeric", lambda: ["a", "b", "c", "d"] >> ops.Normalize()),
        OpCase("NormalizeMinMax", "numeric", lambda: ["a", "b", "c", "const"] >> ops.NormalizeMinMax()),
        OpCase("LogOp", "numeric", lambda: ["a", "b", "c", "d"] >> ops.LogOp()),
        OpCase("Clip", "numeric", lambda: ["a", "b", "c", "d"] >> ops.Clip(min_value=0.5, max_value=6.5)),
        OpCase("Bucketize", "numeric", lambda: ["a", "c"] >> ops.Bucketize(BUCKETIZE_BOUNDS)),
        OpCase("LambdaOp", "misc", lambda: (["small", "a"] >> ops.LambdaOp(times_ten, dtype="float32"))
               + (["a"] >> ops.LambdaOp(minus_dep, dependency="b") >> ops.Rename(postfix="_mb"))),
        OpCase("Rename-AddTags-AddProperties", "misc",
               lambda: ["ts", "b"] >> ops.Rename(postfix="_x") >> ops.AddTags(["custom"]) >> ops.AddProperties(n=1)),
        OpCase("ReduceDtypeSize", "misc",
               lambda: ["small", "mid", "big", "u8", "nullable", "a", "s"] >> ops.ReduceDtypeSize()),
        OpCase("AsType-float32", "decimals", lambda: ["amount", "n", "flag", "f"] >> ops.AsType("float32")),
        OpCase("AsType-int64", "decimals", lambda: ["whole", "f", "n", "flag"] >> ops.AsType("int64")),
        OpCase("AsType-string-Categorify", "decimals",
               lambda: ["id", "whole", "n"] >> ops.AsType("string") >> ops.Categorify()),
        OpCase("DatetimeFeatures", "times", lambda: ["at", "day"] >> ops.DatetimeFeatures(list(DATETIME_FEATURES))),
        OpCase("DatetimeFeatures-Categorify", "times",
               lambda: ["at"] >> ops.DatetimeFeatures(["day_of_week", "hour"]) >> ops.Categorify()),
        OpCase("Filter", "misc", lambda: (["a", "b"] >> ops.Filter(keep_positive_a)) + ["user"]),
        OpCase("Dropna", "misc", lambda: (["a", "nullable"] >> ops.Dropna()) + ["ts"]),
        OpCase("DifferenceLag", "misc", lambda: ["ts", "a"] >> ops.DifferenceLag("user", shift=[1, 2, -1])),
        OpCase("ValueCount", "misc", lambda: ["genres"] >> ops.ValueCount()),
    ]
    cases += [  # NVTabular operators and parameters (issue 17)
        OpCase("Groupby", "misc", lambda: ["user", "ts", "a", "s", "small"] >> ops.Groupby(
            "user", sort_cols="ts", aggs={"a": ["list", "first", "last", "mean", "count"], "s": "list",
                                          "small": ["sum", "min", "max", "std"]})),
        OpCase("LogOp-Normalize-list", "misc", lambda: ["genres"] >> ops.LogOp >> ops.Normalize()),
        OpCase("NormalizeMinMax-list", "misc", lambda: ["genres"] >> ops.NormalizeMinMax()),
        OpCase("JoinExternal", "misc", lambda: ["user", "a"] >> ops.JoinExternal(user_features(), on="user")),
        OpCase("JoinExternal-inner", "misc",
               lambda: ["user", "s"] >> ops.JoinExternal(user_features(), on="user", how="inner", columns_ext=["tier"])),
        OpCase("DropLowCardinality", "misc",
               lambda: ((["s", "user", "u8"] >> ops.Categorify(freq_threshold={"u8": 50})) + ["a"])
               >> ops.DropLowCardinality(min_cardinality=3)),
        OpCase("DataStats", "misc", lambda: ["a", "small", "s", "genres", "nullable"] >> ops.DataStats()),
        OpCase("TargetEncoding-JoinGroupby-derived", "categorical",
               lambda: (["s"] >> ops.TargetEncoding(["x"] >> ops.LambdaOp(times_ten), kfold=2))
               + (["i"] >> ops.JoinGroupby(cont_cols=["label"] >> ops.LogOp, stats=["mean"]))),
        OpCase("pick-and-function", "misc", lambda: (["a", "b"] >> ops.FillMissing(0))["a"] >> times_ten),
    ]
    cases += [OpCase(f"ListSlice-{start}-{end}-{pad}", "misc",
                     lambda s=start, e=end, p=pad: ["genres"] >> ops.ListSlice(s, e, pad=p, pad_value=-7))
              for start, end, pad in LIST_SLICES]
    return cases


CASES = _cases()
