"""roc_auc / log_loss against brute-force computations written out in the test."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tabloader.metrics import log_loss, roc_auc


def brute_force_auc(labels, scores) -> float:
    pos = [s for y, s in zip(labels, scores) if y]
    neg = [s for y, s in zip(labels, scores) if not y]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg))
    return wins / (len(pos) * len(neg))


@pytest.mark.parametrize("seed", range(6))
def test_auc_matches_pairwise_count(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 300))
    labels = rng.integers(0, 2, n)
    labels[:2] = [0, 1]
    # few distinct values on some seeds, to exercise ties
    scores = rng.integers(0, 5, n).astype(float) if seed % 2 else rng.normal(size=n) + labels
    assert roc_auc(labels, scores) == pytest.approx(brute_force_auc(labels, scores), abs=1e-12)


def test_auc_edge_values():
    assert roc_auc([0, 0, 1, 1], [1, 2, 3, 4]) == 1.0
    assert roc_auc([0, 0, 1, 1], [4, 3, 2, 1]) == 0.0
    assert roc_auc([0, 1, 0, 1], [7, 7, 7, 7]) == 0.5
    assert roc_auc(np.array([0.0, 1.0, 1.0]), np.array([0.2, 0.1, 0.9], dtype=np.float32)) == 0.5
    assert roc_auc([False, True], [0.3, 0.4]) == 1.0


def test_auc_errors():
    with pytest.raises(ValueError, match="both classes"):
        roc_auc([1, 1], [0.1, 0.2])
    with pytest.raises(ValueError, match="length"):
        roc_auc([0, 1], [0.1])
    with pytest.raises(ValueError, match="NaN"):
        roc_auc([0, 1], [0.1, np.nan])


def test_log_loss_by_hand():
    y, p = [0, 1, 1], [0.2, 0.7, 0.9]
    expected = -(np.log(0.8) + np.log(0.7) + np.log(0.9)) / 3
    assert log_loss(y, p) == pytest.approx(expected)
    assert np.isfinite(log_loss([1], [0.0]))
