"""Serving: an openpi-compatible websocket policy server with `/healthz` and Prometheus `/metrics`.

The robot side is `hotloop.client` (torch-free); the metrics live in `hotloop.measure.live_metrics` so any
runner can export them; `grafana_dashboard.json` here plots them.
"""
