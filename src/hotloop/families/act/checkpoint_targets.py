"""A LeRobot ACT checkpoint folder as a target (`hotloop bench|compile|compress|eval|serve|verify PATH`):
the model `config.json` and `model.safetensors` describe (`hotloop.models.act.load_act`, strict), between
the checkpoint's own pre- and postprocessor (`hotloop.lerobot`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hotloop.errors import ConfigError
from hotloop.families.frames import DataLimits, TargetAdapter
from hotloop.families.protocol import PolicySource
from hotloop.families.reference import ReferenceRun, VerifyReport, as_batch, compare, stage_comparisons
from hotloop.targets import BenchCase, TargetOptions

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
PLAN_CHECKS = 2  # observations beyond the first that a whole plan's actions must also match


def _dtype(path: str, options: TargetOptions, supported: set[str]) -> torch.dtype:
    if options.num_steps == 1:  # what the planner asks of a one-pass family's data (ACT has no steps)
        options = dataclasses.replace(options, num_steps=None)
    options.reject_unsupported(path, supported)
    if options.dtype not in _DTYPES:
        raise ConfigError(
            f"--dtype {options.dtype} is not supported by ACT checkpoints; use float32 or bfloat16"
        )
    return _DTYPES[options.dtype]


def build_bench(path: str, options: TargetOptions) -> BenchCase:
    """One timed inference through the two sub-engines (stages `backbone`, `transformer`) on a seeded
    model-space observation of `--batch`, with the work of each stage for the roofline."""
    from hotloop.families.act.family import ActFamily
    from hotloop.models.act import load_act

    dtype = _dtype(path, options, {"dtype", "batch"})
    cfg, model = load_act(Path(path), dtype)
    family = ActFamily()
    shape = family.default_shape(cfg, options.batch)
    obs = family.random_observation(cfg, shape, options.seed)
    noise = torch.zeros(family.noise_shape(cfg, shape, options.batch))
    if cfg.cameras:
        pipe = family.eager_pipeline(cfg, shape, family.build_subengines(model, shape, dtype))

        def run(timer: Any) -> torch.Tensor:
            return pipe.sample(obs, noise, timer)  # type: ignore[no-any-return]

    else:  # an env-state-only checkpoint: the transformer is the whole inference

        @torch.inference_mode()
        def run(timer: Any) -> torch.Tensor:
            with timer.stage("transformer"):
                return model.transformer([], obs.state, obs.env_state)

    info = {
        "parameters": sum(p.numel() for p in model.parameters()),
        "batch": options.batch,
        "dtype": options.dtype,
        "cameras": [f"{c} {s[1]}x{s[2]}" for c, s in zip(cfg.cameras, cfg.camera_shapes, strict=True)],
        "chunk_size": cfg.chunk_size,
        "dim_model": cfg.dim_model,
        "vision_backbone": cfg.vision_backbone if cfg.cameras else None,
        "work": family.stage_work(cfg, shape, {s.name: options.dtype for s in family.stages}),
    }
    return BenchCase(name=path, run=run, info=info)


def build_policy(path: str, options: TargetOptions) -> Any:
    from hotloop.families.act.policy import load_policy

    _dtype(path, options, set())
    return load_policy(Path(path))


def raw_observation(policy: Any, seed: int) -> dict[str, Any]:
    """A deterministic random raw observation: uniform pixels, and a state drawn from the checkpoint's
    own statistics (mean + std * N(0, 1), or uniform in [min, max]) so it normalises to typical values."""
    from hotloop.lerobot.steps import Normalize

    rng = np.random.default_rng([seed, 0xAC7])
    cfg = policy.config
    obs: dict[str, Any] = {
        "images": {
            c.view: rng.integers(0, 256, (c.shape[1], c.shape[2], c.shape[0]), dtype=np.uint8)
            for c in policy.cameras
        }
    }
    stats: dict[str, Any] = {}
    for step in policy.pre.find(Normalize):
        stats.update(step.stats)
    for obs_key, feature, width in (
        ("state", policy.state_key, cfg.state_dim),
        ("env_state", policy.env_key, cfg.env_state_dim),
    ):
        if width is None:
            continue
        s = {k: v.numpy().reshape(-1) for k, v in stats.get(feature, {}).items()}
        z = rng.standard_normal(width)
        if "mean" in s and "std" in s:
            value = s["mean"] + s["std"] * z
        elif "min" in s and "max" in s:
            value = s["min"] + (s["max"] - s["min"]) * rng.random(width)
        else:
            value = z
        obs[obs_key] = value.astype(np.float32)
    return obs


def build_source(path: str, options: TargetOptions) -> PolicySource:
    """The fp32 model, one observation (a seeded raw observation through the preprocessor), and what an
    artifact needs to become a robot policy again (the checkpoint folder, its processors' hash, the spec)."""
    from hotloop.families.act.family import ActFamily
    from hotloop.families.act.policy import load_policy, policy_info

    if options.dtype != "float32":
        raise ConfigError("--dtype: a compile source is the fp32 model (the planner tries the precisions)")
    _dtype(path, options, set())
    policy = load_policy(Path(path))
    cfg = policy.config
    if not cfg.cameras:
        raise ConfigError(
            f"{Path(path) / 'config.json'}: field 'input_features' has no VISUAL feature; hotloop compiles "
            "ACT as its backbone and transformer stages, so a camera-less ACT runs eagerly only (eval, "
            "serve, verify)"
        )
    family = ActFamily()
    shape = family.default_shape(cfg)
    noise = torch.zeros(family.noise_shape(cfg, shape, 1))
    observations = [
        policy.observation(raw_observation(policy, options.seed + i)) for i in range(1 + PLAN_CHECKS)
    ]
    return PolicySource(
        path,
        family,
        policy.model.float().eval(),
        shape,
        observations[0],
        noise,
        policy_info(policy),
        plan_checks=tuple((o, noise) for o in observations[1:]),
    )


def build_data(
    path: str, dataset: Any, options: TargetOptions, model: Any = None
) -> tuple[Any, TargetAdapter]:
    """Recorded frames through the checkpoint's own preprocessor (the dataset's cameras must be the
    checkpoint's views, at its sizes); targets are the recorded chunks normalised by its ACTION mode,
    cut or padded (last action repeated) to chunk_size."""
    from hotloop.families.act.family import ActFamily
    from hotloop.families.act.policy import load_policy
    from hotloop.lerobot.features import FeatureType
    from hotloop.lerobot.steps import Normalize

    _dtype(path, options, set())
    policy = load_policy(Path(path), model=model)
    cfg = policy.config
    normalizers = policy.pre.find(Normalize)
    if not normalizers:
        raise ConfigError(
            f"{policy.pre.file}: no normalizer step, so the action targets cannot be normalised"
        )
    normalizer = normalizers[-1]

    def observe(images: dict[str, np.ndarray], state: np.ndarray, task_index: int) -> Any:  # noqa: ARG001
        obs: dict[str, Any] = {"images": images}
        if cfg.state_dim is not None:
            obs["state"] = np.asarray(state, dtype=np.float32)
        return policy.observation(obs)

    def targets(chunk: np.ndarray, state: np.ndarray) -> np.ndarray:  # noqa: ARG001
        out = np.empty((cfg.chunk_size, chunk.shape[1]), dtype=np.float32)
        h = min(cfg.chunk_size, chunk.shape[0])
        out[:h] = chunk[:h]
        out[h:] = chunk[h - 1]
        x = normalizer.apply(torch.from_numpy(out)[None], "action", FeatureType.ACTION)
        return x[0].numpy()

    names = dataset.features["action"].get("names") or []
    grip = next((i for i, n in enumerate(names) if isinstance(n, str) and "grip" in n), None)
    limits = DataLimits(cfg.state_dim, cfg.action_dim, len(cfg.cameras), cfg.chunk_size)
    views = tuple(c.view for c in policy.cameras)
    adapter = TargetAdapter(
        path, observe, targets, cfg.state_dim, cfg.action_dim, views or None, grip, limits, ActFamily()
    )
    return policy.model.float().eval(), adapter


def verify(path: Path, run: ReferenceRun, tolerance: float, stage_tolerance: float) -> VerifyReport:
    """raw_inputs.npz -> preprocessor -> inputs.npz (per key); the model -> actions.npy; the
    postprocessor -> raw_actions.npy; every stage -> intermediates.npz."""
    from hotloop.families.act.reference_inputs import model_keys, reference_observation
    from hotloop.lerobot.processors import read_policy_processors
    from hotloop.models.act import act_intermediates, load_act

    cfg, model = load_act(Path(path))
    pre, post = read_policy_processors(Path(path))
    comparisons = []
    notes: list[str] = []
    inputs = run.arrays("inputs.npz")
    raw_inputs = run.arrays("raw_inputs.npz")
    keys = [k for k, _ in model_keys(cfg)]
    if raw_inputs is not None:
        processed = pre(as_batch(raw_inputs))
        if inputs is not None:
            for key in keys:
                if key in inputs and key in processed:
                    where = run.where("inputs.npz")
                    comparisons.append(compare(key, "model", processed[key], inputs[key], tolerance, where))
        model_inputs, where = (
            (inputs, run.where("inputs.npz"))
            if inputs is not None
            else (
                processed,
                f"{run.where('raw_inputs.npz')} through {pre.file.name}",
            )
        )
    elif inputs is not None:
        notes.append("raw_inputs.npz is absent: the preprocessor is not checked")
        model_inputs, where = inputs, run.where("inputs.npz")
    else:
        raise ConfigError(
            f"--reference {run.folder}: holds neither raw_inputs.npz nor inputs.npz (ACT's inputs)"
        )
    extra = sorted(set(inputs or {}) - set(keys))
    if extra:
        notes.append(f"inputs.npz keys {', '.join(extra)} are not read by this checkpoint")
    obs = reference_observation(cfg, model_inputs, where)
    with torch.no_grad():
        actions = model(list(obs.images), obs.state, obs.env_state)
    want = run.array("actions.npy")
    if want is not None:
        comparisons.append(compare("actions", "model", actions, want, tolerance, run.where("actions.npy")))
    want_raw = run.array("raw_actions.npy")
    if want_raw is not None:
        raw = post.action(actions)
        comparisons.append(
            compare("raw_actions", "raw", raw, want_raw, tolerance, run.where("raw_actions.npy"))
        )
    stages = act_intermediates(model, list(obs.images), obs.state, obs.env_state)
    comparisons += stage_comparisons(
        stages, run.arrays("intermediates.npz"), stage_tolerance, run.where("intermediates.npz")
    )
    return VerifyReport(str(path), str(run.folder), "act", tuple(comparisons), tuple(notes))


__all__ = ["build_bench", "build_data", "build_policy", "build_source", "raw_observation", "verify"]
