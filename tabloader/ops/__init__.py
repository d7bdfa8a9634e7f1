"""Preprocessing operators, one family per module.

Example:
    >>> from tabloader import ops
    >>> node = ["I1", "I2"] >> ops.FillMissing(0) >> ops.LogOp >> ops.Normalize()
"""

from tabloader.ops.astype import AsType
from tabloader.ops.base import NotFittedError, Operator, StatOperator
from tabloader.ops.categorify import Categorify
from tabloader.ops.columns import AddProperties, AddTags, ReduceDtypeSize, Rename
from tabloader.ops.data_stats import DataStats
from tabloader.ops.datetime_features import DatetimeFeatures
from tabloader.ops.difference_lag import DifferenceLag
from tabloader.ops.drop_low_cardinality import DropLowCardinality
from tabloader.ops.embedding_sizes import get_embedding_sizes
from tabloader.ops.fill import FillMedian, FillMissing
from tabloader.ops.groupby import JoinGroupby
from tabloader.ops.hashing import HashBucket, HashedCross
from tabloader.ops.join_external import JoinExternal
from tabloader.ops.lambdaop import LambdaOp
from tabloader.ops.lists import ListSlice, ValueCount
from tabloader.ops.normalize import Normalize, NormalizeMinMax
from tabloader.ops.numeric import Bucketize, Clip, LogOp
from tabloader.ops.rows import Dropna, Filter
from tabloader.ops.sessions import Groupby
from tabloader.ops.target_encoding import TargetEncoding

__all__ = [
    "Operator", "StatOperator", "NotFittedError",
    "Categorify", "HashBucket", "HashedCross", "JoinGroupby", "TargetEncoding",
    "FillMissing", "FillMedian", "Normalize", "NormalizeMinMax", "LogOp", "Clip", "Bucketize",
    "LambdaOp", "Rename", "AddTags", "AddProperties", "ReduceDtypeSize", "AsType", "DatetimeFeatures", "Filter", "Dropna",
    "DifferenceLag", "ValueCount", "ListSlice",
    "Groupby", "JoinExternal", "DropLowCardinality", "DataStats",
    "get_embedding_sizes",
]
