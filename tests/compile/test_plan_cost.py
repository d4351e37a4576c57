"""What the planner does once instead of per candidate: OpenVINO's conversion of a sub-engine (shared by
its precisions) and the fp32 reference outputs (shared by every candidate of a sub-engine)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from hotloop.compile.backends import get_backend
from hotloop.compile.plan import EngineSets
from hotloop.families import get_family
from hotloop.families.pi.engines import PiEngineShape, build_pi_subengines

TinyFactory = Callable[..., Any]


def test_openvino_converts_a_subengine_once(tiny: TinyFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = get_backend("openvino")
    if backend.unavailable_reason():
        pytest.skip(backend.unavailable_reason())
    import openvino as ov

    cfg, model, _, _ = tiny("pi05:tiny", batch=1)
    graph = build_pi_subengines(model, PiEngineShape.of(cfg), torch.float32)["vision"]
    first = backend.prepare(graph, "fp32", {"threads": 1})
    want = [y.clone() for y in first(*graph.example_inputs)]
    assert "openvino" in graph.conversions

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("converted again")

    monkeypatch.setattr(ov, "convert_model", refuse)
    second = backend.prepare(graph, "fp32", {"threads": 1})  # from the cached conversion
    for a, b in zip(want, second(*graph.example_inputs), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_reference_outputs_are_computed_once_per_subengine_and_row(tiny: TinyFactory) -> None:
    cfg, model, _, _ = tiny("pi05:tiny", batch=1)
    sets = EngineSets(get_family("pi"), model, PiEngineShape.of(cfg))
    ref = sets.get(torch.float32)["prefix"]
    inputs = list(ref.example_inputs)
    first = sets.reference_outputs("prefix", 0, inputs)
    assert sets.reference_outputs("prefix", 0, inputs) is first
    with torch.no_grad():
        again = ref.module(*inputs)
    for a, b in zip(first, again, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
