"""A third-party task gets a learned policy without renaming anything (issue 38, class 6).

The task is `slider` (plugin_pkg/hotloop_test_mujoco_tasks.py): a real MuJoCo scene behind the documented
plugin contract, whose cameras are `corner` and `gripper` and whose state is 3 numbers. Every
`train-demo` family trains on its recording under those names and that state (a step or two: what is
tested is what the checkpoint reads, not how well it learnt), the result runs on the task with `hotloop
eval`, and a policy/task pair whose state widths differ is refused by name unless `--fit-state` says to
run it. Slow-ish (a few seconds of training per family on 2 cores).
"""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from hotloop.closedloop.commands import add_commands as add_eval
from hotloop.train.commands import add_commands as add_train

CAMERAS = ["corner", "gripper"]


def _app() -> typer.Typer:
    app = typer.Typer()
    add_train(app)
    add_eval(app)
    return app


def _run(*args: str):
    return CliRunner().invoke(_app(), [str(a) for a in args])


def _train(dataset, out, *args: str, steps: int = 2):
    r = _run("train-demo", "--dataset", dataset, "-o", out, "--steps", str(steps), "--threads", "1", *args)
    assert r.exit_code == 0, r.output
    return r


def _eval(target, tmp_path, *args: str, code: int = 0) -> tuple[dict | None, str]:
    out = tmp_path / "eval.json"
    r = _run("eval", target, "--task", "slider", "--episodes", "1", "--workers", "0", "--latency", "fixed:0",
             "--json", out, "--quiet", *args)  # fmt: skip
    assert r.exit_code == code, r.output
    return (json.loads(out.read_text()) if out.exists() else None), r.output


def _image_features(checkpoint) -> list[str]:
    features = json.loads((checkpoint / "config.json").read_text())["input_features"]
    return [k.removeprefix("observation.images.") for k in features if k.startswith("observation.images.")]


@pytest.fixture(scope="module")
def slider_act(slider_dataset, tmp_path_factory):
    """An ACT checkpoint `train-demo --family act` trained on the slider's recording (2 steps), and its output."""
    out = tmp_path_factory.mktemp("act") / "act"
    return out, _train(slider_dataset, out, "--family", "act").output


def test_act_trains_on_the_datasets_own_cameras_and_runs_on_its_task(slider_act, tmp_path):
    out, output = slider_act
    assert _image_features(out) == CAMERAS
    config = json.loads((out / "config.json").read_text())
    assert config["input_features"]["observation.state"]["shape"] == [3]
    assert "--task slider" in output  # the hint names the task the episodes came from
    run, _ = _eval(out, tmp_path)
    assert run["errors"] == 0 and run["completed"] == 1
    views = run["adaptation"]["views"]
    assert [(v["task"], v["policy"]) for v in views] == [("corner", "corner"), ("gripper", "gripper")]
    assert run["adaptation"]["state"] == "3 -> 3" and run["adaptation"]["note"] is None


def test_views_chooses_among_the_datasets_cameras_and_a_name_it_lacks_is_refused(slider_dataset, tmp_path):
    _train(slider_dataset, tmp_path / "one", "--family", "act", "--views", "gripper")
    assert _image_features(tmp_path / "one") == ["gripper"]
    for family in ("act", "diffusion", "smolvla"):
        r = _run("train-demo", "--family", family, "--dataset", slider_dataset, "-o", tmp_path / family,
                 "--views", "top,gripper")  # fmt: skip
        assert r.exit_code == 2, r.output
        assert (
            "--views top,gripper: the dataset" in r.output
            and "no top view (its cameras: corner, gripper)" in r.output
        )
        assert not (tmp_path / family).exists()  # refused before anything was written


def test_diffusion_reads_the_datasets_first_camera_by_default(slider_dataset, tmp_path):
    _train(slider_dataset, tmp_path / "dp", "--family", "diffusion", steps=1)
    assert _image_features(tmp_path / "dp") == ["corner"]


def test_smolvla_trains_on_both_cameras_and_runs_on_its_task(slider_dataset, tmp_path):
    out = tmp_path / "smolvla"
    _train(slider_dataset, out, "--family", "smolvla", steps=1)
    assert _image_features(out) == CAMERAS
    run, _ = _eval(out, tmp_path)
    assert run["errors"] == 0 and run["adaptation"]["state"] == "3 -> 3"


def test_pi_vision_trains_in_the_datasets_layout_and_runs_with_its_transforms(slider_dataset, tmp_path):
    out = tmp_path / "vision"
    _train(slider_dataset, out, "--variant", "vision", steps=1)
    meta = json.loads((out / "demo.json").read_text())
    assert meta["views"] == CAMERAS and meta["task"] == "slider"
    assert meta["state_layout"] == "dataset" and meta["action_layout"] == "absolute"
    assert meta["state_names"] == ["state_0", "state_1", "state_2"]
    # `hotloop eval FOLDER` runs a train-demo folder through its own wrapper (views, state, prompt)
    run, _ = _eval(out, tmp_path)
    assert run["errors"] == 0 and run["adaptation"]["state"] == "3 -> 3"
    assert [v["task"] for v in run["adaptation"]["views"]] == CAMERAS


def test_pi_state_refuses_another_tasks_layout_by_name(slider_dataset, tmp_path):
    for variant in ("state", "chain"):
        r = _run("train-demo", "--variant", variant, "--dataset", slider_dataset, "-o", tmp_path / variant)
        assert r.exit_code == 2, r.output
        assert f"--variant {variant} trains demo:conveyor's conveyor-pick layout" in r.output
        assert "[state_0, state_1, state_2]" in r.output and "--variant vision" in r.output
        assert not (tmp_path / variant).exists()


def test_a_trained_policy_on_a_task_of_another_state_width_is_refused_unless_asked(slider_act, tmp_path):
    out = slider_act[0]
    wide = ("--task-kwargs", '{"extra_state": 36}')  # the same scene, 39 numbers of state
    run, output = _eval(out, tmp_path, *wide, code=2)
    assert run is None
    assert "trained on a state of 3 numbers and the task gives 39" in output and "--fit-state" in output
    run, output = _eval(out, tmp_path, *wide, "--fit-state")
    assert run["errors"] == 0 and run["adaptation"]["state"] == "39 -> 3"
    assert "note: --fit-state: " in output and "which would be cut to 3" in output
    assert "cut to 3" in run["adaptation"]["note"]


@pytest.mark.parametrize("target", ["pi05:tiny"])
def test_random_weights_still_take_any_state(slider_plugin, tmp_path, target):
    run, _ = _eval(target, tmp_path, "--steps", "1")
    assert run["errors"] == 0 and run["adaptation"]["note"] is None
