"""RTC by training-time action conditioning: per-token flow time, the prefix-masked loss, the
prefix-conditioned sampler, and the `rtc-prefix` strategy's wiring and refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hotloop.errors import ConfigError
from hotloop.families.pi.rtc_prefix import prefix_sample_actions, prefix_token_time
from hotloop.families.pi.sampling import PiObservation, flow_matching_loss, sample_actions
from hotloop.models.configs import get_pi_config
from hotloop.models.pi0 import PiModel, init_weights
from hotloop.realtime.rtc import (
    DELAY_KEY,
    GUIDED_KEY,
    MAX_GUIDANCE_WEIGHT_KEY,
    MODE_KEY,
    PREV_ACTIONS_KEY,
    guidance_mode,
)


def _model(name: str, seed: int = 0) -> PiModel:
    model = PiModel(get_pi_config(name))
    init_weights(model, torch.Generator().manual_seed(seed))
    return model.eval()


def _obs(model: PiModel, batch: int, seed: int = 1) -> PiObservation:
    cfg = model.cfg
    g = torch.Generator().manual_seed(seed)
    size = cfg.vision.image_size
    return PiObservation(
        images=torch.rand(batch, cfg.views, 3, size, size, generator=g) * 2 - 1,
        image_masks=torch.ones(batch, cfg.views, dtype=torch.bool),
        lang_tokens=torch.randint(0, 100, (batch, cfg.max_token_len), generator=g),
        lang_masks=torch.ones(batch, cfg.max_token_len, dtype=torch.bool),
        state=torch.randn(batch, cfg.max_state_dim, generator=g),
    )


@pytest.fixture(scope="module")
def nano():
    model = _model("pi05:nano")
    obs = _obs(model, 3)
    with torch.no_grad():
        cache = model.prefix(model.vision(obs.images), obs.image_masks, obs.lang_tokens, obs.lang_masks)
    return model, obs, cache


@pytest.mark.parametrize("name", ["pi05:nano", "pi0:tiny"])
def test_per_token_time_with_equal_times_is_the_per_sample_path_bit_for_bit(name):
    model = _model(name)
    obs = _obs(model, 3)
    cfg = model.cfg
    x = torch.randn(3, cfg.chunk_size, cfg.max_action_dim, generator=torch.Generator().manual_seed(2))
    t = torch.tensor([0.3, 0.7, 1.0])
    with torch.no_grad():
        cache = model.prefix(model.vision(obs.images), obs.image_masks, obs.lang_tokens, obs.lang_masks)
        per_sample = model.denoise_step(cache, x, t, obs.state)
        per_token = model.denoise_step(cache, x, t[:, None].repeat(1, cfg.chunk_size), obs.state)
        scalar = model.denoise_step(cache, x, torch.tensor(0.7), obs.state)
        per_token_scalar = model.denoise_step(cache, x, torch.full((3, cfg.chunk_size), 0.7), obs.state)
    assert torch.equal(per_sample, per_token)
    assert torch.equal(scalar, per_token_scalar)


def test_each_token_is_conditioned_on_its_own_time(nano):
    model, obs, cache = nano
    cfg = model.cfg
    x = torch.randn(3, cfg.chunk_size, cfg.max_action_dim, generator=torch.Generator().manual_seed(3))
    base = torch.full((3, cfg.chunk_size), 0.6)
    with torch.no_grad():
        _, cond = model.embed_suffix(x, base, None)
        moved = base.clone()
        moved[:, :4] = 0.0
        _, cond_moved = model.embed_suffix(x, moved, None)
        v_base = model.denoise_step(cache, x, base, obs.state)
        v_moved = model.denoise_step(cache, x, moved, obs.state)
    assert cond is not None and cond_moved is not None
    assert tuple(cond.shape) == (3, cfg.chunk_size, cfg.expert.width)
    assert torch.equal(cond[:, 4:], cond_moved[:, 4:]) and not torch.equal(cond[:, :4], cond_moved[:, :4])
    assert not torch.allclose(v_base, v_moved)  # the times reach the velocity
    with pytest.raises(ValueError, match="per-token time"):
        model.embed_suffix(x, torch.zeros(3, cfg.chunk_size - 1), None)


def test_the_loss_ignores_the_given_prefix(nano):
    model, obs, _ = nano
    cfg = model.cfg
    g = torch.Generator().manual_seed(4)
    actions = torch.randn(3, cfg.chunk_size, cfg.max_action_dim, generator=g)
    noise = torch.randn(actions.shape, generator=g)
    time = torch.tensor([0.5, 0.9, 0.2])
    d = torch.tensor([0, 3, 7])
    seen = {}
    original = model.denoise_step

    def spy(cache, x_t, t, state=None):
        v = original(cache, x_t, t, state)
        v.retain_grad()
        seen.setdefault("x_t", x_t)
        seen.setdefault("t", t)
        seen.setdefault("v", v)  # the first call's, the one backpropagated
        return v

    model.denoise_step = spy  # type: ignore[method-assign]
    try:
        losses = flow_matching_loss(model, obs, actions, noise=noise, time=time, reduce=False, prefix_len=d)
        losses.sum().backward()
        mean = flow_matching_loss(model, obs, actions, noise=noise, time=time, prefix_len=d)
    finally:
        del model.denoise_step
    model.zero_grad(set_to_none=True)
    keep = torch.arange(cfg.chunk_size)[None, :] >= d[:, None]
    # The prefix enters clean, at t = 0; the rest at the sample's t.
    assert torch.equal(seen["t"], torch.where(keep, time[:, None], torch.zeros(())))
    for b in range(3):
        assert torch.equal(seen["x_t"][b, : d[b]], actions[b, : d[b]])
    # No loss and no gradient through the prefix tokens' predictions; the others do get one.
    assert torch.all(losses[~keep] == 0) and torch.all(losses[keep].sum(-1) > 0)
    grad = seen["v"].grad
    assert torch.all(grad[~keep] == 0) and torch.all(grad[keep].abs().sum(-1) > 0)
    assert mean.item() == pytest.approx(losses.sum().item() / (keep.sum().item() * cfg.max_action_dim))


def test_prefix_sampling_returns_the_prefix_exactly_and_samples_the_rest(nano):
    model, obs, cache = nano
    cfg = model.cfg
    g = torch.Generator().manual_seed(5)
    noise = torch.randn(3, cfg.chunk_size, cfg.max_action_dim, generator=g)
    prefix = torch.randn(3, cfg.chunk_size, cfg.max_action_dim, generator=g)
    plain = sample_actions(model, obs, noise=noise, num_steps=4)
    same = prefix_sample_actions(model, obs, prefix, 0, noise=noise, num_steps=4)
    assert torch.equal(plain, same)  # delay 0 is plain sampling
    out = prefix_sample_actions(model, obs, prefix, 5, noise=noise, num_steps=4)
    assert torch.equal(out[:, :5], prefix[:, :5])
    assert not torch.allclose(out[:, 5:], plain[:, 5:])  # the rest is conditioned on it
    assert torch.equal(prefix_token_time(torch.tensor(0.4), 2, 1, 4), torch.tensor([[0.0, 0.0, 0.4, 0.4]]))
    with pytest.raises(ValueError, match="delay"):
        prefix_sample_actions(model, obs, prefix, cfg.chunk_size + 1, noise=noise, num_steps=2)


def test_demo_policy_continues_the_given_prefix_in_robot_space():
    """`demo:conveyor` in prefix mode: the d actions being executed come back as the chunk's first d
    (absolute targets, through the relative-action and normalisation round trip)."""
    from hotloop.demos.conveyor import load_demo_policy
    from hotloop.sim.tasks import make_task

    policy = load_demo_policy()
    env = make_task("conveyor-pick")
    obs, _ = env.reset(seed=3)
    policy.reset()
    first = policy.infer(obs)["actions"]
    for _ in range(2):
        env.advance(first[0], env.config.ticks_per_control)
    now = env.observe()
    prev = np.asarray(first[2:], dtype=np.float32)
    prev[:, 0] += 0.02  # off this observation's own plan: only conditioning can put it there
    out = policy.infer({**now, PREV_ACTIONS_KEY: prev, DELAY_KEY: 3, MODE_KEY: "prefix"})
    assert out[GUIDED_KEY] is True and out[MODE_KEY] == "prefix"
    np.testing.assert_allclose(out["actions"][:3], prev[:3], atol=1e-5)
    assert out["actions"].shape == first.shape and np.all(np.isfinite(out["actions"]))
    guided = policy.infer({**now, PREV_ACTIONS_KEY: prev, DELAY_KEY: 3, MAX_GUIDANCE_WEIGHT_KEY: 20.0})
    assert guided[MODE_KEY] == "guided"


def test_bad_mode_in_an_observation_is_a_config_error():
    assert guidance_mode({}) == "guided" and guidance_mode({MODE_KEY: "prefix"}) == "prefix"
    with pytest.raises(ConfigError, match="rtc_mode"):
        guidance_mode({MODE_KEY: "inpaint"})


def test_rtc_prefix_strategy_and_its_refusals():
    from hotloop.realtime.scheduler import ChunkScheduler, Completion
    from hotloop.realtime.strategies import StrategyConfig, make_strategy

    s = make_strategy("rtc-prefix", StrategyConfig(16))
    assert s.guided and s.overlaps and s.describe()["mode"] == "prefix"
    assert "max_guidance_weight" not in s.describe()  # --guidance-weight does nothing for it
    assert make_strategy("rtc", StrategyConfig(16)).describe()["mode"] == "guided"

    def chunk(x: float) -> np.ndarray:
        out = np.tile([x, 0.0, 0.2, 0.0], (16, 1))
        out[:, 1] = np.arange(16) / 100  # each row readable
        return out

    sched = ChunkScheduler(lambda h: make_strategy("rtc-prefix", StrategyConfig(h)), period=5, tick_s=0.02)
    hold = np.zeros(4)
    sched.started(0)
    sched.completed(Completion(0, 10, {"actions": chunk(0.1)}), hold)
    for now in range(10, 50, 5):
        sched.next_segment(now, hold, dict)
    assert sched.wants_inference()
    g = sched.guidance(50)
    # Observed at tick 50: chunk 0 (origin 0, ready at 10, so started at index 2) has run indices 2..9;
    # its rows 10.. are what the robot executes next, d = 2 periods is the measured delay.
    assert g[MODE_KEY] == "prefix" and g[DELAY_KEY] == 2
    np.testing.assert_array_equal(g[PREV_ACTIONS_KEY], chunk(0.1)[10:])
    sched.started(50, guided=True)
    with pytest.raises(ConfigError, match="did not condition on it"):
        # A policy that only knows guided inpainting answers rtc_guided but not rtc_mode "prefix".
        sched.completed(Completion(50, 60, {"actions": chunk(0.1), GUIDED_KEY: True}), hold)
    sched.started(50, guided=True)
    with pytest.raises(ConfigError, match="ignored them.*compiled artifact"):
        # A compiled artifact's policy answers neither key: refused, never a silent async.
        sched.completed(Completion(50, 60, {"actions": chunk(0.1)}), hold)
    sched.started(50, guided=True)
    sched.completed(Completion(50, 60, {"actions": chunk(0.2), GUIDED_KEY: True, MODE_KEY: "prefix"}), hold)
    assert sched.chunks == 2


def test_guidance_weight_with_rtc_prefix_only_is_refused(tmp_path):
    import typer
    from typer.testing import CliRunner

    from hotloop.closedloop.commands import add_commands as add_eval
    from hotloop.datasets.commands import add_commands as add_record
    from hotloop.train.commands import add_commands as add_train

    app = typer.Typer()
    for add in (add_record, add_eval, add_train):
        add(app)
    out = tmp_path / "never.json"
    base = ["eval", "demo:conveyor", "--task", "reach", "--episodes", "1", "--json", str(out)]
    r = CliRunner().invoke(app, [*base, "--strategy", "rtc-prefix", "--guidance-weight", "5"])
    assert r.exit_code == 2 and "--guidance-weight 5 does nothing with --strategy rtc-prefix" in r.output
    assert not out.exists()


def test_train_demo_prefix_options_are_checked_before_anything_is_written(tmp_path):
    import typer
    from typer.testing import CliRunner

    from hotloop.closedloop.commands import add_commands as add_eval
    from hotloop.datasets.commands import add_commands as add_record
    from hotloop.train.commands import add_commands as add_train

    app = typer.Typer()
    for add in (add_record, add_eval, add_train):
        add(app)
    out = tmp_path / "run"
    for extra, needle in (
        (["--action-prefix-prob", "1.5"], "--action-prefix-prob must be in [0, 1]"),
        (
            ["--action-prefix-prob", "0.5", "--max-action-prefix", "16"],
            "--max-action-prefix must be in [1, 15]",
        ),
        (
            ["--action-prefix-prob", "0.5", "--max-action-prefix", "0"],
            "--max-action-prefix must be in [1, 15]",
        ),
        (
            ["--variant", "vision", "--action-prefix-prob", "0.5"],
            "--action-prefix-prob is for --variant state",
        ),
    ):
        r = CliRunner().invoke(app, ["train-demo", "-o", str(out), *extra])
        lines = [line for line in r.output.splitlines() if line.strip()]
        assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (extra, r.output)
        assert needle in lines[0], (extra, r.output)
        assert not out.exists()


def test_training_with_prefixes_is_seeded_and_leaves_the_plain_recipe_alone():
    from hotloop.train.conveyor import TrainDemoConfig, _draw_prefix_len

    cfg = TrainDemoConfig(batch=4000, action_prefix_prob=0.5, max_action_prefix=8)
    d = _draw_prefix_len(cfg, torch.Generator().manual_seed(0))
    assert torch.equal(d, _draw_prefix_len(cfg, torch.Generator().manual_seed(0)))
    assert 0.45 < (d == 0).float().mean().item() < 0.55
    assert d.min().item() == 0 and d.max().item() == 8
    assert TrainDemoConfig().action_prefix_prob == 0.0  # the shipped weights' recipe: no prefixes


def test_soft_prefix_with_no_mask_is_plain_sampling_and_holds_the_rows_with_full_weight(nano):
    from hotloop.families.pi.rtc_prefix import soft_prefix_sample_actions
    from hotloop.realtime.rtc import prefix_weights

    model, obs, _ = nano
    cfg = model.cfg
    g = torch.Generator().manual_seed(6)
    noise = torch.randn(3, cfg.chunk_size, cfg.max_action_dim, generator=g)
    prefix = torch.randn(3, cfg.chunk_size, cfg.max_action_dim, generator=g)
    plain = sample_actions(model, obs, noise=noise, num_steps=4)
    none = soft_prefix_sample_actions(
        model, obs, prefix, torch.zeros(cfg.chunk_size), noise=noise, num_steps=4
    )
    torch.testing.assert_close(none, plain, rtol=0, atol=1e-5)
    w = torch.from_numpy(prefix_weights(2, 8, cfg.chunk_size)).float()
    assert w[1] == 1 and 0 < w[2] < 1 and w[8] == 0
    out = soft_prefix_sample_actions(model, obs, prefix, w, noise=noise, num_steps=4)
    assert torch.equal(out[:, :2], prefix[:, :2])
    assert not torch.allclose(out[:, 8:], plain[:, 8:])  # unmasked rows are conditioned on the rest
    with pytest.raises(ValueError, match="weights must have shape"):
        soft_prefix_sample_actions(model, obs, prefix, w[:-1], noise=noise, num_steps=4)


def test_an_encoded_cache_is_sampled_on_as_given_and_vision_does_not_run_again(nano, monkeypatch):
    """`encoded=True` (`--strategy draft`'s loop after its check): the samplers' shared start takes the
    filled cache as it is; the chunk is the one a fresh encoding gives, bit for bit."""
    from hotloop.families.pi.rtc_prefix import soft_prefix_sample_actions
    from hotloop.realtime.rtc import prefix_weights

    model, obs, cache = nano
    cfg = model.cfg
    g = torch.Generator().manual_seed(8)
    noise = torch.randn(3, cfg.chunk_size, cfg.max_action_dim, generator=g)
    prefix = torch.randn(3, cfg.chunk_size, cfg.max_action_dim, generator=g)
    w = torch.from_numpy(prefix_weights(2, 8, cfg.chunk_size)).float()
    fresh = soft_prefix_sample_actions(model, obs, prefix, w, noise=noise, num_steps=3)

    def refused(*args, **kwargs):
        raise AssertionError("vision ran on an encoded cache")

    monkeypatch.setattr(model, "vision", refused)
    given = soft_prefix_sample_actions(
        model, obs, prefix, w, noise=noise, num_steps=3, cache=cache, encoded=True
    )
    torch.testing.assert_close(given, fresh, rtol=0, atol=0)
    with pytest.raises(ValueError, match="encoded=True needs the filled cache"):
        soft_prefix_sample_actions(model, obs, prefix, w, noise=noise, num_steps=3, encoded=True)


def test_soft_prefix_integrates_each_token_from_its_own_time_and_enforces_the_mask(nano, monkeypatch):
    """With a velocity field of zero the tokens stay where they start, s_i * noise + (1 - s_i) * prefix,
    and the result is W * prefix + (1 - W) * that; the model is told min(t_k, s_i) at every step."""
    from hotloop.families.pi.rtc_prefix import soft_prefix_sample_actions

    model, obs, _ = nano
    cfg = model.cfg
    seen: list[torch.Tensor] = []

    def still(cache, x, t, state):
        seen.append(t.clone())
        return torch.zeros_like(x)

    monkeypatch.setattr(model, "denoise_step", still)
    g = torch.Generator().manual_seed(7)
    noise = torch.randn(3, cfg.chunk_size, cfg.max_action_dim, generator=g)
    prefix = torch.randn(3, cfg.chunk_size, cfg.max_action_dim, generator=g)
    w = torch.zeros(cfg.chunk_size)
    w[:3] = torch.tensor([1.0, 0.7, 0.2])
    out = soft_prefix_sample_actions(model, obs, prefix, w, noise=noise, num_steps=4)
    W, s = w[None, :, None], (1 - w)[None, :, None]
    torch.testing.assert_close(out, W * prefix + s * (s * noise + W * prefix))
    assert len(seen) == 4 and all(t.shape == (3, cfg.chunk_size) for t in seen)
    for k, t in enumerate(seen):
        expected = torch.clamp(1 - w, max=1.0 - k / 4).expand(3, -1)
        torch.testing.assert_close(t, expected)


def test_demo_policy_in_soft_prefix_mode_holds_the_delay_and_leans_toward_the_executing_chunk():
    from hotloop.demos.conveyor import load_demo_policy
    from hotloop.sim.tasks import make_task

    policy = load_demo_policy()
    env = make_task("conveyor-pick")
    obs, _ = env.reset(seed=3)
    policy.reset()
    first = policy.infer(obs)["actions"]
    for _ in range(2):
        env.advance(first[0], env.config.ticks_per_control)
    now = env.observe()
    prev = np.asarray(first[2:10], dtype=np.float32)
    prev[:, 0] += 0.02  # off this observation's own plan
    hard = policy.infer({**now, PREV_ACTIONS_KEY: prev, DELAY_KEY: 3, MODE_KEY: "prefix"})
    soft = policy.infer({**now, PREV_ACTIONS_KEY: prev, DELAY_KEY: 3, MODE_KEY: "soft-prefix"})
    assert soft[GUIDED_KEY] is True and soft[MODE_KEY] == "soft-prefix"
    np.testing.assert_allclose(soft["actions"][:3], prev[:3], atol=1e-5)
    # Row 3 is the first one the robot executes from the new chunk: the mask holds it nearer the plan
    # being executed than the hard prefix alone does.
    assert np.linalg.norm(soft["actions"][3, :3] - prev[3, :3]) < np.linalg.norm(
        hard["actions"][3, :3] - prev[3, :3]
    )
    assert np.all(np.isfinite(soft["actions"])) and soft["actions"].shape == first.shape


def test_rtc_soft_strategy_refuses_a_policy_that_answered_another_mode():
    from hotloop.realtime.scheduler import ChunkScheduler, Completion
    from hotloop.realtime.strategies import StrategyConfig, make_strategy

    s = make_strategy("rtc-soft", StrategyConfig(16))
    assert s.guided and s.overlaps and s.describe()["mode"] == "soft-prefix"
    assert guidance_mode({MODE_KEY: "soft-prefix"}) == "soft-prefix"
    sched = ChunkScheduler(lambda h: make_strategy("rtc-soft", StrategyConfig(h)), period=5, tick_s=0.02)
    hold = np.zeros(4)
    chunk = np.tile([0.1, 0.0, 0.2, 0.0], (16, 1))
    sched.started(0)
    sched.completed(Completion(0, 10, {"actions": chunk}), hold)
    for now in range(10, 50, 5):
        sched.next_segment(now, hold, dict)
    assert sched.guidance(50)[MODE_KEY] == "soft-prefix"
    sched.started(50, guided=True)
    with pytest.raises(ConfigError, match="rtc_mode 'prefix'"):
        sched.completed(Completion(50, 60, {"actions": chunk, GUIDED_KEY: True, MODE_KEY: "prefix"}), hold)
    sched.started(50, guided=True)
    sched.completed(Completion(50, 60, {"actions": chunk, GUIDED_KEY: True, MODE_KEY: "soft-prefix"}), hold)
    assert sched.chunks == 2
