"""A history of runs: every measurement kept, numbered, as the baseline for the next (R1.6).

`--history DIR` (or the environment variable HOTLOOP_HISTORY) on `hotloop bench`, `eval` and `demo`
appends the run's whole result (samples, per-episode records, the machine fingerprint) as one file,
`DIR/0007-bench-pi05_tiny.json`. A file is written whole under a temporary name and then linked to its
number, which fails if another process took the number first: concurrent runs never overwrite one
another, and a crash never leaves half a file. A run is named, for `--baseline`, by its number (`7`),
its id, or `latest` / `latest~N` (the newest run, or N before it, of the same kind and target).
"""

from __future__ import annotations

import os
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hotloop.errors import ConfigError
from hotloop.io import atomic_write_json, check_output_dir, read_json_file

HISTORY_ENV = "HOTLOOP_HISTORY"
FORMAT = 1
KINDS = ("bench", "eval", "demo")
_NAME = re.compile(r"^(\d{4,})-([a-z]+)-(.*)\.json$")
_LATEST = re.compile(r"^latest(?:~(\d+))?$")


@dataclass(frozen=True)
class HistoryRun:
    number: int
    id: str
    kind: str
    target: str  # the target as given (bench, eval) or "demo"
    policy: str  # what it measures: an artifact's source target, else the target
    created: str
    path: Path

    def load(self) -> dict[str, Any]:
        """The whole record: {"hotloop_history", "id", ..., "result": what --json would hold}."""
        return _read_record(self.path)

    @property
    def result(self) -> dict[str, Any]:
        result = self.load()["result"]
        assert isinstance(result, dict)
        return result


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "_", text).strip("_")[:48] or "run"


def _read_record(path: Path) -> dict[str, Any]:
    try:
        data = read_json_file(path)
    except ConfigError as e:
        raise ConfigError(f"history run {e}; remove or restore it") from None
    if not isinstance(data, dict) or data.get("hotloop_history") != FORMAT or "result" not in data:
        raise ConfigError(f"{path} is not a hotloop history run; keep only runs in a history folder")
    return data


def check_history_dir(path: str | os.PathLike[str] | None, flag: str = "--history") -> None:
    """Before any work: the folder can be made and written (a file there is one line, exit 2), and it is
    a history: new, empty, or holding history runs (`hotloop.output_dir`; never another folder's files)."""
    if path is None:
        return
    folder = Path(path)
    if folder.is_dir() and any(_NAME.match(p.name) for p in folder.iterdir()):
        check_output_dir(path, flag)  # runs an earlier version kept, before the marker
        return
    from hotloop.output_dir import claim_output_dir

    claim_output_dir(path, flag, "history", overwrite_flag=None)


def check_readable_history(path: str | os.PathLike[str], flag: str = "DIR") -> Path:
    """A history to read: an existing folder."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{flag} {path} is a file, not a history folder; give the folder --history wrote")
    if not folder.is_dir():
        raise ConfigError(f"{flag} {path} does not exist; give the folder --history wrote")
    return folder


def list_runs(path: str | os.PathLike[str], flag: str = "DIR") -> list[HistoryRun]:
    """Every run in the history, oldest first (by number)."""
    folder = check_readable_history(path, flag)
    runs = []
    for file in folder.iterdir():
        m = _NAME.match(file.name)
        if not m or not file.is_file():
            continue
        meta = _read_record(file)
        runs.append(
            HistoryRun(
                number=int(m.group(1)),
                id=file.stem,
                kind=str(meta.get("kind")),
                target=str(meta.get("target")),
                policy=str(meta.get("policy") or meta.get("target")),
                created=str(meta.get("created")),
                path=file,
            )
        )
    return sorted(runs, key=lambda r: r.number)


def append_run(
    path: str | os.PathLike[str],
    kind: str,
    target: str,
    result: dict[str, Any],
    policy: str | None = None,
    extra: dict[str, Any] | None = None,
) -> HistoryRun:
    """Append `result` as the next numbered run; returns it."""
    if kind not in KINDS:
        raise ValueError(f"history kind {kind!r} is not one of {KINDS}")
    folder = Path(path)
    check_history_dir(folder)
    if not folder.is_dir() or not any(folder.iterdir()):
        from hotloop.output_dir import write_marker

        folder.mkdir(parents=True, exist_ok=True)
        write_marker(folder, "history")
    created = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    pending = folder / f".pending-{os.getpid()}-{uuid.uuid4().hex}.json"
    try:
        for _ in range(1000):
            numbers = [r.number for r in list_runs(folder, "--history")]
            number = max(numbers, default=0) + 1
            run_id = f"{number:04d}-{kind}-{_slug(target)}"
            record = {
                "hotloop_history": FORMAT,
                "id": run_id,
                "number": number,
                "kind": kind,
                "target": target,
                "policy": policy or target,
                "created": created,
                **(extra or {}),
                "result": result,
            }
            atomic_write_json(pending, record)
            final = folder / f"{run_id}.json"
            try:
                os.link(pending, final)  # fails when another run took the number: try the next
            except FileExistsError:
                continue
            except OSError:  # a file system without hard links: check, then rename (not race-free)
                if final.exists():
                    continue
                os.replace(pending, final)
            return HistoryRun(number, run_id, kind, target, policy or target, created, final)
        raise ConfigError(f"--history {path}: could not take a run number after 1000 tries")
    finally:
        pending.unlink(missing_ok=True)


def resolve_run(
    path: str | os.PathLike[str] | None,
    name: str,
    kind: str | None,
    policy: str | None = None,
    flag: str = "--baseline",
) -> HistoryRun:
    """The run `name` names: a number, an id, `latest` or `latest~N` (the newest of `kind` and `policy`,
    each None for any); a run of another kind is refused."""
    if path is None:
        raise ConfigError(
            f"{flag} {name}: no such file, and no history to look it up in; give a result JSON, or "
            f"--history DIR (or set {HISTORY_ENV}) to name a run"
        )
    runs = list_runs(path, "--history")
    latest = _LATEST.match(name)
    if latest:
        back = int(latest.group(1) or 0)
        same = [r for r in runs if kind in (None, r.kind) and policy in (None, r.policy)]
        if back >= len(same):
            what = f"{kind or ''} runs".strip() + (f" of {policy}" if policy else "")
            raise ConfigError(
                f"{flag} {name}: the history {path} holds {len(same)} {what}; name an earlier one"
            )
        return same[-1 - back]
    found = [r for r in runs if r.id == name or (name.isdigit() and r.number == int(name))]
    if not found:
        found = [r for r in runs if r.id.startswith(name)]
    if len(found) != 1:
        shown = ", ".join(r.id for r in runs[-5:]) or "none yet"
        why = "is not a file and names no run" if not found else f"names {len(found)} runs"
        raise ConfigError(f"{flag} {name} {why} in the history {path} (latest: {shown}); give a number or id")
    run = found[0]
    if kind is not None and run.kind != kind:
        a = "an" if run.kind[:1] in "aeiou" else "a"
        raise ConfigError(f"{flag} {name} is {a} {run.kind} run ({run.id}); give a {kind} run")
    return run
