"""The I/O an ONNX-file artifact's manifest records, checked against its own graph file before loading.

A policy artifact's entries are checked against the sub-engines its config builds
(`hotloop.runtime.engine.check_recorded_io`). An ONNX-file artifact has no such config: its manifest's
`input_shapes` are what the engine allocates and feeds. So an entry edited by hand, or copied from
another artifact, is compared with what the graph file itself declares (input names in order, ranks,
the fixed sizes, element types; output names) and with the input shapes the manifest's `config` states;
a mismatch is one CheckpointError naming the field, never a backend's message from the first run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hotloop.errors import CheckpointError, ConfigError

# Element type names of ONNX (`onnx_io`) and OpenVINO, as torch names them in a manifest.
_DTYPES = {
    "float": "float32",
    "double": "float64",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "int64": "int64",
    "int32": "int32",
    "int8": "int8",
    "uint8": "uint8",
    "bool": "bool",
    "f32": "float32",
    "f64": "float64",
    "f16": "float16",
    "bf16": "bfloat16",
    "i64": "int64",
    "i32": "int32",
    "i8": "int8",
    "u8": "uint8",
    "boolean": "bool",
}


def declared_io(graph_file: Path) -> tuple[list[tuple[str, list[int | None], str]], list[str]] | None:
    """([(input name, sizes with None where dynamic, dtype)], [output names]) a graph file declares:
    an .onnx file or an OpenVINO .xml; None for a file whose I/O cannot be read here (a TensorRT plan)."""
    if graph_file.suffix == ".onnx":
        from hotloop.compile.export import onnx_io

        inputs, outputs = onnx_io(graph_file)
        return [
            (n, [d if isinstance(d, int) and d > 0 else None for d in dims], _DTYPES.get(e, e))
            for n, dims, e in inputs
        ], outputs
    if graph_file.suffix == ".xml":
        from hotloop.compile.backends.openvino import _core

        model = _core().read_model(str(graph_file))
        found = []
        for port in model.inputs:
            shape = port.get_partial_shape()
            sizes = [d.get_length() if d.is_static else None for d in shape] if shape.rank.is_static else []
            kind = port.get_element_type().get_type_name()
            found.append((port.get_any_name(), sizes, _DTYPES.get(kind, kind)))
        return found, [port.get_any_name() for port in model.outputs]
    return None


def check_onnx_entry(where: Path, manifest: dict[str, Any], name: str, entry: Any, graph_file: Path) -> None:
    """CheckpointError naming the field when `entry`'s recorded I/O is not what its graph file declares,
    or its input shapes are not those the manifest's config states."""
    stated = manifest.get("config", {}).get("inputs") if isinstance(manifest.get("config"), dict) else None
    recorded = dict(zip(entry.input_names, entry.input_shapes, strict=True))
    if isinstance(stated, dict) and stated != recorded:
        raise CheckpointError(
            f"{where}: sub-engine {name!r} records inputs {_short(recorded)}, but the manifest's config states "
            f"{_short(stated)}; the manifest was edited: recompile the artifact"
        )
    try:
        declared = declared_io(graph_file)
    except (ConfigError, RuntimeError) as exc:  # a file that does not parse (its sha256 matched)
        raise CheckpointError(
            f"{where}: sub-engine {name!r}: its graph {graph_file.name} cannot be read "
            f"({str(exc).splitlines()[0][:160]}); recompile the artifact"
        ) from None
    if declared is None:
        return
    inputs, outputs = declared
    problems = []
    if [n for n, _, _ in inputs] != list(entry.input_names):
        problems.append(f"input_names {entry.input_names}, the graph takes {[n for n, _, _ in inputs]}")
    else:
        for (n, sizes, dtype), shape, rec_dtype in zip(
            inputs, entry.input_shapes, entry.input_dtypes, strict=True
        ):
            fits = len(sizes) == len(shape) and all(
                d is None or d == s for d, s in zip(sizes, shape, strict=True)
            )
            if not fits:
                shown = ["?" if d is None else d for d in sizes]
                problems.append(f"input_shapes {shape} for {n!r}, the graph takes {shown}")
            if dtype != rec_dtype:
                problems.append(f"input_dtypes {rec_dtype} for {n!r}, the graph takes {dtype}")
    if list(outputs) != list(entry.output_names):
        problems.append(f"output_names {entry.output_names}, the graph gives {list(outputs)}")
    if problems:
        raise CheckpointError(
            f"{where}: sub-engine {name!r} records {problems[0]} ({graph_file.name}); the manifest was "
            "edited or belongs to another model: recompile the artifact"
        )


def _short(value: Any) -> str:
    shown = str(value)
    return shown if len(shown) <= 120 else shown[:117] + "..."
