# Two entry points for a fresh machine: `make demo` and `make test`. Each installs into .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

OPENPI_VENV := .venv-openpi
OPENPI_STAMP := $(OPENPI_VENV)/.installed

.PHONY: demo test lint install openpi-venv clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU wheel first: an unpinned torch would pull a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[backends,tokenizer,serve,dev]'
	touch $(STAMP)

# The robot side of the serve tests: the real openpi-client in its own venv, as a robot computer runs it
# (it pins numpy<2 and imports typing_extensions without declaring it).
$(OPENPI_STAMP):
	$(PY) -m venv $(OPENPI_VENV)
	$(OPENPI_VENV)/bin/pip install -q openpi-client==0.1.2 'numpy<2' typing_extensions
	touch $(OPENPI_STAMP)

install: $(STAMP)

openpi-venv: $(OPENPI_STAMP)

demo: $(STAMP)
	MUJOCO_GL=egl $(BIN)/hotloop demo

test: $(STAMP) $(OPENPI_STAMP)
	MUJOCO_GL=egl $(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

clean:
	rm -rf $(VENV) $(OPENPI_VENV) hotloop-report
