"""`demo:conveyor-act`, `demo:conveyor-diffusion` and `demo:conveyor-smolvla`: demo policies shipped as
LeRobot checkpoint folders.

Each is a folder in the package assets in LeRobot's layout (`config.json`, `model.safetensors`, the
policy pre/post-processors and their statistics; SmolVLA's also `vlm_config.json` and the tokenizer
folder), written by `hotloop train-demo --family act|diffusion|smolvla --ship`. The target is that folder under a short name: every hook delegates to the family's checkpoint
target (`hotloop.families.<family>.checkpoint_targets`), so the demo runs exactly what a user's own
checkpoint of that family runs, and the folder doubles as an example of one.
"""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

from hotloop.errors import ConfigError
from hotloop.targets import TargetOptions

ASSETS = Path(__file__).resolve().parent.parent / "assets"
# Target name (after "demo:") -> (the family that reads it, its folder under the package assets).
SHIPPED: dict[str, tuple[str, str]] = {
    "conveyor-act": ("act", "demo_conveyor_act"),
    "conveyor-diffusion": ("diffusion", "demo_conveyor_diffusion"),
    "conveyor-smolvla": ("smolvla", "demo_conveyor_smolvla"),
}
# What `--ship` copies: the checkpoint proper, then what documents how it was made.
CHECKPOINT_FILES = (
    "config.json",
    "model.safetensors",
    "policy_preprocessor.json",
    "policy_postprocessor.json",
)
# Part of the checkpoint where the family writes it: the VLM sizes no tensor shows (SmolVLA).
EXTRA_FILES = ("vlm_config.json",)
DOC_FILES = ("train.json", "demo.json", "loss.png")


def _short(name: str) -> str:
    return name.split(":", 1)[1] if name.startswith("demo:") else name


def asset_dir(name: str) -> Path:
    """The shipped checkpoint folder of `demo:NAME` (or NAME)."""
    short = _short(name)
    if short not in SHIPPED:
        raise ConfigError(f"demo:{short} is not a shipped checkpoint demo; known: {', '.join(SHIPPED)}")
    folder = ASSETS / SHIPPED[short][1]
    if not (folder / "config.json").is_file() or not (folder / "model.safetensors").is_file():
        raise ConfigError(
            f"demo:{short}: its checkpoint {folder} is missing (config.json, model.safetensors); the package "
            f"install is incomplete: reinstall hotloop, or train one with `hotloop train-demo --family "
            f"{SHIPPED[short][0]} --ship`"
        )
    return folder


def _targets(name: str) -> ModuleType:
    from hotloop.families import CHECKPOINT_TARGETS

    return importlib.import_module(CHECKPOINT_TARGETS[SHIPPED[_short(name)][0]])


def build_bench(name: str, options: TargetOptions) -> Any:
    case = _targets(name).build_bench(str(asset_dir(name)), options)
    return dataclasses.replace(case, name=f"demo:{_short(name)}")


# The config.json field that is the chunk length each family's policy returns (ActPolicy.horizon:
# chunk_size; the diffusion and SmolVLA policies' specs: n_action_steps).
_HORIZON_FIELD = {"act": "chunk_size", "diffusion": "n_action_steps", "smolvla": "n_action_steps"}


def declared_horizon(name: str) -> int | None:
    """The shipped checkpoint's chunk length from its config.json, without loading it."""
    import json

    short = _short(name)
    if short not in SHIPPED:
        return None
    family, folder = SHIPPED[short]
    try:
        return int(json.loads((ASSETS / folder / "config.json").read_text())[_HORIZON_FIELD[family]])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # loading the checkpoint reports what is wrong with it


def build_policy(name: str, options: TargetOptions) -> Any:
    return _targets(name).build_policy(str(asset_dir(name)), options)


def build_source(name: str, options: TargetOptions) -> Any:
    """The folder's compile source under the demo's name: an artifact compiled from it records
    `demo:conveyor-...` as its target (baselines compare it with the demo's own runs)."""
    source = _targets(name).build_source(str(asset_dir(name)), options)
    return dataclasses.replace(source, target=f"demo:{_short(name)}")


def build_data(name: str, dataset: Any, options: TargetOptions, model: Any = None) -> Any:
    return _targets(name).build_data(str(asset_dir(name)), dataset, options, model)


def task_observations(name: str, options: TargetOptions, task: str, count: int) -> list[Any]:
    """One start observation per seed (options.seed + i) of `task`, mapped to the checkpoint's views and
    state by the closed loop's own adapter, as the model sees it (what compress calibrates and judges on)."""
    from hotloop.closedloop.adapter import adapt, request_views
    from hotloop.sim.tasks import make_task

    policy = build_policy(name, options)
    env = make_task(task)
    request_views(env, policy)
    adapted = adapt(policy, env.task_spec, policy_name=f"demo:{_short(name)}")
    observations = []
    try:
        for i in range(count):
            raw, _ = env.reset(seed=options.seed + i)
            obs = adapted.observation(raw)
            if hasattr(policy, "observe"):  # a policy with a history (Diffusion): it starts from this frame
                policy.reset()
                policy.observe(obs)
                observations.append(policy.observation())
            else:
                observations.append(policy.observation(obs))
    finally:
        env.close()
    # As the engines take them (what the planner checks and calibrates): SmolVLA's preprocessor pads the
    # prompt to the batch's longest, as LeRobot does; its engines hold the tokenizer's max_length slots.
    source = build_source(name, options)
    one = dataclasses.replace(source.shape, batch=1)
    return [source.family.validate_observation(source.cfg, one, o) for o in observations]


def ship(run_dir: str | Path, family: str, assets: Path = ASSETS) -> Path:
    """Copy a `train-demo --family FAMILY` run's checkpoint (and its processors' statistics files) into
    the package assets (`assets`), where `demo:conveyor-FAMILY` loads it."""
    import json
    import shutil

    short = f"conveyor-{family}"
    if short not in SHIPPED:
        raise ConfigError(f"--ship: no demo:{short} target ships; known: {', '.join(SHIPPED)}")
    src = Path(run_dir)
    stats, folders = [], []
    for processor in ("policy_preprocessor.json", "policy_postprocessor.json"):
        if (src / processor).is_file():
            for step in json.loads((src / processor).read_text()).get("steps", []):
                if step.get("state_file"):
                    stats.append(step["state_file"])
                tokenizer = (step.get("config") or {}).get("tokenizer_name")
                if step.get("registry_name") == "tokenizer_processor" and tokenizer:
                    folders.append(tokenizer)  # saved beside the processors (SmolVLA's prompt)
    files = [*CHECKPOINT_FILES, *stats, *(f for f in EXTRA_FILES if (src / f).is_file())]
    missing = [f for f in files if not (src / f).is_file()]
    missing += [f"{d}/" for d in folders if not (src / d).is_dir()]
    if missing:
        raise ConfigError(
            f"{src} lacks {', '.join(missing)}; train it first: `hotloop train-demo --family {family} -o {src}`"
        )
    dest = Path(assets) / SHIPPED[short][1]
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in [*files, *(f for f in DOC_FILES if (src / f).is_file())]:
        shutil.copyfile(src / name, dest / name)
    for folder in folders:
        shutil.copytree(src / folder, dest / folder)
    return dest


__all__ = [
    "SHIPPED",
    "asset_dir",
    "build_bench",
    "build_data",
    "build_policy",
    "build_source",
    "ship",
    "task_observations",
]
