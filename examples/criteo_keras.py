"""Keras ``model.fit`` on synthetic Criteo data with :class:`tabloader.tf.KerasSequenceLoader`.

Preprocesses with the Criteo workflow, then trains a small embedding + MLP model with Keras'
own ``fit`` (training and validation loaders), and reports the validation AUC. Uses only
TensorFlow (never ``tabloader.torch``: importing Triton after TensorFlow kills the process).
Run:

    python examples/criteo_keras.py --rows 500000 --epochs 1
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import keras  # noqa: E402

import tabloader as tl  # noqa: E402
from tabloader import ops, synthetic  # noqa: E402
from tabloader.metrics import roc_auc  # noqa: E402
from tabloader.tf import EmbeddingFeatures, KerasSequenceLoader, embedding_sizes_from_schema  # noqa: E402

CATEGORICAL = [f"C{i}" for i in range(1, 27)]
CONTINUOUS = [f"I{i}" for i in range(1, 14)]


def preprocess(root: str, rows: int, quiet: bool) -> tuple[str, str, tl.Schema]:
    synthetic.write_criteo(f"{root}/raw_train", rows, num_files=2, seed=0, overwrite=True)
    synthetic.write_criteo(f"{root}/raw_valid", max(rows // 10, 1000), seed=1, overwrite=True)
    cats = CATEGORICAL >> ops.Categorify(freq_threshold=2)
    conts = CONTINUOUS >> ops.FillMissing(0) >> ops.Clip(min_value=0) >> ops.LogOp() >> ops.Normalize()
    wf = tl.Workflow(cats + conts + ["label"], progress=not quiet).fit(tl.Dataset(f"{root}/raw_train"))
    for split in ("train", "valid"):
        wf.transform(tl.Dataset(f"{root}/raw_{split}")).to_parquet(f"{root}/{split}", overwrite=True,
                                                                  progress=not quiet)
    return f"{root}/train", f"{root}/valid", wf.output_schema


def build_model(schema: tl.Schema, dim: int = 16) -> keras.Model:
    inputs = {c: keras.Input(shape=(), name=c, dtype="int64") for c in CATEGORICAL}
    inputs.update({c: keras.Input(shape=(), name=c, dtype="float32") for c in CONTINUOUS})
    embedded = EmbeddingFeatures(embedding_sizes_from_schema(schema, dim=dim))(inputs)
    dense = keras.layers.Concatenate()([keras.ops.expand_dims(inputs[c], -1) for c in CONTINUOUS])
    x = keras.layers.Concatenate()([embedded, keras.layers.Dense(64, activation="relu")(dense)])
    x = keras.layers.Dense(128, activation="relu")(x)
    x = keras.layers.Dense(32, activation="relu")(x)
    return keras.Model(inputs, keras.layers.Dense(1)(x))


def main(argv=None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500_000, help="training rows (validation: a tenth more)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=4096)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    keras.utils.set_random_seed(0)
    root = args.workdir or tempfile.mkdtemp(prefix="tabloader-criteo-keras-")
    os.makedirs(root, exist_ok=True)

    t = time.perf_counter()
    train_dir, valid_dir, schema = preprocess(root, args.rows, args.quiet)
    print(f"preprocessed in {time.perf_counter() - t:.1f} s")

    cols = dict(categorical=CATEGORICAL, continuous=CONTINUOUS, target="label")
    train = KerasSequenceLoader(tl.Dataset(train_dir), batch_size=args.batch_size, shuffle=True, **cols)
    valid = KerasSequenceLoader(tl.Dataset(valid_dir), batch_size=65536, shuffle=False, **cols)
    model = build_model(schema)
    model.compile(optimizer=keras.optimizers.Adam(2e-3), loss=keras.losses.BinaryCrossentropy(from_logits=True),
                  metrics=[keras.metrics.AUC(from_logits=True, name="auc")])
    t = time.perf_counter()
    history = model.fit(train, validation_data=valid, epochs=args.epochs, verbose=0 if args.quiet else 2)
    seconds = time.perf_counter() - t
    print(f"fit: {args.epochs} epoch(s) in {seconds:.1f} s ({args.rows * args.epochs / seconds:,.0f} rows/s), "
          f"loss {history.history['loss'][-1]:.4f}, keras val_auc {history.history['val_auc'][-1]:.4f}")

    # predict, then our own AUC (the same loader order: shuffle=False)
    import numpy as np

    scores = model.predict(valid, verbose=0).reshape(-1)
    labels = np.concatenate([np.asarray(batch[1]) for batch in (valid[i] for i in range(len(valid)))])
    auc = roc_auc(labels, scores)
    print(f"validation AUC: {auc:.4f}")
    return auc


if __name__ == "__main__":
    main()
