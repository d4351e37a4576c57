"""Recorded episodes and the pi05:tiny target for the compression tests (one intra-op thread)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch


@pytest.fixture(autouse=True)
def _single_intra_op_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three short scripted conveyor-pick episodes (~40 frames, 64 px) in the LeRobot v3 layout."""
    from hotloop.datasets.recorder import record

    out = tmp_path_factory.mktemp("episodes") / "conveyor"
    record("conveyor-pick", 3, out, image_size=64, seed=5)
    return out


@pytest.fixture
def fast_flags() -> list[str]:
    """compress flags that keep a test's recipe small: few frames, two timed calls, eager, one thread."""
    return ["--calibration-frames", "4", "--eval-observations", "2", "--bench-iters", "2", "--backends",
            "eager", "--threads", "1", "--quiet"]  # fmt: skip
