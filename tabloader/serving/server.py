"""The :class:`Server`: a fitted workflow's plan compiled node by node, run on requests."""

from __future__ import annotations

import collections
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from tabloader.graph import Node, OpNode, SelectNode
from tabloader.ops import NotFittedError
from tabloader.serving.columns import Column, Unsupported, as_series, column_reader, from_series, model_array
from tabloader.serving.fast_paths import FAST_OPERATORS


class Server:
    """A fitted workflow compiled for small requests (see the module documentation).

    Args:
        workflow: a fitted (or loaded) :class:`~tabloader.Workflow` whose outputs are numeric.

    Attributes:
        fallbacks: a ``collections.Counter`` of the nodes (described as ``wf`` describes them)
            that ran the DataFrame path, over all requests so far.

    Example:
        >>> import pandas as pd, tabloader as tl
        >>> from tabloader import ops
        >>> wf = tl.Workflow(["x"] >> ops.LogOp(), progress=False).fit(pd.DataFrame({"x": [0.0, 1.0]}))
        >>> Server(wf).transform({"x": [0.0, None]})["x"]
        array([ 0., nan])
    """

    def __init__(self, workflow: Any) -> None:
        if not workflow.is_fitted:
            raise NotFittedError("Server needs a fitted workflow: call Workflow.fit (or Workflow.load) first")
        self.workflow = workflow
        self.plan = workflow.plan_
        self.input_schema = workflow.input_schema_
        _check_numeric_outputs(workflow.output_schema)
        self.fallbacks: collections.Counter[str] = collections.Counter()
        self._readers = {name: column_reader(self.input_schema[name].dtype, self.input_schema[name].is_list)
                         for name in self.plan.input_columns}
        self._steps = [(node, self._compile(node)) for node in self.plan.nodes]
        self._output_dtypes = {col.name: np.dtype(col.dtype) for col in workflow.output_schema if not col.is_list}

    def _compile(self, node: Node) -> Callable[[dict], dict[str, Column]]:
        """The function computing ``node``'s output columns from a request's state (its
        columns, the outputs of the nodes before, the DataFrame path's memo)."""
        columns = self.plan.columns(node)
        if isinstance(node, SelectNode):
            return lambda state: {c: state["columns"][c] for c in columns.output}
        if not isinstance(node, OpNode):  # concatenations, drops, picks (node["a"]): columns of the parents
            parents = node.parents

            def combine(state: dict) -> dict[str, Column]:
                merged: dict[str, Column] = {}
                for parent in parents:
                    for name, col in state["memo"][id(parent)].items():
                        merged.setdefault(name, col)  # a repeated column holds the same data
                return {c: merged[c] for c in columns.output}

            return combine
        compile_fast = FAST_OPERATORS.get(type(node.op))  # exactly these classes: a subclass may transform otherwise
        fast = compile_fast(node.op, list(columns.input)) if compile_fast is not None else None
        description, parent = node.describe(), id(node.parents[0])

        def run(state: dict) -> dict[str, Column]:
            if fast is not None:
                cols = dict(state["memo"][parent])
                cols.update((c, state["columns"][c]) for c in columns.dependency)
                try:
                    out = fast(cols)
                    return {c: out[c] for c in columns.output}
                except Unsupported:
                    pass
            self.fallbacks[description] += 1
            frame = self.plan.evaluate(self._frame(state), node, state["frame_memo"])
            return {c: from_series(frame[c].reset_index(drop=True)) for c in columns.output}

        return run

    def frame(self, request: Mapping[str, Any]) -> pd.DataFrame:
        """The DataFrame ``request`` stands for: what ``Workflow.transform`` takes for it."""
        return pd.DataFrame({name: as_series(col) for name, col in self._columns(request).items()})

    def _frame(self, state: dict) -> pd.DataFrame:
        """The request's DataFrame, built on first use (only a node without a fast path needs it)."""
        if state["frame"] is None:
            state["frame"] = pd.DataFrame({n: as_series(c) for n, c in state["columns"].items()})
        return state["frame"]

    def _columns(self, request: Mapping[str, Any]) -> dict[str, Column]:
        if not isinstance(request, Mapping):
            raise TypeError(f"a request is a dict of column name -> list or numpy array, got {type(request).__name__}")
        try:
            columns = {name: read(name, request[name]) for name, read in self._readers.items()}
        except KeyError:
            missing = [c for c in self._readers if c not in request]
            raise KeyError(f"the request lacks column(s) {missing} that the workflow reads; it has "
                           f"{list(request)}") from None
        lengths = {name: len(col.values) for name, col in columns.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"the request's columns have different lengths: {lengths}")
        return columns

    def transform(self, request: Mapping[str, Any], as_torch: bool = False) -> dict[str, Any]:
        """The workflow's output columns for ``request`` (column name -> list or numpy array).

        Returns a dict output column -> numpy array (torch tensor with ``as_torch=True``); a list
        column gives ``(values, offsets)`` as the loaders do. An output column holding a null
        where the model takes none (integers, booleans, lists) raises a ValueError naming it.
        Arrays may share memory with the request's (a column passed through unchanged).
        """
        state: dict[str, Any] = {"columns": self._columns(request), "memo": {}, "frame_memo": {}, "frame": None}
        if self.plan.preserves_rows:
            for node, step in self._steps:
                state["memo"][id(node)] = step(state)
            out = state["memo"][id(self.plan.output)]
        else:  # rows may go: the whole request takes the DataFrame path
            self.fallbacks[self.plan.output.describe()] += 1
            frame = self.workflow.transform_frame(self._frame(state)).reset_index(drop=True)
            out = {c: from_series(frame[c]) for c in frame.columns}
        arrays = {name: self._as_fitted(name, model_array(name, col)) for name, col in out.items()}
        return _to_torch(arrays) if as_torch else arrays

    def _as_fitted(self, name: str, array: Any) -> Any:
        """An output column in its dtype in the workflow's output schema (what ``wf.transform``
        of a Dataset gives) where it widens safely: a request without a null reads an integer
        column as int64, which FillMedian leaves int64, where the column that may hold nulls at
        fit (nullable ``Int64``) gives float64; a model gets one dtype per column either way."""
        target = self._output_dtypes.get(name)
        if target is None or not isinstance(array, np.ndarray) or array.dtype == target:
            return array
        return array.astype(target) if np.can_cast(array.dtype, target, "safe") else array


def _check_numeric_outputs(schema: Any) -> None:
    for col in schema:
        try:
            kind = np.dtype(col.dtype).kind if col.dtype is not None else "?"
        except TypeError:
            kind = "?"
        if kind not in "biuf":
            raise TypeError(f"Server hands numeric columns to the model, but output column {col.name!r} has dtype "
                            f"{col.dtype!r}: encode it in the workflow (Categorify...) or leave it out")


def _to_torch(arrays: dict[str, Any]) -> dict[str, Any]:
    import torch

    from tabloader import backend

    def tensor(a: np.ndarray) -> Any:
        return torch.from_numpy(backend.exportable(a))

    return {k: tuple(tensor(x) for x in v) if isinstance(v, tuple) else tensor(v) for k, v in arrays.items()}
