"""Atomic files and directories: nothing half-written ever looks complete."""

from __future__ import annotations

import os
import uuid

import fsspec
import pytest

from tabloader.io import atomic_directory, filesystem, join, temporary_sibling, write_text_atomic


def listing(path) -> dict[str, str]:
    """Relative path -> content of every file under ``path``."""
    out = {}
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            out[os.path.relpath(full, path)] = open(full).read()
    return out


@pytest.fixture
def memroot():
    fs = fsspec.filesystem("memory")
    root = f"/tabloader-io-{uuid.uuid4().hex[:8]}"
    yield fs, root
    if fs.exists(root):
        fs.rm(root, recursive=True)


# --- helpers ----------------------------------------------------------------------------------
def test_temporary_sibling_is_hidden_and_fresh(tmp_path):
    target = str(tmp_path / "out")
    a, b = temporary_sibling(target), temporary_sibling(target + "/")
    assert a != b
    for tmp in (a, b):
        assert os.path.dirname(tmp) == str(tmp_path)
        assert os.path.basename(tmp).startswith(".out")
    assert temporary_sibling("name").startswith(".name")
    assert "/" not in temporary_sibling("name")


def test_join_and_filesystem():
    assert join("memory://a/b/", "c") == "memory://a/b/c"
    assert join("/x", "y") == "/x/y"
    fs, path = filesystem("memory://bucket/dir")
    assert "memory" in fs.protocol and path == "/bucket/dir"


# --- write_text_atomic --------------------------------------------------------------------------
def test_write_text_atomic_creates_and_replaces(tmp_path):
    path = tmp_path / "a.txt"
    write_text_atomic(str(path), "hello")
    assert path.read_text() == "hello"
    write_text_atomic(str(path), "world, again")
    assert path.read_text() == "world, again"
    assert os.listdir(tmp_path) == ["a.txt"]


def test_write_text_atomic_failure_keeps_the_old_file(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("old")
    with pytest.raises(TypeError):
        write_text_atomic(str(path), 12345)  # not text: fails while writing
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["a.txt"]  # no temporary left behind


def test_write_text_atomic_failure_leaves_no_new_file(tmp_path):
    with pytest.raises(TypeError):
        write_text_atomic(str(tmp_path / "new.txt"), object())
    assert os.listdir(tmp_path) == []


def test_write_text_atomic_failure_on_rename(tmp_path, monkeypatch):
    path = tmp_path / "a.txt"
    path.write_text("old")
    fs, _ = filesystem(str(path))

    def broken_mv(*args, **kwargs):
        raise OSError("rename failed")

    monkeypatch.setattr(type(fs), "mv", broken_mv)
    with pytest.raises(OSError, match="rename failed"):
        write_text_atomic(str(path), "new")
    monkeypatch.undo()
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["a.txt"]


def test_write_text_atomic_memory_url(memroot):
    fs, root = memroot
    write_text_atomic(f"memory://{root}/x/a.json", '{"a": 1}')
    with fs.open(f"{root}/x/a.json") as f:
        assert f.read() == b'{"a": 1}'
    assert fs.ls(f"{root}/x", detail=False) == [f"{root}/x/a.json"]


def test_write_text_atomic_unicode(tmp_path):
    path = tmp_path / "u.txt"
    write_text_atomic(str(path), "naïve — ✓")
    assert path.read_text(encoding="utf-8") == "naïve — ✓"


# --- atomic_directory ---------------------------------------------------------------------------
def test_atomic_directory_success(tmp_path):
    target = tmp_path / "out"
    with atomic_directory(str(target)) as tmp:
        assert os.path.basename(tmp).startswith(".out")
        assert os.path.dirname(tmp) == str(tmp_path)
        assert not target.exists()  # nothing at the target until the block succeeds
        (open(os.path.join(tmp, "a.txt"), "w")).write("a")
        os.makedirs(os.path.join(tmp, "sub"))
        open(os.path.join(tmp, "sub", "b.txt"), "w").write("b")
    assert listing(target) == {"a.txt": "a", os.path.join("sub", "b.txt"): "b"}
    assert os.listdir(tmp_path) == ["out"]


def test_atomic_directory_failure_leaves_nothing(tmp_path):
    target = tmp_path / "out"
    with pytest.raises(RuntimeError, match="midway"):
        with atomic_directory(str(target)) as tmp:
            open(os.path.join(tmp, "a.txt"), "w").write("half")
            raise RuntimeError("midway")
    assert os.listdir(tmp_path) == []


def test_atomic_directory_keyboard_interrupt_leaves_nothing(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with atomic_directory(str(tmp_path / "out")) as tmp:
            open(os.path.join(tmp, "a.txt"), "w").write("half")
            raise KeyboardInterrupt
    assert os.listdir(tmp_path) == []


def test_atomic_directory_existing_target_needs_overwrite(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with pytest.raises(FileExistsError, match="overwrite"):
        with atomic_directory(str(target)):
            pytest.fail("the block must not run")
    assert listing(target) == {"old.txt": "old"}
    assert os.listdir(tmp_path) == ["out"]


def test_atomic_directory_overwrite_replaces_only_when_complete(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with atomic_directory(str(target), overwrite=True) as tmp:
        open(os.path.join(tmp, "new.txt"), "w").write("new")
        assert listing(target) == {"old.txt": "old"}  # the old one is still whole meanwhile
    assert listing(target) == {"new.txt": "new"}
    assert os.listdir(tmp_path) == ["out"]


def test_atomic_directory_failed_overwrite_keeps_the_old(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with pytest.raises(ValueError):
        with atomic_directory(str(target), overwrite=True) as tmp:
            open(os.path.join(tmp, "new.txt"), "w").write("new")
            raise ValueError("no")
    assert listing(target) == {"old.txt": "old"}
    assert os.listdir(tmp_path) == ["out"]


def test_atomic_directory_failed_final_rename_restores_the_old(tmp_path, monkeypatch):
    target = tmp_path / "out"
    target.mkdir()
    (target / "old.txt").write_text("old")
    fs, _ = filesystem(str(target))
    real_mv = type(fs).mv

    def mv(self, path1, path2, *args, **kwargs):
        moving_new = os.path.exists(os.path.join(str(path1), "new.txt"))
        if moving_new and str(path2).rstrip("/") == str(target):
            raise OSError("rename of the new directory failed")
        return real_mv(self, path1, path2, *args, **kwargs)

    monkeypatch.setattr(type(fs), "mv", mv)
    with pytest.raises(OSError, match="rename of the new"):
        with atomic_directory(str(target), overwrite=True) as tmp:
            open(os.path.join(tmp, "new.txt"), "w").write("new")
    monkeypatch.undo()
    assert listing(target) == {"old.txt": "old"}
    assert os.listdir(tmp_path) == ["out"]


def test_atomic_directory_failed_cleanup_does_not_hide_the_error(tmp_path, monkeypatch):
    fs, _ = filesystem(str(tmp_path))

    def broken_rm(*args, **kwargs):
        raise OSError("cannot remove")

    with pytest.raises(RuntimeError, match="the real error"):
        with atomic_directory(str(tmp_path / "out")):
            monkeypatch.setattr(type(fs), "rm", broken_rm)
            raise RuntimeError("the real error")
    monkeypatch.undo()
    # what is left is a hidden temporary directory, never something at the target
    assert [n for n in os.listdir(tmp_path) if not n.startswith(".")] == []


def test_atomic_directory_memory_url(memroot):
    fs, root = memroot
    url = f"memory://{root}/out"
    with atomic_directory(url) as tmp:
        assert tmp.startswith("memory://") and "/." in tmp
        write_text_atomic(join(tmp, "a.txt"), "a")
        assert not fs.exists(f"{root}/out")
    assert fs.cat(f"{root}/out/a.txt") == b"a"
    assert [p.rsplit("/", 1)[-1] for p in fs.ls(root, detail=False)] == ["out"]
    with pytest.raises(FileExistsError):
        with atomic_directory(url):
            pass
    with pytest.raises(RuntimeError):
        with atomic_directory(url, overwrite=True) as tmp:
            write_text_atomic(join(tmp, "b.txt"), "b")
            raise RuntimeError
    assert fs.cat(f"{root}/out/a.txt") == b"a" and not fs.exists(f"{root}/out/b.txt")
    assert [p.rsplit("/", 1)[-1] for p in fs.ls(root, detail=False)] == ["out"]
