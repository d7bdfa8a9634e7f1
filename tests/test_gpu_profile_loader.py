"""``tools/gpu_profile_loader.py`` (issue 13) runs here with ``--device cpu``: the lead runs it on a
GPU, so it must not rot between GPU rounds. Checked on 4,000 Criteo-like rows in two files: every
stage is timed, the stage loop hands out each row once (one chunk: ceil(4000 / 512) batches),
and the whole-epoch rows cover the core loader and the torch adapter, reading and resident."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_profile_tool_on_the_cpu(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "out"
    subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_profile_loader.py"), str(out), "--device", "cpu",
                    "--rows", "4000", "--files", "2", "--batch-sizes", "512", "--data", str(tmp_path / "data")],
                   check=True, cwd=ROOT, capture_output=True, timeout=300)
    report = json.loads((out / "stages.json").read_text())
    assert report["rows"] == 4000 and report["device"].startswith("cpu")
    stages = report["runs"]["512"]["stages"]
    assert stages["rows"] == 4000 and stages["chunks"] == 1 and stages["batches"] == -(-4000 // 512)
    assert set(stages["seconds"]) == {"read", "pack", "h2d", "shuffle", "batches", "batches torch"}
    assert all(seconds >= 0 for seconds in stages["seconds"].values())
    epochs = report["runs"]["512"]["epochs"]
    assert {f"{a}{r} {e} epoch" for a in ("core", "torch") for r in ("", " resident") for e in ("first", "next")} \
        == set(epochs)
    assert "batch 512" in (out / "stages.txt").read_text()
