"""Categorify's vocabularies as plain tables, and ids back to the values they encode.

A mixin of :class:`~tabloader.ops.Categorify` (it needs the operator's plan of vocabularies
and its fitted vocabularies); the reserved ids and the first vocabulary id are those of
:mod:`tabloader.encoding.contract`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tabloader import backend
from tabloader.encoding.contract import first_vocabulary_id, vocabulary_positions
from tabloader.encoding.lists import holds_lists
from tabloader.ops.base import Columns, NotFittedError


class VocabularyTables:
    """Vocabulary tables, their export to parquet and ``inverse_transform`` for Categorify."""

    def _fitted_plan(self, columns: Columns | None) -> list[tuple[str, str, tuple[str, ...], list[str]]]:
        columns = getattr(self, "columns_", None) if columns is None else columns
        if columns is None:
            raise NotFittedError(f"{self.label} does not know its columns (a workflow saved before "
                                 "inverse_transform existed): use Workflow.inverse_transform, or pass columns=")
        plan = self._plan([tuple(c) if isinstance(c, list) else c for c in columns])
        for kind, key, inputs, _ in plan:
            self._vocabulary(kind, key, inputs)  # NotFittedError before anything else
        return plan

    def vocabulary_table(self, column: str, columns: Columns | None = None) -> pd.DataFrame:
        """The vocabulary ``column`` (an output column or a group name) is encoded with, as a plain
        table: ``value`` (for a combination, one column per input column), ``id`` and ``count``
        (times seen at fit; missing for a user-given vocabulary), in id order; a combination with
        a column named ``id`` names the ids ``_id``. The reserved ids
        (padding 0, null 1, OOV ``[2, 2 + num_buckets)``) are not rows of it: see
        :mod:`tabloader.encoding.contract`.

        Example:
            >>> import pandas as pd
            >>> from tabloader.ops import Categorify
            >>> from tabloader.workflow import Workflow
            >>> op = Categorify()
            >>> _ = Workflow(["c"] >> op, progress=False).fit(pd.DataFrame({"c": ["b", "a", "b"]}))
            >>> op.vocabulary_table("c").to_dict("list")
            {'value': ['b', 'a'], 'id': [3, 4], 'count': [2, 1]}
        """
        plan = self._fitted_plan(columns)
        for kind, key, inputs, outputs in plan:
            if column == key or column in outputs:
                vocab = self._vocabulary(kind, key, inputs)
                ids = first_vocabulary_id(self._buckets(key)) + np.arange(len(vocab), dtype=np.int64)
                table = vocab.drop(columns="count").reset_index(drop=True)
                table[_free_name("id", table.columns)] = ids  # never over a combination's own "id" column
                table["count"] = vocab["count"].to_numpy()
                return table
        raise KeyError(f"{self.label} encodes no column {column!r}; it encodes {[o for *_, outs in plan for o in outs]}")

    def export_vocabularies(self, directory: str, columns: Columns | None = None) -> dict[str, str]:
        """Write each vocabulary as ``<directory>/<name>.parquet`` (the table of
        :meth:`vocabulary_table`, readable by ``pd.read_parquet``), each file written under a
        temporary name and renamed when complete. Returns name -> path; joint columns share one
        file, named after their group.

        Example:
            >>> import os, tempfile, pandas as pd
            >>> from tabloader.ops import Categorify
            >>> from tabloader.workflow import Workflow
            >>> op = Categorify()
            >>> _ = Workflow(["c"] >> op, progress=False).fit(pd.DataFrame({"c": [7, 7, 5]}))
            >>> paths = op.export_vocabularies(tempfile.mkdtemp())
            >>> pd.read_parquet(paths["c"])["value"].tolist()
            [7, 5]
        """
        import os

        from tabloader.atomic_files import temporary_sibling

        os.makedirs(directory, exist_ok=True)
        paths = {}
        for _, key, _, _ in self._fitted_plan(columns):
            path = os.path.join(directory, f"{key}.parquet")
            tmp = temporary_sibling(path)
            self.vocabulary_table(key, columns).to_parquet(tmp, index=False)
            os.replace(tmp, path)
            paths[key] = path
        return paths

    def inverse_transform(self, frame: Any, columns: Columns | None = None, oov: Any = None,
                          padding: Any = None) -> Any:
        """Ids back to the values they encode, for the encoded columns ``frame`` holds (others
        are kept as they are).

        The null id gives a missing value; out-of-vocabulary ids give ``oov`` and the padding
        id gives ``padding`` (both missing by default; a sentinel must fit the values' type, e.g.
        ``"<OOV>"`` for strings, ``-1`` for integers). A combination column ``a_b`` gives back
        the columns ``a`` and ``b`` in its place; list columns are decoded element-wise. Values
        come as nullable pyarrow-backed columns (``pd.ArrowDtype``), as the vocabulary holds
        them. An id outside ``[0, cardinality)`` raises a ValueError naming the column and id.
        A cuDF frame is decoded on the host and returned as a cuDF frame.

        Example:
            >>> import pandas as pd
            >>> from tabloader.ops import Categorify
            >>> from tabloader.workflow import Workflow
            >>> op = Categorify(freq_threshold=2)
            >>> wf = Workflow(["c"] >> op, progress=False)
            >>> ids = wf.fit_transform(pd.DataFrame({"c": ["b", "a", "b", None]}))
            >>> ids["c"].tolist()
            [3, 2, 3, 1]
            >>> op.inverse_transform(ids, oov="<OOV>")["c"].tolist()
            ['b', '<OOV>', 'b', <NA>]
        """
        device = backend.frame_device(frame)
        host = backend.to_host(frame)
        decoded: dict[str, dict[str, Any]] = {}
        for kind, key, inputs, outputs in self._fitted_plan(columns):
            vocab = self._vocabulary(kind, key, inputs)
            for name in (o for o in outputs if o in host.columns):
                targets = inputs if kind == "combo" else (name,)  # a combination gives back its columns
                decoded[name] = {target: self._decode(name, host[name], vocab[c], self._buckets(key), oov, padding)
                                 for target, c in zip(targets, self._value_columns(kind, inputs))}
        out: dict[str, Any] = {}
        for name in host.columns:
            for col, series in (decoded[name].items() if name in decoded else [(name, host[name])]):
                if col in out:
                    raise ValueError(f"{self.label}: decoding {name!r} gives column {col!r}, which the frame "
                                     "holds already")
                out[col] = series
        return backend.to_frame_device(pd.DataFrame(out, index=host.index), device)

    def _decode(self, name: str, series: pd.Series, values: pd.Series, num_buckets: int, oov: Any,
                padding: Any) -> pd.Series:
        import pyarrow as pa
        import pyarrow.compute as pc

        vocab = pa.array(values, from_pandas=True)
        vocab = vocab.combine_chunks() if isinstance(vocab, pa.ChunkedArray) else vocab
        lists = backend.list_column_to_arrow(series) if holds_lists(series) else None
        ids = pa.array(series, from_pandas=True) if lists is None else lists.values
        ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
        missing = ids.is_null().to_numpy(zero_copy_only=False)
        positions, reserved = vocabulary_positions(self, name, ids.fill_null(1).to_numpy(zero_copy_only=False),
                                                   num_buckets, len(vocab))
        taken = vocab.take(pa.array(positions, mask=(positions < 0) | missing))
        for sentinel, which in ((oov, "oov"), (padding, "padding")):
            if sentinel is not None:
                taken = pc.if_else(pa.array(reserved[which] & ~missing), self._sentinel(name, sentinel, taken.type, which),
                                   taken)
        if lists is not None:
            taken = pa.ListArray.from_arrays(lists.offsets, taken, mask=lists.is_null())
        return pd.Series(taken, index=series.index, dtype=pd.ArrowDtype(taken.type), name=series.name)

    def _sentinel(self, name: str, value: Any, type_: Any, which: str) -> Any:
        import pyarrow as pa

        try:
            return pa.scalar(value, type=type_ if not pa.types.is_null(type_) else None)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise ValueError(f"{self.label}: the {which} sentinel {value!r} cannot stand among the values of "
                             f"column {name!r} ({type_}): {exc}") from exc


def _free_name(name: str, taken: Any) -> str:
    """``name``, or ``_name`` (``__name``...) when ``taken`` holds it.

    Example:
        >>> _free_name("id", ["user", "id"]), _free_name("id", ["user"])
        ('_id', 'id')
    """
    while name in taken:
        name = "_" + name
    return name
