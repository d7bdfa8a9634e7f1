"""Byte sizes as users write them, and the loader working where dask is not installed (the lent
GPU image has no dask: `parse_size` used to import it, so every Loader failed there).
Expected byte counts are written out by hand."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tabloader.sizes import parse_size


@pytest.mark.parametrize("text, expected", [
    ("128MB", 128_000_000), ("0.5 GB", 500_000_000), ("10 kB", 10_000), ("1k", 1_000),
    ("1 KiB", 1_024), ("3 mib", 3 * 1_048_576), ("2Gi", 2 * 1_073_741_824), ("1e6", 1_000_000),
    ("7b", 7), (" 4 GiB ", 4 * 1_073_741_824), ("1.5 TB", 1_500_000_000_000),
])
def test_sizes_read_like_dask(text, expected):
    assert parse_size(text, "part_size") == expected


@pytest.mark.parametrize("text", ["1 XB", "1 MBB", "1..2 MB", "-1MB", "MB"])
def test_bad_sizes_name_the_argument(text):
    with pytest.raises(ValueError, match=r"buffer_size"):
        parse_size(text, "buffer_size")


# A parquet file written by pyarrow (no pandas metadata) loaded in batches with dask unimportable.
NO_DASK_LOADER = r"""
import importlib.abc, sys
class NoDask(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("dask", "distributed"):
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by the test)")
sys.meta_path.insert(0, NoDask())
import numpy as np
import tabloader as tl
from tabloader.loader import Loader
loader = Loader(tl.Dataset(sys.argv[1], part_size="1KB"), 64, buffer_size="2 KiB", shuffle=False)
print(",".join(str(int(v)) for batch, _ in loader for v in np.asarray(batch["x"])))
assert "dask" not in sys.modules
"""


def test_loader_runs_without_dask(tmp_path):
    ids = np.arange(300, dtype=np.int64) * 3
    path = tmp_path / "part.parquet"
    pq.write_table(pa.table({"x": ids}), path, store_schema=False)
    done = subprocess.run([sys.executable, "-c", NO_DASK_LOADER, str(path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(int(v) for v in done.stdout.strip().split(",")) == [3 * i for i in range(300)]
