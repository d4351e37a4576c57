"""Named SmolVLA targets with seeded random weights: `smolvla:tiny` (tests), `smolvla:small` (a CPU-benchmark
scale of the same structure, ~100 M parameters) and `smolvla:base` (the published smolvla_base sizes).

smolvla_base is LeRobot's SmolVLAConfig defaults at 7427f318 over the published SmolVLM2-500M-Video-Instruct
(`shared/peer/shims/families/smolvlm2_500m.py` cites every value): text 960 wide, MLP 2560, 15 heads, 5 kv
heads, head_dim 64, vocabulary 49280, truncated to 16 of its 32 layers; SigLIP vision 768 wide, MLP 3072, 12
layers, 12 heads, 512 px, patch 16, pixel shuffle 4 (64 tokens per view); an action expert of 16 layers at
0.75 width (720, MLP 2048 by LeRobot's rule), cross-attention with self-attention every 2nd layer; chunk 50,
10 steps, max state / action 32, tokenizer max_length 48; two cameras. The layer plan and the expert's
shapes follow the same rules `hotloop.models.smolvla_config` checks a checkpoint against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from hotloop.errors import ConfigError
from hotloop.families.frames import DataLimits, TargetAdapter
from hotloop.families.protocol import PolicySource
from hotloop.families.smolvla.policy import PolicySettings, SmolVLAPolicy, camera_name, policy_spec
from hotloop.measure.stages import StageTimer
from hotloop.models.smolvla import SmolVLAModel
from hotloop.models.smolvla_config import LayerPlan, SmolVLAConfig, get_intermediate_size
from hotloop.models.smolvla_tokenizer import TokenizerSettings
from hotloop.models.smolvlm import LlamaConfig, SmolVLMConfig, SmolVLMVisionConfig
from hotloop.registry import Registry
from hotloop.targets import BenchCase, TargetOptions, check_fits_memory

CAMERAS = ("observation.images.top", "observation.images.wrist")
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
_SUPPORTED = {"num_steps", "dtype", "batch", "prompt_tokens", "buckets"}


@dataclass(frozen=True)
class SmolVLASizes:
    """Every size of a named SmolVLA (what a checkpoint's tensors and config.json would say)."""

    text_width: int
    text_mlp: int
    text_layers: int  # the layers kept (num_vlm_layers)
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    vision_width: int
    vision_mlp: int
    vision_layers: int
    vision_heads: int
    image_size: int
    patch: int
    scale: int
    chunk_size: int
    num_steps: int
    max_state_dim: int
    max_action_dim: int
    state_dim: int
    action_dim: int
    max_length: int
    expert_width_multiplier: float = 0.75
    self_attn_every_n_layers: int = 2
    attention_mode: str = "cross_attn"
    text_eps: float = 1e-5


SIZES: dict[str, SmolVLASizes] = {
    "tiny": SmolVLASizes(64, 128, 4, 4, 2, 16, 512, 32, 64, 2, 2, 48, 8, 2, 10, 10, 12, 12, 6, 6, 16),
    "small": SmolVLASizes(
        576, 1536, 10, 9, 3, 64, 49280, 384, 1536, 8, 6, 256, 16, 2, 50, 10, 32, 32, 6, 6, 48
    ),
    "base": SmolVLASizes(
        960, 2560, 16, 15, 5, 64, 49280, 768, 3072, 12, 12, 512, 16, 4, 50, 10, 32, 32, 6, 6, 48
    ),
}


def smolvla_configs() -> Registry[SmolVLASizes]:
    return Registry.of("SmolVLA config", SIZES.items())


def make_config(name: str, s: SmolVLASizes) -> SmolVLAConfig:
    """The SmolVLAConfig of `s`, with LeRobot's layer plan and expert shapes (smolvlm_with_expert.py)."""
    kv_width = s.kv_heads * s.head_dim
    text = LlamaConfig(
        s.text_width, s.text_mlp, s.text_layers, s.heads, s.kv_heads, s.head_dim, s.text_eps,
        kv_in=(s.text_width,) * s.text_layers,
    )  # fmt: skip
    width = int(s.text_width * s.expert_width_multiplier)
    every, mode = s.self_attn_every_n_layers, s.attention_mode
    cross = ["cross" in mode and not (every > 0 and i % every == 0) for i in range(s.text_layers)]
    expert = LlamaConfig(
        width, get_intermediate_size(width), s.text_layers, s.heads, s.kv_heads, s.head_dim, s.text_eps,
        kv_in=tuple(kv_width if c else width for c in cross),
    )  # fmt: skip
    vision = SmolVLMVisionConfig(
        s.vision_width, s.vision_mlp, s.vision_layers, s.vision_heads, s.patch, 3, s.image_size // s.patch
    )
    return SmolVLAConfig(
        vlm=SmolVLMConfig(vision, text, s.scale, s.vocab),
        expert=expert,
        layers=tuple(LayerPlan(i, c) for i, c in enumerate(cross)),
        camera_keys=CAMERAS,
        empty_cameras=0,
        image_size=(s.image_size, s.image_size),
        resize_with_pad=True,
        chunk_size=s.chunk_size,
        n_action_steps=s.chunk_size,
        max_state_dim=s.max_state_dim,
        max_action_dim=s.max_action_dim,
        state_dim=s.state_dim,
        action_dim=s.action_dim,
        num_steps=s.num_steps,
        min_period=4e-3,
        max_period=4.0,
        attention_mode=mode,
        self_attn_every_n_layers=every,
        image_start_ids=(),
        image_end_ids=(),
        prefix_length=-1,
        tokenizer=TokenizerSettings(None, s.max_length, "longest", "right", True),
        vlm_source=f"hotloop named target smolvla:{name}",
    )


def resolve_config(name: str, options: TargetOptions) -> SmolVLAConfig:
    import dataclasses

    options.reject_unsupported(f"smolvla:{name}", _SUPPORTED)
    if options.dtype not in _DTYPES:
        raise ConfigError(f"--dtype {options.dtype} is not supported by SmolVLA; use float32 or bfloat16")
    cfg = make_config(name, smolvla_configs().get(name))
    if options.prompt_tokens is not None and options.prompt_tokens > cfg.tokenizer.max_length:
        raise ConfigError(
            f"--prompt-tokens {options.prompt_tokens} exceeds smolvla:{name}'s tokenizer max_length "
            f"{cfg.tokenizer.max_length}; use 1 to {cfg.tokenizer.max_length}"
        )
    if options.num_steps is not None:
        cfg = dataclasses.replace(cfg, num_steps=options.num_steps)
    return cfg


@torch.no_grad()
def init_weights(model: SmolVLAModel, generator: torch.Generator) -> SmolVLAModel:
    """The parity fixtures' recipe: matrices N(0,1)/sqrt(fan_in), norm scales 1 + 0.1 N, other vectors 0.1 N."""
    for name, p in model.named_parameters():
        x = torch.randn(p.shape, generator=generator, dtype=torch.float32)
        if p.ndim >= 2:
            x = x / math.sqrt(math.prod(p.shape[1:]))
        elif "norm" in name and name.endswith("weight"):
            x = 1 + 0.1 * x
        else:
            x = 0.1 * x
        p.copy_(x.to(p.dtype))
    return model


def parameter_count(cfg: SmolVLAConfig) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in SmolVLAModel(cfg).parameters())


def build_model(cfg: SmolVLAConfig, dtype: torch.dtype, seed: int) -> SmolVLAModel:
    """Built on meta, materialised once in `dtype` and filled with seeded random weights."""
    with torch.device("meta"):
        model = SmolVLAModel(cfg)
    model = model.to(dtype=dtype).to_empty(device="cpu")
    return init_weights(model, torch.Generator().manual_seed(seed)).eval()


def _model(name: str, options: TargetOptions) -> tuple[SmolVLAConfig, SmolVLAModel]:
    cfg = resolve_config(name, options)
    dtype = _DTYPES[options.dtype]
    elem = torch.finfo(dtype).bits // 8
    check_fits_memory(parameter_count(cfg) * elem * 1.3, f"smolvla:{name}", options.device)
    return cfg, build_model(cfg, dtype, options.seed)


def describe(cfg: SmolVLAConfig, model: SmolVLAModel) -> dict[str, Any]:
    def count(m: torch.nn.Module) -> int:
        return sum(p.numel() for p in m.parameters())

    vlm = model.vlm_with_expert.vlm.model
    return {
        "family": "smolvla",
        "parameters": count(model),
        "parameters_vision": count(vlm.vision_model) + count(vlm.connector),
        "parameters_vlm": count(vlm.text_model),
        "parameters_expert": count(model.vlm_with_expert.lm_expert),
        "dtype": str(model.dtype).removeprefix("torch."),
        "views": cfg.views,
        "image_size": list(cfg.image_size),
        "tokens_per_view": cfg.tokens_per_view,
        "prompt_slots": cfg.tokenizer.max_length,
        "chunk_size": cfg.chunk_size,
        "num_steps": cfg.num_steps,
        "vision": f"width {cfg.vlm.vision.width} x {cfg.vlm.vision.depth} layers",
        "vlm": f"width {cfg.vlm.text.width} x {cfg.vlm.text.depth} layers, mlp {cfg.vlm.text.mlp_dim}",
        "expert": f"width {cfg.expert.width} x {cfg.expert.depth} layers, mlp {cfg.expert.mlp_dim}",
    }


def bench_model(name: str, cfg: SmolVLAConfig, model: SmolVLAModel, options: TargetOptions) -> BenchCase:
    """One timed inference on a random observation: the eager model as LeRobot runs it (the prompt padded
    to its own length), or with --buckets the sub-engines over the prompt's bucket."""
    from hotloop.families.smolvla.observation import default_prompt_tokens, random_observation
    from hotloop.families.smolvla.roofline import smolvla_stage_work
    from hotloop.families.smolvla.sampling import sample_actions
    from hotloop.models.smolvla import check_inputs

    slots = cfg.tokenizer.max_length
    real = options.prompt_tokens or default_prompt_tokens(slots)
    obs = random_observation(cfg, options.batch, slots, options.seed, real)
    noise = torch.randn(
        options.batch,
        cfg.chunk_size,
        cfg.max_action_dim,
        generator=torch.Generator().manual_seed(options.seed + 2),
    )
    info = describe(cfg, model)
    info.update(batch=options.batch, prompt_real_tokens=real)
    if options.buckets is not None:
        run, bucket = _bucketed_run(cfg, model, options, obs, noise, info)
    else:
        lerobot_obs = _longest(obs, real)  # LeRobot pads to the longest prompt: the real tokens here
        o = lerobot_obs  # checked once: the timed loop measures the model, not the checks
        check_inputs(model, o.images, o.image_masks, o.lang_tokens, o.lang_masks, o.state, noise, None)

        def run(timer: StageTimer) -> Tensor:
            return sample_actions(model, lerobot_obs, noise, timer=timer, validate=False)

        bucket = real
    precision = options.dtype
    work = smolvla_stage_work(
        cfg, dict.fromkeys(("vision", "prefix", "denoise"), precision), options.batch, bucket
    )
    info["work"] = {stage: w.to_dict() for stage, w in work.items()}
    return BenchCase(name=name, run=run, info=info, device=options.device)


def _longest(obs: Any, real: int) -> Any:
    import dataclasses

    return dataclasses.replace(
        obs, lang_tokens=obs.lang_tokens[:, :real], lang_masks=obs.lang_masks[:, :real]
    )


def _bucketed_run(
    cfg: SmolVLAConfig,
    model: SmolVLAModel,
    options: TargetOptions,
    obs: Any,
    noise: Tensor,
    info: dict[str, Any],
) -> tuple[Any, int]:
    """The same eager model through its sub-engines, the prefix built per prompt-length bucket."""
    import dataclasses

    from hotloop.families.buckets import BucketedPipeline, prompt_buckets, prompt_length
    from hotloop.families.protocol import constants_of
    from hotloop.families.smolvla.engines import (
        SmolVLAEngineShape,
        build_smolvla_subengines,
        reshape_subengines,
    )
    from hotloop.families.smolvla.pipeline import SmolVLAPipeline

    shape = SmolVLAEngineShape.of(cfg, options.batch)
    engines = build_smolvla_subengines(model, shape, model.dtype)
    pipelines = {}
    for b in prompt_buckets(cfg.tokenizer.max_length, options.buckets or ()):
        own = reshape_subengines(cfg, engines, b)
        runners = {n: own[n].module for n in ("vision", "prefix", "denoise_step")}
        pipelines[b] = SmolVLAPipeline(
            cfg, dataclasses.replace(shape, prompt_slots=b), runners, constants_of(own),
            {n: e.signature for n, e in own.items()},
        )  # fmt: skip
    pipeline = BucketedPipeline(pipelines, lambda o: prompt_length(o.lang_masks))
    info["prompt_buckets"] = list(pipelines)
    info["prompt_bucket"] = pipeline.bucket_for(obs)

    def run(timer: StageTimer) -> Tensor:
        return pipeline.sample(obs, noise, timer)

    return run, int(info["prompt_bucket"])


def build_bench(config_name: str, options: TargetOptions) -> BenchCase:
    cfg, model = _model(config_name, options)
    return bench_model(f"smolvla:{config_name}", cfg, model, options)


def named_settings(cfg: SmolVLAConfig) -> PolicySettings:
    """A named target's policy settings: cameras at the model's image size, no processors."""
    return PolicySettings(camera_sizes=dict.fromkeys(cfg.camera_keys, cfg.image_size))


def build_policy(config_name: str, options: TargetOptions) -> SmolVLAPolicy:
    if options.batch != 1:
        raise ConfigError("a SmolVLA policy runs one observation at a time; drop --batch")
    cfg, model = _model(config_name, options)
    return SmolVLAPolicy(model, cfg, named_settings(cfg), seed=options.seed)


def policy_info(
    target: str, cfg: SmolVLAConfig, settings: PolicySettings, seed: int, checkpoint: str | None
) -> dict[str, Any]:
    """The manifest's `policy` entry: how `engine_policy` rebuilds this policy around a loaded artifact."""
    return {
        "kind": target,
        "checkpoint": checkpoint,
        "camera_sizes": {k: list(v) for k, v in settings.camera_sizes.items()},
        "default_prompt_tokens": list(settings.default_prompt_tokens),
        "action_meaning": settings.action_meaning,
        "seed": seed,
        "spec": policy_spec(cfg, settings).to_dict(),
    }


def build_source(config_name: str, options: TargetOptions) -> PolicySource:
    """The fp32 model, one random observation (the prompt in every slot the tokenizer allows, its real
    tokens --prompt-tokens), the compared noise and the policy entry an artifact stores."""
    from hotloop.families.smolvla.family import SmolVLAFamily
    from hotloop.families.smolvla.observation import random_observation

    if options.dtype != "float32":
        raise ConfigError("--dtype: a compile source is the fp32 model (the planner tries the precisions)")
    cfg, model = _model(config_name, options)
    family = SmolVLAFamily()
    shape = family.default_shape(cfg)
    obs = random_observation(cfg, 1, shape.prompt_slots, options.seed, options.prompt_tokens)
    noise = family.make_noise(cfg, shape, 1, torch.Generator().manual_seed(options.seed + 2))
    target = f"smolvla:{config_name}"
    info = policy_info(target, cfg, named_settings(cfg), options.seed, None)
    return PolicySource(target, family, model.float().eval(), shape, obs, noise, info)


def frame_adapter(target: str, policy: SmolVLAPolicy, dataset: Any, task_text: bool) -> TargetAdapter:
    """Recorded frames through the policy's own preprocessing: its cameras by name, the state as recorded,
    the task's text (a checkpoint with a tokenizer) or one prompt id per task."""
    from hotloop.families.smolvla.family import SmolVLAFamily
    from hotloop.families.smolvla.observation import pad_prompt

    cfg = policy.config
    names = tuple(camera_name(k) for k in cfg.camera_keys)
    tasks = getattr(dataset, "tasks", {}) or {}
    slots = cfg.tokenizer.max_length

    def observe(images: dict[str, np.ndarray], state: np.ndarray, task_index: int) -> Any:
        obs: dict[str, Any] = {"images": {n: images[n] for n in names}, "state": state[: cfg.state_dim]}
        if task_text:
            obs["prompt"] = str(tasks.get(task_index, ""))
        else:
            obs["prompt_tokens"] = [1 + task_index % 200]
        model_obs = policy.observation(obs)
        model_obs.lang_tokens, model_obs.lang_masks = pad_prompt(
            model_obs.lang_tokens, model_obs.lang_masks, slots
        )
        return model_obs

    def targets(chunk: np.ndarray, state: np.ndarray) -> np.ndarray:
        out = np.zeros((cfg.chunk_size, cfg.max_action_dim), dtype=np.float32)
        h = min(cfg.chunk_size, chunk.shape[0])
        out[:h, : cfg.action_dim] = policy.to_model_actions(chunk[:h, : cfg.action_dim]).numpy()
        if h < cfg.chunk_size:  # a shorter recording repeats its last action
            out[h:] = out[h - 1]
        return out

    limits = DataLimits(cfg.state_dim, cfg.action_dim, cfg.views, cfg.chunk_size)
    return TargetAdapter(
        target, observe, targets, cfg.state_dim, cfg.action_dim, names, None, limits, SmolVLAFamily()
    )


def build_data(
    config_name: str, dataset: Any, options: TargetOptions, model: Any = None
) -> tuple[Any, TargetAdapter]:
    """(fp32 model, adapter): recorded frames with the dataset's own state and action as model space."""
    cfg = resolve_config(config_name, options)
    if model is None:
        model = build_model(cfg, torch.float32, options.seed)
    policy = SmolVLAPolicy(model, model.cfg, named_settings(model.cfg), seed=options.seed)
    return model, frame_adapter(f"smolvla:{config_name}", policy, dataset, task_text=False)
