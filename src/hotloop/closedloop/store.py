"""The results store of a sweep: the folder that makes it resumable and its report rebuildable.

    OUT/sweep.json      the cells (key + request), written before any episode; a resume checks that it
                        names the same cells
    OUT/episodes.jsonl  one row per finished episode, appended, flushed and fsynced as it arrives:
                        {"cell", "seed", "outcome": success|failure|error, "record" (the evaluator's
                        record, as `hotloop eval --json` holds it), "node", "pid", "episode_s", "build_s",
                        "wait_s" (the worker idle before it: `hotloop.closedloop.execution`)}
    OUT/runs.jsonl      one line per executor run: wall time, episodes/s, overhead, per-node counts

A killed driver can leave half a line at the end of episodes.jsonl: it is dropped on reading (that
episode runs again on resume). Rows are never rewritten; a (cell, seed) seen twice keeps the first.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from hotloop.closedloop.cells import Cell
from hotloop.errors import ConfigError

SPEC_FILE = "sweep.json"
ROWS_FILE = "episodes.jsonl"
RUNS_FILE = "runs.jsonl"
VERSION = 1


def outcome(record: dict[str, Any]) -> str:
    if record.get("error"):
        return "error"
    return "success" if record["success"] else "failure"


def _dumps(obj: Any) -> str:
    from hotloop.io import _finite, _jsonable

    try:
        return json.dumps(obj, allow_nan=False, default=_jsonable, separators=(",", ":"))
    except ValueError:  # a non-finite float: null, as every JSON hotloop writes
        return json.dumps(_finite(obj), allow_nan=False, default=_jsonable, separators=(",", ":"))


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The complete rows of episodes.jsonl, first of each (cell, seed); a torn last line is dropped."""
    rows: list[dict[str, Any]] = []
    seen: set[tuple[str, int]] = set()
    if not path.is_file():
        return rows
    with path.open("r", encoding="utf-8") as f:
        for line in f:
            if not line.endswith("\n"):
                break  # the driver died while writing this one
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            ident = (row.get("cell"), row.get("seed"))
            if ident not in seen:
                seen.add(ident)  # type: ignore[arg-type]
                rows.append(row)
    return rows


@dataclass
class ResultsStore:
    out: Path
    cells: list[Cell]
    rows: list[dict[str, Any]] = field(default_factory=list)
    _file: IO[str] | None = None

    @classmethod
    def open(cls, out: Path, cells: list[Cell], resume: bool, flag: str = "--out") -> ResultsStore:
        """Check `out` before any work: a new sweep needs a folder without one; `resume` one made by the
        same cells (the seed ranges may differ: a widened range runs only the new seeds)."""
        from hotloop.io import atomic_write_json, check_output_dir

        check_output_dir(out, flag)
        spec = out / SPEC_FILE
        if spec.exists() or (out / ROWS_FILE).exists():
            if not resume:
                raise ConfigError(
                    f"{flag} {out} already holds a sweep; add --resume to run only its missing episodes, "
                    "or give a new folder"
                )
            stored = read_spec(out)
            theirs = {c["key"] for c in stored["cells"]}
            ours = {c.key for c in cells}
            if theirs != ours:
                extra = sorted(ours - theirs)
                named = next((c.label() for c in cells if c.key in extra), None)
                raise ConfigError(
                    f"--resume: {out} was made by another spec ({len(theirs)} cells there, {len(ours)} here"
                    + (f"; not there: {named}" if named else "")
                    + "); resume with the spec that made it, or give a new --out folder"
                )
        elif resume:
            raise ConfigError(f"--resume: {out} holds no sweep ({SPEC_FILE} missing); drop --resume")
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(spec, {"version": VERSION, "cells": [c.to_dict() for c in cells]})
        store = cls(out, cells, read_rows(out / ROWS_FILE))
        path = out / ROWS_FILE
        if path.is_file() and path.stat().st_size:
            with path.open("rb") as f:  # cut a torn last line, so the next row starts on a line of its own
                f.seek(-1, os.SEEK_END)
                torn = f.read(1) != b"\n"
            if torn:
                with path.open("a", encoding="utf-8") as f:
                    f.write("\n")
        store._file = path.open("a", encoding="utf-8")
        return store

    def done(self) -> set[tuple[str, int]]:
        return {(r["cell"], int(r["seed"])) for r in self.rows}

    def append(self, row: dict[str, Any]) -> None:
        """Write one row and make it durable before the next episode is counted."""
        assert self._file is not None
        self._file.write(_dumps(row) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self.rows.append(row)

    def log_run(self, summary: dict[str, Any]) -> None:
        with (self.out / RUNS_FILE).open("a", encoding="utf-8") as f:
            f.write(_dumps(summary) + "\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_spec(out: Path) -> dict[str, Any]:
    path = out / SPEC_FILE
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            f"{out} holds no sweep ({SPEC_FILE} missing); give the --out folder of a sweep"
        ) from None
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(
            f"{path}: not a sweep description ({e}); give the --out folder of a sweep"
        ) from None
    if (
        not isinstance(spec, dict)
        or spec.get("version") != VERSION
        or not isinstance(spec.get("cells"), list)
    ):
        raise ConfigError(
            f"{path}: not a version-{VERSION} sweep description; give the --out folder of a sweep"
        )
    return spec


def read_runs(out: Path) -> list[dict[str, Any]]:
    path = out / RUNS_FILE
    if not path.is_file():
        return []
    runs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            runs.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return runs
