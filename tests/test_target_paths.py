"""A path that is not a target gets the same explanation from every command that takes a target: what a
folder target needs (issue 24, defect 8), not "unknown target" with the list of names."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from hotloop.cli import app

COMMANDS = [
    ["bench"],
    ["eval", "--episodes", "1", "--workers", "0"],
    ["serve"],
    ["compile", "-o", "{tmp}/art"],
    ["compress", "--recipe", "quantize", "-o", "{tmp}/art"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_a_path_that_is_no_target_is_explained_alike(tmp_path: Path, command: list[str]) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("not a model")
    for target, what in (
        (tmp_path / "empty", "is a folder but neither a compiled artifact (no manifest.json) nor a LeRobot"),
        (
            tmp_path / "missing",
            "does not exist; a target is a folder (a compiled artifact with manifest.json",
        ),
        (tmp_path / "notes.txt", "is a file; a target is a folder (a compiled artifact with manifest.json"),
    ):
        args = [command[0], str(target), *(a.format(tmp=tmp_path) for a in command[1:])]
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2, (args, res.output)
        lines = res.output.strip().splitlines()
        if command[0] == "serve" and target.is_file():  # serve says it in its own words, before the lookup
            assert "is a file" in lines[-1] and "LeRobot checkpoint folder" in lines[-1], res.output
        else:
            assert lines[-1].startswith(f"error: {target} {what}"), res.output
        assert "unknown target" not in res.output
    assert not (tmp_path / "art").exists()


def test_a_mistyped_name_still_gets_the_names() -> None:
    res = CliRunner().invoke(app, ["bench", "pi05:smal"])
    assert res.exit_code == 2 and "Did you mean 'pi05:small'?" in res.output
