"""LiveMetrics: one registry per instance, exposition on demand and on its own port."""

import urllib.request

from hotloop.measure.live_metrics import LiveMetrics


def test_instances_do_not_share_state():
    a, b = LiveMetrics(), LiveMetrics()
    a.deadline_miss()
    a.fallback("hold")
    a.dropped_observation()
    a.observe_stage("infer", 0.003)
    assert a.value("hotloop_deadline_misses_total") == 1
    assert a.value("hotloop_fallbacks_total", {"kind": "hold"}) == 1
    assert a.value("hotloop_stage_seconds_bucket", {"stage": "infer", "le": "0.005"}) == 1
    assert a.value("hotloop_stage_seconds_bucket", {"stage": "infer", "le": "0.002"}) == 0
    assert b.value("hotloop_deadline_misses_total") == 0
    assert b.value("hotloop_dropped_observations_total") == 0


def test_exposition_has_memory_and_the_counters():
    metrics = LiveMetrics(namespace="robot")
    metrics.deadline_miss()
    body, content_type = metrics.exposition()
    text = body.decode()
    assert content_type.startswith("text/plain")
    assert "robot_deadline_misses_total 1.0" in text
    rss = [line for line in text.splitlines() if line.startswith("robot_resident_memory_bytes ")]
    assert rss and float(rss[0].split()[1]) > 1e6


def test_serve_http_for_a_runner_without_a_server():
    metrics = LiveMetrics()
    metrics.fallback("decelerate")
    server = metrics.serve_http(0)
    try:
        port = server.server_port
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert 'hotloop_fallbacks_total{kind="decelerate"} 1.0' in text
    finally:
        server.shutdown()
        server.server_close()


def test_watchdog_totals_are_mirrored_as_increments():
    metrics = LiveMetrics()
    metrics.observe_watchdog_totals({"inferences": 10, "misses": 2, "faults": 1, "switches": 3}, "hold")
    metrics.observe_watchdog_totals({"inferences": 12, "misses": 2, "faults": 2, "switches": 4}, "hold")
    assert metrics.value("hotloop_deadline_misses_total") == 2
    assert metrics.value("hotloop_engine_faults_total") == 2
    assert metrics.value("hotloop_fallbacks_total", {"kind": "hold"}) == 4
