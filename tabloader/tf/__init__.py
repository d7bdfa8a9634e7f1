"""TensorFlow / Keras side of tabloader: a Keras data loader and embedding layers.

Example (``out/train`` is a preprocessed dataset with a ``_schema.json``)::

    import tabloader as tl
    from tabloader.tf import KerasSequenceLoader, EmbeddingFeatures, inputs_from_schema

    train = KerasSequenceLoader(tl.Dataset("out/train"), batch_size=65536, shuffle=True)
    valid = KerasSequenceLoader(tl.Dataset("out/valid"), batch_size=65536, shuffle=False)
    inputs = inputs_from_schema(train.loader.dataset.schema)
    ...
    model.fit(train, validation_data=valid, epochs=3)

Contents:

* :class:`KerasSequenceLoader` -- a ``keras.utils.PyDataset`` over :class:`tabloader.Loader`
  (TF tensors by DLPack, list columns as ``tf.RaggedTensor``);
* :func:`to_tf_dataset` -- the same batches as a ``tf.data.Dataset``;
* :class:`EmbeddingFeatures`, :class:`MultiHotEmbeddings`, :func:`inputs_from_schema` -- layers and
  inputs sized from a workflow's output schema.

Importing this module imports TensorFlow and Keras, never PyTorch nor Triton. **If a process
uses Triton too (``tabloader.torch`` kernels), import triton before this module**: importing
triton after TensorFlow registers LLVM options twice and kills the process.
"""

from tabloader.extras import require

require("tensorflow", "tf", "tabloader.tf")
require("keras", "tf", "tabloader.tf")

from tabloader.tf.layers import (
    EmbeddingFeatures,
    MultiHotEmbeddings,
    default_embedding_dim,
    embedding_sizes_from_schema,
    inputs_from_schema,
)
from tabloader.tf.loader import (
    ConversionStats,
    KerasSequenceLoader,
    batch_to_tf,
    to_tf_dataset,
    to_tf_tensor,
)

__all__ = [
    "KerasSequenceLoader",
    "to_tf_dataset",
    "to_tf_tensor",
    "batch_to_tf",
    "ConversionStats",
    "EmbeddingFeatures",
    "MultiHotEmbeddings",
    "inputs_from_schema",
    "embedding_sizes_from_schema",
    "default_embedding_dim",
]
