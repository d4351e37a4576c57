"""Every closed-loop episode draws a noise stream of its own, repeatably (`hotloop.policy.seed_noise`): a
success rate then describes the policy, not one fixed stream that every episode restarted."""

from __future__ import annotations

from typing import Any

import torch

from hotloop.policy import episode_noise_seed, seed_noise


def test_an_episodes_noise_seed_depends_on_both_seeds_alone() -> None:
    assert episode_noise_seed(0, 1000) == episode_noise_seed(0, 1000)
    seeds = {episode_noise_seed(p, e) for p in (0, 1) for e in (1000, 1001, 1002)}
    assert len(seeds) == 6


def _runner() -> Any:
    """eval's own episode runner for demo:conveyor-smolvla (flow from N(0, 1)); close it after use."""
    from hotloop.closedloop.workers import EpisodeJob, EpisodeRunner

    return EpisodeRunner(EpisodeJob("demo:conveyor-smolvla", "conveyor-pick", None, "sync", "fixed:0"))


def test_the_hook_reaches_the_noise_through_the_task_adapter() -> None:
    """seed_noise on the adapted policy (what the evaluator holds) reseeds the policy's own generator:
    one episode seed, one stream, whatever ran before; another seed, another stream."""
    runner = _runner()
    adapted, policy = runner.policy, runner.policy.policy

    def first_draw(episode: int) -> torch.Tensor:
        adapted.reset()
        seed_noise(adapted, episode)
        return torch.randn(4, generator=policy.generator)

    a, b, again = first_draw(1000), first_draw(1001), first_draw(1000)
    assert torch.equal(a, again) and not torch.equal(a, b)
    policy.reset()  # reset alone restarts the policy's own seed, as before
    assert not torch.equal(torch.randn(4, generator=policy.generator), a)
    runner.close()


def test_episodes_of_a_stochastic_policy_draw_their_own_noise() -> None:
    """In the evaluator's own episode: the first flow start of two episodes differs (another seed's
    stream), and replaying an episode seed draws its starts again."""
    runner = _runner()
    policy = runner.policy.policy
    starts: list[torch.Tensor] = []
    draw = policy._noise

    class Enough(Exception):
        """Two draws are all this test reads: the episode ends there (the runner records an error)."""

    def recording() -> torch.Tensor:
        starts.append(draw())
        if len(starts) == 2:
            raise Enough
        return starts[-1]

    policy._noise = recording  # the policy's own draw, recorded as it is made

    def episode(seed: int) -> list[torch.Tensor]:
        starts.clear()
        record = runner.run(seed)  # the evaluator's episode: reset, seed_noise, then the control loop
        assert len(starts) == 2 and "Enough" in str(record.get("error")), record
        return list(starts)

    first, second, replay = episode(7), episode(8), episode(7)
    assert all(torch.equal(a, b) for a, b in zip(first, replay, strict=False))
    assert not torch.equal(first[0], second[0])
    assert not torch.equal(first[0], first[1])  # within an episode the stream runs on
    runner.close()
