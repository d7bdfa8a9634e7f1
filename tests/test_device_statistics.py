"""Partition statistics computed on the partition's device and read back once
(:func:`tabloader.backend.finite_moments`, ``finite_extremes``, ``host_floats``), and frames
of operator outputs put together on the GPU without reindexing (``frame_from_columns``).

Each result is compared with numpy/pandas by hand; the ``cuda`` cases (marked ``gpu``) run the
same inputs through CuPy, and those marked ``cudf`` through cuDF.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tabloader import backend

ROWS = np.array([1.5, np.nan, -2.0, np.inf, 4.0, -np.inf, 0.25])


@pytest.mark.parametrize("values", [ROWS, ROWS[[0, 2, 4]], np.array([np.nan, np.inf]), np.zeros(0)])
def test_finite_moments_and_extremes_are_those_of_the_finite_values(device, values):
    finite = values[np.isfinite(values)]
    on_device = backend.asarray(values, device)
    count, mean, m2 = backend.host_floats(list(backend.finite_moments(on_device)))
    low, high = backend.host_floats(list(backend.finite_extremes(on_device)))
    assert count == len(finite)
    if len(finite):
        expected_mean = sum(finite) / len(finite)
        assert mean == pytest.approx(expected_mean, rel=1e-12)
        assert m2 == pytest.approx(sum((v - expected_mean) ** 2 for v in finite), rel=1e-12)
        assert (low, high) == (min(finite), max(finite))
    else:
        assert (mean, m2, low, high) == (0.0, 0.0, np.inf, -np.inf)


@pytest.mark.parametrize("value", [0.1, -2.675, 1e10 + 0.1])
def test_a_constant_column_has_exactly_its_value_as_mean_and_no_spread(device, value):
    """A plain mean of 1000 x 0.1 rounds to 0.10000000000000002 (and M2 to ~1e-31, which
    Normalize turned into +-1): the moments are those of the values less the first one."""
    values = np.r_[np.nan, np.full(1000, value), np.inf]
    count, mean, m2 = backend.host_floats(list(backend.finite_moments(backend.asarray(values, device))))
    assert (count, mean, m2) == (1000, value, 0.0)


def test_host_floats_keeps_order_and_values(device):
    xp = backend.array_lib(device)
    numbers = [xp.asarray(2.5), xp.int64(3), xp.asarray(np.inf)]
    assert backend.host_floats(numbers) == [2.5, 3.0, np.inf]


@pytest.mark.cudf
def test_a_cudf_frame_from_columns_is_positional_and_turns_array_nan_to_null(monkeypatch):
    cudf, cp = backend.cudf(), backend.cupy()
    frame = cudf.DataFrame({"a": [1.0, None, 3.0], "b": [1, 2, 3]}, index=[10, 20, 30])

    def no_reindex(*args, **kwargs):
        raise AssertionError("frame_from_columns reindexed a column (a join per column on the GPU)")

    monkeypatch.setattr(cudf.Series, "reindex", no_reindex)
    out = backend.frame_from_columns({"a": frame["a"].fillna(0.0), "nan": cp.asarray([np.nan, 1.0, 2.0]),
                                      "plain": cp.asarray([1.0, 2.0, 3.0]), "b": frame["b"] * 2},
                                     frame.index, like=frame)
    expected = pd.DataFrame({"a": [1.0, 0.0, 3.0], "nan": [None, 1.0, 2.0], "plain": [1.0, 2.0, 3.0],
                             "b": [2, 4, 6]}, index=[10, 20, 30])
    host = out.to_pandas()
    assert host.index.tolist() == [10, 20, 30]
    assert out["nan"].null_count == 1 and out["plain"].null_count == 0  # as cudf.DataFrame(arrays) gives
    pd.testing.assert_frame_equal(host.astype("float64"), expected.astype("float64"))


@pytest.mark.cudf
def test_a_cudf_frame_from_columns_aligns_a_series_on_other_labels_as_pandas_does():
    cudf = backend.cudf()
    frame = cudf.DataFrame({"b": [3, 1, 2]}, index=[10, 20, 30])
    out = backend.frame_from_columns({"sorted": frame["b"].sort_values(), "b": frame["b"]}, frame.index, like=frame)
    host = pd.DataFrame({"b": [3, 1, 2]}, index=[10, 20, 30])
    expected = pd.DataFrame({"sorted": host["b"].sort_values(), "b": host["b"]}, index=host.index)
    pd.testing.assert_frame_equal(out.to_pandas(), expected, check_dtype=False)


@pytest.mark.cudf
def test_cudf_values_with_nulls_as_nan_are_taken_without_a_reduction(monkeypatch):
    """``column_values(series, float dtype)`` of a cuDF column with nulls: nulls become NaN (and
    NaN stays NaN) without cuDF counting the NaN first (a reduction: a wait for the device)."""
    import pyarrow as pa
    from cudf.core.column.column import ColumnBase

    cudf, cp = backend.cudf(), backend.cupy()
    frame = cudf.DataFrame.from_arrow(pa.table({"f": pa.array([1.5, None, float("nan"), 4.0], pa.float32()),
                                                "i": pa.array([1, None, 3, None], pa.int64()),
                                                "plain": pa.array([1.0, 2.0, 3.0, 4.0], pa.float64())}))

    def no_reduction(*args, **kwargs):
        raise AssertionError("a reduction read a value back from the device")

    monkeypatch.setattr(ColumnBase, "_reduce", no_reduction)
    got = {"f": backend.column_values(frame["f"], "float32"), "i": backend.column_values(frame["i"], "float64"),
           "plain": backend.column_values(frame["plain"], "float64")}
    monkeypatch.undo()
    expected = {"f": np.float32([1.5, np.nan, np.nan, 4.0]), "i": np.float64([1, np.nan, 3, np.nan]),
                "plain": np.float64([1, 2, 3, 4])}
    for name, values in expected.items():
        assert got[name].dtype == values.dtype, name
        np.testing.assert_array_equal(cp.asnumpy(got[name]), values, err_msg=name)
