# stride: two commands on a fresh clone, `make bench` and `make test`.
# Set-up is idempotent: a stamp file records that .venv matches pyproject.toml.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.stride-installed

.PHONY: setup test test-fast bench lint lint-imports clean

setup: $(STAMP)

# --system-site-packages lets a machine that already has a (CUDA) torch keep it;
# torch==2.13.0 is installed only when no torch is importable.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv --system-site-packages $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[dev,observe,ray,mlflow,wandb]"
	touch $(STAMP)

# Two pytest workers (pytest-xdist): the suite is one core's work at a time except its multi-process
# tests, which tests/conftest.py keeps on one worker, one after another, as in a serial run.
PYTEST_WORKERS ?= 2
PYTEST_PAR := -n $(PYTEST_WORKERS) --dist loadgroup --no-loadscope-reorder

test: setup
	$(PY) -m pytest -q $(PYTEST_PAR)

test-fast: setup
	$(PY) -m pytest -q -m "not slow" $(PYTEST_PAR)

bench: setup
	$(VENV)/bin/stride bench

lint: lint-imports
	$(VENV)/bin/ruff check stride tests benchmarks

# The layering contracts in pyproject.toml ([tool.importlinter]; docs/architecture.md).
lint-imports: setup
	$(VENV)/bin/lint-imports --no-cache

clean:
	rm -rf $(VENV) runs .pytest_cache
