#!/usr/bin/env bash
# Every GPU check of tabloader in one command, for a lent CUDA machine: the `gpu` tests and the
# GPU benchmarks, each step's log and exit code written under OUT_DIR.
#
#   bash tools/gpu_checks.sh OUT_DIR [STEP ...]
#
# STEP is one of: env tests loader embedding offload workflow workflow_strings demo profiles data50m
# workflow50m profile50m sweep50m workflow_polars_gpu embedding_warps (default: all but the last three, in that order). A step that fails does not stop
# the others; OUT_DIR/summary.txt lists each step's exit code and seconds, and the script exits
# non-zero if any step failed. Steps are sized to fit the device tool's 10-minute call together
# (on an H100, 2026-11-24: tests ~5 min with -n 4, each benchmark 0.5-1.5 min); run
# them over two calls when cuDF was installed in the same call. The 50M-row workflow benchmark
# does not fit one call with its data on top of other steps (H100 machine: 2 min to write the
# 50M rows, 3.5 min for workflow50m, pandas 2.3 min of it): `data50m` writes the rows (once, to
# BENCH_DATA), `workflow50m` and `profile50m` use them, in the same call or a later one of the
# same machine.
#
# BUDGET_S (seconds, default unlimited) bounds the whole script: each step gets what is left of it
# and later steps are skipped once it is spent, so that a device call ends with its summary written
# instead of being killed at its limit. PYTEST_ARGS adds arguments to the tests step (`-n 4` runs
# it on four processes: pytest-xdist is on the lent image; `-k ...` narrows a rerun).
#
# On the lent machine (no package index), cuDF, dask and distributed come from the GPU kit
# (../shared/hooks/gpu-kit), polars, duckdb and cudf-polars from tools/gpu_wheels.sh; after the kit's
# `device finish` step,
#   . /tmp/site/cudf_env.sh && bash tools/gpu_checks.sh "$OUT" env tests
# Without cuDF the cuDF tests skip and the workflow benchmark is left out.
set -u

out=${1:?usage: tools/gpu_checks.sh OUT_DIR [STEP ...]}
shift
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(env tests loader embedding offload workflow workflow_strings demo profiles data50m
                                 workflow50m profile50m)
mkdir -p "$out"
out=$(cd "$out" && pwd)  # absolute: the steps run from the repository root, not the caller's folder
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TF_CPP_MIN_LOG_LEVEL=2
py=${PYTHON:-python3}
bench_data=${BENCH_DATA:-/tmp/tabloader-gpu-bench}
failed=0
script_start=$(date +%s)
budget=${BUDGET_S:-0}

run_step() {  # run_step NAME COMMAND...: log to OUT/NAME.log, record rc and time
  local name=$1 start rc left=0
  shift
  start=$(date +%s)
  if [ "$budget" -gt 0 ]; then
    left=$(( budget - (start - script_start) ))
    if [ "$left" -lt 20 ]; then
      echo "$name skipped: BUDGET_S=$budget spent" | tee -a "$out/summary.txt"
      failed=1
      return
    fi
  fi
  echo "== $name: $*" | tee "$out/$name.log"
  if [ "$left" -gt 0 ]; then
    timeout --kill-after 10 "$left" "$@" >>"$out/$name.log" 2>&1
  else
    "$@" >>"$out/$name.log" 2>&1
  fi
  rc=$?
  printf '%-10s rc=%-3s %5ss\n' "$name" "$rc" "$(( $(date +%s) - start ))" | tee -a "$out/summary.txt"
  [ "$rc" -eq 0 ] || failed=1
}

has_cudf() { "$py" -c "import cudf" >/dev/null 2>&1; }

# Up front, before any device time goes to a step: the lent image's python3 has no package index.
# Without numpy, pandas, pyarrow, fsspec, tqdm, yaml, torch, pytest or pytest-timeout (--timeout
# below) every step would fail: stop here and say which. dask and distributed (runtime
# dependencies too, absent from the image) come only with the GPU kit: without them the Dataset
# tests that need them skip and the workflow steps are left out, so only warn.
missing=$("$py" -c '
import importlib.util
names = ("numpy", "pandas", "pyarrow", "fsspec", "tqdm", "yaml", "torch", "pytest", "pytest_timeout",
         "hypothesis")
print(" ".join(n for n in names if importlib.util.find_spec(n) is None))') || missing="(python3 failed)"
if [ -n "$missing" ]; then
  echo "gpu_checks: $py lacks $missing; carry their wheels (see ../shared/hooks/gpu-kit/README.md)" | tee "$out/summary.txt" >&2
  exit 2
fi
"$py" -c "import dask, distributed" >/dev/null 2>&1 ||
  echo "preflight  dask/distributed missing (. /tmp/site/cudf_env.sh of the GPU kit brings them): their tests skip" |
    tee -a "$out/summary.txt"
# Where neither CuPy nor torch can use a GPU, every gpu test skips and the tests step still
# exits 0: say so in the summary rather than let that pass for a GPU run.
"$py" -c "from tabloader import backend; raise SystemExit(not backend.cuda_available())" 2>/dev/null ||
  echo "preflight  no CUDA device usable by CuPy or torch: the gpu tests will all be skipped" |
    tee -a "$out/summary.txt"

for step in "${steps[@]}"; do
  case $step in
    env)
      run_step env sh -c "nvidia-smi; $py -c '
import importlib, platform
print(\"python\", platform.python_version())
for name in (\"torch\", \"cupy\", \"triton\", \"cudf\", \"dask\", \"distributed\", \"dask_cudf\", \"dask_cuda\", \"polars\", \"cudf_polars\", \"pandas\", \"pyarrow\", \"numpy\"):
    try:
        print(name, importlib.import_module(name).__version__)
    except Exception as exc:
        print(name, \"missing:\", type(exc).__name__, exc)
import os, torch
print(\"device\", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
print(\"zoneinfo\", os.path.isdir(\"/usr/share/zoneinfo\"), \"(cuDF reads zoned timestamps with the IANA files)\")
'" ;;
    tests)
      # shellcheck disable=SC2086  # PYTEST_ARGS is a list of words
      run_step tests "$py" -m pytest -q -m gpu tests -p no:cacheprovider -o addopts="" --timeout 900 -rs \
        --durations 25 --junitxml "$out/tests.xml" ${PYTEST_ARGS:-} ;;
    loader)  # tabloader read every epoch and resident, pyarrow + pinned copy (and cuDF decoding when
             # usable), against torch batched over GPU tensors and the item-by-item DataLoader
      run_step loader "$py" benchmarks/loader.py --device cuda --rows 5000000 --files 10 \
        --data "$bench_data/loader" --batch-sizes 4096 65536 ;;
    embedding)
      run_step embedding "$py" benchmarks/embedding.py --device cuda --json "$out/embedding.json" ;;
    embedding_warps)  # the fused and graphed steps with the update kernels' warps per program for 128-wide rows
                      # (TABLOADER_UPDATE_WARPS; the default is 2): does one warp (twice the rows in flight, 16-byte
                      # loads, no barriers) bring graphed Adam from 1.70 ms to the 1.51 ms of 50% of peak?
      # alternating (2 1 1 2 by default), so that drift over the runs falls on both settings
      runs=()
      for warps in ${EMBEDDING_WARPS:-2 1 1 2}; do
        name="embedding_warps_run${#runs[@]}_w$warps"
        runs+=("$name")
        run_step "$name" env TABLOADER_UPDATE_WARPS="$warps" "$py" benchmarks/embedding.py \
          --device cuda --methods fused,graphed --json "$out/$name.json"
      done
      for name in "${runs[@]}"; do
        echo "== $name"; grep -h '^| \(fused\|graphed\)' "$out/$name.log"
      done >"$out/embedding_warps.txt" ;;
    offload)
      run_step offload "$py" benchmarks/offload.py --device cuda --trace-dir "$out/offload-trace"
      # the operator tables in the log too: the chrome traces are too large to bring back
      cat "$out"/offload-trace/ops_*.txt >>"$out/offload.log" 2>/dev/null ;;
    workflow)  # 5M rows: tabloader on cuDF vs hand-written cuDF (and cudf-polars when installed),
               # pandas and polars on the CPU; the projected Criteo-1TB time is printed after each table
      if has_cudf; then
        run_step workflow "$py" benchmarks/workflow.py --device cuda --rows 5000000 --files 10 \
          --data "$bench_data/raw" --repeat 2
      else
        echo "workflow   skipped: cuDF is not importable" | tee -a "$out/summary.txt"
      fi ;;
    workflow_strings)  # the same at 5M rows with the categoricals as raw Criteo's 8-char hex strings (cuDF's string
                       # columns: value_counts, merge, sort on strings), freq_threshold 2, one round
      if has_cudf; then
        run_step workflow_strings "$py" benchmarks/workflow.py --device cuda --string-categoricals --rows 5000000 \
          --files 10 --data "$bench_data/raw_strings" --freq-threshold 2 --systems tabloader-cuda,cudf,pandas,polars
      else
        echo "workflow_strings skipped: cuDF is not importable" | tee -a "$out/summary.txt"
      fi ;;
    demo)  # the end-to-end demo on the GPU, then the same rows on the CPU of the same machine
      run_step demo_cuda "$py" -c 'import sys; from tabloader.cli import main; sys.exit(main(sys.argv[1:]))' \
        demo --device cuda --rows "${DEMO_ROWS:-1000000}" --workdir "$bench_data/demo_cuda"
      run_step demo_cpu "$py" -c 'import sys; from tabloader.cli import main; sys.exit(main(sys.argv[1:]))' \
        demo --device cpu --rows "${DEMO_ROWS:-1000000}" --workdir "$bench_data/demo_cpu" ;;
    profiles)  # where the time goes, stage by stage, with a GPU wait at each boundary (after loader/workflow:
               # they reuse those steps' data)
      run_step prof_embedding "$py" tools/embedding_phases.py "$out/embedding_phases" --optimizer sgd --optimizer adam
      # the bandwidth goal's figure: the step without its one id-validation sync per batch
      run_step embedding_novalidate "$py" benchmarks/embedding.py --device cuda --methods fused,sparse+SparseAdam \
        --no-validate --json "$out/embedding_novalidate.json"
      run_step prof_kernels "$py" tools/gpu_kernel_probe.py "$out/kernel_probe"
      run_step prof_loader "$py" tools/gpu_profile_loader.py "$out/loader_profile" --device cuda \
        --data "$bench_data/loader"
      if has_cudf; then
        run_step prof_loader_cudf "$py" tools/gpu_profile_loader.py "$out/loader_profile_cudf" --device cuda \
          --decode cuda --data "$bench_data/loader" --part-sizes default 256MB --kvikio-threads 4 16
        run_step prof_workflow "$py" tools/gpu_profile_workflow.py "$out/workflow_profile" --rows 5000000 \
          --data "$bench_data/raw"
      fi ;;
    data50m)  # the 50M raw rows of workflow50m, written once (reused while the machine lives)
      run_step data50m "$py" -c "import sys; sys.path.insert(0, 'benchmarks')
from _common import raw_criteo
raw_criteo('$bench_data/raw50m', 50_000_000, 50)" ;;
    profile50m)  # where the 50M-row GPU workflow's time goes, stage by stage (after data50m, on its files)
      run_step prof_workflow50m "$py" tools/gpu_profile_workflow.py "$out/workflow_profile50m" --rows 50000000 \
        --files 50 --data "$bench_data/raw50m" ;;
    workflow50m)  # issue 14's goals are set at 50M rows: 20x hand-written pandas, 1TB projected under 5 min
      if has_cudf; then
        run_step workflow50m "$py" benchmarks/workflow.py --device cuda --rows 50000000 --files 50 \
          --data "$bench_data/raw50m" --freq-threshold 2 --repeat 1 --systems "${WORKFLOW50M_SYSTEMS:-tabloader-cuda,cudf,pandas,polars}"
      else
        echo "workflow50m skipped: cuDF is not importable" | tee -a "$out/summary.txt"
      fi ;;
    workflow_polars_gpu)  # cudf-polars (`polars-gpu`: the GPU engine's in-memory executor) against tabloader-cuda,
                          # at 5M rows with pandas and at 50M (after data50m); cudf-polars needs polars 1.x, so its
                          # wheels go to a folder of their own, PLGPU_SITE, put first on the path for this step only
      site=${PLGPU_SITE:-/tmp/site-plgpu}
      if has_cudf && [ -d "$site" ]; then
        run_step workflow_polars_gpu env PYTHONPATH="$site:$PYTHONPATH" "$py" benchmarks/workflow.py --device cuda \
          --rows 5000000 --files 10 --data "$bench_data/raw" --freq-threshold 2 --systems tabloader-cuda,polars-gpu,pandas
        [ -f "$bench_data/raw50m/_bench.json" ] &&
          run_step workflow_polars_gpu50m env PYTHONPATH="$site:$PYTHONPATH" "$py" benchmarks/workflow.py --device cuda \
            --rows 50000000 --files 50 --data "$bench_data/raw50m" --freq-threshold 2 --systems tabloader-cuda,polars-gpu
      else
        echo "workflow_polars_gpu skipped: cuDF is not importable or $site is missing" | tee -a "$out/summary.txt"
      fi ;;
    sweep50m)  # tabloader-cuda alone at 50M rows (after data50m) under each setting of SWEEP50M (a list of
               # "VAR=value ..." settings separated by ';'; "-" is the defaults): which knob moves the 8.9 s
      if has_cudf; then
        IFS=';' read -r -a settings <<<"${SWEEP50M:--;TABLOADER_GPU_MERGE=host;DASK_NUM_WORKERS=1;DASK_NUM_WORKERS=4;KVIKIO_NTHREADS=16;DASK_NUM_WORKERS=4 KVIKIO_NTHREADS=16;LIBCUDF_HOST_DECOMPRESSION=AUTO}"
        for setting in "${settings[@]}"; do
          for part_size in ${SWEEP50M_PART_SIZES:-default}; do
            name="sweep50m $setting part_size=$part_size"
            part_arg=()
            [ "$part_size" = default ] || part_arg=(--part-size "$part_size")
            # shellcheck disable=SC2086  # a setting is a list of VAR=value words
            run_step "$(echo "$name" | tr -c 'A-Za-z0-9=_.\n-' '_')" env ${setting/#-/} "$py" benchmarks/workflow.py \
              --device cuda --rows 50000000 --files 50 --data "$bench_data/raw50m" --freq-threshold 2 --repeat 1 \
              --systems tabloader-cuda "${part_arg[@]}"
          done
        done
        for log in "$out"/sweep50m*.log; do
          echo "$(basename "$log" .log): $(grep -h '^| tabloader-cuda' "$log" | head -1)"  # the timing table's row
        done >"$out/sweep50m.txt"
      else
        echo "sweep50m   skipped: cuDF is not importable" | tee -a "$out/summary.txt"
      fi ;;
    *)
      echo "unknown step $step; steps: env tests loader embedding offload workflow workflow_strings demo profiles data50m" \
        "workflow50m profile50m sweep50m workflow_polars_gpu embedding_warps" >&2
      exit 2 ;;
  esac
done
exit $failed
