"""The LeRobot front end's Prometheus series, on the server's own `LiveMetrics` registry.

Beside the series every hotloop server exports (`hotloop_stage_seconds`, `hotloop_requests_total`, the
watchdog's, `hotloop_dropped_observations_total` for observations superseded before inference):

| series | meaning |
|---|---|
| `hotloop_rpc_seconds{rpc}` | histogram: time in each gRPC method (`GetActions` includes its wait for an observation) |
| `hotloop_rpc_total{rpc,code}` | calls by method and gRPC status code (`OK`, `INVALID_ARGUMENT`, ...) |
| `hotloop_rejected_total{reason}` | payloads refused: `pickle` (a global outside the allow-list, malformed), `too_large`, `wire`, `instructions`, `observation`, `unauthenticated`, `sessions` |
| `hotloop_lerobot_observations_total{outcome}` | every observation a client sent, by what became of it (`execution.OUTCOMES`) |
| `hotloop_lerobot_conditioned_total` | chunks conditioned on the client's queue (`--strategy rtc-soft`) |
| `hotloop_lerobot_sessions` | clients with a session (between `Ready` and eviction) |
"""

from __future__ import annotations

from typing import Any

from hotloop.measure.live_metrics import LATENCY_BUCKETS_S, LiveMetrics


class LeRobotMetrics:
    def __init__(self, live: LiveMetrics) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        self.live = live
        ns, registry = live.namespace, live.registry
        self.rpc_seconds = Histogram(
            "rpc_seconds", "Time in one gRPC method", ["rpc"], namespace=ns, buckets=LATENCY_BUCKETS_S,
            registry=registry,
        )  # fmt: skip
        self.rpc_total = Counter(
            "rpc", "gRPC calls by method and status", ["rpc", "code"], namespace=ns, registry=registry
        )
        self.rejected = Counter(
            "rejected", "Client payloads refused, by reason", ["reason"], namespace=ns, registry=registry
        )
        self.observations = Counter(
            "lerobot_observations", "Observations received, by what became of them", ["outcome"], namespace=ns,
            registry=registry,
        )  # fmt: skip
        self.conditioned = Counter(
            "lerobot_conditioned", "Chunks conditioned on the client's queue (rtc-soft)", namespace=ns,
            registry=registry,
        )  # fmt: skip
        self.sessions = Gauge("lerobot_sessions", "Clients with a session", namespace=ns, registry=registry)

    def rpc(self, name: str, code: str, seconds: float) -> None:
        self.rpc_seconds.labels(rpc=name).observe(seconds)
        self.rpc_total.labels(rpc=name, code=code).inc()

    def reject(self, reason: str) -> None:
        self.rejected.labels(reason=reason).inc()

    def observation(self, outcome: str, count: int = 1) -> None:
        if count:
            self.observations.labels(outcome=outcome).inc(count)

    def value(self, name: str, labels: dict[str, str] | None = None) -> float:
        found: Any = self.live.value(name, labels)
        return float(found or 0.0)
