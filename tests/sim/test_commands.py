import json

import typer
from typer.testing import CliRunner

from hotloop.closedloop.commands import add_commands as add_eval
from hotloop.datasets.commands import add_commands as add_record
from hotloop.train.commands import add_commands as add_train


def _app():
    app = typer.Typer()
    for add in (add_record, add_eval, add_train):
        add(app)
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
    from hotloop.closedloop import eval_run

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
        "chunk_jump_per_s",
        "per_episode",
        "env",
    ):
        assert key in run
    assert len(run["per_episode"]) == 2 and plot.stat().st_size > 0
    cost = doc["executor"]  # what running them cost, with the same figures as `hotloop sweep`'s
    assert cost["executor"] == "local" and cost["episodes"] == 8 and not cost["interrupted"]
    assert cost["overhead_parts_s"]["build"] > 0 and cost["dispatch_per_episode_s"] is not None


def test_ctrl_c_writes_the_episodes_that_finished(tmp_path, monkeypatch):
    from hotloop.closedloop import eval_run

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
    assert runs[0]["seeds"] == [0, 1]  # only the seeds that ran, not the five asked for


def _with_fake_policy(monkeypatch, factory):
    from hotloop.closedloop import eval_run

    real = eval_run.EvalRequest
    monkeypatch.setattr(eval_run, "EvalRequest", lambda **kw: real(**{**kw, "policy_factory": factory}))


def test_an_engine_over_its_memory_cap_mid_run_keeps_the_finished_episodes(tmp_path, monkeypatch):
    # A cap breach is the engine failing at run time, not a bad option: the episode is an error (counted
    # apart, exit 1), and the episodes that finished before it are kept and written.
    _with_fake_policy(monkeypatch, "fakes:over_cap")
    out = tmp_path / "r.json"
    args = ["eval", "demo:conveyor", "--task", "reach", "--episodes", "3", "--workers", "0", "--quiet"]
    r = CliRunner().invoke(_app(), [*args, "--json", str(out)])
    assert r.exit_code == 1, r.output
    run = json.loads(out.read_text())
    assert run["completed"] == 1 and run["errors"] == 2 and run["error_seeds"] == [1, 2]
    assert all("--memory-cap-mb 512" in e["error"] for e in run["per_episode"] if e["error"])


def _one_error_line(r):
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    return lines[0]


def test_crashed_episodes_are_errors_not_failures_and_exit_1(tmp_path, monkeypatch):
    _with_fake_policy(monkeypatch, "fakes:raising")  # episodes 2 and 4 (seeds 1 and 3) raise
    out = tmp_path / "r.json"
    args = ["eval", "demo:conveyor", "--task", "reach", "--episodes", "4", "--workers", "0", "--quiet"]
    r = CliRunner().invoke(_app(), [*args, "--json", str(out)])
    assert r.exit_code == 1, r.output
    run = json.loads(out.read_text())
    assert run["errors"] == 2 and run["error_seeds"] == [1, 3]
    assert run["completed"] == 2 and run["successes"] + run["failures"] == 2
    assert run["success_rate"] == run["successes"] / 2  # crashes are left out of the rate
    crashed = [e for e in run["per_episode"] if e["error"]]
    assert [e["seed"] for e in crashed] == [1, 3]
    assert all(not e["failed"] and "policy exploded" in e["error"] for e in crashed)
    # The table (stdout) has an errors column; the one-line verdict (stderr) names the seeds.
    assert "errors" in r.stdout and "closed-loop evaluation" not in r.stderr
    assert "error: 2 episode(s) crashed (seeds 1, 3)" in r.stderr and "policy exploded" in r.stderr


def test_a_clean_run_prints_its_table_on_stdout(tmp_path, monkeypatch):
    _with_fake_policy(monkeypatch, "fakes:counting")
    args = ["eval", "demo:conveyor", "--episodes", "1", "--workers", "0", "--quiet"]
    r = CliRunner().invoke(_app(), [*args, "--json", str(tmp_path / "r.json")])
    assert r.exit_code == 0, r.output
    assert "closed-loop evaluation" in r.stdout and r.stderr == ""
    run = json.loads((tmp_path / "r.json").read_text())
    # The default difficulty is reported as what ran, not null; seeds are those that ran.
    assert run["difficulty"] == "medium" and run["seeds"] == [0] and run["errors"] == 0


def test_impossible_eval_options_fail_before_any_episode(tmp_path):
    out = tmp_path / "never.json"
    base = ["eval", "demo:conveyor", "--task", "reach", "--episodes", "1", "--json", str(out)]
    for extra, needle in (
        (["--seed", "-1"], "--seed must be >= 0 (got -1)"),
        (["--seed", "4294967295", "--episodes", "2"], "passes 4294967295, the largest seed"),
        (["--workers", "-3"], "--workers must be >= 0 (got -3)"),
        (["--episodes", "0"], "--episodes must be >= 1 (got 0)"),
        (["--steps", "0"], "--steps must be an integer from 1 to 1000 (got 0)"),
        (["--steps", "100000"], "--steps must be an integer from 1 to 1000 (got 100000)"),
        (["--episodes", "1000000000"], "--episodes must be from 1 to 1,000,000 (got 1,000,000,000)"),
        (["--workers", "100000"], "--workers must be from 0 to"),
        (["--strategy", ""], "names no strategy"),
        (["--strategy", " , "], "names no strategy"),
        (["--latency", "fixed:inf"], "finite"),
        (["--latency", "fixed:nan"], "finite"),
        (["--latency", "fixed:-5"], "finite and >= 0"),
        (["--trigger-remaining", "2"], "--trigger-remaining 2 does nothing with --strategy sync"),
        (["--strategy", "async", "--execute-steps", "3"], "--execute-steps 3 does nothing"),
        (["--strategy", "chunk", "--trigger-remaining", "3"], "--trigger-remaining 3 does nothing"),
        (["--strategy", "async", "--guidance-weight", "2"], "--guidance-weight 2 does nothing"),
        (["--strategy", "sync", "--execute-steps", "3"], "sync executes one action per inference"),
        (["--latency", "fixed:50", "--sweep-latency", "0,100"], "--latency fixed:50 and --sweep-latency"),
        (["--sweep-latency", "0,inf"], "--sweep-latency"),
        (["--strategy", "async", "--sweep-trigger", "8,x"], "--sweep-trigger '8,x': write whole numbers"),
        (["--strategy", "async", "--sweep-trigger", "-1"], "--sweep-trigger '-1': need one or more"),
        (["--sweep-trigger", "4,6"], "--sweep-trigger 4 does nothing with --strategy sync"),
        (
            ["--strategy", "async", "--trigger-remaining", "4", "--sweep-trigger", "4,6"],
            "--trigger-remaining 4 and --sweep-trigger 4,6 both given",
        ),
        (["--difficulty", "hard"], "task 'reach' has no difficulty levels"),
        (["--json", str(tmp_path)], "is a directory"),
        (["--plot", "/proc/hotloop-test.png"], "cannot write in /proc"),
        (["--json", str(tmp_path / "file.txt" / "r.json")], "is a file, not a directory"),
    ):
        (tmp_path / "file.txt").write_text("x")
        r = CliRunner().invoke(_app(), [*base, *extra])
        assert r.exit_code == 2, (extra, r.output)
        assert needle in _one_error_line(r), (extra, r.output)
    assert not out.exists()


def test_strategy_options_are_accepted_where_they_act(tmp_path, monkeypatch):
    _with_fake_policy(monkeypatch, "fakes:counting")
    base = ["eval", "demo:conveyor", "--task", "reach", "--episodes", "1", "--workers", "0", "--quiet"]
    for extra in (
        ["--strategy", "chunk", "--execute-steps", "1"],
        ["--strategy", "async", "--trigger-remaining", "5"],
        ["--strategy", "sync,async", "--trigger-remaining", "0"],  # async reads it
        ["--strategy", "async", "--trigger-remaining", "8"],  # the default for this horizon (16 // 2)
    ):
        r = CliRunner().invoke(_app(), [*base, *extra])
        assert r.exit_code == 0, (extra, r.output)


def test_record_output_directory_is_checked_before_recording(tmp_path):
    regular = tmp_path / "a-file"
    regular.write_text("mine")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    base = ["record", "--task", "reach", "--episodes", "1", "--quiet"]
    for extra, needle in (
        (["-o", str(regular)], "is a file, not a directory"),
        (["-o", str(busy)], "already holds files `hotloop record` did not write (notes.txt)"),
        (["-o", "/proc/hotloop-test-ds"], "cannot write in /proc"),
        (["-o", str(tmp_path / "new"), "--seed", "-1"], "--seed must be"),
        (["-o", str(tmp_path / "new"), "--action-noise", "nan"], "--action-noise"),
        (
            ["-o", str(tmp_path / "new"), "--task", "conveyor-pick", "--difficulty", "x"],
            "use easy, medium, hard",
        ),
    ):
        r = CliRunner().invoke(_app(), [*base, *extra])
        assert r.exit_code == 2, (extra, r.output)
        assert needle in _one_error_line(r), (extra, r.output)
    assert regular.read_text() == "mine" and sorted(p.name for p in busy.iterdir()) == ["notes.txt"]
    assert not (tmp_path / "new").exists()


def test_record_progress_is_plain_lines_off_a_terminal(tmp_path):
    r = CliRunner().invoke(
        _app(), ["record", "--task", "reach", "--episodes", "2", "-o", str(tmp_path / "ds")]
    )
    assert r.exit_code == 0, r.output
    assert "\r" not in r.output
    assert "record reach: 2/2 ep (100%)" in r.stderr and "wrote 2 episodes" in r.stdout
    quiet = CliRunner().invoke(
        _app(), ["record", "--task", "reach", "--episodes", "1", "-o", str(tmp_path / "q"), "--quiet"]
    )
    assert quiet.exit_code == 0 and quiet.stderr == "", quiet.output


def test_a_worker_that_cannot_start_reports_the_message_not_the_exception_class(monkeypatch):
    _with_fake_policy(monkeypatch, "fakes:refusing")  # raises a ConfigError in the worker process
    args = ["eval", "demo:conveyor", "--task", "reach", "--episodes", "1", "--workers", "1"]
    r = CliRunner().invoke(_app(), [*args, "--quiet"])
    assert r.exit_code == 2, r.output
    line = _one_error_line(r)
    assert "this policy needs --steps" in line and "Error" not in line, line


def test_eval_progress_is_plain_lines_off_a_terminal(monkeypatch):
    _with_fake_policy(monkeypatch, "fakes:raising")
    args = ["eval", "demo:conveyor", "--task", "reach", "--episodes", "2", "--workers", "0"]
    r = CliRunner().invoke(_app(), [*args, "--latency", "fixed:0", "--strategy", "sync,chunk"])
    assert r.exit_code == 1 and "\r" not in r.output
    assert "sync fixed:0: 2/2 ep (100%), success 0/1, 1 crashed" in r.stderr, r.stderr
    # With several points the verdict names each crashed episode's point, not just its seed.
    assert "2 episode(s) crashed (sync fixed:0 seed 1, chunk fixed:0 seed 1)" in r.stderr, r.stderr


def test_ctrl_c_during_record_writes_the_finished_episodes(tmp_path):
    # A real `hotloop record` process, interrupted the way a terminal does it (SIGINT to the process
    # group, twice): it stops after the episode in progress and writes a readable dataset of the rest.
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    import hotloop
    from hotloop.datasets.lerobot_v3 import Dataset

    out = tmp_path / "ds"
    src = str(Path(hotloop.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "hotloop", "record", "--task", "reach", "--episodes", "400", "-o", str(out)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    assert proc.stderr is not None
    first = proc.stderr.readline()  # the first progress line: a tenth of the episodes are done
    assert "record reach: 40/400 ep" in first, first
    os.killpg(proc.pid, signal.SIGINT)
    os.killpg(proc.pid, signal.SIGINT)
    rest = proc.stderr.read()
    assert proc.wait(timeout=120) == 130, rest
    assert "interrupted: wrote the" in rest and "Traceback" not in rest, rest
    dataset = Dataset(out)
    assert 40 <= dataset.info["total_episodes"] < 400


def test_an_output_lost_during_the_run_does_not_stop_the_evaluation(tmp_path, monkeypatch):
    _with_fake_policy(monkeypatch, "fakes:folder_taking")
    folder = tmp_path / "results"
    folder.mkdir()
    monkeypatch.setenv("HOTLOOP_TEST_TAKE_FOLDER", str(folder))
    args = ["eval", "demo:conveyor", "--task", "reach", "--episodes", "1", "--workers", "0", "--quiet"]
    r = CliRunner().invoke(_app(), [*args, "--strategy", "sync,chunk", "--json", str(folder / "r.json")])
    assert r.exit_code == 1, r.output
    assert r.stderr.count("error: cannot write --json") == 1 and "Traceback" not in r.output
    assert "sync" in r.stdout and "chunk" in r.stdout  # both points ran and are in the table
    assert "wrote" not in r.stdout


def test_realtime_options_are_checked_before_any_episode():
    runner = CliRunner()
    for args, words in (
        (["--blend", "mean"], ["--blend", "ensemble"]),
        (["--fallback", "brake"], ["--fallback", "hold"]),
        (["--fallback", "engine"], ["--fallback 'engine'", "engine:TARGET"]),
        (["--fallback", "engine:"], ["--fallback 'engine:'", "engine:TARGET"]),
        (["--fallback", "engine:nope:x"], ["--fallback engine:nope:x", "nope:x"]),
        (["--fallback", "hold:2"], ["--fallback 'hold:2'", "engine:TARGET"]),
        (["--deadline-ms", "0"], ["--deadline-ms"]),
        (["--strategy", "rtc", "--guidance-weight", "-1"], ["--guidance-weight"]),
    ):
        r = runner.invoke(_app(), ["eval", "demo:conveyor", *args])
        assert r.exit_code == 2 and all(w in r.output for w in words), (args, r.output)


def test_fallback_engine_runs_the_smaller_target_when_deadlines_are_missed(tmp_path):
    """`--fallback engine:TARGET` from the command line: at 300 ms a sync policy misses every deadline
    after the first (one control period), and the fallback engine's chunks fill exactly the fallback time;
    with `hold` the same misses command nothing from an engine."""
    runner = CliRunner()
    base = ["eval", "expert:scripted", "--task", "reach", "--strategy", "sync", "--latency", "fixed:300"]
    records = {}
    for fallback in ("engine:expert:scripted", "hold"):
        out = tmp_path / f"{fallback.split(':')[0]}.json"
        args = [
            *base,
            "--episodes",
            "1",
            "--workers",
            "0",
            "--quiet",
            "--fallback",
            fallback,
            "--json",
            str(out),
        ]
        r = runner.invoke(_app(), args)
        assert r.exit_code == 0, r.output
        result = json.loads(out.read_text())
        assert result["strategy"]["fallback"] == fallback
        records[fallback] = result["per_episode"][0]
    engine, hold = records["engine:expert:scripted"], records["hold"]
    assert engine["watchdog"]["misses"] > 0 and engine["watchdog"]["switches"] == engine["watchdog"]["misses"]
    assert engine["fallback_engine_ticks"] == engine["watchdog"]["fallback_ticks"] > 0
    assert hold["watchdog"]["misses"] > 0 and hold["watchdog"]["fallback_ticks"] > 0
    assert hold["fallback_engine_ticks"] == 0


def test_sweep_trigger_runs_each_trigger_for_the_strategies_that_read_it(tmp_path, monkeypatch):
    _with_fake_policy(monkeypatch, "fakes:counting")
    out = tmp_path / "k.json"
    r = CliRunner().invoke(
        _app(),
        [
            "eval", "demo:conveyor", "--task", "reach", "--episodes", "1", "--workers", "0", "--quiet",
            "--strategy", "sync,async", "--latency", "fixed:0", "--sweep-trigger", "4,6,4",
            "--json", str(out),
        ],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    runs = json.loads(out.read_text())["runs"]
    # sync does not read the trigger: it runs once; async once per distinct value, in the order given.
    assert [(x["strategy"]["name"], x["strategy"].get("trigger_remaining")) for x in runs] == [
        ("sync", None),
        ("async", 4),
        ("async", 6),
    ]
    assert "async k=4" in r.stdout and "async k=6" in r.stdout
    # Async with k = 4 on a 16-action chunk at 0 ms executes 12 actions per chunk, k = 6 ten.
    inferences = [x["per_episode"][0]["inferences"] for x in runs[1:]]
    assert inferences[0] < inferences[1]
