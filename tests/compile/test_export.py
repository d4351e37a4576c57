"""The fast sub-engines export as one graph each (no graph breaks) and the graph computes the same."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from hotloop.families.pi.engines import PiEngineShape
from hotloop.families.pi.recipes import fast_pi_subengines

TinyFactory = Callable[..., Any]


@pytest.mark.parametrize(
    ("name", "engine"), [("pi05:tiny", "prefix"), ("pi05:tiny", "denoise_loop"), ("pi0:tiny", "denoise_step")]
)
def test_subengine_exports_whole(tiny: TinyFactory, name: str, engine: str) -> None:
    cfg, model, _, _ = tiny(name)
    engines = fast_pi_subengines(model, PiEngineShape(1, 1, cfg.max_token_len, 2), torch.float32)
    e = engines[engine]
    program = torch.export.export(e.module, e.example_inputs, strict=False)
    got = program.module()(*e.example_inputs)
    want = e.module(*e.example_inputs)
    for g, w in zip(
        got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,), strict=True
    ):
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)
