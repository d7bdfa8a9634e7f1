"""Stage 6 of the loader, the prefetcher: builds the next chunk while the current one is consumed.

:class:`Prefetcher` runs a producer on a background thread a bounded number of results ahead
(so the chunk buffer's slots are never overwritten while still in use), hands results back in
order, and re-raises the producer's exceptions in the consumer, so an error while reading is
not lost on the thread.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable, Iterable, Iterator


class Prefetcher:
    """Runs ``produce(item)`` for each item on a background thread, ``depth`` results ahead.

    Results come back in order; an exception raised by ``produce`` is re-raised in the
    consumer when it reaches that item. A result's slot is only reused after the consumer asked
    for the following one, so at most ``depth + 1`` results exist at once; ``released`` is
    called on the consumer's thread just before that slot is handed back. ``close()`` stops
    the thread.

    Example:
        >>> with Prefetcher(lambda x: x * x, [1, 2, 3]) as p:
        ...     list(p)
        [1, 4, 9]
    """

    _DONE = object()

    def __init__(self, produce: Callable[[Any], Any], items: Iterable[Any], depth: int = 1,
                 released: Callable[[], None] | None = None) -> None:
        self._produce, self._items = produce, iter(items)
        self._released = released  # called on the consumer's thread when it is done with a result
        self._queue: queue.Queue = queue.Queue()
        self._permits = threading.Semaphore(depth + 1)
        self._stop = threading.Event()
        self._started = False
        self._thread = threading.Thread(target=self._run, name="tabloader-prefetch", daemon=True)

    def _run(self) -> None:
        try:
            for item in self._items:
                while not self._permits.acquire(timeout=0.1):
                    if self._stop.is_set():
                        return
                if self._stop.is_set():
                    return
                self._queue.put((True, self._produce(item)))
        except BaseException as exc:  # forwarded to the consumer
            self._queue.put((False, exc))
            return
        self._queue.put((True, self._DONE))

    def __iter__(self) -> Iterator[Any]:
        if not self._started:
            self._started = True
            self._thread.start()
        first = True
        while True:
            if not first:  # the consumer is done with the previous result: its slot may be reused
                if self._released is not None:
                    self._released()
                self._permits.release()
            first = False
            ok, value = self._queue.get()
            if not ok:
                raise value
            if value is self._DONE:
                return
            yield value

    def close(self) -> None:
        self._stop.set()
        if self._started and self._thread.is_alive():
            self._thread.join()

    def __enter__(self) -> "Prefetcher":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
