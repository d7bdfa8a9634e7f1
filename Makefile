# Each target bootstraps .venv from the pinned requirements; the venv is rebuilt only when the
# requirements file changes (its hash names the stamp file).
PYTHON ?= python3
VENV := .venv
REQS := requirements-dev.txt
STAMP := $(VENV)/.installed-$(shell sha256sum $(REQS) pyproject.toml | sha256sum | cut -c1-16)
PY := $(VENV)/bin/python
# Extra pip options, e.g. PIP_ARGS="--extra-index-url https://download.pytorch.org/whl/cpu"
# on machines where the torch CPU wheel is not on local disk.
PIP_ARGS ?=
ROWS ?= 1000000
PYTEST_ARGS ?=

.PHONY: demo test test-min test-gpu bench venv clean

venv: $(STAMP)

$(STAMP):
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q $(PIP_ARGS) -r $(REQS)
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

demo: $(STAMP)
	$(VENV)/bin/tabloader demo --rows $(ROWS)

test: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS)

# The suite against the oldest numpy/pandas/pyarrow/dask pyproject.toml promises, in a venv of
# its own (MIN_VENV, default /tmp/tabloader-min-venv); not part of CI (it doubles the time).
test-min:
	PYTHON=$(PYTHON) PIP_ARGS="$(PIP_ARGS)" bash tools/check_min_versions.sh $(PYTEST_ARGS)

# No venv here: on a lent GPU machine there is no package index and python3 already holds the
# CUDA builds of torch/CuPy; the checks script says up front what that python lacks.
GPU_OUT ?= out/gpu
test-gpu:
	PYTHON=$(PYTHON) bash tools/gpu_checks.sh $(GPU_OUT) env tests

bench: $(STAMP)
	$(VENV)/bin/tabloader bench

clean:
	rm -rf $(VENV) build *.egg-info
