"""`hotloop doctor`: which backends work on this machine, and why the others do not."""

from __future__ import annotations

import functools
import importlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hotloop.measure.fingerprint import cpu_governor, cpu_model, temperatures_c


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    advice: str = ""


def _version(module: str) -> tuple[object | None, str]:
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # an import can fail in many ways (missing libs, ABI): report, don't crash
        return None, f"import {module} failed: {type(exc).__name__}: {exc}".splitlines()[0]
    return mod, str(getattr(mod, "__version__", "?"))


def _needs(
    module: str, name: str, advice: str = ""
) -> Callable[[Callable[..., Check]], Callable[..., Check]]:
    """The check `name` imports `module` first: where it cannot, the check fails there with the import's
    error and `advice`; else its body runs with the module and its version (then the check's arguments)."""

    def wrap(body: Callable[..., Check]) -> Callable[..., Check]:
        @functools.wraps(body)
        def check(*args: Any) -> Check:
            mod, version = _version(module)
            if mod is None:
                return Check(name, False, version, advice)
            return body(mod, version, *args)

        return check

    return wrap


@_needs("torch", "eager", "install torch (CPU: pip install torch==2.13.0)")
def check_eager(torch: Any, version: str) -> Check:
    return Check("eager", True, f"torch {version}")


@_needs("torch", "inductor", "install torch")
def check_inductor(torch: Any, version: str) -> Check:
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        return Check(
            "inductor", False, "no C compiler on PATH", "install gcc: inductor's CPU backend compiles C++"
        )
    return Check("inductor", True, f"torch {version}, C compiler {compiler}")


@_needs("onnxruntime", "onnxruntime", "pip install onnxruntime (or onnxruntime-gpu)")
def check_onnxruntime(ort: Any, version: str) -> Check:
    providers = ort.get_available_providers()
    return Check("onnxruntime", True, f"{version}, providers: {', '.join(providers)}")


@_needs("openvino", "openvino", "pip install openvino")
def check_openvino(ov: Any, version: str) -> Check:
    try:
        devices = ov.Core().available_devices
    except Exception as exc:
        return Check("openvino", False, f"{version}, Core() failed: {exc}")
    return Check(
        "openvino",
        True,
        f"{version}, devices: {', '.join(devices)}",
        "OpenVINO picks bf16 on CPUs with AMX/AVX512-BF16: pin INFERENCE_PRECISION_HINT=f32 for parity checks",
    )


@_needs("torch", "cuda")
def check_cuda(torch: Any, version: str) -> Check:
    if not torch.cuda.is_available():
        built = torch.version.cuda
        why = (
            "this torch is a CPU build"
            if built is None
            else f"torch built for CUDA {built}, but no GPU is visible"
        )
        return Check("cuda", False, why, "GPU paths (CUDA graphs, TensorRT) are skipped on this machine")
    name = torch.cuda.get_device_name(0)
    return Check("cuda", True, f"{name}, CUDA {torch.version.cuda}")


@_needs("tensorrt", "tensorrt", "TensorRT needs an NVIDIA GPU: pip install tensorrt there")
def check_tensorrt(trt: Any, version: str) -> Check:
    return Check("tensorrt", True, f"tensorrt {version}")


@_needs("mujoco", "mujoco", "pip install mujoco")
def check_mujoco(mujoco: Any, detail: str) -> Check:
    backend = os.environ.get("MUJOCO_GL", "egl")
    # Rendering is probed in a child process: a broken GL stack can abort the process that tries it.
    probe = (
        "import mujoco;m=mujoco.MjModel.from_xml_string('<mujoco><worldbody><geom size=\".1\"/></worldbody></mujoco>');"
        "r=mujoco.Renderer(m,16,16);r.update_scene(mujoco.MjData(m));print(r.render().shape)"
    )
    try:
        out = subprocess.run(
            [sys.executable, "-c", probe],
            env={**os.environ, "MUJOCO_GL": backend},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Check("mujoco", False, f"mujoco {detail}: rendering with MUJOCO_GL={backend} hung")
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return Check(
            "mujoco",
            False,
            f"mujoco {detail}: rendering with MUJOCO_GL={backend} failed: {last}",
            "install libegl1 (apt-get install libegl1 libgl1) or try MUJOCO_GL=osmesa",
        )
    return Check("mujoco", True, f"mujoco {detail}, headless rendering with MUJOCO_GL={backend}")


def check_threads() -> Check:
    torch, _ = _version("torch")
    affinity = sorted(os.sched_getaffinity(0))
    threads = torch.get_num_threads() if torch is not None else None  # type: ignore[attr-defined]
    env = {k: os.environ[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS") if k in os.environ}
    detail = f"{len(affinity)} usable CPUs {affinity}, torch threads {threads}, env {env or 'unset'}"
    load = os.getloadavg()[0]
    detail += f", load average {load:.2f}"
    advice = ""
    if threads is not None and threads > len(affinity):
        advice = f"torch uses {threads} threads on {len(affinity)} CPUs: pass --threads {len(affinity)}"
    elif load >= 0.5 and threads is not None and threads >= len(affinity):
        # OpenMP workers spin-wait: sharing every core with another busy process can cost 10-100x latency.
        advice = (
            f"other work is running (load {load:.2f}) and torch would use all {threads} CPUs: "
            "pass --threads 1 or --pin a free CPU, or stop the other job before timing"
        )
    return Check("threads", True, detail, advice)


def check_cpu() -> Check:
    governor = cpu_governor()
    temps = temperatures_c()
    detail = f"{cpu_model()}, governor {governor or 'unreadable'}"
    if temps:
        detail += f", max temperature {max(temps.values()):.0f} °C"
    advice = ""
    if governor == "powersave":
        advice = "CPU governor is powersave: set it to performance for stable latency (cpupower frequency-set -g performance)"
    elif governor is None:
        advice = (
            "the CPU governor is not readable (a VM or container): clocks are not under your control here"
        )
    return Check("cpu", True, detail, advice)


@_needs("torch", "matmul peaks", "install torch")
def check_matmul_peaks(torch: Any, version: str, cache_dir: Path | None = None) -> Check:
    """Measure this machine's fp32 / bf16 / int8 matmul peaks at the current thread count and cache them
    (keyed by the machine fingerprint) for the roofline of every bench."""
    from hotloop.measure.roofline import default_cache_dir, measure_peaks, save_peaks

    peaks = measure_peaks()
    where = cache_dir if cache_dir is not None else default_cache_dir()
    try:
        path = save_peaks(where, peaks)
        cached = f"cached in {path}"
    except OSError as exc:
        cached = f"not cached ({exc})"
    figures = ", ".join(
        f"{name} n/a" if value is None else f"{name} {value:.1f} ({peaks.sources.get(name, '?')})"
        for name, value in peaks.gflops.items()
    )
    fp32, bf16 = peaks.gflops.get("float32"), peaks.gflops.get("bfloat16")
    advice = ""
    if fp32 and bf16 and bf16 < fp32:
        advice = "bf16 matmuls are slower than fp32 here (no native bf16): plan fp32 on this CPU"
    if peaks.load_avg is not None and peaks.load_avg >= 0.5:
        advice = (
            f"measured under load (load average {peaks.load_avg:.1f}): the peaks are low; rerun "
            "hotloop doctor on a quiet machine. " + advice
        ).strip()
    return Check("matmul peaks", True, f"GFLOP/s at {peaks.threads} threads: {figures}; {cached}", advice)


CHECKS: tuple[Callable[[], Check], ...] = (
    check_eager,
    check_inductor,
    check_onnxruntime,
    check_openvino,
    check_cuda,
    check_tensorrt,
    check_mujoco,
    check_threads,
    check_cpu,
)


def run_checks(roofline_cache: Path | None = None) -> list[Check]:
    return [check() for check in CHECKS] + [check_matmul_peaks(roofline_cache)]


def checks_to_dict(checks: list[Check]) -> list[dict[str, object]]:
    return [asdict(c) for c in checks]
