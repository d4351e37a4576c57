"""The family's sub-engines on the parity fixture (LeRobot's own run, docs in its README): the step
engine x 100 and the unrolled loop engine reproduce `actions.npy` bitwise at one thread, under the
fixture's DDPM step noise; the family's noise layout carries noise.npy and step_noise.npy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from hotloop.families import get_family
from hotloop.families.reference import ReferenceRun


@pytest.fixture(scope="module")
def run(fixtures_dir: Path):  # type: ignore[no-untyped-def]
    from hotloop.models.diffusion import load_diffusion

    folder = fixtures_dir / "lerobot-diffusion-tiny"
    cfg, model = load_diffusion(folder)
    ref = ReferenceRun(folder)
    family = get_family("diffusion")
    obs, noise = family.reference_inputs(cfg, ref.arrays("inputs.npz"), ref)  # type: ignore[arg-type]
    return family, cfg, model, ref, obs, noise


def test_the_noise_layout_carries_the_fixtures_noise(run) -> None:  # type: ignore[no-untyped-def]
    family, cfg, _, ref, _, noise = run
    assert noise.shape == (2, 101, 16, 3)
    np.testing.assert_array_equal(noise[:, 0].numpy(), ref.array("noise.npy"))
    np.testing.assert_array_equal(noise[:, 1:].transpose(0, 1).numpy(), ref.array("step_noise.npy"))
    assert bool((noise[:, -1] == 0).all())  # the fixture draws nothing at t = 0 either


@pytest.mark.parametrize("loop", [False, True])
def test_step_and_loop_engines_reproduce_lerobot(run, loop: bool) -> None:  # type: ignore[no-untyped-def]
    family, cfg, model, ref, obs, noise = run
    shape = family.default_shape(cfg, 2)
    engines = family.build_subengines(model, shape, torch.float32)
    actions = family.reference_actions(
        cfg, family.eager_pipeline(cfg, shape, engines, loop=loop).sample(obs, noise)
    )
    # Bit for bit on the CPU that made the fixture; another CPU's convolution kernels round the last bits
    # differently (4.5e-7 on an AVX-512 Xeon).
    np.testing.assert_allclose(actions.numpy(), ref.array("actions.npy"), rtol=0, atol=1e-6)
    stages = ref.arrays("intermediates.npz")
    with torch.no_grad():
        gc = engines["encoder"].module(obs.images, obs.state)
    np.testing.assert_allclose(gc.numpy(), stages["global_cond"], rtol=0, atol=1e-6)


def test_a_bf16_engine_set_stays_close_and_keeps_the_scheduler_in_float32(run) -> None:  # type: ignore[no-untyped-def]
    family, cfg, model, ref, obs, noise = run
    shape = family.with_steps(family.default_shape(cfg, 2), 100)
    engines = family.build_subengines(model, shape, torch.bfloat16)
    step = engines["denoise_step"]
    assert all(x.dtype == torch.float32 for x in step.example_inputs)  # the U-Net alone runs bf16
    assert next(step.module.parameters()).dtype == torch.bfloat16
    got = family.reference_actions(cfg, family.eager_pipeline(cfg, shape, engines).sample(obs, noise))
    want = torch.from_numpy(ref.array("actions.npy"))
    cos = torch.nn.functional.cosine_similarity(got.flatten(), want.flatten(), dim=0)
    assert got.dtype == torch.float32 and float(cos) > 0.9
