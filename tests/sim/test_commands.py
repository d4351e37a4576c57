import json

import typer
from typer.testing import CliRunner

from hotloop.sim.commands import add_commands


def _app():
    app = typer.Typer()
    add_commands(app)
    return app


def test_unknown_task_and_strategy_exit_2_with_known_names():
    runner = CliRunner()
    r = runner.invoke(_app(), ["eval", "demo:conveyor", "--task", "conveyer-pick"])
    assert r.exit_code == 2 and "conveyor-pick" in r.output and "Known" in r.output
    r = runner.invoke(_app(), ["eval", "demo:conveyor", "--strategy", "sink"])
    assert r.exit_code == 2 and "sync" in r.output
    r = runner.invoke(_app(), ["record", "--task", "nope", "-o", "x"])
    assert r.exit_code == 2 and "reach" in r.output


def test_record_rejects_a_bad_fraction_before_writing(tmp_path):
    out = tmp_path / "ds"
    r = CliRunner().invoke(
        _app(), ["record", "--task", "conveyor-pick", "-o", str(out), "--recovery-starts", "1.5"]
    )
    assert r.exit_code == 2 and "--recovery-starts" in r.output and "1.5" in r.output
    assert not out.exists()


def test_latency_file_without_bench_schema_exits_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"hello": 1}))
    r = CliRunner().invoke(_app(), ["eval", "demo:conveyor", "--latency", str(bad)])
    assert r.exit_code == 2 and "bad.json" in r.output and "latency_ms" in r.output


def test_eval_json_with_a_fake_policy(tmp_path, monkeypatch):
    # The command path end to end, in-process, with a fast fake policy standing in for the target.
    from hotloop.sim import eval_run

    real = eval_run.EvalRequest

    def fake_request(**kw):
        return real(**{**kw, "policy_factory": "fakes:counting"})

    monkeypatch.setattr(eval_run, "EvalRequest", fake_request)
    out = tmp_path / "r.json"
    plot = tmp_path / "r.png"
    r = CliRunner().invoke(
        _app(),
        [
            "eval",
            "demo:conveyor",
            "--task",
            "reach",
            "--strategy",
            "sync,async",
            "--sweep-latency",
            "0,100",
            "--episodes",
            "2",
            "--workers",
            "0",
            "--json",
            str(out),
            "--plot",
            str(plot),
            "--quiet",
        ],
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert [(x["strategy"]["name"], x["latency"]["ms"]) for x in doc["runs"]] == [
        ("sync", 0.0),
        ("sync", 100.0),
        ("async", 0.0),
        ("async", 100.0),
    ]
    run = doc["runs"][0]
    for key in (
        "target",
        "task",
        "strategy",
        "latency",
        "episodes",
        "success_rate",
        "success_ci95",
        "task_time_s",
        "jerk",
        "chunk_discontinuity",
        "per_episode",
        "env",
    ):
        assert key in run
    assert len(run["per_episode"]) == 2 and plot.stat().st_size > 0


def test_ctrl_c_writes_the_episodes_that_finished(tmp_path, monkeypatch):
    from hotloop.sim import eval_run

    real = eval_run.EvalRequest
    monkeypatch.setattr(
        eval_run, "EvalRequest", lambda **kw: real(**{**kw, "policy_factory": "fakes:interrupting"})
    )
    out = tmp_path / "r.json"
    args = ["eval", "demo:conveyor", "--task", "reach", "--strategy", "sync,async", "--episodes", "5"]
    r = CliRunner().invoke(_app(), [*args, "--workers", "0", "--json", str(out), "--quiet"])
    assert r.exit_code == 130, r.output
    runs = json.loads(out.read_text())["runs"]  # two strategies asked for: the sweep's shape
    # The interrupt hit episode 3 of the first point: two episodes are kept, async never started.
    assert len(runs) == 1 and runs[0]["interrupted"] is True and runs[0]["strategy"]["name"] == "sync"
    assert [e["seed"] for e in runs[0]["per_episode"]] == [0, 1] and runs[0]["episodes"] == 2


def test_realtime_options_are_checked_before_any_episode():
    runner = CliRunner()
    for args, words in (
        (["--blend", "mean"], ["--blend", "ensemble"]),
        (["--fallback", "brake"], ["--fallback", "hold"]),
        (["--fallback", "engine"], ["--fallback engine", "second policy"]),
        (["--deadline-ms", "0"], ["--deadline-ms"]),
        (["--strategy", "rtc", "--guidance-weight", "-1"], ["--guidance-weight"]),
    ):
        r = runner.invoke(_app(), ["eval", "demo:conveyor", *args])
        assert r.exit_code == 2 and all(w in r.output for w in words), (args, r.output)
