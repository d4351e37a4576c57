"""What an evaluation worker runs: the job (`EpisodeJob`) and the env and policy it builds once
(`EpisodeRunner`, kept per build in a `RunnerCache`). The worker processes that play them, and
`run_episodes` (the seeds of one job), are in `hotloop.closedloop.pool`.

A runner is built once per worker and build key: a sweep's cells that differ only in how an episode is
played (strategy, latency, watchdog) share it, since every episode resets the env and the policy.
"""

from __future__ import annotations

import dataclasses
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from hotloop.errors import HotloopError, MemoryCapError, NonFiniteOutputError


@dataclass(frozen=True)
class EpisodeJob:
    """Everything a worker needs to build its env, policy, strategy and latency model (picklable)."""

    target: str
    task: str
    difficulty: str | None
    strategy: str
    latency: str
    execute_steps: int | None = None
    trigger_remaining: int | None = None
    num_steps: int | None = None
    policy_factory: str | None = None  # "module:function" -> Policy, instead of the target table
    threads: int | None = None  # torch threads per worker
    seed: int = 0
    task_kwargs: str | None = None  # JSON object of keyword arguments for the task (gym:ENV_ID, plugins)
    blend: str = "latest"
    fallback: str = "hold"
    deadline_ms: float | None = None
    guidance_weight: float | None = None  # rtc's beta (None: the strategy's default)
    ensemble_coeff: float | None = None  # ensemble's coefficient (None: the policy's, else the default)
    draft_tolerance: float | None = None  # draft's per-row tolerance (None: the strategy's default)
    # --draft-from: the onestep student artifact whose chunks are draft's drafts (None: the shifted chunk).
    # It is held by the policy, so it is part of the build (`build_key`), not of how an episode is played.
    draft_from: str | None = None

    def scheduler_config(self) -> Any:
        from hotloop.realtime.blending import BlendConfig
        from hotloop.realtime.scheduler import SchedulerConfig
        from hotloop.realtime.watchdog import WatchdogConfig

        return SchedulerConfig(BlendConfig(self.blend), WatchdogConfig(self.fallback, self.deadline_ms))

    def strategy_config(self, horizon: int, defaults: dict[str, Any] | None = None) -> Any:
        """The strategy's options for a policy of `horizon`; `defaults` (the policy's
        `strategy_defaults`) fill the ones not given (`hotloop.realtime.strategies.apply_defaults`)."""
        from hotloop.realtime.strategies import StrategyConfig, apply_defaults

        extra = {} if self.guidance_weight is None else {"max_guidance_weight": self.guidance_weight}
        config = StrategyConfig(
            horizon,
            self.execute_steps,
            self.trigger_remaining,
            ensemble_coeff=self.ensemble_coeff,
            draft_tolerance=self.draft_tolerance,
            draft_source="student" if self.draft_from else None,
            **extra,
        )
        return apply_defaults(self.strategy, config, defaults)

    pipeline: str | None = None  # conveyor-pick's layered perception chain (perception/pipeline.py)
    memory_cap_mb: float | None = None  # an artifact engine's resident-memory cap (--memory-cap-mb)
    fallback_target: str | None = None  # the smaller engine of the `engine` fallback (a target name)
    perturb: str | None = None  # --perturb NAME:VALUE,... (hotloop.sim.perturb)
    fit_state: bool = False  # --fit-state: a trained policy on a task of another state width


# EpisodeJob fields that only say how an episode is played (the strategy, the latency model, the
# watchdog), not what it is played with, each with the neutral value `build_key` gives it.
_PLAY_FIELDS: dict[str, Any] = {
    "strategy": "",
    "latency": "",
    "execute_steps": None,
    "trigger_remaining": None,
    "blend": "",
    "fallback": "",
    "deadline_ms": None,
    "guidance_weight": None,
    "ensemble_coeff": None,
    "draft_tolerance": None,
}


def build_key(job: EpisodeJob) -> EpisodeJob:
    """What decides a job's env and policy: jobs with equal keys share one `EpisodeRunner` (a sweep's cells
    that differ only in strategy, latency or watchdog: each episode resets both, so a record does not
    depend on what the runner played before). A pipeline or a perturbation wraps the policy and the latency
    model together (a perturbation changes the scene too), so such a job shares with itself only."""
    if job.pipeline or job.perturb:
        return job
    return dataclasses.replace(job, **_PLAY_FIELDS)


class EpisodeRunner:
    """Built once per worker and build key (`build_key`); `use(job)` switches to another job of the same
    build (cheap: strategy, latency and watchdog), `run(seed)` plays one episode."""

    def __init__(self, job: EpisodeJob) -> None:
        from hotloop.closedloop.evaluator import run_episode

        self._check(job)
        self.key = build_key(job)
        self.latency: Any = None  # a LatencyModel, or a PipelineLatency around one (`_play`)
        if job.threads is not None:
            import torch

            torch.set_num_threads(job.threads)
        self._play(job)  # the latency model first: a pipeline or perturbation wraps it below
        from hotloop.sim.tasks import make_task

        self.env = make_task(job.task, difficulty=job.difficulty, task_kwargs=job.task_kwargs)
        self.policy = build_policy(
            job, self.env
        )  # adapted to the task; a pipeline feeds it task observations
        self._check_policy(job)
        # What the run reports beside its figures: how the policy was fitted to the task, and the unit of
        # the positions its jump and jerk figures are in.
        adaptation = getattr(self.policy, "adaptation", None)
        # How the policy is meant to be executed (an ACT checkpoint's n_action_steps and ensembling
        # coefficient): the options the command line left unset.
        self.strategy_defaults = dict(getattr(self.policy, "strategy_defaults", None) or {})
        self._described: dict[str, Any] = {
            "adaptation": adaptation.describe() if adaptation is not None else None,
            "length_unit": self.env.task_spec.length_unit,
            "profile_note": getattr(self.env, "profile_note", None),  # said once, by the driver
            # The task's tick: latency is simulated in whole ticks (a gymnasium env's whole step).
            "step_ms": float(self.env.config.physics_dt) * 1e3,
        }
        if job.pipeline:
            from hotloop.perception.pipeline import attach_pipeline

            self.policy, self.latency = attach_pipeline(self.policy, self.env, job.pipeline, self.latency)
        if job.perturb:  # after the pipeline: its calibration is the nominal camera's, as a robot's file is
            from hotloop.sim.perturb import attach_perturbations

            self.policy, self.latency = attach_perturbations(self.policy, self.env, job.perturb, self.latency)
        # The `engine` fallback's smaller policy, adapted to the task like the main one. It reads the task's
        # observation directly (with --pipeline too: it must not wait for the chain the main one waits for).
        self.fallback_policy = (
            build_policy(
                dataclasses.replace(  # --memory-cap-mb and --draft-from are the main target's
                    job,
                    target=job.fallback_target,
                    policy_factory=None,
                    num_steps=None,
                    memory_cap_mb=None,
                    draft_from=None,
                ),
                self.env,
            )
            if job.fallback_target
            else None
        )
        from hotloop.closedloop.adapter import reads_images

        # Render only for a policy that looks (a state-only expert's episodes render nothing).
        self.render = reads_images(self.policy) or (
            self.fallback_policy is not None and reads_images(self.fallback_policy)
        )
        self._run = run_episode
        self.describe: dict[str, Any] = dict(self._described)

    @staticmethod
    def _check(job: EpisodeJob) -> None:
        from hotloop.realtime.strategies import default_strategies, make_strategy

        default_strategies().get(job.strategy)  # unknown name: fail before building anything
        # Settings that do not depend on the chunk length (the guidance weight) fail here; the ranges of
        # --execute-steps / --trigger-remaining need the policy's horizon and are checked at its first chunk.
        config = job.strategy_config(1 + max(job.execute_steps or 1, job.trigger_remaining or 0))
        if job.draft_from and make_strategy(job.strategy, config).describe().get("draft_source") != "student":
            from hotloop.errors import ConfigError

            raise ConfigError(
                f"--draft-from {job.draft_from} does nothing with --strategy {job.strategy}; it is for draft: "
                "drop it or add that strategy"
            )

    def _check_policy(self, job: EpisodeJob) -> None:
        """A strategy the policy cannot serve fails here, before any episode: `draft` needs a policy that
        says it checks drafts (`supports_draft`: a velocity network it can call)."""
        from hotloop.realtime.strategies import make_strategy

        mode = getattr(make_strategy(job.strategy, job.strategy_config(16)), "mode", None)
        if mode == "draft" and not getattr(self.policy, "supports_draft", False):
            from hotloop.errors import ConfigError
            from hotloop.realtime.draft import draft_refusal

            raise ConfigError(draft_refusal(job.policy_factory or job.target))

    def _play(self, job: EpisodeJob) -> None:
        """How `job`'s episodes are played: its watchdog, latency model and strategy."""
        from hotloop.closedloop.latency import parse_latency
        from hotloop.realtime.strategies import make_strategy

        self.job = job
        self.scheduler_config = job.scheduler_config()
        self.latency = parse_latency(job.latency)

        def strategy_for(horizon: int) -> Any:
            strategy = make_strategy(job.strategy, job.strategy_config(horizon, self.strategy_defaults))
            self.describe["strategy"] = strategy.describe()  # what ran, at the policy's own horizon
            return strategy

        self.strategy_for = strategy_for

    def use(self, job: EpisodeJob) -> None:
        """Play `job`'s episodes from now on, on this runner's env and policy (`build_key(job)` must be
        this runner's: only the strategy, the latency model and the watchdog change)."""
        if job == self.job:
            return
        if build_key(job) != self.key:
            raise ValueError("EpisodeRunner.use: a job of another build")
        self._check(job)
        self._play(job)
        self._check_policy(job)
        # A new dict: records already handed out keep the description of the job they ran.
        self.describe = dict(self._described)

    def close(self) -> None:
        self.env.close()

    def run(self, seed: int) -> dict[str, Any]:
        from hotloop.closedloop.evaluator import failed_record

        try:
            record = self._run(
                self.env,
                self.policy,
                self.strategy_for,
                self.latency,
                seed,
                config=self.scheduler_config,
                fallback_policy=self.fallback_policy,
                frame_ticks=getattr(self.policy, "frame_ticks", 0),
                on_frame=getattr(self.policy, "on_frame", None),
                render=self.render,
            )
            if hasattr(self.policy, "take_episode"):
                record["pipeline"] = self.policy.take_episode()
            record["run"] = self.describe  # lifted to the run's summary (eval_run), not kept per episode
            return record
        except MemoryCapError as e:  # the engine failed while running: an error episode, work kept
            return failed_record(seed, str(e))
        except NonFiniteOutputError as e:  # a broken model: the run stops, the episodes before it are kept
            name = self.job.policy_factory or self.job.target
            raise NonFiniteOutputError(f"{name}, episode seed {seed}: {e}") from None
        except HotloopError:
            raise  # bad configuration: every episode would fail the same way
        except Exception as e:  # noqa: BLE001 - a failing episode is a result, not a crash
            return failed_record(seed, _describe(e))


def build_policy(job: EpisodeJob, env: Any) -> Any:
    """The job's policy, seen through the adapter for `env`'s task spec (hotloop.closedloop.adapter)."""
    from hotloop.closedloop.adapter import adapt, request_views
    from hotloop.targets import TargetOptions, find_target

    if job.policy_factory:
        import importlib

        module, attr = job.policy_factory.split(":")
        policy = getattr(importlib.import_module(module), attr)()
    else:
        policy = find_target(job.target).build_policy(
            job.target,
            TargetOptions(
                num_steps=job.num_steps, seed=job.seed, memory_cap_mb=job.memory_cap_mb, threads=job.threads
            ),
        )
    if job.draft_from:
        use_draft_student(policy, job.draft_from, job.policy_factory or job.target)
    if hasattr(policy, "bind_task"):  # a policy that reads the task itself (expert:scripted)
        policy.bind_task(env)
    request_views(env, policy)  # a view the task renders only on request (the gantry's wrist camera)
    return adapt(policy, env.task_spec, policy_name=job.policy_factory or job.target, fit_state=job.fit_state)


def use_draft_student(policy: Any, student: str, name: str) -> None:
    """`--draft-from STUDENT`: `policy` (as its target built it) proposes its drafts with the onestep
    student there (`use_draft_student`, pi0 / pi0.5 in PyTorch), else one ConfigError naming the flag,
    before any episode: a policy that cannot check a draft, one that cannot hold a student, a folder that
    is not a onestep student (`hotloop.runtime.draft_student.read_student`), or a student that is not this
    teacher's (the family's check)."""
    from hotloop.errors import ConfigError
    from hotloop.realtime.draft import STUDENT_FAMILIES, draft_refusal, student_refusal
    from hotloop.runtime.draft_student import read_student

    if not getattr(policy, "supports_draft", False):
        raise ConfigError(student_refusal(student, f"{draft_refusal(name)}, without --draft-from"))
    use = getattr(policy, "use_draft_student", None)
    if use is None:
        raise ConfigError(
            student_refusal(
                student,
                f"{name} cannot hold a student beside it (its draft is the executing chunk); a student's draft "
                f"is for {STUDENT_FAMILIES}: drop --draft-from",
            )
        )
    use(read_student(student))


class RunnerCache:
    """The runners a worker holds, one per build key (`build_key`), at most `kept` of them (the least
    recently used is closed): a worker builds its env and policy once and plays every cell of that build."""

    def __init__(self, kept: int = 1) -> None:
        self.kept = kept
        self.runners: OrderedDict[EpisodeJob, EpisodeRunner] = OrderedDict()

    def holds(self, job: EpisodeJob) -> bool:
        return build_key(job) in self.runners

    def get(self, job: EpisodeJob) -> tuple[EpisodeRunner, float]:
        """A runner set to play `job`, and the seconds spent building it (0: one it held)."""
        key = build_key(job)
        runner = self.runners.get(key)
        build_s = 0.0
        if runner is None:
            t0 = time.perf_counter()
            runner = EpisodeRunner(job)
            build_s = time.perf_counter() - t0
            self.runners[key] = runner
            while len(self.runners) > self.kept:
                self.runners.popitem(last=False)[1].close()
        else:
            runner.use(job)
            self.runners.move_to_end(key)
        return runner, build_s

    def close(self) -> None:
        while self.runners:
            self.runners.popitem()[1].close()


def _describe(e: BaseException) -> str:
    """An unexpected exception as a user reads it: the message, the kind in brackets for a bug report."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else "no message"
    return f"{text} ({type(e).__name__})"


def _crash_record(seed: int, error: str) -> dict[str, Any]:
    from hotloop.closedloop.evaluator import failed_record

    return failed_record(seed, error)
