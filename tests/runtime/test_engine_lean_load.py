"""An artifact whose every sub-engine runs from its own files (OpenVINO here) does not keep the torch
weights once loaded: the model is left on meta, and the engine and its policy still reproduce the
reference's actions."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("openvino")


# Two flow-matching steps: what is checked does not depend on the count, and OpenVINO unrolls the loop
# engine once per step.
STEPS = 2


@pytest.fixture
def ov_art(tmp_path: Path, compile_tiny) -> Path:
    out = tmp_path / "art"
    res = compile_tiny(out, "openvino", "fp32", "--quiet", "--steps", str(STEPS))
    assert res.exit_code == 0, res.output
    return out


def test_all_file_backed_artifact_drops_the_torch_weights_and_keeps_its_actions(ov_art: Path) -> None:
    import hotloop
    from hotloop.compile.sources import policy_source
    from hotloop.compile.validate import compare_actions
    from hotloop.families.pi.sampling import sample_actions
    from hotloop.runtime.policy import engine_policy
    from hotloop.targets import TargetOptions

    engine = hotloop.Engine.load(ov_art, threads=1)
    assert {r.backend for r in engine.runners.values()} == {"openvino"}
    assert all(p.is_meta for p in engine.model.parameters())
    src = policy_source("pi05:tiny", TargetOptions(num_steps=STEPS))
    assert engine.shape.num_steps == STEPS
    want = sample_actions(src.model, src.obs, noise=src.noise)
    assert compare_actions(want, engine.infer(src.obs, src.noise)).cosine >= 0.99999
    policy = engine_policy(engine)
    images = src.obs.images[0].permute(0, 2, 3, 1).numpy() * 0.5 + 0.5  # (views, H, W, 3) in [0, 1]
    obs = {"images": images, "state": src.obs.state[0, :4].numpy()}
    actions = policy.infer(obs)["actions"]
    assert actions.shape[0] >= 1 and bool((abs(actions) < 1e6).all())


def test_an_artifact_with_a_torch_runner_keeps_its_weights(tmp_path: Path, compile_tiny) -> None:
    import hotloop

    out = tmp_path / "art"
    res = compile_tiny(out, "eager", "fp32", "--quiet")
    assert res.exit_code == 0, res.output
    engine = hotloop.Engine.load(out, threads=1)
    assert not any(p.is_meta for p in engine.model.parameters())
