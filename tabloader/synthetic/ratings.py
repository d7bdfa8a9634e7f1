"""MovieLens-like ratings: users, movies with genre lists, half-star ratings and timestamps."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pandas as pd

from tabloader.synthetic.files import write_parts
from tabloader.synthetic.world import seeded_rng, world_rng, zipf_ranks

MOVIELENS_GENRES = (
    "Action", "Adventure", "Animation", "Children", "Comedy", "Crime", "Documentary", "Drama",
    "Fantasy", "Film-Noir", "Horror", "IMAX", "Musical", "Mystery", "Romance", "Sci-Fi",
    "Thriller", "War", "Western",
)
# Rough relative popularity of each genre in MovieLens (Drama and Comedy dominate).
_GENRE_WEIGHTS = np.array(
    [8, 5, 2, 2, 13, 5, 3, 20, 3, 0.5, 4, 0.5, 1.5, 3, 7, 3, 8, 1.5, 1], dtype=np.float64
)
# ML-25M spans 1995-01-09 .. 2019-11-21.
_TIMESTAMP_RANGE = (789_652_009, 1_574_327_703)


@functools.lru_cache(maxsize=8)
def _movie_genres(num_movies: int) -> tuple[np.ndarray, np.ndarray]:
    """Each movie's genres (by movie rank): ``(offsets, codes)``, 1-4 distinct genres per movie.

    Weighted sampling without replacement by the Gumbel-top-k trick, all movies at once.
    """
    g = world_rng(6, num_movies)
    counts = g.choice(4, size=num_movies, p=[0.35, 0.35, 0.2, 0.1]) + 1
    keys = np.log(_GENRE_WEIGHTS)[None, :] + g.gumbel(size=(num_movies, len(MOVIELENS_GENRES)))
    order = np.argsort(-keys, axis=1, kind="stable")
    take = np.arange(len(MOVIELENS_GENRES))[None, :] < counts[:, None]
    # Sorting puts each movie's taken codes (< 19) first in its row, in genre order.
    codes = np.sort(np.where(take, order, len(MOVIELENS_GENRES)), axis=1)[take]
    offsets = np.zeros(num_movies + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    codes = codes.astype(np.int8)
    offsets.setflags(write=False)
    codes.setflags(write=False)
    return offsets, codes


@functools.lru_cache(maxsize=8)
def _movie_genre_arrays(num_movies: int) -> np.ndarray:
    """Object array (by movie rank) of read-only object arrays of genre names."""
    offsets, codes = _movie_genres(num_movies)
    names = np.array(MOVIELENS_GENRES, dtype=object)
    out = np.empty(num_movies, dtype=object)
    for m in range(num_movies):
        genres = names[codes[offsets[m]:offsets[m + 1]]]
        genres.setflags(write=False)
        out[m] = genres
    out.setflags(write=False)
    return out


def movielens(rows: int, seed: Any = 0, num_users: int = 10_000, num_movies: int = 5_000) -> pd.DataFrame:
    """A MovieLens-like ratings log: ``userId``, ``movieId``, ``genres``, ``rating``, ``timestamp``.

    Generating process, per row (``seed`` picks the sample, the world is fixed, as in
    :func:`criteo`):

    * ``userId`` / ``movieId`` (int64, in ``[1, num_users]`` / ``[1, num_movies]``): a rank from
      a bounded power law (exponents 0.9 for users, 1.1 for movies) mapped to an id by a fixed
      random permutation.
    * ``genres`` (object column of read-only numpy arrays of ``str``, the way pandas reads a
      parquet ``list<string>`` column, and written back as one): 1-4 distinct names out of
      the 19 MovieLens genres, fixed per movie (the same ``movieId`` always has the same
      genres, in alphabetical order; rows of one movie share one array).
    * ``rating`` (float32 in ``{0.5, 1.0, ..., 5.0}``): ``3.5 + user_bias + movie_bias + noise``
      (biases ``N(0, 0.4)`` / ``N(0, 0.5)`` fixed per id, noise ``N(0, 0.8)``), rounded to the
      half star and clipped.
    * ``timestamp`` (int64 unix seconds): uniform over 1995-01-09 .. 2019-11-21.

    Example:
        >>> df = movielens(1000, seed=0)
        >>> df.shape, str(df["rating"].dtype), str(df["userId"].dtype)
        ((1000, 5), 'float32', 'int64')
        >>> bool(df["genres"].map(len).between(1, 4).all())
        True
    """
    rows = int(rows)
    if rows < 0:
        raise ValueError(f"rows must be >= 0, got {rows}")
    if num_users < 1 or num_movies < 1:
        raise ValueError(f"num_users and num_movies must be >= 1, got {num_users}, {num_movies}")
    rng = seeded_rng(seed)

    user_rank = zipf_ranks(rng, rows, num_users, 0.9)
    movie_rank = zipf_ranks(rng, rows, num_movies, 1.1)
    user_ids = world_rng(7, num_users).permutation(num_users).astype(np.int64) + 1
    movie_ids = world_rng(8, num_movies).permutation(num_movies).astype(np.int64) + 1
    user_bias = world_rng(9, num_users).normal(0.0, 0.4, num_users)
    movie_bias = world_rng(10, num_movies).normal(0.0, 0.5, num_movies)

    rating = rng.normal(3.5, 0.8, rows)
    rating += user_bias[user_rank]
    rating += movie_bias[movie_rank]
    rating *= 2.0
    np.rint(rating, out=rating)
    np.clip(rating, 1.0, 10.0, out=rating)
    rating = (rating / 2.0).astype(np.float32)
    timestamp = rng.integers(_TIMESTAMP_RANGE[0], _TIMESTAMP_RANGE[1], size=rows, dtype=np.int64)

    # genres: each row shares its movie's (read-only) array, as pandas reads parquet lists.
    genres = _movie_genre_arrays(num_movies)[movie_rank]

    return pd.DataFrame(
        {
            "userId": user_ids[user_rank],
            "movieId": movie_ids[movie_rank],
            "genres": genres,
            "rating": rating,
            "timestamp": timestamp,
        },
        copy=False,
    )


def movielens_schema(num_users: int = 10_000, num_movies: int = 5_000, **_: Any):
    """The :class:`~tabloader.schema.Schema` of :func:`movielens` frames.

    Example:
        >>> s = movielens_schema()
        >>> sorted(s["genres"].tags), s["genres"].is_list, s["genres"].dtype
        (['categorical', 'list'], True, 'string')
    """
    from tabloader.schema import ColumnSchema, Schema, Tags

    return Schema(
        [
            ColumnSchema("userId", "int64", {Tags.CATEGORICAL, Tags.USER, Tags.ID},
                         {"domain": {"min": 1, "max": int(num_users)}}),
            ColumnSchema("movieId", "int64", {Tags.CATEGORICAL, Tags.ITEM, Tags.ID},
                         {"domain": {"min": 1, "max": int(num_movies)}}),
            ColumnSchema("genres", "string", {Tags.CATEGORICAL, Tags.LIST},
                         {"max_distinct": len(MOVIELENS_GENRES)}, is_list=True),
            ColumnSchema("rating", "float32", {Tags.TARGET, Tags.REGRESSION}),
            ColumnSchema("timestamp", "int64", {Tags.CONTEXT}),
        ]
    )


def write_movielens(path: str, rows: int, num_files: int = 1, seed: Any = 0, overwrite: bool = False,
                    **kw: Any) -> str:
    """Write a :func:`movielens` data set as ``num_files`` parquet files plus ``_schema.json``.

    Same layout, splitting, seeding (file ``i`` is
    ``movielens(rows_i, seed=np.random.SeedSequence([seed, i]), **kw)``) and atomicity as
    :func:`write_criteo`; ``genres`` is stored as parquet ``list<string>``.

    Example:
        >>> import tempfile, os
        >>> import pandas as pd
        >>> d = write_movielens(os.path.join(tempfile.mkdtemp(), "ml"), 1000, num_files=3)
        >>> len(pd.read_parquet(os.path.join(d, "part_00002.parquet")))
        333
    """
    schema = movielens_schema(**kw)

    def generate(n: int, file_seed: Any) -> pd.DataFrame:
        return movielens(n, seed=file_seed, **kw)

    return write_parts(path, rows, num_files, seed, overwrite, generate, schema)
