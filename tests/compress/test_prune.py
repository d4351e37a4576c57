from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hotloop.errors import ConfigError
from hotloop.families.pi.compression.prune import PruneConfig, prune, semi_structured_2_4
from hotloop.families.pi.sampling import sample_actions
from hotloop.families.pi.targets import build_model, random_observation, resolve_config
from hotloop.models.siglip import count_parameters
from hotloop.targets import TargetOptions


@pytest.fixture(scope="module")
def tiny():  # type: ignore[no-untyped-def]
    cfg = resolve_config("pi05:tiny", TargetOptions())
    model = build_model(cfg, torch.float32, "cpu", 0)
    obs = random_observation(cfg, 4, "cpu", 0)
    actions = torch.randn(4, cfg.chunk_size, cfg.max_action_dim, generator=torch.Generator().manual_seed(1))
    return model, obs, actions


def _expected_parameters(model, small_cfg) -> int:  # type: ignore[no-untyped-def]
    """Count from the architecture: what every removed neuron / head / channel takes with it."""
    cfg = model.cfg
    removed = 0
    for g, ng in ((cfg.vlm, small_cfg.vlm), (cfg.expert, small_cfg.expert)):
        removed += g.depth * 3 * g.width * (g.mlp_dim - ng.mlp_dim)  # gate, up rows + down columns
        removed += g.depth * 2 * g.width * g.head_dim * (g.num_heads - ng.num_heads)  # q rows + o columns
    v, nv = cfg.vision, small_cfg.vision
    removed += v.depth * (2 * v.width + 1) * (v.mlp_dim - nv.mlp_dim)  # fc1 rows + bias + fc2 columns
    return count_parameters(model) - removed


@pytest.mark.parametrize("importance", ["taylor", "activation"])
def test_pruning_shrinks_as_configured_and_runs(tiny, importance) -> None:  # type: ignore[no-untyped-def]
    model, obs, actions = tiny
    config = PruneConfig(0.5, 0.5, 0.5, 0.5, 0.25, importance=importance)
    small, report = prune(model, obs, actions if importance == "taylor" else None, config)
    c = small.cfg
    assert (c.vlm.mlp_dim, c.expert.mlp_dim, c.vision.mlp_dim) == (64, 32, 32)
    assert (c.vlm.num_heads, c.expert.num_heads) == (4, 6)  # 8 heads, one KV group
    assert small.vlm.layers[0].mlp.gate_proj.weight.shape == (64, 64)
    assert small.expert.layers[1].self_attn.q_proj.weight.shape == (6 * 16, 32)
    assert report["parameters_after"] == count_parameters(small) == _expected_parameters(model, c)
    assert report["parameters_after"] < report["parameters_before"] == count_parameters(model)
    out = sample_actions(small, obs)
    assert out.shape == (4, c.chunk_size, c.max_action_dim) and torch.isfinite(out).all()
    assert count_parameters(model) == report["parameters_before"]  # the original is left untouched


def test_pruning_keeps_the_important_neurons(tiny) -> None:  # type: ignore[no-untyped-def]
    """Neurons whose down-projection column is zero contribute nothing: Taylor importance drops them
    first, so pruning exactly those leaves the actions bit-for-bit unchanged."""
    model, obs, actions = tiny
    import copy

    m = copy.deepcopy(model)
    with torch.no_grad():
        for layer in m.expert.layers:
            layer.mlp.down_proj.weight[:, ::2] = 0.0  # half the expert's neurons are dead
    small, _ = prune(m, obs, actions, PruneConfig(expert_mlp=0.5))
    noise = torch.randn(4, m.cfg.chunk_size, m.cfg.max_action_dim, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(sample_actions(small, obs, noise=noise), sample_actions(m, obs, noise=noise))


def test_taylor_pruning_works_on_a_frozen_model_and_leaves_it_frozen(tiny) -> None:  # type: ignore[no-untyped-def]
    """The recipe hands prune a frozen model (requires_grad off): Taylor scores still get gradients,
    and the same units are chosen as on the trainable model."""
    import copy

    model, obs, actions = tiny
    frozen = copy.deepcopy(model)
    for p in frozen.parameters():
        p.requires_grad_(False)
    config = PruneConfig(0.5, 0.5, 0.5, 0.5, 0.25)
    small_frozen, _ = prune(frozen, obs, actions, config)
    small, _ = prune(model, obs, actions, config)
    assert not any(p.requires_grad for p in frozen.parameters())
    for (name, a), (_, b) in zip(small_frozen.state_dict().items(), small.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b, msg=name)


def test_pruned_checkpoint_reloads_at_the_new_shapes(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from hotloop.families.pi.checkpoint import load_checkpoint, save_lerobot_checkpoint

    model, obs, actions = tiny
    small, _ = prune(model, obs, actions, PruneConfig(0.25, 0.5, 0.5, 0.5, 0.5))
    save_lerobot_checkpoint(small, small.cfg, tmp_path / "ckpt")
    loaded = load_checkpoint(
        tmp_path / "ckpt", chunk_size=small.cfg.chunk_size, max_token_len=small.cfg.max_token_len
    )
    assert loaded.config.vlm == small.cfg.vlm and loaded.config.expert == small.cfg.expert
    assert loaded.config.vision.mlp_dim == small.cfg.vision.mlp_dim
    noise = torch.randn(
        4, small.cfg.chunk_size, small.cfg.max_action_dim, generator=torch.Generator().manual_seed(2)
    )
    torch.testing.assert_close(
        sample_actions(loaded.model, obs, noise=noise), sample_actions(small, obs, noise=noise)
    )


def test_semi_structured_2_4_zeroes_two_of_every_four(tiny) -> None:  # type: ignore[no-untyped-def]
    import copy

    model, obs, _ = tiny
    m = copy.deepcopy(model)
    report = semi_structured_2_4(m)
    w = m.expert.layers[0].mlp.down_proj.weight.view(-1, 4)
    assert ((w == 0).sum(-1) >= 2).all()
    assert report["zeroed_fraction_of_pruned_layers"] == pytest.approx(0.5)
    assert "no CPU speedup" in report["note"]
    assert torch.equal(m.vision_tower.layers[0].mlp.fc1.weight, model.vision_tower.layers[0].mlp.fc1.weight)
    assert torch.isfinite(sample_actions(m, obs)).all()


def test_bad_fractions_are_refused() -> None:
    with pytest.raises(ConfigError, match="prune fraction"):
        PruneConfig(vlm_mlp=1.0)
    with pytest.raises(ConfigError, match="prune:0.25"):
        PruneConfig.parse("half")
    assert PruneConfig.parse("0.3:0.25").expert_heads == 0.25
