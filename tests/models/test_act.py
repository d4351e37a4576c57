"""ACT without fixtures: random checkpoints in LeRobot's key names, options the fixture lacks, refusals.

`write_act_checkpoint` saves a seeded random ACT as LeRobot does (keys "model.*", config.json with
LeRobot's fields); every option is then loaded back through `load_act`, run, and compared with a
transcription of LeRobot's transformer that uses torch's own nn.MultiheadAttention.
"""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from hotloop.errors import CheckpointError, ConfigError
from hotloop.models.act import ACTConfig, ACTModel, Attention, act_intermediates, load_act, sinusoid_2d
from hotloop.models.resnet import BACKBONES

STATE_KEY, ENV_KEY = "observation.state", "observation.environment_state"


# ------------------------------------------------------------------------------------ checkpoint maker


def resnet_shapes(backbone: str, widths: tuple[int, ...] = (8, 16, 32, 64), stem: int = 8) -> dict[str, Any]:
    """torchvision ResNet trunk weight shapes with narrowed widths (as the fixtures narrow them)."""
    kind, blocks = BACKBONES[backbone]
    shapes: dict[str, tuple[int, ...]] = {"conv1.weight": (stem, 3, 7, 7)}

    def bn(name: str, c: int) -> None:
        for p in ("weight", "bias", "running_mean", "running_var"):
            shapes[f"{name}.{p}"] = (c,)

    bn("bn1", stem)
    prev = stem
    for i, (w, n) in enumerate(zip(widths, blocks, strict=True)):
        for j in range(n):
            name = f"layer{i + 1}.{j}"
            if kind == "basic":
                out, convs = w, [(w, prev, 3), (w, w, 3)]
            else:
                out, convs = 4 * w, [(w, prev, 1), (w, w, 3), (4 * w, w, 1)]
            for k, (o, c_in, ks) in enumerate(convs, start=1):
                shapes[f"{name}.conv{k}.weight"] = (o, c_in, ks, ks)
                bn(f"{name}.bn{k}", o)
            if j == 0 and (
                i > 0 or prev != out
            ):  # torchvision: stride != 1 or inplanes != planes * expansion
                shapes[f"{name}.downsample.0.weight"] = (out, prev, 1, 1)
                bn(f"{name}.downsample.1", out)
            prev = out
    return shapes


def act_config(**change: Any) -> ACTConfig:
    """A small ACT (D 16, 2 heads) with two 64x64 cameras and a state; `change` overrides fields."""
    backbone = change.pop("vision_backbone", "resnet18")
    n_cams = change.pop("n_cameras", 2)
    base = dict(
        cameras=tuple(f"observation.images.cam{i}" for i in range(n_cams)),
        camera_shapes=((3, 64, 64),) * n_cams,
        state_dim=5,
        env_state_dim=None,
        action_dim=4,
        chunk_size=6,
        n_action_steps=3,
        dim_model=16,
        n_heads=2,
        dim_feedforward=24,
        feedforward_activation="relu",
        n_encoder_layers=2,
        n_decoder_layers=1,
        pre_norm=False,
        use_vae=True,
        latent_dim=4,
        n_vae_encoder_layers=1,
        temporal_ensemble_coeff=None,
        vision_backbone=backbone,
        replace_final_stride_with_dilation=False,
        backbone_shapes=tuple(sorted(resnet_shapes(backbone).items())),
    )
    base.update(change)
    if not base["cameras"]:
        base["camera_shapes"], base["backbone_shapes"] = (), ()
    return ACTConfig(**base)  # type: ignore[arg-type]


def random_state(model: nn.Module, seed: int) -> dict[str, Tensor]:
    """The fixtures' recipe: matrices N(0,1)/sqrt(fan_in), norm scales 1+0.1N, vectors 0.1N, var 0.5+U."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, t in model.state_dict().items():
        if name == "vae_encoder_pos_enc":
            out[name] = t.clone()  # fixed sinusoid, as LeRobot builds it
        elif t.dim() >= 2:
            out[name] = torch.randn(t.shape, generator=g) / math.sqrt(t[0].numel())
        elif name.endswith("running_var"):
            out[name] = 0.5 + torch.rand(t.shape, generator=g)
        elif name.endswith(".weight"):  # 1-D weights are norm scales (LayerNorm, FrozenBatchNorm2d)
            out[name] = 1 + 0.1 * torch.randn(t.shape, generator=g)
        else:
            out[name] = 0.1 * torch.randn(t.shape, generator=g)
    return out


def lerobot_config_json(cfg: ACTConfig) -> dict[str, Any]:
    """config.json as LeRobot's save_pretrained writes it (fields hotloop does not read included)."""
    inputs: dict[str, Any] = {}
    if cfg.state_dim is not None:
        inputs[STATE_KEY] = {"type": "STATE", "shape": [cfg.state_dim]}
    if cfg.env_state_dim is not None:
        inputs[ENV_KEY] = {"type": "ENV", "shape": [cfg.env_state_dim]}
    for cam, shape in zip(cfg.cameras, cfg.camera_shapes, strict=True):
        inputs[cam] = {"type": "VISUAL", "shape": list(shape)}
    fields = dataclasses.asdict(cfg)
    for key in ("cameras", "camera_shapes", "state_dim", "env_state_dim", "action_dim", "backbone_shapes"):
        fields.pop(key)
    fields.pop("layer_norm_eps")
    return {
        "type": "act",
        "n_obs_steps": 1,
        "input_features": inputs,
        "output_features": {"action": {"type": "ACTION", "shape": [cfg.action_dim]}},
        "device": "cpu",
        "normalization_mapping": {"VISUAL": "MEAN_STD", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"},
        "pretrained_backbone_weights": None,
        "dropout": 0.1,
        "kl_weight": 10.0,
        **fields,
    }


def write_act_checkpoint(folder: Path, cfg: ACTConfig, seed: int = 0) -> Path:
    """A seeded random ACT of `cfg` saved in LeRobot's layout (model.safetensors + config.json)."""
    folder.mkdir(parents=True, exist_ok=True)
    state = random_state(ACTModel(cfg), seed)
    save_file(
        {"model." + k: v.contiguous() for k, v in state.items()},
        str(folder / "model.safetensors"),
        {"format": "pt"},
    )
    (folder / "config.json").write_text(json.dumps(lerobot_config_json(cfg), indent=4))
    return folder


def inputs_for(
    cfg: ACTConfig, batch: int = 2, seed: int = 1
) -> tuple[list[Tensor], Tensor | None, Tensor | None]:
    g = torch.Generator().manual_seed(seed)
    images = [torch.randn((batch, *shape), generator=g) for shape in cfg.camera_shapes]
    state = None if cfg.state_dim is None else torch.randn(batch, cfg.state_dim, generator=g)
    env = None if cfg.env_state_dim is None else torch.randn(batch, cfg.env_state_dim, generator=g)
    return images, state, env


def edit_config(folder: Path, **fields: Any) -> None:
    path = folder / "config.json"
    data = json.loads(path.read_text())
    data.update(fields)
    path.write_text(json.dumps(data))


# ---------------------------------------------------------------------------- LeRobot transcription


def lerobot_transformer(
    model: ACTModel, maps: list[Tensor], state: Tensor | None, env: Tensor | None
) -> Tensor:
    """ACT.forward after the backbone (inference branch), transcribed from LeRobot's modeling_act.py, with
    torch's nn.MultiheadAttention holding the same weights."""
    cfg = model.cfg

    def act(x: Tensor) -> Tensor:
        return F.relu(x) if cfg.feedforward_activation == "relu" else F.gelu(x)

    def mha(att: Attention) -> nn.MultiheadAttention:
        m = nn.MultiheadAttention(cfg.dim_model, cfg.n_heads, dropout=0.1)
        m.load_state_dict(att.state_dict())
        return m.eval()

    def encoder_layer(layer: Any, x: Tensor, pos_embed: Tensor) -> Tensor:
        skip = x
        if cfg.pre_norm:
            x = layer.norm1(x)
        q = k = x + pos_embed
        x = mha(layer.self_attn)(q, k, value=x)[0]
        x = skip + x
        if cfg.pre_norm:
            skip = x
            x = layer.norm2(x)
        else:
            x = layer.norm1(x)
            skip = x
        x = layer.linear2(act(layer.linear1(x)))
        x = skip + x
        if not cfg.pre_norm:
            x = layer.norm2(x)
        return x

    def decoder_layer(layer: Any, x: Tensor, enc: Tensor, dpos: Tensor, epos: Tensor) -> Tensor:
        skip = x
        if cfg.pre_norm:
            x = layer.norm1(x)
        q = k = x + dpos
        x = mha(layer.self_attn)(q, k, value=x)[0]
        x = skip + x
        if cfg.pre_norm:
            skip = x
            x = layer.norm2(x)
        else:
            x = layer.norm1(x)
            skip = x
        x = mha(layer.multihead_attn)(query=x + dpos, key=enc + epos, value=enc)[0]
        x = skip + x
        if cfg.pre_norm:
            skip = x
            x = layer.norm3(x)
        else:
            x = layer.norm2(x)
            skip = x
        x = layer.linear2(act(layer.linear1(x)))
        x = skip + x
        if not cfg.pre_norm:
            x = layer.norm3(x)
        return x

    batch = maps[0].shape[0] if maps else env.shape[0]  # type: ignore[union-attr]
    latent = torch.zeros([batch, cfg.latent_dim], dtype=torch.float32)
    tokens = [model.encoder_latent_input_proj(latent)]
    pos = list(model.encoder_1d_feature_pos_embed.weight.unsqueeze(1))
    if cfg.state_dim is not None:
        tokens.append(model.encoder_robot_state_input_proj(state))
    if cfg.env_state_dim is not None:
        tokens.append(model.encoder_env_state_input_proj(env))
    for fmap in maps:
        cam_pos = sinusoid_2d(fmap, cfg.dim_model // 2).to(dtype=fmap.dtype)
        cam = model.encoder_img_feat_input_proj(fmap)
        tokens.extend(list(cam.permute(2, 3, 0, 1).reshape(-1, batch, cfg.dim_model)))
        pos.extend(list(cam_pos.permute(2, 3, 0, 1).reshape(-1, 1, cfg.dim_model)))
    x, pos_t = torch.stack(tokens, 0), torch.stack(pos, 0)
    for layer in model.encoder.layers:
        x = encoder_layer(layer, x, pos_t)
    enc = model.encoder.norm(x)  # LayerNorm with pre_norm, Identity otherwise
    y = torch.zeros((cfg.chunk_size, batch, cfg.dim_model))
    dpos = model.decoder_pos_embed.weight.unsqueeze(1)
    for layer in model.decoder.layers:
        y = decoder_layer(layer, y, enc, dpos, pos_t)
    return model.action_head(model.decoder.norm(y).transpose(0, 1))


# ------------------------------------------------------------------------------------------- options

VARIANTS: dict[str, dict[str, Any]] = {
    "base": {},
    "pre_norm": {"pre_norm": True},
    "gelu": {"feedforward_activation": "gelu"},
    "one_camera": {"n_cameras": 1},
    "three_cameras": {"n_cameras": 3},
    "no_state": {"state_dim": None},
    "env_state": {"env_state_dim": 7},
    "env_state_only": {"n_cameras": 0, "state_dim": None, "env_state_dim": 7},
    "resnet34": {"vision_backbone": "resnet34"},
    "three_decoder_layers": {"n_decoder_layers": 3},
    "no_vae": {"use_vae": False},
    "resnet50_dilated": {"vision_backbone": "resnet50", "replace_final_stride_with_dilation": True},
    "ensembling": {"temporal_ensemble_coeff": 0.01, "n_action_steps": 1},
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_option_loads_runs_deterministically_like_lerobot(tmp_path: Path, variant: str) -> None:
    written = act_config(**VARIANTS[variant])
    cfg, model = load_act(write_act_checkpoint(tmp_path / variant, written))
    assert cfg == written, "config.json + tensors did not read back as the config that wrote them"
    images, state, env = inputs_for(cfg)
    with torch.no_grad():
        first, again = model(images, state, env), model(images, state, env)
        maps = [model.backbone(img) for img in images]
        ref = lerobot_transformer(model, maps, state, env)
    assert first.shape == (2, cfg.chunk_size, cfg.action_dim) and torch.isfinite(first).all()
    assert torch.equal(first, again)
    diff = (first - ref).abs().max().item()
    assert diff <= 1e-5, f"{variant}: max abs diff to the LeRobot transcription {diff:.3g}"
    # The two sub-engines compose to forward.
    with torch.no_grad():
        assert torch.equal(model.transformer(maps, state, env), first)
    if variant == "resnet50_dilated":  # layer4 keeps stride 1: a 4x4 map from 64x64, not 2x2
        assert maps[0].shape == (2, 256, 4, 4)


def test_intermediates_name_every_stage(tmp_path: Path) -> None:
    cfg, model = load_act(write_act_checkpoint(tmp_path, act_config(env_state_dim=3, pre_norm=True)))
    images, state, env = inputs_for(cfg)
    rec = act_intermediates(model, images, state, env)
    assert torch.equal(rec["actions"], model(images, state, env).detach())
    assert rec["encoder_in_tokens"].shape == (3 + 2 * 4, 2, 16)  # latent, state, env, 2 cams x (2 x 2)
    assert not torch.equal(rec["encoder_out"], rec["encoder_layer1_out"])  # the pre-norm final LayerNorm
    assert torch.equal(rec["latent_token"], model.encoder_latent_input_proj.bias.detach().expand(2, -1))
    for name in ("state_token", "env_state_token", "backbone_stem_cam1", "cam_pos_embed_cam0", "decoder_out"):
        assert name in rec


@pytest.mark.parametrize(
    "option,value",
    [("feedforward_activation", "gelu"), ("pre_norm", True), ("n_decoder_layers", 3), ("n_cameras", 1)],
)
def test_an_option_changes_the_output(tmp_path: Path, option: str, value: Any) -> None:
    outs = []
    for i, cfg in enumerate((act_config(), act_config(**{option: value}))):
        loaded, model = load_act(write_act_checkpoint(tmp_path / str(i), cfg, seed=3))
        images, state, env = inputs_for(act_config(), seed=4)  # same inputs (cam0 first)
        with torch.no_grad():
            outs.append(model(images[: len(loaded.cameras)], state, env))
    assert (outs[0] - outs[1]).abs().max().item() > 1e-3


def test_same_tensors_other_activation_or_dilation_change_the_output(tmp_path: Path) -> None:
    folder = write_act_checkpoint(tmp_path, act_config(vision_backbone="resnet50"), seed=5)
    images, state, _ = inputs_for(act_config())
    _, relu = load_act(folder)
    edit_config(folder, feedforward_activation="gelu")
    _, gelu = load_act(folder)
    edit_config(folder, replace_final_stride_with_dilation=True)
    _, dilated = load_act(folder)
    with torch.no_grad():
        a, b, c = relu(images, state), gelu(images, state), dilated(images, state)
        assert relu.backbone(images[0]).shape[-2:] == (2, 2) and dilated.backbone(images[0]).shape[-2:] == (
            4,
            4,
        )
    assert (a - b).abs().max() > 1e-3 and (b - c).abs().max() > 1e-3


def test_attention_equals_torch_multihead_attention() -> None:
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(16, 4).eval()
    ours = Attention(16, 4)
    ours.load_state_dict(ref.state_dict())
    q, kv = torch.randn(5, 3, 16), torch.randn(7, 3, 16)
    with torch.no_grad():
        for query, key, value in ((q, q + 1, q), (q, kv + 0.5, kv)):
            assert torch.equal(ours(query, key, value), ref(query, key, value=value)[0])


def test_2d_sinusoid_follows_its_formula_on_a_non_square_map() -> None:
    h, w, half = 3, 5, 8
    got = sinusoid_2d(torch.zeros(1, 4, h, w), half)[0].double()
    freq = 10000 ** (2 * (np.arange(half) // 2) / half)
    ys = np.arange(1, h + 1) / (h + 1e-6) * 2 * np.pi
    xs = np.arange(1, w + 1) / (w + 1e-6) * 2 * np.pi
    want = np.zeros((2 * half, h, w))
    for j in range(half):
        f = np.sin if j % 2 == 0 else np.cos
        want[j] = f(ys[:, None] / freq[j]) * np.ones((1, w))
        want[half + j] = f(xs[None, :] / freq[j]) * np.ones((h, 1))
    assert np.abs(got.numpy() - want).max() < 1e-6


def test_onnx_export_and_trace_give_the_same_numbers(tmp_path: Path) -> None:
    import onnxruntime as ort

    # The fixture's sizes: two 64x96 cameras, D 32, 4 heads, chunk 10.
    cfg = act_config(
        camera_shapes=((3, 64, 96),) * 2,
        dim_model=32,
        n_heads=4,
        dim_feedforward=64,
        chunk_size=10,
        n_action_steps=5,
        state_dim=6,
        action_dim=6,
        latent_dim=8,
    )
    cfg, model = load_act(write_act_checkpoint(tmp_path / "ckpt", cfg))
    images, maybe_state, _ = inputs_for(cfg)
    assert maybe_state is not None
    state = maybe_state

    class Transformer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.act = model

        def forward(self, map0: Tensor, map1: Tensor, state: Tensor) -> Tensor:
            return self.act.transformer([map0, map1], state, None)

    class Backbone(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.act = model

        def forward(self, image: Tensor) -> Tensor:
            return self.act.backbone(image)

    with torch.no_grad():
        maps = [model.backbone(img) for img in images]
        want = model.transformer(maps, state, None)
        for name, module, args, expect in (
            ("backbone", Backbone(), (images[0],), maps[0]),
            ("transformer", Transformer(), (*maps, state), want),
        ):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch.jit.trace is deprecated, still what the exporter runs
                traced = torch.jit.trace(module, args)
            got = traced(*args)
            assert (got - expect).abs().max().item() <= 1e-6, f"{name}: traced differs"
            path = tmp_path / f"{name}.onnx"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation warnings
                torch.onnx.export(
                    module, args, str(path), opset_version=17, do_constant_folding=True, dynamo=False
                )
            session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            feeds = {i.name: a.numpy() for i, a in zip(session.get_inputs(), args, strict=True)}
            out = session.run(None, feeds)[0]
            # onnxruntime picks other conv / matmul kernels: float32 rounding, relative to the magnitude.
            diff, scale = np.abs(out - expect.numpy()).max(), max(1.0, float(expect.abs().max()))
            assert diff <= 1e-5 * scale, (
                f"{name}: onnxruntime max abs diff {diff:.3g} (values up to {scale:.3g})"
            )


# ------------------------------------------------------------------------------------------ refusals


def _refused(folder: Path, *fragments: str) -> str:
    with pytest.raises(CheckpointError) as info:
        load_act(folder)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in: {message}"
    return message


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    return write_act_checkpoint(tmp_path / "ckpt", act_config())


def test_refuses_an_unknown_backbone(checkpoint: Path) -> None:
    edit_config(checkpoint, vision_backbone="efficientnet_b0")
    _refused(checkpoint, "config.json", "'vision_backbone'", "efficientnet_b0")


@pytest.mark.parametrize("activation", ["silu", "glu"])
def test_refuses_an_activation_it_cannot_run(checkpoint: Path, activation: str) -> None:
    edit_config(checkpoint, feedforward_activation=activation)
    _refused(checkpoint, "'feedforward_activation'", repr(activation))


def test_refuses_a_tensor_of_the_wrong_shape(checkpoint: Path) -> None:
    path = checkpoint / "model.safetensors"
    tensors = load_file(str(path))
    tensors["model.decoder.layers.0.linear1.weight"] = torch.zeros(25, 16)
    save_file(tensors, str(path))
    _refused(checkpoint, "model.decoder.layers.0.linear1.weight: found (25, 16), expected (24, 16)")


def test_refuses_a_config_size_the_tensors_do_not_have(checkpoint: Path) -> None:
    edit_config(checkpoint, dim_model=32, n_heads=2)
    _refused(checkpoint, "field 'dim_model' is 32, but model.action_head.weight has shape (4, 16)")


def test_refuses_missing_and_unexpected_keys_in_one_error(checkpoint: Path) -> None:
    path = checkpoint / "model.safetensors"
    tensors = load_file(str(path))
    del tensors["model.decoder.norm.weight"]
    tensors["model.decoder.extra.weight"] = torch.ones(16)  # a key no ACT module holds
    save_file(tensors, str(path))
    _refused(
        checkpoint,
        "missing keys (1): model.decoder.norm.weight",
        "unexpected keys (1): model.decoder.extra.weight",
    )


def test_refuses_a_pre_norm_key_in_a_post_norm_config(checkpoint: Path) -> None:
    path = checkpoint / "model.safetensors"
    tensors = load_file(str(path))
    tensors["model.encoder.norm.weight"] = torch.ones(16)
    save_file(tensors, str(path))
    _refused(checkpoint, "field 'pre_norm' is false", "model.encoder.norm.weight")


def test_refuses_a_camera_without_backbone_weights(tmp_path: Path) -> None:
    folder = write_act_checkpoint(tmp_path, act_config(n_cameras=0, state_dim=None, env_state_dim=3))
    data = json.loads((folder / "config.json").read_text())
    data["input_features"]["observation.images.top"] = {"type": "VISUAL", "shape": [3, 64, 64]}
    (folder / "config.json").write_text(json.dumps(data))
    _refused(folder, "observation.images.top", "model.backbone.")


def test_refuses_a_camera_whose_channels_the_backbone_does_not_take(checkpoint: Path) -> None:
    data = json.loads((checkpoint / "config.json").read_text())
    data["input_features"]["observation.images.cam1"]["shape"] = [1, 64, 64]
    (checkpoint / "config.json").write_text(json.dumps(data))
    _refused(checkpoint, "input_features.observation.images.cam1.shape", "1 channels")


def test_refuses_a_depth_other_than_the_backbone_name(checkpoint: Path) -> None:
    edit_config(checkpoint, vision_backbone="resnet34")  # resnet18 tensors
    _refused(checkpoint, "vision_backbone 'resnet34'", "layer1.2")


@pytest.mark.parametrize(
    "fields,fragment",
    [
        ({"pre_norm": "yes"}, "'pre_norm'"),
        ({"dim_model": 16.5}, "'dim_model'"),
        ({"temporal_ensemble_coeff": 0.01}, "n_action_steps"),
        ({"n_action_steps": 7}, "'n_action_steps'"),
        ({"n_obs_steps": 2}, "'n_obs_steps'"),
        ({"type": "diffusion"}, "'type'"),
        ({"n_heads": 3}, "'n_heads'"),
        ({"output_features": {}}, "'output_features'"),
        ({"replace_final_stride_with_dilation": True}, "replace_final_stride_with_dilation"),
        ({"replace_final_stride_with_dilation": 2}, "'replace_final_stride_with_dilation'"),
    ],
)
def test_refuses_bad_fields_by_name(checkpoint: Path, fields: dict[str, Any], fragment: str) -> None:
    edit_config(checkpoint, **fields)
    _refused(checkpoint, "config.json", fragment)


def test_refuses_missing_files(tmp_path: Path, checkpoint: Path) -> None:
    (checkpoint / "model.safetensors").unlink()
    _refused(checkpoint, "model.safetensors")
    _refused(tmp_path / "nowhere", "config.json")


def test_bfloat16_loads_and_stays_near_float32(checkpoint: Path) -> None:
    cfg, model32 = load_act(checkpoint)
    _, model16 = load_act(checkpoint, dtype=torch.bfloat16)
    images, state, _ = inputs_for(cfg)
    assert state is not None
    with torch.no_grad():
        a = model32(images, state)
        b = model16([i.bfloat16() for i in images], state.bfloat16())
    assert b.dtype == torch.bfloat16 and all(p.dtype == torch.bfloat16 for p in model16.state_dict().values())
    assert (a - b.float()).abs().max() < 0.15 * a.abs().max()


def test_wrong_inputs_are_named(checkpoint: Path) -> None:
    cfg, model = load_act(checkpoint)
    images, state, _ = inputs_for(cfg)
    with pytest.raises(ConfigError, match="2 camera"):
        model(images[:1], state)
    with pytest.raises(ConfigError, match="5-dim state"):
        model(images, None)
