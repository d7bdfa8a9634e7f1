"""The CPU implementation of the encoding primitives (numpy, pandas, pyarrow)."""

from tabloader.encoding.cpu.columns import (NormalizedColumn, as_pandas, common_int_dtype, exact_ints, keys_to_pandas,
                                            map_column, normalize_column, null_mask)
from tabloader.encoding.cpu.counting import (concat_keys, count_values, factorize_rows, group_keys, group_rows,
                                             merge_counts, sum_int)
from tabloader.encoding.cpu.hashing import cross_hash, hash_values
from tabloader.encoding.cpu.lookup import ValueLookup

__all__ = [
    "NormalizedColumn", "normalize_column", "null_mask", "map_column", "as_pandas", "keys_to_pandas",
    "common_int_dtype", "exact_ints",
    "count_values", "merge_counts", "concat_keys", "group_keys", "group_rows", "factorize_rows", "sum_int",
    "hash_values", "cross_hash", "ValueLookup",
]
