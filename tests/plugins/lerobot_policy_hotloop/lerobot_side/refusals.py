"""What `lerobot-eval` meets when an artifact cannot run here, at its `make_policy` call and at the first step
of its rollout (run in .venv-lerobot, every scenario in this one process).

    python refusals.py ART WORK     -> JSON: scenario -> {"refused": reason} | {"loaded": ...} | {"error": ...}

Each scenario is a copy of ART in WORK, changed as it would be in the field: a processor statistics file
changed (tampered), config.json edited, the manifest of another hotloop version, a plan needing a CPU feature
this machine lacks; and an environment whose action differs from the checkpoint's (Aloha's 14 against
PushT's 2). With `--policy.fallback=eager` (a CLI override of the config field) a plan that cannot run is
replaced by LeRobot's own policy of the source checkpoint, said once in the log, but a changed file is still
refused. Past `make_policy`: PushT observed through its state only (no camera) against a plan that sees its
view, run as `lerobot-eval` runs it (`make_env`, `make_policy`, the processors with its overrides, then
LeRobot's own `rollout`), is refused at the first `select_action`, naming the missing key.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lerobot.configs.policies import PreTrainedConfig
from lerobot.envs.configs import AlohaEnv, PushtEnv
from lerobot.policies.factory import make_policy
from lerobot.utils.import_utils import register_third_party_plugins


def flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def edit_json(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))


def needs_missing_feature(manifest: dict[str, Any]) -> None:
    manifest["sub_engines"][0]["requires_cpu_features"] = ["hotloop_test_absent_feature"]


CHANGES: dict[str, Callable[[Path], None]] = {
    "intact": lambda art: None,
    "tampered_stats": lambda art: flip_byte(
        next(art.glob("policy_preprocessor_step_*_normalizer_processor.safetensors"))
    ),
    "edited_config": lambda art: edit_json(art / "config.json", lambda c: c.update(n_action_steps=3)),
    "other_version": lambda art: edit_json(
        art / "manifest.json", lambda m: m.update(hotloop_version="0.0.1")
    ),
    "cpu_lacks_feature": lambda art: edit_json(art / "manifest.json", needs_missing_feature),
}
SCENARIOS = [  # (name, change, env, --policy overrides)
    ("intact", "intact", "pusht", []),
    ("tampered_stats", "tampered_stats", "pusht", []),
    ("edited_config", "edited_config", "pusht", []),
    ("other_version", "other_version", "pusht", []),
    ("cpu_lacks_feature", "cpu_lacks_feature", "pusht", []),
    ("env_action_differs", "intact", "aloha", []),
    ("fallback_cpu", "cpu_lacks_feature", "pusht", ["--fallback=eager"]),
    ("fallback_tampered", "tampered_stats", "pusht", ["--fallback=eager"]),
]


class Count(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "fallback" in record.getMessage():
            self.messages.append(record.getMessage())


def scenario(art: Path, env: str, overrides: list[str]) -> dict[str, Any]:
    from lerobot_policy_hotloop import ArtifactRefused

    counter = Count()
    logging.getLogger().addHandler(counter)
    try:
        cfg = PreTrainedConfig.from_pretrained(art, cli_overrides=overrides)
        cfg.pretrained_path = art
        env_cfg = PushtEnv(observation_height=96, observation_width=96) if env == "pusht" else AlohaEnv()
        policy = make_policy(cfg, env_cfg=env_cfg)
    except ArtifactRefused as refused:
        return {"refused": refused.reason, "exit_message": str(refused.code)}
    except Exception as exc:  # noqa: BLE001 - reported, and the test fails on it
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        logging.getLogger().removeHandler(counter)
    source = type(policy.source).__name__ if policy.source is not None else None
    return {"loaded": type(policy).__name__, "source": source, "fallback_messages": counter.messages}


def rollout_scenario(art: Path) -> dict[str, Any]:
    """`lerobot-eval --env.obs_type=environment_state_agent_pos` on ART, past argument parsing: its calls in its
    order (eval_main's), one environment, stopped where the plugin stops it."""
    from lerobot.envs.factory import make_env, make_env_pre_post_processors
    from lerobot.policies.factory import make_pre_post_processors
    from lerobot.scripts.lerobot_eval import rollout
    from lerobot_policy_hotloop import ArtifactRefused

    env_cfg = PushtEnv(
        obs_type="environment_state_agent_pos", episode_length=20, observation_height=96, observation_width=96
    )
    (env,) = (env for tasks in make_env(env_cfg, n_envs=1).values() for env in tasks.values())
    try:
        cfg = PreTrainedConfig.from_pretrained(art)
        cfg.pretrained_path = art
        policy = make_policy(cfg, env_cfg=env_cfg)
        overrides = {
            "device_processor": {"device": "cpu"},
            "rename_observations_processor": {"rename_map": {}},
        }
        pre, post = make_pre_post_processors(cfg, pretrained_path=str(art), preprocessor_overrides=overrides)
        env_pre, env_post = make_env_pre_post_processors(env_cfg=env_cfg, policy_cfg=cfg)
        rollout(env, policy, env_pre, env_post, pre, post, seeds=[0])
    except ArtifactRefused as refused:
        return {"refused": refused.reason, "exit_message": str(refused.code)}
    except Exception as exc:  # noqa: BLE001 - reported, and the test fails on it
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        env.close()
    return {"loaded": type(policy).__name__, "ran": "a whole episode"}


def main() -> None:
    art, work = Path(sys.argv[1]), Path(sys.argv[2])
    register_third_party_plugins()
    copies = {}
    for name, change in CHANGES.items():
        copies[name] = work / name
        shutil.copytree(art, copies[name])
        change(copies[name])
    outcomes = {name: scenario(copies[c], env, o) for name, c, env, o in SCENARIOS}
    outcomes["env_observation_differs"] = rollout_scenario(copies["intact"])
    print(json.dumps(outcomes))


if __name__ == "__main__":
    main()
