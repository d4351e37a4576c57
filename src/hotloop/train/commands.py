"""`hotloop train-demo`, registered on the app by `add_commands`. Module-level imports stay light (typer
only); MuJoCo and torch load inside the command."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from hotloop.cli_errors import register
from hotloop.cli_options import Overwrite, Seed, Threads

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
    seed: Seed = 0,
    threads: Threads = None,
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
    overwrite: Overwrite = False,
) -> None:
    """Train a conveyor-pick demo policy (demo:conveyor, demo:conveyor-vision, or with --family act / diffusion /
    smolvla a LeRobot ACT / Diffusion Policy / SmolVLA checkpoint) on expert episodes, on CPU."""
    from hotloop.errors import ConfigError
    from hotloop.train.data import training_views
    from hotloop.train.options import from_flags

    if family not in ("pi", "act", "diffusion", "smolvla"):
        raise ConfigError(f"--family {family!r} is not known; use pi, act, diffusion or smolvla")
    kind = (variant or "state") if family == "pi" else family
    if kind not in _FLAG_KINDS["--variant"] + _LEROBOT_FAMILIES:
        raise ConfigError(f"--variant {variant!r} is not known; use state, chain, vision or detector")
    _refuse_other_kinds_flags(
        kind,
        {
            "--variant": variant if family != "pi" else None,
            "--action-prefix-prob": action_prefix_prob,
            "--max-action-prefix": max_action_prefix,
            "--views": views,
            "--rollouts": rollouts,
            "--rollout-pipeline": rollout_pipeline,
            "--box-noise-mm": box_noise_mm,
            "--box-velocity-noise": box_velocity_noise,
        },
    )
    flags: dict[str, Any] = {"seed": seed, "steps": steps, "episodes": episodes, "threads": threads}
    if kind in _DEFAULT_VIEWS:  # the dataset's own cameras (a third-party task's names)
        flags["views"] = training_views(
            _view_list(views), dataset, _DEFAULT_VIEWS[kind], one=kind == "diffusion"
        )
    if kind in ("state", "chain"):
        if dataset is not None:
            _check_conveyor_layout(dataset, kind)
        chain = kind == "chain"
        flags |= {
            "action_prefix_prob": action_prefix_prob,
            "max_action_prefix": max_action_prefix,
            "box_noise_mm": _given_or(box_noise_mm, CHAIN_BOX_NOISE_MM if chain else 0.0),
            "box_velocity_noise_mms": _given_or(
                box_velocity_noise, CHAIN_BOX_VELOCITY_NOISE_MMS if chain else 0.0
            ),
        }
    if kind == "detector":
        flags |= {"rollouts": rollouts, "rollout_pipeline": rollout_pipeline}
    trainer = _trainer(kind)
    options = from_flags(trainer.options, **flags)
    claimed = _claim(out, dataset, overwrite)
    with claimed.writing():
        trainer.run(options, out, dataset, ship, typer.echo)


# What trains each kind of demo (a --family, or a pi --variant): `hotloop.train.<module>.TRAINER`
# (`CHAIN_TRAINER` for the chain).
_TRAINERS = {
    "act": "act_demo",
    "diffusion": "diffusion_demo",
    "smolvla": "smolvla_demo",
    "state": "conveyor",
    "chain": "conveyor",
    "vision": "conveyor_vision",
    "detector": "detector_demo",
}
# The flags only some kinds take, and those kinds (--variant: the pi ones).
_FLAG_KINDS = {
    "--variant": ("state", "chain", "vision", "detector"),
    "--action-prefix-prob": ("state", "chain"),
    "--max-action-prefix": ("state", "chain"),
    "--views": ("vision", "act", "diffusion", "smolvla"),
    "--rollouts": ("detector",),
    "--rollout-pipeline": ("detector",),
    "--box-noise-mm": ("state", "chain"),
    "--box-velocity-noise": ("state", "chain"),
}
_LEROBOT_FAMILIES = ("act", "diffusion", "smolvla")


def _trainer(kind: str) -> Any:
    import importlib

    module = importlib.import_module(f"hotloop.train.{_TRAINERS[kind]}")
    return module.CHAIN_TRAINER if kind == "chain" else module.TRAINER


def _refuse_other_kinds_flags(kind: str, given: dict[str, Any]) -> None:
    """A flag this kind of demo does not take is refused by name, with the kinds that take it."""
    from hotloop.errors import ConfigError

    wrong = [flag for flag, value in given.items() if value is not None and kind not in _FLAG_KINDS[flag]]
    if not wrong:
        return
    them = "it" if len(wrong) == 1 else "them"
    if kind in _LEROBOT_FAMILIES:
        verb = "is" if len(wrong) == 1 else "are"
        raise ConfigError(
            f"{', '.join(wrong)} {verb} for --family pi; --family {kind} trains a LeRobot checkpoint folder: "
            f"drop {them}"
        )
    said = "; ".join(
        f"{flag} is for --variant {' or '.join(k for k in _FLAG_KINDS[flag] if k not in _LEROBOT_FAMILIES)}"
        for flag in wrong
    )
    raise ConfigError(f"{said}, not --variant {kind}: drop {them}")


def _given_or(value: float | None, default: float) -> float:
    return value if value is not None else default


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
    from hotloop.train.data import has_gantry_layout

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
    register(app, {"train-demo": train_demo_cmd})
