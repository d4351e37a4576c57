"""hotloop as a LeRobot policy plugin: `lerobot-eval --policy.path=ART` runs a hotloop artifact.

LeRobot (>= 0.4.3) imports this package in every command (`register_third_party_plugins`), so importing it
registers the `hotloop` policy type and nothing heavier: the policy (`modeling_hotloop`), hotloop's runtime
and its backends are imported when LeRobot loads an artifact. See docs/lerobot.md.
"""

from lerobot_policy_hotloop.configuration_hotloop import HotloopConfig
from lerobot_policy_hotloop.errors import ArtifactRefused

__all__ = ["ArtifactRefused", "HotloopConfig"]
