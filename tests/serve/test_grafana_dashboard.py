"""The Grafana dashboard plots only metric names LiveMetrics really exports."""

import json
import re
from pathlib import Path

import hotloop.serve
from hotloop.measure.live_metrics import LiveMetrics

DASHBOARD = Path(hotloop.serve.__file__).with_name("grafana_dashboard.json")


def test_every_queried_metric_is_exported():
    dashboard = json.loads(DASHBOARD.read_text())
    metrics = LiveMetrics()
    for stage in ("infer", "decode"):
        metrics.observe_stage(stage, 0.001)
    metrics.fallback("hold")
    metrics.request("ok")
    metrics.watch_inference(lambda: 0.0)  # a server registers it
    exported = {line.split("{")[0].split(" ")[0] for line in metrics.exposition()[0].decode().splitlines()}
    exported = {name for name in exported if name and not name.startswith("#")}
    queried = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            queried |= set(re.findall(r"\bhotloop_[a-z_]+", target["expr"]))
    assert queried, "the dashboard queries nothing"
    # Temperature is exported only where a sensor is readable; everything else must be there now.
    missing = queried - exported - {"hotloop_temperature_celsius"}
    assert not missing, f"dashboard queries metrics that are not exported: {sorted(missing)}"
    assert {"hotloop_stage_seconds_bucket", "hotloop_dropped_observations_total"} <= queried
