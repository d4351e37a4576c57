"""A gate with unusable data fails closed: a bench baseline whose samples are NaN, negative or infinite,
or an eval baseline with no completed episode, is refused in one line (exit 2) saying the baseline is
unusable — never read as "no detectable change" and passed by --fail-on-regression (issue 38, class 3)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.closedloop.baseline import PointKey, unjudged_line
from hotloop.measure.baseline import BenchComparison, StageRow
from hotloop.measure.baseline import unjudged_line as bench_unjudged_line
from hotloop.measure.compare import NOT_COMPARABLE, latency_change
from hotloop.measure.differences import differences

runner = CliRunner()
BENCH = ["bench", "toy:mlp", "--warmup", "1", "--iters", "10", "--quiet"]
EVAL = ["eval", "expert:scripted", "--strategy", "sync", "--episodes", "2", "--workers", "0", "--quiet"]


@pytest.fixture(autouse=True)
def _no_history_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOTLOOP_HISTORY", raising=False)


def error_line(args: list[str]) -> str:
    res = runner.invoke(app, args)
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), res.output[-3000:]
    return lines[0]


@pytest.fixture(scope="module")
def bench_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bench") / "a.json"
    res = runner.invoke(app, [*BENCH, "--json", str(path)])
    assert res.exit_code == 0, res.output
    return path


@pytest.fixture(scope="module")
def eval_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("eval") / "e.json"
    res = runner.invoke(app, [*EVAL, "--latency", "fixed:0", "--json", str(path)])
    assert res.exit_code == 0, res.output
    return path


def edited(src: Path, dst: Path, edit: Any) -> Path:
    data = json.loads(src.read_text())
    edit(data)
    dst.write_text(json.dumps(data))  # NaN / Infinity as Python's json writes them
    return dst


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("samples_ms", math.nan),
        ("samples_ms", -1.0),
        ("samples_ms", math.inf),
        ("samples_ms", 0.0),
        ("head", -0.5),
    ],
)
def test_a_bench_baseline_with_unusable_samples_is_refused_before_timing(
    bench_json: Path, tmp_path: Path, field: str, value: float
) -> None:
    def poison(data: dict[str, Any]) -> None:
        if field == "samples_ms":
            data["samples_ms"][3] = value
        else:
            data["stage_samples_ms"][field][3] = value

    bad = edited(bench_json, tmp_path / "bad.json", poison)
    out = tmp_path / "out.json"
    for gate in ([], ["--fail-on-regression"]):
        line = error_line([*BENCH, "--baseline", str(bad), *gate, "--json", str(out)])
        assert "sample 3 is" in line and "unusable as a baseline" in line, line
        assert not out.exists()
    line = error_line(["compare", str(bad), str(bench_json), "--fail-on-regression"])
    assert line.startswith(f"error: OLD {bad}: ") and "unusable" in line
    line = error_line(["compare", str(bench_json), str(bad), "--fail-on-regression"])
    assert line.startswith(f"error: NEW {bad}: ")


@pytest.mark.parametrize("kind", ["no episodes", "all crashed"])
def test_an_eval_baseline_with_no_completed_episode_is_refused(
    eval_json: Path, tmp_path: Path, kind: str
) -> None:
    def empty(data: dict[str, Any]) -> None:
        if kind == "no episodes":
            data["per_episode"] = []
        else:
            for e in data["per_episode"]:
                e["error"] = "worker died"

    bad = edited(eval_json, tmp_path / "bad.json", empty)
    line = error_line([*EVAL, "--latency", "fixed:0", "--baseline", str(bad), "--fail-on-regression"])
    assert "point sync fixed:0 has" in line and "unusable as a baseline" in line, line
    assert "no detectable change" not in line
    line = error_line(["compare", str(bad), str(eval_json), "--fail-on-regression"])
    assert line.startswith(f"error: OLD {bad}: point sync fixed:0 has")


def test_a_gate_does_not_pass_what_it_could_not_judge() -> None:
    change = latency_change([], [1.0, 2.0], 0.05)  # nothing on one side: no verdict
    cmp = BenchComparison(
        "t",
        "old.json",
        0.05,
        (StageRow("total", 1.0, 1.0, change),),
        (),
        differences([]),
        ((None, None), (None, None)),
    )
    assert "cannot be judged against old.json" in str(bench_unjudged_line(cmp))
    assert change.verdict == NOT_COMPARABLE

    class Blind:
        point = PointKey("sync", None, "fixed:0")
        success = None

    assert "sync fixed:0 cannot be judged" in str(unjudged_line([Blind()], "old.json"))  # type: ignore[list-item]
