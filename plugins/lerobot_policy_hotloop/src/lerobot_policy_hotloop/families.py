"""Per source family, how LeRobot's model-space batch reaches the compiled engine and how its chunk comes
back, so that the plugin's actions are the ones LeRobot's own policy returns for the same batch.

A bridge answers three questions for its family (hotloop imported inside the functions: this module is
imported with the policy, after LeRobot has chosen it):

- `observation(engine, batch)`: the batch `predict_action_chunk` receives (after LeRobot's preprocessor;
  Diffusion's with its observation history stacked on dim 1) as the family's engine observation;
- `noise(engine, batch_size, given)`: the randomness LeRobot's policy draws for one chunk, drawn from the
  same generator in the same order and shapes (torch's global one), so one seed gives both the same
  actions. `given` is what a caller passes as `noise=` to LeRobot's policy (its starting noise);
- `actions(engine, out)`: the engine's chunk as LeRobot's `predict_action_chunk` returns it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

Batch = Mapping[str, Tensor]


@dataclass(frozen=True)
class FamilyBridge:
    observation: Callable[[Any, Batch], Any]
    noise: Callable[[Any, int, Tensor | None], Tensor]
    actions: Callable[[Any, Tensor], Tensor]
    keeps_history: bool = False  # LeRobot keeps n_obs_steps observations per input key (Diffusion)


def _tensors(batch: Batch) -> dict[str, Tensor]:
    """The batch's tensors on the CPU (it also carries the task text and other complementary data)."""
    return {k: v.detach().cpu() for k, v in batch.items() if isinstance(v, Tensor)}


# ---- ACT: one pass, no randomness at inference (the VAE's latent is zero) ----------------------------
def _act_observation(engine: Any, batch: Batch) -> Any:
    from hotloop.families.act.reference_inputs import reference_observation

    return reference_observation(engine.cfg, _tensors(batch), "the batch")


def _no_noise(engine: Any, batch_size: int, given: Tensor | None) -> Tensor:
    return torch.zeros(engine.family.noise_shape(engine.cfg, engine.shape, batch_size))


def _whole_chunk(engine: Any, out: Tensor) -> Tensor:
    return out


# ---- Diffusion Policy: x_T, then DDPM's variance noise at every step with t > 0 ------------------------
def _diffusion_observation(engine: Any, batch: Batch) -> Any:
    from hotloop.families.diffusion.reference_inputs import reference_observation

    return reference_observation(engine.cfg, {k: v.numpy() for k, v in _tensors(batch).items()}, "the batch")


def _diffusion_noise(engine: Any, batch_size: int, given: Tensor | None) -> Tensor:
    """LeRobot's `conditional_sample`: `torch.randn((B, horizon, A))` unless `noise=` was given, then
    diffusers' `scheduler.step` draws `randn((B, horizon, A))` at each step that adds noise, in order."""
    from hotloop.families.diffusion.engines import drawn_rows, join_noise

    cfg, steps = engine.cfg, engine.shape.num_steps
    want = (batch_size, cfg.horizon, cfg.action_dim)
    start = given.detach().cpu().float() if given is not None else torch.randn(want)
    step_noise = torch.zeros(steps, *want)
    for k, drawn in enumerate(drawn_rows(cfg, steps).tolist()):
        if drawn:
            step_noise[k] = torch.randn(want)
    return join_noise(start, step_noise, steps)


def _diffusion_actions(engine: Any, out: Tensor) -> Tensor:
    from hotloop.models.diffusion import select_action_chunk

    return select_action_chunk(out, engine.cfg)


# ---- SmolVLA: x_1 ~ N(0, 1) of (B, chunk_size, max_action_dim), cropped to the action dim after ---------
def _smolvla_observation(engine: Any, batch: Batch) -> Any:
    from hotloop.families.smolvla.observation import batch_observation
    from hotloop.families.smolvla.reference_inputs import check_cameras

    cpu = _tensors(batch)
    check_cameras(engine.cfg, cpu, "the batch")  # type: ignore[arg-type]
    return batch_observation(engine.cfg, cpu)


def _smolvla_noise(engine: Any, batch_size: int, given: Tensor | None) -> Tensor:
    cfg = engine.cfg
    if given is not None:
        return given.detach().cpu().float()
    # LeRobot's VLAFlowMatching.sample_noise, call for call.
    return torch.normal(mean=0.0, std=1.0, size=(batch_size, cfg.chunk_size, cfg.max_action_dim))


def _smolvla_actions(engine: Any, out: Tensor) -> Tensor:
    return out[..., : engine.cfg.action_dim]


BRIDGES: dict[str, FamilyBridge] = {
    "act": FamilyBridge(_act_observation, _no_noise, _whole_chunk),
    "diffusion": FamilyBridge(
        _diffusion_observation, _diffusion_noise, _diffusion_actions, keeps_history=True
    ),
    "smolvla": FamilyBridge(_smolvla_observation, _smolvla_noise, _smolvla_actions),
}


__all__ = ["BRIDGES", "FamilyBridge"]
