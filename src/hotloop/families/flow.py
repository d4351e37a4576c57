"""What the VLM-conditioned flow-matching families (pi0/pi0.5, SmolVLA) share: their stage layout and the
capabilities it offers, and the bases of their step engines and of their loop engines (the step engine's
Euler steps unrolled)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from hotloop.families.protocol import Capabilities
from hotloop.families.stages import loop_stage, one_engine

# vision -> prefix (fills the K/V cache the action expert reads) -> denoise (the flow's steps, one row of the
# time table each).
VLM_FLOW_STAGES = (
    one_engine("vision"),
    one_engine("prefix"),
    loop_stage("denoise", table="time_table", row_input="time_cond"),
)
# What that layout offers (a family adds its own): RTC's inputs on the denoise step, prompt buckets over the
# stages that read the prompt, fewer flow steps, step distillation and one-step students.
VLM_FLOW_CAPABILITIES = Capabilities(
    rtc=True,
    prompt_buckets=True,
    step_reduction=True,
    step_distillation=True,
    one_step=True,
    zero_noise_start=True,
    bucket_stages=("prefix", "denoise"),
)


class FlowStepEngine(nn.Module):
    """One velocity evaluation v(x_t, t) of a flow family (its `denoise` step): it runs in the dtype of its
    action output projection (`action_out_proj`, set by the family's engine)."""

    action_out_proj: nn.Linear

    @property
    def dtype(self) -> torch.dtype:
        return self.action_out_proj.weight.dtype


class EulerLoop(nn.Module):
    """All N Euler steps of `step` unrolled: noise -> actions, x <- x + dt * v in float32 after every step,
    dt = -1/N a float32 buffer (`persistent`: kept in the state dict, as pi's loop engine keeps it)."""

    def __init__(self, step: nn.Module, num_steps: int, persistent: bool = True) -> None:
        super().__init__()
        self.step = step
        self.num_steps = num_steps
        self.dt: Tensor
        self.register_buffer("dt", torch.tensor(-1.0 / num_steps, dtype=torch.float32), persistent=persistent)
