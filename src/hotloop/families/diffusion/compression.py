"""Diffusion Policy's own compression step, `ddim:N`: the same weights sampled by DDIM with N steps.

LeRobot trains the noise predictor once and picks the sampler in the config (`noise_scheduler_type`,
`num_inference_steps`); DDIM reads the same epsilon (or sample) prediction and, at LeRobot's eta 0, is
deterministic, so far fewer steps keep the action close (the measured sensitivity to N:
`hotloop.families.diffusion.steps.step_sensitivity`). `ddim:N` is exactly what a LeRobot user gets by
writing "noise_scheduler_type": "DDIM" and "num_inference_steps": N into config.json: the candidate's
config says so, its artifact's manifest stores it, and `Engine.load` rebuilds the DDIM tables from it.
The generic `steps:N` keeps the checkpoint's own scheduler (DDPM with N strided steps).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from hotloop.errors import ConfigError

if TYPE_CHECKING:
    from hotloop.compress.onestep import OnestepJob

STEPS = {"ddim": "ddim:N sample with DDIM (eta 0) in N steps instead of the checkpoint's scheduler"}


class DiffusionCompression:
    """`hotloop.families.protocol.PolicyFamily.compression` of the diffusion family."""

    # onestep on a demo target learns on the teacher's own closed-loop observations too (no rounds: the
    # observations the policy is asked about, under --onestep-rounds-under's first execution)
    teacher_rollouts = True
    # its sampler (ddim:N) lives in the config: a closed loop plays the model itself, config and all
    sampler_in_config = True

    def check_recipe_step(self, name: str, arg: str) -> None:
        if name not in STEPS:
            raise ConfigError(f"--recipe {name}: diffusion's own steps are {', '.join(STEPS)}")
        if not arg.isdigit() or int(arg) < 1:
            raise ConfigError(f"--recipe {name}:{arg}: give a positive step count, e.g. ddim:10")

    def check_zero_noise(self, earlier: tuple[str, ...], model: Any) -> None:
        """`zero-noise` on a DDIM sampler: DDPM adds fresh noise at every step, so x_T = 0 would not make its
        actions one map."""
        if "ddim" not in earlier and model.cfg.noise_scheduler_type != "DDIM":
            raise ConfigError(
                "--recipe zero-noise: this Diffusion Policy samples with DDPM, which adds fresh noise at every "
                "step, so x_T = 0 does not fix its actions; put its DDIM sampler first, e.g. "
                "--recipe ddim:10,zero-noise"
            )

    def check_onestep(
        self, student_steps: int, teacher_steps: int, earlier: tuple[str, ...] = (), model: Any = None
    ) -> None:
        from hotloop.families.diffusion.onestep import check_onestep

        check_onestep(student_steps, teacher_steps, earlier, model)

    def onestep(self, job: OnestepJob) -> dict[str, Any]:
        """`onestep[:K]`: `job.student` becomes a DDIM K-step copy of `job.teacher` (its weights are replaced
        in place, its config switched to DDIM K), trained on the teacher's DDIM `teacher_steps` samples.
        `job.explore` and `job.action_dim` are the flow families' (closed-loop rounds, padded action
        dimensions): the recipe gives no rounds to Diffusion, and its samples have the executed dimensions
        only."""
        from hotloop.families.diffusion.onestep import train_diffusion_onestep

        self.check_onestep(job.student_steps, job.teacher_steps, (), job.teacher)
        return train_diffusion_onestep(job)

    def student_model(self, model: Any, student_steps: int) -> Any:
        """A trainable copy of `model` whose config samples DDIM in `student_steps` steps."""
        import copy

        return copy.deepcopy(with_config(model, ddim_config(model.cfg, student_steps)))

    def recipe_step(self, name: str, arg: str, model: Any, num_steps: int) -> tuple[Any, int, dict[str, Any]]:
        """(a model sharing `model`'s weights whose config samples with DDIM in N steps, N, details)."""
        self.check_recipe_step(name, arg)
        steps = int(arg)
        cfg = ddim_config(model.cfg, steps)
        return with_config(model, cfg), steps, {"scheduler": "DDIM", "from": model.cfg.noise_scheduler_type}


def ddim_config(cfg: Any, steps: int) -> Any:
    """`cfg` with DDIM in `steps` steps, refused by name when DDIM cannot run it (a beta schedule diffusers'
    DDIM lacks, more steps than training timesteps)."""
    new = dataclasses.replace(cfg, noise_scheduler_type="DDIM", num_inference_steps=steps)
    try:
        new.make_scheduler().step_table(steps)
    except ConfigError as exc:
        raise ConfigError(f"--recipe ddim:{steps}: {exc}") from None
    return new


def with_config(model: Any, cfg: Any) -> Any:
    """A DiffusionModel of `cfg` holding `model`'s tensors (no copy): the sampler lives in the config."""
    import torch

    from hotloop.models.diffusion import DiffusionModel

    with torch.device("meta"):
        new = DiffusionModel(cfg)
    new.load_state_dict(model.state_dict(), strict=True, assign=True)
    return new.eval()
