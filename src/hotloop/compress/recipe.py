"""Compression recipes: steps run in order, each judged before the next, the result a loadable artifact.

    hotloop compress demo:conveyor --recipe steps:4,quantize,compile --episodes 50 -o ART

After every step the candidate is written as a real artifact (compile's planner and artifact writer) and
measured the way a user would: final-action agreement with the fp32 10-step reference under the same
noise (worst observation), trajectory smoothness, latency distribution through the bench harness
(`hotloop bench ART`), closed-loop success through `hotloop eval ART` for targets with a task. A step
that breaks the tolerance stops the recipe: the last passing artifact is kept (exit 3 from the CLI).
Candidates and distillation checkpoints live in `.<out>.work` beside `-o` until the recipe finishes, so
rerunning an interrupted command resumes its distillation from the last checkpoint.

Steps (see `STEPS`): `prune[:MLP[:HEADS]]`, `vision-res:S`, `distill`, `steps:N`, `step-distill:N`,
`onestep[:K]`, `zero-noise`, `sparse24`, `qat[:N]`, `quantize`, `compile`. `vision-res:S` feeds a SmolVLA's or a pi0 /
pi0.5's vision tower S px images (`hotloop.models.smolvla_resolution`, `hotloop.models.pi_resolution`:
fewer patches and image tokens, observations still at the checkpoint's side; `distill` after it retrains
toward the full-resolution teacher). `onestep` replaces the denoising loop by a 1- or 2-step
student (`hotloop.compress.onestep`, docs/onestep.md); `zero-noise` starts the sampler at x = 0 (the
noise's mode) instead of a draw, so the plan is deterministic and a student after it learns one map
(docs/onestep.md, part 4). `distill` recovers whatever was removed before it (prune first, then
distill), against the untouched fp32 teacher; `qat` fine-tunes with fake int8 (for when `quantize` alone
misses the tolerance: `qat,quantize`); `quantize` asks the compile planner for reduced precisions on the
chosen backends, keeping a sensitivity plan's layers fp32 (`--mixed-plan`); `compile` adds the other
backends. `quantize,compile` quantizes straight to the backends `--backends` names, in one planning pass
(per stage: each precision checked against the fp32 stage outputs and the final actions, the fastest that
passes kept, a stage that misses its gate falling back to a higher precision), never on eager torch: the
compile row then reuses that plan. The first row, `reference`, is the fp32 teacher measured in memory
(`hotloop.compress.reference_row`). A family may add steps of its own (`Capabilities.recipe_steps`, run
by its `compression()`): Diffusion Policy's `ddim:N` samples the same weights with DDIM in N steps.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from hotloop.compile.validate import Tolerance, compare_actions
from hotloop.compress.closed_loop_observations import StartingAtZero, policy_weights
from hotloop.errors import ConfigError

STEPS: dict[str, str] = {
    "prune": "prune[:MLP[:HEADS]] structured pruning of FFN neurons / vision MLP channels (and query heads)",
    "vision-res": "vision-res:S feed the vision tower S px images (position table interpolated; SmolVLA, pi0/pi0.5)",
    "distill": "recover the current model from the fp32 teacher (velocity + action + feature loss)",
    "steps": "steps:N run N Euler denoising steps instead of the reference's",
    "step-distill": "step-distill:N train the expert so that N steps match the teacher's reference steps",
    "onestep": "onestep[:K] a 1- (or 2-) step student, progressive self-distillation on --data (SnapFlow; "
    "Diffusion: its DDIM sampler's)",
    "zero-noise": "start the sampler at x = 0 (the noise's mode) instead of a draw: the same actions for the same "
    "observation (Diffusion: after ddim:N)",
    "sparse24": "2:4 semi-structured sparsity of the VLM and expert linears (no CPU speedup expected)",
    "qat": "qat[:N] N steps of quantization-aware fine-tuning (fake int8, flow matching + distillation) on --data",
    "quantize": "int8 (static with --data, dynamic), bf16 per sub-engine, chosen by the planner within tolerance",
    "compile": "choose backends per sub-engine (eager, inductor, onnxruntime, openvino) by measurement",
}
EXIT_TOLERANCE = 3
# The capability (`hotloop.families.protocol.Capabilities`) each step needs of the target's family.
NEEDS: dict[str, str] = {
    "prune": "pruning",
    "sparse24": "pruning",
    "distill": "distillation",
    "steps": "step_reduction",
    "step-distill": "step_distillation",
    "onestep": "one_step",
    "qat": "qat",
    "vision-res": "vision_resolution",
    "zero-noise": "zero_noise_start",
}

# How a refusal names a missing capability, where its field name does not read as English.
LACKS = {
    "one_step": "denoising loop for a few-step student to replace",
    "vision_resolution": "vision tower whose input resolution vision-res can lower (SmolVLA's, pi0's, pi0.5's)",
    "zero_noise_start": "sampling noise to start from zero (its actions come from one pass)",
}


@dataclass(frozen=True)
class RecipeStep:
    name: str
    arg: str = ""

    @property
    def label(self) -> str:
        return f"{self.name}:{self.arg}" if self.arg else self.name


def parse_recipe(text: str, family_steps: tuple[str, ...] = ()) -> tuple[RecipeStep, ...]:
    """`prune:0.25,distill,quantize` -> steps; an unknown step names the known ones. `family_steps`: the
    target's family's own steps (`Capabilities.recipe_steps`, see `family_recipe_steps`), whose argument
    the family checks (`check_family_steps`)."""
    steps = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, _, arg = part.partition(":")
        if name in family_steps and name not in STEPS:
            steps.append(RecipeStep(name, arg))
            continue
        if name not in STEPS:
            import difflib

            known = [*STEPS, *(s for s in family_steps if s not in STEPS)]
            close = difflib.get_close_matches(name, known, n=1)
            hint = close[0] if close else None
            raise ConfigError(
                f"--recipe: unknown step {name!r}{f' (did you mean {hint!r}?)' if hint else ''}; "
                f"known steps: {', '.join(known)}"
            )
        if name in ("steps", "step-distill") or (name == "qat" and arg):
            if not arg.isdigit() or int(arg) < 1:
                raise ConfigError(f"--recipe {part}: give a positive step count, e.g. {name}:4")
        elif name == "vision-res" and (not arg.isdigit() or int(arg) < 1):
            raise ConfigError(
                f"--recipe {part}: give the vision tower's new side in pixels, e.g. vision-res:384 (a multiple "
                "of the checkpoint's patch size, x its pixel-shuffle factor for SmolVLA, below its own image size)"
            )
        elif name == "onestep" and arg not in ("", "1", "2"):
            raise ConfigError(
                f"--recipe {part}: the student takes 1 or 2 steps; use onestep (one network evaluation) "
                "or onestep:2"
            )
        elif name in ("distill", "sparse24", "quantize", "compile", "zero-noise") and arg:
            raise ConfigError(f"--recipe {part}: step {name} takes no argument")
        steps.append(RecipeStep(name, arg))
    if not steps:
        raise ConfigError(
            f"--recipe is empty; give steps such as prune:0.25,distill,quantize ({', '.join(STEPS)})"
        )
    return tuple(steps)


def family_recipe_steps(target: str) -> tuple[str, ...]:
    """The recipe steps of `target`'s own family (`Capabilities.recipe_steps`), read without building it:
    a LeRobot checkpoint folder's family from its config.json `type` (a demo shipped as one: its family),
    an artifact's from its manifest's `kind`; () for the other targets, and for a folder whose type is unknown (refused later, by name)."""
    from pathlib import Path

    from hotloop.demos.checkpoints import SHIPPED
    from hotloop.families import FAMILIES, LEROBOT_TYPES, get_family, is_checkpoint_dir

    if target.startswith("demo:") and target[5:] in SHIPPED:  # a demo shipped as a checkpoint folder
        return tuple(get_family(SHIPPED[target[5:]][0]).capabilities.recipe_steps)
    path = Path(target)
    family: str | None = None
    from hotloop.io import read_json_file

    try:
        if (path / "manifest.json").is_file():
            family = read_json_file(path / "manifest.json").get("kind")
        elif is_checkpoint_dir(path):
            family = LEROBOT_TYPES.get(read_json_file(path / "config.json").get("type"))
    except (ValueError, AttributeError, TypeError):  # damaged: loading the target names the file
        return ()
    if not isinstance(family, str) or family not in FAMILIES:
        return ()
    return tuple(get_family(family).capabilities.recipe_steps)


def check_family_steps(recipe: tuple[RecipeStep, ...], family: Any, target: str) -> None:
    """Every step the family cannot run, refused by name before any work."""
    for step in recipe:
        if step.name not in STEPS:  # a family's own step (parse_recipe let it through)
            own = tuple(family.capabilities.recipe_steps)
            if step.name not in own:
                offered = [n for n in STEPS if n not in NEEDS or getattr(family.capabilities, NEEDS[n])]
                raise ConfigError(
                    f"--recipe {step.label}: {target} is a {family.name} policy, which has no step "
                    f"{step.name!r}; its steps are {', '.join([*offered, *own])}"
                )
            family.compression().check_recipe_step(step.name, step.arg)
            continue
        need = NEEDS.get(step.name)
        if need is not None and not getattr(family.capabilities, need):
            offered = [n for n in STEPS if n not in NEEDS or getattr(family.capabilities, NEEDS[n])]
            offered += list(family.capabilities.recipe_steps)
            what = LACKS.get(need, need.replace("_", " "))
            raise ConfigError(
                f"--recipe {step.label}: {target} is a {family.name} policy, which has no "
                f"{what}; its steps are {', '.join(offered)}"
            )


DISTILL_TARGETS = ("teacher", "data")


@dataclass(frozen=True)
class RecipeConfig:
    target: str
    recipe: tuple[RecipeStep, ...]
    tolerance: Tolerance
    out: Path
    data: Path | None = None
    episodes: int = 0  # closed-loop episodes per step (targets with a task); 0 skips
    # Success is judged at a fixed simulated latency so that it measures the actions, not this machine's
    # load; `measured` replays each step's own inference time.
    eval_latency: str = "fixed:0"
    # How the judged episodes execute the chunks: sync replans every control period (the most demanding
    # of the actions); `chunk` runs a LeRobot checkpoint's n_action_steps per inference, as LeRobot does.
    eval_strategy: str = "sync"
    task: str = "conveyor-pick"
    calibration_frames: int = 32
    eval_observations: int = 8
    distill_steps: int = 100
    distill_batch: int = 8
    # Adam's first steps move every weight by about lr whatever its gradient: 3e-4 suits a small trained
    # policy; a recovery fine-tune of a larger model wants less (weights of std 0.02 moved by ~0.02 in 60 steps).
    distill_lr: float = 3e-4
    # onestep's own rate (None: distill_lr): in one recipe a pruned model's recovery `distill` wants ~3e-5 while
    # a one-step student's expert, trained from the teacher's trajectories, moves little at that rate.
    onestep_lr: float | None = None
    # onestep: the decay of the moving average of the student's weights it ships (0: the last step's)
    onestep_average: float = 0.0
    # step-distill on a demo target without --data: observations along this many closed-loop episodes of
    # the teacher (its start observations alone never show it grasping or carrying).
    distill_episodes: int = 20
    # What `distill`'s action term pulls the student toward: the fp32 teacher's own chunks (what the
    # tolerance judges against) or the recorded actions of --data (only sound when the teacher was
    # trained on that data: toward them, a pruned pi05:small at cos 0.997 fell to 0.985).
    distill_target: str = "teacher"
    step_distill_intermediate: float = 0.0  # weight of the teacher's states at shared flow times
    step_distill_first_action: float = 0.0  # extra weight on the chunk's first action (what sync executes)
    # onestep on a pi demo: training rounds, each after the first on the student's own closed-loop states
    onestep_rounds: int = 3
    # ... played under these (strategy, latency) in turn: a student judged at 0 and 200 ms must have met
    # both's states. Async-only rounds cost 37 points at sync 0 ms, sync-only ones 7 at async 200 ms; in
    # turn, neither (demo:conveyor, seeds 3000-3099; docs/onestep.md).
    onestep_rounds_under: tuple[tuple[str, str], ...] = (("async", "fixed:200"), ("sync", "fixed:0"))
    # onestep on a flow demo: students trained (seeds seed, seed + 1, ...), the one closest to the teacher on
    # validation episodes under every execution above kept (hotloop.compress.student_selection): one training
    # run to the next moved demo:conveyor's success by up to 54 points of 200.
    onestep_candidates: int = 1
    onestep_select_episodes: int = 200
    bench_iters: int = 20
    backends: tuple[str, ...] = ("eager", "onnxruntime", "openvino")
    # A sensitivity plan's layers ({sub-engine: [layer names]}, `--mixed-plan`): quantize and qat keep
    # them fp32.
    fp32_layers: dict[str, list[str]] = field(default_factory=dict)
    # Prompt-length buckets the compile step prepares the prefix and denoise engines for (below the full
    # prompt; quantized ones calibrated again at each bucket's shapes); () = the full prompt only.
    buckets: tuple[int, ...] = ()
    threads: int | None = None
    workers: int = 2
    seed: int = 0
    progress: bool = True
    overwrite: bool = False  # --overwrite: the artifact may replace a folder hotloop did not write
    plan_memory_gb: float | None = None  # --plan-memory-gb: what each planning pass may hold

    def __post_init__(self) -> None:
        if self.plan_memory_gb is not None and not 0 < self.plan_memory_gb < float("inf"):
            raise ConfigError(
                f"--plan-memory-gb must be > 0 (got {self.plan_memory_gb}); e.g. --plan-memory-gb 20"
            )
        for name, flag in (
            ("episodes", "--episodes"),
            ("calibration_frames", "--calibration-frames"),
            ("eval_observations", "--eval-observations"),
            ("distill_steps", "--distill-steps"),
            ("distill_batch", "--distill-batch"),
            ("distill_episodes", "--distill-episodes"),
            ("bench_iters", "--bench-iters"),
            ("onestep_rounds", "--onestep-rounds"),
            ("onestep_candidates", "--onestep-candidates"),
            ("onestep_select_episodes", "--onestep-select-episodes"),
        ):
            value = getattr(self, name)
            low = 0 if name in ("episodes", "distill_episodes") else 1  # 0: skip / start frames only
            if value < low:
                raise ConfigError(f"{flag} must be >= {low} (got {value})")
        if not (self.distill_lr > 0 and math.isfinite(self.distill_lr)):
            raise ConfigError(f"--distill-lr must be a positive number (got {self.distill_lr})")
        if self.onestep_lr is not None and not (self.onestep_lr > 0 and math.isfinite(self.onestep_lr)):
            raise ConfigError(f"--onestep-lr must be a positive number (got {self.onestep_lr})")
        if not (self.onestep_average == 0 or 0 < self.onestep_average < 1):
            raise ConfigError(
                f"--onestep-average must be 0 (off) or a decay in (0, 1) such as 0.99 (got {self.onestep_average})"
            )
        if self.distill_target not in DISTILL_TARGETS:
            raise ConfigError(
                f"--distill-target {self.distill_target!r} is unknown; use {' or '.join(DISTILL_TARGETS)}"
            )
        check_rounds_under(self.onestep_rounds_under)
        if not self.step_distill_first_action >= 0:
            raise ConfigError(f"--first-action-weight must be >= 0 (got {self.step_distill_first_action})")
        if self.onestep_candidates > 1:
            check_candidates(self)
        trains = next((s for s in self.recipe if s.name in ("qat", "onestep")), None)
        if trains is not None and self.data is None:
            raise ConfigError(
                f"--recipe {trains.label} trains on recorded episodes: give --data DIR "
                "(e.g. hotloop record --task conveyor-pick --episodes 20 -o DIR)"
            )


@dataclass
class Candidate:
    """The model as the recipe has shaped it so far."""

    model: Any  # nn.Module of the target's family
    num_steps: int
    precisions: tuple[str, ...] = ("fp32",)
    backends: tuple[str, ...] = ("eager",)
    sparsity: dict[str, Any] | None = None
    applied: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    # Planned on the backends `--backends` names (by `compile`, or by `quantize` straight to them): a
    # `compile` step after it has nothing left to plan.
    on_backends: bool = False
    vision_resolution: dict[str, Any] | None = None  # what `vision-res` changed (the manifest records it)
    # `zero-noise`: the sampler starts at x = 0 (the manifest's policy entry says so)
    zero_noise: bool = False


@dataclass
class Inputs:
    """Observations the recipe calibrates, distills and judges on (with recorded actions when given)."""

    obs: Any  # the family's observation, batch N
    actions: Tensor | None
    calibration: dict[str, Any] | None
    calibration_set: Any = None  # the CalibrationSet static int8 calibrates on (with --data)
    zero_noise: bool = False  # the policy integrates from x = 0 (demo policies), not from a random draw
    rollouts: Any = None  # teacher rollouts (RolloutSet) for step-distill, gathered on first use
    # The observations every step is judged on, held out from `obs` (what is calibrated, pruned and
    # distilled on), so a step that overfits its training frames shows it.
    judged: Any = None


def load_inputs(config: RecipeConfig, source: Any) -> Inputs:
    family = source.family
    if config.data is not None:
        from hotloop.compile.calibration import CalibrationSpec, load_calibration, open_dataset
        from hotloop.compile.sources import load_target

        _, adapter = load_target(
            config.target, open_dataset(config.data), config.seed, source.shape.num_steps, source.model
        )
        calib = load_calibration(
            config.data, adapter, CalibrationSpec(count=config.calibration_frames, seed=config.seed)
        )
        held_out = CalibrationSpec(
            count=config.eval_observations, seed=config.seed + 1, exclude=frozenset(calib.frames)
        )
        judged = load_calibration(config.data, adapter, held_out).obs
        return Inputs(calib.obs, calib.actions, calib.manifest_entry(), calib, judged=judged)
    n, n_eval = config.calibration_frames, config.eval_observations
    from hotloop.targets import TargetOptions, find_target

    entry = find_target(config.target)
    if entry.task_observations is not None:  # a target with a task of its own: its start observations
        observations = entry.build_task_observations(
            config.target, TargetOptions(seed=config.seed), config.task, n + n_eval
        )
        return Inputs(family.stack(observations[:n]), None, None, judged=family.stack(observations[n:]))
    cfg = source.cfg
    return Inputs(
        family.random_observation(cfg, family.default_shape(cfg, n), config.seed),
        None,
        None,
        judged=family.random_observation(cfg, family.default_shape(cfg, n_eval), config.seed + 1),
    )


# ---- the steps ---------------------------------------------------------------------------------------------
def apply_step(
    step: RecipeStep,
    cand: Candidate,
    teacher: Any,
    inputs: Inputs,
    config: RecipeConfig,
    work: Path,
    family: Any,
    action_dim: int | None = None,
    next_step: RecipeStep | None = None,
    log: Callable[[str], None] = lambda s: None,
) -> Candidate:
    """`cand` after `step`; the steps a family has of its own run through `family.compression()`.
    `next_step`: the step after it (`quantize` followed by `compile` quantizes straight to the backends)."""
    settings = {
        "steps": config.distill_steps,
        "batch": config.distill_batch,
        "lr": config.distill_lr,
        "seed": config.seed,
    }
    new = dataclasses.replace(cand, applied=[*cand.applied, step.label], details={}, on_backends=False)
    if step.name == "prune":
        new.model, new.details = family.compression().prune(
            cand.model, inputs.obs, inputs.actions, step.arg, config.seed
        )
    elif step.name == "vision-res":
        new.model, new.details = family.compression().vision_res(cand.model, int(step.arg))
        new.vision_resolution = new.details
    elif step.name == "distill":
        new.model = copy.deepcopy(cand.model)
        targets = inputs.actions if config.distill_target == "data" else None  # None: the teacher's chunks
        new.details = family.compression().distill(
            teacher, new.model, inputs.obs, targets, settings, work / "distill", config.progress
        )
    elif step.name == "steps":
        new.num_steps = int(step.arg)
    elif step.name == "step-distill":
        from hotloop.families.flow_distill import StepDistillJob

        obs, source = step_distill_observations(inputs, config, family)
        new.model = copy.deepcopy(cand.model)
        new.num_steps = int(step.arg)
        opts = {
            "noise": "zero" if inputs.zero_noise else "random",
            "intermediate_weight": config.step_distill_intermediate,
            "first_action_weight": config.step_distill_first_action,
        }
        job = StepDistillJob(
            teacher, new.model, obs, new.num_steps, cand.num_steps, settings, opts, work / f"step-distill-{step.arg}",
            config.progress,
        )  # fmt: skip
        new.details = family.compression().step_distill(job)
        new.details["data"] = source
    elif step.name == "onestep":
        new.model, new.num_steps, new.details = one_step_student(
            step, cand, inputs, config, work, family, action_dim, log
        )
    elif step.name == "zero-noise":
        new.zero_noise = True
        new.details = {"start": "x = 0 (every inference), not a draw"}
    elif step.name == "sparse24":
        new.model, new.details = family.compression().sparse24(cand.model)
        new.sparsity = new.details
    elif step.name == "qat":
        new.model, new.details = quantization_aware(
            step, cand.model, inputs, config, work, family, action_dim
        )
    elif step.name == "quantize":
        # compress-quant's precisions through the planner: static int8 needs the recorded calibration set.
        # Static int8 first: candidates of equal roofline bound are tried in this order, and at full size an
        # accepted int8-dynamic prefix left no memory for the static one (pi05:full: 3.5 GiB left, 5.7
        # needed even by the lean quantizer), which runs the prefix 4x faster on an AMX CPU.
        quant: tuple[str, ...] = (
            ("int8", "int8-dynamic") if inputs.calibration_set is not None else ("int8-dynamic",)
        )
        if next_step is not None and next_step.name == "compile":
            # Straight to the backends: one planning pass, every stage's int8 candidates on the graphs
            # that ship (int4 weights too where a backend has them), never eager torch's copies.
            quant = (*quant, *direct_extra_precisions(config.backends))
            new.backends, new.on_backends = config.backends, True
            new.applied = [*new.applied, next_step.label]
        new.precisions = (*quant, "bf16", "fp32")
    elif step.name == "compile":
        new.backends, new.on_backends = config.backends, True
    elif step.name not in STEPS:  # the family's own (`Capabilities.recipe_steps`)
        new.model, new.num_steps, new.details = family.compression().recipe_step(
            step.name, step.arg, cand.model, cand.num_steps
        )
    for p in new.model.parameters():
        p.requires_grad_(False)
    new.model.eval()
    return new


def direct_extra_precisions(backends: tuple[str, ...]) -> tuple[str, ...]:
    """The weight-only precisions `quantize,compile` adds where one of `backends` has them (OpenVINO's
    int4 weights)."""
    from hotloop.compile.backends import get_backend

    return tuple(p for p in ("int4-weight",) if any(p in get_backend(b).precisions for b in backends))


def quantization_aware(
    step: RecipeStep,
    model: Any,
    inputs: Inputs,
    config: RecipeConfig,
    work: Path,
    family: Any,
    action_dim: int | None,
) -> tuple[Any, dict[str, Any]]:
    """`qat[:N]`: fine-tune with fake int8 on the calibration set (N steps, default --distill-steps), the
    fp32 model it starts from as the distillation teacher; resumes from `work/qat-*` after an interrupt."""
    from hotloop.progress import Progress

    calib = inputs.calibration_set
    assert calib is not None, "RecipeConfig refuses qat without --data"
    steps = int(step.arg) if step.arg else config.distill_steps
    dim = action_dim if action_dim is not None else int(calib.actions.shape[-1])
    with Progress(steps, "qat", "step", enabled=config.progress) as bar:
        return family.compression().qat(  # type: ignore[no-any-return]
            model, calib, steps, min(config.distill_batch, len(calib)), config.seed, work / f"qat-{steps}",
            dim, config.fp32_layers or None, lambda i, loss: bar.update(1, f"loss {loss:.4f}"),
        )  # fmt: skip


def step_distill_observations(
    inputs: Inputs, config: RecipeConfig, family: Any
) -> tuple[Any, dict[str, Any]]:
    """What step-distill trains on: for a demo target, the teacher's own closed-loop observations
    (`--distill-episodes` of them, gathered once per recipe), with or without --data: the states the
    policy itself visits, which recorded expert frames do not cover (docs/step-distillation.md); with
    `--distill-episodes 0` or for other targets, the recipe's observations (the --data frames if given)."""
    if not config.target.startswith("demo:") or not config.distill_episodes:
        return inputs.obs, {"source": "recipe observations", "observations": family.batch_size(inputs.obs)}
    if inputs.rollouts is None:
        from hotloop.compress.rollouts import rollout_observations
        from hotloop.demos.conveyor import build_demo
        from hotloop.targets import TargetOptions

        demo = build_demo(config.target, TargetOptions(seed=config.seed))
        if hasattr(demo, "meta"):  # a pi conveyor demo: its own recorder
            inputs.rollouts = rollout_observations(
                demo, config.task, config.distill_episodes, config.seed, family
            )
        else:  # a checkpoint-backed demo (SmolVLA): played by eval's episode runner, as onestep's rounds are
            inputs.rollouts = teacher_rollouts(config, family)
    return inputs.rollouts.obs, inputs.rollouts.manifest_entry()


def teacher_rollouts(config: RecipeConfig, family: Any) -> Any:
    """The teacher's own `--distill-episodes` (sync, 0 ms, its own steps) for a demo target whose policy
    is not a pi conveyor demo, through eval's episode runner."""
    from hotloop.compress.closed_loop_observations import closed_loop_observations
    from hotloop.compress.rollouts import ROLLOUT_SEED_BASE, RolloutSet

    obs, wins = closed_loop_observations(
        config.target, config.task, family, config.distill_episodes, config.seed, num_steps=None
    )
    first = ROLLOUT_SEED_BASE + config.seed
    episodes = config.distill_episodes
    return RolloutSet(obs, episodes, wins, (first, first + episodes - 1), family.batch_size(obs))


def one_step_student(
    step: RecipeStep,
    cand: Candidate,
    inputs: Inputs,
    config: RecipeConfig,
    work: Path,
    family: Any,
    action_dim: int | None = None,
    log: Callable[[str], None] = lambda s: None,
) -> tuple[Any, int, dict[str, Any]]:
    """`onestep[:K]`: the candidate (at its current step count and sampler) teaches a K-step copy of
    itself (`hotloop.compress.onestep`; Diffusion: `hotloop.families.diffusion.onestep`). It learns on the
    --data frames (their recorded chunks anchor the flow) and, for a flow demo target, on the teacher's
    own closed-loop observations (`--distill-episodes`) and, in later rounds, on the student's
    (`--onestep-rounds` under `--onestep-rounds-under`; not after `prune`, whose shapes the demo's own
    policy cannot load: its teacher episodes are then the target's own)."""
    from hotloop.compress.onestep import OnestepConfig, OnestepJob

    calib = inputs.calibration_set
    assert calib is not None, "RecipeConfig refuses onestep without --data"
    steps = int(step.arg or 1)
    obs, source = calib.obs, {"source": "--data frames", "observations": len(calib)}
    tools = family.compression()
    explore = None
    pruned = any(label.startswith("prune") for label in cand.applied)
    # a `vision-res` model takes other image sizes than the demo's own policy: the rollouts swap it in whole
    reshaped = any(label.startswith("vision-res") for label in cand.applied)
    # so does a Diffusion model whose sampler (ddim:N) lives in its config: it is played as a whole model
    reshaped = reshaped or bool(getattr(tools, "sampler_in_config", False))
    if config.target.startswith("demo:") and config.distill_episodes and hasattr(tools, "flow_student"):
        # a demo target: also the teacher's own closed-loop observations, and the student's in later rounds
        from hotloop.compress.closed_loop_observations import closed_loop_observations

        # The teacher's episodes under the rounds' first execution, every period kept off sync: at async
        # 200 ms the teacher is asked 3 to 5 times an episode instead of every period (about 30), so they
        # cost a fraction of sync's for as many observations.
        played = config.onestep_rounds_under[0]
        weights = None if pruned else policy_weights(cand.model, reshaped)  # None: the target's own
        rollouts, wins = closed_loop_observations(
            config.target, config.task, family, config.distill_episodes, config.seed, cand.num_steps,
            StartingAtZero(weights) if cand.zero_noise else weights, played, every_period=played[0] != "sync",
        )  # fmt: skip
        source = {"source": f"teacher rollouts ({played[0]}, {played[1]})", "episodes": config.distill_episodes,
                  "successes": wins, "observations": family.batch_size(rollouts)}  # fmt: skip
        obs = tools.flow_student(cand.model).concat(calib.obs, rollouts)
        source = {"data_frames": len(calib), **source}
        explore = None if pruned else student_rollouts(config, family, steps, reshaped, cand.zero_noise)
    elif config.target.startswith("demo:") and config.distill_episodes and hasattr(tools, "teacher_rollouts"):
        # Diffusion on a demo: the teacher's own closed-loop observations beside the --data frames (no
        # rounds): the recorded expert's states are not all those the policy meets driving itself
        from hotloop.compress.closed_loop_observations import closed_loop_observations

        played = config.onestep_rounds_under[0]
        weights = policy_weights(cand.model, reshaped, cand.zero_noise)
        rollouts, wins = closed_loop_observations(
            config.target, config.task, family, config.distill_episodes, config.seed, cand.num_steps, weights,
            played,
        )  # fmt: skip
        obs = family.stack([calib.obs, rollouts])
        source = {"data_frames": len(calib), "source": f"teacher rollouts ({played[0]}, {played[1]})",
                  "episodes": config.distill_episodes, "successes": wins,
                  "observations": family.batch_size(rollouts)}  # fmt: skip
    if explore is not None:
        source["rounds_under"] = [f"{s}@{lat}" for s, lat in config.onestep_rounds_under]
    # check_candidates refused, before any work, every recipe whose students cannot be played
    # (a Diffusion student has no rounds; its candidates are played all the same)
    assert config.onestep_candidates == 1 or explore is not None or hasattr(tools, "teacher_rollouts")

    def train(seed: int, folder: str) -> tuple[Any, dict[str, Any]]:
        settings = OnestepConfig(
            steps=config.distill_steps,
            batch=config.distill_batch,
            lr=config.distill_lr if config.onestep_lr is None else config.onestep_lr,
            seed=seed,
            noise="zero" if inputs.zero_noise or cand.zero_noise else "random",
            rounds=config.onestep_rounds if explore is not None else 1,
            first_action_weight=config.step_distill_first_action,
            average=config.onestep_average,
        )
        # a student whose config samples K steps where the sampler lives in the config (Diffusion's DDIM)
        model = (
            tools.student_model(cand.model, steps)
            if hasattr(tools, "student_model")
            else copy.deepcopy(cand.model)
        )
        job = OnestepJob(
            cand.model, model, obs, calib, steps, cand.num_steps, settings, work / folder, config.progress,
            explore, action_dim,
        )  # fmt: skip
        return model, tools.onestep(job)

    if config.onestep_candidates == 1:
        model, details = train(config.seed, f"onestep-{steps}")
    else:
        from hotloop.compress.student_selection import chosen_student

        model, details = chosen_student(config, cand, steps, reshaped, train, log)
    details["data"] = source
    return model, steps, details


def check_candidates(config: RecipeConfig) -> None:
    """`--onestep-candidates` > 1 plays the students in the target's task: a demo target, a recipe with
    `onestep` (not after `prune`), and episodes to learn the rounds from; refused before any work."""
    flag = f"--onestep-candidates {config.onestep_candidates}"
    names = [s.name for s in config.recipe]
    if "onestep" not in names:
        raise ConfigError(f"{flag} chooses among onestep students; the recipe has no onestep step")
    if not config.target.startswith("demo:"):
        raise ConfigError(
            f"{flag}: students are chosen by playing a demo task; {config.target} has none "
            "(use --onestep-candidates 1)"
        )
    if "prune" in names[: names.index("onestep")]:
        raise ConfigError(
            f"{flag}: a pruned student's shapes do not load into {config.target}'s own policy, so it cannot "
            "be played; use --onestep-candidates 1"
        )
    if config.distill_episodes < 1:
        raise ConfigError(f"{flag} needs the closed-loop rounds: give --distill-episodes >= 1")


def parse_rounds_under(text: str) -> tuple[tuple[str, str], ...]:
    """`--onestep-rounds-under async@fixed:200,sync@fixed:0` -> ((strategy, latency), ...)."""
    pairs = []
    for part in (p.strip() for p in text.split(",")):
        strategy, at, latency = part.partition("@")
        if not (strategy and at and latency):
            raise ConfigError(
                f"--onestep-rounds-under {text!r}: give STRATEGY@LATENCY pairs, e.g. async@fixed:200,sync@fixed:0"
            )
        pairs.append((strategy.strip(), latency.strip()))
    check_rounds_under(tuple(pairs))
    return tuple(pairs)


def check_rounds_under(pairs: tuple[tuple[str, str], ...]) -> None:
    from hotloop.closedloop.latency import parse_latency
    from hotloop.realtime.strategies import default_strategies

    names = default_strategies().names()
    if not pairs:
        raise ConfigError("--onestep-rounds-under needs at least one STRATEGY@LATENCY, e.g. sync@fixed:0")
    for strategy, latency in pairs:
        if strategy not in names:
            raise ConfigError(
                f"--onestep-rounds-under: strategy {strategy!r} is not known; use one of {', '.join(names)}"
            )
        try:
            parse_latency(latency)
        except ConfigError as e:
            raise ConfigError(f"--onestep-rounds-under: {e}") from None


def student_rollouts(
    config: RecipeConfig, family: Any, steps: int, reshaped: bool = False, zero_noise: bool = False
) -> Callable[[Any, int], Any]:
    """For onestep's on-policy rounds on a demo target: the observations the student meets when it
    drives the task itself (`--distill-episodes` episodes a round, seeds of their own range), round r
    played under `--onestep-rounds-under`'s (r - 1)-th execution in turn. Under any strategy but sync,
    which asks at every period anyway, each control period's observation is kept, not only those the
    policy was asked about (async at 200 ms asks 3 to 5 times an episode)."""
    from hotloop.compress.closed_loop_observations import closed_loop_observations

    conditions = config.onestep_rounds_under

    def explore(student: Any, round_: int) -> Any:
        condition = conditions[(round_ - 1) % len(conditions)]
        seed = config.seed + 1000 * round_  # apart from the teacher's rollouts (seed + 0..episodes-1)
        return closed_loop_observations(
            config.target,
            config.task,
            family,
            config.distill_episodes,
            seed,
            steps,
            policy_weights(student, reshaped, zero_noise),
            condition,
            every_period=condition[0] != "sync",
        )[0]

    return explore


def check_step_counts(
    recipe: tuple[RecipeStep, ...], reference_steps: int, family: Any, model: Any = None
) -> None:
    """step-distill:N must take fewer steps than the model it distils from (the reference, or an earlier
    steps:M), onestep:K 1 or 2 of them dividing it: refused before any work."""
    current = reference_steps
    for step in recipe:
        if step.name == "step-distill":
            family.compression().check_step_distill(int(step.arg), current)
        if step.name == "onestep":
            earlier = tuple(s.name for s in recipe[: recipe.index(step)])
            family.compression().check_onestep(int(step.arg or 1), current, earlier, model)
        if step.name in ("steps", "step-distill", "onestep"):
            current = int(step.arg or 1)
        elif step.name not in STEPS and step.arg.isdigit():  # a family's own sampler step (ddim:N)
            current = int(step.arg)


def check_zero_noise(
    recipe: tuple[RecipeStep, ...], family: Any, policy: dict[str, Any], target: str, model: Any = None
) -> None:
    """`zero-noise` once, on a policy that draws its start (not a demo that already starts at x = 0), and
    where the family has a condition of its own (Diffusion: a DDIM sampler, whose steps draw nothing):
    refused before any work."""
    names = [s.name for s in recipe]
    if "zero-noise" not in names:
        return
    if names.count("zero-noise") > 1:
        raise ConfigError("--recipe: zero-noise appears twice; give it once")
    if policy.get("zero_noise"):
        raise ConfigError(
            f"--recipe zero-noise: {target}'s policy already starts its flow at x = 0; leave the step out"
        )
    tools = family.compression()
    if hasattr(tools, "check_zero_noise"):
        tools.check_zero_noise(tuple(names[: names.index("zero-noise")]), model)


def check_first_action_weight(config: RecipeConfig, family: Any) -> None:
    """`--first-action-weight` weighs a flow student's first action (step-distill, a flow family's onestep);
    a recipe with no step that reads it is refused rather than run without it."""
    if not config.step_distill_first_action:
        return
    names = {s.name for s in config.recipe}
    flow = "onestep" in names and hasattr(family.compression(), "flow_student")
    if "step-distill" not in names and not flow:
        raise ConfigError(
            f"--first-action-weight {config.step_distill_first_action:g}: no step of --recipe reads it "
            "(step-distill, or onestep of a pi or SmolVLA policy); leave it out"
        )


def check_vision_res(recipe: tuple[RecipeStep, ...], family: Any, model: Any) -> None:
    """Every `vision-res:S` against the resolution the model has at that point (the checkpoint's own, or
    an earlier step's S), and a family's `distill` that only recovers what an earlier step changed
    (SmolVLA's: the vision tower after `vision-res`), refused before any work."""
    if not any(s.name in ("vision-res", "distill") for s in recipe):
        return  # nothing to check; a family without steps of its own (toy) has no `compression()`
    tools = family.compression()
    cfg = tools.vision_config(model) if any(s.name == "vision-res" for s in recipe) else None
    for i, step in enumerate(recipe):
        if step.name == "vision-res":
            cfg = tools.check_vision_res(cfg, int(step.arg), f"--recipe {step.label}")
        elif step.name == "distill" and hasattr(tools, "check_distill"):
            tools.check_distill(tuple(s.name for s in recipe[:i]))


# ---- judging a candidate ---------------------------------------------------------------------------------
def write_candidate(
    cand: Candidate,
    source: Any,
    config: RecipeConfig,
    dest: Path,
    extra: dict[str, Any],
    inputs: Inputs,
    checks: tuple[tuple[Any, Tensor], ...] = (),
    check_actions: Tensor | None = None,
    log: Callable[[str], None] = lambda s: None,
) -> dict[str, Any]:
    """Plan (compile's planner, this candidate's backends x precisions) and write its artifact: the plan
    per stage (`precision_plan`) and every candidate's outcome (`candidates`: a stage's precision that
    missed the tolerance is `rejected`, and the stage falls back to one that kept it).
    `check_actions`: the teacher's actions for `checks`, when the candidate is the teacher's own weights
    at its step count (the planner then samples none of them again)."""
    from hotloop.compile.plan import plan_policy, write_artifact
    from hotloop.compile.planner import PlanConfig
    from hotloop.families.protocol import PolicySource

    family = source.family
    shape = family.with_steps(source.shape, cand.num_steps)
    # `checks`: the observations the recipe judges on; the planner checks its whole plan on them too, so
    # that it does not pick a plan that one observation passes and the judge's worst one breaks.
    first = family.select(source.obs, [0])
    known = tuple(a.unsqueeze(0) for a in check_actions) if check_actions is not None else None
    policy, noise = source.policy, source.noise
    if cand.zero_noise:  # the artifact's policy starts at x = 0: its plan is checked from there too
        policy, noise = {**policy, "zero_noise": True}, torch.zeros_like(noise)
        checks = tuple((obs, torch.zeros_like(n)) for obs, n in checks)
    src = PolicySource(source.target, family, cand.model, shape, first, noise, policy, checks, known)
    plan_config = PlanConfig(
        budget_ms=1e9,
        # Compile-time numerics are judged against this candidate's own fp32 eager run; the recipe's
        # tolerance against the original reference is checked on the written artifact afterwards.
        tolerance=config.tolerance,
        backends=tuple(b for b in cand.backends if b != "tensorrt"),
        precisions=cand.precisions,
        variants=("plain", "fused") if len(cand.backends) > 1 else ("plain",),
        iterations=max(5, config.bench_iters // 2),
        threads=config.threads,
        progress=False,
        calibration=inputs.calibration_set if "int8" in cand.precisions else None,
        fp32_layers=dict(config.fp32_layers),
        buckets=config.buckets if "compile" in cand.applied else (),
        plan_memory_gb=config.plan_memory_gb,
    )
    plan = plan_policy(src, plan_config, lambda line: log(f"  {line}"))
    from hotloop.compile.plan import compression_entry

    chosen = {
        stage: {
            "sub_engine": c.sub_engine,
            "backend": c.backend,
            "precision": c.precision,
            "variant": c.variant,
        }
        for stage, c in plan.chosen.items()
    }
    # compile writes `precision_plan` (per sub-engine, with the layers kept fp32); the recipe's history
    # goes into `compression` beside the quantization's calibration entry.
    compression = {**extra["compression"], "quantization": compression_entry(plan_config)}
    write_artifact(src, plan, dest, plan_config, extra={"compression": compression})
    searched = [
        {
            "candidate": c.label,
            "status": c.status,
            "action_cos": c.action.cosine if c.action is not None else None,
            "reason": c.reason,
        }
        for c in plan.candidates
    ]
    return {"precision_plan": chosen, "candidates": searched}


def judge(
    art: Path,
    reference: Tensor,
    inputs: Inputs,
    noise: Tensor,
    config: RecipeConfig,
    action_dim: int,
    family: Any,
) -> dict[str, Any]:
    """Action agreement (worst observation), smoothness, latency and (optionally) success of `art`."""
    from hotloop.compress.steps import smoothness
    from hotloop.measure.bench import BenchConfig, run_bench
    from hotloop.runtime.engine import Engine
    from hotloop.runtime.targets import build_bench
    from hotloop.targets import TargetOptions

    engine = Engine.load(art, threads=config.threads, warmup=1)
    got = torch.stack(
        [
            engine.sample(family.select(inputs.obs, [i]), noise[i : i + 1]).clone()[0]
            for i in range(reference.shape[0])
        ]
    )
    worst = min(
        (
            compare_actions(reference[i, :, :action_dim], got[i, :, :action_dim])
            for i in range(reference.shape[0])
        ),
        key=lambda a: a.cosine,
    )
    del engine
    bench = run_bench(
        build_bench(str(art), TargetOptions(seed=config.seed)),
        BenchConfig(warmup=3, iterations=config.bench_iters, threads=config.threads, progress=False),
    )
    lat = bench.latency
    figures: dict[str, Any] = {
        "action": worst.to_dict(),
        "violation": config.tolerance.violation(worst),
        "smoothness": smoothness(got[..., :action_dim]),
        "latency_ms": {"p50": lat.p50, "p90": lat.p90, "p99": lat.p99, "max": lat.max, "mean": lat.mean},
    }
    if config.episodes and _has_task(config.target):
        figures["success"] = closed_loop_success(str(art), config)
    return figures


# ---- the recipe ------------------------------------------------------------------------------------------
def run_recipe(config: RecipeConfig, log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Run every step; the last passing artifact ends up at `config.out`. Returns the report."""
    from hotloop.compile.artifact import check_output_dir
    from hotloop.compile.sources import compilable_entry, policy_source
    from hotloop.nn import count_parameters
    from hotloop.targets import TargetOptions

    compilable_entry(config.target)
    check_output_dir(config.out, "-o", command="compress", overwrite=config.overwrite)
    source = policy_source(config.target, TargetOptions(seed=config.seed))
    family = source.family
    check_family_steps(config.recipe, family, config.target)
    teacher = source.model.float().eval()
    from hotloop.compile.artifact import sha256_state_dict

    teacher_sha = sha256_state_dict(teacher.state_dict())
    for p in teacher.parameters():
        p.requires_grad_(False)
    check_step_counts(config.recipe, source.shape.num_steps, family, teacher)
    check_vision_res(config.recipe, family, teacher)
    check_first_action_weight(config, family)
    check_zero_noise(config.recipe, family, source.policy, config.target, teacher)
    inputs = load_inputs(config, source)
    inputs.zero_noise = bool(source.policy.get("zero_noise"))
    assert inputs.judged is not None
    n_eval = family.batch_size(inputs.judged)
    eval_inputs = Inputs(inputs.judged, None, None)
    noise = family.make_noise(
        source.cfg, source.shape, n_eval, torch.Generator().manual_seed(config.seed + 99)
    )
    if source.policy.get("zero_noise"):
        noise.zero_()
    from hotloop.compress.reference_row import reference_figures, reference_plan, teacher_reference

    # The teacher on each judged observation, once: every row is judged against these actions, and
    # these calls are the reference row's latency (nothing is planned or written for it).
    teacher_ref = teacher_reference(family, teacher, eval_inputs.obs, noise, source.shape.num_steps)
    reference = teacher_ref.actions
    action_dim = int(source.policy.get("action_dim") or reference.shape[-1])
    checks = tuple((family.select(eval_inputs.obs, [i]), noise[i : i + 1]) for i in range(n_eval))

    # Kept when a run is interrupted or crashes: rerunning the same command resumes its distillation
    # from the last checkpoint there (a checkpoint of other settings is refused, not reused).
    work = config.out.resolve().parent / f".{config.out.name}.work"
    work.mkdir(parents=True, exist_ok=True)
    cand = Candidate(teacher, source.shape.num_steps)
    rows: list[dict[str, Any]] = []
    best: Path | None = None
    kept = 0  # the row of the last step that passed (a compile row reusing quantize's plan counts)
    stopped: str | None = None
    unwritten: tuple[Candidate, Path, dict[str, Any]] | None = None  # the reference, written if kept
    steps = (RecipeStep("reference"), *config.recipe)
    t_all = time.perf_counter()
    for i, step in enumerate(steps):
        t0 = time.perf_counter()
        if i and step.name == "compile" and cand.on_backends and steps[i - 1].name == "quantize":
            # quantize planned straight on --backends: nothing is left for compile to plan
            row = {
                **rows[-1],
                "step": step.label,
                "details": {"planned_with": rows[-1]["step"]},
                "candidates": [],
            }
            rows.append({**row, "seconds": round(time.perf_counter() - t0, 2)})
            log(_row_line(rows[-1]) + f"  (planned with {rows[-2]['step']})")
            kept = i
            continue
        if i:
            log(f"step {i}/{len(config.recipe)}: {step.label}")
            after = steps[i + 1] if i + 1 < len(steps) else None
            cand = apply_step(step, cand, teacher, inputs, config, work, family, action_dim, after, log)
        dest = work / f"{i:02d}-{step.name}"
        shutil.rmtree(dest, ignore_errors=True)  # a previous, interrupted run's candidate
        compression = {
            "recipe": [s.label for s in config.recipe],
            "applied": cand.applied,
            "num_steps": cand.num_steps,
            "sparsity": cand.sparsity,
            "parameters": count_parameters(cand.model),
            "teacher_parameters": count_parameters(teacher),
            "calibration": inputs.calibration,
            "tolerance": config.tolerance.spec,
            "teacher_weights_sha256": teacher_sha,  # what `hotloop verify --artifact` checks it against
        }
        if cand.vision_resolution is not None:
            compression["vision_resolution"] = cand.vision_resolution
        searched: list[dict[str, Any]] = []
        if i == 0:
            plan = reference_plan(family)
            figures = reference_figures(teacher_ref, action_dim)
            if config.episodes and _has_task(config.target):
                figures["success"] = closed_loop_success(config.target, config)
            unwritten = (cand, dest, compression)
        else:
            own = cand.model is teacher and cand.num_steps == source.shape.num_steps and not cand.zero_noise
            planned = write_candidate(
                cand, source, config, dest, {"compression": compression}, inputs, checks,
                reference if own else None, log,
            )  # fmt: skip
            plan, searched = planned["precision_plan"], planned["candidates"]
            # a `zero-noise` plan is judged on what it runs (x = 0) against the teacher's drawn-noise actions
            start = torch.zeros_like(noise) if cand.zero_noise else noise
            figures = judge(dest, reference, eval_inputs, start, config, action_dim, family)
        row = {
            "step": step.label,
            "num_steps": cand.num_steps,
            "parameters": compression["parameters"],
            "precision_plan": plan,
            "details": cand.details,
            **figures,
            "candidates": searched,
            "seconds": round(time.perf_counter() - t0, 2),
        }
        rows.append(row)
        log(_row_line(row))
        if figures["violation"] is not None and i + 1 < len(steps) and steps[i + 1].name == "distill":
            # `distill` repairs the step before it (prune's removed weights, vision-res's coarser tokens): the
            # pair is judged after the repair; the step alone is recorded, never kept.
            log(
                f"step {step.label} is outside the tolerance ({figures['violation']}); the distill after it is judged"
            )
            continue
        if figures["violation"] is not None:
            stopped = f"step {step.label} broke the tolerance {config.tolerance.spec}: {figures['violation']}"
            log(stopped)
            break
        best, kept = dest, i
        later = [s for s in steps[i + 1 :] if not (s.name == "compile" and cand.on_backends)]
        if later and released(cand.model):
            stopped = (
                f"planning step {step.label} released the model's fp32 weights to fit in memory; "
                f"{', '.join(s.label for s in later)} need them: run them separately, on a machine with "
                "more memory, or recompress with fewer steps"
            )
            log(stopped)
            break
    assert best is not None or stopped is not None
    report = {
        "target": config.target,
        "recipe": [s.label for s in config.recipe],
        "tolerance": config.tolerance.spec,
        "rows": rows,
        "stopped": stopped,
        "artifact": None,
        "kept_step": None,
        "seconds": round(time.perf_counter() - t_all, 2),
    }
    if best is not None and unwritten is not None and best == unwritten[1]:
        # No later step passed: the reference is what is kept, so it is planned and written now.
        ref_cand, _, compression = unwritten
        if released(ref_cand.model):
            report["stopped"] = (
                f"{stopped}; the reference artifact was not written: its fp32 weights were released to fit"
            )
            best = None
        else:
            write_candidate(ref_cand, source, config, best, {"compression": compression}, inputs, checks)
    if best is not None:
        _finalize(best, config.out, report)
        report["artifact"] = str(config.out)
        report["kept_step"] = rows[kept]["step"]
    shutil.rmtree(work, ignore_errors=True)
    return report


def released(model: Any) -> bool:
    """Whether the planner released some of `model`'s weights to fit (they are meta tensors now)."""
    return any(p.is_meta for p in model.parameters())


def closed_loop_success(target: str, config: RecipeConfig) -> dict[str, Any]:
    """Closed-loop success of `target` (an artifact, or the recipe's own target for the reference)."""
    from hotloop.closedloop.eval_run import EvalRequest, run_eval

    run = run_eval(
        EvalRequest(
            target=target,
            task=config.task,
            episodes=config.episodes,
            workers=config.workers,
            seed=config.seed,
            latency=config.eval_latency,
            strategy=config.eval_strategy,
        ),
        progress=config.progress,
    )
    return {
        "latency": config.eval_latency,
        "strategy": config.eval_strategy,
        "episodes": run["episodes"],
        "success_rate": run["success_rate"],
        "success_ci95": run["success_ci95"],
        "jerk": run.get("jerk"),
    }


def _has_task(target: str) -> bool:
    """Whether the target has a task of its own to judge success on (the shipped demos)."""
    from hotloop.targets import find_target

    return find_target(target).task_observations is not None


def _finalize(best: Path, out: Path, report: dict[str, Any]) -> None:
    """Move the kept artifact to `out`, its manifest carrying the whole recipe history."""
    import json

    from hotloop.io import atomic_write_text

    manifest_path = best / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    history = [
        {k: r[k] for k in ("step", "num_steps", "parameters", "action", "latency_ms", "smoothness") if k in r}
        | ({"success": r["success"]} if "success" in r else {})
        for r in report["rows"]
    ]
    manifest["compression"] = {
        **(manifest.get("compression") or {}),
        "history": history,
        "stopped": report["stopped"],
    }
    atomic_write_text(
        manifest_path, json.dumps(manifest, indent=2) + "\n"
    )  # the manifest is not in its own hash list
    if out.exists():
        shutil.rmtree(out)
    shutil.move(str(best), str(out))


def _row_line(row: dict[str, Any]) -> str:
    lat = row["latency_ms"]
    s = f"  {row['step']:<16} steps {row['num_steps']:>2}  params {row['parameters']:>10,}  p50 {lat['p50']:.2f} ms  p99 {lat['p99']:.2f} ms  cos {row['action']['cosine']:.5f}"
    if "success" in row:
        s += f"  success {row['success']['success_rate']:.2f}"
    return s


def plot_recipe(report: dict[str, Any], path: Path) -> Path:
    """Latency (p50 with p99 whiskers), action cosine and success per step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["rows"]
    names = [r["step"] for r in rows]
    x = range(len(rows))
    fig, axes = plt.subplots(1, 3 if any("success" in r for r in rows) else 2, figsize=(12, 3.6))
    p50 = [r["latency_ms"]["p50"] for r in rows]
    p99 = [r["latency_ms"]["p99"] for r in rows]
    axes[0].bar(x, p50, color="tab:blue", label="p50")
    axes[0].errorbar(
        x,
        p50,
        yerr=[[0] * len(rows), [b - a for a, b in zip(p50, p99, strict=True)]],
        fmt="none",
        color="k",
        capsize=3,
        label="p99",
    )
    axes[0].set_ylabel("latency (ms)")
    axes[0].legend()
    axes[1].plot(x, [r["action"]["cosine"] for r in rows], "o-")
    axes[1].set_ylabel("final-action cosine vs reference")
    if len(axes) > 2:
        rates = [r.get("success", {}).get("success_rate", float("nan")) for r in rows]
        axes[2].plot(x, rates, "o-", color="tab:green")
        axes[2].set_ylabel("closed-loop success")
        axes[2].set_ylim(0, 1.05)
    for ax in axes:
        ax.set_xticks(list(x), names, rotation=30, ha="right")
    fig.suptitle(f"{report['target']}: compression recipe")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


__all__ = ["EXIT_TOLERANCE", "STEPS", "RecipeConfig", "asdict", "parse_recipe", "plot_recipe", "run_recipe"]
