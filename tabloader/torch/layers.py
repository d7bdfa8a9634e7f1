"""Embedding layers for the categorical columns of a tabloader batch.

A batch from :class:`tabloader.torch.Loader` is ``(features, target)`` with ``features`` a dict
column name -> tensor: an int64 ``(B,)`` tensor per categorical column and a
``(values, offsets)`` pair (offsets of length ``B + 1``) per list (multi-hot) column. The
layers here take that dict and return one float tensor ``(B, sum of dims)``.

* :class:`EmbeddingConfig` -- one table: its size, dim, the features looked up in it, pooling,
  initialization and padding row.
* :func:`configs_from_schema` -- the configs of a fitted workflow's output schema
  (``cardinality`` and suggested ``embedding_dim`` come from Categorify).
* :class:`ConcatenatedEmbeddings` -- one ``nn.Embedding`` per table, outputs concatenated;
  tables can have sparse gradients (train them with ``torch.optim.SparseAdam`` / ``SGD``).
* :class:`MultiHotEmbeddings` -- list columns through ``nn.EmbeddingBag`` (sum / mean).

For one fused kernel over all tables with the optimizer applied inside the backward pass, see
:class:`tabloader.torch.fused.FusedEmbeddingCollection`.

Encoding contract (see the design notes): id 0 is padding (list columns), 1 is null, then the
out-of-vocabulary buckets, then the vocabulary by descending frequency. By default row 0 of
every table is the padding row: it starts at zero, gets no gradient, and is left out of pooled
sums and means.

Example:
    >>> import torch
    >>> from tabloader.torch.layers import EmbeddingConfig, ConcatenatedEmbeddings
    >>> _ = torch.manual_seed(0)
    >>> emb = ConcatenatedEmbeddings([EmbeddingConfig("C1", 10, 4), EmbeddingConfig("C2", 5, 3)])
    >>> emb({"C1": torch.tensor([1, 2]), "C2": torch.tensor([3, 4]), "I1": torch.ones(2)}).shape
    torch.Size([2, 7])
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Iterable, Mapping, Sequence, Union

import torch
from torch import nn
from torch.nn import functional as F

from tabloader.names import internal_names

__all__ = [
    "EmbeddingConfig",
    "configs_from_schema",
    "suggested_embedding_dim",
    "ConcatenatedEmbeddings",
    "MultiHotEmbeddings",
    "init_embedding_",
]

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


def suggested_embedding_dim(cardinality: int, max_dim: int = 512) -> int:
    """The usual heuristic ``round(1.6 * cardinality ** 0.56)``, capped at ``max_dim``.

    Example:
        >>> suggested_embedding_dim(1000), suggested_embedding_dim(10**7)
        (77, 512)
    """
    return int(max(1, min(max_dim, round(1.6 * max(1, cardinality) ** 0.56))))


def configs_from_schema(schema: Any, dim: int | Mapping[str, int] | Callable[[int], int] | None = None,
                        columns: Iterable[str] | None = None, pooling: str = "sum", init: Init = "normal",
                        padding_idx: int | None = 0, max_dim: int = 512) -> list[EmbeddingConfig]:
    """One :class:`EmbeddingConfig` per encoded categorical column of a (workflow output) schema.

    Args:
        schema: a :class:`tabloader.schema.Schema`; the columns tagged ``categorical`` are used
            (or exactly ``columns``). Each needs the ``cardinality`` property Categorify writes.
        dim: the embedding dim: an int for all tables, a dict column -> dim, a callable
            cardinality -> dim, or None for the schema's suggested ``embedding_dim`` (and
            :func:`suggested_embedding_dim` where there is none).
        pooling: pooling of list (multi-hot) columns.
        init, padding_idx: passed to every config.
        max_dim: cap of the heuristic dim.

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


# --------------------------------------------------------------------------------------------
# shared helpers
# --------------------------------------------------------------------------------------------
def init_embedding_(weight: torch.Tensor, init: Init = "normal", padding_idx: int | None = None) -> torch.Tensor:
    """Fill ``weight`` in place by the scheme ``init`` (see :class:`EmbeddingConfig`); zero the padding row."""
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


def get_feature(features: Mapping[str, Any], name: str, table: str) -> Any:
    try:
        return features[name]
    except KeyError:
        raise KeyError(
            f"feature {name!r} (embedding table {table!r}) is not in the batch; "
            f"batch columns: {sorted(features)}") from None


def split_feature(value: Any, name: str, table: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(ids, None)`` for a single-hot tensor, ``(values, offsets)`` for a list feature; dtypes checked."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"feature {name!r}: a list feature must be a (values, offsets) pair, got {len(value)} items")
        values, offsets = value
        _check_int(values, name, table, "values")
        _check_int(offsets, name, table, "offsets")
        if values.dim() != 1 or offsets.dim() != 1:
            raise ValueError(f"feature {name!r}: values and offsets must be 1-D, got shapes "
                             f"{tuple(values.shape)} and {tuple(offsets.shape)}")
        if offsets.numel() < 1:
            raise ValueError(f"feature {name!r}: offsets must have batch_size + 1 entries, got 0")
        if values.device != offsets.device:
            raise ValueError(f"feature {name!r}: values on {values.device} but offsets on {offsets.device}")
        return values, offsets
    _check_int(value, name, table, "ids")
    if value.dim() == 2 and value.shape[1] == 1:
        value = value[:, 0]
    if value.dim() != 1:
        raise ValueError(f"feature {name!r}: single-hot ids must have shape (batch,), got {tuple(value.shape)}")
    return value, None


def _check_int(t: Any, name: str, table: str, what: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"feature {name!r} (table {table!r}): {what} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in (torch.int64, torch.int32):
        raise TypeError(
            f"feature {name!r} (table {table!r}): {what} must be int64 or int32 (encoded category ids), "
            f"got {t.dtype}")


def check_index_range(ids: torch.Tensor, feature: str, cfg: EmbeddingConfig) -> None:
    """Raise an IndexError naming the table if an id is outside ``[0, num_embeddings)`` (one device sync)."""
    if ids.numel() == 0:
        return
    lo, hi = torch.stack([ids.min(), ids.max()]).tolist()
    _range_error(lo, hi, feature, cfg)


def _range_error(lo: int, hi: int, feature: str, cfg: EmbeddingConfig) -> None:
    if lo < 0 or hi >= cfg.num_embeddings:
        bad = lo if lo < 0 else hi
        raise IndexError(
            f"embedding table {cfg.name!r} (feature {feature!r}): index {bad} is out of range "
            f"[0, {cfg.num_embeddings}); encode the column with the fitted workflow, or raise "
            "num_embeddings")


def check_offsets(values: torch.Tensor, offsets: torch.Tensor, feature: str) -> None:
    """Offsets must start at 0, never decrease and end at ``len(values)`` (one device sync)."""
    n = values.numel()
    first, last, decreasing = torch.stack([
        offsets[0], offsets[-1], (offsets.diff() < 0).any().to(offsets.dtype)]).tolist()
    if first != 0 or last != n or decreasing:
        raise ValueError(
            f"feature {feature!r}: offsets must start at 0, be non-decreasing and end at len(values)={n}; "
            f"got first={first}, last={last}{', decreasing' if decreasing else ''}")


def _sparse_set(sparse_columns: Any, by_feature: Mapping[str, EmbeddingConfig]) -> set[str]:
    """Table names selected by ``sparse_columns`` (True/False, or table / feature names)."""
    tables = {cfg.name for cfg in by_feature.values()}
    if sparse_columns is True:
        return tables
    if sparse_columns in (None, False):
        return set()
    names = [sparse_columns] if isinstance(sparse_columns, str) else list(sparse_columns)
    out = set()
    for n in names:
        if n in tables:
            out.add(n)
        elif n in by_feature:
            out.add(by_feature[n].name)
        else:
            raise ValueError(f"sparse column {n!r} has no configured embedding table; "
                             f"tables: {sorted(tables)}, features: {sorted(by_feature)}")
    return out


# --------------------------------------------------------------------------------------------
# layers
# --------------------------------------------------------------------------------------------
_MODULE_DICT_ATTRIBUTES = frozenset(dir(nn.ModuleDict()))  # keys a ModuleDict refuses ("type", "keys", ...)


class _PerTableParameters:
    """Table access, ``output_dim`` and the sparse / dense parameter split of a layer holding one
    module per table in ``self._tables``, a ``ModuleDict`` keyed by ``module_names[table]``
    (table names made valid as module names), and ``configs``, ``sparse_tables``."""

    configs: list[EmbeddingConfig]
    sparse_tables: set[str]
    module_names: dict[str, str]

    def _name_modules(self) -> None:
        self.module_names = internal_names((c.name for c in self.configs), reserved=_MODULE_DICT_ATTRIBUTES)

    def table(self, name: str) -> nn.Module:
        """The module of table ``name`` (as named in its config, whatever characters it holds)."""
        if name not in self.module_names:
            raise KeyError(f"no embedding table {name!r}; tables: {list(self.module_names)}")
        return self._tables[self.module_names[name]]

    @property
    def output_dim(self) -> int:
        return sum(cfg.embedding_dim * len(cfg.features) for cfg in self.configs)

    def sparse_parameters(self) -> list[nn.Parameter]:
        """Weights with sparse gradients (for ``SparseAdam`` / ``SGD``)."""
        return [self.table(c.name).weight for c in self.configs if c.name in self.sparse_tables]

    def dense_parameters(self) -> list[nn.Parameter]:
        """Weights with ordinary dense gradients."""
        return [self.table(c.name).weight for c in self.configs if c.name not in self.sparse_tables]


class ConcatenatedEmbeddings(_PerTableParameters, nn.Module):
    """One ``nn.Embedding`` per table; the embeddings of all configured features, concatenated.

    Args:
        configs: the tables (see :class:`EmbeddingConfig`).
        sparse_columns: tables (or features) whose embedding has sparse gradients
            (``nn.Embedding(sparse=True)``): True for all, or names. Train them with
            ``torch.optim.SparseAdam`` / ``SGD`` over :meth:`sparse_parameters` and the rest of
            the model with any optimizer over :meth:`dense_parameters` (plus the model's other
            parameters). Sparse gradients only touch the rows in the batch: faster steps and
            no dense optimizer state for big tables.
        dropout: dropout probability applied to the concatenated output.
        validate_indices: check every id is in ``[0, num_embeddings)`` before the lookup and
            raise an ``IndexError`` naming the table (a min/max reduction per feature and one
            device sync per batch); False skips the check (an out-of-range id then fails inside
            PyTorch, on GPU as a device-side assert).

    ``forward(features)`` takes the loader's feature dict (extra columns are ignored) and
    returns ``(B, output_dim)`` in the order of the configs and their features. A list feature
    given as ``(values, offsets)`` is pooled with its table's ``pooling``.

    ``table(name)`` is the ``nn.Embedding`` of a table. Table names may hold any character:
    the ``embeddings`` ModuleDict (and so the ``state_dict`` keys) uses ``module_names[name]``,
    the name itself where it is made of letters, digits and ``_``, else a cleaned, unique one
    (``"a.b"`` -> ``"a_b"``).

    Example:
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> emb = ConcatenatedEmbeddings([EmbeddingConfig("user", 100, 8), EmbeddingConfig("item", 50, 4)],
        ...                              sparse_columns=["user"], dropout=0.1)
        >>> out = emb({"user": torch.tensor([3, 4, 5]), "item": torch.tensor([1, 1, 2])})
        >>> out.shape, emb.output_dim
        (torch.Size([3, 12]), 12)
        >>> [p.shape[0] for p in emb.sparse_parameters()], [p.shape[0] for p in emb.dense_parameters()]
        ([100], [50])
    """

    def __init__(self, configs: Sequence[EmbeddingConfig], sparse_columns: Any = (), dropout: float = 0.0,
                 validate_indices: bool = True) -> None:
        super().__init__()
        self._by_feature = check_configs(configs)
        self.configs = list(configs)
        self.sparse_tables = _sparse_set(sparse_columns, self._by_feature)
        self.validate_indices = validate_indices
        self._name_modules()
        self.embeddings = nn.ModuleDict()
        for cfg in self.configs:
            emb = nn.Embedding(cfg.num_embeddings, cfg.embedding_dim, padding_idx=cfg.padding_idx,
                               sparse=cfg.name in self.sparse_tables)
            init_embedding_(emb.weight, cfg.init, cfg.padding_idx)
            self.embeddings[self.module_names[cfg.name]] = emb
        self.dropout = nn.Dropout(dropout) if dropout else nn.Identity()

    @property
    def feature_names(self) -> list[str]:
        return [f for cfg in self.configs for f in cfg.features]

    @property
    def _tables(self) -> nn.ModuleDict:
        return self.embeddings

    def lookup(self, features: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """The embedding ``(B, dim)`` of every configured feature, by feature name."""
        out = {}
        for cfg in self.configs:
            emb = self.table(cfg.name)
            for feat in cfg.features:
                ids, offsets = split_feature(get_feature(features, feat, cfg.name), feat, cfg.name)
                if self.validate_indices:
                    check_index_range(ids, feat, cfg)
                    if offsets is not None:
                        check_offsets(ids, offsets, feat)
                if offsets is None:
                    out[feat] = emb(ids)
                else:
                    out[feat] = F.embedding_bag(ids, emb.weight, offsets, mode=cfg.pooling, sparse=emb.sparse,
                                                include_last_offset=True, padding_idx=cfg.padding_idx)
        return out

    def forward(self, features: Mapping[str, Any]) -> torch.Tensor:
        return self.dropout(torch.cat(list(self.lookup(features).values()), dim=1))

    def extra_repr(self) -> str:
        return f"output_dim={self.output_dim}, sparse_tables={sorted(self.sparse_tables)}"


class MultiHotEmbeddings(_PerTableParameters, nn.Module):
    """List (multi-hot) features pooled through ``nn.EmbeddingBag`` (``sum`` or ``mean``).

    Each feature comes as ``(values, offsets)`` with ``offsets`` of length ``B + 1`` (the
    loader's format; bag ``b`` is ``values[offsets[b]:offsets[b+1]]``) or as a padded
    ``(B, L)`` id tensor. Padding ids (``padding_idx``, default 0) are left out of the sum and
    of the mean's count; an empty bag gives zeros. Output: ``(B, output_dim)``, the pooled
    embeddings concatenated in config order.

    Args:
        configs: the tables; their ``pooling`` is used.
        sparse_columns: tables / features with sparse gradients (True for all).
        validate_indices: bounds-check ids and offsets first (see :class:`ConcatenatedEmbeddings`).

    ``table(name)`` is the ``nn.EmbeddingBag`` of a table; the ``bags`` ModuleDict is keyed by
    ``module_names[name]`` (see :class:`ConcatenatedEmbeddings`).

    Example:
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> emb = MultiHotEmbeddings([EmbeddingConfig("genres", 20, 4, pooling="mean")])
        >>> values, offsets = torch.tensor([3, 5, 0, 7]), torch.tensor([0, 2, 2, 4])
        >>> out = emb({"genres": (values, offsets)})
        >>> out.shape
        torch.Size([3, 4])
        >>> bool(out[1].abs().sum() == 0), torch.allclose(out[2], emb.table("genres").weight[7])
        (True, True)
    """

    def __init__(self, configs: Sequence[EmbeddingConfig], sparse_columns: Any = (),
                 validate_indices: bool = True) -> None:
        super().__init__()
        self._by_feature = check_configs(configs)
        self.configs = list(configs)
        self.sparse_tables = _sparse_set(sparse_columns, self._by_feature)
        self.validate_indices = validate_indices
        self._name_modules()
        self.bags = nn.ModuleDict()
        for cfg in self.configs:
            bag = nn.EmbeddingBag(cfg.num_embeddings, cfg.embedding_dim, mode=cfg.pooling,
                                  sparse=cfg.name in self.sparse_tables, include_last_offset=True,
                                  padding_idx=cfg.padding_idx)
            init_embedding_(bag.weight, cfg.init, cfg.padding_idx)
            self.bags[self.module_names[cfg.name]] = bag

    @property
    def _tables(self) -> nn.ModuleDict:
        return self.bags

    def lookup(self, features: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        out = {}
        for cfg in self.configs:
            bag = self.table(cfg.name)
            for feat in cfg.features:
                value = get_feature(features, feat, cfg.name)
                if isinstance(value, torch.Tensor) and value.dim() == 2:
                    _check_int(value, feat, cfg.name, "ids")
                    if self.validate_indices:
                        check_index_range(value, feat, cfg)
                    # nn.EmbeddingBag built with include_last_offset takes 2-D input too
                    out[feat] = F.embedding_bag(value, bag.weight, None, mode=cfg.pooling, sparse=bag.sparse,
                                                padding_idx=cfg.padding_idx)
                    continue
                values, offsets = split_feature(value, feat, cfg.name)
                if offsets is None:
                    raise ValueError(
                        f"feature {feat!r} (table {cfg.name!r}) is single-hot; MultiHotEmbeddings takes "
                        "(values, offsets) pairs or padded (B, L) ids -- use ConcatenatedEmbeddings")
                if self.validate_indices:
                    check_index_range(values, feat, cfg)
                    check_offsets(values, offsets, feat)
                out[feat] = bag(values, offsets)
        return out

    def forward(self, features: Mapping[str, Any]) -> torch.Tensor:
        return torch.cat(list(self.lookup(features).values()), dim=1)
