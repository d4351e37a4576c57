"""What differs between two runs: their settings and their machines' fingerprints (R1.6).

A comparison means something when one variable changed. Each difference is sorted into one of three:

- `variable`: something a user chose or installed (threads, pinning, dtype, the plan's backend and
  precision per stage, a strategy, package versions, the git commit). More than one: the comparison
  cannot say which made the difference.
- `machine`: another machine (host, CPU model, CPU flags, core count, OS, GPU): the comparison means
  little, whatever it says.
- `context`: what a run cannot choose (load average, clocks, temperature, memory footprint) and how it
  was measured (warm-up, iterations, episodes): shown, not counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

VARIABLE, MACHINE, CONTEXT = "variable", "machine", "context"

_MACHINE_ENV = ("hostname", "platform", "cpu_model", "cpu_count", "cpu_flags", "cuda_device")
_VARIABLE_ENV = ("threads", "affinity", "governor", "python", "versions", "git_commit")
_CONTEXT_ENV = ("load_avg", "cpu_freq_mhz", "temperature_c")


@dataclass(frozen=True)
class Difference:
    key: str
    baseline: Any
    current: Any
    kind: str  # VARIABLE, MACHINE or CONTEXT

    def describe(self) -> str:
        if isinstance(self.baseline, list) and isinstance(self.current, list) and self.key.endswith("flags"):
            gone = sorted(set(map(str, self.baseline)) - set(map(str, self.current)))
            new = sorted(set(map(str, self.current)) - set(map(str, self.baseline)))
            return f"{self.key} " + " ".join([*(f"+{f}" for f in new), *(f"-{f}" for f in gone)])
        if self.key == "git_commit":  # a short hash reads as well and keeps the line short
            return f"{self.key} {str(self.baseline)[:12]} → {str(self.current)[:12]}"
        return f"{self.key} {show(self.baseline)} → {show(self.current)}"

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "baseline": self.baseline, "current": self.current, "kind": self.kind}


def show(value: Any) -> str:
    """A value as a difference line shows it: short, None as 'unset'."""
    if value is None:
        return "unset"
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, list) and value and all(isinstance(v, float) for v in value):
        return "[" + ", ".join(f"{v:.2f}" for v in value) + "]"
    text = str(value)
    return text if len(text) <= 160 else text[:157] + "..."


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists stay whole (an affinity list is one value)."""
    if isinstance(obj, Mapping):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: obj} if prefix else {}


def diff_mappings(
    baseline: Mapping[str, Any],
    current: Mapping[str, Any],
    kind: str,
    prefix: str = "",
    both_only: bool = False,
) -> list[Difference]:
    """Every flattened key whose values differ. `both_only`: skip keys only one side has (fields one
    kind of target reports and another does not; the target's own difference says it)."""
    a, b = flatten(baseline), flatten(current)
    keys = [k for k in a if k in b] if both_only else list(dict.fromkeys([*a, *b]))
    return [Difference(prefix + k, a.get(k), b.get(k), kind) for k in keys if a.get(k) != b.get(k)]


def fingerprint_differences(baseline: Mapping[str, Any], current: Mapping[str, Any]) -> list[Difference]:
    """Differences of two `machine_fingerprint()`s, each sorted into machine, variable or context."""
    out: list[Difference] = []
    for keys, kind in ((_MACHINE_ENV, MACHINE), (_VARIABLE_ENV, VARIABLE), (_CONTEXT_ENV, CONTEXT)):
        for key in keys:
            if key not in baseline and key not in current:
                continue
            if key == "cpu_flags" and (baseline.get(key) is None or current.get(key) is None):
                continue  # a result from before the fingerprint held the flags: unknown, not different
            out.extend(diff_mappings({key: baseline.get(key)}, {key: current.get(key)}, kind))
    return out


@dataclass(frozen=True)
class Differences:
    items: tuple[Difference, ...]

    def of(self, kind: str) -> list[Difference]:
        return [d for d in self.items if d.kind == kind]

    @property
    def variables(self) -> list[Difference]:
        return self.of(VARIABLE)

    def lines(self) -> list[str]:
        """What a user reads under a comparison: the variables, a plain warning when there is more than
        one or the machine differs, and the context."""
        out = []
        variables, machine, context = self.of(VARIABLE), self.of(MACHINE), self.of(CONTEXT)
        if not variables:
            out.append("changed: nothing in the settings or the installation (a rerun)")
        elif len(variables) == 1:
            out.append(f"changed: {variables[0].describe()}")
        else:
            out.append(
                f"[yellow]{len(variables)} variables changed: {'; '.join(d.describe() for d in variables)}"
                " — more than one at a time: the comparison cannot say which made the difference[/yellow]"
            )
        if machine:
            out.append(
                f"[yellow]another machine: {'; '.join(d.describe() for d in machine)} — timings from "
                "different machines mean little side by side[/yellow]"
            )
        if context:
            out.append(f"context (not counted): {'; '.join(d.describe() for d in context)}")
        return out

    def summary(self) -> str:
        """One short cell for a history table."""
        variables = self.variables
        machine = self.of(MACHINE)
        parts = [d.describe() for d in variables] or ["nothing (a rerun)"]
        text = "; ".join(parts)
        if len(variables) > 1:
            text = f"{len(variables)} variables: {text}"
        if machine:
            text += "; another machine"
        return text

    def to_dict(self) -> list[dict[str, Any]]:
        return [d.to_dict() for d in self.items]


def differences(groups: Iterable[list[Difference]]) -> Differences:
    return Differences(tuple(d for group in groups for d in group))
