"""The steps of LeRobot's policy processor pipelines, one small class per registered step (commit 7427f318).

Each step takes and returns a `Transition` (LeRobot's EnvTransition: observation, action, complementary
data) and does what the LeRobot step of the same registry name does, with the same torch operations in the
same order. `processors.py` builds them from a checkpoint's pipeline files; nothing here reads a file.
Bad inputs at call time (a missing task, integer images for a normalised feature, a state of the wrong
width) are a ConfigError naming the step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hotloop.errors import CheckpointError, ConfigError
from hotloop.lerobot.features import (
    Feature,
    FeatureType,
    NormMode,
    transform,
)
from hotloop.lerobot.tokenizer import HFTokenizer, Padding

STATE, ENV_STATE, IMAGE, TOKENS, MASK = (
    "observation.state",
    "observation.environment_state",
    "observation.image",
    "observation.language.tokens",
    "observation.language.attention_mask",
)
# converters.py: the batch keys that become complementary data (plus every "*_is_pad" key) ...
_COMPLEMENTARY = (
    "task", "index", "task_index", "episode_index", "timestamp", "language_persistent", "language_events",
    "messages", "message_streams", "target_message_indices", "query_kind", "query_text",
)  # fmt: skip
# ... and the transition's other slots; every other non-"observation." key is dropped, as in LeRobot.
_OTHER = ("next.reward", "next.done", "next.truncated", "info")


@dataclass
class Transition:
    """LeRobot's EnvTransition: `other` holds next.reward / next.done / next.truncated / info if given."""

    observation: dict[str, Any] | None
    action: torch.Tensor | None
    complementary: dict[str, Any]
    other: dict[str, Any] = field(default_factory=dict)


def as_tensor(value: Any) -> Any:
    """Numeric numpy arrays -> tensors of the same dtype; anything else is left for the steps."""
    if isinstance(value, np.ndarray) and value.dtype.kind in "biufc":
        return torch.from_numpy(value if value.flags.writeable else value.copy())
    return value


def batch_to_transition(batch: Mapping[str, Any]) -> Transition:
    """converters.batch_to_transition, after turning numpy arrays into tensors."""
    if not isinstance(batch, Mapping):
        raise ConfigError(f"a preprocessor batch must be a dict of arrays, not {type(batch).__name__}")
    obs = {k: as_tensor(v) for k, v in batch.items() if k.startswith("observation.")}
    action = batch.get("action")
    if action is not None:
        action = as_tensor(action)
        if not isinstance(action, torch.Tensor):
            raise ConfigError(
                f"batch['action'] must be a numeric array or tensor, not {type(action).__name__}"
            )
    comp = {k: v for k, v in batch.items() if "_is_pad" in k}
    comp.update({k: batch[k] for k in _COMPLEMENTARY if k in batch})
    task = comp.get("task")
    if isinstance(task, np.ndarray) and (
        task.dtype.kind == "U" or (task.dtype.kind == "O" and all(isinstance(t, str) for t in task.flat))
    ):
        comp["task"] = [str(t) for t in task.reshape(-1)] if task.ndim else str(task.item())
    elif isinstance(task, np.str_):
        comp["task"] = str(task)
    return Transition(obs or None, action, comp, {k: batch[k] for k in _OTHER if k in batch})


def transition_to_batch(t: Transition) -> dict[str, Any]:
    """converters.transition_to_batch without the defaults LeRobot fills in (action None, reward 0...)."""
    out: dict[str, Any] = {} if t.action is None else {"action": t.action}
    out.update(t.other)
    out.update(t.complementary)
    out.update(t.observation or {})
    return out


# --- steps ---------------------------------------------------------------------------------------------


@dataclass
class Step:
    """One pipeline step; `where` ("policy_preprocessor.json step 3 (normalizer_processor)") names it."""

    where: str

    def __call__(self, t: Transition) -> Transition:
        raise NotImplementedError

    def _observation(self, t: Transition) -> dict[str, Any]:
        if t.observation is None:  # LeRobot's ObservationProcessorStep raises on the same
            raise ConfigError(f"{self.where}: the batch has no 'observation.*' entries")
        return t.observation


@dataclass
class RenameObservations(Step):
    """rename_processor: keys in `rename_map` are renamed, also with an `_is_pad` / `_padding_mask` tail."""

    rename_map: dict[str, str]

    def rename(self, key: str) -> str:
        if key in self.rename_map:
            return self.rename_map[key]
        for suffix in ("_is_pad", "_padding_mask"):
            if key.endswith(suffix) and key[: -len(suffix)] in self.rename_map:
                return self.rename_map[key[: -len(suffix)]] + suffix
        return key

    def __call__(self, t: Transition) -> Transition:
        return replace(t, observation={self.rename(k): v for k, v in self._observation(t).items()})


@dataclass
class AddBatchDim(Step):
    """batch_processor: a 1-D action / state, a 3-D image gain a leading batch axis; a str task a list.

    `part` "all" is to_batch_processor; "action" / "observation" / "complementary" are its registered
    sub-steps, which (being LeRobot's Action/Observation step kinds) require their part to be there.
    """

    part: str = "all"

    def __call__(self, t: Transition) -> Transition:
        action, obs, comp = t.action, t.observation, t.complementary
        if self.part == "action" and action is None:
            raise ConfigError(f"{self.where}: needs an action tensor")
        if self.part == "observation":
            self._observation(t)
        if action is not None and self.part in ("all", "action") and action.dim() == 1:
            action = action.unsqueeze(0)
        if obs is not None and self.part in ("all", "observation"):
            obs = dict(obs)
            for key, value in obs.items():
                if not isinstance(value, torch.Tensor):
                    continue
                if (key in (STATE, ENV_STATE) and value.dim() == 1) or (
                    (key == IMAGE or key.startswith(IMAGE + "s.")) and value.dim() == 3
                ):
                    obs[key] = value.unsqueeze(0)
        if self.part in ("all", "complementary"):
            comp = dict(comp)
            if isinstance(comp.get("task"), str):
                comp["task"] = [comp["task"]]
            for key in ("index", "task_index"):
                if isinstance(comp.get(key), torch.Tensor) and comp[key].dim() == 0:
                    comp[key] = comp[key].unsqueeze(0)
            for key, inner in (("messages", dict), ("message_streams", str), ("target_message_indices", int)):
                value = comp.get(key)
                if isinstance(value, list) and (not value or isinstance(value[0], inner)):
                    comp[key] = [value]
        return replace(t, action=action, observation=obs, complementary=comp)


@dataclass
class NewLineTask(Step):
    """smolvla_new_line_processor / pi0_new_line_processor: every task text ends with a newline."""

    def __call__(self, t: Transition) -> Transition:
        task = t.complementary.get("task")
        if isinstance(task, str):
            task = task if task.endswith("\n") else task + "\n"
        elif isinstance(task, list) and all(isinstance(s, str) for s in task):
            task = [s if s.endswith("\n") else s + "\n" for s in task]
        else:
            return t
        return replace(t, complementary={**t.complementary, "task": task})


@dataclass
class Tokenize(Step):
    """tokenizer_processor: the task texts -> observation.language.tokens (int64) / attention_mask (bool)."""

    tokenizer: HFTokenizer
    max_length: int
    task_key: str
    padding_side: str
    padding: Padding
    truncation: bool

    def __call__(self, t: Transition) -> Transition:
        obs = self._observation(t)
        if self.task_key not in t.complementary or t.complementary[self.task_key] is None:
            raise ConfigError(f"{self.where}: the batch has no {self.task_key!r} text to tokenize")
        task = t.complementary[self.task_key]
        if isinstance(task, str):
            task = [task]
        if not isinstance(task, list | tuple) or not all(isinstance(s, str) for s in task):
            raise ConfigError(f"{self.where}: {self.task_key!r} must be a str or a list of str")
        ids, mask = self.tokenizer.encode(
            list(task),
            max_length=self.max_length,
            padding=self.padding,
            padding_side="left" if self.padding_side == "left" else "right",
            truncation=self.truncation,
        )
        return replace(t, observation={**obs, TOKENS: ids, MASK: mask})


# device_processor's DTYPE_MAPPING; hotloop runs float32 and honours only the names that mean it.
DTYPES = {"float16", "float32", "float64", "bfloat16", "half", "float", "double"}
FLOAT32_NAMES = {"float32", "float"}


@dataclass
class Device(Step):
    """device_processor: `device` is recorded (hotloop stays on the CPU); `float_dtype` float32 casts."""

    device: str
    float_dtype: str | None

    def _tensor(self, v: Any) -> Any:
        if isinstance(v, torch.Tensor) and self.float_dtype is not None and v.is_floating_point():
            return v.to(torch.float32)
        return v

    def __call__(self, t: Transition) -> Transition:
        if self.float_dtype is None:
            return t
        return Transition(
            observation=None
            if t.observation is None
            else {k: self._tensor(v) for k, v in t.observation.items()},
            action=self._tensor(t.action),
            complementary={k: self._tensor(v) for k, v in t.complementary.items()},
            other={k: v if k == "info" else self._tensor(v) for k, v in t.other.items()},
        )


@dataclass
class Normalize(Step):
    """normalizer_processor (inverse False) / unnormalizer_processor (inverse True).

    Observation features are transformed by their type's mode, in `features` order; the action (batch key
    "action") by the ACTION mode, whatever `features` says, as in LeRobot. `stats[key][stat]` are float32
    tensors, visual ones (C,) reshaped to (C, 1, 1); they are cast to each input's dtype, as LeRobot does.
    """

    features: dict[str, Feature]
    norm_map: dict[FeatureType, NormMode]
    eps: float
    stats: dict[str, dict[str, torch.Tensor]]
    stats_file: Path | None
    inverse: bool
    observation_keys: frozenset[str] | None = None
    device: str | None = None

    def apply(self, x: torch.Tensor, key: str, ftype: FeatureType) -> torch.Tensor:
        mode = self.norm_map.get(ftype, NormMode.IDENTITY)
        if mode is NormMode.IDENTITY:
            return x
        stats = self.stats.get(key)
        if stats is None:  # only reachable for an action that `features` does not list
            raise CheckpointError(
                f"{self.stats_file or self.where}: no {key!r} statistics for its {mode.value} mode ({self.where})"
            )
        if not x.is_floating_point():
            raise ConfigError(
                f"{self.where}: {key!r} is {x.dtype} but {mode.value} normalisation needs floats "
                "(images as float in [0, 1], channels first)"
            )
        used = {name: stats[name].to(device=x.device, dtype=x.dtype) for name in mode.stat_names}
        for name, s in used.items():
            try:
                fits = torch.broadcast_shapes(x.shape, s.shape) == x.shape
            except RuntimeError:
                fits = False
            if not fits:  # LeRobot would fail, or silently broadcast into a bigger tensor
                raise ConfigError(
                    f"{self.where}: {key!r} has shape {tuple(x.shape)}; its statistic '{key}.{name}' of "
                    f"shape {tuple(s.shape)} does not broadcast to it"
                )
        return transform(x, mode, used, self.eps, self.inverse)

    def __call__(self, t: Transition) -> Transition:
        obs = t.observation
        if obs is not None:
            obs = dict(obs)
            for key, feature in self.features.items():
                if self.observation_keys is not None and key not in self.observation_keys:
                    continue
                if feature.type is not FeatureType.ACTION and key in obs:  # as_tensor even for IDENTITY
                    obs[key] = self.apply(torch.as_tensor(obs[key]), key, feature.type)
        action = t.action if t.action is None else self.apply(t.action, "action", FeatureType.ACTION)
        return replace(t, observation=obs, action=action)


@dataclass
class RelativeActions(Step):
    """relative_actions_processor: remembers the last observation.state (for its AbsoluteActions partner)
    and, when enabled, makes a given action relative to it on the masked dimensions."""

    enabled: bool
    exclude_joints: list[str]
    action_names: list[str] | None
    last_state: torch.Tensor | None = None

    def mask(self, action_dim: int) -> list[bool]:
        exclude = [str(n).lower() for n in self.exclude_joints if n]
        if not exclude or self.action_names is None:
            return [True] * action_dim
        mask = [
            not any(tok == str(n).lower() or tok in str(n).lower() for tok in exclude)
            for n in self.action_names[:action_dim]
        ]
        return mask + [True] * (action_dim - len(mask))

    def offset(self, actions: torch.Tensor, state: torch.Tensor, sign: int) -> torch.Tensor:
        """to_relative_actions (sign -1) / to_absolute_actions (sign +1) of relative_action_processor."""
        mask = torch.tensor(self.mask(actions.shape[-1]), dtype=actions.dtype, device=actions.device)
        dims = mask.shape[0]
        state = state.to(device=actions.device, dtype=actions.dtype)
        shift = state[..., :dims] * mask
        if actions.ndim == 3:
            shift = shift.unsqueeze(-2)
        actions = actions.clone()
        if sign < 0:
            actions[..., :dims] -= shift
        else:
            actions[..., :dims] += shift
        return actions

    def __call__(self, t: Transition) -> Transition:
        state = t.observation.get(STATE) if t.observation else None
        if state is not None:
            self.last_state = state
        if not self.enabled or t.action is None or state is None:
            return t
        return replace(t, action=self.offset(t.action, torch.as_tensor(state), -1))


@dataclass
class AbsoluteActions(Step):
    """absolute_actions_processor: when enabled, adds back the state its RelativeActions partner saw."""

    enabled: bool
    relative: RelativeActions | None = None

    def __call__(self, t: Transition) -> Transition:
        if not self.enabled:
            return t
        if self.relative is None:
            raise ConfigError(
                f"{self.where}: enabled but not paired with the preprocessor's relative_actions_processor; "
                "read both pipelines with read_policy_processors"
            )
        if self.relative.last_state is None:
            raise ConfigError(f"{self.where}: no robot state seen yet; run the preprocessor first")
        if t.action is None:
            return t
        return replace(t, action=self.relative.offset(t.action, torch.as_tensor(self.relative.last_state), 1))


@dataclass
class Pi05StatePrompt(Step):
    """pi05_prepare_state_tokenizer_processor_step: the (normalised) state, discretised into 256 bins,
    written into the prompt "Task: <task>, State: <bins>;\\nAction: " (openpi's pi0.5 format)."""

    max_state_dim: int
    task_key: str
    include_state_in_prompt: bool

    def __call__(self, t: Transition) -> Transition:
        state = (t.observation or {}).get(STATE)
        if state is None:
            raise ConfigError(f"{self.where}: pi0.5 needs 'observation.state'")
        tasks = t.complementary.get(self.task_key)
        if tasks is None:
            raise ConfigError(f"{self.where}: the batch has no {self.task_key!r} text")
        if not isinstance(tasks, list | tuple) or not all(isinstance(s, str) for s in tasks):
            raise ConfigError(f"{self.where}: {self.task_key!r} must be a list of str (after to_batch)")
        bins = None
        if self.include_state_in_prompt:
            state = torch.as_tensor(state)
            prompt_state = state[:, -1] if state.ndim == 3 else state
            if prompt_state.ndim != 2 or prompt_state.shape[0] != len(tasks):
                raise ConfigError(
                    f"{self.where}: state {tuple(state.shape)} does not hold one row per task ({len(tasks)})"
                )
            # np.digitize against float64 edges, no clipping: a state below -1 writes the bin "-1".
            bins = np.digitize(prompt_state.cpu().numpy(), bins=np.linspace(-1, 1, 256 + 1)[:-1]) - 1
        prompts = []
        for i, task in enumerate(tasks):
            text = task.strip().replace("_", " ").replace("\n", " ")
            if bins is None:
                prompts.append(f"Task: {text};\nAction: ")
            else:
                prompts.append(f"Task: {text}, State: {' '.join(map(str, bins[i]))};\nAction: ")
        return replace(t, complementary={**t.complementary, self.task_key: prompts})


__all__ = [
    "AbsoluteActions",
    "AddBatchDim",
    "Device",
    "NewLineTask",
    "Normalize",
    "Pi05StatePrompt",
    "RelativeActions",
    "RenameObservations",
    "Step",
    "Tokenize",
    "Transition",
    "as_tensor",
    "batch_to_transition",
    "transition_to_batch",
]
