"""The plugin's policy of each ART, loaded as LeRobot loads it, run over one episode twice from two torch
seeds (run in .venv-lerobot): a plan made with the recipe step `zero-noise` starts every chunk at x = 0,
so the two runs give the same actions; one that draws its start does not.

    python zero_noise.py ART [ART ...]      prints JSON {ART: largest |difference| between the two runs}
"""

from __future__ import annotations

import json
import sys

from lerobot.utils.import_utils import register_third_party_plugins
from same_actions import episode, load, run


def main() -> None:
    register_third_party_plugins()
    out = {}
    for art in sys.argv[1:]:
        policy, pre, post = load(art, [], eval_overrides=True)
        frames = episode(policy.config, 1, 8, seed=5)
        first, _ = run(policy, pre, post, frames, seed=0)
        second, _ = run(policy, pre, post, frames, seed=1)
        out[art] = float((first - second).abs().max())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
