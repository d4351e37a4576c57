"""`hotloop sweep` without Ray: the spec's expansion and checks, the cell keys, the results store and
`--resume` on the local executor."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.closedloop.cells import Cell, cell_key
from hotloop.closedloop.eval_run import EvalRequest
from hotloop.closedloop.spec import expand
from hotloop.closedloop.store import ROWS_FILE, read_rows
from hotloop.errors import ConfigError


def test_axes_expand_and_a_trigger_axis_leaves_one_cell_per_strategy_without_one():
    cells = expand(
        {
            "target": "expert:scripted",
            "task": "reach",
            "strategy": ["sync", "async"],
            "latency": ["fixed:0", "fixed:100"],
            "trigger_remaining": [2, 3],
            "episodes": 4,
            "seed": 10,
        },
        "spec",
    )
    # sync: 2 latencies; async: 2 latencies x 2 triggers
    assert len(cells) == 6 and len({c.key for c in cells}) == 6
    assert {c.request.trigger_remaining for c in cells if c.request.strategy == "sync"} == {None}
    assert all(c.seeds == [10, 11, 12, 13] for c in cells)


def test_the_key_ignores_seed_range_and_workers_but_not_what_the_episode_is():
    a = EvalRequest(target="expert:scripted", task="reach", latency="fixed:0", episodes=5, seed=0, workers=2)
    b = EvalRequest(target="expert:scripted", task="reach", latency="fixed:0", episodes=9, seed=3, workers=0)
    c = EvalRequest(target="expert:scripted", task="reach", latency="fixed:50")
    assert cell_key(a) == cell_key(b) != cell_key(c)
    # Stored sweeps resume by this key: it must not change between releases (an option added to
    # EvalRequest later is left out at its default, so this value holds).
    assert (
        cell_key(EvalRequest(target="expert:scripted", task="reach", latency="fixed:0")) == "4450cccdad7daa35"
    )


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ({"target": "expert:scripted", "stratgey": ["sync"]}, "'stratgey'"),
        ({"target": "expert:scripted", "strategy": ["sync", "warp"]}, "warp"),
        ({"target": "expert:scripted", "latency": ["fixed:-3"]}, "fixed:-3"),
        ({"target": "expert:scripted", "trigger_remaining": ["x"], "strategy": "async"}, "'x'"),
        ({"target": "expert:scripted", "episodes": [1, 2]}, "episodes"),
        ({"task": "reach"}, "no target"),
    ],
)
def test_a_bad_spec_names_the_key_or_value(spec, named):
    with pytest.raises(ConfigError, match=None) as e:
        expand(spec, "SPEC s.yaml")
    assert named in str(e.value) and "SPEC s.yaml" in str(e.value)


def test_local_sweep_resumes_a_torn_store_and_refuses_another_spec(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("target: expert:scripted\ntask: reach\nlatency: [fixed:0, fixed:100]\nepisodes: 2\n")
    out = tmp_path / "out"
    runner = CliRunner()
    first = runner.invoke(app, ["sweep", str(spec), "--out", str(out), "--workers", "0", "--quiet"])
    assert first.exit_code == 0, first.output
    rows = read_rows(out / ROWS_FILE)
    assert len(rows) == 4
    # A driver killed mid-write: the last row half written, one row never written.
    lines = (out / ROWS_FILE).read_text().splitlines(keepends=True)
    (out / ROWS_FILE).write_text("".join(lines[:2]) + lines[2][: len(lines[2]) // 2])
    again = runner.invoke(app, ["sweep", str(spec), "--out", str(out), "--workers", "0", "--quiet"])
    assert again.exit_code == 2 and "--resume" in again.output  # never mixes two sweeps silently
    resumed = runner.invoke(
        app, ["sweep", str(spec), "--out", str(out), "--workers", "0", "--resume", "--quiet"]
    )
    assert resumed.exit_code == 0, resumed.output
    assert "2 already stored, 2 to run" in resumed.output
    after = read_rows(out / ROWS_FILE)
    assert sorted((r["cell"], r["seed"]) for r in after) == sorted((r["cell"], r["seed"]) for r in rows)

    def strip(rs):
        return {
            (r["cell"], r["seed"]): {k: v for k, v in r["record"].items() if k != "infer_wall_ms"} for r in rs
        }

    assert strip(after) == strip(rows)

    other = tmp_path / "other.yaml"
    other.write_text("target: expert:scripted\ntask: reach\nlatency: [fixed:0, fixed:300]\nepisodes: 2\n")
    before = (out / ROWS_FILE).read_bytes()
    wrong = runner.invoke(app, ["sweep", str(other), "--out", str(out), "--workers", "0", "--resume"])
    assert wrong.exit_code == 2 and "another spec" in wrong.output and "fixed:300" in wrong.output
    assert (out / ROWS_FILE).read_bytes() == before  # nothing lost, nothing added
    results = json.loads((out / "results.json").read_text())
    assert [r["episodes"] for r in results["runs"]] == [2, 2] and results["missing"] == 0
    assert Cell.of(EvalRequest(**results["runs"][0]["request"])).key == results["runs"][0]["cell"]
