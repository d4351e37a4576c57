"""Parity with LeRobot's ACT on the shared fixture lerobot-act-tiny: every stage, actions <= 1e-5."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from hotloop.models.act import act_intermediates, load_act, sinusoid_1d

ACTIONS_TOL = 1e-5
INTERMEDIATE_TOL = 3e-5


@pytest.fixture(scope="module")
def folder(fixtures_dir: Path) -> Path:
    return fixtures_dir / "lerobot-act-tiny"


def _inputs(folder: Path, cameras: tuple[str, ...]) -> tuple[list[Tensor], Tensor]:
    inp = np.load(folder / "inputs.npz")
    return [torch.from_numpy(inp[c]) for c in cameras], torch.from_numpy(inp["observation.state"])


def test_config_reads_the_fixture_sizes(folder: Path) -> None:
    cfg, model = load_act(folder)
    assert cfg.cameras == ("observation.images.top", "observation.images.wrist")
    assert cfg.camera_shapes == ((3, 64, 96),) * 2
    assert (cfg.state_dim, cfg.env_state_dim, cfg.action_dim) == (6, None, 6)
    assert (cfg.chunk_size, cfg.n_action_steps, cfg.dim_model, cfg.n_heads, cfg.dim_feedforward) == (
        10,
        5,
        32,
        4,
        64,
    )
    assert (cfg.n_encoder_layers, cfg.n_decoder_layers, cfg.n_vae_encoder_layers, cfg.latent_dim) == (
        2,
        1,
        1,
        8,
    )
    assert (cfg.feedforward_activation, cfg.pre_norm, cfg.use_vae, cfg.temporal_ensemble_coeff) == (
        "relu",
        False,
        True,
        None,
    )
    assert cfg.vision_backbone == "resnet18" and not cfg.replace_final_stride_with_dilation
    assert model.trunk.out_channels == 64  # narrowed resnet18 (512 -> 64), read from the tensors
    # The stored VAE buffer is LeRobot's fixed sinusoid (loaded, unused at inference).
    assert torch.equal(model.get_buffer("vae_encoder_pos_enc"), sinusoid_1d(12, 32).unsqueeze(0))


def test_actions_and_every_intermediate_match(folder: Path) -> None:
    cfg, model = load_act(folder)
    images, state = _inputs(folder, cfg.cameras)
    ref = np.load(folder / "intermediates.npz")
    got = act_intermediates(model, images, state)
    assert set(got) == set(ref), (
        f"names differ: ours only {set(got) - set(ref)}, fixture only {set(ref) - set(got)}"
    )
    diffs = {}
    for name in ref:
        assert tuple(got[name].shape) == ref[name].shape, (
            f"{name}: shape {tuple(got[name].shape)} != {ref[name].shape}"
        )
        diffs[name] = float((got[name] - torch.from_numpy(ref[name])).abs().max())
    table = ", ".join(f"{k} {v:.2g}" for k, v in diffs.items())
    bad = {k: v for k, v in diffs.items() if v > INTERMEDIATE_TOL}
    assert not bad, f"intermediates over {INTERMEDIATE_TOL}: {bad}; all: {table}"

    with torch.no_grad():
        actions = model(images, state)
    want = torch.from_numpy(np.load(folder / "actions.npy"))
    diff = float((actions - want).abs().max())
    assert actions.shape == want.shape and diff <= ACTIONS_TOL, (
        f"actions max abs diff {diff:.3g}; stages: {table}"
    )


def test_onnx_sub_engines_reproduce_the_fixture(folder: Path, tmp_path: Path) -> None:
    import onnxruntime as ort

    cfg, model = load_act(folder)
    images, state = _inputs(folder, cfg.cameras)

    class Transformer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.act = model

        def forward(self, top: Tensor, wrist: Tensor, state: Tensor) -> Tensor:
            return self.act.transformer([top, wrist], state, None)

    class Backbone(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.act = model

        def forward(self, image: Tensor) -> Tensor:
            return self.act.backbone(image)

    sessions = {}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation warnings
        for name, module, args in (
            ("backbone", Backbone(), (images[0],)),
            ("transformer", Transformer(), (images[0].new_zeros(2, 64, 2, 3),) * 2 + (state,)),
        ):
            path = tmp_path / f"{name}.onnx"
            torch.onnx.export(
                module, args, str(path), opset_version=17, do_constant_folding=True, dynamo=False
            )
            sessions[name] = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])

    def run(name: str, *arrays: np.ndarray) -> np.ndarray:
        session = sessions[name]
        return session.run(None, {i.name: a for i, a in zip(session.get_inputs(), arrays, strict=True)})[0]

    maps = [run("backbone", img.numpy()) for img in images]
    actions = run("transformer", *maps, state.numpy())
    diff = float(np.abs(actions - np.load(folder / "actions.npy")).max())
    assert diff <= ACTIONS_TOL, f"ONNX backbone + transformer: actions max abs diff {diff:.3g}"
