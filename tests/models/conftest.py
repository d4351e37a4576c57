"""Shared helpers for the model tests: fixture location and tiny random models."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

# CI clones the repo with `../shared` beside it; locally that is /work/shared.
FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.skip(f"parity fixtures not found at {FIXTURES} (expected ../shared/fixtures beside the repo)")
    return FIXTURES


@pytest.fixture(autouse=True)
def _single_intra_op_thread() -> Iterator[None]:
    """Tiny models gain nothing from intra-op threads, and on a shared 2-core box two OpenMP threads
    competing with another process spin at barriers (measured: 3.7 s instead of 18 ms per sample).
    Restored after every test so tests elsewhere keep the default."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
