"""The GPU value counts of numbers (Categorify's and DataStats' fit on cuDF) read the device back
once for all the columns of a call, never per column (issue 14), and count what pandas counts.

There is no GPU here: the GPU implementation (:mod:`tabloader.encoding.gpu`) runs on the
numpy-backed stand-in for CuPy of ``tests/test_loader_host_reads.py``, whose arrays refuse every
read into Python (``int(x)``, boolean masks, ``nonzero``, ``unique``...) except the counted
``cupy.asnumpy`` and ``ndarray.get``. ``tests/test_gpu_workflow_sync.py`` checks the real thing on a GPU.
"""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from tabloader import backend
from tabloader.encoding import gpu

from test_loader_host_reads import DeviceArray, StandInCupy, _device, host

OP = "Test"


def stand_in(monkeypatch) -> StandInCupy:
    """The stand-in as ``backend.cupy()``; ``ndarray.get()`` (what ``backend.host_floats`` reads
    with) counted as the stand-in's ``asnumpy`` is."""
    standin = StandInCupy()
    monkeypatch.setattr(backend, "cupy", lambda: standin)
    monkeypatch.setattr(DeviceArray, "get", lambda self: standin.asnumpy(self), raising=False)
    return standin


@pytest.fixture
def cupy(monkeypatch):
    return stand_in(monkeypatch)


def on_device(kind: str, values: list) -> gpu.NormalizedColumn:
    """The normalized column the GPU implementation makes of ``values`` (None for null): values
    of a numpy dtype, nulls stood in by 0, and a mask (None without nulls, but for floats)."""
    dtype = {"int": np.int64, "uint": np.uint64, "float": np.float64}[kind]
    mask = np.array([v is None for v in values], dtype=bool)
    numbers = np.array([0 if v is None else v for v in values], dtype=dtype)
    masked = mask.any() or kind == "float"
    return gpu.NormalizedColumn("int" if kind == "uint" else kind, _device(numbers), _device(mask) if masked else None)


def by_hand(values: list) -> tuple[list, int]:
    """(value, count) pairs of the non-null values in ascending order, and the number of nulls."""
    valid = pd.Series([v for v in values if v is not None], dtype=object)
    counts = valid.value_counts(sort=False)
    return sorted(zip(counts.index.tolist(), counts.tolist())), len(values) - len(valid)


def pairs(partial: dict) -> list:
    if partial["keys"] is None:
        return []
    keys, counts = (np.asarray(a.view(np.ndarray)) for a in (partial["keys"][0], partial["counts"]))
    return list(zip(keys.tolist(), counts.tolist()))


NUMBERS = {
    "int": st.integers(-(2**63), 2**63 - 1) | st.integers(-3, 3),
    "uint": st.integers(2**63 - 2, 2**64 - 1) | st.integers(0, 3),
    "float": st.sampled_from([-np.inf, np.inf, -0.5, 0.0, 2.0]) | st.floats(-1e300, 1e300, allow_nan=False),
}


@st.composite
def columns(draw):
    """A kind and a list of values (None for null) drawn from a small pool, so values repeat."""
    kind = draw(st.sampled_from(sorted(NUMBERS)))
    pool = draw(st.lists(NUMBERS[kind], min_size=1, max_size=6, unique=True))
    return kind, draw(st.lists(st.sampled_from(pool) | st.none(), max_size=30))


@settings(max_examples=200, deadline=None)
@given(cols=st.lists(columns(), min_size=1, max_size=5), seed=st.integers(0, 2**32 - 1))
def test_numbers_are_counted_and_merged_with_one_read_per_call(cols, seed):
    with pytest.MonkeyPatch.context() as patch:
        standin = stand_in(patch)
        normalized = [on_device(kind, values) for kind, values in cols]
        partials = gpu.count_values_each([([c], c.mask) for c in normalized])
        assert standin.reads <= 1  # none when every column is empty
        for (kind, values), partial in zip(cols, partials):
            expected, nulls = by_hand(values)
            assert (pairs(partial), partial["nulls"]) == (expected, nulls)
            assert type(partial["nulls"]) is int and "size" not in partial

        # each column counted again in two pieces, the pieces merged: one read for all the merges
        # (but uint64 keys, whose common type with the other piece's is read from their extremes)
        signed = [(kind, values) for kind, values in cols if kind != "uint"]
        cut = random.Random(seed).randint(0, 30)
        halves = [gpu.count_values_each([([on_device(kind, part)], on_device(kind, part).mask)])[0]
                  for kind, values in signed for part in (values[:cut], values[cut:])]
        standin.reads = 0
        merged = gpu.merge_counts_each([(halves[2 * i], halves[2 * i + 1], f"c{i}") for i in range(len(signed))], OP)
        assert standin.reads <= 1
        for (kind, values), partial in zip(signed, merged):
            assert (pairs(partial), partial["nulls"]) == by_hand(values)


def test_a_column_of_nulls_only_and_an_empty_one_count_nothing(cupy):
    nulls, empty = on_device("int", [None, None]), on_device("int", [])
    got = gpu.count_values_each([([nulls], nulls.mask), ([empty], None)])
    assert [(p["keys"], p["nulls"], len(p["counts"])) for p in got] == [(None, 2, 0), (None, 0, 0)]
    assert cupy.reads == 1


# --- combinations of columns, and the key groups of JoinGroupby and TargetEncoding ------------
@st.composite
def combinations(draw, least=2):
    """``least`` to three columns (kind, values with None for null) of one length, values repeating."""
    n = draw(st.integers(0, 30))
    cols = []
    for _ in range(draw(st.integers(least, 3))):
        kind = draw(st.sampled_from(sorted(NUMBERS)))
        pool = draw(st.lists(NUMBERS[kind], min_size=1, max_size=4, unique=True))
        cols.append((kind, draw(st.lists(st.sampled_from(pool) | st.none(), min_size=n, max_size=n))))
    return cols


def combination_counts(cols: list) -> list:
    """(tuple of values, count) of the rows without a null, sorted: pandas' groupby, by hand."""
    frame = pd.DataFrame({i: pd.Series(values, dtype=object) for i, (_, values) in enumerate(cols)})
    sizes = frame.dropna().groupby(list(frame.columns), sort=False).size()
    return sorted((key, int(count)) for key, count in sizes.items())


def combination_pairs(partial: dict) -> list:
    if partial["keys"] is None:
        return []
    keys = [np.asarray(k.view(np.ndarray)).tolist() for k in partial["keys"]]
    return sorted(zip(zip(*keys), np.asarray(partial["counts"].view(np.ndarray)).tolist()))


@settings(max_examples=150, deadline=None)
@given(jobs=st.lists(combinations(), min_size=1, max_size=3), seed=st.integers(0, 2**32 - 1))
def test_combinations_are_counted_and_merged_with_one_read_per_call(jobs, seed):
    with pytest.MonkeyPatch.context() as patch:
        standin = stand_in(patch)
        normalized = [[on_device(kind, values) for kind, values in cols] for cols in jobs]
        partials = gpu.count_values_each([(cols, gpu.null_mask(cols, "any")) for cols in normalized])
        assert standin.reads <= 1  # none when every column is empty
        for cols, partial in zip(jobs, partials):
            assert combination_pairs(partial) == combination_counts(cols)
            assert partial["nulls"] == sum(any(v[i] is None for _, v in cols) for i in range(len(cols[0][1])))

        # each combination counted again in two pieces, the pieces merged: one read for all the merges
        # (but uint64 keys, whose common type with the other piece's is read from their extremes)
        signed = [cols for cols in jobs if all(kind != "uint" for kind, _ in cols)]
        cut = random.Random(seed).randint(0, 30)
        halves = []
        for cols in signed:
            for part in (slice(None, cut), slice(cut, None)):
                piece = [on_device(kind, values[part]) for kind, values in cols]
                halves.append(gpu.count_values_each([(piece, gpu.null_mask(piece, "any"))])[0])
        standin.reads = 0
        merged = gpu.merge_counts_each([(halves[2 * i], halves[2 * i + 1], f"c{i}") for i in range(len(signed))], OP)
        assert standin.reads <= 1  # none when every piece is empty
        for cols, partial in zip(signed, merged):
            assert combination_pairs(partial) == combination_counts(cols)


@settings(max_examples=150, deadline=None)
@given(cols=combinations(least=1))
def test_key_groups_are_made_with_one_read(cols):
    with pytest.MonkeyPatch.context() as patch:
        standin = stand_in(patch)
        normalized = [on_device(kind, values) for kind, values in cols]
        mask, codes, keys, _ = gpu.group_rows(normalized)
        assert standin.reads == (1 if len(cols[0][1]) else 0)
    rows = [tuple(values[i] for _, values in cols) for i in range(len(cols[0][1]))]
    valid = [row for row in rows if None not in row]  # by hand: the rows without a null, in order
    if mask is not None:
        assert host(mask).tolist() == [None in row for row in rows]
    codes = host(codes).tolist()
    assert len(codes) == len(valid)
    if not valid:
        assert keys is None
        return
    key_rows = list(zip(*[host(k).tolist() for k in keys]))
    assert sorted(key_rows) == sorted(set(valid))  # each distinct row once (0.0 and -0.0 are one)
    assert [key_rows[code] for code in codes] == valid
