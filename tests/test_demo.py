"""tabloader.demo.run_demo end to end at a small size."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tabloader.demo import format_report, run_demo  # noqa: E402

pytestmark = pytest.mark.torch


def test_run_demo_small_quiet(tmp_path, capfd):
    report = run_demo(rows=20_000, quiet=True, device="cpu", batch_size=1024, workdir=str(tmp_path / "demo"))
    out, err = capfd.readouterr()
    assert out == "" and err == "", "quiet=True must print nothing"
    assert {"rows", "train_rows", "valid_rows", "device", "stages", "auc", "logloss", "total_seconds"} <= set(report)
    assert report["rows"] == 20_000 and report["train_rows"] + report["valid_rows"] == 20_000
    assert report["device"] == "cpu"
    assert [s["stage"] for s in report["stages"]] == ["generate", "fit", "transform", "train", "evaluate"]
    for s in report["stages"]:
        assert s["seconds"] > 0 and s["rows"] > 0 and s["rows_per_s"] == pytest.approx(s["rows"] / s["seconds"])
    # the synthetic label depends on the features: a trained model ranks clearly better than chance
    assert report["auc"] > 0.6
    assert (tmp_path / "demo" / "workflow" / "workflow.json").exists()
    text = format_report(report)
    assert "validation AUC" in text and "train" in text and "rows/s" in text


def test_run_demo_progress_and_temporary_workdir(capfd):
    report = run_demo(rows=4000, quiet=False, device="cpu", batch_size=1024)
    _, err = capfd.readouterr()
    assert "train" in err and "fit" in err  # progress / stage lines on stderr
    assert report["workdir"] is None


def test_run_demo_rejects_bad_arguments():
    with pytest.raises(ValueError, match="rows"):
        run_demo(rows=10)
    with pytest.raises(ValueError, match="valid_fraction"):
        run_demo(rows=5000, valid_fraction=1.5)
