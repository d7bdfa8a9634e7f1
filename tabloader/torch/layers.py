"""Embedding layers for the categorical columns of a tabloader batch, one module per table.

A batch from :class:`tabloader.torch.Loader` is ``(features, target)`` with ``features`` a dict
column name -> tensor: an int64 ``(B,)`` tensor per categorical column and a
``(values, offsets)`` pair (offsets of length ``B + 1``) per list (multi-hot) column. The
layers here take that dict and return one float tensor ``(B, sum of dims)``.

* :class:`ConcatenatedEmbeddings` -- one ``nn.Embedding`` per table, outputs concatenated;
  tables can have sparse gradients (train them with ``torch.optim.SparseAdam`` / ``SGD``).
* :class:`MultiHotEmbeddings` -- list columns through ``nn.EmbeddingBag`` (sum / mean).

The tables are described by :class:`~tabloader.torch.config.EmbeddingConfig` (made by hand or
by :func:`~tabloader.torch.config.configs_from_schema`; both are importable from here too). For
all tables in one buffer, looked up by one kernel with the optimizer applied inside the backward
pass, see :class:`tabloader.torch.fused.FusedEmbeddingCollection`.

Example:
    >>> import torch
    >>> from tabloader.torch.layers import EmbeddingConfig, ConcatenatedEmbeddings
    >>> _ = torch.manual_seed(0)
    >>> emb = ConcatenatedEmbeddings([EmbeddingConfig("C1", 10, 4), EmbeddingConfig("C2", 5, 3)])
    >>> emb({"C1": torch.tensor([1, 2]), "C2": torch.tensor([3, 4]), "I1": torch.ones(2)}).shape
    torch.Size([2, 7])
"""

from __future__ import annotations

import warnings
from typing import Any, Mapping, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from tabloader.names import internal_names
from tabloader.schema import suggested_embedding_dim
from tabloader.torch.config import (  # noqa: F401 -- the constants stay importable from here
    DEFAULT_INIT_SCALE,
    INITS,
    POOLINGS,
    EmbeddingConfig,
    Init,
    check_configs,
    configs_from_schema,
    init_embedding_,
)
from tabloader.torch.inputs import (
    check_id_dtype,
    check_index_range,
    check_offsets,
    get_feature,
    split_feature,
)

__all__ = [
    "EmbeddingConfig",
    "configs_from_schema",
    "suggested_embedding_dim",
    "ConcatenatedEmbeddings",
    "MultiHotEmbeddings",
    "init_embedding_",
]


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


_MODULE_DICT_ATTRIBUTES = frozenset(dir(nn.ModuleDict()))  # keys a ModuleDict refuses ("type", "keys", ...)


class _PerTableParameters:
    """Configs, table access, ``output_dim`` and the sparse / dense parameter split of a layer
    holding one module per table in ``self._tables``, a ``ModuleDict`` keyed by
    ``module_names[table]`` (table names made valid as module names)."""

    def _set_configs(self, configs: Sequence[EmbeddingConfig], sparse_columns: Any, validate_indices: bool) -> None:
        self._by_feature = check_configs(configs)
        self.configs = list(configs)
        self.sparse_tables = _sparse_set(sparse_columns, self._by_feature)
        self.validate_indices = validate_indices
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
    given as ``(values, offsets)`` or as padded ``(B, L)`` ids is pooled with its table's
    ``pooling`` (padding ids left out).

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
        self._set_configs(configs, sparse_columns, validate_indices)
        self.embeddings = nn.ModuleDict()
        for cfg in self.configs:
            emb = nn.Embedding(cfg.num_embeddings, cfg.embedding_dim, padding_idx=cfg.padding_idx,
                               sparse=cfg.name in self.sparse_tables)
            init_embedding_(emb.weight, cfg.init, cfg.padding_idx)
            self.embeddings[self.module_names[cfg.name]] = emb
        self.dropout = nn.Dropout(dropout) if dropout else nn.Identity()

    @property
    def feature_names(self) -> list[str]:
        """Deprecated: the configured features, ``[f for cfg in layer.configs for f in cfg.features]``."""
        warnings.warn("ConcatenatedEmbeddings.feature_names is deprecated and will be removed; use "
                      "[f for cfg in layer.configs for f in cfg.features]", DeprecationWarning, stacklevel=2)
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
        self._set_configs(configs, sparse_columns, validate_indices)
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
                    check_id_dtype(value, feat, cfg.name, "ids")
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
