#!/usr/bin/env bash
# The wheels a lent GPU machine's python3 (CPython 3.12, x86_64, no package index) needs besides
# the GPU kit's cuDF set (../shared/hooks/gpu-kit), fetched here where there is an index, each
# folder under the device tool's 64 MiB per call, so that they travel as `run` carries:
#
#   bash tools/gpu_wheels.sh download          # here: .whl/ .whl-duckdb/ .whl-plgpu/ (git-ignored)
#   bash tools/gpu_wheels.sh install DIR SITE  # there: unpack the wheels of DIR into SITE
#
# .whl/         polars 2.x: the CPU baselines of benchmarks/workflow.py (53 MB)
# .whl-duckdb/  duckdb: the tests that read DuckDB's files (24 MB)
# .whl-plgpu/   cudf-polars and what it needs beyond the kit: kvikio's Python package, and
#               polars 1.44 (cudf-polars 26.10 wants polars < 1.45), so it goes to a site of its
#               own, put first on the path by gpu_checks.sh's workflow_polars_gpu step only (50 MB)
#
# On the machine, e.g. in the call that carries .whl/:
#   bash tools/gpu_wheels.sh install .whl /tmp/site-pl && export PYTHONPATH=/tmp/site-pl:$PYTHONPATH
# and PLGPU_SITE=/tmp/site-plgpu for .whl-plgpu/ (the default of that step).
set -euo pipefail
cd "$(dirname "$0")/.."

PLATFORM=(--only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64
          --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
PIP=${PIP:-python3 -m pip}

download() {  # download DIR SPEC...: the wheels of SPEC (no dependencies) into a fresh DIR
  local dir=$1
  shift
  rm -rf "$dir"
  $PIP download -q "${PLATFORM[@]}" --no-deps --extra-index-url https://pypi.nvidia.com -d "$dir" "$@"
  echo "$dir: $(du -sh "$dir" | cut -f1) ($(ls "$dir" | tr '\n' ' '))"
}

case "${1:-}" in
  download)
    download .whl "polars==2.1.0" "polars-runtime-32==2.1.0"
    download .whl-duckdb duckdb
    download .whl-plgpu "cudf-polars-cu13==26.10.*" "kvikio-cu13==26.10.*" "polars==1.44.2" \
      "polars-runtime-32==1.44.2" ;;
  install)  # no pip index there; a wheel is a zip of its site-packages files
    dir=${2:?usage: gpu_wheels.sh install DIR SITE}
    site=${3:?usage: gpu_wheels.sh install DIR SITE}
    mkdir -p "$site"
    python3 - "$site" "$dir"/*.whl <<'EOF'
import sys, zipfile
site, wheels = sys.argv[1], sys.argv[2:]
for wheel in wheels:
    zipfile.ZipFile(wheel).extractall(site)
    print("unpacked", wheel.rsplit("/", 1)[-1], "into", site)
EOF
    ;;
  *)
    echo "usage: tools/gpu_wheels.sh download | install DIR SITE" >&2
    exit 2 ;;
esac
