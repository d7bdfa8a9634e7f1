"""Workflow specs: an unfitted workflow written as YAML (or JSON), or as a Python file.

The YAML language is :data:`SPEC_HELP` (what ``tabloader fit --help`` prints). Operators are
looked up in the operator registry by name, so a spec never imports a module; a Python spec
is a program the user asked to run.

Example:
    >>> spec = {"groups": [{"columns": ["x"], "ops": [{"Clip": {"min_value": 0}}, "Normalize"]}],
    ...         "passthrough": ["label"]}
    >>> workflow_from_spec(spec, "spec.yaml").output_node.describe()
    '(["x"] >> Clip >> Normalize) + ["label"]'
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

SPEC_HELP = """\
WORKFLOW_SPEC is a YAML (or JSON) file or a Python file.

YAML: a mapping with `groups` (a list of column groups, each with `columns: [names]` or
`tag: <tag>` and `ops: [...]`, the operators applied in order) and optional `passthrough`
(columns copied as they are). An operator is a name from tabloader.ops, alone or with its
arguments as a mapping:

    groups:
      - tag: categorical                  # or: columns: [C1, C2, ...]
        ops:
          - Categorify: {freq_threshold: 2}
      - columns: [I1, I2, I3]
        ops: [FillMissing: {fill_val: 0}, Clip: {min_value: 0}, LogOp, Normalize]
    passthrough: [label]

A top-level list is read as `groups` alone.

Python: a file that defines `workflow`, a tabloader.Workflow (not yet fitted), e.g.

    from tabloader import Workflow, ops
    workflow = Workflow((["C1", "C2"] >> ops.Categorify()) + ["label"])
"""

SPEC_SUFFIXES = (".yaml", ".yml", ".json")


class SpecError(ValueError):
    """A workflow spec that cannot be read: the message names the file, the group and the value."""


def load_workflow_spec(path: str, schema: Any = None) -> Any:
    """An unfitted :class:`tabloader.Workflow` from a YAML/JSON or Python spec file (see
    :data:`SPEC_HELP`). ``schema`` (the data's) lets `columns:` and `tag:` groups be checked early."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"workflow spec {path} does not exist")
    suffix = Path(path).suffix.lower()
    if suffix == ".py":
        return _workflow_from_python(path)
    if suffix in SPEC_SUFFIXES:
        return workflow_from_spec(_read_yaml(path), f"workflow spec {path}", schema)
    raise SpecError(f"workflow spec {path}: expected a {', '.join(SPEC_SUFFIXES)} or .py file")


def _workflow_from_python(path: str) -> Any:
    import runpy

    from tabloader.workflow import Workflow

    try:
        namespace = runpy.run_path(path, run_name="tabloader_workflow_spec")
    except Exception as exc:
        raise SpecError(f"workflow spec {path} failed to run: {type(exc).__name__}: {exc}") from exc
    workflow = namespace.get("workflow")
    if not isinstance(workflow, Workflow):
        got = "nothing" if workflow is None else type(workflow).__name__
        raise SpecError(f"workflow spec {path} must define `workflow`, a tabloader.Workflow (it defines {got})")
    return workflow


def _read_yaml(path: str) -> Any:
    import yaml

    try:
        with open(path) as f:
            return yaml.safe_load(f)
    except yaml.YAMLError as exc:
        raise SpecError(f"workflow spec {path} is not valid YAML: {' '.join(str(exc).split())}") from None


def workflow_from_spec(doc: Any, where: str, schema: Any = None) -> Any:
    """An unfitted workflow from a parsed YAML spec; errors start with ``where`` (the file)."""
    from tabloader.workflow import Workflow

    if isinstance(doc, list):
        doc = {"groups": doc}
    if not isinstance(doc, dict):
        raise SpecError(f"{where}: expected a mapping with `groups` (and `passthrough`), got {type(doc).__name__}")
    unknown = set(doc) - {"groups", "passthrough"}
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {sorted(unknown)}; expected `groups`, `passthrough`")
    groups = doc.get("groups") or []
    passthrough = doc.get("passthrough") or []
    if isinstance(passthrough, str):
        passthrough = [passthrough]
    if not isinstance(passthrough, list) or not all(isinstance(c, str) for c in passthrough):
        raise SpecError(f"{where}: `passthrough` must be a list of column names")
    if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
        raise SpecError(f"{where}: `groups` must be a list of mappings")
    if not groups and not passthrough:
        raise SpecError(f"{where} defines no groups and no passthrough columns")
    outputs = [_group_node(group, f"{where}, group {i + 1}", schema) for i, group in enumerate(groups)]
    if passthrough:
        outputs.append(list(passthrough))
    output = outputs[0]
    for node in outputs[1:]:
        output = output + node
    return Workflow(output)


def _group_node(group: dict[str, Any], where: str, schema: Any) -> Any:
    """One group's selection with its operators applied in order."""
    from tabloader.graph import ColumnSelector, SelectNode

    extra = set(group) - {"columns", "tag", "ops"}
    if extra:
        raise SpecError(f"{where}: unknown key(s) {sorted(extra)}; expected `columns` or `tag`, and `ops`")
    if ("columns" in group) == ("tag" in group):
        raise SpecError(f"{where}: give exactly one of `columns` and `tag`")
    if "columns" in group:
        columns = group["columns"]
        columns = [columns] if isinstance(columns, str) else columns
        if not isinstance(columns, list) or not columns or not all(isinstance(c, str) for c in columns):
            raise SpecError(f"{where}: `columns` must be a non-empty list of column names")
        missing = [c for c in columns if c not in schema] if schema is not None else []
        if missing:
            raise SpecError(f"{where}: column(s) {missing} not in the data (columns: {schema.column_names})")
        node = SelectNode(ColumnSelector(columns))
    else:
        tag = str(group["tag"])
        if schema is not None and not schema.select_by_tag(tag).column_names:
            raise SpecError(f"{where}: no column of the data is tagged {tag!r}")
        node = SelectNode(ColumnSelector(tags=[tag]))
    op_specs = group.get("ops") or []
    for spec in op_specs if isinstance(op_specs, list) else [op_specs]:
        node = node >> make_op(spec, where)
    return node


def make_op(spec: Any, where: str) -> Any:
    """A registered operator from ``Name`` or ``{Name: {arguments}}`` (a class name, or the saved
    name of a registered third-party operator).

    Example:
        >>> make_op({"FillMissing": {"fill_val": -1}}, "group 1")
        FillMissing(fill_val=-1, add_binary_cols=False)
    """
    from tabloader.registry import UntrustedError, operator_class

    if isinstance(spec, str):
        name, kwargs = spec, {}
    elif isinstance(spec, dict) and len(spec) == 1:
        name, kwargs = next(iter(spec.items()))
        kwargs = kwargs or {}
    else:
        raise SpecError(f"{where}: an op is a name or a one-key mapping {{Name: {{arguments}}}}, got {spec!r}")
    try:
        cls = operator_class(str(name), where, short_names=True)
    except UntrustedError as exc:
        raise SpecError(str(exc)) from None
    if not isinstance(kwargs, dict):
        raise SpecError(f"{where}: the arguments of {name} must be a mapping, got {kwargs!r}")
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise SpecError(f"{where}: bad arguments for {name}: {exc}") from None
