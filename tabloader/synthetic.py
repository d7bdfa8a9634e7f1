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

import functools
from typing import Any, Callable

import numpy as np
import pandas as pd

__all__ = [
    "criteo",
    "criteo_cardinalities",
    "criteo_schema",
    "movielens",
    "movielens_schema",
    "write_criteo",
    "write_movielens",
    "MOVIELENS_GENRES",
]

# Fixed key of the "world" random streams (see module docstring). Changing it changes every
# generated data set, so don't.
_WORLD_KEY = 0x7AB10ADE

# Knuth's multiplicative hash constant; odd, hence a bijection modulo 2**31.
_SCRAMBLE_MULTIPLIER = 2654435761
_ID_MASK = (1 << 31) - 1

ROW_GROUP_SIZE = 131_072

# Label model of criteo(): weights of the standardized log-values of the first continuous
# columns and scales of the per-id effects of the first categorical columns.
_LABEL_CONTINUOUS_WEIGHTS = (0.5, -0.4, 0.3, 0.25)
_LABEL_CATEGORICAL_SCALES = (0.5, 0.4, 0.35, 0.3, 0.3, 0.25, 0.25, 0.2)
_LABEL_BASE_RATE = 0.3

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


# --------------------------------------------------------------------------------------------
# building blocks
# --------------------------------------------------------------------------------------------
def _world_rng(*key: int) -> np.random.Generator:
    return np.random.default_rng([_WORLD_KEY, *key])


def _zipf_ranks(rng: np.random.Generator, n: int, cardinality: int, exponent: float) -> np.ndarray:
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
def _zipf_pmf(cardinality: int, exponent: float) -> np.ndarray:
    """The exact probabilities of :func:`_zipf_ranks` (differences of its CDF)."""
    s1 = 1.0 - exponent
    edges = np.arange(1, cardinality + 2, dtype=np.float64) ** s1
    pmf = -np.diff(edges) / (1.0 - edges[-1])
    pmf.setflags(write=False)
    return pmf


def _null_mask(rng: np.random.Generator, n: int, fraction: float) -> np.ndarray | None:
    if fraction <= 0:
        return None
    return rng.random(n, dtype=np.float32) < np.float32(fraction)


def _scramble(ranks: np.ndarray, salt: int) -> np.ndarray:
    """Map ranks to ids bijectively on [0, 2**31): ``(rank * 2654435761 + salt) % 2**31``."""
    ids = ranks * _SCRAMBLE_MULTIPLIER
    ids += salt
    ids &= _ID_MASK
    return ids


def _column_salt(column: int) -> int:
    return int(_world_rng(1, column).integers(0, 1 << 31))


def _zipf_exponent(column: int) -> float:
    return float(_world_rng(2, column).uniform(1.1, 1.2))


@functools.lru_cache(maxsize=64)
def _id_effects(column: int, cardinality: int, exponent: float) -> np.ndarray:
    """Per-rank label effect of a categorical column: standard normal draws from a world
    stream keyed by the column, re-centred and scaled to mean 0 / variance 1 *under the column's
    frequency distribution*, so each column adds exactly ``scale**2`` to the logit variance."""
    effects = _world_rng(3, column, cardinality).standard_normal(cardinality)
    pmf = _zipf_pmf(cardinality, exponent)
    effects -= pmf @ effects
    std = np.sqrt(pmf @ effects**2)
    if std > 0:
        effects /= std
    effects.setflags(write=False)
    return effects


def _continuous_params(column: int) -> tuple[float, float]:
    """(mu, sigma) of column ``column``'s lognormal: medians from ~1 to ~50, long tails."""
    g = _world_rng(4, column)
    return float(g.uniform(0.0, 4.0)), float(g.uniform(1.0, 2.0))


def _seeded_rng(seed: Any) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        raise TypeError("seed must be an int, a sequence of ints or a np.random.SeedSequence, not a Generator")
    return np.random.default_rng(seed)


def _file_seed(seed: Any, index: int) -> np.random.SeedSequence:
    """The seed of part ``index`` of a multi-file data set generated from ``seed``."""
    if isinstance(seed, np.random.SeedSequence):
        return np.random.SeedSequence(seed.entropy, spawn_key=(*seed.spawn_key, index))
    return np.random.SeedSequence([int(seed), int(index)])


def _split_rows(rows: int, num_files: int) -> list[int]:
    if num_files < 1:
        raise ValueError(f"num_files must be >= 1, got {num_files}")
    if rows < 0:
        raise ValueError(f"rows must be >= 0, got {rows}")
    base, extra = divmod(int(rows), int(num_files))
    return [base + (1 if i < extra else 0) for i in range(num_files)]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    out = np.negative(x)
    np.exp(out, out=out)
    out += 1.0
    np.reciprocal(out, out=out)
    return out


# --------------------------------------------------------------------------------------------
# Criteo
# --------------------------------------------------------------------------------------------
def criteo_cardinalities(num_categorical: int = 26, min_cardinality: int = 10,
                         max_cardinality: int = 1_000_000) -> list[int]:
    """Cardinalities of ``C1..C{num_categorical}``: log-spaced from ``min_cardinality`` to
    ``max_cardinality``, non-decreasing.

    Example:
        >>> criteo_cardinalities(5, 10, 100_000)
        [10, 100, 1000, 10000, 100000]
    """
    if num_categorical < 0:
        raise ValueError(f"num_categorical must be >= 0, got {num_categorical}")
    if not 1 <= min_cardinality <= max_cardinality:
        raise ValueError(
            f"need 1 <= min_cardinality <= max_cardinality, got {min_cardinality}, {max_cardinality}"
        )
    if max_cardinality > 1 << 31:
        raise ValueError(f"max_cardinality must be <= 2**31, got {max_cardinality}")
    if num_categorical == 0:
        return []
    if num_categorical == 1:
        return [int(max_cardinality)]
    cards = np.geomspace(min_cardinality, max_cardinality, num_categorical)
    cards = np.clip(np.rint(cards), min_cardinality, max_cardinality).astype(np.int64)
    return [int(c) for c in np.maximum.accumulate(cards)]


def criteo(
    rows: int,
    seed: Any = 0,
    num_categorical: int = 26,
    num_continuous: int = 13,
    min_cardinality: int = 10,
    max_cardinality: int = 1_000_000,
    null_fraction: float = 0.1,
    cat_null_fraction: float = 0.02,
    string_categorical: bool = False,
) -> pd.DataFrame:
    """A Criteo-like click log: ``label``, ``I1..I{num_continuous}``, ``C1..C{num_categorical}``.

    ``seed`` is anything ``np.random.default_rng`` takes (an int, a list of ints, a
    ``np.random.SeedSequence``); it picks the sample, while the generating process below is
    fixed, so frames with different seeds are independent draws of one distribution.

    Generating process, per row:

    * ``I_j`` (float32, integer-valued, non-negative, heavy-tailed):
      ``z_j ~ N(0, 1)``, ``I_j = floor(exp(mu_j + sigma_j * z_j))`` with per-column
      ``mu_j in [0, 4]``, ``sigma_j in [1, 2]``; NaN with probability ``null_fraction``.
    * ``C_c`` (``Int64``, nullable): a rank ``r`` in ``[0, card_c)`` from a bounded power law,
      ``P(r) ~ (r + 1) ** -s_c`` with ``s_c in [1.1, 1.2]`` (inverse CDF, vectorized), where
      ``card_c = criteo_cardinalities(...)[c]``; the id is ``(r * 2654435761 + salt_c) % 2**31``
      (a bijection, so ids are not sorted by frequency); null with probability
      ``cat_null_fraction``.
    * ``label`` (int32): ``Bernoulli(sigmoid(logit))`` with
      ``logit = b + sum_{j<=4} w_j * z_j + sum_{c<=8} a_c * e_c[r_c]``,
      ``w = (0.5, -0.4, 0.3, 0.25)``, ``a = (0.5, 0.4, 0.35, 0.3, 0.3, 0.25, 0.25, 0.2)``;
      ``e_c`` is a fixed per-id random effect (standard normal per rank from a stream keyed by
      the column, standardized under the column's frequencies), so an id always pushes the
      label the same way and frequent ids are learnable. Null features contribute 0; ``b``
      is set so that about 30% of labels are 1 (25-35% depending on the column counts).
      The Bayes-optimal AUC with the default arguments is about 0.77 (0.71 from the
      categorical effects alone, 0.61 from ``log1p(I1)`` alone).
    * ``C_str`` (only with ``string_categorical=True``, pandas ``string``): ``"s00042"``-like
      values, power-law frequencies over 1000 values, null with probability ``cat_null_fraction``.

    Example:
        >>> df = criteo(1000, seed=1)
        >>> df.shape, str(df["C1"].dtype), str(df["I1"].dtype), str(df["label"].dtype)
        ((1000, 40), 'Int64', 'float32', 'int32')
        >>> bool(df["label"].between(0, 1).all())
        True
        >>> criteo(10, num_categorical=2, num_continuous=1, string_categorical=True).columns.tolist()
        ['label', 'I1', 'C1', 'C2', 'C_str']
    """
    rows = int(rows)
    if rows < 0:
        raise ValueError(f"rows must be >= 0, got {rows}")
    if num_continuous < 0:
        raise ValueError(f"num_continuous must be >= 0, got {num_continuous}")
    for name, frac in (("null_fraction", null_fraction), ("cat_null_fraction", cat_null_fraction)):
        if not 0.0 <= frac < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {frac}")
    cards = criteo_cardinalities(num_categorical, min_cardinality, max_cardinality)
    rng = _seeded_rng(seed)

    logit = np.zeros(rows, dtype=np.float64)
    variance = 0.0
    columns: dict[str, Any] = {}

    for j in range(num_continuous):
        mu, sigma = _continuous_params(j)
        z = rng.standard_normal(rows, dtype=np.float32)
        values = z * np.float32(sigma)
        values += np.float32(mu)
        np.exp(values, out=values)
        np.floor(values, out=values)
        mask = _null_mask(rng, rows, null_fraction)
        if j < len(_LABEL_CONTINUOUS_WEIGHTS):
            w = _LABEL_CONTINUOUS_WEIGHTS[j]
            if mask is not None:
                z[mask] = 0.0
            logit += w * z
            variance += w * w * (1.0 - null_fraction)
        if mask is not None:
            values[mask] = np.nan
        columns[f"I{j + 1}"] = values

    for c, card in enumerate(cards):
        exponent = _zipf_exponent(c)
        ranks = _zipf_ranks(rng, rows, card, exponent)
        mask = _null_mask(rng, rows, cat_null_fraction)
        if c < len(_LABEL_CATEGORICAL_SCALES):
            a = _LABEL_CATEGORICAL_SCALES[c]
            effect = _id_effects(c, card, exponent)[ranks]
            if mask is not None:
                effect[mask] = 0.0
            effect *= a
            logit += effect
            variance += a * a * (1.0 - cat_null_fraction)
        ids = _scramble(ranks, _column_salt(c))
        if mask is None:
            mask = np.zeros(rows, dtype=bool)
        columns[f"C{c + 1}"] = pd.arrays.IntegerArray(ids, mask)

    # Probit approximation of E[sigmoid(b + X)], X ~ N(0, V): sigmoid(b / sqrt(1 + pi V / 8)).
    base = np.log(_LABEL_BASE_RATE / (1.0 - _LABEL_BASE_RATE))
    logit += base * np.sqrt(1.0 + np.pi * variance / 8.0)
    prob = _sigmoid(logit)
    label = (rng.random(rows) < prob).astype(np.int32)

    frame = {"label": label, **columns}
    if string_categorical:
        frame["C_str"] = _string_column(rng, rows, 1000, cat_null_fraction)
    return pd.DataFrame(frame, copy=False)


def _string_column(rng: np.random.Generator, rows: int, cardinality: int, null_fraction: float) -> Any:
    import pyarrow as pa

    ranks = _zipf_ranks(rng, rows, cardinality, 1.15)
    mask = _null_mask(rng, rows, null_fraction)
    order = _world_rng(5, cardinality).permutation(cardinality)
    vocab = pa.array([f"s{i:05d}" for i in order], type=pa.string())
    indices = pa.array(ranks, mask=mask)
    values = vocab.take(indices)
    return pd.arrays.ArrowStringArray(values)


def criteo_schema(
    num_categorical: int = 26,
    num_continuous: int = 13,
    min_cardinality: int = 10,
    max_cardinality: int = 1_000_000,
    string_categorical: bool = False,
    **_: Any,
):
    """The :class:`~tabloader.schema.Schema` of :func:`criteo` frames with these arguments.

    ``label`` is tagged target + binary, ``I*`` continuous, ``C*`` categorical. ``C*`` carry the
    property ``max_distinct`` (an upper bound on their number of distinct values; the raw ids
    themselves lie anywhere in ``[0, 2**31)``, so this is *not* an embedding table size).

    Example:
        >>> s = criteo_schema(num_categorical=2, num_continuous=1)
        >>> s.column_names, sorted(s["label"].tags)
        (['label', 'I1', 'C1', 'C2'], ['binary', 'target'])
    """
    from tabloader.schema import ColumnSchema, Schema, Tags

    cols = [ColumnSchema("label", "int32", {Tags.TARGET, Tags.BINARY})]
    cols += [ColumnSchema(f"I{j + 1}", "float32", {Tags.CONTINUOUS}) for j in range(num_continuous)]
    cards = criteo_cardinalities(num_categorical, min_cardinality, max_cardinality)
    cols += [
        ColumnSchema(f"C{c + 1}", "int64", {Tags.CATEGORICAL}, {"max_distinct": card})
        for c, card in enumerate(cards)
    ]
    if string_categorical:
        cols.append(ColumnSchema("C_str", "string", {Tags.CATEGORICAL}, {"max_distinct": 1000}))
    return Schema(cols)


# --------------------------------------------------------------------------------------------
# MovieLens
# --------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=8)
def _movie_genres(num_movies: int) -> tuple[np.ndarray, np.ndarray]:
    """Each movie's genres (by movie rank): ``(offsets, codes)``, 1-4 distinct genres per movie.

    Weighted sampling without replacement by the Gumbel-top-k trick, all movies at once.
    """
    g = _world_rng(6, num_movies)
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
    rng = _seeded_rng(seed)

    user_rank = _zipf_ranks(rng, rows, num_users, 0.9)
    movie_rank = _zipf_ranks(rng, rows, num_movies, 1.1)
    user_ids = _world_rng(7, num_users).permutation(num_users).astype(np.int64) + 1
    movie_ids = _world_rng(8, num_movies).permutation(num_movies).astype(np.int64) + 1
    user_bias = _world_rng(9, num_users).normal(0.0, 0.4, num_users)
    movie_bias = _world_rng(10, num_movies).normal(0.0, 0.5, num_movies)

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


# --------------------------------------------------------------------------------------------
# writers
# --------------------------------------------------------------------------------------------
def _arrow_schema(schema: Any) -> Any:
    """The arrow schema files of ``schema`` are written with (explicit, so an empty part
    still has the right types)."""
    import pyarrow as pa

    fields = []
    for col in schema:
        typ = pa.string() if col.dtype == "string" else pa.from_numpy_dtype(np.dtype(col.dtype))
        fields.append(pa.field(col.name, pa.list_(typ) if col.is_list else typ))
    return pa.schema(fields)


def _write_parts(path: str, rows: int, num_files: int, seed: Any, overwrite: bool,
                 generate: Callable[[int, Any], pd.DataFrame], schema: Any) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tabloader.atomic_files import atomic_directory
    from tabloader.filesystems import filesystem, join
    from tabloader.schema import SCHEMA_FILE_NAME

    sizes = _split_rows(rows, num_files)
    arrow_schema = _arrow_schema(schema)
    with atomic_directory(path, overwrite=overwrite) as tmp:
        fs, _ = filesystem(tmp)
        for index, n in enumerate(sizes):
            frame = generate(n, _file_seed(seed, index))
            table = pa.Table.from_pandas(frame, schema=arrow_schema, preserve_index=False)
            del frame
            _, target = filesystem(join(tmp, f"part_{index:05d}.parquet"))
            pq.write_table(table, target, filesystem=fs, row_group_size=ROW_GROUP_SIZE,
                           compression="snappy")
            del table
        schema.save(join(tmp, SCHEMA_FILE_NAME))
    return str(path)


def write_criteo(path: str, rows: int, num_files: int = 1, seed: Any = 0, overwrite: bool = False,
                 **criteo_kwargs: Any) -> str:
    """Write a :func:`criteo` data set as ``num_files`` parquet files plus ``_schema.json``.

    Files are ``part_00000.parquet``, ... in directory ``path``; rows are split evenly (the first
    ``rows % num_files`` files get one more). File ``i`` holds exactly
    ``criteo(rows_i, seed=np.random.SeedSequence([seed, i]), **criteo_kwargs)`` and is generated
    and written on its own, so memory stays bounded by one file. Row groups of 131072 rows,
    snappy. The directory is assembled under a temporary name and renamed when complete: a
    failure leaves nothing at ``path``. An existing ``path`` raises ``FileExistsError`` unless
    ``overwrite=True``. Returns ``path``.

    Example:
        >>> import tempfile, os
        >>> d = write_criteo(os.path.join(tempfile.mkdtemp(), "criteo"), 1000, num_files=2)
        >>> sorted(os.listdir(d))
        ['_schema.json', 'part_00000.parquet', 'part_00001.parquet']
    """
    schema = criteo_schema(**criteo_kwargs)

    def generate(n: int, file_seed: Any) -> pd.DataFrame:
        return criteo(n, seed=file_seed, **criteo_kwargs)

    return _write_parts(path, rows, num_files, seed, overwrite, generate, schema)


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

    return _write_parts(path, rows, num_files, seed, overwrite, generate, schema)
