"""Reproducible synthetic data: Criteo-like click logs and MovieLens-like ratings.

Used by the tests, the demo and the benchmarks. Everything is vectorized numpy drawn from
``np.random.default_rng`` generators (never the global RNG), so a given ``seed`` always gives
the same frame, on any machine.

Two kinds of randomness are kept apart:

* the **world** -- how ranks map to ids, the per-id label effects, the per-column
  distribution parameters, each movie's genres -- is fixed (it depends only on the column's
  position and cardinality, not on ``seed``);
* the **sample** -- which rows are drawn -- depends on ``seed``.

So frames generated with different seeds (say a training and a validation set, or the
``num_files`` parts written by :func:`write_criteo`) are independent samples of *the same*
distribution, and a model fitted on one generalizes to the other.

Example:
    >>> df = criteo(1000, seed=0)
    >>> df.shape
    (1000, 40)
    >>> criteo(1000, seed=0).equals(df)
    True
    >>> movielens(500).columns.tolist()
    ['userId', 'movieId', 'genres', 'rating', 'timestamp']
"""

from __future__ import annotations

from tabloader.synthetic.clicks import (
    criteo,
    criteo_cardinalities,
    criteo_schema,
    write_criteo,
)
from tabloader.synthetic.files import ROW_GROUP_SIZE
from tabloader.synthetic.ratings import (
    MOVIELENS_GENRES,
    movielens,
    movielens_schema,
    write_movielens,
)

__all__ = [
    "MOVIELENS_GENRES",
    "ROW_GROUP_SIZE",
    "criteo",
    "criteo_cardinalities",
    "criteo_schema",
    "movielens",
    "movielens_schema",
    "write_criteo",
    "write_movielens",
]
