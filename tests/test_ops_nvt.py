"""NVTabular operators and parameters (issue 17, part 3) and ids back to values (part 4),
against independent pandas / numpy computations."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tabloader as tl
from tabloader import ops


def write_parquet(tmp_path, table: pa.Table, name: str = "data.parquet") -> str:
    """A parquet file written by pyarrow without pandas metadata (as Spark or polars write them)."""
    path = str(tmp_path / name)
    pq.write_table(table.replace_schema_metadata(None), path)
    return path


def plain(values):
    """Python values with every missing value (None, NA, NaN) as None, lists as lists."""
    def one(v):
        if isinstance(v, (list, np.ndarray)):
            return [one(e) for e in v]
        return None if v is None or v is pd.NA or (isinstance(v, float) and v != v) else v
    return [one(v) for v in values]


def reference_vocabulary(values, freq_threshold=0):
    """(value, id, count) rows by hand: descending count, ties by value, ids after 2 + 1 bucket."""
    counts = pd.Series([v for v in values if v is not None]).value_counts()
    rows = sorted(((v, c) for v, c in counts.items() if c >= freq_threshold), key=lambda vc: (-vc[1], vc[0]))
    return [(v, 3 + i, c) for i, (v, c) in enumerate(rows)]


# --- part 4: ids back to values ------------------------------------------------------------
def categorical_table() -> pa.Table:
    return pa.table({
        "s": pa.array(["b", "a", "b", None, "c", "b", "a", "d"]),
        "i": pa.array([7, 7, None, 9, 9, 9, 12, 7], pa.int64()),
        "l": pa.array([["x", "y"], None, [], ["y", None], ["y"], ["z", "x"], ["x"], ["y"]]),
        "y": pa.array([1, 0, 1, 0, 1, 0, 1, 0], pa.int32()),
    })


def test_vocabulary_table_is_the_contract(tmp_path):
    path = write_parquet(tmp_path, categorical_table())
    op = ops.Categorify()
    tl.Workflow(["s", "i"] >> op, progress=False).fit(tl.Dataset(path))
    for col in ["s", "i"]:
        values = [None if v is None else v for v in pq.read_table(path)[col].to_pylist()]
        table = op.vocabulary_table(col)
        assert list(table.columns) == ["value", "id", "count"]
        assert list(table.itertuples(index=False, name=None)) == reference_vocabulary(values)
    exported = op.export_vocabularies(str(tmp_path / "vocab"))
    assert sorted(os.listdir(tmp_path / "vocab")) == ["i.parquet", "s.parquet"]
    assert pd.read_parquet(exported["s"]).to_dict("list") == op.vocabulary_table("s").to_dict("list")
    with pytest.raises(KeyError, match="encodes no column 'y'"):
        op.vocabulary_table("y")


def test_a_combination_with_a_column_named_id_keeps_its_values_in_the_table(tmp_path):
    frame = pd.DataFrame({"id": [10, 10, 20, 30], "country": ["no", "no", "se", "dk"]})
    op = ops.Categorify(encode_type="combo")
    tl.Workflow([("id", "country")] >> op, progress=False).fit(frame)
    table = op.vocabulary_table("id_country")
    assert table.to_dict("list") == {"id": [10, 20, 30], "country": ["no", "se", "dk"], "_id": [3, 4, 5],
                                     "count": [2, 1, 1]}
    exported = op.export_vocabularies(str(tmp_path / "vocab"))
    assert pd.read_parquet(exported["id_country"]).to_dict("list") == table.to_dict("list")


def test_inverse_transform_maps_reserved_ids_to_sentinels(tmp_path):
    path = write_parquet(tmp_path, categorical_table())
    op = ops.Categorify(freq_threshold=2)
    wf = tl.Workflow((["s", "i", "l"] >> op) + ["y"], progress=False)
    out = wf.fit_transform(tl.Dataset(path)).compute()
    raw = pq.read_table(path).to_pydict()
    values = {"s": raw["s"], "i": raw["i"], "l": [e for r in raw["l"] if r for e in r]}  # lists: their elements
    kept = {c: {v for v, *_ in reference_vocabulary(vals, freq_threshold=2)} for c, vals in values.items()}

    def expect(v, col, oov):
        return None if v is None else (v if v in kept[col] else oov)

    back = wf.inverse_transform(out)  # every reserved id gives a missing value by default
    assert plain(back["s"]) == [expect(v, "s", None) for v in raw["s"]]
    strings = op.inverse_transform(out[["s", "l"]], oov="<OOV>")
    assert plain(strings["s"]) == [expect(v, "s", "<OOV>") for v in raw["s"]]
    assert plain(strings["l"]) == \
        [None if r is None else [expect(e, "l", "<OOV>") for e in r] for r in raw["l"]]
    ints = op.inverse_transform(out[["i"]], oov=-1)
    assert plain(ints["i"]) == [expect(v, "i", -1) for v in raw["i"]]
    assert back.columns.tolist() == ["s", "i", "l", "y"] and back["y"].tolist() == raw["y"]


def test_inverse_transform_padding_and_bad_ids():
    op = ops.Categorify()
    wf = tl.Workflow(["c"] >> op, progress=False)
    wf.fit(pd.DataFrame({"c": ["a", "a", "b"]}))  # a -> 3, b -> 4, cardinality 5
    ids = pd.DataFrame({"c": [0, 1, 2, 3, 4]})
    assert plain(op.inverse_transform(ids, padding="<PAD>", oov="<OOV>")["c"]) == ["<PAD>", None, "<OOV>", "a", "b"]
    with pytest.raises(ValueError, match=r"column 'c' holds id 5, outside the encoding's range \[0, 5\)"):
        op.inverse_transform(pd.DataFrame({"c": [3, 5]}))
    with pytest.raises(ValueError, match="oov sentinel -1 cannot stand among the values of column 'c'"):
        op.inverse_transform(ids, oov=-1)


def test_inverse_transform_joint_and_combo_groups():
    df = pd.DataFrame({"a": ["x", "y", "x", None], "b": ["y", "y", "z", "x"], "u": [1, 2, 1, 2], "v": [5, 5, 5, 6]})
    joint, combo = ops.Categorify(), ops.Categorify(encode_type="combo")
    wf = tl.Workflow(([("a", "b")] >> joint) + ([("u", "v")] >> combo), progress=False)
    out = wf.fit_transform(df)
    assert out.columns.tolist() == ["a", "b", "u_v"]
    shared = reference_vocabulary(df["a"].tolist() + df["b"].tolist())
    assert list(joint.vocabulary_table("a_b").itertuples(index=False, name=None)) == shared
    pairs = combo.vocabulary_table("u_v")
    assert pairs.columns.tolist() == ["u", "v", "id", "count"]
    assert list(pairs.itertuples(index=False, name=None)) == [(1, 5, 3, 2), (2, 5, 4, 1), (2, 6, 5, 1)]
    back = wf.inverse_transform(out)
    assert back.columns.tolist() == ["a", "b", "u", "v"]
    for col in ["a", "b", "u", "v"]:
        assert plain(back[col]) == plain(df[col])


def test_inverse_transform_after_save_load_and_of_changed_columns(tmp_path):
    df = pd.DataFrame({"c": ["p", "q", "p"], "d": ["r", "s", "s"]})
    wf = tl.Workflow((["c"] >> ops.Categorify()) + (["d"] >> ops.Categorify() >> ops.LambdaOp(np.negative)),
                     progress=False)
    out = wf.fit_transform(df)
    wf.save(str(tmp_path / "wf"))
    loaded = tl.Workflow.load(str(tmp_path / "wf"), trusted=[np.negative])
    back = loaded.inverse_transform(out)
    assert back["c"].tolist() == ["p", "q", "p"]
    assert back["d"].tolist() == out["d"].tolist()  # a later operator changed them: not ids of a vocabulary
    assert loaded.output_node.parents[0].op.vocabulary_table("c")["value"].tolist() == ["p", "q"]


# --- part 3: graph API ---------------------------------------------------------------------
def negate(col):
    return -col


def keep_even_rows(df):
    return df[df["x"] % 2 == 0]


def shuffled_copy(df):
    return df.iloc[::-1].assign(extra=1)


def not_rows(df):
    return df.reset_index(drop=True).iloc[:1].set_axis([99])


def test_pick_columns_and_function_on_the_right_of_shift(tmp_path):
    df = pd.DataFrame({"x": [1.0, -2.0, 3.0], "y": [4.0, 5.0, None], "z": [7, 8, 9]})
    filled = ["x", "y"] >> ops.FillMissing(0)
    graph = (filled["y"] >> negate) + filled[["x"]] + ["z"]
    wf = tl.Workflow(graph, progress=False)
    out = wf.fit_transform(df)
    assert out.columns.tolist() == ["y", "x", "z"]
    assert out["y"].tolist() == [-4.0, -5.0, -0.0] and out["x"].tolist() == [1.0, -2.0, 3.0]
    wf.save(str(tmp_path / "wf"))
    loaded = tl.Workflow.load(str(tmp_path / "wf"), trusted=[negate])
    pd.testing.assert_frame_equal(loaded.transform(df), out)
    with pytest.raises(KeyError, match=r'w.*picked from \["x", "y"\] >> FillMissing, which gives'):
        tl.Workflow(filled["w"], progress=False).fit(df)
    with pytest.raises(TypeError, match="node\\[...\\] takes a column name or a list of names"):
        filled[[1]]


def test_lambdaop_properties_reach_the_schema_and_survive_save(tmp_path):
    df = pd.DataFrame({"x": [1, 2]})
    wf = tl.Workflow(["x"] >> ops.LambdaOp(negate, properties={"domain": {"min": -9, "max": 0}}), progress=False)
    wf.fit(df)
    assert wf.output_schema["x"].properties["domain"] == {"min": -9, "max": 0}
    wf.save(str(tmp_path / "wf"))
    assert tl.Workflow.load(str(tmp_path / "wf"), trusted=[negate]).output_schema["x"].properties["domain"] == \
        {"min": -9, "max": 0}
    with pytest.raises(TypeError, match="properties must be a dict"):
        ops.LambdaOp(negate, properties=["domain"])


def test_filter_with_a_function_returning_a_dataframe(tmp_path):
    path = write_parquet(tmp_path, pa.table({"x": pa.array([4, 1, 2, 7, 6], pa.int64()),
                                             "y": pa.array(["a", "b", "c", "d", "e"])}))
    wf = tl.Workflow(["x", "y"] >> ops.Filter(keep_even_rows), progress=False)
    out = wf.fit_transform(tl.Dataset(path)).compute()
    raw = pd.read_parquet(path)
    expected = raw[[v % 2 == 0 for v in raw["x"]]]
    assert out["x"].tolist() == expected["x"].tolist() and out["y"].tolist() == expected["y"].tolist()
    # rows come back in input order, with the input's values, whatever order f returns them in
    frame = pd.DataFrame({"x": [1, 2, 3]})
    assert ops.Filter(shuffled_copy).transform(["x"], frame)["x"].tolist() == [1, 2, 3]
    with pytest.raises(ValueError, match="index is not a subset of the input rows' labels"):
        ops.Filter(not_rows).transform(["x"], frame)


# --- part 3: numeric operators on list columns ----------------------------------------------
def list_table() -> pa.Table:
    return pa.table({"l": pa.array([[1.0, 3.0], None, [], [None, 7.0], [2.0]], pa.list_(pa.float64())),
                     "x": pa.array([1.0, 2.0, 3.0, 4.0, 5.0])})


def elementwise_reference(rows, f):
    return [None if r is None else [float("nan") if e is None else f(e) for e in r] for r in rows]


def assert_lists_close(actual, expected):
    assert len(actual) == len(expected)
    for a, e in zip(plain(actual), expected):
        if e is None:
            assert a is None
        else:
            np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(e, dtype=float), rtol=1e-6)


@pytest.mark.parametrize("part_size", ["128MB", 100])
def test_log_normalize_minmax_on_list_columns(tmp_path, part_size):
    path = write_parquet(tmp_path, list_table())
    rows = pq.read_table(path)["l"].to_pylist()
    elements = np.array([e for r in rows if r for e in r if e is not None])
    mean, std = np.log1p(elements).mean(), np.log1p(elements).std()
    lo, hi = elements.min(), elements.max()
    graph = ((["l"] >> ops.LogOp >> ops.Normalize(out_dtype="float64"))
             + (["l"] >> ops.NormalizeMinMax(out_dtype="float64") >> ops.Rename(postfix="_mm")) + ["x"])
    wf = tl.Workflow(graph, progress=False)
    ds = tl.Dataset(path, part_size=part_size)
    out = wf.fit_transform(ds).compute()
    assert_lists_close(out["l"], elementwise_reference(rows, lambda e: (np.log1p(e) - mean) / std))
    assert_lists_close(out["l_mm"], elementwise_reference(rows, lambda e: (e - lo) / (hi - lo)))
    assert wf.output_schema["l"].is_list and out["x"].tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]
    wf.save(str(tmp_path / "wf"))
    again = tl.Workflow.load(str(tmp_path / "wf")).transform(pd.read_parquet(path))
    assert_lists_close(again["l"], elementwise_reference(rows, lambda e: (np.log1p(e) - mean) / std))


def test_list_of_strings_is_refused_by_numeric_operators():
    frame = pd.DataFrame({"l": [["a"], ["b", "c"]]})
    with pytest.raises(TypeError, match="LogOp needs numeric columns, but column 'l' has dtype"):
        ops.LogOp().transform(["l"], frame)


# --- part 3: embedding sizes ------------------------------------------------------------------
def test_get_embedding_sizes_of_a_workflow(tmp_path):
    path = write_parquet(tmp_path, categorical_table())
    raw = pq.read_table(path).to_pydict()
    wf = tl.Workflow((["s", "l"] >> ops.Categorify()) + (["i"] >> ops.HashBucket(50)) + ["y"], progress=False)
    wf.fit(tl.Dataset(path))
    distinct_s = len({v for v in raw["s"] if v is not None})
    distinct_l = len({e for r in raw["l"] if r for e in r if e is not None})

    def by_hand(card):
        return card, min(512, max(1, round(1.6 * card ** 0.56)))

    expected = {"s": by_hand(3 + distinct_s), "l": by_hand(3 + distinct_l), "i": by_hand(50)}
    assert ops.get_embedding_sizes(wf) == expected
    assert ops.get_embedding_sizes(wf, multi_hot=True) == {"l": expected["l"]}
    assert ops.get_embedding_sizes(wf.output_schema, multi_hot=False) == {"s": expected["s"], "i": expected["i"]}
    with pytest.raises(TypeError, match="takes a fitted Workflow or a Schema, got dict"):
        ops.get_embedding_sizes({})


# --- part 3: Groupby --------------------------------------------------------------------------
def sessions_table() -> pa.Table:
    return pa.table({
        "session": pa.array([3, 1, 3, 2, 1, 3, None, 2, 1], pa.int64()),
        "t": pa.array([5, 2, 1, 9, 7, 3, 0, 4, 2], pa.int64()),
        "item": pa.array(["c", "a", "d", None, "b", "e", "z", "f", "g"]),
        "price": pa.array([1.0, 2.0, None, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]),
    })


def sessions_by_hand(table: pa.Table) -> dict:
    """Per session (sorted), the rows sorted by t (ties in input order): lists and reductions by hand."""
    rows = sorted((r for r in table.to_pylist() if r["session"] is not None), key=lambda r: r["t"])
    out = {}
    for r in rows:
        out.setdefault(r["session"], []).append(r)
    result = {"session": [], "item_list": [], "item_first": [], "item_last": [], "price_sum": [],
              "price_mean": [], "price_count": [], "t_max": []}
    for key in sorted(out):
        group = out[key]
        prices = [r["price"] for r in group if r["price"] is not None]
        result["session"].append(key)
        result["item_list"].append([r["item"] for r in group])
        result["item_first"].append(group[0]["item"])
        result["item_last"].append(group[-1]["item"])
        result["price_sum"].append(sum(prices))
        result["price_mean"].append(sum(prices) / len(prices))
        result["price_count"].append(len(prices))
        result["t_max"].append(max(r["t"] for r in group))
    return result


def test_groupby_sessions_match_a_computation_by_hand(tmp_path):
    path = write_parquet(tmp_path, sessions_table())
    op = ops.Groupby("session", sort_cols=["t"], aggs={"item": ["list", "first", "last"],
                                                       "price": ["sum", "mean", "count"], "t": "max"})
    wf = tl.Workflow(["session", "t", "item", "price"] >> op, progress=False)
    out = wf.fit_transform(tl.Dataset(path)).compute()
    expected = sessions_by_hand(pq.read_table(path))
    assert out.columns.tolist() == list(expected)
    for col, values in expected.items():
        assert plain(out[col]) == values, col
    assert wf.output_schema["item_list"].is_list and not wf.output_schema["item_first"].is_list
    wf.save(str(tmp_path / "wf"))
    again = tl.Workflow.load(str(tmp_path / "wf")).transform(pd.read_parquet(path))
    assert plain(again["item_list"]) == expected["item_list"]


def test_groupby_lists_of_encoded_ids_keep_their_cardinality(tmp_path):
    """item_list and item_last hold item's ids: the embedding sizes (and the torch configs) come
    from the Categorify's cardinality they keep."""
    path = write_parquet(tmp_path, sessions_table())
    items = ["item"] >> ops.Categorify()
    graph = (["session", "t"] + items) >> ops.Groupby("session", sort_cols=["t"], aggs={"item": ["list", "last"]})
    wf = tl.Workflow(graph, progress=False).fit(tl.Dataset(path))
    cardinality = wf.output_schema["item_list"].properties["cardinality"]
    assert cardinality == len(set(sessions_table().column("item").to_pylist()) - {None}) + 3  # padding, null, a bucket
    assert wf.output_schema["item_last"].properties["cardinality"] == cardinality
    assert ops.get_embedding_sizes(wf)["item_list"][0] == cardinality


def test_groupby_default_lists_every_column_and_checks_arguments():
    frame = pd.DataFrame({"k": ["b", "a", "b"], "v": [1, 2, 3], "w": [0.5, 1.5, 2.5]})
    out = ops.Groupby("k").transform(["k", "v", "w"], frame)
    assert out.columns.tolist() == ["k", "v_list", "w_list"] and plain(out["v_list"]) == [[2], [1, 3]]
    assert plain(out["w_list"]) == [[1.5], [0.5, 2.5]] and out["k"].tolist() == ["a", "b"]
    with pytest.raises(ValueError, match=r"unknown aggregation\(s\) \['median'\] for 'v'"):
        ops.Groupby("k", aggs={"v": "median"})
    with pytest.raises(KeyError, match="not selected"):
        tl.Workflow(["v"] >> ops.Groupby("k"), progress=False).fit(frame)


# --- part 3: JoinExternal -----------------------------------------------------------------------
def side_table() -> pa.Table:
    return pa.table({"item": pa.array([1, 2, 3, 9], pa.int64()), "price": pa.array([9.5, 3.0, None, 1.0]),
                     "brand": pa.array(["x", "y", "z", None]), "stock": pa.array([5, 0, 7, 2], pa.int64())})


def joined_by_hand(rows, side_rows, how):
    by_key = {r["item"]: r for r in side_rows}
    out = []
    for r in rows:
        match = by_key.get(r["item"])
        if match is None and how == "inner":
            continue
        out.append({**r, **{c: (match or {}).get(c) for c in ["price", "brand", "stock"]}})
    return out


@pytest.mark.parametrize("how", ["left", "inner"])
def test_join_external_from_parquet_saves_the_side_table_inside_the_workflow(tmp_path, how):
    data = pa.table({"item": pa.array([3, 1, 4, None, 1], pa.int64()), "qty": pa.array([1, 2, 3, 4, 5], pa.int64())})
    data_path = write_parquet(tmp_path, data)
    side_path = write_parquet(tmp_path, side_table(), "side.parquet")
    wf = tl.Workflow(["item", "qty"] >> ops.JoinExternal(side_path, on="item", how=how), progress=False)
    out = wf.fit_transform(tl.Dataset(data_path)).compute()
    expected = joined_by_hand(data.to_pylist(), side_table().to_pylist(), how)
    assert out.columns.tolist() == ["item", "qty", "price", "brand", "stock"]
    assert {c: plain(out[c]) for c in out.columns} == {c: [r[c] for r in expected] for c in out.columns}
    assert str(out["stock"].dtype) == "Int64"  # a missing match is a null, not a float
    wf.save(str(tmp_path / "wf"))
    os.remove(side_path)  # the saved workflow does not need it: the table is state inside its directory
    saved = (tmp_path / "wf" / "workflow.json").read_text()
    assert "side.parquet" not in saved
    again = tl.Workflow.load(str(tmp_path / "wf")).transform(pd.read_parquet(data_path))
    assert {c: plain(again[c]) for c in again.columns} == {c: [r[c] for r in expected] for c in out.columns}


def test_join_external_refuses_a_saved_path_and_bad_tables(tmp_path):
    import json

    side = side_table().to_pandas()
    frame = pd.DataFrame({"item": [1, 2]})
    tl.Workflow(["item"] >> ops.JoinExternal(side, on="item", columns_ext=["price"]), progress=False) \
        .fit(frame).save(str(tmp_path / "wf"))
    doc = json.loads((tmp_path / "wf" / "workflow.json").read_text())
    outside = write_parquet(tmp_path, side_table(), "outside.parquet")
    for node in doc["nodes"]:
        if node["kind"] == "op":
            node["op"]["config"]["df_ext"] = outside
    (tmp_path / "wf" / "workflow.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="a config naming one .*outside.parquet.* is refused"):
        tl.Workflow.load(str(tmp_path / "wf"))
    with pytest.raises(ValueError, match=r"key \[2\] of \['item'\] appears more than once"):
        ops.JoinExternal(pd.DataFrame({"item": [2, 2], "v": [1, 2]}), on="item")
    deduped = ops.JoinExternal(pd.DataFrame({"item": [2, 2], "v": [1, 2]}), on="item", drop_duplicates_ext=True)
    assert plain(deduped.transform(["item"], frame)["v"]) == [None, 1]
    with pytest.raises(KeyError, match=r"lacks column\(s\) \['sku'\]"):
        ops.JoinExternal(side, on="item", on_ext="sku")
    with pytest.raises(ValueError, match="side column\\(s\\) \\['price'\\] have the names of selected columns"):
        tl.Workflow(["item", "price"] >> ops.JoinExternal(side, on="item"), progress=False).fit(
            pd.DataFrame({"item": [1], "price": [2.0]}))


# --- part 3: DropLowCardinality ----------------------------------------------------------------
def test_drop_low_cardinality_keeps_columns_with_enough_distinct_values(tmp_path):
    table = pa.table({"const": pa.array(["k"] * 6), "pair": pa.array(["a", "b", "a", "b", None, "a"]),
                      "many": pa.array([1, 2, 3, 4, 5, 6], pa.int64()), "x": pa.array([0.5] * 6)})
    path = write_parquet(tmp_path, table)
    raw = pq.read_table(path).to_pydict()
    distinct = {c: len({v for v in raw[c] if v is not None}) for c in ["const", "pair", "many"]}
    cats = ["const", "pair", "many"] >> ops.Categorify(freq_threshold={"many": 2})
    wf = tl.Workflow((cats + ["x"]) >> ops.DropLowCardinality(min_cardinality=2), progress=False)
    out = wf.fit_transform(tl.Dataset(path)).compute()
    # "many" has 6 distinct values but none seen twice: freq_threshold leaves it no vocabulary
    kept = [c for c in ["const", "pair", "many", "x"] if c == "x" or (c != "many" and distinct[c] >= 2)]
    assert out.columns.tolist() == kept == wf.output_schema.column_names
    wf.save(str(tmp_path / "wf"))
    assert tl.Workflow.load(str(tmp_path / "wf")).transform(pd.read_parquet(path)).columns.tolist() == kept
    wide = tl.Workflow(["const", "pair"] >> ops.Categorify() >> ops.DropLowCardinality(min_cardinality=1),
                       progress=False)
    assert wide.fit_transform(pd.read_parquet(path)).columns.tolist() == ["const", "pair"]


# --- part 3: DataStats ------------------------------------------------------------------------
def test_data_stats_over_partitions_match_pandas(tmp_path):
    rng = np.random.default_rng(3)
    for k in range(3):  # three files: three partitions, merged
        n = 50
        x = rng.normal(2.0, 3.0, n)
        x[rng.random(n) < 0.2] = np.nan
        write_parquet(tmp_path, pa.table({
            "x": pa.array(x), "i": pa.array(rng.integers(0, 9 + k, n), pa.int64()),
            "s": pa.array([None if v == 0 else f"s{v}" for v in rng.integers(0, 5, n)]),
            "l": pa.array([list(rng.integers(0, 4, rng.integers(0, 3))) for _ in range(n)], pa.list_(pa.int64())),
        }), f"part{k}.parquet")
    op = ops.DataStats()
    wf = tl.Workflow((["x", "i", "s", "l"] >> op), progress=False)
    ds = tl.Dataset(str(tmp_path), part_size=1)  # a row group per partition
    assert ds.npartitions == 3
    out = wf.fit_transform(ds).compute()
    raw = pd.concat([pq.read_table(tmp_path / f"part{k}.parquet").to_pandas() for k in range(3)], ignore_index=True)
    np.testing.assert_array_equal(out["x"].to_numpy(), raw["x"].to_numpy())  # the data passes unchanged
    x = raw["x"].dropna()
    stats = op.stats_
    assert stats["x"]["rows"] == 150 and stats["x"]["nulls"] == int(raw["x"].isna().sum())
    assert stats["x"]["null_fraction"] == pytest.approx(raw["x"].isna().mean())
    assert stats["x"]["mean"] == pytest.approx(x.mean()) and stats["x"]["std"] == pytest.approx(x.std(ddof=1))
    assert (stats["x"]["min"], stats["x"]["max"]) == (x.min(), x.max()) and stats["x"]["cardinality"] is None
    assert stats["i"]["cardinality"] == raw["i"].nunique() and stats["i"]["max"] == raw["i"].max()
    assert stats["s"]["cardinality"] == raw["s"].nunique() and stats["s"]["mean"] is None
    elements = [e for r in raw["l"] for e in r]
    assert stats["l"]["rows"] == len(elements) and stats["l"]["cardinality"] == len(set(elements))
    assert op.to_frame().loc["i", "cardinality"] == raw["i"].nunique()
    # the schema's names, the same for pandas and cuDF columns (str(dtype) differs between them)
    assert {c: stats[c]["dtype"] for c in "xisl"} == {"x": "float64", "i": "int64", "s": "string", "l": "list<int64>"}
    wf.save(str(tmp_path / "wf"))
    loaded = tl.Workflow.load(str(tmp_path / "wf"))
    assert loaded.output_node.op.stats_ == stats


# --- part 3: derived columns as dependencies ---------------------------------------------------
def is_positive(col):
    return (col > 0).astype("int64")


def test_target_encoding_target_and_join_groupby_cont_cols_as_nodes(tmp_path):
    table = pa.table({"c": pa.array(["a", "b", "a", "b", "a", "c"]), "clicks": pa.array([3, 0, 0, 5, 2, 0], pa.int64()),
                      "x": pa.array([1.0, 3.0, 7.0, 0.0, 15.0, 2.0])})
    path = write_parquet(tmp_path, table)
    raw = pq.read_table(path).to_pandas()
    target = ["clicks"] >> ops.LambdaOp(is_positive)
    logs = ["x"] >> ops.LogOp
    graph = (["c"] >> ops.TargetEncoding(target, kfold=1, p_smooth=0)) \
        + (["c"] >> ops.JoinGroupby(cont_cols=logs, stats=["sum"]))
    wf = tl.Workflow(graph, progress=False)
    out = wf.fit_transform(tl.Dataset(path)).compute()
    positive = (raw["clicks"] > 0).astype(float)
    mean_by_c = positive.groupby(raw["c"]).mean()
    log_sum_by_c = np.log1p(raw["x"]).groupby(raw["c"]).sum()
    assert out.columns.tolist() == ["TE_c_clicks", "c_x_sum"]
    np.testing.assert_allclose(out["TE_c_clicks"], raw["c"].map(mean_by_c), rtol=1e-6)
    np.testing.assert_allclose(out["c_x_sum"], raw["c"].map(log_sum_by_c), rtol=1e-6)
    assert wf.input_columns == ["c", "clicks", "x"]
    wf.save(str(tmp_path / "wf"))
    loaded = tl.Workflow.load(str(tmp_path / "wf"), trusted=[is_positive])
    pd.testing.assert_frame_equal(loaded.transform(raw), out.reset_index(drop=True), check_dtype=False)


def test_join_external_takes_a_side_table_pandas_wrote_with_its_key_as_index(tmp_path):
    """A side table written after ``set_index`` (or a groupby): pandas' metadata would make an
    index of the key column; it is a column like the others."""
    side = pd.DataFrame({"item": [3, 1, 8], "price": [2.5, 9.0, 1.0]}).set_index("item")  # not a range: a column
    side.to_parquet(tmp_path / "side.parquet")
    data = pd.DataFrame({"item": [1, 3, 1, 7], "qty": [1, 2, 3, 4]})
    wf = tl.Workflow(["item", "qty"] >> ops.JoinExternal(str(tmp_path / "side.parquet"), on="item"), progress=False)
    out = wf.fit_transform(tl.Dataset(data)).compute()
    assert out.columns.tolist() == ["item", "qty", "price"]
    assert plain(out["price"]) == [9.0, 2.5, 9.0, None]
