"""The policy-family protocol: what a family of policies provides so that compile, compress, the runtime,
the closed loop and serve can run it without knowing it.

    family = get_family("pi")                         # hotloop.families: name or LeRobot `type` -> family
    engines = family.build_subengines(model, shape, torch.float32)     # {name: SubEngine}, fixed shapes
    pipe = family.pipeline(cfg, shape, runners, constants, signatures)  # runners chained into actions
    actions = pipe.sample(obs, noise, timer)

A family is a package under `hotloop/families/<name>/` (its model file lives in `hotloop/models/`) with
one class implementing `PolicyFamily`, listed in `hotloop.families.FAMILIES`; each family's class subclasses
`hotloop.families.adapter.FamilyAdapter`, which answers once what families answer alike. It provides:

- **configs and checkpoints**: its config as a dict and back (artifacts store it), an empty model on
  `meta` for a config (the artifact's weights load into it), the LeRobot `type`s it reads;
- **sub-engines**: tensor-only modules with fixed-shape example inputs (`SubEngine`), named inputs and
  outputs. An output feeds every later input of the same name (`Signature`: the names are the contract);
  inputs no sub-engine produces come from the observation, the noise or the engine's `constants`
  (build-time tables, e.g. a step-indexed time table);
- **stages**: the order the sub-engines run in (`StageSpec`). A stage may be a loop (`LoopSpec`): its
  step engine runs once per row of a table, or its loop engine runs the whole loop as one graph; the
  planner times both and keeps the faster that stays accurate;
- **the sampler**: `pipeline(...)` chains runners (eager modules, compiled graphs) into actions, and
  `sample_actions` is the eager reference every plan is judged against;
- **observations**: an example observation of an engine shape, noise of the right shape, batching
  (`stack`, `select`) for calibration and distillation sets, and the check an engine runs on what a
  caller hands it; how a recorded frame becomes one is a `hotloop.families.frames.TargetAdapter` the
  family's targets build (`hotloop.targets.TargetEntry.data`);
- **policies**: the `Policy` (raw observation in, robot actions out) around a loaded artifact;
- **capabilities** it may offer (`Capabilities`): RTC inputs, prompt buckets, fewer steps, step
  distillation, pruning, distillation, QAT, and the sub-engine recipes ("plain", "fused").

A family never imports a backend (`hotloop.compile.backends`) and a backend never imports a family: the
sub-engines are plain torch modules, which is all a backend sees.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import torch
from torch import Tensor, nn

from hotloop.errors import ConfigError

Runner = Callable[..., Tensor | tuple[Tensor, ...]]
Runners = Mapping[str, Runner]  # a pipeline's runners by sub-engine name


@dataclass(frozen=True)
class Signature:
    """Input and output names of one sub-engine, in call order."""

    input_names: tuple[str, ...]
    output_names: tuple[str, ...]


Signatures = Mapping[str, Signature]  # each sub-engine's input and output names by its name


@dataclass
class SubEngine:
    """One sub-engine: a tensor-only module with fixed example inputs and named inputs/outputs.

    `constants` are build-time float32 tables the pipeline feeds by name (step-indexed along dim 0 for a
    loop's table); they are part of the engine, like its weights.
    """

    name: str
    module: nn.Module
    example_inputs: tuple[Tensor, ...]
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    constants: dict[str, Tensor] = field(default_factory=dict)
    # Conversions of this engine a backend may reuse for another precision (e.g. OpenVINO's converted
    # model serves f32 and bf16 alike): converting a full-size graph takes tens of seconds, once is enough.
    conversions: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def signature(self) -> Signature:
        return Signature(self.input_names, self.output_names)


@dataclass(frozen=True)
class LoopSpec:
    """A stage that repeats: `step` runs once per row of the constant `table` (row k fed as input
    `row_input`), or `loop` runs every row in one graph, taking the whole table."""

    step: str
    loop: str
    table: str
    row_input: str


@dataclass(frozen=True)
class StageSpec:
    """One stage of the chain: the sub-engines that can implement it (alternatives), and its loop."""

    name: str
    sub_engines: tuple[str, ...]
    loop: LoopSpec | None = None

    def __post_init__(self) -> None:
        if self.loop is not None and set(self.sub_engines) != {self.loop.step, self.loop.loop}:
            raise ConfigError(
                f"stage {self.name!r}: a loop stage's sub-engines must be its step and loop engines"
            )


@dataclass(frozen=True)
class Capabilities:
    """What a family offers beyond plain sampling; the commands refuse by name what is not offered."""

    rtc: bool = False  # takes the RTC keys (previous chunk, delay) and inpaints the next chunk onto them
    prompt_buckets: bool = False  # the prefix can be built for shorter prompt lengths (`--buckets`)
    step_reduction: bool = False  # `steps:N`: the same model run with fewer denoising steps
    step_distillation: bool = False  # `step-distill:N`
    one_step: bool = False  # `onestep[:K]`: a 1- or 2-step student (`compression().onestep`)
    pruning: bool = False  # `prune`, `sparse24`
    distillation: bool = False  # `distill`
    qat: bool = False  # `qat`
    vision_resolution: bool = False  # `vision-res:S`: the vision tower fed S px (`compression().vision_res`)
    # `zero-noise`: the sampler starts at x = 0 instead of a draw; the artifact's policy reads `zero_noise`
    # from its manifest (its engine policy, and the LeRobot plugin's bridge)
    zero_noise_start: bool = False
    recipes: tuple[str, ...] = ("plain",)  # sub-engine recipes the planner may pick between
    bucket_stages: tuple[str, ...] = ()  # stages whose shapes depend on the prompt length
    # Compression recipe steps of the family's own (`NAME[:ARG]`, run by `compression().recipe_step`),
    # e.g. diffusion's `ddim:N` (switch the sampler to DDIM with N steps).
    recipe_steps: tuple[str, ...] = ()
    # An artifact whose every runner runs from its own files holds no source weights: `Engine.load`
    # rebuilds the pipeline from the manifest, its tables and the graph files, never the torch model
    # (the family's pipeline and engine policy then work without one; `hotloop.runtime.lean_load`).
    lean_artifact: bool = False


class EngineShape(Protocol):
    """The fixed shape a set of sub-engines is built for (a frozen dataclass of ints per family)."""

    batch: int
    num_steps: int


@dataclass(frozen=True)
class PositiveShape:
    """Base of the families' engine shapes: a frozen dataclass whose every field is a positive integer,
    checked on construction (a shape read from a manifest or a flag is refused by its field's name)."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(
                    f"{type(self).__name__}.{f.name} must be a positive integer (got {value!r})"
                )


class Pipeline(Protocol):
    """Runners chained into actions; `sample` is what every caller runs."""

    runners: dict[str, Runner]
    signatures: dict[str, Signature]

    def sample(self, obs: Any, noise: Tensor, timer: Any = None) -> Tensor: ...


@dataclass
class PolicySource:
    """What a family hands the planner to compile: the fp32 model, the fixed engine shape, one real
    observation (batch `shape.batch`) and the noise the final actions are compared under, and the
    `policy` description an artifact needs to drive a robot after loading (norm stats, horizon...).
    `plan_checks`: more (observation, noise) pairs, batch 1 each, that the whole plan's final actions
    must also keep within tolerance (candidates are screened on `obs` alone). `check_actions`: the fp32
    reference's actions for `plan_checks` when the caller already has them (the compress recipe's teacher
    made them), so that the planner does not run a full-size fp32 model once more per check."""

    target: str
    family: PolicyFamily
    model: nn.Module
    shape: Any
    obs: Any
    noise: Tensor
    policy: dict[str, Any] = field(default_factory=dict)
    plan_checks: tuple[tuple[Any, Tensor], ...] = ()
    check_actions: tuple[Tensor, ...] | None = None

    @property
    def cfg(self) -> Any:
        return self.family.config_of(self.model)

    @property
    def checks(self) -> list[tuple[Any, Tensor]]:
        return [(self.obs, self.noise), *self.plan_checks]

    @property
    def stage_of(self) -> dict[str, str]:
        return {sub: stage.name for stage in self.family.stages for sub in stage.sub_engines}


def as_tuple(out: Tensor | tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    return out if isinstance(out, tuple) else (out,)


def constants_of(engines: Mapping[str, SubEngine]) -> dict[str, Tensor]:
    """The constants the pipeline feeds, merged over `engines` (the same name must mean the same tensor)."""
    merged: dict[str, Tensor] = {}
    for engine in engines.values():
        for name, value in engine.constants.items():
            if name in merged and not torch.equal(merged[name], value):
                raise ValueError(f"sub-engines disagree on constant {name!r}; build them together")
            merged[name] = value
    return merged


def run_subengine(runner: Runner, sig: Signature, values: dict[str, Tensor]) -> None:
    """Call `runner` on the values its signature names and store its outputs under their names."""
    out = as_tuple(runner(*(values[n] for n in sig.input_names)))
    values.update(zip(sig.output_names, out, strict=True))


class PolicyFamily(ABC):
    """One family of policies (pi0/pi0.5, ACT, Diffusion Policy, SmolVLA, the toy MLP)."""

    name: ClassVar[str]
    lerobot_types: ClassVar[tuple[str, ...]] = ()
    stages: ClassVar[tuple[StageSpec, ...]]
    capabilities: ClassVar[Capabilities] = Capabilities()
    # Constants the pipeline reads by rows (`hotloop.families.lookup`), each named with the sub-engine
    # whose precision it is stored in: an artifact keeps each in its own file, mapped at load.
    lookup_tables: ClassVar[Mapping[str, str]] = {}

    # ---- configs, shapes and models ----------------------------------------------------------------
    @abstractmethod
    def config_to_dict(self, cfg: Any) -> dict[str, Any]:
        """The config as JSON-ready data (stored in an artifact's manifest)."""

    @abstractmethod
    def config_from_dict(self, data: dict[str, Any]) -> Any:
        """The inverse of `config_to_dict`."""

    @abstractmethod
    def config_of(self, model: nn.Module) -> Any:
        """The config a model was built from."""

    @abstractmethod
    def variant(self, cfg: Any) -> str:
        """The variant name a manifest records beside the family (pi0 or pi05, act...)."""

    @abstractmethod
    def empty_model(self, cfg: Any) -> nn.Module:
        """The model of `cfg` on the meta device (weights are loaded into it with assign=True)."""

    @abstractmethod
    def default_shape(self, cfg: Any, batch: int = 1) -> Any:
        """The config's own full engine shape."""

    @abstractmethod
    def shape_from_dict(self, data: dict[str, Any]) -> Any:
        """An engine shape stored in a manifest (`dataclasses.asdict` of one)."""

    def with_steps(self, shape: Any, num_steps: int) -> Any:
        """`shape` for `num_steps` denoising steps (families with a loop stage)."""
        import dataclasses

        return dataclasses.replace(shape, num_steps=num_steps)

    # ---- sub-engines and the sampler ---------------------------------------------------------------
    @abstractmethod
    def build_subengines(
        self, model: nn.Module, shape: Any, dtype: torch.dtype, recipe: str = "plain"
    ) -> dict[str, SubEngine]:
        """Every sub-engine of `model` for `shape` in `dtype` (the model copied if its dtype differs)."""

    @abstractmethod
    def pipeline(
        self, cfg: Any, shape: Any, runners: Runners, constants: Mapping[str, Tensor], signatures: Signatures
    ) -> Pipeline:
        """Runners (one per stage; a loop stage's step or loop engine) chained into actions."""

    def eager_pipeline(
        self, cfg: Any, shape: Any, engines: Mapping[str, SubEngine], loop: bool = False
    ) -> Pipeline:
        """The engines' own modules as runners; `loop` picks each loop stage's loop engine."""
        runners: dict[str, Runner] = {}
        for stage in self.stages:
            name = stage.sub_engines[0]
            if stage.loop is not None:
                name = stage.loop.loop if loop else stage.loop.step
            runners[name] = engines[name].module
        return self.pipeline(
            cfg, shape, runners, constants_of(engines), {n: e.signature for n, e in engines.items()}
        )

    @abstractmethod
    def sample_actions(
        self, model: nn.Module, obs: Any, noise: Tensor, num_steps: int | None = None
    ) -> Tensor:
        """The eager reference: actions (B, chunk, A) in model space from `obs` and `noise`."""

    # ---- observations ------------------------------------------------------------------------------
    @abstractmethod
    def example_observation(self, cfg: Any, shape: Any, device: torch.device | str = "cpu") -> Any:
        """A deterministic observation of `shape` (every input present and filled)."""

    @abstractmethod
    def noise_shape(self, cfg: Any, shape: Any, batch: int) -> tuple[int, ...]:
        """The shape of all the randomness one sampling of `batch` observations consumes."""

    def make_noise(self, cfg: Any, shape: Any, batch: int, generator: torch.Generator | None) -> Tensor:
        """That randomness, N(0, 1) float32 from `generator` (seed 0 when None)."""
        gen = generator if generator is not None else torch.Generator().manual_seed(0)
        return torch.randn(self.noise_shape(cfg, shape, batch), generator=gen)

    def random_observation(self, cfg: Any, shape: Any, seed: int) -> Any:
        """A seeded observation of `shape` (what re-planning an artifact judges on); by default the
        deterministic example observation."""
        return self.example_observation(cfg, shape)

    @abstractmethod
    def validate_observation(self, cfg: Any, shape: Any, obs: Any) -> Any:
        """`obs` (the family's observation type or a dict of arrays) as the engine takes it, or a
        ConfigError naming the input that does not fit `shape`."""

    @abstractmethod
    def stack(self, observations: list[Any]) -> Any:
        """Batch-1 observations -> one batch."""

    @abstractmethod
    def select(self, obs: Any, index: slice | list[int]) -> Any:
        """Rows `index` of a batched observation."""

    @abstractmethod
    def batch_size(self, obs: Any) -> int:
        """How many observations `obs` holds."""

    # ---- policies, data and measurement ------------------------------------------------------------
    @abstractmethod
    def engine_policy(self, engine: Any, info: dict[str, Any], seed: int) -> Any:
        """The `Policy` (raw observation in, robot actions out) around a loaded artifact's engine;
        `info` is the manifest's `policy` entry."""

    def stage_work(self, cfg: Any, shape: Any, precisions: Mapping[str, str]) -> dict[str, Any]:
        """Analytic work per stage (`measure.roofline.StageWork` as dicts) at each stage's precision;
        {} when the family has no work model."""
        return {}

    # ---- capabilities (families that offer them override) ------------------------------------------
    def compression(self) -> Any:
        """The family's own compression steps (pruning, distillation, step distillation, QAT) as an
        object with `prune`, `sparse24`, `distill`, `step_distill(StepDistillJob)`, `check_step_distill`,
        `onestep(OnestepJob)` and `qat`, for the steps its `capabilities` name (pi:
        `hotloop.families.pi.compression.tools.PiCompression`), and `check_recipe_step(name, arg)` /
        `recipe_step(name, arg, model, num_steps) -> (model, num_steps, details)` for its
        `capabilities.recipe_steps`."""
        raise ConfigError(
            f"family {self.name} has no compression steps of its own (pruning, distillation...)"
        )

    def prompt_length(self, obs: Any) -> int:
        """Prompt slots up to the last real token (families with prompt buckets)."""
        raise ConfigError(f"family {self.name} has no prompt buckets")

    def reshape_subengines(
        self, cfg: Any, engines: Mapping[str, SubEngine], prompt_slots: int
    ) -> dict[str, SubEngine]:
        """The same modules with example inputs for another prompt length (prompt buckets)."""
        raise ConfigError(f"family {self.name} has no prompt buckets")

    def fill_prompt(self, obs: Any, slots: int) -> Any:
        """`obs` with its real prompt tokens cut to the first `slots` (prompt buckets)."""
        raise ConfigError(f"family {self.name} has no prompt buckets")

    def with_prompt_slots(self, shape: Any, slots: int) -> Any:
        raise ConfigError(f"family {self.name} has no prompt buckets")

    # ---- reference runs (`hotloop verify`, docs/verify.md) -------------------------------------------
    def reference_inputs(self, cfg: Any, inputs: Mapping[str, Any], reference: Any) -> tuple[Any, Tensor]:
        """(observation, noise) in this family's model space from a reference run's `inputs.npz` arrays
        and its noise files (`reference`: a `hotloop.families.reference.ReferenceRun`)."""
        raise ConfigError(f"family {self.name} cannot read a reference run yet")

    def reference_actions(self, cfg: Any, actions: Tensor) -> Tensor:
        """A pipeline's actions as the reference's `actions.npy` holds them (by default the same)."""
        return actions

    def signatures(self, cfg: Any) -> dict[str, Signature]:
        """Every sub-engine's input and output names for `cfg` (what a lean artifact's entries must
        name; families with `capabilities.lean_artifact` provide it)."""
        raise ConfigError(f"family {self.name} does not describe its signatures without a model")

    def stage_of(self, sub_engine: str) -> StageSpec:
        """The stage a sub-engine implements (bucket names such as `prefix@32` map to their base)."""
        base = sub_engine.partition("@")[0]
        for stage in self.stages:
            if base in stage.sub_engines:
                return stage
        raise ConfigError(
            f"family {self.name} has no sub-engine {sub_engine!r}; it has "
            f"{', '.join(s for st in self.stages for s in st.sub_engines)}"
        )

    def loop_of(self, sub_engine: str) -> LoopSpec | None:
        return self.stage_of(sub_engine).loop
