"""Fit and apply a workflow on a ``dask.distributed.LocalCluster``.

``Workflow.fit`` / ``to_parquet`` use the active Dask client when there is one: partial
statistics are computed on the workers, one per partition, and tree-reduced. The same code
runs on a multi-node cluster (give ``Client`` its scheduler address) or, with dask-cuda's
``LocalCUDACluster``, on every GPU of a machine. The script checks the statistics against a
fit without the cluster. Run:

    python examples/distributed_fit.py --rows 1000000 --workers 2
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


def criteo_workflow() -> tl.Workflow:
    cats = CATEGORICAL >> ops.Categorify(freq_threshold=2)
    conts = CONTINUOUS >> ops.FillMissing(0) >> ops.Clip(min_value=0) >> ops.LogOp() >> ops.Normalize()
    return tl.Workflow(cats + conts + ["label"], progress=False)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads-per-worker", type=int, default=1)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args(argv)
    from dask.distributed import Client, LocalCluster

    root = args.workdir or tempfile.mkdtemp(prefix="tabloader-distributed-")
    os.makedirs(root, exist_ok=True)
    raw = synthetic.write_criteo(f"{root}/raw", args.rows, num_files=args.files, overwrite=True)
    # small partitions, so that there is work to spread over the workers
    dataset = tl.Dataset(raw, part_size="16MB")
    print(f"{args.rows:,} rows in {dataset.npartitions} partitions")

    with LocalCluster(n_workers=args.workers, threads_per_worker=args.threads_per_worker, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        print(f"cluster: {len(client.scheduler_info()['workers'])} workers")
        t = time.perf_counter()
        workflow = criteo_workflow().fit(dataset)
        print(f"distributed fit: {time.perf_counter() - t:.1f} s")
        t = time.perf_counter()
        workflow.transform(dataset).to_parquet(f"{root}/train", overwrite=True, progress=False)
        print(f"distributed transform + write: {time.perf_counter() - t:.1f} s")
        workflow.save(f"{root}/workflow", overwrite=True)

    # the same statistics without a cluster (mergeable statistics: the partitioning does not matter)
    local = criteo_workflow().fit(tl.Dataset(raw))
    cards = {c.name: c.properties["cardinality"] for c in workflow.output_schema.select_by_tag("categorical")}
    local_cards = {c.name: c.properties["cardinality"] for c in local.output_schema.select_by_tag("categorical")}
    assert cards == local_cards, "the distributed fit must find the same vocabularies"
    print(f"cardinalities match a local fit (C26: {cards['C26']:,}); "
          f"{tl.Dataset(f'{root}/train').num_rows:,} rows written to {root}/train")


if __name__ == "__main__":
    main()
