"""Reading workflows saved in format version 1.

Version 2 (:mod:`tabloader.saved_workflow`) reads version 1 documents with its own checks. They
differ in operator state only: version 1 entries did not nest, so Categorify, JoinGroupby and
TargetEncoding numbered their nested values (``keys`` + ``vocab_0``..., ``prefixes`` + ``stats_0``/``null_0``...).
:func:`upgrade_state` rebuilds the nested state they take today.

Example:
    >>> import pandas as pd
    >>> from tabloader import ops
    >>> flat = {"keys": ["C1"], "vocab_0": pd.DataFrame({"value": [7]}), "null_counts": {"C1": 0}}
    >>> state = upgrade_state(ops.Categorify, flat, "node 1")
    >>> sorted(state), state["vocabularies"]["C1"]["value"].tolist()
    (['null_counts', 'vocabularies'], [7])
"""

from __future__ import annotations

from typing import Any

from tabloader import ops


def upgrade_state(cls: type, state: dict[str, Any], where: str) -> dict[str, Any]:
    """The state operator class ``cls`` takes today, from what it saved in format version 1."""
    if not state:
        return state
    try:
        if issubclass(cls, ops.Categorify):
            return _nest(state, "keys", {"vocabularies": "vocab_{}"})
        if issubclass(cls, (ops.JoinGroupby, ops.TargetEncoding)):
            return _nest(state, "prefixes", {"stats": "stats_{}", "null_stats": "null_{}"})
    except KeyError as exc:
        raise ValueError(f"{where}: the state saved in format version 1 lacks the entry {exc}") from None
    return state


def _nest(state: dict[str, Any], names_key: str, numbered: dict[str, str]) -> dict[str, Any]:
    """``state`` with the entries numbered after the names in ``state[names_key]`` gathered in dicts by name."""
    names = state[names_key]
    nested = {key: {name: state[pattern.format(i)] for i, name in enumerate(names)}
              for key, pattern in numbered.items()}
    flat = {pattern.format(i) for pattern in numbered.values() for i in range(len(names))}
    return {**{k: v for k, v in state.items() if k != names_key and k not in flat}, **nested}

