"""Measurement: latency statistics, stage timers, machine fingerprint, bench runner, reports."""
