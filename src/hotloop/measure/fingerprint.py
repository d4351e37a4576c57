"""Machine fingerprint recorded with every result (R1.2): which machine, clocks, heat, versions.

Everything is read best-effort from /proc and /sys; a value that cannot be read is None, never guessed.
"""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import hotloop

_VERSIONED_PACKAGES = ("torch", "numpy", "onnxruntime", "openvino", "mujoco")


def _read(path: str | Path) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def cpu_model() -> str | None:
    text = _read("/proc/cpuinfo")
    if text:
        for line in text.splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or None


def cpu_flags() -> list[str] | None:
    """The instruction-set flags the kernel reports for the first CPU (x86 `flags`, Arm `Features`): two
    machines with one model string can still differ here (a VM that hides AVX-512), and kernels follow."""
    text = _read("/proc/cpuinfo")
    if text:
        for line in text.splitlines():
            if line.startswith(("flags", "Features")):
                return sorted(line.split(":", 1)[1].split())
    return None


def cpu_governor() -> str | None:
    return _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")


def cpu_freq_mhz() -> list[float] | None:
    """Current frequency of each CPU this process may run on."""
    freqs = []
    for cpu in sorted(os.sched_getaffinity(0)):
        raw = _read(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq")
        if raw is not None and raw.isdigit():
            freqs.append(int(raw) / 1000.0)
    if freqs:
        return freqs
    text = _read("/proc/cpuinfo")  # virtual machines often expose only this
    if text:
        freqs = [float(line.split(":")[1]) for line in text.splitlines() if line.startswith("cpu MHz")]
    return freqs or None


def temperatures_c() -> dict[str, float] | None:
    temps: dict[str, float] = {}
    for zone in sorted(Path("/sys/class/thermal").glob("thermal_zone*")):
        raw = _read(zone / "temp")
        kind = _read(zone / "type") or zone.name
        if raw is not None and raw.lstrip("-").isdigit():
            temps[f"{zone.name}:{kind}"] = int(raw) / 1000.0
    return temps or None


def package_versions(names: tuple[str, ...] = _VERSIONED_PACKAGES) -> dict[str, str | None]:
    """Each installed distribution's version; None for one not installed."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_commit() -> str | None:
    here = Path(hotloop.__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and commit else None


def torch_threads() -> int | None:
    import sys

    torch = sys.modules.get("torch")  # do not import torch just to ask
    return int(torch.get_num_threads()) if torch is not None else None


def cuda_device() -> str | None:
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return str(torch.cuda.get_device_name(0))
    return None


def machine_fingerprint(threads: int | None = None) -> dict[str, Any]:
    """The environment a measurement was taken in; `threads` is what the harness set, if anything."""
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_flags": cpu_flags(),
        "threads": threads if threads is not None else torch_threads(),
        "affinity": sorted(os.sched_getaffinity(0)),
        "governor": cpu_governor(),
        "cpu_freq_mhz": cpu_freq_mhz(),
        "temperature_c": temperatures_c(),
        # Other work on the same cores is the commonest source of tail latency on shared machines.
        "load_avg": list(os.getloadavg()),
        "cuda_device": cuda_device(),
        "versions": {"hotloop": hotloop.__version__, **package_versions()},
        "git_commit": git_commit(),
    }
