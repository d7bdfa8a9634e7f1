"""What differs between the pandas versions tabloader supports, for the tests' own computations."""
from __future__ import annotations

import pandas as pd


def read_by_pandas(read) -> pd.DataFrame:
    """``read()``: pandas' own reading of a file (what a user reads back on their own), with pandas
    3's text dtype; pandas 2 gives it under future.infer_string (which makes labels str too)."""
    if int(pd.__version__.split(".")[0]) >= 3:
        return read()
    with pd.option_context("future.infer_string", True):
        frame = read()
    return frame.set_axis(list(frame.columns), axis=1)
