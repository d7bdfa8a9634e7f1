"""Preprocess only: fit the Criteo workflow on synthetic data, write parquet, save the workflow.

No deep-learning framework is needed. Run:

    python examples/workflow_only.py --rows 500000 --out /tmp/tabloader-example

It writes ``OUT/raw`` (synthetic input), ``OUT/workflow`` (the fitted workflow: JSON + parquet,
no pickle) and ``OUT/train`` (the transformed rows, with ``_schema.json``), then prints the
output schema.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import tabloader as tl
from tabloader import ops, synthetic

CATEGORICAL = [f"C{i}" for i in range(1, 27)]
CONTINUOUS = [f"I{i}" for i in range(1, 14)]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--files", type=int, default=2, help="raw parquet files to generate")
    parser.add_argument("--output-files", type=int, default=None, help="transformed parquet files")
    parser.add_argument("--out", default=None, help="output directory (default: a temporary one)")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    out = args.out or tempfile.mkdtemp(prefix="tabloader-workflow-")
    raw, wf_dir, train = (os.path.join(out, d) for d in ("raw", "workflow", "train"))

    t = time.perf_counter()
    synthetic.write_criteo(raw, args.rows, num_files=args.files, overwrite=True)
    print(f"generated {args.rows:,} rows in {time.perf_counter() - t:.1f} s")

    # 1. define: categorical ids -> contiguous ints; counts -> log -> standardized
    cats = CATEGORICAL >> ops.Categorify(freq_threshold=2)
    conts = CONTINUOUS >> ops.FillMissing(0) >> ops.Clip(min_value=0) >> ops.LogOp() >> ops.Normalize()
    workflow = tl.Workflow(cats + conts + ["label"], progress=not args.quiet)

    # 2. fit (statistics over all partitions), 3. transform lazily and write
    t = time.perf_counter()
    workflow.fit(tl.Dataset(raw))
    print(f"fitted in {time.perf_counter() - t:.1f} s")
    t = time.perf_counter()
    workflow.transform(tl.Dataset(raw)).to_parquet(train, output_files=args.output_files, overwrite=True,
                                                   progress=not args.quiet)
    print(f"transformed and wrote in {time.perf_counter() - t:.1f} s")
    workflow.save(wf_dir, overwrite=True)

    # 4. the saved workflow reloads without pickle and applies to new data (here: a DataFrame)
    reloaded = tl.Workflow.load(wf_dir)
    sample = reloaded.transform(synthetic.criteo(5, seed=123))
    print(sample[["C1", "C26", "I1", "label"]].to_string(index=False))

    schema = tl.Dataset(train).schema
    cards = {c.name: c.properties["cardinality"] for c in schema.select_by_tag("categorical")}
    print(f"output: {tl.Dataset(train).num_rows:,} rows, {len(schema)} columns, "
          f"cardinalities C1={cards['C1']:,} .. C26={cards['C26']:,}")
    print(f"wrote {train} and {wf_dir}")


if __name__ == "__main__":
    main()
