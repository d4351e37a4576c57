"""SmolVLA's sub-engine runners chained into actions: vision -> prefix -> denoise (the loop engine, or the
step engine once per row of the time table with LeRobot's Euler update x <- x + dt * v in float32).

`encode` and `velocity` expose the two halves separately so that the RTC samplers
(`hotloop.families.smolvla.rtc`) can run on a compiled plan's step engine exactly as on the eager model.
"""

from __future__ import annotations

import torch
from torch import Tensor

from hotloop.errors import ConfigError
from hotloop.families.buckets import check_views_and_prompt
from hotloop.families.flow import VLM_FLOW_STAGES
from hotloop.families.pipeline import StagePipeline
from hotloop.families.protocol import run_subengine
from hotloop.families.smolvla.engines import SmolVLAEngineShape
from hotloop.families.smolvla.observation import SmolVLAObservation
from hotloop.families.smolvla.tables import observation_tables, step_time, time_embedding
from hotloop.measure.stages import StageTimer, null_timer
from hotloop.models.smolvla import fit_images
from hotloop.models.smolvla_config import SmolVLAConfig


class SmolVLAPipeline(StagePipeline):
    """Runners (one per stage; the denoise stage's step or loop engine) over fixed shapes."""

    family = "SmolVLA"
    stages = VLM_FLOW_STAGES
    cfg: SmolVLAConfig
    shape: SmolVLAEngineShape

    @property
    def has_step(self) -> bool:
        """Whether the step engine is among the runners (what the RTC samplers drive)."""
        return "denoise_step" in self.runners

    def check(self, obs: SmolVLAObservation, noise: Tensor) -> None:
        s, cfg = self.shape, self.cfg
        check_views_and_prompt(obs, s)
        if obs.lang_masks.shape[1] < s.prompt_slots:
            raise ConfigError(
                f"the prompt has {obs.lang_masks.shape[1]} slots; this engine takes {s.prompt_slots} "
                "(pad it with masked slots: hotloop.families.smolvla.observation.pad_prompt)"
            )
        want = (s.batch, cfg.chunk_size, cfg.max_action_dim)
        if tuple(noise.shape) != want:
            raise ConfigError(f"noise has shape {tuple(noise.shape)}; expected {want}")

    def encode(self, obs: SmolVLAObservation, timer: StageTimer | None = None) -> dict[str, Tensor]:
        """vision and prefix: the values the denoise engines read (K/V and the suffix tables)."""
        timer = timer if timer is not None else null_timer()
        slots = self.shape.prompt_slots
        # images prepared at the checkpoint's own size (the recipe's teacher observations) meet a
        # `vision-res` plan resized to its size
        values: dict[str, Tensor] = {"images": fit_images(obs.images, self.cfg)}
        with timer.stage("vision"):
            run_subengine(self.runners["vision"], self.signatures["vision"], values)
        with timer.stage("prefix"):
            values["lang_tokens"] = obs.lang_tokens[:, :slots]
            values["state"] = obs.state
            values.update(observation_tables(self.cfg, obs.image_masks, obs.lang_masks[:, :slots]))
            run_subengine(self.runners["prefix"], self.signatures["prefix"], values)
        return values

    def velocity(self, values: dict[str, Tensor], x: Tensor, t: Tensor) -> Tensor:
        """The step engine's velocity at x for float32 times (B,) or per token (B, chunk)."""
        if not self.has_step:
            raise ConfigError("this plan runs the denoise loop as one graph; it has no step engine to guide")
        values["x_t"], values["time_cond"] = x, time_embedding(self.cfg, t)
        run_subengine(self.runners["denoise_step"], self.signatures["denoise_step"], values)
        return values["velocity"]

    @torch.no_grad()
    def sample(self, obs: SmolVLAObservation, noise: Tensor, timer: StageTimer | None = None) -> Tensor:
        """Actions (B, chunk, max_action_dim) float32 from noise at t = 1, as `hotloop.models.smolvla.sample_actions`."""
        self.check(obs, noise)
        timer = timer if timer is not None else null_timer()
        values = self.encode(obs, timer)
        table = self.constants["time_table"]
        with timer.stage("denoise"):
            if self.runs["denoise"] == "denoise_loop":
                values["noise"], values["time_table"] = noise.float(), table
                run_subengine(self.runners["denoise_loop"], self.signatures["denoise_loop"], values)
                return values["actions"]
            steps = self.shape.num_steps
            dt = -1.0 / steps
            x = noise.to(torch.float32)
            for k in range(steps):
                values["x_t"], values["time_cond"] = x, table[k]
                run_subengine(self.runners["denoise_step"], self.signatures["denoise_step"], values)
                x = x + dt * values["velocity"]
            return x


__all__ = ["SmolVLAPipeline", "step_time"]
