"""`zero-noise`: a Diffusion plan that samples from x_T = 0 (its DDIM sampler then deterministic), and a
2-step student after it that learns that one trajectory per observation; the artifact's policy reads
the start from its manifest, and what is not a deterministic start is refused before any work."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from diffusion_checkpoints import raw_observation
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.families import get_family
from hotloop.runtime.engine import Engine

runner = CliRunner()
COMMON = ["--backends", "eager", "--bench-iters", "2", "--eval-observations", "2", "--calibration-frames", "4",
          "--threads", "1", "--tolerance", "cos:0.01", "--quiet"]  # fmt: skip


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("zero-noise") / "data"
    res = runner.invoke(
        app, ["record", "--task", "conveyor-pick", "--episodes", "1", "-o", str(data), "--quiet"]
    )
    assert res.exit_code == 0, res.output
    return data


def _chunks(art: Path, seeds: tuple[int, ...]) -> list[np.ndarray]:
    """The artifact's policy (as eval and serve load it) on one observation, once per noise seed."""
    engine = Engine.load(art, warmup=0)
    family = get_family("diffusion")
    obs = raw_observation(0)
    out = []
    for seed in seeds:
        policy = family.engine_policy(engine, engine.manifest["policy"], seed)
        policy.reset()
        out.append(policy.infer(obs)["actions"])
    return out


def test_zero_noise_then_onestep_learns_one_trajectory_and_the_artifact_starts_at_zero(
    tiny_ckpt: Path, recorded: Path, tmp_path: Path
) -> None:
    out, js = tmp_path / "o", tmp_path / "o.json"
    res = runner.invoke(
        app,
        ["compress", str(tiny_ckpt), "--recipe", "ddim:4,zero-noise,onestep:2", "--data", str(recorded), "-o",
         str(out), "--distill-steps", "8", "--distill-batch", "4", "--distill-lr", "1e-3", "--json", str(js),
         *COMMON],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    rows = json.loads(js.read_text())["rows"]
    assert [r["step"] for r in rows] == ["reference", "ddim:4", "zero-noise", "onestep:2"]
    assert rows[2]["details"] == {"start": "x = 0 (every inference), not a draw"}
    details = rows[3]["details"]
    # one start per observation (x_T = 0), not noise_draws of them, and no other start to hold out
    assert details["start"] == "x_T = 0 (zero-noise)"
    assert details["trajectories"] == details["observations"] == 4
    assert details["chunk_mse_fresh_noise_after"] is None
    assert details["chunk_mse_after"] < details["chunk_mse_before"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["policy"]["zero_noise"] is True and manifest["shape"]["num_steps"] == 2
    assert manifest["compression"]["applied"] == ["ddim:4", "zero-noise", "onestep:2"]
    # the artifact's policy starts every chunk at x_T = 0: other noise seeds, the same actions, and those
    # are the student's DDIM 2 from zeros
    a, b = _chunks(out, (0, 1))
    np.testing.assert_array_equal(a, b)


def test_a_plan_without_zero_noise_draws_its_start(tiny_ckpt: Path, tmp_path: Path) -> None:
    """The control of the test above: the same checkpoint's DDIM plan gives other actions for other seeds."""
    out = tmp_path / "o"
    res = runner.invoke(app, ["compress", str(tiny_ckpt), "--recipe", "ddim:4", "-o", str(out), *COMMON])
    assert res.exit_code == 0, res.output
    assert json.loads((out / "manifest.json").read_text())["policy"]["zero_noise"] is False
    a, b = _chunks(out, (0, 1))
    assert not np.allclose(a, b)


def test_zero_noise_alone_judges_the_plan_from_zeros(tiny_ckpt: Path, compress_rows) -> None:
    """Training-free: the same weights and sampler, judged on what it runs (x_T = 0) against the teacher's
    drawn-noise actions, so its agreement differs from the DDIM row's."""
    out, rows = compress_rows(str(tiny_ckpt), "ddim:4,zero-noise", *COMMON)
    assert [r["step"] for r in rows] == ["reference", "ddim:4", "zero-noise"]
    assert rows[2]["action"]["cosine"] != pytest.approx(rows[1]["action"]["cosine"], abs=1e-6)
    assert json.loads((out / "manifest.json").read_text())["policy"]["zero_noise"] is True


def test_bad_zero_noise_input_exits_2_before_any_work(
    tiny_ckpt: Path, recorded: Path, compress_refuses
) -> None:
    ckpt = str(tiny_ckpt)
    compress_refuses(
        ckpt, "zero-noise", "put its DDIM sampler first, e.g. --recipe ddim:10,zero-noise", *COMMON
    )
    compress_refuses(ckpt, "ddim:4,zero-noise:1", "--recipe zero-noise:1: step zero-noise takes no argument")
    compress_refuses(ckpt, "ddim:4,zero-noise,zero-noise", "zero-noise appears twice", *COMMON)
    # the pi demo already starts its flow at x = 0
    compress_refuses("demo:conveyor", "zero-noise", "demo:conveyor's policy already starts its flow at x = 0")
    compress_refuses("demo:conveyor-act", "zero-noise", "which has no sampling noise to start from zero")


@pytest.mark.slow  # MuJoCo episodes and the demo's DDPM-100 reference row: ~60 CPU-s
def test_onestep_on_the_diffusion_demo_learns_on_the_teachers_own_episodes_and_picks_a_student(
    recorded: Path, compress_rows
) -> None:
    """On a demo target the student also learns where the teacher drives itself: its closed-loop
    observations (played from x_T = 0 after zero-noise, under --onestep-rounds-under's first execution)
    join the --data frames. With --onestep-candidates the students are played as they are served (DDIM 2,
    from x_T = 0), and the artifact holds the one the rule picked: replaying it gives the recorded wins."""
    from hotloop.compile.artifact import sha256_state_dict
    from hotloop.compress.closed_loop_observations import StartingAtZero
    from hotloop.compress.student_selection import closed_loop_successes

    out, rows = compress_rows(
        "demo:conveyor-diffusion", "ddim:4,zero-noise,onestep:2", "--data", str(recorded), "--distill-steps", "2",
        "--distill-batch", "4", "--distill-episodes", "1", "--onestep-rounds-under", "chunk@fixed:0",
        "--onestep-candidates", "2", "--onestep-select-episodes", "2", *COMMON,
    )  # fmt: skip
    details = rows[-1]["details"]
    data = details["data"]
    assert data["source"] == "teacher rollouts (chunk, fixed:0)" and data["episodes"] == 1
    assert data["data_frames"] == 4 and data["observations"] >= 1
    assert details["observations"] == data["data_frames"] + data["observations"]
    sel = details["selection"]
    assert [c["seed"] for c in sel["candidates"]] == [0, 1] and set(sel["teacher"]) == {"chunk@fixed:0"}
    student = Engine.load(out, warmup=0).model
    assert student.cfg.num_inference_steps == 2 and student.cfg.noise_scheduler_type == "DDIM"
    assert sha256_state_dict(student.state_dict()) == sel["candidates"][sel["chosen"]]["weights_sha256"]
    replay = closed_loop_successes(
        "demo:conveyor-diffusion", "conveyor-pick", 2, 2, StartingAtZero(student), ("chunk", "fixed:0")
    )
    assert replay == sel["candidates"][sel["chosen"]]["wins"]["chunk@fixed:0"]


def test_a_one_step_diffusion_student_is_refused(tiny_ckpt: Path, recorded: Path, compress_refuses) -> None:
    """LeRobot's DDIM in one step samples at t = 0 alone (its `leading` spacing): a student there cannot move
    its start, so `onestep` (K = 1) on Diffusion is refused by name before any work."""
    compress_refuses(
        str(tiny_ckpt),
        "ddim:4,onestep",
        "DDIM in 1 step evaluates the U-Net at t = 0 only",
        "--data",
        str(recorded),
    )
