"""Workflow engine: graph composition, phased fit, transform of every input kind, save/load.

The engine tests use the tiny operators of ``workflow_test_ops`` (module level, importable by
worker processes), so they do not depend on the concrete operators; the end-to-end Criteo test
at the bottom uses those and compares with an independent pandas/numpy computation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, os.path.dirname(__file__))  # `workflow_test_ops` must import by that name anywhere

import workflow_test_ops as T  # noqa: E402

from tabloader import backend, ops  # noqa: E402
from tabloader.dataset import Dataset  # noqa: E402
from tabloader.graph import ColumnSelector, Node  # noqa: E402
from tabloader.ops.base import NotFittedError, Operator, flatten_columns  # noqa: E402
from tabloader.schema import ColumnSchema, Schema, Tags  # noqa: E402
from tabloader.registry import UntrustedError, function_name, register_operator  # noqa: E402
from tabloader.saved_workflow import WORKFLOW_FILE, WORKFLOW_FORMAT_VERSION  # noqa: E402
from tabloader.workflow import Workflow  # noqa: E402


# --- fixtures ---------------------------------------------------------------------------------
def make_frame(n: int = 200, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "a": rng.normal(3.0, 2.0, n),
        "b": rng.exponential(5.0, n),
        "c": rng.integers(0, 10, n).astype("int64"),
        "d": rng.integers(0, 100, n).astype("int64"),
        "label": rng.integers(0, 2, n).astype("int32"),
    })


def tagged_schema() -> Schema:
    return Schema([
        ColumnSchema("a", "float64", {Tags.CONTINUOUS}),
        ColumnSchema("b", "float64", {Tags.CONTINUOUS}),
        ColumnSchema("c", "int64", {Tags.CATEGORICAL}),
        ColumnSchema("d", "int64", {Tags.CATEGORICAL}),
        ColumnSchema("label", "int32", {Tags.TARGET}),
    ])


@pytest.fixture
def frame() -> pd.DataFrame:
    return make_frame()


@pytest.fixture
def parquet_dir(tmp_path, frame) -> str:
    """``frame`` as 3 parquet files with small row groups (several partitions with a tiny part_size)."""
    d = tmp_path / "data"
    d.mkdir()
    for i, part in enumerate(np.array_split(np.arange(len(frame)), 3)):
        pq.write_table(pa.Table.from_pandas(frame.iloc[part], preserve_index=False), d / f"part_{i}.parquet",
                       row_group_size=25)
    tagged_schema().save(str(d / "_schema.json"))
    return str(d)


def centered(values: np.ndarray) -> np.ndarray:
    return values - values.mean()


# --- graph: selection and composition ------------------------------------------------------
def test_select_by_name_and_op_instance(frame):
    wf = Workflow(["a", "c"] >> T.AddOne(), progress=False)
    out = wf.fit_transform(frame)
    assert list(out.columns) == ["a", "c"]
    np.testing.assert_array_equal(out["a"], frame["a"] + 1)
    np.testing.assert_array_equal(out["c"], frame["c"] + 1)


def test_op_class_on_the_right_of_rshift_is_instantiated(frame):
    node = ["a"] >> T.AddOne
    assert isinstance(node, Node) and isinstance(node.op, T.AddOne)
    node2 = (["a"] >> T.AddOne) >> T.AddOne
    out = Workflow(node2, progress=False).fit_transform(frame)
    np.testing.assert_array_equal(out["a"], frame["a"] + 2)


def test_rshift_rejects_a_non_operator():
    with pytest.raises(TypeError, match="operator"):
        Node.coerce(["a"]) >> 3
    with pytest.raises(TypeError, match="cannot select columns"):
        Node.coerce(3.5)


def test_select_by_tag(frame):
    ds = Dataset(frame, schema=tagged_schema())
    wf = Workflow(Tags.CONTINUOUS >> T.AddOne(), progress=False)
    out = wf.fit_transform(ds).compute()
    assert list(out.columns) == ["a", "b"]
    np.testing.assert_allclose(out["b"], frame["b"] + 1)
    # a tag and names in one selector
    sel = ColumnSelector(["label"], tags=[Tags.CATEGORICAL])
    assert sel.resolve(tagged_schema()) == ["label", "c", "d"]
    out2 = Workflow(Node.coerce(["label", Tags.CATEGORICAL]), progress=False).fit_transform(ds).compute()
    assert list(out2.columns) == ["label", "c", "d"]


def test_plus_concatenates_and_minus_drops(frame):
    conts = ["a", "b"] >> T.AddOne()
    cats = ["c", "d"] >> T.AddConst(10)
    wf = Workflow(conts + cats + ["label"] - ["d"], progress=False)
    out = wf.fit_transform(frame)
    assert list(out.columns) == ["a", "b", "c", "label"]
    np.testing.assert_allclose(out["a"], frame["a"] + 1)
    np.testing.assert_array_equal(out["c"], frame["c"] + 10)
    np.testing.assert_array_equal(out["label"], frame["label"])
    # list + node, and a single name on the right of `+`/`-`
    wf2 = Workflow(["label"] + conts - "b", progress=False)
    assert list(wf2.fit_transform(frame).columns) == ["label", "a"]


def test_missing_column_error_names_it_and_lists_available(frame):
    wf = Workflow(["a", "nope"] >> T.AddOne(), progress=False)
    with pytest.raises(KeyError) as info:
        wf.fit(frame)
    message = str(info.value)
    assert "nope" in message
    for col in frame.columns:
        assert col in message


def test_transform_of_data_lacking_an_input_column_names_it(frame):
    wf = Workflow(["a", "b"] >> T.AddOne(), progress=False).fit(frame)
    with pytest.raises(KeyError, match="'b'.*available"):
        wf.transform(Dataset(frame.drop(columns=["b"])))


def test_two_branches_giving_one_column_name_raise_before_reading_data(parquet_dir, monkeypatch):
    reads = []
    real = backend.read_parquet_arrow
    monkeypatch.setattr(backend, "read_parquet_arrow", lambda *a, **k: reads.append(a) or real(*a, **k))
    ds = Dataset(parquet_dir)
    clashes = [
        ((["a"] >> T.AddOne()) + (["a", "b"] >> T.AddConst(2)), r'\["a"\] >> AddOne and \["a", "b"\] >> AddConst'),
        (["a", "c"] + (["a"] >> T.AddOne()), r'\["a", "c"\] and \["a"\] >> AddOne'),  # the input vs computed
        ((["a"] >> T.AddOne()) + ["b"] + (["a"] >> T.AddOne()),
         r'\(\["a"\] >> AddOne\) \+ \["b"\] and \["a"\] >> AddOne'),
    ]
    for graph, branches in clashes:
        with pytest.raises(ValueError, match=f"column 'a' is produced by two branches of the graph, {branches}"):
            Workflow(graph, progress=False).fit(ds)
    assert reads == []


def test_same_column_twice_unchanged_is_kept_once(frame):
    # the same input column selected twice, or the same node's output used twice, is the same data
    added = ["d"] >> T.AddOne()
    graph = ["a", "b"] + ["b", "a"] + (["c"] >> T.AddOne()) + added + added - ["c"] + (["c"] + added)
    wf = Workflow(graph, progress=False).fit(frame)
    out = wf.transform(frame)
    assert list(out.columns) == wf.output_schema.column_names == ["a", "b", "d", "c"]
    for col in ["a", "b", "c"]:
        np.testing.assert_array_equal(out[col], frame[col])
    np.testing.assert_array_equal(out["d"], frame["d"] + 1)


class AddsToItsInput(Operator):
    """An operator that (badly) adds a column to the frame it is given."""

    def transform(self, columns, frame):
        frame["scratch"] = 0
        return frame[flatten_columns(columns)] * 2


def test_an_operator_changing_its_input_changes_nobody_elses_frame():
    """Every node hands on a frame of its own (a shallow copy when it selects every column of
    its input), so neither the user's frame nor another branch sees what an operator did to
    its input."""
    frame = pd.DataFrame({"a": [1, 2], "b": [3, 4]})
    graph = (["a", "b"] >> AddsToItsInput()) + (["a", "b"] >> T.AddOne() >> ops.Rename(postfix="_1"))
    out = Workflow(graph, progress=False).fit_transform(frame)
    assert list(frame.columns) == ["a", "b"] and frame["a"].tolist() == [1, 2]
    assert list(out.columns) == ["a", "b", "a_1", "b_1"]
    assert out["a"].tolist() == [2, 4] and out["b_1"].tolist() == [4, 5]


def test_same_operator_instance_twice_is_refused():
    op = T.AddOne()
    with pytest.raises(ValueError, match="twice"):
        Workflow((["a"] >> op) + (["b"] >> op))


def test_a_list_holding_something_else_than_names_is_refused():
    for selection in ([1], ["a", 2.5], []):
        with pytest.raises(TypeError, match="cannot select columns with"):
            Node.coerce(selection)


def test_node_of_a_kind_by_name_still_builds_with_a_deprecation_warning(frame):
    with pytest.warns(DeprecationWarning, match=r"Node\('select', \.\.\.\) is deprecated"):
        select = Node("select", selector=ColumnSelector(["a", "b"]))
    with pytest.warns(DeprecationWarning):
        graph = Node("drop", [Node("concat", [Node("op", [select], op=T.AddOne()), Node.coerce("c")])], dropped=["b"])
    out = Workflow(graph, progress=False).fit_transform(frame)
    assert list(out.columns) == ["a", "c"]
    np.testing.assert_allclose(out["a"], frame["a"] + 1)


def test_the_graph_module_loads_no_operator():
    # operators import the graph, never the reverse: the graph alone loads no operator module
    code = "import sys, tabloader.graph; print(sorted(m for m in sys.modules if m.startswith('tabloader.ops')))"
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@register_operator(name="test_workflow:CountResolutions")
class CountResolutions(Operator):
    """``x + 1``; counts the calls of compute_output_schema, which resolving a graph makes."""

    calls = 0  # on the class: a loaded workflow holds another instance

    def transform(self, columns, frame):
        return frame[flatten_columns(columns)] + 1

    def compute_output_schema(self, input_schema, columns):
        type(self).calls += 1
        return super().compute_output_schema(input_schema, columns)


def test_the_graph_is_resolved_by_fit_only(tmp_path, frame):
    CountResolutions.calls = 0
    wf = Workflow((["a"] >> CountResolutions()) + ["label"], progress=False).fit(frame)
    after_fit = CountResolutions.calls
    assert after_fit > 0
    wf.transform(frame)
    wf.transform(Dataset(frame)).compute()
    wf.save(str(tmp_path / "wf"))
    loaded = Workflow.load(str(tmp_path / "wf"))
    out = loaded.transform(Dataset(frame)).compute()
    assert CountResolutions.calls == after_fit  # neither transform nor load resolved again
    np.testing.assert_allclose(out["a"], frame["a"] + 1)
    assert loaded.input_columns == wf.input_columns == ["a", "label"]


def test_one_graph_in_two_workflows_fit_on_different_data(frame):
    # a node holds no resolved columns, so fitting a second workflow does not change the first one's
    node = Tags.CONTINUOUS >> T.AddOne()
    first = Workflow(node, progress=False).fit(Dataset(frame, schema=tagged_schema()))  # a and b are continuous
    only_c = Schema([c.without_tags(Tags.CONTINUOUS) for c in tagged_schema()]).replace(
        ColumnSchema("c", "int64", {Tags.CONTINUOUS}))
    second = Workflow(node, progress=False).fit(Dataset(frame, schema=only_c))
    assert list(second.transform(frame).columns) == ["c"]
    out = first.transform(frame)
    assert list(out.columns) == ["a", "b"]
    np.testing.assert_allclose(out[["a", "b"]], frame[["a", "b"]] + 1)


# --- fit: statistics, phases, partitions -----------------------------------------------------
def test_stat_op_fit_matches_numpy(frame):
    wf = Workflow(["a", "b"] >> T.Center(), progress=False)
    out = wf.fit_transform(frame)
    np.testing.assert_allclose(out["a"], centered(frame["a"].to_numpy()), atol=1e-12)
    np.testing.assert_allclose(out["b"], centered(frame["b"].to_numpy()), atol=1e-12)


def test_phases_second_stat_op_sees_transformed_input(frame):
    # Scale is fit on the output of AddOne >> Center (itself fit on AddOne's output).
    node = ["a", "b"] >> T.AddOne() >> T.Center() >> T.Scale()
    wf = Workflow(node, progress=False)
    assert [len(p) for p in wf._fit_phases()] == [1, 1]
    out = wf.fit_transform(Dataset(frame, part_size=800))
    for col in ["a", "b"]:
        x = centered(frame[col].to_numpy() + 1)
        np.testing.assert_allclose(out[col] if isinstance(out, pd.DataFrame) else out.compute()[col],
                                   x / np.sqrt(np.mean(x ** 2)), rtol=1e-12)


def test_independent_stat_ops_share_a_phase(frame):
    wf = Workflow((["a"] >> T.Center()) + (["b"] >> T.Scale()) + (["c"] >> T.CountRows()), progress=False)
    assert [len(p) for p in wf._fit_phases()] == [3]


def test_fit_on_one_partition_equals_fit_on_many(frame):
    def fitted(ds):
        wf = Workflow(["a", "b"] >> T.Center() >> T.Scale(), progress=False).fit(ds)
        ops = [n.op for n in wf.stat_nodes]
        return ops[0].means_, ops[1].rms_, wf

    one = Dataset(frame)
    many = Dataset(frame, part_size=300)
    assert one.npartitions == 1 and many.npartitions > 10
    m1, r1, wf1 = fitted(one)
    m2, r2, wf2 = fitted(many)
    pd.testing.assert_series_equal(m1, m2, rtol=1e-12)
    assert r1.keys() == r2.keys() and all(np.isclose(r1[k], r2[k], rtol=1e-12) for k in r1)
    pd.testing.assert_frame_equal(wf1.transform(frame), wf2.transform(frame), rtol=1e-12)


def test_refit_starts_afresh(frame):
    wf = Workflow(["c"] >> T.CountRows(), progress=False)
    wf.fit(frame)
    wf.fit(frame.iloc[:50])
    assert wf.stat_nodes[0].op.rows_ == 50


# --- transform: every input kind -------------------------------------------------------------
def test_transform_before_fit_raises_not_fitted(frame):
    wf = Workflow(["a"] >> T.Center(), progress=False)
    for data in (frame, Dataset(frame)):
        with pytest.raises(NotFittedError, match="fit"):
            wf.transform(data)
    with pytest.raises(NotFittedError):
        wf.output_schema
    with pytest.raises(NotFittedError):
        wf.save("/tmp/never-written")
    # also a workflow without stat ops must be fit first (the input schema is learned there)
    with pytest.raises(NotFittedError):
        Workflow(["a"] >> T.AddOne(), progress=False).transform(frame)


def test_transform_of_dataset_is_lazy(parquet_dir, frame, monkeypatch):
    calls = []
    real = backend.read_parquet_arrow

    def counting(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    ds = Dataset(parquet_dir, part_size=1000)
    assert ds.npartitions > 3
    wf = Workflow((["a", "b"] >> T.Center()) + ["label"], progress=False).fit(ds)
    monkeypatch.setattr(backend, "read_parquet_arrow", counting)
    out = wf.transform(ds)
    assert isinstance(out, Dataset) and out.is_transformed
    assert calls == []  # nothing read yet
    assert out.schema.column_names == ["a", "b", "label"]
    assert calls == []
    result = out.compute()
    assert len(calls) >= ds.npartitions
    np.testing.assert_allclose(result["a"], centered(frame["a"].to_numpy()), atol=1e-12)
    np.testing.assert_array_equal(result["label"], frame["label"])


def test_transform_dataframe_returns_dataframe_with_original_index(frame):
    wf = Workflow((["a"] >> T.AddOne()) + ["label"], progress=False).fit(frame)
    shifted = frame.set_axis(np.arange(len(frame)) + 1000)
    out = wf.transform(shifted)
    assert isinstance(out, pd.DataFrame)
    assert list(out.columns) == ["a", "label"]
    np.testing.assert_allclose(out["a"].to_numpy(), frame["a"].to_numpy() + 1)


def test_transform_dask_dataframe_returns_dask_dataframe(frame):
    import dask.dataframe as dd

    ddf = dd.from_pandas(frame, npartitions=4)
    wf = Workflow((["a", "b"] >> T.Center()) + ["c"], progress=False).fit(ddf)
    out = wf.transform(ddf)
    assert isinstance(out, dd.DataFrame)
    assert out.npartitions == 4
    result = out.compute().reset_index(drop=True)
    np.testing.assert_allclose(result["a"], centered(frame["a"].to_numpy()), atol=1e-12)
    np.testing.assert_array_equal(result["c"], frame["c"])


def test_fit_dataset_transform_dataframe_agree(parquet_dir, frame):
    ds = Dataset(parquet_dir, part_size=1000)
    wf = Workflow((["a", "b"] >> T.Center() >> T.Scale()) + ["c"], progress=False).fit(ds)
    pd.testing.assert_frame_equal(wf.transform(ds).compute(), wf.transform(frame).reset_index(drop=True))


def test_filter_op_then_stat_op(frame):
    wf = Workflow(["c", "a"] >> T.DropOdd() >> T.CountRows(), progress=False)
    wf.fit(Dataset(frame, part_size=500))
    assert wf.stat_nodes[0].op.rows_ == int((frame["c"] % 2 == 0).sum())
    out = wf.transform(Dataset(frame, part_size=500))
    assert out.num_rows == int((frame["c"] % 2 == 0).sum())


# --- output schema -----------------------------------------------------------------------------
def test_output_schema_tags_and_dtypes(frame):
    ds = Dataset(frame, schema=tagged_schema())
    wf = Workflow((["c"] >> T.Center()) + (["a"] >> T.AddConst(1)) + ["label"], progress=False).fit(ds)
    schema = wf.output_schema
    assert schema.column_names == ["c", "a", "label"]
    assert schema["c"].dtype == "float64"  # Center casts int64 -> float64
    assert schema["c"].tags == {"centered"}  # CATEGORICAL removed, "centered" added
    assert schema["a"].tags == {Tags.CONTINUOUS}
    assert schema["label"].dtype == "int32" and schema["label"].tags == {Tags.TARGET}
    assert wf.transform(ds).schema == schema


# --- save / load -------------------------------------------------------------------------------
def fitted_workflow(frame):
    node = (["a", "b"] >> T.AddOne() >> T.Center() >> T.Scale()) + (["c", "d"] >> T.CenterFrame()) \
        + (["label"] >> T.Apply(T.double)) - ["d"]
    return Workflow(node, progress=False).fit(Dataset(frame, part_size=2000))


def test_save_load_gives_identical_transform(tmp_path, frame):
    wf = fitted_workflow(frame)
    path = str(tmp_path / "wf")
    wf.save(path)
    files = sorted(os.listdir(path))
    assert WORKFLOW_FILE in files and any(f.endswith(".parquet") for f in files)
    assert not any(f.endswith((".pkl", ".pickle")) for f in files)
    doc = json.loads((tmp_path / "wf" / WORKFLOW_FILE).read_text())
    assert doc["format_version"] == WORKFLOW_FORMAT_VERSION
    apply_record = [r for r in doc["nodes"] if "op" in r and r["op"]["class"].endswith(":Apply")][0]
    assert apply_record["op"]["config"]["fn"] == {"__function__": "workflow_test_ops:double"}

    loaded = Workflow.load(path, trusted=[T.double])
    assert loaded.is_fitted
    assert loaded.output_schema == wf.output_schema
    other = make_frame(50, seed=1)
    pd.testing.assert_frame_equal(loaded.transform(other), wf.transform(other))
    pd.testing.assert_frame_equal(loaded.transform(Dataset(other)).compute(), wf.transform(Dataset(other)).compute())
    # the stat states came back with their indexes (the Series state is keyed by column name)
    center = [n.op for n in loaded.stat_nodes if type(n.op) is T.Center][0]
    assert list(center.means_.index) == ["a", "b"]


def test_numpy_dtypes_given_to_operators_save_by_name(tmp_path):
    """dtype=np.int32 works in fit and transform; it is saved as "int32" and loads the same."""
    from tabloader import ops

    frame = pd.DataFrame({"c": ["a", "b", "a"], "x": [1.0, 2.0, 4.0], "y": [1, 0, 1]})
    graph = ((["c"] >> ops.Categorify(dtype=np.int32)) + (["c"] >> ops.HashBucket(10, dtype=np.int32)
                                                           >> ops.Rename(postfix="_h"))
             + ([("c", "y")] >> ops.HashedCross(8, dtype=np.int16))
             + (["x"] >> ops.Normalize(out_dtype=np.float64)) + (["x"] >> ops.NormalizeMinMax(out_dtype=np.float64)
                                                                 >> ops.Rename(postfix="_mm"))
             + (["c"] >> ops.TargetEncoding("y", kfold=1, out_dtype=np.float64)))
    wf = Workflow(graph, progress=False).fit(frame)
    expected = wf.transform(frame)
    assert expected["c"].dtype == np.int32 and expected["x"].dtype == np.float64
    wf.save(str(tmp_path / "wf"))
    pd.testing.assert_frame_equal(Workflow.load(str(tmp_path / "wf")).transform(frame), expected)
    with pytest.raises(ValueError, match="TargetEncoding: out_dtype must be a float dtype"):
        ops.TargetEncoding("y", out_dtype=np.int32)


def test_save_refuses_anonymous_lambda_and_local_function(tmp_path, frame):
    wf = Workflow(["a"] >> T.Apply(lambda x: x * 3), progress=False).fit(frame)
    with pytest.raises(ValueError, match="lambda"):
        wf.save(str(tmp_path / "wf"))
    assert not (tmp_path / "wf").exists()  # nothing half-written

    def local(x):
        return x

    with pytest.raises(ValueError, match="module level"):
        function_name(local)
    assert function_name(T.double) == "workflow_test_ops:double"
    assert function_name(np.log1p) == "numpy:log1p"


def test_a_numpy_ufunc_saves_by_name_and_loads_when_numpy_is_trusted(tmp_path, frame):
    """numpy 1.x ufuncs carry no __module__/__qualname__ (numpy 2's do): saved all the same."""
    wf = Workflow(["a"] >> ops.LambdaOp(np.sqrt), progress=False).fit(frame)
    wf.save(str(tmp_path / "wf"))
    loaded = Workflow.load(str(tmp_path / "wf"), trusted=[np])  # the module: every numpy function
    np.testing.assert_array_equal(loaded.transform(frame)["a"].to_numpy(), np.sqrt(frame["a"].to_numpy()))


def test_save_refuses_function_of_main(tmp_path):
    def fn(x):
        return x
    fn.__module__, fn.__qualname__ = "__main__", "fn"
    with pytest.raises(ValueError, match="__main__"):
        function_name(fn)


def test_load_incomplete_directory_errors(tmp_path, frame):
    wf = fitted_workflow(frame)
    path = tmp_path / "wf"
    wf.save(str(path))
    state = sorted(f for f in os.listdir(path) if f.endswith(".parquet"))[0]
    os.remove(path / state)
    with pytest.raises(FileNotFoundError, match=f"{state}.*incomplete"):
        Workflow.load(str(path), trusted=[T.double])
    os.remove(path / WORKFLOW_FILE)
    with pytest.raises(FileNotFoundError, match=f"{WORKFLOW_FILE} is missing"):
        Workflow.load(str(path))
    with pytest.raises(FileNotFoundError):
        Workflow.load(str(tmp_path / "does-not-exist"))


def test_load_newer_format_version_and_damaged_json_errors(tmp_path, frame):
    wf = fitted_workflow(frame)
    path = tmp_path / "wf"
    wf.save(str(path))
    doc = json.loads((path / WORKFLOW_FILE).read_text())
    doc["format_version"] = WORKFLOW_FORMAT_VERSION + 1
    (path / WORKFLOW_FILE).write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=f"format version {WORKFLOW_FORMAT_VERSION + 1}.*upgrade"):
        Workflow.load(str(path))
    (path / WORKFLOW_FILE).write_text("{not json")
    with pytest.raises(ValueError, match="damaged"):
        Workflow.load(str(path))


def test_load_unknown_operator_class_errors(tmp_path, frame):
    wf = Workflow(["a"] >> T.AddOne(), progress=False).fit(frame)
    path = tmp_path / "wf"
    wf.save(str(path))
    text = (path / WORKFLOW_FILE).read_text().replace("workflow_test_ops:AddOne", "workflow_test_ops:Gone")
    (path / WORKFLOW_FILE).write_text(text)
    with pytest.raises(UntrustedError, match="workflow_test_ops:Gone.*not registered"):
        Workflow.load(str(path))


def test_save_overwrite_flag(tmp_path, frame):
    wf = Workflow(["a"] >> T.AddOne(), progress=False).fit(frame)
    wf.save(str(tmp_path / "wf"))
    with pytest.raises(FileExistsError, match="overwrite=True"):
        wf.save(str(tmp_path / "wf"))  # the default does not replace a saved workflow
    wf.save(str(tmp_path / "wf"), overwrite=True)
    assert Workflow.load(str(tmp_path / "wf")).is_fitted


def test_save_onto_a_directory_that_is_not_a_workflow_needs_overwrite(tmp_path, frame):
    wf = Workflow(["a"] >> T.AddOne(), progress=False).fit(frame)
    precious = tmp_path / "notes"
    precious.mkdir()
    (precious / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        wf.save(str(precious))
    assert (precious / "keep.txt").read_text() == "mine" and not (precious / WORKFLOW_FILE).exists()


# --- distributed ------------------------------------------------------------------------------
def _distributed_results(parquet_dir, frame):
    ds = Dataset(parquet_dir, part_size=1000)
    wf = Workflow((["a", "b"] >> T.AddOne() >> T.Center() >> T.Scale()) + (["c"] >> T.CenterFrame()) + ["label"],
                  progress=False).fit(ds)
    stats = {type(n.op).__name__: n.op.get_state() for n in wf.stat_nodes}
    return wf.transform(ds).compute(), stats


@pytest.mark.parametrize("processes", [False, True], ids=["threads", "processes"])
def test_results_identical_with_and_without_distributed_client(parquet_dir, frame, processes, tmp_path):
    distributed = pytest.importorskip("distributed")
    expected, expected_stats = _distributed_results(parquet_dir, frame)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=processes, dashboard_address=None,
                                  worker_dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        if processes:  # the spawned workers import the test ops module by name
            assert all(client.run(lambda: __import__("workflow_test_ops").__name__).values())
        got, got_stats = _distributed_results(parquet_dir, frame)
        out = str(tmp_path / "out")
        wf = Workflow((["a", "b"] >> T.Center()) + ["label"], progress=False).fit(Dataset(parquet_dir))
        wf.transform(Dataset(parquet_dir, part_size=1000)).to_parquet(out, progress=False)
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    assert got_stats.keys() == expected_stats.keys() == {"Center", "Scale", "CenterFrame"}
    pd.testing.assert_series_equal(got_stats["Center"]["means"], expected_stats["Center"]["means"])
    pd.testing.assert_frame_equal(got_stats["CenterFrame"]["means"], expected_stats["CenterFrame"]["means"])
    assert got_stats["Scale"]["rms"] == pytest.approx(expected_stats["Scale"]["rms"], rel=1e-12)
    written = pd.read_parquet(out)
    np.testing.assert_allclose(written["a"], centered(frame["a"].to_numpy()), atol=1e-12)


# --- progress bar --------------------------------------------------------------------------------
def test_progress_off_prints_nothing(capsys, parquet_dir, tmp_path):
    ds = Dataset(parquet_dir, part_size=1000)
    wf = Workflow(["a"] >> T.Center(), progress=False).fit(ds)
    wf.transform(ds).to_parquet(str(tmp_path / "o"), progress=False)
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""


def test_a_workflows_progress_off_covers_the_writes_of_its_transforms(capsys, parquet_dir, tmp_path, monkeypatch):
    """Workflow(progress=False) covers fit and the writes of its transformed datasets; a
    write's own progress= decides over it."""
    import tqdm.auto

    monkeypatch.setattr(tqdm.auto.tqdm, "__init__", _no_delay(tqdm.auto.tqdm.__init__))
    ds = Dataset(parquet_dir, part_size=1000)
    wf = Workflow(["a"] >> T.Center(), progress=False).fit(ds)
    wf.transform(ds).to_parquet(str(tmp_path / "o"))
    assert capsys.readouterr().err == ""
    wf.transform(ds).to_parquet(str(tmp_path / "p"), progress=True)
    assert "writing" in capsys.readouterr().err


def test_progress_on_shows_a_bar(capsys, parquet_dir, tmp_path, monkeypatch):
    import tqdm.auto

    ds = Dataset(parquet_dir, part_size=1000)
    monkeypatch.setattr(tqdm.auto.tqdm, "__init__", _no_delay(tqdm.auto.tqdm.__init__))
    Workflow(["a"] >> T.Center() >> T.Scale(), progress=True).fit(ds)
    err = capsys.readouterr().err
    assert "fit" in err and "fit phase 2" in err
    Workflow(["a"] >> T.Center(), progress=False).fit(ds, progress=True)
    assert "fit" in capsys.readouterr().err


def test_a_quick_fit_leaves_no_unfinished_bar(capsys, parquet_dir):
    """A bar waits half a second before it shows: quick work shows none (or, on a slow machine,
    a finished one), not a bar stuck at 0% with the next output on its line."""
    Workflow(["a"] >> T.Center(), progress=True).fit(Dataset(parquet_dir))
    err = capsys.readouterr().err
    assert err == "" or ("100%" in err and err.endswith("\n")), repr(err)

def _no_delay(init):
    def wrapped(self, *args, **kwargs):
        kwargs["delay"] = 0
        kwargs.pop("file", None)
        return init(self, *args, file=sys.stderr, **kwargs)
    return wrapped


# --- empty partitions ----------------------------------------------------------------------------
def test_empty_partitions_of_a_dataframe(frame):
    # a Dask DataFrame whose middle partitions are empty
    import dask.dataframe as dd

    parts = [frame.iloc[:70], frame.iloc[70:70], frame.iloc[70:150], frame.iloc[150:150], frame.iloc[150:]]
    ddf = dd.from_delayed([_delayed(p) for p in parts], meta=frame.iloc[:0])
    wf = Workflow((["a", "b"] >> T.Center() >> T.Scale()) + (["c"] >> T.CountRows()), progress=False).fit(ddf)
    assert [n.op for n in wf.stat_nodes if isinstance(n.op, T.CountRows)][0].rows_ == len(frame)
    x = centered(frame["a"].to_numpy())
    out = wf.transform(ddf).compute().reset_index(drop=True)
    np.testing.assert_allclose(out["a"], x / np.sqrt(np.mean(x ** 2)), rtol=1e-12)


def _delayed(part):
    import dask

    return dask.delayed(lambda: part)()


def test_empty_row_group_in_a_parquet_file(tmp_path, frame):
    d = tmp_path / "data"
    d.mkdir()
    table = pa.Table.from_pandas(frame, preserve_index=False)
    with pq.ParquetWriter(d / "p0.parquet", table.schema) as w:
        w.write_table(table.slice(0, 100))
        w.write_table(table.slice(0, 0))  # a 0-row row group
        w.write_table(table.slice(100))
    pq.write_table(table.slice(0, 0), d / "p1.parquet")  # a 0-row file
    ds = Dataset(str(d), part_size=1)  # one partition per row group
    assert 0 in ds.partition_sizes()
    wf = Workflow((["a", "b"] >> T.Center()) + (["c"] >> T.CountRows()), progress=False).fit(ds)
    assert [n.op for n in wf.stat_nodes if isinstance(n.op, T.CountRows)][0].rows_ == len(frame)
    out = wf.transform(ds).compute()
    np.testing.assert_allclose(out["a"], centered(frame["a"].to_numpy()), atol=1e-12)
    written = wf.transform(ds).to_parquet(str(tmp_path / "out"), progress=False)
    back = pd.read_parquet(written)
    assert len(back) == len(frame)


def test_fit_on_an_empty_dataset(frame):
    wf = Workflow(["c"] >> T.CountRows(), progress=False).fit(frame.iloc[:0])
    assert wf.stat_nodes[0].op.rows_ == 0
    assert len(wf.transform(frame.iloc[:0])) == 0


# --- end to end: the Criteo pipeline with the concrete operators -------------------------------
def _concrete_ops():
    try:
        from tabloader import ops
    except ImportError as exc:  # the operator modules are written separately
        pytest.skip(f"tabloader.ops is not importable yet: {exc}")
    return ops


def _reference_categorify(values: pd.Series, freq_threshold: int) -> np.ndarray:
    """1 = null, 2 = out of vocabulary (count < threshold), then from 3 by descending count, ties by value."""
    counts = values.value_counts(dropna=True)
    counts = counts[counts >= freq_threshold]
    ranked = sorted(zip(counts.to_numpy().tolist(), counts.index.to_numpy().tolist()), key=lambda cv: (-cv[0], cv[1]))
    mapping = {v: 3 + i for i, (_, v) in enumerate(ranked)}
    return np.array([1 if pd.isna(v) else mapping.get(int(v), 2) for v in values.astype(object)], dtype=np.int64)


def test_criteo_pipeline_end_to_end_matches_pandas(tmp_path):
    ops = _concrete_ops()
    from tabloader.synthetic import write_criteo

    raw = write_criteo(str(tmp_path / "raw"), 20_000, num_files=3, seed=7)
    frame = pd.read_parquet(raw)  # the input, read independently of tabloader
    cats, conts = [f"C{i}" for i in range(1, 27)], [f"I{i}" for i in range(1, 14)]
    node = (cats >> ops.Categorify(freq_threshold=2)) \
        + (conts >> ops.FillMissing(0) >> ops.Clip(min_value=0) >> ops.LogOp >> ops.Normalize()) + ["label"]
    wf = Workflow(node, progress=False)
    ds = Dataset(raw, part_size="200KB")
    assert ds.npartitions >= 3  # the statistics are merged across partitions
    wf.fit(ds)
    out_dir = wf.transform(ds).to_parquet(str(tmp_path / "out"), progress=False)
    out = pd.read_parquet(out_dir)

    assert list(out.columns) == cats + conts + ["label"]
    assert len(out) == len(frame)
    for c in cats:
        np.testing.assert_array_equal(out[c].to_numpy(dtype=np.int64), _reference_categorify(frame[c], 2), err_msg=c)
    for c in conts:
        x = np.log1p(np.clip(frame[c].fillna(0).to_numpy(dtype=np.float64), 0, None))
        expected = (x - x.mean()) / x.std()  # Normalize documents the population std (ddof=0)
        assert out[c].dtype == np.float32, c
        np.testing.assert_allclose(out[c].to_numpy(dtype=np.float64), expected, atol=1e-5, err_msg=c)
    np.testing.assert_array_equal(out["label"], frame["label"])
    schema = wf.output_schema
    assert schema.select_by_tag(Tags.CATEGORICAL).column_names == cats
    for c in cats:  # ids run up to the cardinality the schema records
        assert int(out[c].max()) < schema[c].properties["cardinality"], c
    # the written _schema.json is the workflow's output schema
    assert Dataset(out_dir).schema.select_by_tag(Tags.CATEGORICAL).column_names == cats



def test_transform_of_a_dataframe_missing_a_column_names_it():
    frame = pd.DataFrame({"x": [1.0, 2.0], "y": [3.0, 4.0]})
    wf = Workflow(["x", "y"] >> T.AddOne(), progress=False).fit(frame)
    with pytest.raises(KeyError, match=r"\['y'\].*available: \['x'\]"):
        wf.transform(frame[["x"]])


def test_target_encoding_of_a_frame_with_its_own_index_hides_each_rows_target():
    """After train_test_split or df.sample a frame's labels are not 0..n-1. Fit numbers its rows
    from 0, so transform must too: by the labels a row took another fold than at fit and its own
    target leaked into its feature. One row per user: out of fold, every value is the mean."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"user": np.arange(1000), "label": rng.integers(0, 2, 1000)},
                         index=rng.permutation(5000)[:1000])
    wf = Workflow(["user"] >> ops.TargetEncoding("label", kfold=5, p_smooth=1), progress=False)
    out = wf.fit_transform(frame)
    np.testing.assert_allclose(out["TE_user_label"].to_numpy(), frame["label"].mean(), rtol=1e-6)
    assert out.index.equals(frame.index)


@pytest.mark.parametrize("source", ["pandas", "dask"])
def test_repeated_index_labels_transform_as_a_fresh_index_and_keep_their_labels(source):
    """pd.concat without ignore_index repeats labels; branches join by label, which failed."""
    import dask.dataframe as dd

    part = pd.DataFrame({"c": ["a", "b", "a"], "x": [1.0, 2.0, 3.0], "y": [7, 8, 9]})
    frame = pd.concat([part, part.iloc[::-1]])
    graph = (["c"] >> ops.Categorify()) + (["x"] >> ops.Normalize()) + ["y"]
    expected = Workflow(graph, progress=False).fit_transform(frame.reset_index(drop=True))
    wf = Workflow(graph, progress=False)
    if source == "pandas":
        out = wf.fit_transform(frame)
        assert list(out.index) == [0, 1, 2, 2, 1, 0]
    else:
        out = wf.fit_transform(dd.from_pandas(frame, npartitions=1, sort=False)).compute()
    pd.testing.assert_frame_equal(out.reset_index(drop=True), expected)


def test_a_filtered_frame_keeps_the_labels_of_its_kept_rows():
    frame = pd.DataFrame({"a": [1.0, -1.0, 2.0, -2.0]}, index=[10, 11, 10, 13])
    out = Workflow(["a"] >> ops.Filter(lambda df: df["a"] > 0), progress=False).fit_transform(frame)
    assert list(out.index) == [10, 10] and out["a"].tolist() == [1.0, 2.0]

def test_a_dataset_transformed_before_a_refit_refuses_to_read_rows_of_the_new_fit(frame):
    """Its schema (cardinality) is the old fit's: rows of the new fit would overflow an embedding
    sized from it, and a write during the refit would mix both fits."""
    wf = Workflow(["c"] >> ops.Categorify(), progress=False).fit(pd.DataFrame({"c": ["a", "b"]}))
    train = wf.transform(Dataset(pd.DataFrame({"c": ["a", "b"]})))
    assert train.compute()["c"].tolist() == [3, 4]
    wf.fit(pd.DataFrame({"c": ["x", "y", "z", "a", "a"]}))
    with pytest.raises(RuntimeError, match=r"fit again after this Dataset was made .* call transform\(\) again"):
        train.compute()
    assert wf.transform(Dataset(pd.DataFrame({"c": ["a", "b"]}))).compute()["c"].tolist() == [3, 2]


def test_a_failed_refit_keeps_the_earlier_fit(frame):
    """Bad input loses nothing: a refit that fails leaves the workflow (and datasets it
    transformed) as the earlier fit made them."""
    wf = Workflow((["c"] >> ops.Categorify()) + (["x"] >> ops.Normalize()), progress=False)
    good = pd.DataFrame({"c": ["a", "b", "a"], "x": [1.0, 2.0, 3.0]})
    expected = wf.fit_transform(good)
    train = wf.transform(Dataset(good))
    with pytest.raises(TypeError, match="'x'"):
        wf.fit(pd.DataFrame({"c": ["z"], "x": ["text"]}))  # fails in the middle of the fit
    assert wf.is_fitted
    pd.testing.assert_frame_equal(wf.transform(good), expected)
    pd.testing.assert_frame_equal(train.compute(), expected)

def test_a_persisted_or_shuffled_dask_frame_is_fit_and_transformed_under_a_client():
    """A Dask DataFrame persisted on a cluster (its partitions are futures there) or shuffled:
    the workflow's tasks take the collection's own partitions, rather than computing each one
    apart on a worker (which cannot see persisted data, and recomputes a shuffle per partition).
    Same vocabulary and output as the same rows fit locally."""
    distributed = pytest.importorskip("distributed")
    dd = pytest.importorskip("dask.dataframe")
    from tabloader import ops

    df = pd.DataFrame({"c": np.random.default_rng(0).integers(0, 50, 4000), "x": np.arange(4000.0)})
    graph = (["c"] >> ops.Categorify()) + (["x"] >> ops.Normalize())
    expected = Workflow(graph, progress=False).fit_transform(df)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None,
                                  worker_dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        persisted = client.persist(dd.from_pandas(df, npartitions=8))
        distributed.wait(persisted)
        for ddf in (persisted, dd.from_pandas(df, npartitions=8).shuffle("c")):
            wf = Workflow((["c"] >> ops.Categorify()) + (["x"] >> ops.Normalize()), progress=False).fit(Dataset(ddf))
            got = wf.transform(ddf).compute().sort_values("x")  # a shuffle reorders the rows; x orders them
            pd.testing.assert_frame_equal(got.reset_index(drop=True), expected.reset_index(drop=True), check_dtype=False)


def test_an_error_in_fit_or_transform_names_the_partition_and_its_files(tmp_path):
    """A value an operator refuses, in one file of several: the error keeps its type and names
    the partition and the file it came from, in fit and when the transformed rows are written."""
    from tabloader import ops

    class RefusesNegatives(ops.Normalize):
        def fit_partial(self, columns, frame):
            if (frame["x"] < 0).any():
                raise ValueError(f"negative x: {frame['x'].min()}")
            return super().fit_partial(columns, frame)

        def transform(self, columns, frame):
            if (frame["x"] > 100).any():
                raise ValueError(f"x too large: {frame['x'].max()}")
            return super().transform(columns, frame)

    for i, values in enumerate(([1.0, 2.0], [3.0, -4.0], [5.0, 6.0])):
        pd.DataFrame({"x": values}).to_parquet(tmp_path / f"part_{i}.parquet")
    with pytest.raises(ValueError, match=r"negative x: -4.0 \[partition 1 \(.*part_1\.parquet\)\]"):
        Workflow(["x"] >> RefusesNegatives(), progress=False).fit(Dataset(str(tmp_path), part_size=1))  # a file each
    wf = Workflow(["x"] >> RefusesNegatives(), progress=False).fit(Dataset(pd.DataFrame({"x": [1.0, 2.0]})))
    pd.DataFrame({"x": [500.0]}).to_parquet(tmp_path / "part_1.parquet")
    with pytest.raises(ValueError, match=r"x too large: 500.0 \[partition 1 \(.*part_1\.parquet\)\]"):
        wf.transform(Dataset(str(tmp_path), part_size=1)).to_parquet(str(tmp_path / "out"), progress=False)


def test_an_in_memory_frame_is_scattered_to_the_cluster_not_sent_in_the_graph():
    """A DataFrame fit under a distributed client reaches the workers once (scattered), rather than
    inside the task graph through the scheduler (distributed warns of graphs over 10 MB); the
    statistics are those of a local fit."""
    import warnings

    distributed = pytest.importorskip("distributed")
    from tabloader import ops

    df = pd.DataFrame({"x": np.random.default_rng(0).random(2_000_000), "y": np.arange(2_000_000)})  # 32 MB
    expected = Workflow(["x"] >> ops.Normalize(), progress=False).fit(Dataset(df, part_size="4MB"))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None,
                                  worker_dashboard_address=None) as cluster, distributed.Client(cluster):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            wf = Workflow(["x"] >> ops.Normalize(), progress=False).fit(Dataset(df, part_size="4MB"))
            out = wf.transform(Dataset(df, part_size="4MB")).compute()
    assert not [w for w in caught if "large graph" in str(w.message)], [str(w.message)[:100] for w in caught]
    got, want = wf.output_node.op.get_state(), expected.output_node.op.get_state()
    assert got.keys() == want.keys() and got["means"] == pytest.approx(want["means"], rel=1e-12)
    np.testing.assert_allclose(out["x"].to_numpy(), expected.transform(df)["x"].to_numpy(), rtol=1e-12)
