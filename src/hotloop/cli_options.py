"""Typer options several commands declare alike (the same flag, type and help), declared once here so their
help cannot drift apart, and what the commands do alike with their flags (`config_from_flags`,
`write_json`). Light on purpose (typer only): every commands module imports it at start-up."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from hotloop.output_dir import OVERWRITE_HELP

Quiet = Annotated[bool, typer.Option("--quiet", help="no progress bar")]
Overwrite = Annotated[bool, typer.Option("--overwrite", help=OVERWRITE_HELP)]
Device = Annotated[str, typer.Option(help="cpu or cuda")]
FlowSteps = Annotated[int | None, typer.Option(help="flow-matching steps (VLA targets)")]
Seed = Annotated[int, typer.Option(help="seed for weights, inputs, noise and data order")]
Threads = Annotated[int | None, typer.Option(help="intra-op threads (torch and the compiled backends)")]
JsonOut = Annotated[Path | None, typer.Option("--json", help="write the result as JSON here")]

# Timing a policy (hotloop bench, compile, perception-curve, compress).
Warmup = Annotated[int, typer.Option(help="untimed iterations first")]
CameraViews = Annotated[int | None, typer.Option(help="camera views (VLA targets)")]
PromptBuckets = Annotated[
    str | None,
    typer.Option(
        help="prompt-length buckets for the prefix, e.g. 32,64,128 (VLA targets; the full prompt is always "
        "one; quantized engines are calibrated again per bucket)"
    ),
]
ReserveCores = Annotated[
    int | None,
    typer.Option(
        help="leave N CPUs to other work (a robot's drivers): run with usable CPUs - N threads, unpinned "
        "(instead of --threads, and bench's --pin; docs/compile.md); a compiled artifact records them, "
        "Engine.load / serve apply them"
    ),
]
RooflineCache = Annotated[
    Path | None,
    typer.Option(
        help="folder of the matmul peaks `hotloop doctor` measures (default ~/.cache/hotloop/roofline)"
    ),
]
MemoryCap = Annotated[
    float | None,
    typer.Option(
        help="a compiled artifact's resident-memory cap in MiB: refused at load if over it, checked every "
        "inference after (serve: a breach is an error reply, or the fallback's answer, and /healthz answers 503)"
    ),
]
ActionTolerance = Annotated[str, typer.Option(help="final-action agreement, e.g. cos:0.995[,maxabs:0.05]")]
DeadlineMs = Annotated[
    float | None,
    typer.Option(
        help="inference deadline: an inference running longer misses it (eval's default: from the chunk and "
        "control rate; serve counts the misses on /metrics)"
    ),
]

# What hotloop compile and hotloop compress write, and plan with.
ArtifactOut = Annotated[Path, typer.Option("-o", "--out", help="artifact folder to write")]
MixedPlan = Annotated[
    Path | None,
    typer.Option(
        help="`hotloop sensitivity --json` result: its fp32 layers stay fp32 (compile, quantize, qat)"
    ),
]
PlanMemory = Annotated[
    float | None,
    typer.Option(
        help="the most resident memory planning may hold, in GiB (e.g. 20): a candidate whose estimate would "
        "pass it is not tried, after finished stages make room (default: what the machine has free)"
    ),
]

# The simulated task an episode runs (hotloop eval, hotloop record).
Task = Annotated[
    str, typer.Option(help="conveyor-pick, reach, gym:ENV_ID (any gymnasium env) or a hotloop.tasks plugin")
]
TaskKwargs = Annotated[
    str | None,
    typer.Option(help="JSON keyword arguments for gym:/plugin tasks, e.g. '{\"max_episode_steps\": 100}'"),
]
Perturb = Annotated[
    str | None,
    typer.Option(
        help="perturbations, NAME:VALUE,... (lighting, camera-shift, camera-rotate, box-colour, box-size, "
        "belt-speed, distractors, occlusion, image-noise, blur, drop-frames, state-noise, latency-jitter; see "
        "docs/perception.md); record stores the images and state the sensors would have delivered while its "
        "expert acts on the truth"
    ),
]
# The simulated time an inference takes in a closed-loop run (hotloop eval, perception-curve, compress).
_LATENCY = "simulated inference latency: measured, fixed:MS, or a bench JSON (replay:PATH)"
Latency = Annotated[str, typer.Option(help=_LATENCY)]
EvalLatency = Annotated[str | None, typer.Option(help=f"{_LATENCY}; default: measured")]
Difficulty = Annotated[str | None, typer.Option(help="easy, medium or hard (conveyor-pick)")]
EpisodeSeed = Annotated[int, typer.Option(help="seed of the first episode; episode i uses seed + i")]
Workers = Annotated[int, typer.Option(help="episode worker processes (0 = in this process)")]

# A run kept in the history and judged against a baseline (hotloop bench, eval, compare, history), and
# the machine's load, which decides whether a timing is judged at all (those and hotloop compile).
History = Annotated[
    Path | None,
    typer.Option(envvar="HOTLOOP_HISTORY", help="append this run to a history folder (see hotloop history)"),
]
Baseline = Annotated[
    str | None,
    typer.Option(
        help="compare with an earlier run: a JSON of this command, or a run of the history (7, its id, latest, "
        "latest~1); bench: per-stage p50/p99 ratios with intervals, a rank test, a verdict, what differs; eval: "
        "success paired by seed (McNemar's exact test), task time, jerk and chunk jump as paired differences"
    ),
]
Threshold = Annotated[
    str | None, typer.Option(help="bench: the smallest latency change called slower or faster (5%)")
]
FailOnRegression = Annotated[
    bool,
    typer.Option(
        "--fail-on-regression",
        help="exit 3 when the run regressed against the baseline: a stage slower beyond --threshold (bench), "
        "a point's success interval below 0 (eval)",
    ),
]
MaxLoad = Annotated[
    float,
    typer.Option(
        envvar="HOTLOOP_MAX_LOAD",
        help="CPUs of other work (measured, or recorded with a run) above which the machine is busy: compile "
        "does not start timing, and a gate (--fail-on-regression, --budget-ms) does not judge (exit 2)",
    ),
]
ForceJudge = Annotated[
    bool, typer.Option("--force", help="time and judge on a busy machine anyway (the load is recorded)")
]

Config = TypeVar("Config")


def config_from_flags(config: type[Config], flags: dict[str, Any], **converted: Any) -> Config:
    """The dataclass `config` filled from a command's flags (its `locals()` on entry): each field from the
    flag of its name, as given; `converted`, the fields whose value is not a flag's as given (parsed first,
    or under another name). A flag no field is named after stays out."""
    names = {field.name for field in dataclasses.fields(config)}  # type: ignore[arg-type]
    return config(**{name: value for name, value in flags.items() if name in names} | converted)


def write_json(path: Path, data: Any) -> None:
    """--json: the result written whole (`atomic_write_json`), then `wrote PATH`."""
    from hotloop.io import atomic_write_json

    typer.echo(f"wrote {atomic_write_json(path, data)}")
