"""Scripted experts of our own for third-party gymnasium tasks (recorded with `hotloop record`).

Each acts on the `GymTask` it is given with hotloop's action for that task: an absolute target (the
task turns it into the env's native action every step). They read the env's state, the privileged
kind a perception stack would estimate, and decide from the current state alone (no hidden phase), so
a policy that imitates them can recover from where it finds itself.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from hotloop.errors import ConfigError

FETCH_OPEN, FETCH_CLOSED = 1.0, -1.0


class _GymExpert:
    family = ""

    def __init__(self, env: Any) -> None:
        if self.family not in getattr(env, "task_name", ""):
            raise ConfigError(f"{type(self).__name__} drives gym:{self.family}* tasks, not {env.task_name!r}")
        self.env = env

    def reset(self) -> None:
        pass


class FetchReachExpert(_GymExpert):
    """Go straight to the goal with the gripper open (the env limits each step to 5 cm)."""

    family = "FetchReach"

    def act(self, obs: dict[str, Any] | None = None) -> np.ndarray:
        raw = self.env.raw_observation()
        return np.array([*raw["desired_goal"], FETCH_OPEN], dtype=np.float32)


class FetchPickAndPlaceExpert(_GymExpert):
    """Above the block -> down around it -> close -> carry to the goal; reopen and retry on a miss.

    Holding is read from the state: the block between the fingertips and the fingers stopped by it
    (their gap near the block's 5 cm width rather than closed on nothing).
    """

    family = "FetchPickAndPlace"
    hover = 0.06  # m above the block while aligning
    block = 0.05  # block width (m)

    def act(self, obs: dict[str, Any] | None = None) -> np.ndarray:
        raw = self.env.raw_observation()
        o = raw["observation"]
        grip, block, goal = o[0:3], o[3:6], raw["desired_goal"]
        gap = float(o[9] + o[10])  # finger opening (m), about 0.1 open
        rel = block - grip
        xy_err = float(np.linalg.norm(rel[:2]))
        at_block = xy_err < 0.02 and abs(rel[2]) < 0.02
        if at_block and gap < self.block + 0.008:
            if gap < self.block - 0.015:  # closed on nothing: open and go round again
                return np.array([*grip[:2], grip[2] + 0.03, FETCH_OPEN], dtype=np.float32)
            return np.array([*goal, FETCH_CLOSED], dtype=np.float32)  # holding: carry it
        if at_block and xy_err < 0.01:
            return np.array([*block, FETCH_CLOSED], dtype=np.float32)  # around it: close
        if xy_err > 0.01:  # align above the block first, at hover height
            z = max(block[2] + self.hover, grip[2]) if xy_err > 0.03 else block[2] + self.hover
            return np.array([block[0], block[1], z, FETCH_OPEN], dtype=np.float32)
        return np.array([*block, FETCH_OPEN], dtype=np.float32)  # aligned: descend open


# --- PushT ---------------------------------------------------------------------------------------
T_POLYS = (  # the T in its body frame (gym_pusht add_tee, scale 30): the bar, then the stem
    np.array([(-60.0, 30.0), (60.0, 30.0), (60.0, 0.0), (-60.0, 0.0)]),
    np.array([(-15.0, 30.0), (-15.0, 120.0), (15.0, 120.0), (15.0, 30.0)]),
)
T_COM = np.array([0.0, 45.0])  # its centre of gravity in the body frame
AGENT_RADIUS = 15.0
GOAL = np.array([256.0, 256.0, math.pi / 4])


def _rot(theta: float) -> np.ndarray:
    c, s = math.cos(theta), math.sin(theta)
    return np.array([[c, -s], [s, c]])


def _wrap(a: float) -> float:
    return (a + math.pi) % (2 * math.pi) - math.pi


def _contact_candidates(spacing: float = 5.0) -> list[tuple[np.ndarray, np.ndarray]]:
    """Points on the T's outer boundary with their outward normals (body frame), every `spacing` px,
    where a pushing disc of the agent's radius fits without touching the other part of the T."""
    out = []
    for k, poly in enumerate(T_POLYS):
        other = T_POLYS[1 - k]
        centre = poly.mean(axis=0)
        for i in range(4):
            a, b = poly[i], poly[(i + 1) % 4]
            edge = b - a
            normal = np.array([edge[1], -edge[0]]) / np.linalg.norm(edge)
            if np.dot(normal, a - centre) < 0:
                normal = -normal
            for f in np.arange(spacing / 2, np.linalg.norm(edge), spacing) / np.linalg.norm(edge):
                p = a + f * edge
                disc = p + normal * (AGENT_RADIUS + 1.0)
                lo, hi = other.min(axis=0) - AGENT_RADIUS, other.max(axis=0) + AGENT_RADIUS
                if np.all(disc > lo) and np.all(disc < hi):
                    continue  # inside the other bar's reach: not a free face here
                out.append((p, normal))
    return out


T_POINTS, T_NORMALS = (np.array(v) for v in zip(*_contact_candidates(), strict=True))
T_INERTIA = 3000.0  # the T's moment of inertia in gym_pusht (mass 1, px^2), for the push model
ANGLE_WEIGHT = 50.0**2  # px^2 per rad^2: an angle error counts like a position error at 50 px


class PushTExpert(_GymExpert):
    """Greedy quasi-static pushing (the env kills free motion: the T moves only while pushed).

    Every step it scores each free contact point of the T by a rigid-body push model: pushing a point
    `p` with outward normal `n` by `delta` moves the T by `-n * J` and turns it by `(r x -n) * J / I`
    (J the impulse that moves the contact point `delta`). It picks the point and depth that leave the
    smallest pose error (position, and angle weighted at 50 px per radian), keeps pushing there while
    that still helps, and travels round the T (outside a clearance circle) to a new point when not.
    One piece of memory: the contact being pushed, so it does not hop between equal candidates.
    """

    family = "PushT"
    clearance = 92.0  # radius (px) around the centre of gravity to travel on between contacts

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self.contact: int | None = None

    def reset(self) -> None:
        self.contact = None

    @staticmethod
    def _scores(rot: np.ndarray, d_pos: np.ndarray, d_theta: float) -> tuple[np.ndarray, np.ndarray]:
        """(residual pose error, push depth) for every contact candidate at once."""
        r = (T_POINTS - T_COM) @ rot.T  # lever arms in the world frame
        push = -(T_NORMALS @ rot.T)
        c = r[:, 0] * push[:, 1] - r[:, 1] * push[:, 0]
        per_delta = 1.0 / (1.0 + c * c / T_INERTIA)  # impulse per px of contact travel (mass 1)
        a = push * per_delta[:, None]
        b = c * per_delta / T_INERTIA
        delta = (a @ d_pos + ANGLE_WEIGHT * b * d_theta) / (np.sum(a * a, axis=1) + ANGLE_WEIGHT * b * b)
        delta = np.clip(delta, 0.0, 12.0)
        residual = (
            np.sum((d_pos - a * delta[:, None]) ** 2, axis=1) + ANGLE_WEIGHT * (d_theta - b * delta) ** 2
        )
        return residual, delta

    def act(self, obs: dict[str, Any] | None = None) -> np.ndarray:
        base = self.env.env.unwrapped
        agent = np.array(base.agent.position, dtype=np.float64)
        pos = np.array(base.block.position, dtype=np.float64)
        theta = float(base.block.angle)
        rot = _rot(theta)
        com = pos + rot @ T_COM
        d_pos = GOAL[:2] + _rot(GOAL[2]) @ T_COM - com
        d_theta = _wrap(GOAL[2] - theta)
        now = float(d_pos @ d_pos + ANGLE_WEIGHT * d_theta**2)
        residuals, depths = self._scores(rot, d_pos, d_theta)
        best = int(np.argmin(residuals))
        keep = self.contact is not None and residuals[self.contact] < now - 0.2 * (now - residuals[best])
        self.contact = self.contact if keep else best
        assert self.contact is not None
        residual, delta = float(residuals[self.contact]), float(depths[self.contact])
        if residual >= now - 1e-6:
            return agent.astype(np.float32)  # no push helps: stay
        p, n = T_POINTS[self.contact], T_NORMALS[self.contact]
        normal = rot @ n
        contact = pos + rot @ p + normal * (AGENT_RADIUS + 1.0)  # the agent's centre when touching
        rel = agent - contact
        along = float(rel @ normal)  # > 0: outside, in front of the face
        across = float(np.linalg.norm(rel - along * normal))
        if -4.0 < along < 25.0 and across < 5.0:
            return np.clip(contact - normal * delta, 0, 512).astype(np.float32)
        return np.clip(self._route(agent, contact + normal * 10.0, com), 0, 512).astype(np.float32)

    def _route(self, agent: np.ndarray, target: np.ndarray, com: np.ndarray) -> np.ndarray:
        """Next waypoint towards `target` that keeps the agent outside the block's clearance circle."""
        seg = target - agent
        length = float(np.linalg.norm(seg))
        t = float(np.clip(np.dot(com - agent, seg) / max(length**2, 1e-9), 0.0, 1.0))
        a_now = math.atan2(agent[1] - com[1], agent[0] - com[0])
        a_goal = math.atan2(target[1] - com[1], target[0] - com[0])
        if np.linalg.norm(com - (agent + t * seg)) > self.clearance - 12 or abs(_wrap(a_goal - a_now)) < 0.3:
            return target  # the straight line clears the block, or dives in along the contact's bearing
        # Walk round the circle towards the target's bearing, at most ~40 degrees per step.
        angle = a_now + float(np.clip(_wrap(a_goal - a_now), -0.7, 0.7))
        return com + (self.clearance + 8.0) * np.array([math.cos(angle), math.sin(angle)])
