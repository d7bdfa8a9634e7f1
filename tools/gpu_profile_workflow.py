"""Where the time of the GPU Criteo workflow goes: wall-clock seconds per stage, the GPU waited
for at every stage boundary, and a cProfile of the whole run.

Runs the workflow of ``benchmarks/workflow.py`` (Categorify on C1..C26, FillMissing >> Clip >>
LogOp >> Normalize on I1..I13, label) over its raw Criteo data (``benchmarks/_common.py``
``raw_criteo``, written once), fit then transform + write, one partition at a time in this
thread (Dask's synchronous scheduler): stages never overlap, and cProfile sees every call. Each
stage (parquet read, each operator's ``fit_partial``, the merge of partial statistics, each
``finalize``, each operator's ``transform``, the parquet write) starts and ends with a wait for
the GPU (``cudaDeviceSynchronize``), so the GPU work a stage queued is counted in it and not in
whichever later call happens to wait.

    python tools/gpu_profile_workflow.py OUT_DIR                       # 5M rows on the GPU
    python tools/gpu_profile_workflow.py OUT_DIR --rows 200000 --device cpu

OUT_DIR receives ``stages.txt`` (the table printed), ``stages.json``, ``run.json`` (device,
partitions, part_size, RMM's memory resource, versions), ``profile.prof`` (load it with
``pstats``) and ``profile.txt`` (its top functions by cumulative and by own time).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import platform
import pstats
import sys
import time
from collections.abc import Iterator
from typing import Any

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(_ROOT, "benchmarks"), _ROOT]  # _common, workflow(_profile) and this checkout

from _common import DEFAULT_RAW_CRITEO, print_table, raw_criteo  # noqa: E402
from workflow_profile import StageClock, watch_stages  # noqa: E402

OTHER = "other (plan, frames, scheduling)"


@contextlib.contextmanager
def synchronous_tasks() -> Iterator[None]:
    """Dask's tasks run one at a time in this thread (tabloader's scheduler asks for the threaded
    get by name: it is swapped for the synchronous one), so that cProfile sees them all."""
    import dask.local
    import dask.threaded

    threaded = dask.threaded.get
    dask.threaded.get = dask.local.get_sync
    try:
        yield
    finally:
        dask.threaded.get = threaded


def run(data: str, out: str, device: str, freq_threshold: int, part_size: str | None,
        profiler: cProfile.Profile) -> tuple[dict, Any]:
    """Fit and transform + write under ``profiler``; the stages' seconds and calls of each phase,
    and the dataset that was fitted."""
    from workflow import LABEL, column_roles  # benchmarks/workflow.py

    import tabloader as tl
    from tabloader import backend, ops

    clock = StageClock(clock=time.perf_counter, boundary=lambda: backend.synchronize(device))
    cats, conts = column_roles(data)
    graph = cats >> ops.Categorify(freq_threshold=freq_threshold)
    graph = graph + (conts >> ops.FillMissing(0) >> ops.Clip(min_value=0) >> ops.LogOp >> ops.Normalize())
    wf = tl.Workflow(graph + [LABEL], progress=False)
    kwargs = {"device": device} if part_size is None else {"device": device, "part_size": part_size}
    phases = {}
    watch_stages(clock, device)
    try:
        with synchronous_tasks():
            profiler.enable()
            try:
                with clock.stage(OTHER):
                    dataset = tl.Dataset(data, **kwargs)
                    wf.fit(dataset)
                phases["fit"] = stage_table(clock)
                with clock.stage(OTHER):
                    wf.transform(tl.Dataset(data, **kwargs)).to_parquet(out, overwrite=True, progress=False,
                                                                        compression="snappy")
                phases["transform+write"] = stage_table(clock)
            finally:
                profiler.disable()
    finally:
        clock.unwrap_all()
    return phases, dataset


def stage_table(clock: StageClock) -> dict[str, dict[str, float]]:
    """The clock's stages so far (seconds and calls), and a fresh start for the next phase."""
    table = {name: {"seconds": seconds, "calls": clock.calls[name]} for name, seconds in clock.seconds.items()}
    clock.seconds.clear()
    clock.calls.clear()
    return table


def run_info(args: argparse.Namespace, dataset: Any) -> dict[str, Any]:
    """What the figures were measured on."""
    import pandas as pd

    import tabloader as tl
    from tabloader import backend

    info: dict[str, Any] = {
        "device": args.device, "rows": args.rows, "files": args.files, "data": args.data,
        "partitions": dataset.npartitions, "part_size": dataset.part_size, "freq_threshold": args.freq_threshold,
        "python": platform.python_version(), "pandas": pd.__version__, "tabloader": tl.__version__,
        "scheduler": "dask synchronous (one partition at a time, this thread)"}
    if args.device == "cuda":
        cp = backend.cupy()
        properties = cp.cuda.runtime.getDeviceProperties(cp.cuda.runtime.getDevice())
        name = properties["name"]
        info.update(gpu=name.decode() if isinstance(name, bytes) else str(name),
                    gpu_memory_bytes=int(properties["totalGlobalMem"]), cudf=backend.cudf().__version__,
                    cupy=cp.__version__)
        if backend.has_module("rmm"):
            import rmm

            info["rmm_resource"] = type(rmm.mr.get_current_device_resource()).__name__
    return info


def write_profile(profiler: cProfile.Profile, out_dir: str) -> None:
    profiler.dump_stats(os.path.join(out_dir, "profile.prof"))
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("cumulative").print_stats(80)
    stats.sort_stats("tottime").print_stats(50)
    with open(os.path.join(out_dir, "profile.txt"), "w") as f:
        f.write(text.getvalue())


def report(phases: dict, info: dict, out_dir: str) -> None:
    total = sum(s["seconds"] for stages in phases.values() for s in stages.values())
    rows = [[phase, stage, s["calls"], s["seconds"], f"{100 * s['seconds'] / total:.0f}%"]
            for phase, stages in phases.items()
            for stage, s in sorted(stages.items(), key=lambda item: -item[1]["seconds"])]
    where = info.get("gpu", "the CPU")
    title = (f"Wall seconds per stage, Criteo workflow, {info['rows']:,} rows in {info['partitions']} partition(s) "
             f"(part_size {info['part_size']:,} B) on {where}, one partition at a time, "
             f"RMM resource: {info.get('rmm_resource', '-')}:")
    print("\n" + title)
    table = print_table(["phase", "stage", "calls", "wall s", "share"], rows + [["all", "", "", total, "100%"]])
    with open(os.path.join(out_dir, "stages.txt"), "w") as f:
        f.write(title + "\n" + table + "\n")
    with open(os.path.join(out_dir, "stages.json"), "w") as f:
        json.dump(phases, f, indent=1)
    with open(os.path.join(out_dir, "run.json"), "w") as f:
        json.dump(info, f, indent=1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", help="where the tables, the profile and the workflow's output go")
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--data", default=DEFAULT_RAW_CRITEO, help="raw data directory (written once)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--freq-threshold", type=int, default=0)
    parser.add_argument("--part-size", default=None, help="Dataset part_size (default: the device's)")
    args = parser.parse_args(argv)

    os.makedirs(args.out_dir, exist_ok=True)
    data = raw_criteo(args.data, args.rows, args.files)
    profiler = cProfile.Profile()
    phases, dataset = run(data, os.path.join(args.out_dir, "workflow-output"), args.device, args.freq_threshold,
                          args.part_size, profiler)
    write_profile(profiler, args.out_dir)
    report(phases, run_info(args, dataset), args.out_dir)


if __name__ == "__main__":
    main()
