"""LeRobot's policy pre/post-processor pipelines, read from a checkpoint folder and applied as LeRobot does.

`save_pretrained` writes `policy_preprocessor.json` / `policy_postprocessor.json` ({"name", "steps": [
{"registry_name", "config", "state_file"?, "artifacts"?}, ...]}) plus one safetensors file per stateful
step (`<name>_step_<i>_<registry_name>.safetensors`, keys `<feature>.<stat>`). `read_pipeline` rebuilds
the steps in order, one small class per registered step of LeRobot commit 7427f318 that a policy
checkpoint can hold, and `ProcessorPipeline(batch)` runs them on LeRobot's transition (observation,
action, complementary data) with LeRobot's torch operations, so float32 results match bitwise.

What is refused, always with a CheckpointError naming the file, the step (index and registry name) and the
field: an unknown registry name or a class path, a config key LeRobot's step does not take (LeRobot fails
to build it too), an unknown mode, feature type or dtype, a normalised feature without the statistics its
mode needs (LeRobot silently passes such a feature through unnormalised; hotloop will not), a statistic
whose shape does not broadcast into the feature's, a missing state file or tokenizer folder. Bad inputs at
call time (a missing task, integer images for a normalised feature, a state of the wrong width) are a
ConfigError naming the step.

Inputs: numpy arrays are turned into tensors of the same dtype at the door (LeRobot's callers hand it
tensors); a numpy string array under "task" becomes a list of str. Devices are recorded, never moved to:
hotloop runs on the CPU. The relative/absolute action steps of pi0 / pi0.5 share state (the last seen
robot state), as in LeRobot, so one pipeline pair serves one robot at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hotloop.errors import CheckpointError, ConfigError
from hotloop.lerobot.features import Feature, FeatureType, NormMode, bad_field, read_features, read_norm_map
from hotloop.lerobot.steps import (
    DTYPES,
    FLOAT32_NAMES,
    AbsoluteActions,
    AddBatchDim,
    Device,
    NewLineTask,
    Normalize,
    Pi05StatePrompt,
    RelativeActions,
    RenameObservations,
    Step,
    Tokenize,
    Transition,
    as_tensor,
    batch_to_transition,
    transition_to_batch,
)
from hotloop.lerobot.tokenizer import Padding, load_tokenizer
from hotloop.models.checkpoint_meta import Fields, read_json_object

# --- reading a pipeline -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    """One `steps[i]` of a pipeline file, with what its builder needs to resolve files."""

    file: Path
    folder: Path
    index: int
    name: str
    config: Fields
    state_file: Path | None
    artifacts: dict[str, str]

    @property
    def where(self) -> str:
        return f"{self.file.name} step {self.index} ({self.name})"


def _only(e: _Entry, allowed: tuple[str, ...], refused: tuple[str, ...] = ()) -> None:
    """LeRobot builds a step as `cls(**config)`: a key the class does not take fails there too."""
    for key in e.config.data:
        if key in refused:
            raise CheckpointError(
                f"{e.file}: field {e.config.name(key)!r} is set; hotloop takes this step's {key} only from "
                "the checkpoint's own files, not from the config"
            )
        if key not in allowed:
            raise CheckpointError(
                f"{e.file}: field {e.config.name(key)!r} is not a setting of {e.name} (it takes "
                f"{', '.join(allowed) or 'none'}); LeRobot cannot build this step either"
            )


def _bool(cfg: Fields, key: str, default: bool) -> bool:
    value = cfg.data.get(key, default)
    if not isinstance(value, bool):
        raise bad_field(cfg, key, "true or false")
    return value


def _strings(cfg: Fields, key: str) -> list[str] | None:
    value = cfg.data.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise bad_field(cfg, key, "a list of strings or null")
    return list(value)


def _inside(e: _Entry, relative: str, what: str) -> Path:
    """A path the checkpoint names, which must stay inside the checkpoint folder. LeRobot 0.4 saves the
    tokenizer step's `tokenizer_name` as the VLM's name as given, so an absolute path is accepted when it
    names a place inside the folder (a VLM saved into the checkpoint)."""
    rel = Path(relative)
    if rel.is_absolute() and rel.resolve().is_relative_to(e.folder.resolve()):
        rel = rel.resolve().relative_to(e.folder.resolve())
    if rel.is_absolute() or ".." in rel.parts:
        raise CheckpointError(f"{e.file}: {what} {relative!r} must be a path inside {e.folder}")
    return e.folder / rel


def _rename(e: _Entry) -> Step:
    _only(e, ("rename_map",))
    mapping = e.config.obj("rename_map")
    rename_map: dict[str, str] = {}
    for key, value in (mapping.data if mapping is not None else {}).items():
        if not isinstance(value, str):
            assert mapping is not None
            raise bad_field(mapping, key, "a string (the new key)")
        rename_map[key] = value
    return RenameObservations(e.where, rename_map)


def _no_config(cls: Callable[[str], Step]) -> Callable[[_Entry], Step]:
    def build(e: _Entry) -> Step:
        _only(e, ())
        return cls(e.where)

    return build


def _device(e: _Entry) -> Step:
    _only(e, ("device", "float_dtype"))
    device = e.config.string("device") or "cpu"
    dtype = e.config.data.get("float_dtype")
    if dtype is not None:
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise bad_field(e.config, "float_dtype", "null or one of " + ", ".join(sorted(DTYPES)))
        if dtype not in FLOAT32_NAMES:
            raise CheckpointError(
                f"{e.file}: field {e.config.name('float_dtype')!r} is {dtype!r}; hotloop runs LeRobot's "
                "processors in float32 (null, 'float32' or 'float')"
            )
    return Device(e.where, device, dtype)


def _load_stats(e: _Entry, path: Path, features: dict[str, Feature]) -> dict[str, dict[str, torch.Tensor]]:
    """NormalizerProcessorStep.load_state_dict: `<feature>.<stat>` -> float32, visual (C,) -> (C, 1, 1)."""
    if not path.is_file():
        raise CheckpointError(f"{path} is missing; {e.file.name} names it as the state_file of {e.name}")
    from safetensors.torch import load_file

    try:
        flat = load_file(str(path))
    except Exception as exc:  # SafetensorError / OSError on damaged files
        raise CheckpointError(
            f"{path} is not a readable safetensors file (corrupt or truncated?): {exc}"
        ) from None
    from hotloop.finite import check_finite_weights

    check_finite_weights(flat.items(), path)  # NaN statistics would normalise every input to NaN
    stats: dict[str, dict[str, torch.Tensor]] = {}
    for flat_key, tensor in flat.items():
        if "." not in flat_key:
            raise CheckpointError(f"{path}: key {flat_key!r} is not '<feature>.<stat>'")
        key, stat = flat_key.rsplit(".", 1)
        stats.setdefault(key, {})[stat] = tensor.to(torch.float32)
    for key, feature in features.items():
        if feature.type is FeatureType.VISUAL and key in stats:
            stats[key] = {n: s.reshape(-1, 1, 1) if s.ndim == 1 else s for n, s in stats[key].items()}
    return stats


def _fits(stat: tuple[int, ...], feature: tuple[int, ...]) -> bool:
    """True when the statistic broadcasts into the feature's shape without growing it (leading 1s aside)."""
    dims = list(stat)
    while len(dims) > len(feature) and dims[0] == 1:
        dims.pop(0)
    try:
        return tuple(torch.broadcast_shapes(torch.Size(dims), torch.Size(feature))) == feature
    except RuntimeError:
        return False


def _normalizer(e: _Entry, inverse: bool) -> Step:
    cfg = e.config
    _only(e, ("eps", "features", "norm_map", "normalize_observation_keys", "device"), ("stats", "dtype"))
    for needed in ("features", "norm_map"):
        if needed not in cfg:
            raise CheckpointError(f"{e.file}: field {cfg.name(needed)!r} is missing; {e.name} needs it")
    eps = cfg.number("eps", positive=False)
    if eps is not None and eps < 0:
        raise bad_field(cfg, "eps", "a number >= 0")
    features_fields, norm_fields = cfg.obj("features"), cfg.obj("norm_map")
    assert features_fields is not None and norm_fields is not None
    features, norm_map = read_features(features_fields), read_norm_map(norm_fields)
    keys = _strings(cfg, "normalize_observation_keys")
    stats = _load_stats(e, e.state_file, features) if e.state_file is not None else {}
    source = e.state_file or e.file
    for key, feature in features.items():
        mode = norm_map.get(feature.type, NormMode.IDENTITY)
        skipped = keys is not None and key not in keys and feature.type is not FeatureType.ACTION
        if mode is NormMode.IDENTITY or skipped:
            continue
        needs = " and ".join(f"'{key}.{n}'" for n in mode.stat_names)
        held = stats.get(key, {})
        for name in mode.stat_names:
            if name not in held:
                lacks = f"lacks '{key}.{name}'" if e.state_file else "has no state_file (saved without stats)"
                raise CheckpointError(
                    f"{source}: {lacks}, but feature {key!r} ({feature.type.value}) is normalised "
                    f"{mode.value}, which needs {needs}"
                )
            stat = held[name]
            if not _fits(tuple(stat.shape), feature.shape):
                raise CheckpointError(
                    f"{source}: '{key}.{name}' has shape {tuple(stat.shape)}, which does not broadcast to "
                    f"the shape {feature.shape} of feature {key!r}"
                )
            if not bool(torch.isfinite(stat).all()):
                raise CheckpointError(f"{source}: '{key}.{name}' holds NaN or infinite values")
    return Normalize(
        e.where,
        features=features,
        norm_map=norm_map,
        eps=1e-8 if eps is None else eps,
        stats=stats,
        stats_file=e.state_file,
        inverse=inverse,
        observation_keys=None if keys is None else frozenset(keys),
        device=cfg.string("device") if cfg.data.get("device") is not None else None,
    )


_PADDINGS: dict[Any, Padding] = {
    "longest": "longest", "max_length": "max_length", "do_not_pad": "do_not_pad", True: "longest",
    False: "do_not_pad",
}  # fmt: skip


def _tokenizer(e: _Entry) -> Step:
    cfg = e.config
    _only(
        e,
        ("tokenizer_name", "max_length", "task_key", "padding_side", "padding", "truncation"),
        ("tokenizer",),
    )
    name = cfg.string("tokenizer_name")
    if name is None:
        raise CheckpointError(f"{e.file}: field {cfg.name('tokenizer_name')!r} is missing; {e.name} needs it")
    padding = cfg.data.get("padding", "max_length")
    if not isinstance(padding, str | bool) or padding not in _PADDINGS:
        raise bad_field(cfg, "padding", "one of 'longest', 'max_length', 'do_not_pad'")
    rel = e.artifacts.get("tokenizer_name", name)
    folder = _inside(e, rel, "tokenizer_name")
    if not folder.is_dir():
        if "tokenizer_name" in e.artifacts:
            raise CheckpointError(
                f"{e.file}: the tokenizer artifact {rel!r} is missing: {folder} is not a folder"
            )
        raise CheckpointError(
            f"{e.file}: field {cfg.name('tokenizer_name')!r} is {name!r}, which is not a folder inside "
            f"{e.folder}; hotloop downloads nothing: save the tokenizer into the checkpoint"
        )
    tokenizer = load_tokenizer(folder)
    step = Tokenize(
        e.where,
        tokenizer=tokenizer,
        max_length=cfg.integer("max_length", minimum=1) or 512,
        task_key=cfg.string("task_key") or "task",
        padding_side=cfg.string("padding_side", ("left", "right")) or "right",
        padding=_PADDINGS[padding],
        truncation=_bool(cfg, "truncation", True),
    )
    if step.padding != "do_not_pad" and tokenizer.pad_id is None:
        raise CheckpointError(
            f"{folder / 'tokenizer_config.json'}: no pad token, but {e.name} pads ({step.padding!r}); "
            "set 'pad_token'"
        )
    return step


def _relative(e: _Entry) -> Step:
    _only(e, ("enabled", "exclude_joints", "action_names"))
    return RelativeActions(
        e.where,
        enabled=_bool(e.config, "enabled", False),
        exclude_joints=_strings(e.config, "exclude_joints") or [],
        action_names=_strings(e.config, "action_names"),
    )


def _absolute(e: _Entry) -> Step:
    _only(e, ("enabled",), ("relative_step",))
    return AbsoluteActions(e.where, enabled=_bool(e.config, "enabled", False))


def _pi05_prompt(e: _Entry) -> Step:
    # LeRobot saves this step with config {} (it defines no get_config): the defaults are what runs.
    _only(e, ("max_state_dim", "task_key", "include_state_in_prompt"))
    return Pi05StatePrompt(
        e.where,
        max_state_dim=e.config.integer("max_state_dim") or 32,
        task_key=e.config.string("task_key") or "task",
        include_state_in_prompt=_bool(e.config, "include_state_in_prompt", True),
    )


_BUILDERS: dict[str, Callable[[_Entry], Step]] = {
    "rename_observations_processor": _rename,
    "to_batch_processor": _no_config(AddBatchDim),
    "to_batch_processor_action": _no_config(lambda where: AddBatchDim(where, "action")),
    "to_batch_processor_observation": _no_config(lambda where: AddBatchDim(where, "observation")),
    "to_batch_processor_complementary_data": _no_config(lambda where: AddBatchDim(where, "complementary")),
    "device_processor": _device,
    "normalizer_processor": lambda e: _normalizer(e, inverse=False),
    "unnormalizer_processor": lambda e: _normalizer(e, inverse=True),
    "smolvla_new_line_processor": _no_config(NewLineTask),
    "pi0_new_line_processor": _no_config(NewLineTask),
    "tokenizer_processor": _tokenizer,
    "relative_actions_processor": _relative,
    "absolute_actions_processor": _absolute,
    "pi05_prepare_state_tokenizer_processor_step": _pi05_prompt,
}
_STATEFUL = {"normalizer_processor", "unnormalizer_processor"}
KNOWN_STEPS = tuple(_BUILDERS)


@dataclass(frozen=True)
class ProcessorPipeline:
    """A LeRobot processor pipeline: `pipeline(batch)` for a preprocessor, `pipeline.action(a)` for the
    postprocessor's action path (an action (B, chunk, A) or (B, A) in model space -> robot units)."""

    name: str
    file: Path
    steps: tuple[Step, ...]

    def run(self, t: Transition) -> Transition:
        for step in self.steps:
            t = step(t)
        return t

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """A LeRobot batch ({"observation.state": ..., "observation.images.top": ..., "task": ...}) through
        every step; returns the observation entries (tensors), the complementary data and any action."""
        return transition_to_batch(self.run(batch_to_transition(batch)))

    def action(self, action: torch.Tensor | np.ndarray) -> torch.Tensor:
        """policy_action_to_transition -> steps -> transition_to_policy_action."""
        tensor = as_tensor(action)
        if not isinstance(tensor, torch.Tensor):
            raise ConfigError(f"{self.file.name}: the action must be a numeric array or tensor")
        out = self.run(Transition(None, tensor, {})).action
        assert isinstance(out, torch.Tensor)
        return out

    def find(self, kind: type[Step]) -> list[Step]:
        """The steps of one kind (e.g. Normalize), in order."""
        return [s for s in self.steps if isinstance(s, kind)]


def read_pipeline(folder: Path, name: str) -> ProcessorPipeline:
    """`folder/<name>.json` ("policy_preprocessor" / "policy_postprocessor") and the files it names."""
    path = folder / f"{name}.json"
    if not path.is_file():
        raise CheckpointError(f"{path} is missing; LeRobot's save_pretrained writes it beside config.json")
    data = Fields(read_json_object(path), path)
    raw_steps = data.data.get("steps")
    if not isinstance(raw_steps, list):
        raise CheckpointError(f"{path}: field 'steps' must be a list of steps; this is no LeRobot pipeline")
    steps: list[Step] = []
    for i, raw in enumerate(raw_steps):
        if not isinstance(raw, dict):
            raise CheckpointError(f"{path}: field 'steps[{i}]' must be an object {{\"registry_name\": ...}}")
        entry = Fields(raw, path, f"steps[{i}].")
        registry = entry.string("registry_name")
        if registry is None:
            what = f"the class {raw['class']!r}" if "class" in raw else "no registry_name"
            raise CheckpointError(
                f"{path}: step {i} has {what}; hotloop runs LeRobot's registered steps only"
            )
        if registry not in _BUILDERS:
            raise CheckpointError(
                f"{path}: field {entry.name('registry_name')!r} is {registry!r}, a step hotloop does not "
                f"know; it runs {', '.join(KNOWN_STEPS)}"
            )
        config = entry.obj("config") or Fields({}, path, f"steps[{i}].config.")
        artifacts_fields = entry.obj("artifacts")
        artifacts = {} if artifacts_fields is None else dict(artifacts_fields.data)
        if not all(isinstance(v, str) for v in artifacts.values()):
            raise CheckpointError(f"{path}: field 'steps[{i}].artifacts' must map names to relative paths")
        e = _Entry(path, folder, i, registry, config, None, artifacts)
        try:
            state = entry.string("state_file")
            if state is not None:
                state_path = _inside(e, state, "state_file")
                # LeRobot loads a named state file for any step (a no-op for stateless ones): it must exist.
                if registry not in _STATEFUL and not state_path.is_file():
                    raise CheckpointError(f"{state_path} is missing; {path.name} names it as a state_file")
                e = replace(e, state_file=state_path)
            steps.append(_BUILDERS[registry](e))
        except CheckpointError as exc:
            raise CheckpointError(f"{exc} (step {i}: {registry})") from None
    return ProcessorPipeline(data.string("name") or name, path, tuple(steps))


def read_policy_processors(folder: Path) -> tuple[ProcessorPipeline, ProcessorPipeline]:
    """(preprocessor, postprocessor) of a checkpoint, wired as LeRobot's make_pre_post_processors wires
    them: the postprocessor's absolute_actions_processor reads the preprocessor's relative step's state."""
    pre = read_pipeline(folder, "policy_preprocessor")
    post = read_pipeline(folder, "policy_postprocessor")
    relative = next((s for s in pre.steps if isinstance(s, RelativeActions)), None)
    for step in post.steps:
        if isinstance(step, AbsoluteActions) and step.relative is None:
            step.relative = relative
    return pre, post


__all__ = ["KNOWN_STEPS", "ProcessorPipeline", "read_pipeline", "read_policy_processors"]
