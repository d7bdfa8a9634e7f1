"""EmbeddingFeatures / MultiHotEmbeddings / inputs_from_schema, checked against keras.layers.Embedding
and numpy computations."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from tabloader.schema import ColumnSchema, Schema, Tags  # noqa: E402
from tabloader.tf import (  # noqa: E402
    EmbeddingFeatures, MultiHotEmbeddings, default_embedding_dim, embedding_sizes_from_schema, inputs_from_schema,
)

pytestmark = pytest.mark.tf


def schema():
    return Schema([
        ColumnSchema("a", "int64", {Tags.CATEGORICAL}, {"cardinality": 50, "embedding_dim": 6}),
        ColumnSchema("b", "int64", {Tags.CATEGORICAL}, {"cardinality": 7}),
        ColumnSchema("g", "int64", {Tags.CATEGORICAL, Tags.LIST}, {"cardinality": 30}, is_list=True),
        ColumnSchema("x", "float64", {Tags.CONTINUOUS}),
        ColumnSchema("y", "float32", {Tags.TARGET}),
    ])


def test_sizes_from_schema():
    s = schema()
    assert embedding_sizes_from_schema(s) == {"a": (50, 6), "b": (7, default_embedding_dim(7))}
    assert embedding_sizes_from_schema(s, dim=4) == {"a": (50, 4), "b": (7, 4)}
    assert embedding_sizes_from_schema(s, lists=True) == {"g": (30, default_embedding_dim(30))}
    layer = EmbeddingFeatures.from_schema(s, dim={"b": 3})
    assert layer.table_sizes == {"a": (50, 6), "b": (7, 3)} and layer.output_dim == 9
    with pytest.raises(ValueError, match="'c'.*cardinality"):
        EmbeddingFeatures.from_schema(Schema([ColumnSchema("c", "int64", {Tags.CATEGORICAL})]))


def test_sizes_use_the_schema_rule_and_the_old_name_is_deprecated():
    """One embedding-size rule: the Keras layers size columns by tabloader.schema's, warning-free;
    default_embedding_dim still answers, with a DeprecationWarning naming its replacement."""
    import warnings

    s = Schema([ColumnSchema("b", "int64", {Tags.CATEGORICAL}, {"cardinality": 12_345})])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert embedding_sizes_from_schema(s) == {"b": (12_345, round(1.6 * 12_345 ** 0.56))}
        assert embedding_sizes_from_schema(s, max_dim=16) == {"b": (12_345, 16)}
    with pytest.warns(DeprecationWarning, match="tabloader.schema.suggested_embedding_dim"):
        assert default_embedding_dim(0) == 1
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="cardinality must be >= 0, got -2"):
        default_embedding_dim(-2)


def test_inputs_from_schema():
    inputs = inputs_from_schema(schema())
    assert list(inputs) == ["a", "b", "g", "x"]
    assert inputs["a"].dtype == "int64" and tuple(inputs["a"].shape) == (None,)
    assert inputs["x"].dtype == "float32"  # the loader yields continuous columns as float32
    assert inputs["g"].ragged and tuple(inputs["g"].shape) == (None, None)
    assert "y" in inputs_from_schema(schema(), include_target=True)


def test_embedding_features_matches_keras_embedding_values_and_gradients():
    rng = np.random.default_rng(0)
    sizes = {"a": (50, 6), "b": (7, 3)}
    layer = EmbeddingFeatures(sizes)
    ids = {"a": rng.integers(0, 50, 64), "b": rng.integers(0, 7, (64, 1)), "other": rng.random(64)}
    layer(ids)  # build
    refs = {}
    for name, (card, dim) in sizes.items():
        refs[name] = keras.layers.Embedding(card, dim)
        refs[name].build()
        refs[name].embeddings.assign(layer.tables[name].numpy())
    weights = tf.constant(rng.standard_normal((64, 9)), tf.float32)  # a non-uniform upstream gradient

    with tf.GradientTape() as tape:
        out = layer(ids)
        loss = tf.reduce_sum(out * weights)
    grads = tape.gradient(loss, [layer.tables["a"], layer.tables["b"]])
    with tf.GradientTape() as tape:
        ref = tf.concat([refs["a"](ids["a"]), refs["b"](ids["b"][:, 0])], axis=-1)
        ref_loss = tf.reduce_sum(ref * weights)
    ref_grads = tape.gradient(ref_loss, [refs["a"].embeddings, refs["b"].embeddings])

    np.testing.assert_allclose(out.numpy(), ref.numpy())
    for g, r, (card, dim) in zip(grads, ref_grads, sizes.values()):
        assert isinstance(g, tf.IndexedSlices)  # sparse: only looked-up rows
        np.testing.assert_allclose(tf.convert_to_tensor(g).numpy(), tf.convert_to_tensor(r).numpy(), rtol=1e-6)
    # and by hand: the gradient of row r is the sum of the upstream gradients of the rows with id r
    dense_a = np.zeros((50, 6), np.float32)
    np.add.at(dense_a, ids["a"], weights.numpy()[:, :6])
    np.testing.assert_allclose(tf.convert_to_tensor(grads[0]).numpy(), dense_a, rtol=1e-5)


def test_stack_and_dict_combiners():
    layer = EmbeddingFeatures({"a": (5, 2), "b": (5, 2)}, combiner="stack")
    assert layer({"a": np.array([1, 2, 3]), "b": np.array([0, 0, 4])}).shape == (3, 2, 2)
    layer = EmbeddingFeatures({"a": (5, 2), "b": (5, 3)}, combiner=None)
    out = layer({"a": np.array([1]), "b": np.array([0])})
    assert out["a"].shape == (1, 2) and out["b"].shape == (1, 3)
    with pytest.raises(ValueError, match="equal embedding dims"):
        EmbeddingFeatures({"a": (5, 2), "b": (5, 3)}, combiner="stack")
    with pytest.raises(KeyError, match="'b'"):
        EmbeddingFeatures({"a": (5, 2), "b": (5, 3)})({"a": np.array([1])})


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
def test_multi_hot_pooling_matches_numpy(combiner):
    rows = [[1, 2, 2], [], [5], [0, 9, 3, 4]]
    layer = MultiHotEmbeddings({"g": (10, 4)}, combiner=combiner)
    ragged = tf.ragged.constant(rows, dtype=tf.int64)
    with tf.GradientTape() as tape:
        out = layer({"g": ragged})
        loss = tf.reduce_sum(out)
    grad = tape.gradient(loss, layer.tables["g"])
    assert isinstance(grad, tf.IndexedSlices)
    table = layer.tables["g"].numpy()
    want = np.zeros((4, 4), np.float32)
    for i, r in enumerate(rows):
        if r:
            s = table[r].sum(0)
            want[i] = s if combiner == "sum" else s / (len(r) if combiner == "mean" else np.sqrt(len(r)))
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-6)
    # the same through (values, offsets) and through a dense 0-padded matrix (0 = padding)
    values = np.array([v for r in rows for v in r], np.int64)
    offsets = np.cumsum([0] + [len(r) for r in rows]).astype(np.int64)
    np.testing.assert_allclose(layer({"g": (values, offsets)}).numpy(), want, rtol=1e-5, atol=1e-6)
    padded_rows = [[1, 2, 2], [], [5], [9, 3, 4]]  # id 0 would be padding in the dense form
    dense = np.zeros((4, 4), np.int64)
    for i, r in enumerate(padded_rows):
        dense[i, :len(r)] = r
    want_padded = layer({"g": tf.ragged.constant(padded_rows, dtype=tf.int64)}).numpy()
    np.testing.assert_allclose(layer({"g": dense}).numpy(), want_padded, rtol=1e-5, atol=1e-6)


def test_multi_hot_ragged_output():
    layer = MultiHotEmbeddings({"g": (10, 3)}, combiner=None)
    out = layer({"g": tf.ragged.constant([[1, 2], [], [7]], dtype=tf.int64)})["g"]
    assert isinstance(out, tf.RaggedTensor) and out.row_lengths().numpy().tolist() == [2, 0, 1]
    np.testing.assert_allclose(out.flat_values.numpy(), layer.tables["g"].numpy()[[1, 2, 7]])


@pytest.mark.slow
def test_functional_model_with_ragged_input_fits_and_round_trips(tmp_path):
    s = schema()
    inputs = inputs_from_schema(s)
    h = keras.layers.Concatenate()([EmbeddingFeatures.from_schema(s)(inputs), MultiHotEmbeddings.from_schema(s)(inputs),
                                    keras.ops.expand_dims(inputs["x"], -1)])
    model = keras.Model(inputs, keras.layers.Dense(1)(h))
    model.compile("adagrad", "mse")
    rng = np.random.default_rng(1)
    x = {"a": rng.integers(0, 50, 32), "b": rng.integers(0, 7, 32), "x": rng.random(32).astype(np.float32),
         "g": tf.ragged.constant([list(rng.integers(1, 30, k)) for k in rng.integers(0, 4, 32)], dtype=tf.int64)}
    y = rng.random(32).astype(np.float32)
    model.fit(tf.data.Dataset.from_tensors((x, y)), epochs=1, verbose=0, shuffle=False)
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.models.load_model(path)  # registered: no custom_objects needed
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0), rtol=1e-6)


ODD = ["a b", "a_b", "x/y", "p.q"]  # "a b" and "a_b" clean to the same Keras name


def odd_schema():
    return Schema([ColumnSchema(n, "int64", {Tags.CATEGORICAL}, {"cardinality": 11 + i}) for i, n in enumerate(ODD)]
                  + [ColumnSchema("g s/1", "int64", {Tags.CATEGORICAL, Tags.LIST}, {"cardinality": 9}, is_list=True),
                     ColumnSchema("v/x", "float32", {Tags.CONTINUOUS})])


def odd_model(s):
    inputs = inputs_from_schema(s)
    h = keras.layers.Concatenate()([EmbeddingFeatures.from_schema(s, dim=3)(inputs),
                                    MultiHotEmbeddings.from_schema(s, dim=2)(inputs),
                                    keras.ops.expand_dims(inputs["v/x"], -1)])
    model = keras.Model(inputs, keras.layers.Dense(1)(h))
    model.compile(keras.optimizers.Adam(0.05), "mse")  # Adam names its slots after the weights
    return model


@pytest.mark.slow
def test_any_column_name_builds_trains_and_restores(tmp_path):
    """Spaces, '/' and '.' in column names: the user's names outside, clean unique names inside."""
    layer = EmbeddingFeatures({n: (11 + i, 3) for i, n in enumerate(ODD)}, combiner=None)
    ids = {n: np.arange(5) % (11 + i) for i, n in enumerate(ODD)}
    out = layer(ids)
    assert list(out) == ODD
    for n in ODD:
        np.testing.assert_array_equal(out[n].numpy(), layer.tables[n].numpy()[ids[n]])
    names = [w.path for w in layer.weights]
    assert len(set(names)) == len(ODD) and not any(" " in p or "." in p for p in names)

    s = odd_schema()
    model = odd_model(s)
    rng = np.random.default_rng(0)
    x = {n: rng.integers(0, 11 + i, 64) for i, n in enumerate(ODD)}
    x["g s/1"] = tf.ragged.constant([list(rng.integers(1, 9, k)) for k in rng.integers(0, 4, 64)], dtype=tf.int64)
    x["v/x"] = rng.random(64).astype(np.float32)
    y = rng.random(64).astype(np.float32)
    before = [w.numpy().copy() for w in model.weights]
    model.fit(tf.data.Dataset.from_tensors((x, y)), epochs=2, verbose=0)
    assert all(not np.array_equal(b, w.numpy()) for b, w in zip(before, model.weights))  # all trained
    want = model.predict(x, verbose=0)

    model.save_weights(str(tmp_path / "w.weights.h5"))
    fresh = odd_model(s)
    fresh.load_weights(str(tmp_path / "w.weights.h5"))
    np.testing.assert_allclose(fresh.predict(x, verbose=0), want, rtol=1e-6)
    model.save(str(tmp_path / "m.keras"))
    loaded = keras.models.load_model(str(tmp_path / "m.keras"), compile=False)  # the weights, not Adam's state
    np.testing.assert_allclose(loaded.predict(x, verbose=0), want, rtol=1e-6)
