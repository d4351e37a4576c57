"""`demo:conveyor`: the shipped pi0.5-nano policy for `conveyor-pick`, loaded offline from package assets.

The model is the models package's pi0.5 at its `pi05:nano` size. This module is its robot-side adapter
(what openpi calls data transforms):

- state in: the env's 10 numbers become [ee xyz, grip opening, box - ee xyz, box velocity xyz]. The
  box position and velocity are privileged simulator state standing in for a perception + Kalman
  filter layer (the model also sees one 64 px top view, but the state carries what it needs to be
  trained on two CPU cores in minutes). The relative position makes the grasp offset one token away.
- actions out: the model predicts xyz targets relative to the end effector at observation time (openpi's
  delta actions) plus an absolute grip; `infer` returns absolute targets, as the env expects.
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np

from hotloop.errors import CheckpointError
from hotloop.policy import seed_noise

PROMPT_TOKENS = (1, 2, 3)  # fixed task ids: one task, no tokenizer needed
ASSET_DIR = Path(__file__).resolve().parents[1] / "assets" / "demo_conveyor"
# demo:conveyor-chain: the same model and transforms, trained for an estimated box state (the layered
# chain's, `--pipeline detector:...`): `hotloop train-demo --variant chain`.
CHAIN_ASSET_DIR = Path(__file__).resolve().parents[1] / "assets" / "demo_conveyor_chain"
_ASSET_DIRS = {"conveyor": ASSET_DIR, "conveyor-chain": CHAIN_ASSET_DIR}


def asset_dir(config_name: str) -> Path:
    """The shipped folder of `demo:<config_name>` (`conveyor` or `conveyor-chain`)."""
    return _ASSET_DIRS[config_name]


def model_state(state: np.ndarray) -> np.ndarray:
    """Env state (..., 10) -> model state (..., 10): ee, grip, box - ee, box velocity."""
    s = np.asarray(state, dtype=np.float32)
    out = s.copy()
    out[..., 4:7] = s[..., 4:7] - s[..., 0:3]
    return out


def to_relative(actions: np.ndarray, state: np.ndarray) -> np.ndarray:
    """Absolute targets (..., H, 4) -> xyz relative to the ee of `state` (..., 10); grip unchanged."""
    out = np.asarray(actions, dtype=np.float32).copy()
    out[..., :3] -= np.asarray(state, dtype=np.float32)[..., None, 0:3]
    return out


def to_absolute(actions: np.ndarray, state: np.ndarray) -> np.ndarray:
    out = np.asarray(actions, dtype=np.float32).copy()
    out[..., :3] += np.asarray(state, dtype=np.float32)[..., None, 0:3]
    return out


@dataclass
class DemoConveyorPolicy:
    """Env observation -> PiPolicy observation -> absolute action chunk."""

    pi: Any  # hotloop.families.pi.policy.PiPolicy
    meta: dict[str, Any]
    zero_noise: bool = False  # start the flow at x = 0 (its mode) instead of a seeded draw (R6.3)
    # Guided (RTC) sampling from the seeded draw instead of x = 0. Off: from x = 0 the Jacobian RTC steers
    # through is off the noise path the model was trained on (<J^T e, e>/|e|^2 = -0.36 at t = 1 against
    # +0.01 from noise), yet in closed loop (20 episodes) starting from noise did worse: 13/20 with a
    # 50 mm mean jump at 200 ms (x = 0: 13/20, 43 mm) and 7/20 at 300 ms (async: 15/20).
    rtc_from_noise: bool = False
    _cache: Any = field(default=None, repr=False)
    _noise: Any = field(default=None, repr=False)

    # What `load` reads by default, and how its errors name the policy and the command that trains it.
    assets: ClassVar[Path] = ASSET_DIR
    what: ClassVar[str] = "demo policy"
    train_command: ClassVar[str] = "hotloop train-demo"

    @classmethod
    def loading(cls) -> AbstractContextManager[Any]:
        """The context `load` reads the weights in (the vision demo's quiets the checkpoint loader)."""
        return nullcontext()

    @classmethod
    def load(
        cls,
        folder: str | Path | None = None,
        *,
        num_steps: int | None = None,
        seed: int = 0,
        threads: int | None = None,
    ) -> Self:
        """Load the policy from `folder` (default: the shipped assets) as float32; no network access."""
        folder = Path(folder) if folder is not None else cls.assets
        with cls.loading():
            pi, meta = load_demo_pi(
                folder,
                num_steps=num_steps,
                seed=seed,
                threads=threads,
                what=cls.what,
                train_command=cls.train_command,
            )
        return cls(pi, meta, zero_noise=bool(meta.get("zero_noise", False)))

    @classmethod
    def around_engine(cls, policy: Any, info: dict[str, Any]) -> Self:
        """A compiled artifact's engine policy inside this demo's transforms (its noise convention is
        handled by the engine policy, so the adapter takes its plain path)."""
        return cls(policy, dict(info.get("meta") or {}), zero_noise=False)

    @property
    def horizon(self) -> int:
        return int(self.pi.horizon)

    @property
    def gantry_state(self) -> bool:
        """Whether the model reads the gantry's state through this demo's transform (demo.json's
        `state_layout`, "gantry" for every run before it existed), or the task's own state as it is
        ("dataset": `train-demo --variant vision` on another task's dataset)."""
        return self.meta.get("state_layout", "gantry") == "gantry"

    @property
    def relative_actions(self) -> bool:
        """Whether the model's xyz actions are relative to the hand (`action_layout` "ee_relative", every
        run before it existed) or the task's own absolute actions ("absolute")."""
        return self.meta.get("action_layout", "ee_relative") == "ee_relative"

    @property
    def state_dim(self) -> int:
        from hotloop.sim.tasks.gantry import STATE_DIM

        return STATE_DIM if self.gantry_state else len(self.meta.get("state_names") or [])

    def to_env(self, actions: np.ndarray, state: np.ndarray) -> np.ndarray:
        """The model's actions as the task's absolute targets."""
        return to_absolute(actions, state) if self.relative_actions else np.asarray(actions, dtype=np.float32)

    def to_model(self, actions: np.ndarray, state: np.ndarray) -> np.ndarray:
        """The task's absolute targets in the model's action space (RTC guidance)."""
        return to_relative(actions, state) if self.relative_actions else np.asarray(actions, dtype=np.float32)

    def reset(self) -> None:
        self.pi.reset()

    def seed_noise(self, episode_seed: int) -> None:
        seed_noise(self.pi, episode_seed)  # x = 0 (zero_noise) draws none: then it changes nothing

    @property
    def observation_spec(self) -> dict[str, Any]:
        """Every view it reads (top, and the wrist for demo:conveyor-vision) and the simulator's state;
        the prompt and timestamp the simulator's observation carries too are accepted and ignored, so a
        client may forward the environment's observation unchanged."""
        from hotloop.policy_spec import ArraySpec
        from hotloop.realtime.rtc import rtc_observation_spec

        spec = self.spec
        return {
            **{f"images/{v.key}": ArraySpec((v.height, v.width, 3), "uint8") for v in spec.images},
            "state": ArraySpec((self.state_dim,), "float32"),
            "prompt": ArraySpec((), "str", optional=True),
            "timestamp": ArraySpec((), "float64", optional=True),
            **(rtc_observation_spec(spec.action_dim) if self.pi.supports_rtc else {}),
        }

    @property
    def spec(self) -> Any:
        """The conveyor-pick observation exactly: the 64 px top view, the 10-number gantry state, and
        absolute `[x, y, z, grip]` targets."""
        from hotloop.policy_spec import ImageSpec, PolicySpec

        size = int(self.pi.config.image_side)
        return PolicySpec(
            images=(ImageSpec("top", size, size),),
            min_views=1,
            images_as="dict",
            state_dim=self.state_dim,
            action_dim=int(self.pi.action_dim),
            action_meaning="absolute",
            horizon=self.horizon,
        )

    def model_inputs(self, obs: dict[str, Any]) -> dict[str, Any]:
        """Env observation -> the PiPolicy observation (one view, transformed state, fixed prompt)."""
        state = np.asarray(obs["state"], dtype=np.float32)
        return {
            "images": np.stack([obs["images"]["top"]]),
            "state": model_state(state) if self.gantry_state else state,
            "prompt_tokens": list(PROMPT_TOKENS),
        }

    def infer(self, obs: dict[str, Any], timer: Any = None) -> dict[str, Any]:
        """Absolute action chunk for an env observation. RTC guidance keys in `obs`
        (`hotloop.realtime.rtc`: previous absolute targets, delay) are moved into the model's relative
        action space with this observation's end effector, and the answer says `rtc_guided: True`."""
        from hotloop.realtime.rtc import GUIDED_KEY, MODE_KEY, guidance_inputs, guidance_mode

        raw = np.asarray(obs["state"], dtype=np.float32)
        guidance = guidance_inputs(obs)
        mode = guidance_mode(obs)
        if not getattr(self.pi, "supports_rtc", True):
            guidance = None  # a compiled engine: answered without `rtc_guided` (see EnginePiPolicy)
        if not self.zero_noise and guidance is None:
            rel = self.pi.infer(self.model_inputs(obs))["actions"]
            return {"actions": self.to_env(rel, raw)}
        import torch

        from hotloop.families.pi.sampling import sample_actions

        pi = self.pi
        if self._cache is None:
            cfg = pi.config
            self._noise = torch.zeros(1, cfg.chunk_size, cfg.max_action_dim)
            self._cache = pi.model.allocate_cache(batch=1)
        model_obs = pi.observation(self.model_inputs(obs))
        from_zero = self.zero_noise and (guidance is None or mode != "guided" or not self.rtc_from_noise)
        noise = self._noise if from_zero else None
        generator = None if from_zero else pi.generator
        draft: Any = None
        if guidance is None:
            chunk = sample_actions(
                pi.model, model_obs, noise=noise, num_steps=pi.num_steps, timer=timer, cache=self._cache
            )
        elif mode == "draft":  # checked from the sampler's own start (x = 0 for this demo), held from it too
            from hotloop.realtime.draft import tolerance_of

            chunk, draft = pi.draft_sample(
                model_obs,
                guidance,
                lambda a: self.to_model(a, raw),
                tolerance_of(obs),
                noise=noise,
                generator=generator,
                timer=timer,
                verify_noise=noise,
            )
        else:
            chunk = pi.rtc_sample(
                model_obs,
                guidance,
                mode,
                lambda a: self.to_model(a, raw),
                noise=noise,
                generator=generator,
                timer=timer,
            )
        rows = pi.horizon if draft is None else draft.kept
        rel = pi.norm_stats.unnormalize(chunk[0, :rows, : pi.action_dim].detach().numpy(), "actions")
        out: dict[str, Any] = {"actions": self.to_env(rel, raw)}
        if guidance is not None:
            out[GUIDED_KEY] = True
            out[MODE_KEY] = mode
        if draft is not None:
            from hotloop.realtime.draft import DRAFT_KEY

            out[DRAFT_KEY] = draft.stats()
        return out

    @property
    def supports_draft(self) -> bool:
        """Whether `--strategy draft` can check a chunk with this policy's velocity network (the PyTorch
        model: yes; a compiled artifact's engine: no)."""
        return bool(getattr(self.pi, "supports_draft", False))

    def use_draft_student(self, student: Any) -> None:
        """`--draft-from STUDENT`: the drafts are a one-step student's chunks (`PiPolicy.use_draft_student`;
        the student starts where this demo's sampler does, x = 0, when its artifact says so)."""
        self.pi.use_draft_student(student)


def load_demo_pi(
    folder: Path,
    *,
    num_steps: int | None,
    seed: int,
    threads: int | None,
    what: str = "demo policy",
    train_command: str = "hotloop train-demo",
) -> tuple[Any, dict[str, Any]]:
    """(PiPolicy, demo.json) of a shipped demo policy folder, loaded as float32; no network access.
    Shared by `demo:conveyor` and `demo:conveyor-vision`, which differ only in the wrapper around it."""
    import torch

    from hotloop.families.pi.checkpoint import load_checkpoint
    from hotloop.families.pi.policy import PiPolicy

    meta_path = folder / "demo.json"
    if not meta_path.is_file() or not (folder / "model.safetensors").is_file():
        raise CheckpointError(
            f"{what} weights are missing from {folder} (need demo.json and model.safetensors); "
            f"train them with `{train_command}` or reinstall hotloop"
        )
    if threads is not None:
        torch.set_num_threads(threads)
    meta = json.loads(meta_path.read_text())
    ckpt = load_checkpoint(folder, dtype=torch.float32)
    if ckpt.norm_stats is None:
        raise CheckpointError(f"{folder} has no norm_stats.json; retrain with `{train_command}`")
    pi = PiPolicy(
        ckpt.model,
        ckpt.config,
        norm_stats=ckpt.norm_stats,
        action_dim=int(meta["action_dim"]),
        horizon=int(meta["horizon"]),
        default_prompt_tokens=list(PROMPT_TOKENS),
        num_steps=num_steps,
        seed=seed,
    )
    return pi, meta


load_demo_policy = DemoConveyorPolicy.load


def build_demo(target: str, options: Any) -> DemoConveyorPolicy:
    """The shipped demo policy named by `target` (`demo:conveyor`, `demo:conveyor-vision`), built through
    the target table so that each name gets its own weights and wrapper (the vision policy reads two
    views and a proprioceptive state); pair it with `vision_demo.make_demo_task(policy.meta)`."""
    from hotloop.targets import default_targets

    return default_targets().get(target).build_policy(target, options)  # type: ignore[no-any-return]


def demo_horizon(folder: Path) -> int | None:
    """The chunk length a shipped pi demo returns (demo.json's `horizon`, which `load_demo_pi` gives
    its PiPolicy), read without loading the weights; None when the file cannot tell."""
    try:
        return int(json.loads((folder / "demo.json").read_text())["horizon"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # loading the policy reports what is wrong with the folder


def declared_horizon(config_name: str) -> int | None:
    return demo_horizon(asset_dir(config_name))


def build_policy(config_name: str, options: Any) -> DemoConveyorPolicy:
    options.reject_unsupported(f"demo:{config_name}", {"num_steps"})
    return load_demo_policy(asset_dir(config_name), num_steps=options.num_steps, seed=options.seed)


def build_bench(config_name: str, options: Any) -> Any:
    """One timed inference of the demo policy on a rendered conveyor-pick observation."""
    from hotloop.sim.tasks import make_task

    policy = build_policy(config_name, options)
    env = make_task(policy.meta.get("task", "conveyor-pick"), difficulty=policy.meta.get("difficulty"))
    obs, _ = env.reset(seed=options.seed)
    return demo_bench_case(f"demo:{config_name}", policy, obs, {}, views=1)


def demo_bench_case(
    name: str, policy: DemoConveyorPolicy, obs: Any, stored: dict[str, Any], *, views: int
) -> Any:
    """`hotloop bench`'s case for a demo policy: one timed inference on `obs`. `stored` (how the weights are
    stored) joins the info after the float32 dtype they run in."""
    from hotloop.targets import BenchCase

    pi = policy.pi

    def run(timer: Any) -> Any:
        return policy.infer(obs, timer=timer)["actions"]

    return BenchCase(
        name=name,
        run=run,
        info={
            "parameters": sum(p.numel() for p in pi.model.parameters()),
            "dtype": "float32",
            **stored,
            "views": views,
            "image_size": pi.config.vision.image_size,
            "horizon": pi.horizon,
            "num_steps": pi.num_steps or pi.config.num_steps,
        },
    )


def wrap_engine_policy(policy: Any, info: dict[str, Any]) -> DemoConveyorPolicy:
    """The `wrap` of the demo:conveyor targets (`DemoConveyorPolicy.around_engine`)."""
    return DemoConveyorPolicy.around_engine(policy, info)
