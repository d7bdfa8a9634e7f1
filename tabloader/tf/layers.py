"""Keras layers for categorical columns, sized from a tabloader schema.

* :class:`EmbeddingFeatures` -- single-hot categorical columns: one table per column, one
  ``tf.gather`` per table, the embeddings concatenated (or stacked) into one tensor. The gradient
  with respect to each table is a ``tf.IndexedSlices`` (only the looked-up rows), so sparse-aware
  optimizers (SGD, Adagrad, ...) touch only those rows.
* :class:`MultiHotEmbeddings` -- list (multi-hot) columns given as ``tf.RaggedTensor`` (what
  :class:`~tabloader.tf.KerasSequenceLoader` yields), as ``(values, offsets)`` or as a dense
  0-padded matrix; pooled by ``sum``/``mean``/``sqrtn`` or returned ragged.
* :func:`inputs_from_schema` -- a dict of ``keras.Input`` for the columns of a schema, matching
  the batches of :class:`~tabloader.tf.KerasSequenceLoader`.

Table sizes come from the ``cardinality`` property that the categorical encoder writes into the
workflow's output schema; embedding widths from ``embedding_dim`` when present, else from
:func:`tabloader.schema.suggested_embedding_dim` (the rule the encoder records).

Column names may hold any character: inputs and outputs are keyed by them as they are, while
weight names come from :func:`tabloader.names.internal_names` (Keras refuses ``/`` in them,
and its optimizers turn them into TF scope names, which cannot hold spaces), and
``keras.Input`` names have ``_`` for ``/``.
"""

from __future__ import annotations

import warnings
from typing import Any, Iterable, Mapping, Sequence

import keras
import tensorflow as tf

from tabloader.names import internal_names
from tabloader.schema import MAX_EMBEDDING_DIM, ColumnSchema, Schema, Tags, suggested_embedding_dim

__all__ = ["EmbeddingFeatures", "MultiHotEmbeddings", "inputs_from_schema", "embedding_sizes_from_schema",
           "default_embedding_dim"]


def default_embedding_dim(cardinality: int, max_dim: int = MAX_EMBEDDING_DIM) -> int:
    """Deprecated: :func:`tabloader.schema.suggested_embedding_dim`, the one embedding-size rule.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     default_embedding_dim(10), caught[0].category.__name__
        (6, 'DeprecationWarning')
    """
    warnings.warn("tabloader.tf.default_embedding_dim is deprecated and will be removed; use "
                  "tabloader.schema.suggested_embedding_dim", DeprecationWarning, stacklevel=2)
    return suggested_embedding_dim(cardinality, max_dim)


def _column_cardinality(col: ColumnSchema) -> int:
    card = col.properties.get("cardinality")
    if card is None:
        domain = col.properties.get("domain")  # merlin-style {"min": 0, "max": n - 1}
        if isinstance(domain, Mapping) and domain.get("max") is not None:
            card = int(domain["max"]) + 1
    if card is None:
        raise ValueError(
            f"column {col.name!r} has no 'cardinality' property in the schema; encode it with Categorify "
            f"(which records it) or give the table sizes explicitly"
        )
    return int(card)


def embedding_sizes_from_schema(schema: Schema, dim: int | Mapping[str, int] | None = None,
                                max_dim: int = MAX_EMBEDDING_DIM, tags: Sequence[Any] = (Tags.CATEGORICAL,),
                                lists: bool | None = False) -> dict[str, tuple[int, int]]:
    """``{column: (cardinality, embedding_dim)}`` for the categorical columns of ``schema``.

    ``dim`` fixes the width (an int for all, or a mapping per column); otherwise the column's
    ``embedding_dim`` property is used, else :func:`tabloader.schema.suggested_embedding_dim`
    (at most ``max_dim``). ``lists=False`` keeps single-hot columns only, ``True`` list columns
    only, ``None`` both.
    """
    sizes: dict[str, tuple[int, int]] = {}
    for col in schema.select_by_tag(*tags):
        if lists is not None and bool(col.is_list or col.has_tag(Tags.LIST)) != lists:
            continue
        card = _column_cardinality(col)
        if isinstance(dim, Mapping):
            d = dim.get(col.name)
        else:
            d = dim
        if d is None:
            d = col.properties.get("embedding_dim")
        if d is None:
            d = suggested_embedding_dim(card, max_dim)
        sizes[col.name] = (card, int(d))
    return sizes


def _add_tables(layer: keras.layers.Layer) -> None:
    """One ``[cardinality, dim]`` weight per column of ``layer.table_sizes`` into ``layer.tables``,
    named after the column's internal name."""
    weight_names = internal_names(layer.table_sizes)
    for name, (card, dim) in layer.table_sizes.items():
        layer.tables[name] = layer.add_weight(
            name=f"{weight_names[name]}_embeddings", shape=(card, dim), initializer=layer.embeddings_initializer,
            regularizer=layer.embeddings_regularizer, trainable=True,
        )


def _squeeze_ids(ids: Any, name: str) -> tf.Tensor:
    if isinstance(ids, tf.RaggedTensor):
        raise TypeError(f"column {name!r} is a list column (ragged); use MultiHotEmbeddings for it")
    ids = tf.convert_to_tensor(ids)
    if ids.shape.rank == 2 and ids.shape[-1] == 1:
        ids = tf.squeeze(ids, axis=-1)
    return ids


@keras.saving.register_keras_serializable(package="tabloader")
class EmbeddingFeatures(keras.layers.Layer):
    """Concatenated embeddings of single-hot categorical columns; one ``tf.gather`` per table.

    Args:
        tables: ``{column: (cardinality, dim)}``, in output order (see :meth:`from_schema`).
        combiner: ``"concat"`` (``[batch, sum(dims)]``), ``"stack"`` (``[batch, columns, dim]``,
            equal widths needed) or ``None`` (a dict column -> ``[batch, dim]``).
        embeddings_initializer, embeddings_regularizer: as for ``keras.layers.Embedding``.

    The layer is called on the features dict of a batch (other entries are ignored); each id
    tensor has shape ``[batch]`` or ``[batch, 1]``. Ids must lie in ``[0, cardinality)``: on
    the CPU ``tf.gather`` raises for an id out of range, on the GPU it returns zeros.

    Example:
        >>> import numpy as np
        >>> layer = EmbeddingFeatures({"a": (10, 4), "b": (5, 3)})
        >>> layer({"a": np.array([1, 2]), "b": np.array([0, 4]), "x": np.zeros(2)}).shape
        TensorShape([2, 7])
    """

    def __init__(self, tables: Mapping[str, tuple[int, int]] | Iterable[tuple[str, int, int]],
                 combiner: str | None = "concat", embeddings_initializer: Any = "uniform",
                 embeddings_regularizer: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not isinstance(tables, Mapping):
            tables = {name: (card, dim) for name, card, dim in tables}
        self.table_sizes = {str(k): (int(v[0]), int(v[1])) for k, v in tables.items()}
        if not self.table_sizes:
            raise ValueError("EmbeddingFeatures needs at least one column")
        for name, (card, dim) in self.table_sizes.items():
            if card < 1 or dim < 1:
                raise ValueError(f"column {name!r}: cardinality and dim must be >= 1, got ({card}, {dim})")
        if combiner not in ("concat", "stack", None):
            raise ValueError(f"combiner must be 'concat', 'stack' or None, got {combiner!r}")
        if combiner == "stack" and len({d for _, d in self.table_sizes.values()}) > 1:
            raise ValueError(f"combiner='stack' needs equal embedding dims, got {self.table_sizes}")
        self.combiner = combiner
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.embeddings_regularizer = keras.regularizers.get(embeddings_regularizer)
        self.tables: dict[str, Any] = {}

    @classmethod
    def from_schema(cls, schema: Schema, dim: int | Mapping[str, int] | None = None,
                    max_dim: int = MAX_EMBEDDING_DIM,
                    columns: Sequence[str] | None = None, **kwargs: Any) -> "EmbeddingFeatures":
        """One table per single-hot categorical column of ``schema`` (a workflow's output schema),
        sized by its ``cardinality`` property; see :func:`embedding_sizes_from_schema`."""
        if columns is not None:
            schema = schema.select_by_name(columns)
        sizes = embedding_sizes_from_schema(schema, dim=dim, max_dim=max_dim, lists=False)
        return cls(sizes, **kwargs)

    @property
    def output_dim(self) -> int:
        return sum(d for _, d in self.table_sizes.values())

    def build(self, input_shape: Any = None) -> None:
        _add_tables(self)
        self.built = True

    def call(self, inputs: Mapping[str, Any]) -> Any:
        missing = [n for n in self.table_sizes if n not in inputs]
        if missing:
            raise KeyError(f"EmbeddingFeatures: columns {missing} are not in the inputs {sorted(inputs)}")
        outputs = {}
        for name in self.table_sizes:
            ids = _squeeze_ids(inputs[name], name)
            # tf.gather on the variable: the gradient w.r.t. the table is a tf.IndexedSlices.
            outputs[name] = tf.gather(self.tables[name].value, ids)
        if self.combiner is None:
            return outputs
        values = list(outputs.values())
        if self.combiner == "stack":
            return tf.stack(values, axis=-2)
        return values[0] if len(values) == 1 else tf.concat(values, axis=-1)

    def compute_output_shape(self, input_shape: Any) -> Any:
        batch = None
        if isinstance(input_shape, Mapping) and input_shape:
            first = input_shape[next(iter(self.table_sizes))] if next(iter(self.table_sizes)) in input_shape else None
            batch = first[0] if first else None
        if self.combiner == "stack":
            return (batch, len(self.table_sizes), next(iter(self.table_sizes.values()))[1])
        if self.combiner is None:
            return {n: (batch, d) for n, (_, d) in self.table_sizes.items()}
        return (batch, self.output_dim)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update({
            "tables": {k: list(v) for k, v in self.table_sizes.items()},
            "combiner": self.combiner,
            "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
            "embeddings_regularizer": keras.regularizers.serialize(self.embeddings_regularizer)
            if self.embeddings_regularizer is not None else None,
        })
        return config


_COMBINERS = ("sum", "mean", "sqrtn", None)


@keras.saving.register_keras_serializable(package="tabloader")
class MultiHotEmbeddings(keras.layers.Layer):
    """Embeddings of list (multi-hot) categorical columns, pooled per row or kept ragged.

    Args:
        tables: ``{column: (cardinality, dim)}`` (see :meth:`from_schema`).
        combiner: ``"sum"``, ``"mean"``, ``"sqrtn"`` (pooled to ``[batch, dim]``; an empty row
            gives zeros) or ``None`` (a ``tf.RaggedTensor`` ``[batch, None, dim]`` per column).
        concat: with a pooling combiner, concatenate the columns into ``[batch, sum(dims)]``
            (default) instead of returning a dict.
        padding_id: for dense ``[batch, max_len]`` inputs, the id that marks padding
            (``0`` by tabloader's encoding contract); ignored for ragged inputs.

    Each column's input is a ``tf.RaggedTensor`` ``[batch, None]``, a ``(values, offsets)``
    pair (offsets of length ``batch + 1``) or a dense padded ``[batch, max_len]`` tensor.

    Example:
        >>> import tensorflow as tf
        >>> layer = MultiHotEmbeddings({"genres": (20, 4)}, combiner="mean")
        >>> layer({"genres": tf.ragged.constant([[1, 2], [], [3]], dtype=tf.int64)}).shape
        TensorShape([3, 4])
    """

    def __init__(self, tables: Mapping[str, tuple[int, int]], combiner: str | None = "sum", concat: bool = True,
                 padding_id: int | None = 0, embeddings_initializer: Any = "uniform",
                 embeddings_regularizer: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.table_sizes = {str(k): (int(v[0]), int(v[1])) for k, v in tables.items()}
        if not self.table_sizes:
            raise ValueError("MultiHotEmbeddings needs at least one column")
        if combiner not in _COMBINERS:
            raise ValueError(f"combiner must be one of {_COMBINERS}, got {combiner!r}")
        self.combiner, self.concat, self.padding_id = combiner, bool(concat), padding_id
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.embeddings_regularizer = keras.regularizers.get(embeddings_regularizer)
        self.tables: dict[str, Any] = {}

    @classmethod
    def from_schema(cls, schema: Schema, dim: int | Mapping[str, int] | None = None,
                    max_dim: int = MAX_EMBEDDING_DIM,
                    columns: Sequence[str] | None = None, **kwargs: Any) -> "MultiHotEmbeddings":
        """One table per categorical list column of ``schema``, sized by ``cardinality``."""
        if columns is not None:
            schema = schema.select_by_name(columns)
        return cls(embedding_sizes_from_schema(schema, dim=dim, max_dim=max_dim, lists=True), **kwargs)

    def build(self, input_shape: Any = None) -> None:
        _add_tables(self)
        self.built = True

    def _as_ragged(self, value: Any, name: str) -> tf.RaggedTensor:
        if isinstance(value, tf.RaggedTensor):
            return value
        if isinstance(value, (tuple, list)) and len(value) == 2:
            values, offsets = value
            return tf.RaggedTensor.from_row_splits(tf.convert_to_tensor(values),
                                                   tf.cast(tf.convert_to_tensor(offsets), tf.int64), validate=False)
        dense = tf.convert_to_tensor(value)
        if dense.shape.rank != 2:
            raise ValueError(f"column {name!r}: expected ragged, (values, offsets) or [batch, max_len] ids, "
                             f"got shape {dense.shape}")
        if self.padding_id is None:
            return tf.RaggedTensor.from_tensor(dense)
        return tf.ragged.boolean_mask(dense, tf.not_equal(dense, tf.cast(self.padding_id, dense.dtype)))

    def call(self, inputs: Mapping[str, Any]) -> Any:
        outputs = {}
        for name in self.table_sizes:
            if name not in inputs:
                raise KeyError(f"MultiHotEmbeddings: column {name!r} is not in the inputs {sorted(inputs)}")
            ids = self._as_ragged(inputs[name], name)
            emb = tf.gather(self.tables[name].value, ids.flat_values)  # IndexedSlices gradient
            rows = ids.with_flat_values(emb)
            if self.combiner is None:
                outputs[name] = rows
                continue
            pooled = tf.reduce_sum(rows, axis=1)
            if self.combiner in ("mean", "sqrtn"):
                lengths = tf.cast(ids.row_lengths(), emb.dtype)
                if self.combiner == "sqrtn":
                    lengths = tf.sqrt(lengths)
                pooled = pooled / tf.maximum(lengths, 1.0)[:, None]
            outputs[name] = pooled
        if self.combiner is None or not self.concat:
            return outputs
        values = list(outputs.values())
        return values[0] if len(values) == 1 else tf.concat(values, axis=-1)

    def compute_output_shape(self, input_shape: Any) -> Any:
        if self.combiner is None:
            return {n: (None, None, d) for n, (_, d) in self.table_sizes.items()}
        if not self.concat:
            return {n: (None, d) for n, (_, d) in self.table_sizes.items()}
        return (None, sum(d for _, d in self.table_sizes.values()))

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update({
            "tables": {k: list(v) for k, v in self.table_sizes.items()},
            "combiner": self.combiner, "concat": self.concat, "padding_id": self.padding_id,
            "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
            "embeddings_regularizer": keras.regularizers.serialize(self.embeddings_regularizer)
            if self.embeddings_regularizer is not None else None,
        })
        return config


def _tf_dtype(dtype: str | None, default: str) -> str:
    if dtype is None or dtype in ("string", "category", "object"):
        return default
    try:
        return tf.as_dtype(dtype).name
    except TypeError:
        return default


def inputs_from_schema(schema: Schema, columns: Sequence[str] | None = None,
                       include_target: bool = False) -> dict[str, Any]:
    """``{column: keras.Input}`` for the columns of ``schema``, as the batches of
    :class:`~tabloader.tf.KerasSequenceLoader` hold them.

    Single-hot columns are ``[batch]`` (categorical ids int64, continuous float32); list columns
    are ragged ``[batch, None]``. Target columns are left out unless ``include_target``. Columns
    with neither a categorical, continuous nor list tag are left out unless named in ``columns``.
    The dict is keyed by column name; each input layer is named after its column, with ``_`` for
    ``/`` (which Keras refuses in names; Keras then warns that the key and the name differ).

    Example:
        >>> s = Schema([ColumnSchema("c", "int64", {"categorical"}, {"cardinality": 5}),
        ...             ColumnSchema("x", "float32", {"continuous"}), ColumnSchema("y", "float32", {"target"})])
        >>> sorted(inputs_from_schema(s))
        ['c', 'x']
    """
    if columns is not None:
        cols = [schema[c] for c in columns]
    else:
        cols = [c for c in schema
                if (include_target or not c.has_tag(Tags.TARGET))
                and (c.has_tag(Tags.CATEGORICAL) or c.has_tag(Tags.CONTINUOUS) or c.is_list
                     or c.has_tag(Tags.LIST) or (include_target and c.has_tag(Tags.TARGET)))]
    input_names = internal_names((col.name for col in cols), unsafe="/")  # the one character Keras refuses
    inputs: dict[str, Any] = {}
    for col in cols:
        categorical = col.has_tag(Tags.CATEGORICAL)
        dtype = "int64" if categorical else _tf_dtype(col.dtype, "float32")
        if not categorical and dtype == "float64":
            dtype = "float32"  # the loader yields continuous columns as float32
        if col.is_list or col.has_tag(Tags.LIST):
            inputs[col.name] = keras.Input(shape=(None,), dtype=dtype, name=input_names[col.name], ragged=True)
        else:
            inputs[col.name] = keras.Input(shape=(), dtype=dtype, name=input_names[col.name])
    return inputs
