"""Tiny pi models and observations for the compile tests (one intra-op thread, as in tests/models)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch

from hotloop.families.pi.sampling import PiObservation, make_noise
from hotloop.families.pi.targets import build_model, random_observation
from hotloop.models.configs import PiConfig, get_pi_config
from hotloop.models.pi0 import PiModel


@pytest.fixture(autouse=True)
def _single_intra_op_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


TinyCase = tuple[PiConfig, PiModel, PiObservation, torch.Tensor]


def make_tiny(name: str, batch: int = 2, real_tokens: int | None = None) -> TinyCase:
    """(config, fp32 random model, observation, noise) of a tiny target; `real_tokens` shortens the prompt."""
    cfg = get_pi_config(name)
    model = build_model(cfg, torch.float32, "cpu", 0)
    obs = random_observation(cfg, batch, "cpu", 0)
    if real_tokens is not None:
        obs.lang_masks[:] = False
        obs.lang_masks[:, :real_tokens] = True
        obs.lang_tokens = obs.lang_tokens * obs.lang_masks
    return cfg, model, obs, make_noise(model, batch)


@pytest.fixture
def tiny() -> Callable[..., TinyCase]:
    """`tiny(name, batch=2, real_tokens=None)` -> (config, model, observation, noise)."""
    return make_tiny
