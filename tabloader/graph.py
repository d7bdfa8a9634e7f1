"""Column graphs: select columns, apply operators with ``>>``, combine with ``+``, drop with ``-``.

A graph is built of four kinds of node, one class each: :class:`SelectNode` (columns of the
input data, chosen by a :class:`~tabloader.selector.ColumnSelector`), :class:`OpNode` (an operator over its parent's output), :class:`ConcatNode` (the
outputs of several nodes side by side) and :class:`DropNode` (its parent's output without some
columns). Each kind owns how it resolves its columns against a schema, computes its output for
one partition, describes itself and is recorded in a saved workflow.

Nodes hold no resolved state: :func:`resolve` returns every node's :class:`NodeColumns`, which
a :class:`tabloader.plan.Plan` keeps, so one node can serve several workflows. The graph knows
operators only by what it calls on them (:class:`GraphOperator`): operator modules import the
graph, never the reverse.

Example:
    >>> from tabloader import ops
    >>> node = ["a", "b"] >> ops.FillMissing(0)
    >>> (node + ["label"]).describe()
    '(["a", "b"] >> FillMissing) + ["label"]'
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Protocol, Sequence, runtime_checkable

from tabloader import backend
from tabloader.records import check_key, check_names
from tabloader.schema import Schema, Tags
from tabloader.selector import ColumnSelector, Columns, flatten_columns


@runtime_checkable
class GraphOperator(Protocol):
    """What the graph uses of an operator; :class:`tabloader.ops.Operator` is the class to subclass."""

    preserves_rows: bool
    label: str

    def transform(self, columns: Columns, frame: Any) -> Any: ...

    def dependencies(self) -> list[Any]: ...  # column names, or nodes giving derived columns

    def compute_output_schema(self, input_schema: Schema, columns: Columns) -> Schema: ...


@dataclasses.dataclass(frozen=True)
class NodeColumns:
    """A node's columns, resolved against the input data's schema.

    ``output``: the columns the node gives. ``input``: what its operator sees (groups kept as
    tuples; None for nodes that hold no operator and select nothing). ``dependency``: columns
    of the input data an operator reads besides its parent's output.
    """

    output: list[str]
    input: list[Any] | None = None
    dependency: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class Resolved:
    """What resolving one node gives: its columns, its output schema, and for each output column
    the op node that computed it (None: a column of the input data), to tell apart clashes."""

    columns: NodeColumns
    schema: Schema
    origins: dict[str, "Node | None"]


def resolve(output: "Node", input_schema: Schema) -> tuple[dict["Node", NodeColumns], Schema]:
    """Every node's columns (parents before children) and the output schema of ``output``."""
    resolved: dict[Node, Resolved] = {}
    for node in output.walk():
        resolved[node] = node.resolve_step(input_schema, [resolved[p] for p in node.parents])
    return {node: r.columns for node, r in resolved.items()}, resolved[output].schema


def column_origins(output: "Node", columns: Any) -> dict[str, "OpNode | None"]:
    """For each output column of ``output``, the op node that computed it (None: a column of the
    input data), from resolved ``columns`` (node -> :class:`NodeColumns`, as a plan holds them):
    no operator is asked anything, so a loaded workflow can answer without resolving again."""
    origins: dict[Node, dict[str, OpNode | None]] = {}
    for node in output.walk():
        if isinstance(node, OpNode):
            origins[node] = dict.fromkeys(columns[node].output, node)
            continue
        mine: dict[str, OpNode | None] = {}
        for name in columns[node].output:
            mine[name] = next((origins[p][name] for p in node.parents if name in origins[p]), None)
        origins[node] = mine
    return origins[output]


# The operator `node >> function` builds: registered by tabloader.ops.lambdaop (LambdaOp), since
# the graph imports no operator module (operator modules import the graph).
_FUNCTION_OPERATOR: list[Any] = []


def register_function_operator(factory: Any) -> None:
    """Make ``node >> f`` mean ``node >> factory(f)`` for a plain function ``f``."""
    _FUNCTION_OPERATOR[:] = [factory]


class _NodeType(type):
    """Keeps ``Node(kind, ...)``, the constructor from before the kinds were classes, working (deprecated)."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is Node:
            return _node_of_kind(*args, **kwargs)
        return super().__call__(*args, **kwargs)


class Node(metaclass=_NodeType):
    """One step of a workflow graph; the subclasses are the kinds of step.

    Subclasses set :attr:`kind` (the name saved workflows record) and :attr:`parent_count`, and
    implement :meth:`resolve_step`, :meth:`evaluate` and :meth:`describe`.
    """

    kind: str
    parent_count: tuple[int, int | None]  # (fewest, most); None: no limit
    record_fields: dict[str, type] = {}  # keys of its saved record besides kind/parents/columns

    def __init__(self, parents: Sequence["Node"] = ()) -> None:
        self.parents = list(parents)

    # --- construction ------------------------------------------------------------------------
    @staticmethod
    def coerce(other: Any) -> "Node":
        """A node from a node, a column name, a tag, or a list of names/tags/nodes."""
        if isinstance(other, Node):
            return other
        if isinstance(other, Tags):
            return SelectNode(ColumnSelector(tags=[other]))
        if isinstance(other, str):
            return SelectNode(ColumnSelector([other]))
        if isinstance(other, ColumnSelector):
            return SelectNode(other)
        if isinstance(other, (list, tuple)) and other:
            unknown = [n for n in other if not isinstance(n, (Node, str, list, tuple))]
            if unknown:
                raise _cannot_select(unknown[0])
            nodes = [n for n in other if isinstance(n, Node)]
            names = [n for n in other if isinstance(n, (str, list, tuple)) and not isinstance(n, Tags)]
            tags = [t for t in other if isinstance(t, Tags)]
            plain = [SelectNode(ColumnSelector(names, tags))] if names or tags else []
            parts = plain + nodes
            return parts[0] if len(parts) == 1 else ConcatNode(parts)
        raise _cannot_select(other)

    def __rshift__(self, op: Any) -> "OpNode":
        # An operator class has the operator's attributes too: `>> LogOp` means `>> LogOp()`.
        if isinstance(op, type) and isinstance(op, GraphOperator):
            op = op()
        elif callable(op) and not isinstance(op, (type, GraphOperator)) and _FUNCTION_OPERATOR:
            op = _FUNCTION_OPERATOR[0](op)  # `>> f` means `>> LambdaOp(f)`
        if not isinstance(op, GraphOperator):
            raise TypeError(f"`>>` takes an operator (class or instance) or a function, got {op!r}")
        return OpNode(self, op)

    def __getitem__(self, names: Any) -> "PickNode":
        """Some of this node's output columns: ``node["a"]`` or ``node[["a", "b"]]``."""
        return PickNode(self, [names] if isinstance(names, str) else list(names))

    def __rrshift__(self, other: Any) -> "Node":
        raise TypeError("an operator goes on the right of `>>`")

    def __add__(self, other: Any) -> "ConcatNode":
        return ConcatNode([self, Node.coerce(other)])

    def __radd__(self, other: Any) -> "ConcatNode":
        return ConcatNode([Node.coerce(other), self])

    def __sub__(self, other: Any) -> "DropNode":
        return DropNode(self, [other] if isinstance(other, str) else list(other))

    # --- traversal -------------------------------------------------------------------------------
    def walk(self) -> list["Node"]:
        """All nodes of the graph under this one, parents before children, each once."""
        seen: dict[int, Node] = {}

        def visit(node: Node) -> None:
            if id(node) in seen:
                return
            for parent in node.parents:
                visit(parent)
            seen[id(node)] = node

        visit(self)
        return list(seen.values())

    def resolve(self, input_schema: Schema) -> Schema:
        """This node's output schema for input data of schema ``input_schema``."""
        return resolve(self, input_schema)[1]

    # --- what each kind implements ---------------------------------------------------------------
    def resolve_step(self, input_schema: Schema, parents: list[Resolved]) -> Resolved:
        """This node's columns and schema, given its parents' (resolved first)."""
        raise NotImplementedError

    def evaluate(self, columns: NodeColumns, frame: Any, parents: list[Any]) -> Any:
        """This node's output for one input partition ``frame``, given its parents' outputs."""
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def describe_term(self) -> str:
        """How the node reads as a term of ``+``."""
        return self.describe()

    def describe_source(self) -> str:
        """How the node reads on the left of ``>>``."""
        return self.describe()

    def columns_for_operator(self, columns: NodeColumns) -> list[Any]:
        """What an operator applied to this node sees (groups are kept only straight after a selection)."""
        return list(columns.output)

    def data_columns(self, columns: NodeColumns) -> list[str]:
        """The columns of the input data this node reads itself."""
        return list(columns.dependency)

    def to_record(self) -> dict[str, Any]:
        """The fields of this node's saved record besides kind, parents and columns."""
        return {}

    @classmethod
    def check_record(cls, record: dict[str, Any], where: str) -> None:
        """Raise ValueError unless the kind's fields of ``record`` (untrusted JSON) are well-formed."""
        for key, type_ in cls.record_fields.items():
            check_key(record, key, type_, where, f"a {cls.kind} node")

    @classmethod
    def from_record(cls, record: dict[str, Any], parents: list["Node"], op: Any = None) -> "Node":
        """The node of a checked record, whose parents are built already."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.describe()})"


def _cannot_select(other: Any) -> TypeError:
    return TypeError(f"cannot select columns with {other!r} ({type(other).__name__}); "
                     "use a column name, a list of names, a Tag, or a node")


class SelectNode(Node):
    """Columns of the input data, by name and tag."""

    kind = "select"
    parent_count = (0, 0)
    record_fields = {"selector": dict}

    def __init__(self, selector: ColumnSelector) -> None:
        super().__init__()
        self.selector = selector

    def resolve_step(self, input_schema: Schema, parents: list[Resolved]) -> Resolved:
        selected = self.selector.resolve(input_schema)
        output = flatten_columns(selected)
        return Resolved(NodeColumns(output, input=selected), input_schema.select_by_name(output),
                        dict.fromkeys(output))

    def evaluate(self, columns: NodeColumns, frame: Any, parents: list[Any]) -> Any:
        return _select(frame, columns.output)

    def describe(self) -> str:
        return self.selector.describe()

    def columns_for_operator(self, columns: NodeColumns) -> list[Any]:
        return list(columns.input)

    def data_columns(self, columns: NodeColumns) -> list[str]:
        return list(columns.output)

    def to_record(self) -> dict[str, Any]:
        return {"selector": self.selector.to_dict()}

    @classmethod
    def check_record(cls, record: dict[str, Any], where: str) -> None:
        super().check_record(record, where)
        ColumnSelector.check_dict(record["selector"], f"{where}, selector")

    @classmethod
    def from_record(cls, record: dict[str, Any], parents: list[Node], op: Any = None) -> "SelectNode":
        return cls(ColumnSelector.from_dict(record["selector"]))


class OpNode(Node):
    """An operator applied to its parent's output, plus the columns it depends on: columns of the
    input data (named), or the outputs of graph nodes (derived columns, e.g. a ``TargetEncoding``
    target computed by a ``LambdaOp``), which are the node's further parents."""

    kind = "op"
    parent_count = (1, None)
    record_fields = {"op": dict}  # the operator's record belongs to the saved-workflow format

    def __init__(self, parent: Node, op: GraphOperator, dependency_nodes: Sequence[Node] | None = None) -> None:
        if dependency_nodes is None:
            dependency_nodes = [d for d in op.dependencies() if isinstance(d, Node)]
        super().__init__([parent, *dependency_nodes])
        self.op = op

    def resolve_step(self, input_schema: Schema, parents: list[Resolved]) -> Resolved:
        parent, derived = parents[0], parents[1:]
        for node, resolved in zip(self.parents[1:], derived):
            if hasattr(self.op, "bind_dependency"):  # a node-valued parameter learns its columns
                self.op.bind_dependency(node, resolved.columns.output)
        columns = self.parents[0].columns_for_operator(parent.columns)
        given = set(parent.columns.output).union(*(d.columns.output for d in derived))
        extra = [d for d in self.op.dependencies() if isinstance(d, str) and d not in given]
        dependency = ColumnSelector(extra).resolve(input_schema)
        context = parent.schema + Schema([c for d in derived for c in d.schema]) \
            + input_schema.select_by_name(dependency)
        schema = self.op.compute_output_schema(context, columns)
        return Resolved(NodeColumns(schema.column_names, input=columns, dependency=dependency), schema,
                        dict.fromkeys(schema.column_names, self))

    def evaluate(self, columns: NodeColumns, frame: Any, parents: list[Any]) -> Any:
        out = self.op.transform(columns.input, self.operator_input(columns, frame, parents[0], parents[1:]))
        return _select(out, columns.output)

    def operator_input(self, columns: NodeColumns, frame: Any, parent_output: Any,
                       derived: Sequence[Any] = ()) -> Any:
        """The frame the operator gets: its parent's output, plus the outputs of its dependency
        nodes (``derived``) and the dependency columns of ``frame``, on the device the operator
        runs on (a host-only operator gets GPU partitions on the host; a run of them shares one
        copy, as each passes its host output on)."""
        device = backend.device_for(self.op, frame)
        parent_output = backend.to_frame_device(parent_output, device)
        parts, have = [parent_output], set(parent_output.columns)
        for output in derived:
            new = [c for c in output.columns if c not in have]
            have.update(new)
            parts.append(backend.to_frame_device(output[new], device).loc[parent_output.index])
        if columns.dependency:
            parts.append(backend.to_frame_device(frame[columns.dependency], device).loc[parent_output.index])
        return parts[0] if len(parts) == 1 else backend.concat(parts, axis=1)

    def describe(self) -> str:
        return f"{self.parents[0].describe_source()} >> {self.op.label}"

    def describe_term(self) -> str:
        return f"({self.describe()})"

    @classmethod
    def from_record(cls, record: dict[str, Any], parents: list[Node], op: Any = None) -> "OpNode":
        return cls(parents[0], op, dependency_nodes=parents[1:])


class ConcatNode(Node):
    """The outputs of several nodes side by side; rows dropped in one branch go from all."""

    kind = "concat"
    parent_count = (1, None)

    def resolve_step(self, input_schema: Schema, parents: list[Resolved]) -> Resolved:
        origins: dict[str, Node | None] = {}
        first: dict[str, Node] = {}
        for node, parent in zip(self.parents, parents):
            for name, origin in parent.origins.items():
                other = first.setdefault(name, node)
                if other is not node and origins[name] is not origin:
                    raise ValueError(f"column {name!r} is produced by two branches of the graph, "
                                     f"{other.describe()} and {node.describe()}; rename it in one branch "
                                     "(e.g. >> ops.Rename(postfix=...)) or drop it from one (- [name])")
                origins[name] = origin
        # Two branches may give one column only when both carry the same data (checked above).
        merged = Schema([c for parent in parents for c in parent.schema])
        return Resolved(NodeColumns(merged.column_names), merged, origins)

    def evaluate(self, columns: NodeColumns, frame: Any, parents: list[Any]) -> Any:
        device = backend.frame_device(frame)  # a branch ending in a host-only operator comes back
        parents = [backend.to_frame_device(p, device) for p in parents]
        # A column repeated in a later branch holds the same data (resolve_step checks it): left
        # out before the concatenation, which cuDF refuses with repeated names.
        seen: set = set()
        kept = []
        for parent in parents:
            fresh = [c for c in parent.columns if c not in seen]
            seen.update(fresh)
            if fresh:  # a branch whose every column came before carries the same rows too
                kept.append(parent if len(fresh) == len(parent.columns) else parent[fresh])
        return backend.concat(kept, axis=1, join="inner")  # an inner join on the index

    def describe(self) -> str:
        return " + ".join(p.describe_term() for p in self.parents)

    def describe_source(self) -> str:
        return f"({self.describe()})"

    @classmethod
    def from_record(cls, record: dict[str, Any], parents: list[Node], op: Any = None) -> "ConcatNode":
        return cls(parents)


class DropNode(Node):
    """Its parent's output without some columns."""

    kind = "drop"
    parent_count = (1, 1)
    record_fields = {"dropped": list}

    def __init__(self, parent: Node, dropped: Sequence[str]) -> None:
        super().__init__([parent])
        self.dropped = list(dropped)

    def resolve_step(self, input_schema: Schema, parents: list[Resolved]) -> Resolved:
        (parent,) = parents
        schema = parent.schema.without(self.dropped)
        return Resolved(NodeColumns(schema.column_names), schema,
                        {c: parent.origins[c] for c in schema.column_names})

    def evaluate(self, columns: NodeColumns, frame: Any, parents: list[Any]) -> Any:
        return parents[0][columns.output]

    def describe(self) -> str:
        return f"({self.parents[0].describe()}) - {self.dropped}"

    def to_record(self) -> dict[str, Any]:
        return {"dropped": self.dropped}

    @classmethod
    def check_record(cls, record: dict[str, Any], where: str) -> None:
        super().check_record(record, where)
        check_names(record["dropped"], f"{where}, 'dropped'")

    @classmethod
    def from_record(cls, record: dict[str, Any], parents: list[Node], op: Any = None) -> "DropNode":
        return cls(parents[0], record["dropped"])


class PickNode(Node):
    """Some of its parent's output columns, by name (``node["a"]``, ``node[["a", "b"]]``)."""

    kind = "pick"
    parent_count = (1, 1)
    record_fields = {"picked": list}

    def __init__(self, parent: Node, picked: Sequence[str]) -> None:
        super().__init__([parent])
        bad = [n for n in picked if not isinstance(n, str)]
        if bad or not picked:
            raise TypeError(f"node[...] takes a column name or a list of names, got {list(picked)!r}")
        self.picked = list(picked)

    def resolve_step(self, input_schema: Schema, parents: list[Resolved]) -> Resolved:
        (parent,) = parents
        missing = [n for n in self.picked if n not in parent.schema]
        if missing:
            raise KeyError(f"column(s) {missing} picked from {self.parents[0].describe()}, which gives "
                           f"{parent.schema.column_names}")
        schema = parent.schema.select_by_name(self.picked)
        return Resolved(NodeColumns(schema.column_names), schema, {c: parent.origins[c] for c in schema.column_names})

    def evaluate(self, columns: NodeColumns, frame: Any, parents: list[Any]) -> Any:
        return parents[0][columns.output]

    def describe(self) -> str:
        return f"({self.parents[0].describe()})[{self.picked}]"

    def to_record(self) -> dict[str, Any]:
        return {"picked": self.picked}

    @classmethod
    def check_record(cls, record: dict[str, Any], where: str) -> None:
        super().check_record(record, where)
        check_names(record["picked"], f"{where}, 'picked'")

    @classmethod
    def from_record(cls, record: dict[str, Any], parents: list[Node], op: Any = None) -> "PickNode":
        return cls(parents[0], record["picked"])


NODE_KINDS: dict[str, type[Node]] = {cls.kind: cls for cls in (SelectNode, OpNode, ConcatNode, DropNode, PickNode)}


def _node_of_kind(kind: str, parents: Sequence[Node] = (), op: Any = None, selector: ColumnSelector | None = None,
                  dropped: Sequence[str] = ()) -> Node:
    if kind not in NODE_KINDS:
        raise ValueError(f"unknown node kind {kind!r}; the kinds are {sorted(NODE_KINDS)}")
    cls = NODE_KINDS[kind]
    warnings.warn(f"Node({kind!r}, ...) is deprecated: build nodes with `>>`, `+` and `-`, or {cls.__name__}(...)",
                  DeprecationWarning, stacklevel=3)
    fields = {"selector": selector.to_dict() if selector else None, "dropped": list(dropped)}
    return cls.from_record(fields, list(parents), op)  # each kind takes the fields it has


def _select(frame: Any, names: list[str]) -> Any:
    """``frame[names]``, as a shallow copy when ``frame`` holds exactly these columns in this
    order (selecting builds a new frame: about a millisecond per call, several per partition).
    Either way a new frame: an operator that adds a column to its input changes nobody else's."""
    return frame.copy(deep=False) if list(frame.columns) == list(names) else frame[names]
