"""The GPU key lookup (``tabloader.encoding.gpu.lookup``) reads nothing back from the device.

Categorify, JoinGroupby and TargetEncoding look every partition up with it; on CuPy a boolean
mask assignment (``pos[mask] = -1``) reads the mask's count back, and so does testing a mask
(``bool(fits.all())``): a wait for the device per column. Run here on the numpy-backed CuPy
stand-in of ``tests/test_loader_host_reads.py``, which refuses those reads, with boolean mask
assignment refused as well; the positions are compared with the keys matched by hand.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tabloader import backend

from test_loader_host_reads import DeviceArray, HostRead, cupy, host  # noqa: F401 (cupy: the fixture)


@pytest.fixture
def no_mask_assignment(monkeypatch):
    def refuse(self, key, value):
        keys = key if isinstance(key, tuple) else (key,)
        if any(isinstance(k, np.ndarray) and k.dtype == bool for k in keys):
            raise HostRead("boolean-mask assignment: its count is read back from the device")
        np.ndarray.__setitem__(self, key, value)

    monkeypatch.setattr(DeviceArray, "__setitem__", refuse, raising=False)


def device_column(kind, values, nulls=None):
    from tabloader.encoding.gpu.columns import NormalizedColumn

    xp = backend.cupy()  # the stand-in
    return NormalizedColumn(kind, xp.asarray(values), None if nulls is None else xp.asarray(nulls))


def by_hand(keys, queries, nulls):
    """Row of ``keys`` (tuples) equal to each query row, -1 where none or null."""
    rows = {key: i for i, key in enumerate(keys)}
    return [-1 if null else rows.get(query, -1) for query, null in zip(queries, nulls)]


@pytest.mark.usefixtures("cupy")
def test_pairs_of_columns_are_looked_up_without_reads(no_mask_assignment):
    from tabloader.encoding.gpu.lookup import ValueLookup

    keys = [(1, 10), (2, 20), (3, 30)]
    lookup = ValueLookup([pd.Series([k[0] for k in keys]), pd.Series([k[1] for k in keys])], "Test", ("a", "b"))
    a, b = [1.0, 2.5, 3.0, 2.0, 1.0], [10, 20, 30, 30, 10]  # 2.5: no int64 holds it
    nulls = [False, False, False, False, True]
    pos = lookup.positions([device_column("float", a), device_column("int", b, nulls)])
    assert host(pos).tolist() == by_hand(keys, list(zip(a, b)), nulls) == [0, -1, 2, -1, -1]


@pytest.mark.usefixtures("cupy")
def test_numbers_the_keys_cannot_hold_are_unseen_without_reads(no_mask_assignment):
    from tabloader.encoding.gpu.lookup import ValueLookup

    lookup = ValueLookup([pd.Series([5, 7, -3])], "Test", "a")
    queries = [5.0, 5.5, 7.0, -3.0, 2.0**70]
    pos = lookup.positions([device_column("float", queries)])
    assert host(pos).tolist() == by_hand([(5,), (7,), (-3,)], [(q,) for q in queries], [False] * 5) \
        == [0, -1, 1, 2, -1]
