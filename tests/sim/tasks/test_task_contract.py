"""The task-plugin contract (docs/tasks.md): a third-party package, installed through the `hotloop.tasks`
entry point, recorded and evaluated through the CLI; and what hotloop does with plugins that are wrong."""

from __future__ import annotations

import importlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from hotloop.closedloop.commands import add_commands as add_eval
from hotloop.datasets.commands import add_commands as add_record
from hotloop.errors import ConfigError
from hotloop.sim.tasks import check_task, make_expert, make_task
from hotloop.sim.tasks.protocol import HotloopTask, check_task_object

PKG = Path(__file__).parent / "plugin_pkg"
ENTRY_POINTS = {
    "drift": "make_drift",
    "raises": "make_raises",
    "none": "make_none",
    "type-error": "make_type_error",
    "incomplete": "make_incomplete",
    "reach": "make_drift",  # named like a built-in
}


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """The package in plugin_pkg/ installed as a distribution (a dist-info on sys.path), plus one entry
    point whose module does not exist."""
    shutil.copy(PKG / "hotloop_test_tasks.py", tmp_path)
    dist = tmp_path / "hotloop_test_tasks-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: hotloop-test-tasks\nVersion: 0.1\n")
    lines = [f"{name} = hotloop_test_tasks:{fn}" for name, fn in ENTRY_POINTS.items()]
    lines.append("missing = no_such_module_anywhere:make")
    (dist / "entry_points.txt").write_text("[hotloop.tasks]\n" + "\n".join(lines) + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    module = importlib.import_module("hotloop_test_tasks")
    for key in module.COUNTS:
        module.COUNTS[key] = 0
    yield module
    sys.modules.pop("hotloop_test_tasks", None)


def _app() -> typer.Typer:
    app = typer.Typer()
    add_record(app)
    add_eval(app)
    return app


def test_a_plugin_records_and_evaluates_through_the_cli(plugins, tmp_path):
    out = tmp_path / "ds"
    r = CliRunner().invoke(
        _app(),
        ["record", "--task", "drift", "--episodes", "2", "--image-size", "32", "-o", str(out), "--quiet"],
    )
    assert r.exit_code == 0, r.output
    assert "expert success 2/2" in r.output
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["action_bounds"] == {
        "names": ["action_0", "action_1"],
        "low": [-1.0, -1.0],
        "high": [1.0, 1.0],
    }
    assert info["recorder"]["image_size"] == 32 and info["recorder"]["expert"] == "GoalExpert"
    import pyarrow.parquet as pq

    actions = np.stack(
        pq.read_table(next((out / "data").rglob("*.parquet")), columns=["action"])
        .column("action")
        .to_pylist()
    )
    assert np.all(actions[:, 1] == 1.0)  # the expert asked for 5.0: the label is what was executed
    assert np.allclose(actions[:, 0], 0.5)

    plugins.COUNTS.update(renders=0, resets=0)
    result = tmp_path / "eval.json"
    r = CliRunner().invoke(
        _app(),
        ["eval", "expert:scripted", "--task", "drift", "--episodes", "2", "--workers", "0"]
        + ["--latency", "fixed:0", "--json", str(result), "--quiet"],
    )
    assert r.exit_code == 0, r.output
    run = json.loads(result.read_text())
    assert run["successes"] == 2 and run["errors"] == 0 and run["length_unit"] == "m"
    # Jumps on the executed (clipped) targets: the expert's y of 5.0 would be a 4-unit jump otherwise.
    assert run["chunk_discontinuity"] is not None and run["chunk_discontinuity"] < 0.05
    # A state-only expert: only resets render (they return an observation); no tick of an episode does.
    assert plugins.COUNTS["renders"] <= plugins.COUNTS["resets"]


def test_make_is_told_its_name_and_the_image_size_and_the_profile_holds_still(plugins, capsys):
    task = make_task("drift", image_size=48)
    try:
        told = task.env.unwrapped.told
        assert told == {"task_name": "drift", "image_size": 48}
        assert isinstance(task, HotloopTask) and check_task_object(task, "drift") is task
        assert task.task_spec.images[0].height == 48
        obs, _ = task.reset(seed=3)
        start = obs["state"][:2].copy()
        task.advance(task.hold_action(), 40)  # the held target is where the hand is: it stays there
        assert np.abs(task.state()[:2] - start).max() < 1e-9
    finally:
        task.close()
    assert "no hotloop profile" not in capsys.readouterr().err and task.profile_note is None
    # The same env without its profile: the generic one is announced (by the command that runs it, once;
    # not by every worker that builds the task), and holding a delta drifts.
    bare = make_task("drift", task_kwargs={"profile": False})
    try:
        assert "no hotloop profile" in bare.profile_note and not capsys.readouterr().err
        obs, _ = bare.reset(seed=3)
        bare.advance(np.array([0.5, 0.0]), 20)  # "hold 0.5" is a velocity to a delta env
        assert bare.state()[0] - obs["state"][0] > 0.4
    finally:
        bare.close()


def test_make_expert_of_the_plugins_env_is_honoured(plugins):
    task = make_task("drift")
    try:
        assert type(make_expert("drift", task)).__name__ == "GoalExpert"
    finally:
        task.close()


def test_an_env_that_ignores_its_seed_is_refused_by_name(plugins):
    with pytest.raises(ConfigError, match=r"'drift' ignores reset\(seed=\.\.\.\)"):
        make_task("drift", task_kwargs={"seeded": False})


def test_duplicate_starts_are_reported(plugins, tmp_path):
    from hotloop.datasets.recorder import record

    result = record("drift", 4, tmp_path / "ds", task_kwargs='{"starts": 1}')
    assert result["duplicate_starts"] == 3 and result["successes"] == 4
    result = record("drift", 3, tmp_path / "ds2")
    assert result["duplicate_starts"] == 0


def test_the_env_is_never_stepped_past_truncated(plugins):
    task = make_task("drift", task_kwargs={"end_after": 5, "goal": 0.9})
    try:
        task.reset(seed=0)
        assert task.advance(np.array([-1.0, 0.0]), 10) == (False, False)
        assert task.tick == 5 and task.timed_out
        task.advance(np.array([-1.0, 0.0]), 3)
        assert task.tick == 5 and plugins.COUNTS["steps_after_end"] == 0
    finally:
        task.close()


def test_nan_observations_are_task_faults_not_policy_failures(plugins, tmp_path):
    result = tmp_path / "eval.json"
    r = CliRunner().invoke(
        _app(),
        ["eval", "expert:scripted", "--task", "drift", "--task-kwargs", '{"nan_after": 3, "goal": 0.9}']
        + ["--episodes", "2", "--workers", "0", "--latency", "fixed:0", "--json", str(result), "--quiet"],
    )
    assert r.exit_code == 1, r.output
    run = json.loads(result.read_text())
    assert run["errors"] == 2 and run["completed"] == 0 and run["failures"] == 0
    assert "non-finite observation at tick 3" in run["per_episode"][0]["error"]
    r = CliRunner().invoke(
        _app(),
        ["record", "--task", "drift", "--task-kwargs", '{"nan_after": 3, "goal": 0.9}', "--episodes", "1"]
        + ["-o", str(tmp_path / "ds"), "--quiet"],
    )
    assert r.exit_code == 2 and "non-finite observation" in r.output and r.exception is not None
    assert not (tmp_path / "ds" / "meta" / "info.json").exists()


@pytest.mark.parametrize(
    ("task", "kwargs", "message"),
    [
        ("raises", None, "its make() raised the simulator's licence file is missing (ValueError)"),
        ("none", None, "its make() returned None"),
        ("missing", None, "cannot be imported: No module named 'no_such_module_anywhere'"),
        ("type-error", None, "its make() raised object of type 'int' has no len() (TypeError)"),
        ("drift", '{"speed": 2}', "--task-kwargs for plugin task 'drift' were not accepted"),
        ("drift", '{"render_mode": "human"}', "render_mode 'human' opens a window"),
        ("incomplete", None, "lacks task_name, prompt, config, action_space, tick, reset"),
    ],
)
def test_broken_plugins_are_one_line_errors_in_record_and_eval(plugins, tmp_path, task, kwargs, message):
    extra = ["--task-kwargs", kwargs] if kwargs else []
    for args in (
        ["record", "--task", task, "--episodes", "1", "-o", str(tmp_path / "ds"), "--quiet"],
        ["eval", "expert:scripted", "--task", task, "--episodes", "1", "--workers", "0", "--quiet"],
    ):
        r = CliRunner().invoke(_app(), [*args, *extra])
        assert r.exit_code == 2, r.output
        errors = [line for line in r.output.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and message in errors[0], r.output
        assert "Traceback" not in r.output


def test_a_plugin_named_like_a_built_in_is_named_in_a_warning(plugins, capsys):
    check_task("reach")
    err = capsys.readouterr().err
    assert "plugin task 'reach' (hotloop_test_tasks:make_drift)" in err and "built-in runs" in err


@pytest.mark.parametrize(
    ("task", "kwargs", "message"),
    [
        ("gym:CartPole-v1", None, "Discrete action space"),
        ("gym:Pendulum-v1", {"max_episode_steps": 0}, "max_episode_steps must be an integer >= 1"),
    ],
)
def test_gym_envs_hotloop_cannot_run_are_one_line_errors(task, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        make_task(task, task_kwargs=kwargs)


def test_builtin_tasks_satisfy_the_protocol():
    env = make_task("reach")
    try:
        assert isinstance(env, HotloopTask) and check_task_object(env, "reach") is env
    finally:
        env.close()


MIRROR_SCENE = """
<mujoco>
  <asset>
    <material name="mirror" reflectance="0.9" rgba="0.3 0.3 0.3 1"/>
  </asset>
  <worldbody>
    <light pos="0 0 3" dir="0 0 -1"/>
    <geom type="plane" size="2 2 0.1" material="mirror"/>
    <geom type="box" pos="0.3 0 0.3" size="0.1 0.1 0.3" rgba="1 0.2 0.2 1"/>
  </worldbody>
</mujoco>
"""


class MirrorEnv:
    """The least a MuJoCo gymnasium env offers the views: `unwrapped.model` and `unwrapped.data`."""

    def __init__(self):
        import mujoco

        self.model = mujoco.MjModel.from_xml_string(MIRROR_SCENE)
        self.data = mujoco.MjData(self.model)
        mujoco.mj_forward(self.model, self.data)
        self.unwrapped = self


def test_a_profile_rotates_its_cameras_and_turns_reflections_on_only_when_asked():
    from hotloop.sim.tasks.gym_profiles import GymProfile
    from hotloop.sim.tasks.mj_views import FreeCamera

    env = MirrorEnv()
    cams = (
        ("east", FreeCamera((0, 0, 0.2), 2.0, 0.0, -25.0)),
        ("west", FreeCamera((0, 0, 0.2), 2.0, 180.0, -25.0)),
    )
    images = {}
    for reflections in (False, True):
        views = GymProfile(cameras=cams, reflections=reflections).views(env, 32)
        try:
            images[reflections] = views.render()
        finally:
            views.close()
    plain, mirrored = images[False], images[True]
    assert sorted(plain) == ["east", "west"] and plain["east"].shape == (32, 32, 3)
    assert not np.array_equal(plain["east"], plain["west"])  # the box seen from opposite sides
    assert not np.array_equal(plain["east"], mirrored["east"])  # the floor reflects the box only when asked
    assert GymProfile().reflections is False


def test_a_task_written_for_a_newer_protocol_is_refused(plugins):
    task = make_task("drift")
    try:
        task.hotloop_task_protocol = 2
        with pytest.raises(ConfigError, match="written for task protocol 2; this hotloop has version 1"):
            check_task_object(task, "drift")
    finally:
        task.close()


def test_eval_reports_duplicate_starts_and_its_interval_counts_the_distinct_ones(plugins, tmp_path):
    from hotloop.closedloop.metrics import wilson_interval

    result = tmp_path / "eval.json"
    r = CliRunner().invoke(
        _app(),
        ["eval", "expert:scripted", "--task", "drift", "--task-kwargs", '{"starts": 2}', "--episodes", "8"]
        + ["--workers", "0", "--latency", "fixed:0", "--json", str(result), "--quiet"],
    )
    assert r.exit_code == 0, r.output
    run = json.loads(result.read_text())
    assert run["duplicate_starts"] == 6 and run["successes"] == run["completed"] == 8
    # Eight episodes from two starts are two trials: the interval is 8/8's over 2, not over 8.
    assert run["ci_trials"] == 2
    assert run["success_ci95"] == pytest.approx(list(wilson_interval(2, 2)))
    assert run["success_ci95"][0] < wilson_interval(8, 8)[0] - 0.3
    assert "6 of 8 episodes" in r.output and "the 95% interval counts the 2 distinct starts" in r.output


def test_the_generic_profile_note_is_said_once_per_run(plugins, capsys):
    """Every worker builds its own task; eval's driver says the note once, from their run info."""
    from hotloop.closedloop.eval_run import EvalRequest, run_eval

    request = EvalRequest(
        target="expert:scripted", task="drift", strategy="chunk", latency="fixed:0", episodes=2, workers=0,
        task_kwargs='{"profile": false, "end_after": 3}',
    )  # fmt: skip
    run_eval(request, progress=False)
    err = capsys.readouterr().err
    assert err.count("no hotloop profile") == 1, err


def test_a_baseline_comparison_pairs_each_start_once(plugins):
    """Eight seeds from two starts are two paired trials in `--baseline`'s McNemar test, not eight."""
    from hotloop.closedloop.baseline import compare_point
    from hotloop.closedloop.eval_run import EvalRequest, run_eval

    request = EvalRequest("expert:scripted", task="drift", task_kwargs='{"starts": 2}', latency="fixed:0",
                          episodes=8, workers=0)  # fmt: skip
    then, now = run_eval(request, progress=False), run_eval(request, progress=False)
    assert then["duplicate_starts"] == 6
    assert compare_point(then, now).paired.pairs == 2
