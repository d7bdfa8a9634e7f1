"""Column graphs: select columns, apply operators with ``>>``, combine with ``+``, drop with ``-``.

Example:
    >>> from tabloader import ops
    >>> node = ["a", "b"] >> ops.FillMissing(0)
    >>> (node + ["label"]).describe()
    '(["a", "b"] >> FillMissing) + ["label"]'
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from tabloader.ops.base import Operator, flatten_columns
from tabloader.schema import Schema, Tags


class ColumnSelector:
    """Columns chosen by name (a tuple of names is a group) and by tag.

    Example:
        >>> from tabloader.schema import ColumnSchema
        >>> s = Schema([ColumnSchema("a", tags={"categorical"}), ColumnSchema("b")])
        >>> ColumnSelector(["b"], tags=["categorical"]).resolve(s)
        ['b', 'a']
    """

    def __init__(self, names: Iterable[Any] = (), tags: Iterable[Any] = ()) -> None:
        self.names = [tuple(n) if isinstance(n, (list, tuple)) else n for n in names]
        self.tags = [str(t) for t in tags]

    def resolve(self, schema: Schema) -> list[Any]:
        """The selected columns of ``schema``; a missing name raises a KeyError listing what exists."""
        missing = [n for n in flatten_columns(self.names) if n not in schema]
        if missing:
            raise KeyError(f"column(s) {missing} selected but not in the data; available: {schema.column_names}")
        out = list(self.names)
        for col in schema.select_by_tag(*self.tags) if self.tags else []:
            if col.name not in out:
                out.append(col.name)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"names": [list(n) if isinstance(n, tuple) else n for n in self.names], "tags": self.tags}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ColumnSelector":
        return cls(data["names"], data["tags"])

    def describe(self) -> str:
        parts = [f'"{n}"' if isinstance(n, str) else str(list(n)) for n in self.names] + [f"tag:{t}" for t in self.tags]
        return f"[{', '.join(parts)}]"


class Node:
    """One step of a workflow graph.

    Kinds: ``select`` (columns of the input data), ``op`` (an operator over its parent's
    output), ``concat`` (the outputs of several nodes side by side) and ``drop`` (its parent's
    output without some columns). Resolved column names are set by :meth:`resolve`.
    """

    def __init__(self, kind: str, parents: Sequence["Node"] = (), op: Operator | None = None,
                 selector: ColumnSelector | None = None, dropped: Sequence[str] = ()) -> None:
        self.kind, self.parents, self.op, self.selector = kind, list(parents), op, selector
        self.dropped = list(dropped)
        self.input_columns: list[Any] | None = None  # what the op sees (groups kept)
        self.output_columns: list[str] | None = None
        self.dependency_columns: list[str] = []

    # --- construction -------------------------------------------------------------------
    @classmethod
    def coerce(cls, other: Any) -> "Node":
        """A node from a node, a column name, a tag, or a list of names/tags/nodes."""
        if isinstance(other, Node):
            return other
        if isinstance(other, Tags):
            return cls("select", selector=ColumnSelector(tags=[other]))
        if isinstance(other, str):
            return cls("select", selector=ColumnSelector([other]))
        if isinstance(other, ColumnSelector):
            return cls("select", selector=other)
        if isinstance(other, (list, tuple)):
            nodes = [n for n in other if isinstance(n, Node)]
            names = [n for n in other if isinstance(n, (str, list, tuple)) and not isinstance(n, Tags)]
            tags = [t for t in other if isinstance(t, Tags)]
            plain = [cls("select", selector=ColumnSelector(names, tags))] if names or tags else []
            parts = plain + nodes
            return parts[0] if len(parts) == 1 else cls("concat", parts)
        raise TypeError(f"cannot select columns with {other!r} ({type(other).__name__}); "
                        "use a column name, a list of names, a Tag, or a node")

    def __rshift__(self, op: Any) -> "Node":
        if isinstance(op, type) and issubclass(op, Operator):
            op = op()
        if not isinstance(op, Operator):
            raise TypeError(f"`>>` takes an operator (class or instance), got {op!r}")
        return Node("op", [self], op=op)

    def __rrshift__(self, other: Any) -> "Node":
        raise TypeError("an operator goes on the right of `>>`")

    def __add__(self, other: Any) -> "Node":
        return Node("concat", [self, Node.coerce(other)])

    def __radd__(self, other: Any) -> "Node":
        return Node("concat", [Node.coerce(other), self])

    def __sub__(self, other: Any) -> "Node":
        names = [other] if isinstance(other, str) else list(other)
        return Node("drop", [self], dropped=names)

    # --- traversal ----------------------------------------------------------------------
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
        """Resolve column names against the input data's schema; return this node's output schema."""
        schemas: dict[int, Schema] = {}
        for node in self.walk():
            schemas[id(node)] = node._resolve_one(input_schema, [schemas[id(p)] for p in node.parents])
        return schemas[id(self)]

    def _resolve_one(self, input_schema: Schema, parent_schemas: list[Schema]) -> Schema:
        if self.kind == "select":
            self.input_columns = self.selector.resolve(input_schema)
            self.output_columns = flatten_columns(self.input_columns)
            return input_schema.select_by_name(self.output_columns)
        if self.kind == "concat":
            self._check_no_clash(parent_schemas)
            merged = Schema([c for s in parent_schemas for c in s])
            self.output_columns = merged.column_names
            return merged
        if self.kind == "drop":
            self.output_columns = [c for c in parent_schemas[0].column_names if c not in self.dropped]
            return parent_schemas[0].without(self.dropped)
        parent = self.parents[0]
        self.input_columns = parent.input_columns if parent.kind == "select" else list(parent.output_columns)
        deps = self.op.dependencies()
        self.dependency_columns = ColumnSelector([d for d in deps if d not in parent.output_columns]).resolve(input_schema)
        context = parent_schemas[0] + input_schema.select_by_name(self.dependency_columns)
        out = self.op.compute_output_schema(context, self.input_columns)
        self.output_columns = out.column_names
        return out

    def _check_no_clash(self, parent_schemas: list[Schema]) -> None:
        """Two branches may give the same column only when both carry the same data: the input
        column passed through unchanged, or the output of one and the same node."""
        first: dict[str, Node] = {}
        for parent, schema in zip(self.parents, parent_schemas):
            for name in schema.column_names:
                other = first.setdefault(name, parent)
                if other is not parent and other._origin(name) is not parent._origin(name):
                    raise ValueError(f"column {name!r} is produced by two branches of the graph, "
                                     f"{other.describe()} and {parent.describe()}; rename it in one branch "
                                     "(e.g. >> ops.Rename(postfix=...)) or drop it from one (- [name])")

    def _origin(self, name: str) -> "Node | None":
        """The op node that computed column ``name`` of this node's output (None: the input column)."""
        if self.kind == "select":
            return None
        if self.kind == "op":
            return self
        holders = [p for p in self.parents if name in (p.output_columns or [])]
        return holders[-1]._origin(name)

    def describe(self) -> str:
        if self.kind == "select":
            return self.selector.describe()
        if self.kind == "concat":
            return " + ".join(f"({p.describe()})" if p.kind == "op" else p.describe() for p in self.parents)
        if self.kind == "drop":
            return f"({self.parents[0].describe()}) - {self.dropped}"
        inner = self.parents[0].describe()
        inner = f"({inner})" if self.parents[0].kind == "concat" else inner
        return f"{inner} >> {self.op.label}"

    def __repr__(self) -> str:
        return f"Node({self.describe()})"
