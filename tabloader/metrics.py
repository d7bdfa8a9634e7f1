"""Evaluation metrics in plain numpy (no scikit-learn dependency).

Example:
    >>> roc_auc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8])
    0.75
    >>> roc_auc([0, 1, 1], [0.5, 0.5, 0.9])  # ties count one half
    0.75
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["roc_auc", "log_loss"]


def roc_auc(labels: Any, scores: Any) -> float:
    """Area under the ROC curve: P(score of a random positive > score of a random negative),
    ties counting one half (the Mann-Whitney U statistic divided by ``n_pos * n_neg``).

    Rank-based, O(n log n): scores are ranked with average ranks for ties, then
    ``AUC = (sum of positive ranks - n_pos (n_pos + 1) / 2) / (n_pos n_neg)``.
    Labels are truthy/falsy (``> 0.5`` counts as positive for float labels). Raises
    ``ValueError`` when only one class is present, when the lengths differ, or on NaN scores.
    """
    y = np.asarray(labels).reshape(-1)
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    if y.shape != s.shape:
        raise ValueError(f"labels and scores differ in length: {y.size} vs {s.size}")
    if np.isnan(s).any():
        raise ValueError("scores contain NaN")
    pos = y > 0.5 if y.dtype.kind == "f" else y.astype(bool)
    n_pos = int(pos.sum())
    n_neg = y.size - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"AUC needs both classes; got {n_pos} positive and {n_neg} negative labels")
    order = np.argsort(s, kind="mergesort")
    sorted_s = s[order]
    # average rank (1-based) of each run of equal scores
    starts = np.flatnonzero(np.r_[True, sorted_s[1:] != sorted_s[:-1]])
    ends = np.r_[starts[1:], s.size]
    run_rank = (starts + ends + 1) / 2.0
    ranks = np.empty(s.size, dtype=np.float64)
    ranks[order] = np.repeat(run_rank, ends - starts)
    u = ranks[pos].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def log_loss(labels: Any, probabilities: Any, eps: float = 1e-7) -> float:
    """Mean binary cross-entropy of ``probabilities`` (clipped to ``[eps, 1 - eps]``).

    Example:
        >>> round(log_loss([0, 1], [0.5, 0.5]), 4)
        0.6931
    """
    y = np.asarray(labels, dtype=np.float64).reshape(-1)
    p = np.clip(np.asarray(probabilities, dtype=np.float64).reshape(-1), eps, 1 - eps)
    if y.shape != p.shape:
        raise ValueError(f"labels and probabilities differ in length: {y.size} vs {p.size}")
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log1p(-p)))
