"""The GPU fits of JoinGroupby and TargetEncoding read the device back once per key group.

Both group a partition's rows by their keys (``tabloader.encoding.gpu.group_rows``) and gather the
rows of each group's statistics. On CuPy, selecting the non-null rows (``flatnonzero`` of the
null mask, a boolean filter), testing the mask (``bool(mask.any())``), ``cupy.unique`` and
selecting the non-NaN values each read a count back from the device, and ``cupy.bincount``
reads two: a wait per column and partition. Here the fits run on the numpy-backed CuPy stand-in of ``tests/test_loader_host_reads.py``
(which refuses those reads), with the operators switched to their GPU paths as
``tests/test_gpu_transform_reads.py`` does; the one allowed read (the number of groups and of
null rows, together) is counted. The fitted statistics are compared with pandas' groupby, by hand.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tabloader import ops

from test_device_counting import stand_in
from test_gpu_lookup_reads import no_mask_assignment  # noqa: F401 (on_device's fixtures)
from test_gpu_transform_reads import on_device  # noqa: F401 (the fixture)
from test_loader_host_reads import HostRead, cupy  # noqa: F401 (cupy: the fixture)

FIT = pd.DataFrame({"c": pd.Series([3, 7, None, 3, 11, 7, 3, None, 7], dtype="Int64"),
                    "d": pd.Series([1, 1, 1, 2, None, 1, 1, 2, 1], dtype="Int64"),
                    "x": [1.0, 2.0, 4.0, 8.0, 16.0, np.nan, 64.0, 128.0, 256.0],
                    "y": [1, 0, 1, 1, 0, 0, 1, 0, 1]})


def refuse_bincount(*args, **kwargs):
    raise HostRead("cupy.bincount reads the largest code back, and whether any is negative")


@pytest.fixture
def fit_on_device(on_device, monkeypatch):  # noqa: F811 (the imported fixture)
    """``fit_on_device(op, columns)``: ``op.fit_partial`` of FIT on the stand-in device, its
    reads counted, then finalized; returns the number of reads."""
    def fit(op, columns):
        on_device()
        standin = stand_in(monkeypatch)  # counts ndarray.get() (backend.host_floats) as a read
        monkeypatch.setattr(standin, "bincount", refuse_bincount, raising=False)
        partial = op.fit_partial(columns, FIT)
        reads = standin.reads
        op.finalize(columns, partial)
        return reads

    return fit


def groups_by_hand(keys):
    """FIT's rows grouped by ``keys`` (pandas), and the rows with a null key."""
    valid = FIT.dropna(subset=keys)
    return valid.groupby(keys), FIT[FIT[keys].isna().any(axis=1)]


def fitted_rows(table, keys):
    """A fitted statistics table indexed by its keys (as Python ints), sorted."""
    index = [tuple(int(v) for v in row) for row in table[[f"__key_{k}" for k in keys]].itertuples(index=False)]
    return table.set_axis(index if len(keys) > 1 else [i[0] for i in index]).sort_index()


@pytest.mark.parametrize("keys", [["c"], ["c", "d"]])
def test_join_groupby_fits_with_one_read_per_key_group(fit_on_device, keys):
    op = ops.JoinGroupby(cont_cols=["x"], stats=["count", "sum", "mean", "std", "min", "max"])
    columns = [tuple(keys)] if len(keys) > 1 else keys
    assert fit_on_device(op, columns) == 1
    prefix = "_".join(keys)
    got = fitted_rows(op.stats_[prefix], keys)
    groups, null_rows = groups_by_hand(keys)
    x = groups["x"]
    expected = pd.DataFrame({"count": groups.size(), "x_sum": x.sum(), "x_mean": x.mean(), "x_std": x.std(),
                             "x_min": x.min(), "x_max": x.max()})
    expected.index = [tuple(int(v) for v in k) if len(keys) > 1 else int(k) for k in expected.index]
    np.testing.assert_allclose(got[expected.columns].to_numpy(float), expected.sort_index().to_numpy(float),
                               rtol=1e-12)
    nulls = null_rows["x"]
    np.testing.assert_allclose(op.null_stats_[prefix][expected.columns].to_numpy(float)[0],
                               [len(null_rows), nulls.sum(), nulls.mean(), nulls.std(), nulls.min(), nulls.max()])


@pytest.mark.parametrize("keys", [["c"], ["c", "d"]])
def test_target_encoding_fits_with_one_read_per_key_group(fit_on_device, keys):
    op = ops.TargetEncoding("y", kfold=1)
    columns = [tuple(keys)] if len(keys) > 1 else keys
    assert fit_on_device(op, columns) == 1
    prefix = "_".join(keys)
    got = fitted_rows(op.stats_[prefix], keys)
    groups, null_rows = groups_by_hand(keys)
    expected = pd.DataFrame({"count_y_f0": groups.size(), "sum_y_f0": groups["y"].sum()})
    expected.index = [tuple(int(v) for v in k) if len(keys) > 1 else int(k) for k in expected.index]
    np.testing.assert_array_equal(got[expected.columns].to_numpy(float), expected.sort_index().to_numpy(float))
    np.testing.assert_array_equal(op.null_stats_[prefix][expected.columns].to_numpy(float)[0],
                                  [len(null_rows), null_rows["y"].sum()])
