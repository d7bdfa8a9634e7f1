"""tools/gpu_checks.sh as the lent GPU machine runs it: its python3 has no package index, so what
that python lacks must be said before any step spends device time, and the logs must land in the
OUT_DIR given, relative or not."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "tools", "gpu_checks.sh")


def run_checks(cwd, python, *args):
    env = {**os.environ, "PYTHON": python}
    return subprocess.run(["bash", SCRIPT, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_missing_packages_stop_it_up_front(tmp_path):
    bare = tmp_path / "bare-python"  # the standard library only: no site-packages at all
    bare.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    bare.chmod(bare.stat().st_mode | stat.S_IEXEC)
    done = run_checks(tmp_path, str(bare), "out", "env", "tests")
    assert done.returncode == 2, done.stdout + done.stderr
    summary = (tmp_path / "out" / "summary.txt").read_text()
    for name in ("numpy", "pandas", "pyarrow", "torch", "pytest_timeout"):
        assert name in summary.split(), summary
    assert sorted(os.listdir(tmp_path / "out")) == ["summary.txt"]  # no step ran


def test_relative_out_dir_gets_the_logs(tmp_path):
    torch = pytest.importorskip("torch")
    done = run_checks(tmp_path, sys.executable, "rel", "env")
    log = (tmp_path / "rel" / "env.log").read_text()
    assert "python " + ".".join(map(str, sys.version_info[:3])) in log, done.stdout + done.stderr
    summary = (tmp_path / "rel" / "summary.txt").read_text()
    assert "env " in summary
    # torch, asked directly, says whether a GPU is usable here.
    assert ("no CUDA device usable" in summary) == (not torch.cuda.is_available()), summary
