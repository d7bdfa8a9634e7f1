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


def test_string_categoricals_are_raw_criteo_hex_ids_and_every_system_gives_the_same_ids(tmp_path):
    """``--string-categoricals``: the C columns are 8-character lowercase hex strings, one per
    integer id of the integer data (same rows, same nulls); tabloader, pandas and polars agree,
    and tabloader's ids are those computed here by hand with pandas."""
    import glob

    import numpy as np
    import pandas as pd
    import pyarrow.parquet as pq

    from tabloader.synthetic import write_criteo

    strings, ints, work = tmp_path / "strings", tmp_path / "ints", tmp_path / "w"
    out = run("--string-categoricals", "--rows", "6000", "--files", "3", "--data", str(strings), "--systems",
              "tabloader,pandas,polars", "--freq-threshold", "2", "--work", str(work), "--keep")
    assert "outputs agree on" in out and "3 systems" in out
    write_criteo(str(ints), 6000, num_files=3, seed=0)  # the integer data of the same arguments

    def read(folder):
        files = sorted(glob.glob(os.path.join(folder, "*.parquet")))
        return pd.concat([pq.read_table(f).to_pandas() for f in files], ignore_index=True)

    raw, raw_ints, encoded = read(strings), read(ints), read(work / "tabloader")
    cats = [c for c in raw.columns if c.startswith("C")]
    assert len(cats) == 26
    assert not pq.read_schema(glob.glob(str(strings / "*.parquet"))[0]).metadata  # no pandas metadata
    for c in cats:
        text, ids = raw[c], raw_ints[c]
        assert text.isna().equals(ids.isna())
        assert text.dropna().str.fullmatch("[0-9a-f]{8}").all()
        pairs = pd.DataFrame({"s": text, "i": ids}).dropna().drop_duplicates()
        assert pairs["s"].is_unique and pairs["i"].is_unique  # one string per id and back

        counts = text.value_counts()
        counts = counts[counts >= 2]
        order = sorted(zip(counts.index, counts.to_numpy()), key=lambda vc: (-vc[1], vc[0]))
        expected = text.map({v: 3 + i for i, (v, _) in enumerate(order)}).fillna(2).astype(np.int64)
        expected[text.isna()] = 1
        assert encoded[c].to_numpy().tolist() == expected.tolist(), c
