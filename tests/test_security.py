"""A saved workflow directory is untrusted input: crafted ones must fail closed.

Each attack edits a really saved workflow (or its files) the way an attacker would, then checks
two things: loading (or ``tabloader inspect``) raises a clear error naming what is wrong, AND
the attack's effect did not happen (a marker file was not written, a module was not imported,
a trusted function was not called). The other half of the contract is tested too: what the user
trusts still loads, and what could not be loaded again is refused when saving.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tabloader import cli, ops
from tabloader.workflow import Workflow

ROOT = Path(__file__).resolve().parents[1]
CALLS: list[str] = []


# --- module-level functions a user may trust ----------------------------------------------------
def shout(name):
    CALLS.append(name)
    return name.upper()


def keep_all(df):
    return df.iloc[:, 0] == df.iloc[:, 0]


def plus_one(col):
    return col + 1


# --- helpers ------------------------------------------------------------------------------------
def frame() -> pd.DataFrame:
    return pd.DataFrame({"c": ["x", "y", "x", "z"], "n": [1.0, 2.0, 3.0, 4.0], "label": [0, 1, 0, 1]})


def save(tmp_path: Path, graph, data: pd.DataFrame | None = None, name: str = "wf") -> Path:
    path = tmp_path / name
    Workflow(graph, progress=False).fit(frame() if data is None else data).save(str(path))
    return path


def basic(tmp_path: Path) -> Path:
    """Categorify (parquet state) + Normalize (JSON state) + a passthrough column."""
    return save(tmp_path, (["c"] >> ops.Categorify()) + (["n"] >> ops.Normalize()) + ["label"])


def edit(path: Path, change) -> Path:
    doc = json.loads((path / "workflow.json").read_text())
    change(doc)
    (path / "workflow.json").write_text(json.dumps(doc))
    return path


def op_record(doc: dict, class_name: str) -> dict:
    return next(r["op"] for r in doc["nodes"] if "op" in r and r["op"]["class"].endswith(":" + class_name))


def parquet_entries(entry):
    """The parquet entries of a state entry, nested ones too ({"__dict__": {...}}, {"__list__": [...]})."""
    if "__parquet__" in entry:
        return [entry]
    inner = entry.get("__dict__", {}).values() if "__dict__" in entry else entry.get("__list__", [])
    return [found for e in inner for found in parquet_entries(e)]


def first_parquet_entry(doc: dict) -> dict:
    """The first Categorify state entry stored as parquet (a vocabulary)."""
    return next(p for e in op_record(doc, "Categorify")["state"].values() for p in parquet_entries(e))


def parquet_state(path: Path) -> str:
    """The file name of the first Categorify state entry stored as parquet."""
    return first_parquet_entry(json.loads((path / "workflow.json").read_text()))["__parquet__"]


def set_state_file(name: str):
    def change(doc):
        first_parquet_entry(doc)["__parquet__"] = name
    return change


@pytest.fixture
def evil_module(tmp_path, monkeypatch):
    """A module on sys.path whose import (or whose function, when called) writes a marker file."""
    name = f"evil_{uuid.uuid4().hex[:8]}"
    marker = tmp_path / f"{name}.marker"
    (tmp_path / f"{name}.py").write_text(
        "import pathlib\n"
        f"pathlib.Path({str(marker)!r}).write_text('imported')\n"
        "class Op:\n    pass\n"
        f"def run(*args):\n    pathlib.Path({str(marker)!r}).write_text('called')\n    return args[0]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name, marker
    sys.modules.pop(name, None)


def assert_not_imported(evil) -> None:
    name, marker = evil
    assert not marker.exists(), marker.read_text()
    assert name not in sys.modules


@pytest.fixture
def outside(tmp_path) -> Path:
    """A real parquet file outside any workflow directory (a secret an attacker wants read)."""
    secret = tmp_path / "secret.parquet"
    pq.write_table(pa.table({"values": ["api-key-123"]}), secret)
    return secret


@pytest.fixture
def shell_workflow(tmp_path) -> tuple[Path, Path]:
    """A saved Rename whose f is edited to os:system, over a column named as a shell command."""
    marker = tmp_path / "pwned"
    command = f"touch {marker}"
    path = save(tmp_path, [command] >> ops.Rename(postfix="_r"), pd.DataFrame({command: [1, 2]}))
    edit(path, lambda doc: op_record(doc, "Rename")["config"].update(f={"__function__": "os:system"}, postfix=None))
    return path, marker


# --- attacks: functions -------------------------------------------------------------------------
def test_rename_f_os_system_is_not_imported_or_called(shell_workflow):
    path, marker = shell_workflow
    with pytest.raises(ValueError, match=r"Rename.*parameter f.*'os:system' is not trusted.*trusted=\[system\]"):
        Workflow.load(str(path))
    assert not marker.exists()


@pytest.mark.parametrize("function", ["subprocess:call", "builtins:eval", "builtins:exec", "os:system"])
def test_lambdaop_dangerous_function_is_refused(tmp_path, function):
    path = save(tmp_path, ["n"] >> ops.LambdaOp(plus_one))
    edit(path, lambda doc: op_record(doc, "LambdaOp")["config"].update(f={"__function__": function}))
    with pytest.raises(ValueError, match=f"LambdaOp.*{function}.*not trusted"):
        Workflow.load(str(path), trusted=[plus_one])


def test_function_of_an_arbitrary_module_is_not_imported(tmp_path, evil_module):
    path = save(tmp_path, ["n"] >> ops.LambdaOp(plus_one))
    name, _ = evil_module
    edit(path, lambda doc: op_record(doc, "LambdaOp")["config"].update(f={"__function__": f"{name}:run"}))
    with pytest.raises(ValueError, match=f"{name}:run.*not trusted"):
        Workflow.load(str(path))
    assert_not_imported(evil_module)


def test_filter_f_is_refused(tmp_path, evil_module):
    path = save(tmp_path, (["n"] >> ops.Filter(keep_all)) + ["label"])
    name, _ = evil_module
    edit(path, lambda doc: op_record(doc, "Filter")["config"].update(f={"__function__": f"{name}:run"}))
    with pytest.raises(ValueError, match=f"Filter.*{name}:run.*not trusted"):
        Workflow.load(str(path), trusted=[keep_all])
    assert_not_imported(evil_module)


def test_function_reexported_by_a_trusted_module_is_not_trusted(tmp_path, monkeypatch):
    # trusting a module trusts the functions defined in it, not what it imported (os.system here)
    (tmp_path / "helpers_mod.py").write_text("from os import system\n\ndef plus_two(col):\n    return col + 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import helpers_mod

    path = save(tmp_path, ["n"] >> ops.LambdaOp(helpers_mod.plus_two))
    assert Workflow.load(str(path), trusted=[helpers_mod]).transform(frame())["n"].tolist() == [3.0, 4.0, 5.0, 6.0]
    edit(path, lambda doc: op_record(doc, "LambdaOp")["config"].update(f={"__function__": "helpers_mod:system"}))
    with pytest.raises(ValueError, match="helpers_mod:system.*not trusted"):
        Workflow.load(str(path), trusted=[helpers_mod])


def test_function_nested_inside_a_config_value_is_refused(tmp_path, evil_module):
    path = save(tmp_path, ["n"] >> ops.AddProperties(meta={"unit": "s"}))
    name, _ = evil_module
    nested = {"unit": "s", "hook": [{"__function__": f"{name}:run"}]}
    edit(path, lambda doc: op_record(doc, "AddProperties")["config"].update(meta=nested))
    with pytest.raises(ValueError, match="AddProperties.*parameter meta.*nested"):
        Workflow.load(str(path))
    assert_not_imported(evil_module)


# --- attacks: operator classes ------------------------------------------------------------------
def test_op_class_naming_an_arbitrary_module_is_not_imported(tmp_path, evil_module):
    path = basic(tmp_path)
    name, _ = evil_module
    edit(path, lambda doc: op_record(doc, "Normalize").update({"class": f"{name}:Op"}))
    with pytest.raises(ValueError, match=f"node \\d+: unknown operator '{name}:Op'.*not registered.*register_operator"):
        Workflow.load(str(path))
    assert_not_imported(evil_module)


@pytest.mark.parametrize("name", ["builtins:eval", "subprocess:Popen", "os:system", "tabloader.ops.base:Operator"])
def test_op_class_naming_a_non_operator_is_refused(tmp_path, name):
    path = edit(basic(tmp_path), lambda doc: op_record(doc, "Normalize").update({"class": name}))
    with pytest.raises(ValueError, match=f"unknown operator '{name}'"):
        Workflow.load(str(path))


def test_registered_op_with_config_keys_that_are_not_parameters(tmp_path):
    path = edit(basic(tmp_path), lambda doc: op_record(doc, "Normalize")["config"].update(evil="rm -rf /"))
    with pytest.raises(ValueError, match=r"Normalize.*config key\(s\) \['evil'\] are not parameters.*out_dtype"):
        Workflow.load(str(path))


# --- attacks: state files -----------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["dotdot", "absolute", "separator", "hidden"])
def test_state_path_outside_the_directory_is_refused(tmp_path, outside, kind):
    path = basic(tmp_path)
    name = {"dotdot": "../secret.parquet", "absolute": str(outside), "separator": "sub/x.parquet",
            "hidden": ".."}[kind]
    edit(path, set_state_file(name))
    with pytest.raises(ValueError, match="not a plain .parquet file name inside the workflow directory"):
        Workflow.load(str(path))


def test_symlinked_state_file_leading_outside_is_refused(tmp_path, outside):
    path = basic(tmp_path)
    name = parquet_state(path)
    os.remove(path / name)
    os.symlink(outside, path / name)
    with pytest.raises(ValueError, match=f"{name} leads outside the workflow directory"):
        Workflow.load(str(path))


def test_symlinked_workflow_json_leading_outside_is_refused(tmp_path):
    path, elsewhere = basic(tmp_path), save(tmp_path, ["n"] >> ops.Normalize(), name="elsewhere")
    os.remove(path / "workflow.json")
    os.symlink(elsewhere / "workflow.json", path / "workflow.json")
    with pytest.raises(ValueError, match="workflow.json leads outside the workflow directory"):
        Workflow.load(str(path))


def test_symlink_inside_the_directory_is_fine(tmp_path):
    path = basic(tmp_path)
    expected = Workflow.load(str(path)).transform(frame())
    name = parquet_state(path)
    os.rename(path / name, path / "real.parquet")
    os.symlink(path / "real.parquet", path / name)
    pd.testing.assert_frame_equal(Workflow.load(str(path)).transform(frame()), expected)


@pytest.mark.parametrize("entry", [{"__pickle__": "gASVAAAAAAAAAAA="}, {"__parquet__": "x.parquet", "kind": "pickle"},
                                   {"__parquet__": "x.parquet"}, "just a string", {"__json__": 1, "extra": 2}])
def test_state_entry_neither_json_nor_parquet_is_refused(tmp_path, entry):
    path = edit(basic(tmp_path), lambda doc: op_record(doc, "Normalize")["state"].update(means=entry))
    with pytest.raises(ValueError, match=r"node \d+, state 'means': a state entry is"):
        Workflow.load(str(path))


@pytest.mark.parametrize("name", ["../secret.parquet", "sub/x.parquet", "/etc/x.parquet"])
def test_nested_state_file_outside_the_directory_is_refused(tmp_path, outside, name):
    nested = {"__dict__": {"a": {"__list__": [{"__parquet__": name, "kind": "frame"}]}}}
    path = edit(basic(tmp_path), lambda doc: op_record(doc, "Normalize")["state"].update(means=nested))
    with pytest.raises(ValueError, match=r"state 'means'\['a'\]\[0\]: state file .* is not a plain .parquet file"):
        Workflow.load(str(path))


@pytest.mark.parametrize("entry", [{"__dict__": [1]}, {"__list__": {"a": 1}}, {"__dict__": {"a": "text"}},
                                   {"__list__": [{"__json__": 1}, {"__pickle__": "x"}]}])
def test_malformed_nested_state_entry_is_refused(tmp_path, entry):
    path = edit(basic(tmp_path), lambda doc: op_record(doc, "Normalize")["state"].update(means=entry))
    with pytest.raises(ValueError, match=r"node \d+, state 'means'.*a state entry is"):
        Workflow.load(str(path))


def test_state_entries_nested_too_deep_are_refused(tmp_path):
    entry = {"__json__": 1}
    for _ in range(40):
        entry = {"__list__": [entry]}
    path = edit(basic(tmp_path), lambda doc: op_record(doc, "Normalize")["state"].update(means=entry))
    with pytest.raises(ValueError, match="state entries nest more than 32 deep"):
        Workflow.load(str(path))


# --- attacks: the document itself ---------------------------------------------------------------
@pytest.mark.parametrize("version", [10**30, 0, -1, "1", None, True, 1.0])
def test_unknown_format_version(tmp_path, version):
    path = edit(basic(tmp_path), lambda doc: doc.update(format_version=version))
    with pytest.raises(ValueError, match=f"format version {version!r}.*reads format version 1"):
        Workflow.load(str(path))


@pytest.mark.parametrize("key", ["format_version", "nodes", "output", "input_schema", "output_schema"])
def test_missing_top_level_key_names_it(tmp_path, key):
    path = edit(basic(tmp_path), lambda doc: doc.pop(key))
    with pytest.raises(ValueError, match=f"'{key}'|format version None"):
        Workflow.load(str(path))


@pytest.mark.parametrize("key", ["kind", "parents", "selector"])
def test_missing_node_key_names_it(tmp_path, key):
    path = edit(basic(tmp_path), lambda doc: doc["nodes"][0].pop(key))
    with pytest.raises(ValueError, match=f"node 0.*the key '{key}' is missing"):
        Workflow.load(str(path))


@pytest.mark.parametrize("key", ["class", "config", "state"])
def test_missing_op_key_names_it(tmp_path, key):
    path = edit(basic(tmp_path), lambda doc: op_record(doc, "Normalize").pop(key))
    with pytest.raises(ValueError, match=f"the key '{key}' is missing; an operator needs"):
        Workflow.load(str(path))


@pytest.mark.parametrize("parent", [99, -1, "itself", "next", True, "0"])
def test_parents_must_be_earlier_nodes(tmp_path, parent):
    def change(doc):
        i = next(i for i, r in enumerate(doc["nodes"]) if r["kind"] == "op")
        doc["nodes"][i]["parents"] = [{"itself": i, "next": i + 1}.get(parent, parent)]
    path = edit(basic(tmp_path), change)
    with pytest.raises(ValueError, match="must be indexes of earlier nodes.*no forward or cyclic"):
        Workflow.load(str(path))


@pytest.mark.parametrize("output", [99, -1, "0"])
def test_output_must_be_a_node(tmp_path, output):
    path = edit(basic(tmp_path), lambda doc: doc.update(output=output))
    with pytest.raises(ValueError, match="'output'"):
        Workflow.load(str(path))


def test_unknown_node_kind(tmp_path):
    path = edit(basic(tmp_path), lambda doc: doc["nodes"][0].update(kind="exec"))
    with pytest.raises(ValueError, match=r"kind 'exec' is unknown; allowed: \['concat', 'drop', 'op', 'pick', 'select'\]"):
        Workflow.load(str(path))


def test_document_that_is_not_an_object(tmp_path):
    path = basic(tmp_path)
    (path / "workflow.json").write_text("[1, 2, 3]")
    with pytest.raises(ValueError, match="expected a JSON object"):
        Workflow.load(str(path))


# --- attacks through the command line -----------------------------------------------------------
def test_cli_inspect_in_process_shows_the_function_without_running_it(shell_workflow, capsys):
    path, marker = shell_workflow
    assert cli.main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "os:system" in out and "not loaded" in out and "Rename" in out
    assert not marker.exists()


def test_cli_inspect_in_a_subprocess_shows_the_function_without_running_it(shell_workflow):
    path, marker = shell_workflow
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "tabloader.cli", "inspect", str(path)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "os:system" in done.stdout and "not loaded" in done.stdout
    assert not marker.exists()


def test_cli_inspect_of_an_unregistered_class_fails_closed_in_one_line(tmp_path, evil_module, capsys):
    name, _ = evil_module
    path = edit(basic(tmp_path), lambda doc: op_record(doc, "Normalize").update({"class": f"{name}:Op"}))
    assert cli.main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"unknown operator '{name}:Op'" in err and len(err.strip().splitlines()) == 1
    assert_not_imported(evil_module)


def test_cli_transform_refuses_untrusted_function(shell_workflow, tmp_path, capsys):
    path, marker = shell_workflow
    data = tmp_path / "data.parquet"
    pd.DataFrame({f"touch {marker}": [1, 2]}).to_parquet(data)
    assert cli.main(["transform", str(path), str(data), str(tmp_path / "out")]) == 2
    assert "'os:system' is not trusted" in capsys.readouterr().err
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_yaml_spec_cannot_name_a_module(tmp_path, evil_module, capsys):
    name, _ = evil_module
    data = tmp_path / "data.parquet"
    frame().to_parquet(data)
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"groups: [{{columns: [n], ops: ['{name}:Op']}}]\n")
    assert cli.main(["fit", str(spec), str(data), str(tmp_path / "wf")]) == 2
    assert f"unknown operator '{name}:Op'" in capsys.readouterr().err
    assert_not_imported(evil_module)


# --- what the user trusts loads; loading calls nothing ------------------------------------------
def test_loading_never_calls_a_trusted_function(tmp_path):
    path = save(tmp_path, (["c"] >> ops.Rename(f=shout)) + ["n"])
    CALLS.clear()
    loaded = Workflow.load(str(path), trusted=[shout])
    assert CALLS == []  # neither loading nor resolving the graph called it
    out = loaded.transform(frame())
    assert list(out.columns) == ["C", "n"] and out["C"].tolist() == frame()["c"].tolist()


def test_trusted_functions_and_modules(tmp_path):
    path = save(tmp_path, (["n"] >> ops.LambdaOp(plus_one)) + (["c", "label"] >> ops.Filter(keep_all)))
    expected = frame()["n"].to_numpy() + 1
    this_module = sys.modules[__name__]
    for trusted in ([plus_one, keep_all], [this_module], [keep_all, this_module]):
        np.testing.assert_array_equal(Workflow.load(str(path), trusted=trusted).transform(frame())["n"], expected)
    with pytest.raises(ValueError, match="keep_all.*not trusted.*trusted=\\[keep_all\\]"):
        Workflow.load(str(path), trusted=[plus_one])
    with pytest.raises(TypeError, match="not names"):
        Workflow.load(str(path), trusted=[f"{__name__}:plus_one"])
    with pytest.raises(TypeError, match="functions and modules"):
        Workflow.load(str(path), trusted=[3])


def test_placeholder_loads_for_inspection_but_does_not_run(tmp_path):
    import tabloader as tl

    path = save(tmp_path, ["n"] >> ops.LambdaOp(plus_one))
    wf = Workflow.load(str(path), untrusted="placeholder")
    assert wf.output_schema.column_names == ["n"] and "plus_one" in repr(wf)
    with pytest.raises(tl.UntrustedError, match="plus_one.*was not loaded"):
        wf.transform(frame())
    with pytest.raises(ValueError, match="cannot be saved"):  # a stand-in is never saved as if it were the function
        wf.save(str(tmp_path / "again"))
    with pytest.raises(ValueError, match="'raise' or 'placeholder'"):
        Workflow.load(str(path), untrusted="ignore")


def test_old_class_names_load_without_columns(tmp_path):
    # workflows saved before resolved columns were recorded (the built-ins named module:qualname) still load
    path = basic(tmp_path)
    doc = json.loads((path / "workflow.json").read_text())
    assert op_record(doc, "Categorify")["class"] == "tabloader.ops.categorify:Categorify"
    expected = Workflow.load(str(path)).transform(frame())
    edit(path, lambda d: [r.pop("columns") for r in d["nodes"]])
    pd.testing.assert_frame_equal(Workflow.load(str(path)).transform(frame()), expected)


# --- the operator registry ----------------------------------------------------------------------
def test_register_operator_for_a_third_party_op(tmp_path):
    import tabloader as tl
    from tabloader.ops.base import Operator, flatten_columns

    class Triple(Operator):
        def transform(self, columns, frame):
            return frame[flatten_columns(columns)] * 3

    wf = Workflow(["n"] >> Triple(), progress=False).fit(frame())
    with pytest.raises(ValueError, match="Triple is not registered.*register_operator"):
        wf.save(str(tmp_path / "wf"))
    assert not (tmp_path / "wf").exists()
    assert tl.register_operator(name="test_security:Triple")(Triple) is Triple
    wf.save(str(tmp_path / "wf"))
    doc = json.loads((tmp_path / "wf" / "workflow.json").read_text())
    assert doc["nodes"][-1]["op"]["class"] == "test_security:Triple"
    assert Workflow.load(str(tmp_path / "wf")).transform(frame())["n"].tolist() == [3.0, 6.0, 9.0, 12.0]

    class Other(Operator):
        pass

    with pytest.raises(ValueError, match="already registered"):
        tl.register_operator(Other, name="test_security:Triple")
    with pytest.raises(TypeError, match="subclass of tabloader.ops.Operator"):
        tl.register_operator(dict)


# --- save refuses what could not be loaded again ------------------------------------------------
class _Callable:
    def __call__(self, col):
        return col

    def method(self, col):
        return col


def _closure():
    def inner(col):
        return col
    return inner


@pytest.mark.parametrize("fn, reason", [
    (lambda col: col, "anonymous lambda"),
    (functools.partial(np.add, 1), "functools.partial"),
    (_Callable(), "callable instance of _Callable"),
    (_Callable().method, "bound method"),
    (_closure(), "defined inside another function"),
], ids=["lambda", "partial", "instance", "bound-method", "closure"])
def test_save_refuses_functions_that_cannot_be_loaded_again(tmp_path, fn, reason):
    wf = Workflow(["n"] >> ops.LambdaOp(fn), progress=False).fit(frame())
    with pytest.raises(ValueError, match=f"LambdaOp.*parameter f.*{reason}"):
        wf.save(str(tmp_path / "wf"))
    assert not (tmp_path / "wf").exists()


def test_save_refuses_a_function_of_main(tmp_path):
    def fn(col):
        return col
    fn.__module__, fn.__qualname__ = "__main__", "fn"
    wf = Workflow(["c"] >> ops.Rename(f=fn), progress=False).fit(frame())
    with pytest.raises(ValueError, match="Rename.*parameter f.*__main__"):
        wf.save(str(tmp_path / "wf"))


def test_cli_trust_imports_only_the_named_module_and_runs_its_functions(tmp_path, monkeypatch, capsys):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "user_fns.py").write_text(
        "import tabloader as tl\n"
        "from tabloader.ops import Operator\n\n"
        "def times_three(col):\n    return col * 3\n\n"
        "@tl.register_operator\n"
        "class AddOne(Operator):\n"
        "    def transform(self, columns, frame):\n        return frame[columns] + 1\n")
    monkeypatch.syspath_prepend(str(package))
    import user_fns

    wf = Workflow(["n"] >> ops.LambdaOp(user_fns.times_three) >> user_fns.AddOne(), progress=False)
    wf.fit(frame()).save(str(tmp_path / "wf"))
    data = tmp_path / "data.parquet"
    frame().to_parquet(data)
    monkeypatch.delitem(sys.modules, "user_fns")  # a fresh process: nothing imported, nothing registered yet

    assert cli.main(["transform", str(tmp_path / "wf"), str(data), str(tmp_path / "refused")]) == 2
    err = capsys.readouterr().err
    assert "--trust MODULE" in err and len(err.strip().splitlines()) == 1
    assert "user_fns" not in sys.modules and not (tmp_path / "refused").exists()

    assert cli.main(["transform", str(tmp_path / "wf"), str(data), str(tmp_path / "out"), "--trust", "user_fns",
                     "--quiet"]) == 0
    expected = frame()["n"] * 3 + 1
    assert pd.read_parquet(tmp_path / "out")["n"].tolist() == expected.tolist()
    assert cli.main(["inspect", str(tmp_path / "wf"), "--trust", "no_such_module_xyz"]) == 2
    assert "--trust no_such_module_xyz: cannot import it" in capsys.readouterr().err
    assert cli.main(["inspect", str(tmp_path / "wf"), "--trust", ".relative"]) == 2  # no package to be relative to
    assert "--trust .relative: cannot import it" in capsys.readouterr().err


def test_pick_node_record_must_name_columns(tmp_path):
    df = pd.DataFrame({"x": [1.0, 2.0], "y": [3.0, 4.0]})
    path = tmp_path / "wf"
    Workflow((["x", "y"] >> ops.FillMissing(0))["x"], progress=False).fit(df).save(str(path))
    doc = json.loads((path / "workflow.json").read_text())
    pick = next(n for n in doc["nodes"] if n["kind"] == "pick")
    pick["picked"] = [{"import": "os"}]
    (path / "workflow.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="'picked': expected column names"):
        Workflow.load(str(path))


# --- attacks: time zones pandas resolves by opening a file, and tables that decode to gigabytes ---
@pytest.fixture
def opened_files():
    """The paths this process opens from now on (an audit hook: it stays, only recording)."""
    seen: list[str] = []

    def hook(event, args):
        if event == "open" and isinstance(args[0], str):
            seen.append(args[0])

    sys.addaudithook(hook)
    return seen


def dateutil_zone(tmp_path: Path) -> tuple[str, Path]:
    """A ``dateutil/`` zone naming a file outside any workflow (pandas would open it)."""
    secret = tmp_path / "outside" / "secret_tz"
    secret.parent.mkdir()
    secret.write_bytes(b"TZif not really")
    return f"dateutil/{secret}", secret


def test_a_state_table_whose_pandas_metadata_names_a_dateutil_zone_is_refused_unread(tmp_path, opened_files):
    path = basic(tmp_path)
    zone, secret = dateutil_zone(tmp_path)
    table_path = path / parquet_state(path)
    table = pq.read_table(table_path)
    meta = json.loads(table.schema.metadata[b"pandas"])
    meta["columns"][0].update(numpy_type=f"datetime64[ns, {zone}]", metadata={"timezone": zone})
    pq.write_table(table.replace_schema_metadata({b"pandas": json.dumps(meta).encode()}), table_path)
    opened_files.clear()  # the test's own writes
    with pytest.raises(ValueError, match="time zone"):
        Workflow.load(str(path))
    assert str(secret) not in opened_files


def test_a_lambdaop_dtype_or_a_schema_dtype_naming_a_dateutil_zone_is_refused_unread(tmp_path, opened_files):
    zone, secret = dateutil_zone(tmp_path)
    opened_files.clear()  # the test's own write
    lam = save(tmp_path, ["n"] >> ops.LambdaOp(plus_one, dtype="float64"), name="lam")
    edit(lam, lambda doc: op_record(doc, "LambdaOp")["config"].update(dtype=f"datetime64[ns, {zone}]"))
    with pytest.raises(ValueError, match="time zone"):
        Workflow.load(str(lam), trusted=[plus_one])
    schema = basic(tmp_path)
    edit(schema, lambda doc: doc["input_schema"]["columns"][0].update(dtype=f"datetime64[ns, {zone}]"))
    with pytest.raises(ValueError, match="time zone"):
        Workflow.load(str(schema))
    assert str(secret) not in opened_files


def test_a_state_table_decoding_to_far_more_than_its_file_is_refused(tmp_path, monkeypatch):
    """A crafted table of one repeated value: megabytes on disk, gigabytes decoded."""
    from tabloader import saved_state

    monkeypatch.setattr(saved_state, "SMALL_TABLE_BYTES", 1_000_000)  # the test's table stays small
    path = basic(tmp_path)
    pq.write_table(pa.table({"values": np.zeros(2_000_000, np.int64)}), path / parquet_state(path))
    with pytest.raises(ValueError, match="decoded"):
        Workflow.load(str(path))


def test_reduce_dtype_size_takes_only_the_integer_dtypes_fit_records(tmp_path):
    path = save(tmp_path, ["label"] >> ops.ReduceDtypeSize())
    edit(path, lambda doc: op_record(doc, "ReduceDtypeSize")["state"].update(
        dtypes={"__json__": {"label": "datetime64[ns, UTC]"}}))
    with pytest.raises(ValueError, match="saved dtypes"):
        Workflow.load(str(path))


def test_a_struct_nested_without_end_in_an_nvtabular_schema_is_a_value_error(tmp_path):
    """``extraMetadata`` of ``.merlin/schema.json`` as a base64 ``google.protobuf.Struct`` nested
    thousands deep: a ValueError naming the file, not a RecursionError."""
    import base64

    import tabloader as tl
    from tabloader.dataset.protobuf import _STRUCT_URL

    def field(number: int, payload: bytes) -> bytes:  # a length-delimited field of the wire format
        size, length = len(payload), b""
        while True:
            length += bytes([(size & 0x7F) | (0x80 if size > 0x7F else 0)])
            size >>= 7
            if not size:
                return bytes([number << 3 | 2]) + length + payload

    struct = b""
    for _ in range(3000):  # Struct{"k": Value{struct_value: Struct{...}}}
        struct = field(1, field(1, b"k") + field(2, field(5, struct)))
    pq.write_table(pa.table({"C1": [1, 2]}), tmp_path / "part_0.parquet")
    (tmp_path / ".merlin").mkdir()
    (tmp_path / ".merlin" / "schema.json").write_text(json.dumps({"feature": [{"name": "C1", "annotation": {
        "extraMetadata": [{"@type": _STRUCT_URL, "value": base64.b64encode(struct).decode()}]}}]}))
    with pytest.raises(ValueError, match="schema.json.*nested deeper"):
        tl.Dataset(str(tmp_path))


# --- damaged records: a clear error naming the file, the node and the operator ----------------------
@pytest.mark.parametrize("change, message", [
    (lambda doc: op_record(doc, "Normalize")["state"].pop("stds"), r"node \d+ \(Normalize\): its saved state .*'stds'"),
    (lambda doc: op_record(doc, "Normalize")["state"].update(means={"__json__": [1.0]}),
     r"node \d+ \(Normalize\): its saved state does not fit the operator \(AttributeError"),
    (lambda doc: op_record(doc, "Categorify")["state"].update(cardinalities={"__json__": 5}),
     r"node \d+ \(Categorify\): its saved state does not fit"),
], ids=["missing-key", "list-for-dict", "int-for-dict"])
def test_a_damaged_operator_state_is_refused_naming_the_file_node_and_operator(tmp_path, change, message):
    path = edit(basic(tmp_path), change)
    with pytest.raises(ValueError, match="workflow.json: " + message) as caught:
        Workflow.load(str(path))
    assert "the workflow directory is damaged" in str(caught.value)


@pytest.mark.parametrize("kind", ["nested-document", "nested-parameter", "huge-integer"])
def test_documents_too_deep_or_with_huge_numbers_are_refused_naming_the_file(tmp_path, kind):
    path = basic(tmp_path)
    text = (path / "workflow.json").read_text()
    if kind == "nested-document":
        text = text.rstrip()[:-1] + ', "junk": ' + "[" * 3000 + "]" * 3000 + "}"
    elif kind == "nested-parameter":
        text = text.replace('"out_dtype": "float32"', '"out_dtype": ' + "[" * 900 + "]" * 900)
    else:
        text = text.replace('"output": ', '"output": ' + "9" * 5000 + ', "x": ', 1)
    (path / "workflow.json").write_text(text)
    with pytest.raises(ValueError, match=r"workflow.json (is not valid JSON|nests deeper than)"):
        Workflow.load(str(path))
