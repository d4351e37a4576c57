"""pi's compression steps behind the recipe's family-neutral calls (`PolicyFamily.compression`)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, cast

from torch import Tensor, nn

from hotloop.compress.onestep import FlowOnestepSteps
from hotloop.families.flow_distill import FlowStepDistillSteps, optimiser_config


class PiCompression(FlowOnestepSteps, FlowStepDistillSteps):
    """The steps `hotloop compress` runs for a pi model that no other family has: structured pruning,
    2:4 sparsity, distillation recovery and QAT, a lower vision resolution (`vision-res:S`); step
    distillation (FlowStepDistillSteps) and `onestep[:K]` (FlowOnestepSteps)."""

    def vision_config(self, model: Any) -> Any:
        return model.cfg

    def check_vision_res(self, cfg: Any, side: int, flag: str) -> Any:
        """ConfigError naming `flag` unless `side` is below `cfg`'s resolution and a multiple of its patch
        size; the config after the step."""
        from hotloop.models.pi_resolution import check_side, lower_config

        check_side(cfg, side, flag)
        return lower_config(cfg, side)

    def vision_res(self, model: Any, side: int) -> tuple[Any, dict[str, Any]]:
        from hotloop.models.pi_resolution import lower_resolution

        return lower_resolution(model, side)

    def step_distiller(self) -> tuple[Any, Any, Any]:
        from hotloop.families.pi.compression.distill import DistillConfig
        from hotloop.families.pi.compression.step_distill import StepDistillOptions, step_distill

        return step_distill, DistillConfig, StepDistillOptions

    def prune(
        self, model: nn.Module, obs: Any, actions: Tensor | None, arg: str, seed: int
    ) -> tuple[Any, Any]:
        from hotloop.families.pi.compression.prune import PruneConfig, prune

        config = PruneConfig.parse(arg, "taylor" if actions is not None else "activation")
        return prune(model, obs, actions, config, seed)  # type: ignore[arg-type]

    def sparse24(self, model: nn.Module) -> tuple[nn.Module, dict[str, Any]]:
        from hotloop.families.pi.compression.prune import semi_structured_2_4

        new = copy.deepcopy(model)
        return new, semi_structured_2_4(new)  # type: ignore[arg-type]

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
        from hotloop.families.pi.compression.distill import DistillConfig, distill

        config = optimiser_config(DistillConfig, settings)
        return distill(teacher, student, obs, targets, config, work, progress=progress)  # type: ignore[arg-type]

    def flow_student(self, model: Any) -> Any:
        """The family's calls the onestep method makes (`hotloop.compress.onestep.FlowStudent`)."""
        from hotloop.families.pi.compression.onestep import PiFlowStudent

        return PiFlowStudent(model)

    def qat(
        self,
        model: nn.Module,
        calib: Any,
        steps: int,
        batch: int,
        seed: int,
        work: Path,
        action_dim: int,
        fp32_layers: dict[str, list[str]] | None,
        progress: Any,
    ) -> tuple[nn.Module, dict[str, Any]]:
        from hotloop.families.pi.compression.qat import QatConfig, run_qat

        qc = QatConfig(steps=steps, batch=batch, seed=seed)
        pi_model = cast(Any, model)
        student, result = run_qat(
            pi_model, calib, qc, work, action_dim, fp32_layers=fp32_layers, progress=progress
        )
        return student, {**result.to_dict(), "losses": list(result.losses[-5:]), "mode": qc.mode}
