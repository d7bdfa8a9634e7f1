"""KerasSequenceLoader / to_tf_dataset: zero-copy conversion, exactly-once epochs, ragged lists,
Keras fit / validation / predict. Expectations come from pandas / pyarrow reads of the files."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import tabloader as tl  # noqa: E402
from tabloader.schema import ColumnSchema, Schema, Tags  # noqa: E402
from tabloader.synthetic import criteo  # noqa: E402
from tabloader.tf import (  # noqa: E402
    ConversionStats, EmbeddingFeatures, KerasSequenceLoader, inputs_from_schema, to_tf_dataset, to_tf_tensor,
)
from tabloader.tf.loader import TF_ALIGNMENT, aligned_empty  # noqa: E402

pytestmark = pytest.mark.tf

CATS = [f"C{i}" for i in range(1, 9)]
CONTS = [f"I{i}" for i in range(1, 5)]


def write_preprocessed_criteo(path: str, rows: int, files: int, seed: int) -> Schema:
    """Synthetic Criteo rows, preprocessed by hand (factorized ids in [0, card), log1p continuous),
    plus a ``row_id`` and a ``tags`` list column, as ``files`` parquet files with a ``_schema.json``."""
    df = criteo(rows, seed=seed, num_categorical=len(CATS), num_continuous=len(CONTS), max_cardinality=2000)
    rng = np.random.default_rng(seed)
    cols: dict[str, np.ndarray] = {"row_id": np.arange(rows, dtype=np.int64),
                                   "label": df["label"].to_numpy(np.float32)}
    cards = {}
    for c in CONTS:
        cols[c] = np.log1p(df[c].fillna(0).to_numpy(np.float32)).astype(np.float32)
    for c in CATS:
        codes, uniques = pd.factorize(df[c], use_na_sentinel=True)
        cols[c] = (codes + 1).astype(np.int64)  # 0 = null
        cards[c] = len(uniques) + 1
    lengths = rng.integers(0, 5, rows)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = rng.integers(1, 50, int(offsets[-1])).astype(np.int64)
    table = pa.table(cols).append_column("tags", pa.ListArray.from_arrays(pa.array(offsets), pa.array(values)))
    os.makedirs(path, exist_ok=True)
    bounds = np.linspace(0, rows, files + 1).astype(int)
    for i in range(files):
        pq.write_table(table.slice(bounds[i], bounds[i + 1] - bounds[i]), os.path.join(path, f"part_{i}.parquet"),
                       row_group_size=4096)
    schema = Schema(
        [ColumnSchema("row_id", "int64", {Tags.ID}), ColumnSchema("label", "float32", {Tags.TARGET, Tags.BINARY})]
        + [ColumnSchema(c, "float32", {Tags.CONTINUOUS}) for c in CONTS]
        + [ColumnSchema(c, "int64", {Tags.CATEGORICAL}, {"cardinality": cards[c]}) for c in CATS]
        + [ColumnSchema("tags", "int64", {Tags.CATEGORICAL, Tags.LIST}, {"cardinality": 50}, is_list=True)])
    schema.save(os.path.join(path, "_schema.json"))
    return schema


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("tfdata")
    train, valid = str(root / "train"), str(root / "valid")
    schema = write_preprocessed_criteo(train, 24_000, files=3, seed=1)
    write_preprocessed_criteo(valid, 6_000, files=1, seed=2)
    frame = pd.concat([pd.read_parquet(os.path.join(train, f"part_{i}.parquet")) for i in range(3)],
                      ignore_index=True)
    return {"train": train, "valid": valid, "schema": schema, "frame": frame}


def _ids(batches):
    return np.concatenate([x["row_id"].numpy() for x, *_ in batches])


# --- zero copy -----------------------------------------------------------------------------------
def test_to_tf_tensor_zero_copy_for_aligned_writeable_contiguous():
    stats = ConversionStats()
    a = aligned_empty(1000, np.int64)
    a[:] = np.arange(1000)
    assert a.ctypes.data % TF_ALIGNMENT == 0 and a.flags.writeable and a.flags.c_contiguous
    t = to_tf_tensor(a, stats)
    # np.from_dlpack on the TF tensor gives the tensor's own buffer: the same memory as `a`
    assert np.shares_memory(a, np.from_dlpack(t))
    assert stats.zero_copy == 1 and stats.total_copies == 0
    a[5] = -7  # the tensor sees writes to the array: no copy
    assert int(t[5]) == -7
    del a
    gc.collect()
    assert t[10:12].numpy().tolist() == [10, 11]  # the tensor keeps the memory alive


@pytest.mark.parametrize("kind", ["unaligned", "read_only", "non_contiguous"])
def test_to_tf_tensor_copies_when_tf_cannot_take_the_memory(kind):
    base = aligned_empty(2001, np.float32)
    base[:] = np.arange(2001, dtype=np.float32)
    if kind == "unaligned":
        a = base[1:]  # 4 bytes past a 64-byte boundary
    elif kind == "read_only":
        a = base[:2000]
        a.flags.writeable = False
    else:
        a = base[::2]
    stats = ConversionStats()
    t = to_tf_tensor(a, stats)
    assert stats.copied[kind] == 1 and stats.zero_copy == 0
    np.testing.assert_array_equal(t.numpy(), a)
    assert not np.shares_memory(base, np.from_dlpack(t))
    assert np.from_dlpack(t).ctypes.data % TF_ALIGNMENT == 0
    # strided slicing checks alignment in TF and aborts the process on unaligned memory
    np.testing.assert_array_equal(t[3:9].numpy(), a[3:9])


def test_arrow_views_are_copied_not_crashing():
    arr = pa.array(np.arange(100, dtype=np.int64)).to_numpy(zero_copy_only=True)  # read-only view
    stats = ConversionStats()
    t = to_tf_tensor(arr, stats)
    assert stats.copied["read_only"] == 1
    assert t[2:4].numpy().tolist() == [2, 3]


def test_loader_batches_are_counted_and_zero_copy_where_possible(data):
    seq = KerasSequenceLoader(tl.Dataset(data["train"]), batch_size=4096, shuffle=True,
                              continuous=CONTS, categorical=CATS + ["row_id"], target="label")
    arrays = 0
    for i in range(len(seq)):
        x, y = seq[i]
        arrays += len(x) + 1
        for tensor in [*x.values(), y]:
            assert np.from_dlpack(tensor).ctypes.data % TF_ALIGNMENT == 0
    assert seq.stats.zero_copy + seq.stats.total_copies == arrays
    assert set(seq.stats.copied) <= {"unaligned"}  # the core loader hands out fresh, contiguous arrays


# --- epochs: every row exactly once --------------------------------------------------------------
def test_every_row_once_per_epoch_with_new_shuffle(data, device):
    frame = data["frame"]
    seq = KerasSequenceLoader(tl.Dataset(data["train"]), batch_size=5000, shuffle=True, seed=3, device=device,
                              continuous=CONTS, categorical=CATS + ["row_id"], target="label")
    assert len(seq) == -(-len(frame) // 5000)
    orders = []
    for epoch in range(2):
        batches = [seq[i] for i in range(len(seq))]
        seq.on_epoch_end()
        ids = _ids(batches)
        assert len(ids) == len(frame)
        np.testing.assert_array_equal(np.sort(ids), np.sort(frame["row_id"].to_numpy()))
        # values travel with their rows
        got = pd.DataFrame({"row_id": ids,
                            "C3": np.concatenate([x["C3"].numpy() for x, _ in batches]),
                            "I2": np.concatenate([x["I2"].numpy() for x, _ in batches]),
                            "label": np.concatenate([y.numpy() for _, y in batches])}).set_index("row_id")
        want = frame.set_index("row_id").loc[got.index]
        np.testing.assert_array_equal(got["C3"].to_numpy(), want["C3"].to_numpy())
        np.testing.assert_array_equal(got["I2"].to_numpy(), want["I2"].to_numpy())
        np.testing.assert_array_equal(got["label"].to_numpy(), want["label"].to_numpy())
        assert batches[0][0]["C3"].dtype == tf.int64 and batches[0][0]["I2"].dtype == tf.float32
        orders.append(ids)
    assert not np.array_equal(orders[0], orders[1])
    assert seq.epoch == 1


def test_stream_semantics_peek_restart_and_epoch_end(data):
    seq = KerasSequenceLoader(tl.Dataset(data["train"]), batch_size=4000, shuffle=True, seed=0,
                              categorical=["row_id"], target="label")
    n = len(seq)
    first = [seq[0], seq[1]]  # Keras reads two batches to infer the spec ...
    again = [seq[0], seq[1]]  # ... then starts the epoch at 0
    assert all(a[0]["row_id"] is b[0]["row_id"] for a, b in zip(first, again))
    # any order of the remaining indices (fit's shuffle=True) still covers the epoch once
    rest = [seq[i] for i in reversed(range(2, n))]
    epoch0 = np.concatenate([_ids(again), _ids(rest)])
    assert len(np.unique(epoch0)) == len(epoch0) == 24_000
    # all served: the next request starts the next epoch
    b = seq[0]
    assert seq.epoch == 1
    [seq[i] for i in range(1, 4)]
    assert seq[0][0]["row_id"] is b[0]["row_id"]  # the first two may be read twice (the spec peek)
    restarted = seq[2]  # any other repeated index: a new epoch
    assert seq.epoch == 2
    seq.on_epoch_begin()  # a Keras epoch that steps_per_epoch ends early: the loader epoch goes on
    seq[3]
    seq.on_epoch_end()
    seq[4]
    assert seq.epoch == 2
    seq.on_epoch_end()  # what Keras calls: the next request starts a new epoch
    c = seq[0]
    assert seq.epoch == 3
    assert not np.array_equal(b[0]["row_id"].numpy(), c[0]["row_id"].numpy())
    assert len(restarted[0]["row_id"]) == 4000
    with pytest.raises(IndexError):
        seq[n]


@pytest.mark.parametrize("peeked_last", [[0], [1], [1, 0]])
def test_a_shuffled_keras_epoch_asking_for_the_peeked_batches_last_sees_every_row_once(data, peeked_last):
    """fit(shuffle=True): Keras peeks at batches 0 and 1, resets, then asks for the indices in a
    shuffled order; when a peeked index comes last, it is still the peeked batch, not the first
    batch of the next loader epoch."""
    seq = KerasSequenceLoader(tl.Dataset(data["train"]), batch_size=4000, shuffle=True, seed=3,
                              categorical=["row_id"], target="label")
    n = len(seq)
    peek = [seq[0], seq[1]]
    seq.on_epoch_end()  # Keras resets its iterator before training
    seq.on_epoch_begin()
    order = [i for i in reversed(range(n)) if i not in peeked_last] + peeked_last
    epoch = [seq[i] for i in order]
    seq.on_epoch_end()
    ids = _ids(epoch)
    assert seq.epoch == 0 and len(np.unique(ids)) == len(ids) == 24_000
    assert all(epoch[order.index(i)][0]["row_id"] is peek[i][0]["row_id"] for i in (0, 1))


def test_ragged_list_columns_arrive_intact(data):
    table = pa.concat_tables([pq.read_table(os.path.join(data["train"], f"part_{i}.parquet"),
                                            columns=["row_id", "tags"]) for i in range(3)])
    want = dict(zip(table.column("row_id").to_pylist(), table.column("tags").to_pylist()))
    seq = KerasSequenceLoader(tl.Dataset(data["train"]), batch_size=3000, shuffle=True,
                              categorical=["row_id", "tags"], target="label")
    seen = 0
    for i in range(len(seq)):
        x, _ = seq[i]
        tags = x["tags"]
        assert isinstance(tags, tf.RaggedTensor) and tags.dtype == tf.int64
        assert tags.row_splits.dtype == tf.int64
        for rid, row in zip(x["row_id"].numpy().tolist(), tags.to_list()):
            assert row == want[rid]
            seen += 1
    assert seen == len(want)


def test_multiple_targets_and_no_target(data):
    seq = KerasSequenceLoader(tl.Dataset(data["train"]), batch_size=1000, shuffle=False,
                              continuous=["I1"], categorical=[], target=["label", "I2"])
    x, y = seq[0]
    assert y.shape == (1000, 2)
    np.testing.assert_array_equal(y.numpy()[:, 1], data["frame"]["I2"].to_numpy()[:1000])
    seq = KerasSequenceLoader(tl.Dataset(data["train"]), batch_size=1000, shuffle=False,
                              continuous=["I1"], categorical=[], target=[])
    batch = seq[0]
    assert len(batch) == 1 and list(batch[0]) == ["I1"]


def test_bad_arguments_and_random_seed(data):
    with pytest.raises(ValueError, match="global_size must be an integer >= 1, got 0"):
        KerasSequenceLoader(tl.Dataset(data["train"]), batch_size=4096, global_size=0)
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, got -1"):
        to_tf_dataset(tl.Dataset(data["train"]), batch_size=-1)
    # Keras's multi-worker enqueuer redraws the batch order each Keras epoch: mixes loader epochs
    with pytest.raises(ValueError, match="workers must be 0 or 1, got 2"):
        KerasSequenceLoader(tl.Dataset(data["train"]), batch_size=4096, workers=2)
    seq = KerasSequenceLoader(tl.Dataset(data["train"]), batch_size=6000, seed=None, categorical=["row_id"],
                              continuous=[], target="label")  # None: a random seed
    np.testing.assert_array_equal(np.sort(_ids(seq[i] for i in range(len(seq)))), np.arange(24_000))


# --- Keras --------------------------------------------------------------------------------------
class CountRows(keras.layers.Layer):
    """Counts, in training, how often each row id passes (a side effect on a variable)."""

    def __init__(self, rows, **kwargs):
        super().__init__(**kwargs)
        self.counts = self.add_weight(shape=(rows,), initializer="zeros", trainable=False, dtype="float32",
                                      name="counts")

    def call(self, ids, training=False):
        if training:
            self.counts.value.scatter_add(tf.IndexedSlices(tf.ones_like(ids, tf.float32), ids))
        return tf.zeros_like(tf.cast(ids, tf.float32))


class EpochCounts(keras.callbacks.Callback):
    def __init__(self, layer):
        super().__init__()
        self.layer, self.per_epoch = layer, []

    def on_epoch_end(self, epoch, logs=None):
        self.per_epoch.append(self.layer.counts.numpy().copy())
        self.layer.counts.assign(tf.zeros_like(self.layer.counts))


def build_model(schema, rows):
    inputs = inputs_from_schema(schema, columns=CATS + CONTS + ["row_id"])
    emb = EmbeddingFeatures.from_schema(schema, dim=8, columns=CATS)(inputs)
    cont = keras.ops.stack([inputs[c] for c in CONTS], axis=1)
    counter = CountRows(rows)
    h = keras.layers.Concatenate()([emb, cont])
    h = keras.layers.Dense(32, activation="relu")(h)
    logit = keras.layers.Dense(1)(h)
    logit = logit + keras.ops.expand_dims(counter(inputs["row_id"]), -1)
    out = keras.layers.Activation("sigmoid")(logit)
    model = keras.Model(inputs, out)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="binary_crossentropy")
    return model, counter


@pytest.mark.slow
def test_keras_fit_trains_sees_every_row_once_and_validates(data):
    keras.utils.set_random_seed(0)
    cols = dict(categorical=CATS + ["row_id"], continuous=CONTS, target="label")
    train = KerasSequenceLoader(tl.Dataset(data["train"]), batch_size=2048, shuffle=True, seed=0, **cols)
    valid = KerasSequenceLoader(tl.Dataset(data["valid"]), batch_size=2048, shuffle=False, **cols)
    model, counter = build_model(data["schema"], len(data["frame"]))
    counts = EpochCounts(counter)
    # fit's default shuffle=True permutes batch indices: the stream still covers each row once
    history = model.fit(train, validation_data=valid, epochs=3, verbose=0, callbacks=[counts])
    loss = history.history["loss"]
    assert loss[-1] < loss[0] - 0.01, loss
    assert len(history.history["val_loss"]) == 3 and np.isfinite(history.history["val_loss"]).all()
    assert len(counts.per_epoch) == 3
    for c in counts.per_epoch:
        np.testing.assert_array_equal(c, np.ones(len(data["frame"]), np.float32))
    assert train.epoch == 2  # three epochs started, a new shuffle each (Keras's spec peek wasted none)


@pytest.mark.slow
def test_predict_returns_rows_in_dataset_order(data):
    frame = data["frame"]
    inputs = inputs_from_schema(data["schema"], columns=["row_id", "I1"])
    out = keras.layers.Concatenate()([keras.ops.expand_dims(keras.ops.cast(inputs["row_id"], "float32"), -1),
                                      keras.ops.expand_dims(inputs["I1"], -1)])
    model = keras.Model(inputs, out)
    seq = KerasSequenceLoader(tl.Dataset(data["train"]), batch_size=5000, shuffle=False,
                              categorical=["row_id"], continuous=["I1"], target="label")
    pred = model.predict(seq, verbose=0)
    np.testing.assert_array_equal(pred[:, 0], frame["row_id"].to_numpy().astype(np.float32))
    np.testing.assert_array_equal(pred[:, 1], frame["I1"].to_numpy())
    pred2 = model.predict(seq, verbose=0)  # a second pass, same order
    np.testing.assert_array_equal(pred, pred2)


def test_to_tf_dataset_epochs_and_spec(data):
    frame = data["frame"]
    stats = ConversionStats()
    ds = to_tf_dataset(tl.Dataset(data["train"]), batch_size=5000, shuffle=True, seed=1,
                       categorical=["row_id", "tags"], continuous=["I1"], target="label", stats=stats)
    assert isinstance(ds.element_spec[0]["tags"], tf.RaggedTensorSpec)
    assert int(ds.cardinality()) == -(-len(frame) // 5000)
    epochs = [_ids(list(ds)) for _ in range(2)]
    for ids in epochs:
        np.testing.assert_array_equal(np.sort(ids), np.sort(frame["row_id"].to_numpy()))
    assert not np.array_equal(epochs[0], epochs[1])
    assert stats.zero_copy + stats.total_copies > 0


@pytest.mark.slow
def test_import_isolation():
    code = ("import sys, tabloader.tf; "
            "bad = [m for m in ('torch', 'triton') if m in sys.modules]; "
            "assert not bad, bad")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)


def test_torch_side_does_not_import_tensorflow():
    pytest.importorskip("torch")
    import importlib.util

    if importlib.util.find_spec("tabloader.torch") is None or not os.path.exists(
            os.path.join(os.path.dirname(tl.__file__), "torch", "__init__.py")):
        pytest.skip("tabloader.torch is not there yet")
    code = "import sys, tabloader.torch; assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.slow
def test_fit_with_steps_per_epoch_continues_one_loader_epoch_without_crossing_it(data):
    """steps_per_epoch=k < len: consecutive Keras epochs take consecutive batches of one loader
    epoch; the Keras epoch that reaches its end is short, and the next one starts a new loader
    epoch. So no Keras epoch repeats a row, and each pass covers every row exactly once."""
    keras.utils.set_random_seed(0)
    cols = dict(categorical=CATS + ["row_id"], continuous=CONTS, target="label")
    rows = len(data["frame"])
    train = KerasSequenceLoader(tl.Dataset(data["train"]), batch_size=2048, shuffle=True, seed=5, **cols)
    valid = KerasSequenceLoader(tl.Dataset(data["valid"]), batch_size=2048, shuffle=False, **cols)
    n, k = len(train), 5
    assert n == -(-rows // 2048) == 12
    model, counter = build_model(data["schema"], rows)
    counts = EpochCounts(counter)
    with pytest.warns(UserWarning, match="ran out of data"):  # Keras's own note on the short epochs
        history = model.fit(train, steps_per_epoch=k, epochs=6, validation_data=valid, validation_steps=2,
                            verbose=0, callbacks=[counts])
    # batches per Keras epoch: 5, 5, 2 (end of loader epoch 0), then 5, 5, 2 (loader epoch 1)
    last = rows - (n - 1) * 2048
    want_rows = [5 * 2048, 5 * 2048, 2048 + last] * 2
    assert [int(c.sum()) for c in counts.per_epoch] == want_rows
    for c in counts.per_epoch:
        assert c.max() == 1  # no row twice within a Keras epoch
    for p in range(2):  # each pass of three Keras epochs: every row exactly once
        np.testing.assert_array_equal(sum(counts.per_epoch[3 * p:3 * p + 3]), np.ones(rows, np.float32))
    assert train.epoch == 1
    assert len(history.history["val_loss"]) == 6 and np.isfinite(history.history["val_loss"]).all()
    # the validation loader was left mid-epoch by validation_steps: predict still gets every row in order
    inputs = inputs_from_schema(data["schema"], columns=CATS + CONTS + ["row_id"])
    echo = keras.Model(inputs, keras.ops.cast(inputs["row_id"], "float32"))
    want = pd.read_parquet(os.path.join(data["valid"], "part_0.parquet"))["row_id"].to_numpy()
    np.testing.assert_array_equal(echo.predict(valid, verbose=0), want.astype(np.float32))
    # a new fit() on a loader left mid-epoch starts a new loader epoch: each row once
    model.fit(train, steps_per_epoch=3, epochs=1, verbose=0, callbacks=[counts])
    counts.per_epoch.clear()
    model.fit(train, epochs=1, verbose=0, callbacks=[counts])
    np.testing.assert_array_equal(counts.per_epoch[0], np.ones(rows, np.float32))


class _StandInDeviceArray(np.ndarray):
    """A numpy array playing a CuPy one (``backend.is_gpu_object`` goes by the module name), with
    CuPy's ``data.ptr``; TF imports it through DLPack as host memory, which is all this test needs."""

    __module__ = "cupy.tf_standin"

    @property
    def data(self):
        import types

        return types.SimpleNamespace(ptr=self.ctypes.data)

    @property
    def device(self):  # CuPy's Device, a context making its GPU current
        import contextlib

        return contextlib.nullcontext()


def test_gpu_batches_reach_tf_aligned_and_after_the_gpu_is_done(monkeypatch):
    """A GPU batch is a view at any row of its chunk: an unaligned column is copied on the device
    (TF aborts on unaligned tensors), an aligned one imported as it is, and the GPU is waited for
    once, after the copies, before TF gets the batch (its streams do not wait for CuPy's)."""
    import types

    from tabloader import backend
    from tabloader.tf import ConversionStats, batch_to_tf

    calls = []
    standin = types.SimpleNamespace(
        array=lambda a, copy, order: aligned_copy(a),
        cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(deviceSynchronize=lambda: calls.append("sync"))))

    def aligned_copy(a):
        calls.append("copy")
        out = aligned_empty(a.shape, a.dtype)
        out[...] = a
        return out.view(_StandInDeviceArray)

    monkeypatch.setattr(backend, "cupy", lambda: standin)
    chunk = aligned_empty((2, 40), "int64")
    chunk[:] = np.arange(80).reshape(2, 40)
    device_chunk = chunk.view(_StandInDeviceArray)
    features = {"a": device_chunk[0, 8:16], "b": device_chunk[1, 3:11]}  # a at byte 64: aligned; b at 344: not
    assert backend.data_address(features["a"]) % TF_ALIGNMENT == 0 != backend.data_address(features["b"]) % TF_ALIGNMENT
    stats = ConversionStats()
    (out,) = batch_to_tf(features, stats=stats)
    assert out["a"].numpy().tolist() == list(range(8, 16)) and out["b"].numpy().tolist() == list(range(43, 51))
    assert stats.zero_copy == 1 and dict(stats.copied) == {"unaligned": 1}
    assert calls == ["copy", "sync"]
