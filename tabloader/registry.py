"""What a saved workflow may name: registered operator classes and trusted functions.

A saved workflow directory is untrusted input, like a downloaded model file. It names operator
classes and functions as ``"module:qualname"`` strings, and loading must never turn such a
string into an import or a call. So names are only looked up, never imported:

- **Operator classes** come from a registry. The built-in operators are registered; an operator
  of your own is registered by your code, before :meth:`Workflow.load <tabloader.Workflow.load>`,
  with :func:`register_operator` (a decorator too). Saving an unregistered operator is refused.
- **Functions** (``LambdaOp(f)``, ``Filter(f)``, ``Rename(f=...)``, any callable parameter) are
  found only in the allow-list the caller of ``load`` passes: ``trusted=[my_fn, my_module]``
  (function objects, or modules meaning "the functions defined in them"). Functions that could
  not be found again that way (lambdas, closures, ``functools.partial``, bound methods, callable
  instances, functions of ``__main__``) are refused when the workflow is saved.

Example:
    >>> import tabloader as tl
    >>> from tabloader.ops import Operator
    >>> @tl.register_operator
    ... class Negate(Operator):
    ...     def transform(self, columns, frame):
    ...         return -frame[columns]
    >>> operator_name(Negate) == f"{Negate.__module__}:Negate"
    True
    >>> import numpy as np
    >>> TrustedFunctions([np.sqrt]).resolve("numpy:sqrt", "node 1 (LambdaOp), parameter f") is np.sqrt
    True
"""

from __future__ import annotations

import functools
import inspect
import sys
import types
from typing import Any, Callable, Iterable

import numpy as np

from tabloader import ops
from tabloader.ops.base import Operator


class UntrustedError(ValueError):
    """A saved workflow names an operator class that is not registered or a function that is not trusted."""


# Operator classes.
_OPERATORS: dict[str, type] = {}  # saved name -> class
_NAMES: dict[type, str] = {}      # class -> the name it is saved under


def register_operator(cls: type | None = None, *, name: str | None = None) -> Any:
    """Let :meth:`Workflow.load <tabloader.Workflow.load>` (and YAML specs) build operator ``cls``.

    ``cls`` is saved under ``name`` (default ``"module:qualname"``). Registering the same name
    again with a class of the same ``module:qualname`` replaces it (a re-run notebook cell);
    a name taken by another class raises ``ValueError``. Returns ``cls``, so it works as a
    decorator, with or without arguments.

    Example:
        >>> import tabloader as tl
        >>> from tabloader.ops import Operator
        >>> @tl.register_operator(name="example:Square")
        ... class Square(Operator):
        ...     def transform(self, columns, frame):
        ...         return frame[columns] ** 2
        >>> operator_class("example:Square") is Square
        True
    """
    if cls is None:
        return functools.partial(register_operator, name=name)
    if not (isinstance(cls, type) and issubclass(cls, Operator)) or cls in (Operator, ops.StatOperator):
        raise TypeError(f"register_operator takes a subclass of tabloader.ops.Operator, got {cls!r}")
    name = name or _qualified(cls)
    if not isinstance(name, str) or not name:
        raise TypeError(f"an operator's name must be a non-empty string, got {name!r}")
    taken = _OPERATORS.get(name)
    if taken is not None and taken is not cls and _qualified(taken) != _qualified(cls):
        raise ValueError(f"operator name {name!r} is already registered for {_qualified(taken)}; "
                         f"register {_qualified(cls)} under another name (register_operator(cls, name=...))")
    _OPERATORS[name] = cls
    _NAMES[cls] = name
    return cls


def operator_name(cls: type) -> str:
    """The name operator class ``cls`` is saved under; ``ValueError`` if it is not registered."""
    try:
        return _NAMES[cls]
    except KeyError:
        raise ValueError(f"operator class {_qualified(cls)} is not registered, so a saved workflow could not be "
                         f"loaded again: register it with tabloader.register_operator({cls.__name__}) "
                         "(or decorate the class with @tabloader.register_operator)") from None


def operator_class(name: str, where: str = "", short_names: bool = False) -> type:
    """The registered operator class saved as ``name``; nothing is imported.

    ``short_names=True`` (YAML specs) also accepts a class name (``"Categorify"``) when exactly
    one registered class has it. An unknown name raises :class:`UntrustedError` saying how to
    register it; ``where`` prefixes the message.
    """
    if isinstance(name, str) and name in _OPERATORS:
        return _OPERATORS[name]
    matches = {c for c in _OPERATORS.values() if c.__name__ == name} if short_names else set()
    if len(matches) == 1:
        return matches.pop()
    prefix = f"{where}: " if where else ""
    if len(matches) > 1:
        raise UntrustedError(f"{prefix}operator {name!r} is ambiguous; use one of "
                             f"{sorted(_NAMES[c] for c in matches)}")
    known = sorted({c.__name__ if short_names else n for n, c in _OPERATORS.items()})
    raise UntrustedError(f"{prefix}unknown operator {name!r}: it is not registered. Only registered operator "
                         "classes are built, and nothing is imported because a file names it: if you trust it, "
                         "import its module and call tabloader.register_operator(TheClass) first. "
                         f"Registered: {', '.join(known)}")


def registered_operators() -> dict[str, type]:
    """All registered operator classes by saved name (a copy)."""
    return dict(_OPERATORS)


def _qualified(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', getattr(obj, '__name__', '?'))}"


for _name in ops.__all__:
    _cls = getattr(ops, _name)
    if isinstance(_cls, type) and issubclass(_cls, Operator) and _cls not in (Operator, ops.StatOperator):
        register_operator(_cls)


# Functions.
def function_name(fn: Callable, where: str = "") -> str:
    """The ``"module:qualname"`` a function is saved as; ``ValueError`` (with the reason) if it
    could not be found again by that name: a lambda, a closure or nested function, a
    ``functools.partial``, a bound method, a callable instance, a function of ``__main__``.

    Example:
        >>> import numpy as np
        >>> function_name(np.log1p)
        'numpy:log1p'
        >>> function_name(lambda x: x)
        Traceback (most recent call last):
        ...
        ValueError: <lambda> cannot be saved: an anonymous lambda has no name to be loaded by. Define it at ...
    """
    prefix = f"{where}: " if where else ""
    reason = _unsaveable_reason(fn)
    if reason:
        raise ValueError(f"{prefix}{reason}")
    module, qualname = _module_and_qualname(fn)
    return f"{module}:{qualname}"


def _module_and_qualname(fn: Callable) -> tuple[Any, Any]:
    """``fn``'s ``__module__`` and ``__qualname__`` (None where missing). numpy 1.x ufuncs
    (``np.log1p``) have neither (numpy 2 gives them ``numpy``): they are numpy's, by name."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if isinstance(fn, np.ufunc) and module is None and qualname is None:
        return "numpy", fn.__name__
    return module, qualname


def _unsaveable_reason(fn: Callable) -> str | None:
    """Why ``fn`` cannot be saved by name (None when it can)."""
    at_module_level = "Define it at module level (def my_fn(...)) and use that."
    if isinstance(fn, functools.partial):
        return f"{fn!r} cannot be saved: a functools.partial carries its arguments. {at_module_level}"
    if inspect.ismethod(fn):
        return f"{fn.__qualname__} cannot be saved: a bound method carries its object. {at_module_level}"
    module, qualname = _module_and_qualname(fn)
    if not isinstance(qualname, str) or not isinstance(module, str):
        return (f"{fn!r} cannot be saved: a callable instance of {type(fn).__name__} (or a method of a built-in "
                f"type) has no module-level name. {at_module_level}")
    if "<lambda>" in qualname:
        return f"{qualname} cannot be saved: an anonymous lambda has no name to be loaded by. {at_module_level}"
    if "<locals>" in qualname:
        return (f"{module}:{qualname} cannot be saved: a function defined inside another function (a closure) "
                f"has no name to be loaded by. {at_module_level}")
    if module == "__main__":
        return (f"{qualname} is defined in __main__, which is a different module in every program; "
                "move it into an importable module")
    found: Any = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if found is not fn:
        return (f"{module}:{qualname} cannot be saved: that name does not lead back to this function "
                f"(it was renamed or replaced). {at_module_level}")
    return None


class UntrustedFunction:
    """Stands for a function a saved workflow names but the caller did not trust: it can be
    shown (``tabloader inspect``) but calling it raises :class:`UntrustedError`."""

    def __init__(self, name: str, where: str) -> None:
        self.name, self.where = name, where
        self.__name__ = self.__qualname__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise UntrustedError(f"{self.where}: function {self.name!r} was not loaded (not trusted); "
                             "load the workflow with trusted=[the function] to run it")

    def __repr__(self) -> str:
        return f"<untrusted function {self.name}, not loaded>"


class TrustedFunctions:
    """The functions a caller of ``Workflow.load`` allows, by saved name.

    Args:
        trusted: functions, and modules meaning every function defined in that module (its
            module-level functions whose ``__module__`` is the module). Not strings: a name
            would need an import.
    """

    def __init__(self, trusted: Iterable[Any] = ()) -> None:
        if isinstance(trusted, (str, types.ModuleType)) or callable(trusted):
            trusted = [trusted]
        self._by_name: dict[str, Callable] = {}
        for item in trusted:
            if isinstance(item, types.ModuleType):
                self._by_name.update(_functions_of(item))
            elif isinstance(item, str):
                raise TypeError(f"trusted takes functions and modules, not names such as {item!r}: pass the "
                                "function itself (a name would need an import, which load never does)")
            elif callable(item) and not isinstance(item, type):
                self._by_name[function_name(item, "a trusted function")] = item
            else:
                raise TypeError(f"trusted takes functions and modules, got {item!r} ({type(item).__name__})")

    def resolve(self, name: str, where: str, placeholder: bool = False) -> Callable:
        """The trusted function saved as ``name``; otherwise :class:`UntrustedError` naming it and
        ``where`` (or, with ``placeholder=True``, an :class:`UntrustedFunction` standing for it)."""
        if name in self._by_name:
            return self._by_name[name]
        if placeholder:
            return UntrustedFunction(name, where)
        short = name.rpartition(":")[2].rpartition(".")[2]
        raise UntrustedError(f"{where}: function {name!r} is not trusted. Loading never imports or calls a "
                             f"function because a file names it; if you trust this one, pass it: "
                             f"Workflow.load(path, trusted=[{short}]) (the function object, or its module)")


def _functions_of(module: types.ModuleType) -> dict[str, Callable]:
    """The module-level functions defined in ``module``, by saved name (imported names are left out)."""
    found = {}
    for attr, value in vars(module).items():
        if callable(value) and not isinstance(value, type) and _unsaveable_reason(value) is None \
                and _module_and_qualname(value) == (module.__name__, attr):
            found[f"{module.__name__}:{attr}"] = value
    return found
