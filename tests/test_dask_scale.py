"""Workflow.fit and transform + to_parquet on a dask.distributed LocalCluster: surviving a
killed worker, and data larger than the workers' memory limits. They start worker processes
and take seconds: ``slow``."""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import threading
import time

import numpy as np
import pandas as pd
import pytest

import tabloader as tl
from tabloader import ops, synthetic

distributed = pytest.importorskip("distributed")
from scale_test_ops import Sleep  # noqa: E402  (tests/ is on sys.path; the workers inherit it)

pytestmark = pytest.mark.slow

CATS = [f"C{i}" for i in range(1, 27)]
CONTS = [f"I{i}" for i in range(1, 14)]


def _workflow(marker_dir=None, sleep=0.0):
    cats = CATS >> Sleep(sleep, marker_dir) >> ops.Categorify(freq_threshold=2)
    conts = CONTS >> ops.FillMissing(0) >> ops.Normalize()
    return tl.Workflow(cats + conts + ["label"], progress=False)


def _stats(wf):
    cat = next(n.op for n in wf.stat_nodes if isinstance(n.op, ops.Categorify))
    norm = next(n.op for n in wf.stat_nodes if isinstance(n.op, ops.Normalize))
    return cat, norm


@contextlib.contextmanager
def _kill_a_worker_after(cluster, markers, count, per_file=None):
    """SIGKILL one worker process (its nanny restarts it) once ``count`` partitions have left a
    marker; yields a dict that gets the pid and the marker count at the kill.

    With ``per_file`` (partitions per output file), the victim is a worker in the middle of a
    file: its own marker count (markers are named by pid) is not a multiple of ``per_file``,
    so its latest partition -- and the file -- is still being written.
    """
    killed = {}

    def victim():
        names = os.listdir(markers)
        if len(names) < count:
            return None
        if per_file is None:
            return next(iter(cluster.workers.values())).process.process.pid
        per_pid = collections.Counter(int(name.split("-")[0]) for name in names)
        return next((pid for pid, n in per_pid.items() if n % per_file), None)

    def kill_one_worker():
        deadline = time.monotonic() + 60
        while (pid := victim()) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        killed["pid"], killed["after"] = pid, len(os.listdir(markers))
        if pid is not None:
            os.kill(pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_one_worker)
    killer.start()
    try:
        yield killed
    finally:
        killer.join()


def test_fit_survives_a_killed_worker(tmp_path):
    raw = synthetic.write_criteo(str(tmp_path / "raw"), 40_000, num_files=40, max_cardinality=5000)
    dataset = tl.Dataset(raw, part_size="100kB")
    assert dataset.npartitions == 40
    reference = _workflow().fit(dataset)  # no cluster: the local threaded scheduler

    markers = tmp_path / "markers"
    markers.mkdir()
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster):
        with _kill_a_worker_after(cluster, markers, 10) as killed:
            fitted = _workflow(str(markers), sleep=0.1).fit(dataset)  # 40 x 0.1 s over 2 workers
    done = len(os.listdir(markers))
    assert 10 <= killed["after"] < 40, killed  # killed mid-fit ...
    assert done > 40, done  # ... and some partitions were recomputed after the kill

    cat, norm = _stats(fitted)
    ref_cat, ref_norm = _stats(reference)
    assert cat.cardinalities_ == ref_cat.cardinalities_
    assert cat.null_counts_ == ref_cat.null_counts_
    for key in ref_cat.vocabularies_:
        got, want = cat.vocabularies_[key], ref_cat.vocabularies_[key]
        if isinstance(want, pd.DataFrame):
            pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True))
        else:
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert norm.counts_ == ref_norm.counts_
    assert norm.means_ == pytest.approx(ref_norm.means_, rel=1e-12, abs=0)
    assert norm.stds_ == pytest.approx(ref_norm.stds_, rel=1e-12, abs=0)
    # and against pandas by hand
    frame = pd.read_parquet(raw)
    for c in CONTS:
        x = frame[c].fillna(0).astype("float64")
        assert norm.means_[c] == pytest.approx(x.mean(), rel=1e-9)
        assert norm.counts_[c] == len(x)


def test_write_survives_a_killed_worker(tmp_path):
    raw = synthetic.write_criteo(str(tmp_path / "raw"), 40_000, num_files=40, max_cardinality=5000)
    dataset = tl.Dataset(raw, part_size="100kB")
    markers = tmp_path / "markers"
    markers.mkdir()
    fitted = _workflow(str(markers), sleep=0.1).fit(dataset)  # no cluster
    # 4 files of 10 partitions (~1 s each): the kill lands in the middle of a file
    fitted.transform(dataset).to_parquet(str(tmp_path / "reference"), output_files=4, progress=False)
    for marker in markers.iterdir():
        marker.unlink()
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster):
        with _kill_a_worker_after(cluster, markers, 10, per_file=10) as killed:
            fitted.transform(dataset).to_parquet(str(tmp_path / "out"), output_files=4, progress=False)
    assert 10 <= killed["after"] < 40 and len(os.listdir(markers)) > 40, killed  # a file was rewritten
    assert sorted(os.listdir(tmp_path / "out")) == sorted(os.listdir(tmp_path / "reference"))
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "out"), pd.read_parquet(tmp_path / "reference"))


# Workers have 340 MB each (680 MB together; a worker's peak RSS was measured at ~250 MB,
# ~115 MB of it imports: 300 MB left too little headroom on a loaded machine); the data is
# ~725 MB in memory (pandas, Int64 columns), in 80 partitions of ~9 MB. Dask's memory manager is configured explicitly: no
# pausing (a paused worker whose unmanaged memory does not fall back below the pause threshold
# waits forever), no spilling (fit keeps only small partial statistics, the writer nothing), and
# the nanny kills a worker above 95 % of its limit -- so the test passes only if no worker ever
# holds much more than a few partitions at once, nor keeps anything from one task to the next.
MEMORY_CONFIG = {"distributed.worker.memory.target": False, "distributed.worker.memory.spill": False,
                 "distributed.worker.memory.pause": False, "distributed.worker.memory.terminate": 0.95}


def test_fit_and_transform_larger_than_worker_memory(tmp_path):
    import dask

    rows = 2_500_000
    raw = synthetic.write_criteo(str(tmp_path / "raw"), rows, num_files=80, max_cardinality=20_000)
    dataset = tl.Dataset(raw, part_size="16MB")
    first = dataset.read_partition(0)
    in_memory = first.memory_usage(deep=True).sum() / len(first) * rows
    assert in_memory > 2 * 340e6, in_memory
    out = str(tmp_path / "out")
    with dask.config.set(MEMORY_CONFIG), distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, memory_limit="340MB",
            dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        fitted = _workflow().fit(dataset)
        fitted.transform(dataset).to_parquet(out, progress=False)
        # and as a Dask DataFrame (the path of Workflow.transform on Dask input)
        assert fitted.transform(dataset).to_ddf().map_partitions(len).compute().sum() == rows
        # no worker was lost (a killed worker is replaced: the count alone would not tell)
        assert not [line for _, logs in client.get_worker_logs(nanny=True).items() for _, line in logs
                    if "exceeded" in line and "memory budget" in line]
    # checked against pandas on a categorical and a continuous column
    source = pd.read_parquet(raw, columns=["C1", "I1"])
    result = pd.read_parquet(out, columns=["C1", "I1"])
    assert len(result) == rows
    counts = source["C1"].value_counts()  # Categorify(freq_threshold=2): 1 null, 2 rare, 3.. by frequency
    table = counts.rename_axis("value").reset_index(name="count")
    table = table[table["count"] >= 2].sort_values(["count", "value"], ascending=[False, True], kind="stable")
    ids = pd.Series(np.arange(3, 3 + len(table)), index=table["value"].to_numpy())
    expected = source["C1"].map(ids).astype("Float64").fillna(2).mask(source["C1"].isna(), 1).astype("int64")
    np.testing.assert_array_equal(result["C1"].to_numpy(), expected.to_numpy())
    x = source["I1"].fillna(0).astype("float64").to_numpy()
    np.testing.assert_allclose(result["I1"].to_numpy(), (x - x.mean()) / x.std(), rtol=1e-4, atol=1e-5)
