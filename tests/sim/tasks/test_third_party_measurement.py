"""A third-party task is measured as it ran, or said not to be (issue 38, class 9): a success key hotloop
does not read is said on stderr (and a profile can name it), and the latency a coarse env step really
simulated is in the table and the JSON beside the one asked for.

The task is `slider` (plugin_pkg/hotloop_test_mujoco_tasks.py): a real MuJoCo model behind the
documented plugin contract, stepping at 10 Hz.
"""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from hotloop.closedloop.commands import add_commands as add_eval
from hotloop.datasets.commands import add_commands as add_record


def _app() -> typer.Typer:
    app = typer.Typer()
    add_record(app)
    add_eval(app)
    return app


def _eval(tmp_path, *args: str) -> tuple[dict, str]:
    out = tmp_path / "eval.json"
    r = CliRunner().invoke(
        _app(),
        [
            "eval",
            "expert:scripted",
            "--task",
            "slider",
            "--workers",
            "0",
            "--json",
            str(out),
            "--quiet",
            *args,
        ],
    )
    assert r.exit_code == 0, r.output
    return json.loads(out.read_text()), r.output


def test_success_under_an_unread_key_is_said_and_a_profile_can_name_the_key(slider_plugin, tmp_path):
    run, output = _eval(tmp_path, "--task-kwargs", '{"reports": "succeed"}', "--episodes", "3",
                        "--latency", "fixed:0")  # fmt: skip
    assert run["successes"] == 0  # the env said success, under a key nothing reads
    note = run["success_note"]
    assert "slider never reported success under info['is_success'] or info['success'] in 3 episode(s)" in note
    assert "succeed" in note and "GymProfile(success_key=...)" in note
    assert f"note: {note}" in output

    run, output = _eval(tmp_path, "--task-kwargs", '{"reports": "succeed", "profile_key": "succeed"}',
                        "--episodes", "3", "--latency", "fixed:0")  # fmt: skip
    assert run["successes"] == 3 and run["success_note"] is None
    assert "never reported success" not in output


def test_record_says_an_unread_success_key_too(slider_plugin, tmp_path):
    r = CliRunner().invoke(
        _app(),
        ["record", "--task", "slider", "--task-kwargs", '{"reports": "succeed"}', "--episodes", "2",
         "--image-size", "32", "-o", str(tmp_path / "ds"), "--quiet"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "expert success 0/2" in r.output and "never reported success" in r.output


@pytest.mark.parametrize(
    ("latency", "simulated", "noted"),
    [("fixed:50", 100.0, True), ("fixed:150", 200.0, True), ("fixed:200", 200.0, False)],
)
def test_the_latency_simulated_on_a_10_hz_env_is_shown_beside_the_one_asked(
    slider_plugin, tmp_path, latency, simulated, noted
):
    run, output = _eval(tmp_path, "--latency", latency, "--episodes", "2")
    sim = run["simulated_latency"]
    asked = float(latency.split(":")[1])
    assert sim["requested_ms"] == pytest.approx(asked) and sim["step_ms"] == pytest.approx(100.0)
    assert sim["simulated_ms"] == pytest.approx(simulated) and sim["simulated_max_ms"] == pytest.approx(
        simulated
    )
    for episode in run["per_episode"]:
        assert episode["latency_ms"]["mean"] == pytest.approx(asked)
        assert episode["simulated_latency_ms"]["mean"] == pytest.approx(simulated)
    assert f"{simulated:g} ms" in output  # the table's "simulated" column
    assert (sim["note"] is not None) == noted
    if noted:
        assert f"{latency} ({asked:g} ms per inference) ran as {simulated:g} ms" in output.replace("\n", " ")


def test_a_measured_microsecond_expert_is_shown_charged_a_whole_step(slider_plugin, tmp_path):
    run, output = _eval(tmp_path, "--latency", "measured", "--episodes", "1")
    sim = run["simulated_latency"]
    assert sim["requested_ms"] < 5.0  # the scripted expert's own time
    assert sim["simulated_ms"] == pytest.approx(100.0)
    assert "ran as 100 ms" in sim["note"] and "ran as 100 ms" in output.replace("\n", " ")


def test_the_gantry_simulates_in_2_ms_ticks_and_says_what_ran():
    """The built-in tasks tick every 2 ms: 50 ms runs as 50; 25 ms as 26 (shown, below the note's bar)."""
    from hotloop.closedloop.eval_run import EvalRequest, run_eval

    for ms, simulated in ((50, 50.0), (25, 26.0)):
        run = run_eval(EvalRequest("expert:scripted", task="reach", latency=f"fixed:{ms}", episodes=1,
                                   workers=0), progress=False)  # fmt: skip
        assert run["simulated_latency"]["simulated_ms"] == pytest.approx(simulated)
        assert run["simulated_latency"]["step_ms"] == pytest.approx(2.0)
        assert run["simulated_latency"]["note"] is None
