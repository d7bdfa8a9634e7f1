"""The fixed "world" of the synthetic data sets and their random building blocks.

The world (how ranks map to ids, per-id label effects, per-column distribution parameters) depends
only on a column's position and cardinality, never on ``seed``: see :mod:`tabloader.synthetic`.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

# Fixed key of the "world" random streams. Changing it changes every generated data set, so don't.
_WORLD_KEY = 0x7AB10ADE

# Knuth's multiplicative hash constant; odd, hence a bijection modulo 2**31.
_SCRAMBLE_MULTIPLIER = 2654435761
_ID_MASK = (1 << 31) - 1


def world_rng(*key: int) -> np.random.Generator:
    return np.random.default_rng([_WORLD_KEY, *key])


def zipf_ranks(rng: np.random.Generator, n: int, cardinality: int, exponent: float) -> np.ndarray:
    """``n`` ranks in ``[0, cardinality)``, P(rank = k) ~ (k + 1) ** -exponent (bounded power law).

    Inverse CDF of the continuous power law on ``[1, cardinality + 1)``, floored: one uniform,
    one log and one exp per value, no rejection loop.
    """
    s1 = 1.0 - exponent
    c = -np.expm1(s1 * np.log(cardinality + 1.0))  # 1 - (N + 1) ** (1 - s)
    x = rng.random(n)
    x *= -c
    np.log1p(x, out=x)  # log(1 - u * c)
    x *= 1.0 / s1
    np.exp(x, out=x)
    ranks = x.astype(np.int64)
    ranks -= 1
    np.clip(ranks, 0, cardinality - 1, out=ranks)
    return ranks


@functools.lru_cache(maxsize=64)
def zipf_pmf(cardinality: int, exponent: float) -> np.ndarray:
    """The exact probabilities of :func:`zipf_ranks` (differences of its CDF)."""
    s1 = 1.0 - exponent
    edges = np.arange(1, cardinality + 2, dtype=np.float64) ** s1
    pmf = -np.diff(edges) / (1.0 - edges[-1])
    pmf.setflags(write=False)
    return pmf


def null_mask(rng: np.random.Generator, n: int, fraction: float) -> np.ndarray | None:
    if fraction <= 0:
        return None
    return rng.random(n, dtype=np.float32) < np.float32(fraction)


def scramble(ranks: np.ndarray, salt: int) -> np.ndarray:
    """Map ranks to ids bijectively on [0, 2**31): ``(rank * 2654435761 + salt) % 2**31``."""
    ids = ranks * _SCRAMBLE_MULTIPLIER
    ids += salt
    ids &= _ID_MASK
    return ids


def column_salt(column: int) -> int:
    return int(world_rng(1, column).integers(0, 1 << 31))


def zipf_exponent(column: int) -> float:
    return float(world_rng(2, column).uniform(1.1, 1.2))


@functools.lru_cache(maxsize=64)
def id_effects(column: int, cardinality: int, exponent: float) -> np.ndarray:
    """Per-rank label effect of a categorical column: standard normal draws from a world
    stream keyed by the column, re-centred and scaled to mean 0 / variance 1 *under the column's
    frequency distribution*, so each column adds exactly ``scale**2`` to the logit variance."""
    effects = world_rng(3, column, cardinality).standard_normal(cardinality)
    pmf = zipf_pmf(cardinality, exponent)
    effects -= pmf @ effects
    std = np.sqrt(pmf @ effects**2)
    if std > 0:
        effects /= std
    effects.setflags(write=False)
    return effects


def continuous_params(column: int) -> tuple[float, float]:
    """(mu, sigma) of column ``column``'s lognormal: medians from ~1 to ~50, long tails."""
    g = world_rng(4, column)
    return float(g.uniform(0.0, 4.0)), float(g.uniform(1.0, 2.0))


def seeded_rng(seed: Any) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        raise TypeError("seed must be an int, a sequence of ints or a np.random.SeedSequence, not a Generator")
    return np.random.default_rng(seed)


def file_seed(seed: Any, index: int) -> np.random.SeedSequence:
    """The seed of part ``index`` of a multi-file data set generated from ``seed``."""
    if isinstance(seed, np.random.SeedSequence):
        return np.random.SeedSequence(seed.entropy, spawn_key=(*seed.spawn_key, index))
    return np.random.SeedSequence([int(seed), int(index)])


def split_rows(rows: int, num_files: int) -> list[int]:
    if num_files < 1:
        raise ValueError(f"num_files must be >= 1, got {num_files}")
    if rows < 0:
        raise ValueError(f"rows must be >= 0, got {rows}")
    base, extra = divmod(int(rows), int(num_files))
    return [base + (1 if i < extra else 0) for i in range(num_files)]


def sigmoid(x: np.ndarray) -> np.ndarray:
    out = np.negative(x)
    np.exp(out, out=out)
    out += 1.0
    np.reciprocal(out, out=out)
    return out
