"""Stage layouts (`hotloop.families.protocol.StageSpec`) built the same way in several families.

A loop stage `NAME` has two sub-engines: `NAME_step` (one step, run once per row of its table) and
`NAME_loop` (every row in one graph); the planner times both.
"""

from __future__ import annotations

from hotloop.families.protocol import LoopSpec, StageSpec


def one_engine(name: str) -> StageSpec:
    """A stage run by one sub-engine of its own name."""
    return StageSpec(name, (name,))


def loop_stage(name: str, table: str, row_input: str) -> StageSpec:
    """A loop stage over the constant `table`, its row k fed to the step engine as `row_input`."""
    step, loop = f"{name}_step", f"{name}_loop"
    return StageSpec(name, (step, loop), LoopSpec(step=step, loop=loop, table=table, row_input=row_input))
