"""Fixture location (CI clones the repo with ../shared beside it) and one intra-op thread per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.skip(f"parity fixtures not found at {FIXTURES} (expected ../shared/fixtures beside the repo)")
    return FIXTURES


@pytest.fixture(autouse=True)
def _single_intra_op_thread() -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
