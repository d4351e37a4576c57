"""A pi config and its norm stats as JSON-ready data and back (an artifact's manifest stores both)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np

from hotloop.families.pi.policy import NormStats, Stats
from hotloop.models.configs import GemmaConfig, PiConfig, VisionConfig


def norm_stats_to_dict(ns: NormStats | None) -> dict[str, Any] | None:
    if ns is None:
        return None

    def stats(s: Stats | None) -> dict[str, Any] | None:
        if s is None:
            return None
        return {k: (None if v is None else np.asarray(v).tolist()) for k, v in asdict(s).items()}

    return {"mode": ns.mode, "state": stats(ns.state), "actions": stats(ns.actions)}


def norm_stats_from_dict(d: dict[str, Any] | None) -> NormStats | None:
    if d is None:
        return None

    def stats(s: dict[str, Any] | None) -> Stats | None:
        if s is None:
            return None
        return Stats(**{k: (None if v is None else np.asarray(v, dtype=np.float32)) for k, v in s.items()})

    return NormStats(state=stats(d.get("state")), actions=stats(d.get("actions")), mode=d["mode"])


def config_from_dict(d: dict[str, Any]) -> PiConfig:
    return PiConfig(
        **{
            **d,
            "vision": VisionConfig(**d["vision"]),
            "vlm": GemmaConfig(**d["vlm"]),
            "expert": GemmaConfig(**d["expert"]),
        }
    )
