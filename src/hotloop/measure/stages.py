"""Nested stage timers: `with timer.stage("vision"): ...` inside any model pipeline.

Host time comes from `time.perf_counter_ns` (monotonic). On CUDA, a device event pair brackets each
stage too, so a report can show GPU time beside wall time and the gap between them (the sync and launch
cost, R1.4). Nested stages get path names: `denoise/step` inside `denoise`. A stage entered several times
in one iteration (e.g. one per denoising step) is summed for that iteration.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _DeviceSpan:
    name: str
    start: Any  # torch.cuda.Event
    end: Any


@dataclass
class StageTimer:
    """Collects per-iteration stage durations in milliseconds.

    `cuda=True` also records CUDA events; their times are read in `end_iteration`, after one sync, so the
    hot path never blocks on the device.
    """

    cuda: bool = False
    _stack: list[str] = field(default_factory=list)
    _host_ms: dict[str, float] = field(default_factory=dict)
    _device_spans: list[_DeviceSpan] = field(default_factory=list)
    _order: list[str] = field(default_factory=list)

    def begin_iteration(self) -> None:
        self._stack.clear()
        self._host_ms = {}
        self._device_spans = []

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        if "/" in name:
            raise ValueError(f"stage name {name!r} must not contain '/': nesting makes the path")
        path = "/".join([*self._stack, name])
        if path not in self._order:
            self._order.append(path)  # on entry: a parent is listed before the stages nested in it
        self._stack.append(name)
        span = None
        if self.cuda:
            import torch

            span = _DeviceSpan(
                path, torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            )
            span.start.record()
        t0 = time.perf_counter_ns()
        try:
            yield
        finally:
            if span is not None:
                span.end.record()
                self._device_spans.append(span)
            elapsed = (time.perf_counter_ns() - t0) / 1e6
            self._stack.pop()
            self._host_ms[path] = self._host_ms.get(path, 0.0) + elapsed

    def end_iteration(self) -> tuple[dict[str, float], dict[str, float]]:
        """Return (host_ms, device_ms) per stage path for the iteration just finished."""
        device_ms: dict[str, float] = {}
        if self._device_spans:
            import torch

            torch.cuda.synchronize()
            for span in self._device_spans:
                device_ms[span.name] = device_ms.get(span.name, 0.0) + float(
                    span.start.elapsed_time(span.end)
                )
        return dict(self._host_ms), device_ms

    @property
    def stage_order(self) -> list[str]:
        """Stage paths in the order they were first entered (for stable tables)."""
        return list(self._order)


class NullTimer(StageTimer):
    """A timer that records nothing: the default for callers that do not measure."""

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        yield


def null_timer() -> StageTimer:
    return NullTimer()
