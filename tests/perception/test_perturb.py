import json

import numpy as np
import pytest
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.closedloop.latency import parse_latency
from hotloop.errors import ConfigError
from hotloop.sim.perturb import _blur, attach_perturbations, parse_perturb
from hotloop.sim.tasks import make_task


class Recorder:
    horizon = 4

    def __init__(self) -> None:
        self.obs = None

    def reset(self) -> None:
        pass

    def infer(self, obs):
        self.obs = obs
        return {"actions": np.tile(np.array([*obs["state"][:3], 0.0]), (self.horizon, 1))}


def test_specs_are_named_and_checked():
    got = parse_perturb("lighting:0.3, camera-shift:0.02,drop-frames:0")
    assert [(p.name, p.value, p.kind) for p in got] == [
        ("lighting", 0.3, "scene"),
        ("camera-shift", 0.02, "scene"),
        ("drop-frames", 0.0, "sensor"),
    ]
    for bad, words in (
        ("fog:1", "unknown perturbation 'fog'"),
        ("lighting:0", r"\(0, 3\]"),
        ("camera-shift:0.5", r"\[0, 0.2\]"),
        ("drop-frames:1", r"\[0, 1\)"),
        ("blur", "blur takes a value"),
        ("blur:1,blur:2", "twice"),
        ("", "names no perturbation"),
    ):
        with pytest.raises(ConfigError, match=words):
            parse_perturb(bad)


def test_scene_perturbations_are_seeded_and_reset_to_the_nominal_scene_each_episode():
    env = make_task("conveyor-pick")
    nominal, _ = env.reset(seed=4)
    policy, _ = attach_perturbations(
        Recorder(), env, "lighting:0.4,camera-shift:0.03", parse_latency("fixed:0")
    )
    first, _ = env.reset(seed=4)
    env.reset(seed=5)
    again, _ = env.reset(seed=4)
    np.testing.assert_array_equal(first["images"]["top"], again["images"]["top"])  # same seed, same scene
    assert first["images"]["top"].mean() < 0.8 * nominal["images"]["top"].mean()  # a dimmer room
    np.testing.assert_array_equal(first["state"], nominal["state"])  # the world moved, not the robot
    assert env.perturbation["lighting"] == 0.4
    env.close()
    with pytest.raises(ConfigError, match="belt"):
        attach_perturbations(Recorder(), make_task("reach"), "belt-speed:1.5", parse_latency("fixed:0"))


def test_sensor_perturbations_reach_the_policy_not_the_world():
    env = make_task("conveyor-pick")
    inner = Recorder()
    policy, latency = attach_perturbations(
        inner, env, "image-noise:0.1,state-noise:0.01,latency-jitter:30", parse_latency("fixed:50")
    )
    obs, _ = env.reset(seed=2)
    policy.infer(obs)
    seen = inner.obs
    assert np.abs(seen["images"]["top"].astype(int) - obs["images"]["top"]).mean() > 10
    assert 0 < np.abs(seen["state"] - obs["state"]).max() < 0.06
    delays = [latency.sample_ms(0.0, np.random.default_rng(i)) for i in range(200)]
    assert min(delays) >= 50.0 and np.mean(delays) == pytest.approx(80.0, abs=8.0)  # exponential, mean 30
    assert latency.describe()["jitter"]["mean_ms"] == 30.0
    env.close()
    img = np.zeros((9, 9, 3), dtype=np.uint8)
    img[4, 4] = 255
    blurred = _blur(img, 1.0)
    assert blurred[4, 4, 0] < 255 and blurred[4, 5, 0] > 0 and blurred[0, 0, 0] == 0


def test_eval_sweeps_perturbations_one_point_each_and_refuses_bad_names(tmp_path):
    out = tmp_path / "r.json"
    args = ["eval", "expert:scripted", "--episodes", "2", "--workers", "0", "--quiet", "--latency", "fixed:0"]
    r = CliRunner().invoke(
        app, [*args, "--sweep-perturb", "drop-frames:0.5,lighting:0.5", "--json", str(out)]
    )
    assert r.exit_code == 0, r.output
    runs = json.loads(out.read_text())["runs"]
    assert [run["request"]["perturb"] for run in runs] == [None, "drop-frames:0.5", "lighting:0.5"]
    assert [run.get("perturbation") for run in runs] == [None, {"drop-frames": 0.5}, {"lighting": 0.5}]
    assert all(run["seeds"] == [0, 1] for run in runs)
    assert "sync (lighting:0.5)" in r.output
    r = CliRunner().invoke(app, [*args, "--perturb", "fog:1"])
    assert r.exit_code == 2 and "unknown perturbation 'fog'" in r.output
    r = CliRunner().invoke(app, [*args, "--perturb", "blur:1", "--sweep-perturb", "blur:2"])
    assert r.exit_code == 2 and "both set blur" in r.output


def test_distractors_occlusion_and_box_size_change_the_scene_where_it_happens():
    for bad, words in (("distractors:1.5", "a count, a whole number"), ("box-size:2", r"\[0.5, 1.5\]")):
        with pytest.raises(ConfigError, match=words):
            parse_perturb(bad)
    env = make_task("conveyor-pick")
    nominal, _ = env.reset(seed=3)
    ids = (env.model.body("box").id, env.model.geom("box").id, env.model.camera("top").id)
    attach_perturbations(
        Recorder(), env, "distractors:3,occlusion:0.1,box-size:1.5", parse_latency("fixed:0")
    )
    # Bodies were added after the task's own: its cached ids hold.
    assert (env.model.body("box").id, env.model.geom("box").id, env.model.camera("top").id) == ids
    first, _ = env.reset(seed=3)
    assert env.box_half() == pytest.approx(0.03) and env.box_pos()[2] == pytest.approx(0.06 + 0.03, abs=1e-3)
    np.testing.assert_array_equal(first["state"][4:6], nominal["state"][4:6])  # same draw, bigger box
    box = env.box_pos()[:2]
    starts = [env.data.xpos[env.model.body(f"distractor{i}").id].copy() for i in range(3)]
    for p in starts:  # on the belt, clear of the box
        assert p[2] < 0.1 and abs(p[1]) < 0.14 and np.linalg.norm(p[:2] - box) >= 0.09
    assert not np.array_equal(first["images"]["top"], nominal["images"]["top"])
    env.advance(env.hold_action(), 250)  # half a second: the belt carries them like the box
    moved = [env.data.xpos[env.model.body(f"distractor{i}").id][0] - s[0] for i, s in enumerate(starts)]
    assert np.allclose(moved, env.belt_speed * 0.5, rtol=0.2)
    plate = env.model.body("occluder").id
    assert (
        env.data.xpos[plate][2] == pytest.approx(0.45)
        and env.model.geom_contype[env.model.geom("occluder").id] == 0
    )
    at_3 = env.data.xpos[plate].copy()
    again, _ = env.reset(seed=3)
    np.testing.assert_array_equal(again["images"]["top"], first["images"]["top"])  # seeded
    env.reset(seed=4)
    assert np.linalg.norm(env.data.xpos[plate] - at_3) > 1e-3  # another episode, another place
    env.close()
    # Behind the learned chain: its detector keeps the camera it calibrated and sees the rebuilt scene.
    from hotloop.perception.pipeline import attach_pipeline

    env = make_task("conveyor-pick")
    inner = Recorder()
    chain, latency = attach_pipeline(inner, env, "detector:model=learned", parse_latency("fixed:0"))
    policy, _ = attach_perturbations(chain, env, "distractors:4,occlusion:0.05", latency)
    obs, _ = env.reset(seed=5)
    policy.reset()
    for _ in range(3):
        policy.infer(obs)
        env.advance(env.hold_action(), 50)
        obs = env.observe()
    assert policy.take_episode()["detections"] == 3 and inner.obs is not None
    env.close()
    with pytest.raises(ConfigError, match="box-size is for conveyor-pick"):
        attach_perturbations(Recorder(), make_task("reach"), "box-size:1.2", parse_latency("fixed:0"))
