"""Every script in examples/ runs at a tiny size (a subprocess each) and prints its key line."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs PyTorch")
needs_tf = pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow")

CASES = [
    pytest.param("workflow_only.py", ["--rows", "20000", "--quiet"], "output: 20,000 rows", id="workflow_only"),
    pytest.param("distributed_fit.py", ["--rows", "20000", "--files", "2"], "cardinalities match a local fit",
                 id="distributed_fit"),
    pytest.param("criteo_torch.py", ["--rows", "20000", "--batch-size", "1024", "--quiet"], "validation AUC",
                 id="criteo_torch", marks=[pytest.mark.torch, needs_torch]),
    pytest.param("movielens_torch.py", ["--rows", "20000", "--quiet"], "validation RMSE",
                 id="movielens_torch", marks=[pytest.mark.torch, needs_torch]),
    pytest.param("ddp_criteo.py", ["--nproc", "2", "--device", "cpu", "--rows", "20000", "--batch-size", "512"],
                 "validation AUC", id="ddp_criteo", marks=[pytest.mark.torch, needs_torch]),
    # NCCL, the GPU's process group: one rank, as a lent machine has one GPU (NCCL refuses two
    # ranks on the same GPU); the loader, the model and the all-reduce on CUDA
    pytest.param("ddp_criteo.py", ["--nproc", "1", "--device", "cuda", "--rows", "20000", "--batch-size", "512"],
                 "validation AUC", id="ddp_criteo_nccl", marks=[pytest.mark.gpu, pytest.mark.torch, needs_torch]),
    pytest.param("criteo_keras.py", ["--rows", "20000", "--batch-size", "1024", "--quiet"], "validation AUC",
                 id="criteo_keras", marks=[pytest.mark.tf, needs_tf]),
]


def test_every_example_is_tested():
    tested = {p.values[0] for p in CASES}
    assert tested == {p.name for p in EXAMPLES.glob("*.py")}


@pytest.mark.parametrize("script, args, expected", CASES)
def test_example_runs(script, args, expected, tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               TF_CPP_MIN_LOG_LEVEL="2", TF_ENABLE_ONEDNN_OPTS="0")
    args = [*args, "--out" if script == "workflow_only.py" else "--workdir", str(tmp_path / "work")]
    proc = subprocess.run([sys.executable, str(EXAMPLES / script), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert expected in proc.stdout, proc.stdout[-3000:]
    if "AUC" in expected:
        auc = float(proc.stdout.split("validation AUC:")[1].split()[0])
        assert auc > 0.55, proc.stdout
    if "--nproc" in args:  # DDP: every rank must make the same number of steps
        steps = [int(n) for n in proc.stdout.split("steps per rank [")[1].split("]")[0].split(",")]
        assert len(steps) == int(args[args.index("--nproc") + 1]) and min(steps) == max(steps) > 0, proc.stdout
        assert f"ranks ({args[args.index('--device') + 1]})" in proc.stdout, proc.stdout  # NCCL on cuda, gloo on cpu
