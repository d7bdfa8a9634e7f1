"""Host threads for the loader's memory-bound copies: packing a chunk and gathering a batch.

One thread copies far slower than the memory bus moves (a shuffled batch gather ran at 13M
rows/s on one core and 25M on two, on the 2-core CI machine), and numpy releases the GIL while
it copies, so the loader splits such copies over a few threads of one shared pool.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from typing import Callable, Sequence

THREADS = min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)

_POOL: list[concurrent.futures.ThreadPoolExecutor] = []
_PREFIX = "tabloader-copy"  # the pool's thread names
if hasattr(os, "register_at_fork"):  # a forked child has none of the parent's threads: it makes its own pool
    os.register_at_fork(after_in_child=_POOL.clear)


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    if not _POOL:
        _POOL.append(concurrent.futures.ThreadPoolExecutor(THREADS, thread_name_prefix=_PREFIX))
    return _POOL[0]


def parts(work: int, least: int) -> int:
    """How many threads to split ``work`` units over so that each gets at least ``least`` of
    them (a hand-off to a thread costs tens of microseconds); at most :data:`THREADS`.

    Example:
        >>> parts(100, 1000), parts(5000, 1000) == min(THREADS, 5)
        (1, True)
    """
    return max(1, min(THREADS, work // max(1, least)))


def run_all(calls: Sequence[Callable[[], None]]) -> None:
    """Run ``calls`` at once, the first on this thread and the others on the pool, and return
    when every one has finished -- after an error too, so that no thread still writes into a
    buffer its caller reuses -- raising the first error. Called from one of the pool's own
    threads (a call of an outer ``run_all``), it runs them in turn on that thread: waiting there
    for the pool could wait for ever.

    Example:
        >>> out = [0, 0, 0]
        >>> run_all([lambda i=i: out.__setitem__(i, i * 10) for i in range(3)])
        >>> out
        [0, 10, 20]
    """
    if threading.current_thread().name.startswith(_PREFIX):  # a call of an outer run_all: no pool thread
        for call in calls:  # may be free to run ours while it waits, so they run here, in turn
            call()
        return
    futures = [_pool().submit(call) for call in calls[1:]]
    try:
        if calls:
            calls[0]()
    finally:
        concurrent.futures.wait(futures)
    for future in futures:
        future.result()
