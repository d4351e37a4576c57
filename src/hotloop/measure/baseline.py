"""`hotloop bench --baseline OLD`: this run against an earlier one, stage by stage, with statistics.

OLD is a `hotloop bench --json` file or a run of a `--history` folder. Each stage and the total get the
p50 and p99 ratios (now / then) with bootstrap intervals, the Mann-Whitney p-value and a verdict at the
threshold (`hotloop.measure.compare`); beneath, what differs between the two runs' settings and machines
(`hotloop.measure.differences`). With `--fail-on-regression` a slower row is exit code 3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hotloop.errors import ConfigError
from hotloop.measure.compare import FASTER, NOT_COMPARABLE, SLOWER, LatencyChange, latency_change
from hotloop.measure.differences import (
    CONTEXT,
    VARIABLE,
    Difference,
    Differences,
    diff_mappings,
    differences,
    fingerprint_differences,
)

DEFAULT_THRESHOLD = 0.05
_BENCH_KEYS = ("target", "samples_ms", "stages", "latency_ms")
_INFO_CONTEXT = ("memory",)  # measured, not chosen: resident memory moves from run to run
_INFO_SKIPPED = ("work",)  # analytic work follows from the shape and precision, already compared


def parse_threshold(text: str | None, flag: str = "--threshold") -> float:
    """'5%' -> 0.05 (a fraction such as 0.05 is read as it is); the default 5 % when None."""
    if text is None:
        return DEFAULT_THRESHOLD
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: write a percentage such as 5%") from None
    if not raw.endswith("%") and value >= 1:
        raise ConfigError(f"{flag} {text!r}: write a percentage such as {raw}% (or a fraction below 1)")
    if not 0 <= value < 10:
        raise ConfigError(f"{flag} {text!r}: need a percentage from 0% to below 1000%, e.g. 5%")
    return value


def read_json_result(spec: str, flag: str = "--baseline") -> dict[str, Any]:
    """A result file as a JSON object, or one line saying why not."""
    from hotloop.io import read_json_file

    path = Path(spec)
    if path.is_dir():
        raise ConfigError(f"{flag} {spec} is a directory; give a result JSON file or a history run")
    if not path.exists():
        raise ConfigError(f"{flag} {spec} does not exist; give a result JSON file or a history run")
    data = read_json_file(path, flag)
    if not isinstance(data, dict):
        raise ConfigError(f"{flag} {spec} holds a JSON {type(data).__name__}, not a hotloop result")
    return data


def looks_like_path(spec: str) -> bool:
    """A file that exists, or a spelling only a path has (a history run is `7`, an id, or `latest`)."""
    return Path(spec).exists() or spec.endswith(".json") or "/" in spec


def result_kind(data: dict[str, Any]) -> str:
    if "per_episode" in data or ("runs" in data and isinstance(data["runs"], list)):
        return "eval"
    if "rungs" in data:
        return "demo"
    if all(k in data for k in _BENCH_KEYS):
        return "bench"
    return "unknown"


def check_bench_result(data: dict[str, Any], spec: str, flag: str = "--baseline") -> None:
    kind = result_kind(data)
    if kind == "eval":
        raise ConfigError(
            f"{flag} {spec} is a `hotloop eval` result; compare it with `hotloop eval --baseline`"
        )
    if kind == "demo":
        raise ConfigError(f"{flag} {spec} is a `hotloop demo` report, not a bench result")
    missing = [k for k in _BENCH_KEYS if k not in data]
    if missing:
        raise ConfigError(
            f"{flag} {spec} is not a `hotloop bench --json` result (it has no {missing[0]!r}); "
            "give a file hotloop bench --json wrote"
        )
    samples = data["samples_ms"]
    if not isinstance(samples, list) or len(samples) < 2 or not all(_is_number(v) for v in samples):
        raise ConfigError(
            f"{flag} {spec}: 'samples_ms' must hold two or more per-iteration times; rerun hotloop bench --json"
        )
    check_result_fields(data, spec, flag)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_result_fields(data: dict[str, Any], spec: str, flag: str) -> None:
    """The fields a comparison reads beside the samples, each of the type hotloop writes (a damaged one
    is one line naming it, not a traceback in the middle of the table)."""
    for key in ("stages", "env", "info", "config", "stage_samples_ms"):
        if data.get(key) is not None and not isinstance(data[key], dict):
            raise ConfigError(
                f"{flag} {spec}: field {key!r} is a {type(data[key]).__name__}, not an object; the file is "
                "damaged: give a file hotloop wrote"
            )
    for stage, values in (data.get("stage_samples_ms") or {}).items():
        if not isinstance(values, list) or not all(_is_number(v) for v in values):
            raise ConfigError(
                f"{flag} {spec}: field 'stage_samples_ms.{stage}' must be a list of times in ms; the file is "
                "damaged: give a file hotloop wrote"
            )
    check_usable_samples(data, spec, flag)


def check_usable_samples(data: dict[str, Any], spec: str, flag: str = "--baseline") -> None:
    """Every time a comparison would read is a finite number of milliseconds: the total's > 0, a stage's
    >= 0 (0: the stage did not run that iteration). NaN, negative or infinite samples make the result
    unusable: one line naming the field and the sample, never a verdict computed without them."""
    fields: list[tuple[str, Any, bool]] = [("samples_ms", data["samples_ms"], True)]
    stages = data.get("stage_samples_ms")
    if isinstance(stages, dict):
        fields += [(f"stage_samples_ms.{k}", v, False) for k, v in stages.items() if isinstance(v, list)]
    for field, values, positive in fields:
        for i, v in enumerate(values):
            ok = (
                isinstance(v, int | float)
                and not isinstance(v, bool)
                and math.isfinite(v)
                and (v > 0 if positive else v >= 0)
            )
            if not ok:
                want = "> 0" if positive else ">= 0"
                raise ConfigError(
                    f"{flag} {spec}: {field!r} sample {i} is {v!r}, not a finite time {want} ms; the result "
                    "is unusable as a baseline (damaged or hand-edited): rerun hotloop bench --json"
                )


def load_bench_baseline(
    spec: str, history: Path | None, policy: str | None = None, flag: str = "--baseline"
) -> tuple[str, dict[str, Any]]:
    """(how to name it, the bench result) for a file or a history run; checked, one line if not."""
    from hotloop.measure.history import resolve_run

    if looks_like_path(spec):
        data, label = read_json_result(spec, flag), spec
    else:
        run = resolve_run(history, spec, "bench", policy, flag)
        data, label = run.result, f"#{run.number} ({run.id})"
    check_bench_result(data, spec, flag)
    return label, data


def policy_of_target(name: str) -> str:
    """What a target measures: a compiled artifact counts as the target it was compiled from (its
    manifest says), so `--baseline` can put an artifact beside its eager source."""
    from hotloop.io import read_json_file

    manifest = Path(name) / "manifest.json"
    if manifest.is_file():
        try:
            source = read_json_file(manifest).get("target")
        except (ConfigError, AttributeError):  # damaged: the target's own load names it
            source = None
        if isinstance(source, str) and source:
            return source
    return name


def result_policy(data: dict[str, Any]) -> str:
    info = data.get("info") or {}
    if isinstance(info, dict) and info.get("artifact") and isinstance(info.get("target"), str):
        return str(info["target"])
    return str(data.get("target"))


def check_same_policy(baseline: dict[str, Any], policy: str, spec: str, flag: str = "--baseline") -> None:
    theirs = result_policy(baseline)
    if theirs != policy:
        raise ConfigError(
            f"{flag} {spec} measured {theirs!r}, this run measures {policy!r}; compare runs of one target "
            "(a compiled artifact counts as the target it was compiled from)"
        )


@dataclass(frozen=True)
class StageRow:
    stage: str
    baseline_p50: float
    current_p50: float
    change: LatencyChange


@dataclass(frozen=True)
class BenchComparison:
    target: str
    baseline_label: str
    threshold: float
    rows: tuple[StageRow, ...]
    skipped: tuple[str, ...]  # stages one of the runs has no samples of
    differences: Differences
    loads: tuple[tuple[float | None, int | None], tuple[float | None, int | None]]  # (1-min load, CPUs)

    @property
    def slower(self) -> list[StageRow]:
        return [r for r in self.rows if r.change.verdict == SLOWER]

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline_label,
            "threshold": self.threshold,
            "stages": {
                r.stage: {"baseline_p50_ms": r.baseline_p50, "p50_ms": r.current_p50, **r.change.to_dict()}
                for r in self.rows
            },
            "skipped_stages": list(self.skipped),
            "differences": self.differences.to_dict(),
        }


def _stage_samples(data: dict[str, Any]) -> dict[str, list[float]]:
    out = {k: v for k, v in (data.get("stage_samples_ms") or {}).items() if isinstance(v, list)}
    out["total"] = list(data["samples_ms"])
    return out


def bench_differences(baseline: dict[str, Any], current: dict[str, Any]) -> Differences:
    """What differs between two bench results: target, settings, plan, machine."""
    groups: list[list[Difference]] = []
    if baseline.get("target") != current.get("target"):
        # One variable (the engine), shown with its plan: an artifact's backend and precision per stage.
        groups.append([Difference("target", _with_plan(baseline), _with_plan(current), VARIABLE)])
    b_cfg, c_cfg = baseline.get("config") or {}, current.get("config") or {}
    # threads and pin as set are in the fingerprint as they took effect (threads, affinity)
    groups.append(diff_mappings(_pick(b_cfg, "gc_enabled"), _pick(c_cfg, "gc_enabled"), VARIABLE))
    groups.append(
        diff_mappings(_pick(b_cfg, "warmup", "iterations"), _pick(c_cfg, "warmup", "iterations"), CONTEXT)
    )
    b_info, c_info = baseline.get("info") or {}, current.get("info") or {}
    skip = (*_INFO_CONTEXT, *_INFO_SKIPPED)
    groups.append(
        diff_mappings(_omit(b_info, skip), _omit(c_info, skip), VARIABLE, prefix="", both_only=True)
    )
    groups.append(diff_mappings(_pick(b_info, *_INFO_CONTEXT), _pick(c_info, *_INFO_CONTEXT), CONTEXT))
    groups.append(fingerprint_differences(baseline.get("env") or {}, current.get("env") or {}))
    return differences(groups)


def _with_plan(data: dict[str, Any]) -> str:
    plan = (data.get("info") or {}).get("plan")
    target = str(data.get("target"))
    if not isinstance(plan, dict) or not plan:
        return target
    return f"{target} ({', '.join(f'{k}: {v}' for k, v in plan.items())})"


def _pick(d: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: d[k] for k in keys if k in d}


def _omit(d: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k not in keys}


def _load(data: dict[str, Any]) -> tuple[float | None, int | None]:
    env = data.get("env") or {}
    load = env.get("load_avg")
    return (float(load[0]) if isinstance(load, list) and load else None, env.get("cpu_count"))


def compare_bench(
    baseline: dict[str, Any], current: dict[str, Any], threshold: float, label: str, seed: int = 0
) -> BenchComparison:
    """Every stage both runs have samples of (in this run's order, the total last)."""
    old, new = _stage_samples(baseline), _stage_samples(current)
    order = [s for s in current.get("stages", {}) if s != "total"] + ["total"]
    rows, skipped = [], []
    for i, stage in enumerate(order):
        if stage not in old or stage not in new or len(old[stage]) < 2 or len(new[stage]) < 2:
            skipped.append(stage)
            continue
        import numpy as np

        change = latency_change(old[stage], new[stage], threshold, seed=seed + 2 * i)
        rows.append(StageRow(stage, float(np.median(old[stage])), float(np.median(new[stage])), change))
    return BenchComparison(
        target=str(current.get("target")),
        baseline_label=label,
        threshold=threshold,
        rows=tuple(rows),
        skipped=tuple(s for s in skipped),
        differences=bench_differences(baseline, current),
        loads=(_load(baseline), _load(current)),
    )


def ratio_text(interval: Any) -> str:
    if interval.estimate != interval.estimate:  # NaN
        return "n/a"
    ci = "" if interval.low != interval.low else f" ({interval.low:.2f}–{interval.high:.2f})"
    return f"{interval.estimate:.2f}×{ci}"


def _verdict_cell(change: LatencyChange) -> str:
    colour = {SLOWER: "red", FASTER: "green"}.get(change.verdict)
    text = f"[{colour}]{change.verdict}[/{colour}]" if colour else change.verdict
    if change.tail != change.verdict and change.tail in (SLOWER, FASTER):
        text += f" (p99 {change.tail})"
    return text


def comparison_table(cmp: BenchComparison) -> Any:
    from rich.table import Table

    table = Table(title="now / then, 95 % bootstrap intervals")
    for col in ("stage", "then p50 ms", "now p50 ms", "p50 now/then", "p99 now/then", "rank p", "verdict"):
        table.add_column(col, justify="left" if col in ("stage", "verdict") else "right", overflow="fold")
    for r in cmp.rows:
        table.add_row(
            "[bold]total[/bold]" if r.stage == "total" else r.stage,
            f"{r.baseline_p50:.3f}",
            f"{r.current_p50:.3f}",
            ratio_text(r.change.p50),
            ratio_text(r.change.p99),
            f"{r.change.p_value:.2g}",
            _verdict_cell(r.change),
        )
    return table


def heading(cmp: BenchComparison) -> str:
    return (
        f"{cmp.target} against {cmp.baseline_label}: p50 and p99 ratios now / then, rank p = Mann-Whitney U, "
        f"threshold {100 * cmp.threshold:g} %"
    )


def print_comparison(cmp: BenchComparison, console: Any) -> None:
    """The heading, the table, then what differs (lines are not cut at the terminal's width)."""
    console.print(heading(cmp), soft_wrap=True)
    console.print(comparison_table(cmp))
    for line in comparison_lines(cmp):
        console.print(line, soft_wrap=True)


def comparison_lines(cmp: BenchComparison) -> list[str]:
    lines = list(cmp.differences.lines())
    moved = [r.stage for r in cmp.rows if r.change.verdict in (SLOWER, FASTER)]
    if moved and not cmp.differences.variables and not cmp.differences.of("machine"):
        lines.append(
            f"[yellow]nothing changed, yet {', '.join(moved)} moved: the machine's state did (other work, clocks, "
            "heat); compare interleaved in one run (--compare) or on a quiet machine[/yellow]"
        )
    if cmp.skipped:
        lines.append(f"not compared (one run has no per-stage samples of them): {', '.join(cmp.skipped)}")
    for when, (load, cpus) in zip(("the baseline", "this run"), cmp.loads, strict=True):
        if load is not None and cpus and load > cpus:
            lines.append(
                f"[yellow]the machine was busy when {when} ended (load average {load:.2f} on {cpus} CPUs): "
                "other work competed for the cores[/yellow]"
            )
    return lines


def unjudged_line(cmp: BenchComparison) -> str | None:
    """A gate must not pass what it could not judge: one line when the total has no verdict (None when
    it has one)."""
    total = next((r for r in cmp.rows if r.stage == "total"), None)
    if total is not None and total.change.verdict != NOT_COMPARABLE:
        return None
    return (
        f"error: {cmp.target} cannot be judged against {cmp.baseline_label}: the total latency could not be "
        "compared (no usable samples on one side); the baseline is unusable for --fail-on-regression"
    )


def regression_line(cmp: BenchComparison) -> str | None:
    """One line naming every stage slower beyond the threshold (None when there is none)."""
    slower = cmp.slower
    if not slower:
        return None
    rows = ", ".join(
        f"{r.stage} {r.change.p50.estimate:.2f}× ({r.change.p50.low:.2f}–{r.change.p50.high:.2f})"
        for r in slower
    )
    return (
        f"regression: {cmp.target} is slower than {cmp.baseline_label} beyond {100 * cmp.threshold:g} % at p50: "
        f"{rows}"
    )


@dataclass(frozen=True)
class BaselineRequest:
    """What `hotloop bench` was asked to compare and keep, checked before any work (`check`), then
    applied to the result (`note_load`, `compare`, `finish`).

    A run that will be compared (now with --baseline, or later from --history) measures the machine's
    load as `hotloop compile` does, before and after timing, and records it (`machine_load`). The
    regression gate (--fail-on-regression) refuses to start on a busy machine (above --max-load: exit 2),
    and a regression found while the run or its baseline was timed busy is exit 2 "machine busy", never
    3; --force judges anyway."""

    target: str
    policy: str
    threshold: float
    fail_on_regression: bool
    history: Path | None
    label: str | None = None
    baseline: dict[str, Any] | None = None
    max_load: float = 0.5
    force: bool = False
    start_load: Any = None  # the CpuLoad measured before timing (None: no comparison asked for)

    @classmethod
    def check(
        cls,
        target: str,
        baseline: str | None,
        threshold: str | None,
        fail_on_regression: bool,
        history: Path | None,
        max_load: float = 0.5,
        force: bool = False,
    ) -> BaselineRequest:
        from hotloop.measure.contention import check_max_load
        from hotloop.measure.history import check_history_dir

        check_max_load(max_load)
        if baseline is None:
            for flag, given in (
                ("--threshold", threshold is not None),
                ("--fail-on-regression", fail_on_regression),
            ):
                if given:
                    raise ConfigError(
                        f"{flag} compares with a baseline; add --baseline OLD.json (or drop {flag})"
                    )
        value = parse_threshold(threshold)
        check_history_dir(history)
        policy = policy_of_target(target)
        label, data = None, None
        if baseline is not None:
            label, data = load_bench_baseline(baseline, history, policy)
            check_same_policy(data, policy, baseline)
        start_load = None
        if fail_on_regression:  # the gate's first question, as compile's: is the machine quiet?
            from hotloop.measure.contention import check_quiet

            start_load = check_quiet(
                max_load, force, "hotloop bench --fail-on-regression", doing="gates on timings"
            )
        elif baseline is not None or history is not None:
            from hotloop.measure.contention import measure_load

            start_load = measure_load(0.5)
        return cls(
            target, policy, value, fail_on_regression, history, label, data, max_load, force, start_load
        )

    def note_load(self, result: dict[str, Any]) -> None:
        """Record the load before and after timing in the result (`machine_load`, as compile's)."""
        if self.start_load is None:
            return
        from hotloop.measure.contention import measure_load

        result["machine_load"] = {"start": self.start_load.to_dict(), "end": measure_load(0.25).to_dict()}

    def compare(self, result: dict[str, Any], console: Any) -> BenchComparison | None:
        """Print the comparison with the baseline (None without one)."""
        if self.baseline is None or self.label is None:
            return None
        from rich.console import Console

        cmp = compare_bench(self.baseline, result, self.threshold, self.label)
        print_comparison(cmp, Console(width=max(160, console.width), file=console.file))  # piped: whole
        return cmp

    def finish(self, result: dict[str, Any], cmp: BenchComparison | None, console: Any) -> None:
        """Append the run to the history; exit 3 on a regression when asked."""
        import typer

        if self.history is not None:
            from hotloop.measure.history import append_run

            run = append_run(self.history, "bench", self.target, result, policy=self.policy)
            console.print(f"recorded as #{run.number} in {self.history} ({run.path.name})")
        if self.fail_on_regression and cmp is not None:
            unusable = unjudged_line(cmp)
            if unusable is not None:
                typer.echo(unusable, err=True)
                raise typer.Exit(2)
        line = regression_line(cmp) if cmp is not None else None
        if line is not None and self.fail_on_regression:
            busy = busy_line(result, self.baseline or {}, self.label or "", self.max_load, self.force)
            if busy is not None:
                typer.echo(busy, err=True)
                raise typer.Exit(2)
            typer.echo(line, err=True)
            raise typer.Exit(3)


def busy_line(
    current: dict[str, Any],
    baseline: dict[str, Any],
    label: str,
    max_load: float,
    force: bool,
    current_label: str = "this run",
) -> str | None:
    """The "machine busy" line when either run was timed with more than `max_load` CPUs of other work
    (their recorded `machine_load`), None when both were quiet, the load is unknown, or `force`."""
    from hotloop.measure.contention import busy_gate_line, recorded_level

    if force:
        return None
    for what, data in (
        (f"{current_label} was timed", current),
        (f"the baseline {label} was timed", baseline),
    ):
        level = recorded_level(data.get("machine_load"))
        if level is not None and level > max_load:
            return busy_gate_line(level, max_load, what)
    return None
