"""The one adapter between a policy and a task: `adapt(policy, task_spec)`.

It reads the policy's `PolicySpec` and the task's `TaskSpec` once, decides every mapping up front
(which task view feeds which policy view, at what size; how the state is padded or cropped; how the
actions are cropped, padded or turned absolute) and then applies it on every observation. What it
cannot map is a `ConfigError` naming the mismatch, raised before any episode runs:

- the policy needs more camera views (or a named view) than the task renders;
- the policy needs a state and the task has none;
- a trained policy (absolute or end-effector-delta actions) reads a state of another width than the
  task gives: padding or cropping it feeds the policy numbers it never saw (a 39-number state cut to 10),
  so it runs only with `fit_state` (`hotloop eval --fit-state`), and `Adaptation.note` says so;
- a trained policy returns fewer action dimensions than the task needs (only "any"-meaning, i.e.
  untrained, policies are padded);
- "ee_delta" actions on a task that does not say where its end effector is.

A policy without a spec (a user's `--policy-factory`) gets the task's observation unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hotloop.errors import ConfigError
from hotloop.families.frames import resize_with_pad
from hotloop.policy import seed_noise
from hotloop.policy_spec import ImageSpec, PolicySpec, TaskSpec


@dataclass(frozen=True)
class Adaptation:
    """Every mapping decided once: `views[i]` = (task view key, policy view spec)."""

    views: tuple[tuple[str, ImageSpec], ...]
    images_as: str
    state_dim: int | None
    task_state_dim: int
    action_dim: int
    task_action_dim: int
    action_pad: tuple[float, ...]  # values for the task's action dims the policy does not produce
    ee_delta: tuple[int, ...]  # state indices added to the first actions ("ee_delta" policies)
    prompt: bool
    note: str | None = None  # a mismatch run on request (fit_state): said once on stderr by the driver

    def describe(self) -> dict[str, Any]:
        return {
            "views": [
                {"task": key, "policy": spec.key, "size": [spec.height, spec.width]}
                for key, spec in self.views
            ],
            "state": f"{self.task_state_dim} -> {self.state_dim}"
            if self.state_dim is not None
            else "not used",
            "actions": f"{self.action_dim} -> {self.task_action_dim}",
            "action_pad": list(self.action_pad),
            "ee_delta": bool(self.ee_delta),
            "note": self.note,
        }


def plan(
    policy_spec: PolicySpec, task: TaskSpec, policy_name: str = "the policy", fit_state: bool = False
) -> Adaptation:
    """Decide the mapping, or raise ConfigError naming what cannot be adapted (`fit_state`: run a trained
    policy on a task whose state width differs, zero-padded or cropped, with a note)."""
    where = f"{policy_name} on task {task.name!r}"
    provided = {i.key: i for i in task.images}
    used: set[str] = set()
    views: list[tuple[str, ImageSpec]] = []
    for want in policy_spec.images:  # named views first take their own; "*" views take the rest in order
        if want.key != "*" and want.key in provided:
            used.add(want.key)
    free = [i.key for i in task.images if i.key not in used]
    for want in policy_spec.images:
        if want.key == "*":
            if free:
                views.append((free.pop(0), want))
        elif want.key in provided:
            views.append((want.key, want))
    if len(views) < policy_spec.min_views:
        needed = [i.key for i in policy_spec.images[: policy_spec.min_views]]
        raise ConfigError(
            f"cannot adapt {where}: it needs {policy_spec.min_views} camera view(s) {needed} and the task "
            f"renders {[i.key for i in task.images] or 'none'}"
        )
    if policy_spec.state_dim and task.state_dim == 0:
        raise ConfigError(
            f"cannot adapt {where}: it needs a state of {policy_spec.state_dim} numbers and the task has none"
        )
    note = None
    trained = policy_spec.action_meaning != "any"  # random or benchmark weights read anything
    if trained and policy_spec.state_dim and task.state_dim and policy_spec.state_dim != task.state_dim:
        how = "zero-padded" if task.state_dim < policy_spec.state_dim else "cut"
        mismatch = (
            f"{where}: it was trained on a state of {policy_spec.state_dim} numbers and the task gives "
            f"{task.state_dim} ({_names(task.state_names)}), which would be {how} to {policy_spec.state_dim}"
        )
        if not fit_state:
            raise ConfigError(
                f"cannot adapt {mismatch}: numbers it never saw; give a policy trained on this task (`hotloop "
                "train-demo --dataset` of its recording), or --fit-state to run it anyway"
            )
        note = f"--fit-state: {mismatch}; its results say little about a policy trained for this task"
    d_policy, d_task = policy_spec.action_dim, task.action_dim
    pad: tuple[float, ...] = ()
    if d_policy < d_task:
        if policy_spec.action_meaning != "any":
            raise ConfigError(
                f"cannot adapt {where}: it returns {d_policy} action dimension(s) and the task needs "
                f"{d_task} ({', '.join(task.action_names)})"
            )
        lo = np.asarray(task.action_low or [0.0] * d_task, dtype=np.float64)
        hi = np.asarray(task.action_high or [0.0] * d_task, dtype=np.float64)
        pad = tuple(float(v) for v in ((lo + hi) / 2)[d_policy:])
    ee: tuple[int, ...] = ()
    if policy_spec.action_meaning == "ee_delta":
        if len(task.ee_state) != 3:
            raise ConfigError(
                f"cannot adapt {where}: its actions are end-effector deltas and the task does not name "
                "its end-effector position in the state"
            )
        ee = task.ee_state
    return Adaptation(
        views=tuple(views),
        images_as=policy_spec.images_as,
        state_dim=policy_spec.state_dim,
        task_state_dim=task.state_dim,
        action_dim=d_policy,
        task_action_dim=d_task,
        action_pad=pad,
        ee_delta=ee,
        prompt=policy_spec.prompt,
        note=note,
    )


def _names(names: tuple[str, ...], most: int = 6) -> str:
    shown = ", ".join(names[:most])
    return shown + (f", ... ({len(names)} in all)" if len(names) > most else "")


class AdaptedPolicy:
    """A policy seen through an `Adaptation`: takes the task's observation, returns the task's actions."""

    def __init__(self, policy: Any, adaptation: Adaptation) -> None:
        self.policy = policy
        self.adaptation = adaptation

    def reset(self) -> None:
        self.policy.reset()

    def seed_noise(self, episode_seed: int) -> None:
        seed_noise(self.policy, episode_seed)

    @property
    def strategy_defaults(self) -> dict[str, Any]:
        """The wrapped policy's declared execution (`hotloop.realtime.strategies.apply_defaults`)."""
        return dict(getattr(self.policy, "strategy_defaults", None) or {})

    @property
    def supports_draft(self) -> bool:
        """Whether the wrapped policy can check a draft chunk (`--strategy draft`)."""
        return bool(getattr(self.policy, "supports_draft", False))

    def observation(self, obs: dict[str, Any]) -> dict[str, Any]:
        a = self.adaptation
        out: dict[str, Any] = {}
        if a.views:
            images = {
                spec.key if spec.key != "*" else key: resize_with_pad(
                    np.asarray(obs["images"][key], dtype=np.uint8), spec.height, spec.width
                )
                for key, spec in a.views
            }
            out["images"] = np.stack(list(images.values())) if a.images_as == "array" else images
        if a.state_dim is not None:
            state = np.asarray(obs["state"], dtype=np.float32).reshape(-1)[: a.state_dim]
            out["state"] = np.pad(state, (0, a.state_dim - state.size))
        if a.prompt and "prompt" in obs:
            out["prompt"] = obs["prompt"]
        return out

    def actions(self, actions: Any, state: Any) -> np.ndarray:
        a = self.adaptation
        x = np.asarray(actions, dtype=np.float64)
        if x.ndim == 3 and x.shape[0] == 1:
            x = x[0]
        if x.ndim != 2 or x.shape[1] != a.action_dim:
            raise ConfigError(
                f"the policy returned actions of shape {x.shape}; its spec says (horizon, {a.action_dim})"
            )
        x = x[:, : a.task_action_dim]
        if a.action_pad:
            x = np.concatenate([x, np.broadcast_to(a.action_pad, (len(x), len(a.action_pad)))], axis=1)
        if a.ee_delta:
            x = x.copy()
            x[:, :3] += np.asarray(state, dtype=np.float64)[list(a.ee_delta)]
        return x.astype(np.float32)

    def guidance(self, obs: dict[str, Any]) -> dict[str, Any]:
        """RTC's inputs (`hotloop.realtime.rtc`) carried over: the previous chunk's actions, which the
        scheduler keeps in the task's action space, mapped back into the policy's (the inverse of
        `actions`). Without this the policy never sees them and `--strategy rtc` cannot run."""
        from hotloop.realtime.draft import TOLERANCE_KEY
        from hotloop.realtime.rtc import DELAY_KEY, MAX_GUIDANCE_WEIGHT_KEY, MODE_KEY, PREV_ACTIONS_KEY

        if PREV_ACTIONS_KEY not in obs:
            return {}
        a = self.adaptation
        if a.action_dim > a.task_action_dim:
            raise ConfigError(
                f"--strategy rtc cannot guide this policy: it returns {a.action_dim} action dimensions and "
                f"the task keeps {a.task_action_dim}, so the rest of the executing chunk is unknown; use "
                "--strategy async"
            )
        prev = np.asarray(obs[PREV_ACTIONS_KEY], dtype=np.float64)[:, : a.action_dim].copy()
        if a.ee_delta:
            prev[:, :3] -= np.asarray(obs["state"], dtype=np.float64)[list(a.ee_delta)]
        out: dict[str, Any] = {PREV_ACTIONS_KEY: prev.astype(np.float32)}
        for key in (DELAY_KEY, MAX_GUIDANCE_WEIGHT_KEY, MODE_KEY, TOLERANCE_KEY):
            if key in obs:
                out[key] = obs[key]
        return out

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        from hotloop.realtime.draft import DRAFT_KEY
        from hotloop.realtime.rtc import GUIDED_KEY, MODE_KEY

        out = self.policy.infer({**self.observation(obs), **self.guidance(obs)})
        if not isinstance(out, dict) or "actions" not in out:
            raise ConfigError("policy.infer must return a dict with an 'actions' array (horizon, action_dim)")
        result: dict[str, Any] = {"actions": self.actions(out["actions"], obs.get("state"))}
        # The scheduler checks that the guidance was applied, and how; a draft check's statistics are counted.
        for key in (GUIDED_KEY, MODE_KEY, DRAFT_KEY):
            if key in out:
                result[key] = out[key]
        return result


def request_views(env: Any, policy: Any) -> tuple[str, ...]:
    """Turn on the task views `policy`'s spec names that `env` renders only on request (its task spec's
    `optional_images`, e.g. the gantry's wrist camera); returns the keys turned on. A task renders such a
    view only for a policy that reads it, so the others keep their cost and their observations."""
    spec = policy_spec_of(policy)
    task = env.task_spec
    optional = {i.key for i in task.optional_images}
    wanted = [i.key for i in spec.images if i.key in optional] if spec is not None else []
    if wanted:
        env.set_views((*(i.key for i in task.images), *wanted))
    return tuple(wanted)


def reads_images(policy: Any) -> bool:
    """Whether `policy` looks at camera images: an adapted policy only when it maps a view; a policy that
    says `reads_images = False` (a state-only scripted expert) never; any other policy, to be safe, does.
    The evaluator renders views only for a policy that reads them."""
    if isinstance(policy, AdaptedPolicy):
        return bool(policy.adaptation.views)
    return bool(getattr(policy, "reads_images", True))


def policy_spec_of(policy: Any) -> PolicySpec | None:
    spec = getattr(policy, "spec", None)
    return spec if isinstance(spec, PolicySpec) else None


class ObservingAdaptedPolicy(AdaptedPolicy):
    """An adapted policy with the history hook (`hotloop.policy.observes`): every period's observation is
    mapped like an inference's and handed on. Only policies that have the hook get it, so the control
    loop observes no more often than before for the others."""

    def observe(self, obs: dict[str, Any]) -> None:
        self.policy.observe(self.observation(obs))


def adapt(policy: Any, task: TaskSpec, policy_name: str = "the policy", fit_state: bool = False) -> Any:
    """Wrap `policy` for `task` through its spec; a policy without a spec is returned as it is."""
    from hotloop.policy import observes

    spec = policy_spec_of(policy)
    if spec is None:
        return policy
    kind = ObservingAdaptedPolicy if observes(policy) else AdaptedPolicy
    return kind(policy, plan(spec, task, policy_name, fit_state))
