"""Named, seeded, parameterised perturbations for closed-loop evaluation (`hotloop eval --perturb`).

A plan is only trusted once it holds when the world is not the one it was trained in (R7.4). Each
perturbation is applied where it happens physically:

| name | value | where | what |
|---|---|---|---|
| `lighting` | factor (0, 3] | scene | every light's diffuse and the headlight scaled (0.3: a dim room) |
| `camera-shift` | metres [0, 0.2] | scene | the top camera moved by this much in a random horizontal direction per episode |
| `camera-rotate` | degrees [0, 30] | scene | the top camera turned by this much about a random axis per episode |
| `box-colour` | fraction [0, 1] | scene | the box's colour blended this far towards grey (0.5 0.5 0.5) |
| `belt-speed` | factor (0, 3] | scene | the belt (and the box on it) runs at this multiple of the drawn speed |
| `image-noise` | std [0, 1] | sensor | Gaussian pixel noise, std as a fraction of 255, every view |
| `blur` | sigma px [0, 10] | sensor | Gaussian blur of every view |
| `drop-frames` | probability [0, 1) | sensor | the camera delivers the previous frame again (images only) |
| `state-noise` | std [0, 0.1] | sensor | Gaussian noise on every number of the state (m for positions) |
| `latency-jitter` | mean ms [0, 1000] | time | each inference waits an extra exponential delay of this mean |

The scene ones are for the built-in gantry tasks (conveyor-pick, reach; `belt-speed` for conveyor-pick);
the sensor and time ones work on every task. They move the world, not the robot's knowledge of it: the
perception chain's camera calibration (`--pipeline`) is read before the camera is moved, as a robot's
calibration file is, so a shifted camera gives a biased detector.

Seeding: every random draw comes from a generator seeded by (episode seed, perturbation name), so the
same seed gets the same camera pose and the same noise whichever worker runs it and whatever else is
perturbed. Spec: `NAME:VALUE[,NAME:VALUE...]`; several perturbations apply together.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from hotloop.errors import ConfigError

# name -> (low, high, low inclusive, kind)
PERTURBATIONS: dict[str, tuple[float, float, bool, str]] = {
    "lighting": (0.0, 3.0, False, "scene"),
    "camera-shift": (0.0, 0.2, True, "scene"),
    "camera-rotate": (0.0, 30.0, True, "scene"),
    "box-colour": (0.0, 1.0, True, "scene"),
    "belt-speed": (0.0, 3.0, False, "scene"),
    "image-noise": (0.0, 1.0, True, "sensor"),
    "blur": (0.0, 10.0, True, "sensor"),
    "drop-frames": (0.0, 1.0, True, "sensor"),
    "state-noise": (0.0, 0.1, True, "sensor"),
    "latency-jitter": (0.0, 1000.0, True, "time"),
}
GREY = np.array([0.5, 0.5, 0.5])


@dataclass(frozen=True)
class Perturbation:
    name: str
    value: float

    @property
    def kind(self) -> str:
        return PERTURBATIONS[self.name][3]

    def spec(self) -> str:
        return f"{self.name}:{self.value:g}"


def parse_perturb(spec: str, flag: str = "--perturb") -> tuple[Perturbation, ...]:
    """`NAME:VALUE[,NAME:VALUE...]` -> perturbations; an unknown name or a value out of range is one
    ConfigError naming it."""
    out: list[Perturbation] = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, sep, text = item.partition(":")
        name = name.strip()
        if name not in PERTURBATIONS:
            raise ConfigError(
                f"{flag} {item!r}: unknown perturbation {name!r}; use one of {', '.join(PERTURBATIONS)}"
            )
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        low, high, closed, _ = PERTURBATIONS[name]
        inside = (value >= low if closed else value > low) and value <= high
        if not sep or not np.isfinite(value) or not inside or (name == "drop-frames" and value >= 1.0):
            bracket = "[" if closed else "("
            end = ")" if name == "drop-frames" else "]"
            raise ConfigError(
                f"{flag} {item!r}: {name} takes a value in {bracket}{low:g}, {high:g}{end}, e.g. {name}:{high / 4:g}"
            )
        if any(p.name == name for p in out):
            raise ConfigError(f"{flag} {spec!r} names {name} twice")
        out.append(Perturbation(name, value))
    if not out:
        raise ConfigError(f"{flag} {spec!r} names no perturbation; e.g. {flag} lighting:0.3")
    return tuple(out)


def sweep_points(spec: str) -> list[str]:
    """`--sweep-perturb A:1,B:2` -> one point per perturbation: ["A:1", "B:2"] (each checked)."""
    return [p.spec() for p in parse_perturb(spec, "--sweep-perturb")]


def _rng(seed: int | None, name: str, *extra: int) -> np.random.Generator:
    return np.random.default_rng([0 if seed is None else int(seed), zlib.crc32(name.encode()), *extra])


class Perturber:
    """Applies a set of perturbations to one task environment and its observations."""

    def __init__(self, env: Any, perturbations: tuple[Perturbation, ...]) -> None:
        self.env = env
        self.items = {p.name: p.value for p in perturbations}
        scene = [p.name for p in perturbations if p.kind == "scene"]
        model: Any = getattr(env, "model", None)
        if scene and (model is None or not hasattr(env, "config") or "top" not in _camera_names(model)):
            raise ConfigError(
                f"--perturb {', '.join(scene)}: scene perturbations change the MuJoCo scene of a built-in gantry task; task "
                f"{getattr(env, 'task_name', env)!r} takes the sensor and time ones only"
            )
        if "belt-speed" in self.items and not hasattr(env, "belt_speed"):
            raise ConfigError("--perturb belt-speed is for conveyor-pick (the task has no belt)")
        self.seed: int | None = None
        self._step = 0
        self._last_images: dict[str, np.ndarray] | None = None
        if scene:
            self._nominal = {
                "light_diffuse": model.light_diffuse.copy(),
                "headlight": (model.vis.headlight.diffuse.copy(), model.vis.headlight.ambient.copy()),
                "cam_pos": model.cam_pos.copy(),
                "cam_quat": model.cam_quat.copy(),
                "geom_rgba": model.geom_rgba.copy(),
            }

    def describe(self) -> dict[str, Any]:
        return {"spec": ",".join(f"{k}:{v:g}" for k, v in self.items.items()), **self.items}

    # ---- scene ------------------------------------------------------------------------------------

    def begin_episode(self, seed: int | None) -> None:
        """Called before the task's reset: the scene for this episode (from the nominal one)."""
        self.seed = seed
        self._step = 0
        self._last_images = None
        if not hasattr(self, "_nominal"):
            return
        from hotloop.sim.mujoco_import import import_mujoco

        import_mujoco()
        import mujoco

        model, nom = self.env.model, self._nominal
        model.light_diffuse[:] = nom["light_diffuse"]
        model.vis.headlight.diffuse[:], model.vis.headlight.ambient[:] = nom["headlight"]
        model.cam_pos[:] = nom["cam_pos"]
        model.cam_quat[:] = nom["cam_quat"]
        model.geom_rgba[:] = nom["geom_rgba"]
        cam = model.camera("top").id
        if "lighting" in self.items:
            f = self.items["lighting"]
            model.light_diffuse[:] = np.clip(nom["light_diffuse"] * f, 0.0, 1.0)
            model.vis.headlight.diffuse[:] = np.clip(nom["headlight"][0] * f, 0.0, 1.0)
            model.vis.headlight.ambient[:] = np.clip(nom["headlight"][1] * f, 0.0, 1.0)
        if "camera-shift" in self.items:
            angle = _rng(seed, "camera-shift").uniform(0.0, 2 * np.pi)
            model.cam_pos[cam, :2] += self.items["camera-shift"] * np.array([np.cos(angle), np.sin(angle)])
        if "camera-rotate" in self.items:
            axis = _rng(seed, "camera-rotate").normal(size=3)
            axis /= np.linalg.norm(axis)
            turn = np.zeros(4)
            mujoco.mju_axisAngle2Quat(turn, axis, np.radians(self.items["camera-rotate"]))
            out = np.zeros(4)
            mujoco.mju_mulQuat(out, turn, nom["cam_quat"][cam])
            model.cam_quat[cam] = out
        if "box-colour" in self.items and "box" in _geom_names(model):
            gid = model.geom("box").id
            f = self.items["box-colour"]
            model.geom_rgba[gid, :3] = (1 - f) * nom["geom_rgba"][gid, :3] + f * GREY

    def after_reset(self) -> bool:
        """Called after the task's reset; True when the start state changed (observe again)."""
        if "belt-speed" not in self.items:
            return False
        env = self.env
        env.belt_speed *= self.items["belt-speed"]
        env.data.qvel[env._box_dof] = env.belt_speed
        env.data.qvel[env._belt_dof] = env.belt_speed
        return True

    # ---- sensor -----------------------------------------------------------------------------------

    def observe(self, obs: dict[str, Any]) -> dict[str, Any]:
        """The observation as the robot's sensors deliver it."""
        self._step += 1
        out = dict(obs)
        rng = _rng(self.seed, "sensor", self._step)
        if "state-noise" in self.items and "state" in obs:
            state = np.asarray(obs["state"])
            out["state"] = (state + rng.normal(0.0, self.items["state-noise"], state.shape)).astype(
                state.dtype
            )
        images = obs.get("images")
        if images:
            images = dict(images)
            if (
                "drop-frames" in self.items
                and self._last_images is not None
                and rng.random() < self.items["drop-frames"]
            ):
                images = dict(self._last_images)  # the camera sent the previous frame again
            else:
                if "blur" in self.items and self.items["blur"] > 0:
                    images = {k: _blur(v, self.items["blur"]) for k, v in images.items()}
                if "image-noise" in self.items and self.items["image-noise"] > 0:
                    std = 255.0 * self.items["image-noise"]
                    images = {
                        k: np.clip(v + rng.normal(0.0, std, v.shape), 0, 255).astype(np.uint8)
                        for k, v in images.items()
                    }
                self._last_images = images
            out["images"] = images
        return out


def _camera_names(model: Any) -> set[str]:
    return {model.camera(i).name for i in range(model.ncam)}


def _geom_names(model: Any) -> set[str]:
    return {model.geom(i).name for i in range(model.ngeom)}


def _blur(image: np.ndarray, sigma: float) -> np.ndarray:
    """Separable Gaussian blur of an (H, W, C) uint8 image (edges replicated)."""
    radius = max(1, int(np.ceil(3 * sigma)))
    x = np.arange(-radius, radius + 1)
    kernel = np.exp(-(x**2) / (2 * sigma**2))
    kernel /= kernel.sum()
    img = np.asarray(image, dtype=np.float32)
    for axis in (0, 1):
        pad = [(0, 0)] * img.ndim
        pad[axis] = (radius, radius)
        padded = np.pad(img, pad, mode="edge")
        img = sum(
            kernel[i] * np.take(padded, np.arange(i, i + img.shape[axis]), axis=axis)
            for i in range(len(kernel))
        )
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


class PerturbedPolicy:
    """The policy seen through the perturbed sensors (every other attribute is the wrapped policy's)."""

    def __init__(self, inner: Any, perturber: Perturber) -> None:
        self.inner = inner
        self.perturber = perturber

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def reset(self) -> None:
        self.inner.reset()

    def infer(self, obs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        return self.inner.infer(self.perturber.observe(obs), *args, **kwargs)

    @property
    def on_frame(self) -> Any:
        """Camera-rate perception (`--pipeline ...camera_hz=N`) sees the perturbed frames too."""
        inner = getattr(self.inner, "on_frame", None)
        if inner is None:
            return None
        return lambda obs: inner(self.perturber.observe(obs))


@dataclass(frozen=True)
class JitteredLatency:
    """The loop's latency model plus an exponential extra delay (`latency-jitter:MEAN_MS`), drawn from
    the evaluator's own seeded generator."""

    base: Any
    mean_ms: float

    @property
    def kind(self) -> str:
        return str(self.base.kind)

    @property
    def spec(self) -> str:
        return str(self.base.spec)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)

    def describe(self) -> dict[str, Any]:
        return {**self.base.describe(), "jitter": {"distribution": "exponential", "mean_ms": self.mean_ms}}

    def sample_ms(self, measured_ms: float, rng: np.random.Generator) -> float:
        return float(self.base.sample_ms(measured_ms, rng)) + float(rng.exponential(self.mean_ms))


def attach_perturbations(policy: Any, env: Any, spec: str, latency: Any) -> tuple[Any, Any]:
    """Perturb `env` (its scene and resets), the observations `policy` sees and the loop's `latency`."""
    perturbations = parse_perturb(spec)
    perturber = Perturber(env, perturbations)
    reset = env.reset

    def perturbed_reset(*, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        perturber.begin_episode(seed)
        obs, info = reset(seed=seed, options=options)
        if perturber.after_reset():
            obs, info = env.observe(), env.info()
        return obs, info

    env.reset = perturbed_reset  # this worker's own env: its episodes all run perturbed
    env.perturbation = perturber.describe()
    jitter = perturber.items.get("latency-jitter")
    if jitter:
        latency = JitteredLatency(latency, jitter)
    return PerturbedPolicy(policy, perturber), latency
