"""Bench targets and PiPolicy on tiny configs (random weights)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hotloop.errors import ConfigError, UnknownNameError
from hotloop.families.pi.policy import NormStats, PiPolicy, Stats, resize_with_pad
from hotloop.families.pi.sampling import sample_actions
from hotloop.families.pi.targets import (
    build_bench,
    build_model,
    build_pi0_bench,
    build_pi0_policy,
    build_pi05_bench,
    build_pi05_policy,
)
from hotloop.measure.stages import StageTimer
from hotloop.models.configs import get_pi_config, pi_configs
from hotloop.policy import Policy
from hotloop.targets import TargetOptions


def test_bench_honours_options_and_marks_stages() -> None:
    case = build_pi05_bench("tiny", TargetOptions(views=2, num_steps=3, horizon=5, action_dim=7))
    timer = StageTimer()
    timer.begin_iteration()
    out = case.run(timer)
    host, _ = timer.end_iteration()
    assert out.shape == (1, 5, 7) and torch.isfinite(out).all()
    assert set(host) == {"vision", "prefix", "denoise"}
    assert case.info["views"] == 2 and case.info["num_steps"] == 3 and case.info["chunk_size"] == 5
    assert case.info["family"] == "pi05" and 0 < case.info["parameters"] < 5_000_000
    assert case.info["prefix_len"] == 2 * 16 + 12


def test_bench_is_seeded_and_family_specific() -> None:
    a = build_pi0_bench("tiny", TargetOptions(seed=3)).run(StageTimer())
    b = build_pi0_bench("tiny", TargetOptions(seed=3)).run(StageTimer())
    assert torch.equal(a, b)
    assert build_pi0_bench("tiny", TargetOptions()).info["family"] == "pi0"
    assert build_bench("pi05:tiny", TargetOptions()).info["family"] == "pi05"


def _compute_dtypes(case) -> dict[str, set]:
    """The dtypes every convolution, linear layer, matmul and attention call really received."""
    import torch.nn.functional as F
    from torch.overrides import TorchFunctionMode

    watched = {F.conv2d, F.linear, torch.matmul, torch.Tensor.__matmul__, F.scaled_dot_product_attention}
    seen: dict[str, set] = {}

    class Record(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func in watched:
                dtypes = {a.dtype for a in args if isinstance(a, torch.Tensor)}
                seen.setdefault(getattr(func, "__name__", str(func)), set()).update(dtypes)
            return func(*args, **(kwargs or {}))

    with Record():
        out = case.run(StageTimer())
    assert torch.isfinite(out).all()
    return seen


def test_bench_bfloat16_runs_in_bfloat16() -> None:
    """Not the label: the heavy operations run in bf16, and the actions carry bf16 rounding."""
    case = build_pi05_bench("tiny", TargetOptions(dtype="bfloat16", num_steps=2))
    assert case.info["dtype"] == "bfloat16"
    seen = _compute_dtypes(case)
    assert {"conv2d", "linear", "scaled_dot_product_attention"} <= set(seen)
    assert set().union(*seen.values()) == {torch.bfloat16}, seen
    fp32_case = build_pi05_bench("tiny", TargetOptions(num_steps=2))
    assert set().union(*_compute_dtypes(fp32_case).values()) == {torch.float32}
    bf16 = case.run(StageTimer())
    fp32 = fp32_case.run(StageTimer())
    diff = (bf16 - fp32).abs().max().item()
    assert 1e-4 < diff < 0.1 * fp32.abs().max().item()  # bf16 has ~3 significant digits, fp32 ~7


@pytest.mark.parametrize("family", ["pi0", "pi05"])
def test_bench_prompt_tokens_and_buckets_give_the_same_actions(family: str) -> None:
    plain = build_bench(f"{family}:tiny", TargetOptions(prompt_tokens=3))
    bucketed = build_bench(f"{family}:tiny", TargetOptions(prompt_tokens=3, buckets=(4, 8)))
    assert plain.info["prompt_real_tokens"] == 3 and "prompt_bucket" not in plain.info
    assert bucketed.info["prompt_bucket"] == 4 and bucketed.info["prompt_buckets"] == [4, 8, 12]
    timer = StageTimer()
    timer.begin_iteration()
    actions = bucketed.run(timer)
    assert set(timer.end_iteration()[0]) == {"vision", "prefix", "denoise"}
    torch.testing.assert_close(actions, plain.run(StageTimer()), rtol=0, atol=2e-6)


def test_bad_options_and_names() -> None:
    with pytest.raises(ConfigError, match="--prompt-tokens 13 exceeds"):
        build_pi05_bench("tiny", TargetOptions(prompt_tokens=13))
    with pytest.raises(ConfigError, match="max_action_dim"):
        build_pi05_bench("tiny", TargetOptions(action_dim=33))
    with pytest.raises(ConfigError, match="ambiguous"):
        build_bench("tiny", TargetOptions())
    with pytest.raises(UnknownNameError, match="did you mean|Did you mean"):
        build_pi05_bench("smal", TargetOptions())


def test_configs_registry_sizes() -> None:
    assert set(pi_configs().names()) == {
        "pi0:full",
        "pi05:full",
        "pi05:small",
        "pi0:tiny",
        "pi05:tiny",
        "pi05:nano",
        "pi05:mini",
    }
    full = get_pi_config("pi05:full")
    assert (full.vlm.width, full.vlm.depth, full.vlm.mlp_dim, full.expert.width, full.vision.width) == (
        2048,
        18,
        16384,
        1024,
        1152,
    )
    assert full.vision.tokens_per_view == 256 and full.max_token_len == 200
    assert get_pi_config("pi0:full").max_token_len == 48
    with pytest.raises(ConfigError, match="PiConfig.expert.head_dim"):
        from dataclasses import replace

        replace(full, expert=replace(full.expert, head_dim=128))


@pytest.mark.parametrize("family", ["pi0", "pi05"])
def test_policy_infer_shapes_and_reset(family: str) -> None:
    build = build_pi0_policy if family == "pi0" else build_pi05_policy
    policy = build("tiny", TargetOptions(horizon=4, action_dim=6))
    assert isinstance(policy, Policy)
    rng = np.random.default_rng(0)
    obs = {
        "images": rng.integers(0, 255, (1, 80, 100, 3), dtype=np.uint8),
        "state": rng.normal(size=8) * 0.3,
        "prompt_tokens": [5, 6, 7],
    }
    first = policy.infer(obs)["actions"]
    assert first.shape == (4, 6) and first.dtype == np.float32
    second = policy.infer(obs)["actions"]
    assert not np.array_equal(first, second)  # fresh noise each call
    policy.reset()
    np.testing.assert_array_equal(policy.infer(obs)["actions"], first)  # reset restarts the noise stream


def test_pi05_policy_puts_state_in_the_prompt_and_unnormalizes() -> None:
    cfg = get_pi_config("pi05:tiny")
    model = build_model(cfg, torch.float32, "cpu", seed=0)
    stats = NormStats(
        state=Stats(q01=np.full(4, -2.0, np.float32), q99=np.full(4, 2.0, np.float32)),
        actions=Stats(q01=np.zeros(32, np.float32), q99=np.full(32, 10.0, np.float32)),
        mode="quantiles",
    )
    policy = PiPolicy(model, cfg, norm_stats=stats, action_dim=3, default_prompt_tokens=[9])
    images = np.zeros((1, 56, 56, 3), np.float32)
    low = policy.observation({"images": images, "state": np.full(4, -2.0)})
    high = policy.observation({"images": images, "state": np.full(4, 2.0)})
    base = cfg.vocab_size - 256
    assert low.lang_tokens[0, :5].tolist() == [9] + [base] * 4
    assert high.lang_tokens[0, :5].tolist() == [9] + [base + 255] * 4
    assert int(low.lang_masks.sum()) == 5
    out = policy.infer({"images": images, "state": np.zeros(4)})["actions"]
    policy.reset()
    raw = sample_actions(
        model,
        policy.observation({"images": images, "state": np.zeros(4)}),
        generator=torch.Generator().manual_seed(0),
    )[0, :, :3].numpy()
    np.testing.assert_allclose(out, (raw + 1) / 2 * (10 + 1e-6), atol=1e-5)


def test_policy_input_errors() -> None:
    policy = build_pi05_policy("tiny", TargetOptions())
    with pytest.raises(ConfigError, match="no tokenizer"):
        policy.infer({"images": np.zeros((1, 56, 56, 3), np.uint8), "prompt": "pick"})
    with pytest.raises(ConfigError, match="at most 1"):
        policy.infer({"images": np.zeros((2, 56, 56, 3), np.uint8)})
    with pytest.raises(ConfigError, match=r"\(views, H, W, 3\)"):
        policy.infer({"images": np.zeros((1, 3, 56, 56), np.uint8)})


def test_resize_with_pad_keeps_aspect() -> None:
    img = torch.ones(1, 3, 20, 40)
    out = resize_with_pad(img, 56)
    assert out.shape == (1, 3, 56, 56)
    assert out[0, :, 14:42].min() > 0.999 and out[0, :, :14].max() == 0.0 and out[0, :, 42:].max() == 0.0


def test_views_beyond_three_are_rejected():
    from hotloop.families.pi.targets import build_pi05_bench
    from hotloop.targets import TargetOptions

    with pytest.raises(ConfigError, match="--views 4 is more than the 3 camera views"):
        build_pi05_bench("tiny", TargetOptions(views=4))
