"""Writes tests/data/workflow_v1: a workflow saved by tabloader's format-version-1 code.

It was run with the code of commit 8e4af99 (the last to write format version 1)::

    git archive 8e4af99 | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old python tests/data/make_workflow_v1.py tests/data/workflow_v1

tests/test_saved_state.py loads it with today's code and checks the transform by hand.
"""

import sys

import pandas as pd


def frame() -> pd.DataFrame:
    return pd.DataFrame({
        "c": ["a", "b", "a", "c", "a", "b", None, "b"],
        "g": [1, 1, 2, 2, 1, 2, 1, 1],
        "x": [1.0, 2.0, 3.0, None, 5.0, 6.0, 7.0, 8.0],
        "label": [0, 1, 0, 1, 1, 0, 1, 0],
    })


def main(path: str) -> None:
    import tabloader as tl
    from tabloader import ops

    graph = (["c", "g"] >> ops.Categorify()) \
        + (["c"] >> ops.JoinGroupby(cont_cols=["x"], stats=["count", "mean"])) \
        + (["g"] >> ops.TargetEncoding("label", kfold=1, p_smooth=0, out_of_fold=False)) \
        + (["x"] >> ops.FillMissing(0) >> ops.Normalize()) + ["label"] - ["c_count"]
    tl.Workflow(graph, progress=False).fit(frame()).save(path)


if __name__ == "__main__":
    main(sys.argv[1])
