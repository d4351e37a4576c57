"""`inductor`: `torch.compile` with freezing (weights folded as constants), whole graph, static shapes.

Variants: mode "default" or "max-autotune" (its GEMM templates pay on some CPUs; the planner measures).
A graph break is an error here (fullgraph), reported with dynamo's message naming the op.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from hotloop.compile.backends.base import Graph, PreparedFiles, Runner, module_dtype, op_errors
from hotloop.compile.backends.defaults import BackendDefaults
from hotloop.compile.backends.eager import TorchRunner

MODES = ("default", "max-autotune")


class InductorRunner(TorchRunner):
    backend = "inductor"

    def __init__(self, graph: Graph, precision: str, mode: str) -> None:
        import torch._inductor.config as inductor_config

        self.mode = mode
        compiled = torch.compile(graph.module, mode=mode, dynamic=False, fullgraph=True)
        # Freezing needs no_grad at compile time; the compile happens on the first call (in __init__).
        with inductor_config.patch(freezing=True), op_errors(self.backend, graph.name):
            super().__init__(graph, precision, compiled)

    def save(self, folder: Path) -> PreparedFiles:
        return PreparedFiles(options={"mode": self.mode})


class InductorBackend(BackendDefaults):
    name = "inductor"
    precisions = ("fp32", "bf16")

    def unavailable_reason(self) -> str | None:
        try:
            import torch._inductor  # noqa: F401
        except ImportError as exc:  # pragma: no cover - part of every torch wheel we support
            return f"torch._inductor cannot be imported: {exc}"
        return None

    def graph_dtype(self, precision: str) -> torch.dtype:
        return module_dtype(precision)

    def prepare(self, graph: Graph, precision: str, options: dict[str, Any]) -> Runner:
        mode = options.get("mode", "default")
        if mode not in MODES:
            from hotloop.errors import ConfigError

            raise ConfigError(f"inductor mode {mode!r} is not one of {', '.join(MODES)}")
        return InductorRunner(graph, precision, mode)

    def load(self, graph: Graph, precision: str, folder: Path, files: PreparedFiles) -> Runner:
        # Inductor code is recompiled at load (its cache makes the second load fast): no files to trust.
        return self.prepare(graph, precision, files.options)
