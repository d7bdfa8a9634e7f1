"""``benchmarks/workflow.py`` end to end on a small CPU run: the systems' outputs are compared,
and each run's setup (imports; on the GPU the CUDA context and memory pool) is reported apart
from the fit and transform times that the rates and ratios use."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "workflow.py")


def run(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_a_system_alone_reports_its_setup_apart(tmp_path):
    data = tmp_path / "raw"
    run("--rows", "3000", "--files", "2", "--data", str(data), "--systems", "pandas", "--work", str(tmp_path / "w"))
    line = run("--system", "pandas", "--data", str(data), "--out", str(tmp_path / "out"), "--freq-threshold", "2")
    result = json.loads(line.strip().splitlines()[-1])
    assert set(result) == {"setup_s", "fit_s", "transform_s", "peak_rss_mb", "cpu_s"}
    assert all(result[k] > 0 for k in ("setup_s", "fit_s", "transform_s"))
    assert len(os.listdir(tmp_path / "out")) == 2  # one file written per input file


def test_the_comparison_table_leaves_setup_out_of_the_total(tmp_path):
    out = run("--rows", "4000", "--files", "2", "--data", str(tmp_path / "raw"), "--systems", "tabloader,pandas",
              "--freq-threshold", "0", "--work", str(tmp_path / "w"))
    assert "outputs agree on" in out
    header = next(line for line in out.splitlines() if line.startswith("| system"))
    names = [c.strip() for c in header.strip("|").split("|")]
    assert names[:5] == ["system", "setup s", "fit s", "transform+write s", "total s"]
    for line in out.splitlines():
        if line.startswith("| tabloader") or line.startswith("| pandas"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            setup, fit, transform, total = (float(cells[i]) for i in range(1, 5))
            assert abs(fit + transform - total) <= 0.01 * total + 2e-3, line
            assert setup > 0
