"""How a target reads recorded frames: dataset frame -> model observation, action chunk -> model targets.

Calibration, sensitivity and QAT see a target through one `TargetAdapter`:
- a random-weight pi target (pi05:tiny, pi05:small...) takes the dataset's cameras resized to its view
  size, its state normalised by the dataset's own mean/std and zero-padded, one prompt id per task;
- `demo:conveyor` uses its own adapter (relative state and actions, its shipped norm stats).
`check_fits` refuses data shaped for another model before any frame is decoded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from hotloop.errors import ConfigError
from hotloop.models.configs import PiConfig
from hotloop.families.pi.sampling import PiObservation

FrameObserver = Callable[[dict[str, np.ndarray], np.ndarray, int], PiObservation]
ActionTargets = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class TargetAdapter:
    """`observe(images {key: HxWx3}, state, task_index)` -> batch-1 observation; `targets(chunk (H, A),
    state)` -> normalised, zero-padded (chunk_size, max_action_dim) flow-matching targets."""

    name: str
    cfg: PiConfig
    observe: FrameObserver
    targets: ActionTargets
    state_dim: int | None  # the state width the adapter expects (None: anything up to max_state_dim)
    action_dim: int | None
    image_keys: tuple[str, ...] | None  # camera keys it needs (None: any, up to cfg.views)
    gripper_dim: int | None  # action column of a gripper, for the gripper-flip rate


def check_fits(adapter: TargetAdapter, dataset: Any, flag: str = "--data") -> None:
    """ConfigError naming `flag` when the dataset's state, actions or cameras do not fit the target."""
    cfg = adapter.cfg
    state_dim = int(dataset.features["observation.state"]["shape"][0])
    action_dim = int(dataset.features["action"]["shape"][0])
    where = f"{flag} {dataset.root}"
    if adapter.state_dim is not None and state_dim != adapter.state_dim:
        raise ConfigError(
            f"{where} has {state_dim}-dim states; {adapter.name} reads {adapter.state_dim} "
            "(data recorded for another model: record the target's own task)"
        )
    if state_dim > cfg.max_state_dim:
        raise ConfigError(
            f"{where} has {state_dim}-dim states; {adapter.name} takes at most {cfg.max_state_dim} "
            "(data recorded for another model)"
        )
    if adapter.action_dim is not None and action_dim != adapter.action_dim:
        raise ConfigError(
            f"{where} has {action_dim}-dim actions; {adapter.name} predicts {adapter.action_dim} "
            "(data recorded for another model)"
        )
    if action_dim > cfg.max_action_dim:
        raise ConfigError(
            f"{where} has {action_dim}-dim actions; {adapter.name} predicts at most {cfg.max_action_dim} "
            "(data recorded for another model)"
        )
    keys = list(dataset.image_keys)
    if not keys:
        raise ConfigError(f"{where} has no camera images; {adapter.name} needs at least one view")
    if adapter.image_keys is not None and any(k not in keys for k in adapter.image_keys):
        raise ConfigError(f"{where} has cameras {keys}; {adapter.name} needs {list(adapter.image_keys)}")
    if adapter.image_keys is None and len(keys) > cfg.views:
        raise ConfigError(f"{where} has {len(keys)} cameras; {adapter.name} takes at most {cfg.views} views")
    if cfg.pi05 and state_dim + 1 > cfg.max_token_len:
        raise ConfigError(
            f"{where}: {state_dim} state bins + a task id exceed {adapter.name}'s {cfg.max_token_len} "
            "prompt slots (data recorded for another model)"
        )


def pi_target_adapter(target: str, model: Any, dataset: Any) -> TargetAdapter:
    """A random-weight pi target reading `dataset`: mean/std from its stats, one task id per prompt."""
    from hotloop.families.pi.policy import NormStats, PiPolicy, Stats

    cfg = model.cfg
    stats = dataset.stats
    state_stats = stats.get("observation.state", {})
    action_stats = stats.get("action", {})
    norm = NormStats(
        state=Stats(mean=_arr(state_stats, "mean"), std=_arr(state_stats, "std")),
        actions=Stats(mean=_arr(action_stats, "mean"), std=_arr(action_stats, "std")),
        mode="mean_std" if state_stats and action_stats else "identity",
    )
    policy = PiPolicy(model, cfg, norm_stats=norm)
    keys = tuple(dataset.image_keys)

    def observe(images: dict[str, np.ndarray], state: np.ndarray, task_index: int) -> PiObservation:
        return policy.observation(
            {
                "images": np.stack([images[k] for k in keys]),
                "state": state,
                "prompt_tokens": [1 + task_index % 200],
            }
        )

    def targets(chunk: np.ndarray, state: np.ndarray) -> np.ndarray:
        return _padded(norm.normalize(chunk, "actions"), cfg)

    names = dataset.features["action"].get("names") or []
    grip = next((i for i, n in enumerate(names) if isinstance(n, str) and "grip" in n), None)
    return TargetAdapter(target, cfg, observe, targets, None, None, None, grip)


def demo_adapter(target: str, demo: Any) -> TargetAdapter:
    """A demo policy (`demo:conveyor`, `demo:conveyor-vision`): its own state transform, the camera views
    it reads, relative actions and shipped norm stats."""
    from hotloop.sim.demo_policy import to_relative

    pi = demo.pi
    cfg = pi.config

    def observe(images: dict[str, np.ndarray], state: np.ndarray, task_index: int) -> PiObservation:
        return pi.observation(demo.model_inputs({"images": images, "state": state}))  # type: ignore[no-any-return]

    def targets(chunk: np.ndarray, state: np.ndarray) -> np.ndarray:
        return _padded(pi.norm_stats.normalize(to_relative(chunk, state), "actions"), cfg)

    views = tuple(getattr(demo, "views", ("top",)))  # the vision demo reads top + wrist
    return TargetAdapter(target, cfg, observe, targets, 10, 4, views, 3)


def adapter_for(target: str, model: Any, dataset: Any, demo: Any = None) -> TargetAdapter:
    return demo_adapter(target, demo) if demo is not None else pi_target_adapter(target, model, dataset)


def _arr(stats: dict[str, Any], key: str) -> np.ndarray | None:
    value = stats.get(key)
    return None if value is None else np.asarray(value, dtype=np.float32)


def _padded(chunk: np.ndarray, cfg: PiConfig) -> np.ndarray:
    out = np.zeros((cfg.chunk_size, cfg.max_action_dim), dtype=np.float32)
    h = min(cfg.chunk_size, chunk.shape[0])
    out[:h, : chunk.shape[1]] = chunk[:h]
    if h < cfg.chunk_size:  # a shorter horizon repeats its last action, as the demo's training does
        out[h:, : chunk.shape[1]] = chunk[h - 1]
    return out


def stack(observations: list[PiObservation]) -> PiObservation:
    """Batch-1 observations -> one batch."""
    state = [o.state for o in observations]
    return PiObservation(
        images=torch.cat([o.images for o in observations]),
        image_masks=torch.cat([o.image_masks for o in observations]),
        lang_tokens=torch.cat([o.lang_tokens for o in observations]),
        lang_masks=torch.cat([o.lang_masks for o in observations]),
        state=None if any(s is None for s in state) else torch.cat(state),  # type: ignore[arg-type]
    )


def select(obs: PiObservation, index: slice | list[int]) -> PiObservation:
    return PiObservation(
        images=obs.images[index],
        image_masks=obs.image_masks[index],
        lang_tokens=obs.lang_tokens[index],
        lang_masks=obs.lang_masks[index],
        state=None if obs.state is None else obs.state[index],
    )


def load_target(
    target: str, dataset: Any, seed: int = 0, num_steps: int | None = None
) -> tuple[Any, TargetAdapter]:
    """(fp32 model, adapter) of a pi target (seeded random weights) or a shipped demo policy."""
    from hotloop.compile.sources import check_pi_target
    from hotloop.targets import TargetOptions

    check_pi_target(target)
    options = TargetOptions(num_steps=num_steps, seed=seed)
    if target.startswith("demo:"):
        from hotloop.sim.demo_policy import build_demo

        demo = build_demo(target, options)
        model = demo.pi.model.float().eval()
        return model, demo_adapter(target, demo)
    from hotloop.families.pi.targets import build_model, resolve_config

    cfg = resolve_config(target, options)
    model = build_model(cfg, torch.float32, "cpu", seed)
    return model, pi_target_adapter(target, model, dataset)
