# Two entry points for a fresh machine: `make demo` and `make test`. Each installs into .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint install clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU wheel first: an unpinned torch would pull a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[backends,tokenizer,dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	MUJOCO_GL=egl $(BIN)/hotloop demo

test: $(STAMP)
	MUJOCO_GL=egl $(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

clean:
	rm -rf $(VENV) hotloop-report
