"""Policies with known behaviour for evaluator tests (importable by worker processes by name)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np


class CountingPolicy:
    """Returns chunks whose actions hold the gripper still; counts calls. Chunk c, action i has grip
    value (c * 100 + i) / 1e4 so a test can tell which action ran (the grip is clipped to [0, 1])."""

    def __init__(self, horizon: int = 10) -> None:
        self.horizon = horizon
        self.calls = 0

    def reset(self) -> None:
        self.calls = 0

    def infer(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        ee = np.asarray(obs["state"][:3], dtype=np.float32)
        actions = np.zeros((self.horizon, 4), dtype=np.float32)
        actions[:, :3] = ee
        actions[:, 3] = (self.calls * 100 + np.arange(self.horizon)) / 1e4
        self.calls += 1
        return {"actions": actions}


class OracleConveyorPolicy:
    """A privileged chunk planner for conveyor-pick: extrapolates the box and plans approach, descend,
    close, lift over the whole horizon from one observation (a stand-in for a perfect learned policy)."""

    horizon = 10

    def reset(self) -> None:
        pass

    def infer(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        s = np.asarray(obs["state"], dtype=np.float64)
        ee, grip_open, box, vel = s[:3], s[3], s[4:7], s[7:10]
        dt = 0.1
        out = np.zeros((self.horizon, 4))
        pos = ee.copy()
        lifting = grip_open < 0.046 and box[2] > 0.07
        for i in range(self.horizon):
            b = box + vel * dt * (i + 0.5)
            if lifting:
                pos = np.array([pos[0], pos[1], min(0.26, pos[2] + 0.04)])
                out[i] = [*pos, 1.0]
                continue
            d = b[:2] - pos[:2]
            dist = np.linalg.norm(d)
            pos[:2] = b[:2] if dist < 0.05 else pos[:2] + d * 0.05 / dist
            if np.linalg.norm(b[:2] - pos[:2]) < 0.01:
                pos[2] = max(0.09, pos[2] - 0.035)
            else:
                pos[2] = 0.15
            grip = 1.0 if pos[2] <= 0.091 else 0.0
            out[i] = [*pos, grip]
            if grip:
                lifting = i >= 3
        return {"actions": out.astype(np.float32)}


class CrashingPolicy(CountingPolicy):
    """Kills its own process on the episode whose first observation puts the ee far right (a native
    crash stand-in), so the parent must report that seed and continue."""

    def infer(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        if self.calls == 0 and float(obs["state"][0]) > 0.15:
            os._exit(3)
        return super().infer(obs)


class InterruptingPolicy(CountingPolicy):
    """Stands in for a user pressing Ctrl-C during the third episode (in-process runs)."""

    def __init__(self) -> None:
        super().__init__()
        self.episodes = 0

    def reset(self) -> None:
        super().reset()
        self.episodes += 1
        if self.episodes == 3:
            raise KeyboardInterrupt


class EpisodeCountingPolicy(CountingPolicy):
    """CountingPolicy that also counts its episodes (resets), for policies that fail in chosen ones."""

    def __init__(self) -> None:
        super().__init__()
        self.episodes = 0

    def reset(self) -> None:
        super().reset()
        self.episodes += 1


class RaisingPolicy(EpisodeCountingPolicy):
    """Raises a plain Python error in every second episode (in-process runs: episodes 2, 4, ...), a
    stand-in for a policy bug: those episodes are errors, the others run normally."""

    def infer(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        if self.episodes % 2 == 0:
            raise RuntimeError("policy exploded\nwith a second line")
        return super().infer(obs)


def raising() -> RaisingPolicy:
    return RaisingPolicy()


class OverCapPolicy(EpisodeCountingPolicy):
    """From its second episode on, every call raises the engine's MemoryCapError (an engine that grew
    past --memory-cap-mb while running: the cap is checked after each call, and calls keep raising)."""

    def infer(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        from hotloop.errors import MemoryCapError

        if self.episodes >= 2:
            raise MemoryCapError("engine ART grew to 900 MiB, over --memory-cap-mb 512")
        return super().infer(obs)


def over_cap() -> OverCapPolicy:
    return OverCapPolicy()


def slow_to_stop() -> CountingPolicy:
    """A policy whose worker takes 2 s to stop when terminated (a native library flushing, say): a
    window in which a second Ctrl-C used to lose every finished episode."""
    import signal
    import time

    def stop_slowly(signum: int, frame: Any) -> None:
        time.sleep(2.0)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop_slowly)
    return CountingPolicy()


def refusing() -> CountingPolicy:
    """A policy that refuses its configuration when built (in a worker: the parent reports it)."""
    from hotloop.errors import ConfigError

    raise ConfigError("this policy needs --steps 10 or more")


class FolderTakingPolicy(CountingPolicy):
    """Replaces the folder named in $HOTLOOP_TEST_TAKE_FOLDER by a file on its first episode: the
    results folder disappearing mid-run (an unmounted disk, a cleaned-up directory)."""

    def reset(self) -> None:
        super().reset()
        folder = os.environ.get("HOTLOOP_TEST_TAKE_FOLDER")
        if folder and os.path.isdir(folder):
            import shutil

            shutil.rmtree(folder)
            with open(folder, "w") as f:
                f.write("not a folder any more")


def folder_taking() -> FolderTakingPolicy:
    return FolderTakingPolicy()


def counting() -> CountingPolicy:
    return CountingPolicy()


def oracle() -> OracleConveyorPolicy:
    return OracleConveyorPolicy()


def crashing() -> CrashingPolicy:
    return CrashingPolicy()


def interrupting() -> InterruptingPolicy:
    return InterruptingPolicy()


class SideCameraPolicy(CountingPolicy):
    """Declares that it needs a 'side' view, which no gantry task renders (they have 'top' and, on request,
    'wrist'): the adapter must refuse it."""

    @property
    def spec(self) -> Any:
        from hotloop.policy_spec import ImageSpec, PolicySpec

        return PolicySpec(images=(ImageSpec("side", 64, 64),), min_views=1, state_dim=10, action_dim=4)


def side_camera() -> SideCameraPolicy:
    return SideCameraPolicy()


class BusyPolicy(CountingPolicy):
    """Spins the CPU for a minute per inference: a worker stuck in a long episode (test_stop_signals)."""

    def infer(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        import time

        end = time.perf_counter() + 60.0
        while time.perf_counter() < end:
            pass
        return super().infer(obs)


def busy() -> BusyPolicy:
    return BusyPolicy()


class NanAfterFirstChunk(CountingPolicy):
    """The counting policy, except that from its second chunk on every action is NaN (a model that
    overflows on some inputs)."""

    def infer(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        out = super().infer(obs)
        if self.calls > 1:
            out["actions"] = np.full_like(out["actions"], np.nan)
        return out


def nan_after_first_chunk() -> NanAfterFirstChunk:
    return NanAfterFirstChunk()
