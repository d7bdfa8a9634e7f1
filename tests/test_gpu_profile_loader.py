"""``tools/gpu_profile_loader.py`` (issue 13) runs here with ``--device cpu``: the lead runs it on a
GPU, so it must not rot between GPU rounds. Checked on 4,000 Criteo-like rows in two files: every
stage is timed, the stage loop hands out each row once (one chunk: ceil(4000 / 512) batches),
the whole-epoch rows cover the core loader and the torch adapter, reading and resident, and the
first-epoch variants cover every read-ahead x part size, again in a process per KVIKIO_NTHREADS."""

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
                    "--rows", "4000", "--files", "2", "--batch-sizes", "512", "--data", str(tmp_path / "data"),
                    "--read-ahead", "1", "2", "--part-sizes", "default", "50KB", "--kvikio-threads", "2"],
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
    names = {f"read_ahead={a} part_size={p}" for a in (1, 2) for p in ("default", "50KB")}
    variants = report["runs"]["512"]["variants"]
    assert set(variants) == names and all(v["first epoch rows_per_s"] > 0 for v in variants.values())
    assert variants["read_ahead=1 part_size=50KB"]["partitions"] > variants["read_ahead=1 part_size=default"]["partitions"]
    assert report["first epoch in the process"]["first epoch rows_per_s"] > 0
    assert set(report["kvikio"]["KVIKIO_NTHREADS=2"]["512"]["variants"]) == names
