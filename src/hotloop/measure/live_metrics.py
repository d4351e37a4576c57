"""Live metrics in Prometheus exposition format, one registry per instance (no global state).

A server, a chunk runner on a robot, or a closed-loop evaluation each make their own `LiveMetrics` and
record into it; `exposition()` renders it for a `/metrics` endpoint and `serve_http(port)` exposes it on its
own port for a process that has none. Resident memory and temperature are read at scrape time, so a
stalled process still reports them. The Grafana dashboard in `hotloop/serve/grafana_dashboard.json` plots
these names.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

# Latency buckets from 100 us to 5 s: a loopback round trip, a CPU VLA step and a stall all resolve.
LATENCY_BUCKETS_S = (
    0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0,
)  # fmt: skip


class LiveMetrics:
    """Per-stage latency histograms and the counters a deadline-driven runner needs."""

    def __init__(self, namespace: str = "hotloop", read_machine: bool = True) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        self.namespace = namespace
        metric = self._metric
        self.stage_seconds = metric(
            Histogram,
            "stage_seconds",
            "Latency of one pipeline stage (decode, queue, infer, encode, ...)",
            "stage",
            buckets=LATENCY_BUCKETS_S,
        )
        self.deadline_misses = metric(Counter, "deadline_misses", "Inferences that missed their deadline")
        self.fallbacks = metric(Counter, "fallbacks", "Switches to a fallback action source", "kind")
        self.fallback_returns = metric(
            Counter, "fallback_returns", "Returns from a fallback to the main policy (a fresh chunk arrived)"
        )
        self.fallback_seconds = metric(Counter, "fallback_seconds", "Time spent in a fallback")
        self.dropped_observations = metric(
            Counter, "dropped_observations", "Observations superseded by a newer one before inference started"
        )
        self.faults = metric(
            Counter, "engine_faults", "Inferences that raised or returned non-finite actions"
        )
        self.requests = metric(Counter, "requests", "Observations answered, by outcome", "outcome")
        self.connections = metric(Gauge, "connections", "Open client connections")
        if read_machine:
            self.registry.register(_MachineCollector(namespace))
        self._stages: dict[str, Any] = {}  # label lookups cost microseconds; stages are few and fixed
        self._outcomes: dict[str, Any] = {}
        self._totals_seen: dict[str, int] = {}

    def _metric(self, kind: Any, name: str, documentation: str, *labels: str, **options: Any) -> Any:
        """A `kind` of metric (Counter, Gauge, Histogram) named in this registry's namespace, with `labels`."""
        return kind(name, documentation, labels, namespace=self.namespace, registry=self.registry, **options)

    def observe_stage(self, stage: str, seconds: float) -> None:
        child = self._stages.get(stage)
        if child is None:
            child = self._stages[stage] = self.stage_seconds.labels(stage=stage)
        child.observe(seconds)

    def deadline_miss(self) -> None:
        self.deadline_misses.inc()

    def fallback(self, kind: str) -> None:
        self.fallbacks.labels(kind=kind).inc()

    def dropped_observation(self) -> None:
        self.dropped_observations.inc()

    def request(self, outcome: str) -> None:
        child = self._outcomes.get(outcome)
        if child is None:
            child = self._outcomes[outcome] = self.requests.labels(outcome=outcome)
        child.inc()

    def observe_watchdog_totals(
        self, totals: Mapping[str, int], fallback_kind: str, tick_s: float | None = None
    ) -> None:
        """Mirror a runner's cumulative counters (a deadline watchdog's `counters()`: `misses`, `faults`,
        `switches`, `returns`, and with the watchdog's `tick_s` its `fallback_ticks` as seconds) into this
        registry; call it as often as convenient, each call adds what is new."""
        targets: dict[str, tuple[Any, float]] = {
            "misses": (self.deadline_misses, 1.0),
            "faults": (self.faults, 1.0),
            "switches": (self.fallbacks.labels(kind=fallback_kind), 1.0),
            "returns": (self.fallback_returns, 1.0),
        }
        if tick_s is not None:
            targets["fallback_ticks"] = (self.fallback_seconds, tick_s)
        for key, (counter, unit) in targets.items():
            total = int(totals.get(key, 0))
            seen_key = f"{key}/{fallback_kind}" if key == "switches" else key
            delta = total - self._totals_seen.get(seen_key, 0)
            if delta < 0:
                raise ValueError(
                    f"{key} went down from {self._totals_seen[seen_key]} to {total}; pass totals"
                )
            if delta:
                counter.inc(delta * unit)
            self._totals_seen[seen_key] = total

    def watch_inference(self, seconds_running: Callable[[], float]) -> None:
        """Export how long the inference in flight has been running (0 when idle), read at scrape time."""
        from prometheus_client import Gauge

        gauge = self._metric(
            Gauge,
            "inference_running_seconds",
            "How long the inference in flight has been running (0 when none is)",
        )
        gauge.set_function(seconds_running)

    def exposition(self) -> tuple[bytes, str]:
        """(body, content type) for an HTTP `/metrics` response."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def serve_http(self, port: int, host: str = "127.0.0.1") -> Any:
        """Expose this registry on its own HTTP port; returns the server (call `.shutdown()` to stop)."""
        from prometheus_client import start_http_server

        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return server

    def value(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        """The current value of one sample (e.g. "hotloop_dropped_observations_total"), for reports and tests."""
        return self.registry.get_sample_value(name, labels or {})


class _MachineCollector:
    """Resident memory and, where the OS exposes it, the hottest temperature sensor; read at scrape time."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace

    def describe(self) -> list[Any]:
        return []  # unchecked collector: temperature may not exist on this machine

    def collect(self) -> Iterator[Any]:
        import psutil
        from prometheus_client.core import GaugeMetricFamily

        rss = GaugeMetricFamily(
            f"{self.namespace}_resident_memory_bytes", "Resident set size of this process"
        )
        rss.add_metric([], float(psutil.Process(os.getpid()).memory_info().rss))
        yield rss
        celsius = _max_temperature_c()
        if celsius is not None:
            temp = GaugeMetricFamily(
                f"{self.namespace}_temperature_celsius", "Hottest readable temperature sensor"
            )
            temp.add_metric([], celsius)
            yield temp


def _max_temperature_c() -> float | None:
    import psutil

    read = getattr(psutil, "sensors_temperatures", None)  # absent on macOS and Windows
    if read is None:
        return None
    try:
        sensors = read()
    except (OSError, RuntimeError):
        return None
    values = [t.current for entries in sensors.values() for t in entries if t.current is not None]
    return float(max(values)) if values else None
