"""The run history (hotloop.measure.history): numbered, whole files; names resolve; bad folders refused."""

from __future__ import annotations

import json

import pytest

from hotloop.errors import ConfigError
from hotloop.measure.history import append_run, check_history_dir, list_runs, resolve_run
from hotloop.output_dir import MARKER


def test_append_numbers_runs_and_keeps_the_whole_result(tmp_path) -> None:
    folder = tmp_path / "hist"
    a = append_run(folder, "bench", "pi05:tiny", {"samples_ms": [1.0, 2.0]})
    b = append_run(folder, "eval", "demo:conveyor", {"per_episode": []}, extra={"task": "conveyor-pick"})
    c = append_run(folder, "bench", "/tmp/art", {"samples_ms": [3.0]}, policy="pi05:tiny")
    assert [r.number for r in (a, b, c)] == [1, 2, 3]
    assert a.path.name == "0001-bench-pi05_tiny.json" and c.path.name == "0003-bench-tmp_art.json"
    record = json.loads(b.path.read_text())
    assert record["task"] == "conveyor-pick" and record["result"] == {"per_episode": []}
    assert [r.id for r in list_runs(folder)] == [a.id, b.id, c.id]
    assert not [p for p in folder.iterdir() if p.name.startswith(".") and p.name != MARKER]  # no temp file
    assert list_runs(folder)[2].policy == "pi05:tiny"


def test_a_number_taken_meanwhile_is_skipped(tmp_path) -> None:
    append_run(tmp_path, "bench", "toy:mlp", {"samples_ms": [1.0]})
    # Another process wrote run 2 under another name between two of ours: ours becomes 3.
    (tmp_path / "0002-eval-demo_conveyor.json").write_text(
        json.dumps({"hotloop_history": 1, "kind": "eval", "target": "demo:conveyor", "result": {}})
    )
    assert append_run(tmp_path, "bench", "toy:mlp", {"samples_ms": [2.0]}).number == 3


def test_names_resolve(tmp_path) -> None:
    for target in ("toy:mlp", "pi05:tiny", "toy:mlp"):
        append_run(tmp_path, "bench", target, {"samples_ms": [1.0]})
    append_run(tmp_path, "eval", "demo:conveyor", {"per_episode": []})
    assert resolve_run(tmp_path, "2", "bench").target == "pi05:tiny"
    assert resolve_run(tmp_path, "0003-bench-toy_mlp", "bench").number == 3
    assert resolve_run(tmp_path, "0001", "bench").number == 1
    assert resolve_run(tmp_path, "latest", "bench", "toy:mlp").number == 3
    assert resolve_run(tmp_path, "latest~1", "bench", "toy:mlp").number == 1
    assert resolve_run(tmp_path, "latest", "bench").number == 3
    assert resolve_run(tmp_path, "latest", None).number == 4
    with pytest.raises(
        ConfigError, match=r"--baseline 4 is an eval run \(0004-eval-demo_conveyor\); give a bench run"
    ):
        resolve_run(tmp_path, "4", "bench")
    with pytest.raises(ConfigError, match="holds 2 bench runs of toy:mlp; name an earlier one"):
        resolve_run(tmp_path, "latest~2", "bench", "toy:mlp")
    with pytest.raises(ConfigError, match="--baseline 9 is not a file and names no run in the history"):
        resolve_run(tmp_path, "9", "bench")
    with pytest.raises(
        ConfigError, match="no history to look it up in; give a result JSON, or --history DIR"
    ):
        resolve_run(None, "latest", "bench")


def test_bad_folders_are_one_line(tmp_path) -> None:
    file = tmp_path / "f"
    file.write_text("x")
    with pytest.raises(ConfigError, match=r"--history .*/f is a file, not a directory"):
        check_history_dir(file)
    with pytest.raises(ConfigError, match=r"DIR .*/f is a file, not a history folder"):
        list_runs(file)
    with pytest.raises(ConfigError, match=r"DIR .*/nope does not exist"):
        list_runs(tmp_path / "nope")
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "0001-bench-x.json").write_text("{not json")
    with pytest.raises(ConfigError, match="is not valid JSON"):
        list_runs(tmp_path / "h")
    (tmp_path / "h" / "0001-bench-x.json").write_text(json.dumps({"samples_ms": [1]}))
    with pytest.raises(ConfigError, match="is not a hotloop history run"):
        list_runs(tmp_path / "h")
