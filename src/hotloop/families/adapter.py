"""The family protocol answered once where families answer it alike (`FamilyAdapter`), so that a family's
`family.py` states only what is its own.

    class ActFamily(FamilyAdapter):
        name = "act"
        stages = (StageSpec("backbone", ("backbone",)), StageSpec("transformer", ("transformer",)))

        def parts(self) -> FamilyParts:
            from hotloop.families.act.engines import ActEngineShape, ActPipeline, build_subengines
            from hotloop.models.act import ACTModel

            return FamilyParts(ACTModel, ActEngineShape, ActPipeline, {"plain": build_subengines})

        ...its config reading, variant, noise, observations, sampler, policy, work model

What a family inherits:
- **configs**: its config is a dataclass (`dataclasses.asdict` is its manifest form) held as `model.cfg`;
- **models and shapes**: the empty model is `parts.model(cfg)` built on the meta device; the engine shape
  `parts.shape.of(cfg, batch)`, read back from a manifest as `parts.shape(**fields)`;
- **sub-engines**: the recipe looked up in `parts.recipes` (an unknown one refused by name);
- **the pipeline**: `parts.pipeline(cfg, shape, runners, constants, signatures)`;
- **observations**: batched, sliced and sized by their dataclass fields (`hotloop.families.batching`);
- **prompt buckets** (`capabilities.prompt_buckets`): the observation's `lang_masks` say the prompt's
  length, the shape's `prompt_slots` its slots; the family reshapes its own sub-engines.

`parts()` imports the family's modules when first asked: a family class is imported on every lookup of the
family (an artifact's manifest, a capability check), its engines and model only when they are used.
"""

from __future__ import annotations

import dataclasses
from abc import abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from hotloop.errors import ConfigError
from hotloop.families import batching
from hotloop.families.protocol import Pipeline, PolicyFamily, Runners, Signatures, SubEngine


@dataclass(frozen=True)
class FamilyParts:
    """A family's own classes and sub-engine builders (`FamilyAdapter.parts`)."""

    model: Callable[[Any], nn.Module]  # config -> model
    shape: Any  # the engine-shape dataclass: `shape.of(cfg, batch)`, `shape(**fields)`
    pipeline: Callable[..., Pipeline]  # (cfg, shape, runners, constants, signatures)
    recipes: Mapping[str, Callable[..., dict[str, SubEngine]]]  # recipe -> (model, shape, dtype) -> engines


class FamilyAdapter(PolicyFamily):
    """A `PolicyFamily` whose alike answers come from `parts()` and the shared helpers (module docstring)."""

    @abstractmethod
    def parts(self) -> FamilyParts:
        """The family's model, engine shape and pipeline classes and its recipes, imported here."""

    # ---- configs, shapes and models ----------------------------------------------------------------
    def config_to_dict(self, cfg: Any) -> dict[str, Any]:
        return dataclasses.asdict(cfg)

    def config_of(self, model: nn.Module) -> Any:
        return model.cfg

    def empty_model(self, cfg: Any) -> nn.Module:
        model = self.parts().model
        with torch.device("meta"):
            return model(cfg)

    def default_shape(self, cfg: Any, batch: int = 1) -> Any:
        return self.parts().shape.of(cfg, batch)

    def shape_from_dict(self, data: dict[str, Any]) -> Any:
        return self.parts().shape(**data)

    # ---- sub-engines and the sampler ---------------------------------------------------------------
    def build_subengines(
        self, model: nn.Module, shape: Any, dtype: torch.dtype, recipe: str = "plain"
    ) -> dict[str, SubEngine]:
        recipes = self.parts().recipes
        if recipe not in recipes:
            raise ConfigError(
                f"the {self.name} family has the recipes {', '.join(recipes)} only (got {recipe!r})"
            )
        return recipes[recipe](model, shape, dtype)

    def pipeline(
        self, cfg: Any, shape: Any, runners: Runners, constants: Mapping[str, Tensor], signatures: Signatures
    ) -> Pipeline:
        return self.parts().pipeline(cfg, shape, runners, constants, signatures)

    # ---- observations ------------------------------------------------------------------------------
    def stack(self, observations: list[Any]) -> Any:
        return batching.stack(observations)

    def select(self, obs: Any, index: slice | list[int]) -> Any:
        return batching.select(obs, index)

    def batch_size(self, obs: Any) -> int:
        return batching.batch_size(obs)

    # ---- prompt buckets ----------------------------------------------------------------------------
    def prompt_length(self, obs: Any) -> int:
        from hotloop.families.buckets import prompt_length

        if not self.capabilities.prompt_buckets:
            return super().prompt_length(obs)
        return prompt_length(obs.lang_masks)

    def fill_prompt(self, obs: Any, slots: int) -> Any:
        if not self.capabilities.prompt_buckets:
            return super().fill_prompt(obs, slots)
        masks = obs.lang_masks.clone()
        masks[:, slots:] = False
        if not bool(masks.any()):
            masks[:, 0] = True
        return dataclasses.replace(obs, lang_masks=masks)

    def with_prompt_slots(self, shape: Any, slots: int) -> Any:
        if not self.capabilities.prompt_buckets:
            return super().with_prompt_slots(shape, slots)
        return dataclasses.replace(shape, prompt_slots=slots)
