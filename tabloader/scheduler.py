"""Run Dask tasks with a progress bar, on the active ``dask.distributed`` client if there is one.

Example:
    >>> import dask
    >>> compute_tasks([dask.delayed(sum)([1, 2]), dask.delayed(max)([3, 4])], "demo", progress=False)
    [3, 4]
"""

from __future__ import annotations

import sys
from typing import Any, Sequence

import concurrent.futures

import dask
from dask.callbacks import Callback
from dask.system import CPU_COUNT
from tqdm.auto import tqdm


def active_client() -> Any:
    """The current ``dask.distributed`` client, or None when there is none."""
    if "distributed" not in sys.modules:
        return None  # no client can exist; importing distributed just to ask costs ~1 s
    try:
        from distributed import get_client
    except ImportError:
        return None
    try:
        return get_client()
    except ValueError:
        return None


class _TaskProgress(Callback):
    """Advances a tqdm bar as the local scheduler finishes tasks."""

    def __init__(self, bar: tqdm) -> None:
        super().__init__()
        self._bar = bar

    def _start_state(self, dsk: Any, state: Any) -> None:
        self._bar.total = sum(len(state[k]) for k in ("ready", "waiting", "running", "finished"))
        self._bar.refresh()

    def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        self._bar.update(1)


def compute_tasks(tasks: Sequence[Any], desc: str, progress: bool = True) -> list[Any]:
    """Compute Dask delayed objects and return their results in order.

    Uses the active distributed client when there is one (results are the same either way),
    else Dask's local threaded scheduler. ``progress`` shows a tqdm bar.
    """
    if not tasks:
        return []
    client = active_client()
    if client is not None:
        from distributed import as_completed

        futures = client.compute(list(tasks))
        with tqdm(total=len(futures), desc=desc, disable=not progress, unit="task") as bar:
            for _ in as_completed(futures):
                bar.update(1)
        return client.gather(futures)
    # Our own pool, shut down with wait=True: when a task fails, Dask raises at once while other
    # tasks still run; waiting for them means a caller cleaning up (atomic_directory removing
    # its temporary directory) never races a writer still at work.
    num_workers = dask.config.get("num_workers", None) or CPU_COUNT
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=num_workers, thread_name_prefix="tabloader")
    try:
        with tqdm(desc=desc, disable=not progress, unit="task", delay=0.5) as bar, _TaskProgress(bar):
            return list(dask.compute(*tasks, scheduler="threads", pool=pool, num_workers=num_workers))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
