"""The GPU implementation of the encoding primitives (cuDF, CuPy): the names, arguments and
results of :mod:`tabloader.encoding.cpu`, with CuPy arrays and cuDF columns in place of numpy
and pyarrow arrays, so an operator's fit and transform on cuDF data never copy a partition to
the host. CPU and GPU give identical ids (the same ordering contract and the same hash bits).

cuDF and CuPy are imported only when a primitive runs (through ``backend.cudf()`` /
``backend.cupy()``): importing this package needs neither. :mod:`tabloader.encoding` maps
each primitive to the library calls of both implementations.
"""

from tabloader.encoding.gpu.columns import (NormalizedColumn, as_pandas, common_int_dtype, exact_ints, keys_to_pandas,
                                            map_column, normalize_column, normalize_elements, null_mask)
from tabloader.encoding.gpu.counting import (MERGE_ON, count_values, count_values_each, group_rows, merge_counts,
                                             merge_counts_each, sum_int, union_keys, vocabulary)
from tabloader.encoding.gpu.hashing import cross_hash, hash_strings, hash_values
from tabloader.encoding.gpu.lookup import ValueLookup, assign_ids

__all__ = [
    "NormalizedColumn", "normalize_column", "normalize_elements", "null_mask", "map_column", "as_pandas",
    "keys_to_pandas", "common_int_dtype", "exact_ints",
    "count_values", "count_values_each", "merge_counts", "merge_counts_each", "vocabulary", "group_rows", "union_keys",
    "sum_int",
    "hash_values", "cross_hash", "ValueLookup", "assign_ids", "hash_strings", "MERGE_ON",
]
