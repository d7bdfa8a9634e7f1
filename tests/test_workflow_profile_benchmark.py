"""``benchmarks/workflow_profile.py`` times the Criteo workflow stage by stage without changing
what it computes, and leaves the classes it times as they were.

Checked on a few small parquet files written by pyarrow (no pandas metadata): the profiled run's
output agrees with the hand-written pandas pipeline of ``benchmarks/workflow.py``.
"""

from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Three files of Criteo-like columns with nulls: C* int64, I* float32, label int32."""
    folder = tmp_path_factory.mktemp("profile-data")
    rng = np.random.default_rng(3)
    for i, n in enumerate([400, 250, 333]):
        columns = {"label": pa.array(rng.integers(0, 2, n).astype(np.int32))}
        for c in ("I1", "I2"):
            values = rng.exponential(20, n).round().astype(np.float32) - 3  # a few negatives for Clip
            columns[c] = pa.array(values, mask=rng.random(n) < 0.1)
        for c, values in (("C1", rng.integers(0, 5, n)), ("C2", rng.integers(0, 300, n) * 7_919_993)):
            columns[c] = pa.array(values.astype(np.int64), mask=rng.random(n) < 0.05)
        pq.write_table(pa.table(columns), folder / f"part_{i:05d}.parquet")
    return str(folder)


def test_profiled_run_matches_pandas_and_restores_what_it_timed(data, tmp_path):
    profile_module = load("workflow_profile")
    workflow_benchmark = load("workflow")
    from tabloader import ops
    from tabloader.dataset import writing

    originals = (ops.Categorify.__dict__["transform"], writing.arrow_table)
    fit, transform = profile_module.profile(data, str(tmp_path / "profiled"), 0)
    workflow_benchmark.run_pandas(data, str(tmp_path / "pandas"), 0)

    agreement = workflow_benchmark.check_agreement({"profiled": str(tmp_path / "profiled"),
                                                    "pandas": str(tmp_path / "pandas")}, data)
    assert agreement.startswith("outputs agree")
    assert {"parquet read", "Categorify.fit_partial", "Normalize.fit_partial", "Categorify.finalize"} <= set(fit)
    assert {"parquet read", "Categorify.transform", "LogOp.transform", "parquet write"} <= set(transform)
    assert (ops.Categorify.__dict__["transform"], writing.arrow_table) == originals
    assert ops.FillMissing.transform.__qualname__ == "FillMissing.transform"
