"""Shared fixtures of the diffusion family tests: the parity fixture's location, one intra-op thread, and a
tiny random checkpoint in LeRobot's layout (`diffusion_checkpoints.py`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

# CI clones the repo with `../shared` beside it; locally that is /work/shared.
FIXTURES = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.skip(f"parity fixtures not found at {FIXTURES} (expected ../shared/fixtures beside the repo)")
    return FIXTURES


@pytest.fixture(autouse=True)
def _single_intra_op_thread() -> Iterator[None]:
    """One intra-op thread per test on the shared 2-core box (restored afterwards): also what the parity
    fixtures were generated with."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random checkpoint for the simulated tasks (top 64x64, state 10, action 4), DDPM over 10 steps."""
    from diffusion_checkpoints import config, write_checkpoint

    return write_checkpoint(tmp_path_factory.mktemp("diffusion") / "ckpt", config())


@pytest.fixture(scope="session")
def trained_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state + env checkpoint trained (seconds) to one chunk per observation: DDPM and DDIM then agree."""
    from diffusion_checkpoints import train_checkpoint

    return train_checkpoint(tmp_path_factory.mktemp("diffusion-trained") / "ckpt")
