"""docs/cli.md is the command line's own help, regenerated and compared: it cannot drift from the code."""

from __future__ import annotations

import difflib
from pathlib import Path

from typer.core import TyperGroup
from typer.main import get_command

from hotloop.cli import app
from hotloop.cli_docs import REGENERATE, WIDTH, render

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_committed_cli_reference_matches_the_cli() -> None:
    committed, generated = (DOCS / "cli.md").read_text(), render(app)
    if committed != generated:
        diff = difflib.unified_diff(
            committed.splitlines(), generated.splitlines(), "docs/cli.md", "the CLI's help", lineterm="", n=1
        )
        shown = "\n".join(list(diff)[:30])
        raise AssertionError(
            f"docs/cli.md differs from the CLI's help: regenerate it with `{REGENERATE}`\n{shown}"
        )


def test_every_command_and_option_is_in_the_reference() -> None:
    # What the comparison above cannot see: a renderer that dropped a command or a flag from both.
    text = render(app)
    root = get_command(app)
    assert isinstance(root, TyperGroup)
    names = [name for name, cmd in root.commands.items() if not cmd.hidden]
    assert len(names) >= 15
    for name in names:
        section = text.split(f"\n## hotloop {name}\n", 1)[1].split("\n## ", 1)[0]
        assert section.startswith("\n```text\nUsage: hotloop " + name), name
        for param in root.commands[name].params:
            for flag in [*param.opts, *param.secondary_opts]:
                if flag.startswith("-"):
                    assert flag in section, f"{flag} of `hotloop {name}` missing from its section"
            if param.help:  # type: ignore[attr-defined]
                first_word = param.help.split()[0]  # type: ignore[attr-defined]
                assert first_word in section, f"help of {param.name} of `hotloop {name}` missing"
    code_lines = [
        line for block in text.split("```text\n")[1:] for line in block.split("```")[0].splitlines()
    ]
    assert max(len(line) for line in code_lines) <= WIDTH
