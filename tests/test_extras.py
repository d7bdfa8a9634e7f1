"""A user who installed only the core (``pip install tabloader``) and reaches for PyTorch,
TensorFlow or the demo is told which extra to install, not ``No module named 'torch'``.

Each case runs in a fresh interpreter in which the package is made unimportable the way Python
itself does it (``sys.modules[name] = None`` makes ``import name`` raise ``ModuleNotFoundError``),
so the import machinery and tabloader's modules are the real ones.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tabloader.extras import require

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_without(missing: list[str], code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a new interpreter in which the ``missing`` packages cannot be imported."""
    block = "".join(f"sys.modules[{name!r}] = None\n" for name in missing)
    script = "import sys\n" + block + textwrap.dedent(code)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("module, missing, extra", [
    ("tabloader.torch", ["torch"], "torch"),
    ("tabloader.tf", ["tensorflow"], "tf"),
    ("tabloader.tf", ["keras"], "tf"),
])
def test_importing_an_adapter_without_its_framework_names_the_extra(module, missing, extra):
    if missing == ["keras"]:
        pytest.importorskip("tensorflow")  # else the missing TensorFlow is named first
    done = run_without(missing, f"""
        try:
            import {module}
        except ModuleNotFoundError as exc:
            print(exc.name)
            print(exc)
    """)
    assert done.returncode == 0, done.stderr
    name, message = done.stdout.splitlines()[:2]
    assert name == missing[0]
    assert f"{module} needs {missing[0]}, which is not installed" in message
    assert f"pip install 'tabloader[{extra}]'" in message


def test_the_demo_without_torch_says_what_to_install_before_doing_any_work(tmp_path):
    done = run_without(["torch"], f"""
        from tabloader.cli import main
        sys.exit(main(["demo", "--rows", "20000", "--workdir", {str(tmp_path / "work")!r}, "--quiet"]))
    """)
    assert done.returncode != 0
    assert "the demo (it trains a DLRM with PyTorch) needs torch" in done.stderr
    assert "pip install 'tabloader[torch]'" in done.stderr
    assert not (tmp_path / "work").exists(), "no data should be generated before the check"


def test_a_package_that_fails_on_its_own_missing_dependency_keeps_its_error(tmp_path, monkeypatch):
    # Installed, but broken: the hint would blame the wrong package, so the real error goes through.
    (tmp_path / "half_installed").mkdir()
    (tmp_path / "half_installed" / "__init__.py").write_text("import a_dependency_that_is_gone\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as caught:
        require("half_installed", "torch", "tabloader.torch")
    assert caught.value.name == "a_dependency_that_is_gone"
    assert "pip install" not in str(caught.value)


def test_an_installed_package_is_returned_as_imported():
    import numpy

    assert require("numpy", "core", "a test") is numpy
