"""A LeRobot pi0 / pi0.5 checkpoint folder as a target (`hotloop bench|compile|compress|eval|serve|verify
PATH`): the model the folder describes, its norm stats and tokenizer, its sizes from config.json and the
tensors (`hotloop.families.pi.checkpoint.load_checkpoint`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from hotloop.errors import ConfigError
from hotloop.families.frames import TargetAdapter
from hotloop.families.pi.reference_inputs import reference_observation
from hotloop.families.protocol import PolicySource
from hotloop.families.reference import ReferenceRun, VerifyReport, compare, stage_comparisons
from hotloop.targets import BenchCase, TargetOptions

_SUPPORTED = {"num_steps", "dtype", "batch", "prompt_tokens", "buckets"}
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _load(path: str, options: TargetOptions, dtype: torch.dtype = torch.float32) -> Any:
    from hotloop.families.pi.checkpoint import load_checkpoint

    options.reject_unsupported(path, _SUPPORTED)
    if options.dtype not in _DTYPES:
        raise ConfigError(
            f"--dtype {options.dtype} is not supported by pi checkpoints; use float32 or bfloat16"
        )
    ck = load_checkpoint(path, dtype)
    if options.num_steps is not None:
        import dataclasses

        ck.config = dataclasses.replace(ck.config, num_steps=options.num_steps)
        ck.model.cfg = ck.config
    return ck


def build_bench(path: str, options: TargetOptions) -> BenchCase:
    from hotloop.families.pi.targets import bench_model

    ck = _load(path, options, _DTYPES.get(options.dtype, torch.float32))
    return bench_model(path, ck.config, ck.model.eval(), options)


def _policy_of(ck: Any, seed: int) -> Any:
    from hotloop.families.pi.policy import PiPolicy

    return PiPolicy(ck.model.eval(), ck.config, tokenizer=ck.tokenizer, norm_stats=ck.norm_stats, seed=seed)


def build_policy(path: str, options: TargetOptions) -> Any:
    if (Path(path) / "demo.json").is_file():  # a `hotloop train-demo` folder: its transforms, views, prompt
        from hotloop.demos.conveyor_vision import load_trained_folder

        options.reject_unsupported(path, {"num_steps"})
        return load_trained_folder(path, num_steps=options.num_steps, seed=options.seed)
    return _policy_of(_load(path, options), options.seed)


def build_source(path: str, options: TargetOptions) -> PolicySource:
    from hotloop.families.pi.config_io import norm_stats_to_dict
    from hotloop.families.pi.family import PiFamily
    from hotloop.families.pi.targets import random_observation

    ck = _load(path, options)
    family = PiFamily()
    cfg = ck.config
    policy = _policy_of(ck, options.seed)
    shape = family.default_shape(cfg)
    obs = random_observation(cfg, 1, "cpu", options.seed, options.prompt_tokens)
    noise = family.make_noise(cfg, shape, 1, torch.Generator().manual_seed(options.seed + 2))
    info = {
        "kind": "pi",
        "checkpoint": str(Path(path).resolve()),
        "action_dim": policy.action_dim,
        "horizon": policy.horizon,
        "default_prompt_tokens": [],
        "norm_stats": norm_stats_to_dict(ck.norm_stats),
        "seed": options.seed,
        "zero_noise": False,
        "spec": policy.spec.to_dict(),
    }
    return PolicySource(path, family, ck.model.float().eval(), shape, obs, noise, info)


def build_data(
    path: str, dataset: Any, options: TargetOptions, model: Any = None
) -> tuple[Any, TargetAdapter]:
    """Recorded frames normalised by the checkpoint's own stats (not the dataset's)."""
    from hotloop.families.pi.data import pi_target_adapter

    ck = _load(path, options)
    model = model if model is not None else ck.model.float().eval()
    return model, pi_target_adapter(path, model, dataset, norm_stats=ck.norm_stats)


def intermediates(model: Any, obs: Any, noise: torch.Tensor) -> dict[str, torch.Tensor]:
    """The stages a reference run names that pi computes stage for stage (as in LeRobot's PI0/PI05)."""
    cfg = model.cfg
    out: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for v in range(obs.images.shape[1]):
            out[f"siglip_out_view{v}"] = model.vision_tower(obs.images[:, v])
            out[f"img_emb_view{v}"] = model.vision(obs.images[:, v : v + 1])
        tokens = model.vision(obs.images)
        lang = model.embed_prompt(obs.lang_tokens)
        out["lang_emb"] = lang
        out["prefix_embs"] = torch.cat((tokens, lang), 1)
        cache = model.prefix(tokens, obs.image_masks, obs.lang_tokens, obs.lang_masks)
        x = noise.float()
        xs, vs = [x], []
        dt = torch.tensor(-1.0 / cfg.num_steps, dtype=torch.float32)
        for k in range(cfg.num_steps):
            t = torch.tensor(1.0 + k * (-1.0 / cfg.num_steps), dtype=torch.float32)
            v = model.denoise_step(cache, x, t, obs.state)
            x = x + dt * v
            vs.append(v)
            xs.append(x)
        out["v_t_all_steps"] = torch.stack(vs)
        out["x_t_trajectory"] = torch.stack(xs)
    return out


def verify(path: Path, run: ReferenceRun, tolerance: float, stage_tolerance: float) -> VerifyReport:
    from hotloop.families.pi.checkpoint import load_checkpoint
    from hotloop.families.pi.sampling import sample_actions

    ck = load_checkpoint(path)
    inputs = run.arrays("inputs.npz")
    notes = list(ck.report.notes)
    if inputs is None:
        raise ConfigError(f"--reference {run.folder}: pi is checked in model space and needs inputs.npz")
    obs = reference_observation(ck.config, inputs, run.where("inputs.npz"))
    noise_arr = run.array("noise.npy")
    if noise_arr is None:
        noise_arr = inputs.get("noise")
    if noise_arr is None:
        raise ConfigError(f"--reference {run.folder}: noise.npy is missing (the sampler's starting noise)")
    noise = torch.from_numpy(noise_arr)
    comparisons = []
    with torch.no_grad():
        actions = sample_actions(ck.model, obs, noise=noise)
    want = run.array("actions.npy")
    if want is not None:
        comparisons.append(compare("actions", "model", actions, want, tolerance, run.where("actions.npy")))
    stages = intermediates(ck.model, obs, noise)
    comparisons += stage_comparisons(
        stages, run.arrays("intermediates.npz"), stage_tolerance, run.where("intermediates.npz")
    )
    if run.has("raw_inputs.npz"):
        notes.append("raw_inputs.npz is not compared: pi checkpoints are verified in model space here")
    return VerifyReport(str(path), str(run.folder), "pi", tuple(comparisons), tuple(notes))
