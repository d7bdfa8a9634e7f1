"""How many rows of each table an offloaded collection keeps on the device.

Categorify numbers values by descending frequency, so the hot rows of a table are its small
ids: :class:`~tabloader.torch.offload.OffloadedEmbeddingCollection` keeps rows ``[0, hot[t])`` of
table ``t`` on the device and the rest in host memory. The threshold is given per table
(:func:`resolve_hot_rows`) or derived from a device budget:

One resident row costs :func:`bytes_per_row` ``= 4 * D`` (the fp32 weight) ``+ 4`` (row-wise
Adagrad) or ``+ 8 * D`` (Adam's two moments). :func:`hot_rows_for_budget` splits
``budget // bytes_per_row`` hot rows over the tables by water-filling: every table gets an
equal share, a table smaller than its share is kept whole and the rest is shared again among
the others. (Each table is looked up once per sample and, with frequency-ordered ids, the k-th
row of every table is roughly equally hot, so equal per-table counts are close to the best hit
rate for a given number of rows.) The budget covers the resident hot rows only; the per-batch
staging buffers (at most ``lookups per batch`` unique cold rows and their state) come on top.

Example:
    >>> bytes_per_row(8, "adagrad"), hot_rows_for_budget([1000, 10, 1000], 100 * 32, 8, "sgd")
    (36, [45, 10, 45])
"""

from __future__ import annotations

import math
import operator
from fractions import Fraction
from typing import Any, Mapping, Sequence

__all__ = ["bytes_per_row", "hot_rows_for_budget", "resolve_hot_rows"]

FP32_BYTES = 4


def bytes_per_row(dim: int, optimizer: str) -> int:
    """Bytes one resident row costs on the device: the fp32 weight plus its optimizer state."""
    state = {"sgd": 0, "adagrad": FP32_BYTES, "adam": 2 * FP32_BYTES * dim}[optimizer]
    return FP32_BYTES * dim + state


def hot_rows_for_budget(num_rows: Sequence[int], budget_bytes: int, dim: int, optimizer: str) -> list[int]:
    """Split ``budget_bytes // bytes_per_row`` hot rows over tables by water-filling (see module doc)."""
    total = max(0, int(budget_bytes)) // bytes_per_row(dim, optimizer)
    hot = [0] * len(num_rows)
    order = sorted(range(len(num_rows)), key=lambda i: num_rows[i])
    left = total
    for k, i in enumerate(order):
        share = left // (len(order) - k)
        hot[i] = min(int(num_rows[i]), share)
        left -= hot[i]
    return hot


def resolve_hot_rows(hot_rows: Any, budget: int | None, names: Sequence[str], sizes: Sequence[int], dim: int,
                     optimizer: str) -> list[int]:
    """The per-table thresholds of the tables ``names`` (of ``sizes`` rows) from exactly one of
    ``hot_rows`` (an int cap, a float fraction, a sequence or a mapping by table name; see
    :class:`~tabloader.torch.offload.OffloadedEmbeddingCollection`) and a device ``budget``.

    Example:
        >>> resolve_hot_rows(0.25, None, ["a", "b"], [10, 100], 8, "sgd"), resolve_hot_rows({"a": 3, "b": 500},
        ...     None, ["a", "b"], [10, 100], 8, "sgd")
        ([3, 25], [3, 100])
    """
    if (hot_rows is None) == (budget is None):
        raise ValueError("give exactly one of hot_rows (per table, or a fraction) and gpu_budget_bytes")
    if budget is not None:
        if int(budget) < 0:
            raise ValueError(f"gpu_budget_bytes must be >= 0, got {budget}")
        return hot_rows_for_budget(sizes, int(budget), dim, optimizer)
    if isinstance(hot_rows, bool):
        raise TypeError(f"hot_rows must be an int, a float fraction, a sequence or a mapping, got {hot_rows!r}")
    if isinstance(hot_rows, float):
        if not 0.0 <= hot_rows <= 1.0:
            raise ValueError(f"hot_rows as a fraction must be in [0, 1], got {hot_rows}")
        # the fraction as written (0.07 is 7/100): its binary value times 100 is 7.000000000000001
        exact = Fraction(repr(hot_rows))
        return [min(n, math.ceil(exact * n)) for n in sizes]
    if _row_count(hot_rows) is not None:
        values = [hot_rows] * len(sizes)
    elif isinstance(hot_rows, Mapping):
        unknown = set(hot_rows) - set(names)
        if unknown:
            raise KeyError(f"hot_rows names unknown tables {sorted(unknown)}; tables: {list(names)}")
        missing = [n for n in names if n not in hot_rows]
        if missing:
            raise KeyError(f"hot_rows has no entry for tables {missing}")
        values = [hot_rows[n] for n in names]
    else:
        values = list(hot_rows)
        if len(values) != len(sizes):
            raise ValueError(f"hot_rows has {len(values)} entries for {len(sizes)} tables")
    out = []
    for name, v, n in zip(names, values, sizes):
        count = _row_count(v)
        if count is None or count < 0:
            raise ValueError(f"table {name!r}: hot rows must be a non-negative int, got {v!r}")
        out.append(min(n, count))
    return out


def _row_count(value: Any) -> int | None:
    """``value`` as a Python int when it is an integer (``int``, a NumPy or 0-d tensor integer:
    whatever ``operator.index`` takes, as :class:`~tabloader.torch.config.EmbeddingConfig` does), else
    None; never a bool (``True`` rows is a mistake, not 1)."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None
