"""The backend protocol: prepare a graph for fixed example inputs and a precision -> a `Runner`.

A `Graph` is anything with `name`, `module` (a torch module, or None for an ONNX file), `example_inputs`,
`input_names`, `output_names` (the compile-fast `SubEngine` is one; `OnnxGraph` wraps a file). A runner owns
its input and output buffers, allocated once from the example inputs: calling it copies (and casts) the
arguments into the input buffers, runs, and returns the output buffers, which the next call overwrites.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor

from hotloop.errors import HotloopError

PRECISIONS = ("fp32", "bf16")


class BackendError(HotloopError):
    """A backend cannot compile or run a graph; the message names the backend, the graph and the op."""


class BackendCrash(BackendError):
    """A backend killed a probe process compiling or running a graph (a signal, or no end in time:
    `hotloop.compile.crash_probe`)."""


class Graph(Protocol):
    name: str
    module: Any  # torch.nn.Module, or None when the graph is an ONNX file
    example_inputs: tuple[Tensor, ...]
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]


@dataclass
class OnnxGraph:
    """An ONNX file as a graph with fixed input shapes (the `hotloop compile model.onnx` path)."""

    name: str
    path: Path
    example_inputs: tuple[Tensor, ...]
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    module: Any = None


@dataclass
class PreparedFiles:
    """Files a runner wrote into an artifact folder (relative names) and the options to load them."""

    files: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)


class Runner:
    """A prepared graph. Subclasses implement `_run()` reading `self.inputs` and filling `self.outputs`."""

    backend: str = ""

    def __init__(
        self, graph: Graph, precision: str, inputs: Sequence[Tensor], outputs: Sequence[Tensor]
    ) -> None:
        self.name = graph.name
        self.precision = precision
        self.input_names = tuple(graph.input_names)
        self.output_names = tuple(graph.output_names)
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)

    def __call__(self, *args: Tensor) -> tuple[Tensor, ...]:
        if len(args) != len(self.inputs):
            raise BackendError(
                f"{self.backend} runner {self.name!r} takes {len(self.inputs)} inputs "
                f"({', '.join(self.input_names)}), got {len(args)}"
            )
        for buf, arg in zip(self.inputs, args, strict=True):
            if arg is not buf:
                buf.copy_(arg)  # casts, e.g. an fp32 producer feeding a bf16 consumer
        self._run()
        return self.outputs

    def _run(self) -> None:
        raise NotImplementedError

    def run_from(self, arrays: Sequence[Any]) -> tuple[Tensor, ...]:
        """Copy host arrays (numpy, of the buffers' shapes) into the input buffers and run: how an ONNX
        artifact's engine feeds its runner, and how compile's final check times it. The copy is numpy's,
        on the calling thread: a torch copy of a large input opens a parallel region whose OpenMP workers
        then spin, competing with the backend's own thread pool (OpenVINO was seen several times slower
        right after a torch copy on 2 shared cores). CPU buffers only (`host_buffers`)."""
        import numpy as np

        for buf, arr in zip(self.inputs, arrays, strict=True):
            np.copyto(buf.numpy(), arr, casting="same_kind")
        self._run()
        return self.outputs

    @property
    def host_buffers(self) -> bool:
        """Whether every input buffer lives in host memory with a numpy dtype (`run_from` can feed it)."""
        return all(x.device.type == "cpu" and x.dtype != torch.bfloat16 for x in self.inputs)

    def bind_input(self, index: int, tensor: Tensor) -> bool:
        """Read input `index` straight from `tensor` (another runner's output buffer) instead of copying.

        Only when dtype, shape and device match and it is contiguous; returns whether it was bound. This
        is what keeps the prefix's KV cache from being copied into the denoise engine at every step.
        """
        buf = self.inputs[index]
        if (tensor.dtype, tensor.shape, tensor.device) != (buf.dtype, buf.shape, buf.device):
            return False
        if not tensor.is_contiguous():
            return False
        self.inputs = (*self.inputs[:index], tensor, *self.inputs[index + 1 :])
        self._rebind()
        return True

    def _rebind(self) -> None:
        """Backends that hold pointers to the input buffers re-read them here."""

    def save(self, folder: Path) -> PreparedFiles:
        """Write what loading needs besides the source weights (graphs, IR) into `folder`."""
        return PreparedFiles()

    def profile(self, iterations: int) -> list[tuple[str, float]]:
        """(operator kind, total ms over `iterations` runs), from the backend's own profiler."""
        raise BackendError(f"backend {self.backend} has no profiler")


def output_buffers(outputs: Any) -> tuple[Tensor, ...]:
    """Fresh, contiguous buffers shaped like one reference call's outputs (a tensor or a tuple)."""
    outs = outputs if isinstance(outputs, tuple | list) else (outputs,)
    return tuple(torch.empty_like(o, memory_format=torch.contiguous_format) for o in outs)


def input_buffers(
    example_inputs: Sequence[Tensor], float_dtype: torch.dtype | None = None
) -> tuple[Tensor, ...]:
    """Contiguous copies of the example inputs; floating ones cast to `float_dtype` when given."""
    bufs = []
    for x in example_inputs:
        dtype = float_dtype if float_dtype is not None and x.is_floating_point() else x.dtype
        bufs.append(x.detach().to(dtype=dtype, memory_format=torch.contiguous_format).clone())
    return tuple(bufs)


def module_dtype(precision: str) -> torch.dtype:
    return {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]


@contextlib.contextmanager
def op_errors(backend: str, graph: str) -> Iterator[None]:
    """Turn a backend's own exception into a BackendError that keeps its message (which names the op)."""
    try:
        yield
    except BackendError:
        raise
    except Exception as exc:  # noqa: BLE001 - every backend raises its own types
        first = str(exc).strip().splitlines()
        detail = " | ".join(line.strip() for line in first[:6] if line.strip())
        raise BackendError(
            f"backend {backend} cannot run graph {graph!r}: {type(exc).__name__}: {detail}"
        ) from exc


class Backend(Protocol):
    name: str
    precisions: tuple[str, ...]

    def unavailable_reason(self) -> str | None:
        """None when usable here; otherwise why not (a package missing, no GPU...)."""
        ...

    def precision_reason(self, precision: str) -> str | None:
        """None when `precision` is worth trying here; otherwise why not."""
        ...

    def graph_dtype(self, precision: str) -> torch.dtype:
        """The dtype the sub-engine is built in for `precision` (bf16 eager needs a bf16 module; OpenVINO
        bf16 takes the f32 graph and a precision hint)."""
        ...

    def required_features(self, precision: str, options: dict[str, Any] | None = None) -> list[str]:
        """CPU flags (alternatives joined by '|') a plan using this precision (and these saved options)
        needs at load time."""
        ...

    def prepare(self, graph: Graph, precision: str, options: dict[str, Any]) -> Runner: ...

    def load(self, graph: Graph, precision: str, folder: Path, files: PreparedFiles) -> Runner: ...
