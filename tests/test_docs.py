"""Every ```python block of README.md and docs/*.md runs.

The blocks of one file run in order, in one fresh namespace, inside a temporary working
directory (so ``"raw/"``, ``"out/"`` and ``"wf/"`` in the snippets land there). A block preceded
by ``<!-- no-test -->`` is illustration only (GPU-only code, for instance) and is skipped.
Blocks that use TensorFlow (they import ``tensorflow``, ``keras`` or ``tabloader.tf``) run in a
separate test marked ``tf`` -- together with the file's other blocks, in order -- and skip
where TensorFlow is not installed. In-process TensorFlow is safe under pytest: the root
conftest imports triton first.
"""

from __future__ import annotations

import pathlib
import re
import warnings

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
_NO_TEST = re.compile(r"<!--\s*no-test\s*-->\s*$")
_USES_TF = re.compile(r"^\s*(import tensorflow|import keras|from tensorflow|from keras|import tabloader\.tf"
                      r"|from tabloader\.tf|from tabloader import .*\btf\b)", re.M)


def blocks(path: pathlib.Path) -> list[tuple[int, str, bool]]:
    """``(line, code, uses_tf)`` of each tested python block of ``path``, in order."""
    text = path.read_text(encoding="utf-8")
    out = []
    for match in _FENCE.finditer(text):
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        if _NO_TEST.search(before):
            continue
        line = text.count("\n", 0, match.start()) + 2
        code = match.group(1)
        out.append((line, code, bool(_USES_TF.search(code)) or "tl.tf." in code))
    return out


def run_blocks(path: pathlib.Path, selected: list[tuple[int, str, bool]]) -> None:
    namespace = {"__name__": "__docs__"}
    for line, code, _ in selected:
        # The code starts at `line`: pad so tracebacks point at the Markdown line.
        source = "\n" * (line - 1) + code
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            exec(compile(source, str(path.relative_to(ROOT)), "exec"), namespace)


def _ids(paths: list[pathlib.Path]) -> list[str]:
    return [str(p.relative_to(ROOT)) for p in paths]


NO_TF_FILES = [p for p in FILES if any(not tf for _, _, tf in blocks(p))]
TF_FILES = [p for p in FILES if any(tf for _, _, tf in blocks(p))]


def test_every_doc_file_is_collected():
    assert (ROOT / "docs" / "user-guide.md") in FILES
    assert all(blocks(p) for p in [ROOT / "README.md", ROOT / "docs" / "getting-started.md"])


@pytest.mark.parametrize("path", NO_TF_FILES, ids=_ids(NO_TF_FILES))
def test_doc_snippets(path, tmp_path, monkeypatch):
    """The file's blocks that do not need TensorFlow, in order."""
    monkeypatch.chdir(tmp_path)
    run_blocks(path, [b for b in blocks(path) if not b[2]])


@pytest.mark.tf
@pytest.mark.parametrize("path", TF_FILES, ids=_ids(TF_FILES))
def test_doc_snippets_with_tensorflow(path, tmp_path, monkeypatch):
    """All of the file's blocks, the TensorFlow ones included, in order."""
    pytest.importorskip("tensorflow")
    pytest.importorskip("keras")
    monkeypatch.chdir(tmp_path)
    run_blocks(path, blocks(path))
