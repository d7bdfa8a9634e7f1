"""The loader's host threads: a batch gathered on several threads is the rows numpy's own
fancy indexing gives, and a failing share is raised only after every share has finished."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

from tabloader import backend
from tabloader.loader import host_threads
from tabloader.loader.batcher import _gather_columns


@pytest.mark.parametrize("rows", [1, 3000, 40_001, 65536])  # 1, 1, 2 and 4 shares
@pytest.mark.parametrize("dtype", ["int64", "float32"])
def test_gather_columns_matches_fancy_indexing(rows, dtype, monkeypatch):
    monkeypatch.setattr(host_threads, "THREADS", 4)  # several shares even on a 1-core machine
    rng = np.random.default_rng(rows)
    buf = rng.integers(0, 1 << 30, (70_000, 6)).astype(dtype)
    idx = rng.permutation(70_000)[:rows]
    out = backend.empty_columns(6, rows, dtype, like=buf)
    _gather_columns(buf, idx, out)
    np.testing.assert_array_equal(out, buf[idx].T)


def test_run_all_waits_for_every_call_before_raising():
    finished = []

    def slow():
        time.sleep(0.2)
        finished.append(threading.current_thread().name)

    def failing():
        raise ValueError("share 2 failed")

    with pytest.raises(ValueError, match="share 2 failed"):
        host_threads.run_all([slow, failing, slow])
    assert len(finished) == 2  # both slow shares had finished when the error came


def test_parts_keeps_each_share_large_enough(monkeypatch):
    monkeypatch.setattr(host_threads, "THREADS", 8)
    assert [host_threads.parts(n, 2048) for n in (0, 2047, 4096, 10_000, 10**6)] == [1, 1, 2, 4, 8]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
def test_a_forked_child_gathers_with_threads_of_its_own(tmp_path):
    """A child forked after the pool started (a multiprocessing worker) has none of its threads:
    a gather there must not wait for them for ever."""
    rng = np.random.default_rng(0)
    buf = rng.integers(0, 100, (70_000, 3))
    idx = rng.permutation(70_000)[:65_536]
    out = backend.empty_columns(3, len(idx), "int64", like=buf)
    _gather_columns(buf, idx, out)  # the parent's pool is running now
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if its gather completes and is right
        try:
            signal.alarm(20)
            again = backend.empty_columns(3, len(idx), "int64", like=buf)
            _gather_columns(buf, idx, again)
            os._exit(0 if np.array_equal(again, buf[idx].T) else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


def test_run_all_inside_a_call_of_run_all_finishes():
    """Every pool thread busy with an outer call that itself runs calls: waiting for the pool
    there would wait for ever; the inner calls run on the calling thread instead."""
    done = []

    def outer(i):
        host_threads.run_all([lambda i=i, j=j: done.append((i, j)) for j in range(3)])

    runner = threading.Thread(target=host_threads.run_all,
                              args=([lambda i=i: outer(i) for i in range(host_threads.THREADS + 1)],), daemon=True)
    runner.start()
    runner.join(timeout=30)
    assert not runner.is_alive(), "nested run_all deadlocked"
    assert sorted(done) == [(i, j) for i in range(host_threads.THREADS + 1) for j in range(3)]
