"""`demo:conveyor-vision`: the shipped pi0.5-mini policy for `conveyor-pick` that sees the box only through
the camera.

Unlike `demo:conveyor` (whose state carries the box's position and velocity), this policy's state is the
robot's own proprioception: end-effector xyz and grip opening. Where the box is must be read from the
64 px camera views (top, and wrist: a camera on the gripper; weights trained before it existed read the
top view only), so compressing the vision tower or the VLM changes what the policy can do: this is the
policy compression is judged on (issue 9). The actions are those of `demo:conveyor`: xyz relative to the
end effector at observation time plus an absolute grip; `infer` returns absolute targets.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from hotloop.demos.conveyor import PROMPT_TOKENS, DemoConveyorPolicy, demo_bench_case
from hotloop.log_levels import errors_only

ASSET_DIR = Path(__file__).resolve().parents[1] / "assets" / "demo_conveyor_vision"
PROPRIO_DIM = 4  # ee xyz, grip opening: the first four numbers of every gantry task's state


def proprio_state(state: np.ndarray) -> np.ndarray:
    """Env state (..., 10) -> the robot's own state (..., 4): ee xyz and grip opening, nothing else."""
    return np.asarray(state, dtype=np.float32)[..., :PROPRIO_DIM].copy()


def policy_views(meta: dict[str, Any]) -> tuple[str, ...]:
    """The camera views a trained vision policy reads, in model order (demo.json's `views`; weights
    trained before the wrist camera existed read the top view only)."""
    return tuple(meta.get("views", ("top",)))


@dataclass
class VisionConveyorPolicy(DemoConveyorPolicy):
    """`demo:conveyor`'s adapter with a proprioceptive state: the box reaches the model as pixels only,
    through the views its weights were trained on (top, or top + wrist)."""

    assets: ClassVar[Path] = ASSET_DIR
    what: ClassVar[str] = "vision demo policy"
    train_command: ClassVar[str] = "hotloop train-demo --variant vision"

    @classmethod
    def loading(cls) -> AbstractContextManager[Any]:
        """The shipped weights are stored in float16 to keep the wheel small; the loader notes every cast
        to float32 as a warning, which would repeat in every evaluation worker."""
        return errors_only("hotloop.families.pi.checkpoint")

    @property
    def views(self) -> tuple[str, ...]:
        return policy_views(self.meta)

    @property
    def spec(self) -> Any:
        """Its views by name (the wrist view is one the task renders on request), the gantry state (the
        adapter passes all 10 numbers; `proprio_state` keeps the robot's own 4) or, trained on another
        task's dataset, that task's state, and absolute targets."""
        import dataclasses

        from hotloop.policy_spec import ImageSpec

        size = int(self.pi.config.image_side)
        views = tuple(ImageSpec(key, size, size) for key in self.views)
        return dataclasses.replace(super().spec, images=views, min_views=len(views))

    def model_inputs(self, obs: dict[str, Any]) -> dict[str, Any]:
        state = np.asarray(obs["state"], dtype=np.float32)
        return {
            "images": np.stack([obs["images"][key] for key in self.views]),
            "state": proprio_state(state) if self.gantry_state else state,
            "prompt_tokens": list(PROMPT_TOKENS),
        }


load_vision_policy = VisionConveyorPolicy.load


def load_trained_folder(
    folder: str | Path, *, num_steps: int | None = None, seed: int = 0
) -> DemoConveyorPolicy:
    """A `hotloop train-demo --family pi` output folder (its demo.json beside the checkpoint) as the policy
    that run trained: the vision variant's wrapper when demo.json names views, else demo:conveyor's. The
    generic pi checkpoint loader would run it without its transforms and prompt."""
    import json

    from hotloop.demos.conveyor import load_demo_policy

    meta = json.loads((Path(folder) / "demo.json").read_text())
    if isinstance(meta, dict) and "views" in meta:
        return load_vision_policy(folder, num_steps=num_steps, seed=seed)
    return load_demo_policy(folder, num_steps=num_steps, seed=seed)


def make_demo_task(meta: dict[str, Any], default_task: str = "conveyor-pick") -> Any:
    """The task a demo policy was trained on, rendering the views it reads (`demo:conveyor`: the top view)."""
    from hotloop.sim.tasks import make_task

    return make_task(
        meta.get("task", default_task), difficulty=meta.get("difficulty"), views=policy_views(meta)
    )


def declared_horizon(config_name: str) -> int | None:
    from hotloop.demos.conveyor import demo_horizon

    return demo_horizon(ASSET_DIR)


def build_policy(config_name: str, options: Any) -> VisionConveyorPolicy:
    options.reject_unsupported(f"demo:{config_name}", {"num_steps"})
    return load_vision_policy(num_steps=options.num_steps, seed=options.seed)


def build_bench(config_name: str, options: Any) -> Any:
    """One timed inference of the vision demo policy on a rendered conveyor-pick observation."""
    policy = build_policy(config_name, options)
    env = make_demo_task(policy.meta)
    obs, _ = env.reset(seed=options.seed)
    env.close()
    stored = {"stored_dtype": policy.meta.get("stored_dtype", "float32")}
    return demo_bench_case(f"demo:{config_name}", policy, obs, stored, views=len(policy.views))


def wrap_engine_policy(policy: Any, info: dict[str, Any]) -> VisionConveyorPolicy:
    """The `wrap` of the demo:conveyor-vision target (`DemoConveyorPolicy.around_engine`)."""
    return VisionConveyorPolicy.around_engine(policy, info)
