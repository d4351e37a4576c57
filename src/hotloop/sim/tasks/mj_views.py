"""Camera views of a third-party MuJoCo environment, rendered by our own renderer (one per worker).

Why our own: an environment's `render()` renders one view at its own size through a shared GL context,
with shadows and multisample anti-aliasing on. On software EGL (headless CPUs) those two make a frame
10-50x slower and buy nothing a 64-224 px policy input can see, so they are off here by default;
so are reflections (a second pass over the scene for every reflective surface: 1.6-1.8x per frame).
Why not `update_scene(camera=None)`: MuJoCo 4.0 raises on it; a free camera is an explicit `MjvCamera`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")  # before mujoco is imported anywhere in this process


@dataclass(frozen=True)
class FreeCamera:
    """A camera not in the model: looks at `lookat` from `distance`, `azimuth`, `elevation` (degrees)."""

    lookat: tuple[float, float, float]
    distance: float
    azimuth: float
    elevation: float


class MujocoViews:
    """Renders named views of (model, data) at `size` x `size`; each view is a model camera name or a
    `FreeCamera`. The GL context is made on the first `render` (in the process that renders)."""

    def __init__(
        self,
        model: Any,
        data: Any,
        views: dict[str, str | FreeCamera],
        size: int,
        *,
        shadows: bool = False,
        antialias: bool = False,
        reflections: bool = False,
    ) -> None:
        self.model = model
        self.data = data
        self.views = dict(views)
        self.size = size
        self.shadows = shadows
        self.antialias = antialias
        self.reflections = reflections
        self._renderer: Any = None
        self._cameras: dict[str, Any] = {}

    def _make(self) -> Any:
        from hotloop.sim.mujoco_import import import_mujoco

        import_mujoco()
        import mujoco

        quality = self.model.vis.quality
        if not self.antialias:
            quality.offsamples = 0  # read when the offscreen buffer is made, i.e. by Renderer()
        glob = self.model.vis.global_
        glob.offwidth = max(int(glob.offwidth), self.size)
        glob.offheight = max(int(glob.offheight), self.size)
        renderer = mujoco.Renderer(self.model, height=self.size, width=self.size)
        for key, view in self.views.items():
            if isinstance(view, FreeCamera):
                cam = mujoco.MjvCamera()
                mujoco.mjv_defaultFreeCamera(self.model, cam)
                cam.lookat[:] = view.lookat
                cam.distance, cam.azimuth, cam.elevation = view.distance, view.azimuth, view.elevation
                self._cameras[key] = cam
            else:
                if mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_CAMERA, view) < 0:
                    from hotloop.errors import ConfigError

                    raise ConfigError(f"camera {view!r} is not in the environment's model")
                self._cameras[key] = view
        return renderer

    def render(self) -> dict[str, np.ndarray]:
        from hotloop.sim.mujoco_import import import_mujoco

        import_mujoco()
        import mujoco

        if self._renderer is None:
            self._renderer = self._make()
        out = {}
        for key, cam in self._cameras.items():
            self._renderer.update_scene(self.data, camera=cam)
            self._renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = self.shadows
            self._renderer.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = self.reflections
            out[key] = np.asarray(self._renderer.render(), dtype=np.uint8).copy()
        return out

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
