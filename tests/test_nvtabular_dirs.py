"""Reading NVTabular 23.08 output directories as they are.

The directory is built here the way NVTabular 23.08 (``merlin.io.Dataset.to_parquet``) lays it
out: ``part_<i>.parquet`` data files, ``_file_list.txt``, ``_metadata`` (the parquet footers of
every file), ``_metadata.json``, ``schema.pbtxt`` (tensorflow-metadata text format, each
feature's properties in an ``extra_metadata`` Any holding a serialized ``Struct``) and
``.merlin/schema.json`` (betterproto's JSON of the same schema). The protobuf parts are encoded
with Google's own protobuf package, independently of tabloader's reader; expected rows come
from pyarrow reading the data files.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tabloader as tl
from tabloader.schema import Tags

protobuf = pytest.importorskip("google.protobuf")
from google.protobuf import any_pb2, struct_pb2, text_encoding, text_format  # noqa: E402

ROWS = 50
CARDINALITY = {"C1": 13, "C2": 7, "genres": 9}


def nvt_table(seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    genres = [rng.integers(2, CARDINALITY["genres"], size=rng.integers(1, 4)).tolist() for _ in range(ROWS)]
    return pa.table({
        "C1": pa.array(rng.integers(1, CARDINALITY["C1"], ROWS), pa.int64()),
        "C2": pa.array(rng.integers(1, CARDINALITY["C2"], ROWS), pa.int64()),
        "genres": pa.array(genres, pa.list_(pa.int64())),
        "I1": pa.array(rng.normal(size=ROWS), pa.float32()),
        "I2": pa.array(rng.normal(size=ROWS), pa.float32()),
        "label": pa.array(rng.integers(0, 2, ROWS).astype(np.float32), pa.float32()),
    })


# (name, FeatureType, tags, properties NVTabular 23.08 puts in the schema)
def nvt_features() -> list[tuple[str, str, list[str], dict]]:
    def categorical(name, dim, **extra):
        card = CARDINALITY[name]
        return (name, "INT", ["categorical", *extra.pop("tags", [])],
                {"num_buckets": None, "freq_threshold": 0.0, "max_size": 0.0, "start_index": 0.0,
                 "cat_path": f".//categories/unique.{name}.parquet",
                 "domain": {"min": 0, "max": card - 1, "name": name},
                 "embedding_sizes": {"cardinality": float(card), "dimension": float(dim)},
                 "dtype_item_size": 64.0, "is_list": False, "is_ragged": False, "_dims": [[0, None]], **extra})

    continuous = {"dtype_item_size": 32.0, "is_list": False, "is_ragged": False, "_dims": [[0, None]]}
    genres = categorical("genres", 5, tags=["item"])
    genres[3].update(is_list=True, is_ragged=True, value_count={"min": 1, "max": 3}, _dims=[[0, None], [1, 3]])
    return [categorical("C1", 8, tags=["user"]), categorical("C2", 6), genres,
            ("I1", "FLOAT", ["continuous"], dict(continuous)), ("I2", "FLOAT", ["continuous"], dict(continuous)),
            ("label", "FLOAT", ["target", "binary_classification"], dict(continuous))]


def struct_bytes(properties: dict) -> bytes:
    message = struct_pb2.Struct()
    message.update({k: v for k, v in properties.items() if k not in ("domain", "value_count")})
    return message.SerializeToString()


def pbtxt(features, expanded_any: bool = False) -> str:
    """schema.pbtxt as text_format prints tensorflow-metadata's Schema (feature by feature)."""
    out = []
    for name, ftype, tags, props in features:
        lines = [f'feature {{\n  name: "{name}"']
        if "value_count" in props:
            counts = props["value_count"]
            lines.append(f"  value_count {{\n    min: {counts['min']}\n    max: {counts['max']}\n  }}")
        lines.append(f"  type: {ftype}")
        if "domain" in props:  # min 0 is protobuf's default: text_format leaves it out
            lines.append(f'  int_domain {{\n    name: "{name}"\n    max: {props["domain"]["max"]}\n'
                         "    is_categorical: true\n  }")
        lines.append("  annotation {")
        lines += [f'    tag: "{t}"' for t in tags]
        packed = any_pb2.Any(type_url="type.googleapis.com/google.protobuf.Struct", value=struct_bytes(props))
        if expanded_any:  # newer protobuf releases print an Any of a known type expanded
            body = text_format.MessageToString(packed, indent=6)
        else:
            body = (f'      type_url: "{packed.type_url}"\n'
                    f'      value: "{text_encoding.CEscape(packed.value, as_utf8=False)}"\n')
        lines.append("    extra_metadata {\n" + body + "    }")
        lines.append("  }\n}")
        out.append("\n".join(lines))
    return "\n".join(out) + "\n"


def schema_json(features) -> str:
    """.merlin/schema.json as merlin's betterproto classes write it (camelCase, int64 as strings)."""
    out = []
    for name, ftype, tags, props in features:
        feature = {"name": name, "type": ftype}
        if "value_count" in props:
            feature["valueCount"] = {k: str(v) for k, v in props["value_count"].items()}
        if "domain" in props:
            feature["intDomain"] = {"name": name, "max": str(props["domain"]["max"]), "isCategorical": True}
        metadata = {k: v for k, v in props.items() if k not in ("domain", "value_count")}
        feature["annotation"] = {"tag": tags, "extraMetadata": [metadata]}
        out.append(feature)
    return json.dumps({"feature": out})


def write_nvt_output(path, parts: int = 2, schema: str = "both", expanded_any: bool = False) -> list[pa.Table]:
    """An NVTabular 23.08 output directory; returns the tables of its data files in order."""
    os.makedirs(os.path.join(path, ".merlin"))
    tables, collector = [], []
    for i in range(parts):
        table = nvt_table(i)
        name = f"part_{i}.parquet"
        # one file with pandas metadata (NVTabular's CPU writer goes through pandas), one without
        if i % 2:
            table = pa.Table.from_pandas(table.to_pandas(), preserve_index=False)
        pq.write_table(table, os.path.join(path, name), metadata_collector=collector)
        collector[-1].set_file_path(name)
        tables.append(table)
    pq.write_metadata(tables[0].schema, os.path.join(path, "_metadata"), metadata_collector=collector)
    with open(os.path.join(path, "_file_list.txt"), "w") as f:
        f.write(f"{parts}\n" + "".join(f"{os.path.join(path, f'part_{i}.parquet')}\n" for i in range(parts)))
    with open(os.path.join(path, "_metadata.json"), "w") as f:
        json.dump({"file_stats": [{"file_name": f"part_{i}.parquet", "num_rows": ROWS} for i in range(parts)],
                   "cats": [{"col_name": c, "index": i} for i, c in enumerate(["C1", "C2", "genres"])],
                   "conts": [{"col_name": "I1", "index": 3}, {"col_name": "I2", "index": 4}],
                   "labels": [{"col_name": "label", "index": 5}]}, f)
    if schema in ("both", "pbtxt"):
        with open(os.path.join(path, "schema.pbtxt"), "w") as f:
            f.write(pbtxt(nvt_features(), expanded_any))
    if schema in ("both", "json"):
        with open(os.path.join(path, ".merlin", "schema.json"), "w") as f:
            f.write(schema_json(nvt_features()))
    return tables


@pytest.mark.parametrize("schema, expanded_any", [("both", False), ("pbtxt", False), ("pbtxt", True), ("json", False)])
def test_dataset_reads_an_nvtabular_output_directory_with_its_roles(tmp_path, schema, expanded_any):
    path = str(tmp_path / "train")
    tables = write_nvt_output(path, schema=schema, expanded_any=expanded_any)
    ds = tl.Dataset(path)
    assert [os.path.basename(p) for p in ds.paths] == ["part_0.parquet", "part_1.parquet"]
    assert ds.num_rows == 2 * ROWS
    expected = pa.concat_tables([t.select(tables[0].column_names).replace_schema_metadata() for t in tables])
    got = pa.Table.from_pandas(ds.compute(), preserve_index=False).replace_schema_metadata()
    assert got.equals(expected.cast(got.schema))

    s = ds.schema
    assert s.select_by_tag(Tags.CATEGORICAL).column_names == ["C1", "C2", "genres"]
    assert s.select_by_tag(Tags.CONTINUOUS).column_names == ["I1", "I2"]
    assert s.select_by_tag(Tags.TARGET).column_names == ["label"]
    assert s["C1"].has_tag(Tags.USER) and s["genres"].has_tag(Tags.ITEM) and s["label"].has_tag("binary_classification")
    for name, card in CARDINALITY.items():
        assert s[name].properties["cardinality"] == card
        assert s[name].properties["domain"] == {"min": 0, "max": card - 1}
    assert s["C1"].properties["embedding_dim"] == 8 and s["genres"].properties["embedding_dim"] == 5
    assert s["genres"].is_list and s["genres"].has_tag(Tags.LIST)
    assert s["genres"].properties["value_count"] == {"min": 1, "max": 3}
    assert s["I1"].dtype == "float32" and s["C1"].dtype == "int64"  # the data's dtypes


def test_loaders_take_the_roles_from_the_nvtabular_schema(tmp_path):
    path = str(tmp_path / "train")
    tables = write_nvt_output(path, parts=1)
    data = tables[0]
    features, target = next(iter(tl.Loader(path, batch_size=ROWS, shuffle=False)))
    assert sorted(features) == ["C1", "C2", "I1", "I2", "genres"]
    np.testing.assert_array_equal(features["C1"], data["C1"].to_numpy())
    np.testing.assert_array_equal(features["I2"], data["I2"].to_numpy())
    np.testing.assert_array_equal(target, data["label"].to_numpy())
    values, offsets = features["genres"]
    np.testing.assert_array_equal(values, data["genres"].combine_chunks().flatten().to_numpy())
    np.testing.assert_array_equal(offsets, data["genres"].combine_chunks().offsets.to_numpy())

    torch = pytest.importorskip("torch")
    import tabloader.torch  # noqa: F401

    features, target = next(iter(tl.torch.Loader(tl.Dataset(path), batch_size=ROWS, shuffle=False)))
    assert features["C2"].dtype == torch.int64 and target.dtype == torch.float32
    assert features["C2"].tolist() == data["C2"].to_pylist()


def test_merlin_json_schema_wins_over_pbtxt(tmp_path):
    # Merlin 23.08 reads .merlin/schema.json first; a stale schema.pbtxt beside it is ignored
    path = str(tmp_path / "train")
    write_nvt_output(path)
    with open(os.path.join(path, "schema.pbtxt"), "w") as f:
        f.write('feature { name: "C1" type: INT annotation { tag: "continuous" } }\n')
    assert tl.Dataset(path).schema["C1"].has_tag(Tags.CATEGORICAL)


@pytest.mark.parametrize("name, text, message", [
    ("schema.pbtxt", 'feature { name: "C1" type: INT\n  int_domain { max: 5 ', "end of file"),
    ("schema.pbtxt", 'feature { name: "C1" annotation { extra_metadata { type_url: '
                     '"type.googleapis.com/google.protobuf.Struct" value: "\\n\\021\\n" } } }', "truncated"),
    ("schema.pbtxt", 'feature { name: "C1" type: INT } feature { type: FLOAT }', "without a name"),
    ("schema.pbtxt", "feature { name: @ }", "line 1"),
    (".merlin/schema.json", '{"feature": [{"name": "C1", "annotation": {"extraMetadata": [3]}}]}', "objects"),
    # shapes the readers trusted: a scalar where a message belongs, a wire type other than the field's, a string
    # where a list of tags belongs (read as one tag per character), nesting past the stack
    ("schema.pbtxt", "feature: 1", "AttributeError"),
    ("schema.pbtxt", 'feature { name: "C1" annotation { extra_metadata { type_url: '
                     '"type.googleapis.com/google.protobuf.Struct" value: "\\n\\007\\n\\001a\\022\\002\\030\\001" } } }',
     "not a readable NVTabular schema"),
    (".merlin/schema.json", '{"feature": {"name": "C1"}}', "AttributeError"),
    (".merlin/schema.json", '{"feature": [{"name": "C1", "annotation": {"tag": "categorical"}}]}',
     "'tag' must be a list of strings"),
    (".merlin/schema.json", "[" * 100_000 + "]" * 100_000, "RecursionError"),
])
def test_a_broken_nvtabular_schema_is_an_error_naming_the_file(tmp_path, name, text, message):
    path = str(tmp_path / "train")
    write_nvt_output(path, parts=1, schema="none")
    with open(os.path.join(path, name), "w") as f:
        f.write(text)
    with pytest.raises(ValueError, match=message) as err:
        tl.Dataset(path)
    assert os.path.join(path, name) in str(err.value)


def test_pbtxt_reader_takes_the_text_format_as_protobuf_writes_it():
    text = """
    # a comment
    feature <
      name: 'a' "b"          # adjacent strings concatenate; < > delimit messages too
      type: INT,
      int_domain: { min: -3 max: 0x10 is_categorical: True }
      annotation { tag: "caf\\303\\251" tag: "x\\ty" }
    >
    feature { name: "f" type: FLOAT float_domain { min: 1.5e-3 max: inf } value_count { min: 2 max: 2 }
              annotation { tag: ["user", 'item'] ; } }
    """
    from tabloader.dataset.nvtabular import schema_from_pbtxt

    s = schema_from_pbtxt(text)
    assert s.column_names == ["ab", "f"]
    assert s["ab"].tags == {"categorical", "café", "x\ty"}
    assert s["ab"].properties == {"domain": {"min": -3, "max": 16}, "cardinality": 17}
    assert s["f"].is_list and s["f"].dtype == "float64" and s["f"].properties["value_count"] == {"min": 2, "max": 2}
    assert s["f"].tags == {"user", "item", "list"}


def test_pbtxt_reader_refuses_deep_nesting_without_recursion_error():
    from tabloader.dataset.nvtabular import schema_from_pbtxt

    with pytest.raises(ValueError, match="nested deeper"):
        schema_from_pbtxt("feature " + "{ a " * 500 + "}" * 501)


def test_a_folder_where_the_schema_file_belongs_is_an_error_naming_it(tmp_path):
    path = str(tmp_path / "train")
    write_nvt_output(path, parts=1, schema="none")
    os.makedirs(os.path.join(path, "schema.pbtxt"))
    with pytest.raises(ValueError, match="schema.pbtxt: not a readable NVTabular schema"):
        tl.Dataset(path)


def test_integers_with_a_leading_zero_are_octal_as_protobuf_reads_them():
    from tabloader.dataset.nvtabular import schema_from_pbtxt

    s = schema_from_pbtxt('feature { name: "C1" type: INT int_domain { max: 010 is_categorical: true } }')
    assert s["C1"].properties == {"domain": {"min": 0, "max": 8}, "cardinality": 9}


def test_the_list_tag_follows_the_data_whatever_the_saved_schema_says(tmp_path):
    """A saved schema calling a scalar column a list (value_count), or a list column a scalar:
    the data decides, and the LIST tag with it (the layers take either as a list)."""
    path = str(tmp_path / "data")
    os.makedirs(path)
    pq.write_table(pa.table({"c": [1, 2], "g": pa.array([[1, 2], [3]])}), os.path.join(path, "part_0.parquet"))
    with open(os.path.join(path, "schema.pbtxt"), "w") as f:
        f.write('feature { name: "c" type: INT value_count { min: 1 max: 2 } annotation { tag: "categorical" } }\n'
                'feature { name: "g" type: INT annotation { tag: "categorical" } }\n')
    schema = tl.Dataset(path).schema
    assert not schema["c"].is_list and schema["c"].tags == {"categorical"}
    assert schema["g"].is_list and schema["g"].tags == {"categorical", "list"}
    assert schema.select_by_tag(Tags.LIST).column_names == ["g"]
