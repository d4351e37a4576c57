"""DDPM / DDIM schedulers: diffusers' schedules and steps, the table form, refusals (no fixtures needed)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from hotloop.errors import ConfigError
from hotloop.models.noise_schedulers import (
    BETA_SCHEDULES,
    DDIMScheduler,
    DDPMScheduler,
    make_scheduler,
    table_row,
    table_step,
)

SHAPE = (2, 8, 3)


def _sched(kind: str, **kw: object) -> DDPMScheduler | DDIMScheduler:
    args: dict[str, object] = dict(
        num_train_timesteps=100,
        beta_start=1e-4,
        beta_end=0.02,
        beta_schedule="squaredcos_cap_v2",
        clip_sample=True,
        clip_sample_range=1.0,
        prediction_type="epsilon",
    )
    args.update(kw)
    return make_scheduler(kind, **args)  # type: ignore[arg-type]


def test_beta_schedules_follow_their_formulas() -> None:
    n = 50
    lin = _sched("DDPM", num_train_timesteps=n, beta_schedule="linear")
    assert torch.equal(lin.betas, torch.linspace(1e-4, 0.02, n))
    scaled = _sched("DDIM", num_train_timesteps=n, beta_schedule="scaled_linear")
    ref = np.linspace(1e-4**0.5, 0.02**0.5, n) ** 2
    assert np.abs(scaled.betas.numpy() - ref).max() < 1e-8
    cos = _sched("DDPM", num_train_timesteps=n)

    def alpha_bar(t: float) -> float:
        return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2

    ref_acp = np.array([alpha_bar((i + 1) / n) / alpha_bar(0) for i in range(n)])  # telescoping product
    assert np.abs(cos.alphas_cumprod.numpy() - ref_acp).max() < 1e-5
    assert cos.alphas_cumprod.dtype == torch.float32
    sig = _sched("DDPM", num_train_timesteps=n, beta_schedule="sigmoid")
    ref_sig = 1 / (1 + np.exp(-np.linspace(-6, 6, n))) * (0.02 - 1e-4) + 1e-4
    assert np.abs(sig.betas.numpy() - ref_sig).max() < 1e-8
    lap = _sched("DDPM", num_train_timesteps=n, beta_schedule="laplace")
    assert bool((lap.betas > 0).all()) and bool((lap.betas <= 0.999).all())


def test_leading_timesteps_and_previous_steps() -> None:
    ddpm = _sched("DDPM")
    assert ddpm.set_timesteps(100).tolist() == list(range(99, -1, -1))
    assert ddpm.set_timesteps(10).tolist() == list(range(90, -1, -10))
    assert ddpm.previous_timestep(90) == 80 and ddpm.previous_timestep(0) == -1
    ts = ddpm.set_timesteps(30)  # 100 // 30 = 3: leading spacing stops at 87
    assert ts.dtype == torch.int64 and ts[0] == 87 and ts[-1] == 0 and len(ts) == 30
    ddim = _sched("DDIM")
    ddim.set_timesteps(10)
    assert ddim.previous_timestep(90) == 80 and ddim.previous_timestep(0) == -10
    for bad in (0, 101):
        with pytest.raises(ConfigError, match="'num_inference_steps' is"):
            ddim.set_timesteps(bad)


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("kind", "PNDM", "'noise_scheduler_type' is 'PNDM'"),
        ("beta_schedule", "cosine", "'beta_schedule' is 'cosine'"),
        ("prediction_type", "flow", "'prediction_type' is 'flow'"),
    ],
)
def test_unknown_settings_are_refused_by_name(field: str, value: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        if field == "kind":
            _sched(value)
        else:
            _sched("DDPM", **{field: value})


def test_ddim_refuses_the_schedules_only_ddpm_has() -> None:
    assert "sigmoid" in BETA_SCHEDULES["DDPM"]
    with pytest.raises(ConfigError, match="'beta_schedule' is 'sigmoid'.*DDIMScheduler"):
        _sched("DDIM", beta_schedule="sigmoid")


def _inputs(seed: int, steps: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    # Model outputs of magnitude ~3 so that x0 leaves [-1, 1] and clipping is exercised.
    return (
        torch.randn(steps, *SHAPE, generator=g) * 3,
        torch.randn(steps, *SHAPE, generator=g),
        torch.randn(steps, *SHAPE, generator=g),
    )


@pytest.mark.parametrize("kind", ["DDPM", "DDIM"])
@pytest.mark.parametrize("prediction", ["epsilon", "sample", "v_prediction"])
@pytest.mark.parametrize("clip", [True, False])
@pytest.mark.parametrize("schedule,steps", [("squaredcos_cap_v2", 100), ("linear", 10), ("scaled_linear", 7)])
def test_table_step_equals_step_bitwise(
    kind: str, prediction: str, clip: bool, schedule: str, steps: int
) -> None:
    sched = _sched(
        kind, prediction_type=prediction, clip_sample=clip, clip_sample_range=0.7, beta_schedule=schedule
    )
    table = sched.step_table(steps)
    timesteps = sched.set_timesteps(steps)
    assert torch.equal(table["timestep"], timesteps)
    assert all(v.dtype == torch.float32 and v.shape == (steps,) for k, v in table.items() if k != "timestep")
    outputs, samples, noise = _inputs(steps, steps)
    clipped = 0
    for k, t in enumerate(timesteps):
        ref = sched.step_output(outputs[k], t, samples[k], noise[k])
        got = table_step(table_row(table, k), outputs[k], samples[k], noise[k])
        assert torch.equal(got, ref.prev_sample), (
            f"{kind}/{prediction}/clip={clip} step {k}: {(got - ref.prev_sample).abs().max()}"
        )
        clipped += int((ref.pred_original_sample.abs() == 0.7).sum())
    assert (clipped > 0) == clip


def test_ddpm_step_is_the_posterior_of_ddpm_paper() -> None:
    """Formula (7) of Ho et al. in float64, independent of diffusers' expression order."""
    sched = _sched("DDPM", clip_sample=False)
    ts = sched.set_timesteps(100)
    acp = sched.alphas_cumprod.double()
    outputs, samples, noise = _inputs(0, 100)
    for k, t in enumerate(ts.tolist()):
        a, a_prev = acp[t], (acp[t - 1] if t > 0 else torch.tensor(1.0, dtype=torch.float64))
        beta = 1 - a / a_prev
        x, eps = samples[k].double(), outputs[k].double()
        x0 = (x - (1 - a).sqrt() * eps) / a.sqrt()
        mean = a_prev.sqrt() * beta / (1 - a) * x0 + (1 - beta).sqrt() * (1 - a_prev) / (1 - a) * x
        var = (1 - a_prev) / (1 - a) * beta
        ref = mean + (var.sqrt() * noise[k].double() if t > 0 else 0)
        got = sched.step(outputs[k], t, samples[k], noise[k])
        assert (got.double() - ref).abs().max() < 2e-4 * max(1.0, float(ref.abs().max())), f"t={t}"


def test_ddpm_needs_noise_for_t_above_zero_only() -> None:
    sched = _sched("DDPM")
    sched.set_timesteps(100)
    x = torch.ones(SHAPE)
    with pytest.raises(ValueError, match="variance_noise"):
        sched.step(x, 5, x)
    assert torch.isfinite(sched.step(x, 0, x)).all()
    table = sched.step_table(100)
    assert table["noise_std"][-1] == 0 and bool((table["noise_std"][:-1] > 0).all())
    with pytest.raises(ValueError, match="variance_noise"):
        table_step(table_row(table, 0), x, x)


def test_ddim_with_all_steps_differs_from_ddpm_but_eta_one_is_ddpm() -> None:
    """DDIM eta 0 is deterministic and takes another path than DDPM; eta 1 is DDPM (same sigma, same z)."""
    ddpm = _sched("DDPM", clip_sample=False)
    ddim0 = _sched("DDIM", clip_sample=False)
    ddim1 = DDIMScheduler(100, 1e-4, 0.02, "squaredcos_cap_v2", False, 1.0, "epsilon", eta=1.0)
    outputs, samples, noise = _inputs(3, 100)
    ts = ddpm.set_timesteps(100)
    for s in (ddim0, ddim1):
        assert torch.equal(s.set_timesteps(100), ts)
    worst0 = worst1 = 0.0
    for k, t in enumerate(ts):
        ref = ddpm.step(outputs[k], t, samples[k], noise[k])
        worst0 = max(worst0, float((ddim0.step(outputs[k], t, samples[k]) - ref).abs().max()))
        worst1 = max(worst1, float((ddim1.step(outputs[k], t, samples[k], noise[k]) - ref).abs().max()))
    assert worst0 > 0.05, f"DDIM eta 0 should not equal DDPM (max diff {worst0})"
    assert worst1 < 1e-4, f"DDIM eta 1 should equal DDPM (max diff {worst1})"
    # At t = 0 (alpha_prev = 1) both return x0 itself.
    x0 = (samples[-1] - (1 - ddpm.alphas_cumprod[0]).sqrt() * outputs[-1]) / ddpm.alphas_cumprod[0].sqrt()
    assert torch.allclose(ddim0.step(outputs[-1], 0, samples[-1]), x0, atol=1e-6)


def test_fewer_ddim_steps_denoise_a_known_signal() -> None:
    """With the exact epsilon of x_t = sqrt(a) x0 + sqrt(1 - a) eps, 10 DDIM steps land on x0."""
    sched = _sched("DDIM", clip_sample=False)
    ts = sched.set_timesteps(10)
    g = torch.Generator().manual_seed(1)
    x0, eps = torch.randn(SHAPE, generator=g) * 0.5, torch.randn(SHAPE, generator=g)
    a = sched.alphas_cumprod[int(ts[0])]
    x = a.sqrt() * x0 + (1 - a).sqrt() * eps
    for t in ts:
        a_t = sched.alphas_cumprod[int(t)]
        eps_t = (x - a_t.sqrt() * x0) / (1 - a_t).sqrt()  # the perfect noise predictor
        x = sched.step(eps_t, t, x)
    assert (x - x0).abs().max() < 1e-4


def test_fixture_schedule_and_steps(fixtures_dir: Path) -> None:
    folder = fixtures_dir / "lerobot-diffusion-tiny"
    ref = np.load(folder / "intermediates.npz")
    step_noise = torch.from_numpy(np.load(folder / "step_noise.npy"))
    sched = _sched("DDPM")
    assert np.array_equal(sched.alphas_cumprod.numpy(), ref["alphas_cumprod"])
    ts = sched.set_timesteps(100)
    assert np.array_equal(ts.numpy(), ref["timesteps"])
    table = sched.step_table(100)
    for k, t in enumerate(ts):
        x, m = torch.from_numpy(ref["x_t_per_step"][k]), torch.from_numpy(ref["model_output_per_step"][k])
        out = sched.step_output(m, t, x, step_noise[k])
        # Bit for bit on the CPU that made the fixture; on another the float32 steps differ in the last
        # bit or two (2.4e-7 at most on an AVX-512 Xeon).
        np.testing.assert_allclose(out.prev_sample.numpy(), ref["x_prev_per_step"][k], rtol=2e-7, atol=3e-7)
        np.testing.assert_allclose(
            out.pred_original_sample.numpy(), ref["pred_x0_per_step"][k], rtol=2e-7, atol=3e-7
        )
        assert torch.equal(table_step(table_row(table, k), m, x, step_noise[k]), out.prev_sample)


def test_the_x0_error_gain_is_the_epsilon_amplification_and_judges_only_through_it() -> None:
    from hotloop.families.reference import compare

    eps, sample = _sched("DDPM"), _sched("DDPM", prediction_type="sample")
    ts = eps.set_timesteps(100)
    gain = eps.x0_error_gain(ts)
    a = eps.alphas_cumprod[ts.long()].double()
    assert torch.allclose(gain, torch.clamp(((1 - a) / a).sqrt(), min=1.0))
    assert gain[1] > 60 and gain[-1] == 1.0  # squaredcos: 64x at the second step, none at the last
    assert torch.equal(sample.x0_error_gain(ts), torch.ones(100, dtype=torch.float64))
    # The same 2e-5 error passes a 1e-5 tolerance at a step that multiplies errors by 64, fails at gain 1.
    want = np.zeros((100, 4))
    got = want.copy()
    got[1, 0] = 2e-5
    judged = compare("pred_x0_per_step", "stage", got, want, 1e-5, gain=(gain.numpy(), "g"))
    assert judged.ok and judged.max_abs == 2e-5 and judged.judged_abs < 1e-6
    got[1, 0], got[-1, 0] = 0.0, 2e-5
    assert not compare("pred_x0_per_step", "stage", got, want, 1e-5, gain=(gain.numpy(), "g")).ok
