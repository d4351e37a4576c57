"""conveyor-pick's layered pipeline: camera -> box detector -> Kalman tracker -> policy -> controller.

`--pipeline detector` wraps the policy so that it no longer reads the box from simulator state: each
cycle (one `infer` call) runs four layers, stamped and budgeted by `hotloop.realtime.budget`:

- perception: `ColourBoxDetector` on the observation's top camera image (or, with `truth`, the
  simulator's box position: the same chain with a perfect sensor, the baseline);
- estimation: a constant-velocity Kalman tracker over the detections, stamped with the observation's
  `timestamp`, starting from the belt's nominal speed; there is no target until the box is seen and its
  velocity known to 5 cm/s (the policy holds still meanwhile); it predicts through occlusion (no detection) and, once the gripper holds the box (the
  finger gap reads the box's width), takes the box from the gripper's own position. With `predict`, it
  extrapolates the estimate to when the chunk will start (now + the pipeline's known latency), which
  compensates what latency costs on a moving target under strategies that hold while thinking (sync,
  chunk: the plan starts when it arrives). `async` already runs a chunk on the timeline of its
  observation (it drops the actions whose time passed), so predicting there aims ahead of the box;
- decision: the wrapped policy, given the observation with the estimate where the box state was;
- control: the chunk clipped to the workspace (MuJoCo's position actuators are the servo loop).

Injected latency per layer (`perception=MS`, `estimation=MS`, `control=MS`) is charged to that layer and
added to the delay the closed loop waits for each inference; the decision layer's latency is `--latency`
(measured, fixed or replayed). So a sweep over `perception=0,50,100` shows what a slower camera pipeline
costs in task success. Under `fixed` or `replay` latency only charged time counts towards the delay
(the chain's real compute time outside the decision layer is reported, not charged), so runs repeat.

The wrapper sees the true box state only to score its estimate (`estimate_error_mm` in the record:
against the box at the observation's time, so with `predict` it includes the deliberate extrapolation).

Camera rate (`camera_hz=N`, detector only): perception runs on every camera frame (rendered every 1/N s
of simulated time, e.g. `camera_hz=10` at each control tick), as a robot's perception layer does, not
only when the policy is called. A frame's detection is usable `perception` ms after the frame (the
layer's injected latency; its real compute time is reported, not charged, so runs repeat); at each
decision the tracker takes every detection usable by then, in frame order, and extrapolates to the
decision's time. Perception is then pipelined: its latency is the age of the estimate, not a delay the
loop waits for (`sample_ms` adds only estimation and control). Per layer: every frame's perception
latency is recorded (`frames` in the record and summary, with the estimate's age at each decision), and
each decision cycle's perception entry is the latency of the newest frame it used.

Perception model (`model=`, detector only): `colour` (the default, `ColourBoxDetector`), `learned` (the
shipped CNN `demo:detector`, `hotloop.perception.learned_detector`), the folder of one `hotloop
train-demo --variant detector` wrote, or an int8 plan folder `perception-curve --int8` wrote (run by ONNX
Runtime at its own resolution); `resolution=N` sets the learned detector's input size (the camera
image is resampled to N px; default the detector's own, 64).

Spec: `KIND[:key=value,...]`, KIND `detector` or `truth`; keys: perception, estimation, control
(injected ms), predict (0/1), camera_hz (frames per second; 0, the default: perception at each
decision), model (colour, learned or a folder), resolution (px), noise (the tracker's measurement
noise, mm per axis; default 5), budget.LAYER (ms; defaults perception
20, estimation 2, decision 100, control 2). Example: `--pipeline detector:perception=50,predict=1`,
`--pipeline detector:camera_hz=10,perception=50` or `--pipeline detector:model=learned,resolution=48`.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hotloop.closedloop.latency import WrappedLatency
from hotloop.errors import ConfigError
from hotloop.policy import seed_noise
from hotloop.realtime.budget import (
    BudgetReport,
    CycleRecorder,
    PipelineBudget,
    budget_report,
    merge_latencies,
)
from hotloop.realtime.filters.kalman import KalmanConfig, KalmanTracker
from hotloop.realtime.rtc import GUIDED_KEY, MODE_KEY, PREV_ACTIONS_KEY, guidance_mode

KINDS = ("detector", "truth")
DEFAULT_BUDGETS_MS = {"perception": 20.0, "estimation": 2.0, "decision": 100.0, "control": 2.0}
TRACKED_VELOCITY_STD = 0.05  # m/s: until the tracker's velocity is this certain, there is no target yet
HELD_GAP = (0.03, 0.06)  # finger gap (m) that means "closed on the 4 cm box" (open 0.08, empty ~0.016)
GRASP_OFFSET = np.array([0.0, 0.0, -0.011])  # box centre relative to the end effector when held


@dataclass(frozen=True)
class PipelineConfig:
    kind: str = "detector"
    perception_ms: float = 0.0
    estimation_ms: float = 0.0
    control_ms: float = 0.0
    predict: bool = False
    camera_hz: float = 0.0  # > 0: perception on every camera frame at this rate (0: at each decision)
    # The perception model: the colour threshold, the shipped learned detector (`learned`, demo:detector)
    # or a detector folder `hotloop train-demo --variant detector` wrote; its input resolution (0: its own).
    model: str = "colour"
    resolution: int = 0
    # The tracker's measurement noise (mm, per axis); 0: the default, `kalman.measurement_std` (5 mm).
    noise_mm: float = 0.0
    budgets_ms: tuple[tuple[str, float], ...] = tuple(DEFAULT_BUDGETS_MS.items())
    # Detections are good to ~3-5 mm; the belt carries the box along x at a constant speed, so the motion
    # model is trusted, and across the belt (y) and vertically (z) the box barely moves at all.
    kalman: KalmanConfig = field(
        default_factory=lambda: KalmanConfig(
            "cv",
            3,
            process_noise=(1e-4, 1e-6, 1e-6),
            measurement_std=0.005,
            initial_velocity_std=(1.0, 0.01, 0.01),
            gate=25.0,
        )
    )

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"--pipeline {self.kind!r}: use one of {', '.join(KINDS)}")
        for name in ("perception_ms", "estimation_ms", "control_ms"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"--pipeline {name.removesuffix('_ms')}= must be >= 0 ms")
        if not self.noise_mm >= 0:
            raise ConfigError(f"--pipeline noise={self.noise_mm:g} must be >= 0 mm (0: the default, 5 mm)")
        if self.noise_mm and self.kind == "truth":
            raise ConfigError("--pipeline truth has no measurement noise; noise= is for detector")
        if not self.camera_hz >= 0:
            raise ConfigError(f"--pipeline camera_hz={self.camera_hz:g} must be >= 0 (0: at each decision)")
        if self.model != "colour" and self.kind == "truth":
            raise ConfigError("--pipeline truth reads the simulator; model= is for detector")
        if self.resolution:
            if self.model == "colour":
                raise ConfigError(
                    "--pipeline resolution= is the learned detector's input size; add model=learned "
                    "(the colour threshold reads the camera image as it is)"
                )
            from hotloop.perception.learned_detector import check_resolution

            check_resolution(self.resolution, "--pipeline resolution=")
        if self.camera_hz > 0 and self.kind == "truth":
            raise ConfigError(
                "--pipeline truth reads the simulator at each decision; camera_hz= is for detector"
            )

    @property
    def budget(self) -> PipelineBudget:
        return PipelineBudget.of(**dict(self.budgets_ms))

    @property
    def per_axis_velocity_std(self) -> tuple[float, ...]:
        return tuple(float(v) for v in self.kalman.per_axis("initial_velocity_std"))

    @property
    def injected_ms(self) -> float:
        return self.perception_ms + self.estimation_ms + self.control_ms

    @property
    def delay_ms(self) -> float:
        """Injected latency on the decision's path: at camera rate perception runs ahead of it."""
        return self.injected_ms - (self.perception_ms if self.camera_hz > 0 else 0.0)

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "injected_ms": {
                "perception": self.perception_ms,
                "estimation": self.estimation_ms,
                "control": self.control_ms,
            },
            "predict": self.predict,
            "camera_hz": self.camera_hz,
            "model": self.model,
            "resolution": self.resolution or None,
            "noise_mm": self.noise_mm or None,
            "budgets_ms": dict(self.budgets_ms),
        }


def parse_pipeline(spec: str) -> PipelineConfig:
    """Parse `--pipeline KIND[:key=value,...]` (see the module docstring)."""
    kind, _, rest = spec.strip().partition(":")
    values: dict[str, Any] = {"kind": kind.strip()}
    budgets = dict(DEFAULT_BUDGETS_MS)
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, text = item.partition("=")
        key = key.strip()
        if key == "model" and eq and text.strip():
            values["model"] = text.strip()
            continue
        try:
            number = float(text)
        except ValueError:
            number = float("nan")
        if not eq or not np.isfinite(number):
            raise ConfigError(
                f"--pipeline {spec!r}: {item!r} must be key=number, e.g. detector:perception=50,predict=1"
            )
        if key in ("perception", "estimation", "control"):
            values[f"{key}_ms"] = number
        elif key == "predict":
            values["predict"] = bool(number)
        elif key == "camera_hz":
            values["camera_hz"] = number
        elif key == "noise":
            values["noise_mm"] = number
        elif key == "resolution":
            if number != int(number):
                raise ConfigError(f"--pipeline resolution={text} must be a whole number of pixels, e.g. 64")
            values["resolution"] = int(number)
        elif key.startswith("budget.") and key[7:] in budgets:
            budgets[key[7:]] = number
        else:
            raise ConfigError(
                f"--pipeline {spec!r}: unknown key {key!r}; use perception, estimation, control, predict, "
                f"camera_hz, model, resolution, noise or budget.LAYER ({', '.join(budgets)})"
            )
    values["budgets_ms"] = tuple(budgets.items())
    return PipelineConfig(**values)


class PipelinePolicy:
    """Wraps a conveyor-pick policy: the box state it sees comes from the perception/estimation layers."""

    def __init__(
        self,
        inner: Any,
        config: PipelineConfig,
        detector: Any | None,
        plane_z: float,
        action_bounds: tuple[np.ndarray, np.ndarray],
    ) -> None:
        if config.kind == "detector" and detector is None:
            raise ConfigError("--pipeline detector needs a camera: the task has none")
        self.inner = inner
        self.config = config
        self.detector = detector
        self.plane_z = plane_z
        self.action_low, self.action_high = (np.asarray(b, dtype=np.float64) for b in action_bounds)
        self.recorder = CycleRecorder(config.budget)
        self.tracker = KalmanTracker(config.kalman)
        self.lookahead_ms = config.delay_ms  # the latency the estimate is predicted over (with predict)
        self.frame_ticks = 0  # physics ticks between camera frames (set by attach_pipeline; 0: no frames)
        self._frames: list[_Frame] = []  # perceived, not yet taken by a decision (frame order)
        self._frame_log: list[tuple[float, float]] = []  # per frame: (perception latency ms, detected)
        self._ages_ms: list[float] = []  # per decision: age of the newest detection used
        self._newest: _Frame | None = None  # the newest frame any decision took
        self._last_horizon = 0  # length of the last chunk the policy returned
        self._prev_ee: tuple[float, np.ndarray] | None = None
        self._errors: list[tuple[float, float]] = []  # (position mm, velocity mm/s) per estimated cycle
        self._detected = 0
        self._waits = 0
        self._rejected_before = 0  # the tracker's lifetime count at the start of this episode

    @property
    def horizon(self) -> int:
        """The chunk length the wait-for-the-box chunk must have (the scheduler sizes its strategy by the
        first chunk): the policy's own, seen through the task adapter when there is one."""
        for source in (self.inner, getattr(self.inner, "policy", None)):
            horizon = getattr(source, "horizon", None)
            if horizon is not None:
                return int(horizon)
        if self._last_horizon:
            return self._last_horizon
        raise ConfigError(
            "--pipeline holds still until the box is seen and needs the policy's chunk length for that: "
            "give the policy a `horizon` attribute"
        )

    def seed_noise(self, episode_seed: int) -> None:
        seed_noise(self.inner, episode_seed)

    def reset(self) -> None:
        self.inner.reset()
        self.tracker.reset()
        self._prev_ee = None
        self._frames.clear()
        self._newest = None

    def _perceive(self, obs: dict[str, Any], state: np.ndarray) -> tuple[np.ndarray | None, float | None]:
        if self.config.kind == "truth":
            return state[4:7].copy(), None
        detection = self.detector.detect(obs["images"]["top"])  # type: ignore[union-attr]
        return detection.position, detection.partial_x

    def on_frame(self, obs: dict[str, Any]) -> None:
        """Camera rate: the perception layer on one frame; its detection is usable `perception` ms later."""
        t = float(obs["timestamp"])
        start = time.perf_counter_ns()
        measured, partial_x = self._perceive(obs, np.asarray(obs["state"], dtype=np.float64))
        latency_ms = (time.perf_counter_ns() - start) / 1e6 + self.config.perception_ms
        self._frames.append(_Frame(t, t + self.config.perception_ms / 1e3, latency_ms, measured, partial_x))
        self._frame_log.append((latency_ms, float(measured is not None)))

    def infer(self, obs: dict[str, Any], timer: Any = None) -> dict[str, np.ndarray]:
        if "timestamp" not in obs:
            raise ConfigError("--pipeline needs observations with a 'timestamp' (seconds) for its tracker")
        t = float(obs["timestamp"])
        state = np.asarray(obs["state"], dtype=np.float64)
        cfg = self.config
        with self.recorder.cycle() as cycle:
            if self.frame_ticks:  # camera rate: take the frames perceived and usable by now
                usable = [f for f in self._frames if f.ready_s <= t + 1e-9]
                self._frames = self._frames[len(usable) :]
                if usable:
                    self._newest = usable[-1]
                    self._detected += int(any(f.measured is not None for f in usable))
                if self._newest is not None:
                    cycle.charge("perception", self._newest.latency_ms, replace=True)
                    self._ages_ms.append(1e3 * (t - self._newest.t))
                frames = [(f.t, f.measured, f.partial_x) for f in usable]
            else:
                with cycle.layer("perception"):
                    measured, partial_x = self._perceive(obs, state)
                cycle.charge("perception", cfg.perception_ms)
                self._detected += int(measured is not None)
                frames = [(t, measured, partial_x)]
            with cycle.layer("estimation"):
                estimate = self._estimate(t, state, frames)
            cycle.charge("estimation", cfg.estimation_ms)
            out: dict[str, Any] = {}
            with cycle.layer("decision"):
                if estimate is None:  # no target yet: hold still and look again next cycle
                    self._waits += 1
                    actions = np.tile(np.array([*state[:3], 0.0]), (self.horizon, 1))
                    prev = obs.get(PREV_ACTIONS_KEY)
                    if prev is not None:  # rtc: keep executing what runs, then hold (exact inpainting)
                        prev = np.asarray(prev, dtype=np.float64)[: self.horizon]
                        actions[: len(prev)] = prev
                        actions[len(prev) :] = prev[-1] if len(prev) else actions[len(prev) :]
                        # Every given action is kept, so this also is a prefix continuation.
                        out = {GUIDED_KEY: True, MODE_KEY: guidance_mode(obs)}
                else:
                    seen = np.array(state, dtype=np.float32)
                    seen[4:10] = estimate
                    self._errors.append(
                        (
                            1e3 * float(np.linalg.norm(estimate[:3] - state[4:7])),
                            1e3 * float(np.linalg.norm(estimate[3:] - state[7:10])),
                        )
                    )
                    out = dict(self.inner.infer({**obs, "state": seen}))  # other keys (RTC's) pass through
                    actions = np.asarray(out["actions"], dtype=np.float64)
                    self._last_horizon = len(actions)
            with cycle.layer("control"):
                actions = np.clip(actions, self.action_low, self.action_high)
            cycle.charge("control", cfg.control_ms)
        return {**out, "actions": actions}

    def _estimate(
        self, t: float, state: np.ndarray, frames: list[tuple[float, np.ndarray | None, float | None]]
    ) -> np.ndarray | None:
        """[box xyz, box velocity xyz] for the policy at time `t`, or None before the first detection;
        `frames`: the new detections (frame time, position or None, partial x or None), in frame order."""
        ee, gap = state[:3], float(state[3])
        ee_vel = np.zeros(3)
        if self._prev_ee is not None and t > self._prev_ee[0]:
            ee_vel = (ee - self._prev_ee[1]) / (t - self._prev_ee[0])
        self._prev_ee = (t, ee.copy())
        ahead = self.lookahead_ms / 1e3 if self.config.predict else 0.0
        if HELD_GAP[0] < gap < HELD_GAP[1]:
            # Held: the box moves with the gripper (proprioception beats a camera that cannot see depth).
            self.tracker.reset()
            return np.concatenate([ee + GRASP_OFFSET + ee_vel * ahead, ee_vel])
        if self.config.kind == "truth":
            pos, vel = state[4:7] + state[7:10] * ahead, state[7:10]
            return np.concatenate([pos, vel])
        for t_frame, measured, partial_x in frames:
            if measured is None and partial_x is not None:  # half hidden: x is still good, y is not
                self.tracker.update(
                    t_frame, np.array([partial_x, 0.0, self.plane_z]), axes=np.array([True, False, False])
                )
            else:
                self.tracker.update(t_frame, measured)
        # A plan on an unknown velocity chases the box: no target until the velocity is known well enough
        # (at once with the belt's nominal speed as the prior; otherwise after a second detection).
        if not self.tracker.initialized or self.tracker.velocity_std[0] > TRACKED_VELOCITY_STD:
            return None
        pos, vel = self.tracker.state_at(t + ahead)
        pos[2], vel[2] = self.plane_z, 0.0  # the belt's plane: the detector measures no height
        return np.concatenate([pos, vel])

    def take_episode(self) -> dict[str, Any]:
        """This episode's per-layer latencies (one per cycle) and estimate errors; clears them."""
        errors = np.asarray(self._errors).reshape(-1, 2)
        out = {
            "latencies_ms": self.recorder.latencies_ms(),
            "cycles": len(self.recorder.cycles),
            "detections": self._detected,
            "waits": self._waits,
            "rejected": self.tracker.rejected - self._rejected_before,
            "estimate_error_mm": errors[:, 0].tolist(),
            "velocity_error_mm_s": errors[:, 1].tolist(),
            "measurement_std_mm": (
                1e3 * self.tracker.config.measurement_std if self.config.kind == "detector" else None
            ),
            # What the detector's held-out evaluation says of its own centre error (None: not known).
            "detector_centre_std_mm": (
                1e3 * own if (own := getattr(self.detector, "centre_std_m", None)) is not None else None
            ),
        }
        if self.frame_ticks:
            out["frames"] = {
                "perception_ms": [f[0] for f in self._frame_log],
                "detected": [f[1] for f in self._frame_log],
                "age_ms": list(self._ages_ms),
            }
        self._frame_log.clear()
        self._ages_ms.clear()
        self.recorder.clear()
        self._errors.clear()
        self._detected = self._waits = 0
        self._rejected_before = self.tracker.rejected
        return out


@dataclass(frozen=True)
class _Frame:
    """One camera frame's perception: taken at `t`, usable from `ready_s` (simulated seconds)."""

    t: float
    ready_s: float
    latency_ms: float  # measured compute + the injected perception latency
    measured: np.ndarray | None
    partial_x: float | None


@dataclass(frozen=True)
class PipelineLatency(WrappedLatency):
    """The closed loop's delay for one cycle: the decision layer's latency model (`base`) plus the injected
    layers.

    Same interface as `hotloop.closedloop.latency.LatencyModel` (sample_ms, describe, spec)."""

    policy: PipelinePolicy

    def describe(self) -> dict[str, Any]:
        return {**self.base.describe(), "pipeline": self.policy.config.describe()}

    def sample_ms(self, measured_ms: float, rng: np.random.Generator) -> float:
        decision = float(self.base.sample_ms(measured_ms, rng))
        cycle = self.policy.recorder.last
        if self.base.kind != "measured" and cycle is not None:
            cycle.charge("decision", decision, replace=True)  # the simulated inference stands for the wall
        return decision + self.policy.config.delay_ms


def attach_pipeline(policy: Any, env: Any, spec: str, latency: Any) -> tuple[PipelinePolicy, PipelineLatency]:
    """Wrap `policy` for `env` (conveyor-pick) per `spec`; returns the wrapper and the composed latency."""
    from hotloop.perception.box_detector import PinholeCamera
    from hotloop.sim.tasks.conveyor import BOX_HALF
    from hotloop.sim.tasks.gantry import BELT_TOP

    config = parse_pipeline(spec)
    if getattr(env, "task_name", None) != "conveyor-pick":
        raise ConfigError(
            f"--pipeline works on conveyor-pick only (task is {getattr(env, 'task_name', env)!r})"
        )
    plane_z = BELT_TOP + BOX_HALF
    detector: Any = None
    if config.kind == "detector":
        detector = make_detector(config, PinholeCamera.from_env(env), plane_z)
    bounds = (env.action_space.low, env.action_space.high)
    wrapper = PipelinePolicy(policy, config, detector, plane_z, bounds)
    if config.kind == "detector":
        # The belt's nominal speed is the robot's to know (it is configured, or read from the belt's
        # encoder): the tracker starts from it (mean and spread of the difficulty's range, a uniform
        # draw) instead of from rest, so the first detection is already a target; detections refine it.
        low, high = env.task_config.speed_range
        kalman = dataclasses.replace(
            config.kalman,
            initial_velocity=(0.5 * (low + high), 0.0, 0.0),
            initial_velocity_std=((high - low) / math.sqrt(12), *config.per_axis_velocity_std[1:]),
            measurement_std=measurement_std(config),
        )
        wrapper.tracker = KalmanTracker(kalman)
    if config.camera_hz > 0:
        dt = env.config.physics_dt
        ticks = round(1.0 / (config.camera_hz * dt))
        if ticks < 1 or abs(ticks * dt * config.camera_hz - 1.0) > 1e-6:
            raise ConfigError(
                f"--pipeline camera_hz={config.camera_hz:g}: the frame period must be a whole number of "
                f"{dt * 1e3:g} ms physics ticks (e.g. camera_hz=10, 25 or 50)"
            )
        wrapper.frame_ticks = ticks
    if config.predict and getattr(latency, "kind", None) == "fixed":
        wrapper.lookahead_ms = config.delay_ms + float(latency.fixed_ms)
    return wrapper, PipelineLatency(latency, wrapper)


def measurement_std(config: PipelineConfig) -> float:
    """The tracker's measurement noise (m): `noise=` when given, else the default (5 mm).

    Not the detector's own figure (`LearnedBoxDetector.centre_std_m`, 2.5 mm for demo:detector at 64 px,
    reported beside it): replayed over the detections of 120 closed-loop episodes (docs/perception.md),
    trusting it made the estimate worse (p95 9.6 against 8.8 mm), because the detector's errors are
    not white noise: near the gripper they are a bias that a more trusting tracker follows."""
    return config.noise_mm / 1e3 if config.noise_mm else config.kalman.measurement_std


def make_detector(config: PipelineConfig, camera: Any, plane_z: float) -> Any:
    """The perception layer's detector: the colour threshold, or a learned detector (`model=learned`: the
    shipped demo:detector; `model=DIR`: one `hotloop train-demo --variant detector` wrote)."""
    from hotloop.perception.box_detector import ColourBoxDetector

    if config.model == "colour":
        return ColourBoxDetector(camera, plane_z)
    from hotloop.perception.learned_detector import LearnedBoxDetector, PlanModel, load_any

    model = load_any(None if config.model == "learned" else config.model)
    if isinstance(model, PlanModel) and config.resolution and config.resolution != model.config.resolution:
        raise ConfigError(
            f"--pipeline resolution={config.resolution}: the plan in {config.model} was built for "
            f"{model.config.resolution} px; drop resolution= or use that plan's size"
        )
    return LearnedBoxDetector(model, camera, plane_z, config.resolution or model.config.resolution)


def summarize_pipeline(records: list[dict[str, Any]], config: PipelineConfig) -> dict[str, Any]:
    """Aggregate the per-episode pipeline records of one evaluation point."""
    parts = [r["pipeline"] for r in records if r.get("pipeline")]
    report: BudgetReport = budget_report(config.budget, merge_latencies([p["latencies_ms"] for p in parts]))
    pos = np.concatenate(
        [np.asarray(p["estimate_error_mm"], dtype=np.float64) for p in parts] or [np.zeros(0)]
    )
    vel = np.concatenate(
        [np.asarray(p["velocity_error_mm_s"], dtype=np.float64) for p in parts] or [np.zeros(0)]
    )
    cycles = sum(p["cycles"] for p in parts)
    frames: dict[str, Any] = {}
    if config.camera_hz > 0:
        per_frame = np.asarray([x for p in parts for x in p.get("frames", {}).get("perception_ms", [])])
        detected = [x for p in parts for x in p.get("frames", {}).get("detected", [])]
        ages = np.asarray([x for p in parts for x in p.get("frames", {}).get("age_ms", [])])
        frames = {
            "frames": {
                "count": int(per_frame.size),
                "detection_rate": float(np.mean(detected)) if detected else None,
                "perception_ms": {"p50": _pct(per_frame, 50), "p99": _pct(per_frame, 99)},
                "estimate_age_ms": {"p50": _pct(ages, 50), "p95": _pct(ages, 95)},
            }
        }

    def pct(x: np.ndarray, q: float) -> float | None:
        return float(np.percentile(x, q)) if x.size else None

    return {
        **config.describe(),
        "budget": report.to_dict(),
        "cycles": cycles,
        "detection_rate": sum(p["detections"] for p in parts) / cycles if cycles else None,
        "wait_cycles": sum(p["waits"] for p in parts),
        "rejected_detections": sum(p["rejected"] for p in parts),
        "estimate_error_mm": {"p50": pct(pos, 50), "p95": pct(pos, 95)},
        "velocity_error_mm_s": {"p50": pct(vel, 50), "p95": pct(vel, 95)},
        "measurement_std_mm": parts[0].get("measurement_std_mm") if parts else None,
        "detector_centre_std_mm": parts[0].get("detector_centre_std_mm") if parts else None,
        **frames,
    }


def _pct(x: np.ndarray, q: float) -> float | None:
    return float(np.percentile(x, q)) if x.size else None


def report_budgets(runs: list[dict[str, Any]], plot: Any = None) -> list[Any]:
    """Print each run's budget table; with `plot` (the sweep's PNG path), write one budget plot per run
    beside it (`NAME.budget-STRATEGY-LATENCY.png`). Returns the paths written."""
    from pathlib import Path

    written = []
    for r in runs:
        if "pipeline" not in r:
            continue
        report = BudgetReport.from_dict(r["pipeline"]["budget"])
        err = r["pipeline"]["estimate_error_mm"]
        title = (
            f"pipeline budget: {r['strategy']['name']} {r['latency']['spec']} "
            f"({r['pipeline']['kind']}, estimate error p50 "
            + ("-" if err["p50"] is None else f"{err['p50']:.1f} mm")
            + ")"
        )
        report.print_table(title)
        frames = r["pipeline"].get("frames")
        if frames and frames["count"]:
            from rich.console import Console

            per, age = frames["perception_ms"], frames["estimate_age_ms"]
            Console().print(
                f"camera {r['pipeline']['camera_hz']:g} Hz: {frames['count']} frames, perception p50 "
                f"{per['p50']:.1f} ms, p99 {per['p99']:.1f} ms; estimate age at a decision p50 "
                + ("-" if age["p50"] is None else f"{age['p50']:.0f} ms, p95 {age['p95']:.0f} ms")
            )
        if plot is not None:
            base = Path(plot)
            tag = f"{r['strategy']['name']}-{r['latency']['spec']}".replace(":", "").replace("/", "_")
            written.append(report.plot(base.with_name(f"{base.stem}.budget-{tag}.png"), title))
    return written
