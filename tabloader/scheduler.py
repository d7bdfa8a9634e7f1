"""Run Dask tasks with a progress bar, on the active ``dask.distributed`` client if there is one.

A ``dask_cuda.LocalCUDACluster``'s client is one like any other: its workers (one per GPU) then
run the tasks of a dataset on the GPU, each reading, transforming and writing cuDF partitions
on its own GPU.

Example:
    >>> import dask
    >>> compute_tasks([dask.delayed(sum)([1, 2]), dask.delayed(max)([3, 4])], "demo", progress=False)
    [3, 4]
"""

from __future__ import annotations

import contextlib
import sys
import threading
import uuid
from collections import defaultdict
from typing import Any, Callable, Sequence

import concurrent.futures

import dask
import dask.threaded
from dask.callbacks import Callback
from tqdm.auto import tqdm

from tabloader.allocator import retained_freed_memory
from tabloader import backend
from tabloader.backend import device_context, local_task_threads


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
        # No refresh: it would show the bar before its delay, and tqdm then leaves it at 0% unended.
        self._bar.total = sum(len(state[k]) for k in ("ready", "waiting", "running", "finished"))

    def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        self._bar.update(1)


def _apply(function: Callable[..., Any], *args: Any) -> Any:
    return function(*args)


def shared_calls(function: Callable[..., Any], arg_tuples: Sequence[tuple], name: str) -> list[Any]:
    """One Dask task per tuple in ``arg_tuples``, each calling ``function(*args)``.

    ``function`` (a callable object holding a dataset, a fitted workflow...) is one key of the
    graph that the tasks depend on, rather than a copy inlined in every task. A distributed
    worker therefore deserializes it once and keeps what it builds on first use (the lookup
    tables of a Categorify over millions of values) for all its tasks; inlined, every task
    would unpickle its own copy and rebuild them, and a worker would hold one copy per task
    it keeps in memory.

    Example:
        >>> compute_tasks(shared_calls(pow, [(2, 3), (3, 2)], "power"), "demo", progress=False)
        [8, 9]
    """
    import dask

    token = uuid.uuid4().hex
    shared = dask.delayed(function, name=f"{name}.function-{token}")  # its own task group
    # Keys named "<name>-..." make one task group per name: the scheduler treats a large group
    # with one small dependency as root tasks and queues them instead of flooding the workers.
    return [dask.delayed(_apply)(shared, *args, dask_key_name=f"{name}-{token}-{i}")
            for i, args in enumerate(arg_tuples)]


def compute_tasks(tasks: Sequence[Any], desc: str, progress: bool = True, device: str = "cpu") -> list[Any]:
    """Compute Dask delayed objects and return their results in order.

    Uses the active distributed client when there is one (results are the same either way),
    else Dask's local threaded scheduler, with as many threads as
    :func:`tabloader.backend.local_task_threads` gives for data on ``device`` (or Dask's
    ``num_workers`` setting). ``progress`` shows a tqdm bar.
    """
    if not tasks:
        return []
    client = active_client()
    if client is not None:
        return _compute_distributed(client, tasks, desc, progress)
    # Our own pool, shut down with wait=True: when a task fails, Dask raises at once while other
    # tasks still run; waiting for them means a caller cleaning up (atomic_directory removing
    # its temporary directory) never races a writer still at work.
    num_workers = dask.config.get("num_workers", None) or local_task_threads(device)
    # The pool's threads work on the caller's GPU (a thread starts on GPU 0, whatever GPU the
    # thread that made it uses: a DDP rank on cuda:1 would preprocess on cuda:0).
    on_gpu = not backend.is_host(device) and backend.cuda_available()  # no CUDA query for host work
    context = device_context(device) if on_gpu else contextlib.nullcontext
    stop = threading.Event()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=num_workers, thread_name_prefix="tabloader",
                                                 initializer=_enter, initargs=(context, stop))
    try:
        with tqdm(desc=desc, disable=not progress, unit="task", delay=0.5) as bar, _TaskProgress(bar), \
                retained_freed_memory():
            # The threaded scheduler's get itself: naming it "threads" makes Dask import distributed
            # (~0.2 s) to look for a client, which client_or_none has already done without importing.
            return list(dask.compute(*tasks, scheduler=dask.threaded.get, pool=pool, num_workers=num_workers))
    except BaseException:
        stop.set()  # a task at work on many partitions (a file's writer) stops at the next one: Ctrl-C is prompt
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


_POOL_THREAD = threading.local()


def _enter(context: Callable[[], Any], stop: threading.Event) -> None:
    """(a pool thread, once) Enter ``context()`` for the thread's whole life, and keep the
    pool's ``stop`` event for :func:`check_not_stopped`."""
    _POOL_THREAD.stop = stop
    context().__enter__()


def check_not_stopped() -> None:
    """(in a task) Raise when the compute running this task has failed or was interrupted, so
    that a task working through many partitions stops between them rather than finishing."""
    stop = getattr(_POOL_THREAD, "stop", None)
    if stop is not None and stop.is_set():
        raise concurrent.futures.CancelledError("the compute running this task was interrupted or failed")


def _compute_distributed(client: Any, tasks: Sequence[Any], desc: str, progress: bool) -> list[Any]:
    """Compute on a distributed cluster, releasing each task as soon as its result is here.

    A worker keeps a finished task (its result and its inputs) for as long as the client holds
    its future; holding all of them to the end made the workers' memory climb task by task
    until a memory-limited worker was killed.
    """
    from distributed import as_completed

    futures = client.compute(list(tasks))
    positions: dict[str, list[int]] = defaultdict(list)
    for i, future in enumerate(futures):
        positions[future.key].append(i)
    results: list[Any] = [None] * len(futures)
    pending = as_completed(futures, with_results=True)
    try:
        with tqdm(total=len(futures), desc=desc, disable=not progress, unit="task") as bar:
            del futures  # from here on only `pending` holds the futures not yet finished
            for future, result in pending:
                for i in positions[future.key]:
                    results[i] = result
                future.release()
                bar.update(1)
    except Exception:
        # Tasks not started yet are dropped, not run for nothing; those running are waited for, as
        # the local scheduler's pool does: a worker cannot stop one, and a write task going on
        # after the caller removed its temporary directory would create it again, left behind.
        remaining = list(pending.futures)
        running = {key for keys in client.processing().values() for key in keys}
        client.cancel([f for f in remaining if f.key not in running])
        _wait_quietly([f for f in remaining if f.key in running])
        raise
    except BaseException:  # an interrupt: stop at once
        client.cancel(list(pending.futures))
        raise
    return results


def _wait_quietly(futures: list) -> None:
    """Wait until ``futures`` are finished, whatever their outcome (the caller raises its own error)."""
    from distributed import wait

    if futures:
        wait(futures)
