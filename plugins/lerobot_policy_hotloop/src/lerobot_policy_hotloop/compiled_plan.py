"""`CompiledPlan`: a loaded hotloop engine behind one call, LeRobot's model-space batch in, the chunk
LeRobot's `predict_action_chunk` would return out.

The engine has the fixed batch it was compiled for (1 from `hotloop compile CKPT`); LeRobot sends batches
of any size (`lerobot-eval` one row per parallel env), so a larger batch runs row by row, with the noise of
the whole batch drawn first, as LeRobot draws it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from lerobot_policy_hotloop.errors import ArtifactRefused
from lerobot_policy_hotloop.families import FamilyBridge


class CompiledPlan:
    def __init__(self, engine: Any, bridge: FamilyBridge) -> None:
        self.engine = engine
        self.bridge = bridge

    @property
    def where(self) -> str:
        return str(self.engine.path)

    def chunk(self, batch: Mapping[str, Tensor], noise: Tensor | None = None) -> Tensor:
        """(B, T, A) in normalised units, on the batch's device."""
        from hotloop.errors import HotloopError

        device = next((v.device for v in batch.values() if isinstance(v, Tensor)), torch.device("cpu"))
        engine, bridge = self.engine, self.bridge
        try:
            obs = bridge.observation(engine, batch)
            rows = engine.family.batch_size(obs)
            drawn = bridge.noise(engine, rows, noise)
            if (engine.manifest.get("policy") or {}).get("zero_noise"):
                # a `zero-noise` plan starts at x = 0 (drawn all the same: LeRobot's generator moves as its
                # own policy's would)
                drawn = torch.zeros_like(drawn)
            out = self._run(obs, drawn, rows)
        except HotloopError as exc:
            raise ArtifactRefused(
                f"{self.where}: the observation does not fit the compiled plan: {exc}"
            ) from None
        return bridge.actions(engine, out).to(device)

    def _run(self, obs: Any, noise: Tensor, rows: int) -> Tensor:
        engine = self.engine
        compiled = int(engine.shape.batch)
        with torch.no_grad():
            if rows == compiled:
                return engine.infer(obs, noise).clone()  # type: ignore[no-any-return]
            if compiled != 1:
                raise ArtifactRefused(
                    f"{self.where} was compiled for batch {compiled}; LeRobot sent {rows}: compile at batch 1 "
                    "(the default) or set --eval.batch_size to match"
                )
            family = engine.family
            return torch.cat([engine.infer(family.select(obs, [i]), noise[[i]]).clone() for i in range(rows)])


__all__ = ["CompiledPlan"]
