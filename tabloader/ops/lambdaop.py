"""LambdaOp: a user function applied to every selected column.

The function is saved with the workflow by name, ``module:qualname``, so it must be a named
module-level function: ``Workflow.save`` refuses a lambda, a closure, a ``functools.partial``,
a bound method, a callable instance or a function of ``__main__``, saying why. Loading never
imports it: ``Workflow.load(path, trusted=[f])`` (or ``trusted=[its_module]``) supplies it.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from tabloader import backend
from tabloader.graph import register_function_operator
from tabloader.ops.base import Columns, Operator, flatten_columns
from tabloader.schema import Schema


class LambdaOp(Operator):
    """Apply ``f(series)`` to each selected column (``f(series, frame)`` with a dependency).

    Output columns keep their names, tags and properties. ``node >> f`` is ``node >> LambdaOp(f)``.

    Args:
        f: a module-level function of one column (a pandas or cuDF Series) returning a Series
            or array of the same length, or of ``(column, dependency_frame)`` when
            ``dependency`` is given. A loaded workflow gets it from ``Workflow.load(trusted=...)``.
        dependency: a column name or list of names passed to ``f`` as a DataFrame
            (read from the input data when the selection does not hold them).
        label: the name shown for the operator (default: ``f``'s name).
        dtype: cast the outputs to this dtype (e.g. ``"float32"``).
        tags: tags added to the output columns.
        properties: schema properties set on the output columns (JSON values, e.g.
            ``{"domain": {"min": 0, "max": 9}}``), as NVTabular's ``LambdaOp(properties=...)``.

    Example:
        >>> import pandas as pd
        >>> from tabloader.ops.lambdaop import LambdaOp
        >>> def double(col):
        ...     return col * 2
        >>> LambdaOp(double, dtype="int32").transform(["x"], pd.DataFrame({"x": [1, 2]}))["x"].tolist()
        [2, 4]
        >>> from tabloader.ops import Clip
        >>> from tabloader.workflow import Workflow
        >>> wf = Workflow((["x"] >> Clip(min_value=0)) >> double, progress=False)
        >>> wf.fit_transform(pd.DataFrame({"x": [-1, 2]}))["x"].tolist()
        [0, 4]
    """

    device_note = "Runs where its function runs: on the GPU the function gets cuDF columns."

    def __init__(self, f: Callable[..., Any], dependency: str | Sequence[str] | None = None,
                 label: str | None = None, dtype: Any = None, tags: Sequence[Any] | None = None,
                 properties: dict[str, Any] | None = None) -> None:
        if not callable(f):
            raise TypeError(f"LambdaOp needs a function, got {f!r}")
        self.f = f
        self.dependency = dependency
        self._label = label
        self.dtype = None if dtype is None else _dtype_name(dtype)
        self.tags = None if tags is None else [str(t) for t in ([tags] if isinstance(tags, str) else tags)]
        if properties is not None and not isinstance(properties, dict):
            raise TypeError(f"LambdaOp: properties must be a dict of schema properties, got {properties!r}")
        self.properties = properties

    @property
    def label(self) -> str:
        return self._label or getattr(self.f, "__name__", type(self).__name__)

    def get_config(self) -> dict[str, Any]:
        return {"f": self.f, "dependency": self.dependency, "label": self._label, "dtype": self.dtype,
                "tags": self.tags, "properties": self.properties}

    def dependencies(self) -> list[str]:
        if self.dependency is None:
            return []
        return [self.dependency] if isinstance(self.dependency, str) else list(self.dependency)

    def transform(self, columns: Columns, frame: Any) -> Any:
        deps = self.dependencies()
        dep_frame = frame[deps] if deps else None
        out = {}
        for col in flatten_columns(columns):
            try:
                value = self.f(frame[col], dep_frame) if deps else self.f(frame[col])
            except Exception as exc:
                wrapped = _with_context(exc, f"LambdaOp {self.label} failed on column {col!r}: {exc}")
                if wrapped is exc:
                    raise
                raise wrapped from exc
            if not hasattr(value, "__len__") or len(value) != len(frame):
                raise ValueError(f"LambdaOp {self.label} must return one value per row for column {col!r}; "
                                 f"got {type(value).__name__} of length "
                                 f"{len(value) if hasattr(value, '__len__') else 'n/a'} for {len(frame)} rows")
            if self.dtype is not None:
                value = value.astype(self.dtype)
            out[col] = value
        return backend.frame_from_columns(out, frame.index, like=frame)

    def compute_output_schema(self, input_schema: Schema, columns: Columns) -> Schema:
        schema = super().compute_output_schema(input_schema, columns)
        if self.tags:
            schema = Schema(c.with_tags(*self.tags) for c in schema)
        if self.properties:
            schema = Schema(c.with_properties(**self.properties) for c in schema)
        return schema


register_function_operator(LambdaOp)


def _with_context(exc: Exception, message: str) -> Exception:
    """An exception of the same type with ``message`` (the original when its type needs other arguments)."""
    try:
        return type(exc)(message)
    except Exception:
        return exc


def _dtype_name(dtype: Any) -> str:
    from pandas.api.types import pandas_dtype

    from tabloader.safe_dtypes import check_dtype_string

    return str(pandas_dtype(check_dtype_string(dtype, "LambdaOp dtype")))
