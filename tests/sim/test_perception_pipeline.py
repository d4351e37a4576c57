import json

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from hotloop.closedloop.latency import parse_latency
from hotloop.errors import ConfigError
from hotloop.perception.pipeline import attach_pipeline, parse_pipeline
from hotloop.sim.tasks import make_expert, make_task


class SeeingPolicy:
    """Records the state it was given; its chunk holds the end effector still."""

    horizon = 4

    def __init__(self) -> None:
        self.seen: list[np.ndarray] = []

    def reset(self) -> None:
        pass

    def infer(self, obs):
        self.seen.append(np.asarray(obs["state"], dtype=np.float64).copy())
        return {"actions": np.tile(np.array([*obs["state"][:3], 0.0]), (self.horizon, 1))}


def test_spec_parsing_and_errors_name_the_flag():
    cfg = parse_pipeline("detector:perception=50,control=5,predict=1,budget.decision=150")
    assert (cfg.kind, cfg.perception_ms, cfg.control_ms, cfg.predict) == ("detector", 50.0, 5.0, True)
    assert cfg.injected_ms == 55.0 and cfg.budget.budget_of("decision") == 150.0
    for bad, words in (
        ("camera", "--pipeline"),
        ("detector:perception", "key=number"),
        ("detector:latency=5", "unknown key"),
        ("truth:perception=-1", ">= 0"),
    ):
        with pytest.raises(ConfigError, match=words):
            parse_pipeline(bad)


def test_the_policy_sees_the_tracked_box_not_the_simulator_state():
    env = make_task("conveyor-pick")
    inner = SeeingPolicy()
    policy, _ = attach_pipeline(inner, env, "detector", parse_latency("fixed:0"))
    expert = make_expert("conveyor-pick", env)
    truths = []
    for seed in (0, 1, 2):
        obs, _ = env.reset(seed=seed)
        policy.reset()
        expert.reset()
        for _ in range(40):
            truth = np.asarray(obs["state"], dtype=np.float64).copy()
            corrupted = truth.copy()
            corrupted[4:10] += 1.0  # privileged box state made useless: the estimate must come from the image
            policy.infer({**obs, "state": corrupted})
            if len(inner.seen) > len(truths):
                truths.append(truth)
            success, failed = env.advance(expert.act(obs), env.config.ticks_per_control)
            if success or failed:
                break
            obs = env.observe()
    seen = np.asarray(inner.seen)
    truth = np.asarray(truths)
    err = np.linalg.norm(seen[:, 4:6] - truth[:, 4:6], axis=1)
    assert len(seen) >= 10  # the expert grasps in ~1.2 s; the gripper hides the box for part of it
    assert np.median(err) < 0.006 and err.max() < 0.015  # xy within millimetres, never off by a box
    record = policy.take_episode()
    assert record["cycles"] >= len(seen) and set(record["latencies_ms"]) == {
        "perception",
        "estimation",
        "decision",
        "control",
    }
    env.close()


def test_injected_latency_adds_to_the_delay_and_is_charged_per_layer():
    env = make_task("conveyor-pick")
    obs, _ = env.reset(seed=3)
    policy, latency = attach_pipeline(
        SeeingPolicy(),
        env,
        "truth:perception=50,control=1,budget.perception=60,budget.decision=80",
        parse_latency("fixed:100"),
    )
    policy.infer(obs)
    assert latency.sample_ms(3.0, np.random.default_rng(0)) == pytest.approx(151.0)
    cycle = policy.recorder.last
    assert cycle.latency_ms("decision") == pytest.approx(100.0)
    assert cycle.latency_ms("perception") >= 50.0
    record = policy.take_episode()
    from hotloop.realtime.budget import budget_report

    assert budget_report(policy.config.budget, record["latencies_ms"]).breaking == "decision"
    env.close()


def test_held_box_is_taken_from_the_gripper():
    env = make_task("conveyor-pick")
    obs, _ = env.reset(seed=0)
    inner = SeeingPolicy()
    policy, _ = attach_pipeline(inner, env, "detector", parse_latency("fixed:0"))
    state = np.asarray(obs["state"], dtype=np.float64).copy()
    state[3] = 0.04  # fingers closed on a 4 cm box
    policy.infer({**obs, "state": state})
    np.testing.assert_allclose(inner.seen[-1][4:7], state[:3] + [0.0, 0.0, -0.011], atol=1e-6)
    env.close()


def test_eval_with_the_detector_chain_reports_budgets(tmp_path, monkeypatch):
    from hotloop.closedloop import eval_run
    from hotloop.closedloop.commands import add_commands as add_eval
    from hotloop.datasets.commands import add_commands as add_record
    from hotloop.train.commands import add_commands as add_train

    real = eval_run.EvalRequest
    monkeypatch.setattr(
        eval_run, "EvalRequest", lambda **kw: real(**{**kw, "policy_factory": "fakes:oracle"})
    )
    app = typer.Typer()
    for add in (add_record, add_eval, add_train):
        add(app)
    out, plot = tmp_path / "r.json", tmp_path / "r.png"
    args = ["eval", "demo:conveyor", "--episodes", "2", "--workers", "0", "--quiet", "--latency", "fixed:0"]
    args += ["--pipeline", "detector:perception=20", "--json", str(out), "--plot", str(plot)]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    pipe = doc["pipeline"]
    assert pipe["kind"] == "detector" and pipe["injected_ms"]["perception"] == 20.0
    assert pipe["cycles"] > 0 and pipe["estimate_error_mm"]["p50"] < 10.0
    layers = {layer["name"]: layer for layer in pipe["budget"]["layers"]}
    assert layers["perception"]["p50_ms"] >= 20.0  # the injected latency is charged to its layer
    assert doc["per_episode"][0]["latency_ms"]["mean"] == pytest.approx(20.0)  # and the loop waited for it
    assert (tmp_path / "r.budget-sync-fixed0.png").stat().st_size > 0
    r = CliRunner().invoke(app, ["eval", "demo:conveyor", "--pipeline", "camera"])
    assert r.exit_code == 2 and "--pipeline" in r.output


def test_waiting_under_rtc_keeps_the_executing_chunk_and_says_so():
    from hotloop.realtime.rtc import GUIDED_KEY, PREV_ACTIONS_KEY

    env = make_task("conveyor-pick")
    obs, _ = env.reset(seed=0)  # the box starts out of view: no target yet
    policy, _ = attach_pipeline(SeeingPolicy(), env, "detector", parse_latency("fixed:0"))
    prev = np.array([[0.1, 0.0, 0.2, 0.0], [0.11, 0.0, 0.2, 0.0]])
    out = policy.infer({**obs, PREV_ACTIONS_KEY: prev})
    assert out[GUIDED_KEY] is True and out["actions"].shape == (SeeingPolicy.horizon, 4)
    np.testing.assert_allclose(out["actions"][:2], prev)
    np.testing.assert_allclose(out["actions"][2:], np.tile(prev[-1], (2, 1)))
    env.close()


def test_camera_rate_perception_runs_on_every_frame_and_its_latency_is_the_estimates_age():
    """camera_hz=10: a frame every control tick; a frame's detection is usable 50 ms after it, so the
    decision at 0.1 s uses the frame at 0 s (not the one at 0.1 s), extrapolated to 0.1 s; the loop's
    delay no longer includes perception (it runs ahead), only estimation and control."""
    env = make_task("conveyor-pick")
    obs, _ = env.reset(seed=1)  # the box is in view from the start
    inner = SeeingPolicy()
    spec = "detector:camera_hz=10,perception=50,control=1"
    policy, latency = attach_pipeline(inner, env, spec, parse_latency("fixed:100"))
    assert policy.frame_ticks == env.config.ticks_per_control == 50
    policy.reset()
    policy.on_frame(obs)
    policy.infer(obs)  # t = 0: the frame taken now is not usable before 50 ms: hold and wait
    assert inner.seen == []
    env.advance(env.hold_action(), 50)
    later = env.observe()
    policy.on_frame(later)
    policy.infer(later)  # t = 0.1 s: the frame at 0 s only (the one at 0.1 s is usable at 0.15 s)
    assert latency.sample_ms(3.0, np.random.default_rng(0)) == pytest.approx(101.0)
    truth = np.asarray(later["state"], dtype=np.float64)
    assert np.linalg.norm(inner.seen[-1][4:6] - truth[4:6]) < 0.006  # tracked forward to 0.1 s
    record = policy.take_episode()
    assert record["waits"] == 1 and record["cycles"] == 2
    assert record["frames"]["age_ms"] == [pytest.approx(100.0)]
    assert len(record["frames"]["perception_ms"]) == 2
    assert min(record["frames"]["perception_ms"]) >= 50.0
    assert record["latencies_ms"]["perception"][-1] >= 50.0  # the cycle's perception: the frame it used
    for bad, words in (("detector:camera_hz=7", "whole number"), ("truth:camera_hz=10", "truth")):
        with pytest.raises(ConfigError, match=words):
            attach_pipeline(SeeingPolicy(), env, bad, parse_latency("fixed:0"))
    env.close()


def test_camera_rate_in_the_closed_loop_perceives_every_control_tick():
    from hotloop.closedloop.workers import EpisodeJob, EpisodeRunner

    def job(pipeline):
        return EpisodeJob(
            target="demo:conveyor",
            task="conveyor-pick",
            difficulty=None,
            strategy="chunk",
            latency="fixed:100",
            policy_factory="fakes:oracle",
            pipeline=pipeline,
        )

    runner = EpisodeRunner(job("detector:camera_hz=10,perception=30"))
    record = runner.run(1)
    assert record["error"] is None, record["error"]
    frames = record["pipeline"]["frames"]
    # One frame per 100 ms of simulated time from t = 0, whatever the policy was doing.
    assert len(frames["perception_ms"]) == int(round(record["sim_time_s"] / 0.1)) + 1
    assert len(frames["perception_ms"]) > 2 * record["inferences"]
    assert record["pipeline"]["cycles"] == record["inferences"]
    assert all(a >= 30.0 for a in frames["age_ms"])  # a detection is never used before it is ready
    assert record["latency_ms"]["mean"] == pytest.approx(100.0)  # perception is off the decision's path
    runner.env.close()


def test_eval_at_camera_rate_reports_the_frames(tmp_path, monkeypatch):
    from hotloop.closedloop import eval_run
    from hotloop.closedloop.commands import add_commands as add_eval
    from hotloop.datasets.commands import add_commands as add_record
    from hotloop.train.commands import add_commands as add_train

    real = eval_run.EvalRequest
    monkeypatch.setattr(
        eval_run, "EvalRequest", lambda **kw: real(**{**kw, "policy_factory": "fakes:oracle"})
    )
    app = typer.Typer()
    for add in (add_record, add_eval, add_train):
        add(app)
    out = tmp_path / "r.json"
    args = ["eval", "demo:conveyor", "--episodes", "1", "--seed", "1", "--workers", "0", "--quiet"]
    args += [
        "--latency",
        "fixed:100",
        "--pipeline",
        "detector:camera_hz=10,perception=30",
        "--json",
        str(out),
    ]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    frames = json.loads(out.read_text())["pipeline"]["frames"]
    assert frames["count"] > 0 and frames["perception_ms"]["p50"] >= 30.0
    assert frames["estimate_age_ms"]["p50"] >= 30.0
    assert f"camera 10 Hz: {frames['count']} frames" in r.output


def test_waiting_for_the_box_with_the_shipped_policy_behind_the_task_adapter():
    """Before the box is seen the chain holds still with a chunk of the policy's own length; the shipped
    policy reaches the chain through the task adapter, which has no `horizon` of its own (this crashed
    every episode whose box was out of view at the first decision)."""
    from hotloop.closedloop.workers import EpisodeJob, build_policy

    env = make_task("conveyor-pick")
    job = EpisodeJob("demo:conveyor", "conveyor-pick", None, "async", "fixed:0")
    adapted = build_policy(job, env)
    assert not hasattr(adapted, "horizon")
    policy, _ = attach_pipeline(adapted, env, "detector", parse_latency("fixed:0"))
    obs, _ = env.reset(seed=0)  # the box is out of view at first
    policy.reset()
    actions = policy.infer(obs)["actions"]
    assert policy.take_episode()["waits"] == 1
    assert actions.shape == (adapted.policy.horizon, 4)
    np.testing.assert_allclose(actions[:, :3], np.tile(obs["state"][:3], (len(actions), 1)), atol=1e-6)
    env.close()
