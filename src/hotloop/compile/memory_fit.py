"""Whether a planner candidate can be prepared in the memory this machine has left, checked before it is.

A full-size model (pi05:full, 13.4 GB in fp32) fills a 24 GiB machine with its fp32 reference and three
compiled stages; one more candidate (OpenVINO's unrolled 10-step loop) then made the machine thrash
instead of failing. The planner now estimates each candidate's resident growth from the fp32 bytes of
its sub-engine's weights and refuses it, as "unavailable" with the figures, when the estimate exceeds
what the kernel reports available (MemAvailable). It is an estimate, not a limit:

- The factors are a backend's resident growth over preparing a sub-engine, per fp32 weight byte,
  measured on pi05:small (vision, prefix, step and loop engines, 2 threads) and on pi05:full: OpenVINO
  bf16 kept 0.78 over vision + prefix + step of pi05:full and 0.9-1.4 on pi05:small's larger engines.
  With its weights compressed to fp16, pi05:full's prefix candidate (9.3 GiB of fp32 weights) peaked
  about 1 GiB above its estimate: the reserve below absorbed it, with 0.44 GiB left at the low point;
  its unrolled loop grows with the number of steps (0.33 GiB for a 0.04 GiB step engine at 10 steps:
  the plugin repacks the shared weights once per use). Backends not measured get 1.5, a deliberately
  generous figure.
- A fixed overhead covers what does not scale with the weights (plugin state, buffers): 0.25 GiB, and
  1 GiB more is always kept free (`RESERVE`).
- Eager candidates share the model's weights (fp32) or its one bf16 copy, made once for every bf16
  candidate: that copy is counted for the candidate that makes it. Eager int8 (torchao) quantizes a
  copy of its sub-engine.
- Every candidate's measured peak growth is recorded beside its estimate (`hotloop.compile.peak_memory`:
  the compile JSON's `memory`, each candidate's `memory`, the manifest's `memory.planning`), so these
  factors can be checked against each run instead of trusted.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

GIB = 2**30
FIXED_OVERHEAD = GIB // 4
# Left free beyond every estimate: a margin for the estimates' error, the planner's own working memory
# and the page cache the kernel needs (the kernel kills a process that runs out; nothing swaps here).
RESERVE = GIB

# Resident growth per fp32 weight byte while preparing, by (backend, precision); see the module doc.
GROWTH: dict[tuple[str, str], float] = {
    ("eager", "fp32"): 0.0,
    ("openvino", "bf16"): 0.9,
    ("openvino", "fp32"): 1.3,
}
INT8_GROWTH = 0.8  # static int8 (any backend that takes it): calibration runs the fp32 graph first
# OpenVINO static int8 by hotloop's lean quantizer (`backends.lean_int8`): int8 rows made in place (0.25)
# and the plugin's repacked copy of them; measured 0.6 on four Gemma-2B layers.
LEAN_INT8_GROWTH = 0.6
DEFAULT_GROWTH = 1.5
EAGER_QUANT_GROWTH = 1.25  # not yet measured at full size: the planner now records it (`peak_memory`)
UNROLLED_BACKENDS = ("openvino",)  # backends whose compiled unrolled loop holds the weights once per step


@dataclass(frozen=True)
class MemoryNeed:
    bytes: int
    why: str  # how the estimate was made, for the candidate's reason


def weight_bytes(module: torch.nn.Module) -> int:
    """Bytes of the distinct storages behind a module's parameters and buffers (shared ones once)."""
    seen: dict[int, int] = {}
    for t in [*module.parameters(), *module.buffers()]:
        if t.device.type == "meta":
            continue
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def estimated_need(
    backend: str,
    precision: str,
    fp32_module: torch.nn.Module,
    loop_steps: int = 1,
    new_copy_bytes: int = 0,
    lean: bool = False,
) -> MemoryNeed:
    """Resident growth expected from preparing one candidate. `loop_steps`: the steps a loop engine
    unrolls (1 for any other sub-engine); `new_copy_bytes`: a model copy the candidate's engine set makes
    first (the bf16 copy, when no earlier candidate made it); `lean`: static int8 by the lean quantizer."""
    weights = weight_bytes(fp32_module)
    if precision in ("fp32", "bf16"):
        growth = GROWTH.get((backend, precision), DEFAULT_GROWTH)
    else:
        growth = LEAN_INT8_GROWTH if lean else INT8_GROWTH
    if backend == "eager":
        # fp32 / bf16 run the (copied) module itself; a quantized one is a deep copy torchao quantizes
        # (`quantize_torchao`): its fp32 copy first, then the int8 weights beside it.
        growth = 0.0 if precision in ("fp32", "bf16") else EAGER_QUANT_GROWTH
    copies = loop_steps if backend in UNROLLED_BACKENDS else 1
    need = int(weights * growth * copies) + new_copy_bytes + FIXED_OVERHEAD
    why = f"{weights / GIB:.2f} GiB of fp32 weights x {growth:g}"
    if copies > 1:
        why += f" x {copies} unrolled steps"
    if new_copy_bytes:
        why += f" + a {new_copy_bytes / GIB:.2f} GiB model copy"
    return MemoryNeed(need, why + f" + {FIXED_OVERHEAD / GIB:g} GiB")


def available_bytes() -> int:
    """What the kernel says can be allocated without swapping (MemAvailable); psutil elsewhere."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import psutil

    return int(psutil.virtual_memory().available)


def headroom(limit_gb: float | None = None) -> int:
    """What planning may still grow by: MemAvailable, and with `limit_gb` (`--plan-memory-gb`) at most
    that limit less this process's resident set."""
    available = available_bytes()
    if limit_gb is None:
        return available
    from hotloop.process_memory import resident_bytes

    return min(available, int(limit_gb * GIB) - resident_bytes())


def refusal(need: MemoryNeed, available: int, limit_gb: float | None = None) -> str | None:
    """The candidate's reason when it cannot fit in `available` (`headroom(limit_gb)`), else None."""
    if need.bytes + RESERVE <= available:
        return None
    under = f" under --plan-memory-gb {limit_gb:g}" if limit_gb is not None else ""
    return (
        f"needs about {need.bytes / GIB:.1f} GiB to prepare ({need.why}) and {RESERVE / GIB:g} GiB kept "
        f"free, {available / GIB:.1f} GiB available{under}: not tried (free memory, or leave it out with "
        "--backends/--precisions/--variants)"
    )


def release_module_weights(module: torch.nn.Module, keep: list[torch.nn.Module]) -> int:
    """Replace the parameters and buffers of `module` that no module in `keep` shares by meta tensors
    (same shape and dtype, no storage), in the submodules that own them, so every holder of those
    submodules (the model, other sub-engines' wrappers) sees the change. Returns the bytes freed."""
    kept = {
        t.untyped_storage().data_ptr() for m in keep for t in [*m.parameters(), *m.buffers()] if not t.is_meta
    }
    freed: dict[int, int] = {}

    def emptied(t: torch.Tensor | None) -> torch.Tensor | None:
        if t is None or t.is_meta or t.untyped_storage().data_ptr() in kept:
            return None
        freed[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return torch.empty_like(t, device="meta")

    for sub in module.modules():
        for name, param in list(sub._parameters.items()):
            if (empty := emptied(param)) is not None:
                sub._parameters[name] = torch.nn.Parameter(empty, param.requires_grad)  # type: ignore[union-attr]
        for name, buf in list(sub._buffers.items()):
            if (empty := emptied(buf)) is not None:
                sub._buffers[name] = empty
    return sum(freed.values())
