"""The saved-workflow format: ``workflow.json`` (graph, parameters, schemas) and state files.

``workflow.json`` holds a format version, the graph's nodes (parents before children, each
with its resolved columns: the workflow's :class:`~tabloader.plan.Plan`), every operator's
registered class name, parameters and fitted state (:mod:`tabloader.saved_state`: tables as
parquet files beside it, the rest JSON), and the input and output schemas. Nothing is pickled.

Reading treats the directory as untrusted input (like a downloaded model file): the whole
document is checked key by key before anything is built; operator classes come from the
registry and functions from the caller's allow-list (:mod:`tabloader.registry`), so nothing is
imported or called because the file names it; state files are plain names inside the
directory, checked before they are read. Resolved columns are read, not recomputed, so loading
calls no function (except for files written before they were recorded: their graph is resolved,
which calls a trusted ``Rename`` function). Format version 1 is read too
(:mod:`tabloader.saved_workflow_v1`).

Example:
    >>> import os, tempfile, pandas as pd, tabloader as tl
    >>> from tabloader import ops
    >>> wf = tl.Workflow(["x"] >> ops.Normalize(), progress=False).fit(pd.DataFrame({"x": [1.0, 3.0]}))
    >>> path = os.path.join(tempfile.mkdtemp(), "wf")
    >>> write(path, wf.plan_, wf.input_schema_, wf.output_schema)
    >>> plan, input_schema, output_schema = read(path)
    >>> plan.output.describe(), output_schema.column_names
    ('["x"] >> Normalize', ['x'])
"""

from __future__ import annotations

import contextlib
import inspect
import json
from typing import Any, Iterable, Iterator

from tabloader import saved_workflow_v1
from tabloader.atomic_files import atomic_directory, write_text_atomic
from tabloader.filesystems import filesystem, join
from tabloader.graph import NODE_KINDS, Node, NodeColumns, OpNode
from tabloader.ops.base import Operator
from tabloader.plan import Plan
from tabloader.records import SHOWN_CHARS, check_key, check_names, is_column
from tabloader.registry import TrustedFunctions, function_name, operator_class, operator_name
from tabloader.saved_state import check_state, confined, load_state, save_state
from tabloader.schema import Schema, json_default

WORKFLOW_FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
WORKFLOW_FILE = "workflow.json"
_REQUIRED = {"format_version": int, "nodes": list, "output": int, "input_schema": dict, "output_schema": dict}
_FUNCTION = "__function__"


def write(path: str, plan: Plan, input_schema: Schema, output_schema: Schema, overwrite: bool = False) -> None:
    """Save a fitted workflow's plan to directory ``path``, atomically (an existing ``path`` needs ``overwrite``)."""
    nodes = plan.nodes
    index = {id(n): i for i, n in enumerate(nodes)}
    with atomic_directory(path, overwrite=overwrite) as tmp:
        doc = {
            "format_version": WORKFLOW_FORMAT_VERSION,
            "tabloader_version": _version(),
            "nodes": [_node_record(n, i, index, plan.columns(n), tmp) for i, n in enumerate(nodes)],
            "output": index[id(plan.output)],
            "input_schema": input_schema.to_dict(),
            "output_schema": output_schema.to_dict(),
        }
        write_text_atomic(join(tmp, WORKFLOW_FILE), json.dumps(doc, indent=2, default=json_default))


def _node_record(node: Node, i: int, index: dict[int, int], columns: NodeColumns, directory: str) -> dict[str, Any]:
    record: dict[str, Any] = {"id": i, "kind": node.kind, "parents": [index[id(p)] for p in node.parents],
                              **node.to_record()}
    if isinstance(node, OpNode):
        where = f"node {i} ({type(node.op).__name__})"
        record["op"] = {"class": operator_name(type(node.op)), "config": _encode_config(node.op, where),
                        "state": save_state(node.op.get_state(), f"node{i}", directory, where)}
    record["columns"] = _columns_record(columns)
    return record


def _columns_record(columns: NodeColumns) -> dict[str, Any]:
    record: dict[str, Any] = {"output": columns.output, "dependency": columns.dependency}
    if columns.input is not None:
        record["input"] = [list(c) if isinstance(c, tuple) else c for c in columns.input]
    return record


def _encode_config(op: Operator, where: str) -> dict[str, Any]:
    config = {}
    for key, value in op.get_config().items():
        if callable(value) and not isinstance(value, type):
            value = {_FUNCTION: function_name(value, f"{where}, parameter {key}")}
        elif _mentions_function(value):
            raise ValueError(f"{where}, parameter {key}: the key {_FUNCTION!r} is reserved for saved functions")
        try:
            json.dumps(value, default=json_default)  # fail now, naming the operator, not when writing the file
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{where}, parameter {key}: {exc}") from None
        config[key] = value
    return config


def _version() -> str:
    from tabloader import __version__

    return __version__


def read(path: str, trusted: Iterable[Any] = (), placeholders: bool = False) -> tuple[Plan, Schema, Schema]:
    """The plan, input schema and output schema of the workflow saved in ``path``.

    Operator classes must be registered and functions be in ``trusted`` (see
    :class:`tabloader.registry.TrustedFunctions`); with ``placeholders=True`` an untrusted
    function is replaced by a stand-in that raises when called (for ``tabloader inspect``).
    """
    fs, root = filesystem(path)
    doc_path = join(root, WORKFLOW_FILE)
    if not fs.exists(doc_path):
        raise FileNotFoundError(f"{path} is not a saved workflow: {WORKFLOW_FILE} is missing")
    with fs.open(confined(fs, root, WORKFLOW_FILE), "r") as f:
        try:
            doc = json.load(f)
        except (ValueError, RecursionError) as exc:  # bad JSON or text, an integer of 4300+ digits, deep nesting
            raise ValueError(f"{doc_path} is not valid JSON ({type(exc).__name__}: {exc}); the workflow directory "
                             "is damaged") from exc
    _check_depth(doc, doc_path)
    _check_document(doc, doc_path)
    version, records = doc["format_version"], doc["nodes"]
    functions = TrustedFunctions(trusted)
    # Every class and function is looked up before anything is built or any state file is read.
    ops = [_op_parts(r["op"], f"{doc_path}: node {i}", functions, placeholders)
           if issubclass(NODE_KINDS[r["kind"]], OpNode) else None for i, r in enumerate(records)]
    nodes: list[Node] = []
    for record, op_parts in zip(records, ops):
        op = None
        if op_parts is not None:
            cls, config, where = op_parts
            op = _build_op(cls, config, where)
            state = load_state(record["op"]["state"], fs, root, where)
            with _damaged(where, "its saved state does not fit the operator"):
                op.set_state(saved_workflow_v1.upgrade_state(cls, state, where) if version == 1 else state)
        parents = [nodes[p] for p in record["parents"]]
        with _damaged(f"{doc_path}: node {len(nodes)}", f"its {record['kind']!r} record cannot be built"):
            nodes.append(NODE_KINDS[record["kind"]].from_record(record, parents, op))
    input_schema = _schema(doc, "input_schema", doc_path)
    output_schema = _schema(doc, "output_schema", doc_path)
    output = nodes[doc["output"]]
    if all("columns" in r for r in records):
        plan = Plan(output, {n: _node_columns(r["columns"]) for n, r in zip(nodes, records)})
    else:  # written before resolved columns were saved: resolve (a trusted Rename f is called)
        plan = Plan.resolve(output, input_schema)
    return plan, input_schema, output_schema


def _check_document(doc: Any, where: str) -> None:
    """Raise ValueError naming the key when ``doc`` is not a well-formed saved workflow."""
    if not isinstance(doc, dict):
        raise ValueError(f"{where}: expected a JSON object with keys {sorted(_REQUIRED)}, got {type(doc).__name__}")
    version = doc.get("format_version")
    if type(version) is not int or version not in READABLE_VERSIONS:
        raise ValueError(f"{where} has format version {version!r}; this tabloader reads format version "
                         f"{' or '.join(map(str, READABLE_VERSIONS))}: upgrade tabloader to read a newer one "
                         f"(written by tabloader {doc.get('tabloader_version')!r})")
    for key, kind in _REQUIRED.items():
        check_key(doc, key, kind, where, "a saved workflow")
    nodes = doc["nodes"]
    if not nodes:
        raise ValueError(f"{where}: 'nodes' is empty; a saved workflow has at least one node")
    for i, record in enumerate(nodes):
        _check_record(record, i, f"{where}: node {i}")
    if not 0 <= doc["output"] < len(nodes):
        raise ValueError(f"{where}: 'output' is {doc['output']}, not a node index (0 to {len(nodes) - 1})")


def _check_record(record: Any, i: int, where: str) -> None:
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object, got {record!r:.{SHOWN_CHARS}}")
    check_key(record, "kind", str, where, "a node")
    check_key(record, "parents", list, where, "a node")
    kind, parents = record["kind"], record["parents"]
    if kind not in NODE_KINDS:
        raise ValueError(f"{where}: kind {kind!r} is unknown; allowed: {sorted(NODE_KINDS)}")
    if record.get("id", i) != i:
        raise ValueError(f"{where}: 'id' is {record['id']!r}; nodes are listed in order of their ids")
    if not all(type(p) is int and 0 <= p < i for p in parents):
        raise ValueError(f"{where}: parents {parents!r:.{SHOWN_CHARS}} must be indexes of earlier nodes "
                         f"(0 to {i - 1}); nodes come after their parents, so no forward or cyclic reference")
    node_kind = NODE_KINDS[kind]
    fewest, most = node_kind.parent_count
    if len(parents) < fewest or (most is not None and len(parents) > most):
        raise ValueError(f"{where}: a {kind} node has {fewest}{'' if most == fewest else ' or more'} parent(s), "
                         f"got {len(parents)}")
    node_kind.check_record(record, where)
    if issubclass(node_kind, OpNode):
        _check_op_record(record["op"], where)
    if "columns" in record:
        check_key(record, "columns", dict, where, "a node")
        _check_columns(record["columns"], f"{where}, columns")


def _check_op_record(op: dict, where: str) -> None:
    for key, type_ in (("class", str), ("config", dict), ("state", dict)):
        check_key(op, key, type_, f"{where}, op", "an operator")
    check_state(op["state"], where)


def _check_columns(columns: dict, where: str) -> None:
    for key in ("output", "dependency"):
        check_key(columns, key, list, where, "a node's columns")
        check_names(columns[key], f"{where}, {key!r}")
    if "input" in columns and not (isinstance(columns["input"], list) and all(map(is_column, columns["input"]))):
        raise ValueError(f"{where}: 'input' must be a list of column names (or lists of them)")


def _node_columns(record: dict[str, Any]) -> NodeColumns:
    columns = record.get("input")
    return NodeColumns(list(record["output"]), None if columns is None else
                       [tuple(c) if isinstance(c, list) else c for c in columns], list(record["dependency"]))


#: How deep a saved workflow's JSON may nest (its records need about 8 levels, state entries 32 x 2 more;
#: deeper documents would exhaust the recursion of the checks after it).
MAX_DOCUMENT_DEPTH = 200


def _check_depth(doc: Any, where: str) -> None:
    """Refuse a document nested deeper than :data:`MAX_DOCUMENT_DEPTH` (walked without recursion:
    the checks after it recurse into parameters)."""
    stack = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DOCUMENT_DEPTH:
            raise ValueError(f"{where} nests deeper than {MAX_DOCUMENT_DEPTH} levels; the workflow directory is "
                             "damaged")
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        stack.extend((child, depth + 1) for child in children)


@contextlib.contextmanager
def _damaged(where: str, what: str) -> Iterator[None]:
    """Errors of an operator or node built from a damaged (or crafted) record as a ValueError
    naming the file, the node and the operator, instead of the bare KeyError or AttributeError
    of the code that trusted the record's shape."""
    try:
        yield
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise ValueError(f"{where}: {what} ({type(exc).__name__}: {exc}); the workflow directory is damaged") from exc


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


def _schema(doc: dict, key: str, where: str) -> Schema:
    try:
        return Schema.from_dict(doc[key])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {key!r} is not a valid schema ({type(exc).__name__}: {exc})") from None
