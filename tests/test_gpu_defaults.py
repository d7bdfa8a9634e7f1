"""What a dataset on the GPU sets up by default: RMM's memory pool
(:func:`tabloader.backend.ensure_rmm_pool`), larger partitions
(:func:`tabloader.backend.default_part_size`) and fewer partitions at once
(:func:`tabloader.backend.local_task_threads`).

The memory resource is process-wide state: its GPU cases run in a fresh Python process each, so
that one case's resource cannot leak into another (or into the other GPU tests).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tabloader import backend

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_python(code: str, **env: str) -> str:
    """The stdout of ``code`` run by a fresh interpreter importing this checkout, the caller's
    ``PYTHONPATH`` kept after it (on the GPU machines cuDF and RMM are found only through it)."""
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]), **env}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=environ, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_fresh_interpreter_finds_what_the_callers_path_holds(tmp_path, monkeypatch):
    (tmp_path / "only_on_the_callers_path.py").write_text("WHERE = 'found'\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert run_python("import only_on_the_callers_path as m, tabloader; print(m.WHERE)") == "found"


def test_opt_out_leaves_the_resource_alone(monkeypatch):
    monkeypatch.setenv(backend.RMM_POOL_ENV, "0")
    assert backend.ensure_rmm_pool() is False


@pytest.mark.cudf
def test_a_gpu_dataset_installs_the_async_pool_once(tmp_path):
    import pandas as pd

    pd.DataFrame({"x": [1.0, 2.0]}).to_parquet(tmp_path / "p.parquet")
    out = run_python(f"""
        import rmm, tabloader as tl
        from tabloader import backend
        assert type(rmm.mr.get_current_device_resource()) is rmm.mr.CudaMemoryResource
        ds = tl.Dataset({str(tmp_path)!r}, device="cuda")
        first = rmm.mr.get_current_device_resource()
        again = backend.ensure_rmm_pool()
        print(type(first).__name__, again, rmm.mr.get_current_device_resource() is first,
              float(ds.compute()["x"].sum()))
    """)
    assert out == "CudaAsyncMemoryResource True True 3.0"


@pytest.mark.cudf
def test_a_resource_chosen_before_is_kept():
    out = run_python("""
        import rmm
        from tabloader import backend
        mine = rmm.mr.PoolMemoryResource(rmm.mr.CudaMemoryResource(), initial_pool_size=2**26)
        rmm.mr.set_current_device_resource(mine)
        print(backend.ensure_rmm_pool(), rmm.mr.get_current_device_resource() is mine)
    """)
    assert out == "False True"


@pytest.mark.cudf
def test_the_opt_out_keeps_rmm_default():
    out = run_python("""
        import rmm
        from tabloader import backend
        print(backend.ensure_rmm_pool(), type(rmm.mr.get_current_device_resource()).__name__)
    """, TABLOADER_RMM_POOL="0")
    assert out == "False CudaMemoryResource"


def write_rows(root, rows: int = 1000) -> str:
    import pandas as pd

    pd.DataFrame({"x": range(rows)}).to_parquet(root / "p.parquet")
    return str(root)


def test_the_cpu_partition_size_stays_128mb(tmp_path):
    import tabloader as tl

    assert tl.Dataset(write_rows(tmp_path), device="cpu").part_size == 128_000_000


@pytest.mark.cudf
def test_a_gpu_dataset_takes_a_64th_of_the_gpu_memory_per_partition(tmp_path):
    import cupy as cp

    import tabloader as tl

    total = cp.cuda.runtime.getDeviceProperties(cp.cuda.runtime.getDevice())["totalGlobalMem"]
    expected = min(1_000_000_000, max(128_000_000, total // 64))
    assert tl.Dataset(write_rows(tmp_path), device="cuda").part_size == expected
    assert tl.Dataset(write_rows(tmp_path), device="cuda", part_size="1MB").part_size == 1_000_000


def most_tasks_at_once(device: str, tasks: int = 8) -> int:
    """The most of ``tasks`` sleeping tasks that :func:`compute_tasks` ran at once for ``device``."""
    import threading
    import time

    import dask

    from tabloader.scheduler import compute_tasks

    lock, running, most = threading.Lock(), [0], [0]

    def task(i):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return i

    assert compute_tasks([dask.delayed(task)(i) for i in range(tasks)], "t", progress=False, device=device) \
        == list(range(tasks))
    return most[0]


def test_partitions_on_a_gpu_are_worked_on_a_few_at_once(monkeypatch):
    import dask

    monkeypatch.setattr(backend, "GPU_TASK_THREADS", 3)  # not the CPU count of any machine this runs on
    monkeypatch.setattr("dask.system.CPU_COUNT", 5)
    assert most_tasks_at_once("cuda") == 3
    assert most_tasks_at_once("cpu") == 5
    with dask.config.set(num_workers=4):  # the user's setting wins on both
        assert most_tasks_at_once("cuda") == most_tasks_at_once("cpu") == 4


@pytest.mark.cudf
def test_a_gpu_workflow_fits_transforms_and_writes_with_the_gpu_thread_count(tmp_path, monkeypatch):
    import pandas as pd

    import tabloader as tl
    from tabloader import ops, scheduler

    asked = []

    def threads(device):
        asked.append(device)
        return backend.GPU_TASK_THREADS

    monkeypatch.setattr(scheduler, "local_task_threads", threads)
    x = pd.Series(range(1000), dtype="float64", name="x") ** 0.5
    (tmp_path / "in").mkdir()
    for i in range(4):  # four files: four partitions
        x.iloc[i * 250:(i + 1) * 250].to_frame().to_parquet(tmp_path / "in" / f"p{i}.parquet", index=False)
    ds = tl.Dataset(str(tmp_path / "in"), device="cuda", part_size="1KB")
    wf = tl.Workflow(["x"] >> ops.Normalize(), progress=False)
    wf.fit(ds)
    wf.transform(ds).to_parquet(str(tmp_path / "out"), progress=False)
    assert ds.npartitions == 4 and asked and set(asked) == {"cuda"}
    written = pd.read_parquet(tmp_path / "out")["x"]
    assert written.tolist() == pytest.approx(((x - x.mean()) / x.std(ddof=0)).tolist(), rel=1e-5, abs=1e-6)


def test_the_task_threads_work_on_the_callers_gpu(monkeypatch):
    """A pool thread starts on GPU 0 whatever GPU its creator uses: each enters the context of the
    caller's device (backend.device_context, taken in the calling thread) before any task."""
    import contextlib
    import threading

    import dask

    from tabloader import scheduler

    entered, ran_in = set(), []

    @contextlib.contextmanager
    def on_the_callers_gpu():
        entered.add(threading.get_ident())
        yield

    monkeypatch.setattr(scheduler, "device_context", lambda device: on_the_callers_gpu)
    monkeypatch.setattr(backend, "cuda_available", lambda: True)
    tasks = [dask.delayed(lambda i: ran_in.append(threading.get_ident()) or i)(i) for i in range(6)]
    with dask.config.set(num_workers=3):
        assert scheduler.compute_tasks(tasks, "on the caller's GPU", progress=False, device="cuda") == list(range(6))
    assert ran_in and set(ran_in) <= entered

