# Two entry points for a fresh machine: `make demo` and `make test`. Each installs into .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint install clean test-mujoco-min

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU wheel first: an unpinned torch would pull a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[backends,tokenizer,dev,sims]'
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

# The sim tests against the lowest MuJoCo we support, in a venv of its own (built once per pyproject change).
MUJOCO_MIN := 3.3.0
MIN_VENV := /tmp/hotloop-mujoco-$(MUJOCO_MIN)
MIN_STAMP := $(MIN_VENV)/.installed
SIM_TESTS := tests/sim --ignore=tests/sim/test_train_demo.py  # training is torch, not MuJoCo

$(MIN_STAMP): pyproject.toml
	$(PY) -m venv $(MIN_VENV)
	$(MIN_VENV)/bin/pip install -q torch==2.13.0
	$(MIN_VENV)/bin/pip install -q -e '.[dev,sims]' 'mujoco==$(MUJOCO_MIN)'
	touch $(MIN_STAMP)

test-mujoco-min: $(MIN_STAMP)
	$(MIN_VENV)/bin/python -c "import mujoco; assert mujoco.__version__ == '$(MUJOCO_MIN)', mujoco.__version__"
	MUJOCO_GL=egl $(MIN_VENV)/bin/python -m pytest -q -p no:cacheprovider $(SIM_TESTS)

clean:
	rm -rf $(VENV) hotloop-report
