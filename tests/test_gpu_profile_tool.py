"""``tools/gpu_profile_workflow.py``: the stage table and the profile of the Criteo workflow
(run here on the CPU; the lead runs it on the GPU with ``--device cuda``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow.dataset as pds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_profile_tool_times_every_stage_and_writes_the_workflow(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gpu_profile_workflow.py"), str(out),
                           "--rows", "3000", "--files", "2", "--data", str(tmp_path / "raw"), "--device", "cpu"],
                          env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    phases = json.loads((out / "stages.json").read_text())
    assert {"parquet read", "Categorify.fit_partial", "Normalize.fit_partial", "Categorify.finalize",
            "Normalize.finalize"} <= set(phases["fit"])  # one partition: nothing to merge
    assert {"parquet read", "Categorify.transform", "FillMissing.transform", "Clip.transform", "LogOp.transform",
            "Normalize.transform", "parquet write"} <= set(phases["transform+write"])
    assert all(s["seconds"] >= 0 and s["calls"] >= 1 for stages in phases.values() for s in stages.values())
    info = json.loads((out / "run.json").read_text())
    assert (info["device"], info["rows"], info["partitions"]) == ("cpu", 3000, 1)
    assert pds.dataset(str(out / "workflow-output"), format="parquet").count_rows() == 3000
    assert "function calls" in (out / "profile.txt").read_text()
    assert (out / "profile.prof").stat().st_size > 0
