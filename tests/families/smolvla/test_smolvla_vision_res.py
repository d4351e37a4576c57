"""`vision-res:S`: a SmolVLA's vision tower fed S px images (hotloop.models.smolvla_resolution), on the tiny
sizes (48 px, patch 8, pixel shuffle 2: 6x6 patches, 9 tokens a view): the position table against
transformers' own `interpolate_pos_encoding`, the refusals, an artifact that loads and samples as the
compress-time student, the manifest's record, the policy preparing its frames at S, and the vision tower's
recovery toward the full-resolution teacher (`distill`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.errors import ConfigError
from hotloop.families.smolvla.observation import random_observation
from hotloop.families.smolvla.targets import SIZES, build_model, make_config
from hotloop.models.smolvla_resolution import (
    POSITION_KEY,
    check_side,
    interpolate_positions,
    lower_config,
    lower_resolution,
)

runner = CliRunner()
REPO = Path(__file__).resolve().parents[3]
LEROBOT_PYTHON = REPO / ".venv-lerobot" / "bin" / "python"
FAST = ["--calibration-frames", "4", "--eval-observations", "2", "--bench-iters", "2", "--backends", "eager",
        "--threads", "1", "--quiet"]  # fmt: skip


@pytest.fixture(scope="module")
def tiny() -> torch.nn.Module:
    return build_model(make_config("smolvla:tiny", SIZES["tiny"]), torch.float32, 0)


def test_position_table_is_transformers_interpolate_pos_encoding(tmp_path: Path) -> None:
    """transformers' SiglipVisionEmbeddings.interpolate_pos_encoding (in .venv-lerobot, LeRobot's
    transformers) on the same 6x6 table, asked for 32 px at patch 8: the same 4x4 table, to float32."""
    if not LEROBOT_PYTHON.is_file():
        pytest.skip(f"{LEROBOT_PYTHON} is missing (make lerobot-venv); it holds transformers")
    table = torch.randn(36, 8, generator=torch.Generator().manual_seed(3))
    np.save(tmp_path / "table.npy", table.numpy())
    script = (
        "import sys, numpy as np, torch\n"
        "from transformers.models.siglip.configuration_siglip import SiglipVisionConfig\n"
        "from transformers.models.siglip.modeling_siglip import SiglipVisionEmbeddings\n"
        "cfg = SiglipVisionConfig(hidden_size=8, image_size=48, patch_size=8, num_channels=3)\n"
        "emb = SiglipVisionEmbeddings(cfg)\n"
        "emb.position_embedding.weight.data = torch.from_numpy(np.load(sys.argv[1]))\n"
        "out = emb.interpolate_pos_encoding(torch.zeros(1, 16, 8), 32, 32)\n"
        "np.save(sys.argv[2], out[0].detach().numpy())\n"
    )
    done = subprocess.run(
        [str(LEROBOT_PYTHON), "-c", script, str(tmp_path / "table.npy"), str(tmp_path / "out.npy")],
        capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    want = torch.from_numpy(np.load(tmp_path / "out.npy"))
    torch.testing.assert_close(interpolate_positions(table, 6, 4), want, rtol=0, atol=1e-6)


def test_native_side_changes_nothing(tiny: torch.nn.Module) -> None:
    """At the grid's own side the interpolation is the identity, and a model built at the native side
    from the resampled table samples exactly as the checkpoint."""
    table = tiny.state_dict()[POSITION_KEY]
    assert torch.equal(interpolate_positions(table, 6, 6), table)
    cfg = tiny.cfg
    same = build_model(lower_config(cfg, 48), torch.float32, 0)
    state = dict(tiny.state_dict())
    state[POSITION_KEY] = interpolate_positions(table, 6, 6)
    same.load_state_dict(state)
    obs = random_observation(cfg, 2, cfg.tokenizer.max_length, 5)
    noise = torch.randn(2, cfg.chunk_size, cfg.max_action_dim, generator=torch.Generator().manual_seed(1))
    from hotloop.families.smolvla.sampling import sample_actions

    assert torch.equal(sample_actions(same, obs, noise), sample_actions(tiny, obs, noise))


def test_lower_resolution_sizes_and_refusals(tiny: torch.nn.Module) -> None:
    student, details = lower_resolution(tiny, 32)
    assert student.cfg.image_size == (32, 32) and student.cfg.native_image_size == (48, 48)
    assert student.cfg.vlm.vision.positions_per_side == 4 and student.cfg.image_tokens_per_view == 4
    assert details["from"]["tokens_per_view"] == 9 and details["to"]["tokens_per_view"] == 4
    assert details["to"]["prefix_tokens"] == details["from"]["prefix_tokens"] - 2 * 5  # 2 views, 5 fewer each
    for name, weight in tiny.state_dict().items():  # only the position table changes
        if name != POSITION_KEY:
            assert torch.equal(student.state_dict()[name], weight), name
    assert tiny.cfg.image_size == (48, 48)  # the teacher is left as it was
    for side, message in (
        (24, "--recipe vision-res:24: 24 px is not a multiple of 16 (patch 8 x pixel shuffle 2"),
        (48, "--recipe vision-res:48: the vision tower already takes 48 px; give a smaller side"),
        (64, "the vision tower already takes 48 px"),
    ):
        with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
            check_side(tiny.cfg, side, f"--recipe vision-res:{side}")
    with pytest.raises(ConfigError, match="the smallest side its patch grid allows"):
        check_side(lower_config(tiny.cfg, 16), 16, "--recipe vision-res:16")


def test_bad_vision_res_exits_2_before_any_work(compress_refuses) -> None:
    for target, recipe, message in (
        ("smolvla:tiny", "vision-res:24", "--recipe vision-res:24: 24 px is not a multiple of 16"),
        ("smolvla:tiny", "vision-res:48", "--recipe vision-res:48: the vision tower already takes 48 px"),
        ("smolvla:tiny", "vision-res:x", "--recipe vision-res:x: give the vision tower's new side in pixels"),
        ("smolvla:tiny", "vision-res:32,vision-res:16,vision-res:16", "--recipe vision-res:16: the vision tower takes 16 px"),
        ("smolvla:tiny", "distill", "--recipe distill: a SmolVLA's distill retrains the vision tower"),
        ("toy:mlp", "vision-res:32", "--recipe vision-res:32: toy:mlp is a toy policy, which has no vision tower"),
    ):  # fmt: skip
        compress_refuses(target, recipe, message, *FAST)


def test_artifact_samples_as_the_compress_time_student(checkpoint: Path, tmp_path: Path) -> None:
    """`compress CKPT --recipe vision-res:32`: the manifest records S, the artifact's engine samples as the
    student made the same way (teacher-size observations resized on the way in), and its policy prepares
    the cameras' raw frames at 32 px."""
    from hotloop.families.smolvla.sampling import sample_actions
    from hotloop.models.smolvla import load_smolvla
    from hotloop.runtime.engine import Engine

    out, js = tmp_path / "art", tmp_path / "r.json"
    res = runner.invoke(
        app,
        ["compress", str(checkpoint), "--recipe", "vision-res:32", "--tolerance", "cos:0.01", "-o", str(out),
         "--json", str(js), *FAST],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    record = manifest["compression"]["vision_resolution"]
    assert manifest["compression"]["recipe"] == ["vision-res:32"]
    assert record["to"] == {"side": 32, "patches_per_view": 16, "tokens_per_view": 4, "prefix_tokens": 21}
    assert record["from"]["side"] == record["native_side"] == 48
    assert manifest["config"]["image_size"] == [32, 32] and manifest["config"]["native_image_size"] == [
        48,
        48,
    ]
    assert json.loads(js.read_text())["rows"][1]["step"] == "vision-res:32"

    _, teacher = load_smolvla(checkpoint)
    student, _ = lower_resolution(teacher, 32)
    obs = random_observation(teacher.cfg, 1, teacher.cfg.tokenizer.max_length, 9)  # at 48 px
    noise = torch.randn(
        1, teacher.cfg.chunk_size, teacher.cfg.max_action_dim, generator=torch.Generator().manual_seed(2)
    )
    engine = Engine.load(out, warmup=0)
    got = engine.sample(obs, noise)
    torch.testing.assert_close(got, sample_actions(student, obs, noise), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(got, sample_actions(teacher, obs, noise), atol=1e-3)  # it is another model

    from hotloop.runtime.policy import engine_policy

    policy = engine_policy(engine)
    frame = {"images": {"top": np.zeros((24, 40, 3), np.uint8), "wrist": np.zeros((24, 40, 3), np.uint8)},
             "state": np.zeros(10, np.float32), "prompt": "w5 w6"}  # fmt: skip
    assert tuple(policy.observation(frame).images.shape[-2:]) == (32, 32)
    assert policy.infer(frame)["actions"].shape == (teacher.cfg.n_action_steps, 4)


def test_distill_retrains_only_the_vision_tower(tiny: torch.nn.Module) -> None:
    """SmolVLA's `distill` after `vision-res`: the loss toward the full-resolution teacher falls, and
    nothing but the vision tower and connector moves."""
    from hotloop.families.smolvla.compression import StepDistillConfig
    from hotloop.families.smolvla.distill import distill_vision

    student, _ = lower_resolution(tiny, 32)
    before = {n: p.clone() for n, p in student.named_parameters()}
    obs = random_observation(tiny.cfg, 6, tiny.cfg.tokenizer.max_length, 4)
    details = distill_vision(tiny, student, obs, None, StepDistillConfig(steps=15, batch=4, lr=3e-3, seed=0))
    assert details["steps"] == 15 and details["loss_after"] < details["loss_before"]
    for name, p in student.named_parameters():
        moved = not torch.equal(p, before[name])
        vision = name.startswith(
            ("vlm_with_expert.vlm.model.vision_model.", "vlm_with_expert.vlm.model.connector.")
        )
        assert moved == vision, name


def test_rollouts_play_a_lower_resolution_model() -> None:
    """`onestep` after `vision-res` on a demo: its closed-loop rounds swap the lowered model (and its
    config) into the demo's policy, which then prepares the cameras at the model's side."""
    from hotloop.compress.closed_loop_observations import closed_loop_observations
    from hotloop.demos.checkpoints import build_source
    from hotloop.families import get_family
    from hotloop.targets import TargetOptions

    teacher = build_source("demo:conveyor-smolvla", TargetOptions()).model.float()
    student, _ = lower_resolution(teacher, 32)
    obs, _ = closed_loop_observations(
        "demo:conveyor-smolvla",
        "conveyor-pick",
        get_family("smolvla"),
        1,
        3,
        1,
        student,
        ("chunk", "fixed:0"),
    )
    assert tuple(obs.images.shape[-2:]) == (32, 32) and obs.batch > 1
