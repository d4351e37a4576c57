"""A LeRobot SmolVLA checkpoint folder as a target (`hotloop bench|compile|compress|eval|serve|verify PATH`):
the model its config.json and tensors describe (`hotloop.models.smolvla.load_smolvla`), its saved pre- and
post-processors (`hotloop.lerobot`: newline, tokenizer, normaliser / unnormaliser), its RTC settings.

Every command reads the processors first, so a checkpoint whose tokenizer folder is missing or corrupt is
refused by name before any work (exit 2), as are a prompt longer than the tokenizer step's max_length and
a batch without one of the checkpoint's cameras.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hotloop.errors import ConfigError
from hotloop.families.frames import TargetAdapter
from hotloop.families.protocol import PolicySource
from hotloop.families.reference import ReferenceRun, VerifyReport, as_batch, compare, stage_comparisons
from hotloop.families.smolvla.policy import PolicySettings, SmolVLAPolicy
from hotloop.families.smolvla.reference_inputs import check_cameras, reference_observation
from hotloop.families.smolvla.settings import checkpoint_settings
from hotloop.targets import BenchCase, TargetOptions

_SUPPORTED = {"num_steps", "dtype", "batch", "prompt_tokens", "buckets"}
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def load(
    path: str | Path, options: TargetOptions, dtype: torch.dtype = torch.float32
) -> tuple[Any, Any, PolicySettings]:
    """(config, model, policy settings) of the folder, with --steps applied."""
    from hotloop.models.smolvla import load_smolvla

    options.reject_unsupported(str(path), _SUPPORTED)
    if options.dtype not in _DTYPES:
        raise ConfigError(
            f"--dtype {options.dtype} is not supported by SmolVLA checkpoints; use float32 or bfloat16"
        )
    settings = checkpoint_settings(Path(path))
    cfg, model = load_smolvla(path, dtype)
    if options.num_steps is not None:
        cfg = dataclasses.replace(cfg, num_steps=options.num_steps)
        model.cfg = cfg
    if options.prompt_tokens is not None and options.prompt_tokens > cfg.tokenizer.max_length:
        raise ConfigError(
            f"--prompt-tokens {options.prompt_tokens} exceeds {path}'s tokenizer max_length "
            f"{cfg.tokenizer.max_length} (policy_preprocessor.json); use 1 to {cfg.tokenizer.max_length}"
        )
    return cfg, model, settings


def build_bench(path: str, options: TargetOptions) -> BenchCase:
    from hotloop.families.smolvla.targets import bench_model

    cfg, model, _ = load(path, options, _DTYPES.get(options.dtype, torch.float32))
    return bench_model(path, cfg, model, options)


def build_policy(path: str, options: TargetOptions) -> SmolVLAPolicy:
    if options.batch != 1:
        raise ConfigError("a SmolVLA policy runs one observation at a time; drop --batch")
    cfg, model, settings = load(path, options)
    return SmolVLAPolicy(model, cfg, settings, seed=options.seed)


def build_source(path: str, options: TargetOptions) -> PolicySource:
    from hotloop.families.smolvla.family import SmolVLAFamily
    from hotloop.families.smolvla.observation import random_observation
    from hotloop.families.smolvla.targets import policy_info

    if options.dtype != "float32":
        raise ConfigError("--dtype: a compile source is the fp32 model (the planner tries the precisions)")
    cfg, model, settings = load(path, options)
    family = SmolVLAFamily()
    shape = family.default_shape(cfg)
    obs = random_observation(cfg, 1, shape.prompt_slots, options.seed, options.prompt_tokens)
    noise = family.make_noise(cfg, shape, 1, torch.Generator().manual_seed(options.seed + 2))
    info = policy_info("smolvla", cfg, settings, options.seed, str(Path(path).resolve()))
    return PolicySource(path, family, model.float().eval(), shape, obs, noise, info)


def build_data(
    path: str, dataset: Any, options: TargetOptions, model: Any = None
) -> tuple[Any, TargetAdapter]:
    """Recorded frames through the checkpoint's own processors (its stats, not the dataset's), the
    dataset's task texts as prompts."""
    from hotloop.families.smolvla.targets import frame_adapter

    cfg, loaded, settings = load(path, options)
    model = model if model is not None else loaded.float().eval()
    policy = SmolVLAPolicy(model, cfg, settings, seed=options.seed)
    return model, frame_adapter(path, policy, dataset, task_text=True)


# ---- reference runs (`hotloop verify`) -----------------------------------------------------------------


def intermediates_of(model: Any, batch: dict[str, Any], noise: torch.Tensor) -> dict[str, torch.Tensor]:
    from hotloop.models.smolvla import smolvla_intermediates

    return smolvla_intermediates(model, batch, noise)


def verify(path: Path, run: ReferenceRun, tolerance: float, stage_tolerance: float) -> VerifyReport:
    """raw_inputs -> preprocessor -> inputs.npz; the model on inputs.npz + noise.npy -> actions.npy (and the
    sub-engines at the engine's prompt slots, what a compiled plan runs); the postprocessor -> raw_actions.npy;
    every intermediate."""
    from hotloop.families.protocol import constants_of
    from hotloop.families.smolvla.engines import SmolVLAEngineShape, build_smolvla_subengines
    from hotloop.families.smolvla.pipeline import SmolVLAPipeline
    from hotloop.models.smolvla import predict_action_chunk

    cfg, model, settings = load(path, TargetOptions())
    assert settings.processors is not None
    pre, post = settings.processors
    policy = SmolVLAPolicy(model, cfg, settings)
    comparisons = []
    notes = [f"assumed: {a}" for a in cfg.assumed]
    raw = run.arrays("raw_inputs.npz")
    inputs = run.arrays("inputs.npz")
    if raw is not None:
        check_cameras(cfg, raw, run.where("raw_inputs.npz"))
        batch = as_batch(raw)
        for task in batch.get("task", []):
            policy.check_prompt(task)
        mine = pre(batch)
        for key, value in (inputs or {}).items():
            if key in mine:
                comparisons.append(
                    compare(
                        f"inputs {key}",
                        "model",
                        mine[key].float(),
                        value.astype(np.float64),
                        tolerance,
                        run.where("inputs.npz"),
                    )
                )
        if inputs is None:
            notes.append("no inputs.npz: the model runs on the preprocessor's output")
            inputs = {k: v.numpy() for k, v in mine.items() if isinstance(v, torch.Tensor)}
    if inputs is None:
        raise ConfigError(f"--reference {run.folder}: neither raw_inputs.npz nor inputs.npz; nothing to run")
    reference_observation(cfg, inputs, run.where("inputs.npz"), None)  # the cameras and prompt are checked
    noise_arr = run.array("noise.npy")
    if noise_arr is None:
        raise ConfigError(f"--reference {run.folder}: noise.npy is missing (the sampler's starting noise)")
    noise = torch.from_numpy(noise_arr).float()
    batch = as_batch(inputs)
    with torch.no_grad():
        actions = predict_action_chunk(model, batch, noise)
        obs = reference_observation(cfg, inputs, run.where("inputs.npz"), cfg.tokenizer.max_length)
        shape = SmolVLAEngineShape.of(cfg, obs.batch)
        engines = build_smolvla_subengines(model, shape, torch.float32)
        runners = {n: engines[n].module for n in ("vision", "prefix", "denoise_step")}
        pipe = SmolVLAPipeline(
            cfg, shape, runners, constants_of(engines), {n: e.signature for n, e in engines.items()}
        )
        engine_actions = pipe.sample(obs, noise)[..., : cfg.action_dim]
    want_actions = run.array("actions.npy")
    if want_actions is not None:
        comparisons.append(
            compare("actions", "model", actions, want_actions, tolerance, run.where("actions.npy"))
        )
        comparisons.append(
            compare(f"actions (sub-engines, {shape.prompt_slots} prompt slots)", "model", engine_actions, want_actions,
                    tolerance, run.where("actions.npy"))
        )  # fmt: skip
    raw_want = run.array("raw_actions.npy")
    if raw_want is not None:
        got = post.action(actions)  # end to end: hotloop's actions through the postprocessor
        comparisons.append(
            compare("raw_actions", "raw", got, raw_want, tolerance, run.where("raw_actions.npy"))
        )
    stages = intermediates_of(model, batch, noise)
    comparisons += stage_comparisons(
        stages, run.arrays("intermediates.npz"), stage_tolerance, run.where("intermediates.npz")
    )
    return VerifyReport(str(path), str(run.folder), "smolvla", tuple(comparisons), tuple(notes))
