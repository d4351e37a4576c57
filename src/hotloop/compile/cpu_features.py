"""The CPU features a plan needs, and the machine class an artifact was compiled for.

A backend/precision pair that relies on an instruction set (OpenVINO bf16 on AVX512-BF16 or AMX) records it
in the manifest; loading on a CPU without it is refused by name instead of silently running a slow path.
"""

from __future__ import annotations

import platform
from functools import lru_cache
from pathlib import Path

# The instruction-set flags that change which plan is fastest or even runnable (from /proc/cpuinfo).
RELEVANT_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512_bf16",
    "avx512_fp16",
    "avx512_vnni",
    "avx_vnni",
    "amx_bf16",
    "amx_int8",
    "amx_tile",
)
NATIVE_BF16 = ("avx512_bf16", "amx_bf16")


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """All flags the kernel reports for CPU 0 (empty where /proc/cpuinfo is absent)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def machine_class(flags: frozenset[str] | None = None) -> dict[str, object]:
    """What a plan's speed depends on: architecture and the relevant ISA flags (not the model string)."""
    have = cpu_flags() if flags is None else flags
    return {"arch": platform.machine(), "isa": sorted(f for f in RELEVANT_FLAGS if f in have)}


def has_native_bf16(flags: frozenset[str] | None = None) -> bool:
    have = cpu_flags() if flags is None else flags
    return any(f in have for f in NATIVE_BF16)


def missing_features(required: list[str], flags: frozenset[str] | None = None) -> list[str]:
    """`required` entries are flags or alternatives joined by '|' ("avx512_bf16|amx_bf16")."""
    have = cpu_flags() if flags is None else flags
    return [req for req in required if not any(alt in have for alt in req.split("|"))]
