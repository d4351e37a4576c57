"""What a server may send a robot: an action map whose `actions` are numbers, every one finite.

Any transport (the openpi websocket server, `hotloop.serve.server`; a LeRobot gRPC server) judges each
answer with `action_fault` before it leaves: a policy that raised, answered something without
`actions`, or answered NaN / inf is an engine *fault*, counted by the server's watchdog
(`hotloop.serve.watchdog.ServerWatchdog`: `hotloop_engine_faults_total` on `/metrics`), and the request is
answered by the fallback engine when there is one, else by an error reply. A non-finite action never
reaches a robot.

`GuardedPolicy` is that rule for a transport that calls the policy synchronously on its own worker thread
(no deadline of its own): `infer(obs)` -> (action, "policy" | "fallback"), or `UnsafeActionsError` when
neither the policy nor a fallback gave a usable answer. The websocket server applies the same
`action_fault` inside its deadline-aware asynchronous path.

A `ConfigError` from a policy is the policy refusing that input (the client's error, not a fault): it is
raised as it is, and the fallback is not asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hotloop.errors import ConfigError
from hotloop.finite import non_finite_output


class UnsafeActionsError(RuntimeError):
    """Neither the policy nor a fallback engine answered actions a robot may get; the message says why."""


def action_fault(action: Any) -> str | None:
    """Why `action` must not be sent to a robot, or None when it may: it must be a map holding `actions`,
    numbers (not text or objects), all finite."""
    if not isinstance(action, Mapping) or "actions" not in action:
        return f"returned {type(action).__name__} without 'actions'"
    import numpy as np

    try:
        values = np.asarray(action["actions"])
    except (ValueError, TypeError):
        return "returned 'actions' that are not an array of numbers"
    if values.dtype.kind not in "biuf":
        return f"returned 'actions' of dtype {values.dtype}, not numbers"
    where = non_finite_output(values, "actions")
    return None if where is None else f"non-finite actions (NaN or inf): {where}"


@dataclass
class GuardedPolicy:
    """`policy` behind the guard, with the watchdog that counts its faults and the `fallback` policy (a
    smaller engine) that answers for it; both expose `infer(obs)`. Not thread-safe: one caller thread."""

    policy: Any
    watchdog: Any  # a ServerWatchdog (hotloop.serve.watchdog)
    fallback: Any = None

    def infer(self, obs: Any) -> tuple[Mapping[str, Any], str]:
        self.watchdog.started()
        try:
            action = self.policy.infer(obs)
        except ConfigError:
            raise  # the policy refused this input: the client's error, not an engine fault
        except Exception as exc:  # noqa: BLE001 - any failure of the engine is a fault the fallback covers
            fault = f"{type(exc).__name__}: {exc}"
        else:
            found = action_fault(action)
            if found is None:
                self.watchdog.fresh()
                return action, "policy"
            fault = found
        self.watchdog.fault(fault)
        return self.fallback_answer(obs, fault)

    def fallback_answer(self, obs: Any, fault: str) -> tuple[Mapping[str, Any], str]:
        """The fallback engine's answer for a request the policy failed (`fault`), checked the same way."""
        if self.fallback is None:
            raise UnsafeActionsError(f"the policy failed ({fault}) and there is no fallback engine")
        action = self.fallback.infer(obs)
        also = action_fault(action)
        if also is not None:
            raise UnsafeActionsError(f"the policy failed ({fault}) and the fallback engine too ({also})")
        return action, "fallback"


__all__ = ["GuardedPolicy", "UnsafeActionsError", "action_fault"]
