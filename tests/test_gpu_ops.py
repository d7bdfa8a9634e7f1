"""Every operator on cuDF against the same operator on pandas (issue 14).

Each case of :data:`op_cases.CASES` (the parameter tables the CPU operator tests use) runs on
each device: the graph is fit over many partitions of the data on that device and compared
with the same graph fit on one pandas partition -- outputs (integer ids exactly, floats within
1e-6 relative), fitted state, and saved workflows, which must load and transform on both
devices. The ``cpu`` half runs everywhere; the ``cuda`` half is marked ``cudf`` (a ``gpu`` test
needing cuDF) and skips where no CUDA device or no cuDF is usable. The other ``cudf`` tests check that no case whose operators declare the
GPU, and no whole Criteo workflow over a cuDF dataset, copies a partition to the host, that a
run of host-only operators costs one copy, and that the device hashes have the CPU's bits.
"""

from __future__ import annotations

import datetime
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import tabloader as tl
from tabloader import backend, ops
from tabloader.graph import Node, OpNode
from tabloader.ops.devices import BEGIN, END, builtin_operators, device_table
from tabloader.workflow import Workflow

import op_cases
from encoding_reference import NULL_HASH, py_hash
from op_cases import CASES, FRAMES

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cudf)]
MANY_PARTS = 4000  # bytes per partition: every frame of op_cases splits into several partitions


# --- frames on either device, compared as Python values ----------------------------------------
def on_device(frame: pd.DataFrame, device: str):
    """The same rows on ``device``: cuDF through arrow, as a parquet read gives them."""
    if device == "cpu":
        return frame
    return backend.from_arrow(pa.Table.from_pandas(frame, preserve_index=False), "cuda")


def arrow_column(series) -> pa.Array:
    """A pandas or cuDF column as one arrow array (the test's own copy of GPU data)."""
    if backend.is_gpu_object(series):
        arr = series.to_arrow()
    elif isinstance(series.dtype, pd.ArrowDtype):
        arr = pa.array(series.array)
    else:
        arr = pa.array(series, from_pandas=True)
    return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr


def type_name(arrow_type: pa.DataType) -> str:
    """An arrow type, with the differences that are no difference (string widths, list field names) removed."""
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return f"list<{type_name(arrow_type.value_type)}>"
    if pa.types.is_large_string(arrow_type):
        return "string"
    return str(arrow_type)


def assert_close(got, expected, where: str) -> None:
    """Python values equal: integers, strings and booleans exactly, floats within 1e-6 relative,
    NaN and null alike, lists and dicts element by element."""
    if isinstance(expected, float) and math.isnan(expected):
        expected = None
    if isinstance(got, float) and math.isnan(got):
        got = None
    if isinstance(expected, dict):
        assert isinstance(got, dict) and list(got) == list(expected), (where, got, expected)
        for key in expected:
            assert_close(got[key], expected[key], f"{where}[{key!r}]")
    elif isinstance(expected, list):
        assert isinstance(got, list) and len(got) == len(expected), (where, got, expected)
        for i, (g, e) in enumerate(zip(got, expected)):
            assert_close(g, e, f"{where}[{i}]")
    elif isinstance(expected, float) and got is not None:
        assert got == pytest.approx(expected, rel=1e-6, abs=1e-12), (where, got, expected)
    else:
        assert got == expected and type(got) is type(expected), (where, got, expected)


def assert_same_frame(got, expected: pd.DataFrame, what: str) -> None:
    """Same columns, index, arrow types and values (see :func:`assert_close`)."""
    assert list(got.columns) == list(expected.columns), what
    got_index = got.index.to_pandas() if backend.is_gpu_object(got) else got.index
    assert got_index.tolist() == expected.index.tolist(), what
    for col in expected.columns:
        g, e = arrow_column(got[col]), arrow_column(expected[col])
        assert type_name(g.type) == type_name(e.type), (what, col, g.type, e.type)
        assert_close(g.to_pylist(), e.to_pylist(), f"{what}: column {col!r}")


def comparable_state(value):
    """Fitted state as Python values; group tables (key columns ``__key_*``) sorted by key, as
    partials merged in another order list the same groups in another order."""
    if isinstance(value, pd.DataFrame):
        keys = [c for c in value.columns if str(c).startswith("__key_")]
        table = value.sort_values(keys).reset_index(drop=True) if keys and len(value) else value
        return {c: arrow_column(table[c]).to_pylist() for c in table.columns}
    if isinstance(value, dict):
        return {k: comparable_state(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [comparable_state(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def op_states(wf: Workflow) -> list:
    return [comparable_state(n.op.get_state()) for n in wf.nodes if isinstance(n, OpNode)
            and getattr(n.op, "is_fitted", True)]


# --- parity of every operator and parameter combination -------------------------------------
def test_every_builtin_operator_has_a_parity_case():
    covered = {type(n.op) for case in CASES for n in Node.coerce(case.build()).walk() if isinstance(n, OpNode)}
    assert set(builtin_operators()) <= covered, set(builtin_operators()) - covered


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_operator_on_device_equals_pandas(case, device, tmp_path):
    frame = FRAMES[case.frame]()
    reference = Workflow(case.build(), progress=False).fit(tl.Dataset(frame, device="cpu"))
    expected = reference.transform(frame)

    data = on_device(frame, device)
    wf = Workflow(case.build(), progress=False).fit(tl.Dataset(data, part_size=MANY_PARTS, device=device))
    got = wf.transform(data)
    assert backend.frame_device(got) == device
    assert_same_frame(got, expected, f"{case.id} on {device}")
    assert_close(op_states(wf), op_states(reference), f"{case.id}: fitted state on {device}")
    assert wf.output_schema == reference.output_schema

    # saved workflows are interchangeable: fit on one device, load and transform on the other
    wf.save(str(tmp_path / "fit_on_device"))
    reference.save(str(tmp_path / "fit_on_cpu"))
    for path in ("fit_on_device", "fit_on_cpu"):
        loaded = Workflow.load(str(tmp_path / path), trusted=[op_cases])
        assert_same_frame(loaded.transform(frame), expected, f"{case.id}: {path}, loaded on the CPU")
        assert_same_frame(loaded.transform(data), expected, f"{case.id}: {path}, loaded on {device}")


@pytest.mark.cudf
@pytest.mark.parametrize("case", [c for c in CASES if c.id.startswith("Categorify")], ids=lambda c: c.id)
def test_counts_merged_as_host_tables_give_the_same_vocabularies(case, monkeypatch):
    from tabloader.encoding.gpu import counting

    frame = FRAMES[case.frame]()
    reference = Workflow(case.build(), progress=False).fit(frame)
    monkeypatch.setattr(counting, "MERGE_ON", "host")  # the switch of TABLOADER_GPU_MERGE
    data = on_device(frame, "cuda")
    wf = Workflow(case.build(), progress=False).fit(tl.Dataset(data, part_size=MANY_PARTS, device="cuda"))
    assert_close(op_states(wf), op_states(reference), f"{case.id}: merged on the host")
    assert_same_frame(wf.transform(data), reference.transform(frame), f"{case.id}: merged on the host")


@pytest.mark.cudf
def test_fill_median_with_a_fractional_median_gives_float64_in_every_cudf_partition():
    frame = pd.DataFrame({"k": pd.array([1, 2, 3, 4, None, 1, 2, 3, 4, None], dtype="Int64")})
    wf = Workflow(["k"] >> ops.FillMedian(), progress=False).fit(on_device(frame, "cuda"))
    whole, no_nulls = wf.transform(on_device(frame, "cuda")), wf.transform(on_device(frame.iloc[:4], "cuda"))
    assert whole["k"].dtype == no_nulls["k"].dtype == np.float64
    assert_close(arrow_column(whole["k"]).to_pylist(), [1.0, 2.0, 3.0, 4.0, 2.5] * 2, "filled")


# --- no partition leaves the device -----------------------------------------------------------
class HostCopies:
    """Patches the host-copy functions (``backend.to_host``, cuDF's ``to_pandas``/``to_arrow``/
    ``to_numpy``, ``cupy.asnumpy``) to fail or count, except inside
    ``backend.stats_to_host`` (fitted statistics at finalize) and for empty frames (schemas).

    A copy is counted once, by the outermost of these calls: ``backend.to_host`` of a cuDF
    frame calls ``DataFrame.to_pandas``, which calls its index's ``to_pandas``."""

    def __init__(self, monkeypatch, fail: bool = True) -> None:
        import cudf
        import cupy

        from tabloader import columnar

        self.fail, self.copies, self._allowed, self._copying = fail, [], 0, 0
        stats_to_host = columnar.stats_to_host

        def allowed_stats_copy(value):
            self._allowed += 1
            try:
                return stats_to_host(value)
            finally:
                self._allowed -= 1

        monkeypatch.setattr(columnar, "stats_to_host", allowed_stats_copy)
        monkeypatch.setattr(backend, "to_host", self._guard(backend.to_host, "backend.to_host"))
        monkeypatch.setattr(cupy, "asnumpy", self._guard(cupy.asnumpy, "cupy.asnumpy"))
        for cls in (cudf.DataFrame, cudf.Series, cudf.Index, cudf.RangeIndex):
            for name in ("to_pandas", "to_arrow", "to_numpy"):
                monkeypatch.setattr(cls, name, self._guard(getattr(cls, name), f"{cls.__name__}.{name}"))

    def _guard(self, function, name: str):
        def guarded(obj, *args, **kwargs):
            # host data handed to backend.to_host or cupy.asnumpy is not copied: only device data counts
            if self._allowed or self._copying or not backend.is_gpu_object(obj) or \
                    (hasattr(obj, "__len__") and len(obj) == 0):
                return function(obj, *args, **kwargs)
            self.copies.append(name)
            if self.fail:
                raise AssertionError(f"{name} copied {len(obj)} rows of a partition to the host")
            self._copying += 1
            try:
                return function(obj, *args, **kwargs)
            finally:
                self._copying -= 1

        return guarded


@pytest.mark.cudf
def test_whole_criteo_workflow_over_a_cudf_dataset_never_copies_a_partition_to_the_host(tmp_path, monkeypatch):
    from tabloader import demo, synthetic

    synthetic.write_criteo(str(tmp_path / "raw"), rows=20_000, num_files=4)
    reference = demo.criteo_workflow(quiet=True).fit(tl.Dataset(str(tmp_path / "raw"), device="cpu"))
    expected = reference.transform(tl.Dataset(str(tmp_path / "raw"), device="cpu")).compute()
    # The 4 files hold about 6 MB decoded: the default part_size (128MB) makes them one partition,
    # on the CPU as on the GPU; 1MB gives one partition per file, so partials are merged too.
    dataset = tl.Dataset(str(tmp_path / "raw"), device="cuda", part_size="1MB")
    assert dataset.partition_sizes() == [5000] * 4

    copies = HostCopies(monkeypatch)
    wf = demo.criteo_workflow(quiet=True).fit(dataset)
    parts = list(wf.transform(dataset).to_iter())
    assert copies.copies == []
    monkeypatch.undo()
    assert all(backend.is_gpu_object(p) for p in parts)
    assert_same_frame(backend.concat(parts, ignore_index=True), expected, "Criteo workflow on the GPU")


def runs_on_the_gpu(case) -> bool:
    """True when every operator of ``case`` declares that it takes cuDF data."""
    return all("cuda" in backend.runs_on(n.op) for n in Node.coerce(case.build()).walk() if isinstance(n, OpNode))


@pytest.mark.cudf
@pytest.mark.parametrize("case", [c for c in CASES if runs_on_the_gpu(c)], ids=lambda c: c.id)
def test_an_operator_that_runs_on_the_gpu_never_copies_a_partition_to_the_host(case, monkeypatch):
    """Fit and transform of every parity case whose operators declare the GPU -- list columns,
    nulls and every parameter combination included -- with the host copies made to fail."""
    frame = FRAMES[case.frame]()
    expected = Workflow(case.build(), progress=False).fit(frame).transform(frame)
    data = on_device(frame, "cuda")

    copies = HostCopies(monkeypatch)
    got = Workflow(case.build(), progress=False).fit(data).transform(data)
    assert copies.copies == []
    monkeypatch.undo()
    assert backend.is_gpu_object(got)
    assert_same_frame(got, expected, f"{case.id} on the GPU without host copies")


@pytest.mark.cudf
def test_a_cudf_side_table_stays_on_the_gpu_and_is_saved_as_data(tmp_path, monkeypatch):
    frame, side = FRAMES["misc"](), op_cases.user_features()
    data, side_on_gpu = on_device(frame, "cuda"), on_device(side, "cuda")

    copies = HostCopies(monkeypatch)
    wf = Workflow(["user", "a"] >> ops.JoinExternal(side_on_gpu, on="user"), progress=False).fit(data)
    got = wf.transform(data)
    assert copies.copies == []
    monkeypatch.undo()
    (op,) = [n.op for n in wf.plan_.nodes if isinstance(getattr(n, "op", None), ops.JoinExternal)]
    assert backend.is_gpu_object(op.get_state()["table"])

    ages, tiers = dict(zip(side["user"], side["age"])), dict(zip(side["user"], side["tier"]))  # by hand
    expected = {"user": frame["user"].tolist(), "age": [ages.get(u) for u in frame["user"]],
                "tier": [tiers.get(u) for u in frame["user"]]}
    wf.save(str(tmp_path / "wf"))
    loaded = Workflow.load(str(tmp_path / "wf"))
    for what, out in [("joined on the GPU", got), ("loaded, on the GPU", loaded.transform(data)),
                      ("loaded, on the CPU", loaded.transform(frame))]:
        assert list(out.columns) == ["user", "a", "age", "tier"], what
        assert {c: arrow_column(out[c]).to_pylist() for c in expected} == expected, what


@tl.register_operator(name="test_gpu_ops:HostOnlyDouble")
class HostOnlyDouble(ops.Operator):
    """Doubles columns with pandas only (a user's operator that cannot take cuDF data)."""

    runs_on = frozenset({"cpu"})
    device_note = "pandas only: it asserts its input is a pandas frame."

    def transform(self, columns, frame):
        assert isinstance(frame, pd.DataFrame), type(frame)
        return frame[columns] * 2


@pytest.mark.cudf
def test_a_run_of_host_only_operators_costs_one_copy_of_each_partition(monkeypatch):
    frame = FRAMES["numeric"]()
    graph = (["a", "c"] >> HostOnlyDouble() >> HostOnlyDouble() >> ops.LogOp()) + (["b"] >> ops.Normalize())
    reference = Workflow(graph, progress=False).fit(frame)
    expected = reference.transform(frame)

    data = on_device(frame, "cuda")
    copies = HostCopies(monkeypatch, fail=False)
    got = reference.transform(data)
    assert copies.copies == ["backend.to_host"]  # one copy for both HostOnlyDouble, none per column
    monkeypatch.undo()
    assert backend.is_gpu_object(got)
    assert_same_frame(got, expected, "host-only operators inside a GPU workflow")


# --- the device hashes have the CPU's bits ----------------------------------------------------
@pytest.mark.cudf
def test_device_hashes_of_strings_numbers_and_sliced_columns_match_the_python_reference():
    from tabloader.encoding import gpu

    strings = ["", "a", "é", "日本語", "a" * 300, None, "pear", "\x00z"]
    ints = [0, -1, 2**63 - 1, -(2**63), 7, None]
    uints = [2**64 - 1, 2**63, 5, None]
    floats = [3.0, -0.0, 2.5, 1e300, float("nan"), -7.0, -(2.0**63), 2.0**63, float(2**63 + 2048), 2.0**64,
              float(2**64 - 2048), -(2.0**63) - 2048]  # the int64/uint64 edges: integral floats hash as those integers
    repeated = ["b", None, None, "pear", "b", "pear"]  # sliced at 1 and 2: null rows first
    for values, arrow_type in [(strings, pa.string()), (repeated, pa.string()), (ints, pa.int64()),
                               (uints, pa.uint64()), (floats, pa.float64())]:
        series = backend.from_arrow(pa.table({"c": pa.array(values, type=arrow_type)}), "cuda")["c"]
        for start in (0, 1, 2):  # sliced columns start at an offset into their buffers
            col = gpu.normalize_column("Test", "c", series.iloc[start:])
            got = [int(h) for h in gpu.hash_values(col).get()]
            want = [NULL_HASH if v is None or v != v else py_hash(v) for v in values[start:]]
            assert got == want, (arrow_type, start)


# --- declarations and import ------------------------------------------------------------------
def test_the_docs_table_of_where_operators_run_is_the_generated_one():
    import pathlib

    docs = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "operators.md").read_text()
    assert docs.split(BEGIN, 1)[1].split(END, 1)[0].strip() == device_table(), \
        "docs/operators.md is out of date: run python tools/operator_devices.py"


def test_a_host_only_declaration_is_listed_as_such():
    assert HostOnlyDouble.runs_on == {"cpu"}
    assert backend.device_for(HostOnlyDouble(), pd.DataFrame()) == "cpu"
    assert all(cls.runs_on == {"cpu", "cuda"} for cls in builtin_operators())


def test_importing_the_gpu_encoding_needs_neither_cudf_nor_cupy():
    code = ("import sys, tabloader.encoding.gpu as g, tabloader.columnar; "
            "assert not {'cudf', 'cupy'} & set(sys.modules), sorted({'cudf', 'cupy'} & set(sys.modules)); "
            "print(len(g.__all__))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) >= 19


# --- partitions the review of the GPU encoding found: all-null columns, hidden list elements -----
def hidden_element_lists() -> pa.Array:
    """``[[1, 2], None, [3], [2]]`` whose null row still spans the elements 9, 9 (arrow allows it;
    polars leaves such rows after masking a list column)."""
    return pa.ListArray.from_arrays([0, 2, 4, 5, 6], [1, 2, 9, 9, 3, 2], mask=pa.array([False, True, False, False]))


@pytest.mark.parametrize("device", DEVICES)
def test_null_list_rows_spanning_elements_are_encoded_without_them(device):
    """The elements under a null list row are no values: not counted at fit, not in the output."""
    table = pa.table({"g": hidden_element_lists()})
    frame = backend.from_arrow(table, device)
    wf = Workflow(["g"] >> ops.Categorify(), progress=False)
    wf.fit(tl.Dataset(frame))
    out = backend.to_host(wf.transform(frame))
    # vocabulary by descending count, ties by value: 2 (twice), then 1, 3; 9 is no value
    assert arrow_column(out["g"]).to_pylist() == [[4, 3], None, [5], [3]]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("column", ["arrow null", "all-null strings"])
def test_an_all_null_partition_of_a_numeric_column_encodes_as_nulls(device, column):
    """A partition where a numeric column holds no value, typed null (arrow's null type: cuDF
    makes it strings) or strings: null ids, as for an all-None object column, not a type error."""
    wf = Workflow(["i"] >> ops.Categorify(), progress=False)
    wf.fit(tl.Dataset(pd.DataFrame({"i": pd.array([1, 2, 2], dtype="Int64")})))
    values = pa.nulls(3) if column == "arrow null" else pa.nulls(3, pa.string())
    frame = backend.from_arrow(pa.table({"i": values}), device)
    assert backend.to_host(wf.transform(frame))["i"].tolist() == [1, 1, 1]


@pytest.mark.parametrize("device", DEVICES)
def test_strings_with_nul_bytes_are_keys_of_their_own(device):
    """``"a"`` and ``"a\\x00b"`` are two values, alone and in a combination of columns (pandas 2's
    object strings hash up to the first NUL byte; cuDF compares every byte)."""
    frame = pd.DataFrame({"s": pd.Series(["a", "a\x00b", "a\x00b", "b"], dtype=backend.STRING_DTYPE), "j": [1, 1, 1, 1]})
    wf = Workflow((["s"] >> ops.Categorify()) + ([["s", "j"]] >> ops.Categorify(encode_type="combo")), progress=False)
    data = on_device(frame, device)
    wf.fit(tl.Dataset(data))
    out = backend.to_host(wf.transform(data))
    assert out["s"].tolist() == [4, 3, 3, 5]  # a\x00b twice first; then a, b by value
    assert out["s_j"].tolist() == [4, 3, 3, 5]


@pytest.mark.parametrize("device", DEVICES)
def test_datetime_features_of_time_zoned_timestamps_are_the_local_calendar(device):
    """Spark's TIMESTAMP and DuckDB's TIMESTAMPTZ read as zoned (UTC or a named zone): calendar
    parts of the local wall time, epoch seconds of the instant, on both devices."""
    instants = pd.to_datetime(["2024-01-01 00:30", "2024-12-31 23:30", None]).tz_localize("Europe/Berlin")
    frame = on_device(pd.DataFrame({"t": instants}), device)
    features = ["year", "day_of_year", "hour", "day_of_week", "epoch_seconds"]
    out = backend.to_host(Workflow(["t"] >> ops.DatetimeFeatures(features), progress=False).fit_transform(
        tl.Dataset(frame)).compute())
    valid = instants[:2]
    assert out["t_year"].tolist()[:2] == [2024, 2024] and out["t_day_of_year"].tolist()[:2] == [1, 366]
    assert out["t_hour"].tolist()[:2] == [0, 23] and out["t_day_of_week"].tolist()[:2] == [0, 1]
    assert out["t_epoch_seconds"].tolist()[:2] == [t.timestamp() for t in valid]
    assert pd.isna(out["t_year"].tolist()[2]) and math.isnan(out["t_epoch_seconds"].tolist()[2])


@pytest.mark.parametrize("device", DEVICES)
def test_fill_missing_and_clip_of_a_decimal_column_take_the_numbers_as_decimals_of_its_scale(device):
    """FillMissing(0.5) and Clip(0.0, 1.0) on a decimal(10, 2) column (a float is no value of it):
    the numbers as decimals of its scale, the dtype kept, on both devices."""
    from decimal import Decimal

    amount = pd.array([Decimal("1.25"), None, Decimal("-3.00")], dtype=pd.ArrowDtype(pa.decimal128(10, 2)))
    frame = on_device(pd.DataFrame({"amount": amount}), device)
    out = Workflow(["amount"] >> ops.FillMissing(0.5) >> ops.Clip(0.0, 1.0), progress=False).fit_transform(frame)
    got = arrow_column(out["amount"])
    assert pa.types.is_decimal(got.type) and got.type.scale == 2, got.type
    assert got.to_pylist() == [Decimal("1.00"), Decimal("0.50"), Decimal("0.00")]


@pytest.mark.parametrize("device", DEVICES)
def test_an_empty_vocabulary_sends_every_value_to_the_oov_buckets(device):
    """``Categorify(vocabs={"c": []})``: every value hashed into the OOV buckets, a null 1, on both devices."""
    frame = pd.DataFrame({"c": pd.Series(["a", None, "b"], dtype=backend.STRING_DTYPE), "i": [5, 6, 7]})
    wf = Workflow(["c", "i"] >> ops.Categorify(vocabs={"c": [], "i": []}, num_buckets=10), progress=False)
    out = backend.to_host(wf.fit_transform(tl.Dataset(on_device(frame, device))).compute())
    assert out["c"].tolist() == [2 + py_hash("a") % 10, 1, 2 + py_hash("b") % 10]
    assert out["i"].tolist() == [2 + py_hash(v) % 10 for v in (5, 6, 7)]


@pytest.mark.parametrize("device", DEVICES)
def test_a_column_selected_twice_is_kept_once(device):
    """The same input column in two branches is the same data: kept once (cuDF refuses to
    concatenate frames with repeated names)."""
    frame = pd.DataFrame({"a": [1, 2, 3], "b": [4, 5, 6], "c": [0.5, 1.5, 2.5]})
    graph = ["a", "b"] + ["b", "a"] + (["c"] >> ops.LogOp()) + ["b"]
    out = backend.to_host(Workflow(graph, progress=False).fit_transform(tl.Dataset(on_device(frame, device))).compute())
    assert list(out.columns) == ["a", "b", "c"]
    assert out["a"].tolist() == [1, 2, 3] and out["b"].tolist() == [4, 5, 6]
    np.testing.assert_allclose(out["c"].to_numpy(), np.log1p(frame["c"].to_numpy()))


@pytest.mark.parametrize("device", DEVICES)
def test_groupby_sorts_nan_and_null_keys_as_missing_in_row_order(device):
    """A float sort key holding NaN and nulls (cuDF tells them apart; pandas counts both as
    missing): values first, then the missing ones in row order, on both devices."""
    table = pa.table({"user": [1, 1, 1, 1, 1], "t": pa.array([2.0, float("nan"), None, 1.0, float("nan")]),
                      "v": [10, 11, 12, 13, 14]})
    data = backend.from_arrow(table, device)
    out = backend.to_host(Workflow(["user", "t", "v"] >> ops.Groupby("user", sort_cols="t", aggs={"v": "list"}),
                                   progress=False).fit_transform(tl.Dataset(data)).compute())
    assert arrow_column(out["v_list"]).to_pylist() == [[13, 10, 11, 12, 14]]


@pytest.mark.parametrize("device", DEVICES)
def test_groupby_of_a_partition_whose_keys_are_all_null_is_empty(device):
    """Every row's key null: no group (CuPy before 14.2 cannot count an empty array of groups)."""
    table = pa.table({"user": pa.nulls(3, pa.int64()), "v": [1, 2, 3]})
    data = backend.from_arrow(table, device)
    out = backend.to_host(Workflow(["user", "v"] >> ops.Groupby("user", aggs={"v": ["list", "sum"]}),
                                   progress=False).fit_transform(tl.Dataset(data)).compute())
    assert len(out) == 0 and list(out.columns) == ["user", "v_list", "v_sum"]


@pytest.mark.parametrize("device", DEVICES)
def test_a_frame_with_repeated_labels_transforms_and_keeps_them(device):
    """pd.concat repeats labels; the branches join on row numbers, and the labels go back."""
    part = pd.DataFrame({"c": ["a", "b", "a"], "x": [1.0, 2.0, 3.0], "y": [7, 8, 9]})
    frame = on_device(pd.concat([part, part.iloc[::-1]]), device)
    frame.index = backend.dataframe_lib(device).Index([0, 1, 2, 2, 1, 0])
    graph = (["c"] >> ops.Categorify()) + (["x"] >> ops.Normalize()) + ["y"]
    out = Workflow(graph, progress=False).fit_transform(frame)
    assert backend.frame_device(out) == device
    host_out = backend.to_host(out)
    assert host_out.index.tolist() == [0, 1, 2, 2, 1, 0]
    assert host_out["c"].tolist() == [3, 4, 3, 3, 4, 3] and host_out["y"].tolist() == [7, 8, 9, 9, 8, 7]


@pytest.mark.parametrize("device", DEVICES)
def test_difference_lag_of_nanosecond_integers_is_exact(device):
    """int64 timestamps subtract as integers on both devices (as float64 1 ns came out 0)."""
    ts = pa.array([1_717_243_200_000_000_001, 1_717_243_200_000_000_002, None, 1_717_243_200_000_000_300])
    data = backend.from_arrow(pa.table({"user": [1, 1, 1, 1], "ts": ts}), device)
    out = backend.to_host(ops.DifferenceLag("user").transform(["ts"], data))
    np.testing.assert_array_equal(np.asarray(out["ts_difference_lag_1"], dtype=np.float64),
                                  [np.nan, 1.0, np.nan, np.nan])


@pytest.mark.parametrize("device", DEVICES)
def test_fill_missing_refuses_text_for_numbers_and_takes_python_times(device):
    """cuDF would parse "5" into a number column (pandas makes objects): refused on both; a
    Python datetime (which cuDF does not take) fills a datetime column on both."""
    frame = pd.DataFrame({"x": [1.5, None], "t": pd.to_datetime(["2024-01-01", None])})
    data = on_device(frame, device)
    with pytest.raises(TypeError, match=r"FillMissing cannot fill column 'x' .* '5'"):
        ops.FillMissing("5").transform(["x"], data)
    filled = backend.to_host(ops.FillMissing(datetime.datetime(2024, 2, 1)).transform(["t"], data))
    assert filled["t"].tolist() == [pd.Timestamp("2024-01-01"), pd.Timestamp("2024-02-01")]
