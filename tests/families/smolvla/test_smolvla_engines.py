"""SmolVLA's sub-engines against the eager model on random LeRobot-layout checkpoints (no fixtures): the
pipelines (step engine, unrolled loop, prompt buckets) reproduce `sample_actions`, the prompt padded to the
engine's slots agrees with LeRobot's longest padding, layer plans without self or cross layers have their
own signatures, the config survives the manifest, and the analytic work follows the sizes."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from hotloop.errors import ConfigError
from hotloop.families import get_family
from hotloop.families.protocol import constants_of
from hotloop.families.smolvla.engines import SmolVLAEngineShape, kv_names
from hotloop.families.smolvla.observation import pad_prompt, random_observation
from hotloop.families.smolvla.targets import SIZES, make_config
from hotloop.models.smolvla import load_smolvla, sample_actions
from hotloop.targets import TargetOptions, find_target

FAMILY = get_family("smolvla")


def _obs_noise(cfg: Any, batch: int = 2, real: int = 5, seed: int = 3) -> tuple[Any, torch.Tensor]:
    obs = random_observation(cfg, batch, cfg.tokenizer.max_length, seed, real)
    if batch > 1:
        obs.lang_masks[1, real - 2 :] = False  # a shorter prompt in the second row
    noise = torch.randn(
        batch, cfg.chunk_size, cfg.max_action_dim, generator=torch.Generator().manual_seed(seed)
    )
    return obs, noise


def _model_actions(model: Any, obs: Any, noise: torch.Tensor, steps: int | None = None) -> torch.Tensor:
    return sample_actions(
        model, obs.images, obs.image_masks, obs.lang_tokens, obs.lang_masks, obs.state, noise, steps
    )


@pytest.mark.parametrize("loop", [False, True])
def test_pipelines_reproduce_the_model_bit_for_bit(checkpoint: Path, loop: bool) -> None:
    cfg, model = load_smolvla(checkpoint)
    obs, noise = _obs_noise(cfg)
    shape = SmolVLAEngineShape.of(cfg, batch=2)
    engines = FAMILY.build_subengines(model, shape, torch.float32)
    got = FAMILY.eager_pipeline(cfg, shape, engines, loop=loop).sample(obs, noise)
    torch.testing.assert_close(got, _model_actions(model, obs, noise), rtol=0, atol=0)
    assert torch.equal(FAMILY.sample_actions(model, obs, noise), _model_actions(model, obs, noise))


def test_engine_prompt_slots_agree_with_lerobots_longest_padding(checkpoint: Path) -> None:
    """LeRobot pads to the batch's longest prompt, the engines to max_length: padding is masked."""
    cfg, model = load_smolvla(checkpoint)
    obs, noise = _obs_noise(cfg, real=6)
    longest = dataclasses.replace(obs, lang_tokens=obs.lang_tokens[:, :6], lang_masks=obs.lang_masks[:, :6])
    want = _model_actions(model, longest, noise)
    shape = SmolVLAEngineShape.of(cfg, batch=2)
    engines = FAMILY.build_subengines(model, shape, torch.float32)
    got = FAMILY.eager_pipeline(cfg, shape, engines).sample(obs, noise)
    assert shape.prompt_slots == 12 and (got - want).abs().max() < 1e-5
    tokens, masks = pad_prompt(longest.lang_tokens, longest.lang_masks, 12)
    assert torch.equal(masks, obs.lang_masks) and tokens.shape == (2, 12)


def test_prompt_buckets_run_the_same_modules_at_a_shorter_prefix(checkpoint: Path) -> None:
    cfg, model = load_smolvla(checkpoint)
    obs, noise = _obs_noise(cfg, batch=1, real=4)
    shape = FAMILY.default_shape(cfg)
    engines = FAMILY.build_subengines(model, shape, torch.float32)
    full = FAMILY.eager_pipeline(cfg, shape, engines).sample(obs, noise)
    small = FAMILY.reshape_subengines(cfg, engines, 4)
    assert (
        small["prefix"].example_inputs[1].shape == (1, 4)
        and small["prefix"].module is engines["prefix"].module
    )
    pipe = FAMILY.pipeline(
        cfg, FAMILY.with_prompt_slots(shape, 4), {n: small[n].module for n in ("vision", "prefix", "denoise_step")},
        constants_of(small), {n: e.signature for n, e in small.items()},
    )  # fmt: skip
    assert FAMILY.prompt_length(obs) == 4
    assert (pipe.sample(obs, noise) - full).abs().max() < 1e-5
    with pytest.raises(ConfigError, match="beyond the engine's 4 prompt slots"):
        pipe.sample(FAMILY.fill_prompt(random_observation(cfg, 1, 12, 0, 6), 6), noise)


@pytest.mark.parametrize(
    ("over", "names"),
    [
        ({"attention_mode": "self_attn"}, ("self_k", "self_v")),
        ({"self_attn_every_n_layers": 0}, ("cross_k", "cross_v")),
        ({"self_attn_every_n_layers": 3}, ("self_k", "self_v", "cross_k", "cross_v")),
    ],
)
def test_layer_plans_shape_the_signatures(
    make_checkpoint: Any, over: dict[str, Any], names: tuple[str, ...]
) -> None:
    sizes = dataclasses.replace(SIZES["tiny"], text_layers=3, **over)
    cfg, model = load_smolvla(make_checkpoint(sizes=sizes, cameras=("top",), state_dim=5, action_dim=3))
    assert kv_names(cfg) == names and cfg.views == 1
    obs, noise = _obs_noise(cfg)
    shape = SmolVLAEngineShape.of(cfg, batch=2)
    engines = FAMILY.build_subengines(model, shape, torch.float32)
    assert engines["prefix"].output_names == names
    got = FAMILY.eager_pipeline(cfg, shape, engines, loop=True).sample(obs, noise)
    torch.testing.assert_close(got, _model_actions(model, obs, noise), rtol=0, atol=0)


@pytest.mark.parametrize(
    "fields", [{"empty_cameras": 1}, {"add_image_special_tokens": True}, {"prefix_length": 40}]
)
def test_empty_cameras_special_tokens_and_a_fixed_prefix_length(
    make_checkpoint: Any, fields: dict[str, Any]
) -> None:
    ck = make_checkpoint(cameras=("top",), **fields)
    cfg, model = load_smolvla(ck)
    assert cfg.views == 1 + fields.get("empty_cameras", 0)
    assert cfg.image_start_ids == ((2, 3) if "add_image_special_tokens" in fields else ())
    obs, noise = _obs_noise(cfg)
    shape = SmolVLAEngineShape.of(cfg, batch=2)
    engines = FAMILY.build_subengines(model, shape, torch.float32)
    got = FAMILY.eager_pipeline(cfg, shape, engines, loop=True).sample(obs, noise)
    torch.testing.assert_close(got, _model_actions(model, obs, noise), rtol=0, atol=0)
    assert engines["prefix"].example_inputs[3].shape[1] == max(
        cfg.prefix_len(12), fields.get("prefix_length", 0)
    )
    policy = find_target(str(ck)).build_policy(str(ck), TargetOptions())
    assert [i.key for i in policy.spec.images] == ["top"]  # the empty slot is the policy's own
    raw = {
        "images": {"top": np.zeros((24, 40, 3), np.uint8)},
        "state": np.zeros(10, np.float32),
        "prompt": "w5 w6",
    }
    assert policy.infer(raw)["actions"].shape == (10, 4)


def test_fewer_steps_change_the_time_table_and_the_actions(checkpoint: Path) -> None:
    cfg, model = load_smolvla(checkpoint)
    obs, noise = _obs_noise(cfg, batch=1)
    shape = FAMILY.with_steps(FAMILY.default_shape(cfg), 3)
    engines = FAMILY.build_subengines(model, shape, torch.float32)
    assert engines["denoise_loop"].constants["time_table"].shape == (3, 1, cfg.chunk_size, cfg.expert.width)
    got = FAMILY.eager_pipeline(cfg, shape, engines).sample(obs, noise)
    torch.testing.assert_close(got, _model_actions(model, obs, noise, 3), rtol=0, atol=0)
    assert (got - _model_actions(model, obs, noise)).abs().max() > 1e-3


def test_bf16_engines_stay_close(checkpoint: Path) -> None:
    cfg, model = load_smolvla(checkpoint)
    obs, noise = _obs_noise(cfg, batch=1)
    shape = FAMILY.default_shape(cfg)
    engines = FAMILY.build_subengines(model, shape, torch.bfloat16)
    assert engines["prefix"].module.embed_tokens.weight.dtype == torch.bfloat16
    got = FAMILY.eager_pipeline(cfg, shape, engines).sample(obs, noise)
    want = _model_actions(model, obs, noise)
    assert (
        got.dtype == torch.float32
        and torch.nn.functional.cosine_similarity(got.flatten(), want.flatten(), 0) > 0.99
    )


def test_validation_names_the_input(checkpoint: Path) -> None:
    cfg, _ = load_smolvla(checkpoint)
    shape = FAMILY.default_shape(cfg)
    obs = FAMILY.example_observation(cfg, shape)
    checked = FAMILY.validate_observation(cfg, shape, {**obs.__dict__, "lang_tokens": obs.lang_tokens[:, :5],
                                                       "lang_masks": obs.lang_masks[:, :5]})  # fmt: skip
    assert checked.lang_tokens.shape == (1, 12) and not checked.lang_masks[:, 5:].any()
    with pytest.raises(ConfigError, match="input 'images' has shape"):
        FAMILY.validate_observation(cfg, shape, {**obs.__dict__, "images": obs.images[:, :1]})
    with pytest.raises(ConfigError, match="input 'images' spans"):
        FAMILY.validate_observation(cfg, shape, {**obs.__dict__, "images": obs.images * 3})
    with pytest.raises(ConfigError, match="'lang_tokens' has ids outside"):
        FAMILY.validate_observation(cfg, shape, {**obs.__dict__, "lang_tokens": obs.lang_tokens + 10_000})
    with pytest.raises(ConfigError, match="real tokens beyond"):
        FAMILY.validate_observation(cfg, shape, {**obs.__dict__, "lang_tokens": torch.ones(1, 13, dtype=torch.long),
                                                  "lang_masks": torch.ones(1, 13, dtype=torch.bool)})  # fmt: skip


def test_config_survives_the_manifest(checkpoint: Path) -> None:
    cfg, _ = load_smolvla(checkpoint)
    for c in (cfg, make_config("base", SIZES["base"])):
        assert FAMILY.config_from_dict(FAMILY.config_to_dict(c)) == c
    shape = FAMILY.default_shape(cfg, 2)
    assert FAMILY.shape_from_dict(dataclasses.asdict(shape)) == shape


def test_analytic_work_follows_buckets_steps_and_precision() -> None:
    cfg = make_config("base", SIZES["base"])
    shape = FAMILY.default_shape(cfg)
    full = FAMILY.stage_work(cfg, shape, {})
    short = FAMILY.stage_work(cfg, FAMILY.with_prompt_slots(shape, 16), {"denoise": "int8"})
    assert short["prefix"]["flops"] < full["prefix"]["flops"] and short["vision"] == full["vision"]
    assert short["denoise"]["weight_bytes"] == full["denoise"]["weight_bytes"] / 4
    # published sizes: vision ~0.43 TFLOP for two 512 px views, the expert a few GFLOP per step
    assert 3.5e11 < full["vision"]["flops"] < 5e11 and 5e10 < full["denoise"]["flops"] < 1.5e11


def test_base_has_the_published_smolvla_base_parameter_counts() -> None:
    """LeRobot's smolvla_base as the peer builds it (shared/peer/README.md): SigLIP 86.43 M, connector
    11.80 M, 16 text layers + embeddings 204.63 M, expert 98.25 M, projections 1.63 M (lm_head unused)."""
    from hotloop.models.smolvla import SmolVLAModel

    with torch.device("meta"):
        model = SmolVLAModel(make_config("base", SIZES["base"]))

    def count(m: torch.nn.Module) -> int:
        return sum(p.numel() for p in m.parameters())

    vlm = model.vlm_with_expert.vlm.model
    assert (count(vlm.vision_model), count(vlm.connector), count(vlm.text_model)) == (
        86_433_024,
        11_796_480,
        204_626_880,
    )
    assert count(model.vlm_with_expert.lm_expert) == 98_245_840
    assert (
        model.cfg.expert.width == 720 and model.cfg.expert.mlp_dim == 2048 and model.cfg.tokens_per_view == 64
    )
    small = make_config("small", SIZES["small"])
    with torch.device("meta"):
        assert 95e6 < count(SmolVLAModel(small)) < 110e6
