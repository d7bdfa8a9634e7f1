"""Categorical operators against independent pandas / numpy / pure-Python computations."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tabloader as tl
from tabloader import backend
from tabloader.ops.base import NotFittedError
from tabloader.ops.categorify import Categorify
from tabloader.ops.groupby import JoinGroupby
from tabloader.ops.hashing import HashBucket, HashedCross
from tabloader.ops.target_encoding import TargetEncoding, fold_of, full_data_workflow
from tabloader.workflow import Workflow
from tabloader.backend import STRING_DTYPE

from encoding_reference import expected_ids, is_null, py_cross, py_hash
from op_cases import CATEGORIFY_KWARGS, JOIN_GROUPBY_STATS, TARGET_ENCODING_KFOLDS, categorical_frame


# --- data ---------------------------------------------------------------------------------
sample_frame = categorical_frame


def fit_transform(op, cols, data, part_size="128MB"):
    wf = Workflow(cols >> op, progress=False)
    ds = tl.Dataset(data, part_size=part_size)
    wf.fit(ds)
    return wf, wf.transform(ds).compute()


# --- Categorify ---------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs", CATEGORIFY_KWARGS)
def test_categorify_matches_pandas(kwargs):
    df = sample_frame()
    wf, out = fit_transform(Categorify(**kwargs), ["i", "s"], df)
    for col in ["i", "s"]:
        values = [None if is_null(v) else v for v in df[col].tolist()]
        exp, card = expected_ids(values, **kwargs)
        assert out[col].tolist() == exp
        assert wf.output_schema[col].properties["cardinality"] == card
        assert out[col].dtype == np.int64


def test_categorify_ties_broken_by_value_and_reserved_ids():
    df = pd.DataFrame({"c": [30, 10, 20, 20, 10, 30, None]}, dtype="Int64")
    _, out = fit_transform(Categorify(), ["c"], df)
    # counts 10:2, 20:2, 30:2 -> ids by ascending value; null is 1; 0 and 2 unused
    assert out["c"].tolist() == [5, 3, 4, 4, 3, 5, 1]


def test_categorify_many_partitions_equal_one():
    df = sample_frame(1000)
    op1, op2 = Categorify(freq_threshold=2), Categorify(freq_threshold=2)
    wf1, out1 = fit_transform(op1, ["i", "s", "j"], df)
    wf2, out2 = fit_transform(op2, ["i", "s", "j"], df, part_size=2000)
    assert tl.Dataset(df, part_size=2000).npartitions > 5
    pd.testing.assert_frame_equal(out1, out2)
    for key in op1.vocabularies_:
        pd.testing.assert_frame_equal(op1.vocabularies_[key], op2.vocabularies_[key])
    assert wf1.output_schema == wf2.output_schema


def test_categorify_save_load_transform_identical(tmp_path):
    df = sample_frame()
    wf, out = fit_transform(Categorify(num_buckets={"i": 3}, freq_threshold=2), ["i", "s", ("j", "i")], df)
    wf.save(str(tmp_path / "wf"))
    loaded = Workflow.load(str(tmp_path / "wf"))
    pd.testing.assert_frame_equal(loaded.transform(df), out)
    assert loaded.output_schema == wf.output_schema


def test_categorify_transform_before_fit_raises():
    df = sample_frame(20)
    with pytest.raises(NotFittedError, match="Categorify"):
        Categorify().transform(["i"], df)
    with pytest.raises(NotFittedError):
        Workflow(["i"] >> Categorify(), progress=False).transform(df)


def test_categorify_unseen_values_go_to_oov():
    train = pd.DataFrame({"c": ["a", "a", "b"], "n": [1, 1, 2]})
    test = pd.DataFrame({"c": ["b", "zzz", None, "a"], "n": [2, 99, 1, -5]})
    wf = Workflow(["c", "n"] >> Categorify(), progress=False).fit(train)
    out = wf.transform(test)
    assert out["c"].tolist() == [4, 2, 1, 3]
    assert out["n"].tolist() == [4, 2, 3, 2]
    wf = Workflow(["c"] >> Categorify(num_buckets=5), progress=False).fit(train)
    assert wf.transform(test)["c"].tolist()[1] == 2 + py_hash("zzz") % 5


TOP = 2**64 - 1  # the largest uint64
HALF = 2**63  # the smallest uint64 an int64 cannot hold


def test_categorify_uint64_orders_by_true_value_and_unseen_negatives_go_to_oov(tmp_path):
    # every value twice: the order is decided by the tie-break on the value alone
    fit_values = [TOP, TOP, HALF, HALF, 5, 5, HALF - 1, HALF - 1, HALF + 1, HALF + 1, TOP - 1, TOP - 1, 0, 0, 7]
    table = pa.table({"c": pa.array(fit_values, type=pa.uint64())})
    pq.write_table(table, tmp_path / "ids.parquet", row_group_size=4)  # pyarrow, no pandas metadata
    assert table.schema.metadata is None
    op = Categorify(num_buckets=3)
    dataset = tl.Dataset(str(tmp_path / "ids.parquet"), part_size=1)
    assert dataset.npartitions > 1
    wf = Workflow(["c"] >> op, progress=False).fit(dataset)
    assert op.vocabularies_["c"]["value"].tolist() == [0, 5, HALF - 1, HALF, HALF + 1, TOP - 1, TOP, 7]

    fitted_here = wf.transform(tl.Dataset(str(tmp_path / "ids.parquet"))).compute()["c"].tolist()
    assert fitted_here == expected_ids(fit_values, num_buckets=3)[0]
    # serving requests arrive as int64 (or as floats): negatives were never seen, so they are OOV,
    # never the vocabulary entry whose uint64 bits they share (-1 is the bits of 2**64 - 1)
    request = [-1, -2, -(2**63), 5, HALF - 1, 3]
    got = wf.transform(pd.DataFrame({"c": pd.array(request, dtype="Int64")}))["c"].tolist()
    assert got == expected_ids(request, fit_values, num_buckets=3)[0]
    assert all(2 <= i < 5 for i in got[:3])
    floats = [float(HALF), -1.0, 5.0, 2.0**64]
    got = wf.transform(pd.DataFrame({"c": floats}))["c"].tolist()
    assert got[0] == expected_ids([HALF], fit_values, num_buckets=3)[0][0]
    assert got[2] == expected_ids([5], fit_values, num_buckets=3)[0][0]
    assert all(2 <= i < 5 for i in (got[1], got[3]))


@pytest.mark.parametrize("widths", [["int8", "Int16", "uint32", "int64", "uint64"],
                                    ["uint8", "UInt16", "UInt64", "uint32", "uint64"]])
def test_categorify_fit_over_partitions_of_different_integer_widths(widths):
    rng = np.random.default_rng(1)
    parts = []
    for i, dtype in enumerate(widths):
        info = np.iinfo(pd.api.types.pandas_dtype(dtype.lower()))
        lo = int(info.min)
        hi = min(int(info.max), 2**63 - 1) if widths[0] == "int8" else int(info.max)  # no negative beside >= 2**63
        # each extreme once: ties, so their order is decided by value alone
        values = [lo + i, hi - 2 * i, hi - 2 * i - 1] + [int(v) for v in rng.integers(0, 4, 10)]
        parts.append(pd.DataFrame({"c": pd.Series(values + [None] * dtype[0].isupper(), dtype=dtype)}))
    op = Categorify()
    partials = [op.fit_partial(["c"], part) for part in parts]
    merged = partials[0]
    for p in partials[1:]:  # one of the orders Workflow.fit's tree reduction may take
        merged = op.merge(merged, p)
    op.finalize(["c"], merged)
    pooled = [None if is_null(v) else int(v) for part in parts for v in part["c"].tolist()]
    for part in parts:
        values = [None if is_null(v) else int(v) for v in part["c"].tolist()]
        assert op.transform(["c"], part)["c"].tolist() == expected_ids(values, pooled)[0]
    assert op.null_counts_["c"] == sum(v is None for v in pooled)


def test_categorify_negative_and_uint64_above_int64_in_one_column_is_a_clear_error():
    op = Categorify()
    a = op.fit_partial(["c"], pd.DataFrame({"c": pd.Series([-1, 2], dtype="int64")}))
    b = op.fit_partial(["c"], pd.DataFrame({"c": pd.Series([HALF], dtype="uint64")}))
    with pytest.raises(TypeError, match=r"Categorify: column 'c' holds negative integers and unsigned"):
        op.merge(a, b)


def test_categorify_all_null_and_empty_partitions(tmp_path):
    df = pd.DataFrame({"c": pd.array([None] * 6, dtype="Int64"), "s": pd.Series([None] * 6, dtype=STRING_DTYPE)})
    wf, out = fit_transform(Categorify(), ["c", "s"], df, part_size=8)
    assert out["c"].tolist() == [1] * 6 and out["s"].tolist() == [1] * 6
    assert wf.output_schema["c"].properties["cardinality"] == 3
    assert wf.transform(pd.DataFrame({"c": pd.array([5], dtype="Int64"), "s": ["x"]}))["c"].tolist() == [2]
    # an empty row group in a parquet file, and a 0-row frame at transform
    data = pd.DataFrame({"c": pd.array([1, 2, 2], dtype="Int64")})
    table = pa.Table.from_pandas(data, preserve_index=False)
    with pq.ParquetWriter(tmp_path / "part.parquet", table.schema) as writer:
        writer.write_table(table.slice(0, 0))
        writer.write_table(table)
    ds = tl.Dataset(str(tmp_path / "part.parquet"), part_size=1)
    wf = Workflow(["c"] >> Categorify(), progress=False).fit(ds)
    assert wf.transform(ds).compute()["c"].tolist() == [4, 3, 3]
    empty = wf.transform(data.iloc[:0])
    assert len(empty) == 0 and empty["c"].dtype == np.int64


def test_categorify_output_schema():
    df = pd.DataFrame({"c": np.arange(1000) % 300, "x": np.zeros(1000)})
    wf = Workflow((["c"] >> Categorify(num_buckets=2, freq_threshold=1, dtype="int32")) + ["x"], progress=False)
    wf.fit(df)
    col = wf.output_schema["c"]
    assert col.has_tag("categorical") and col.dtype == "int32"
    assert col.properties["cardinality"] == 2 + 2 + 300
    assert col.properties["embedding_dim"] == min(512, round(1.6 * 304 ** 0.56))
    assert col.properties["num_buckets"] == 2
    assert wf.transform(df)["c"].dtype == np.int32


def test_categorify_list_column():
    values = [[3, 1], None, [], [1, 1, None], [2]]
    df = pd.DataFrame({"l": pd.Series(values, dtype=pd.ArrowDtype(pa.list_(pa.int64())))})
    wf = Workflow(["l"] >> Categorify(), progress=False).fit(df)
    out = wf.transform(df)["l"]
    flat = [v for row in values if row for v in row]
    ids, card = expected_ids(flat)
    mapping = {v: i for v, i in zip(flat, ids) if v is not None}
    expected = [None if row is None else [1 if v is None else mapping[v] for v in row] for row in values]
    assert [None if v is pd.NA or v is None else list(v) for v in out.tolist()] == expected
    assert wf.output_schema["l"].is_list and wf.output_schema["l"].has_tag("list")
    assert wf.output_schema["l"].properties["cardinality"] == card


def expected_list_ids(rows, fit_rows):
    """Ids of list rows by hand: elements by the contract (null element 1), null lists stay None."""
    flat = [v for row in fit_rows if row is not None for v in row]
    elements = [v for row in rows if row is not None for v in row]
    ids = iter(expected_ids(elements, flat)[0])
    return [None if row is None else [next(ids) for _ in row] for row in rows]


def as_rows(series):
    return [None if v is None or v is pd.NA else [None if is_null(x) else int(x) if isinstance(x, (int, np.integer))
                                                  else x for x in v] for v in series.tolist()]


def test_categorify_object_column_of_lists_like_arrow_lists(tmp_path):
    ints = [[3, 1], None, [], [1, 1, None], [2], None]
    strs = [["a"], ["b", "a"], None, [None], [], None]
    pq.write_table(pa.table({"l": pa.array(ints), "s": pa.array(strs)}), tmp_path / "lists.parquet")
    read = pd.read_parquet(tmp_path / "lists.parquet")  # object columns of numpy arrays
    assert read["l"].dtype == object and isinstance(read["l"].iloc[0], np.ndarray)
    python_lists = pd.DataFrame({"l": pd.Series(ints, dtype=object), "s": pd.Series(strs, dtype=object)})
    arrow_lists = pd.DataFrame({c: pd.Series(v, dtype=pd.ArrowDtype(pa.array(v).type)) for c, v in
                                [("l", ints), ("s", strs)]})
    for frame in [read, python_lists]:
        wf = Workflow(["l", "s"] >> Categorify(), progress=False)
        dataset = tl.Dataset(frame, part_size=1)  # some partitions hold only a null list
        assert dataset.npartitions == len(frame)
        out = wf.fit(dataset).transform(dataset).compute()
        for col, rows in [("l", ints), ("s", strs)]:
            assert as_rows(out[col]) == expected_list_ids(rows, rows)
            assert backend.is_list_dtype(out[col].dtype)
            assert wf.output_schema[col].is_list
            assert wf.output_schema[col].properties["cardinality"] == expected_ids(
                [v for row in rows if row for v in row])[1]
        arrow_out = Workflow(["l", "s"] >> Categorify(), progress=False).fit(arrow_lists).transform(arrow_lists)
        assert [as_rows(out[c]) for c in "ls"] == [as_rows(arrow_out[c]) for c in "ls"]
        # a serving request: Python lists, unseen values, a request holding only a null list
        request = pd.DataFrame({"l": [[1, 9], None, [None]], "s": [["zz", "a"], [], None]})
        got = wf.transform(request)
        assert as_rows(got["l"]) == expected_list_ids([[1, 9], None, [None]], ints)
        assert as_rows(got["s"]) == expected_list_ids([["zz", "a"], [], None], strs)
        only_null = wf.transform(pd.DataFrame({"l": [None], "s": [np.nan]}))
        assert as_rows(only_null["l"]) == as_rows(only_null["s"]) == [None]
        assert backend.is_list_dtype(only_null["l"].dtype) and backend.is_list_dtype(only_null["s"].dtype)
    with pytest.raises(TypeError, match=r"Categorify: column 'm' holds lists in some rows and other values"):
        Workflow(["m"] >> Categorify(), progress=False).fit(pd.DataFrame({"m": pd.Series([[1], 2], dtype=object)}))


def test_categorify_joint_and_combo():
    df = pd.DataFrame({"a": ["x", "y", "y", "z", None], "b": ["y", "q", "x", "y", "y"]})
    wf = Workflow([("a", "b")] >> Categorify(encode_type="joint"), progress=False).fit(df)
    out = wf.transform(df)
    pooled = df["a"].tolist() + df["b"].tolist()
    ids, card = expected_ids(pooled)
    assert out["a"].tolist() + out["b"].tolist() == ids
    assert wf.output_schema["a"].properties["cardinality"] == wf.output_schema["b"].properties["cardinality"] == card

    wf = Workflow([("a", "b")] >> Categorify(encode_type="combo"), progress=False).fit(df)
    out = wf.transform(df)
    assert out.columns.tolist() == ["a_b"]
    pairs = [None if is_null(a) or is_null(b) else f"{a}|{b}" for a, b in zip(df["a"], df["b"])]
    assert out["a_b"].tolist() == expected_ids(pairs)[0]


def test_categorify_user_vocabulary():
    df = pd.DataFrame({"c": ["b", "a", "c", None], "d": [1, 2, 2, 3]})
    op = Categorify(vocabs={"c": ["c", "b"]})
    out = op.transform(["c"], df)  # no fit needed for given vocabularies
    assert out["c"].tolist() == [4, 2, 3, 1]
    wf = Workflow(["c", "d"] >> Categorify(vocabs={"c": ["c", "b"]}), progress=False).fit(df)
    out = wf.transform(df)
    assert out["c"].tolist() == [4, 2, 3, 1] and out["d"].tolist() == [4, 3, 3, 5]
    with pytest.raises(ValueError, match="repeats"):
        Categorify(vocabs={"c": ["a", "a"]}).transform(["c"], df)


def test_categorify_with_an_empty_vocabulary_sends_every_value_out_of_vocabulary(tmp_path):
    """``vocabs={"c": []}`` was refused as "contains nulls" (the empty list normalized as an all-null
    column of no rows); it is the vocabulary a fit on nulls only gives: every value in the OOV buckets."""
    df = pd.DataFrame({"c": ["a", "b", None, "a"], "i": [1, 2, None, 7]}).astype({"i": "Int64"})
    values = {c: [None if is_null(v) else v for v in df[c].tolist()] for c in df}
    for c in ["c", "i"]:
        assert Categorify(vocabs={c: []}, num_buckets=10).transform([c], df)[c].tolist() == \
            expected_ids(values[c], fit_values=[], num_buckets=10)[0]
    wf = Workflow((["c"] >> Categorify(vocabs={"c": []}, num_buckets=10))
                  + ([("c", "i")] >> Categorify(vocabs={"c_i": []}, encode_type="combo", num_buckets=7)),
                  progress=False).fit(df)
    out = wf.transform(df)
    assert out["c"].tolist() == expected_ids(values["c"], fit_values=[], num_buckets=10)[0]
    rows = [tuple(r) for r in zip(values["c"], values["i"])]
    assert out["c_i"].tolist() == expected_ids(rows, fit_values=[], num_buckets=7)[0]
    assert wf.output_schema["c"].properties["cardinality"] == 2 + 10
    wf.save(str(tmp_path / "wf"))
    pd.testing.assert_frame_equal(Workflow.load(str(tmp_path / "wf")).transform(df), out)


def test_categorify_floats_and_categoricals_by_value():
    df = pd.DataFrame({"f": [1.0, 2.5, 2.5, np.nan], "k": pd.Categorical(["u", "v", "v", None])})
    _, out = fit_transform(Categorify(), ["f", "k"], df)
    assert out["f"].tolist() == [4, 3, 3, 1] and out["k"].tolist() == [4, 3, 3, 1]
    wf = Workflow(["n"] >> Categorify(), progress=False).fit(pd.DataFrame({"n": [7, 7, 8]}))
    assert wf.transform(pd.DataFrame({"n": [7.0, 8.0, 7.5]}))["n"].tolist() == [3, 4, 2]


def test_an_arrow_boolean_column_with_nulls_is_encoded_as_a_pandas_boolean_one():
    """``bool[pyarrow]`` (``pd.read_parquet(..., dtype_backend="pyarrow")``, polars' ``to_pandas``)
    with a null made every categorical operator fail in arrow (a 0 for the null rows of a boolean);
    it gets the ids, buckets and statistics of the same values as pandas' ``boolean``."""
    from tabloader.ops.data_stats import DataStats

    flags = [True, None, False, True]
    frames = {dtype: pd.DataFrame({"flag": pd.Series(flags, dtype=dtype), "y": [1, 0, 1, 1]})
              for dtype in ("boolean", "bool[pyarrow]")}
    graphs = {"Categorify": lambda: ["flag"] >> Categorify(), "HashBucket": lambda: ["flag"] >> HashBucket(10),
              "HashedCross": lambda: [("flag", "y")] >> HashedCross(10),
              "TargetEncoding": lambda: ["flag"] >> TargetEncoding("y", kfold=1),
              "JoinGroupby": lambda: ["flag"] >> JoinGroupby(), "DataStats": lambda: ["flag"] >> DataStats()}
    for name, graph in graphs.items():
        outputs, stats = [], []
        for frame in frames.values():
            wf = Workflow(graph(), progress=False).fit(tl.Dataset(frame, part_size=1))
            outputs.append(wf.transform(frame).iloc[:, 0].tolist())
            stats.append(wf.stat_nodes[0].op.stats_["flag"] if name == "DataStats" else None)
        assert outputs[0] == outputs[1] and stats[0] == stats[1], name
        if name == "DataStats":
            assert (stats[1]["nulls"], stats[1]["cardinality"]) == (1, 2)
        if name == "Categorify":
            assert outputs[1] == expected_ids(flags)[0]  # by hand: the null 1, then False and True by count
        if name == "HashBucket":
            assert outputs[1] == [0 if v is None else 1 + py_hash(v) % 9 for v in flags]


def test_categorify_wrong_dtype_error_names_op_column_dtype():
    df = pd.DataFrame({"t": pd.to_datetime(["2020-01-01", "2021-01-01"])})
    with pytest.raises(TypeError, match=r"Categorify.*'t'.*datetime64"):
        Workflow(["t"] >> Categorify(), progress=False).fit(df)
    with pytest.raises(TypeError, match=r"HashBucket.*'t'.*datetime64"):
        HashBucket(10).transform(["t"], df)


# --- hashing ------------------------------------------------------------------------------
def test_hash_bucket_matches_python_hash():
    df = sample_frame(100)
    out = HashBucket({"i": 17, "s": 5}).transform(["i", "s"], df)
    for col, nb in [("i", 17), ("s", 5)]:
        exp = [0 if is_null(v) else 1 + py_hash(v) % (nb - 1) for v in df[col].tolist()]
        assert out[col].tolist() == exp
    # same bucket whatever the integer width or nullability; integral floats too
    a = HashBucket(1000).transform(["c"], pd.DataFrame({"c": np.array([1, 5, 9], dtype=np.int32)}))
    b = HashBucket(1000).transform(["c"], pd.DataFrame({"c": [1.0, 5.0, 9.0]}))
    assert a["c"].tolist() == b["c"].tolist()


def test_integral_floats_at_the_64_bit_edges_get_the_buckets_of_the_same_integers():
    """HashBucket, HashedCross and Categorify's out-of-vocabulary buckets promise one bucket for an
    integer and the same value as an integral float: -2**63 and the floats in [2**63, 2**64) (uint64
    ids read as float64) got others."""
    signed = pd.Series([-(2**63), 2**63 - 1024, 7], dtype="Int64")
    unsigned = pd.Series([2**63, 2**63 + 2048, 2**64 - 2048], dtype="UInt64")
    tag = pd.Series([1, 2, 3])
    categorify = Workflow(["c"] >> Categorify(num_buckets=1000, vocabs={"c": [1]}), progress=False).fit(
        pd.DataFrame({"c": [1]}))
    for ints in (signed, unsigned):
        floats = ints.astype("float64")
        assert [int(v) for v in floats] == ints.tolist()  # exactly those integers
        ids = {}
        for name, column in (("int", ints), ("float", floats)):
            frame = pd.DataFrame({"c": column, "t": tag})
            ids[name] = (HashBucket(1001).transform(["c"], frame)["c"].tolist(),
                         HashedCross(1001).transform([("c", "t")], frame)["c_t"].tolist(),
                         categorify.transform(frame)["c"].tolist())
        expected = ([1 + py_hash(v) % 1000 for v in ints], [1 + py_cross([v, t]) % 1000 for v, t in zip(ints, tag)],
                    [2 + py_hash(v) % 1000 for v in ints])  # by hand, from the integers
        assert ids["int"] == ids["float"] == expected, ints.dtype


def test_hashed_cross_matches_python_hash_and_schema():
    df = pd.DataFrame({"a": pd.array([1, 2, None, None], dtype="Int64"), "b": ["x", "y", "z", None]})
    wf = Workflow([("a", "b")] >> HashedCross(101), progress=False).fit(df)
    out = wf.transform(df)
    exp = [1 + py_cross([a, b]) % 100 for a, b in zip(df["a"].tolist(), df["b"].tolist())]
    exp[3] = 0  # all components null
    assert out["a_b"].tolist() == exp
    col = wf.output_schema["a_b"]
    assert col.properties["cardinality"] == 101 and col.has_tag("categorical")


def test_hashing_dtype_too_narrow_for_num_buckets_is_refused_at_construction():
    with pytest.raises(ValueError, match=r"HashBucket: every column with num_buckets=1000 .* int8"):
        HashBucket(1000, dtype="int8")
    with pytest.raises(ValueError, match=r"HashBucket: column 'c' with num_buckets=300 .* uint8"):
        HashBucket({"b": 10, "c": 300}, dtype="uint8")
    with pytest.raises(ValueError, match=r"HashedCross: column 'a_b' with num_buckets=40000 .* int16"):
        HashedCross({"a_b": 40000}, dtype="int16")
    with pytest.raises(ValueError, match=r"HashedCross: dtype must be a numpy integer dtype"):
        HashedCross(10, dtype="float32")
    # the widest table each dtype holds: every id in range and equal to the Python hash
    df = pd.DataFrame({"a": np.arange(500), "b": [f"s{i % 37}" for i in range(500)]})
    for dtype, nb in [("int8", 128), ("uint8", 256)]:
        ids = HashBucket(nb, dtype=dtype).transform(["a"], df)["a"]
        assert ids.dtype == np.dtype(dtype)
        assert ids.tolist() == [1 + py_hash(v) % (nb - 1) for v in range(500)]
        crossed = HashedCross(nb, dtype=dtype).transform([("a", "b")], df)["a_b"]
        assert crossed.tolist() == [1 + py_cross([a, b]) % (nb - 1) for a, b in zip(df["a"], df["b"])]


# --- JoinGroupby --------------------------------------------------------------------------
def test_join_groupby_matches_pandas_and_partitions(tmp_path):
    df = sample_frame(600)
    df.loc[::7, "x"] = np.nan
    stats = ["count", "sum", "mean", "std", "var", "min", "max"]
    wf1, out1 = fit_transform(JoinGroupby(["x"], stats=stats), ["i", ("s", "j")], df)
    wf2, out2 = fit_transform(JoinGroupby(["x"], stats=stats), ["i", ("s", "j")], df, part_size=3000)
    pd.testing.assert_frame_equal(out1, out2, check_exact=False, rtol=1e-9)
    for keys, prefix in [(["i"], "i"), (["s", "j"], "s_j")]:
        # documented: a row with a null in any key column belongs to the one null group
        key = pd.Series([("null",) if any(is_null(v) for v in row) else row
                         for row in df[keys].itertuples(index=False, name=None)], index=df.index)
        grouped = df["x"].groupby(key)
        agg = grouped.agg(["sum", "mean", "std", "var", "min", "max"])
        exp = agg.loc[key].reset_index(drop=True)
        assert out1[f"{prefix}_count"].tolist() == key.map(key.value_counts()).tolist()
        for s in stats[1:]:
            np.testing.assert_allclose(out1[f"{prefix}_x_{s}"], exp[s], rtol=1e-9, equal_nan=True)
    wf1.save(str(tmp_path / "wf"))
    pd.testing.assert_frame_equal(Workflow.load(str(tmp_path / "wf")).transform(df), out1)
    unseen = wf1.transform(pd.DataFrame({"i": pd.array([999], dtype="Int64"), "s": ["zz"], "j": [0], "x": [1.0]}))
    assert unseen["i_count"].tolist() == [0] and np.isnan(unseen["i_x_mean"]).all()
    with pytest.raises(NotFittedError):
        JoinGroupby(["x"]).transform(["i"], df)
    with pytest.raises(TypeError, match="JoinGroupby.*'s'"):
        JoinGroupby(["s"]).fit_partial(["i"], df)


@pytest.mark.parametrize("stats", JOIN_GROUPBY_STATS)
def test_join_groupby_without_count_keeps_each_stat_under_its_name(stats):
    df = pd.DataFrame({"c": ["a", "a", "b", "b", "b", "c"], "x": [1.0, 3.0, 5.0, 6.0, 10.0, 2.0],
                       "y": [0.5, 0.5, 1.0, 4.0, 9.0, 7.0]})
    _, out = fit_transform(JoinGroupby(["x", "y"], stats=stats), ["c"], df, part_size=100)
    expected_names = (["c_count"] if "count" in stats else []) + \
        [f"c_{col}_{s}" for col in ["x", "y"] for s in stats if s != "count"]
    assert out.columns.tolist() == expected_names
    counts = df.groupby("c")["x"].size()
    for col in ["x", "y"]:
        agg = df.groupby("c")[col].agg(["sum", "mean", "std", "var", "min", "max"])
        for s in stats:
            if s == "count":
                assert out["c_count"].tolist() == counts.loc[df["c"]].tolist()
            else:
                np.testing.assert_allclose(out[f"c_{col}_{s}"], agg.loc[df["c"], s].to_numpy(), rtol=1e-12)


# --- TargetEncoding -----------------------------------------------------------------------
def expected_te(df, key, target, kfold, p, seed=42):
    folds = fold_of(df.index, kfold, seed)
    keys = df[key].astype(object).where(df[key].notna(), "__null__").to_numpy()
    y = df[target].to_numpy(float)
    gm = y.mean()
    out = []
    for i in range(len(df)):
        m = keys == keys[i]
        if kfold > 1:
            m &= folds != folds[i]
        out.append((y[m].sum() + p * gm) / (m.sum() + p))
    return np.array(out)


@pytest.mark.parametrize("kfold", TARGET_ENCODING_KFOLDS)
def test_target_encoding_matches_manual(kfold, tmp_path):
    df = sample_frame(300)
    wf1, out1 = fit_transform(TargetEncoding("label", kfold=kfold, p_smooth=10), ["i", "s"], df)
    wf2, out2 = fit_transform(TargetEncoding("label", kfold=kfold, p_smooth=10), ["i", "s"], df, part_size=2000)
    pd.testing.assert_frame_equal(out1, out2, check_exact=False, rtol=1e-6)
    for key in ["i", "s"]:
        np.testing.assert_allclose(out1[f"TE_{key}_label"], expected_te(df, key, "label", kfold, 10), rtol=1e-5)
        assert out1[f"TE_{key}_label"].dtype == np.float32
    wf1.save(str(tmp_path / "wf"))
    pd.testing.assert_frame_equal(Workflow.load(str(tmp_path / "wf")).transform(df), out1)
    full = full_data_workflow(wf1).transform(df)
    np.testing.assert_allclose(full["TE_i_label"], expected_te(df, "i", "label", 1, 10), rtol=1e-5)


def test_target_encoding_unseen_and_not_fitted():
    df = pd.DataFrame({"c": [1, 1, 2], "label": [1.0, 0.0, 1.0]})
    wf = Workflow(["c"] >> TargetEncoding(kfold=1, p_smooth=1), progress=False).fit(df)
    out = wf.transform(pd.DataFrame({"c": [5], "label": [0.0]}))
    assert out["TE_c_label"].tolist() == pytest.approx([2 / 3])
    with pytest.raises(NotFittedError):
        TargetEncoding().transform(["c"], df)


# --- distributed --------------------------------------------------------------------------
def _all_ops_workflow():
    return Workflow((["i", "s", ("i", "j")] >> Categorify(num_buckets=3, freq_threshold=2))
                    + (["i"] >> JoinGroupby(["x"], stats=["count", "mean", "std"]))
                    + (["s"] >> TargetEncoding("label"))
                    + ([("i", "s")] >> HashedCross(50)), progress=False)


@pytest.mark.parametrize("processes", [False, True])
def test_local_cluster_gives_identical_results(processes):
    distributed = pytest.importorskip("distributed")
    df = sample_frame(800)
    ds = tl.Dataset(df, part_size=4000)
    expected = _all_ops_workflow().fit(ds).transform(df)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=processes,
                                  dashboard_address=None) as cluster, distributed.Client(cluster):
        wf = _all_ops_workflow().fit(ds)
        got = wf.transform(ds).compute()
    pd.testing.assert_frame_equal(got, expected, check_exact=False, rtol=1e-9)


def test_encoded_schema_drops_raw_value_properties():
    frame = pd.DataFrame({"c": [10, 20, 20, 30, 30, 30]})
    schema = tl.Schema([tl.ColumnSchema("c", "int64", {"categorical"}, {"domain": {"min": 10, "max": 30},
                                                                         "max_distinct": 3, "note": "kept"})])
    wf = Workflow(["c"] >> Categorify(), progress=False).fit(tl.Dataset(frame, schema=schema))
    props = wf.output_schema["c"].properties
    cardinality = 2 + 1 + 3  # null, one OOV bucket, three values
    assert props["cardinality"] == cardinality
    assert props["domain"] == {"min": 0, "max": cardinality - 1}
    assert "max_distinct" not in props and props["note"] == "kept"


@pytest.mark.parametrize("make, message", [
    (lambda: tl.ops.Categorify(num_buckets=0), "Categorify: num_buckets must be an integer >= 1, got 0"),
    (lambda: tl.ops.Categorify(num_buckets={"a": True}), "Categorify: num_buckets must be an integer >= 1, got True"),
    (lambda: tl.ops.HashBucket(1), "HashBucket: num_buckets must be an integer >= 2 (bucket 0 is for nulls), got 1"),
    (lambda: tl.ops.HashedCross({"a_b": 2.5}), "HashedCross: num_buckets must be an integer >= 2"),
])
def test_bad_num_buckets_are_refused_naming_operator_and_minimum(make, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        make()


def test_a_lookup_built_on_one_gpu_is_not_handed_to_work_on_another(monkeypatch):
    """Lookups live on the GPU they were built on: work on another GPU builds its own, work
    back on the first finds it again, and host lookups never ask CUDA. (A stand-in encoding
    module named as the GPU one, and the current GPU patched: this machine has none.)"""
    import types

    from tabloader.encoding import cpu as cpu_encoding
    from tabloader.ops.base import lookup_key

    op = Categorify()
    fit_transform(op, ["a"], pd.DataFrame({"a": ["x", "y", "x"]}))
    current, built, asked = [0], [], []
    monkeypatch.setattr(backend, "current_gpu", lambda on_gpu=True: asked.append(on_gpu) or (current[0] if on_gpu else None))
    gpu = types.SimpleNamespace(__name__="tabloader.encoding.gpu",
                                ValueLookup=lambda keys, op, what: built.append(current[0]) or object())
    lookups = []
    for device in (0, 1, 0, 1):
        current[0] = device
        lookups.append(op.encoders(["a"], gpu)[0][3])
    assert built == [0, 1] and lookups[0] is lookups[2] and lookups[1] is lookups[3] and lookups[0] is not lookups[1]
    asked.clear()
    op.encoders(["a"], cpu_encoding)
    assert asked == [False]
    assert lookup_key(types.SimpleNamespace(__name__="cupy"), "p") == ("cupy", 1, "p")
