"""Where the CPU time of the Criteo workflow goes: parquet read, each operator's fit and
transform, the conversion to arrow, the parquet write, and the rest.

Runs the workflow of ``benchmarks/workflow.py`` (Categorify on C*, FillMissing >> Clip >> LogOp
>> Normalize on I*, label) on one thread (Dask's ``num_workers=1``), so that the process CPU
time measured around each stage belongs to that stage alone (pyarrow's reader threads included)
and a busy machine moves the figures less than wall-clock times. The sum is the CPU work that
the two-core run spreads over its cores.

    python benchmarks/workflow_profile.py                     # the 5M rows of workflow.py
    python benchmarks/workflow_profile.py --rows 200000 --files 4 --data /tmp/criteo-small
    python benchmarks/workflow_profile.py --string-categoricals   # C* as raw Criteo's hex strings
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(_HERE)]  # workflow.py, _common, and tabloader from this checkout

from _common import DEFAULT_RAW_CRITEO, print_table, raw_criteo


class StageClock:
    """Seconds per stage of ``clock`` (process CPU time by default); a stage running inside
    another is subtracted from it. ``boundary`` (say, waiting for the GPU) is called as every
    stage starts and ends, so that work a stage queued is counted in it."""

    def __init__(self, clock: Callable[[], float] = time.process_time,
                 boundary: Callable[[], None] | None = None) -> None:
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.calls: dict[str, int] = collections.defaultdict(int)
        self._clock, self._boundary = clock, boundary or (lambda: None)
        self._inner: list[float] = []
        self._wrapped: list[tuple[Any, str, Any]] = []

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        self._boundary()
        start = self._clock()
        self._inner.append(0.0)
        try:
            yield
        finally:
            self._boundary()
            spent = self._clock() - start
            self.calls[name] += 1
            inner = self._inner.pop()
            self.seconds[name] += spent - inner
            if self._inner:
                self._inner[-1] += spent

    def wrap(self, owner: Any, attribute: str, name: Callable[[Any], str] | str) -> None:
        """Time every call of ``owner.attribute`` (a method or a module function) as a stage,
        until :meth:`unwrap_all`."""
        own = attribute in vars(owner)  # else inherited: put back by deleting the wrapper
        original = getattr(owner, attribute)

        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.stage(name if isinstance(name, str) else name(args[0])):
                return original(*args, **kwargs)

        self._wrapped.append((owner, attribute, original if own else None))
        setattr(owner, attribute, timed)

    def unwrap_all(self) -> None:
        """Put back what :meth:`wrap` replaced."""
        while self._wrapped:
            owner, attribute, original = self._wrapped.pop()
            if original is None:
                delattr(owner, attribute)
            else:
                setattr(owner, attribute, original)


def watch_stages(clock: StageClock, device: str) -> None:
    """Time the Criteo workflow's stages with ``clock`` (until ``clock.unwrap_all()``): the
    parquet read, each operator's fit and transform, the merge of partial statistics and the
    write (cuDF's writer on ``cuda``)."""
    import pyarrow.parquet as pq

    from tabloader import backend, ops
    from tabloader.dataset import parquet, writing
    from tabloader.workflow import _MergeStats

    clock.wrap(parquet.ParquetSource, "read_frame", "parquet read")
    for op in (ops.Categorify, ops.FillMissing, ops.Clip, ops.LogOp, ops.Normalize):
        clock.wrap(op, "transform", lambda self: f"{type(self).__name__}.transform")
        if hasattr(op, "fit_partial"):
            clock.wrap(op, "fit_partial", lambda self: f"{type(self).__name__}.fit_partial")
            clock.wrap(op, "finalize", lambda self: f"{type(self).__name__}.finalize")
    clock.wrap(_MergeStats, "__call__", "merge partial statistics")
    if device == "cuda":
        clock.wrap(backend.cudf().io.parquet.ParquetWriter, "write_table", "parquet write (cuDF)")
    else:
        clock.wrap(writing, "arrow_table", "frame -> arrow table")
        clock.wrap(pq.ParquetWriter, "write_table", "parquet write")


def profile(data: str, out: str, freq_threshold: int) -> tuple[dict[str, float], dict[str, float]]:
    """CPU seconds per stage of fitting and of transforming + writing (one thread each)."""
    import dask
    from workflow import LABEL, column_roles  # benchmarks/workflow.py

    import tabloader as tl
    from tabloader import ops

    clock = StageClock()
    watch_stages(clock, "cpu")

    cats, conts = column_roles(data)
    graph = cats >> ops.Categorify(freq_threshold=freq_threshold)
    graph = graph + (conts >> ops.FillMissing(0) >> ops.Clip(min_value=0) >> ops.LogOp >> ops.Normalize())
    wf = tl.Workflow(graph + [LABEL], progress=False)
    try:
        with dask.config.set(num_workers=1):
            with clock.stage("other (plan, frames, scheduling)"):
                wf.fit(tl.Dataset(data))
            fit = dict(clock.seconds)
            clock.seconds.clear()
            with clock.stage("other (plan, frames, scheduling)"):
                wf.transform(tl.Dataset(data)).to_parquet(out, overwrite=True, progress=False, compression="snappy")
    finally:
        clock.unwrap_all()
    return fit, dict(clock.seconds)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--data", default=None, help="raw data directory (written once; default: workflow.py's)")
    parser.add_argument("--string-categoricals", action="store_true",
                        help="the C columns as 8-char hex strings (workflow.py --string-categoricals' data)")
    parser.add_argument("--freq-threshold", type=int, default=0)
    parser.add_argument("--out", default="/tmp/tabloader-bench/workflow-profile-out", help="where the output goes")
    args = parser.parse_args(argv)

    from workflow import DEFAULT_RAW_CRITEO_STRINGS, raw_criteo_strings  # benchmarks/workflow.py

    if args.string_categoricals:
        data = raw_criteo_strings(args.data or DEFAULT_RAW_CRITEO_STRINGS, args.rows, args.files)
    else:
        data = raw_criteo(args.data or DEFAULT_RAW_CRITEO, args.rows, args.files)
    fit, transform = profile(data, args.out, args.freq_threshold)
    total = sum(fit.values()) + sum(transform.values())
    rows = [[phase, stage, seconds, f"{100 * seconds / total:.0f}%"]
            for phase, stages in (("fit", fit), ("transform+write", transform))
            for stage, seconds in sorted(stages.items(), key=lambda item: -item[1])]
    print(f"\nCPU seconds per stage, Criteo workflow, Categorify(freq_threshold={args.freq_threshold}), "
          f"{args.rows:,} rows, one thread (load average {os.getloadavg()[0]:.1f}):")
    print_table(["phase", "stage", "CPU s", "share"], rows + [["all", "", total, "100%"]])


if __name__ == "__main__":
    main()
