"""Plan any ONNX model (a perception network, say): candidates judged by output agreement with ONNX
Runtime fp32, timed here, the fastest within tolerance kept. `--input NAME:SHAPE` fixes every input."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from hotloop.compile.backends import get_backend
from hotloop.compile.backends.base import OnnxGraph, Runner
from hotloop.compile.backends.quantize import CALIBRATION, STATIC
from hotloop.compile.export import onnx_io
from hotloop.compile.onnx_calibration import OnnxCalibration
from hotloop.compile.planner import (
    FINAL_BLOCK,
    Candidate,
    PlanConfig,
    candidate_specs,
    check_finite,
    interleaved,
    plan_summary,
    safe_prepare,
    slower_than_reference,
    stats_dict,
    time_candidate,
)
from hotloop.compile.search import cached_slower
from hotloop.compile.timing_cache import summary as timing_cache_summary
from hotloop.compile.validate import compare_outputs
from hotloop.errors import ConfigError

TORCH_BACKENDS = ("eager", "inductor")
_DTYPES = {"float": torch.float32, "int64": torch.int64, "int32": torch.int32, "bool": torch.bool}


def parse_inputs(specs: list[str]) -> dict[str, tuple[int, ...]]:
    """`NAME:1,3,224,224` (or `NAME:1x3x224x224`) -> {name: shape}; ConfigError naming --input."""
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        name, sep, dims = spec.rpartition(":")
        try:
            shape = tuple(int(d) for d in dims.replace("x", ",").split(",") if d.strip())
        except ValueError:
            shape = ()
        if not sep or not name or not shape or any(d < 1 for d in shape):
            raise ConfigError(f"--input {spec!r} is malformed; write NAME:SHAPE, e.g. images:1,3,224,224")
        if name in shapes:
            raise ConfigError(f"--input {name!r} is given twice")
        shapes[name] = shape
    return shapes


# Resident bytes a compile holds per byte of its inputs: the example inputs, each backend's input and
# output buffers and its activations. Issue 38 measured the peak at 19-21x the input bytes (16 let a
# compile through that then outgrew free memory); 24 is that, rounded up.
INPUT_MEMORY_FACTOR = 24


def check_inputs_fit(path: Path, shapes: dict[str, tuple[int, ...]], elems: dict[str, Any]) -> None:
    """Refuse `--input` shapes whose buffers alone cannot fit in this machine's free memory (a typo's
    extra zeros would otherwise grow until the kernel's OOM killer stops it, other processes at risk)."""
    import math

    from hotloop.targets import check_fits_memory

    need = 0
    for name, shape in shapes.items():
        dtype = _DTYPES.get(str(elems.get(name)), torch.float32)
        need += math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    shown = " ".join(f"{n}:{','.join(map(str, s))}" for n, s in shapes.items())
    check_fits_memory(
        need * INPUT_MEMORY_FACTOR, f"--input {shown} ({path.name})", "cpu", "check the --input sizes"
    )


def onnx_graph(path: Path, specs: list[str], seed: int = 0) -> OnnxGraph:
    """The file with every input fixed by --input; names and static dims must agree with the file."""
    inputs, outputs = onnx_io(path)
    shapes = parse_inputs(specs)
    names = [n for n, _, _ in inputs]
    missing = [n for n in names if n not in shapes]
    unknown = [n for n in shapes if n not in names]
    if missing or unknown:
        raise ConfigError(
            f"--input does not match {path.name}: "
            + "; ".join(
                p
                for p in (
                    f"missing {', '.join(missing)}" if missing else "",
                    f"unknown {', '.join(unknown)}" if unknown else "",
                )
                if p
            )
            + f" (the model takes {', '.join(f'{n}:{dims}' for n, dims, _ in inputs)})"
        )
    check_inputs_fit(path, shapes, {n: e for n, _, e in inputs})
    gen = torch.Generator().manual_seed(seed)
    examples = []
    for name, dims, elem in inputs:
        shape = shapes[name]
        if len(dims) != len(shape) or any(
            isinstance(d, int) and d > 0 and d != s for d, s in zip(dims, shape, strict=False)
        ):
            raise ConfigError(
                f"--input {name}:{','.join(map(str, shape))} does not match the model's shape {dims}"
            )
        dtype = _DTYPES.get(elem)
        if dtype is None:
            raise ConfigError(
                f"input {name!r} has element type {elem}, which hotloop compile does not feed yet"
            )
        if dtype.is_floating_point:
            examples.append(torch.randn(shape, generator=gen))
        else:
            examples.append(torch.zeros(shape, dtype=dtype))
    return OnnxGraph(path.stem, path, tuple(examples), tuple(names), tuple(outputs))


def _call_on_buffers(runner: Runner) -> Callable[[], Any]:
    return lambda: runner(*runner.inputs)


def _worst_agreement(
    cand: Candidate, runner: Runner, graph: OnnxGraph, checks: list[tuple[Any, ...]]
) -> list[Any] | None:
    """Per output the agreement on the check input where the candidate agreed least; None (and the
    candidate rejected) when any output is not finite. Each check input runs once."""
    worst: list[Any] | None = None
    for inputs, want in checks:
        got = runner(*inputs)
        if not check_finite(cand, got, graph.output_names):
            return None
        found = compare_outputs(graph.output_names, want, got)
        if worst is None or min(a.cosine for a in found) < min(a.cosine for a in worst):
            worst = found
    return worst


def plan_onnx(
    graph: OnnxGraph,
    config: PlanConfig,
    log: Callable[[str], None] = lambda s: None,
    calibration: OnnxCalibration | None = None,
) -> tuple[list[Candidate], Candidate, dict[str, Any]]:
    """`calibration` (real inputs): static int8 is calibrated on it and every candidate is judged on its
    held-out samples; without it, candidates are judged on the seeded example inputs."""
    ref = get_backend("onnxruntime").prepare(
        graph, "fp32", {"threads": config.threads} if config.threads else {}
    )
    inputs = calibration.held_out if calibration is not None else [graph.example_inputs]
    checks = [(x, tuple(t.clone() for t in ref(*x))) for x in inputs]
    # eager and inductor run a PyTorch module, which an ONNX file is not: they are left out, not "failed".
    candidates = [c for c in candidate_specs(config, (graph.name,)) if c.backend not in TORCH_BACKENDS]
    if not candidates:
        raise ConfigError(
            f"--backends {','.join(config.backends)}: eager and inductor run PyTorch modules; an ONNX file "
            "runs on onnxruntime, openvino or tensorrt: name one of those"
        )
    cache = config.timing_cache
    pending = [c for c in candidates if c.status == "pending"]
    if cache is not None:
        pending = _use_timing_cache(graph, pending, config, calibration, log)
    skipped_by_cache: list[str] = []
    for cand in pending:
        why = cached_slower(cand, candidates)
        if why is not None:
            cand.status, cand.reason = "skipped", why
            skipped_by_cache.append(cand.label)
            log(f"{cand.label}: skipped, {why}")
            continue
        log(f"{cand.label}")
        extra: dict[str, Any] = {}
        if cand.precision in STATIC:
            if calibration is None:
                cand.status, cand.reason = "unavailable", "static int8 needs --calibration DIR (inputs)"
                continue
            extra[CALIBRATION] = calibration.calibrate
        runner = safe_prepare(cand, graph, config.threads, extra)
        if runner is None:
            continue
        outputs = _worst_agreement(cand, runner, graph, checks)
        if outputs is None:
            continue
        cand.outputs = outputs
        worst = min(cand.outputs, key=lambda o: o.cosine)
        if not worst.cosine >= config.tolerance.cos:
            cand.status, cand.reason = (
                "rejected",
                f"output {worst.name!r} cos {worst.cosine:.6f} < {config.tolerance.cos:g}",
            )
            continue
        time_candidate(cand, _call_on_buffers(runner), config)
        cand.status, cand.runner = "accepted", runner
        if cache is not None and cand.cache_key is not None:
            cache.record(cand.cache_key, cand)
    ok = [c for c in candidates if c.status == "accepted"]
    if not ok:
        raise ConfigError(
            "no candidate reproduced the ONNX Runtime outputs within --tolerance; include onnxruntime in --backends"
        )
    best = min(ok, key=lambda c: c.latency.p99)  # type: ignore[union-attr]
    assert best.runner is not None
    samples = interleaved(
        {"reference": _as_engine_runs(ref, graph), "plan": _as_engine_runs(best.runner, graph)},
        config.warmup,
        config.iterations,
        block=FINAL_BLOCK,
    )
    ref_lat, plan_lat = stats_dict(samples["reference"]), stats_dict(samples["plan"])
    final_check: dict[str, Any] = {"planned": best.label, "planned_latency_ms": plan_lat, "written": "plan"}
    if slower_than_reference(ref_lat, plan_lat) and not _is_reference(best):
        # The search's figure did not hold against the reference: the faster one is the answer.
        log(
            f"the planned {best.label} ran slower than the reference (ONNX Runtime fp32) in the final "
            f"check, p50 {plan_lat['p50']:.2f} against {ref_lat['p50']:.2f} ms: writing the reference instead"
        )
        best = _reference_candidate(candidates, ref, graph, checks)
        plan_lat, final_check["written"] = ref_lat, "reference"
    cos_min = min(o.cosine for o in best.outputs)
    result = {
        "target": str(graph.path),
        "budget_ms": config.budget_ms,
        "tolerance": config.tolerance.spec,
        "candidates": [c.to_dict() for c in candidates],
        "plan": plan_summary({graph.name: best}),
        "reference_latency_ms": ref_lat,
        "plan_latency_ms": plan_lat,
        "speedup_p50": ref_lat["p50"] / plan_lat["p50"],
        "speedup_p99": ref_lat["p99"] / plan_lat["p99"],
        "action_cos_min": cos_min,  # for an ONNX model: the worst output's cosine
        "budget_met": None if config.budget_ms is None else plan_lat["p99"] <= config.budget_ms,
        "iterations": config.iterations,
        "checked_on": f"{len(checks)} held-out calibration samples"
        if calibration
        else "seeded random inputs",
        "calibration": calibration.manifest_entry() if calibration is not None else None,
        "timing_cache": None if cache is None else timing_cache_summary(cache, candidates, skipped_by_cache),
        "final_check": final_check,
    }
    return candidates, best, result


def _as_engine_runs(runner: Runner, graph: OnnxGraph) -> Callable[[], Any]:
    """One call as the written artifact's engine makes it (`Runner.run_from`: the inputs copied in by
    numpy, then the run), so the final check times what the artifact runs."""
    if not runner.host_buffers:
        return _call_on_buffers(runner)
    arrays = [x.detach().numpy().copy() for x in graph.example_inputs]
    return lambda: runner.run_from(arrays)


def _is_reference(cand: Candidate) -> bool:
    return cand.backend == "onnxruntime" and cand.precision == "fp32" and not cand.options


def _reference_candidate(
    candidates: list[Candidate], ref: Runner, graph: OnnxGraph, checks: list[tuple[Any, ...]]
) -> Candidate:
    """The reference as the plan: the onnxruntime fp32 candidate of the search when there is one, with
    the reference's runner (the one the final check timed); else a candidate made for it."""
    cand = next((c for c in candidates if _is_reference(c) and c.status == "accepted"), None)
    if cand is None:
        cand = Candidate(graph.name, graph.name, "onnxruntime", "fp32", status="accepted")
        candidates.append(cand)
        cand.outputs = _worst_agreement(cand, ref, graph, checks) or []
    cand.reason = "the final check timed the planned candidate slower: the reference is written"
    cand.runner = ref
    return cand


def _use_timing_cache(
    graph: OnnxGraph,
    pending: list[Candidate],
    config: PlanConfig,
    calibration: OnnxCalibration | None,
    log: Callable[[str], None],
) -> list[Candidate]:
    """`pending` keyed in the timing cache; in a fast search, those with a trusted timing first (fastest
    cached p99 first), the others after in their own order."""
    from hotloop.compile.timing_cache import candidate_key, onnx_digest

    cache = config.timing_cache
    digest = onnx_digest(graph)
    for cand in pending:
        cand.cache_key = candidate_key(digest, cand, calibration, {})
        if config.search == "fast":
            cand.cached = cache.lookup(cand.cache_key)
    held = sum(c.cache_key in cache.entries for c in pending)
    log(f"timing cache: {held} of {len(pending)} candidates timed here before ({cache.path})")
    cached = sorted((c for c in pending if c.cached is not None), key=lambda c: c.cached.p99)
    return cached + [c for c in pending if c.cached is None]


def write_onnx_artifact(
    graph: OnnxGraph, best: Candidate, result: dict[str, Any], out: Path, config: PlanConfig
) -> Path:
    from hotloop.compile.artifact import ArtifactWriter, base_manifest, entry_for, planned_fields, sha256_file

    writer = ArtifactWriter(out, overwrite=config.overwrite)
    try:
        assert best.runner is not None
        t0 = time.perf_counter()
        folder = writer.tmp / graph.name
        prepared = best.runner.save(folder)
        if not prepared.files:  # a backend that keeps no file of its own runs the source file
            shutil.copyfile(graph.path, folder / "model.onnx")
            prepared.files.append("model.onnx")
        entry = entry_for(
            graph.name,
            best.runner,
            [f"{graph.name}/{f}" for f in prepared.files],
            {**best.options, **prepared.options},
            get_backend(best.backend).required_features(best.precision, {**best.options, **prepared.options}),
        )
        manifest = base_manifest(
            kind="onnx",
            target=str(graph.path),
            family="onnx",
            config={
                "inputs": {
                    n: list(x.shape) for n, x in zip(graph.input_names, graph.example_inputs, strict=True)
                }
            },
            source_weights_sha256=sha256_file(graph.path),
            sub_engines=[entry],
            **planned_fields(config, result),
            compile_s={graph.name: best.compile_s, "save": round(time.perf_counter() - t0, 3)},
            calibration=result.get("calibration"),
        )
        return writer.commit(manifest)
    except BaseException:
        writer.abort()
        raise
