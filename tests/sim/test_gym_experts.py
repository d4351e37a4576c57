"""Our scripted experts on third-party envs, recorded with `hotloop record` and evaluated with `hotloop eval`."""

import json

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from hotloop.closedloop.commands import add_commands as add_eval
from hotloop.datasets.commands import add_commands as add_record
from hotloop.datasets.lerobot_v3 import Dataset
from hotloop.sim.tasks import make_expert, make_task
from hotloop.train.commands import add_commands as add_train

pytest.importorskip("gymnasium_robotics", reason="the sims extra is not installed")
pytest.importorskip("gym_pusht", reason="the sims extra is not installed")


def _app():
    app = typer.Typer()
    for add in (add_record, add_eval, add_train):
        add(app)
    return app


def _play(task, seeds, task_kwargs=None):
    env = make_task(task, task_kwargs=task_kwargs)
    expert = make_expert(task, env)
    wins = []
    try:
        for seed in seeds:
            obs, _ = env.reset(seed=seed)
            expert.reset()
            success = False
            while not env.timed_out:
                success, failed = env.advance(expert.act(obs), 1)
                if success or failed:
                    break
                obs = env.observe(render=False)
            wins.append(success)
    finally:
        env.close()
    return wins


@pytest.mark.parametrize(
    "task, seeds", [("gym:FetchReach-v4", range(5)), ("gym:FetchPickAndPlace-v4", range(5))]
)
def test_fetch_experts_solve_their_tasks(task, seeds):
    assert all(_play(task, seeds))  # 50/50 and 50/50 measured (README); these seeds all succeed


def test_the_pusht_expert_pushes_the_t_home():
    assert all(_play("gym:gym_pusht/PushT-v0", [0, 5]))


def test_an_expert_refuses_another_task():
    env = make_task("gym:FetchReach-v4")
    try:
        from hotloop.sim.gym_experts import PushTExpert

        with pytest.raises(Exception, match="drives gym:PushT"):
            PushTExpert(env)
    finally:
        env.close()


@pytest.mark.slow
def test_record_then_eval_on_fetch_pick_and_place(tmp_path):
    out = tmp_path / "fetch"
    runner = CliRunner()
    r = runner.invoke(
        _app(), ["record", "--task", "gym:FetchPickAndPlace-v4", "--episodes", "2", "-o", str(out)]
    )
    assert r.exit_code == 0, r.output
    ds = Dataset(out)
    assert len(ds) == 2
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["fps"] == pytest.approx(25.0)
    assert info["features"]["action"]["names"] == ["target_x", "target_y", "target_z", "grip"]
    assert "observation.images.front" in info["features"]
    episode = ds.episode(0)
    assert episode.state.shape[1] == 28 and np.isfinite(episode.action).all()

    report = tmp_path / "eval.json"
    r = runner.invoke(
        _app(),
        [
            "eval", "expert:scripted", "--task", "gym:FetchPickAndPlace-v4", "--episodes", "2",
            "--workers", "1", "--latency", "fixed:40", "--json", str(report), "--quiet",
        ],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    result = json.loads(report.read_text())
    assert result["task"] == "gym:FetchPickAndPlace-v4" and result["errors"] == 0
    assert result["successes"] == 2  # one step (40 ms) late, the expert still places the block
    assert all(e["inferences"] > 1 for e in result["per_episode"])
    assert result["length_unit"] == "m"  # Fetch's targets are metres: jumps in mm, jerk in m/s³
    assert all("run" not in e for e in result["per_episode"])  # said once for the run, not per episode


@pytest.mark.slow
def test_pusht_figures_are_in_pixels_and_the_adaptation_is_reported(tmp_path):
    report = tmp_path / "eval.json"
    r = CliRunner().invoke(
        _app(),
        [
            "eval", "pi05:tiny", "--task", "gym:gym_pusht/PushT-v0", "--task-kwargs", '{"max_episode_steps": 12}',
            "--episodes", "1", "--workers", "1", "--latency", "fixed:0", "--json", str(report), "--quiet",
        ],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    result = json.loads(report.read_text())
    assert result["errors"] == 0 and result["length_unit"] == "px"
    # pi05:tiny takes 3 views of 224 px, a state and 32 actions: what PushT gives and takes is mapped.
    adaptation = result["adaptation"]
    assert adaptation["actions"].endswith("-> 2") and adaptation["views"][0]["task"] == "top"
    assert " px" in r.stdout and " mm" not in r.stdout  # PushT's workspace is pixels, never reported as mm


def test_record_pusht_with_task_kwargs(tmp_path):
    out = tmp_path / "pusht"
    r = CliRunner().invoke(
        _app(),
        [
            "record", "--task", "gym:gym_pusht/PushT-v0", "--task-kwargs", '{"max_episode_steps": 15}',
            "--episodes", "1", "-o", str(out),
        ],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["fps"] == pytest.approx(10.0)
    assert Dataset(out).episode(0).state.shape == (15, 5)  # 15 steps, the time limit from --task-kwargs
