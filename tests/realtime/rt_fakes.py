"""Policies and a robot with known behaviour for the real-time layer's tests."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from hotloop.realtime.rtc import GUIDED_KEY, MODE_KEY, PREV_ACTIONS_KEY


class ScriptedPolicy:
    """Chunk c, action i = [x0 + 0.01 (c mod 30), 0, 0.15 + 0.001 i, grip (100 c + i) / 1e4]: which chunk and
    action ran is readable from the command, and nothing depends on the observation, so a simulator
    and a fake robot get the same chunks. Acknowledges RTC guidance in the mode it was asked for (and keeps
    what it was sent)."""

    def __init__(self, horizon: int = 10, x0: float = 0.1) -> None:
        self.horizon = horizon
        self.x0 = x0
        self.calls = 0
        self.guidance: list[np.ndarray | None] = []

    def reset(self) -> None:
        self.calls = 0
        self.guidance = []

    def chunk(self, c: int) -> np.ndarray:
        i = np.arange(self.horizon)
        out = np.zeros((self.horizon, 4))
        out[:, 0] = self.x0 + 0.01 * (c % 30)  # inside the workspace: the env would clip it
        out[:, 2] = 0.15 + 0.001 * i
        out[:, 3] = (100 * c + i) / 1e4
        return out

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"actions": self.chunk(self.calls)}
        self.calls += 1
        self.guidance.append(obs.get(PREV_ACTIONS_KEY))
        if PREV_ACTIONS_KEY in obs:
            out[GUIDED_KEY] = True
            if MODE_KEY in obs:
                out[MODE_KEY] = obs[MODE_KEY]
        return out


class FaultyPolicy(ScriptedPolicy):
    """Call number `fault_call` raises, returns NaN, or (threaded runs) blocks until `release` is set."""

    def __init__(self, fault: str, fault_call: int = 2, horizon: int = 10) -> None:
        super().__init__(horizon)
        self.fault = fault
        self.fault_call = fault_call
        self.release = threading.Event()

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        if self.calls == self.fault_call:
            self.calls += 1
            if self.fault == "raise":
                raise RuntimeError("injected engine fault")
            if self.fault == "nan":
                return {"actions": np.full((self.horizon, 4), np.nan)}
            if self.fault == "block":
                self.release.wait(timeout=30)
                return {"actions": self.chunk(self.calls - 1)}
        return super().infer(obs)


class SmallEnginePolicy:
    """The fallback engine: grip 0.5 on every action, so its commands are recognisable."""

    def __init__(self) -> None:
        self.calls = 0

    def reset(self) -> None:
        self.calls = 0

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        out = np.zeros((4, 4))
        out[:, 0], out[:, 2], out[:, 3] = 0.3, 0.2, 0.5
        return {"actions": out}


class FakeRobot:
    """Holds its last command; observation = that command padded to a 10-number state."""

    def __init__(self, hold: np.ndarray) -> None:
        self.last = np.asarray(hold, dtype=np.float64).copy()
        self.sent: list[np.ndarray] = []

    def observe(self) -> dict[str, Any]:
        return {"state": np.concatenate([self.last, np.zeros(6)]).astype(np.float32)}

    def hold_action(self) -> np.ndarray:
        return self.last.copy()

    def command(self, action: np.ndarray) -> None:
        self.last = np.asarray(action, dtype=np.float64).copy()
        self.sent.append(self.last)
