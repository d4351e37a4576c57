"""The planner's calibration capture as a memory term of its own: taken before the first static int8
candidate that needs it (checked against the memory left, measured), dropped after the last.

The capture (`calibration_inputs.capture_inputs`: every sub-engine's inputs on the calibration frames) is
shared by all static int8 candidates of an engine set. It used to be taken inside the first such
candidate, which was then charged for it (pi05:small: 475 MB measured against a 290 MB estimate, 325 MB
of it the capture, kept to the end of planning). Taken here it is checked against an upper bound before
it runs, its own growth is recorded (the compile JSON's `memory.calibration`), and it is freed once no
pending candidate of its engine set needs it, before the loop stage's larger candidates run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from hotloop.compile.backends import get_backend
from hotloop.compile.backends.quantize import STATIC

MIB = 2**20


def set_key(cand: Any, config: Any) -> tuple[Any, str] | None:
    """(graph dtype, variant) of the engine set whose capture `cand` calibrates on; None: it needs none."""
    if config.calibration is None or cand.precision not in STATIC:
        return None
    return get_backend(cand.backend).graph_dtype(cand.precision), cand.variant


def ensure_capture(
    cand: Any, source: Any, sets: Any, config: Any, log: Callable[[str], None]
) -> dict[str, Any] | str | None:
    """Capture the calibration inputs `cand` needs if not yet held. Returns the capture's measured memory
    (MiB figures), the reason it cannot fit (the candidate is then unavailable), or None (nothing to do)."""
    from hotloop.compile.calibration_inputs import capture_bound, capture_inputs, captured_bytes
    from hotloop.compile.memory_fit import MemoryNeed, headroom, refusal
    from hotloop.compile.peak_memory import PeakMeter

    key = set_key(cand, config)
    if key is None:
        return None
    engines = sets.get(*key)
    if id(engines) in sets.calibration_inputs:
        return None
    bound = capture_bound(engines, source, config.calibration)
    need = MemoryNeed(bound, f"the calibration capture, at most {bound / MIB:.0f} MiB")
    too_big = refusal(need, headroom(config.plan_memory_gb), config.plan_memory_gb)
    if too_big is not None:
        return too_big.replace("to prepare", "to capture its calibration inputs", 1)
    meter = PeakMeter.start(bound)
    t0 = time.perf_counter()
    captured = capture_inputs(source, engines, config.calibration)
    sets.calibration_inputs[id(engines)] = captured
    figures = meter.finish()
    figures["held_mb"] = round(captured_bytes(captured) / MIB, 1)
    figures["seconds"] = round(time.perf_counter() - t0, 2)
    log(
        f"    calibration inputs captured: {figures['held_mb']:.0f} MiB held (at most "
        f"{bound / MIB:.0f} MiB estimated), in {figures['seconds']:.1f} s"
    )
    return figures


def drop_unneeded(sets: Any, remaining: list[Any], config: Any, log: Callable[[str], None]) -> None:
    """Free the captures no candidate in `remaining` (still pending) calibrates on."""
    needed = {set_key(c, config) for c in remaining if c.status == "pending"} - {None}
    for key in sets.built_keys():
        engines = sets.get(*key)
        if key not in needed and sets.calibration_inputs.pop(id(engines), None) is not None:
            log("    calibration inputs freed: no static int8 candidate left needs them")
