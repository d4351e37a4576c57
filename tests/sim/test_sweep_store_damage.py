"""A damaged sweep store (`hotloop.closedloop.store`) and an oversized spec: `hotloop report` and
`hotloop sweep --resume` give one line naming the file and the line or field, exit 2, and change nothing;
a spec is read with a size, alias, cell and episode bound; a sweep's episodes are made as they run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.closedloop.spec import MAX_SWEEP_EPISODES

runner = CliRunner()
SPEC = "target: expert:scripted\ntask: reach\nlatency: [fixed:0, fixed:100]\nepisodes: 2\n"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("store")
    spec = folder / "s.yaml"
    spec.write_text(SPEC)
    res = runner.invoke(app, ["sweep", str(spec), "--out", str(folder / "out"), "--workers", "0", "--quiet"])
    assert res.exit_code == 0, res.output
    return folder


def _damaged_copy(store: Path, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(store / "out", out)
    return out


def _one_line(args: list[str]) -> str:
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    return lines[0]


def _first_row(out: Path) -> dict:
    return json.loads((out / "episodes.jsonl").read_text().splitlines()[0])


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        (lambda out: b"42\n", "episodes.jsonl line 5: a JSON int"),
        (lambda out: b"{}\n", "episodes.jsonl line 5: field 'cell' is missing"),
        (
            lambda out: json.dumps({**_first_row(out), "seed": "abc"}).encode() + b"\n",
            "field 'seed' is 'abc'",
        ),
        (
            lambda out: json.dumps({**_first_row(out), "record": {"success": 1}}).encode() + b"\n",
            "field 'record.success' is 1",
        ),
        (lambda out: b"\xff\xfe garbage\n", "episodes.jsonl line 5: bytes that are not UTF-8"),
        (lambda out: b"hello\n", "episodes.jsonl line 5: not JSON"),
        (lambda out: b"[" * 100_000 + b"\n", "line 5: JSON nested too deep"),
    ],
)
def test_a_damaged_row_is_named_by_report_and_resume(store: Path, tmp_path: Path, damage, named) -> None:
    out = _damaged_copy(store, tmp_path)
    with (out / "episodes.jsonl").open("ab") as f:
        f.write(damage(out))
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert named in _one_line(["report", str(out)])
    line = _one_line(["sweep", str(store / "s.yaml"), "--out", str(out), "--resume", "--workers", "0"])
    assert named in line
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before  # nothing rewritten


def test_a_torn_row_is_still_dropped_and_run_again(store: Path, tmp_path: Path) -> None:
    out = _damaged_copy(store, tmp_path)
    with (out / "episodes.jsonl").open("a") as f:
        f.write('{"cell":"abc","seed":')  # a writer killed mid-row
    res = runner.invoke(app, ["report", str(out)])
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        (lambda out: (out / "episodes.jsonl").unlink() or (out / "episodes.jsonl").mkdir(), "is not a file"),
        (lambda out: (out / "runs.jsonl").open("a").write("[1,2]\n"), "runs.jsonl line 2: a JSON list"),
        (lambda out: _edit_cells(out, lambda c: [[1, 2], *c[1:]]), "sweep.json: cells[0] is [1, 2]"),
        (
            lambda out: _edit_cells(out, lambda c: [{"request": c[0]["request"]}, *c[1:]]),
            "cells[0] is {'request'",
        ),
        (
            lambda out: _edit_cells(out, lambda c: [{**c[0], "request": {"bogus": 1}}, *c[1:]]),
            "cells[0]: 'request'",
        ),
        (lambda out: (out / "sweep.json").write_text("[" * 100_000), "sweep.json: not a sweep description"),
    ],
)
def test_damaged_store_files_are_named(store: Path, tmp_path: Path, damage, named) -> None:
    out = _damaged_copy(store, tmp_path)
    damage(out)
    assert named in _one_line(["report", str(out)])
    assert named in _one_line(
        ["sweep", str(store / "s.yaml"), "--out", str(out), "--resume", "--workers", "0"]
    )


def _edit_cells(out: Path, change) -> None:
    spec = json.loads((out / "sweep.json").read_text())
    spec["cells"] = change(spec["cells"])
    (out / "sweep.json").write_text(json.dumps(spec))


def test_a_spec_is_bounded_before_anything_is_built(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"  # ~500 bytes whose aliases expand to 10^9 values
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i, name in enumerate("bcdefghi"):
        prev = "abcdefghi"[i]
        lines.append(
            f"{name}: &{name} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]"
        )
    lines.append("target: expert:scripted\ntask_kwargs: {k: *i}")
    bomb.write_text("\n".join(lines) + "\n")
    assert bomb.stat().st_size < 1000
    assert "aliases are expanded" in _one_line(
        ["sweep", str(bomb), "--out", str(tmp_path / "o"), "--workers", "0"]
    )
    huge = tmp_path / "huge.yaml"
    latencies = ", ".join(f"fixed:{i}" for i in range(100))
    huge.write_text(f"target: expert:scripted\ntask: reach\nlatency: [{latencies}]\nepisodes: 1000000\n")
    line = _one_line(["sweep", str(huge), "--out", str(tmp_path / "o"), "--workers", "0"])
    assert "100 cells x 1,000,000 episodes" in line and f"{MAX_SWEEP_EPISODES:,}" in line
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"target": "expert:scripted", "pad": "x" * (2 << 20)}))
    assert "MiB" in _one_line(["sweep", str(big), "--out", str(tmp_path / "o")])
    assert "not a regular file" in _one_line(["sweep", "/dev/zero", "--out", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()


def test_local_episodes_are_made_as_the_pool_takes_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """The executor takes the episodes as an iterator, CHUNK_EPISODES at a time: a sweep never holds
    them all (counted by what the generator has handed out while the first episode runs)."""
    from hotloop.closedloop import executors
    from hotloop.closedloop.cells import Cell
    from hotloop.closedloop.eval_run import EvalRequest
    from hotloop.closedloop.execution import ExecOptions

    cell = Cell.of(EvalRequest(target="expert:scripted", task="reach", latency="fixed:0", episodes=9))
    handed: list[int] = []
    seen_at_first_row: list[int] = []

    def episodes():
        for ep in executors.episodes_of([cell], set(), ExecOptions(workers=0, progress=False)):
            handed.append(ep.seed)
            yield ep

    def on_row(row):
        if not seen_at_first_row:
            seen_at_first_row.append(len(handed))

    monkeypatch.setattr(executors, "CHUNK_EPISODES", 4)
    result = executors.execute([cell], episodes(), on_row, ExecOptions(workers=0, progress=False), 9)
    assert seen_at_first_row == [4] and len(handed) == 9 and result.summary["episodes"] == 9
