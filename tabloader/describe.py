"""Plain-text descriptions of datasets, schemas and fitted workflows (``tabloader inspect``).

An operator's fitted state is described from its shape alone, whatever the operator: dicts of
numbers keyed by column (and dicts of such dicts) become one table with a row per column;
tables, dicts and lists of them are summarized by their sizes; other values are shown.

Example:
    >>> import pandas as pd
    >>> state = {"means": {"x": 1.5, "y": -2.0}, "counts": {"x": 3, "y": 3},
    ...          "vocabularies": {"c": pd.DataFrame({"value": [1, 2]}), "d": pd.DataFrame({"value": [5]})}}
    >>> print("\\n".join(state_lines(state)))
    column           means          counts
    x                  1.5               3
    y                   -2               3
    vocabularies: 2 tables of 1 to 2 rows (3 in all)
"""

from __future__ import annotations

from typing import Any

import numpy as np

SHORT_TEXT = 60  # characters of a value shown before it is cut with "..."
CELL_WIDTH = 14  # characters of a cell of a per-column table
COLUMNS_TEXT = 80  # characters of the list of columns an operator is fit on


def describe_dataset(dataset: Any) -> None:
    print(f"{dataset}\nrows: {dataset.num_rows:,}  partitions: {dataset.npartitions}")
    _print_columns(dataset.schema)
    coded = dataset.source.coded_row_groups()
    if coded is not None and coded[0]:
        per_column, row_groups = coded
        print("string columns stored as dictionary codes only, in row groups (the categorical operators read "
              "them as codes where all of a partition's are):")
        print("  " + short(", ".join(f"{name} {count}/{row_groups}" for name, count in per_column.items()), 200))


def describe_schema(schema: Any, what: str) -> None:
    print(f"{what} schema: {len(schema)} column(s)")
    _print_columns(schema)


def _print_columns(schema: Any) -> None:
    if not len(schema):
        print("  (no columns)")
        return
    width = max(len(c.name) for c in schema)
    for col in schema:
        kind = f"list<{col.dtype}>" if col.is_list else col.dtype
        props = ", ".join(f"{k}={short(v)}" for k, v in col.properties.items())
        print(f"  {col.name:<{width}}  {kind:<10} {','.join(sorted(col.tags)):<24} {props}".rstrip())


def short(value: Any, limit: int = SHORT_TEXT) -> str:
    text = str(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def describe_workflow(workflow: Any, path: str) -> None:
    """Print a loaded workflow's graph, schemas and statistics. Functions loaded as placeholders
    (:class:`tabloader.registry.UntrustedFunction`) are shown by name."""
    from tabloader.graph import OpNode
    from tabloader.ops.base import StatOperator
    from tabloader.registry import UntrustedFunction

    op_nodes = [n for n in workflow.nodes if isinstance(n, OpNode)]
    print(f"workflow {path}: {len(op_nodes)} operator(s), "
          f"{len(workflow.input_schema_)} input column(s) -> {len(workflow.output_schema)} output column(s)")
    print(f"graph: {workflow.output_node.describe()}")
    for node in op_nodes:
        for key, value in node.op.get_config().items():
            if isinstance(value, UntrustedFunction):
                print(f"function: {type(node.op).__name__} {key}={value.name} (not loaded: the CLI trusts no function)")
    describe_schema(workflow.input_schema_, "input")
    describe_schema(workflow.output_schema, "output")
    print("fitted statistics:")
    stat_nodes = [n for n in op_nodes if isinstance(n.op, StatOperator)]
    if not stat_nodes:
        print("  (no statistical operators)")
    for node in stat_nodes:
        cols = [c if isinstance(c, str) else "+".join(c) for c in workflow.plan_.columns(node).input]
        print(f"  {type(node.op).__name__} on {short(', '.join(cols), COLUMNS_TEXT)}")
        for line in state_lines(node.op.get_state()):
            print(f"    {line}")


def state_lines(state: dict[str, Any]) -> list[str]:
    """An operator's fitted state as text: per-column numbers as a table, the rest summarized."""
    per_column: dict[str, dict[str, Any]] = {}
    other: list[str] = []
    for key, value in state.items():
        cells = _per_column(key, value)
        if cells is None:
            other.append(f"{key}: {_summary(value)}")
        for col, label, cell in cells or []:
            per_column.setdefault(col, {})[label] = cell
    return _table(per_column) + other


def _per_column(key: str, value: Any) -> list[tuple[str, str, Any]] | None:
    """``(column, label, number)`` cells of a dict of numbers (or of dicts of numbers); None otherwise."""
    if not isinstance(value, dict) or not value:
        return None
    if all(_is_scalar(v) for v in value.values()):
        return [(str(col), key, v) for col, v in value.items()]
    if all(isinstance(v, dict) and v and all(map(_is_scalar, v.values())) for v in value.values()):
        return [(str(col), f"{key}.{sub}", x) for col, v in value.items() for sub, x in v.items()]
    return None


def _is_scalar(value: Any) -> bool:
    return value is None or (np.isscalar(value) and not isinstance(value, str))


def _table(per_column: dict[str, dict[str, Any]]) -> list[str]:
    if not per_column:
        return []
    labels = list(dict.fromkeys(label for cells in per_column.values() for label in cells))
    width = max(len(c) for c in per_column)
    lines = [f"{'column':<{width}}  " + "  ".join(f"{label:>{CELL_WIDTH}}" for label in labels)]
    for col, cells in per_column.items():
        lines.append(f"{col:<{width}}  " + "  ".join(f"{_cell(cells.get(label)):>{CELL_WIDTH}}" for label in labels))
    return lines


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.6g}"
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return f"{int(value):,}"
    return short(value, CELL_WIDTH)


def _summary(value: Any) -> str:
    if _rows(value) is not None:
        return f"{_rows(value):,} rows"
    if isinstance(value, dict) and value and all(_rows(v) is not None for v in value.values()):
        rows = [_rows(v) for v in value.values()]
        if len(rows) == 1:
            return f"1 table of {rows[0]:,} rows"
        sizes = f"{min(rows):,}" if min(rows) == max(rows) else f"{min(rows):,} to {max(rows):,}"
        return f"{len(rows)} tables of {sizes} rows ({sum(rows):,} in all)"
    if isinstance(value, (dict, list, tuple)):
        return f"{len(value):,} entries"
    return short(value)


def _rows(value: Any) -> int | None:
    """The rows of a table or array (None for anything else)."""
    shape = getattr(value, "shape", ())
    return int(shape[0]) if len(shape) >= 1 else None
