"""Named, seeded, parameterised perturbations for closed-loop evaluation (`hotloop eval --perturb`) and
recorded data (`hotloop record --perturb`: the scene as here, sensor ones on what is stored).

A plan is only trusted once it holds when the world is not the one it was trained in (R7.4). Each
perturbation is applied where it happens physically:

| name | value | where | what |
|---|---|---|---|
| `lighting` | factor (0, 3] | scene | every light's diffuse and the headlight scaled (0.3: a dim room) |
| `camera-shift` | metres [0, 0.2] | scene | the top camera moved by this much in a random horizontal direction per episode |
| `camera-rotate` | degrees [0, 30] | scene | the top camera turned by this much about a random axis per episode |
| `box-colour` | fraction [0, 1] | scene | the box's colour blended this far towards grey (0.5 0.5 0.5) |
| `box-size` | factor [0.5, 1.5] | scene | the box (conveyor-pick) this many times its 4 cm, same mass |
| `distractors` | count 0..5 | scene | this many other objects on the belt (or table), carried along, seeded shape, size, colour and place |
| `occlusion` | metres [0, 0.2] | scene | an opaque plate above the workspace hides a square this wide of the box's path from the top camera |
| `belt-speed` | factor (0, 3] | scene | the belt (and the box on it) runs at this multiple of the drawn speed |
| `image-noise` | std [0, 1] | sensor | Gaussian pixel noise, std as a fraction of 255, every view |
| `blur` | sigma px [0, 10] | sensor | Gaussian blur of every view |
| `drop-frames` | probability [0, 1) | sensor | the camera delivers the previous frame again (images only) |
| `state-noise` | std [0, 0.1] | sensor | Gaussian noise on every number of the state (m for positions) |
| `latency-jitter` | mean ms [0, 1000] | time | each inference waits an extra exponential delay of this mean |

The scene ones are for the built-in gantry tasks (conveyor-pick, reach; `belt-speed` and `box-size` for
conveyor-pick). `distractors` and `occlusion` add bodies to the scene once (`GantryEnv.add_bodies`):
distractors are real objects (a free joint, 50 g, friction like the box's) placed each episode on the
belt away from the box and moving at the belt's speed, so the gripper can hit them and they can hit the
box; the occluder is a thin plate 45 cm up (above anything the gantry reaches, no collisions) on the top
camera's line of sight to a random point of the box's path, sized so that it hides a square of VALUE
metres there (partial occlusion when the box passes its edge, whole when under its middle).
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

from hotloop.closedloop.latency import WrappedLatency
from hotloop.errors import ConfigError
from hotloop.policy import PolicyWrapper

# name -> (low, high, low inclusive, kind)
PERTURBATIONS: dict[str, tuple[float, float, bool, str]] = {
    "lighting": (0.0, 3.0, False, "scene"),
    "camera-shift": (0.0, 0.2, True, "scene"),
    "camera-rotate": (0.0, 30.0, True, "scene"),
    "box-colour": (0.0, 1.0, True, "scene"),
    "belt-speed": (0.0, 3.0, False, "scene"),
    "box-size": (0.5, 1.5, True, "scene"),
    "distractors": (0.0, 5.0, True, "scene"),
    "occlusion": (0.0, 0.2, True, "scene"),
    "image-noise": (0.0, 1.0, True, "sensor"),
    "blur": (0.0, 10.0, True, "sensor"),
    "drop-frames": (0.0, 1.0, True, "sensor"),
    "state-noise": (0.0, 0.1, True, "sensor"),
    "latency-jitter": (0.0, 1000.0, True, "time"),
}
GREY = np.array([0.5, 0.5, 0.5])
WHOLE = ("distractors",)  # perturbations whose value is a count
OCCLUDER_Z = 0.45  # the occluding plate's height (m): above the workspace (0.35) and the gripper's reach
DISTRACTOR_GAP = 0.09  # m between a distractor's centre and the box's (or another's) at the start


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
        if name in WHOLE and value != int(value):
            raise ConfigError(f"{flag} {item!r}: {name} is a count, a whole number in [{low:g}, {high:g}]")
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
                f"{getattr(env, 'task_name', env)!r} takes the sensor ones only (and, in eval, latency-jitter)"
            )
        if "belt-speed" in self.items and not hasattr(env, "belt_speed"):
            raise ConfigError("--perturb belt-speed is for conveyor-pick (the task has no belt)")
        if "box-size" in self.items and not hasattr(env, "box_half"):
            raise ConfigError("--perturb box-size is for conveyor-pick (the task has no box)")
        self.seed: int | None = None
        self._step = 0
        self._last_images: dict[str, np.ndarray] | None = None
        self.distractors = int(self.items.get("distractors", 0))
        occlusion = self.items.get("occlusion", 0.0)
        if self.distractors or occlusion:
            # Bodies the scene lacks: added once (a rebuild), then placed and drawn per episode.
            env.add_bodies(_distractor_xml(self.distractors) + (_occluder_xml() if occlusion else ""))
            model = env.model
        if occlusion:
            self._occluder = _Occluder.for_scene(model, occlusion)
        if scene:
            self._nominal = {
                "light_diffuse": model.light_diffuse.copy(),
                "headlight": (model.vis.headlight.diffuse.copy(), model.vis.headlight.ambient.copy()),
                "cam_pos": model.cam_pos.copy(),
                "cam_quat": model.cam_quat.copy(),
                "geom_rgba": model.geom_rgba.copy(),
                "geom_size": model.geom_size.copy(),
                "body_inertia": model.body_inertia.copy(),
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
        if "box-size" in self.items:  # same mass: the inertia scales with the size squared
            f = self.items["box-size"]
            gid = model.geom("box").id
            _resize(model, gid, nom["geom_size"][gid] * f, nom["body_inertia"][model.geom_bodyid[gid]] * f**2)
        if self.distractors:
            rng = _rng(seed, "distractors")
            for i in range(self.distractors):
                gid = model.geom(f"distractor{i}").id
                half = rng.uniform(0.012, 0.025, 3)
                if model.geom_type[gid] == mujoco.mjtGeom.mjGEOM_CYLINDER:
                    half = np.array([half[0], rng.uniform(0.012, 0.03), 0.0])  # radius, half height
                _resize(model, gid, half, _inertia(model, gid, half))
                model.geom_rgba[gid, :3] = rng.uniform(0.1, 0.95, 3)
        if hasattr(self, "_occluder"):
            self._occluder.place(model, _rng(seed, "occlusion"))
        if "box-size" in self.items or self.distractors:
            mujoco.mj_setConst(model, mujoco.MjData(model))  # the solver's weights for the new sizes

    def after_reset(self) -> bool:
        """Called after the task's reset; True when the start state changed (observe again)."""
        if "belt-speed" not in self.items and not self.distractors:
            return False
        env = self.env
        if "belt-speed" in self.items:
            env.belt_speed *= self.items["belt-speed"]
            env.data.qvel[env._box_dof] = env.belt_speed
            env.data.qvel[env._belt_dof] = env.belt_speed
        if self.distractors:
            self._place_distractors()
        return True

    def _place_distractors(self) -> None:
        """On the belt (or table), clear of the box and of each other, riding at the belt's speed."""
        from hotloop.sim.mujoco_import import import_mujoco
        from hotloop.sim.tasks.gantry import BELT_TOP

        import_mujoco()
        import mujoco

        env, model, data = self.env, self.env.model, self.env.data
        rng = _rng(self.seed, "distractors", 1)
        taken = [env.box_pos()[:2]] if hasattr(env, "box_pos") else []
        for i in range(self.distractors):
            for _ in range(200):  # rejection sampling; 5 objects on a 0.8 x 0.22 m strip always fit
                xy = np.array([rng.uniform(-0.45, 0.35), rng.uniform(-0.11, 0.11)])
                if all(np.linalg.norm(xy - t) >= DISTRACTOR_GAP for t in taken):
                    break
            taken.append(xy)
            gid = model.geom(f"distractor{i}").id
            cylinder = model.geom_type[gid] == mujoco.mjtGeom.mjGEOM_CYLINDER
            half_z = model.geom_size[gid][1 if cylinder else 2]
            yaw = rng.uniform(0.0, np.pi)
            joint = model.joint(f"distractor{i}")
            adr, dof = joint.qposadr[0], joint.dofadr[0]
            data.qpos[adr : adr + 7] = [*xy, BELT_TOP + half_z, np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)]
            data.qvel[dof : dof + 6] = [getattr(env, "belt_speed", 0.0), 0.0, 0.0, 0.0, 0.0, 0.0]
        mujoco.mj_forward(model, data)

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


def _distractor_xml(count: int) -> str:
    """`count` free objects, boxes and cylinders in turn (sizes, colours and places are drawn per episode)."""
    shapes = ("box", "cylinder")
    return "".join(
        f"""
    <body name="distractor{i}" pos="{1.0 + 0.1 * i:.2f} 0.5 0.5">
      <freejoint name="distractor{i}"/>
      <geom name="distractor{i}" type="{shapes[i % 2]}" size="0.02 0.02 0.02" mass="0.05" rgba="0.5 0.5 0.5 1"
            friction="1.2 0.01 0.001"/>
    </body>"""
        for i in range(count)
    )


def _occluder_xml() -> str:
    return """
    <body name="occluder" pos="0 0 -1">
      <geom name="occluder" type="box" size="0.01 0.01 0.002" rgba="0.3 0.3 0.33 1" contype="0" conaffinity="0"/>
    </body>"""


@dataclass(frozen=True)
class _Occluder:
    """The plate that hides a square of `width` metres of the box's path from the top camera."""

    camera: np.ndarray  # the top camera's nominal position (world)
    plane_z: float  # the box centre's height on the belt
    width: float

    @classmethod
    def for_scene(cls, model: Any, width: float) -> _Occluder:
        from hotloop.sim.mujoco_import import import_mujoco
        from hotloop.sim.tasks.conveyor import BOX_HALF
        from hotloop.sim.tasks.gantry import BELT_TOP

        import_mujoco()
        import mujoco

        data = mujoco.MjData(model)  # scratch: the nominal camera, not the episode's state
        mujoco.mj_forward(model, data)
        occluder = cls(data.cam_xpos[model.camera("top").id].copy(), BELT_TOP + BOX_HALF, width)
        scale = (occluder.camera[2] - OCCLUDER_Z) / (occluder.camera[2] - occluder.plane_z)
        model.geom_size[model.geom("occluder").id, :2] = width / 2 * scale  # similar squares
        return occluder

    def place(self, model: Any, rng: np.random.Generator) -> None:
        """On the camera's line of sight to a random point of the box's path (x along the belt in the
        camera's view, y where the box starts)."""
        target = np.array([rng.uniform(-0.2, 0.25), rng.uniform(-0.06, 0.06), self.plane_z])
        s = (self.camera[2] - OCCLUDER_Z) / (self.camera[2] - self.plane_z)
        model.body_pos[model.body("occluder").id] = self.camera + s * (target - self.camera)


def _resize(model: Any, gid: int, half: np.ndarray, inertia: np.ndarray) -> None:
    """Set a box or cylinder geom's size with what collision detection derives from it, and its body's
    inertia (the body holds this one geom)."""
    from hotloop.sim.mujoco_import import import_mujoco

    import_mujoco()
    import mujoco

    model.geom_size[gid] = half
    if model.geom_type[gid] == mujoco.mjtGeom.mjGEOM_CYLINDER:
        r, h = half[0], half[1]
        model.geom_rbound[gid] = np.hypot(r, h)
        model.geom_aabb[gid, 3:] = [r, r, h]
    else:
        model.geom_rbound[gid] = np.linalg.norm(half)
        model.geom_aabb[gid, 3:] = half
    model.body_inertia[model.geom_bodyid[gid]] = inertia


def _inertia(model: Any, gid: int, half: np.ndarray) -> np.ndarray:
    """Principal inertia of a solid box (half sides) or cylinder (radius, half height) of the body's mass."""
    from hotloop.sim.mujoco_import import import_mujoco

    import_mujoco()
    import mujoco

    m = float(model.body_mass[model.geom_bodyid[gid]])
    if model.geom_type[gid] == mujoco.mjtGeom.mjGEOM_CYLINDER:
        r, h = half[0], half[1]
        side = m * (3 * r**2 + 4 * h**2) / 12
        return np.array([side, side, m * r**2 / 2])
    a, b, c = half**2
    return m / 3 * np.array([b + c, a + c, a + b])


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


class PerturbedPolicy(PolicyWrapper):
    """The policy seen through the perturbed sensors (every other attribute is the wrapped policy's)."""

    def __init__(self, inner: Any, perturber: Perturber) -> None:
        super().__init__(inner)
        self.perturber = perturber

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
class JitteredLatency(WrappedLatency):
    """The loop's latency model (`base`) plus an exponential extra delay (`latency-jitter:MEAN_MS`), drawn
    from the evaluator's own seeded generator."""

    mean_ms: float

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)

    def describe(self) -> dict[str, Any]:
        return {**self.base.describe(), "jitter": {"distribution": "exponential", "mean_ms": self.mean_ms}}

    def sample_ms(self, measured_ms: float, rng: np.random.Generator) -> float:
        return float(self.base.sample_ms(measured_ms, rng)) + float(rng.exponential(self.mean_ms))


def perturb_env(env: Any, spec: str) -> Perturber:
    """Perturb `env`'s scene at every reset, seeded by the reset's seed (the one path for `hotloop eval` and
    `hotloop record`, so one seed is one perturbed scene in both); the returned `Perturber`'s `observe`
    turns the task's observation into what the perturbed sensors deliver."""
    perturber = Perturber(env, parse_perturb(spec))
    reset = env.reset

    def perturbed_reset(*, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        perturber.begin_episode(seed)
        obs, info = reset(seed=seed, options=options)
        if perturber.after_reset():
            obs, info = env.observe(), env.info()
        return obs, info

    env.reset = perturbed_reset  # this worker's (or recorder's) own env: its episodes all run perturbed
    env.perturbation = perturber.describe()
    return perturber


def attach_perturbations(policy: Any, env: Any, spec: str, latency: Any) -> tuple[Any, Any]:
    """Perturb `env` (its scene and resets), the observations `policy` sees and the loop's `latency`."""
    perturber = perturb_env(env, spec)
    jitter = perturber.items.get("latency-jitter")
    if jitter:
        latency = JitteredLatency(latency, jitter)
    return PerturbedPolicy(policy, perturber), latency
