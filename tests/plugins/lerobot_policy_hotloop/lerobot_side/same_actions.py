"""LeRobot's own policy of CKPT against the plugin's policy of ART (hotloop's plan of CKPT), observation by
observation, through each one's LeRobot processors (run in .venv-lerobot).

    python same_actions.py SPEC     SPEC: JSON {"episodes": 2, "steps": 22, "cases": {NAME: {"ckpt": CKPT,
                                    "art": ART, "batches": [1, 2], "set": ["FIELD=VALUE", ...]}, ...}}

Every case runs in this one process (LeRobot's imports, ~5 CPU-s, are paid once), one after the other, each
loading its own pair of policies. Both policies are loaded as LeRobot loads them: the config from the folder
(`set` applied to both as `--policy.FIELD=VALUE` would be), the class from LeRobot's factory (the plugin
found by `register_third_party_plugins`), the pre/post-processors by
`make_pre_post_processors(pretrained_path=...)` with `lerobot-eval`'s overrides on the plugin's side. Each
episode is one stream of raw observations (seeded images in [0, 1], a state random walk around the
checkpoint's statistics, a task text), fed to both after `reset()`, each side starting from the same torch
seed (Diffusion's and SmolVLA's noise come from it).
Prints JSON {NAME: report}: per batch size and episode, the agreement of the normalised actions
(`select_action`) under the artifact's tolerance, their largest difference in robot units, and
`predict_action_chunk` beside; a case that crashed reports {"error": its traceback}, and the others still run.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any

import torch
from lerobot.configs.policies import PreTrainedConfig
from lerobot.policies.factory import get_policy_class, make_pre_post_processors
from lerobot.utils.import_utils import register_third_party_plugins

OVERRIDES = {"device_processor": {"device": "cpu"}, "rename_observations_processor": {"rename_map": {}}}


def load(folder: str, overrides: list[str], eval_overrides: bool) -> tuple[Any, Any, Any]:
    cfg = PreTrainedConfig.from_pretrained(folder, cli_overrides=[f"--{o}" for o in overrides])
    cfg.pretrained_path = Path(folder)
    policy = get_policy_class(cfg.type).from_pretrained(folder, config=cfg)
    pre, post = make_pre_post_processors(
        cfg, pretrained_path=folder, preprocessor_overrides=OVERRIDES if eval_overrides else {}
    )
    return policy, pre, post


def episode(cfg: Any, batch: int, steps: int, seed: int) -> list[dict[str, Any]]:
    """Raw observations as LeRobot's env preprocessing hands them over: float images in [0, 1] (B, C, H, W),
    the state (B, S) as a random walk, the task text per row."""
    gen = torch.Generator().manual_seed(seed)
    state_ft = cfg.input_features["observation.state"]
    state = torch.randn(batch, *state_ft.shape, generator=gen)
    frames = []
    for _ in range(steps):
        state = state + 0.3 * torch.randn(state.shape, generator=gen)
        obs: dict[str, Any] = {"observation.state": state.clone()}
        for key, ft in cfg.input_features.items():
            if ft.type.value == "VISUAL":
                obs[key] = torch.rand(batch, *ft.shape, generator=gen)
        words = torch.randint(6, 512, (batch, 5), generator=gen)
        obs["task"] = [" ".join(f"w{int(w)}" for w in row) for row in words]
        frames.append(obs)
    return frames


def run(
    policy: Any, pre: Any, post: Any, frames: list[dict[str, Any]], seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(normalised actions (T, B, A), robot-unit actions (T, B, A)) of one episode."""
    policy.reset()
    torch.manual_seed(seed)
    model, raw = [], []
    with torch.inference_mode():
        for obs in frames:
            action = policy.select_action(pre(dict(obs)))
            model.append(action.clone())
            raw.append(post(action.clone()))
    return torch.stack(model), torch.stack(raw)


def chunk(policy: Any, pre: Any, frame: dict[str, Any], seed: int) -> torch.Tensor:
    policy.reset()
    torch.manual_seed(seed)
    with torch.inference_mode():
        batch = pre(dict(frame))
        if "diffusion" in (policy.config.type, getattr(policy.config, "source_type", "")):
            # LeRobot's Diffusion predicts from the history select_action keeps, under the key select_action
            # stacks its cameras into (its predict_action_chunk expects the caller to have done both).
            cams = [k for k, ft in policy.config.input_features.items() if ft.type.value == "VISUAL"]
            batch = {**batch, "observation.images": torch.stack([batch[k] for k in cams], dim=-4)}
            policy.select_action(dict(batch))
            torch.manual_seed(seed)
        return policy.predict_action_chunk(batch)


def compare(ckpt: str, art: str, episodes: int, steps: int, batches: list[int], settings: list[str]) -> dict:
    """One case: LeRobot's policy of `ckpt` against the plugin's of `art`, at each batch size."""
    from hotloop.compile.validate import compare_actions, parse_tolerance

    theirs, their_pre, their_post = load(ckpt, settings, eval_overrides=False)
    ours, our_pre, our_post = load(art, settings, eval_overrides=True)
    manifest = json.loads((Path(art) / "manifest.json").read_text())
    tolerance = parse_tolerance(manifest["tolerance"])
    report: dict[str, Any] = {
        "classes": [type(theirs).__name__, type(ours).__name__],
        "plan": {e["name"]: f"{e['backend']} {e['precision']}" for e in manifest["sub_engines"]},
        "tolerance": tolerance.spec,
        "runs": [],
    }
    for batch in batches:
        runs = []
        for e in range(episodes):
            frames = episode(theirs.config, batch, steps, seed=1000 * batch + e)
            want, want_raw = run(theirs, their_pre, their_post, frames, seed=e)
            got, got_raw = run(ours, our_pre, our_post, frames, seed=e)
            agreement = compare_actions(want, got)
            runs.append({
                "shape": list(got.shape),
                "agreement": agreement.to_dict(),
                "violation": tolerance.violation(agreement),
                "per_step_max_abs": [float(d) for d in (want - got).abs().flatten(1).max(1).values],
                "max_abs_raw": float((want_raw - got_raw).abs().max()),
                "action_std": float(want.std()),
                "first_actions": [want[0].tolist(), got[0].tolist()],
            })  # fmt: skip
        frame = episode(theirs.config, batch, 1, seed=7)[0]
        want_chunk, got_chunk = chunk(theirs, their_pre, frame, 3), chunk(ours, our_pre, frame, 3)
        chunk_agreement = compare_actions(want_chunk, got_chunk)
        report["runs"].append({
            "batch": batch,
            "episodes": runs,
            "chunk": {"shapes": [list(want_chunk.shape), list(got_chunk.shape)],
                      "agreement": chunk_agreement.to_dict(), "violation": tolerance.violation(chunk_agreement)},
        })  # fmt: skip
    return report


def main() -> None:
    spec = json.loads(sys.argv[1])
    register_third_party_plugins()
    reports: dict[str, Any] = {}
    for name, case in spec["cases"].items():
        try:
            reports[name] = compare(
                case["ckpt"], case["art"], spec["episodes"], spec["steps"], case["batches"], case["set"]
            )
        except Exception:  # noqa: BLE001 - one case's crash is its own test's failure, the others still run
            reports[name] = {"error": traceback.format_exc(limit=-8)}
    print(json.dumps(reports))


if __name__ == "__main__":
    main()
