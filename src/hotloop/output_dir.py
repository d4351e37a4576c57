"""The one rule for a folder a command writes (`-o`, `--out`, `--int8`, `--history`; docs/cli-rules.md).

A command writes a folder when it

- creates it (the path does not exist yet, or is an empty folder), or
- wrote it before: the folder holds the command's marker (a `.hotloop-output.json` naming the command,
  or the file its output is known by: an artifact's `manifest.json`; a sweep store is its own
  `sweep.json`, resumed with --resume), or
- the user said `--overwrite`.

Anything else is refused in one line naming the folder, what it holds and `--overwrite`. The folder is
never one of the command's inputs, inside one, or holding one (the dataset it trains on, the checkpoint
it compiles): that is refused even with `--overwrite`. Every check runs before any work, so a refusal
loses nothing and writes nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from hotloop.errors import ConfigError

MARKER = ".hotloop-output.json"
OVERWRITE_HELP = (
    "write into the output folder even when it holds files this command did not write (docs/cli-rules.md)"
)
MARKER_READ_LIMIT = 1 << 20  # a marker is a few hundred bytes; a larger file is not one of ours


@dataclass(frozen=True)
class Marker:
    """The file that marks a folder a command wrote: its JSON object holds `field` (equal to `value`,
    when one is given)."""

    file: str
    field: str
    value: str | None = None


def command_marker(command: str) -> Marker:
    """The generic marker, written by `OutputDir.create` (`command`: e.g. "train-demo")."""
    return Marker(MARKER, "command", command)


ARTIFACT_MARKER = Marker("manifest.json", "hotloop_version")  # compile, compress: the artifact's own


Inputs = Mapping[str, "str | os.PathLike[str] | None"]


@dataclass(frozen=True)
class OutputDir:
    """A checked output folder: `create()` makes it (and writes the generic marker) when the work starts."""

    path: Path
    flag: str
    command: str
    existed: bool  # held files before this command ran (its own earlier output, or --overwrite)

    def create(self) -> Path:
        self.path.mkdir(parents=True, exist_ok=True)
        write_marker(self.path, self.command)
        return self.path

    @contextlib.contextmanager
    def writing(self) -> Iterator[Path]:
        """`create()` for the work inside the block; a block that raises before writing anything else
        leaves no folder behind (a refused run writes nothing)."""
        made = not self.path.exists()
        self.create()
        try:
            yield self.path
        except BaseException:
            if made and [p.name for p in self.path.iterdir()] == [MARKER]:
                (self.path / MARKER).unlink()
                self.path.rmdir()
            raise


def write_marker(folder: Path, command: str) -> Path:
    """Mark `folder` as written by `command` (a later run of the command may write it again)."""
    import hotloop
    from hotloop.io import atomic_write_json

    return atomic_write_json(
        Path(folder) / MARKER, {"command": command, "hotloop_version": hotloop.__version__}
    )


def _resolved(path: str | os.PathLike[str]) -> Path:
    return Path(os.path.realpath(os.path.abspath(path)))


def _within(inner: Path, outer: Path) -> bool:
    return inner == outer or outer in inner.parents


def check_not_input(path: str | os.PathLike[str], flag: str, inputs: Inputs) -> None:
    """Refuse an output path that is an input, lies inside one, or (a folder) holds one."""
    out = _resolved(path)
    for input_flag, given in inputs.items():
        if given is None or str(given) == "" or not Path(given).exists():
            continue  # a target name (demo:conveyor), not a path
        src = _resolved(given)
        if _within(out, src):
            where = "is" if out == src else "lies inside"
            raise ConfigError(
                f"{flag} {path} {where} the input {input_flag} {given}; writing there would change what "
                "this command reads: give a folder outside it"
            )
        if _within(src, out):
            raise ConfigError(
                f"{flag} {path} holds the input {input_flag} {given}; writing there could replace it: give "
                "a folder that does not contain the inputs"
            )


def _marked(folder: Path, markers: Iterable[Marker]) -> bool:
    for marker in markers:
        path = folder / marker.file
        try:
            if not path.is_file() or path.stat().st_size > MARKER_READ_LIMIT:
                continue
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            continue
        if (
            isinstance(data, dict)
            and marker.field in data
            and (marker.value is None or data[marker.field] == marker.value)
        ):
            return True
    return False


def _shown(names: list[str]) -> str:
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def claim_output_dir(
    path: str | os.PathLike[str],
    flag: str,
    command: str,
    *,
    overwrite: bool = False,
    inputs: Inputs | None = None,
    markers: Iterable[Marker] = (),
    overwrite_flag: str | None = "--overwrite",
) -> OutputDir:
    """Check `path` as `command`'s output folder (the rule in this module's docstring), before any work.

    `markers`: besides the command's own generic marker, the files that mark a folder it wrote.
    `overwrite_flag`: how the refusal names the way out (None: the command has none, give a new folder).
    """
    from hotloop.io import check_output_dir

    target = Path(path)
    check_not_input(target, flag, inputs or {})
    check_output_dir(target, flag)  # a file in the way, an unwritable parent: one line now
    existed = target.is_dir() and any(target.iterdir())
    if existed and not overwrite and not _marked(target, [command_marker(command), *markers]):
        held = sorted(p.name + ("/" if p.is_dir() else "") for p in target.iterdir())
        way_out = f"; or add {overwrite_flag} to write into it anyway" if overwrite_flag else ""
        raise ConfigError(
            f"{flag} {path} already holds files `hotloop {command}` did not write ({_shown(held)}); give a "
            f"new or empty folder{way_out}"
        )
    return OutputDir(target, flag, command, existed)


def check_output_file_not_input(path: str | os.PathLike[str] | None, flag: str, inputs: Inputs) -> None:
    """`check_not_input` for an output file (`--json`, `--plot`): never one of the command's inputs."""
    if path is not None:
        check_not_input(path, flag, inputs)
