"""The loader's host threads: a batch gathered on several threads is the rows numpy's own
fancy indexing gives, and a failing share is raised only after every share has finished."""

from __future__ import annotations

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
