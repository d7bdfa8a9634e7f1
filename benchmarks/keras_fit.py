"""Keras ``fit``: tabloader's KerasSequenceLoader vs the strongest and the usual tf.data pipelines.

Data: ``--rows`` preprocessed Criteo-like rows (26 int64 categorical ids with Criteo-like
cardinalities, 13 float32 continuous, float32 label) in 10 parquet files with a
``_schema.json`` (written once by ``_common.preprocessed_criteo``).

Model (the same for every pipeline): :class:`tabloader.tf.EmbeddingFeatures` (26 tables x
``--dim``, sized from the schema) + the 13 continuous columns -> Dense 128 -> Dense 64 -> Dense 1
(sigmoid), binary cross-entropy, SGD (sparse updates of the tables: the cheapest optimizer step,
so the comparison shows the input pipeline rather than the optimizer).

Pipelines, all yielding the same ``(features, label)`` batches (each row once per epoch):

* tabloader: ``KerasSequenceLoader`` (chunk shuffle, reads the parquet files every epoch unless
  ``resident=True``).
* tf.data gather, the strongest tf.data baseline (:func:`tfdata_gather_pipeline`): every column
  read once into in-memory tensors, a global shuffle (a fresh permutation of all rows per epoch)
  and one parallel ``tf.gather`` per batch.
* tf.data slices, the usual recipe (:func:`tfdata_pipeline`): parquet -> pandas ->
  ``from_tensor_slices`` -> ``shuffle(--shuffle-buffer)`` -> ``batch``; it runs element by
  element, so it is measured over the first ``--tfdata-rows`` rows (whole files) and its rate
  extrapolated.

Measured, each once, in this order, in one process:

1. Loaders alone, one epoch each from the parquet files on (open + read + shuffle + batch + TF
   tensors; for tf.data gather the read into memory is counted), then a second epoch of
   tabloader, of tabloader with ``resident=True`` (its first epoch keeps the decoded partitions
   in memory, as tf.data gather does) and of tf.data gather.
2. ``model.fit(..., epochs=1)`` with each pipeline.

For ``fit``, the rate is measured after the first step (which traces the train function and,
for tf.data slices, fills the shuffle buffer -- counting from there favours tf.data; tf.data
gather reads its tensors before ``fit`` starts) and the epoch time over ``--rows`` rows is
extrapolated as rows / rate for all.

Usage::

    python benchmarks/keras_fit.py                      # 5M rows, batch 65536, tf.data slices on 500k rows
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


def tfdata_gather_pipeline(files, batch_size: int, seed: int = 0):
    """The strongest tf.data recipe: in-memory tensors, a global shuffle, one gather per batch.

    All columns are read once (pyarrow -> numpy -> TF) into two row-major tensors, the 26 ids
    ``[n, 26]`` int64 and the 13 floats plus the label ``[n, 14]`` float32, so gathering a row
    fetches all its values at once (40 per-column gathers take about 4x as long). Each iteration
    over the dataset (each epoch) draws a fresh permutation of all rows, from a seed that
    ``Dataset.random`` redraws per iteration; the batches are its consecutive slices (sliced by
    batch number: ``from_tensor_slices(perm).batch(B)`` alone takes ~8 s on 5M rows, element by
    element), and one parallel, non-deterministic map gathers and splits each batch. Returns
    ``(dataset, rows)``.
    """
    import pyarrow.parquet as pq
    import tensorflow as tf

    table = pq.read_table(files, columns=CRITEO_CATEGORICAL + CRITEO_CONTINUOUS + [CRITEO_LABEL])
    n = table.num_rows
    ids = tf.stack([tf.constant(table.column(c).to_numpy()) for c in CRITEO_CATEGORICAL], axis=1)
    floats = tf.stack([tf.constant(table.column(c).to_numpy()) for c in CRITEO_CONTINUOUS + [CRITEO_LABEL]], axis=1)
    del table
    index_dtype = tf.int32 if n < 2**31 else tf.int64  # int32 indices gather faster
    num_batches = -(-n // batch_size)

    def epoch_batches(epoch_seed):
        perm = tf.random.experimental.stateless_shuffle(tf.range(n, dtype=index_dtype),
                                                        seed=tf.stack([epoch_seed, seed]))
        bounds = lambda i: tf.cast([i * batch_size, tf.minimum((i + 1) * batch_size, n)], index_dtype)  # noqa: E731
        return tf.data.Dataset.range(num_batches).map(lambda i: perm[bounds(i)[0]:bounds(i)[1]])

    def gather(index):
        batch_ids = tf.unstack(tf.gather(ids, index), axis=1)
        batch_floats = tf.unstack(tf.gather(floats, index), axis=1)
        features = dict(zip(CRITEO_CATEGORICAL + CRITEO_CONTINUOUS, batch_ids + batch_floats[:-1]))
        return features, batch_floats[-1]

    ds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).take(1).flat_map(epoch_batches)
    ds = ds.apply(tf.data.experimental.assert_cardinality(num_batches))  # Keras then knows the epoch's length
    ds = ds.map(gather, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
    return ds.prefetch(tf.data.AUTOTUNE), n


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
                        help="rows the tf.data slices baseline runs over (whole files; 0 = all)")
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
                     "tfdata_files": n_sub, "cpu_count": os.cpu_count(), "load_before": os.getloadavg()}

    def new_sequence(**options):
        return KerasSequenceLoader(tl.Dataset(path), batch_size=args.batch_size, shuffle=True, seed=0,
                                   device=args.device, **cols, **options)

    # 1. loaders alone: one epoch each, from the parquet files on; a second epoch of those that run
    #    over all rows (tf.data gather and tabloader resident=True have the rows in memory by then)
    clock = Stopwatch()
    seq = new_sequence()
    record(results, "tl_loader", args.rows, sequence_epoch(seq), clock.lap())
    results["tl_conversion"] = repr(seq.stats)  # of the first epoch
    record(results, "tl_loader2", args.rows, sequence_epoch(seq), clock.lap())
    seq.close()
    seq = new_sequence(resident=True)
    sequence_epoch(seq)
    clock.lap()
    record(results, "tl_resident2", args.rows, sequence_epoch(seq), clock.lap())
    seq.close()
    del seq
    gc.collect()

    clock.lap()
    ds, n_rows = tfdata_gather_pipeline(files, args.batch_size)
    results["gather_read_s"] = time.perf_counter() - clock.wall
    record(results, "gather_loader", n_rows, dataset_epoch(ds), clock.lap())
    record(results, "gather_loader2", n_rows, dataset_epoch(ds), clock.lap())
    del ds
    gc.collect()

    clock.lap()
    ds, n_rows = tfdata_pipeline(sub_files, args.batch_size, args.shuffle_buffer)
    record(results, "tfdata_loader", n_rows, dataset_epoch(ds), clock.lap())
    results["tfdata_rows"] = n_rows
    del ds
    gc.collect()

    if not args.skip_fit:
        # 2. model.fit, one epoch, with each pipeline (end to end: the pipeline is built on the clock)
        fits = [("tl_fit", lambda: (new_sequence(), args.rows)),
                ("gather_fit", lambda: tfdata_gather_pipeline(files, args.batch_size)),
                ("tfdata_fit", lambda: tfdata_pipeline(sub_files, args.batch_size, args.shuffle_buffer))]
        for key, make in fits:
            model = build_model(schema, args.dim)
            clock.lap()
            build_start = time.perf_counter()
            data, n_rows = make()
            timer = StepTimer()
            fit_start = time.perf_counter()
            model.fit(data, epochs=1, verbose=0, callbacks=[timer])
            wall, cpu = clock.lap()
            # the rate after the first step (which traces the train function and, for tf.data
            # slices, fills the shuffle buffer)
            rate = (n_rows - args.batch_size) / (timer.end - timer.first)
            record(results, key, n_rows, n_rows, (wall, cpu))
            results.update({f"{key}_rows_s": rate, f"{key}_loss": timer.loss,
                            f"{key}_build_s": fit_start - build_start, f"{key}_first_step_s": timer.first - fit_start})
            print(f"  {key}: pipeline built in {results[f'{key}_build_s']:.1f} s, first step "
                  f"{results[f'{key}_first_step_s']:.1f} s, then {rate / 1e6:.4f} M rows/s, loss {timer.loss:.4f}",
                  flush=True)
            if hasattr(data, "close"):
                data.close()
            del model, data
            gc.collect()

    results["peak_rss_mb"] = peak_rss_mb()
    results["load_after"] = os.getloadavg()
    print()
    print(f"Keras fit, {args.rows:,} rows, batch {args.batch_size}, device {args.device}, {os.cpu_count()} CPUs, "
          f"embedding dim {args.dim}, shuffle buffer {args.shuffle_buffer:,}; peak RSS {results['peak_rss_mb']:.0f} MB; "
          f"load average before {results['load_before'][0]:.1f}, after {results['load_after'][0]:.1f}")
    results["table"] = print_table(["job", "pipeline", "rows measured", "rows/s", f"s per {args.rows:,} rows",
                                    f"CPU s per {args.rows:,} rows", "vs tf.data gather", "vs tf.data slices"],
                                   table_rows(results, args))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


GATHER = "tf.data gather"  # the names the table and its plot give the pipelines
SLICES = "tf.data slices"
TABLOADER = "tabloader"
RESIDENT = "tabloader resident=True"


def table_rows(results: dict, args) -> list[list]:
    """The comparison table: each measured rate, the CPU seconds (all threads) the measured run
    used, scaled to ``args.rows`` rows, and the speed-up over the two tf.data baselines."""
    n = args.rows
    sub = f"{results['tfdata_rows']:,} rows, extrapolated" if results["tfdata_rows"] != n else "all rows"
    epoch1, epoch2, fit = "loader alone, epoch 1", "loader alone, epoch 2", "model.fit 1 epoch"
    jobs = [(epoch1, TABLOADER, f"{n:,}", "tl_loader", "gather_loader", "tfdata_loader"),
            (epoch1, GATHER, f"{n:,} (incl. read)", "gather_loader", "gather_loader", "tfdata_loader"),
            (epoch1, SLICES, sub, "tfdata_loader", "gather_loader", "tfdata_loader"),
            (epoch2, TABLOADER, f"{n:,}", "tl_loader2", "gather_loader2", None),
            (epoch2, RESIDENT, f"{n:,}", "tl_resident2", "gather_loader2", None),
            (epoch2, GATHER, f"{n:,}", "gather_loader2", "gather_loader2", None)]
    if "tl_fit_rows_s" in results:
        jobs += [(fit, TABLOADER, f"{n:,}", "tl_fit", "gather_fit", "tfdata_fit"),
                 (fit, GATHER, f"{n:,}", "gather_fit", "gather_fit", "tfdata_fit"),
                 (fit, SLICES, sub, "tfdata_fit", "gather_fit", "tfdata_fit")]
    rows = []
    for job, pipeline, measured, key, gather_key, slices_key in jobs:
        rate = results[f"{key}_rows_s"]
        vs = [f"{rate / results[f'{k}_rows_s']:.2f}x" if k else "-" for k in (gather_key, slices_key)]
        cpu = results[f"{key}_cpu_s"] * n / results[f"{key}_rows"]
        rows.append([job, pipeline, measured, rate, n / rate, cpu, *vs])
    return rows


class Stopwatch:
    """Wall and process CPU time (all threads: on a shared machine the CPU seconds a job used
    vary less than its wall time)."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def lap(self) -> tuple[float, float]:
        """(wall s, CPU s) since the previous lap, and a new lap starts."""
        wall, cpu = time.perf_counter(), time.process_time()
        elapsed = wall - self.wall, cpu - self.cpu
        self.wall, self.cpu = wall, cpu
        return elapsed


def record(results: dict, key: str, expected_rows: int, rows: int, lap: tuple[float, float]) -> None:
    """Store and print one measurement: ``rows`` (checked) in ``lap`` = (wall s, CPU s)."""
    assert rows == expected_rows, (key, rows, expected_rows)
    wall, cpu = lap
    results.update({f"{key}_rows": rows, f"{key}_s": wall, f"{key}_rows_s": rows / wall, f"{key}_cpu_s": cpu})
    print(f"{key}: {rows:,} rows in {wall:.2f} s ({rows / wall / 1e6:.3f} M rows/s), CPU {cpu:.1f} s", flush=True)


def sequence_epoch(seq) -> int:
    """Rows of one epoch of a KerasSequenceLoader read by index."""
    rows = 0
    for i in range(len(seq)):
        rows += int(seq[i][1].shape[0])
    seq.on_epoch_end()
    return rows


def dataset_epoch(ds) -> int:
    """Rows of one pass over a tf.data dataset of ``(features, target)``."""
    rows = 0
    for _, target in ds:
        rows += int(target.shape[0])
    return rows

if __name__ == "__main__":
    main()
