#!/usr/bin/env bash
# The test suite against the oldest versions pyproject.toml promises (numpy, pandas, pyarrow,
# dask, distributed...), not the pinned set of requirements-dev.txt: what a user whose
# environment holds older libraries (pandas 2.x under RAPIDS 24.12-25.x, say) installs into.
#
#   bash tools/check_min_versions.sh [PYTEST_ARG ...]      (or: make test-min)
#
# Each `name>=X.Y` of [project] dependencies is installed as `name==X.Y.*` (the lowest minor
# release, its newest patch); the test tools (torch, pytest, polars...) come from
# requirements-dev.txt. TensorFlow is left out (an optional extra with numpy bounds of its own):
# its tests skip and tabloader/tf's doctests are not collected. The venv (MIN_VENV, default
# /tmp/tabloader-min-venv) is rebuilt only when that requirement list changes. Needs Python 3.11+
# (tomllib) to read pyproject.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
venv=${MIN_VENV:-/tmp/tabloader-min-venv}

reqs=$("$python" - <<'EOF'
import re
import tomllib

core = {}
for dep in tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]:
    match = re.fullmatch(r"([A-Za-z0-9_.-]+)(\[[^]]*\])?>=([0-9.]+)", dep.replace(" ", ""))
    if not match:
        raise SystemExit(f"pyproject.toml: dependency {dep!r} has no plain '>=' lower bound to test")
    name, extras, version = match.groups()
    core[name.lower()] = f"{name}{extras or ''}=={version}.*"
print("\n".join(core.values()))
for line in open("requirements-dev.txt"):
    line = line.split("#")[0].strip()
    name = re.split(r"[\[=<>!~ ]", line)[0].lower()
    if line and name not in core and not name.startswith("tensorflow"):
        print(line)
EOF
)
stamp="$venv/.installed-$(printf '%s\n' "$reqs" | sha256sum | cut -c1-16)"
if [ ! -e "$stamp" ]; then
  echo "== building $venv from:"; printf '  %s\n' $reqs
  rm -rf "$venv"
  "$python" -m venv "$venv"
  printf '%s\n' "$reqs" > "$venv/requirements-min.txt"
  "$venv/bin/python" -m pip install -q ${PIP_ARGS:-} -r "$venv/requirements-min.txt"
  touch "$stamp"
fi
"$venv/bin/python" -c 'import numpy, pandas, pyarrow, dask; print("== numpy", numpy.__version__, "pandas",
  pandas.__version__, "pyarrow", pyarrow.__version__, "dask", dask.__version__)'
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" exec "$venv/bin/python" -m pytest -q -p no:cacheprovider \
  --ignore=tabloader/tf "$@"
