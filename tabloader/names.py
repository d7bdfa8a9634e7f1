"""Internal names for the weights and modules that framework layers build from column names.

Column names may hold anything (``"price/unit"``, ``"user id"``, ``"a.b"``), but Keras refuses
``/`` in weight names and its optimizers build TF scope names from them (no spaces), and
PyTorch refuses ``.`` in module names and names that are attributes of ``nn.ModuleDict``
(``"type"``, ``"keys"``). Layers keep the user's names for everything the user sees (output
dict keys, feature lookups, configs) and use :func:`internal_names` for what the framework
names.
"""

from __future__ import annotations

import re
from typing import Container, Iterable

IDENTIFIER_UNSAFE = r"[^A-Za-z0-9_]"


def internal_names(names: Iterable[str], reserved: Container[str] = (),
                   unsafe: str = IDENTIFIER_UNSAFE) -> dict[str, str]:
    """``{name: internal name}``: unique names without a character matching the regular expression
    ``unsafe`` (by default: only letters, digits and ``_``), none of them in ``reserved``.

    A name without such characters keeps itself (so the weights of ordinary column names keep
    their names in checkpoints). Others get those characters replaced by ``_``, and a ``_1``,
    ``_2``... suffix where that collides with another name.

    Example:
        >>> internal_names(["a b", "a_b", "x.y", "type"], reserved={"type"})
        {'a b': 'a_b_1', 'a_b': 'a_b', 'x.y': 'x_y', 'type': 'type_1'}
        >>> internal_names(["a b", "x/y"], unsafe="/")
        {'a b': 'a b', 'x/y': 'x_y'}
    """
    names = list(names)
    pattern = re.compile(unsafe)
    kept = {n for n in names if not pattern.search(n) and n and n not in reserved}
    used = set(kept)
    out: dict[str, str] = {}
    for name in names:
        if name in kept:
            out[name] = name
            continue
        base = pattern.sub("_", name) or "_"
        candidate, suffix = base, 1
        while candidate in used or candidate in reserved:
            candidate, suffix = f"{base}_{suffix}", suffix + 1
        used.add(candidate)
        out[name] = candidate
    return out
