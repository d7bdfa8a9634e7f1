"""Operator base classes.

An :class:`Operator` transforms columns of one partition. A :class:`StatOperator` first learns
statistics over the whole dataset in three steps the workflow runs for it: ``fit_partial`` on
each partition, ``merge`` of two partials (associative, so Dask can tree-reduce them across
partitions, processes and machines), and ``finalize`` which sets the fitted attributes (their
names end in ``_``, as in scikit-learn).

Operators are written once against the API that pandas and cuDF share; differences between
the two belong in :mod:`tabloader.backend`.

Example:
    >>> import pandas as pd
    >>> from tabloader.ops.base import Operator
    >>> class Double(Operator):
    ...     def transform(self, columns, frame):
    ...         return frame[columns] * 2
    >>> Double().transform(["a"], pd.DataFrame({"a": [1, 2]}))["a"].tolist()
    [2, 4]
"""

from __future__ import annotations

import inspect
import threading
from typing import Any, Callable, Sequence

from tabloader.graph import Node, OpNode
from tabloader.schema import ColumnSchema, Schema
from tabloader.selector import Columns, flatten_columns

__all__ = ["Columns", "flatten_columns", "group_name", "NotFittedError", "Operator", "StatOperator",
           "CachedLookups", "check_numeric"]


class NotFittedError(RuntimeError):
    """A statistical operator was used before the workflow that holds it was fit."""


def group_name(group: Any) -> str:
    """The output name of a column group: its names joined by ``_``."""
    return "_".join(group) if isinstance(group, (tuple, list)) else group


class _OperatorType(type):
    """Lets an operator class stand on the right of ``>>``: ``["a"] >> LogOp`` means ``LogOp()``."""

    def __rrshift__(cls, other: Any) -> OpNode:
        return OpNode(Node.coerce(other), cls())


class Operator(metaclass=_OperatorType):
    """A column transform applied to every partition.

    Subclasses override :meth:`transform` and, when they rename or add columns,
    :meth:`output_column_names`; when they change tags or properties,
    :meth:`compute_output_schema`. ``__init__`` only stores parameters, under attribute
    names equal to the argument names, so :meth:`get_config` can read them back.
    """

    #: False for operators that can drop rows (filters); row counts then need a pass.
    preserves_rows: bool = True
    #: False for operators whose rows are new ones (Groupby's groups), not some of their input's.
    keeps_input_rows: bool = True
    #: Tags added to (and removed from) every output column.
    output_tags: tuple[str, ...] = ()
    remove_tags: tuple[str, ...] = ()
    #: The devices whose data :meth:`transform` and ``fit_partial`` take: ``"cpu"`` (pandas) and
    #: ``"cuda"`` (cuDF). An operator that cannot work on cuDF data declares
    #: ``runs_on = frozenset({"cpu"})`` and says why in :attr:`device_note`; the workflow then
    #: hands it GPU partitions copied to the host, once for a whole run of such operators
    #: (:func:`tabloader.backend.device_for`). docs/operators.md's table of where each operator
    #: runs is generated from these two attributes (:mod:`tabloader.ops.devices`).
    runs_on: frozenset = frozenset({"cpu", "cuda"})
    #: How the operator runs on the GPU, or why it does not (one sentence, for the docs).
    device_note: str = ""
    #: True for operators that take a string column as arrow dictionary codes (they normalize
    #: it with the encoding module, which reads the codes) and output no input column as it is:
    #: a workflow then lets the reader skip decoding the strings of columns only they read
    #: (:attr:`tabloader.plan.Plan.encoded_only_columns`). Not inherited: a subclass may read
    #: its columns otherwise (``frame[c].str``), so it says so itself.
    takes_coded_strings: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.takes_coded_strings = bool(cls.__dict__.get("takes_coded_strings", False))

    # --- what subclasses implement ------------------------------------------------------
    def transform(self, columns: Columns, frame: Any) -> Any:
        """Return a frame holding the output columns computed from ``frame[columns]``."""
        raise NotImplementedError

    def output_column_names(self, columns: Columns) -> list[str]:
        return flatten_columns(columns)

    def dependencies(self) -> list[Any]:
        """Extra columns the operator reads beside the selected ones: names of input columns, or
        graph nodes whose outputs it reads (derived columns; see :meth:`parameter_columns`)."""
        return []

    def bind_dependency(self, node: Node, names: Sequence[str]) -> None:
        """Called by the graph when it resolves: ``node``, the value of a parameter of this
        operator, gives the columns ``names``."""
        for param, value in list(vars(self).items()):
            if value is node:
                self.__dict__.setdefault("_dependency_columns", {})[param] = list(names)

    def parameter_columns(self, param: str) -> list[str]:
        """The column names a parameter means: a name, a list of names, or a graph node (its
        output columns, known once the workflow resolved the graph).

        Example:
            >>> from tabloader.ops import TargetEncoding, LambdaOp
            >>> import numpy as np
            >>> TargetEncoding(["y"]).parameter_columns("target")
            ['y']
        """
        value = getattr(self, param)
        if isinstance(value, Node):
            bound = self.__dict__.get("_dependency_columns", {}).get(param)
            if bound is None:
                raise NotFittedError(f"{self.label}: the columns of {param}={value.describe()} are known once a "
                                     "workflow resolves the graph (Workflow.fit)")
            return list(bound)
        return [value] if isinstance(value, str) else list(value)

    def dependency_parameter(self, param: str) -> list[Any]:
        """What :meth:`dependencies` lists for a column parameter: the node itself, or its names."""
        value = getattr(self, param)
        return [value] if isinstance(value, Node) else self.parameter_columns(param)

    def compute_output_schema(self, input_schema: Schema, columns: Columns) -> Schema:
        """Schema of the output columns. By default each output keeps its input's schema."""
        out = []
        for name in self.output_column_names(columns):
            col = input_schema[name] if name in input_schema else ColumnSchema(name)
            if self.remove_tags:
                col = col.without_tags(*self.remove_tags)
            if self.output_tags:
                col = col.with_tags(*self.output_tags)
            out.append(col)
        return Schema(out)

    # --- parameters and state -----------------------------------------------------------
    def get_config(self) -> dict[str, Any]:
        """The constructor arguments (JSON-serializable) that rebuild this operator."""
        params = inspect.signature(type(self).__init__).parameters
        return {name: self._config_value(name) for name in params
                if name != "self" and params[name].kind not in (params[name].VAR_POSITIONAL, params[name].VAR_KEYWORD)}

    def _config_value(self, param: str) -> Any:
        """A parameter as saved: a graph node as the columns it gives once resolved (the saved
        graph keeps the node itself as a parent of this operator's node)."""
        value = getattr(self, param)
        bound = self.__dict__.get("_dependency_columns", {}).get(param)
        return bound if isinstance(value, Node) and bound is not None else value

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "Operator":
        return cls(**config)

    def get_state(self) -> dict[str, Any]:
        """Fitted arrays and values: DataFrames/Series/arrays are saved as parquet, the rest as JSON."""
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`get_state` returned."""

    @property
    def label(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"

    # --- graph composition --------------------------------------------------------------
    def __rrshift__(self, other: Any) -> OpNode:
        return OpNode(Node.coerce(other), self)


class StatOperator(Operator):
    """An operator that learns statistics over the dataset before it can transform."""

    def fit_partial(self, columns: Columns, frame: Any) -> Any:
        """Statistics of one partition (small: counts, sums, sketches)."""
        raise NotImplementedError

    def merge(self, left: Any, right: Any) -> Any:
        """Combine two partial statistics. Must be associative."""
        raise NotImplementedError

    def finalize(self, columns: Columns, merged: Any) -> None:
        """Turn the merged statistics into fitted attributes (names ending in ``_``)."""
        raise NotImplementedError

    def clear(self) -> None:
        """Forget fitted attributes, so fit starts afresh."""
        for name in [k for k in vars(self) if k.endswith("_") and not k.startswith("_")]:
            delattr(self, name)

    @property
    def is_fitted(self) -> bool:
        return any(k.endswith("_") and not k.startswith("_") for k in vars(self))

    def check_is_fitted(self, columns: Columns | None = None) -> None:
        if not self.is_fitted:
            where = f" on {flatten_columns(columns)}" if columns is not None else ""
            raise NotFittedError(f"{self.label}{where} is not fitted: call Workflow.fit(dataset) before transform")

    def fitted_entry(self, attribute: str, key: str, columns: Sequence[str]) -> Any:
        """``self.<attribute>[key]``, what fit learnt for ``columns``; NotFittedError naming them if absent.

        Example:
            >>> from tabloader.ops import Categorify
            >>> Categorify().fitted_entry("vocabularies_", "c", ["c"])
            Traceback (most recent call last):
            ...
            tabloader.ops.base.NotFittedError: Categorify on ['c'] is not fitted: call Workflow.fit(dataset) ...
        """
        fitted = getattr(self, attribute, None)
        if fitted is None or key not in fitted:
            raise NotFittedError(f"{self.label} on {list(columns)} is not fitted: call Workflow.fit(dataset) "
                                 "before transform")
        return fitted[key]

    def check_fitted_on(self, columns: Sequence[str], fitted: Any) -> None:
        """Raise NotFittedError naming the ``columns`` missing from ``fitted`` (statistics by column).

        Example:
            >>> from tabloader.ops import Normalize
            >>> Normalize().check_fitted_on(["x", "y"], {"x": 0.5})
            Traceback (most recent call last):
            ...
            tabloader.ops.base.NotFittedError: Normalize was not fitted on column(s) ['y'] (fitted on ['x']); ...
        """
        missing = [c for c in columns if c not in fitted]
        if missing:
            raise NotFittedError(f"{self.label} was not fitted on column(s) {missing} (fitted on {list(fitted)}); "
                                 "refit the workflow")


class CachedLookups:
    """Mixin for statistical operators that cache lookup tables built from their fitted state.

    The cache lives in ``_lookup``; it is neither saved nor pickled (each process, a Dask
    worker too, rebuilds it on first use), and it is dropped whenever the fitted state changes.
    """

    def clear(self) -> None:
        super().clear()  # type: ignore[misc]
        self._lookup = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_lookup", None)
        return state


# One lookup is built at a time in a process: a transform's threads all start on an empty cache,
# and each built its own copy of every lookup at once (8 threads: 8 hash tables of millions of
# keys alive together). Reentrant: a build may use another cached entry.
_BUILDING = threading.RLock()


def cached_entry(op: Any, key: tuple, build: Callable[[], Any]) -> Any:
    """``op``'s ``_lookup`` cache entry ``key`` (see :func:`lookup_key`), made by ``build()`` on
    first use, once: other threads needing it meanwhile wait for it."""
    cache = op.__dict__.setdefault("_lookup", {})
    entry = cache.get(key)
    if entry is None:
        with _BUILDING:
            entry = cache.get(key)
            if entry is None:
                entry = cache[key] = build()
    return entry


_GPU_LIBRARIES = ("tabloader.encoding.gpu", "cupy")


def lookup_key(library: Any, *parts: Any) -> tuple:
    """A key of an operator's ``_lookup`` cache for an entry built with ``library`` (an encoding
    module or an array library): its name, and for the GPU ones the calling thread's current
    GPU -- an entry lives on the GPU it was built on, and work on another GPU builds its own.

    Example:
        >>> import numpy as np
        >>> lookup_key(np, "C1")
        ('numpy', None, 'C1')
    """
    from tabloader import backend

    return (library.__name__, backend.current_gpu(library.__name__ in _GPU_LIBRARIES), *parts)


def check_numeric(op: Operator, frame: Any, columns: Sequence[str], allow_lists: bool = False) -> None:
    """Raise a TypeError naming the operator, column and dtype for non-numeric columns; with
    ``allow_lists`` (element-wise operators) a list column is checked by its elements."""
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    from tabloader.ops.elementwise import list_elements

    from tabloader import backend

    dtypes = frame.dtypes
    for col in columns:
        dtype = dtypes[col]
        # A list dtype first: pandas' is_numeric_dtype raises a TypeError on cuDF's ListDtype.
        if allow_lists and (backend.is_list_dtype(dtype) or not is_numeric_dtype(dtype)):
            dtype = list_elements(op, col, frame[col]).dtype
        if backend.is_list_dtype(dtype) or not is_numeric_dtype(dtype) or is_bool_dtype(dtype):
            raise TypeError(f"{op.label} needs numeric columns, but column {col!r} has dtype {dtype}")
