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
