"""Embedding tables described as data: one :class:`EmbeddingConfig` per table.

* :class:`EmbeddingConfig` -- one table: its size, dim, the features looked up in it, pooling,
  initialization and padding row.
* :func:`configs_from_schema` -- the configs of a fitted workflow's output schema
  (``cardinality`` and suggested ``embedding_dim`` come from Categorify).
* :func:`init_embedding_` -- fill a table's weight by a config's ``init``.
* :func:`check_configs` -- the checks every embedding layer makes on its list of configs.

Encoding contract (see the design notes): id 0 is padding (list columns), 1 is null, then the
out-of-vocabulary buckets, then the vocabulary by descending frequency. By default row 0 of
every table is the padding row: it starts at zero, gets no gradient, and is left out of pooled
sums and means.

Example:
    >>> from tabloader.torch.config import EmbeddingConfig, check_configs
    >>> sorted(check_configs([EmbeddingConfig("C1", 10, 4), EmbeddingConfig("C2", 5, 3, features=["a", "b"])]))
    ['C1', 'a', 'b']
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Iterable, Mapping, Sequence, Union

import torch

from tabloader.schema import MAX_EMBEDDING_DIM, suggested_embedding_dim

__all__ = ["EmbeddingConfig", "configs_from_schema", "init_embedding_", "check_configs", "POOLINGS", "INITS"]

POOLINGS = ("sum", "mean")
INITS = ("normal", "uniform", "xavier", "zeros")
DEFAULT_INIT_SCALE = 0.05

Init = Union[str, Callable[[torch.Tensor], Any]]


@dataclasses.dataclass(frozen=True)
class EmbeddingConfig:
    """One embedding table.

    Args:
        name: the table's name (unique within a layer).
        num_embeddings: rows of the table (a Categorify'd column's ``cardinality``: max id + 1).
        embedding_dim: width of a row.
        features: names of the batch features (columns) looked up in this table; empty means
            ``(name,)``. Several features may share a table.
        pooling: ``"sum"`` or ``"mean"`` -- how the ids of one row of a list (multi-hot)
            feature are combined; ignored for single-hot features.
        init: ``"normal"`` (N(0, 0.05)), ``"uniform"`` (U(-0.05, 0.05)), ``"xavier"``
            (Xavier-uniform), ``"zeros"``, or a callable that fills the weight tensor in place.
        padding_idx: the padding row (default 0, per the encoding contract): initialized to
            zero, never updated, and left out of pooled sums and means. None: no padding row.

    Example:
        >>> EmbeddingConfig("C1", 100, 16).features
        ('C1',)
        >>> EmbeddingConfig("genre", 20, 8, features=["genres"], pooling="mean").pooling
        'mean'
    """

    name: str
    num_embeddings: int
    embedding_dim: int
    features: tuple[str, ...] = ()
    pooling: str = "sum"
    init: Init = "normal"
    padding_idx: int | None = 0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"embedding table name must be a non-empty string, got {self.name!r}")
        for field in ("num_embeddings", "embedding_dim"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int,)) and not hasattr(value, "__index__"):
                raise TypeError(f"table {self.name!r}: {field} must be an int, got {value!r}")
            value = int(value)
            if value < 1:
                raise ValueError(f"table {self.name!r}: {field} must be >= 1, got {value}")
            object.__setattr__(self, field, value)
        feats = (self.features,) if isinstance(self.features, str) else tuple(self.features or ())
        object.__setattr__(self, "features", feats or (self.name,))
        if len(set(self.features)) != len(self.features):
            raise ValueError(f"table {self.name!r}: duplicate feature names {list(self.features)}")
        if self.pooling not in POOLINGS:
            raise ValueError(f"table {self.name!r}: pooling must be one of {POOLINGS}, got {self.pooling!r}")
        if isinstance(self.init, str) and self.init not in INITS:
            raise ValueError(f"table {self.name!r}: init must be one of {INITS} or a callable, got {self.init!r}")
        if not isinstance(self.init, str) and not callable(self.init):
            raise TypeError(f"table {self.name!r}: init must be a string or a callable, got {self.init!r}")
        if self.padding_idx is not None:
            p = int(self.padding_idx)
            if not 0 <= p < self.num_embeddings:
                raise ValueError(
                    f"table {self.name!r}: padding_idx {p} is outside [0, {self.num_embeddings})")
            object.__setattr__(self, "padding_idx", p)


def configs_from_schema(schema: Any, dim: int | Mapping[str, int] | Callable[[int], int] | None = None,
                        columns: Iterable[str] | None = None, pooling: str = "sum", init: Init = "normal",
                        padding_idx: int | None = 0, max_dim: int = MAX_EMBEDDING_DIM) -> list[EmbeddingConfig]:
    """One :class:`EmbeddingConfig` per encoded categorical column of a (workflow output) schema.

    Args:
        schema: a :class:`tabloader.schema.Schema`; the columns tagged ``categorical`` are used
            (or exactly ``columns``). Each needs the ``cardinality`` property Categorify writes.
        dim: the embedding dim: an int for all tables, a dict column -> dim, a callable
            cardinality -> dim, or None for the schema's suggested ``embedding_dim`` (and
            :func:`tabloader.schema.suggested_embedding_dim` where there is none).
        pooling: pooling of list (multi-hot) columns.
        init, padding_idx: passed to every config.
        max_dim: cap of the suggested dim.

    Example:
        >>> from tabloader.schema import ColumnSchema, Schema
        >>> s = Schema([ColumnSchema("C1", "int64", {"categorical"}, {"cardinality": 100, "embedding_dim": 16}),
        ...             ColumnSchema("I1", "float32", {"continuous"})])
        >>> [(c.name, c.num_embeddings, c.embedding_dim) for c in configs_from_schema(s)]
        [('C1', 100, 16)]
        >>> configs_from_schema(s, dim=8)[0].embedding_dim
        8
    """
    if columns is None:
        selected = list(schema.select_by_tag("categorical"))
        if not selected:
            raise ValueError(f"the schema has no column tagged 'categorical': {schema!r}")
    else:
        columns = [columns] if isinstance(columns, str) else list(columns)
        selected = [schema[c] for c in columns]
    configs = []
    for col in selected:
        props = col.properties
        card = props.get("cardinality")
        if card is None:
            raise ValueError(
                f"column {col.name!r} has no 'cardinality' property; encode it with Categorify "
                "(and use the fitted workflow's output schema) or build its EmbeddingConfig by hand")
        card = int(card)
        if dim is None:
            d = props.get("embedding_dim") or suggested_embedding_dim(card, max_dim)
        elif isinstance(dim, Mapping):
            if col.name not in dim:
                raise KeyError(f"no embedding dim given for column {col.name!r} (dim has {sorted(dim)})")
            d = dim[col.name]
        elif callable(dim):
            d = dim(card)
        else:
            d = dim
        pad = padding_idx if padding_idx is None or padding_idx < card else None
        configs.append(EmbeddingConfig(col.name, card, int(d), (col.name,), pooling, init, pad))
    return configs


def init_embedding_(weight: torch.Tensor, init: Init = "normal", padding_idx: int | None = None) -> torch.Tensor:
    """Fill ``weight`` in place by the scheme ``init`` (see :class:`EmbeddingConfig`); zero the padding row.

    Example:
        >>> w = init_embedding_(torch.empty(4, 2), "uniform", padding_idx=0)
        >>> bool((w[0] == 0).all()), bool((w.abs() <= DEFAULT_INIT_SCALE).all())
        (True, True)
    """
    with torch.no_grad():
        if callable(init):
            init(weight)
        elif init == "normal":
            weight.normal_(0.0, DEFAULT_INIT_SCALE)
        elif init == "uniform":
            weight.uniform_(-DEFAULT_INIT_SCALE, DEFAULT_INIT_SCALE)
        elif init == "xavier":
            bound = math.sqrt(6.0 / (weight.shape[0] + weight.shape[1]))
            weight.uniform_(-bound, bound)
        elif init == "zeros":
            weight.zero_()
        else:
            raise ValueError(f"unknown init {init!r}; expected one of {INITS} or a callable")
        if padding_idx is not None:
            weight[padding_idx].zero_()
    return weight


def check_configs(configs: Sequence[EmbeddingConfig]) -> dict[str, EmbeddingConfig]:
    """Validate a list of configs (unique table names, each feature in one table); map feature -> config."""
    configs = list(configs)
    if not configs:
        raise ValueError("at least one EmbeddingConfig is needed")
    seen: set[str] = set()
    by_feature: dict[str, EmbeddingConfig] = {}
    for cfg in configs:
        if not isinstance(cfg, EmbeddingConfig):
            raise TypeError(f"expected EmbeddingConfig, got {type(cfg).__name__}: {cfg!r}")
        if cfg.name in seen:
            raise ValueError(f"duplicate embedding table name {cfg.name!r}; table names must be unique")
        seen.add(cfg.name)
        for feat in cfg.features:
            if feat in by_feature:
                raise ValueError(
                    f"feature {feat!r} is configured in two tables: {by_feature[feat].name!r} and {cfg.name!r}")
            by_feature[feat] = cfg
    return by_feature
