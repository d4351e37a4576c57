"""Diffusion Policy on random checkpoints written under LeRobot's key names (no fixtures needed).

`write_checkpoint` spells every key and shape from LeRobot's module tree (modeling_diffusion.py at
7427f318 and torchvision's ResNet), independently of hotloop's model, so a strict load checks the names.
It covers what the parity fixture does not: BatchNorm, 2 cameras with one shared or two separate encoders,
1 and 3 observation steps, FiLM bias-only, 3 U-Net stages, sample prediction, DDIM, no clipping, a linear
schedule, resize + crop_ratio, an environment state, resnet34.
"""

from __future__ import annotations

import io
import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from hotloop.errors import CheckpointError
from hotloop.models.diffusion import (
    DiffusionModel,
    Encoder,
    RgbEncoder,
    TableSampler,
    diffusion_intermediates,
    load_diffusion,
    sample_actions,
    select_action_chunk,
)

BLOCKS = {"resnet18": [2, 2, 2, 2], "resnet34": [3, 4, 6, 3]}


def base_config(**overrides: Any) -> dict[str, Any]:
    """A LeRobot DiffusionConfig as save_pretrained writes it (small sizes)."""
    cfg: dict[str, Any] = {
        "type": "diffusion",
        "n_obs_steps": 2,
        "input_features": {
            "observation.state": {"type": "STATE", "shape": [5]},
            "observation.images.top": {"type": "VISUAL", "shape": [3, 84, 80]},
        },
        "output_features": {"action": {"type": "ACTION", "shape": [2]}},
        "horizon": 8,
        "n_action_steps": 4,
        "vision_backbone": "resnet18",
        "resize_shape": None,
        "crop_ratio": 1.0,
        "crop_shape": [76, 76],
        "crop_is_random": True,
        "pretrained_backbone_weights": None,
        "use_group_norm": True,
        "spatial_softmax_num_keypoints": 4,
        "use_separate_rgb_encoder_per_camera": True,
        "down_dims": [16, 32],
        "kernel_size": 3,
        "n_groups": 4,
        "diffusion_step_embed_dim": 8,
        "use_film_scale_modulation": True,
        "noise_scheduler_type": "DDPM",
        "num_train_timesteps": 20,
        "beta_schedule": "squaredcos_cap_v2",
        "beta_start": 0.0001,
        "beta_end": 0.02,
        "prediction_type": "epsilon",
        "clip_sample": True,
        "clip_sample_range": 1.0,
        "num_inference_steps": None,
    }
    cfg.update(overrides)
    return cfg


def _side(n: int, halvings: int = 5) -> int:
    for _ in range(halvings):  # conv1 /2, maxpool /2, layer2-4 /2, each ceil((n - 1) / 2) + ...
        n = (n - 1) // 2 + 1
    return n


def lerobot_shapes(cfg: dict[str, Any], widths: tuple[int, int, int, int, int]) -> dict[str, tuple[int, ...]]:
    """Every key (with "diffusion.") and shape LeRobot's DiffusionModel has for `cfg`; widths = stem, layer1..4."""
    shapes: dict[str, tuple[int, ...]] = {}
    feats = cfg["input_features"]
    cams = [k for k, v in feats.items() if v["type"] == "VISUAL"]
    env = [v["shape"][0] for v in feats.values() if v["type"] == "ENV"]
    state_dim = feats["observation.state"]["shape"][0]
    action_dim = cfg["output_features"]["action"]["shape"][0]
    k = cfg["spatial_softmax_num_keypoints"]

    def norm(prefix: str, c: int) -> None:
        shapes[prefix + ".weight"] = shapes[prefix + ".bias"] = (c,)
        if not cfg["use_group_norm"]:
            shapes[prefix + ".running_mean"] = shapes[prefix + ".running_var"] = (c,)
            shapes[prefix + ".num_batches_tracked"] = ()

    def encoder(p: str) -> None:
        shapes[p + "backbone.0.weight"] = (widths[0], 3, 7, 7)
        norm(p + "backbone.1", widths[0])
        inplanes = widths[0]
        for stage, count in enumerate(BLOCKS[cfg["vision_backbone"]]):
            w = widths[stage + 1]
            for j in range(count):
                b = f"{p}backbone.{stage + 4}.{j}."
                shapes[b + "conv1.weight"] = (w, inplanes if j == 0 else w, 3, 3)
                norm(b + "bn1", w)
                shapes[b + "conv2.weight"] = (w, w, 3, 3)
                norm(b + "bn2", w)
                if j == 0 and (stage > 0 or inplanes != w):
                    shapes[b + "downsample.0.weight"] = (w, inplanes, 1, 1)
                    norm(b + "downsample.1", w)
            inplanes = w
        # LeRobot's __post_init__: with resize_shape the crop is int(resize * crop_ratio) (none at ratio 1)
        resize, ratio = cfg["resize_shape"], cfg["crop_ratio"]
        if resize:
            hw = [int(r * ratio) for r in resize] if ratio < 1 else resize
        else:
            hw = cfg["crop_shape"] or feats[cams[0]]["shape"][1:]
        shapes[p + "pool.nets.weight"], shapes[p + "pool.nets.bias"] = (k, widths[4], 1, 1), (k,)
        shapes[p + "pool.pos_grid"] = (_side(hw[0]) * _side(hw[1]), 2)
        shapes[p + "out.weight"], shapes[p + "out.bias"] = (2 * k, 2 * k), (2 * k,)

    if cams:
        if cfg["use_separate_rgb_encoder_per_camera"]:
            for i in range(len(cams)):
                encoder(f"diffusion.rgb_encoder.{i}.")
        else:
            encoder("diffusion.rgb_encoder.")
    gc = (state_dim + 2 * k * len(cams) + sum(env)) * cfg["n_obs_steps"]
    e, dims, ks = cfg["diffusion_step_embed_dim"], cfg["down_dims"], cfg["kernel_size"]
    cond = e + gc
    u = "diffusion.unet."
    shapes.update(
        {u + "diffusion_step_encoder.1.weight": (4 * e, e), u + "diffusion_step_encoder.1.bias": (4 * e,)}
    )
    shapes.update(
        {u + "diffusion_step_encoder.3.weight": (e, 4 * e), u + "diffusion_step_encoder.3.bias": (e,)}
    )

    def res(p: str, cin: int, cout: int) -> None:
        for conv, c_in in (("conv1", cin), ("conv2", cout)):
            shapes[f"{p}.{conv}.block.0.weight"], shapes[f"{p}.{conv}.block.0.bias"] = (
                (cout, c_in, ks),
                (cout,),
            )
            shapes[f"{p}.{conv}.block.1.weight"] = shapes[f"{p}.{conv}.block.1.bias"] = (cout,)
        film = 2 * cout if cfg["use_film_scale_modulation"] else cout
        shapes[f"{p}.cond_encoder.1.weight"], shapes[f"{p}.cond_encoder.1.bias"] = (film, cond), (film,)
        if cin != cout:
            shapes[f"{p}.residual_conv.weight"], shapes[f"{p}.residual_conv.bias"] = (cout, cin, 1), (cout,)

    in_out = [(action_dim, dims[0]), *zip(dims[:-1], dims[1:], strict=True)]
    for i, (cin, cout) in enumerate(in_out):
        res(f"{u}down_modules.{i}.0", cin, cout)
        res(f"{u}down_modules.{i}.1", cout, cout)
        if i < len(in_out) - 1:
            shapes[f"{u}down_modules.{i}.2.weight"], shapes[f"{u}down_modules.{i}.2.bias"] = (
                (cout, cout, 3),
                (cout,),
            )
    for i in range(2):
        res(f"{u}mid_modules.{i}", dims[-1], dims[-1])
    for i, (cout, cin) in enumerate(reversed(in_out[1:])):
        res(f"{u}up_modules.{i}.0", 2 * cin, cout)
        res(f"{u}up_modules.{i}.1", cout, cout)
        shapes[f"{u}up_modules.{i}.2.weight"], shapes[f"{u}up_modules.{i}.2.bias"] = (cout, cout, 4), (cout,)
    shapes[u + "final_conv.0.block.0.weight"], shapes[u + "final_conv.0.block.0.bias"] = (
        (dims[0], dims[0], ks),
        (dims[0],),
    )
    shapes[u + "final_conv.0.block.1.weight"] = shapes[u + "final_conv.0.block.1.bias"] = (dims[0],)
    shapes[u + "final_conv.1.weight"], shapes[u + "final_conv.1.bias"] = (
        (action_dim, dims[0], 1),
        (action_dim,),
    )
    return shapes


def write_checkpoint(
    folder: Path,
    cfg: dict[str, Any],
    widths: tuple[int, int, int, int, int] = (16, 16, 16, 32, 32),
    seed: int = 0,
) -> Path:
    """config.json + model.safetensors with seeded random weights, as the fixtures draw them."""
    g = torch.Generator().manual_seed(seed)
    tensors: dict[str, torch.Tensor] = {}
    for key, shape in lerobot_shapes(cfg, widths).items():
        if key.endswith("num_batches_tracked"):
            tensors[key] = torch.tensor(7, dtype=torch.int64)
        elif key.endswith("pos_grid"):
            n = int(np.sqrt(shape[0]))  # the tests' feature maps are square
            x, y = np.meshgrid(np.linspace(-1, 1, n), np.linspace(-1, 1, n))
            tensors[key] = torch.from_numpy(np.stack([x.ravel(), y.ravel()], 1)).float()
        elif key.endswith("running_var"):
            tensors[key] = 0.5 + torch.rand(shape, generator=g)
        elif len(shape) >= 2:
            fan_in = int(np.prod(shape[1:]))
            tensors[key] = torch.randn(shape, generator=g) / fan_in**0.5
        elif key.endswith(".weight"):
            tensors[key] = 1 + 0.1 * torch.randn(shape, generator=g)
        else:
            tensors[key] = 0.1 * torch.randn(shape, generator=g)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(cfg, indent=4))
    return folder


@dataclass
class Inputs:
    images: torch.Tensor | None
    state: torch.Tensor
    env_state: torch.Tensor | None
    noise: torch.Tensor
    step_noise: torch.Tensor


def inputs(cfg: dict[str, Any], batch: int = 2, seed: int = 1) -> Inputs:
    g = torch.Generator().manual_seed(seed)
    feats, s = cfg["input_features"], cfg["n_obs_steps"]
    cams = [v["shape"] for v in feats.values() if v["type"] == "VISUAL"]
    env = [v["shape"][0] for v in feats.values() if v["type"] == "ENV"]
    horizon, a = cfg["horizon"], cfg["output_features"]["action"]["shape"][0]
    steps = cfg["num_inference_steps"] or cfg["num_train_timesteps"]
    return Inputs(
        images=torch.randn(batch, s, len(cams), *cams[0], generator=g) if cams else None,
        state=torch.randn(batch, s, feats["observation.state"]["shape"][0], generator=g),
        env_state=torch.randn(batch, s, env[0], generator=g) if env else None,
        noise=torch.randn(batch, horizon, a, generator=g),
        step_noise=torch.randn(steps, batch, horizon, a, generator=g),
    )


def run(folder: Path, cfg: dict[str, Any], seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(global_cond, denoised sample) of one load + encode + sample."""
    dcfg, model = load_diffusion(folder)
    x = inputs(cfg, seed=seed)
    with torch.no_grad():
        gc = model.encode(x.images, x.state, x.env_state)
        sample = sample_actions(model, dcfg.make_scheduler(), gc, x.noise, step_noise=x.step_noise)
    assert gc.shape == (2, dcfg.global_cond_dim)
    assert sample.shape == (2, cfg["horizon"], cfg["output_features"]["action"]["shape"][0])
    assert torch.isfinite(sample).all()
    return gc, sample


TWO_CAMERAS = {
    "observation.images.left": {"type": "VISUAL", "shape": [3, 84, 80]},
    "observation.state": {"type": "STATE", "shape": [5]},
    "observation.images.right": {"type": "VISUAL", "shape": [3, 84, 80]},
}

VARIANTS: dict[str, tuple[dict[str, Any], tuple[int, int, int, int, int]]] = {
    "batch_norm_resnet34": ({"use_group_norm": False, "vision_backbone": "resnet34"}, (8, 8, 12, 12, 16)),
    "two_cameras_shared": (
        {"input_features": TWO_CAMERAS, "use_separate_rgb_encoder_per_camera": False},
        (16,) * 5,
    ),
    "two_cameras_separate": ({"input_features": TWO_CAMERAS}, (16, 16, 16, 32, 32)),
    "one_obs_step": ({"n_obs_steps": 1}, (16,) * 5),
    "three_obs_steps": ({"n_obs_steps": 3, "n_action_steps": 5}, (16,) * 5),
    "film_bias_only": ({"use_film_scale_modulation": False}, (16,) * 5),
    "three_down_dims": ({"down_dims": [8, 16, 32], "horizon": 16, "n_groups": 8}, (16,) * 5),
    "sample_ddim10_noclip_linear": (
        {
            "prediction_type": "sample",
            "noise_scheduler_type": "DDIM",
            "num_train_timesteps": 100,
            "num_inference_steps": 10,
            "clip_sample": False,
            "beta_schedule": "linear",
        },
        (16,) * 5,
    ),
    "resize_crop_ratio": ({"resize_shape": [70, 70], "crop_ratio": 0.9, "crop_shape": [5, 5]}, (16,) * 5),
    "env_state": (
        {
            "input_features": {
                "observation.state": {"type": "STATE", "shape": [5]},
                "observation.environment_state": {"type": "ENV", "shape": [6]},
                "observation.images.top": {"type": "VISUAL", "shape": [3, 84, 80]},
            }
        },
        (16,) * 5,
    ),
    "env_state_only": (
        {
            "input_features": {
                "observation.environment_state": {"type": "ENV", "shape": [6]},
                "observation.state": {"type": "STATE", "shape": [5]},
            }
        },
        (16,) * 5,
    ),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_loads_and_runs_deterministically(tmp_path: Path, name: str) -> None:
    overrides, widths = VARIANTS[name]
    cfg = base_config(**overrides)
    folder = write_checkpoint(tmp_path / name, cfg, widths)
    gc1, s1 = run(folder, cfg)
    gc2, s2 = run(folder, cfg)
    assert torch.equal(gc1, gc2) and torch.equal(s1, s2)
    _, s3 = run(folder, cfg, seed=2)
    assert not torch.equal(s1, s3)  # the inputs matter


def test_config_reads_the_options(tmp_path: Path) -> None:
    cfg = base_config(**VARIANTS["resize_crop_ratio"][0])
    dcfg, _ = load_diffusion(write_checkpoint(tmp_path / "r", cfg))
    assert dcfg.crop_shape == (63, 63)  # int(70 * 0.9): LeRobot derives it, config.json's [5, 5] is ignored
    assert dcfg.backbone_input_hw == (63, 63) and dcfg.feature_map == (32, 2, 2)
    assert dcfg.num_inference_steps == 20  # null -> num_train_timesteps
    cfg = base_config(**VARIANTS["two_cameras_separate"][0])
    dcfg, model = load_diffusion(write_checkpoint(tmp_path / "c", cfg))
    assert dcfg.camera_keys == ("observation.images.left", "observation.images.right")
    assert dcfg.global_cond_dim == 2 * (5 + 2 * 8) and dcfg.feature_map == (32, 3, 3)
    assert type(model.rgb_encoder).__name__ == "ModuleList"
    cfg = base_config(resize_shape=[70, 70], crop_ratio=1.0, crop_shape=[20, 20])
    assert load_diffusion(write_checkpoint(tmp_path / "n", cfg))[0].crop_shape is None  # ratio 1: no crop


@pytest.mark.parametrize("separate", [True, False])
def test_global_cond_order_per_step_state_then_cameras(tmp_path: Path, separate: bool) -> None:
    """[state, cam0, cam1] per observation step, steps oldest first, whatever the encoder layout."""
    cfg = base_config(input_features=TWO_CAMERAS, use_separate_rgb_encoder_per_camera=separate, n_obs_steps=3)
    _, model = load_diffusion(write_checkpoint(tmp_path / "m", cfg, (16,) * 5))
    x = inputs(cfg)
    images, state = x.images, x.state
    assert images is not None and state is not None
    with torch.no_grad():
        gc = model.encode(images, state).reshape(2, 3, -1)
        for cam in range(2):
            enc = cast(torch.nn.ModuleList, model.rgb_encoder)[cam] if separate else model.rgb_encoder
            for step in range(3):
                feats = enc(images[:, step, cam])
                got = gc[:, step, 5 + 8 * cam : 5 + 8 * (cam + 1)]
                assert (got - feats).abs().max() < 1e-6, f"camera {cam} step {step}"
                assert torch.equal(gc[:, step, :5], state[:, step])


def test_batch_norm_uses_the_running_statistics(tmp_path: Path) -> None:
    cfg = base_config(use_group_norm=False)
    folder = write_checkpoint(tmp_path / "bn", cfg, (8, 8, 8, 8, 8))
    gc, _ = run(folder, cfg)
    _, model = load_diffusion(folder)
    bn = cast(RgbEncoder, cast(torch.nn.ModuleList, model.rgb_encoder)[0]).backbone[1]
    assert isinstance(bn, torch.nn.BatchNorm2d) and int(cast(torch.Tensor, bn.num_batches_tracked)) == 7
    cast(torch.Tensor, bn.running_mean).add_(1.0)
    x = inputs(cfg)
    with torch.no_grad():
        assert not torch.allclose(model.encode(x.images, x.state), gc)


def test_random_crop_only_in_training_and_only_with_a_generator(tmp_path: Path) -> None:
    cfg = base_config()
    _, model = load_diffusion(write_checkpoint(tmp_path / "m", cfg))
    x = inputs(cfg)
    images, state = x.images, x.state
    assert images is not None and state is not None
    with torch.no_grad():
        centre = model.encode(images, state)
        model.train()
        with pytest.raises(ValueError, match="torch.Generator"):
            model.encode(images, state)
        a = model.encode(images, state, generator=torch.Generator().manual_seed(5))
        b = model.encode(images, state, generator=torch.Generator().manual_seed(5))
        model.eval()
    assert torch.equal(a, b) and not torch.allclose(a, centre)


def test_chunk_starts_at_the_current_observation(tmp_path: Path) -> None:
    cfg = base_config(n_obs_steps=3, n_action_steps=5)
    dcfg, _ = load_diffusion(write_checkpoint(tmp_path / "m", cfg))
    full = torch.arange(8.0)[None, :, None].expand(2, 8, 2)
    assert select_action_chunk(full, dcfg)[0, :, 0].tolist() == [2.0, 3.0, 4.0, 5.0, 6.0]


def test_intermediates_match_the_engines(tmp_path: Path) -> None:
    cfg = base_config(input_features=TWO_CAMERAS, use_separate_rgb_encoder_per_camera=False)
    dcfg, model = load_diffusion(write_checkpoint(tmp_path / "m", cfg, (16,) * 5))
    x = inputs(cfg)
    images, state, noise, step_noise = x.images, x.state, x.noise, x.step_noise
    assert images is not None and state is not None and noise is not None
    with torch.no_grad():
        out = diffusion_intermediates(model, dcfg.make_scheduler(), images, state, noise, step_noise)
        gc = model.encode(images, state)
        sample = sample_actions(model, dcfg.make_scheduler(), gc, noise, step_noise=step_noise)
    assert torch.equal(out["global_cond"], gc) and torch.equal(out["denoised_sample"], sample)
    assert out["rgb_backbone_in_cam1"].shape == (4, 3, 76, 76) and out["rgb_features_cam0"].shape == (4, 8)
    assert out["x_t_per_step"].shape == (20, 2, 8, 2) and out["step_noise_drawn"].tolist() == [True] * 19 + [
        False
    ]
    assert torch.equal(out["unet_step0_out"], out["model_output_per_step"][0])
    assert {"unet_step0_down0_skip", "unet_step0_mid_out", "unet_step0_up0_res_out"} <= set(out)


def test_ddpm_refuses_to_run_without_step_noise(tmp_path: Path) -> None:
    cfg = base_config()
    dcfg, model = load_diffusion(write_checkpoint(tmp_path / "m", cfg))
    x = inputs(cfg)
    with torch.no_grad(), pytest.raises(ValueError, match="step_noise"):
        gc = model.encode(x.images, x.state)
        sample_actions(model, dcfg.make_scheduler(), gc, x.noise)


def _bad(tmp_path: Path, cfg: dict[str, Any], edit: Any = None) -> str:
    """The CheckpointError of base_config()'s tensors (edited) beside `cfg` as config.json."""
    folder = write_checkpoint(tmp_path / "bad", base_config())
    (folder / "config.json").write_text(json.dumps(cfg))
    if edit is not None:
        from safetensors.torch import load_file

        tensors = load_file(str(folder / "model.safetensors"))
        edit(tensors)
        save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError) as info:
        load_diffusion(folder)
    return str(info.value)


def test_refusals_name_the_field_or_key(tmp_path: Path) -> None:
    msg = _bad(tmp_path, base_config(vision_backbone="efficientnet_b0"))
    assert "'vision_backbone' is 'efficientnet_b0'" in msg
    msg = _bad(tmp_path, base_config(noise_scheduler_type="PNDM"))
    assert "'noise_scheduler_type' is 'PNDM'" in msg
    msg = _bad(tmp_path, base_config(prediction_type="v_prediction"))  # LeRobot's own config refuses it
    assert "'prediction_type' is 'v_prediction'" in msg
    msg = _bad(tmp_path, base_config(noise_scheduler_type="DDIM", beta_schedule="sigmoid"))
    assert "'beta_schedule' is 'sigmoid'" in msg
    msg = _bad(tmp_path, base_config(horizon=6))
    assert "'horizon' is 6" in msg
    key = "diffusion.unet.mid_modules.1.cond_encoder.1.weight"

    def widen(t: dict[str, torch.Tensor]) -> None:
        t[key] = torch.zeros(64, 99)

    msg = _bad(tmp_path, base_config(), widen)
    assert f"key {key!r}: found shape (64, 99), expected (64, 34)" in msg

    def drop(t: dict[str, torch.Tensor]) -> None:
        del t["diffusion.unet.final_conv.1.bias"]

    assert "missing key 'diffusion.unet.final_conv.1.bias'" in _bad(tmp_path, base_config(), drop)
    msg = _bad(tmp_path, base_config(use_separate_rgb_encoder_per_camera=False))
    assert "missing key 'diffusion.rgb_encoder.backbone.0.weight'" in msg and "the other way" in msg

    def deepen(t: dict[str, torch.Tensor]) -> None:
        t["diffusion.rgb_encoder.0.backbone.5.2.conv1.weight"] = torch.zeros(16, 16, 3, 3)

    assert "layer2" in _bad(tmp_path, base_config(), deepen)


def _onnx_max_diff(module: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> float:
    import onnxruntime as ort

    buffer = io.BytesIO()
    names = [f"in{i}" for i in range(len(args))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # A BytesIO is accepted with dynamo=False (the stubs name only paths).
        torch.onnx.export(module, args, buffer, dynamo=False, input_names=names, opset_version=17)  # type: ignore[arg-type]
    session = ort.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
    got = session.run(None, {n: a.numpy() for n, a in zip(names, args, strict=True)})[0]
    return float(np.abs(got - module(*args).numpy()).max())


def test_sub_engines_trace_and_export(tmp_path: Path) -> None:
    cfg = base_config(**VARIANTS["sample_ddim10_noclip_linear"][0], input_features=TWO_CAMERAS)
    dcfg, model = load_diffusion(write_checkpoint(tmp_path / "m", cfg, (16,) * 5))
    x = inputs(cfg)
    images, state, noise = x.images, x.state, x.noise
    assert images is not None and state is not None and noise is not None
    t = torch.full((2,), 90, dtype=torch.long)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        gc = model.encode(images, state)
        encoder = Encoder(model)
        traced_enc = torch.jit.trace(encoder, (images, state))
        assert torch.equal(traced_enc(images, state), gc)
        traced_unet = torch.jit.trace(model.unet, (noise, t, gc))
        for step in (90, 0):  # the timestep is an input of the graph, not a constant
            ts = torch.full((2,), step, dtype=torch.long)
            assert torch.equal(traced_unet(noise, ts, gc), model.unet(noise, ts, gc))
        assert _onnx_max_diff(encoder, (images, state)) < 1e-5
        assert _onnx_max_diff(model.unet, (noise, t, gc)) < 1e-5
        assert not model.training
        # The whole 10-step DDIM loop as one graph.
        reference = sample_actions(model, dcfg.make_scheduler(), gc, noise)
        sampler = TableSampler(model, dcfg.make_scheduler())
        assert torch.equal(sampler(gc, noise), reference)
        traced = torch.jit.trace(sampler, (gc, noise), check_trace=False)
        assert torch.equal(traced(gc, noise), reference)
        other = torch.randn(noise.shape, generator=torch.Generator().manual_seed(9))
        assert torch.equal(traced(gc, other), sample_actions(model, dcfg.make_scheduler(), gc, other))


def test_model_parameters_are_lerobot_keys(tmp_path: Path) -> None:
    cfg = base_config(use_group_norm=False, down_dims=[8, 16, 32], horizon=16, n_groups=8)
    folder = write_checkpoint(tmp_path / "m", cfg, (8, 8, 8, 8, 8))
    dcfg, model = load_diffusion(folder)
    assert isinstance(model, DiffusionModel)
    ours = {"diffusion." + k for k in model.state_dict()}
    assert ours == set(lerobot_shapes(cfg, (8, 8, 8, 8, 8)))
    assert "unet.down_modules.2.2.weight" not in model.state_dict()  # the last stage does not downsample
    assert "unet.up_modules.1.2.weight" in model.state_dict()  # every up stage upsamples


def test_environment_state_comes_last_in_each_step(tmp_path: Path) -> None:
    cfg = base_config(**VARIANTS["env_state"][0])
    dcfg, model = load_diffusion(write_checkpoint(tmp_path / "m", cfg))
    assert dcfg.env_state_dim == 6 and dcfg.obs_feature_dim == 5 + 8 + 6
    x = inputs(cfg)
    env, state = x.env_state, x.state
    assert env is not None and state is not None
    with torch.no_grad():
        gc = model.encode(x.images, state, env).reshape(2, 2, -1)
        with pytest.raises(ValueError, match="env_state"):
            model.encode(x.images, state)
    assert torch.equal(gc[:, :, -6:], env) and torch.equal(gc[:, :, :5], state)
