"""The property the CPU encoding paths share, checked against the pure-Python reference
(:mod:`encoding_reference`): partitions counted apart and merged in any tree give the
reference vocabulary, and the lookup gives every query the reference ids."""

from __future__ import annotations

import random
from typing import Any, Callable

import pandas as pd

from tabloader.encoding import cpu

from encoding_reference import expected_ids, reference_vocabulary

OP = "Test"


def split(values: list, cuts: list[int]) -> list[list]:
    """``values`` cut at the positions ``cuts`` (clipped, in any order)."""
    bounds = [0] + sorted(min(c, len(values)) for c in cuts) + [len(values)]
    return [values[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def check_vocabulary_and_ids(values: list, unseen: list, cuts: list[int], normalize: Callable[[list], Any],
                             seed: int, freq_threshold: int, num_buckets: int) -> list[Any]:
    """Count ``values`` cut at ``cuts``, each part normalized by ``normalize``, merge the partials
    in the tree ``seed`` draws, and check the vocabulary and the ids of the parts, the values
    reversed and ``unseen + values`` against the reference. Returns the normalized queries."""
    partials = []
    for part in split(values, cuts):
        col = normalize(part)
        partials.append(cpu.count_values([col], col.mask))
    rng = random.Random(seed)
    while len(partials) > 1:  # any tree a tree reduction could take
        i = rng.randrange(len(partials) - 1)
        partials[i:i + 2] = [cpu.merge_counts(partials[i], partials[i + 1], OP, "c")]
    merged = partials[0]
    assert merged["nulls"] == sum(v is None for v in values)
    reference = reference_vocabulary(values, freq_threshold)
    if merged["keys"] is None:
        assert reference == []
        return []
    keys, counts = cpu.vocabulary(merged, freq_threshold, 0)
    assert list(zip(cpu.keys_to_pandas(keys[0]).tolist(), counts.tolist())) == reference

    lookup = cpu.ValueLookup([pd.Series(cpu.keys_to_pandas(k)) for k in keys], OP, "c")
    queries = []
    for part in split(values, cuts) + [values[::-1], unseen + values]:
        col = normalize(part)
        ids = cpu.assign_ids(lookup.positions([col]), col.mask, num_buckets, [col], "int64")
        assert ids.tolist() == expected_ids(part, values, freq_threshold, 0, num_buckets)[0]
        queries.append((part, col))
    return queries
