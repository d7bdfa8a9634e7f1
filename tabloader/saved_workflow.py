"""The saved-workflow format: ``workflow.json`` (graph, parameters, schemas) and state files.

``workflow.json`` holds a format version, the graph's nodes (parents before children, each
with its resolved columns), every operator's registered class name, parameters and fitted
state, and the input and output schemas. Fitted arrays and frames are parquet files beside it;
nothing is pickled.

Reading treats the directory as untrusted input (like a downloaded model file): the whole
document is checked key by key before anything is built; operator classes come from the
registry and functions from the caller's allow-list (:mod:`tabloader.registry`), so nothing is
imported or called because the file names it; state files are plain names inside the
directory (no absolute path, no ``..``, no separator, no symlink leading out), checked before
they are read.

Example:
    >>> import os, tempfile, pandas as pd, tabloader as tl
    >>> from tabloader import ops
    >>> wf = tl.Workflow(["x"] >> ops.Normalize(), progress=False).fit(pd.DataFrame({"x": [1.0, 3.0]}))
    >>> path = os.path.join(tempfile.mkdtemp(), "wf")
    >>> write(path, wf.output_node, wf.input_schema_, wf.output_schema)
    >>> output, input_schema, output_schema = read(path)
    >>> output.describe(), output_schema.column_names
    ('["x"] >> Normalize', ['x'])
"""

from __future__ import annotations

import inspect
import json
import os
import re
from typing import Any, Iterable

import numpy as np
import pandas as pd

from tabloader import backend
from tabloader.graph import ColumnSelector, Node
from tabloader.atomic_files import atomic_directory, write_text_atomic
from tabloader.filesystems import filesystem, join
from tabloader.ops.base import Operator
from tabloader.registry import TrustedFunctions, function_name, operator_class, operator_name
from tabloader.schema import Schema

WORKFLOW_FORMAT_VERSION = 1
WORKFLOW_FILE = "workflow.json"
_REQUIRED = {"format_version": int, "nodes": list, "output": int, "input_schema": dict, "output_schema": dict}
_PARENTS = {"select": (0, 0), "op": (1, 1), "drop": (1, 1), "concat": (1, None)}  # (fewest, most)
_STATE_FILE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\.parquet")  # a plain name: no separator, no '..'
_STATE_KINDS = ("array", "series", "frame")
_FUNCTION = "__function__"


# --- write --------------------------------------------------------------------------------------
def write(path: str, output: Node, input_schema: Schema, output_schema: Schema, overwrite: bool = False) -> None:
    """Save a fitted graph to directory ``path``, atomically (an existing ``path`` needs ``overwrite``)."""
    nodes = output.walk()
    index = {id(n): i for i, n in enumerate(nodes)}
    with atomic_directory(path, overwrite=overwrite) as tmp:
        doc = {
            "format_version": WORKFLOW_FORMAT_VERSION,
            "tabloader_version": _version(),
            "nodes": [_node_record(n, i, index, tmp) for i, n in enumerate(nodes)],
            "output": index[id(output)],
            "input_schema": input_schema.to_dict(),
            "output_schema": output_schema.to_dict(),
        }
        write_text_atomic(join(tmp, WORKFLOW_FILE), json.dumps(doc, indent=2, default=_json_default))


def _node_record(node: Node, i: int, index: dict[int, int], directory: str) -> dict[str, Any]:
    record: dict[str, Any] = {"id": i, "kind": node.kind, "parents": [index[id(p)] for p in node.parents]}
    if node.selector is not None:
        record["selector"] = node.selector.to_dict()
    if node.dropped:
        record["dropped"] = node.dropped
    if node.op is not None:
        where = f"node {i} ({type(node.op).__name__})"
        record["op"] = {"class": operator_name(type(node.op)), "config": _encode_config(node.op, where),
                        "state": _save_state(node.op.get_state(), f"node{i}", directory, where)}
    record["columns"] = _columns_record(node)
    return record


def _columns_record(node: Node) -> dict[str, Any]:
    """The node's resolved columns, so that loading needs no resolution (which may call a function)."""
    columns: dict[str, Any] = {"output": node.output_columns, "dependency": node.dependency_columns}
    if node.input_columns is not None:
        columns["input"] = [list(c) if isinstance(c, tuple) else c for c in node.input_columns]
    return columns


def _encode_config(op: Operator, where: str) -> dict[str, Any]:
    config = {}
    for key, value in op.get_config().items():
        if callable(value) and not isinstance(value, type):
            value = {_FUNCTION: function_name(value, f"{where}, parameter {key}")}
        elif _mentions_function(value):
            raise ValueError(f"{where}, parameter {key}: the key {_FUNCTION!r} is reserved for saved functions")
        config[key] = value
    json.dumps(config, default=_json_default)  # fail at save time, naming the op, not later
    return config


def _save_state(state: dict[str, Any], prefix: str, directory: str, where: str) -> dict[str, Any]:
    saved: dict[str, Any] = {}
    for key, value in state.items():
        if isinstance(value, (pd.DataFrame, pd.Series, np.ndarray)) or backend.is_gpu_object(value):
            name = f"{prefix}_{key}.parquet"
            if not _STATE_FILE.fullmatch(name):
                raise ValueError(f"{where}: state key {key!r} cannot name a file; use letters, digits, '_', '.', '-'")
            # index=None: a meaningful index (a Series keyed by category, say) is kept; a RangeIndex is not stored
            _table_of(value).to_parquet(join(directory, name), index=None)
            saved[key] = {"__parquet__": name, "kind": _kind_of(value)}
        else:
            saved[key] = {"__json__": value}
    return saved


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


# --- read ---------------------------------------------------------------------------------------
def read(path: str, trusted: Iterable[Any] = (), placeholders: bool = False) -> tuple[Node, Schema, Schema]:
    """The output node, input schema and output schema of the workflow saved in ``path``.

    Operator classes must be registered and functions be in ``trusted`` (see
    :class:`tabloader.registry.TrustedFunctions`); with ``placeholders=True`` an untrusted
    function is replaced by a stand-in that raises when called (for ``tabloader inspect``).
    """
    fs, root = filesystem(path)
    doc_path = join(root, WORKFLOW_FILE)
    if not fs.exists(doc_path):
        raise FileNotFoundError(f"{path} is not a saved workflow: {WORKFLOW_FILE} is missing")
    with fs.open(_inside(fs, root, WORKFLOW_FILE, doc_path), "r") as f:
        try:
            doc = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"{doc_path} is not valid JSON ({exc}); the workflow directory is damaged") from exc
    _check_document(doc, doc_path)
    functions = TrustedFunctions(trusted)
    records = doc["nodes"]
    # Every class and function is looked up before anything is built or any state file is read.
    ops = [_op_parts(r["op"], f"{doc_path}: node {i}", functions, placeholders) if r["kind"] == "op" else None
           for i, r in enumerate(records)]
    nodes: list[Node] = []
    for i, (record, op_parts) in enumerate(zip(records, ops)):
        op = None
        if op_parts is not None:
            cls, config, where = op_parts
            op = _build_op(cls, config, where)
            op.set_state(_load_state(record["op"]["state"], fs, root, where))
        selector = ColumnSelector.from_dict(record["selector"]) if record["kind"] == "select" else None
        nodes.append(Node(record["kind"], [nodes[p] for p in record["parents"]], op=op, selector=selector,
                          dropped=record.get("dropped", ())))
    input_schema = _schema(doc, "input_schema", doc_path)
    output_schema = _schema(doc, "output_schema", doc_path)
    if all("columns" in r for r in records):
        for node, record in zip(nodes, records):
            _restore_columns(node, record["columns"])
    else:  # written before resolved columns were saved: resolve (a trusted Rename f is called)
        nodes[doc["output"]].resolve(input_schema)
    return nodes[doc["output"]], input_schema, output_schema


def _check_document(doc: Any, where: str) -> None:
    """Raise ValueError naming the key when ``doc`` is not a well-formed saved workflow."""
    if not isinstance(doc, dict):
        raise ValueError(f"{where}: expected a JSON object with keys {sorted(_REQUIRED)}, got {type(doc).__name__}")
    version = doc.get("format_version")
    if type(version) is not int or version != WORKFLOW_FORMAT_VERSION:
        raise ValueError(f"{where} has format version {version!r}; this tabloader reads format version "
                         f"{WORKFLOW_FORMAT_VERSION}: upgrade tabloader to read a newer one "
                         f"(written by tabloader {doc.get('tabloader_version')!r})")
    for key, kind in _REQUIRED.items():
        _check_key(doc, key, kind, where, "a saved workflow")
    nodes = doc["nodes"]
    if not nodes:
        raise ValueError(f"{where}: 'nodes' is empty; a saved workflow has at least one node")
    for i, record in enumerate(nodes):
        _check_record(record, i, f"{where}: node {i}")
    if not 0 <= doc["output"] < len(nodes):
        raise ValueError(f"{where}: 'output' is {doc['output']}, not a node index (0 to {len(nodes) - 1})")


def _check_key(mapping: dict, key: str, kind: type, where: str, what: str) -> None:
    if key not in mapping:
        raise ValueError(f"{where}: the key {key!r} is missing; {what} needs {key!r} ({kind.__name__})")
    value = mapping[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"{where}: {key!r} must be a JSON {kind.__name__}, got {value!r:.80}")


def _check_record(record: Any, i: int, where: str) -> None:
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object, got {record!r:.80}")
    _check_key(record, "kind", str, where, "a node")
    _check_key(record, "parents", list, where, "a node")
    kind, parents = record["kind"], record["parents"]
    if kind not in _PARENTS:
        raise ValueError(f"{where}: kind {kind!r} is unknown; allowed: {sorted(_PARENTS)}")
    if record.get("id", i) != i:
        raise ValueError(f"{where}: 'id' is {record['id']!r}; nodes are listed in order of their ids")
    if not all(type(p) is int and 0 <= p < i for p in parents):
        raise ValueError(f"{where}: parents {parents!r:.80} must be indexes of earlier nodes (0 to {i - 1}); "
                         "nodes come after their parents, so no forward or cyclic reference")
    fewest, most = _PARENTS[kind]
    if len(parents) < fewest or (most is not None and len(parents) > most):
        raise ValueError(f"{where}: a {kind} node has {fewest}{'' if most == fewest else ' or more'} parent(s), "
                         f"got {len(parents)}")
    if kind == "select":
        _check_key(record, "selector", dict, where, "a select node")
        selector = record["selector"]
        _check_key(selector, "names", list, f"{where}, selector", "a selector")
        _check_key(selector, "tags", list, f"{where}, selector", "a selector")
        if not all(_is_column(n) for n in selector["names"]) or not all(isinstance(t, str) for t in selector["tags"]):
            raise ValueError(f"{where}: selector names must be column names (or lists of them), tags strings")
    if kind == "drop":
        _check_key(record, "dropped", list, where, "a drop node")
        _check_names(record["dropped"], f"{where}, 'dropped'")
    if kind == "op":
        _check_key(record, "op", dict, where, "an op node")
        op = record["op"]
        for key, type_ in (("class", str), ("config", dict), ("state", dict)):
            _check_key(op, key, type_, f"{where}, op", "an operator")
        for key, entry in op["state"].items():
            _check_state_entry(entry, f"{where}, state {key!r}")
    if "columns" in record:
        _check_columns(record["columns"], f"{where}, columns")


def _check_state_entry(entry: Any, where: str) -> None:
    if isinstance(entry, dict) and set(entry) == {"__json__"}:
        return
    if not (isinstance(entry, dict) and set(entry) == {"__parquet__", "kind"} and entry["kind"] in _STATE_KINDS):
        raise ValueError(f"{where}: a state entry is {{'__json__': value}} or {{'__parquet__': file name, 'kind': "
                         f"one of {list(_STATE_KINDS)}}}, got {entry!r:.100}")
    name = entry["__parquet__"]
    if not isinstance(name, str) or not _STATE_FILE.fullmatch(name):
        raise ValueError(f"{where}: state file {name!r:.100} is not a plain .parquet file name inside the workflow "
                         "directory (no absolute path, '..' or path separator)")


def _check_columns(columns: Any, where: str) -> None:
    if not isinstance(columns, dict):
        raise ValueError(f"{where}: expected a JSON object, got {columns!r:.80}")
    for key in ("output", "dependency"):
        _check_key(columns, key, list, where, "a node's columns")
        _check_names(columns[key], f"{where}, {key!r}")
    if "input" in columns and not (isinstance(columns["input"], list) and all(map(_is_column, columns["input"]))):
        raise ValueError(f"{where}: 'input' must be a list of column names (or lists of them)")


def _check_names(names: list, where: str) -> None:
    if not all(isinstance(n, str) for n in names):
        raise ValueError(f"{where}: expected column names (strings), got {names!r:.80}")


def _is_column(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))


def _op_parts(record: dict, where: str, functions: TrustedFunctions,
              placeholders: bool) -> tuple[type, dict[str, Any], str]:
    """The registered class, the decoded parameters and a label for the messages of one op record."""
    cls = operator_class(record["class"], where)
    where = f"{where} ({cls.__name__})"
    config = {}
    for key, value in record["config"].items():
        if isinstance(value, dict) and set(value) == {_FUNCTION} and isinstance(value[_FUNCTION], str):
            value = functions.resolve(value[_FUNCTION], f"{where}, parameter {key}", placeholders)
        elif _mentions_function(value):
            raise ValueError(f"{where}, parameter {key}: a saved function ({{{_FUNCTION!r}: name}}) may only be a "
                             "parameter's whole value; this one is nested or malformed")
        config[key] = value
    return cls, config, where


def _mentions_function(value: Any) -> bool:
    if isinstance(value, dict):
        return _FUNCTION in value or any(_mentions_function(v) for v in value.values())
    return isinstance(value, list) and any(_mentions_function(v) for v in value)


def _build_op(cls: type, config: dict[str, Any], where: str) -> Operator:
    params = inspect.signature(cls).parameters
    named = [p for p in params if params[p].kind in (params[p].POSITIONAL_OR_KEYWORD, params[p].KEYWORD_ONLY)]
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        unknown = [k for k in config if k not in named]
        if unknown:
            raise ValueError(f"{where}: config key(s) {unknown} are not parameters of {cls.__name__}; "
                             f"its parameters: {named}")
    try:
        return cls.from_config(config)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: cannot build {cls.__name__} from the saved config: {exc}") from exc


def _inside(fs: Any, root: str, name: str, path: str) -> str:
    """``path`` (``name`` in ``root``), after checking that it does not lead out of ``root``."""
    from fsspec.implementations.local import LocalFileSystem

    if isinstance(fs, LocalFileSystem):  # only local paths have symlinks
        real, real_root = os.path.realpath(path), os.path.realpath(root)
        if os.path.commonpath([real, real_root]) != real_root:
            raise ValueError(f"{path}: {name} leads outside the workflow directory {root} (a symlink to {real}); "
                             "a saved workflow only reads files inside its directory")
    return path


def _load_state(saved: dict[str, Any], fs: Any, root: str, where: str) -> dict[str, Any]:
    state = {}
    for key, entry in saved.items():
        if "__json__" in entry:
            state[key] = entry["__json__"]
            continue
        path = _inside(fs, root, entry["__parquet__"], join(root, entry["__parquet__"]))
        if not fs.exists(path):
            raise FileNotFoundError(f"{path} is missing: the saved workflow directory is incomplete")
        with fs.open(path, "rb") as f:
            frame = pd.read_parquet(f)
        try:
            state[key] = _state_value(frame, entry["kind"])
        except KeyError as exc:
            raise ValueError(f"{path} ({where}, state {key!r}) lacks the column {exc} of a {entry['kind']}") from None
    return state


def _state_value(frame: pd.DataFrame, kind: str) -> Any:
    if kind == "series":
        return frame.set_index("index")["values"].rename_axis(None)
    return frame if kind == "frame" else frame["values"].to_numpy()


def _schema(doc: dict, key: str, where: str) -> Schema:
    try:
        return Schema.from_dict(doc[key])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {key!r} is not a valid schema ({type(exc).__name__}: {exc})") from None


def _restore_columns(node: Node, columns: dict[str, Any]) -> None:
    if "input" in columns:
        node.input_columns = [tuple(c) if isinstance(c, list) else c for c in columns["input"]]
    node.output_columns = list(columns["output"])
    node.dependency_columns = list(columns["dependency"])
