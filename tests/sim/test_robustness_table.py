"""`hotloop robustness`: several plans' --sweep-perturb results side by side, on real closed-loop runs."""

import json

from typer.testing import CliRunner

from hotloop.cli import app

SWEEP = [
    "--task",
    "conveyor-pick",
    "--episodes",
    "1",
    "--seed",
    "3",
    "--workers",
    "1",
    "--latency",
    "fixed:0",
]


def _eval(tmp_path, name, target, *extra):
    out = tmp_path / f"{name}.json"
    res = CliRunner().invoke(app, ["eval", target, *SWEEP, *extra, "--json", str(out)])
    assert res.exit_code == 0, res.output
    return out


def test_plans_side_by_side_per_perturbation_with_the_paired_change(tmp_path):
    expert = _eval(tmp_path, "expert", "expert:scripted", "--sweep-perturb", "belt-speed:2.5")
    # One plan's points may come from several runs: results under one label are merged.
    demo = _eval(tmp_path, "demo", "demo:conveyor")
    demo_perturbed = _eval(tmp_path, "demo-p", "demo:conveyor", "--perturb", "belt-speed:2.5")
    table, plot = tmp_path / "t.json", tmp_path / "t.png"
    labels = ["--label", "expert", "--label", "policy", "--label", "policy"]
    args = ["robustness", str(expert), str(demo), str(demo_perturbed), *labels]
    res = CliRunner().invoke(app, [*args, "--json", str(table), "--plot", str(plot), "--markdown"])
    assert res.exit_code == 0, res.output
    summary = json.loads(table.read_text())
    assert summary["plans"] == ["expert", "policy"] and summary["seeds"] == [3, 3]
    assert list(summary["success"]) == ["none", "belt-speed:2.5"]  # unperturbed first
    runs = {
        name: {
            r.get("request", {}).get("perturb") or "none": r
            for p in paths
            for r in json.loads(p.read_text()).get("runs", [json.loads(p.read_text())])
        }
        for name, paths in (("expert", [expert]), ("policy", [demo, demo_perturbed]))
    }
    for row, cells in summary["success"].items():
        for plan, cell in cells.items():
            assert cell["successes"] == runs[plan][row]["successes"]  # the cell is the run's own count
            if row == "none":
                assert cell["vs_none"] is None
            else:  # paired on the seed both points ran
                vs = cell["vs_none"]
                assert (
                    vs["pairs"] == 1
                    and vs["both"] + vs["only_baseline"] + vs["only_now"] + vs["neither"] == 1
                )
    assert "| `belt-speed:2.5` |" in res.output and plot.stat().st_size > 0


def test_plans_on_other_seeds_are_refused_by_name(tmp_path):
    a = _eval(tmp_path, "a", "expert:scripted")
    other = json.loads(a.read_text())
    for run in other.get("runs", [other]):  # the same run, as if on other seeds
        for episode in run["per_episode"]:
            episode["seed"] += 10
    b = tmp_path / "b.json"
    b.write_text(json.dumps(other))
    res = CliRunner().invoke(app, ["robustness", str(a), str(b), "--label", "a", "--label", "b"])
    assert res.exit_code == 2 and "--seed" in res.output
    res = CliRunner().invoke(app, ["robustness", str(a), str(a)])  # one target: one plan, a point twice
    assert res.exit_code == 2 and "--label" in res.output
    res = CliRunner().invoke(app, ["robustness", str(a), "--label", "x", "--label", "y"])
    assert res.exit_code == 2 and "--label" in res.output
