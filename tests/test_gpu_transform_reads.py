"""The GPU transforms of the hashing, grouping, lag and list operators read nothing back from the device.

On CuPy, a boolean-mask assignment (``ids[mask] = 0``) or selection (``x[mask]``), and
``flatnonzero``, read a count back from the device: a wait per column and partition. Here the
operators' GPU paths run on the numpy-backed CuPy stand-in of ``tests/test_loader_host_reads.py``,
which refuses those reads (boolean-mask assignment refused as well, see
``tests/test_gpu_lookup_reads.py``). Fitting runs on pandas; for the transform, the operators get
the GPU encoding module, and the test stands in for cuDF where the operators meet it: a column's
conversion to device arrays (what ``tabloader.encoding.gpu.normalize_column``,
``backend.column_values`` or ``backend.list_layout`` make of a cuDF column, built here from the
pandas one) and the output frame (``backend.frame_from_columns`` returns the columns themselves,
to be checked as device arrays). The values are compared with the encoding computed by hand
(``tests/encoding_reference.py``) or with pandas.
"""

from __future__ import annotations

import dataclasses
import importlib

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from tabloader import backend, ops
from tabloader.encoding.gpu import columns as gpu_columns
from tabloader.encoding.gpu.columns import NormalizedColumn

from encoding_reference import expected_ids, is_null, py_cross, py_hash
from test_gpu_lookup_reads import no_mask_assignment  # noqa: F401 (the fixture)
from test_loader_host_reads import _device, cupy, host  # noqa: F401 (cupy: the fixture)


def device_normalized(op, name, series):
    """What the GPU ``normalize_column`` makes of a numeric cuDF column, from the pandas one:
    int64 or float64 values on the stand-in device, null and NaN rows masked (their value 0)."""
    xp = backend.cupy()
    nulls = series.isna().to_numpy()
    if pd.api.types.is_float_dtype(series.dtype):
        kind, values = "float", series.to_numpy(np.float64, na_value=0.0)
    else:
        kind, values = "int", series.to_numpy(np.int64, na_value=0)
    return NormalizedColumn(kind, xp.asarray(np.where(nulls, 0, values)), xp.asarray(nulls) if nulls.any() else None)


@pytest.fixture
def on_device(cupy, no_mask_assignment, monkeypatch):  # noqa: F811 (the imported fixtures)
    """A function switching the operators' transforms to their GPU paths on the stand-in device."""
    def switch():
        gpu = importlib.import_module("tabloader.encoding.gpu")
        host_values = backend.column_values
        monkeypatch.setattr(backend, "encoding_for", lambda data: gpu)
        monkeypatch.setattr(gpu, "normalize_column", device_normalized)
        monkeypatch.setattr(gpu_columns, "normalize_column", device_normalized)  # map_column's
        monkeypatch.setattr(backend, "column_values", lambda series, dtype=None: _device(host_values(series, dtype)))
        monkeypatch.setattr(backend, "frame_from_columns", lambda columns, index, like=None: columns)

    return switch


def fitted(op, columns, frame):
    """``op`` fitted on the pandas ``frame`` (one partition)."""
    op.finalize(columns, op.fit_partial(columns, frame))
    return op


def ids_of(out, name):
    return host(out[name]).tolist()


KEYS = pd.Series([3, 7, None, 3, 11, 7, 3, None], dtype="Int64")


def test_hash_bucket_without_reads(on_device):
    frame = pd.DataFrame({"c": KEYS})
    on_device()
    out = ops.HashBucket(10, dtype="int32").transform(["c"], frame)
    assert out["c"].dtype == np.int32
    assert ids_of(out, "c") == [0 if is_null(v) else 1 + py_hash(v) % 9 for v in KEYS.tolist()]


def test_hashed_cross_without_reads(on_device):
    a = pd.Series([1, None, 2, None], dtype="Int64")
    b = pd.Series([0.5, 4.0, None, None])
    frame = pd.DataFrame({"a": a, "b": b})
    on_device()
    out = ops.HashedCross(20).transform([("a", "b")], frame)
    expected = [0 if is_null(x) and is_null(y) else 1 + py_cross((x, y)) % 19 for x, y in zip(a.tolist(), b.tolist())]
    assert ids_of(out, "a_b") == expected


@pytest.fixture
def no_gathered_copy(monkeypatch):
    """Refuses gathering a column's rows: hashing every row of a column by its positions
    ``0..n-1`` copied a string column whole (on cuDF) before hashing it."""
    def refuse(self, positions):
        raise AssertionError("the column was gathered by positions (a copy of every row) instead of used as it is")

    monkeypatch.setattr(NormalizedColumn, "take", refuse, raising=False)  # gone: nothing gathers any more


@pytest.mark.parametrize("num_buckets", [1, 4])
@pytest.mark.usefixtures("no_gathered_copy")
def test_categorify_with_oov_buckets_without_reads(on_device, num_buckets):
    fit = pd.DataFrame({"c": KEYS})
    queries = pd.Series([3, 5, None, 11, 12, 7, 99, 3], dtype="Int64")  # 5, 12, 99: unseen
    op = ops.Categorify(num_buckets=num_buckets)
    fitted(op, ["c"], fit)
    on_device()
    out = op.transform(["c"], pd.DataFrame({"c": queries}))
    assert ids_of(out, "c") == expected_ids(queries.tolist(), KEYS.tolist(), num_buckets=num_buckets)[0]


@pytest.mark.usefixtures("no_gathered_copy")
def test_categorify_combo_with_oov_buckets_without_reads(on_device):
    a = pd.Series([1, 1, 2, None, 2], dtype="Int64")
    b = pd.Series([5, 5, 6, 6, None], dtype="Int64")
    op = ops.Categorify(num_buckets=3, encode_type="combo")
    fitted(op, [("a", "b")], pd.DataFrame({"a": a, "b": b}))
    qa = pd.Series([1, 2, 1, None, 3], dtype="Int64")
    qb = pd.Series([5, 6, 6, 5, 3], dtype="Int64")  # (1, 6), (3, 3): unseen
    on_device()
    out = op.transform([("a", "b")], pd.DataFrame({"a": qa, "b": qb}))
    fit_keys = list(zip(a.tolist(), b.tolist()))
    assert ids_of(out, "a_b") == expected_ids(list(zip(qa.tolist(), qb.tolist())), fit_keys, num_buckets=3)[0]


FIT = pd.DataFrame({"c": KEYS, "x": [1.0, 2.0, 4.0, 8.0, 16.0, np.nan, 64.0, 128.0],
                    "y": [1, 0, 1, 1, 0, 0, 1, 0]})
QUERIES = pd.DataFrame({"c": pd.Series([7, None, 5, 3, 11], dtype="Int64")})  # 5: unseen


def by_group(frame):
    """The fitted frame grouped by ``c``, nulls a group of their own (pandas, by hand)."""
    return frame.groupby(frame["c"].astype("float64"), dropna=False)


def test_join_groupby_without_reads(on_device):
    op = ops.JoinGroupby(cont_cols=["x"], stats=["count", "mean", "max"])
    fitted(op, ["c"], FIT)
    on_device()
    out = op.transform(["c"], QUERIES)
    groups = by_group(FIT)
    count, mean, top = groups.size(), groups["x"].mean(), groups["x"].max()
    keys = QUERIES["c"].astype("float64")
    assert ids_of(out, "c_count") == [int(count.get(k, 0)) for k in keys]
    np.testing.assert_allclose(host(out["c_x_mean"]), [mean.get(k, np.nan) for k in keys])
    np.testing.assert_allclose(host(out["c_x_max"]), [top.get(k, np.nan) for k in keys])


def test_target_encoding_without_reads(on_device):
    op = ops.TargetEncoding("y", kfold=1, p_smooth=2)
    fitted(op, ["c"], FIT)
    on_device()
    out = op.transform(["c"], QUERIES)
    groups, mean = by_group(FIT)["y"], FIT["y"].mean()
    count, total = groups.size(), groups.sum()
    keys = QUERIES["c"].astype("float64")
    expected = [(total.get(k, 0) + 2 * mean) / (count.get(k, 0) + 2) for k in keys]
    np.testing.assert_allclose(host(out["TE_c_y"]), expected)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_difference_lag_without_reads(on_device, dtype):
    frame = pd.DataFrame({"user": [1, 1, 2, 2, 2, 3], "x": np.array([1, 4, 9, 16, 25, 36], dtype)})
    on_device()
    out = ops.DifferenceLag("user", shift=1).transform(["x"], frame)
    diff = host(out["x_difference_lag_1"])
    assert diff.dtype == np.dtype(dtype)
    expected = frame["x"].where(frame["user"] == frame["user"].shift(1)) - frame["x"].shift(1)  # pandas, by hand
    np.testing.assert_array_equal(diff, expected.where(frame["user"] == frame["user"].shift(1)).to_numpy(dtype))


@pytest.mark.parametrize("start, end", [(-2, None), (1, 3)])
def test_padded_list_slice_without_reads(on_device, monkeypatch, start, end):
    lists = [[1, 2, 3], [4], None, [], [5, 6, 7, 8]]
    frame = pd.DataFrame({"l": pd.arrays.ArrowExtensionArray(pa.array(lists, pa.list_(pa.int64())))})
    host_layout = backend.list_layout
    on_device()

    def device_layout(series):  # the offsets, validity and lengths on the device, as cuDF's layout has them
        layout = host_layout(series)
        return dataclasses.replace(layout, offsets=_device(layout.offsets), valid=_device(layout.valid),
                                   lengths=_device(layout.lengths))

    monkeypatch.setattr(backend, "list_layout", device_layout)
    out = ops.ListSlice(start, end, pad=True, pad_value=-1).transform(["l"], frame)
    width = 2
    expected = [(lst or [])[start:end] + [-1] * (width - len((lst or [])[start:end])) for lst in lists]  # by hand
    assert out["l"].tolist() == expected
