"""Operators' fitted state in saved workflows: nested tables, dicts and lists; format version 1.

Expected values are computed here with pandas/numpy from the input frame, never read back
from the code under test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys

import numpy as np
import pandas as pd
import pytest

from tabloader import ops
from tabloader.ops.base import StatOperator, flatten_columns
from tabloader.registry import register_operator
from tabloader.saved_workflow import WORKFLOW_FILE, WORKFLOW_FORMAT_VERSION
from tabloader.workflow import Workflow

DATA = os.path.join(os.path.dirname(__file__), "data")
sys.path.insert(0, DATA)

from make_workflow_v1 import frame as v1_frame  # noqa: E402  (the input the version-1 fixture was fit on)


@register_operator(name="test_saved_state:Summaries")
class Summaries(StatOperator):
    """Passes columns through; learns a state nesting every kind of value a state may hold."""

    def fit_partial(self, columns, frame):
        return frame[flatten_columns(columns)]

    def merge(self, left, right):
        return pd.concat([left, right])

    def finalize(self, columns, merged):
        cols = flatten_columns(columns)
        self.summary_ = {
            "per_column": {c: {"sorted": np.sort(merged[c].to_numpy()), "counts": merged[c].value_counts()}
                           for c in cols},
            "frames": [merged.head(2).reset_index(drop=True), merged.tail(1).reset_index(drop=True)],
            "rows": len(merged),
            "names": tuple(cols),
            "plain": {"k": [1, 2], "none": None},
        }

    def transform(self, columns, frame):
        self.check_is_fitted(columns)
        return frame[flatten_columns(columns)]

    def get_state(self):
        return {"summary": self.summary_} if self.is_fitted else {}

    def set_state(self, state):
        if state:
            self.summary_ = state["summary"]


@register_operator(name="test_saved_state:Unsaveable")
class Unsaveable(Summaries):
    """Its state holds a value that is neither a table nor JSON, deep inside."""

    def get_state(self):
        return {"summary": {"per_column": {"x": {"when": pd.Timestamp("2024-01-01")}}}}


def numbers() -> pd.DataFrame:
    return pd.DataFrame({"x": [3, 1, 2, 3], "y": [0.5, -1.0, 0.5, 2.0]})


def test_nested_state_round_trips_through_parquet_and_json(tmp_path):
    data = numbers()
    Workflow(["x", "y"] >> Summaries(), progress=False).fit(data).save(str(tmp_path / "wf"))
    doc = json.loads((tmp_path / "wf" / WORKFLOW_FILE).read_text())
    assert doc["format_version"] == WORKFLOW_FORMAT_VERSION == 2
    summary = Workflow.load(str(tmp_path / "wf")).stat_nodes[0].op.summary_

    assert sorted(summary) == ["frames", "names", "per_column", "plain", "rows"]
    for c in ["x", "y"]:
        np.testing.assert_array_equal(summary["per_column"][c]["sorted"], sorted(data[c]))
        counts = summary["per_column"][c]["counts"]
        assert dict(zip(counts.index.tolist(), counts.tolist())) == {v: list(data[c]).count(v) for v in set(data[c])}
    pd.testing.assert_frame_equal(summary["frames"][0], data.iloc[:2])
    pd.testing.assert_frame_equal(summary["frames"][1], data.iloc[3:].reset_index(drop=True))
    assert summary["rows"] == 4 and summary["names"] == ["x", "y"]  # a tuple comes back as a JSON list
    assert summary["plain"] == {"k": [1, 2], "none": None}
    # every table is a file of its own; what holds no table stays one JSON value
    entry = doc["nodes"][1]["op"]["state"]["summary"]
    assert entry["__dict__"]["plain"] == {"__json__": {"k": [1, 2], "none": None}}
    assert len([f for f in os.listdir(tmp_path / "wf") if f.endswith(".parquet")]) == 6


def test_a_state_value_neither_table_nor_json_is_refused_naming_where(tmp_path):
    wf = Workflow(["x"] >> Unsaveable(), progress=False).fit(numbers())
    with pytest.raises(TypeError, match=r"node 1 \(Unsaveable\), state 'summary'\['per_column'\]\['x'\]\['when'\]: "
                                        r"value .* of type Timestamp cannot be saved as JSON"):
        wf.save(str(tmp_path / "wf"))
    assert not (tmp_path / "wf").exists()


def test_state_keys_beside_tables_must_be_strings(tmp_path):
    op = Summaries()
    wf = Workflow(["x"] >> op, progress=False).fit(numbers())
    op.summary_ = {1: np.arange(3)}
    with pytest.raises(TypeError, match=r"node 1 \(Summaries\), state 'summary': state keys must be strings, got 1"):
        wf.save(str(tmp_path / "wf"))


def categorical_workflow() -> Workflow:
    graph = (["c", "g"] >> ops.Categorify()) \
        + (["c"] >> ops.JoinGroupby(cont_cols=["x"], stats=["count", "mean"])) \
        + (["g"] >> ops.TargetEncoding("label", kfold=1, p_smooth=0, out_of_fold=False))
    return Workflow(graph, progress=False).fit(v1_frame())


def test_categorical_operators_keep_their_state_nested_by_column(tmp_path):
    wf = categorical_workflow()
    categorify, groupby, target = (n.op.get_state() for n in wf.stat_nodes)
    assert sorted(categorify) == ["cardinalities", "columns", "list_columns", "null_counts", "vocabularies"]
    assert list(categorify["vocabularies"]) == ["c", "g"]
    assert categorify["vocabularies"]["c"]["value"].tolist() == ["a", "b", "c"]  # by count, ties by value
    assert sorted(groupby) == ["null_stats", "stats"] and list(groupby["stats"]) == ["c"]
    assert sorted(target) == ["global_mean", "null_stats", "stats"] and list(target["stats"]) == ["g"]
    wf.save(str(tmp_path / "wf"))
    doc = json.loads((tmp_path / "wf" / WORKFLOW_FILE).read_text())
    keys = [k for r in doc["nodes"] if "op" in r for k in r["op"]["state"]]
    assert not [k for k in keys if re.fullmatch(r"keys|prefixes|(vocab|stats|null)_\d+", k)], keys


def expected_v1_transform(frame: pd.DataFrame) -> pd.DataFrame:
    """The fixture's graph computed by hand (see tests/data/make_workflow_v1.py)."""
    ids = {"a": 3, "b": 4, "c": 5}  # 1 = null; a and b seen 3 times, c once
    x_means = frame.groupby("c")["x"].mean().to_dict()
    x_means_of_nulls = frame.loc[frame["c"].isna(), "x"].mean()
    cats = frame["c"].astype(object).where(frame["c"].notna(), None)
    label_means = frame.groupby("g")["label"].mean().to_dict()
    x = frame["x"].fillna(0).to_numpy()
    return pd.DataFrame({
        "c": [ids.get(v, 1) for v in cats],
        "g": [3 if v == 1 else 4 for v in frame["g"]],  # 1 is the more frequent
        "c_x_mean": [x_means_of_nulls if v is None else x_means[v] for v in cats],
        "TE_g_label": [label_means[v] for v in frame["g"]],
        "x": (x - x.mean()) / x.std(),
        "label": frame["label"],
    })


def test_workflow_saved_by_format_version_1_loads_and_transforms(tmp_path):
    path = os.path.join(DATA, "workflow_v1")
    assert json.loads(open(os.path.join(path, WORKFLOW_FILE)).read())["format_version"] == 1
    frame = v1_frame()
    out = Workflow.load(path).transform(frame)
    expected = expected_v1_transform(frame)
    assert list(out.columns) == list(expected.columns)
    for col in expected:
        np.testing.assert_allclose(out[col].to_numpy(dtype=np.float64), expected[col], rtol=1e-6, err_msg=col)
    # saved again, it is written in today's format and gives the same
    Workflow.load(path).save(str(tmp_path / "v2"))
    assert json.loads((tmp_path / "v2" / WORKFLOW_FILE).read_text())["format_version"] == WORKFLOW_FORMAT_VERSION
    pd.testing.assert_frame_equal(Workflow.load(str(tmp_path / "v2")).transform(frame), out)


def test_version_1_state_missing_a_numbered_entry_names_it(tmp_path):
    path = tmp_path / "wf"
    shutil.copytree(os.path.join(DATA, "workflow_v1"), path)
    doc = json.loads((path / WORKFLOW_FILE).read_text())
    categorify = next(r["op"] for r in doc["nodes"] if "op" in r and r["op"]["class"].endswith(":Categorify"))
    categorify["state"]["keys"]["__json__"].append("extra")
    (path / WORKFLOW_FILE).write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"node 1 \(Categorify\): the state saved in format version 1 lacks the "
                                         r"entry 'vocab_2'"):
        Workflow.load(str(path))
