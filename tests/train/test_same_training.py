"""Every shipped demo trainer trains as it did for a fixed seed: a few steps of each family at toy sizes
give the weights and losses recorded in `same_training.json`.

The recorded values were made by the trainers before they shared one data, batching, option and
checkpoint-folder layer (issue 36, item 2); a change that draws the batches, noise or initial weights in
another order, or computes the statistics differently, changes them. Regenerate them only for a change
that is meant to train differently:

    PYTHONPATH=src .venv/bin/python tests/train/test_same_training.py --record

The weights are compared bit for bit where the platform is the recording's (torch version and CPU
capability: other kernels round differently); the losses and the weights' L1 norm to a tolerance far
below what a different batch, noise draw or initialisation moves them, everywhere.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

GOLDEN = Path(__file__).with_name("same_training.json")
STEPS = 3


def _record_dataset(out: Path) -> Path:
    from hotloop.datasets.recorder import record

    record("conveyor-pick", 2, out, seed=10_000, views=("top", "wrist"))
    return out


def _act(data: Path, out: Path) -> None:
    from hotloop.train.act_demo import TrainActDemoConfig, train_act_demo

    cfg = TrainActDemoConfig(
        stage_widths=(8, 8, 16, 16), stem_width=8, dim_model=32, dim_feedforward=64, n_encoder_layers=1,
        n_vae_encoder_layers=1, latent_dim=8, batch=8, warmup=1, steps=STEPS,
    )  # fmt: skip
    train_act_demo(cfg, out, data, progress=False)


def _diffusion(data: Path, out: Path) -> None:
    from hotloop.train.diffusion_demo import TrainDiffusionDemoConfig, train_diffusion_demo

    cfg = TrainDiffusionDemoConfig(
        backbone_widths=(16, 16, 16, 32, 32), down_dims=(16, 32, 64), diffusion_step_embed_dim=16, keypoints=8,
        batch=4, warmup=1, steps=STEPS,
    )  # fmt: skip
    train_diffusion_demo(cfg, out, data, progress=False)


def _smolvla(data: Path, out: Path) -> None:
    from hotloop.train.smolvla_demo import TrainSmolVLADemoConfig, train_smolvla_demo

    cfg = TrainSmolVLADemoConfig(
        vision_width=16, vision_mlp=32, vision_layers=1, vision_heads=1, text_width=32, text_mlp=64,
        text_layers=2, heads=2, kv_heads=1, head_dim=16, batch=4, warmup=1, steps=STEPS,
    )  # fmt: skip
    train_smolvla_demo(cfg, out, data, progress=False)


def _pi_state(data: Path, out: Path) -> None:
    from hotloop.train.conveyor import TrainDemoConfig, train_demo

    train_demo(TrainDemoConfig(steps=STEPS, batch=4, warmup=1), out, data, progress=False)


def _pi_chain(data: Path, out: Path) -> None:
    """The state variant's every draw: noisy state copies and action-prefix conditioning."""
    from hotloop.train.conveyor import TrainDemoConfig, train_demo

    cfg = TrainDemoConfig(
        steps=STEPS, batch=4, warmup=1, box_noise_mm=3.0, box_velocity_noise_mms=20.0, state_noise_copies=2,
        action_prefix_prob=0.5, max_action_prefix=4,
    )  # fmt: skip
    train_demo(cfg, out, data, progress=False)


def _pi_vision(data: Path, out: Path) -> None:
    from hotloop.train.conveyor_vision import TrainVisionDemoConfig, train_vision_demo

    cfg = TrainVisionDemoConfig(model="pi05:nano", steps=STEPS, batch=2, warmup=1, store_dtype="float32")
    train_vision_demo(cfg, out, data, progress=False)


def _detector(data: Path, out: Path) -> None:
    from hotloop.train.detector_demo import TrainDetectorConfig, train_detector

    cfg = TrainDetectorConfig(
        held_out=1, size=64, resolutions=(32, 48), width=4, steps=STEPS, batch=4, warmup=1,
        store_dtype="float32",
    )  # fmt: skip
    train_detector(cfg, out, data, progress=False)


FAMILIES: dict[str, Callable[[Path, Path], None]] = {
    "act": _act,
    "diffusion": _diffusion,
    "smolvla": _smolvla,
    "pi-state": _pi_state,
    "pi-chain": _pi_chain,
    "pi-vision": _pi_vision,
    "detector": _detector,
}


def _platform() -> dict[str, str]:
    return {"torch": torch.__version__, "cpu": torch.backends.cpu.get_cpu_capability()}


def fingerprint(out: Path) -> dict[str, Any]:
    """What a run wrote that training decides: every tensor file (weights and the normalisation statistics
    the processors hold) hashed by name, dtype, shape and bytes; the weights' L1 norm; the losses."""
    from safetensors.torch import load_file

    digest = hashlib.sha256()
    l1 = 0.0
    for path in sorted(out.glob("*.safetensors")):
        tensors = load_file(str(path))
        for key in sorted(tensors):
            t = tensors[key].contiguous()
            digest.update(f"{path.name}:{key}:{t.dtype}:{tuple(t.shape)}".encode())
            digest.update(t.numpy().tobytes())
            if t.is_floating_point():
                l1 += float(t.double().abs().sum())
    stats = out / "norm_stats.json"  # the pi families' normalisation
    if stats.is_file():
        digest.update(stats.read_bytes())
    return {
        "tensors_sha256": digest.hexdigest(),
        "l1": l1,
        "loss": json.loads((out / "loss.json").read_text()),
    }


def _train(name: str, data: Path, out: Path) -> dict[str, Any]:
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.manual_seed(1234)  # a trainer that drew from the global generator unseeded would not repeat
    try:
        FAMILIES[name](data, out)
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)
    return fingerprint(out)


def _losses_close(got: Any, want: Any) -> None:
    got_flat = np.asarray(_flatten(got))
    want_flat = np.asarray(_flatten(want))
    assert got_flat.shape == want_flat.shape
    np.testing.assert_allclose(got_flat, want_flat, rtol=1e-4, atol=2e-5)


def _flatten(losses: Any) -> list[float]:
    if isinstance(losses, dict):
        return [x for key in sorted(losses) for x in losses[key]]
    return list(losses)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _record_dataset(tmp_path_factory.mktemp("same-training") / "data")


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", list(FAMILIES))
def test_a_few_steps_train_the_recorded_weights(name: str, data: Path, golden: dict, tmp_path: Path) -> None:
    got = _train(name, data, tmp_path / name)
    want = golden["families"][name]
    _losses_close(got["loss"], want["loss"])
    assert got["l1"] == pytest.approx(want["l1"], rel=1e-5)
    if _platform() == golden["platform"]:
        assert got["tensors_sha256"] == want["tensors_sha256"], f"{name}: the weights are not bit for bit"


def _record(commit: str) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        data = _record_dataset(Path(tmp) / "data")
        families = {name: _train(name, data, Path(tmp) / name) for name in FAMILIES}
    GOLDEN.write_text(
        json.dumps(
            {
                "made_by": f"commit {commit}: `PYTHONPATH=src .venv/bin/python {Path(__file__).relative_to(Path.cwd())} --record`",
                "platform": _platform(),
                "families": families,
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit(f"usage: {sys.argv[0]} --record  (rewrites {GOLDEN.name} from the trainers as they are)")
    import subprocess

    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
    _record(head.stdout.strip())
