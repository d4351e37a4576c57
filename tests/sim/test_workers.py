from hotloop.closedloop.pool import run_episodes
from hotloop.closedloop.workers import EpisodeJob


def test_a_crashing_worker_is_an_error_episode_and_the_run_continues():
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
        assert not r["failed"]  # a crash says nothing about the policy: an error, not a failure


def test_repeated_ctrl_c_while_workers_stop_keeps_the_finished_episodes(run_in_child):
    # The scenario sends SIGINT to its own process: see the `run_in_child` fixture.
    run_in_child(__file__, "repeated_ctrl_c_scenario", timeout=300)


def repeated_ctrl_c_scenario() -> None:
    # The first press stops the run; two more land while the worker takes 2 s to stop. Before the
    # fix the second press escaped from the shutdown and every finished episode was lost.
    import os
    import signal
    import threading

    job = EpisodeJob(
        target="demo:conveyor",
        task="reach",
        difficulty=None,
        strategy="sync",
        latency="fixed:0",
        policy_factory="fakes:slow_to_stop",
    )
    timers: list[threading.Timer] = []
    finished: list[int] = []

    def on_result(record):
        finished.append(record["seed"])
        if len(finished) == 2:
            timers.extend(threading.Timer(t, os.kill, (os.getpid(), signal.SIGINT)) for t in (0.3, 0.8))
            for t in timers:
                t.start()
            os.kill(os.getpid(), signal.SIGINT)  # the first press, delivered to this (the main) thread

    records, interrupted = run_episodes(job, list(range(20)), workers=1, on_result=on_result)
    for t in timers:
        t.join()
    assert interrupted
    assert [r["seed"] for r in records] == [0, 1] and not any(r["error"] for r in records)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is restored


def test_one_pool_plays_every_cell_on_one_build_and_gives_what_fresh_builds_give():
    # Two cells that differ only in how an episode is played (strategy, latency) share the worker's env
    # and policy; a second run reuses the same process. Each record equals that of a runner built for
    # its job alone (bit for bit, apart from the measured inference wall time).
    import dataclasses

    from hotloop.closedloop.pool import WorkerPool
    from hotloop.closedloop.workers import EpisodeRunner

    a = EpisodeJob(
        target="expert:scripted", task="reach", difficulty=None, strategy="sync", latency="fixed:0", threads=1
    )
    b = dataclasses.replace(a, strategy="async", latency="fixed:200")
    work = [(a, 0), (b, 1), (a, 1)]
    got: dict[int, tuple[dict, dict]] = {}
    with WorkerPool(1) as pool:
        assert not pool.run(work[:2], lambda i, r, t: got.setdefault(i, (r, t)))
        assert not pool.run(work[2:], lambda i, r, t: got.setdefault(2 + i, (r, t)))
    timings = [got[i][1] for i in range(3)]
    assert len({t["pid"] for t in timings}) == 1  # one process for both runs
    assert timings[0]["build_s"] > 0 and timings[1]["build_s"] == timings[2]["build_s"] == 0

    def strip(record):
        return {k: v for k, v in record.items() if k != "infer_wall_ms"}

    for i, (job, seed) in enumerate(work):
        fresh = EpisodeRunner(job)
        assert strip(got[i][0]) == strip(fresh.run(seed)), (job.strategy, seed)
        fresh.close()
    assert got[1][0]["run"]["strategy"]["name"] == "async"  # each record describes its own cell
    assert got[0][0]["run"]["strategy"]["name"] == "sync"
