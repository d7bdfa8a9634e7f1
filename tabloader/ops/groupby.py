"""JoinGroupby: per-category aggregates of continuous columns, joined back onto every row.

Partial statistics per category are the row count and, per continuous column, the number of
non-null values, their mean, the sum of squared deviations ``M2``, min and max; partials merge
with Chan's parallel algorithm (``n = sum n_i``, ``mean = sum n_i mean_i / n``,
``M2 = sum M2_i + n_i (mean_i - mean)^2``), which is exact in exact arithmetic and numerically
stable, so fit on one partition or many gives the same numbers up to rounding.

Example:
    >>> import pandas as pd
    >>> from tabloader.workflow import Workflow
    >>> df = pd.DataFrame({"c": ["a", "a", "b"], "x": [1.0, 3.0, 5.0]})
    >>> wf = Workflow(["c"] >> JoinGroupby(cont_cols=["x"], stats=["count", "mean"]), progress=False)
    >>> wf.fit_transform(df).values.tolist()
    [[2.0, 2.0], [2.0, 2.0], [1.0, 5.0]]
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from tabloader import backend
from tabloader.encoding.lists import holds_lists
from tabloader.graph import Node
from tabloader.ops.base import CachedLookups, Columns, StatOperator, cached_entry, check_numeric, group_name, lookup_key
from tabloader.schema import ColumnSchema, Schema, Tags

STATS = ("count", "sum", "mean", "std", "var", "min", "max")


def key_groups(columns: Columns) -> list[tuple[str, tuple[str, ...]]]:
    """(output prefix, key columns) per selected column or tuple group."""
    out = []
    for col in columns:
        group = tuple(col) if isinstance(col, (tuple, list)) else (col,)
        out.append((group_name(group), group))
    return out


def normalize_keys(op: Any, enc: Any, group: Sequence[str], frame: Any) -> list[Any]:
    """The key columns of ``group`` normalized by the encoding implementation ``enc``."""
    cols = []
    for c in group:
        if holds_lists(frame[c]):
            raise TypeError(f"{op.label} cannot group by list column {c!r} (dtype {frame[c].dtype})")
        cols.append(enc.normalize_column(op, c, frame[c]))
    return cols


def key_rows(mask: Any, codes: Any, rows: int) -> tuple[Any, Any]:
    """The positions of the rows with a key (None: all ``rows`` of the frame) and of those with a
    null key (None: none), for :func:`~tabloader.encoding.cpu.counting.group_rows`' ``mask`` and
    ``codes`` (one per row with a key).

    The null rows are those without a code: counted on the host, so that finding their positions
    takes no wait for the device (as ``flatnonzero`` and testing the mask do on a GPU).

    Example:
        >>> import numpy as np
        >>> [r.tolist() for r in key_rows(np.array([False, True, False]), np.array([0, 1]), 3)]
        [[0, 2], [1]]
    """
    nulls = rows - len(codes)
    if not nulls:
        return None, None
    return backend.flatnonzero(~mask, len(codes)), backend.flatnonzero(mask, nulls)


def cached_lookup(op: Any, enc: Any, prefix: str, table: pd.DataFrame, key_columns: Sequence[str]) -> Any:
    """The lookup of ``table``'s keys for ``prefix``, built on first use and cached by the op."""
    return cached_entry(op, lookup_key(enc, prefix),
                        lambda: enc.ValueLookup([table[k] for k in key_columns], op, prefix))


def cached_values(op: Any, like: Any, prefix: str, table: pd.DataFrame, columns: Sequence[str]) -> Any:
    """``table[columns]`` as one float64 array of the library of ``like`` (numpy, or CuPy: the
    fitted table is copied to the device once per process, not per partition), cached by the op."""
    xp = backend.array_lib(like)
    return cached_entry(op, lookup_key(xp, prefix, tuple(columns)), lambda: xp.asarray(
        table[list(columns)].to_numpy(dtype=np.float64).reshape(len(table), len(columns))))


def float_values(frame: Any, name: str) -> Any:
    """A numeric column as float64 (nulls as NaN), a numpy or CuPy array like the frame."""
    return backend.column_values(frame[name], "float64")


def host_arrays(stats: Any) -> Any:
    """Partial statistics (a dict of arrays, keys and kinds) with every array on the host."""
    return None if stats is None else {k: v if k in ("keys", "kinds") else backend.stats_to_host(v)
                                       for k, v in stats.items()}


class JoinGroupby(CachedLookups, StatOperator):
    """Per-category statistics of continuous columns, added to every row of that category.

    For each selected categorical column (or tuple group ``("a", "b")``, named ``a_b``) the
    output has ``{cat}_count`` (rows of the category at fit) when ``"count"`` is in
    ``stats``, and ``{cat}_{cont}_{stat}`` for each continuous column and each other stat:
    ``sum``, ``mean``, ``std`` and ``var`` (sample, ``ddof=1``: NaN for fewer than 2 values),
    ``min``, ``max``; nulls in a continuous column are skipped, as pandas does.

    Rows whose category has a null form their own group (the null group). A category unseen
    at fit gets count 0 and NaN statistics (so does the null group when no null was seen).
    The continuous columns are read through :meth:`dependencies`, so they need not be
    selected. Statistics are float64, counts int64.

    Parameters
    ----------
    cont_cols : list of str, or a graph node
        Continuous columns to aggregate: names of input columns, or a node whose outputs are
        derived columns (``cont_cols=["x"] >> ops.LogOp``), as NVTabular allows.
    stats : list of str
        Among ``count, sum, mean, std, var, min, max``.

    Examples
    --------
    >>> import pandas as pd
    >>> from tabloader.workflow import Workflow
    >>> df = pd.DataFrame({"c": [1, 1, 2, None], "x": [1.0, 2.0, 4.0, 8.0]}).astype({"c": "Int64"})
    >>> wf = Workflow(["c"] >> JoinGroupby(["x"], stats=["count", "sum"]), progress=False)
    >>> out = wf.fit_transform(df)
    >>> out.columns.tolist(), out["c_x_sum"].tolist(), out["c_count"].tolist()
    (['c_count', 'c_x_sum'], [3.0, 3.0, 4.0, 8.0], [2, 2, 1, 1])
    """

    takes_coded_strings = True  # keys normalized by the encoding module; outputs new columns only

    device_note = ("Groups and moments with cuDF/CuPy (partials merged on the GPU); the fitted table is copied to the "
                   "GPU once per process.")

    def __init__(self, cont_cols: Sequence[str] = (), stats: Sequence[str] = ("count",)) -> None:
        self.cont_cols = cont_cols if isinstance(cont_cols, Node) else [cont_cols] if isinstance(cont_cols, str) \
            else list(cont_cols)
        self.stats = list(stats) if not isinstance(stats, str) else [stats]
        bad = [s for s in self.stats if s not in STATS]
        if bad:
            raise ValueError(f"JoinGroupby: unknown stats {bad}; choose among {STATS}")
        if not self.stats:
            raise ValueError("JoinGroupby needs at least one stat")

    @property
    def cont_names(self) -> list[str]:
        """The continuous columns' names (``cont_cols`` may be a graph node: its output columns)."""
        return self.parameter_columns("cont_cols")

    def dependencies(self) -> list[Any]:
        return self.dependency_parameter("cont_cols")

    def _generic_names(self) -> list[str]:
        """The outputs as columns of the fitted table (``count``, ``{cont}_{stat}``), in output order."""
        names = ["count"] if "count" in self.stats else []
        return names + [f"{c}_{s}" for c in self.cont_names for s in self.stats if s != "count"]

    def _names(self, prefix: str) -> list[str]:
        return [f"{prefix}_{generic}" for generic in self._generic_names()]

    def output_column_names(self, columns: Columns) -> list[str]:
        return [n for prefix, _ in key_groups(columns) for n in self._names(prefix)]

    # --- fit -------------------------------------------------------------------------------
    def _moments(self, codes: Any, rows: Any, ngroups: int, frame: Any) -> dict[str, Any]:
        xp = backend.array_lib(codes)
        out: dict[str, Any] = {"count": backend.group_sums(codes, None, ngroups).astype(xp.int64)}
        for c in self.cont_names:
            x = float_values(frame, c)
            x = x if rows is None else x[rows]
            # NaN rows weigh 0 (and are neutral to min/max) rather than being selected out: on a GPU,
            # a selection reads its size back. The sums are the same: adding 0.0 changes none.
            ok = ~xp.isnan(x)
            n = backend.group_sums(codes, ok, ngroups)
            s = backend.group_sums(codes, xp.where(ok, x, 0.0), ngroups)
            with np.errstate(invalid="ignore", divide="ignore"):
                mean = xp.where(n > 0, s / xp.maximum(n, 1), 0.0)
            m2 = backend.group_sums(codes, xp.where(ok, x - mean[codes], 0.0) ** 2, ngroups)
            mn = xp.full(ngroups, xp.inf)
            mx = xp.full(ngroups, -xp.inf)
            if {"min", "max"} & set(self.stats) and len(codes):
                xp.minimum.at(mn, codes, xp.where(ok, x, xp.inf))
                xp.maximum.at(mx, codes, xp.where(ok, x, -xp.inf))
            out[c] = xp.stack([n, mean, m2, mn, mx], axis=1)
        return out

    def fit_partial(self, columns: Columns, frame: Any) -> dict[str, Any]:
        check_numeric(self, frame, self.cont_names)
        enc = backend.encoding_for(frame)
        partial = {}
        for prefix, group in key_groups(columns):
            cols = normalize_keys(self, enc, group, frame)
            mask, codes, keys, kinds = enc.group_rows(cols)
            xp = backend.array_lib(codes)
            rows, null_rows = key_rows(mask, codes, len(frame))
            groups = None
            if keys is not None:
                groups = {"keys": keys, "kinds": kinds, **self._moments(codes, rows, len(keys[0]), frame)}
            null = None
            if null_rows is not None:
                null = self._moments(xp.zeros(len(null_rows), xp.int64), null_rows, 1, frame)
            partial[prefix] = {"groups": groups, "null": null}
        return partial

    def merge(self, left: dict[str, Any], right: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for prefix in left:
            a, b = left[prefix], right[prefix]
            groups = self._merge_groups(a["groups"], b["groups"], prefix)
            null = a["null"] if b["null"] is None else b["null"] if a["null"] is None else \
                self._combine(backend.array_lib(a["null"]["count"]).zeros(2, np.int64), 1, a["null"], b["null"])
            out[prefix] = {"groups": groups, "null": null}
        return out

    def _merge_groups(self, a: Any, b: Any, prefix: str) -> Any:
        if a is None or b is None:
            return a if b is None else b
        codes, unique, kinds = backend.encoding_for(a["count"]).union_keys(a, b, self, prefix)
        merged = self._combine(codes, len(unique[0]), a, b)
        return {"keys": unique, "kinds": kinds, **merged}

    def _combine(self, codes: Any, ngroups: int, a: dict, b: dict) -> dict[str, Any]:
        """Chan's merge of the moment rows of ``a`` then ``b`` grouped by ``codes``."""
        xp = backend.array_lib(codes)
        counts = xp.concatenate([a["count"], b["count"]])
        out: dict[str, Any] = {"count": backend.encoding_for(counts).sum_int(codes, counts, ngroups)}
        for c in self.cont_names:
            m = xp.concatenate([a[c], b[c]])
            n_i, mean_i, m2_i = m[:, 0], m[:, 1], m[:, 2]
            n = backend.group_sums(codes, n_i, ngroups)
            with np.errstate(invalid="ignore", divide="ignore"):
                mean = xp.where(n > 0, backend.group_sums(codes, n_i * mean_i, ngroups) / xp.maximum(n, 1),
                                0.0)
            m2 = backend.group_sums(codes, m2_i + n_i * (mean_i - mean[codes]) ** 2, ngroups)
            mn = xp.full(ngroups, xp.inf)
            mx = xp.full(ngroups, -xp.inf)
            xp.minimum.at(mn, codes, m[:, 3])
            xp.maximum.at(mx, codes, m[:, 4])
            out[c] = xp.stack([n, mean, m2, mn, mx], axis=1)
        return out

    def finalize(self, columns: Columns, merged: dict[str, Any]) -> None:
        stats, nulls = {}, {}
        for prefix, group in key_groups(columns):
            part = merged[prefix]
            key_cols = self._key_columns(group)
            g = part["groups"]
            if g is None:
                table = pd.DataFrame({k: pd.Series([], dtype=object) for k in key_cols})
                table = pd.concat([table, self._table(None, 0)], axis=1)
            else:
                enc = backend.encoding_for(g["count"])
                keys = {k: enc.keys_to_pandas(v) for k, v in zip(key_cols, g["keys"])}
                table = pd.concat([pd.DataFrame(keys), self._table(host_arrays(g), len(g["count"]))], axis=1)
            stats[prefix] = table
            null = host_arrays(part["null"])
            nulls[prefix] = self._table(null, 1) if null is not None else self._table(None, 0)
        self.stats_ = stats
        self.null_stats_ = nulls
        self._lookup = {}

    @staticmethod
    def _key_columns(group: tuple[str, ...]) -> list[str]:
        return [f"__key_{c}" for c in group]

    def _table(self, g: Any, n: int) -> pd.DataFrame:
        """The output statistics (generic names ``count``, ``{cont}_{stat}``) of ``n`` groups."""
        out: dict[str, Any] = {"count": g["count"] if g is not None else np.zeros(n, np.int64)}
        for c in self.cont_names:
            m = g[c] if g is not None else np.zeros((n, 5))
            cnt, mean, m2 = m[:, 0], m[:, 1], m[:, 2]
            with np.errstate(invalid="ignore", divide="ignore"):
                var = np.where(cnt > 1, m2 / np.maximum(cnt - 1, 1), np.nan)
            values = {"sum": cnt * mean, "mean": np.where(cnt > 0, mean, np.nan), "var": var, "std": np.sqrt(var),
                      "min": np.where(cnt > 0, m[:, 3], np.nan), "max": np.where(cnt > 0, m[:, 4], np.nan)}
            for s in self.stats:
                if s != "count":
                    out[f"{c}_{s}"] = values[s]
        return pd.DataFrame(out)

    # --- state -----------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        return {"stats": self.stats_, "null_stats": self.null_stats_}

    def set_state(self, state: dict[str, Any]) -> None:
        if not state:
            return
        self.stats_, self.null_stats_ = dict(state["stats"]), dict(state["null_stats"])
        self._lookup = {}

    # --- transform -------------------------------------------------------------------------
    def transform(self, columns: Columns, frame: Any) -> Any:
        enc = backend.encoding_for(frame)
        out: dict[str, Any] = {}
        for prefix, group in key_groups(columns):
            table, null = self.fitted_entry("stats_", prefix, group), self.null_stats_[prefix]
            lookup = cached_lookup(self, enc, prefix, table, self._key_columns(group))
            cols = normalize_keys(self, enc, group, frame)
            pos = lookup.positions(cols)
            xp = backend.array_lib(pos)
            mask = enc.null_mask(cols, "any")
            generics = self._generic_names()
            values = cached_values(self, pos, prefix, table, generics)  # counts are exact in float64
            found = values[xp.maximum(pos, 0)] if len(table) else xp.zeros((len(pos), len(generics)))
            for j, (generic, name) in enumerate(zip(generics, self._names(prefix))):
                is_count = generic == "count"
                fill = 0 if is_count else np.nan
                col = xp.where(pos >= 0, found[:, j], fill)
                if mask is not None:  # where, not col[mask] = ...: on CuPy that reads the mask's count back
                    col = xp.where(mask, float(null[generic].iloc[0]) if len(null) else fill, col)
                out[name] = col.astype(np.int64 if is_count else np.float64)
        return backend.frame_from_columns(out, frame.index, like=frame)

    def compute_output_schema(self, input_schema: Schema, columns: Columns) -> Schema:
        out = []
        for prefix, _ in key_groups(columns):
            for name in self._names(prefix):
                is_count = name == f"{prefix}_count"
                out.append(ColumnSchema(name, "int64" if is_count else "float64", {Tags.CONTINUOUS}))
        return Schema(out)
