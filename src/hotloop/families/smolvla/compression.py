"""SmolVLA's own compression steps: step distillation (`hotloop compress ... --recipe step-distill:N`) and
the calls the `onestep[:K]` student makes (`SmolVLAFlowStudent`; the method: `hotloop.compress.onestep`).

The action expert (and the action / time projections: everything the denoising loop runs) is trained so
that N Euler steps from a noise land where the teacher's reference steps land from the same noise; vision
and the VLM stay frozen, so the prefix K/V are the teacher's. The loss is the chunk MSE through the whole
integral, plus optionally the MSE at flow times both integrators visit and extra weight on the first action
(`StepDistillOptions`, the same knobs as pi's). Training is `hotloop.nn.resumable.train_resumable`: seeded
per step, checkpointed, resumable after an interrupt.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hotloop.compress.onestep import FlowOnestepSteps
from hotloop.errors import ConfigError
from hotloop.families.flow_distill import (
    FlowStepDistillSteps,
    matched_loss,
    matched_states,
    start_noise,
    step_distill_report,
)
from hotloop.families.smolvla.observation import SmolVLAObservation, select
from hotloop.models.smolvla import SmolVLAModel
from hotloop.nn.resumable import ResumableSettings

NOISE_MODES = ("random", "zero")
FROZEN = ("vlm_with_expert.vlm.", "state_proj.")  # the prefix: vision, connector, VLM, state token


@dataclass(frozen=True)
class StepDistillConfig(ResumableSettings):
    label: ClassVar[str] = "step distillation"


@dataclass(frozen=True)
class StepDistillOptions:
    noise: str = "random"
    intermediate_weight: float = 0.0
    first_action_weight: float = 0.0
    train: str = "expert"

    def __post_init__(self) -> None:
        if self.noise not in NOISE_MODES:
            raise ConfigError(
                f"step distillation noise must be one of {', '.join(NOISE_MODES)} (got {self.noise!r})"
            )
        if self.train != "expert":
            raise ConfigError(f"SmolVLA step distillation trains the expert only (got {self.train!r})")
        for name in ("intermediate_weight", "first_action_weight"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"{name.replace('_', ' ')} must be >= 0 (got {getattr(self, name)})")


def expert_parameters(model: SmolVLAModel) -> list[nn.Parameter]:
    return [p for n, p in model.named_parameters() if not n.startswith(FROZEN)]


def prefix_cache(model: SmolVLAModel, obs: SmolVLAObservation) -> tuple[Tensor, Tensor, Tensor]:
    return model.prefix(model.vision(obs.images), obs.image_masks, obs.lang_tokens, obs.lang_masks, obs.state)


def integrate(
    model: SmolVLAModel, cache: tuple[Tensor, Tensor, Tensor], noise: Tensor, steps: int
) -> list[Tensor]:
    """LeRobot's Euler loop with gradients: every state, noise first, the chunk last."""
    k, v, pad = cache
    b = noise.shape[0]
    states = [noise.float()]
    dt = -1.0 / steps
    for step in range(steps):
        t = torch.tensor(1.0 + step * dt, dtype=torch.float32).expand(b)
        states.append(states[-1] + dt * model.denoise_step(k, v, pad, states[-1], t))
    return states


def step_distill(
    teacher: SmolVLAModel,
    student: SmolVLAModel,
    obs: SmolVLAObservation,
    small_steps: int,
    config: StepDistillConfig,
    teacher_steps: int,
    checkpoint_dir: Path | None = None,
    on_step: Callable[[int, float], None] | None = None,
    progress: bool = False,
    options: StepDistillOptions | None = None,
) -> dict[str, Any]:
    """Train `student` in place so that `small_steps` steps reproduce the teacher's `teacher_steps`."""
    from hotloop.nn.resumable import train_resumable

    opts = options or StepDistillOptions()
    matched = matched_states(teacher, obs.batch, small_steps, teacher_steps, opts.intermediate_weight)
    start = start_noise(opts.noise, (teacher.cfg.chunk_size, teacher.cfg.max_action_dim))

    def loss_on(o: SmolVLAObservation, noise: Tensor) -> Tensor:
        with torch.no_grad():
            target = integrate(teacher, prefix_cache(teacher, o), noise, teacher_steps)
            cache = prefix_cache(student, o)  # frozen: the student's prefix is the teacher's
        got = integrate(student, cache, noise, small_steps)
        return matched_loss(got, target, matched, opts.first_action_weight)

    def loss_fn(gen: torch.Generator) -> Tensor:
        idx = torch.randperm(obs.batch, generator=gen)[: min(config.batch, obs.batch)].tolist()
        return loss_on(select(obs, idx), start(len(idx), gen))

    @torch.no_grad()
    def fixed_set_mse() -> float:
        idx = list(range(min(64, obs.batch)))
        o = select(obs, idx)
        noise = start(len(idx), torch.Generator().manual_seed(config.seed + 777))
        want = integrate(teacher, prefix_cache(teacher, o), noise, teacher_steps)[-1]
        return float(F.mse_loss(integrate(student, prefix_cache(student, o), noise, small_steps)[-1], want))

    before = fixed_set_mse()
    kind = f"smolvla-step-distill:{small_steps}:{opts.noise}:{opts.intermediate_weight}:{opts.first_action_weight}"
    state = train_resumable(
        student, loss_fn, config, checkpoint_dir, kind, on_step, progress, expert_parameters(student)
    )
    mse = (before, fixed_set_mse())
    return step_distill_report(
        small_steps, teacher_steps, state.step, int(obs.batch), opts, matched, mse, config
    )


class SmolVLAFlowStudent:
    """SmolVLA's calls for the `onestep[:K]` student (`hotloop.compress.onestep.FlowStudent`): the prefix
    K/V of vision + VLM + state (frozen), the action expert's velocity, the denoising side's parameters."""

    def __init__(self, model: Any) -> None:
        cfg = model.cfg
        self.cfg = cfg
        self.chunk_shape = (int(cfg.chunk_size), int(cfg.max_action_dim))

    def prefix(self, model: Any, obs: SmolVLAObservation) -> Any:
        return prefix_cache(model, obs)

    def velocity(self, model: Any, cache: Any, obs: SmolVLAObservation, x: Tensor, t: Tensor) -> Tensor:
        k, v, pad = cache
        return model.denoise_step(k, v, pad, x, t)  # type: ignore[no-any-return]

    def select(self, obs: SmolVLAObservation, index: list[int]) -> SmolVLAObservation:
        return select(obs, index)

    def concat(self, a: SmolVLAObservation, b: SmolVLAObservation) -> SmolVLAObservation:
        """One batch of both, the prompts padded (masked) to the wider one's slots: recorded frames come
        with the engines' slots, a policy's own observations with its preprocessor's; images prepared at
        the checkpoint's own size resized to a `vision-res` model's (its own rollouts come at that size)."""
        import dataclasses

        from hotloop.families.batching import stack
        from hotloop.families.smolvla.observation import pad_prompt
        from hotloop.models.smolvla import fit_images

        slots = max(a.lang_tokens.shape[1], b.lang_tokens.shape[1])
        padded = []
        for o in (a, b):
            tokens, masks = pad_prompt(o.lang_tokens, o.lang_masks, slots)
            images = fit_images(o.images, self.cfg)
            padded.append(dataclasses.replace(o, images=images, lang_tokens=tokens, lang_masks=masks))
        return stack(padded)

    def batch_size(self, obs: SmolVLAObservation) -> int:
        return int(obs.batch)

    def stack_prefix(self, caches: list[tuple[Tensor, Tensor, Tensor]]) -> tuple[Tensor, Tensor, Tensor]:
        """(k, v, pad) of several batches as one. Batches whose prompts had fewer slots have shorter
        prefixes; they are padded at the end with masked positions, which the expert never attends to and
        which do not move its positions (they count the valid ones): the same velocities."""
        width = max(pad.shape[1] for _, _, pad in caches)
        ks, vs, pads = [], [], []
        for k, v, pad in caches:
            extra = width - pad.shape[1]
            ks.append(F.pad(k, (0, 0, 0, extra)))
            vs.append(F.pad(v, (0, 0, 0, extra)))
            pads.append(F.pad(pad, (0, extra), value=False))
        return torch.cat(ks, dim=1), torch.cat(vs, dim=1), torch.cat(pads)

    def select_prefix(
        self, cache: tuple[Tensor, Tensor, Tensor], index: list[int]
    ) -> tuple[Tensor, Tensor, Tensor]:
        k, v, pad = cache
        rows = torch.tensor(index, dtype=torch.long)
        return k.index_select(1, rows), v.index_select(1, rows), pad.index_select(0, rows)

    def denoising_parameters(self, model: Any) -> list[nn.Parameter]:
        return expert_parameters(model)


class SmolVLACompression(FlowOnestepSteps, FlowStepDistillSteps):
    """The steps `hotloop compress` runs for SmolVLA beyond the generic ones: step distillation, the
    `onestep[:K]` student, a lower vision resolution (`vision-res:S`) and the vision tower's recovery
    toward the full-resolution teacher (`distill`)."""

    def vision_config(self, model: Any) -> Any:
        return model.cfg

    def check_vision_res(self, cfg: Any, side: int, flag: str) -> Any:
        """ConfigError naming `flag` unless `side` is below `cfg`'s resolution and on its patch grid; the
        config after the step."""
        from hotloop.models.smolvla_resolution import check_side, lower_config

        check_side(cfg, side, flag)
        return lower_config(cfg, side)

    def vision_res(self, model: Any, side: int) -> tuple[Any, dict[str, Any]]:
        from hotloop.models.smolvla_resolution import lower_resolution

        return lower_resolution(model, side)

    def check_distill(self, earlier: tuple[str, ...]) -> None:
        """SmolVLA's `distill` retrains the vision tower after `vision-res`; without it there is nothing
        to recover."""
        if "vision-res" not in earlier:
            raise ConfigError(
                "--recipe distill: a SmolVLA's distill retrains the vision tower toward the full-resolution "
                "teacher after vision-res; put vision-res:S before it (e.g. vision-res:384,distill)"
            )

    def distill(
        self,
        teacher: nn.Module,
        student: nn.Module,
        obs: Any,
        targets: Tensor | None,
        settings: dict[str, Any],
        work: Path,
        progress: bool,
    ) -> dict[str, Any]:
        """The vision tower and connector toward the full-resolution teacher (`distill_vision`)."""
        from hotloop.families.smolvla.distill import distill_vision

        config = StepDistillConfig(
            steps=settings["steps"], batch=settings["batch"], lr=settings["lr"], seed=settings["seed"]
        )
        return distill_vision(teacher, student, obs, targets, config, work, progress=progress)  # type: ignore[arg-type]

    def flow_student(self, model: Any) -> Any:
        """The family's calls the onestep method makes (`hotloop.compress.onestep.FlowStudent`)."""
        return SmolVLAFlowStudent(model)

    def step_distiller(self) -> tuple[Any, Any, Any]:
        return step_distill, StepDistillConfig, StepDistillOptions
