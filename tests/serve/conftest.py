"""Fixtures for the serve tests: one echo server per module, the openpi-client venv."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from serve_helpers import OPENPI_PYTHON, EchoPolicy, start


@pytest.fixture(autouse=True)
def no_tracebacks(caplog):
    """Whatever a client does, the server logs one-line messages, never a traceback."""
    caplog.set_level(logging.INFO)
    yield
    for record in caplog.records:
        assert record.exc_info is None and "Traceback" not in record.getMessage(), record.getMessage()


@pytest.fixture(scope="module")
def echo_server():
    with start(EchoPolicy()) as server:
        yield server


@pytest.fixture(scope="session")
def openpi_python() -> Path:
    if not OPENPI_PYTHON.is_file():
        pytest.fail(
            f"{OPENPI_PYTHON} is missing: the serve tests run the real openpi-client in its own venv. "
            "Create it with `make openpi-venv` (`make test` builds it too)."
        )
    return OPENPI_PYTHON
