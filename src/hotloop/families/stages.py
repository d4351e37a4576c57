"""Stage layouts (`hotloop.families.protocol.StageSpec`) built the same way in several families.

A loop stage `NAME` has two sub-engines: `NAME_step` (one step, run once per row of its table) and
`NAME_loop` (every row in one graph); the planner times both.
"""

from __future__ import annotations

from hotloop.families.protocol import Capabilities, LoopSpec, StageSpec


def one_engine(name: str) -> StageSpec:
    """A stage run by one sub-engine of its own name."""
    return StageSpec(name, (name,))


def loop_stage(name: str, table: str, row_input: str) -> StageSpec:
    """A loop stage over the constant `table`, its row k fed to the step engine as `row_input`."""
    step, loop = f"{name}_step", f"{name}_loop"
    return StageSpec(name, (step, loop), LoopSpec(step=step, loop=loop, table=table, row_input=row_input))


# A VLM-conditioned flow policy (pi0/pi0.5, SmolVLA): vision -> prefix (fills the K/V cache the action
# expert reads) -> denoise (the flow's steps, one row of the time table each).
VLM_FLOW_STAGES = (
    one_engine("vision"),
    one_engine("prefix"),
    loop_stage("denoise", table="time_table", row_input="time_cond"),
)
# What that layout offers (a family adds its own): RTC's inputs on the denoise step, prompt buckets over the
# stages that read the prompt, fewer flow steps and step distillation.
VLM_FLOW_CAPABILITIES = Capabilities(
    rtc=True,
    prompt_buckets=True,
    step_reduction=True,
    step_distillation=True,
    bucket_stages=("prefix", "denoise"),
)
