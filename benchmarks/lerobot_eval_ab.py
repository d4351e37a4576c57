"""`lerobot-eval` on a LeRobot checkpoint and on its hotloop artifact, run the same way, side by side.

    .venv-lerobot/bin/python benchmarks/lerobot_eval_ab.py --source CKPT --artifact ART --out DIR [--rounds 3] \
        -- --env.type=pusht --eval.n_episodes=2 --eval.batch_size=1 --env.episode_length=50

Run it with the LeRobot venv's python (`make lerobot-venv`). Every run is LeRobot's own `lerobot-eval` (its
`main`: argument parsing, plugin discovery, environment, processors, rollout, eval_info.json) in a fresh
process, `--policy.path` the checkpoint or the artifact and the arguments after `--` the same for both, with
one probe: the policy `make_policy` returns has its `select_action` timed (torch's threads as LeRobot leaves
them) and its actions recorded. Runs alternate (source, artifact, artifact, source, ...) for `--rounds`
rounds, so drifting machine load falls on both. Prints and writes DIR/ab.json: per side the select_action
time per step (mean, p50, p99 ms; the first call of each episode included), the eval wall time, the ratios
source / artifact (mean, p99), and the largest difference between the two sides' actions step by step (the same seed
gives the same episodes, so the actions must agree within the artifact's tolerance). Report the machine's
load (`uptime`) beside any figure.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def child(policy_path: str, record: Path, output_dir: Path, lerobot_args: list[str]) -> None:
    """One lerobot-eval run with the probe on `select_action` (this process exits when it ends)."""
    import torch
    from lerobot.scripts import lerobot_eval

    make_policy = lerobot_eval.make_policy
    steps: list[dict[str, Any]] = []

    def probed_make_policy(*args: Any, **kwargs: Any) -> Any:
        policy = make_policy(*args, **kwargs)
        select = policy.select_action

        def timed(batch: Any, *a: Any, **kw: Any) -> torch.Tensor:
            start = time.perf_counter()
            action = select(batch, *a, **kw)
            steps.append(
                {"ms": (time.perf_counter() - start) * 1e3, "action": action.detach().cpu().float().tolist()}
            )
            # LeRobot 0.4.4's rollout hands the action to numpy, which has no bf16: under
            # --policy.use_amp=true (its bf16 autocast on CPU, its fastest setting) it crashes there.
            return action.float() if action.dtype == torch.bfloat16 else action

        policy.select_action = timed
        return policy

    lerobot_eval.make_policy = probed_make_policy
    sys.argv = ["lerobot-eval", f"--policy.path={policy_path}", f"--output_dir={output_dir}", *lerobot_args]
    start = time.perf_counter()
    lerobot_eval.main()
    wall = time.perf_counter() - start
    record.write_text(json.dumps({"steps": steps, "wall_s": wall}))


def run_side(policy_path: str, out: Path, name: str, lerobot_args: list[str]) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    record = out / f"{name}.json"
    cmd = [
        sys.executable,
        __file__,
        "--child",
        policy_path,
        str(record),
        str(out / name),
        "--",
        *lerobot_args,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(
            f"lerobot-eval --policy.path={policy_path} failed (exit {done.returncode}):\n{done.stderr[-4000:]}"
        )
    return json.loads(record.read_text())  # type: ignore[no-any-return]


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ms = np.array([s["ms"] for r in runs for s in r["steps"]])
    return {
        "steps": int(ms.size),
        # The mean is the cost per control step (a chunk's inference spread over the steps it serves);
        # p50 of a chunking policy is a queue pop, p99 an inference.
        "select_action_ms": {
            "mean": float(ms.mean()),
            "p50": float(np.percentile(ms, 50)),
            "p99": float(np.percentile(ms, 99)),
        },
        "eval_wall_s": [r["wall_s"] for r in runs],
    }


def main() -> None:
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    own, lerobot_args = argv[:split], argv[split + 1 :]
    if own and own[0] == "--child":
        child(own[1], Path(own[2]), Path(own[3]), lerobot_args)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True, help="the LeRobot checkpoint folder")
    parser.add_argument(
        "--artifact", required=True, help="hotloop's artifact of it (hotloop compile CKPT -o ART)"
    )
    parser.add_argument("--out", required=True, type=Path, help="folder for each run's output and ab.json")
    parser.add_argument("--rounds", type=int, default=1, help="source/artifact pairs, alternating order")
    args = parser.parse_args(own)
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1 (got {args.rounds})")
    for flag in ("--source", "--artifact"):
        folder = Path(getattr(args, flag[2:]))
        if not (folder / "config.json").is_file():
            parser.error(f"{flag} {folder}: no config.json there; give a checkpoint / artifact folder")
    if args.out.exists() and any(args.out.iterdir()):
        parser.error(f"--out {args.out} exists and is not empty; pick a new folder")
    runs: dict[str, list[dict[str, Any]]] = {"source": [], "artifact": []}
    for r in range(args.rounds):
        order = ("source", "artifact") if r % 2 == 0 else ("artifact", "source")
        for side in order:
            path = args.source if side == "source" else args.artifact
            runs[side].append(run_side(path, args.out, f"{side}-{r}", lerobot_args))
    first_s, first_a = runs["source"][0]["steps"], runs["artifact"][0]["steps"]
    if len(first_s) != len(first_a):
        sys.exit(
            f"the two sides ran {len(first_s)} and {len(first_a)} steps; they must run the same episodes"
        )
    diffs = [
        float(np.abs(np.subtract(s["action"], a["action"])).max())
        for s, a in zip(first_s, first_a, strict=True)
    ]
    manifest = json.loads((Path(args.artifact) / "manifest.json").read_text())
    source, artifact = summary(runs["source"]), summary(runs["artifact"])
    result = {
        "source": source,
        "artifact": artifact,
        "ratio_mean": source["select_action_ms"]["mean"] / artifact["select_action_ms"]["mean"],
        "ratio_p99": source["select_action_ms"]["p99"] / artifact["select_action_ms"]["p99"],
        "actions_max_abs_diff": max(diffs),
        "per_step_max_abs_diff": diffs,
        "artifact_tolerance": manifest.get("tolerance"),
        "plan": {e["name"]: f"{e['backend']} {e['precision']}" for e in manifest["sub_engines"]},
        "lerobot_args": lerobot_args,
    }
    (args.out / "ab.json").write_text(json.dumps(result, indent=2))
    for side in ("source", "artifact"):
        s = result[side]
        print(
            f"{side:8s} select_action per step: mean {s['select_action_ms']['mean']:.2f} ms  p50 "
            f"{s['select_action_ms']['p50']:.2f} ms  p99 {s['select_action_ms']['p99']:.2f} ms"
            f"  ({s['steps']} steps; eval wall {', '.join(f'{w:.1f}' for w in s['eval_wall_s'])} s)"
        )
    print(
        f"ratio source/artifact: mean {result['ratio_mean']:.2f}x  p99 {result['ratio_p99']:.2f}x; actions max abs "
        f"difference {result['actions_max_abs_diff']:.3g} over {len(diffs)} steps; wrote {args.out / 'ab.json'}"
    )


if __name__ == "__main__":
    main()
