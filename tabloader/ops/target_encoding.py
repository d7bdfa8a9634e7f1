"""TargetEncoding: smoothed per-category target means, out-of-fold for training rows.

The encoding of a category is ``(sum + p_smooth * global_mean) / (count + p_smooth)``, where
``sum`` and ``count`` are the target's sum and number of non-null values over the rows of the
category, and ``global_mean`` is the target's mean over all rows at fit.

K-fold: every row has a fold, a deterministic function of its index label,
``fold = splitmix64(fold_seed * 31 + label) % kfold`` (:func:`fold_of`), where ``label`` is
the row's label in the partition's integer index (for a DataFrame, fit as a
:class:`~tabloader.Dataset` or transformed directly, the row number in that frame, whatever its
own index; for files, the position in the partition; for a non-integer or repeated index, the
position in the partition). Fit keeps the statistics per fold; at
transform a row of fold ``f`` is encoded with the statistics of the other folds only, so a
training row's own target never leaks into its feature. Fit and transform of the same Dataset
therefore agree on every row's fold, whatever the partitioning of a DataFrame source.

Validation and test data should get full-data encodings: transform them with a copy of the
fitted workflow in which ``out_of_fold`` is off -- ``full_data_workflow(workflow)`` -- or use
``kfold=1`` (no folds at all).

Example:
    >>> import pandas as pd
    >>> from tabloader.workflow import Workflow
    >>> df = pd.DataFrame({"c": ["a", "a", "b", "b"], "label": [1, 1, 0, 1]})
    >>> wf = Workflow(["c"] >> TargetEncoding("label", kfold=1, p_smooth=0), progress=False)
    >>> wf.fit_transform(df)["TE_c_label"].tolist()
    [1.0, 1.0, 0.5, 0.5]
"""

from __future__ import annotations

import copy
from typing import Any, Sequence

import numpy as np
import pandas as pd

from tabloader import backend
from tabloader.ops.base import CachedLookups, Columns, StatOperator, check_numeric
from tabloader.ops.groupby import cached_lookup, cached_values, float_values, key_groups, key_rows, normalize_keys
from tabloader.schema import ColumnSchema, Schema, Tags


def fold_of(index: Any, kfold: int, fold_seed: int) -> np.ndarray:
    """The fold of each row: ``splitmix64(fold_seed * 31 + label) % kfold`` (see the module docs).

    Example:
        >>> import pandas as pd
        >>> f = fold_of(pd.RangeIndex(1000), 3, 42)
        >>> sorted(set(f.tolist())), bool((fold_of(pd.RangeIndex(1000), 3, 42) == f).all())
        ([0, 1, 2], True)
    """
    xp = backend.array_lib(index)  # a cuDF index gives its labels on the device
    if kfold <= 1:
        return xp.zeros(len(index), dtype=np.int64)
    if pd.api.types.is_integer_dtype(index.dtype):
        labels = index.values.astype(np.int64)
    else:
        labels = xp.arange(len(index), dtype=np.int64)
    seed = xp.full(len(labels), int(fold_seed) & 0xFFFFFFFFFFFFFFFF, dtype=np.uint64)
    return (backend.hash_combine(seed, labels.view(np.uint64)) % np.uint64(kfold)).astype(np.int64)


class TargetEncoding(CachedLookups, StatOperator):
    """Encode categories by the smoothed mean of a target, k-fold out-of-fold for training rows.

    Output columns are named ``TE_{cat}_{target}`` (``cat`` is the column, or ``a_b`` for a
    tuple group), with dtype ``out_dtype``. Rows whose category has a null form their own
    group; a category unseen at fit is encoded as the global mean. Target values that are
    null are left out of sums and counts. The targets are read through
    :meth:`dependencies`, so they need not be selected.

    Parameters
    ----------
    target : str or list of str, or a graph node
        Target column(s), numeric: names of input columns, or a node whose outputs are derived
        columns (``target=["clicks"] >> ops.LambdaOp(is_positive)``), as NVTabular allows.
    kfold : int
        Number of folds (1: no folds, every row gets the full-data encoding).
    p_smooth : float
        Smoothing weight of the global mean.
    fold_seed : int
        Seed of the fold assignment (see :func:`fold_of`).
    out_dtype : str
        Output dtype.
    out_of_fold : bool
        Encode rows with the statistics of the other folds (training data). Set to False (see
        :func:`full_data_workflow`) to encode validation or test data with all of the data.

    Examples
    --------
    >>> import pandas as pd
    >>> from tabloader.workflow import Workflow
    >>> df = pd.DataFrame({"c": [1, 1, 2, 2], "y": [1.0, 0.0, 1.0, 1.0]})
    >>> wf = Workflow(["c"] >> TargetEncoding("y", kfold=1, p_smooth=4), progress=False)
    >>> wf.fit_transform(df)["TE_c_y"].astype(float).round(4).tolist()
    [0.6667, 0.6667, 0.8333, 0.8333]
    """

    takes_coded_strings = True  # keys normalized by the encoding module; outputs new columns only

    device_note = ("Folds, groups and sums with cuDF/CuPy (partials merged on the GPU); the fitted table is copied to "
                   "the GPU once per process.")

    def __init__(self, target: str | Sequence[str] = "label", kfold: int = 3, p_smooth: float = 20,
                 fold_seed: int = 42, out_dtype: str = "float32", out_of_fold: bool = True) -> None:
        self.target = target
        self.kfold = kfold
        self.p_smooth = p_smooth
        self.fold_seed = fold_seed
        self.out_dtype = str(np.dtype(out_dtype))  # np.float64 given: saved by its name
        self.out_of_fold = out_of_fold
        if np.dtype(out_dtype).kind != "f":
            raise ValueError(f"TargetEncoding: out_dtype must be a float dtype, got {out_dtype!r}")
        if isinstance(kfold, bool) or not isinstance(kfold, (int, np.integer)) or kfold < 1:
            raise ValueError(f"TargetEncoding: kfold must be an integer >= 1, got {kfold!r}")
        if p_smooth < 0:
            raise ValueError(f"TargetEncoding: p_smooth must be >= 0, got {p_smooth!r}")

    @property
    def targets(self) -> list[str]:
        return self.parameter_columns("target")

    def dependencies(self) -> list[Any]:
        return self.dependency_parameter("target")

    def output_column_names(self, columns: Columns) -> list[str]:
        return [f"TE_{prefix}_{t}" for prefix, _ in key_groups(columns) for t in self.targets]

    # --- fit -------------------------------------------------------------------------------
    def _sums(self, codes: Any, folds: Any, ngroups: int, ys: list[Any]) -> Any:
        """Array (ngroups, targets, kfold, 2) of [count, sum] of non-null targets."""
        xp = backend.array_lib(codes)
        k = int(self.kfold)
        out = xp.zeros((ngroups, len(ys), k, 2))
        cell = codes * k + folds
        for j, y in enumerate(ys):
            # Null targets weigh 0 rather than being selected out: on a GPU, a selection reads its size back.
            ok = ~xp.isnan(y)
            for stat, weights in enumerate((ok, xp.where(ok, y, 0.0))):
                out[:, j, :, stat] = backend.group_sums(cell, weights, ngroups * k).reshape(ngroups, k)
        return out

    def fit_partial(self, columns: Columns, frame: Any) -> dict[str, Any]:
        check_numeric(self, frame, self.targets)
        ys = [float_values(frame, t) for t in self.targets]
        xp = backend.array_lib(ys[0])
        folds = fold_of(frame.index, int(self.kfold), self.fold_seed)
        totals = xp.stack([xp.stack([(~xp.isnan(y)).sum(dtype=xp.float64), xp.nansum(y)]) for y in ys])
        partial: dict[str, Any] = {"__global__": totals}
        enc = backend.encoding_for(frame)
        for prefix, group in key_groups(columns):
            cols = normalize_keys(self, enc, group, frame)
            mask, codes, keys, kinds = enc.group_rows(cols)
            rows, null_rows = key_rows(mask, codes, len(frame))
            rows = xp.arange(len(frame)) if rows is None else rows
            groups = None
            if keys is not None:
                groups = {"keys": keys, "kinds": kinds,
                          "sums": self._sums(codes, folds[rows], len(keys[0]), [y[rows] for y in ys])}
            null = None
            if null_rows is not None:
                null = self._sums(xp.zeros(len(null_rows), np.int64), folds[null_rows], 1,
                                  [y[null_rows] for y in ys])
            partial[prefix] = {"groups": groups, "null": null}
        return partial

    def merge(self, left: dict[str, Any], right: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"__global__": left["__global__"] + right["__global__"]}
        for prefix in left:
            if prefix == "__global__":
                continue
            a, b = left[prefix], right[prefix]
            null = a["null"] if b["null"] is None else b["null"] if a["null"] is None else a["null"] + b["null"]
            groups = a["groups"] if b["groups"] is None else b["groups"] if a["groups"] is None else None
            if a["groups"] is not None and b["groups"] is not None:
                sums = backend.array_lib(a["groups"]["sums"]).concatenate([a["groups"]["sums"], b["groups"]["sums"]])
                codes, unique, kinds = backend.encoding_for(sums).union_keys(a["groups"], b["groups"], self, prefix)
                xp = backend.array_lib(sums)
                merged = xp.zeros((len(unique[0]),) + sums.shape[1:])
                xp.add.at(merged, codes, sums)
                groups = {"keys": unique, "kinds": kinds, "sums": merged}
            out[prefix] = {"groups": groups, "null": null}
        return out

    def _stat_columns(self) -> list[str]:
        return [f"{kind}_{t}_f{f}" for t in self.targets for f in range(int(self.kfold)) for kind in ("count", "sum")]

    def finalize(self, columns: Columns, merged: dict[str, Any]) -> None:
        glob = backend.stats_to_host(merged["__global__"])
        with np.errstate(invalid="ignore", divide="ignore"):
            self.global_mean_ = {t: float(glob[j, 1] / glob[j, 0]) if glob[j, 0] else float("nan")
                                 for j, t in enumerate(self.targets)}
        stats, nulls = {}, {}
        names = self._stat_columns()
        for prefix, group in key_groups(columns):
            part = merged[prefix]
            key_cols = [f"__key_{c}" for c in group]
            g = part["groups"]
            if g is None:
                keys = pd.DataFrame({k: pd.Series([], dtype=object) for k in key_cols})
                sums = np.zeros((0, len(names)))
            else:
                enc = backend.encoding_for(g["sums"])
                keys = pd.DataFrame({k: enc.keys_to_pandas(v) for k, v in zip(key_cols, g["keys"])})
                sums = backend.stats_to_host(g["sums"]).reshape(len(keys), -1)
            stats[prefix] = pd.concat([keys, pd.DataFrame(sums, columns=names)], axis=1)
            null = backend.stats_to_host(part["null"]).reshape(1, -1) if part["null"] is not None else \
                np.zeros((1, len(names)))
            nulls[prefix] = pd.DataFrame(null, columns=names)
        self.stats_ = stats
        self.null_stats_ = nulls
        self._lookup = {}

    # --- state -----------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        return {"stats": self.stats_, "null_stats": self.null_stats_, "global_mean": self.global_mean_}

    def set_state(self, state: dict[str, Any]) -> None:
        if not state:
            return
        self.global_mean_ = dict(state["global_mean"])
        self.stats_, self.null_stats_ = dict(state["stats"]), dict(state["null_stats"])
        self._lookup = {}

    # --- transform -------------------------------------------------------------------------
    def transform(self, columns: Columns, frame: Any) -> Any:
        k = int(self.kfold)
        oof = bool(self.out_of_fold) and k > 1
        folds = fold_of(frame.index, k, self.fold_seed) if oof else None
        p = float(self.p_smooth)
        enc = backend.encoding_for(frame)
        out: dict[str, Any] = {}
        for prefix, group in key_groups(columns):
            table = self.fitted_entry("stats_", prefix, group)
            lookup = cached_lookup(self, enc, prefix, table, [c for c in table.columns if c.startswith("__key_")])
            cols = normalize_keys(self, enc, group, frame)
            pos = lookup.positions(cols)
            xp = backend.array_lib(pos)
            mask = enc.null_mask(cols, "any")
            n = len(pos)
            for t in self.targets:
                names = [f"count_{t}_f{f}" for f in range(k)] + [f"sum_{t}_f{f}" for f in range(k)]
                table_cs = cached_values(self, pos, prefix, table, names)  # on the device once per process
                null_cs = cached_values(self, pos, prefix + "\0null", self.null_stats_[prefix], names)[0]
                # Rows by where, not by boolean masks (cs[seen] = ...): on CuPy a mask's count is
                # read back from the device, a wait per column and partition.
                found = table_cs[xp.maximum(pos, 0)] if len(table_cs) else xp.zeros((n, 2 * k))
                cs = xp.where((pos >= 0)[:, None], found, 0.0)
                if mask is not None:
                    cs = xp.where(mask[:, None], null_cs, cs)
                c, s = cs[:, :k], cs[:, k:]
                cnt, tot = c.sum(axis=1), s.sum(axis=1)
                if oof:
                    rows = xp.arange(n)
                    cnt, tot = cnt - c[rows, folds], tot - s[rows, folds]
                gm = self.global_mean_[t]
                with np.errstate(invalid="ignore", divide="ignore"):
                    te = xp.where(cnt + p > 0, (tot + p * gm) / (cnt + p), gm)
                out[f"TE_{prefix}_{t}"] = te.astype(self.out_dtype)
        return backend.frame_from_columns(out, frame.index, like=frame)

    def compute_output_schema(self, input_schema: Schema, columns: Columns) -> Schema:
        return Schema(ColumnSchema(name, self.out_dtype, {Tags.CONTINUOUS}) for name in self.output_column_names(columns))


def full_data_workflow(workflow: Any) -> Any:
    """A copy of a fitted workflow whose TargetEncoding ops encode with all folds (for validation data).

    Example:
        >>> import pandas as pd
        >>> from tabloader.workflow import Workflow
        >>> wf = Workflow(["c"] >> TargetEncoding("y"), progress=False)
        >>> _ = wf.fit(pd.DataFrame({"c": [1, 2], "y": [0, 1]}))
        >>> [n.op.out_of_fold for n in full_data_workflow(wf).nodes if n.kind == "op"]
        [False]
    """
    wf = copy.deepcopy(workflow)
    for node in wf.nodes:
        if node.kind == "op" and isinstance(node.op, TargetEncoding):
            node.op.out_of_fold = False
    return wf
