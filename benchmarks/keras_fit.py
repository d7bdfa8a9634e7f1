"""Keras ``fit``: tabloader's KerasSequenceLoader vs a plain tf.data pipeline.

Data: ``--rows`` preprocessed Criteo-like rows (26 int64 categorical ids with Criteo-like
cardinalities, 13 float32 continuous, float32 label) in 10 parquet files with a
``_schema.json`` (written once by ``_common.preprocessed_criteo``).

Model (the same for both): :class:`tabloader.tf.EmbeddingFeatures` (26 tables x ``--dim``,
sized from the schema) + the 13 continuous columns -> Dense 128 -> Dense 64 -> Dense 1
(sigmoid), binary cross-entropy, SGD (sparse updates of the tables: the cheapest optimizer step,
so the comparison shows the input pipeline rather than the optimizer).

Measured, each once, in this order, in one process:

1. tabloader loader alone: one shuffled epoch of ``KerasSequenceLoader`` over all rows
   (dataset open + read + shuffle + batch + TF conversion), batch ``--batch-size``.
2. tf.data loader alone: parquet -> pandas -> ``tf.data.Dataset.from_tensor_slices`` ->
   ``shuffle(--shuffle-buffer)`` -> ``batch`` -> one epoch, over the first ``--tfdata-rows``
   rows (whole files), everything from the parquet read on timed; rows/s extrapolated.
3. ``model.fit(KerasSequenceLoader, epochs=1)`` over all rows.
4. ``model.fit(tf.data pipeline, epochs=1)`` over the tf.data subset.

For ``fit``, the rate is measured after the first step (which traces the train function and,
for tf.data, fills the shuffle buffer -- counting from there favours tf.data) and the epoch
time over ``--rows`` rows is extrapolated as rows / rate for both.

Usage::

    python benchmarks/keras_fit.py                      # 5M rows, batch 65536, tf.data on 500k rows
    python benchmarks/keras_fit.py --rows 1000000 --tfdata-rows 200000

Not a test: prints a Markdown table (``--json`` writes the numbers).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _common import (CRITEO_CATEGORICAL, CRITEO_CONTINUOUS, CRITEO_LABEL, peak_rss_mb,  # noqa: E402
                     preprocessed_criteo, print_table)


def build_model(schema, dim: int, lr: float = 0.1):
    import keras

    from tabloader.tf import EmbeddingFeatures, inputs_from_schema

    keras.utils.set_random_seed(0)
    inputs = inputs_from_schema(schema, columns=CRITEO_CATEGORICAL + CRITEO_CONTINUOUS)
    emb = EmbeddingFeatures.from_schema(schema, dim=dim, columns=CRITEO_CATEGORICAL)(inputs)
    cont = keras.ops.stack([inputs[c] for c in CRITEO_CONTINUOUS], axis=1)
    h = keras.layers.Concatenate()([emb, cont])
    h = keras.layers.Dense(128, activation="relu")(h)
    h = keras.layers.Dense(64, activation="relu")(h)
    out = keras.layers.Dense(1, activation="sigmoid")(h)
    model = keras.Model(inputs, out)
    model.compile(optimizer=keras.optimizers.SGD(lr), loss="binary_crossentropy")
    return model


def tfdata_pipeline(files, batch_size: int, shuffle_buffer: int):
    """parquet -> pandas -> from_tensor_slices -> shuffle -> batch (the usual tf.data recipe)."""
    import pandas as pd
    import tensorflow as tf

    frame = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    features = {c: frame[c].to_numpy() for c in CRITEO_CATEGORICAL + CRITEO_CONTINUOUS}
    ds = tf.data.Dataset.from_tensor_slices((features, frame[CRITEO_LABEL].to_numpy()))
    ds = ds.shuffle(shuffle_buffer, seed=0).batch(batch_size).prefetch(tf.data.AUTOTUNE)
    return ds, len(frame)


class StepTimer:
    """Keras callback: time of the end of the first batch and of the epoch."""

    def __new__(cls):
        import keras

        class _Timer(keras.callbacks.Callback):
            def __init__(self):
                super().__init__()
                self.first = self.end = None
                self.batches = 0

            def on_train_batch_end(self, batch, logs=None):
                self.batches += 1
                if self.first is None:
                    self.first = time.perf_counter()

            def on_epoch_end(self, epoch, logs=None):
                self.end = time.perf_counter()
                self.loss = float(logs["loss"])

        return _Timer()


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="/tmp/tabloader-bench/pre-5M", help="data directory (written once)")
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=65536)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dim", type=int, default=16, help="embedding width of every table")
    parser.add_argument("--tfdata-rows", type=int, default=500_000,
                        help="rows the tf.data baseline runs over (whole files; 0 = all)")
    parser.add_argument("--shuffle-buffer", type=int, default=100_000)
    parser.add_argument("--skip-fit", action="store_true", help="loaders alone only")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    path = preprocessed_criteo(args.data, args.rows, files=args.files)
    print(f"data: {path} ({args.rows:,} rows, {args.files} files) ready in {time.perf_counter() - t0:.1f} s",
          flush=True)
    files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".parquet"))
    per_file = args.rows / len(files)
    n_sub = len(files) if not args.tfdata_rows else max(1, min(len(files), round(args.tfdata_rows / per_file)))
    sub_files = files[:n_sub]

    import tensorflow as tf  # noqa: F401  (after _common: no triton in this process)

    import tabloader as tl
    from tabloader.tf import KerasSequenceLoader

    schema = tl.Dataset(path).schema
    cols = dict(categorical=CRITEO_CATEGORICAL, continuous=CRITEO_CONTINUOUS, target=CRITEO_LABEL)
    results: dict = {"rows": args.rows, "batch_size": args.batch_size, "device": args.device,
                     "tfdata_files": n_sub, "cpu_count": os.cpu_count()}

    # 1. tabloader loader alone -----------------------------------------------------------------
    start = time.perf_counter()
    seq = KerasSequenceLoader(tl.Dataset(path), batch_size=args.batch_size, shuffle=True, seed=0,
                              device=args.device, **cols)
    rows = 0
    for i in range(len(seq)):
        x, y = seq[i]
        rows += int(y.shape[0])
    seq.on_epoch_end()
    t_tl = time.perf_counter() - start
    assert rows == args.rows, (rows, args.rows)
    results["tl_loader_s"], results["tl_loader_rows_s"] = t_tl, rows / t_tl
    results["tl_conversion"] = repr(seq.stats)
    print(f"tabloader loader alone: {rows:,} rows in {t_tl:.2f} s ({rows / t_tl / 1e6:.3f} M rows/s); "
          f"{seq.stats}", flush=True)
    seq.close()
    del seq, x, y
    gc.collect()

    # 2. tf.data loader alone ---------------------------------------------------------------------
    start = time.perf_counter()
    ds, n_rows = tfdata_pipeline(sub_files, args.batch_size, args.shuffle_buffer)
    rows = 0
    for x, y in ds:
        rows += int(y.shape[0])
    t_tfd = time.perf_counter() - start
    assert rows == n_rows
    results["tfdata_rows"] = n_rows
    results["tfdata_loader_s"], results["tfdata_loader_rows_s"] = t_tfd, rows / t_tfd
    print(f"tf.data loader alone: {rows:,} rows in {t_tfd:.2f} s ({rows / t_tfd / 1e6:.4f} M rows/s)", flush=True)
    del ds, x, y
    gc.collect()

    if not args.skip_fit:
        # 3. fit with KerasSequenceLoader -----------------------------------------------------------
        model = build_model(schema, args.dim)
        seq = KerasSequenceLoader(tl.Dataset(path), batch_size=args.batch_size, shuffle=True, seed=0,
                                  device=args.device, **cols)
        timer = StepTimer()
        start = time.perf_counter()
        model.fit(seq, epochs=1, verbose=0, callbacks=[timer])
        wall = time.perf_counter() - start
        rate = (args.rows - args.batch_size) / (timer.end - timer.first)
        results.update(tl_fit_wall_s=wall, tl_fit_rows_s=rate, tl_fit_loss=timer.loss)
        print(f"fit + KerasSequenceLoader: wall {wall:.1f} s (first step {timer.first - start:.1f} s), "
              f"{rate / 1e6:.3f} M rows/s after step 1, loss {timer.loss:.4f}", flush=True)
        seq.close()
        del model, seq
        gc.collect()

        # 4. fit with tf.data ------------------------------------------------------------------------
        model = build_model(schema, args.dim)
        ds, n_rows = tfdata_pipeline(sub_files, args.batch_size, args.shuffle_buffer)
        timer = StepTimer()
        start = time.perf_counter()
        model.fit(ds, epochs=1, verbose=0, callbacks=[timer])
        wall = time.perf_counter() - start
        rate = (n_rows - args.batch_size) / (timer.end - timer.first)
        results.update(tfdata_fit_wall_s=wall, tfdata_fit_rows_s=rate, tfdata_fit_loss=timer.loss)
        print(f"fit + tf.data: wall {wall:.1f} s on {n_rows:,} rows (first step {timer.first - start:.1f} s), "
              f"{rate / 1e6:.4f} M rows/s after step 1, loss {timer.loss:.4f}", flush=True)
        del model, ds
        gc.collect()

    results["peak_rss_mb"] = peak_rss_mb()
    sub = f"{results['tfdata_rows']:,} rows, extrapolated" if results["tfdata_rows"] != args.rows else "all rows"
    table = [
        ["loader alone", "KerasSequenceLoader", f"{args.rows:,}", results["tl_loader_rows_s"],
         args.rows / results["tl_loader_rows_s"], f"{results['tl_loader_rows_s'] / results['tfdata_loader_rows_s']:.1f}x"],
        ["loader alone", "tf.data (slices+shuffle+batch)", sub, results["tfdata_loader_rows_s"],
         args.rows / results["tfdata_loader_rows_s"], "1x"],
    ]
    if not args.skip_fit:
        table += [
            ["model.fit 1 epoch", "KerasSequenceLoader", f"{args.rows:,}", results["tl_fit_rows_s"],
             args.rows / results["tl_fit_rows_s"], f"{results['tl_fit_rows_s'] / results['tfdata_fit_rows_s']:.1f}x"],
            ["model.fit 1 epoch", "tf.data (slices+shuffle+batch)", sub, results["tfdata_fit_rows_s"],
             args.rows / results["tfdata_fit_rows_s"], "1x"],
        ]
    print()
    print(f"Keras fit, {args.rows:,} rows, batch {args.batch_size}, device {args.device}, {os.cpu_count()} CPUs, "
          f"embedding dim {args.dim}, shuffle buffer {args.shuffle_buffer:,}; peak RSS {results['peak_rss_mb']:.0f} MB")
    results["table"] = print_table(["job", "pipeline", "rows measured", "rows/s", f"s per {args.rows:,} rows",
                                    "speed-up"], table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
