"""Shared helpers for the ACT family's tests: the fixture location, one intra-op thread, and tiny random
checkpoints in LeRobot's layout (`act_checkpoint_files`, imported by module name)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

# CI clones the repo with `../shared` beside it; locally that is /work/shared.
FIXTURES = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.skip(f"parity fixtures not found at {FIXTURES} (expected ../shared/fixtures beside the repo)")
    return FIXTURES


@pytest.fixture(autouse=True)
def _single_intra_op_thread() -> Iterator[None]:
    """One intra-op thread per test on the shared 2-core box (and bitwise LeRobot's numerics, which the
    fixtures were made with at one thread); restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
