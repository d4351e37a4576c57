"""`onestep[:K]`: the few-step student of a flow policy (hotloop.compress.onestep), end to end on pi05:tiny
and in its parts: the trajectories it learns from, the loss falling, the plan running one step of it."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

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


def test_compress_onestep_writes_a_one_step_plan_of_the_student(recorded: Path, compress_rows) -> None:
    """End to end on pi05:tiny with recorded episodes: the artifact runs one step, its actions are one Euler
    step of the student weights it carries, and the report says what was learnt from."""
    from safetensors.torch import load_file

    from hotloop.families.pi.compression.onestep import PiFlowStudent
    from hotloop.families.pi.targets import build_model, random_observation
    from hotloop.models.configs import get_pi_config
    from hotloop.runtime.engine import Engine

    out, rows = compress_rows(
        "pi05:tiny", "onestep", "--data", str(recorded), "--distill-steps", "10", "--distill-batch", "4",
        "--distill-lr", "1e-5", "--onestep-lr", "1e-3", "--tolerance", "cos:0.01", *FAST,
    )  # fmt: skip
    assert [(r["step"], r["num_steps"]) for r in rows] == [("reference", 10), ("onestep", 1)]
    details = rows[1]["details"]
    assert details["data"] == {"source": "--data frames", "observations": 4}
    assert details["config"]["lr"] == 1e-3  # --onestep-lr, not --distill-lr
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


def test_bad_onestep_input_exits_2_before_any_work(recorded: Path, compress_refuses) -> None:
    data = ["--data", str(recorded)]
    for recipe, extra, message in (
        ("onestep:3", data, "--recipe onestep:3: the student takes 1 or 2 steps"),
        ("onestep:0", data, "--recipe onestep:0: the student takes 1 or 2 steps"),
        ("onestep:x", data, "--recipe onestep:x: the student takes 1 or 2 steps"),
        ("onestep", [], "--recipe onestep trains on recorded episodes: give --data DIR"),
        ("steps:1,onestep", data, "--recipe onestep: the student must take fewer steps than the 1"),
        ("steps:5,onestep:2", data, "--recipe onestep: 2 steps do not divide the teacher's 5"),
        ("onestep", [*data, "--onestep-rounds-under", "warp@fixed:0"], "strategy 'warp' is not known"),
        ("onestep", [*data, "--onestep-rounds-under", "async"], "give STRATEGY@LATENCY pairs"),
        ("onestep", [*data, "--onestep-rounds-under", "sync@slow"], "--onestep-rounds-under: "),
        ("onestep", [*data, "--onestep-lr", "0"], "--onestep-lr must be a positive number (got 0.0)"),
        (
            "onestep",
            [*data, "--onestep-average", "1"],
            "--onestep-average must be 0 (off) or a decay in (0, 1)",
        ),
        ("steps:2", ["--first-action-weight", "2"], "--first-action-weight 2: no step of --recipe reads it"),
    ):
        compress_refuses("pi05:tiny", recipe, message, *extra, *FAST)
    # Diffusion's onestep distils a sampler, not a flow's first action: the weight would be ignored there
    compress_refuses(
        "demo:conveyor-diffusion", "ddim:10,onestep:2", "--first-action-weight 2: no step of --recipe reads it",
        *data, "--first-action-weight", "2", *FAST,
    )  # fmt: skip


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


def test_prefix_cache_rows_are_the_prefix_of_those_observations(tiny: tuple) -> None:
    """The prefix is computed once per observation and gathered per batch: the gathered rows give the
    velocities the prefix of just those observations gives."""
    from hotloop.compress.onestep import prefixes
    from hotloop.families.pi.compression.onestep import PiFlowStudent

    model, obs = tiny
    flow = PiFlowStudent(model)
    cache = prefixes(flow, model, obs, rows=4)  # two pieces, stacked
    rows = [5, 1, 3]
    part = flow.select(obs, rows)
    x, t = (
        torch.randn(3, *flow.chunk_shape, generator=torch.Generator().manual_seed(0)),
        torch.full((3,), 0.7),
    )
    with torch.no_grad():
        want = flow.velocity(model, flow.prefix(model, part), part, x, t)
        got = flow.velocity(model, flow.select_prefix(cache, rows), part, x, t)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_smolvla_prefixes_of_other_prompt_widths_stack_to_the_same_velocities() -> None:
    """A SmolVLA prefix from a prompt of fewer slots, padded with masked positions to stack with a wider
    one, gives the velocities of the observation padded to the wider prompt (what `concat` batches)."""
    import dataclasses

    from hotloop.families.smolvla.compression import SmolVLAFlowStudent
    from hotloop.families.smolvla.observation import pad_prompt, random_observation
    from hotloop.families.smolvla.targets import SIZES, build_model, make_config

    cfg = make_config("tiny", dataclasses.replace(SIZES["tiny"], text_layers=2))
    model = build_model(cfg, torch.float32, 0).eval()
    flow = SmolVLAFlowStudent(model)
    narrow, wide = random_observation(cfg, 2, 4, 1), random_observation(cfg, 2, 9, 2)
    with torch.no_grad():
        stacked = flow.stack_prefix([flow.prefix(model, narrow), flow.prefix(model, wide)])
        tokens, masks = pad_prompt(narrow.lang_tokens, narrow.lang_masks, 9)
        padded = dataclasses.replace(narrow, lang_tokens=tokens, lang_masks=masks)
        x = torch.randn(2, *flow.chunk_shape, generator=torch.Generator().manual_seed(0))
        t = torch.full((2,), 0.6)
        want = flow.velocity(model, flow.prefix(model, padded), padded, x, t)
        got = flow.velocity(model, flow.select_prefix(stacked, [0, 1]), padded, x, t)
    assert stacked[2].shape[0] == 4
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_the_final_chunk_is_judged_on_the_executed_dimensions(tiny: tuple) -> None:
    """With `action_dim`, the padded dimensions of the final chunk (which the plan drops) leave the loss
    alone; without it they count."""
    from hotloop.compress.onestep import prefixes, trajectory_loss
    from hotloop.families.pi.compression.onestep import PiFlowStudent

    model, obs = tiny
    flow = PiFlowStudent(model)
    traj = teacher_trajectories(flow, model, obs, 10, OnestepConfig(noise="zero"))
    moved = traj.states.clone()
    moved[:, -1, :, 3:] += 1.0  # only the padding of the chunk (dimensions 3..) differs
    cache = prefixes(flow, model, obs)
    with torch.no_grad():
        loss = [trajectory_loss(flow, model, obs, cache, traj.starts, target, 1, 10, dim)
                for target in (traj.states, moved) for dim in (3, None)]  # fmt: skip
    assert torch.equal(loss[0], loss[2]) and loss[3] > loss[1] + 0.5


def test_the_first_action_weight_weighs_the_executed_first_action(tiny: tuple) -> None:
    """`--first-action-weight w`: the final term becomes (chunk + w first action) / (1 + w). A target that
    differs from the teacher's own chunk in the first action alone by d adds w d^2 / (1 + w) per
    executed element; one that differs only later costs less than unweighted."""
    from hotloop.compress.onestep import prefixes, trajectory_loss
    from hotloop.families.pi.compression.onestep import PiFlowStudent

    model, obs = tiny
    flow = PiFlowStudent(model)
    traj = teacher_trajectories(flow, model, obs, 10, OnestepConfig(noise="zero"))
    cache = prefixes(flow, model, obs)
    horizon = traj.states.shape[2]
    first, later = traj.states.clone(), traj.states.clone()
    first[:, -1, 0, :3] += 0.1
    later[:, -1, 1, :3] += 0.1

    def loss(target: torch.Tensor, w: float) -> float:
        with torch.no_grad():
            return float(trajectory_loss(flow, model, obs, cache, traj.starts, target, 10, 10, 3, w))

    exact = loss(traj.states, 0.0)  # the teacher's own 10 steps: nothing to learn
    assert exact < 1e-8
    # 10 student steps: the final term is 1 of 10 and h^2 = 0.01, so each term is scaled by 10
    assert loss(first, 0.0) == pytest.approx(10 * 0.01 / horizon, rel=1e-3)
    assert loss(first, 4.0) == pytest.approx(10 * (0.01 / horizon + 4 * 0.01) / 5, rel=1e-3)
    assert loss(later, 4.0) == pytest.approx(10 * 0.01 / horizon / 5, rel=1e-3)


def test_a_learning_rate_schedule_scales_every_step() -> None:
    """`lr_at` sets the rate of each step from the step alone: a factor 0 leaves the weights as they were,
    and the cosine ends at its floor."""
    from hotloop.compress.onestep import StageSettings, cosine_lr
    from hotloop.nn.resumable import train_resumable

    net = torch.nn.Linear(3, 1)
    before = [p.detach().clone() for p in net.parameters()]

    def loss_fn(gen: torch.Generator) -> torch.Tensor:
        return net(torch.randn(4, 3, generator=gen)).square().mean()

    train_resumable(net, loss_fn, StageSettings(3, 0.1, 0, 10), None, "t", lr_at=lambda i: 0.0)
    assert all(torch.equal(a, b) for a, b in zip(before, net.parameters(), strict=True))
    train_resumable(net, loss_fn, StageSettings(3, 0.1, 0, 10), None, "t", lr_at=lambda i: 1.0)
    assert not all(torch.equal(a, b) for a, b in zip(before, net.parameters(), strict=True))
    schedule = cosine_lr(100, floor=0.1)
    assert schedule(0) == 1.0 and abs(schedule(50) - 0.55) < 1e-9 and abs(schedule(100) - 0.1) < 1e-9


def test_the_weight_average_is_the_polyak_average_and_resumes_with_the_checkpoint(tmp_path: Path) -> None:
    """`WeightAverage`: after each step a <- d a + (1 - d) p, d warmed up as min(decay, (1 + n) / (10 + n));
    saved with the checkpoint, so an interrupted run resumes to the average of the uninterrupted one."""
    from hotloop.compress.onestep import StageSettings
    from hotloop.nn.resumable import WeightAverage, train_resumable

    def run(folder: Path | None, stop_at: int | None = None) -> tuple[torch.nn.Linear, WeightAverage, list]:
        torch.manual_seed(0)
        net = torch.nn.Linear(3, 1)
        average = WeightAverage(list(net.parameters()), 0.9)
        trail = [[p.detach().clone() for p in net.parameters()]]

        def loss_fn(gen: torch.Generator) -> torch.Tensor:
            return (net(torch.randn(4, 3, generator=gen)) - 1).square().mean()

        def on_step(step: int, loss: float) -> None:
            trail.append([p.detach().clone() for p in net.parameters()])
            if step == stop_at:
                raise KeyboardInterrupt

        with contextlib.suppress(KeyboardInterrupt):  # the interrupted run stops here, its checkpoint kept
            train_resumable(
                net, loss_fn, StageSettings(6, 0.1, 0, 2), folder, "avg", on_step, average=average
            )
        return net, average, trail

    net, average, trail = run(None)
    want = [p.clone() for p in trail[0]]
    for n, weights in enumerate(trail[1:]):
        d = min(0.9, (1 + n) / (10 + n))
        want = [d * a + (1 - d) * w for a, w in zip(want, weights, strict=True)]
    for got, expected in zip(average.average, want, strict=True):
        torch.testing.assert_close(got, expected)
    assert not torch.equal(average.average[0], net.weight)
    run(tmp_path, stop_at=3)  # interrupted after 3 of 6 steps: the checkpoint holds the average too
    _, resumed, _ = run(tmp_path)
    assert resumed.updates == 6
    for got, expected in zip(resumed.average, average.average, strict=True):
        torch.testing.assert_close(got, expected)
    last = [p.detach().clone() for p in net.parameters()]
    held = [a.clone() for a in average.average]
    average.swap()  # the parameters take the average's values, and the average the last step's
    assert torch.equal(net.weight, held[0]) and torch.equal(average.average[0], last[0])
    with pytest.raises(ConfigError, match="decay must be in"):
        WeightAverage(list(net.parameters()), 1.0)


def test_a_student_with_a_weight_average_ships_the_average(tiny: tuple) -> None:
    """`average` > 0: the student's denoising weights at the end are the moving average of its steps
    (here decay 0.5 over 4 steps: between the start and the last step, not the last step's)."""
    import copy

    from hotloop.families.pi.compression.onestep import PiFlowStudent
    from hotloop.families.pi.sampling import sample_time

    teacher, obs = tiny
    flow = PiFlowStudent(teacher)
    trained = {}
    for decay in (0.0, 0.5):
        student = copy.deepcopy(teacher)
        config = OnestepConfig(steps=4, batch=4, lr=1e-3, noise="zero", anchor_weight=0.0, average=decay)
        details = train_onestep(flow, teacher, student, obs, None, 1, 10, config, sample_time)
        assert details["config"]["average"] == decay
        trained[decay] = [p.detach().clone() for p in flow.denoising_parameters(student)]
    start = flow.denoising_parameters(teacher)
    moved_last = sum(float((a - s).abs().sum()) for a, s in zip(trained[0.0], start, strict=True))
    moved_avg = sum(float((a - s).abs().sum()) for a, s in zip(trained[0.5], start, strict=True))
    assert 0 < moved_avg < moved_last  # the same steps (same seed), averaged with the earlier weights
    with pytest.raises(ConfigError, match="--onestep-average must be 0"):
        OnestepConfig(average=1.5)


def test_closed_loop_observations_every_control_period_under_async() -> None:
    """Under async at 200 ms an episode asks for a chunk every few periods; `every_period` records the
    observation of each period the robot went through instead (the first one is the start, as before)."""
    from hotloop.compress.closed_loop_observations import closed_loop_observations
    from hotloop.families import get_family

    pi = get_family("pi")
    condition = ("async", "fixed:200")
    asked, _ = closed_loop_observations("demo:conveyor", "conveyor-pick", pi, 1, 7, 2, None, condition)
    every, _ = closed_loop_observations("demo:conveyor", "conveyor-pick", pi, 1, 7, 2, None, condition, True)
    assert every.batch > 2 * asked.batch
    assert torch.equal(every.state[0], asked.state[0]) and torch.equal(every.images[0], asked.images[0])


def test_student_rounds_play_each_execution_in_turn() -> None:
    """Round r of the student's own episodes runs under the r-th of `--onestep-rounds-under` (in turn),
    with every control period's observation where the strategy is not sync."""
    from hotloop.compile.validate import parse_tolerance
    from hotloop.compress.closed_loop_observations import closed_loop_observations
    from hotloop.compress.recipe import RecipeConfig, parse_recipe, student_rollouts
    from hotloop.demos.conveyor import build_demo
    from hotloop.families import get_family
    from hotloop.targets import TargetOptions

    pi = get_family("pi")
    config = RecipeConfig(
        target="demo:conveyor", recipe=parse_recipe("steps:2"), tolerance=parse_tolerance("cos:0.5"),
        out=Path("unused"), distill_episodes=1, seed=7,
        onestep_rounds_under=(("async", "fixed:200"), ("sync", "fixed:0")),
    )  # fmt: skip
    student = build_demo("demo:conveyor", TargetOptions()).pi.model
    explore = student_rollouts(config, pi, 2)
    first, second = explore(student, 1), explore(student, 2)
    want, _ = closed_loop_observations(
        "demo:conveyor", "conveyor-pick", pi, 1, 7 + 1000, 2, None, ("async", "fixed:200"), every_period=True
    )
    assert torch.equal(first.state, want.state)
    sync, _ = closed_loop_observations("demo:conveyor", "conveyor-pick", pi, 1, 7 + 2000, 2)
    assert torch.equal(second.state, sync.state)
