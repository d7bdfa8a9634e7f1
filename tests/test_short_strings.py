"""Short strings of one length (raw Criteo's 8-character hex ids, codes) are counted, merged and
looked up as 64-bit integers on the CPU: the vocabularies and ids stay those of the pure-Python
reference, whatever the widths, nulls, stray strings of other lengths and partitions."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

import tabloader as tl
from tabloader import ops
from tabloader.encoding import cpu
from tabloader.encoding.cpu.columns import arrow_null_mask
from tabloader.encoding.cpu.short_strings import pack_strings, unpack_strings

from encoding_properties import OP, check_vocabulary_and_ids

HEX = "0123456789abcdef"


@st.composite
def fixed_width_column(draw):
    """Values of one byte width (1..8) drawn from a small pool, nulls, and maybe strings of
    other lengths (multi-byte characters included) among them."""
    width = draw(st.integers(1, 8))
    pool = draw(st.lists(st.text(HEX, min_size=width, max_size=width), min_size=1, max_size=12, unique=True))
    value = st.sampled_from(pool) | st.none()
    if draw(st.booleans()):
        value = value | st.text("xé", max_size=10)
    return draw(st.lists(value, max_size=60))


def normalized(values: list):
    return cpu.normalize_column(OP, "c", pd.Series(values, dtype="str"))


@settings(max_examples=150, deadline=None)
@given(values=fixed_width_column(), unseen=fixed_width_column(), cuts=st.lists(st.integers(0, 60), max_size=5),
       seed=st.integers(0, 2**32 - 1), freq_threshold=st.integers(0, 3), num_buckets=st.integers(1, 3))
def test_partitions_of_one_width_give_the_reference_vocabulary_and_ids(values, unseen, cuts, seed, freq_threshold,
                                                                       num_buckets):
    check_vocabulary_and_ids(values, unseen, cuts, normalized, seed, freq_threshold, num_buckets)


@pytest.mark.parametrize("arrow_type", [pa.string(), pa.large_string()])
@pytest.mark.parametrize("width", [1, 3, 8])
def test_codes_are_the_little_endian_bytes_and_unpack_back(arrow_type, width):
    rng = np.random.default_rng(width)
    words = ["".join(rng.choice(list(HEX), width)) for _ in range(40)]
    values = [None if i % 7 == 3 else w for i, w in enumerate(words)]
    for array in (pa.array(values, arrow_type), pa.array(values, arrow_type)[5:33]):  # a slice: offsets shifted
        kept = [v for v in array.to_pylist() if v is not None]
        codes, got_width = pack_strings(array, arrow_null_mask(array))
        assert got_width == width
        assert codes.tolist() == [int.from_bytes(v.encode(), "little") for v in kept]
        assert unpack_strings(codes, width, arrow_type).to_pylist() == kept


def test_a_slice_starting_off_the_8_byte_grid_and_an_all_null_query():
    codes, width = pack_strings(pa.array(["x", "abcdefgh", "ijklmnop"])[1:], None)  # strings from byte 1
    assert width == 8
    assert codes.tolist() == [int.from_bytes(b"abcdefgh", "little"), int.from_bytes(b"ijklmnop", "little")]
    lookup = cpu.ValueLookup([pd.Series(["abcdefgh", "ijklmnop"], dtype="str")], OP, "c")
    assert lookup.positions([normalized([None, None])]).tolist() == [-1, -1]
    assert lookup.positions([normalized(["ijklmnop", None, "abcdefgh"])]).tolist() == [1, -1, 0]


def test_strings_of_several_lengths_or_null_rows_holding_bytes_are_not_packed():
    assert pack_strings(pa.array(["ab", "abc"]), None) is None
    assert pack_strings(pa.array(["abcdefghi"]), None) is None  # longer than 8 bytes
    assert pack_strings(pa.array(["ab", "cd"]), None, width=3) is None
    # a null row over bytes (arrow allows it): its bytes are not a value
    with_bytes = pa.Array.from_buffers(pa.string(), 2, [pa.array([True, False]).buffers()[1],
                                                        pa.py_buffer(np.array([0, 2, 4], np.int32)),
                                                        pa.py_buffer(b"abcd")], null_count=1)
    assert pack_strings(with_bytes, np.array([False, True])) is None


def test_the_null_mask_comes_from_the_validity_bitmap_of_a_slice():
    array = pa.array([None if i % 3 == 0 else str(i) for i in range(70)])
    for piece in (array, array[1:], array[9:62], array.slice(64)):
        assert arrow_null_mask(piece).tolist() == [v is None for v in piece.to_pylist()]
    assert arrow_null_mask(pa.array(["a", "b"])) is None


def test_categorify_over_parquet_hex_ids_matches_pandas_by_hand(tmp_path):
    """Criteo-like hex ids in three pyarrow-written files (no pandas metadata), partitions of
    several thousand rows (the hash lookup, not the binary search of small queries), and at
    transform a file with ids of other lengths; ids computed by hand with pandas."""
    rng = np.random.default_rng(0)
    pool = np.array([f"{v:08x}" for v in rng.choice(2**32, 3000, replace=False)], dtype=object)
    fit_files = []
    for i in range(3):
        values = pool[np.minimum(rng.zipf(1.3, 4000), len(pool)) - 1]
        values[rng.random(4000) < 0.05] = None
        path = tmp_path / "fit" / f"part_{i}.parquet"
        path.parent.mkdir(exist_ok=True)
        pq.write_table(pa.table({"C1": pa.array(values, pa.string())}), path)
        fit_files.append(values)
    seen = pd.Series(np.concatenate(fit_files)).value_counts()  # nulls left out
    seen = seen[seen >= 2]
    order = sorted(zip(seen.index, seen.to_numpy()), key=lambda vc: (-vc[1], vc[0]))
    ids = {v: 3 + i for i, (v, _) in enumerate(order)}

    query = np.concatenate([pool[:1500], ["abc", "0123456789", None, "zzzzzzzz"]]).astype(object)
    (tmp_path / "query").mkdir()
    pq.write_table(pa.table({"C1": pa.array(query, pa.string())}), tmp_path / "query" / "part_0.parquet")

    workflow = tl.Workflow(["C1"] >> ops.Categorify(freq_threshold=2), progress=False)
    workflow.fit(tl.Dataset(str(tmp_path / "fit")))
    got = workflow.transform(tl.Dataset(str(tmp_path / "query"))).compute()["C1"].to_numpy()
    expected = [1 if v is None else ids.get(v, 2) for v in query]
    assert got.tolist() == expected
