"""String columns read as dictionary codes (parquet's own encoding) are counted, looked up and
hashed from their codes: the vocabularies and ids stay those of the pure-Python reference
(:mod:`encoding_reference`), whatever the chunks' dictionaries, nulls, lengths and partitions."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pyarrow as pa
from hypothesis import given, settings, strategies as st

from tabloader.encoding import cpu
from tabloader.encoding.cpu.coded_strings import CodedStrings, from_dictionary_array

from encoding_reference import expected_ids, py_hash, reference_vocabulary

OP = "Test"
NULL_HASH = 0x9AE16A3B2F90404F


@st.composite
def string_column(draw):
    """Strings from a small pool (one width, or of several lengths and multi-byte), and nulls."""
    if draw(st.booleans()):
        width = draw(st.integers(1, 8))
        text = st.text("0123456789abcdef", min_size=width, max_size=width)
    else:
        text = st.text("xyé\x00", max_size=12)
    pool = draw(st.lists(text, min_size=1, max_size=12, unique=True))
    return draw(st.lists(st.sampled_from(pool) | st.none(), max_size=60))


def split(values: list, cuts: list[int]) -> list[list]:
    bounds = [0] + sorted(min(c, len(values)) for c in cuts) + [len(values)]
    return [values[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def coded_series(values: list, cuts: list[int]) -> pd.Series:
    """``values`` as a pandas column of arrow dictionary type, one chunk (with a dictionary of
    its own, in first-seen order) per piece of ``cuts``: what a parquet reader gives for a
    partition of several row groups."""
    chunks = [pa.array(piece, pa.string()).dictionary_encode() for piece in split(values, cuts)]
    return pd.Series(pd.arrays.ArrowExtensionArray(pa.chunked_array(chunks, pa.dictionary(pa.int32(), pa.string()))))


@settings(max_examples=150, deadline=None)
@given(values=string_column(), unseen=string_column(), cuts=st.lists(st.integers(0, 60), max_size=4),
       parts=st.lists(st.integers(0, 60), max_size=4), seed=st.integers(0, 2**32 - 1),
       freq_threshold=st.integers(0, 3), num_buckets=st.integers(1, 3))
def test_coded_partitions_give_the_reference_vocabulary_and_ids(values, unseen, cuts, parts, seed, freq_threshold,
                                                                num_buckets):
    partials = []
    for part in split(values, parts):
        col = cpu.normalize_column(OP, "c", coded_series(part, cuts))
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
        return
    keys, counts = cpu.vocabulary(merged, freq_threshold, 0)
    assert list(zip(cpu.keys_to_pandas(keys[0]).tolist(), counts.tolist())) == reference

    lookup = cpu.ValueLookup([pd.Series(cpu.keys_to_pandas(k)) for k in keys], OP, "c")
    for part in split(values, parts) + [values[::-1], unseen + values]:
        col = cpu.normalize_column(OP, "c", coded_series(part, cuts))
        ids = cpu.assign_ids(lookup.positions([col]), col.mask, num_buckets, [col], "int64")
        assert ids.tolist() == expected_ids(part, values, freq_threshold, 0, num_buckets)[0]
        assert cpu.hash_values(col).tolist() == [NULL_HASH if v is None else py_hash(v) for v in part]


def test_chunks_with_dictionaries_of_their_own_are_unified():
    chunks = pa.chunked_array([pa.array(["b", None, "a"]).dictionary_encode(),
                               pa.array([None, None], pa.string()).dictionary_encode(),
                               pa.array(["c", "a", "c"]).dictionary_encode()])
    col = from_dictionary_array(chunks)
    assert col.values.to_pylist() == ["b", None, "a", None, None, "c", "a", "c"]
    assert col.mask.tolist() == [False, True, False, True, True, False, False, False]
    assert sorted(col.dictionary.to_pylist()) == ["a", "b", "c"]
    assert col.code_counts(col.mask).tolist() == [col.values.to_pylist().count(v) for v in col.dictionary.to_pylist()]


def test_another_mask_leaves_rows_out_of_the_counts():
    col = CodedStrings(np.array([0, 1, 1, 2, 0]), pa.array(["a", "bb", "c"]), None)
    left_out = np.array([True, False, True, False, False])
    partial = cpu.count_values([col], left_out)
    assert dict(zip(partial["keys"][0].to_pylist(), partial["counts"].tolist())) == {"a": 1, "bb": 1, "c": 1}


def test_a_query_with_fewer_rows_than_its_dictionary_is_looked_up_by_its_strings():
    col = CodedStrings(np.arange(1000) % 700, pa.array([f"v{i}" for i in range(700)]), None).take(np.array([5, 699]))
    lookup = cpu.ValueLookup([pd.Series(["v699", "v5", "w"], dtype="str")], OP, "c")
    assert lookup.positions([col]).tolist() == [1, 0]


def test_categoricals_of_strings_are_coded_and_others_decoded():
    categorical = pd.Series(pd.Categorical(["b", None, "a", "b"], categories=["b", "a", "unused"]))
    col = cpu.normalize_column(OP, "c", categorical)
    assert isinstance(col, CodedStrings) and col.values.to_pylist() == ["b", None, "a", "b"]
    partial = cpu.count_values([col], col.mask)
    assert dict(zip(partial["keys"][0].to_pylist(), partial["counts"].tolist())) == {"a": 1, "b": 2}
    numbers = pd.Series(pd.arrays.ArrowExtensionArray(pa.array([7, None, 7]).dictionary_encode()))
    decoded = cpu.normalize_column(OP, "c", numbers)
    assert decoded.kind == "int" and decoded.values[[0, 2]].tolist() == [7, 7] and decoded.mask.tolist() == [0, 1, 0]
    empty = pd.Series(pd.arrays.ArrowExtensionArray(pa.array([None, None], pa.string()).dictionary_encode()))
    assert cpu.normalize_column(OP, "c", empty).kind == "null"
