"""`hotloop train-demo`, registered on the app by `add_commands`. Module-level imports stay light (typer
only); MuJoCo and torch load inside the command."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from hotloop.cli_errors import user_errors
from hotloop.output_dir import OVERWRITE_HELP

# `--variant chain`'s noise on the box state (docs/perception.md, "A policy for the chain's estimate").
CHAIN_BOX_NOISE_MM = 3.0
CHAIN_BOX_VELOCITY_NOISE_MMS = 20.0


def train_demo_cmd(
    out: Annotated[Path, typer.Option("-o", "--out", help="output folder")] = Path("runs/train-demo"),
    steps: Annotated[int | None, typer.Option(help="optimizer steps")] = None,
    episodes: Annotated[int | None, typer.Option(help="expert episodes to record")] = None,
    dataset: Annotated[
        Path | None, typer.Option(help="use this recorded dataset instead of recording")
    ] = None,
    seed: Annotated[int, typer.Option(help="training seed")] = 0,
    threads: Annotated[
        int | None, typer.Option(help="torch threads (1 keeps runs repeatable everywhere)")
    ] = None,
    ship: Annotated[bool, typer.Option("--ship", help="copy the result into the package assets")] = False,
    family: Annotated[
        str,
        typer.Option(
            help="pi: the pi0.5 demo policies (--variant); act / diffusion / smolvla: a LeRobot ACT / Diffusion "
            "Policy / SmolVLA checkpoint folder trained on recorded views (a target: `hotloop eval OUT`)"
        ),
    ] = "pi",
    variant: Annotated[
        str | None,
        typer.Option(
            help="pi: state (demo:conveyor, box pose in the state, the default), chain (demo:conveyor-chain, "
            "the same trained for an estimated box pose: the policy behind --pipeline), vision "
            "(demo:conveyor-vision) or detector (demo:detector, the learned box detector of the --pipeline "
            "perception layer)"
        ),
    ] = None,
    action_prefix_prob: Annotated[
        float | None,
        typer.Option(help="state variant: fraction of examples trained to continue a given action prefix"),
    ] = None,
    max_action_prefix: Annotated[
        int | None, typer.Option(help="state variant: the longest given prefix (actions)")
    ] = None,
    views: Annotated[
        str | None,
        typer.Option(
            help="vision variant, act, diffusion, smolvla: camera views to train on, comma-separated, named as "
            "the dataset names them (default top,wrist, diffusion top, when recording conveyor-pick or when the "
            "dataset has them; else the dataset's own cameras, diffusion its first)"
        ),
    ] = None,
    rollouts: Annotated[
        int | None,
        typer.Option(
            help="detector variant: closed-loop episodes of the chain (demo:conveyor behind "
            "--rollout-pipeline) whose camera frames join the expert's"
        ),
    ] = None,
    box_noise_mm: Annotated[
        float | None,
        typer.Option(
            "--box-noise-mm",
            help="state and chain variants: std (mm) of the noise on the box's x, y position the model is "
            f"trained on (chain default {CHAIN_BOX_NOISE_MM:g}, state 0)",
        ),
    ] = None,
    box_velocity_noise: Annotated[
        float | None,
        typer.Option(
            "--box-velocity-noise",
            help="state and chain variants: std (mm/s) of the noise on the box's x, y velocity (chain default "
            f"{CHAIN_BOX_VELOCITY_NOISE_MMS:g}, state 0)",
        ),
    ] = None,
    rollout_pipeline: Annotated[
        str | None,
        typer.Option(help="detector variant: the chain --rollouts runs (default detector:model=learned)"),
    ] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help=OVERWRITE_HELP)] = False,
) -> None:
    """Train a conveyor-pick demo policy (demo:conveyor, demo:conveyor-vision, or with --family act / diffusion /
    smolvla a LeRobot ACT / Diffusion Policy / SmolVLA checkpoint) on expert episodes, on CPU."""
    import dataclasses

    from hotloop.errors import ConfigError

    if family not in ("pi", "act", "diffusion", "smolvla"):
        raise ConfigError(f"--family {family!r} is not known; use pi, act, diffusion or smolvla")

    if family == "act":
        _train_act(out, steps, episodes, dataset, seed, threads, ship, variant, views, action_prefix_prob,
                   max_action_prefix, overwrite)  # fmt: skip
        return
    if family in ("diffusion", "smolvla"):
        if variant is not None or action_prefix_prob is not None or max_action_prefix is not None:
            raise ConfigError(
                f"--family {family} trains a LeRobot checkpoint: --variant, --action-prefix-prob and "
                "--max-action-prefix are for the pi demo policies; drop them"
            )
        from hotloop.train.loop import training_views

        # The dataset's own cameras (a third-party task's names); Diffusion Policy reads one by default.
        keys = training_views(_view_list(views), dataset, _DEFAULT_VIEWS[family], one=family == "diffusion")
        claimed = _claim(out, dataset, overwrite)
        if family == "diffusion":
            from hotloop.train.diffusion_demo import run_from_cli as family_from_cli
        else:
            from hotloop.train.smolvla_demo import run_from_cli as family_from_cli

        with claimed.writing():
            family_from_cli(
                out, steps=steps, episodes=episodes, dataset=dataset, seed=seed, threads=threads, views=keys
            )
        if ship:
            from hotloop.demos.checkpoints import ship as ship_checkpoint

            typer.echo(f"shipped to {ship_checkpoint(out, family)} (demo:conveyor-{family})")
        return
    variant = variant or "state"
    if variant not in ("state", "chain", "vision", "detector"):
        raise ConfigError(f"--variant {variant!r} is not known; use state, chain, vision or detector")
    if variant not in ("state", "chain") and (box_noise_mm is not None or box_velocity_noise is not None):
        raise ConfigError("--box-noise-mm / --box-velocity-noise are for --variant state or chain; drop them")
    if variant != "detector" and (rollouts is not None or rollout_pipeline is not None):
        raise ConfigError("--rollouts / --rollout-pipeline are for --variant detector; drop them")
    if variant == "detector":
        if views is not None or action_prefix_prob is not None or max_action_prefix is not None:
            raise ConfigError(
                "--variant detector trains the top-camera box detector: drop --views, --action-prefix-prob "
                "and --max-action-prefix"
            )
        claimed = _claim(out, dataset, overwrite)
        from hotloop.train.detector_demo import run_from_cli as detector_from_cli

        with claimed.writing():
            detector_from_cli(
                out, steps=steps, episodes=episodes, dataset=dataset, seed=seed, threads=threads, ship=ship,
                rollouts=rollouts, rollout_pipeline=rollout_pipeline,
            )  # fmt: skip
        return
    if views is not None and variant != "vision":
        raise ConfigError(
            f"--views is for --variant vision (demo:conveyor{'-chain' if variant == 'chain' else ''} reads the top view only)"
        )
    from hotloop.train.loop import training_views

    view_keys = (
        training_views(_view_list(views), dataset, _DEFAULT_VIEWS["vision"]) if variant == "vision" else None
    )
    if variant != "vision" and dataset is not None:
        _check_conveyor_layout(dataset, variant)
    claimed = _claim(out, dataset, overwrite)
    if variant == "vision":
        if action_prefix_prob is not None or max_action_prefix is not None:
            raise ConfigError("--action-prefix-prob / --max-action-prefix are for --variant state; drop them")
        from hotloop.train.conveyor_vision import run_from_cli

        with claimed.writing():
            run_from_cli(
                out,
                steps=steps,
                episodes=episodes,
                dataset=dataset,
                seed=seed,
                threads=threads,
                ship=ship,
                views=view_keys,
            )
        return
    from hotloop.train.conveyor import TrainDemoConfig, ship_assets, train_demo

    cfg = TrainDemoConfig(seed=seed)
    updates: dict[str, Any] = {}
    if steps is not None:
        updates["steps"] = steps
    if episodes is not None:
        updates["episodes"] = episodes
    if threads is not None:
        updates["threads"] = threads
    if action_prefix_prob is not None:
        updates["action_prefix_prob"] = action_prefix_prob
    if max_action_prefix is not None:
        updates["max_action_prefix"] = max_action_prefix
    chain = variant == "chain"
    updates["box_noise_mm"] = (
        box_noise_mm if box_noise_mm is not None else (CHAIN_BOX_NOISE_MM if chain else 0.0)
    )
    updates["box_velocity_noise_mms"] = (
        box_velocity_noise
        if box_velocity_noise is not None
        else (CHAIN_BOX_VELOCITY_NOISE_MMS if chain else 0.0)
    )
    cfg = dataclasses.replace(cfg, **updates)
    with claimed.writing():
        summary = train_demo(cfg, out, dataset_dir=dataset)
    tr = summary["training"]
    typer.echo(
        f"trained in {tr['train_s']:.0f} s (recording {tr['record_s']:.0f} s); final loss {tr['final_loss']:.4f}; "
        f"wrote {out} (loss curve {out / 'loss.png'})"
    )
    if ship:
        target = "demo:conveyor-chain" if chain else "demo:conveyor"
        typer.echo(f"shipped to {ship_assets(out, target)} ({target})")


def _train_act(
    out: Path,
    steps: int | None,
    episodes: int | None,
    dataset: Path | None,
    seed: int,
    threads: int | None,
    ship: bool,
    variant: str | None,
    views: str | None,
    action_prefix_prob: float | None,
    max_action_prefix: int | None,
    overwrite: bool = False,
) -> None:
    """`--family act`: `hotloop.train.act_demo`; the pi-only options are refused by name."""
    from hotloop.errors import ConfigError

    given = [
        flag
        for flag, value in (
            ("--variant", variant),
            ("--action-prefix-prob", action_prefix_prob),
            ("--max-action-prefix", max_action_prefix),
        )
        if value is not None
    ]
    if given:
        raise ConfigError(
            f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} for --family pi; an ACT demo is a "
            "LeRobot checkpoint folder: drop it"
        )
    from hotloop.train.loop import training_views

    view_keys = training_views(_view_list(views), dataset, _DEFAULT_VIEWS["act"])
    claimed = _claim(out, dataset, overwrite)
    from hotloop.train.act_demo import run_from_cli

    with claimed.writing():
        run_from_cli(
            out, steps=steps, episodes=episodes, dataset=dataset, seed=seed, threads=threads, views=view_keys
        )
    if ship:
        from hotloop.demos.checkpoints import ship as ship_checkpoint

        typer.echo(f"shipped to {ship_checkpoint(out, 'act')} (demo:conveyor-act)")


def _claim(out: Path, dataset: Path | None, overwrite: bool) -> Any:
    """-o as train-demo's output folder (`hotloop.output_dir`): new, one train-demo wrote, or
    --overwrite; never the --dataset it trains on, nor inside it."""
    from hotloop.output_dir import claim_output_dir

    return claim_output_dir(out, "-o", "train-demo", overwrite=overwrite, inputs={"--dataset": dataset})


# Each family's views when neither --views nor a dataset says otherwise (the shipped demos').
_DEFAULT_VIEWS = {
    "act": ("top", "wrist"),
    "smolvla": ("top", "wrist"),
    "diffusion": ("top",),
    "vision": ("top", "wrist"),
}


def _view_list(views: str | None) -> tuple[str, ...] | None:
    return None if views is None else tuple(v.strip() for v in views.split(","))


def _check_conveyor_layout(dataset: Path, variant: str) -> None:
    """--variant state / chain train demo:conveyor's transforms, which read the gantry's state (the box
    relative to the hand) and write actions relative to the hand: on another task's dataset they would
    train on the wrong numbers, so such a dataset is refused by name, before any work."""
    from hotloop.errors import ConfigError
    from hotloop.train.loop import has_gantry_layout

    if not (dataset / "meta" / "info.json").is_file():
        return  # not a dataset at all: prepare_dataset says so
    from hotloop.datasets.lerobot_v3 import Dataset

    data = Dataset(dataset)
    if has_gantry_layout(data):
        return
    state = data.features["observation.state"].get("names") or [f"{data.widths['observation.state']} numbers"]
    raise ConfigError(
        f"--variant {variant} trains demo:conveyor's conveyor-pick layout (state ee xyz, grip, box xyz, box "
        f"velocity; actions relative to the hand) and the dataset {dataset} has state "
        f"[{', '.join(map(str, state))}]: train it with --variant vision (its own state and cameras) or "
        "--family act / diffusion / smolvla"
    )


def add_commands(app: typer.Typer) -> None:
    app.command("train-demo")(user_errors(train_demo_cmd))
