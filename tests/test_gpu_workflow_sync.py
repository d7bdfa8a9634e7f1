"""On a GPU, the Criteo workflow's fit and transform wait for the device a fixed number of times
per partition, whatever the number of columns (issue 14), and the sync-free paths give the CPU's values.

Reads of device data by the host are caught two ways while one partition is fit or transformed:

* CuPy: ``cupyx.allow_synchronize(False)`` makes ``ndarray.get()`` (behind ``int(x)``,
  ``bool(x)``, boolean-mask indexing, ``nonzero``, ``unique``...) raise ``cupyx.DeviceSynchronized``.
  The legitimate reads are wrapped to allow them and count them: one per operator of
  :func:`tabloader.backend._arrays_with_nan` (which float outputs hold NaN, all columns read back
  together) and of :func:`tabloader.columnar.host_floats` (a partition's statistics: Normalize's
  moments, the sizes of Categorify's value counts, all columns read back together).
* cuDF: its reads of a result (a reduction's scalar: ``nan_count``, ``sum``, ``any``...) go through
  ``ColumnBase._reduce``, and single values through ``element_indexing``: both are counted.

Skipped where no CUDA device is usable (``tests/conftest.py``); ``tools/gpu_checks.sh`` runs it.
"""

from __future__ import annotations

import contextlib
import glob
import os
import warnings

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import tabloader as tl
from tabloader import backend, columnar, ops, synthetic
from tabloader.plan import Plan

pytestmark = pytest.mark.gpu

#: A partition's transform may read back once per operator that outputs floats (FillMissing,
#: Clip, LogOp, Normalize: which outputs hold NaN), plus one spare.
MAX_READS = 5
#: A partition's fit: FillMissing, Clip and LogOp (Normalize's input) as in the transform,
#: Normalize's moments and Categorify's value counts once each, plus one spare.
MAX_FIT_READS = 6
#: Merging two partitions' statistics: Categorify's merged counts once (Normalize merges on the host).
MAX_MERGE_READS = 1


def test_the_fused_float32_log1p_kernel_gives_the_cpu_values():
    cp = pytest.importorskip("cupy")
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.integers(0, 70_000, 5000).astype(np.float32),  # counts
                        rng.normal(0, 1e3, 5000).astype(np.float32),
                        np.float32([0, -1, -2, -0.5, 1e-9, 3.4e38, np.inf, -np.inf, np.nan])])
    with np.errstate(invalid="ignore", divide="ignore"):
        expected = np.log(x.astype(np.float64) + 1.0).astype(np.float32)  # by hand
    got = backend.log1p_float32(cp.asarray(x))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(cp.asnumpy(got), expected)


@pytest.mark.parametrize("fill_val", [0, 0.1, np.float32(2.5), -7])
def test_fill_missing_of_cudf_float_columns_with_nulls_and_nan_gives_the_cpu_values(fill_val):
    cudf = pytest.importorskip("cudf")
    x = pa.array([1.5, None, float("nan"), -3.0, None], pa.float32())
    y = pa.array([float("nan"), 2.0, 3.0, 4.0, 5.0], pa.float64())  # NaN, no nulls
    z = pa.array([1.0, 2.0, 3.0, 4.0, 5.0], pa.float64())  # neither
    frame = cudf.DataFrame.from_arrow(pa.table({"x": x, "y": y, "z": z}))
    assert frame["x"].null_count == 2  # nulls and NaN kept apart on the device
    got = ops.FillMissing(fill_val).transform(["x", "y", "z"], frame)
    for name, column in (("x", x), ("y", y), ("z", z)):
        values = column.to_numpy(zero_copy_only=False)  # nulls as NaN
        dtype = values.dtype
        expected = np.where(np.isnan(values), dtype.type(fill_val), values)  # by hand
        out = got[name].to_pandas()
        assert out.dtype == dtype, name
        np.testing.assert_array_equal(out.to_numpy(), expected, err_msg=name)


@contextlib.contextmanager
def counted_reads(monkeypatch):
    """Forbid CuPy reads but the counted ones of ``backend._arrays_with_nan`` and
    ``columnar.host_floats``; count cuDF's
    reductions and single-value reads. Yields the list of the reads."""
    cupyx = pytest.importorskip("cupyx")
    from cudf.core.column.column import ColumnBase

    reads = []

    def counting(function, name):
        def counted(*args, **kwargs):
            reads.append(name)
            with cupyx.allow_synchronize(True):
                return function(*args, **kwargs)
        return counted

    monkeypatch.setattr(backend, "_arrays_with_nan", counting(backend._arrays_with_nan, "arrays_with_nan"))
    monkeypatch.setattr(columnar, "host_floats", counting(columnar.host_floats, "host_floats"))
    for name in ("_reduce", "element_indexing"):
        monkeypatch.setattr(ColumnBase, name, counting(getattr(ColumnBase, name), f"cudf {name}"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # allow_synchronize's deprecation warning
        with cupyx.allow_synchronize(False):
            yield reads
    monkeypatch.undo()


def criteo_chain(continuous: list, categorical: list) -> tl.Workflow:
    """demo.criteo_workflow's operators over the given columns."""
    cats = categorical >> ops.Categorify(freq_threshold=2)
    conts = continuous >> ops.FillMissing(0) >> ops.Clip(min_value=0) >> ops.LogOp() >> ops.Normalize()
    return tl.Workflow(cats + conts + ["label"], progress=False)


@pytest.fixture(scope="module")
def criteo(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("criteo") / "data")  # write_criteo refuses an existing folder
    synthetic.write_criteo(path, rows=20_000, num_files=2)
    return path


@pytest.mark.cudf
@pytest.mark.parametrize("width", [2, 13])
def test_a_criteo_partition_is_transformed_with_a_few_reads_whatever_the_number_of_columns(criteo, width,
                                                                                           monkeypatch):
    continuous = [f"I{i}" for i in range(1, width + 1)]
    categorical = [f"C{i}" for i in range(1, 2 * width + 1)]
    wf = criteo_chain(continuous, categorical).fit(tl.Dataset(criteo, device="cuda"))
    reference = criteo_chain(continuous, categorical).fit(tl.Dataset(criteo, device="cpu"))
    first = min(glob.glob(os.path.join(criteo, "*.parquet")))
    partition = backend.read_parquet(first, device="cuda")
    assert partition["I1"].null_count > 0 and partition["C1"].null_count > 0  # the paths with nulls are taken

    with counted_reads(monkeypatch) as reads:
        out = wf.transform_frame(partition)
    assert len(reads) <= MAX_READS, reads

    expected = reference.transform_frame(backend.read_parquet(first, device="cpu"))
    got = out.to_pandas()
    assert list(got.columns) == list(expected.columns)
    for col in expected.columns:
        e, g = expected[col], got[col]
        if col in continuous:
            np.testing.assert_allclose(g.to_numpy(np.float64), e.to_numpy(np.float64), rtol=1e-6, atol=1e-6,
                                       err_msg=col)
        else:
            assert g.astype("int64").tolist() == pd.Series(e).astype("int64").tolist(), col


@pytest.mark.cudf
@pytest.mark.parametrize("width", [2, 13])
def test_criteo_partitions_are_fit_with_a_few_reads_whatever_the_number_of_columns(criteo, width, monkeypatch):
    """What Workflow.fit runs on each partition (its Dask tasks, run here on this thread, where
    ``allow_synchronize`` applies): the statistics of every stat operator, then their merge; the
    fitted state is the one computed by hand with pandas."""
    continuous = [f"I{i}" for i in range(1, width + 1)]
    categorical = [f"C{i}" for i in range(1, 2 * width + 1)]
    wf = criteo_chain(continuous, categorical)
    files = sorted(glob.glob(os.path.join(criteo, "*.parquet")))
    plan = Plan.resolve(wf.output_node, tl.Dataset(criteo, device="cuda").schema)
    nodes = wf.stat_nodes
    partitions = [backend.read_parquet(f, device="cuda") for f in files]
    assert len(partitions) == 2 and partitions[0]["C1"].null_count > 0

    with counted_reads(monkeypatch) as reads:
        partials = []
        for partition in partitions:
            memo: dict = {}
            partials.append([n.op.fit_partial(plan.columns(n).input, plan.operator_input(n, partition, memo))
                             for n in nodes])
            assert len(reads) <= MAX_FIT_READS, reads
            reads.clear()
        merged = [n.op.merge(a, b) for n, a, b in zip(nodes, *partials)]
        assert len(reads) <= MAX_MERGE_READS, reads
    for node, stats in zip(nodes, merged):
        node.op.finalize(plan.columns(node).input, stats)

    frame = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    categorify, normalize = (next(n.op for n in nodes if isinstance(n.op, kind))
                             for kind in (ops.Categorify, ops.Normalize))
    for col in categorical:  # freq_threshold=2; by descending count, ties by value
        counts = frame[col].dropna().astype("int64").value_counts()
        expected = sorted(((v, n) for v, n in counts.items() if n >= 2), key=lambda vn: (-vn[1], vn[0]))
        vocab = categorify.vocabularies_[col]
        assert list(zip(vocab["value"].tolist(), vocab["count"].tolist())) == expected, col
        assert categorify.null_counts_[col] == int(frame[col].isna().sum()), col
    for col in continuous:  # FillMissing(0) >> Clip(min_value=0) >> LogOp, in float32 as the columns are
        x = frame[col].astype("float32").fillna(np.float32(0)).clip(lower=np.float32(0)).to_numpy()
        logged = np.log(x.astype(np.float64) + 1.0).astype(np.float32).astype(np.float64)
        assert normalize.means_[col] == pytest.approx(logged.mean(), rel=1e-9), col
        assert normalize.stds_[col] == pytest.approx(logged.std(), rel=1e-9), col


#: DataStats' fit of a partition: every column's numbers (nulls, moments, extremes) once, every
#: column's value counts once.
MAX_DATA_STATS_READS = 2


@pytest.mark.cudf
@pytest.mark.parametrize("width", [2, 13])
def test_data_stats_fit_a_criteo_partition_with_two_reads_whatever_the_number_of_columns(criteo, width, monkeypatch):
    columns = [f"I{i}" for i in range(1, width + 1)] + [f"C{i}" for i in range(1, 2 * width + 1)]
    files = sorted(glob.glob(os.path.join(criteo, "*.parquet")))
    op = ops.DataStats()
    with counted_reads(monkeypatch) as reads:
        partials = []
        for path in files:
            partials.append(op.fit_partial(columns, backend.read_parquet(path, columns=columns, device="cuda")))
            assert len(reads) <= MAX_DATA_STATS_READS, reads
            reads.clear()
        merged = op.merge(*partials)
        assert len(reads) <= 1, reads
    op.finalize(columns, merged)

    frame = pd.concat([pd.read_parquet(f, columns=columns) for f in files], ignore_index=True)
    for col in columns:
        values = frame[col].astype("float64")
        stats, valid = op.stats_[col], values.dropna()
        assert (stats["rows"], stats["nulls"]) == (len(values), int(values.isna().sum())), col
        assert (stats["min"], stats["max"]) == (valid.min(), valid.max()), col
        assert stats["mean"] == pytest.approx(valid.mean(), rel=1e-9), col
        assert stats["std"] == pytest.approx(valid.std(ddof=1), rel=1e-9), col
        assert stats["cardinality"] == (None if col.startswith("I") else valid.nunique()), col
