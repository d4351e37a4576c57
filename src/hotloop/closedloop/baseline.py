"""`hotloop eval --baseline OLD`: each (strategy, latency) point against an earlier run's, seed by seed.

OLD is a `hotloop eval --json` file or an eval run of a `--history` folder. A point of this run is
paired with the baseline's point of the same strategy, trigger and latency; failing that, of the same
strategy (a latency changed), of the same latency (a strategy changed), or the baseline's only point.
Seeds that repeat an earlier seed's start state are left out (not independent trials).
On the seeds both points ran, success is compared pair by pair (McNemar's exact test, the discordant
counts shown) and task time, jerk and chunk jump as paired differences; seeds only one side ran get a
two-proportion interval (`hotloop.measure.compare`). A point whose success interval lies below zero
is a drop: with `--fail-on-regression` the command exits 3 with one line naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hotloop.errors import ConfigError
from hotloop.measure.compare import (
    NO_CHANGE,
    Interval,
    PairedDifference,
    PairedSuccess,
    TwoProportions,
    paired_difference,
    paired_success,
    two_proportions,
)
from hotloop.measure.differences import (
    CONTEXT,
    VARIABLE,
    Difference,
    Differences,
    diff_mappings,
    differences,
    fingerprint_differences,
)

DROP, GAIN = "success drop", "success gain"
_CONTEXT_REQUEST = ("episodes", "seed", "workers")  # how much was measured, not what
_SAME_REQUEST = ("target", "task")  # checked equal before any episode


@dataclass(frozen=True)
class PointKey:
    strategy: str
    trigger: int | None
    latency: str
    perturb: str | None = None  # the point's --perturb spec (a --sweep-perturb point); None: unperturbed

    @property
    def label(self) -> str:
        k = "" if self.trigger is None else f" k={self.trigger}"
        p = "" if self.perturb is None else f" ({self.perturb})"
        return f"{self.strategy}{k} {self.latency}{p}"


def eval_runs(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs of an eval result: one point's object, or {"runs": [...]} for several."""
    runs = data["runs"] if isinstance(data.get("runs"), list) else [data]
    return [r for r in runs if isinstance(r, dict)]


def run_key(run: dict[str, Any]) -> PointKey:
    request = run.get("request") or {}
    return PointKey(
        str(run["strategy"]["name"]),
        request.get("trigger_remaining"),
        str(run["latency"]["spec"]),
        request.get("perturb") or None,
    )


def request_key(request: Any) -> PointKey:
    from hotloop.closedloop.latency import parse_latency

    return PointKey(
        request.strategy,
        request.trigger_remaining,
        parse_latency(request.latency).spec,
        request.perturb or None,
    )


_RUN_FIELDS = ("target", "task", "strategy", "latency", "per_episode")


def check_eval_result(data: dict[str, Any], spec: str, flag: str = "--baseline") -> list[dict[str, Any]]:
    from hotloop.measure.baseline import result_kind

    kind = result_kind(data)
    if kind == "bench":
        raise ConfigError(
            f"{flag} {spec} is a `hotloop bench` result; compare it with `hotloop bench --baseline`"
        )
    runs = eval_runs(data) if kind == "eval" else []
    for i, run in enumerate(runs):
        _check_run_types(run, f"{flag} {spec}: " + (f"runs[{i}]" if "runs" in data else "the run"))
    bad = [f for r in runs for f in _RUN_FIELDS if f not in r]
    if not runs or bad:
        missing = bad[0] if bad else "per_episode"
        raise ConfigError(
            f"{flag} {spec} is not a `hotloop eval --json` result (it has no {missing!r}); "
            "give a file hotloop eval --json wrote"
        )
    for run in runs:
        episodes = run["per_episode"]
        completed = (
            [e for e in episodes if isinstance(e, dict) and not e.get("error")]
            if isinstance(episodes, list)
            else []
        )
        if not completed:
            what = (
                f"{len(episodes)} episode(s), all crashed"
                if isinstance(episodes, list) and episodes
                else "no episodes"
            )
            raise ConfigError(
                f"{flag} {spec}: point {_label(run)} has {what}; a success rate over nothing compares "
                "nothing, so the result is unusable as a baseline: give a run with completed episodes"
            )
    return runs


_EPISODE_NUMBERS = ("task_time_s", "jerk", "chunk_discontinuity", "sim_time_s")


def _check_run_types(run: Any, where: str) -> None:
    """Each field a comparison reads has the type `hotloop eval --json` writes; a damaged one is named."""

    def damaged(field: str, value: Any, want: str) -> ConfigError:
        return ConfigError(
            f"{where}: field {field!r} is {repr(value)[:40]}, not {want}; the file is damaged: give a file "
            "hotloop eval --json wrote"
        )

    if not isinstance(run, dict):
        raise damaged("run", run, "an object")
    for key in ("target", "task"):
        if key in run and not isinstance(run[key], str):
            raise damaged(key, run[key], "a name")
    for key in ("strategy", "latency", "request", "env"):
        if run.get(key) is not None and not isinstance(run[key], dict):
            raise damaged(key, run[key], "an object")
    episodes = run.get("per_episode")
    if episodes is None:
        return  # said as missing by the caller
    if not isinstance(episodes, list):
        raise damaged("per_episode", episodes, "a list of episodes")
    for j, ep in enumerate(episodes):
        name = f"per_episode[{j}]"
        if not isinstance(ep, dict):
            raise damaged(name, ep, "an episode record")
        seed = ep.get("seed")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise damaged(f"{name}.seed", seed, "a whole number")
        if not isinstance(ep.get("success"), bool) and not ep.get("error"):
            raise damaged(f"{name}.success", ep.get("success"), "true or false")
        for key in _EPISODE_NUMBERS:
            value = ep.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise damaged(f"{name}.{key}", value, "a number or null")


def _label(run: dict[str, Any]) -> str:
    try:
        return run_key(run).label
    except (KeyError, TypeError):
        return "?"


def load_eval_baseline(
    spec: str, history: Path | None, policy: str | None = None, flag: str = "--baseline"
) -> tuple[str, list[dict[str, Any]]]:
    from hotloop.measure.baseline import looks_like_path, read_json_result
    from hotloop.measure.history import resolve_run

    if looks_like_path(spec):
        data, label = read_json_result(spec, flag), spec
    else:
        run = resolve_run(history, spec, "eval", policy, flag)
        data, label = run.result, f"#{run.number} ({run.id})"
    return label, check_eval_result(data, spec, flag)


def pair_points(current: Sequence[PointKey], baseline: Sequence[PointKey]) -> list[PointKey | None]:
    """For each current point, the baseline point it is compared with (None: no partner). A perturbed
    point pairs only with a point under the same perturbation."""
    rules: tuple[Callable[[PointKey], Any], ...] = (
        lambda k: k,
        lambda k: (k.strategy, k.trigger, k.perturb),
        lambda k: (k.latency, k.perturb),
        lambda k: k.perturb,  # the baseline's only point (under this perturbation)
    )
    out: list[PointKey | None] = []
    for key in current:
        partner = None
        for rule in rules:
            found = [b for b in baseline if rule(b) == rule(key)]
            if len(found) == 1:
                partner = found[0]
                break
        out.append(partner)
    return out


def check_same_run(baseline: list[dict[str, Any]], target: str, task: str, spec: str, flag: str) -> None:
    from hotloop.measure.baseline import policy_of_target

    first = baseline[0]
    theirs, ours = policy_of_target(str(first["target"])), policy_of_target(target)
    if theirs != ours:
        raise ConfigError(
            f"{flag} {spec} evaluated {first['target']!r}, this run evaluates {target!r}; compare runs of one "
            "policy (a compiled artifact counts as the target it was compiled from)"
        )
    if first["task"] != task:
        raise ConfigError(
            f"{flag} {spec} ran task {first['task']!r}, this run {task!r}; compare runs of one task"
        )


def _completed(run: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """The completed episodes by seed, one per start state: a seed that began where an earlier one did (a
    task with few distinct starts) repeats that trial, so it is not counted again in either test."""
    out: dict[int, dict[str, Any]] = {}
    starts: set[str] = set()
    for r in sorted(run["per_episode"], key=lambda r: int(r["seed"])):
        start = r.get("start")
        if r.get("error") or (start and start in starts):
            continue
        if start:
            starts.add(start)
        out[int(r["seed"])] = r
    return out


@dataclass(frozen=True)
class PointComparison:
    point: PointKey
    baseline_point: PointKey
    changed: tuple[Difference, ...]
    paired: PairedSuccess
    unpaired: TwoProportions | None  # seeds only one of the two ran
    task_time: PairedDifference | None  # seeds both succeeded on
    jerk: PairedDifference | None
    chunk_jump: PairedDifference | None
    length_unit: str | None

    @property
    def success(self) -> Interval | None:
        """The interval the verdict reads: paired when there are shared seeds, else unpaired."""
        if self.paired.pairs:
            return self.paired.difference
        return self.unpaired.difference if self.unpaired is not None else None

    @property
    def verdict(self) -> str:
        d = self.success
        if d is None or d.high != d.high:
            return NO_CHANGE
        return DROP if d.high < 0 else GAIN if d.low > 0 else NO_CHANGE

    def sentence(self) -> str:
        p = self.paired
        variables = [d.describe() for d in self.changed if d.kind == VARIABLE]
        changed = "; ".join(variables) if variables else "nothing (a rerun)"
        if len(variables) > 1:
            changed += f" — {len(variables)} variables at once: the comparison cannot say which mattered"
        head = f"{self.point.label} against {self.baseline_point.label} (changed: {changed})"
        if not p.pairs:
            return f"{head}: no seed in common; the unpaired interval decides"
        return (
            f"{head}, {p.pairs} shared seeds: {p.only_baseline} succeed only in the baseline, "
            f"{p.only_now} only now (McNemar exact p = {p.p_value:.3g})"
        )

    def to_dict(self) -> dict[str, Any]:
        def opt(x: Any) -> Any:
            return None if x is None else x.to_dict()

        return {
            "point": self.point.label,
            "baseline_point": self.baseline_point.label,
            "changed": [d.to_dict() for d in self.changed],
            "paired": self.paired.to_dict(),
            "unpaired": opt(self.unpaired),
            "task_time_s": opt(self.task_time),
            "jerk": opt(self.jerk),
            "chunk_jump": opt(self.chunk_jump),
            "verdict": self.verdict,
        }


def _paired_metric(
    old: dict[int, dict[str, Any]],
    new: dict[int, dict[str, Any]],
    seeds: list[int],
    field: str,
    both_succeed: bool,
) -> PairedDifference | None:
    pairs = [
        (old[s][field], new[s][field])
        for s in seeds
        if old[s].get(field) is not None
        and new[s].get(field) is not None
        and (not both_succeed or (old[s]["success"] and new[s]["success"]))
    ]
    return paired_difference([a for a, _ in pairs], [b for _, b in pairs]) if pairs else None


def _request_parts(run: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A run's request as (what it chose, how much it measured); target and task are equal by now."""
    request = {k: v for k, v in (run.get("request") or {}).items() if k not in _SAME_REQUEST}
    measured = {k: request.pop(k) for k in _CONTEXT_REQUEST if k in request}
    return request, measured


def compare_point(baseline: dict[str, Any], current: dict[str, Any]) -> PointComparison:
    old, new = _completed(baseline), _completed(current)
    shared = sorted(set(old) & set(new))
    only_old = [s for s in old if s not in new]
    only_new = [s for s in new if s not in old]
    unpaired = None
    if only_old and only_new:
        unpaired = two_proportions(
            sum(old[s]["success"] for s in only_old),
            len(only_old),
            sum(new[s]["success"] for s in only_new),
            len(only_new),
        )
    b_req, c_req = _request_parts(baseline), _request_parts(current)
    changed = [
        # an artifact against the target it was compiled from (the same policy, check_same_run): the change
        # the comparison is about, not "nothing"
        *diff_mappings({"target": baseline.get("target")}, {"target": current.get("target")}, VARIABLE),
        *diff_mappings(
            {"difficulty": baseline.get("difficulty")}, {"difficulty": current.get("difficulty")}, VARIABLE
        ),
        *diff_mappings(b_req[0], c_req[0], VARIABLE),
        *diff_mappings(b_req[1], c_req[1], CONTEXT),
    ]
    return PointComparison(
        point=run_key(current),
        baseline_point=run_key(baseline),
        changed=tuple(changed),
        paired=paired_success([old[s]["success"] for s in shared], [new[s]["success"] for s in shared]),
        unpaired=unpaired,
        task_time=_paired_metric(old, new, shared, "task_time_s", True),
        jerk=_paired_metric(old, new, shared, "jerk", False),
        chunk_jump=_paired_metric(old, new, shared, "chunk_discontinuity", False),
        length_unit=current.get("length_unit"),
    )


def compare_eval(baseline: list[dict[str, Any]], current: list[dict[str, Any]]) -> list[PointComparison]:
    """Every current point that pairs with a baseline point."""
    by_key = {run_key(r): r for r in baseline}
    partners = pair_points([run_key(r) for r in current], list(by_key))
    return [compare_point(by_key[p], r) for r, p in zip(current, partners, strict=True) if p is not None]


def env_differences(baseline: list[dict[str, Any]], current: list[dict[str, Any]]) -> Differences:
    return differences([fingerprint_differences(baseline[0].get("env") or {}, current[0].get("env") or {})])


def _pct(d: Interval | None) -> str:
    if d is None or d.estimate != d.estimate:
        return "-"
    return f"{100 * d.estimate:+.0f} ({100 * d.low:+.0f} to {100 * d.high:+.0f})"


def _metric(d: PairedDifference | None, scale: float, fmt: str, unit: str) -> str:
    if d is None:
        return "-"
    i = d.difference
    return (
        f"{scale * d.baseline_mean:{fmt}} → {scale * d.current_mean:{fmt}}{unit}: "
        f"{scale * i.estimate:+{fmt}} ({scale * i.low:+{fmt}} to {scale * i.high:+{fmt}}), n={d.pairs}"
    )


def print_comparison(points: list[PointComparison], label: str, env: Differences) -> None:
    """Two tables on stdout (success; paired metrics) and one sentence per point, then what differs."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(180, Console().width))  # piped or narrow: the tables stay whole
    console.print(
        f"against {label}: success now − then in percentage points, 95 % intervals (paired: exact, "
        "conditional on the discordant pairs; unpaired: Newcombe)",
        soft_wrap=True,
    )
    table = Table(title="success")
    columns = ("point", "pairs", "then", "now", "only then", "only now", "McNemar p", "Δ paired")
    for col in (*columns, "Δ unpaired seeds (Fisher p)", "verdict"):
        table.add_column(col, overflow="fold")
    for c in points:
        p = c.paired
        u = c.unpaired
        colour = {DROP: "red", GAIN: "green"}.get(c.verdict)
        table.add_row(
            c.point.label,
            str(p.pairs),
            f"{p.both + p.only_baseline}/{p.pairs}",
            f"{p.both + p.only_now}/{p.pairs}",
            str(p.only_baseline),
            str(p.only_now),
            f"{p.p_value:.3g}" if p.pairs else "-",
            _pct(p.difference) if p.pairs else "-",
            "-"
            if u is None
            else f"{_pct(u.difference)} (p {u.p_value:.2g}; n {u.baseline[1]}, {u.current[1]})",
            f"[{colour}]{c.verdict}[/{colour}]" if colour else c.verdict,
        )
    console.print(table)
    metrics = Table(title="paired differences on shared seeds: then → now, now − then (95 % t interval)")
    for col in ("point", "task time s (both succeed)", "jerk", "chunk jump (mean per episode)"):
        metrics.add_column(col, no_wrap=col == "point")
    for c in points:
        metre = c.length_unit == "m"
        metrics.add_row(
            c.point.label,
            _metric(c.task_time, 1.0, ".2f", ""),
            _metric(c.jerk, 1.0, ".0f", " m/s³" if metre else ""),
            _metric(c.chunk_jump, 1e3 if metre else 1.0, ".1f" if metre else ".3g", " mm" if metre else ""),
        )
    console.print(metrics)
    for c in points:
        console.print(c.sentence(), soft_wrap=True)
    for line in env.lines():
        if not line.startswith("changed: nothing"):  # each point's own changes are in its sentence
            console.print(line, soft_wrap=True)


def unjudged_line(points: list[PointComparison], label: str) -> str | None:
    """A gate must not pass what it could not judge: one line naming the points without a success
    interval (no completed episode on one side), None when every point has one."""
    blind = [c.point.label for c in points if c.success is None or c.success.high != c.success.high]
    if not blind:
        return None
    return (
        f"error: {', '.join(blind)} cannot be judged against {label}: no completed episodes on one side, "
        "so there is no success interval; --fail-on-regression does not pass what it cannot judge"
    )


def regression_line(points: list[PointComparison], label: str) -> str | None:
    drops = [c for c in points if c.verdict == DROP]
    if not drops:
        return None
    parts = []
    for c in drops:
        d = c.success
        assert d is not None
        detail = (
            f"{c.paired.only_baseline} only then, {c.paired.only_now} only now"
            if c.paired.pairs
            else "unpaired"
        )
        parts.append(f"{c.point.label} {_pct(d)} points ({detail})")
    return f"regression: success fell against {label}: " + "; ".join(parts)


@dataclass(frozen=True)
class EvalBaseline:
    """`hotloop eval --baseline/--history/--fail-on-regression`, checked before any episode (`check`)."""

    label: str | None
    runs: tuple[dict[str, Any], ...]
    history: Path | None
    target: str
    task: str
    fail_on_regression: bool

    @classmethod
    def check(cls, sweep: Any, requests: list[Any]) -> EvalBaseline:
        from hotloop.measure.baseline import policy_of_target
        from hotloop.measure.history import check_history_dir

        if sweep.baseline is None and sweep.fail_on_regression:
            raise ConfigError(
                "--fail-on-regression compares with a baseline; add --baseline OLD.json (or drop it)"
            )
        check_history_dir(sweep.history)
        if sweep.baseline is None:
            return cls(None, (), sweep.history, sweep.target, sweep.task, False)
        label, runs = load_eval_baseline(sweep.baseline, sweep.history, policy_of_target(sweep.target))
        check_same_run(runs, sweep.target, sweep.task, sweep.baseline, "--baseline")
        keys = [request_key(r) for r in requests]
        theirs = [run_key(r) for r in runs]
        if all(p is None for p in pair_points(keys, theirs)):
            raise ConfigError(
                f"--baseline {sweep.baseline} has points {', '.join(k.label for k in theirs)}; none pairs with "
                f"this run's {', '.join(k.label for k in keys)}: give the same strategy or the same latency"
            )
        if sweep.fail_on_regression and any(k.latency == "measured" for k in keys):
            # At measured latency the success depends on this machine's speed: a timing gate, which
            # judges a quiet machine only (as bench's and compile's do).
            from hotloop.measure.contention import check_max_load, check_quiet

            check_max_load(sweep.max_load)
            check_quiet(
                sweep.max_load,
                sweep.force,
                "hotloop eval --fail-on-regression at --latency measured",
                doing="gates on a success that depends on this machine's speed",
            )
        return cls(label, tuple(runs), sweep.history, sweep.target, sweep.task, sweep.fail_on_regression)

    def compare(self, runs: list[dict[str, Any]]) -> list[PointComparison]:
        """Print the comparison of the points that ran (none without a baseline)."""
        if self.label is None or not runs:
            return []
        points = compare_eval(list(self.runs), runs)
        print_comparison(points, self.label, env_differences(list(self.runs), runs))
        return points

    def record(self, result: dict[str, Any]) -> None:
        import typer

        if self.history is None:
            return
        from hotloop.measure.baseline import policy_of_target
        from hotloop.measure.history import append_run

        run = append_run(
            self.history,
            "eval",
            self.target,
            result,
            policy=policy_of_target(self.target),
            extra={"task": self.task},
        )
        typer.echo(f"recorded as #{run.number} in {self.history} ({run.path.name})")

    def finish(self, points: list[PointComparison]) -> None:
        import typer

        unjudged = unjudged_line(points, self.label or "")
        if unjudged is not None and self.fail_on_regression:
            typer.echo(unjudged, err=True)
            raise typer.Exit(2)
        line = regression_line(points, self.label or "")
        if line is not None and self.fail_on_regression:
            typer.echo(line, err=True)
            raise typer.Exit(3)
