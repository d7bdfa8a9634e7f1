"""The plan: a graph whose columns are resolved, ready to run on partitions.

Resolving a graph against the input data's schema (which columns a tag selects, what each
operator outputs) happens once, when a workflow is fit. The :class:`Plan` keeps the result, is
saved with the workflow and read back by load, so neither transform nor load resolves again
(resolving may call a user's function, such as ``Rename(f=...)``). The graph's nodes stay free
of resolved state: one node can serve workflows fit on different data.

Example:
    >>> import pandas as pd
    >>> from tabloader import ops
    >>> from tabloader.schema import Schema
    >>> frame = pd.DataFrame({"a": [1.0, None], "b": [3, 4]})
    >>> plan = Plan.resolve(["a"] >> ops.FillMissing(0) >> ops.Rename(postfix="_f"), Schema.from_frame(frame))
    >>> plan.input_columns, plan.evaluate(frame)["a_f"].tolist()
    (['a'], [1.0, 0.0])
"""

from __future__ import annotations

from typing import Any, Mapping

from tabloader.graph import Node, NodeColumns, OpNode, SelectNode, resolve
from tabloader.schema import Schema


class Plan:
    """A graph (its ``output`` node) with every node's resolved :class:`~tabloader.graph.NodeColumns`.

    Args:
        output: the graph's output node.
        columns: the columns of every node under ``output`` (as :func:`tabloader.graph.resolve`
            gives them, or as a saved workflow recorded them).
    """

    def __init__(self, output: Node, columns: Mapping[Node, NodeColumns]) -> None:
        missing = [n for n in output.walk() if n not in columns]
        if missing:
            raise ValueError(f"the plan lacks the columns of node(s) {[n.describe() for n in missing]}")
        self.output = output
        self._columns = {node: columns[node] for node in output.walk()}

    @classmethod
    def resolve(cls, output: Node, input_schema: Schema) -> "Plan":
        """Resolve the graph under ``output`` against the input data's schema."""
        return cls(output, resolve(output, input_schema)[0])

    @property
    def nodes(self) -> list[Node]:
        """The graph's nodes, parents before children."""
        return list(self._columns)

    def columns(self, node: Node) -> NodeColumns:
        return self._columns[node]

    @property
    def output_columns(self) -> list[str]:
        return list(self._columns[self.output].output)

    @property
    def input_columns(self) -> list[str]:
        """Columns of the input data the graph reads."""
        cols: list[str] = []
        for node, columns in self._columns.items():
            cols += [c for c in node.data_columns(columns) if c not in cols]
        return cols

    @property
    def encoded_only_columns(self) -> list[str]:
        """Columns of the input data read by nothing but operators that take strings as
        dictionary codes (``takes_coded_strings``, the categorical encoders), straight from a
        selection: a reader may give them as codes (:meth:`tabloader.Dataset.with_coded_strings`),
        as no other operator and no output sees them.

        Example:
            >>> import pandas as pd
            >>> from tabloader import ops
            >>> filled = ["b", "c"] >> ops.FillMissing("?") >> ops.Rename(postfix="_f")
            >>> graph = (["a", "b"] >> ops.Categorify()) + filled
            >>> Plan.resolve(graph, Schema.from_frame(pd.DataFrame({c: ["x"] for c in "abc"}))).encoded_only_columns
            ['a']
        """
        children: dict[int, list[Node]] = {}
        for node in self._columns:
            for parent in node.parents:
                children.setdefault(id(parent), []).append(node)

        def only_encoders(node: Node) -> bool:
            readers = children.get(id(node), [])
            return node is not self.output and bool(readers) and all(
                isinstance(r, OpNode) and getattr(r.op, "takes_coded_strings", False)
                and all(p is not node for p in r.parents[1:]) for r in readers)

        readers: dict[str, list[Node]] = {}
        for node, columns in self._columns.items():
            for name in node.data_columns(columns):
                readers.setdefault(name, []).append(node)
        return [name for name, nodes in readers.items()
                if all(isinstance(n, SelectNode) and only_encoders(n) for n in nodes)]

    @property
    def preserves_rows(self) -> bool:
        """False when an operator may drop rows (a filter)."""
        return all(n.op.preserves_rows for n in self._columns if isinstance(n, OpNode))

    @property
    def keeps_input_rows(self) -> bool:
        """False when an operator makes rows of its own (groups), which have no input row's label."""
        return all(n.op.keeps_input_rows for n in self._columns if isinstance(n, OpNode))

    def evaluate(self, frame: Any, node: Node | None = None, memo: dict[int, Any] | None = None) -> Any:
        """The output of ``node`` (default: the graph's) for one input partition.

        Only the nodes it depends on run, each once per ``memo`` (pass one dict to share
        their outputs between calls on the same partition).
        """
        node = self.output if node is None else node
        memo = {} if memo is None else memo
        if id(node) not in memo:
            parents = [self.evaluate(frame, p, memo) for p in node.parents]
            memo[id(node)] = node.evaluate(self._columns[node], frame, parents)
        return memo[id(node)]

    def operator_input(self, node: OpNode, frame: Any, memo: dict[int, Any]) -> Any:
        """The frame ``node``'s operator gets for one input partition (what fit statistics see)."""
        parent, *derived = [self.evaluate(frame, p, memo) for p in node.parents]
        return node.operator_input(self._columns[node], frame, parent, derived)
