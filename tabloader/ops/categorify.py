"""Categorify: encode categorical values as contiguous integer ids, by frequency.

Encoding contract (see ``DESIGN.md``):

* ``0``: padding, only ever written by loaders padding list columns (never produced here);
* ``1``: null / missing;
* ``[2, 2 + num_buckets)``: out-of-vocabulary values (count below ``freq_threshold``, beyond
  ``max_size``, or unseen at fit). With ``num_buckets == 1`` every such value is ``2``; with
  more, a value goes to ``2 + hash(value) % num_buckets`` with the hashes of
  :mod:`tabloader.encoding.cpu.hashing` (identical on CPU and GPU);
* ``2 + num_buckets + i``: the ``i``-th vocabulary value, the vocabulary being sorted by
  descending count, ties by ascending value (numbers numerically -- integers by their true
  value whatever their width and signedness, so uint64 values >= 2**63 come after small ones
  --, strings by code point; combinations by their values in column order).

Lookups match by value: an integer the vocabulary's type cannot hold (a negative id against
a uint64 vocabulary, a non-integral float) is unseen and goes to OOV.

Example:
    >>> import pandas as pd, tabloader as tl
    >>> from tabloader.workflow import Workflow
    >>> wf = Workflow(["c"] >> Categorify(), progress=False)
    >>> wf.fit_transform(pd.DataFrame({"c": ["b", "a", "b", None]}))["c"].tolist()
    [3, 4, 3, 1]
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pandas as pd

from tabloader import backend
from tabloader.encoding.contract import cardinality, check_id_range, integer_dtype
from tabloader.encoding.lists import holds_lists
from tabloader.ops.base import CachedLookups, Columns, StatOperator, cached_entry, group_name, lookup_key
from tabloader.ops.categorical_columns import categorical_schema, check_num_buckets, param_for
from tabloader.ops.vocabulary_tables import VocabularyTables
from tabloader.schema import ColumnSchema, Schema, Tags

ENCODE_TYPES = ("joint", "combo")


class Categorify(VocabularyTables, CachedLookups, StatOperator):
    """Encode categorical columns as integer ids, most frequent values first.

    Ids follow the contract of :mod:`tabloader.ops.categorify`: ``1`` null, ``[2, 2 +
    num_buckets)`` out-of-vocabulary, then the vocabulary by descending count (ties by value).
    Unseen values at transform time go to the OOV bucket(s), never an error.

    Columns may be integers (any width, nullable), booleans, strings, categoricals, floats
    (encoded by value; an integral float equals the integer of that value), or list columns of
    those (``pd.ArrowDtype(pa.list_(...))``, or an object column of Python lists or numpy
    arrays as ``pd.read_parquet`` and serving requests give): each element is encoded, a null
    element gets the null id 1, a null list stays a null list, the counts are over elements,
    and the output is an ArrowDtype list column. Other dtypes raise a TypeError naming the
    column and dtype.

    Groups of columns are selected as tuples: with ``encode_type="joint"`` (default) the
    columns of ``("a", "b")`` share one vocabulary (outputs keep each column's name and get
    the same cardinality); with ``encode_type="combo"`` the combination of their values is
    encoded as one new column ``a_b`` (a row with a null in any of them is null).

    Parameters
    ----------
    freq_threshold : int or dict
        Values seen fewer times go to OOV; a dict maps a column (or group name ``a_b``) to its
        threshold. 0 keeps every value.
    max_size : int or dict
        At most this many vocabulary values (the most frequent) per column; 0 means no limit.
        The embedding table then has at most ``2 + num_buckets + max_size`` rows.
    num_buckets : int or dict
        Number of OOV buckets (>= 1).
    encode_type : {"joint", "combo"}
        How tuple groups are encoded (see above).
    vocabs : dict, optional
        User-given vocabularies: column (or group name) -> list of values, in id order (for a
        combo group, a list of tuples). Those columns need no fit; counts are then unknown. An
        empty list sends every value to the OOV buckets.
    dtype : str
        Output integer dtype (checked against the cardinality at fit).

    Attributes
    ----------
    vocabularies_ : dict
        Per column (or group name): a DataFrame of the vocabulary in id order -- the value
        column(s) (``value``, or the group's column names for a combo) and ``count``.
    null_counts_ : dict
        Per column (or group name): the number of nulls seen at fit.
    cardinalities_ : dict
        Per output column: embedding rows, ``2 + num_buckets + len(vocabulary)``.
    list_columns_ : list
        The input columns that held lists at fit (their outputs are list columns in every
        partition, even one holding only null lists).

    The output schema marks each output ``categorical`` and records ``cardinality``,
    ``embedding_dim`` (``min(512, round(1.6 * cardinality ** 0.56))``), ``num_buckets``,
    ``freq_threshold`` and ``embedding_table`` (the name of the vocabulary it uses; joint
    columns share one).

    Examples
    --------
    >>> import pandas as pd
    >>> from tabloader.workflow import Workflow
    >>> df = pd.DataFrame({"a": [5, 7, 7, None], "b": ["x", "y", "y", "z"]}).astype({"a": "Int64"})
    >>> wf = Workflow(["a", "b"] >> Categorify(freq_threshold=2), progress=False)
    >>> out = wf.fit_transform(df)
    >>> out["a"].tolist(), out["b"].tolist()
    ([2, 3, 3, 1], [2, 3, 3, 2])
    >>> wf.output_schema["a"].properties["cardinality"]
    4
    """

    takes_coded_strings = True  # normalized by the encoding module; outputs ids only

    device_note = ("Counts with cuDF/CuPy (partials merged on the GPU), sorts the vocabulary on the GPU and copies "
                   "it to the host once at fit; looks values up on the GPU (a binary search in keys sorted once, "
                   "strings by a CuPy kernel).")

    def __init__(self, freq_threshold: int | dict[str, int] = 0, max_size: int | dict[str, int] = 0,
                 num_buckets: int | dict[str, int] = 1, encode_type: str = "joint",
                 vocabs: dict[str, list] | None = None, dtype: str = "int64") -> None:
        self.freq_threshold = freq_threshold
        self.max_size = max_size
        self.num_buckets = num_buckets
        self.encode_type = encode_type
        self.vocabs = vocabs
        self.dtype = dtype
        if encode_type not in ENCODE_TYPES:
            raise ValueError(f"Categorify: encode_type must be one of {ENCODE_TYPES}, got {encode_type!r}")
        check_num_buckets(self, num_buckets, 1)
        self.dtype = str(integer_dtype(self, dtype))  # np.int32 given: saved by its name

    # --- plan: which vocabulary each selected column uses ----------------------------------
    def _plan(self, columns: Columns) -> list[tuple[str, str, tuple[str, ...], list[str]]]:
        """(kind, key, input columns, output columns) per vocabulary."""
        plan = []
        for col in columns:
            if isinstance(col, (tuple, list)) and len(col) > 1:
                group = tuple(col)
                if self.encode_type == "combo":
                    plan.append(("combo", group_name(group), group, [group_name(group)]))
                else:
                    plan.append(("joint", group_name(group), group, list(group)))
            else:
                name = col[0] if isinstance(col, (tuple, list)) else col
                plan.append(("single", name, (name,), [name]))
        return plan

    def output_column_names(self, columns: Columns) -> list[str]:
        out: list[str] = []
        for _, _, _, outputs in self._plan(columns):
            out += [o for o in outputs if o not in out]
        return out

    def _buckets(self, key: str) -> int:
        return int(param_for(self.num_buckets, key, 1))

    def _user_vocab(self, key: str) -> Any:
        return self.vocabs.get(key) if isinstance(self.vocabs, Mapping) else None

    # --- fit -------------------------------------------------------------------------------
    def fit_partial(self, columns: Columns, frame: Any) -> dict[str, Any]:
        enc = backend.encoding_for(frame)
        stats: dict[str, Any] = {}
        jobs, keys = [], []  # every column counted at once: on a GPU, one wait for the device for all
        list_columns = []  # remembered so that a partition holding only null lists still gives lists
        for kind, key, inputs, _ in self._plan(columns):
            list_columns += [c for c in inputs if kind != "combo" and holds_lists(frame[c])]
            if self._user_vocab(key) is not None:
                stats[key] = None
            elif kind == "combo":
                cols = [self._normalize_scalar(enc, c, frame[c]) for c in inputs]
                jobs.append((cols, enc.null_mask(cols, "any")))
                keys.append(key)
            else:
                for c in inputs:
                    col = enc.normalize_elements(self, c, frame[c])
                    jobs.append(([col], col.mask))
                    keys.append(key)
        parts: dict[str, list] = {}
        for key, partial in zip(keys, enc.count_values_each(jobs)):
            parts.setdefault(key, []).append(partial)
        stats.update(self._merge_parts(parts))  # a joint group's columns share one vocabulary
        return {"counts": stats, "list_columns": list_columns}

    def _normalize_scalar(self, enc: Any, name: str, series: Any) -> Any:
        if holds_lists(series):
            raise TypeError(f"{self.label} cannot combine list column {name!r} (dtype {series.dtype}) "
                            "with encode_type='combo'")
        return enc.normalize_column(self, name, series)

    def merge(self, left: dict[str, Any], right: dict[str, Any]) -> dict[str, Any]:
        counts: dict[str, Any] = {}
        parts: dict[str, list] = {}
        for key, a in left["counts"].items():
            b = right["counts"][key]
            if a is None or b is None:  # user-given vocabularies count nothing
                counts[key] = a if b is None else b
            else:
                parts[key] = [a, b]
        counts.update(self._merge_parts(parts))
        return {"counts": counts, "list_columns": sorted(set(left["list_columns"]) | set(right["list_columns"]))}

    def _merge_parts(self, parts: dict[str, list]) -> dict[str, Any]:
        """Each key's list of partial counts merged into one, where the partials are (the device,
        or the host: see ``TABLOADER_GPU_MERGE``); the merges of all keys go together (on a GPU,
        one wait for the device per round of merges rather than per key)."""
        while any(len(p) > 1 for p in parts.values()):
            pairs = [key for key, p in parts.items() if len(p) > 1]
            enc = backend.encoding_for(parts[pairs[0]][0]["counts"])
            merged = enc.merge_counts_each([(parts[key][0], parts[key][1], key) for key in pairs], self)
            parts = {**parts, **{key: [m, *parts[key][2:]] for key, m in zip(pairs, merged)}}
        return {key: p[0] for key, p in parts.items()}

    def finalize(self, columns: Columns, merged: dict[str, Any]) -> None:
        vocabularies, nulls, cards = {}, {}, {}
        for kind, key, inputs, outputs in self._plan(columns):
            user = self._user_vocab(key)
            if user is not None:
                vocab = self._vocab_from_user(kind, key, inputs, user)
                nulls[key] = None
            else:
                stats = merged["counts"][key]
                vocab = self._vocab_from_counts(kind, key, inputs, stats)
                nulls[key] = int(stats["nulls"])
            vocabularies[key] = vocab
            card = cardinality(self._buckets(key), len(vocab))
            check_id_range(self, f"column {key!r}", card - 1, self.dtype, "use a wider dtype or set max_size")
            for out in outputs:
                cards[out] = card
        self.vocabularies_ = vocabularies
        self.null_counts_ = nulls
        self.cardinalities_ = cards
        self.list_columns_ = list(merged["list_columns"])
        self.columns_ = [list(c) if isinstance(c, (tuple, list)) else c for c in columns]
        self._lookup = {}

    def _value_columns(self, kind: str, inputs: tuple[str, ...]) -> list[str]:
        cols = list(inputs) if kind == "combo" else ["value"]
        if "count" in cols:
            raise ValueError(f"{self.label}: a combo of a column named 'count' is not supported")
        return cols

    def _vocab_from_counts(self, kind: str, key: str, inputs: tuple[str, ...], stats: Any) -> pd.DataFrame:
        value_cols = self._value_columns(kind, inputs)
        if stats is None or not len(stats["counts"]):
            return pd.DataFrame({**{c: pd.Series([], dtype=object) for c in value_cols},
                                 "count": pd.Series([], dtype=np.int64)})
        enc = backend.encoding_for(stats["counts"])
        keys, counts = enc.vocabulary(stats, int(param_for(self.freq_threshold, key, 0) or 0),
                                      int(param_for(self.max_size, key, 0) or 0))
        out = {c: enc.keys_to_pandas(k) for c, k in zip(value_cols, keys)}
        out["count"] = backend.stats_to_host(counts)
        return pd.DataFrame(out)

    def _vocab_from_user(self, kind: str, key: str, inputs: tuple[str, ...], values: Any) -> pd.DataFrame:
        rows = list(values)
        if not rows:  # every value is out of vocabulary: the table a fit on nulls only gives
            return self._vocab_from_counts(kind, key, inputs, None)
        value_cols = self._value_columns(kind, inputs)
        if kind == "combo":
            frame = pd.DataFrame([tuple(r) for r in rows], columns=value_cols)
        else:
            frame = pd.DataFrame({"value": pd.Series(rows)})
        enc = backend.encoding_for(frame)
        normalized = {}
        for c in value_cols:
            col = enc.normalize_column(self, key, frame[c])
            if col.mask is not None:
                raise ValueError(f"{self.label}: the vocabulary given for {key!r} contains nulls")
            normalized[c] = enc.as_pandas(col)
        frame = pd.DataFrame(normalized)
        if frame.duplicated().any():
            dup = frame[frame.duplicated()].iloc[0].tolist()
            raise ValueError(f"{self.label}: the vocabulary given for {key!r} repeats {dup}")
        max_size = int(param_for(self.max_size, key, 0) or 0)
        if max_size > 0:
            frame = frame.iloc[:max_size]
        frame["count"] = pd.array([None] * len(frame), dtype="Int64")
        return frame.reset_index(drop=True)

    # --- fitted state ----------------------------------------------------------------------
    def _vocabulary(self, kind: str, key: str, inputs: tuple[str, ...]) -> pd.DataFrame:
        fitted = getattr(self, "vocabularies_", None)
        if fitted is not None and key in fitted:
            return fitted[key]
        user = self._user_vocab(key)
        if user is not None:
            return self._vocab_from_user(kind, key, inputs, user)
        return self.fitted_entry("vocabularies_", key, inputs)  # raises NotFittedError naming the inputs

    def check_is_fitted(self, columns: Columns | None = None) -> None:
        if columns is None:
            return super().check_is_fitted(columns)
        for kind, key, inputs, _ in self._plan(columns):
            self._vocabulary(kind, key, inputs)

    def _get_lookup(self, enc: Any, kind: str, key: str, inputs: tuple[str, ...]) -> Any:
        def build() -> Any:
            vocab = self._vocabulary(kind, key, inputs)
            return enc.ValueLookup([vocab[c] for c in self._value_columns(kind, inputs)], self, key)

        return cached_entry(self, lookup_key(enc, key), build)

    def encoders(self, columns: Columns, enc: Any) -> list[tuple[str, tuple[str, ...], list[str], Any, int]]:
        """``(kind, inputs, outputs, lookup, num_buckets)`` per vocabulary the selected ``columns``
        use (kind: ``single``, ``joint`` or ``combo``), with the lookup of the encoding module
        ``enc`` (built once per process): what encoding outside a DataFrame needs
        (:mod:`tabloader.serving`)."""
        return [(kind, inputs, outputs, self._get_lookup(enc, kind, key, inputs), self._buckets(key))
                for kind, key, inputs, outputs in self._plan(columns)]

    def get_state(self) -> dict[str, Any]:
        return {"vocabularies": self.vocabularies_, "null_counts": self.null_counts_,
                "cardinalities": self.cardinalities_, "list_columns": self.list_columns_, "columns": self.columns_}

    def set_state(self, state: dict[str, Any]) -> None:
        if not state:
            return
        self.vocabularies_ = dict(state["vocabularies"])
        self.null_counts_ = dict(state["null_counts"])
        self.cardinalities_ = dict(state["cardinalities"])
        self.list_columns_ = list(state.get("list_columns", []))  # absent from workflows saved before it existed
        self.columns_ = state.get("columns")  # absent before inverse_transform existed: the workflow passes them
        self._lookup = {}

    # --- transform -------------------------------------------------------------------------
    def transform(self, columns: Columns, frame: Any) -> Any:
        enc = backend.encoding_for(frame)
        out: dict[str, Any] = {}
        for kind, key, inputs, outputs in self._plan(columns):
            lookup = self._get_lookup(enc, kind, key, inputs)
            nb = self._buckets(key)
            if kind == "combo":
                cols = [self._normalize_scalar(enc, c, frame[c]) for c in inputs]
                out[outputs[0]] = enc.assign_ids(lookup.positions(cols), enc.null_mask(cols, "any"), nb, cols,
                                                 self.dtype)
                continue
            list_columns = getattr(self, "list_columns_", ())
            for name in inputs:
                def encode(col: Any) -> Any:
                    return enc.assign_ids(lookup.positions([col]), col.mask, nb, [col], self.dtype)

                out[name] = enc.map_column(self, name, frame[name], encode, is_list=name in list_columns)
        return backend.frame_from_columns(out, frame.index, like=frame)

    # --- schema ----------------------------------------------------------------------------
    def compute_output_schema(self, input_schema: Schema, columns: Columns) -> Schema:
        cards = getattr(self, "cardinalities_", {})
        out = []
        for kind, key, inputs, outputs in self._plan(columns):
            card = cards.get(outputs[0])
            if card is None and self._user_vocab(key) is not None:
                card = cardinality(self._buckets(key), len(self._vocabulary(kind, key, inputs)))
            for name in outputs:
                col = input_schema[name] if (kind != "combo" and name in input_schema) else ColumnSchema(name)
                props = {"num_buckets": self._buckets(key), "freq_threshold": int(param_for(self.freq_threshold, key, 0)
                                                                                    or 0),
                         "embedding_table": key}
                if card is not None:
                    col = categorical_schema(col, card, self.dtype, **props)
                else:  # before fit: the cardinality is not known yet
                    col = col.without_tags(Tags.CONTINUOUS).with_tags(Tags.CATEGORICAL).with_dtype(self.dtype)
                    col = col.with_properties(**props)
                out.append(col)
        return Schema(out)
