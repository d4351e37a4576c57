"""`--strategy ensemble`: LeRobot's temporal ensembling on the chunk scheduler, for any chunk policy.

With no delay the executed actions are `TemporalEnsembler.update`'s (LeRobot's algorithm, tested against
its transcription in test_temporal_ensemble.py) bit for bit; with a delay, each period's action is the
weighted average of the predictions for it among the chunks that had arrived, computed here from the
trace by brute force. Coefficients come from the option, else the policy, else 0.01; the same runs over a
real websocket from the robot side."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from rt_fakes import FakeRobot

from hotloop.errors import ConfigError
from hotloop.policy_spec import ArraySpec
from hotloop.realtime.clock import FakeClock
from hotloop.realtime.runner import SimulatedEngine, WallClockRunner
from hotloop.realtime.scheduler import Segment
from hotloop.realtime.strategies import (
    DEFAULT_ENSEMBLE_COEFF,
    StrategyConfig,
    apply_defaults,
    make_strategy,
    policy_strategy,
)
from hotloop.realtime.temporal_ensemble import TemporalEnsembler, ensemble_weights

TICK_S = 0.002
CONTROL_HZ = 10.0
PERIOD = 50  # ticks per control period at 10 Hz on a 2 ms clock
H = 6


class RandomChunks:
    """Seeded float32 chunks, different at every call; declares an ensembling coefficient when given."""

    observation_spec = {"state": ArraySpec((10,), "float32")}

    def __init__(self, coeff: float | None = None, seed: int = 0) -> None:
        self.seed = seed
        self.coeff = coeff
        self.reset()

    @property
    def strategy_defaults(self) -> dict[str, Any]:
        return {} if self.coeff is None else {"ensemble_coeff": self.coeff}

    def reset(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        self.chunks: list[np.ndarray] = []

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        chunk = self.rng.normal(size=(H, 4)).astype(np.float32)
        self.chunks.append(chunk)
        return {"actions": chunk}


def run(policy: Any, latency_ms: float, seconds: float, coeff: float | None = None) -> tuple[Any, ...]:
    """The wall-clock runner on a fake clock (deterministic): executed (period start, action) pairs,
    the engine's (obs tick, ready tick) per inference, and the report."""
    clock = FakeClock(tick_s=TICK_S)
    engine = SimulatedEngine(policy, TICK_S, lambda measured: latency_ms)
    options = {} if coeff is None else {"ensemble_coeff": coeff}
    runner = WallClockRunner(
        policy,
        FakeRobot(np.zeros(4)),
        policy_strategy("ensemble", policy, **options),
        CONTROL_HZ,
        clock=clock,
        engine=engine,
    )
    executed: list[tuple[int, np.ndarray]] = []

    def on_segment(seg: Segment, start: int, end: int) -> None:
        if seg.source == "chunk":
            assert seg.end is not None
            executed.append((seg.end - PERIOD, np.asarray(seg.action)))

    report = runner.run(seconds, on_segment)
    return executed, engine.inference_ticks, report, runner.scheduler


@pytest.mark.parametrize("coeff", [0.0, DEFAULT_ENSEMBLE_COEFF, 0.4, -0.3])
def test_no_delay_executes_lerobots_ensembled_actions_bit_for_bit(coeff: float) -> None:
    policy = RandomChunks(seed=1)
    executed, ticks, report, scheduler = run(policy, 0.0, 3.0, coeff)
    assert scheduler.strategy.describe() == {"name": "ensemble", "ensemble_coeff": coeff, "overlaps": True}
    assert [obs for obs, _ in ticks] == [i * PERIOD for i in range(len(ticks))]  # one inference a period
    assert len(executed) >= 25 and report.chunks == len(policy.chunks)
    lerobot = TemporalEnsembler(coeff, H)
    for (start, action), chunk, (obs, _) in zip(executed, policy.chunks, ticks, strict=False):
        assert start == obs
        want = lerobot.update(chunk[None].astype(np.float64))[0]  # the scheduler's float64 copy
        np.testing.assert_array_equal(action, want)


def brute_force(
    start: int, chunks: list[np.ndarray], ticks: list[tuple[int, int]], coeff: float
) -> np.ndarray:
    """Action for the period at `start`: the chunks that had arrived by `start` and plan it, oldest first,
    weighted exp(-coeff * i) (LeRobot's float32 weights, summed here in one go)."""
    preds = [
        chunk[(start - obs) // PERIOD].astype(np.float64)
        for chunk, (obs, ready) in zip(chunks, ticks, strict=True)
        if ready <= start and 0 <= start - obs < H * PERIOD
    ]
    w = ensemble_weights(coeff, H)[0][: len(preds)].astype(np.float64)
    return (w[:, None] * np.stack(preds)).sum(0) / w.sum()


@pytest.mark.parametrize("latency_ms", [30.0, 150.0, 260.0])
def test_under_latency_each_period_averages_the_chunks_that_have_arrived(latency_ms: float) -> None:
    coeff = 0.2
    policy = RandomChunks(seed=2)
    executed, ticks, _, _ = run(policy, latency_ms, 4.0, coeff)
    delay = int(np.ceil(latency_ms / (PERIOD * TICK_S * 1e3)))  # periods from observation to arrival
    gaps = np.diff([obs for obs, _ in ticks])
    assert set(gaps.tolist()) == {max(1, delay) * PERIOD}  # the next inference at the first free boundary
    assert len(executed) > 20
    for start, action in executed:
        # LeRobot's online form divides by float32 cumulative sums of the weights: ~1e-7 from the exact mean.
        np.testing.assert_allclose(action, brute_force(start, policy.chunks, ticks, coeff), rtol=0, atol=1e-6)
    # A chunk's first `delay` actions were in the past when it arrived: never executed from it.
    counts = {
        start: sum(1 for o, r in ticks if r <= start and 0 <= start - o < H * PERIOD) for start, _ in executed
    }
    assert max(counts.values()) == (H - 1) // delay


def test_the_coefficient_comes_from_the_option_else_the_policy_else_the_default() -> None:
    declared = RandomChunks(coeff=0.3)
    assert policy_strategy("ensemble", declared)(H).describe()["ensemble_coeff"] == 0.3
    assert policy_strategy("ensemble", declared, ensemble_coeff=0.05)(H).describe()["ensemble_coeff"] == 0.05
    assert (
        policy_strategy("ensemble", RandomChunks())(H).describe()["ensemble_coeff"] == DEFAULT_ENSEMBLE_COEFF
    )
    # The same run with the coefficient declared or given gives the same actions.
    a, *_ = run(RandomChunks(coeff=0.3, seed=4), 120.0, 2.0)
    b, *_ = run(RandomChunks(seed=4), 120.0, 2.0, coeff=0.3)
    assert all(np.array_equal(x, y) for (_, x), (_, y) in zip(a, b, strict=True))


def test_declared_defaults_apply_where_the_strategy_reads_them() -> None:
    defaults = {"execute_steps": 3, "ensemble_coeff": 0.2}
    assert apply_defaults("chunk", StrategyConfig(8), defaults).execute_steps == 3
    assert apply_defaults("chunk", StrategyConfig(8), defaults).ensemble_coeff is None
    assert apply_defaults("sync", StrategyConfig(8), defaults) == StrategyConfig(8)  # sync refuses n > 1
    assert apply_defaults("chunk", StrategyConfig(8, execute_steps=5), defaults).execute_steps == 5
    with pytest.raises(ConfigError, match="strategy_defaults warp"):
        apply_defaults("chunk", StrategyConfig(8), {"warp": 1})


def test_bad_coefficients_and_blending_are_refused() -> None:
    with pytest.raises(ConfigError, match="--ensemble-coeff must be a finite number"):
        StrategyConfig(8, ensemble_coeff=float("nan"))
    with pytest.raises(ConfigError, match="overflow"):
        make_strategy("ensemble", StrategyConfig(200, ensemble_coeff=-1.0))
    from hotloop.realtime.blending import BlendConfig
    from hotloop.realtime.scheduler import ChunkScheduler, Completion, SchedulerConfig

    scheduler = ChunkScheduler(
        lambda h: make_strategy("ensemble", StrategyConfig(h)), PERIOD, TICK_S,
        config=SchedulerConfig(blend=BlendConfig("average")),
    )  # fmt: skip
    scheduler.started(0)
    with pytest.raises(ConfigError, match="--blend average with --strategy ensemble"):
        scheduler.completed(Completion(0, 0, {"actions": np.zeros((H, 4))}), np.zeros(4))


def test_the_robot_side_runner_ensembles_a_served_policy() -> None:
    """The client-side runner executes the chunks, so it ensembles: the served policy's coefficient comes
    in the server's metadata, and the robot commands what a local run commands."""
    from hotloop.client import PolicyClient
    from hotloop.serve.policies import serve_policy
    from hotloop.serve.server import PolicyServer, ServeConfig, ServerThread

    local, *_ = run(RandomChunks(coeff=0.25, seed=5), 120.0, 2.0)
    served = serve_policy("chunks", RandomChunks(coeff=0.25, seed=5))
    with (
        ServerThread(PolicyServer(served, ServeConfig(port=0))) as server,
        PolicyClient(port=server.port) as client,
    ):
        assert client.strategy_defaults == {"ensemble_coeff": 0.25}
        served.policy.reset()  # the warm-up inference drew a chunk
        remote, _, _, scheduler = run(client, 120.0, 2.0)
    assert scheduler.strategy.describe()["ensemble_coeff"] == 0.25
    assert len(remote) == len(local)
    for (ta, a), (tb, b) in zip(local, remote, strict=True):
        assert ta == tb
        np.testing.assert_array_equal(a, b)


def test_eval_refuses_options_the_ensemble_does_not_read() -> None:
    from typer.testing import CliRunner

    from hotloop.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["eval", "toy:mlp", "--strategy", "async", "--ensemble-coeff", "0.1"])
    assert res.exit_code == 2 and "--ensemble-coeff 0.1 does nothing with --strategy async" in res.output
    res = runner.invoke(app, ["eval", "toy:mlp", "--strategy", "ensemble", "--blend", "average"])
    assert res.exit_code == 2 and "--blend average with --strategy ensemble" in res.output
    res = runner.invoke(app, ["eval", "toy:mlp", "--strategy", "ensemble", "--execute-steps", "2"])
    assert res.exit_code == 2 and "--execute-steps 2 does nothing" in res.output


def test_the_evaluator_ensembles_any_chunk_policy() -> None:
    """Family-neutral: the toy MLP target in closed loop on `reach`, ensembled at a sub-period latency:
    one inference per control period, the default coefficient in the run's description."""
    from hotloop.closedloop.pool import run_episodes
    from hotloop.closedloop.workers import EpisodeJob

    job = EpisodeJob(target="toy:mlp", task="reach", difficulty=None, strategy="ensemble", latency="fixed:30")
    (record,), interrupted = run_episodes(job, [0], workers=0)
    assert not interrupted and record["error"] is None
    assert record["run"]["strategy"] == {
        "name": "ensemble",
        "ensemble_coeff": DEFAULT_ENSEMBLE_COEFF,
        "overlaps": True,
    }
    periods = record["sim_time_s"] * 10  # reach runs at 10 Hz
    assert periods - 1 <= record["inferences"] <= periods + 1
