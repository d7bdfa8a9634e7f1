"""Tests of tabloader.synthetic: every expectation is computed here with numpy / pandas."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tabloader import synthetic
from tabloader.schema import Schema

N = 50_000

GENRES = {
    "Action", "Adventure", "Animation", "Children", "Comedy", "Crime", "Documentary", "Drama",
    "Fantasy", "Film-Noir", "Horror", "IMAX", "Musical", "Mystery", "Romance", "Sci-Fi",
    "Thriller", "War", "Western",
}


@pytest.fixture(scope="module")
def crit() -> pd.DataFrame:
    return synthetic.criteo(N, seed=0)


@pytest.fixture(scope="module")
def ml() -> pd.DataFrame:
    return synthetic.movielens(N, seed=0)


def auc(score: np.ndarray, label: np.ndarray) -> float:
    """Mann-Whitney AUC with average ranks for ties."""
    ranks = pd.Series(score).rank().to_numpy()
    pos = label == 1
    n1, n0 = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def expected_cardinalities(k: int, lo: float, hi: float) -> list[int]:
    return [int(round(lo * (hi / lo) ** (i / (k - 1)))) for i in range(k)]


# --------------------------------------------------------------------------------------------
# criteo
# --------------------------------------------------------------------------------------------
def test_criteo_deterministic(crit):
    pd.testing.assert_frame_equal(synthetic.criteo(N, seed=0), crit)
    other = synthetic.criteo(N, seed=1)
    assert not other.equals(crit)
    assert (other["C26"].to_numpy() != crit["C26"].to_numpy()).mean() > 0.5
    # the global numpy RNG is neither used nor disturbed
    np.random.seed(123)
    before = np.random.random()
    np.random.seed(123)
    synthetic.criteo(100, seed=0)
    assert np.random.random() == before


def test_criteo_columns_and_dtypes(crit):
    assert crit.columns.tolist() == ["label"] + [f"I{i}" for i in range(1, 14)] + [f"C{i}" for i in range(1, 27)]
    assert crit.shape == (N, 40)
    assert crit["label"].dtype == np.int32
    for i in range(1, 14):
        assert crit[f"I{i}"].dtype == np.float32
    for i in range(1, 27):
        assert crit[f"C{i}"].dtype == pd.Int64Dtype()
    small = synthetic.criteo(7, num_categorical=3, num_continuous=2, string_categorical=True)
    assert small.columns.tolist() == ["label", "I1", "I2", "C1", "C2", "C3", "C_str"]
    assert isinstance(small["C_str"].dtype, pd.StringDtype)
    assert synthetic.criteo(0).shape == (0, 40)


def test_criteo_null_fractions(crit):
    assert not crit["label"].isna().any()
    for i in range(1, 14):
        assert abs(crit[f"I{i}"].isna().mean() - 0.1) < 0.01
    for i in range(1, 27):
        assert abs(crit[f"C{i}"].isna().mean() - 0.02) < 0.005
    none = synthetic.criteo(2000, null_fraction=0.0, cat_null_fraction=0.0)
    assert not none.isna().any().any()
    many = synthetic.criteo(20_000, null_fraction=0.5, cat_null_fraction=0.3, string_categorical=True)
    assert abs(many["I5"].isna().mean() - 0.5) < 0.02
    assert abs(many["C5"].isna().mean() - 0.3) < 0.02
    assert abs(many["C_str"].isna().mean() - 0.3) < 0.02


def test_criteo_continuous_heavy_tailed_counts(crit):
    for i in range(1, 14):
        x = crit[f"I{i}"].dropna().to_numpy(np.float64)
        assert (x >= 0).all()
        assert (x == np.floor(x)).all()
        assert x.max() / max(np.median(x), 1.0) > 50
        assert pd.Series(x).skew() > 2
        assert pd.Series(np.log1p(x)).std() > 0.5


def test_criteo_cardinalities():
    expected = expected_cardinalities(26, 10, 1_000_000)
    assert expected[0] == 10 and expected[-1] == 1_000_000 and expected[5] == 100
    assert synthetic.criteo_cardinalities(26, 10, 1_000_000) == expected
    assert synthetic.criteo_cardinalities(3, 5, 500) == [5, 50, 500]


def test_criteo_categorical_ids(crit):
    bounds = expected_cardinalities(26, 10, 1_000_000)
    distinct = np.array([crit[f"C{i}"].nunique() for i in range(1, 27)])
    assert (distinct <= bounds).all()
    assert distinct[0] == 10  # small columns are fully observed
    assert distinct[-1] > 100 * distinct[0]
    assert np.corrcoef(np.log(bounds), np.log(distinct))[0, 1] > 0.95
    for i in range(1, 27):
        ids = crit[f"C{i}"].dropna().to_numpy(np.int64)
        assert ids.min() >= 0 and ids.max() < 2**31
    # ids are scrambled: the most frequent ids are not the smallest ones
    counts = crit["C20"].value_counts()
    smallest = np.sort(counts.index.to_numpy(np.int64))[:20]
    assert len(set(counts.index[:20].tolist()) & set(smallest.tolist())) < 5


def test_criteo_zipf_like(crit):
    bounds = expected_cardinalities(26, 10, 1_000_000)
    for i in range(20, 27):
        counts = crit[f"C{i}"].value_counts()  # sorted by descending frequency
        top = max(1, bounds[i - 1] // 100)
        assert counts.iloc[:top].sum() / counts.sum() > 0.5, i
        # top 1% of the observed distinct values hold a large share (uniform ids: ~1-2%)
        assert counts.iloc[: len(counts) // 100].sum() / counts.sum() > 0.45, i
        # frequencies fall like a power law: top id is far more frequent than the 100th
        assert counts.iloc[0] > 20 * counts.iloc[99]
    # in a small column the head dominates too
    shares = crit["C1"].value_counts(normalize=True).to_numpy()
    assert shares[0] > 0.25 and shares[0] > 5 * shares[-1]


def test_criteo_label_depends_on_features(crit):
    y = crit["label"].to_numpy()
    assert set(np.unique(y)) == {0, 1}
    assert 0.25 <= y.mean() <= 0.35
    # continuous: mean label in top vs bottom quintile of log1p(I1)
    x = np.log1p(crit["I1"].to_numpy(np.float64))
    ok = ~np.isnan(x)
    lo, hi = np.quantile(x[ok], [0.2, 0.8])
    assert y[ok & (x >= hi)].mean() - y[ok & (x <= lo)].mean() > 0.1
    # categorical: per-id mean labels differ and are stable across independent samples
    other = synthetic.criteo(N, seed=1)
    m0 = crit.groupby("C1")["label"].mean()
    m1 = other.groupby("C1")["label"].mean()
    assert m0.max() - m0.min() > 0.1
    assert np.corrcoef(m0.to_numpy(), m1.reindex(m0.index).to_numpy())[0, 1] > 0.8


def test_criteo_label_is_learnable_across_samples(crit):
    """Per-id log-odds fitted on one sample (seed 0) rank another sample (seed 1) well."""
    train, test = crit, synthetic.criteo(N, seed=1)
    prior = train["label"].mean()
    score = np.zeros(len(test))
    for c in [f"C{i}" for i in range(1, 9)] + ["I1", "I2", "I3"]:
        key_tr = train[c] if c.startswith("C") else np.log1p(train[c]).round()
        key_te = test[c] if c.startswith("C") else np.log1p(test[c]).round()
        stats = train["label"].groupby(key_tr).agg(["sum", "count"])
        rate = (stats["sum"] + 10 * prior) / (stats["count"] + 10)  # smoothed
        p = key_te.map(rate).astype("float64").fillna(prior).to_numpy()
        score += np.log(p / (1 - p)) - np.log(prior / (1 - prior))
    assert auc(score, test["label"].to_numpy()) > 0.68


def test_criteo_string_column():
    df = synthetic.criteo(20_000, string_categorical=True, num_categorical=1, num_continuous=1)
    values = df["C_str"].dropna()
    assert values.str.fullmatch(r"s\d+").all()
    counts = values.value_counts(normalize=True)
    assert len(counts) <= 1000 and counts.iloc[:10].sum() > 0.25
    pd.testing.assert_frame_equal(
        df, synthetic.criteo(20_000, string_categorical=True, num_categorical=1, num_continuous=1)
    )


# --------------------------------------------------------------------------------------------
# movielens
# --------------------------------------------------------------------------------------------
def test_movielens_deterministic(ml):
    pd.testing.assert_frame_equal(synthetic.movielens(N, seed=0), ml)
    other = synthetic.movielens(N, seed=1)
    assert (other["userId"].to_numpy() != ml["userId"].to_numpy()).mean() > 0.5


def test_movielens_columns_and_values(ml):
    assert ml.columns.tolist() == ["userId", "movieId", "genres", "rating", "timestamp"]
    assert ml["userId"].dtype == np.int64 and ml["movieId"].dtype == np.int64
    assert ml["rating"].dtype == np.float32 and ml["timestamp"].dtype == np.int64
    assert not ml.isna().any().any()
    assert ml["userId"].between(1, 10_000).all() and ml["movieId"].between(1, 5_000).all()
    r = ml["rating"].to_numpy(np.float64)
    assert set(np.unique(r)) <= set(np.arange(1, 11) / 2) and len(np.unique(r)) >= 8
    assert 3.0 < r.mean() < 4.0
    ts = ml["timestamp"]
    assert ts.min() >= 788_918_400 and ts.max() < 1_577_836_800  # 1995 .. 2019
    # Zipf-like ids: a small head of movies and users covers a large share of rows
    movies = ml["movieId"].value_counts(normalize=True)
    assert movies.iloc[:50].sum() > 0.3
    assert ml["userId"].value_counts().iloc[0] > 10 * ml["userId"].value_counts().median()


def test_movielens_genres(ml):
    lengths = ml["genres"].map(len)
    assert lengths.between(1, 4).all() and lengths.nunique() == 4
    as_tuples = ml["genres"].map(tuple)
    flat = {g for t in as_tuples.unique() for g in t}
    assert flat <= GENRES and len(flat) >= 15
    assert as_tuples.map(lambda t: len(set(t)) == len(t)).all()
    # the same movie always has the same genres, within a frame and across seeds
    per_movie = pd.DataFrame({"m": ml["movieId"], "g": as_tuples}).groupby("m")["g"].nunique()
    assert (per_movie == 1).all()
    other = synthetic.movielens(5000, seed=7)
    first = dict(zip(ml["movieId"], as_tuples))
    assert all(first[m] == tuple(g) for m, g in zip(other["movieId"], other["genres"]) if m in first)


# --------------------------------------------------------------------------------------------
# writers
# --------------------------------------------------------------------------------------------
def read_parts(path: str) -> tuple[list[str], pd.DataFrame, list[int]]:
    files = sorted(f for f in os.listdir(path) if f.endswith(".parquet"))
    with pd.option_context("mode.string_storage", "pyarrow"):  # pandas 2's default is "python"
        frames = [pd.read_parquet(os.path.join(path, f)) for f in files]
    return files, pd.concat(frames, ignore_index=True), [len(f) for f in frames]


def test_write_criteo(tmp_path):
    out = str(tmp_path / "criteo")
    kw = dict(num_categorical=5, num_continuous=3, string_categorical=True)
    assert synthetic.write_criteo(out, 10_001, num_files=3, seed=4, **kw) == out
    files, df, sizes = read_parts(out)
    assert files == ["part_00000.parquet", "part_00001.parquet", "part_00002.parquet"]
    assert sizes == [3334, 3334, 3333]
    assert sorted(os.listdir(out)) == ["_schema.json", *files]
    # file i is criteo(rows_i, seed=SeedSequence([seed, i]))
    expected = pd.concat(
        [synthetic.criteo(n, seed=np.random.SeedSequence([4, i]), **kw) for i, n in enumerate(sizes)],
        ignore_index=True,
    )
    pd.testing.assert_frame_equal(df, expected)
    # written again: identical; parts are distinct samples
    again = synthetic.write_criteo(str(tmp_path / "again"), 10_001, num_files=3, seed=4, **kw)
    pd.testing.assert_frame_equal(read_parts(again)[1], df)
    assert not df.iloc[:3333].reset_index(drop=True).equals(df.iloc[3334:6667].reset_index(drop=True))
    # parquet types, row groups
    arrow = pq.read_schema(os.path.join(out, files[0]))
    assert arrow.field("C1").type == pa.int64() and arrow.field("I1").type == pa.float32()
    assert arrow.field("label").type == pa.int32() and arrow.field("C_str").type == pa.string()
    assert df["C1"].isna().any()
    # schema
    schema = Schema.load(os.path.join(out, "_schema.json"))
    assert schema.column_names == df.columns.tolist()
    assert schema["label"].tags == {"target", "binary"}
    assert schema["I2"].tags == {"continuous"}
    assert schema["C3"].tags == {"categorical"} and schema["C_str"].tags == {"categorical"}
    # overwrite
    with pytest.raises(FileExistsError):
        synthetic.write_criteo(out, 10, **kw)
    synthetic.write_criteo(out, 10, num_files=2, overwrite=True, **kw)
    assert read_parts(out)[2] == [5, 5]


def test_write_criteo_row_groups_and_empty_parts(tmp_path):
    out = synthetic.write_criteo(str(tmp_path / "c"), 300_000, num_files=1, num_categorical=2, num_continuous=1)
    meta = pq.ParquetFile(os.path.join(out, "part_00000.parquet")).metadata
    assert meta.num_rows == 300_000 and 2 <= meta.num_row_groups <= 3
    out = synthetic.write_criteo(str(tmp_path / "e"), 2, num_files=4, num_categorical=2, num_continuous=1)
    files, df, sizes = read_parts(out)
    assert sizes == [1, 1, 0, 0] and len(files) == 4
    assert pq.read_schema(os.path.join(out, files[3])).field("C2").type == pa.int64()


def test_write_movielens(tmp_path):
    out = synthetic.write_movielens(str(tmp_path / "ml"), 5_000, num_files=2, seed=9)
    files, df, sizes = read_parts(out)
    assert files == ["part_00000.parquet", "part_00001.parquet"] and sizes == [2500, 2500]
    assert pq.read_schema(os.path.join(out, files[0])).field("genres").type.value_type == pa.string()
    assert pa.types.is_list(pq.read_schema(os.path.join(out, files[0])).field("genres").type)
    expected = pd.concat(
        [synthetic.movielens(n, seed=np.random.SeedSequence([9, i])) for i, n in enumerate(sizes)],
        ignore_index=True,
    )
    assert df["genres"].map(tuple).equals(expected["genres"].map(tuple))
    pd.testing.assert_frame_equal(df.drop(columns="genres"), expected.drop(columns="genres"))
    schema = Schema.load(os.path.join(out, "_schema.json"))
    assert schema["userId"].tags == {"categorical", "user", "id"}
    assert schema["movieId"].tags == {"categorical", "item", "id"}
    assert schema["genres"].tags == {"categorical", "list"} and schema["genres"].is_list
    assert schema["genres"].dtype == "string"
    assert schema["rating"].tags == {"target", "regression"}
    # the frame itself round-trips through pandas' own parquet writer and reader
    frame = synthetic.movielens(100)
    frame.to_parquet(tmp_path / "frame.parquet")
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "frame.parquet"), frame)


@pytest.mark.parametrize("writer", [synthetic.write_criteo, synthetic.write_movielens])
def test_failed_write_leaves_nothing(tmp_path, monkeypatch, writer):
    real = pq.write_table
    calls = []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("disk full")
        return real(*args, **kwargs)

    monkeypatch.setattr(pq, "write_table", flaky)
    out = tmp_path / "data"
    with pytest.raises(OSError, match="disk full"):
        writer(str(out), 1000, num_files=3)
    assert len(calls) == 2
    assert not out.exists()
    assert os.listdir(tmp_path) == []  # no temporary directory left behind either


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError):
        synthetic.criteo(-1)
    with pytest.raises(ValueError):
        synthetic.criteo(10, null_fraction=1.5)
    with pytest.raises(ValueError):
        synthetic.write_criteo(str(tmp_path / "x"), 10, num_files=0)
    assert not (tmp_path / "x").exists()
