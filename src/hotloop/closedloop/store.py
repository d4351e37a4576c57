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


OUTCOMES = ("success", "failure", "error")
# The record fields a report reads, with the types they must have (None allowed where a crash leaves one).
_NUMBER = (int, float)
_RECORD_FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {  # field -> (types, None allowed)
    "success": ((bool,), False),
    "task_time_s": (_NUMBER, True),
    "sim_time_s": (_NUMBER, True),
    "jerk": (_NUMBER, True),
    "chunk_discontinuity": (_NUMBER, True),
    "boundaries": ((int,), False),
    "seed": ((int,), False),
    "latency_ms": ((dict,), False),
}
MAX_LINE_BYTES = 64 << 20  # one episode's row is kilobytes; a line past this is not one of ours


def _damaged(path: Path, line: int, what: str) -> ConfigError:
    again = " (its episode runs again with --resume)" if path.name == ROWS_FILE else ""
    return ConfigError(
        f"{path} line {line}: {what}; the store is damaged: restore the file, or delete that line{again}"
    )


def _checked_row(row: Any, path: Path, line: int) -> dict[str, Any]:
    """`row` as a store row, or a ConfigError naming the line and the field."""
    if not isinstance(row, dict):
        raise _damaged(path, line, f"a JSON {type(row).__name__}, not an episode row")
    for name, kind in (("cell", str), ("outcome", str), ("record", dict)):
        if not isinstance(row.get(name), kind):
            got = "missing" if name not in row else repr(row[name])[:40]
            raise _damaged(path, line, f"field {name!r} is {got}, not a {kind.__name__}")
    seed = row.get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        got = "missing" if "seed" not in row else repr(seed)[:40]
        raise _damaged(path, line, f"field 'seed' is {got}, not a whole number >= 0")
    if row["outcome"] not in OUTCOMES:
        raise _damaged(path, line, f"field 'outcome' is {row['outcome']!r}, not one of {', '.join(OUTCOMES)}")
    record = row["record"]
    for name, (types, nullable) in _RECORD_FIELDS.items():
        value = record.get(name)
        if value is None and nullable and name in record:
            continue
        if isinstance(value, bool) and bool not in types or not isinstance(value, types):
            got = "missing" if name not in record else repr(value)[:40]
            raise _damaged(path, line, f"field 'record.{name}' is {got}")
    if record.get("error") is not None and not isinstance(record["error"], str):
        raise _damaged(path, line, f"field 'record.error' is {record['error']!r}, not a message")
    return row


def _lines(path: Path) -> Any:
    """(line number, text, complete) of a JSON-lines file, each line read to a bounded length."""
    if path.exists() and not path.is_file():
        raise ConfigError(f"{path} is not a file (a folder?); the store is damaged: restore the file")
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return
    except OSError as e:
        raise ConfigError(f"{path}: cannot read it ({e.strerror or e})") from None
    with f:
        number = 0
        while raw := f.readline(MAX_LINE_BYTES + 1):
            number += 1
            if len(raw) > MAX_LINE_BYTES:
                raise _damaged(path, number, f"a line longer than {MAX_LINE_BYTES >> 20} MiB")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise _damaged(path, number, "bytes that are not UTF-8 text") from None
            yield number, text, raw.endswith(b"\n")


def _parsed(text: str, path: Path, number: int) -> Any | None:
    """A line's JSON value; None for a torn row (a row's start cut short: a killed writer's last line,
    which a later run ended with a newline). Any other line that is not JSON is damage."""
    try:
        return json.loads(text)
    except RecursionError:
        raise _damaged(path, number, "JSON nested too deep to be a row") from None
    except json.JSONDecodeError:
        if text.lstrip().startswith("{"):
            return None
        raise _damaged(path, number, f"not JSON ({text.strip()[:40]!r})") from None


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The complete rows of episodes.jsonl, first of each (cell, seed); a torn row is dropped (that
    episode runs again on resume). Anything else that is not a row is a ConfigError naming its line."""
    rows: list[dict[str, Any]] = []
    seen: set[tuple[str, int]] = set()
    for number, text, complete in _lines(path):
        if not complete:
            break  # the driver died while writing this one
        row = _parsed(text, path, number)
        if row is None:
            continue
        row = _checked_row(row, path, number)
        ident = (row["cell"], row["seed"])
        if ident not in seen:
            seen.add(ident)
            rows.append(row)
    return rows


@dataclass
class ResultsStore:
    out: Path
    cells: list[Cell]
    rows: list[dict[str, Any]] = field(default_factory=list)
    _file: IO[str] | None = None

    @classmethod
    def open(
        cls,
        out: Path,
        cells: list[Cell],
        resume: bool,
        flag: str = "--out",
        overwrite: bool = False,
        inputs: dict[str, Any] | None = None,
    ) -> ResultsStore:
        """Check `out` before any work: a new sweep needs a new or empty folder (or `overwrite` for one
        holding other files: `hotloop.output_dir`); `resume` one made by the same cells (the seed ranges
        may differ: a widened range runs only the new seeds). A damaged store is refused, never rewritten."""
        from hotloop.io import atomic_write_json, check_output_dir
        from hotloop.output_dir import check_not_input, claim_output_dir

        spec = out / SPEC_FILE
        path = out / ROWS_FILE
        if spec.exists() or path.exists():  # a store (a damaged one is named below, not called a stranger's)
            check_not_input(out, flag, inputs or {})
            check_output_dir(out, flag)
        else:
            claim_output_dir(out, flag, "sweep", overwrite=overwrite, inputs=inputs)
        if spec.exists() or path.exists():
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
        rows = read_rows(path)  # a damaged row is refused here, before anything is written
        read_runs(out)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(spec, {"version": VERSION, "cells": [c.to_dict() for c in cells]})
        store = cls(out, cells, rows)
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


MAX_SPEC_BYTES = 256 << 20  # sweep.json: a cell is about a kilobyte


def read_spec(out: Path) -> dict[str, Any]:
    """OUT/sweep.json, checked: every cell a {"key", "request"} that `hotloop eval` would take."""
    from hotloop.closedloop.eval_run import EvalRequest
    from hotloop.errors import HotloopError
    from hotloop.io import read_text_bounded

    path = out / SPEC_FILE
    if not path.exists():
        raise ConfigError(f"{out} holds no sweep ({SPEC_FILE} missing); give the --out folder of a sweep")
    try:
        spec = json.loads(read_text_bounded(path, "", MAX_SPEC_BYTES))
    except (json.JSONDecodeError, RecursionError) as e:
        raise ConfigError(
            f"{path}: not a sweep description ({type(e).__name__}: {str(e)[:80]}); give the --out folder "
            "of a sweep"
        ) from None
    if (
        not isinstance(spec, dict)
        or spec.get("version") != VERSION
        or not isinstance(spec.get("cells"), list)
    ):
        raise ConfigError(
            f"{path}: not a version-{VERSION} sweep description; give the --out folder of a sweep"
        )
    for i, cell in enumerate(spec["cells"]):
        where = f"{path}: cells[{i}]"
        if not isinstance(cell, dict) or not isinstance(cell.get("key"), str):
            raise ConfigError(f"{where} is {repr(cell)[:40]}, not a cell with a 'key'; the store is damaged")
        if not isinstance(cell.get("request"), dict):
            raise ConfigError(f"{where}: 'request' is not an object; the store is damaged")
        try:
            EvalRequest(**cell["request"])
        except TypeError as e:
            raise ConfigError(f"{where}: 'request' {e}; the store is damaged") from None
        except HotloopError as e:
            raise ConfigError(f"{where}: 'request': {e}; the store is damaged") from None
    return spec


def read_runs(out: Path) -> list[dict[str, Any]]:
    """OUT/runs.jsonl: one object per executor run (a torn last line is dropped)."""
    path = out / RUNS_FILE
    runs = []
    for number, text, complete in _lines(path):
        run = _parsed(text, path, number)
        if run is None and not complete:
            break
        if run is None:
            continue
        if not isinstance(run, dict):
            raise _damaged(path, number, f"a JSON {type(run).__name__}, not an executor run")
        runs.append(run)
    return runs
