"""Writing the files of a LeRobot checkpoint folder that every policy type shares (as `save_pretrained`
writes them at commit 7427f318), so that a policy hotloop trains is a folder any LeRobot reader loads:

- `config_header`: the fields every policy's config.json opens with (`PreTrainedConfig`'s), in its order;
  the policy type's own fields follow.
- `write_processors`: policy_preprocessor.json (rename -> to_batch -> [the policy's own steps] -> device ->
  normalizer) and policy_postprocessor.json (unnormalizer -> device), indent 2 as
  `DataProcessorPipeline._save_pretrained` writes them, and the normalisers' statistics files
  (`<feature>.<stat>`, float32): every feature's statistics go to both, as LeRobot hands the dataset
  statistics to both normalisers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

EPS = 1e-8  # the normalisers' default eps
_DEVICE_STEP = {"registry_name": "device_processor", "config": {"device": "cpu", "float_dtype": None}}


def config_header(
    policy_type: str, n_obs_steps: int, inputs: Mapping[str, Any], outputs: Mapping[str, Any]
) -> dict[str, Any]:
    """config.json's first fields: the policy type, its observation steps, its features, and the
    PreTrainedConfig defaults a CPU checkpoint holds."""
    return {
        "type": policy_type, "n_obs_steps": n_obs_steps, "input_features": dict(inputs),
        "output_features": dict(outputs), "device": "cpu", "use_amp": False, "use_peft": False,
        "push_to_hub": False, "repo_id": None, "private": None, "tags": None, "license": None,
        "pretrained_path": None, "pretrained_revision": None,
    }  # fmt: skip


def write_processors(
    folder: Path,
    config_json: Mapping[str, Any],
    stats: Mapping[str, Mapping[str, Any]],
    own_steps: Sequence[Mapping[str, Any]] = (),
) -> None:
    """The two processor pipelines of the policy `config_json` describes (its input and output features,
    its normalization_mapping), normalising with `stats` (feature -> statistic -> values); `own_steps`:
    the policy's steps between to_batch and device (SmolVLA's newline and tokenizer)."""
    import torch

    from hotloop.io import save_tensors

    flat = {
        f"{key}.{name}": torch.as_tensor(np.asarray(value, dtype=np.float32)).contiguous()
        for key, per in stats.items()
        for name, value in per.items()
    }
    before = [
        {"registry_name": "rename_observations_processor", "config": {"rename_map": {}}},
        {"registry_name": "to_batch_processor", "config": {}},
        *own_steps,
        _DEVICE_STEP,
    ]
    inputs, outputs = config_json["input_features"], config_json["output_features"]
    norm_map = config_json["normalization_mapping"]
    pre_state = f"policy_preprocessor_step_{len(before)}_normalizer_processor.safetensors"
    post_state = "policy_postprocessor_step_0_unnormalizer_processor.safetensors"

    def normalizer(registry_name: str, features: Mapping[str, Any], state: str) -> dict[str, Any]:
        config = {"eps": EPS, "features": dict(features), "norm_map": dict(norm_map)}
        return {"registry_name": registry_name, "config": config, "state_file": state}

    pre = {
        "name": "policy_preprocessor",
        "steps": [*before, normalizer("normalizer_processor", {**inputs, **outputs}, pre_state)],
    }
    post = {
        "name": "policy_postprocessor",
        "steps": [normalizer("unnormalizer_processor", outputs, post_state), _DEVICE_STEP],
    }
    folder.mkdir(parents=True, exist_ok=True)
    for pipeline, state in ((pre, pre_state), (post, post_state)):
        (folder / f"{pipeline['name']}.json").write_text(json.dumps(pipeline, indent=2))
        save_tensors(flat, str(folder / state))
