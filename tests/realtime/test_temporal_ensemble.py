"""TemporalEnsembler against the weighted average it promises and against LeRobot's own algorithm."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hotloop.errors import ConfigError
from hotloop.realtime.temporal_ensemble import TemporalEnsembler, ensemble_weights

COEFFS = (0.0, 0.01, 0.3, -0.2, 1.5)


class LeRobotEnsembler:
    """A transcription of LeRobot's ACTTemporalEnsembler (policies/act/modeling_act.py, 7427f318)."""

    def __init__(self, temporal_ensemble_coeff: float, chunk_size: int) -> None:
        self.chunk_size = chunk_size
        self.ensemble_weights = torch.exp(-temporal_ensemble_coeff * torch.arange(chunk_size))
        self.ensemble_weights_cumsum = torch.cumsum(self.ensemble_weights, dim=0)
        self.reset()

    def reset(self) -> None:
        self.ensembled_actions: torch.Tensor | None = None
        self.ensembled_actions_count: torch.Tensor | None = None

    def update(self, actions: torch.Tensor) -> torch.Tensor:
        if self.ensembled_actions is None or self.ensembled_actions_count is None:
            self.ensembled_actions = actions.clone()
            self.ensembled_actions_count = torch.ones((self.chunk_size, 1), dtype=torch.long)
        else:
            self.ensembled_actions *= self.ensemble_weights_cumsum[self.ensembled_actions_count - 1]
            self.ensembled_actions += actions[:, :-1] * self.ensemble_weights[self.ensembled_actions_count]
            self.ensembled_actions /= self.ensemble_weights_cumsum[self.ensembled_actions_count]
            self.ensembled_actions_count = torch.clamp(self.ensembled_actions_count + 1, max=self.chunk_size)
            self.ensembled_actions = torch.cat([self.ensembled_actions, actions[:, -1:]], dim=1)
            self.ensembled_actions_count = torch.cat(
                [self.ensembled_actions_count, torch.ones_like(self.ensembled_actions_count[-1:])]
            )
        action, self.ensembled_actions, self.ensembled_actions_count = (
            self.ensembled_actions[:, 0],
            self.ensembled_actions[:, 1:],
            self.ensembled_actions_count[1:],
        )
        return action


def brute_force(chunks: list[np.ndarray], coeff: float) -> list[np.ndarray]:
    """Action t = sum_i w_i chunk_{k_i}[t - k_i] / sum_i w_i over the chunks predicting t, oldest i = 0."""
    chunk = chunks[0].shape[1]
    out = []
    for t in range(len(chunks)):
        contributors = [k for k in range(len(chunks)) if k <= t < k + chunk]  # oldest first
        w = np.exp(-coeff * np.arange(len(contributors), dtype=np.float64))
        preds = np.stack([chunks[k][:, t - k].astype(np.float64) for k in contributors])
        out.append((w[:, None, None] * preds).sum(0) / w.sum())
    return out


def _chunks(seed: int, steps: int, batch: int = 2, chunk: int = 6, dim: int = 3) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(batch, chunk, dim)).astype(np.float32) for _ in range(steps)]


@pytest.mark.parametrize("coeff", COEFFS)
def test_matches_the_weighted_average_of_the_history(coeff: float) -> None:
    chunks = _chunks(1, steps=15)
    ens = TemporalEnsembler(coeff, chunk_size=6)
    got = [ens.update(c) for c in chunks]
    want = brute_force(chunks, coeff)
    worst = max(float(np.abs(g - w).max()) for g, w in zip(got, want, strict=True))
    assert worst < 2e-6, f"coeff {coeff}: max abs diff to the brute-force average {worst:.3g}"
    assert got[0].shape == (2, 3) and got[0].dtype == np.float32


@pytest.mark.parametrize("coeff", COEFFS)
def test_bitwise_equal_to_lerobots_algorithm(coeff: float) -> None:
    chunks = _chunks(2, steps=20, chunk=10, dim=4)
    ens, ref = TemporalEnsembler(coeff, chunk_size=10), LeRobotEnsembler(coeff, chunk_size=10)
    for step, c in enumerate(chunks):
        got, want = ens.update(c), ref.update(torch.from_numpy(c)).numpy()
        assert np.array_equal(got, want), (
            f"coeff {coeff} step {step}: max diff {np.abs(got - want).max():.3g}"
        )


def test_weights_follow_lerobot_and_favour_old_predictions_for_positive_coeff() -> None:
    w, cumsum = ensemble_weights(0.01, 100)
    ref = torch.exp(-0.01 * torch.arange(100))
    assert np.array_equal(w, ref.numpy()) and np.array_equal(cumsum, torch.cumsum(ref, 0).numpy())
    assert w[0] == 1.0 and np.all(np.diff(w) < 0)
    # Two chunks that disagree by a constant: the first (older) one counts more with coeff > 0.
    ens = TemporalEnsembler(1.0, chunk_size=3)
    ens.update(np.zeros((1, 3, 1), np.float32))
    second = ens.update(np.ones((1, 3, 1), np.float32))
    assert np.isclose(second[0, 0], np.exp(-1.0) / (1 + np.exp(-1.0)), atol=1e-7)


def test_reset_starts_a_new_episode() -> None:
    chunks = _chunks(3, steps=8)
    ens = TemporalEnsembler(0.1, chunk_size=6)
    first = [ens.update(c) for c in chunks]
    ens.reset()
    again = [ens.update(c) for c in chunks]
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    # Without the reset the history would leak in: the first action differs from a fresh start.
    assert not np.array_equal(ens.update(chunks[0]), first[0])


def test_chunk_size_one_passes_each_action_through() -> None:
    ens = TemporalEnsembler(0.5, chunk_size=1)
    for c in _chunks(4, steps=4, chunk=1):
        assert np.array_equal(ens.update(c), c[:, 0])


def test_refusals_name_the_problem() -> None:
    with pytest.raises(ConfigError, match="chunk_size"):
        TemporalEnsembler(0.1, chunk_size=0)
    with pytest.raises(ConfigError, match="finite"):
        TemporalEnsembler(float("nan"), chunk_size=4)
    with pytest.raises(ConfigError, match="overflow"):
        TemporalEnsembler(-200.0, chunk_size=4)
    ens = TemporalEnsembler(0.1, chunk_size=4)
    with pytest.raises(ConfigError, match=r"\(batch, 4, action_dim\)"):
        ens.update(np.zeros((1, 5, 2), np.float32))
    ens.update(np.zeros((1, 4, 2), np.float32))
    with pytest.raises(ConfigError, match="reset"):
        ens.update(np.zeros((2, 4, 2), np.float32))


def test_without_torch_the_weights_agree_to_the_last_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    want = [a.copy() for a in ensemble_weights(0.01, 50)]
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    got = ensemble_weights(0.01, 50)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == np.float32
        assert np.allclose(g, w, rtol=2e-7, atol=0), f"max rel diff {np.abs(g / w - 1).max():.3g}"
