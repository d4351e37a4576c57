"""`onestep[:K]`: the few-step student of a flow policy (hotloop.compress.onestep), end to end on pi05:tiny
and in its parts: the trajectories it learns from, the loss falling, the plan running one step of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.compress.onestep import (
    OnestepConfig,
    check_onestep,
    integrate,
    stage_schedule,
    teacher_trajectories,
    train_onestep,
)
from hotloop.errors import ConfigError

runner = CliRunner()
FAST = ["--calibration-frames", "4", "--eval-observations", "2", "--bench-iters", "2", "--backends", "eager",
        "--threads", "1", "--quiet"]  # fmt: skip


@pytest.fixture(scope="module")
def tiny() -> tuple[torch.nn.Module, object]:
    """pi05:tiny's model and 6 random observations."""
    from hotloop.families.pi.targets import build_model, random_observation
    from hotloop.models.configs import get_pi_config

    cfg = get_pi_config("pi05:tiny")
    return build_model(cfg, torch.float32, "cpu", 0), random_observation(cfg, 6, "cpu", 1)


def test_stage_schedule_and_step_counts() -> None:
    assert stage_schedule(1, 10) == (5, 2, 1)
    assert stage_schedule(2, 10) == (2,)  # 5 is not on the 2-step grid
    assert stage_schedule(2, 8) == (4, 2)
    assert stage_schedule(1, 10, progressive=False) == (1,)
    for bad, teacher, match in ((3, 10, "1 or 2 steps"), (0, 10, "1 or 2 steps"), (2, 2, "fewer steps"),
                                (2, 5, "do not divide")):  # fmt: skip
        with pytest.raises(ConfigError, match=match):
            check_onestep(bad, teacher)


def test_teacher_trajectories_are_the_teachers_euler_states(tiny: tuple) -> None:
    """From x = 0 each row is the teacher's own 10-step integration, its last state the chunk sample_actions
    returns (the engines' loop)."""
    from hotloop.families.pi.compression.onestep import PiFlowStudent
    from hotloop.families.pi.sampling import sample_actions

    model, obs = tiny
    flow = PiFlowStudent(model)
    traj = teacher_trajectories(flow, model, obs, 10, OnestepConfig(noise="zero"))
    assert traj.states.shape == (6, 11, *flow.chunk_shape) and traj.obs_index == list(range(6))
    assert torch.equal(traj.states[:, 0], torch.zeros(6, *flow.chunk_shape))
    want = sample_actions(model, obs, noise=torch.zeros(6, *flow.chunk_shape), num_steps=10, validate=False)
    torch.testing.assert_close(traj.states[:, -1], want, rtol=1e-4, atol=1e-4)
    drawn = teacher_trajectories(flow, model, obs, 10, OnestepConfig(noise="random", noise_draws=2))
    assert drawn.states.shape[0] == 12 and drawn.starts.abs().sum() > 0


def test_training_lowers_the_one_step_error_and_leaves_the_prefix(tiny: tuple) -> None:
    from hotloop.families.pi.compression.onestep import PiFlowStudent
    from hotloop.families.pi.sampling import sample_time

    teacher, obs = tiny
    student = __import__("copy").deepcopy(teacher)
    flow = PiFlowStudent(teacher)
    actions = torch.randn(6, *flow.chunk_shape).clamp(-1, 1)
    config = OnestepConfig(steps=24, batch=6, lr=1e-3, noise="zero", anchor_weight=0.1, progressive=True)
    details = train_onestep(
        flow, teacher, student, obs, actions, 1, 10, config, sample_time, None, False, obs
    )
    assert [s["steps"] for s in details["stages"]] == [5, 2, 1]
    assert sum(s["optimizer_steps"] for s in details["stages"]) == 24
    assert details["chunk_mse_after"] < 0.5 * details["chunk_mse_before"], details
    assert details["anchor"] == {"weight": 0.1, "frames": 6}
    changed = {n.split(".")[0] for n, p in student.named_parameters()
               if not torch.equal(p, dict(teacher.named_parameters())[n])}  # fmt: skip
    assert changed and not changed & {"vision_tower", "projector", "embed_tokens", "vlm"}, changed


def test_compress_onestep_writes_a_one_step_plan_of_the_student(recorded: Path, tmp_path: Path) -> None:
    """End to end on pi05:tiny with recorded episodes: the artifact runs one step, its actions are one Euler
    step of the student weights it carries, and the report says what was learnt from."""
    from safetensors.torch import load_file

    from hotloop.families.pi.compression.onestep import PiFlowStudent
    from hotloop.families.pi.targets import build_model, random_observation
    from hotloop.models.configs import get_pi_config
    from hotloop.runtime.engine import Engine

    out, js = tmp_path / "os", tmp_path / "os.json"
    res = runner.invoke(
        app,
        ["compress", "pi05:tiny", "--recipe", "onestep", "--data", str(recorded), "--distill-steps", "10",
         "--distill-batch", "4", "--distill-lr", "1e-3", "--tolerance", "cos:0.01", "-o", str(out), "--json", str(js),
         *FAST],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    rows = json.loads(js.read_text())["rows"]
    assert [(r["step"], r["num_steps"]) for r in rows] == [("reference", 10), ("onestep", 1)]
    details = rows[1]["details"]
    assert details["data"] == {"source": "--data frames", "observations": 4}
    assert details["chunk_mse_after"] < details["chunk_mse_before"]
    assert 0 < rows[1]["action"]["cosine"] < 1.0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["shape"]["num_steps"] == 1 and manifest["compression"]["applied"] == ["onestep"]

    engine = Engine.load(out, warmup=0)
    student = build_model(get_pi_config("pi05:tiny"), torch.float32, "cpu", 0)
    student.load_state_dict(load_file(str(out / manifest["weights"])))
    obs = random_observation(student.cfg, 1, "cpu", 3)
    noise = torch.randn(1, *PiFlowStudent(student).chunk_shape, generator=torch.Generator().manual_seed(4))
    flow = PiFlowStudent(student)
    with torch.no_grad():
        want = integrate(flow, student, flow.prefix(student, obs), obs, noise, 1)[-1]
    torch.testing.assert_close(engine.sample(obs, noise), want, rtol=1e-4, atol=1e-4)


def test_bad_onestep_input_exits_2_before_any_work(recorded: Path, tmp_path: Path) -> None:
    out = tmp_path / "a"
    data = ["--data", str(recorded)]
    for recipe, extra, message in (
        ("onestep:3", data, "--recipe onestep:3: the student takes 1 or 2 steps"),
        ("onestep:0", data, "--recipe onestep:0: the student takes 1 or 2 steps"),
        ("onestep:x", data, "--recipe onestep:x: the student takes 1 or 2 steps"),
        ("onestep", [], "--recipe onestep trains on recorded episodes: give --data DIR"),
        ("steps:1,onestep", data, "--recipe onestep: the student must take fewer steps than the 1"),
        ("steps:5,onestep:2", data, "--recipe onestep: 2 steps do not divide the teacher's 5"),
    ):
        res = runner.invoke(app, ["compress", "pi05:tiny", "--recipe", recipe, "-o", str(out), *extra, *FAST])
        assert res.exit_code == 2, (recipe, res.output)
        errors = [line for line in res.output.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and message in errors[0], (recipe, res.output)
        assert not out.exists() and not (tmp_path / ".a.work").exists(), recipe


def test_on_policy_rounds_add_the_students_own_observations(tiny: tuple) -> None:
    """With `rounds` and an explorer, the last stage runs in rounds and each later round trains on the
    observations the student met (here: what the explorer returns, labelled by the teacher)."""
    import copy

    from hotloop.families.pi.compression.onestep import PiFlowStudent
    from hotloop.families.pi.sampling import sample_time
    from hotloop.families.pi.targets import random_observation

    teacher, obs = tiny
    seen: list[int] = []

    def explore(student: torch.nn.Module, round_: int) -> object:
        seen.append(round_)
        return random_observation(teacher.cfg, 3, "cpu", 10 + round_)

    config = OnestepConfig(steps=6, batch=4, noise="zero", progressive=False, rounds=3, anchor_weight=0.0)
    details = train_onestep(
        PiFlowStudent(teacher), teacher, copy.deepcopy(teacher), obs, None, 1, 10, config, sample_time,
        explore=explore,
    )  # fmt: skip
    assert seen == [1, 2] and details["explored_observations"] == [3, 3]
    assert [(s["trajectories"], s["optimizer_steps"]) for s in details["stages"]] == [(6, 2), (9, 2), (12, 2)]


def test_closed_loop_observations_play_the_given_weights() -> None:
    """The student's rounds record what the policy meets in eval's own episode runner, with the weights
    it is given: a policy whose action head is zeroed drives elsewhere than the demo's own."""
    from hotloop.compress.closed_loop_observations import closed_loop_observations
    from hotloop.demos.conveyor import build_demo
    from hotloop.families import get_family
    from hotloop.targets import TargetOptions

    pi = get_family("pi")
    own, wins = closed_loop_observations("demo:conveyor", "conveyor-pick", pi, 1, 7, 2)
    weights = build_demo("demo:conveyor", TargetOptions()).pi.model.state_dict()
    weights = {k: torch.zeros_like(v) if k.startswith("action_out_proj") else v for k, v in weights.items()}
    still, still_wins = closed_loop_observations("demo:conveyor", "conveyor-pick", pi, 1, 7, 2, weights)
    assert own.batch > 1 and still.batch > 1 and wins == 1 and still_wins == 0
    assert torch.equal(own.state[0], still.state[0])  # the same start, then other states
    assert not torch.equal(own.state[1], still.state[1])
