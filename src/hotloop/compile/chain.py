"""A plan's runners chained through the family (`PolicyFamily.pipeline`), and one stage's work timed on
its runner's own buffers (a loop's step engine once per table row)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import Tensor

from hotloop.compile.backends.base import Runner
from hotloop.families.protocol import LoopSpec, Pipeline, PolicyFamily, PolicySource, SubEngine, constants_of


def pipeline(
    source: PolicySource,
    engines: dict[str, SubEngine],
    runners: dict[str, Runner | Any],
    loop_engines: dict[str, SubEngine] | None = None,
    lookups: dict[str, Tensor] | None = None,
) -> Pipeline:
    """Runners composed; the step-indexed constants come from the engine set the loop stage's runner was
    built from (a recipe may change what its table holds); `lookups` replace lookup tables by the ones a
    lean artifact ships (`hotloop.families.lookup`)."""
    constants = {**constants_of(loop_engines if loop_engines is not None else engines), **(lookups or {})}
    return source.family.pipeline(
        source.cfg, source.shape, runners, constants, {n: e.signature for n, e in engines.items()}
    )


def loop_stage(family: PolicyFamily) -> str | None:
    """The family's loop stage (its constants come from the engine set its runner was built from)."""
    return next((s.name for s in family.stages if s.loop is not None), None)


def stage_call(
    loop: LoopSpec | None, sub: str, runner: Runner, num_steps: int, table: Tensor | None
) -> Callable[[], Any]:
    """One stage's work on the runner's own buffers: N calls for a loop's step engine, one otherwise."""
    if loop is None or sub != loop.step:
        return lambda: runner(*runner.inputs)
    assert table is not None
    t_index = runner.input_names.index(loop.row_input)

    def steps() -> None:
        for k in range(num_steps):
            runner.inputs[t_index].copy_(table[k])
            runner(*runner.inputs)

    return steps
