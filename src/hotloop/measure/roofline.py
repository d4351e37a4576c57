"""Roofline for every bench: how far from this machine's matmul peak each stage runs.

Three parts:
- the analytic work of a stage (`StageWork`: FLOPs, bytes of weights read, precision), given by the
  target (`PolicyFamily.stage_work`; pi's in `hotloop.families.pi.roofline`, counting matmuls and attention: 2 FLOPs per multiply-add);
- this machine's measured matmul peak per precision (`measure_peaks`): square matmuls in PyTorch at the
  current thread count, best of several timed runs. `hotloop doctor` measures them once and caches them
  under hotloop's cache folder (`$HOTLOOP_CACHE_DIR`, else ~/.cache/hotloop)/roofline, keyed by the machine fingerprint (CPU model and flags, usable CPUs,
  threads, torch version), so a different machine or thread count never reads another's figures;
- `roofline(work, stage_p50_ms, peaks)`: per stage the achieved GFLOP/s and its share of the peak of the
  stage's precision.

fp32 and bf16 take the best of `torch.mm` and `F.linear` (they reach different kernels; without native
bf16 both are slow, and that is the point). int8 is measured with ONNX Runtime's MatMulInteger when it is installed (what a
quantized ONNX plan runs), else `torch._int_mm`, which on many CPUs is a slow reference kernel; the
source is recorded with the figures.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hotloop.io import atomic_write_json

PRECISIONS = ("float32", "bfloat16", "int8")
# Bump when what a peak measures changes, so old caches miss (3: int8 through ONNX Runtime, best of
# torch.mm and F.linear for fp32 / bf16).
PEAKS_SCHEMA = 3
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "int8": 1}


@dataclass(frozen=True)
class StageWork:
    """Analytic work of one stage per inference."""

    flops: float
    weight_bytes: float
    precision: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class MatmulPeaks:
    """Measured matmul throughput per precision, GFLOP/s (None where it could not be measured)."""

    gflops: dict[str, float | None]
    threads: int
    key: str
    sizes: dict[str, int]
    sources: dict[str, str] = field(default_factory=dict)
    load_avg: float | None = None  # 1-minute load average when measured: other work lowers the peak

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MatmulPeaks:
        return cls(
            gflops={k: (None if v is None else float(v)) for k, v in dict(data["gflops"]).items()},
            threads=int(data["threads"]),
            key=str(data["key"]),
            sizes={k: int(v) for k, v in dict(data.get("sizes", {})).items()},
            sources={k: str(v) for k, v in dict(data.get("sources", {})).items()},
            load_avg=None if data.get("load_avg") is None else float(data["load_avg"]),
        )


# ---- measuring the peak ----------------------------------------------------------------------------


def _ort_int8_matmul(n: int, threads: int) -> Any:
    """ONNX Runtime's MatMulInteger (u8 x s8 -> s32), the int8 kernel quantized ONNX models run on."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B"], ["Y"])],
        "int8_matmul",
        [
            helper.make_tensor_value_info("A", TensorProto.UINT8, [n, n]),
            helper.make_tensor_value_info("B", TensorProto.INT8, [n, n]),
        ],
        [helper.make_tensor_value_info("Y", TensorProto.INT32, [n, n])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {
        "A": rng.integers(0, 255, (n, n), dtype=np.uint8),
        "B": rng.integers(-128, 127, (n, n), dtype=np.int8),
    }
    return lambda: session.run(None, feeds)


def int8_source() -> str:
    """Where the int8 peak comes from: ONNX Runtime (with onnx) when installed, else PyTorch's `_int_mm`."""
    import importlib.util

    found = all(importlib.util.find_spec(m) is not None for m in ("onnx", "onnxruntime"))
    return "onnxruntime MatMulInteger" if found else "torch._int_mm"


def _matmul_fns(precision: str, n: int) -> dict[str, Any]:
    """The kernels that can run an n x n x n matmul at `precision`, by name.

    For fp32 and bf16 both `torch.mm` and `F.linear` are tried: they reach different kernels (without
    native bf16, measured here: `F.linear` bf16 2.0 GFLOP/s against `torch.mm` 0.3), and the models'
    matmuls are mostly linears.
    """
    import torch

    g = torch.Generator().manual_seed(0)
    if precision == "int8":
        if int8_source().startswith("onnxruntime"):
            return {int8_source(): _ort_int8_matmul(n, torch.get_num_threads())}
        a8 = torch.randint(-128, 127, (n, n), dtype=torch.int8, generator=g)
        b8 = torch.randint(-128, 127, (n, n), dtype=torch.int8, generator=g)
        return {"torch._int_mm": lambda: torch._int_mm(a8, b8)}
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[precision]
    a = torch.randn(n, n, generator=g).to(dtype)
    b = torch.randn(n, n, generator=g).to(dtype)
    out = torch.empty(n, n, dtype=dtype)
    return {
        "torch.mm": lambda: torch.mm(a, b, out=out),
        "F.linear": lambda: torch.nn.functional.linear(a, b),
    }


def _best_seconds(fn: Any, budget_s: float, min_runs: int = 3) -> float:
    best = float("inf")
    start = time.perf_counter()
    runs = 0
    while runs < min_runs or time.perf_counter() - start < budget_s:
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        runs += 1
    return best


def measure_matmul_peak(precision: str, budget_s: float = 0.4, max_n: int = 2048) -> tuple[float, int, str]:
    """(GFLOP/s, n, kernel): the best kernel's best time of an n x n x n matmul, n grown from 256 while
    one run stays under 50 ms."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    n = 256
    while True:
        fns = _matmul_fns(precision, n)
        seconds = {}
        for name, fn in fns.items():
            fn()  # first call: allocation, kernel selection
            seconds[name] = _best_seconds(fn, 0.0, min_runs=1)
        if min(seconds.values()) > 0.05 or n >= max_n:
            break
        n *= 2
    best = {name: _best_seconds(fn, budget_s / len(fns)) for name, fn in fns.items()}
    kernel = min(best, key=lambda k: best[k])
    return 2.0 * n**3 / best[kernel] / 1e9, n, kernel


def peak_key(threads: int) -> str:
    """What makes two peak measurements comparable: CPU model and flags, usable CPUs, threads, torch."""
    from hotloop.measure.fingerprint import cpu_model, package_versions

    flags = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    parts = {
        "schema": PEAKS_SCHEMA,
        "cpu_model": cpu_model(),
        "cpu_flags": hashlib.sha256(flags.encode()).hexdigest()[:16],
        "usable_cpus": len(os.sched_getaffinity(0)),
        "threads": threads,
        "torch": package_versions().get("torch"),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


def measure_peaks(precisions: tuple[str, ...] = PRECISIONS, budget_s: float = 0.4) -> MatmulPeaks:
    """Measure each precision's matmul peak at the current torch thread count."""
    import torch

    threads = torch.get_num_threads()
    gflops: dict[str, float | None] = {}
    sizes: dict[str, int] = {}
    sources: dict[str, str] = {}
    for precision in precisions:
        try:
            gflops[precision], sizes[precision], sources[precision] = measure_matmul_peak(precision, budget_s)
        except (RuntimeError, NotImplementedError, ImportError):  # e.g. no int8 kernel in this build
            gflops[precision] = None
    return MatmulPeaks(
        gflops=gflops,
        threads=threads,
        key=peak_key(threads),
        sizes=sizes,
        sources=sources,
        load_avg=os.getloadavg()[0],
    )


def default_cache_dir() -> Path:
    """`roofline` under hotloop's cache folder (`$HOTLOOP_CACHE_DIR`, else the XDG cache, else ~/.cache)."""
    from hotloop.io import cache_root

    return cache_root() / "roofline"


def load_peaks(cache_dir: Path, key: str) -> MatmulPeaks | None:
    path = cache_dir / f"peaks-{key}.json"
    from hotloop.io import read_json_file

    try:
        return MatmulPeaks.from_dict(read_json_file(path, limit=1 << 20))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # absent or unreadable: measure again rather than trust it


def save_peaks(cache_dir: Path, peaks: MatmulPeaks) -> Path:
    return atomic_write_json(cache_dir / f"peaks-{peaks.key}.json", peaks.to_dict())


def cached_peaks(cache_dir: Path | None = None, measure: bool = True) -> MatmulPeaks | None:
    """This machine's peaks at the current thread count: from the cache `hotloop doctor` writes, else
    measured now (not cached: only doctor, run deliberately on a quiet machine, writes the cache, so a
    bench on a busy machine never leaves a low peak behind)."""
    import torch

    cache_dir = cache_dir if cache_dir is not None else default_cache_dir()
    peaks = load_peaks(cache_dir, peak_key(torch.get_num_threads()))
    if peaks is None and measure:
        peaks = measure_peaks()
    return peaks


# ---- the roofline of a bench -------------------------------------------------------------------------


def roofline(
    work: Mapping[str, StageWork], stage_p50_ms: Mapping[str, float], peaks: MatmulPeaks | None
) -> dict[str, dict[str, Any]]:
    """Per stage: GFLOP, MB of weights read, achieved GFLOP/s at p50, the precision's peak and share of it."""
    rows: dict[str, dict[str, Any]] = {}
    for stage, w in work.items():
        ms = stage_p50_ms.get(stage)
        achieved = w.flops / (ms / 1e3) / 1e9 if ms else None
        peak = peaks.gflops.get(w.precision) if peaks is not None else None
        rows[stage] = {
            "gflop": w.flops / 1e9,
            "weight_mb": w.weight_bytes / 1e6,
            "precision": w.precision,
            "p50_ms": ms,
            "achieved_gflops": achieved,
            "peak_gflops": peak,
            "peak_share": achieved / peak if achieved is not None and peak else None,
        }
    return rows


# ---- building blocks of a family's analytic work (`PolicyFamily.stage_work`) --------------------------


def linear_flops(tokens: int, n_in: int, n_out: int) -> float:
    return 2.0 * tokens * n_in * n_out


def decoder_flops(
    tokens: int, keys: int, width: int, heads: int, kv_heads: int, head_dim: int, mlp: int
) -> float:
    proj = linear_flops(tokens, width, (heads + 2 * kv_heads) * head_dim) + linear_flops(
        tokens, heads * head_dim, width
    )
    attention = 2 * 2.0 * tokens * keys * heads * head_dim  # scores and weighted values
    return proj + attention + linear_flops(tokens, width, 2 * mlp) + linear_flops(tokens, mlp, width)
