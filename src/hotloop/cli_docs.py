"""docs/cli.md, rendered from the command line's own parameters so that the reference cannot drift.

    python -m hotloop.cli_docs > docs/cli.md

Every command and sub-command of the app is rendered with click's plain help formatter at a fixed width:
the same text `hotloop CMD --help` shows, without the terminal-dependent boxes, colours and wrapping of
the rich help. tests/test_cli_docs.py regenerates it and compares with the committed file.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import typer
from typer import _click as click  # typer vendors click; its base class holds the plain formatter
from typer.core import TyperGroup

WIDTH = 100
REGENERATE = ".venv/bin/python -m hotloop.cli_docs > docs/cli.md"
_PREAMBLE = f"""# Command-line reference

Generated from the command line's own help (`{REGENERATE}`); do not edit it by
hand: `tests/test_cli_docs.py` fails when it and `hotloop CMD --help` differ. What each command is for,
with examples and measured figures: [commands.md](commands.md); the rules every command keeps (output
folders, bounds on what is read, damaged files): [cli-rules.md](cli-rules.md).
"""


def _commands(ctx: click.Context) -> Iterator[click.Context]:
    """The context of every visible command under `ctx`, depth first, in the app's own order."""
    command = ctx.command
    if not isinstance(command, TyperGroup):
        return
    for name in command.list_commands(ctx):
        sub = command.get_command(ctx, name)
        if sub is None or sub.hidden:
            continue
        sub_ctx = click.Context(sub, info_name=name, parent=ctx)
        yield sub_ctx
        yield from _commands(sub_ctx)


def _plain_help(ctx: click.Context) -> str:
    formatter = click.HelpFormatter(width=WIDTH, max_width=WIDTH)
    # The base class's format_help: typer's override would render rich boxes sized to the terminal.
    click.Command.format_help(ctx.command, ctx, formatter)
    return formatter.getvalue().rstrip() + "\n"


def render(app: typer.Typer, prog_name: str = "hotloop") -> str:
    """The whole reference as Markdown: the root's help, then each command's under its own heading."""
    root = click.Context(typer.main.get_command(app), info_name=prog_name)
    contexts = list(_commands(root))
    index = " · ".join(f"[{c.command_path.removeprefix(prog_name + ' ')}](#{_anchor(c)})" for c in contexts)
    parts = [_PREAMBLE, index + "\n", f"## {prog_name}\n", "```text\n" + _plain_help(root) + "```\n"]
    for ctx in contexts:
        parts += [f"## {ctx.command_path}\n", "```text\n" + _plain_help(ctx) + "```\n"]
    return "\n".join(parts)


def _anchor(ctx: click.Context) -> str:
    """GitHub's anchor for the heading `## hotloop train-demo`: lower case, spaces to hyphens."""
    return ctx.command_path.lower().replace(" ", "-")


def main() -> None:
    from hotloop.cli import app

    sys.stdout.write(render(app))


if __name__ == "__main__":
    main()
