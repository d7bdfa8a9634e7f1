"""Constructing a Loader: its size arguments read as Dataset's do, and no data read until needed."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import tabloader as tl
from tabloader.loader import Loader


def frame(n: int = 40) -> pd.DataFrame:
    ids = np.arange(n, dtype=np.int64)
    return pd.DataFrame({"id": ids, "y": (ids % 2).astype(np.float32)})


def loader(dataset, **kwargs) -> Loader:
    return Loader(dataset, 8, shuffle=False, categorical=["id"], continuous=[], target="y", **kwargs)


# --- sizes --------------------------------------------------------------------------------------
@pytest.mark.parametrize("buffer_size", ["MB", "", "lots", True, None, [128], float("nan")])
def test_buffer_size_without_a_size_in_it_is_refused_naming_it(buffer_size):
    # Dask's parse_bytes reads "MB" and "" as sizes, and True is an int: Dataset's part_size
    # refused them already, and buffer_size is read by the same rule.
    with pytest.raises(ValueError, match=r"buffer_size=.* is not a size such as '128MB'"):
        loader(tl.Dataset(frame()), buffer_size=buffer_size)


@pytest.mark.parametrize("buffer_size", [0, -1, "0MB"])
def test_buffer_size_must_be_positive(buffer_size):
    with pytest.raises(ValueError, match="buffer_size must be positive"):
        loader(tl.Dataset(frame()), buffer_size=buffer_size)


ROW_BYTES = 8 + 4  # id (int64) and y (float32) in the chunk buffer


@pytest.mark.parametrize("buffer_size, nbytes", [("120B", 120), ("0.12 kB", 120), (120, 120), (120.0, 120),
                                                 (np.int64(240), 240), ("1 KiB", 1024)])
def test_buffer_size_spellings(buffer_size, nbytes):
    assert loader(tl.Dataset(frame()), buffer_size=buffer_size).state_dict()["rows_per_chunk"] == nbytes // ROW_BYTES


# --- construction reads no data -------------------------------------------------------------------
class CountingTransform:
    """A partition transform that counts the partitions it is applied to."""

    def __init__(self, keep=lambda part: part) -> None:
        self.calls, self.keep = 0, keep

    def __call__(self, part: pd.DataFrame) -> pd.DataFrame:
        if len(part):  # meta() applies transforms to an empty frame: not a read
            self.calls += 1
        return self.keep(part)


def test_a_transform_that_drops_rows_is_read_on_first_use_not_at_construction():
    data = tl.Dataset(frame(40), part_size=80)  # 5 partitions of 8 rows
    transform = CountingTransform(keep=lambda part: part[part["id"] % 4 != 0])  # drops 10 of 40 rows
    ds = data.with_transform(transform, data.schema, preserves_rows=False)
    ld = loader(ds)
    assert transform.calls == 0
    assert len(ld) == -(-30 // 8)  # the row count needs every partition read once
    assert transform.calls == ds.npartitions
    ids = np.concatenate([f["id"] for f, _ in ld])
    assert ids.tolist() == [i for i in range(40) if i % 4 != 0]


def test_list_columns_are_measured_on_first_use_not_at_construction():
    lists = pd.DataFrame({"id": np.arange(12, dtype=np.int64), "y": np.zeros(12, np.float32),
                          "tags": pd.Series([[i] * (i % 3) for i in range(12)], dtype=object)})
    data = tl.Dataset(lists)
    transform = CountingTransform()
    ds = data.with_transform(transform, data.schema)
    ld = Loader(ds, 4, shuffle=False, categorical=["id", "tags"], continuous=[], target="y", buffer_size=1000)
    assert transform.calls == 0
    # The chunk budget divides by the mean list length (12 elements over 12 rows: 1 per row).
    row_bytes = 8 + 4 + (8 + 8 * 1.0)  # id, y, and the list's offset plus its mean elements
    assert ld.state_dict()["rows_per_chunk"] == int(1000 // row_bytes)
    assert transform.calls == 1  # one partition read to measure the lists
    tags = [f["tags"] for f, _ in ld]
    assert np.concatenate([values for values, _ in tags]).tolist() == [i for i in range(12) for _ in range(i % 3)]


def test_a_plan_known_from_metadata_is_checked_at_construction():
    with pytest.raises(ValueError, match="no rows"):
        loader(tl.Dataset(frame(0)))
