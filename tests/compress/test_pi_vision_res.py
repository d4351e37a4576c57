"""`vision-res:S` on pi0 / pi0.5 (hotloop.models.pi_resolution), on pi05:tiny (56 px, patch 14: a 4x4 grid,
16 image tokens a view): the position table against an independent bicubic computation, the resize inside
the model's own vision path, the refusals, the config's round trip, a compiled artifact that takes the
teacher's native-size observations and samples as the eager student, and `distill` after the step."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.compress.recipe import EXIT_TOLERANCE
from hotloop.errors import ConfigError
from hotloop.families.pi.config_io import config_from_dict
from hotloop.families.pi.sampling import make_noise, sample_actions
from hotloop.families.pi.targets import build_model, random_observation
from hotloop.models.configs import get_pi_config
from hotloop.models.pi0 import PiModel
from hotloop.models.pi_resolution import POSITION_KEY, check_side, lower_config, lower_resolution
from hotloop.models.vision_resolution import interpolate_positions

runner = CliRunner()
FAST = ["--calibration-frames", "2", "--eval-observations", "2", "--bench-iters", "2", "--threads", "1",
        "--quiet"]  # fmt: skip


@pytest.fixture(scope="module")
def teacher() -> PiModel:
    return build_model(get_pi_config("pi05:tiny"), torch.float32, "cpu", 0)


def keys_bicubic_matrix(old: int, new: int, a: float = -0.75) -> np.ndarray:
    """(new, old) weights of 1-D cubic convolution (Keys, a = -0.75) with half-pixel centres and the
    border replicated: bicubic resampling written out from its definition, not through torch."""

    def kernel(d: float) -> float:
        d = abs(d)
        if d <= 1:
            return (a + 2) * d**3 - (a + 3) * d**2 + 1
        return a * d**3 - 5 * a * d**2 + 8 * a * d - 4 * a if d < 2 else 0.0

    m = np.zeros((new, old))
    for i in range(new):
        src = (i + 0.5) * old / new - 0.5
        base = math.floor(src)
        for j in range(base - 1, base + 3):
            m[i, min(max(j, 0), old - 1)] += kernel(src - j)
    return m


def test_position_table_is_bicubic_over_the_grid() -> None:
    """Each of the table's channels, as an old x old image, resampled to new x new (separable bicubic);
    the grid's own side is the identity and a constant table stays constant."""
    table = torch.randn(36, 5, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    grid = table.numpy().reshape(6, 6, 5)
    for new in (4, 3, 2):
        m = keys_bicubic_matrix(6, new)
        want = np.einsum("ij,jkc,lk->ilc", m, grid, m).reshape(new * new, 5)
        got = interpolate_positions(table, 6, new).double().numpy()
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    assert torch.equal(interpolate_positions(table.float(), 6, 6), table.float())
    flat = torch.full((36, 5), 0.25)
    torch.testing.assert_close(interpolate_positions(flat, 6, 4), torch.full((16, 5), 0.25))


def test_lower_resolution_sizes_and_weights(teacher: PiModel) -> None:
    student, details = lower_resolution(teacher, 28)
    cfg = student.cfg
    assert cfg.vision.image_size == 28 and cfg.native_image_size == 56 and cfg.image_side == 56
    assert cfg.vision.tokens_per_view == 4 and cfg.prefix_len == teacher.cfg.prefix_len - 12
    assert details == {
        "from": {"side": 56, "patches_per_view": 16, "tokens_per_view": 16, "prefix_tokens": 28},
        "to": {"side": 28, "patches_per_view": 4, "tokens_per_view": 4, "prefix_tokens": 16},
        "native_side": 56,
    }
    state = teacher.state_dict()
    for name, weight in student.state_dict().items():
        want = interpolate_positions(state[name], 4, 2) if name == POSITION_KEY else state[name]
        assert torch.equal(weight, want), name
    assert teacher.cfg.vision.image_size == 56 and teacher.cfg.native_image_size is None
    # A second step lowers from the current side; the observations' side stays the checkpoint's.
    again, details = lower_resolution(student, 14)
    assert again.cfg.native_image_size == 56 and details["native_side"] == 56
    assert details["from"]["side"] == 28


def test_native_size_observations_are_resized_inside_the_model(teacher: PiModel) -> None:
    """Observations at the checkpoint's side give what the same observations resized to S beforehand
    give (the tower sees S px either way), and the student is another model than the teacher."""
    student, _ = lower_resolution(teacher, 28)
    obs = random_observation(teacher.cfg, 2, "cpu", 4)
    assert tuple(obs.images.shape[-2:]) == (56, 56)  # the teacher's observations serve the student
    small = F.interpolate(obs.images.flatten(0, 1), size=(28, 28), mode="bilinear", align_corners=False)
    resized = dataclasses.replace(obs, images=small.reshape(2, 1, 3, 28, 28))
    assert torch.equal(student.vision(obs.images), student.vision(resized.images))
    noise = make_noise(student, 2, torch.Generator().manual_seed(1))
    got = sample_actions(student, obs, noise=noise)
    assert torch.equal(got, sample_actions(student, resized, noise=noise, validate=False))
    assert not torch.allclose(got, sample_actions(teacher, obs, noise=noise), atol=1e-3)


def test_config_round_trips_and_old_manifests_load(teacher: PiModel) -> None:
    lowered = lower_config(teacher.cfg, 42)
    assert config_from_dict(json.loads(json.dumps(dataclasses.asdict(lowered)))) == lowered
    old = dataclasses.asdict(teacher.cfg)
    del old["native_image_size"]  # a manifest written before `vision-res` reached pi
    assert config_from_dict(old) == teacher.cfg and teacher.cfg.image_side == 56
    with pytest.raises(ConfigError, match="native_image_size must be an integer >= vision.image_size"):
        dataclasses.replace(lowered, native_image_size=14)


def test_bad_sides_are_refused(teacher: PiModel, compress_refuses) -> None:
    for side, message in (
        (30, "--recipe vision-res:30: 30 px is not a multiple of 14 (patch 14: the tower cuts whole patches); "
             "use vision-res:28 or vision-res:42"),
        (56, "--recipe vision-res:56: the vision tower already takes 56 px; give a smaller side, a multiple "
             "of 14 (patch 14), e.g. vision-res:42"),
        (64, "the vision tower already takes 56 px"),
    ):  # fmt: skip
        with pytest.raises(ConfigError) as err:
            check_side(teacher.cfg, side, f"--recipe vision-res:{side}")
        assert message in str(err.value)
    with pytest.raises(ConfigError, match="the smallest side its patch grid allows"):
        check_side(lower_config(teacher.cfg, 14), 14, "--recipe vision-res:14")
    for target, recipe, message in (
        ("pi05:tiny", "vision-res:30", "--recipe vision-res:30: 30 px is not a multiple of 14"),
        ("pi0:tiny", "vision-res:56", "--recipe vision-res:56: the vision tower already takes 56 px"),
        ("pi05:tiny", "vision-res:28,vision-res:28", "--recipe vision-res:28: the vision tower already takes 28"),
    ):  # fmt: skip
        compress_refuses(target, recipe, message, *FAST)


@pytest.mark.slow  # a student trained, then compiled through OpenVINO: ~40 s
def test_compiled_plan_takes_native_observations_as_the_eager_student(
    teacher: PiModel, tmp_path: Path
) -> None:
    """`compress pi05:tiny --recipe vision-res:28,compile --backends openvino`: the manifest records the
    step, the vision graph (which resizes) runs on OpenVINO, and the loaded plan fed the teacher's 56 px
    observations samples as the eager student made the same way (fp32)."""
    from hotloop.runtime.engine import Engine

    out, js = tmp_path / "art", tmp_path / "r.json"
    res = runner.invoke(
        app,
        ["compress", "pi05:tiny", "--recipe", "vision-res:28,compile", "--backends", "openvino", "--tolerance",
         "cos:0.01", "-o", str(out), "--json", str(js), *FAST],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    record = manifest["compression"]["vision_resolution"]
    assert record["to"] == {"side": 28, "patches_per_view": 4, "tokens_per_view": 4, "prefix_tokens": 16}
    assert record["from"]["side"] == record["native_side"] == 56
    assert manifest["config"]["vision"]["image_size"] == 28 and manifest["config"]["native_image_size"] == 56
    assert manifest["precision_plan"]["vision"]["backend"] == "openvino"
    steps = [r["step"] for r in json.loads(js.read_text())["rows"]]
    assert steps == ["reference", "vision-res:28", "compile"]

    student, _ = lower_resolution(teacher, 28)
    engine = Engine.load(out, warmup=0)
    assert tuple(engine.example_observation().images.shape[-2:]) == (56, 56)
    obs = random_observation(teacher.cfg, 1, "cpu", 9)
    noise = make_noise(student, 1, torch.Generator().manual_seed(2))
    got, want = engine.sample(obs, noise).flatten(), sample_actions(student, obs, noise=noise).flatten()
    assert float(F.cosine_similarity(got, want, dim=0)) >= 0.999


def test_distill_after_vision_res_runs_toward_the_teacher(recorded: Path, tmp_path: Path) -> None:
    """`vision-res:28,distill` on recorded frames: the student (28 px tower) learns from the 56 px teacher
    on the same observations; the teacher's image tokens are pooled onto the student's grid for the
    feature term, and the loss falls."""
    js = tmp_path / "r.json"
    res = runner.invoke(
        app,
        ["compress", "pi05:tiny", "--recipe", "vision-res:28,distill", "--data", str(recorded), "--distill-steps",
         "8", "--distill-batch", "2", "--distill-lr", "1e-3", "--backends", "eager", "--tolerance", "cos:0.01",
         "-o", str(tmp_path / "art"), "--json", str(js), *FAST],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    rows = json.loads(js.read_text())["rows"]
    assert [r["step"] for r in rows] == ["reference", "vision-res:28", "distill"]
    details = rows[2]["details"]
    assert details["steps"] == 8 and details["loss_after"]["total"] < details["loss_before"]["total"]


def test_a_step_outside_the_tolerance_is_judged_again_after_the_distill_that_repairs_it(
    recorded: Path, tmp_path: Path
) -> None:
    """`vision-res:S,distill`: the coarser tower alone may be far from the teacher (demo:conveyor-vision at
    48 px: cos -0.07) and only the pair is meant to pass; the step's row records its violation, the recipe
    goes on to `distill`, and only the repaired model can be kept."""
    js = tmp_path / "r.json"
    res = runner.invoke(
        app,
        ["compress", "pi05:tiny", "--recipe", "vision-res:28,distill", "--data", str(recorded), "--distill-steps",
         "2", "--distill-batch", "2", "--backends", "eager", "--tolerance", "cos:0.999999",
         "-o", str(tmp_path / "art"), "--json", str(js), *FAST],
    )  # fmt: skip
    assert res.exit_code == EXIT_TOLERANCE, res.output  # stopped at distill, not at vision-res
    report = json.loads(js.read_text())
    rows = report["rows"]
    assert [r["step"] for r in rows] == ["reference", "vision-res:28", "distill"]
    assert rows[1]["violation"] is not None  # recorded, and the recipe went on
    assert report["stopped"].startswith("step distill broke the tolerance")  # 2 steps repair too little here
    assert report["kept_step"] == "reference"


def test_feature_target_pools_the_teachers_grid() -> None:
    from hotloop.families.pi.compression.distill import feature_target

    teacher = torch.arange(16.0).reshape(1, 16, 1)  # a 4x4 grid, row-major
    pooled = feature_target("vision", teacher, torch.zeros(1, 4, 1))
    assert pooled.flatten().tolist() == [2.5, 4.5, 10.5, 12.5]  # the mean of each 2x2 block
    with pytest.raises(ConfigError, match="feature layer vlm.0"):
        feature_target("vlm.0", torch.zeros(1, 28, 8), torch.zeros(1, 16, 8))
