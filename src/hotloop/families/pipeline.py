"""What every family's pipeline holds: its runners (one per stage; a loop stage's step or loop engine),
the engines' build-time constants and the sub-engines' signatures, the runners checked on construction.

    class DiffusionPipeline(StagePipeline):
        family = "diffusion"
        stages = (one_engine("encoder"), loop_stage("denoise", table="step_table", row_input="step_row"))

        def prepare(self) -> None: ...   # the family's own checks and choices, once the runners are in
        def sample(self, obs, noise, timer=None) -> Tensor: ...
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from torch import Tensor

from hotloop.errors import ConfigError
from hotloop.families.protocol import Runners, Signatures, StageSpec


class StagePipeline:
    """Runners chained into actions over a family's fixed shapes (`hotloop.families.protocol.Pipeline`)."""

    family: ClassVar[str]  # as error messages name it
    stages: ClassVar[tuple[StageSpec, ...]]  # the family's: each needs one of its sub-engines as a runner

    def __init__(
        self, cfg: Any, shape: Any, runners: Runners, constants: Mapping[str, Tensor], signatures: Signatures
    ) -> None:
        missing = [
            " or ".join(st.sub_engines) for st in self.stages if not set(st.sub_engines) & set(runners)
        ]
        if missing:
            raise ConfigError(f"the {self.family} pipeline needs runners for {', '.join(missing)}")
        # The sub-engine each stage runs: a loop stage's loop engine when given (the whole loop in one graph).
        self.runs = {
            st.name: st.loop.loop if st.loop is not None and st.loop.loop in runners else st.sub_engines[0]
            for st in self.stages
        }
        self.cfg, self.shape = cfg, shape
        self.runners, self.constants, self.signatures = dict(runners), dict(constants), dict(signatures)
        self.prepare()

    def prepare(self) -> None:
        """The family's own checks of what it was given (constants, signatures)."""
