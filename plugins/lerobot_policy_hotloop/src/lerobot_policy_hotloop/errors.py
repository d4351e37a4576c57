"""How the plugin refuses: one line that names the cause and the fix, and LeRobot's command stops.

LeRobot's commands (`lerobot-eval`, `lerobot-record`) print a traceback for any exception that reaches
them. Where the plugin knows the cause (a tampered file, another hotloop version, a CPU without the plan's
features, an observation the plan was not compiled for), a traceback through LeRobot's code only hides the
one line that matters, so the refusal is a `SystemExit` carrying that line: Python prints it and exits
non-zero. Library code catches it by class (`except ArtifactRefused`); `except Exception` does not.
"""

from __future__ import annotations

PREFIX = "lerobot_policy_hotloop"


class ArtifactRefused(SystemExit):
    """The plugin cannot run this artifact here; `reason` is the one line (also the exit message)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"{PREFIX}: {reason}")


__all__ = ["ArtifactRefused"]
