"""Workflow: fit a graph of operators over a dataset, then transform data with it.

Fit runs in phases: statistical operators whose inputs depend on other statistical operators
wait for those to be fitted first. In each phase every partition yields partial statistics,
which Dask tree-reduces with each operator's associative ``merge`` (on the active
``dask.distributed`` client when there is one) before ``finalize``.

Example:
    >>> import pandas as pd, tabloader as tl
    >>> from tabloader import ops
    >>> df = pd.DataFrame({"x": [1.0, None, 3.0], "label": [0, 1, 0]})
    >>> wf = tl.Workflow((["x"] >> ops.FillMissing(0) >> ops.Normalize()) + ["label"])
    >>> wf.fit_transform(df)["x"].astype("float64").round(3).tolist()
    [-0.267, -1.069, 1.336]
"""

from __future__ import annotations

import importlib
import json
from typing import Any, Callable

import numpy as np
import pandas as pd

from tabloader import backend
from tabloader.dataset import Dataset
from tabloader.graph import Node
from tabloader.io import atomic_directory, filesystem, join, write_text_atomic
from tabloader.ops.base import NotFittedError, Operator, StatOperator
from tabloader.schema import Schema

WORKFLOW_FORMAT_VERSION = 1
WORKFLOW_FILE = "workflow.json"
_MERGE_FAN_IN = 8


class Workflow:
    """A graph of operators, fit on a dataset and applied to datasets or DataFrames.

    Args:
        output: the graph's output node, e.g. ``cats + conts + ["label"]``.
        progress: show progress bars during fit (and writes of transformed datasets).

    Example:
        >>> import pandas as pd, tabloader as tl
        >>> from tabloader import ops
        >>> wf = tl.Workflow(["c"] >> ops.Categorify())
        >>> wf.fit_transform(pd.DataFrame({"c": ["a", "b", "a"]}))["c"].tolist()
        [3, 4, 3]
    """

    def __init__(self, output: Any, progress: bool = True) -> None:
        self.output_node = Node.coerce(output)
        self.progress = progress
        self.input_schema_: Schema | None = None
        self.output_schema_: Schema | None = None
        ops = [n.op for n in self.output_node.walk() if n.kind == "op"]
        if len({id(o) for o in ops}) != len(ops):
            raise ValueError("one operator instance is used twice in the graph; create one per use")

    # --- introspection ------------------------------------------------------------------
    @property
    def nodes(self) -> list[Node]:
        return self.output_node.walk()

    @property
    def stat_nodes(self) -> list[Node]:
        return [n for n in self.nodes if n.kind == "op" and isinstance(n.op, StatOperator)]

    @property
    def is_fitted(self) -> bool:
        return self.input_schema_ is not None and all(n.op.is_fitted for n in self.stat_nodes)

    @property
    def input_columns(self) -> list[str]:
        """Columns of the input data the graph reads."""
        cols: list[str] = []
        for node in self.nodes:
            names = node.output_columns if node.kind == "select" else node.dependency_columns
            cols += [c for c in names or [] if c not in cols]
        return cols

    @property
    def output_schema(self) -> Schema:
        """Names, dtypes, tags and properties (cardinality, embedding_dim, ...) of the output."""
        if self.output_schema_ is None:
            raise NotFittedError("the output schema is known after Workflow.fit (or Workflow.load)")
        return self.output_schema_

    def __repr__(self) -> str:
        return f"Workflow({self.output_node.describe()}, fitted={self.is_fitted})"

    # --- fit ----------------------------------------------------------------------------
    def fit(self, data: Any, progress: bool | None = None) -> "Workflow":
        """Learn every statistical operator's statistics from ``data`` (Dataset or DataFrame)."""
        dataset = _as_dataset(data)
        progress = self.progress if progress is None else progress
        self.output_node.resolve(dataset.schema)
        for node in self.stat_nodes:
            node.op.clear()
        for phase, nodes in enumerate(self._fit_phases()):
            self._fit_phase(dataset, nodes, f"fit phase {phase + 1}" if phase else "fit", progress)
        self.input_schema_ = dataset.schema.select_by_name(self.input_columns)
        self.output_schema_ = self._output_schema_from(dataset)
        return self

    def _fit_phases(self) -> list[list[Node]]:
        """Stat nodes grouped so that each group depends only on stat nodes of earlier groups."""
        depth: dict[int, int] = {}
        for node in self.nodes:
            upstream = max((depth[id(p)] for p in node.parents), default=0)
            is_stat = node.kind == "op" and isinstance(node.op, StatOperator)
            depth[id(node)] = upstream + (1 if is_stat else 0)
        phases: dict[int, list[Node]] = {}
        for node in self.stat_nodes:
            phases.setdefault(depth[id(node)], []).append(node)
        return [phases[k] for k in sorted(phases)]

    def _fit_phase(self, dataset: Dataset, nodes: list[Node], desc: str, progress: bool) -> None:
        import dask

        from tabloader.scheduler import compute_tasks, shared_calls

        parts = shared_calls(_PartialStats(self, nodes), [(p,) for p in dataset.to_delayed(self.input_columns)],
                             "partial-stats")
        merge = _MergeStats(nodes)
        while len(parts) > 1:
            parts = [dask.delayed(merge, pure=False)(parts[i:i + _MERGE_FAN_IN])
                     for i in range(0, len(parts), _MERGE_FAN_IN)]
        merged = compute_tasks(parts, desc, progress=progress)[0]
        for node, stats in zip(nodes, merged):
            node.op.finalize(node.input_columns, stats)

    def _output_schema_from(self, dataset: Dataset) -> Schema:
        """Tags and properties from the operators; dtypes from transforming an empty frame."""
        declared = self.output_node.resolve(dataset.schema)
        meta = self.transform_frame(dataset.meta())
        actual = Schema.from_frame(meta)
        return Schema(c.with_dtype(actual[c.name].dtype, actual[c.name].is_list) if c.name in actual else c
                      for c in declared)

    # --- transform ----------------------------------------------------------------------
    def transform(self, data: Any) -> Any:
        """Apply the fitted workflow.

        A :class:`~tabloader.Dataset` gives a lazy Dataset (each partition is transformed when
        read or written); a pandas or cuDF DataFrame gives a DataFrame; a Dask DataFrame
        gives a Dask DataFrame.
        """
        self._check_fitted()
        if isinstance(data, Dataset):
            self.output_node.resolve(self._check_input(data.schema))
            preserves = all(n.op.preserves_rows for n in self.nodes if n.kind == "op")
            return data.with_transform(self.transform_frame, self.output_schema, self.input_columns, preserves)
        if isinstance(data, pd.DataFrame) or backend.is_gpu_object(data):
            missing = [c for c in self.input_columns if c not in data.columns]
            if missing:
                raise KeyError(f"the workflow reads column(s) {missing}, which the DataFrame lacks; "
                               f"available: {list(data.columns)}")
            return self.transform_frame(data)
        return self.transform(Dataset(data)).to_ddf()

    def fit_transform(self, data: Any) -> Any:
        return self.fit(data).transform(data)

    def transform_frame(self, frame: Any) -> Any:
        """Transform one in-memory partition."""
        outputs = _evaluate(self.output_node, frame, {})
        return outputs[self.output_node.output_columns]

    def _check_fitted(self) -> None:
        if self.input_schema_ is None:
            raise NotFittedError("the workflow is not fitted: call fit(dataset) before transform")
        for node in self.stat_nodes:
            node.op.check_is_fitted(node.input_columns)

    def _check_input(self, schema: Schema) -> Schema:
        missing = [c for c in self.input_columns if c not in schema]
        if missing:
            raise KeyError(f"the workflow reads column(s) {missing}, which the data lacks; "
                           f"available: {schema.column_names}")
        return schema

    # --- save / load --------------------------------------------------------------------
    def save(self, path: str, overwrite: bool = True) -> None:
        """Write the graph as versioned JSON and fitted states as parquet/JSON, atomically."""
        self._check_fitted()
        nodes = self.nodes
        index = {id(n): i for i, n in enumerate(nodes)}
        with atomic_directory(path, overwrite=overwrite) as tmp:
            records = [_node_record(n, i, index, tmp) for i, n in enumerate(nodes)]
            doc = {
                "format_version": WORKFLOW_FORMAT_VERSION,
                "tabloader_version": _version(),
                "nodes": records,
                "output": index[id(self.output_node)],
                "input_schema": self.input_schema_.to_dict(),
                "output_schema": self.output_schema_.to_dict(),
            }
            write_text_atomic(join(tmp, WORKFLOW_FILE), json.dumps(doc, indent=2, default=_json_default))

    @classmethod
    def load(cls, path: str) -> "Workflow":
        """Read a workflow written by :meth:`save` (no pickle is ever read)."""
        fs, root = filesystem(path)
        doc_path = join(root, WORKFLOW_FILE)
        if not fs.exists(doc_path):
            raise FileNotFoundError(f"{path} is not a saved workflow: {WORKFLOW_FILE} is missing")
        with fs.open(doc_path, "r") as f:
            try:
                doc = json.load(f)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{doc_path} is not valid JSON ({exc}); the workflow directory is damaged") from exc
        version = doc.get("format_version")
        if not isinstance(version, int) or version > WORKFLOW_FORMAT_VERSION:
            raise ValueError(f"{doc_path} has format version {version!r}; this tabloader reads versions up to "
                             f"{WORKFLOW_FORMAT_VERSION}: upgrade tabloader (written by {doc.get('tabloader_version')})")
        nodes: list[Node] = []
        for record in doc["nodes"]:
            nodes.append(_node_from_record(record, nodes, fs, root))
        wf = cls(nodes[doc["output"]])
        wf.input_schema_ = Schema.from_dict(doc["input_schema"])
        wf.output_schema_ = Schema.from_dict(doc["output_schema"])
        wf.output_node.resolve(wf.input_schema_)
        return wf


# --- per-partition evaluation -------------------------------------------------------------
def _evaluate(node: Node, frame: Any, memo: dict[int, Any]) -> Any:
    """The output frame of ``node`` for one input partition (memoized per partition)."""
    if id(node) in memo:
        return memo[id(node)]
    if node.kind == "select":
        out = frame[node.output_columns]
    elif node.kind == "concat":
        pieces = [_evaluate(p, frame, memo) for p in node.parents]
        # An inner join on the index: rows that a filter dropped in one branch go from all.
        out = backend.concat(pieces, axis=1, join="inner")
        out = out.loc[:, ~out.columns.duplicated(keep="last")]
    elif node.kind == "drop":
        out = _evaluate(node.parents[0], frame, memo)[node.output_columns]
    else:
        out = node.op.transform(node.input_columns, _op_input(node, frame, memo))
        out = out[node.output_columns]
    memo[id(node)] = out
    return out


def _op_input(node: Node, frame: Any, memo: dict[int, Any]) -> Any:
    parent = _evaluate(node.parents[0], frame, memo)
    if not node.dependency_columns:
        return parent
    extra = frame.loc[parent.index, node.dependency_columns]
    return backend.concat([parent, extra], axis=1)


class _PartialStats:
    """Partial statistics of the given stat nodes on one partition (a picklable task)."""

    def __init__(self, workflow: Workflow, nodes: list[Node]) -> None:
        self.workflow, self.nodes = workflow, nodes

    def __call__(self, frame: Any) -> list[Any]:
        memo: dict[int, Any] = {}
        return [n.op.fit_partial(n.input_columns, _op_input(n, frame, memo)) for n in self.nodes]


class _MergeStats:
    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes

    def __call__(self, partials: list[list[Any]]) -> list[Any]:
        result = partials[0]
        for other in partials[1:]:
            result = [n.op.merge(a, b) for n, a, b in zip(self.nodes, result, other)]
        return result


# --- serialization helpers ----------------------------------------------------------------
def _node_record(node: Node, i: int, index: dict[int, int], directory: str) -> dict[str, Any]:
    record: dict[str, Any] = {"id": i, "kind": node.kind, "parents": [index[id(p)] for p in node.parents]}
    if node.selector is not None:
        record["selector"] = node.selector.to_dict()
    if node.dropped:
        record["dropped"] = node.dropped
    if node.op is not None:
        record["op"] = {"class": _qualified_name(type(node.op)), "config": _encode_config(node.op),
                        "state": _save_state(node.op.get_state(), f"node{i}", directory)}
    return record


def _node_from_record(record: dict[str, Any], nodes: list[Node], fs: Any, root: str) -> Node:
    from tabloader.graph import ColumnSelector

    parents = [nodes[p] for p in record["parents"]]
    op = None
    if "op" in record:
        cls = import_qualified(record["op"]["class"])
        if not (isinstance(cls, type) and issubclass(cls, Operator)):
            raise TypeError(f"{record['op']['class']} is not a tabloader operator")
        op = cls.from_config(_decode_config(record["op"]["config"]))
        op.set_state(_load_state(record["op"]["state"], fs, root))
    selector = ColumnSelector.from_dict(record["selector"]) if "selector" in record else None
    return Node(record["kind"], parents, op=op, selector=selector, dropped=record.get("dropped", ()))


def _qualified_name(obj: Any) -> str:
    qualname = getattr(obj, "__qualname__", getattr(obj, "__name__", ""))
    module = getattr(obj, "__module__", None)
    if not module or "<lambda>" in qualname or "<locals>" in qualname:
        raise ValueError(f"{obj!r} cannot be saved: an anonymous lambda or a function defined inside another "
                         "function has no importable name. Define it at module level (def my_fn(...)) and use that.")
    if module == "__main__":
        raise ValueError(f"{qualname} is defined in __main__, which another process cannot import; "
                         "move it into an importable module")
    return f"{module}:{qualname}"


def import_qualified(name: str) -> Any:
    """Import ``module:qualname`` (the form in which functions and operator classes are saved)."""
    module_name, _, qualname = name.partition(":")
    try:
        obj = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ImportError(f"cannot import {name!r} while loading a workflow: {exc}") from exc
    return obj


def _encode_config(op: Operator) -> dict[str, Any]:
    config = {}
    for key, value in op.get_config().items():
        config[key] = {"__function__": _qualified_name(value)} if callable(value) and not isinstance(value, type) else value
    json.dumps(config, default=_json_default)  # fail at save time, naming the op, not later
    return config


def _decode_config(config: dict[str, Any]) -> dict[str, Any]:
    return {k: import_qualified(v["__function__"]) if isinstance(v, dict) and "__function__" in v else v
            for k, v in config.items()}


def _save_state(state: dict[str, Any], prefix: str, directory: str) -> dict[str, Any]:
    saved: dict[str, Any] = {}
    for key, value in state.items():
        if isinstance(value, (pd.DataFrame, pd.Series, np.ndarray)) or backend.is_gpu_object(value):
            name = f"{prefix}_{key}.parquet"
            # index=None: a meaningful index (a Series keyed by category, say) is kept; a RangeIndex is not stored
            _table_of(value).to_parquet(join(directory, name), index=None)
            saved[key] = {"__parquet__": name, "kind": _kind_of(value)}
        else:
            saved[key] = {"__json__": value}
    return saved


def _load_state(saved: dict[str, Any], fs: Any, root: str) -> dict[str, Any]:
    state = {}
    for key, entry in saved.items():
        if "__json__" in entry:
            state[key] = entry["__json__"]
            continue
        path = join(root, entry["__parquet__"])
        if not fs.exists(path):
            raise FileNotFoundError(f"{path} is missing: the saved workflow directory is incomplete")
        with fs.open(path, "rb") as f:
            frame = pd.read_parquet(f)
        if entry["kind"] == "series":
            state[key] = frame.set_index("index")["values"].rename_axis(None)
        else:
            state[key] = frame if entry["kind"] == "frame" else frame["values"].to_numpy()
    return state


def _kind_of(value: Any) -> str:
    if isinstance(value, np.ndarray) or type(value).__name__ == "ndarray":
        return "array"
    return "series" if value.ndim == 1 else "frame"


def _table_of(value: Any) -> pd.DataFrame:
    value = backend.to_host(value) if backend.is_gpu_object(value) else value
    if isinstance(value, np.ndarray) or type(value).__name__ == "ndarray":
        return pd.DataFrame({"values": np.asarray(value.get() if hasattr(value, "get") else value)})
    if isinstance(value, pd.Series):  # the index is kept: Series are often keyed by column name
        return pd.DataFrame({"index": value.index, "values": value.to_numpy()})
    return value  # DataFrames are saved without their index


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"value {value!r} of type {type(value).__name__} cannot be saved as JSON")


def _version() -> str:
    from tabloader import __version__

    return __version__


def _as_dataset(data: Any) -> Dataset:
    return data if isinstance(data, Dataset) else Dataset(data)


# Re-exported for operator authors: a helper to call a saved function by name.
def resolve_callable(fn: Callable | str) -> Callable:
    return import_qualified(fn) if isinstance(fn, str) else fn
