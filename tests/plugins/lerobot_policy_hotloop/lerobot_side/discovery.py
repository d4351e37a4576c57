"""LeRobot finds the plugin and loads an artifact as its own commands do (run in .venv-lerobot).

    python discovery.py ART     -> JSON of what LeRobot's factory returned

`hotloop` is not a known policy type before `register_third_party_plugins` and is after; ART/config.json
parses into HotloopConfig (every key a field); `make_policy(cfg, env_cfg=PushT)` (lerobot-eval's call) gives
the plugin's policy over the compiled plan; `make_pre_post_processors` loads ART's processors with
lerobot-eval's `device_processor` / `rename_observations_processor` overrides, and the plugin's own factory
loads the same pipelines.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from lerobot.configs.policies import PreTrainedConfig
from lerobot.envs.configs import PushtEnv
from lerobot.policies.factory import make_policy, make_pre_post_processors
from lerobot.utils.import_utils import register_third_party_plugins


def main() -> None:
    art = Path(sys.argv[1])
    before = "hotloop" in PreTrainedConfig.get_known_choices()
    register_third_party_plugins()
    after = "hotloop" in PreTrainedConfig.get_known_choices()
    cfg = PreTrainedConfig.from_pretrained(art)
    cfg.pretrained_path = art
    fields = {f.name for f in dataclasses.fields(cfg)}
    keys = set(json.loads((art / "config.json").read_text())) - {"type"}
    policy = make_policy(cfg, env_cfg=PushtEnv(observation_height=96, observation_width=96))
    overrides = {"device_processor": {"device": "cpu"}, "rename_observations_processor": {"rename_map": {}}}
    pre, post = make_pre_post_processors(cfg, pretrained_path=str(art), preprocessor_overrides=overrides)
    from lerobot_policy_hotloop.processor_hotloop import make_hotloop_pre_post_processors

    own_pre, own_post = make_hotloop_pre_post_processors(cfg)
    print(json.dumps({
        "known_before": before,
        "known_after": after,
        "config_class": type(cfg).__name__,
        "keys_not_fields": sorted(keys - fields),
        "source_type": cfg.source_type,
        "policy_class": type(policy).__name__,
        "policy_module": type(policy).__module__,
        "runs_plan": policy.plan is not None and policy.source is None,
        "engine_path": str(policy.plan.engine.path),
        "pre_steps": [type(s).__name__ for s in pre.steps],
        "post_steps": [type(s).__name__ for s in post.steps],
        "own_pre_steps": [type(s).__name__ for s in own_pre.steps],
        "own_post_steps": [type(s).__name__ for s in own_post.steps],
    }))  # fmt: skip


if __name__ == "__main__":
    main()
