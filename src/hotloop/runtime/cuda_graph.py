"""CUDA Graph capture of a runner: record its kernels once, replay them with one launch per call.

The runner's buffers are static (allocated once), which is what capture needs. Only torch runners
(eager, inductor) are captured; ONNX Runtime and TensorRT manage their own graphs.
"""

from __future__ import annotations

from typing import Any

import torch

from hotloop.compile.backends.base import Runner


class CapturedRunner:
    def __init__(self, runner: Runner, graph: Any) -> None:
        self.runner, self.graph = runner, graph

    def replay(self) -> None:
        self.graph.replay()


def capture(runner: Runner, warmup: int = 3) -> CapturedRunner | None:
    """Capture `runner._run` on CUDA; None when the runner is not a torch one or CUDA is absent."""
    if not torch.cuda.is_available() or runner.backend not in ("eager", "inductor"):
        return None
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):  # allocator and autotuning settle outside the capture
            runner._run()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        runner._run()
    original = runner._run
    runner._run = graph.replay  # type: ignore[method-assign]
    runner._uncaptured = original  # type: ignore[attr-defined]
    return CapturedRunner(runner, graph)
