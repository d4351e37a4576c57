"""One stock client's execution, seen from the server: which observations run, how chunks are timed,
and what the client is still executing (the rtc-soft inputs).

The stock client (`robot_client.py`) executes one action per control period from its queue, labels each
observation with the timestep of the action it last executed, and, while its queue holds no more than
`chunk_size_threshold` of a chunk, sends an observation every period (`must_go` when the queue is empty
and a chunk has arrived since the last must-go). When a chunk arrives it drops the actions whose
timestep it has executed and merges the rest into its queue: where the queue already holds that timestep,
`0.3 * old + 0.7 * new` (its default `weighted_average`); the queue then holds the new chunk's timesteps.

Timing (as LeRobot's server): action i of the chunk inferred on the observation of timestep n is labelled
timestep n + i and timestamp `obs.timestamp + i / fps`. Action 0 is for the period the observation was
taken in, whose action the client has already sent; it drops it, and each later action runs in its
period.

Admission (`ClientSession.admit`, LeRobot's `_enqueue_observation`): a must-go observation always runs;
another is skipped when its timestep already ran (the client repeats it every period while it waits) and,
with `--skip-similar ATOL` only, when its joint state is within ATOL (Euclidean) of the last observation
that ran (LeRobot hard-codes 1.0, which silently skips observations of a robot that moves slowly). One
observation waits per client; a newer one replaces it (newest wins). Every observation ends in exactly one
counted outcome (`OUTCOMES`), so none is lost silently.

`rtc-soft`: the server keeps what it sent to this client and replays the client's merge over it
(`ClientQueue`), so at the observation of timestep n it knows the actions the client will execute from n
on. These are sent to the policy as the executing chunk (`rtc_prev_actions`, row 0 = timestep n) with the
delay d in periods (`rtc_delay`: the largest of the last `delay_window` measured delays: the time from
the observation's arrival to its chunk's departure, plus twice the observation's one-way trip); the policy
holds the first d actions to them and leaves them gradually (`soft-prefix`), so the client's weighted
average merges two chunks that agree instead of two that jump apart.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from hotloop.errors import ConfigError
from hotloop.realtime.rtc import DELAY_KEY, MODE_KEY, PREV_ACTIONS_KEY

STRATEGIES = ("chunk", "rtc-soft")
# What became of each observation a client sent (hotloop_lerobot_observations_total{outcome}).
OUTCOMES = (
    "inferred",  # its chunk was sent
    "failed",  # the inference failed or was refused: the client got an error status
    "superseded",  # a newer observation of the same client replaced it before inference (newest wins)
    "duplicate_timestep",  # its timestep already ran (LeRobot's rule)
    "similar",  # --skip-similar: its joint state was within ATOL of the last that ran
    "rejected",  # unreadable or not fitting the instructions: the client got an error status
    "unanswered",  # still waiting when the client reset (Ready) or its session was closed
)
OLD_WEIGHT, NEW_WEIGHT = 0.3, 0.7  # the stock client's default aggregate, weighted_average
MAX_ONE_WAY_S = 0.5  # a larger client-to-server time is clock skew between machines, not latency
PREDICTED_KEPT = 4096  # timesteps remembered for the duplicate rule


@dataclass(frozen=True)
class ExecutionConfig:
    strategy: str = "chunk"
    fps: float = 30.0  # the client's control rate (its --fps): timestamps and the delay in periods
    skip_similar: float | None = None  # LeRobot's similarity filter's atol; None: off
    delay_window: int = 5
    obs_wait_s: float = 2.0  # GetActions waits this long for an observation (LeRobot's obs_queue_timeout)

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ConfigError(
                f"--strategy {self.strategy!r} with --protocol lerobot: use one of {', '.join(STRATEGIES)} "
                "(the stock client always keeps executing while the server infers; chunk is LeRobot's own "
                "server behaviour)"
            )
        if not (math.isfinite(self.fps) and 0 < self.fps <= 1000):
            raise ConfigError(f"--fps must be in (0, 1000] control periods per second (got {self.fps})")
        if self.skip_similar is not None and not (math.isfinite(self.skip_similar) and self.skip_similar > 0):
            raise ConfigError(
                f"--skip-similar must be a positive joint distance (LeRobot's is 1.0; got {self.skip_similar})"
            )
        if self.delay_window < 1:
            raise ConfigError(f"delay_window must be >= 1 (got {self.delay_window})")


@dataclass
class Pending:
    """One admitted observation waiting for its chunk."""

    timestep: int
    timestamp: float  # the client's time.time() when it was taken
    must_go: bool
    obs: dict[str, Any]  # the served policy's observation, checked
    state: np.ndarray | None  # the joint state, for the similarity filter
    received: float  # perf_counter when its last byte arrived
    received_wall: float  # time.time() then
    decode_s: float = 0.0  # unpickling, mapping and checking it


class ClientQueue:
    """The client's action queue as the server reconstructs it from the chunks it sent (the stock
    client's merge replayed): timestep -> action."""

    def __init__(self) -> None:
        self._actions: dict[int, np.ndarray] = {}

    def merge(self, first_timestep: int, actions: np.ndarray) -> None:
        merged = {}
        for i, new in enumerate(np.asarray(actions, dtype=np.float64)):
            t = first_timestep + i
            old = self._actions.get(t)
            merged[t] = new if old is None else OLD_WEIGHT * old + NEW_WEIGHT * new
        self._actions = merged

    def from_timestep(self, timestep: int) -> np.ndarray | None:
        """The queued actions for timesteps `timestep`, `timestep` + 1, ... (None when it holds none
        for `timestep`: nothing the client executes then is known)."""
        if timestep not in self._actions:
            return None
        rows = []
        t = timestep
        while t in self._actions:
            rows.append(self._actions[t])
            t += 1
        return np.stack(rows).astype(np.float32)


class ClientSession:
    """One client between its `Ready` and the next (or its eviction). Used on the event loop only."""

    def __init__(self, peer: str, config: ExecutionConfig, sessions: Any) -> None:
        self.peer = peer
        self.config = config
        self.sessions = sessions  # its sessions of the policy and the fallback engine (server.new_sessions)
        self.setup: Any = None  # instructions.ClientSetup once accepted
        self.queue = ClientQueue()
        self.delays: deque[int] = deque(maxlen=config.delay_window)
        self.last_used: float = 0.0  # perf_counter of its last RPC
        self._pending: Pending | None = None
        self._ready = asyncio.Event()
        self._closed = False
        self._predicted: set[int] = set()
        self._predicted_order: deque[int] = deque()
        self._last_state: np.ndarray | None = None

    # -- admission ------------------------------------------------------------------------------------
    def admit(self, item: Pending) -> list[str]:
        """Queue `item` or skip it; the outcomes to count now (a skipped observation's, or the one it
        superseded); an empty list when it was queued with nothing replaced."""
        if not item.must_go and self._predicted:  # LeRobot checks once an observation has run
            if item.timestep in self._predicted:
                return ["duplicate_timestep"]
            if self._similar(item):
                return ["similar"]
        outcomes = ["superseded"] if self._pending is not None else []
        self._pending = item
        self._ready.set()
        return outcomes

    def _similar(self, item: Pending) -> bool:
        atol = self.config.skip_similar
        if atol is None or item.state is None or self._last_state is None:
            return False
        if item.state.shape != self._last_state.shape:
            return False
        return bool(np.linalg.norm(item.state - self._last_state) < atol)

    async def take(self) -> Pending | None:
        """The waiting observation, after at most `obs_wait_s` (None: none came, or the session closed)."""
        if self._pending is None and not self._closed:
            try:
                await asyncio.wait_for(self._ready.wait(), self.config.obs_wait_s)
            except TimeoutError:
                return None
        self._ready.clear()
        item, self._pending = self._pending, None
        if item is not None and not self._closed:
            self._mark_predicted(item.timestep)
            self._last_state = item.state
            return item
        return None

    def _mark_predicted(self, timestep: int) -> None:
        if timestep in self._predicted:
            return
        self._predicted.add(timestep)
        self._predicted_order.append(timestep)
        while len(self._predicted_order) > PREDICTED_KEPT:
            self._predicted.discard(self._predicted_order.popleft())

    def failed(self, item: Pending) -> None:
        """Its inference failed: the client will send the same timestep again (its queue is not
        refilled, so it stays there); let that one run."""
        self._predicted.discard(item.timestep)

    def close(self) -> int:
        """End the session; returns how many observations were left unanswered (0 or 1)."""
        self._closed = True
        left = int(self._pending is not None)
        self._pending = None
        self._ready.set()
        return left

    # -- rtc-soft ---------------------------------------------------------------------------------------
    def expected_delay(self) -> int:
        return max(self.delays) if self.delays else 0

    def guidance(self, item: Pending) -> dict[str, Any]:
        """The rtc-soft inputs for `item` (empty for `chunk`, or while the client executes nothing known)."""
        if self.config.strategy != "rtc-soft":
            return {}
        rows = self.queue.from_timestep(item.timestep)
        if rows is None:
            return {}
        return {PREV_ACTIONS_KEY: rows, DELAY_KEY: np.int64(self.expected_delay()), MODE_KEY: "soft-prefix"}

    def delivered(self, item: Pending, actions: np.ndarray, sent: float) -> None:
        """Its chunk (what was sent) left at perf_counter `sent`: replay the client's merge, measure the delay."""
        self.queue.merge(item.timestep, actions)
        one_way = min(max(item.received_wall - item.timestamp, 0.0), MAX_ONE_WAY_S)
        elapsed = (sent - item.received) + 2 * one_way
        self.delays.append(max(0, math.ceil(elapsed * self.config.fps - 1e-9)))
