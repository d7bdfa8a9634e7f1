"""The Keras benchmark's strongest tf.data baseline feeds the same data as tabloader.

``benchmarks/keras_fit.py`` compares KerasSequenceLoader with ``tfdata_gather_pipeline``; the
comparison only means something if that pipeline yields the same columns and dtypes and every
row exactly once per epoch, in a fresh global order each epoch. Checked here on a few small
parquet files written by pyarrow (no pandas metadata), against the rows read back by hand.
"""

from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

tf = pytest.importorskip("tensorflow")

BENCHMARK = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "keras_fit.py"


@pytest.fixture(scope="module")
def keras_fit():
    spec = importlib.util.spec_from_file_location("keras_fit_benchmark", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def files(tmp_path_factory, keras_fit):
    """Three uneven parquet files; C1 is a unique row id so that rows can be matched."""
    folder = tmp_path_factory.mktemp("keras-bench")
    rng = np.random.default_rng(7)
    paths, first = [], 0
    for i, n in enumerate([300, 451, 250]):
        cols = {"label": (rng.random(n) < 0.3).astype(np.float32)}
        cols.update({c: rng.standard_normal(n, dtype=np.float32) for c in keras_fit.CRITEO_CONTINUOUS})
        cols.update({c: rng.integers(0, 1000, n) for c in keras_fit.CRITEO_CATEGORICAL})
        cols["C1"] = np.arange(first, first + n, dtype=np.int64)
        first += n
        path = folder / f"part_{i}.parquet"
        pq.write_table(pa.table(cols), path)
        paths.append(str(path))
    return paths


def epoch(ds):
    """One pass: the batch sizes and every column's values concatenated (numpy)."""
    sizes, parts = [], []
    for features, label in ds:
        sizes.append(int(label.shape[0]))
        parts.append({**{k: v.numpy() for k, v in features.items()}, "label": label.numpy()})
    return sizes, {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def test_gather_pipeline_yields_every_row_once_per_epoch_in_a_new_global_order(keras_fit, files):
    source = pa.concat_tables([pq.read_table(f) for f in files])
    expected = {c: source.column(c).to_numpy() for c in source.column_names}  # row i has C1 == i
    ds, rows = keras_fit.tfdata_gather_pipeline(files, batch_size=64, seed=3)
    assert rows == 1001
    orders = []
    for _ in range(2):
        sizes, got = epoch(ds)
        assert sorted(sizes) == [41] + [64] * 15  # 1001 rows: 15 full batches and one of 41
        ids = got["C1"]
        np.testing.assert_array_equal(np.sort(ids), np.arange(1001))  # each row exactly once
        for name, values in expected.items():
            np.testing.assert_array_equal(got[name], values[ids], err_msg=name)  # whole rows, not mixed
        orders.append(ids)
    assert not np.array_equal(orders[0], orders[1])  # a new permutation each epoch
    assert not np.array_equal(orders[0], np.arange(1001))
    # a global shuffle: the first batch draws rows from all three files
    assert len(np.unique(np.searchsorted([300, 751], orders[0][:64], side="right"))) == 3


def test_gather_pipeline_has_the_columns_and_dtypes_of_keras_sequence_loader(keras_fit, files):
    import tabloader as tl
    from tabloader.tf import KerasSequenceLoader

    seq = KerasSequenceLoader(tl.Dataset(files), batch_size=64, categorical=keras_fit.CRITEO_CATEGORICAL,
                              continuous=keras_fit.CRITEO_CONTINUOUS, target=keras_fit.CRITEO_LABEL)
    ds, _ = keras_fit.tfdata_gather_pipeline(files, batch_size=64)
    signature = lambda spec: ({k: (v.dtype, tuple(v.shape)) for k, v in spec[0].items()},  # noqa: E731
                              (spec[1].dtype, tuple(spec[1].shape)))
    assert signature(ds.element_spec) == signature(seq.output_signature)
    old, _ = keras_fit.tfdata_pipeline(files, batch_size=64, shuffle_buffer=100)
    assert signature(old.element_spec) == signature(seq.output_signature)
