"""How every command reports bad input: one line naming the value and the fix, exit code 2 (and an
unhandled Ctrl-C: one line, exit code 130)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from hotloop.errors import HotloopError

F = TypeVar("F", bound=Callable[..., Any])


def user_errors(fn: F) -> F:
    """Turn a HotloopError raised by a command into `error: ...` on stderr and exit code 2 (no traceback)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except HotloopError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:  # Ctrl-C the command did not handle itself: one line, not a silent 130
            from hotloop.interrupts import INTERRUPTED

            typer.echo(INTERRUPTED, err=True)
            raise typer.Exit(130) from None
        except ImportError as exc:  # Ctrl-C inside a C extension's import (MuJoCo's) comes out as this
            from hotloop.interrupts import INTERRUPTED, caused_by_interrupt

            if not caused_by_interrupt(exc):
                raise
            typer.echo(INTERRUPTED, err=True)
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


def register(app: typer.Typer, commands: dict[str, Callable[..., Any]]) -> None:
    """Each command on `app` under its name, reporting bad input as `user_errors` does."""
    for name, command in commands.items():
        app.command(name)(user_errors(command))


def run_alone(add_commands: Callable[[typer.Typer], None]) -> None:
    """`python -m hotloop.PACKAGE.commands ARGS`: that module's commands on an app of their own."""
    import sys

    app = typer.Typer()
    add_commands(app)
    app(sys.argv[1:])
