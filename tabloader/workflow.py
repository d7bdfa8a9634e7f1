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

from typing import Any, Iterable


from tabloader import backend, saved_workflow
from tabloader.dataset import Dataset
from tabloader.dataset.core import naming_partition, partition_name
from tabloader.graph import Node, OpNode, column_origins
from tabloader.ops.base import NotFittedError, StatOperator
from tabloader.plan import Plan
from tabloader.schema import Schema

# Partial statistics are merged this many at a time: a tree of merges, so no task holds them all.
_MERGE_FAN_IN = 8


class Workflow:
    """A graph of operators, fit on a dataset and applied to datasets or DataFrames.

    Args:
        output: the graph's output node, e.g. ``cats + conts + ["label"]``.
        progress: show progress bars during fit (and writes of transformed datasets).

    Fitted attributes (set by :meth:`fit` and :meth:`load`): ``plan_``, the graph's columns
    resolved against the data (a :class:`~tabloader.plan.Plan`, computed once per fit and saved
    with the workflow), ``input_schema_`` and ``output_schema_``.

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
        self.plan_: Plan | None = None
        self.input_schema_: Schema | None = None
        self.output_schema_: Schema | None = None
        self._fits = 0  # fits begun: a transformed Dataset checks that its fit is still the workflow's
        ops = [n.op for n in self.output_node.walk() if isinstance(n, OpNode)]
        if len({id(o) for o in ops}) != len(ops):
            raise ValueError("one operator instance is used twice in the graph; create one per use")

    @property
    def nodes(self) -> list[Node]:
        return self.output_node.walk()

    @property
    def stat_nodes(self) -> list[OpNode]:
        return [n for n in self.nodes if isinstance(n, OpNode) and isinstance(n.op, StatOperator)]

    @property
    def is_fitted(self) -> bool:
        return self.plan_ is not None and all(n.op.is_fitted for n in self.stat_nodes)

    @property
    def input_columns(self) -> list[str]:
        """Columns of the input data the fitted workflow reads (none are known before fit)."""
        return self.plan_.input_columns if self.plan_ is not None else []

    @property
    def output_schema(self) -> Schema:
        """Names, dtypes, tags and properties (cardinality, embedding_dim, ...) of the output."""
        return self._fitted(self.output_schema_)

    def __repr__(self) -> str:
        return f"Workflow({self.output_node.describe()}, fitted={self.is_fitted})"

    def fit(self, data: Any, progress: bool | None = None) -> "Workflow":
        """Learn every statistical operator's statistics from ``data`` (Dataset or DataFrame)."""
        dataset = _as_dataset(data)
        progress = self.progress if progress is None else progress
        plan = Plan.resolve(self.output_node, dataset.schema)
        earlier = [(node.op, node.op.get_state()) for node in self.stat_nodes] if self.is_fitted else []
        fitted = self.plan_, self.input_schema_, self.output_schema_
        self._fits += 1
        try:
            for node in self.stat_nodes:
                node.op.clear()
            for phase, nodes in enumerate(self._fit_phases()):
                self._fit_phase(plan, dataset, nodes, f"fit phase {phase + 1}" if phase else "fit", progress)
            # Resolved again: an operator may choose its columns from fitted statistics (DropLowCardinality).
            plan = Plan.resolve(self.output_node, dataset.schema)
            input_schema = dataset.schema.select_by_name(plan.input_columns)
            # The operators declare the output schema again now: its properties (cardinality...) come from fitted state.
            declared = self.output_node.resolve(dataset.schema)
            self.plan_, self.input_schema_ = plan, input_schema
            self.output_schema_ = self._with_actual_dtypes(declared, dataset)
        except BaseException:
            self._restore(earlier)  # a failed fit loses nothing: the earlier fit (or none) stands
            self.plan_, self.input_schema_, self.output_schema_ = fitted
            self._fits -= 1
            raise
        return self

    def _restore(self, states: list[tuple[Any, Any]]) -> None:
        """The operators' fitted ``states`` back (none: every statistical operator unfitted)."""
        for node in self.stat_nodes:
            node.op.clear()
        for op, state in states:
            op.set_state(state)

    def _fit_phases(self) -> list[list[OpNode]]:
        """Stat nodes grouped so that each group depends only on stat nodes of earlier groups."""
        depth: dict[int, int] = {}
        for node in self.nodes:
            upstream = max((depth[id(p)] for p in node.parents), default=0)
            is_stat = isinstance(node, OpNode) and isinstance(node.op, StatOperator)
            depth[id(node)] = upstream + (1 if is_stat else 0)
        phases: dict[int, list[OpNode]] = {}
        for node in self.stat_nodes:
            phases.setdefault(depth[id(node)], []).append(node)
        return [phases[k] for k in sorted(phases)]

    def _fit_phase(self, plan: Plan, dataset: Dataset, nodes: list[OpNode], desc: str, progress: bool) -> None:
        from tabloader.scheduler import compute_tasks, shared_calls

        where = [partition_name(dataset, i) for i in range(dataset.npartitions)]
        coded = dataset.with_coded_strings(plan.encoded_only_columns)  # the encoders read their codes
        parts = shared_calls(_PartialStats(plan, nodes), list(zip(coded.to_delayed(plan.input_columns), where)),
                             "partial-stats")
        merge = _MergeStats(nodes)
        while len(parts) > 1:  # one shared key per level: the nodes (and state fitted upstream) sent once, not per task
            parts = shared_calls(merge, [(parts[i:i + _MERGE_FAN_IN],) for i in range(0, len(parts), _MERGE_FAN_IN)],
                                 "merge-stats")
        merged = compute_tasks(parts, desc, progress=progress, device=dataset.device)[0]
        for node, stats in zip(nodes, merged):
            node.op.finalize(plan.columns(node).input, stats)

    def _with_actual_dtypes(self, declared: Schema, dataset: Dataset) -> Schema:
        """The operators' declared schema (tags, properties) with the dtypes of a transformed empty frame."""
        actual = Schema.from_frame(self.transform_frame(dataset.meta()))
        return Schema(c.with_dtype(actual[c.name].dtype, actual[c.name].is_list) if c.name in actual else c
                      for c in declared)

    def transform(self, data: Any) -> Any:
        """Apply the fitted workflow.

        A :class:`~tabloader.Dataset` gives a lazy Dataset (each partition is transformed when
        read or written); a pandas or cuDF DataFrame gives a DataFrame; a Dask DataFrame
        gives a Dask DataFrame of the same kind (pandas partitions, or cuDF ones for a
        Dask-cuDF DataFrame).
        """
        self._check_fitted()
        if isinstance(data, Dataset):
            self._check_input(data.schema.column_names, "data")
            coded = data.with_coded_strings(self.plan_.encoded_only_columns)  # the encoders read their codes
            return coded.with_transform(_FitTransform(self), self.output_schema, self.input_columns,
                                        self.plan_.preserves_rows, self.progress)
        if backend.is_frame(data):
            self._check_input(list(data.columns), "DataFrame")
            return self._transform_in_memory(data)
        meta = getattr(data, "_meta", None)  # a Dask frame's partitions stay on their device
        return self.transform(Dataset(data, device=None if meta is None else backend.frame_device(meta))).to_ddf()

    def fit_transform(self, data: Any) -> Any:
        return self.fit(data).transform(data)

    def _transform_in_memory(self, frame: Any) -> Any:
        """A DataFrame's rows transformed numbered from 0, as a Dataset of it numbers them at fit:
        TargetEncoding's folds hash that number, and by its own labels a row took another fold
        than at fit and saw its own target. The caller's labels go back on the output."""
        labels = frame.index
        if isinstance(labels, backend.dataframe_lib(backend.frame_device(frame)).RangeIndex) and \
                labels.start == 0 and labels.step == 1:
            return self.transform_frame(frame)
        return self._transform_numbered(frame)

    def transform_frame(self, frame: Any) -> Any:
        """Transform one in-memory partition (its rows keyed by their labels, or by their position
        where labels repeat: branches join on the key)."""
        if not frame.index.is_unique:
            return self._transform_numbered(frame)
        plan = self._fitted(self.plan_)
        out = plan.evaluate(_lists_as_fitted(frame, self.input_schema_))[plan.output_columns]
        return backend.to_frame_device(out, backend.frame_device(frame))  # after a host-only operator too

    def _transform_numbered(self, frame: Any) -> Any:
        """``frame`` transformed with its rows numbered from 0, then given back their labels (as
        pandas users align by them): a dropped row's label goes with it; groups have none."""
        out = self.transform_frame(_rows_numbered(frame))
        if self.plan_.preserves_rows:
            out.index = frame.index
        elif self.plan_.keeps_input_rows:  # some rows dropped: a kept row's number is its position
            out.index = frame.index.take(out.index.values)
        return out

    def inverse_transform(self, frame: Any, oov: Any = None, padding: Any = None) -> Any:
        """Encoded ids of ``frame`` (a pandas or cuDF DataFrame of the workflow's output, or of some
        of its columns) back to values.

        Each column a :class:`~tabloader.ops.Categorify` computed (and no later operator
        changed) is decoded by :meth:`Categorify.inverse_transform` (``oov`` and ``padding``
        are its sentinels); the other columns are kept as they are.

        Example:
            >>> import pandas as pd, tabloader as tl
            >>> from tabloader import ops
            >>> wf = tl.Workflow((["c"] >> ops.Categorify()) + ["y"], progress=False)
            >>> out = wf.fit_transform(pd.DataFrame({"c": ["a", "b", "a"], "y": [1, 0, 1]}))
            >>> back = wf.inverse_transform(out)
            >>> back["c"].tolist(), back["y"].tolist()
            (['a', 'b', 'a'], [1, 0, 1])
        """
        plan = self._fitted(self.plan_)
        by_node: dict[int, tuple[OpNode, list[str]]] = {}
        for name, node in column_origins(plan.output, {n: plan.columns(n) for n in plan.nodes}).items():
            if name in frame.columns and node is not None and hasattr(node.op, "inverse_transform"):
                by_node.setdefault(id(node), (node, []))[1].append(name)
        for node, names in by_node.values():
            decoded = node.op.inverse_transform(frame[names], columns=plan.columns(node).input, oov=oov,
                                                padding=padding)
            frame = _splice(frame, names, decoded)
        return frame

    def _fitted(self, attribute: Any) -> Any:
        """A fitted attribute's value; NotFittedError when the workflow has not been fit (or loaded)."""
        if attribute is None:
            raise NotFittedError("the workflow is not fitted: call Workflow.fit(dataset) (or Workflow.load) first")
        return attribute

    def _check_fitted(self) -> None:
        plan = self._fitted(self.plan_)
        for node in self.stat_nodes:
            node.op.check_is_fitted(plan.columns(node).input)

    def _check_input(self, available: list[str], what: str) -> None:
        missing = [c for c in self.input_columns if c not in available]
        if missing:
            raise KeyError(f"the workflow reads column(s) {missing}, which the {what} lacks; available: {available}")

    def save(self, path: str, overwrite: bool = False) -> None:
        """Write the graph as versioned JSON and fitted states as parquet/JSON, atomically.

        An existing ``path`` raises ``FileExistsError`` unless ``overwrite=True`` (then it is
        replaced once the new directory is complete). Functions in operators' parameters
        are saved by name (``module:qualname``): one that could not be found again by its name
        (a lambda, closure, ``functools.partial``, bound method, callable instance, or a
        function of ``__main__``) raises ``ValueError`` saying why; so does an operator class
        that is not registered (:func:`tabloader.register_operator`).
        """
        self._check_fitted()
        saved_workflow.write(path, self.plan_, self.input_schema_, self.output_schema_, overwrite=overwrite)

    @classmethod
    def load(cls, path: str, trusted: Iterable[Any] = (), untrusted: str = "raise") -> "Workflow":
        """Read a workflow written by :meth:`save`. Nothing is unpickled, imported or called.

        Operator classes must be registered (the built-ins are; see
        :func:`tabloader.register_operator`). A function the workflow uses (``LambdaOp``,
        ``Filter``, ``Rename(f=...)``) is loaded only if ``trusted`` holds it: pass the
        function objects, or modules meaning "the functions defined in this module".

        Args:
            path: the directory :meth:`save` wrote.
            trusted: the functions (and modules of functions) the workflow may use.
            untrusted: ``"raise"`` (default): a function not in ``trusted`` raises
                :class:`tabloader.UntrustedError` naming it, the operator and how to trust it.
                ``"placeholder"``: it is replaced by a stand-in that raises when called, so the
                workflow can be inspected (graph, schemas, statistics) but not run.

        Example:
            >>> import os, tempfile, numpy as np, pandas as pd, tabloader as tl
            >>> from tabloader import ops
            >>> frame = pd.DataFrame({"x": [1.0, 4.0]})
            >>> path = os.path.join(tempfile.mkdtemp(), "wf")
            >>> tl.Workflow(["x"] >> ops.LambdaOp(np.sqrt), progress=False).fit(frame).save(path)
            >>> tl.Workflow.load(path, trusted=[np.sqrt]).transform(frame)["x"].tolist()
            [1.0, 2.0]
            >>> tl.Workflow.load(path)
            Traceback (most recent call last):
            ...
            tabloader.registry.UntrustedError: ...function 'numpy:sqrt' is not trusted...
        """
        if untrusted not in ("raise", "placeholder"):
            raise ValueError(f"untrusted must be 'raise' or 'placeholder', got {untrusted!r}")
        plan, input_schema, output_schema = saved_workflow.read(path, trusted, untrusted == "placeholder")
        wf = cls(plan.output)
        wf.plan_, wf.input_schema_, wf.output_schema_ = plan, input_schema, output_schema
        return wf


class _FitTransform:
    """A workflow's transform of a partition, as fit when a Dataset was transformed: a lazy
    Dataset made before a refit would read rows encoded by the new fit under the old schema
    (an id past the cardinality it shows), or mix both fits in one output."""

    def __init__(self, workflow: Workflow) -> None:
        self.workflow, self.fit_number = workflow, workflow._fits

    def __call__(self, frame: Any) -> Any:
        if self.workflow._fits != self.fit_number:
            raise RuntimeError("the workflow was fit again after this Dataset was made by its transform(); "
                               "call transform() again for the rows of the new fit")
        return self.workflow.transform_frame(frame)


def _rows_numbered(frame: Any) -> Any:
    """``frame`` (the same columns, not copied) with its rows numbered from 0."""
    numbered = frame.copy(deep=False)
    numbered.index = backend.dataframe_lib(backend.frame_device(frame)).RangeIndex(len(frame))
    return numbered


class _PartialStats:
    """Partial statistics of the given stat nodes on one partition (a picklable task); an error
    names the partition (``where``)."""

    def __init__(self, plan: Plan, nodes: list[OpNode]) -> None:
        self.plan, self.nodes = plan, nodes

    def __call__(self, frame: Any, where: str) -> list[Any]:
        memo: dict[int, Any] = {}  # nodes the stat nodes share run once
        if not frame.index.is_unique:  # keyed by position, as transform_frame keys them
            frame = _rows_numbered(frame)
        try:
            return [n.op.fit_partial(self.plan.columns(n).input, self.plan.operator_input(n, frame, memo))
                    for n in self.nodes]
        except Exception as exc:
            raise naming_partition(exc, where)


class _MergeStats:
    """The stat nodes' partial statistics of several partitions merged into one list (a task)."""

    def __init__(self, nodes: list[OpNode]) -> None:
        self.nodes = nodes

    def __call__(self, partials: list[list[Any]]) -> list[Any]:
        result = partials[0]
        for other in partials[1:]:
            result = [n.op.merge(a, b) for n, a, b in zip(self.nodes, result, other)]
        return result


def _splice(frame: Any, replaced: list[str], columns: Any) -> Any:
    """``frame`` with the columns ``replaced`` taken out and ``columns``' columns put where the first was."""
    names = list(frame.columns)
    at = names.index(replaced[0])
    before, after = [c for c in names[:at] if c not in replaced], [c for c in names[at:] if c not in replaced]
    return backend.concat([frame[before], columns, frame[after]], axis=1)


def _lists_as_fitted(frame: Any, schema: Schema) -> Any:
    """``frame`` with the object columns that were list columns at fit as arrow list columns:
    a few rows of only null lists do not look like lists by themselves."""
    from tabloader.encoding.lists import as_list_column

    lists = [c.name for c in schema if c.is_list and c.name in frame.columns and frame[c.name].dtype == object]
    if not lists:
        return frame
    frame = frame.copy(deep=False)  # the caller's frame is left as it is
    for name in lists:
        frame[name] = as_list_column("Workflow", name, frame[name], is_list=True)
    return frame


def _as_dataset(data: Any) -> Dataset:
    return data if isinstance(data, Dataset) else Dataset(data)

