"""A LeRobot Diffusion Policy checkpoint folder as a target (`hotloop bench|compile|compress|eval|serve|verify
PATH`): the model config.json and the tensors describe (`hotloop.models.diffusion.load_diffusion`), its
saved processors (`hotloop.lerobot`), and `--steps N` as the config's own scheduler with N inference
steps (LeRobot's `num_inference_steps`: DDPM strided, DDIM's spacing)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from hotloop.errors import ConfigError
from hotloop.families.frames import TargetAdapter
from hotloop.families.protocol import PolicySource
from hotloop.families.reference import ReferenceRun, VerifyReport, as_batch, compare, stage_comparisons
from hotloop.targets import BenchCase, TargetOptions

_SUPPORTED = {"num_steps", "dtype", "batch"}
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def load(path: str | Path, options: TargetOptions, dtype: torch.dtype = torch.float32) -> tuple[Any, Any]:
    """(config, model) of the folder; `options.num_steps` replaces the config's num_inference_steps."""
    from hotloop.models.diffusion import load_diffusion

    options.reject_unsupported(str(path), _SUPPORTED)
    if options.dtype not in _DTYPES:
        raise ConfigError(
            f"--dtype {options.dtype} is not supported by diffusion checkpoints; use float32 or bfloat16"
        )
    cfg, model = load_diffusion(path, dtype)
    if options.num_steps is not None:
        cfg = with_steps(cfg, options.num_steps, "--steps")
        model.cfg = cfg
    return cfg, model


def with_steps(cfg: Any, steps: int, flag: str) -> Any:
    """`cfg` sampling with `steps` inference steps, refused by name when its scheduler cannot."""
    try:
        cfg.make_scheduler().step_table(steps)
    except ConfigError as exc:
        raise ConfigError(f"{flag} {steps}: {exc}") from None
    return dataclasses.replace(cfg, num_inference_steps=steps)


def build_bench(path: str, options: TargetOptions) -> BenchCase:
    """LeRobot's eager sampler (encode, then one U-Net call and one `scheduler.step` per timestep) on a
    seeded model-space observation, stages "encoder" and "denoise"."""
    from hotloop.families.diffusion.engines import DiffusionEngineShape
    from hotloop.families.diffusion.family import DiffusionFamily
    from hotloop.families.diffusion.roofline import diffusion_stage_work
    from hotloop.measure.stages import StageTimer
    from hotloop.models.diffusion import needs_step_noise, sample_actions

    cfg, model = load(path, options, _DTYPES.get(options.dtype, torch.float32))
    family = DiffusionFamily()
    shape = DiffusionEngineShape(options.batch, cfg.num_inference_steps)
    obs = family.random_observation(cfg, shape, options.seed)
    noise = family.make_noise(cfg, shape, options.batch, torch.Generator().manual_seed(options.seed + 2))
    scheduler = cfg.make_scheduler()
    d = next(model.parameters()).dtype
    start, steps_noise = noise[:, 0].to(d), noise[:, 1:].transpose(0, 1).to(d)
    stochastic = needs_step_noise(scheduler)
    images = None if obs.images is None else obs.images.to(d)
    env = None if obs.env_state is None else obs.env_state.to(d)

    @torch.inference_mode()
    def run(timer: StageTimer) -> torch.Tensor:
        with timer.stage("encoder"):
            cond = model.encode(images, obs.state.to(d), env)
        with timer.stage("denoise"):
            return sample_actions(
                model, scheduler, cond, start, cfg.num_inference_steps, steps_noise if stochastic else None
            )

    precision = options.dtype
    info = {
        "parameters": sum(p.numel() for p in model.parameters()),
        "batch": options.batch,
        "dtype": options.dtype,
        "scheduler": cfg.noise_scheduler_type,
        "num_steps": cfg.num_inference_steps,
        "horizon": cfg.horizon,
        "n_obs_steps": cfg.n_obs_steps,
        "cameras": list(cfg.camera_keys),
        "work": {
            k: w.to_dict()
            for k, w in diffusion_stage_work(
                cfg, options.batch, cfg.num_inference_steps, {"encoder": precision, "denoise": precision}
            ).items()
        },
    }
    return BenchCase(name=path, run=run, info=info, device=options.device)


def build_policy(path: str, options: TargetOptions) -> Any:
    from hotloop.families.diffusion.policy import DiffusionPolicyWrapper, load_processors

    if options.batch != 1:
        raise ConfigError(f"--batch {options.batch}: a policy drives one robot; drop --batch")
    cfg, model = load(path, options)
    pre, post = load_processors(path)
    return DiffusionPolicyWrapper(model, cfg, pre, post, seed=options.seed)


def build_source(path: str, options: TargetOptions) -> PolicySource:
    """The fp32 model, a seeded observation, the noise the plan is judged under, and the policy entry
    (the checkpoint folder, whose processors the artifact's policy re-reads)."""
    from hotloop.families.diffusion.family import DiffusionFamily
    from hotloop.families.diffusion.policy import diffusion_spec, load_processors

    if options.dtype != "float32":
        raise ConfigError("--dtype: a compile source is the fp32 model (the planner tries the precisions)")
    if options.batch != 1:
        raise ConfigError(f"--batch {options.batch}: a compiled policy runs batch 1; drop --batch")
    cfg, model = load(path, options)
    load_processors(path)  # a checkpoint whose processors cannot be read is refused before planning
    family = DiffusionFamily()
    shape = family.default_shape(cfg)
    obs = family.random_observation(cfg, shape, options.seed)
    noise = family.make_noise(cfg, shape, 1, torch.Generator().manual_seed(options.seed + 2))
    spec = diffusion_spec(cfg)
    info = {
        "kind": "diffusion",
        "checkpoint": str(Path(path).resolve()),
        "action_dim": cfg.action_dim,
        "horizon": cfg.n_action_steps,
        "seed": options.seed,
        "zero_noise": False,
        "spec": spec.to_dict(),
    }
    return PolicySource(path, family, model.float().eval(), shape, obs, noise, info)


def build_data(
    path: str, dataset: Any, options: TargetOptions, model: Any = None
) -> tuple[Any, TargetAdapter]:
    """Recorded frames through the checkpoint's own preprocessor (its stats, not the dataset's)."""
    from hotloop.families.diffusion.data import diffusion_target_adapter
    from hotloop.families.diffusion.policy import load_processors

    cfg, loaded = load(path, options)
    model = model if model is not None else loaded.float().eval()
    pre, _ = load_processors(path)
    return model, diffusion_target_adapter(path, model.cfg, pre)


def verify(path: Path, run: ReferenceRun, tolerance: float, stage_tolerance: float) -> VerifyReport:
    """raw_inputs -> the preprocessor -> inputs.npz; the model on inputs.npz with noise.npy and
    step_noise.npy -> actions.npy; those actions through the postprocessor -> raw_actions.npy; every stage
    `diffusion_intermediates` names against intermediates.npz."""
    from hotloop.families.diffusion.engines import split_noise
    from hotloop.families.diffusion.family import DiffusionFamily
    from hotloop.families.diffusion.policy import load_processors
    from hotloop.families.diffusion.reference_inputs import reference_inputs
    from hotloop.models.diffusion import diffusion_intermediates, needs_step_noise, select_action_chunk

    cfg, model = load(path, TargetOptions())
    pre, post = load_processors(path)
    family = DiffusionFamily()
    comparisons = []
    notes: list[str] = []
    inputs = run.arrays("inputs.npz")
    raw = run.arrays("raw_inputs.npz")
    if raw is not None:
        processed = pre(as_batch(raw))
        if inputs is not None:
            for key, want in inputs.items():
                if key not in processed:
                    raise ConfigError(
                        f"{run.where('inputs.npz')}: key {key!r} is not what the preprocessor gives "
                        f"raw_inputs.npz ({', '.join(sorted(processed))})"
                    )
                comparisons.append(
                    compare(key, "raw", processed[key], want, tolerance, run.where("inputs.npz"))
                )
        else:
            inputs = {k: v.numpy() for k, v in processed.items() if isinstance(v, torch.Tensor)}
            notes.append("inputs.npz is missing: the model runs on the preprocessed raw_inputs.npz")
    if inputs is None:
        raise ConfigError(f"--reference {run.folder}: neither inputs.npz nor raw_inputs.npz is there")
    obs, noise = reference_inputs(cfg, inputs, run)
    with torch.no_grad():
        sample = family.sample_actions(model, obs, noise)
    actions = select_action_chunk(sample, cfg)
    for file, space in (("actions.npy", "model"), ("raw_actions.npy", "raw")):
        reference = run.array(file)
        if reference is not None:
            got = actions if space == "model" else post.action(actions.clone())
            name = file.removesuffix(".npy")
            comparisons.append(compare(name, space, got, reference, tolerance, run.where(file)))
    stages = run.arrays("intermediates.npz")
    if stages is not None:
        scheduler = cfg.make_scheduler()
        start, step_noise = split_noise(noise, cfg.num_inference_steps)
        with torch.no_grad():
            got_stages = diffusion_intermediates(
                model,
                scheduler,
                obs.images,
                obs.state,
                start,
                step_noise.contiguous() if needs_step_noise(scheduler) else None,
                obs.env_state,
            )
        # The x0 prediction divides by sqrt(alpha_bar): a model output that differs in its last bits (another
        # CPU's convolution kernels) differs up to 64x more there, at the first steps of a DDPM schedule.
        gain = scheduler.x0_error_gain(got_stages["timesteps"]).numpy()
        gains = {"pred_x0_per_step": (gain, "max(1, sqrt((1 - alpha_bar_t) / alpha_bar_t))")}
        comparisons += stage_comparisons(
            got_stages, stages, stage_tolerance, run.where("intermediates.npz"), gains
        )
        unnamed = sorted(set(stages) - set(got_stages))
        if unnamed:
            notes.append(f"intermediates not computed by hotloop (skipped): {', '.join(unnamed)}")
    return VerifyReport(str(path), str(run.folder), "diffusion", tuple(comparisons), tuple(notes))
