from hotloop.sim.workers import EpisodeJob, run_episodes


def test_a_crashing_worker_is_a_failed_episode_and_the_run_continues():
    job = EpisodeJob(
        target="demo:conveyor",
        task="reach",
        difficulty=None,
        strategy="sync",
        latency="fixed:0",
        policy_factory="fakes:crashing",
    )
    seeds = list(range(6))
    records, interrupted = run_episodes(job, seeds, workers=1)
    assert not interrupted
    assert [r["seed"] for r in records] == seeds  # every seed has a record, none skipped
    crashed = [r for r in records if r["error"]]
    assert crashed, "the fake policy should have killed at least one worker"
    for r in crashed:
        assert not r["success"] and f"seed {r['seed']}" in r["error"]
