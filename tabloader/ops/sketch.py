"""A mergeable quantile sketch with a relative-error guarantee (exact on small inputs).

:class:`QuantileSketch` summarizes the finite values of a column so that partial sketches of
partitions can be merged in any order and grouping (the workflow tree-reduces them over Dask).

Design
------
* **Exact while small.** Up to ``exact_limit`` values the sketch keeps the sorted values
  themselves; quantiles are then exactly ``numpy.quantile(values, q)`` (linear interpolation).
* **Log buckets when large** (the DDSketch idea). Beyond ``exact_limit`` values, a value ``x``
  is counted in bucket ``k = ceil(log(|x|) / log(gamma))`` of its sign, with
  ``gamma = (1 + a) / (1 - a)`` for the relative accuracy ``a``; zeros are counted apart.
  The bucket ``k`` stands for ``2 * gamma**k / (gamma + 1)``, which is within ``a * |x|``
  of every ``x`` in the bucket. Merging adds bucket counts.

Both forms are functions of the multiset of values alone (not of how the data was cut into
partitions, nor of the merge order), so fitting on one partition or on many merged gives the
**same** sketch, bit for bit.

Accuracy guarantee
------------------
Let ``x_(0) <= ... <= x_(n-1)`` be the finite values and ``h = q * (n - 1)``. ``quantile(q)``
interpolates linearly between estimates of ``x_(floor h)`` and ``x_(ceil h)``, exactly as
``numpy.quantile`` does between the true order statistics, and each estimate is within
``a * |x_(j)|`` of the true one. Hence, for every ``q``::

    |quantile(q) - numpy.quantile(x, q)| <= a * max(|x_(floor h)|, |x_(ceil h)|)

with the default ``a = 0.001`` (**0.1 % relative error**; a few floating-point roundings
aside, ~1e-15 relative), and the error is **0** while ``n <= exact_limit`` (default 4096).
The size of a large sketch is about ``ln(max|x| / min|x|) / (2a)`` buckets of occupied range
(about 1150 buckets per decade of magnitude with the default), whatever ``n`` is.

NaN and +-inf are not counted (``count`` is the number of finite values); an empty sketch
answers NaN.

Example:
    >>> import numpy as np
    >>> from tabloader.ops.sketch import QuantileSketch
    >>> a = QuantileSketch.from_values(np.array([5.0, 1.0, np.nan]))
    >>> b = QuantileSketch.from_values(np.array([3.0, 2.0, np.inf]))
    >>> a.merge(b).quantile(0.5), a.merge(b).count
    (2.5, 4)
    >>> big = QuantileSketch.from_values(np.arange(1.0, 100001.0))
    >>> abs(big.quantile(0.5) - 50000.5) <= 0.001 * 50001
    True
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tabloader import backend

DEFAULT_RELATIVE_ACCURACY = 1e-3
DEFAULT_EXACT_LIMIT = 4096


class QuantileSketch:
    """Mergeable quantile summary of finite float values (see the module docstring for the bound).

    Build one with :meth:`from_values`, combine with :meth:`merge` (returns a new sketch,
    associative and commutative), read with :meth:`quantile`.

    Args:
        relative_accuracy: ``a`` in ``(0, 1)``; the relative error bound of large sketches.
        exact_limit: the number of values up to which the sketch stays exact.

    Example:
        >>> import numpy as np
        >>> s = QuantileSketch.from_values(np.array([1.0, 2.0, 3.0, 4.0]))
        >>> s.quantile(0.5), s.quantile(0.0), s.quantile(1.0)
        (2.5, 1.0, 4.0)
    """

    __slots__ = ("relative_accuracy", "exact_limit", "count", "exact", "pos_keys", "pos_counts",
                 "neg_keys", "neg_counts", "zeros")

    def __init__(self, relative_accuracy: float = DEFAULT_RELATIVE_ACCURACY,
                 exact_limit: int = DEFAULT_EXACT_LIMIT) -> None:
        if not 0.0 < relative_accuracy < 1.0:
            raise ValueError(f"relative_accuracy must be in (0, 1), got {relative_accuracy}")
        if exact_limit < 0:
            raise ValueError(f"exact_limit must be >= 0, got {exact_limit}")
        self.relative_accuracy = float(relative_accuracy)
        self.exact_limit = int(exact_limit)
        self.count = 0
        self.exact: np.ndarray | None = np.empty(0, dtype=np.float64)  # sorted values, or None once bucketed
        empty_i, empty_c = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        self.pos_keys, self.pos_counts, self.neg_keys, self.neg_counts = empty_i, empty_c, empty_i, empty_c
        self.zeros = 0

    # --- construction --------------------------------------------------------------------
    @classmethod
    def from_values(cls, values: Any, relative_accuracy: float = DEFAULT_RELATIVE_ACCURACY,
                    exact_limit: int = DEFAULT_EXACT_LIMIT) -> "QuantileSketch":
        """A sketch of the finite entries of a numpy (or CuPy) array; NaN and +-inf are skipped.

        A CuPy array is bucketed on the device: only the sketch (at most ``exact_limit`` values,
        or the bucket counts) is copied to the host.
        """
        sketch = cls(relative_accuracy, exact_limit)
        xp = backend.array_lib(values)
        values = xp.asarray(values, dtype=xp.float64).ravel()
        finite = xp.isfinite(values)
        if not bool(finite.all()):
            values = values[finite]
        sketch.count = int(values.size)
        if sketch.count <= sketch.exact_limit:
            sketch.exact = np.sort(backend.stats_to_host(values))
        else:
            sketch._set_buckets_from(values)
        return sketch

    @property
    def gamma(self) -> float:
        a = self.relative_accuracy
        return (1.0 + a) / (1.0 - a)

    @property
    def is_exact(self) -> bool:
        return self.exact is not None

    def _keys(self, magnitudes: Any) -> Any:
        """Bucket keys ``ceil(log(m) / log(gamma))`` of positive magnitudes (numpy or CuPy)."""
        xp = backend.array_lib(magnitudes)
        logs = xp.log(magnitudes)
        logs *= 1.0 / math.log(self.gamma)
        return xp.ceil(logs).astype(xp.int64)

    @staticmethod
    def _count_keys(keys: Any) -> tuple[np.ndarray, np.ndarray]:
        """The distinct keys and their counts, as host arrays (a few thousand at most)."""
        if keys.size == 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        xp = backend.array_lib(keys)
        lo = int(keys.min())
        counts = xp.bincount(keys - lo)
        present = xp.flatnonzero(counts)
        return (backend.stats_to_host(present.astype(xp.int64) + lo),
                backend.stats_to_host(counts[present].astype(xp.int64)))

    def _set_buckets_from(self, values: Any) -> None:
        pos = values[values > 0]
        neg = values[values < 0]
        self.zeros = int(values.size - pos.size - neg.size)
        self.pos_keys, self.pos_counts = self._count_keys(self._keys(pos))
        self.neg_keys, self.neg_counts = self._count_keys(self._keys(-neg))
        self.exact = None

    def _bucketed(self) -> "QuantileSketch":
        if not self.is_exact:
            return self
        out = QuantileSketch(self.relative_accuracy, self.exact_limit)
        out.count = self.count
        out._set_buckets_from(self.exact)
        return out

    # --- merge ---------------------------------------------------------------------------
    def merge(self, other: "QuantileSketch") -> "QuantileSketch":
        """A new sketch of both inputs' values (associative and commutative)."""
        if (self.relative_accuracy, self.exact_limit) != (other.relative_accuracy, other.exact_limit):
            raise ValueError("cannot merge quantile sketches with different relative_accuracy/exact_limit")
        out = QuantileSketch(self.relative_accuracy, self.exact_limit)
        out.count = self.count + other.count
        if self.is_exact and other.is_exact and out.count <= out.exact_limit:
            out.exact = np.sort(np.concatenate([self.exact, other.exact]))
            return out
        a, b = self._bucketed(), other._bucketed()
        out.exact = None
        out.zeros = a.zeros + b.zeros
        out.pos_keys, out.pos_counts = _add_counts(a.pos_keys, a.pos_counts, b.pos_keys, b.pos_counts)
        out.neg_keys, out.neg_counts = _add_counts(a.neg_keys, a.neg_counts, b.neg_keys, b.neg_counts)
        return out

    # --- queries -------------------------------------------------------------------------
    def _sorted_representatives(self) -> tuple[np.ndarray, np.ndarray]:
        """Bucket representative values in ascending order, and their counts."""
        g = self.gamma
        log_g, log_scale = math.log(g), math.log(2.0 / (g + 1.0))
        neg_order = np.argsort(-self.neg_keys, kind="stable")  # larger |x| first: most negative first
        neg_vals = -np.exp(self.neg_keys[neg_order] * log_g + log_scale)
        pos_vals = np.exp(self.pos_keys * log_g + log_scale)
        values = np.concatenate([neg_vals, [0.0], pos_vals])
        counts = np.concatenate([self.neg_counts[neg_order], [self.zeros], self.pos_counts])
        return values, counts

    def quantile(self, q: float) -> float:
        """The ``q``-quantile (``0 <= q <= 1``), with numpy's linear interpolation; NaN when empty."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"q must be in [0, 1], got {q}")
        if self.count == 0:
            return float("nan")
        h = q * (self.count - 1)
        lo, hi = math.floor(h), math.ceil(h)
        if self.is_exact:
            x_lo, x_hi = float(self.exact[lo]), float(self.exact[hi])
        else:
            values, counts = self._sorted_representatives()
            cum = np.cumsum(counts)
            x_lo, x_hi = (float(values[np.searchsorted(cum, r, side="right")]) for r in (lo, hi))
        return x_lo + (h - lo) * (x_hi - x_lo) if hi != lo else x_lo

    def __repr__(self) -> str:
        kind = "exact" if self.is_exact else f"{len(self.pos_keys) + len(self.neg_keys)} buckets"
        return f"QuantileSketch(count={self.count}, {kind}, relative_accuracy={self.relative_accuracy})"


def _add_counts(keys_a: np.ndarray, counts_a: np.ndarray, keys_b: np.ndarray,
                counts_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if keys_a.size == 0:
        return keys_b, counts_b
    if keys_b.size == 0:
        return keys_a, counts_a
    keys, inverse = np.unique(np.concatenate([keys_a, keys_b]), return_inverse=True)
    counts = np.bincount(inverse, weights=np.concatenate([counts_a, counts_b]), minlength=keys.size)
    return keys, counts.astype(np.int64)
