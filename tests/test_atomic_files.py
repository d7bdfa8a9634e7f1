"""Atomic files and directories: nothing half-written ever looks complete."""

from __future__ import annotations

import contextlib
import errno
import gc
import importlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import fsspec
import numpy as np
import pandas as pd
import pytest

from tabloader import Dataset, Workflow, ops, synthetic
from tabloader.atomic_files import atomic_directory, temporary_sibling, write_text_atomic
from tabloader.filesystems import filesystem, join
from tabloader.schema import Schema


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
def test_tabloader_io_is_a_deprecated_alias():
    sys.modules.pop("tabloader.io", None)  # so that importing it runs it (and warns) again
    with pytest.warns(DeprecationWarning, match="tabloader.atomic_files"):
        io = importlib.import_module("tabloader.io")
    assert (io.atomic_directory, io.write_text_atomic, io.filesystem, io.join) == (
        atomic_directory, write_text_atomic, filesystem, join)


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


# --- write failures name the destination ----------------------------------------------------------
# Real failures, no mocks. Tests run as root here, where a read-only directory (chmod) refuses
# nothing; a path under a file, /sys, a tiny tmpfs and RLIMIT_FSIZE refuse writes even to root.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FRAME = pd.DataFrame({"user": np.arange(20_000, dtype=np.int64), "score": np.linspace(0, 1, 20_000)})


def python_command(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


CHILD_ENV = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}  # this checkout


def run_python(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh Python importing this checkout's tabloader."""
    return subprocess.run(python_command(code), env=CHILD_ENV, capture_output=True, text=True, timeout=120)


def write_dataset(path: str, overwrite: bool = False) -> None:
    Dataset(FRAME, part_size="64KB").to_parquet(path, overwrite=overwrite, progress=False)


def save_workflow(path: str, overwrite: bool = False) -> None:
    Workflow(["user"] >> ops.Categorify(), progress=False).fit(Dataset(FRAME)).save(path, overwrite=overwrite)


def write_schema(path: str, overwrite: bool = False) -> None:
    Schema.from_frame(FRAME).save(path)


def write_synthetic(path: str, overwrite: bool = False) -> None:
    synthetic.write_criteo(path, 20_000, num_files=2, overwrite=overwrite)


WRITERS = [write_dataset, save_workflow, write_schema, write_synthetic]


def hidden_leftovers(directory) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.startswith("."))


@pytest.mark.parametrize("write", WRITERS)
def test_write_under_a_file_names_the_destination(write, tmp_path):
    (tmp_path / "a-file").write_text("not a directory")
    destination = str(tmp_path / "a-file" / "out")
    with pytest.raises(NotADirectoryError) as info:
        write(destination)
    message = str(info.value)
    assert f"cannot write {destination}" in message and "is a file, not a directory" in message
    assert isinstance(info.value.__cause__, OSError)  # the original error, chained
    assert os.listdir(tmp_path) == ["a-file"] and (tmp_path / "a-file").read_text() == "not a directory"


@pytest.mark.parametrize("write", WRITERS)
def test_write_where_even_root_may_not_names_the_destination(write):
    destination = "/sys/tabloader-test-out"
    if not os.path.isdir("/sys/kernel") or _creatable(destination):
        pytest.skip("no /sys that refuses writes here")
    with pytest.raises(PermissionError) as info:
        write(destination)
    assert f"cannot write {destination}" in str(info.value) and "allowed" in str(info.value)
    assert not os.path.exists(destination)


def _creatable(path: str) -> bool:
    try:
        os.mkdir(path)
    except OSError:
        return False
    os.rmdir(path)
    return True


@pytest.mark.parametrize("write", WRITERS)
def test_write_to_a_read_only_directory_names_the_destination(write, tmp_path):
    directory = tmp_path / "read-only"
    directory.mkdir()
    directory.chmod(0o555)
    try:
        if _creatable(str(directory / "probe")):
            pytest.skip("this user (root) may write to a read-only directory")
        with pytest.raises(PermissionError, match=f"cannot write {directory}/out"):
            write(str(directory / "out"))
        assert os.listdir(directory) == []
    finally:
        directory.chmod(0o755)


@pytest.fixture
def tiny_filesystem(tmp_path):
    """A 64 KiB tmpfs (needs root and permission to mount, as in a privileged container)."""
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount_point)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    yield mount_point
    gc.collect()  # files a failed test left open would keep the file system busy
    if subprocess.run(["umount", str(mount_point)]).returncode != 0:
        subprocess.run(["umount", "--lazy", str(mount_point)], check=True)


def open_files_under(directory) -> list[str]:
    """Files this process holds open under ``directory`` (Linux)."""
    links = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            links.append(os.readlink(f"/proc/self/fd/{fd}"))
    return [link for link in links if link.startswith(str(directory))]


@pytest.mark.parametrize("write", [write_dataset, save_workflow, write_synthetic])
def test_disk_full_names_the_destination_and_keeps_the_old_output(write, tiny_filesystem):
    out = tiny_filesystem / "out"
    out.mkdir()
    (out / "old.txt").write_text("the previous output")
    with pytest.raises(OSError) as info:
        write(str(out), overwrite=True)
    assert info.value.errno == errno.ENOSPC
    assert f"cannot write {out}: No space left on device; free space" in str(info.value)
    assert listing(out) == {"old.txt": "the previous output"}
    assert os.listdir(tiny_filesystem) == ["out"]  # no temporary left


@pytest.mark.parametrize("write", [write_dataset, save_workflow, write_synthetic])
def test_disk_full_leaves_no_file_open(write, tiny_filesystem):
    # A parquet writer whose close fails keeps its file open until garbage collection: the
    # temporary is deleted, but its space stays taken (and the file system cannot be unmounted).
    gc.disable()  # so that a collection cannot close it before the check
    try:
        with pytest.raises(OSError, match="No space left on device"):
            write(str(tiny_filesystem / "out"))
        assert os.listdir(tiny_filesystem) == []
        assert open_files_under(tiny_filesystem) == []
    finally:
        gc.enable()


def test_read_only_file_system_names_the_destination(tiny_filesystem):
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_filesystem)], check=True)
    with pytest.raises(OSError) as info:
        write_dataset(str(tiny_filesystem / "out"))
    assert info.value.errno == errno.EROFS
    assert f"cannot write {tiny_filesystem}/out: Read-only file system" in str(info.value)


def test_file_size_limit_names_the_destination(tmp_path):
    # RLIMIT_FSIZE makes a write beyond 64 KiB fail with EFBIG, for root as well; in a child
    # process, so that this one keeps its limit.
    out = tmp_path / "out"
    result = run_python(f"""
        import resource, signal
        import numpy as np, pandas as pd
        from tabloader import Dataset
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the kernel kills the process
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))
        frame = pd.DataFrame({{"x": np.random.default_rng(0).random(100_000)}})
        try:
            Dataset(frame).to_parquet({str(out)!r}, progress=False)
        except OSError as err:
            print(type(err).__name__, err.errno, err, "| caused by:", repr(err.__cause__))
    """)
    assert result.returncode == 0, result.stderr
    assert f"OSError {errno.EFBIG} [Errno {errno.EFBIG}] cannot write {out}: File too large; " in result.stdout
    assert "ulimit -f" in result.stdout and "caused by: OSError" in result.stdout
    assert os.listdir(tmp_path) == []


def test_a_read_error_inside_a_write_is_not_called_a_write_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing-input") as info:
        with atomic_directory(str(tmp_path / "out")):
            open(tmp_path / "missing-input")
    assert "cannot write" not in str(info.value)
    assert os.listdir(tmp_path) == []


def test_a_failed_write_stops_its_other_files_writers_at_their_next_partition(tmp_path):
    """A file's writer reads its partitions one after another: once the write failed (or Ctrl-C
    stopped it), the other writers stop at their next partition rather than finish their files
    (`--output-files 1` over hours of data did not stop for hours). The old output stays."""
    import dask

    read = []

    def read_partition(part):
        if len(part) and part["user"].iloc[0] == 0:
            raise ValueError("a bad partition")
        if len(part):
            read.append(int(part["user"].iloc[0]))
            time.sleep(0.02)
        return part

    ds = Dataset(pd.DataFrame({"user": np.arange(20_000)}), part_size="1600B")
    assert ds.npartitions >= 80
    write_dataset(str(tmp_path / "out"))
    with dask.config.set(num_workers=2), pytest.raises(ValueError, match="a bad partition"):
        ds.with_transform(read_partition, ds.schema).to_parquet(str(tmp_path / "out"), output_files=2, overwrite=True,
                                                                 progress=False)
    assert len(read) < ds.npartitions // 4, read
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "out").sort_values("user", ignore_index=True), FRAME)

# --- temporaries left by killed writers ---------------------------------------------------------
def test_a_killed_writer_s_temporary_is_removed_by_the_next_write(tmp_path):
    out = str(tmp_path / "out")
    # A real writer killed mid-write: SIGKILL from inside the partition function while the
    # writer threads are writing parquet files, so nothing of it gets a chance to clean up.
    result = run_python(f"""
        import os, signal
        import numpy as np, pandas as pd
        from tabloader import Dataset
        def read(part):
            if len(part) and part["user"].iloc[0] >= 10_000:
                os.kill(os.getpid(), signal.SIGKILL)
            return part
        frame = pd.DataFrame({{"user": np.arange(20_000), "score": np.linspace(0, 1, 20_000)}})
        ds = Dataset(frame, part_size="64KB")
        ds.with_transform(read, ds.schema).to_parquet({out!r}, progress=False)
    """)
    assert result.returncode == -signal.SIGKILL, result.stderr
    left = hidden_leftovers(tmp_path)
    assert len(left) == 1 and left[0].startswith(".out.tmp-") and os.listdir(tmp_path / left[0])
    assert not os.path.exists(out)

    write_dataset(out)
    assert os.listdir(tmp_path) == ["out"]
    pd.testing.assert_frame_equal(pd.read_parquet(out).sort_values("user", ignore_index=True), FRAME)


def test_a_live_writer_s_temporary_is_left_alone(tmp_path):
    out = str(tmp_path / "out")
    # A second process holds an atomic directory of `out` open until it reads a line.
    child = subprocess.Popen(python_command(f"""
        import sys
        from tabloader.atomic_files import atomic_directory
        with atomic_directory({out!r}, overwrite=True) as tmp:
            open(tmp + "/from-the-live-writer.txt", "w").write("live")
            print(tmp, flush=True)
            sys.stdin.readline()
    """), env=CHILD_ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        live_tmp = child.stdout.readline().strip()
        assert os.path.isdir(live_tmp)
        write_dataset(out)  # this write's clean-up must not touch the live writer's temporary
        assert os.path.isfile(os.path.join(live_tmp, "from-the-live-writer.txt"))
        child.communicate("go on\n", timeout=60)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == 0
    assert listing(out) == {"from-the-live-writer.txt": "live"}  # it finished, replacing the first
    assert os.listdir(tmp_path) == ["out"]


def _this_machine() -> str:
    """The SPACE part of the names tabloader makes here (the format is in tabloader.atomic_files' docstring)."""
    return os.path.basename(temporary_sibling("x")).split(".tmp-")[1].split("-")[0]


def _stale_name(destination: str, kind: str, pid: int, start: int = 0, space: str | None = None) -> str:
    """A temporary's name as a writer with ``pid``, started at ``start``, makes it."""
    return f".{os.path.basename(destination)}.{kind}-{space or _this_machine()}-{pid}-{start}-{uuid.uuid4().hex[:12]}"


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _start_ticks(pid: int) -> int:
    """Field 22 of /proc/PID/stat, read here independently of tabloader."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="process start times come from Linux's /proc")
def test_only_temporaries_of_gone_writers_of_the_same_destination_are_removed(tmp_path):
    out = str(tmp_path / "out")
    me, started = os.getpid(), _start_ticks(os.getpid())
    another_machine = format(int(_this_machine(), 16) ^ 1, "08x")
    gone = [_stale_name(out, "tmp", _dead_pid()),
            _stale_name(out, "tmp", me, started + 1)]  # my pid, but that writer started at another time
    kept = [_stale_name(out, "tmp", me, started),  # a live writer (this process)
            _stale_name(str(tmp_path / "other"), "tmp", _dead_pid()),  # another destination
            _stale_name(out, "tmp", _dead_pid(), space=another_machine),  # its pids are not ours to judge
            ".out.tmp-cafe", _stale_name(out, "tmp", _dead_pid()) + ".backup"]  # not names tabloader makes
    for name in gone + kept:
        (tmp_path / name).mkdir()
        (tmp_path / name / "part.parquet").write_text("half")
    write_text_atomic(out, "new")
    assert sorted(os.listdir(tmp_path)) == sorted(["out", *kept])
    assert (tmp_path / "out").read_text() == "new"


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="process start times come from Linux's /proc")
def test_an_old_output_set_aside_by_a_killed_writer_is_put_back(tmp_path):
    # A writer replacing `out` renames the old one aside, then the new one in; killed between
    # the two, it leaves no `out`: the old output, complete, is what the next writer restores.
    out = tmp_path / "out"
    old = tmp_path / _stale_name(str(out), "old", _dead_pid())
    old.mkdir()
    (old / "a.txt").write_text("the previous output")
    with pytest.raises(FileExistsError):
        with atomic_directory(str(out)):
            pytest.fail("out exists again: the block must not run")
    assert listing(out) == {"a.txt": "the previous output"}
    assert os.listdir(tmp_path) == ["out"]
    # once `out` exists, a stale set-aside copy is only removed
    old.mkdir()
    with atomic_directory(str(out), overwrite=True) as tmp:
        open(os.path.join(tmp, "b.txt"), "w").write("new")
    assert listing(out) == {"b.txt": "new"} and os.listdir(tmp_path) == ["out"]
