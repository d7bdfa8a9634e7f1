"""The CPU implementation of the encoding primitives (numpy, pandas, pyarrow)."""

from tabloader.encoding.cpu.columns import (NormalizedColumn, as_pandas, common_int_dtype, exact_ints, keys_to_pandas,
                                            map_column, normalize_column, normalize_elements, null_mask)
from tabloader.encoding.cpu.counting import (count_values, count_values_each, group_rows, merge_counts,
                                             merge_counts_each, sum_int, union_keys, vocabulary)
from tabloader.encoding.cpu.hashing import cross_hash, hash_values
from tabloader.encoding.cpu.lookup import ValueLookup, assign_ids

__all__ = [
    "NormalizedColumn", "normalize_column", "normalize_elements", "null_mask", "map_column", "as_pandas", "keys_to_pandas",
    "common_int_dtype", "exact_ints",
    "count_values", "count_values_each", "merge_counts", "merge_counts_each", "vocabulary", "group_rows", "union_keys",
    "sum_int",
    "hash_values", "cross_hash", "ValueLookup", "assign_ids",
]
