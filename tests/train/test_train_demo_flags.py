"""`hotloop train-demo` checks every family's flags in one place: a flag the chosen family or variant does
not take is refused by name (one line, exit 2, nothing written), never ignored; the ones it takes reach
its options."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from hotloop.datasets.commands import add_commands as add_record
from hotloop.train.commands import add_commands as add_train

runner = CliRunner()
app = typer.Typer()
for add in (add_record, add_train):  # two commands: a group, called by name as the CLI does
    add(app)
KINDS = {
    "act": ["--family", "act"],
    "diffusion": ["--family", "diffusion"],
    "smolvla": ["--family", "smolvla"],
    "state": ["--variant", "state"],
    "chain": ["--variant", "chain"],
    "vision": ["--variant", "vision"],
    "detector": ["--variant", "detector"],
}
# Each flag only some kinds take, a value for it, and those kinds.
FLAGS = {
    "--action-prefix-prob": ("0.5", {"state", "chain"}),
    "--max-action-prefix": ("3", {"state", "chain"}),
    "--box-noise-mm": ("1", {"state", "chain"}),
    "--box-velocity-noise": ("1", {"state", "chain"}),
    "--views": ("top", {"act", "diffusion", "smolvla", "vision"}),
    "--rollouts": ("2", {"detector"}),
    "--rollout-pipeline": ("detector:model=learned", {"detector"}),
}


@pytest.mark.parametrize(
    ("kind", "flag"),
    [(kind, flag) for kind in KINDS for flag, (_, takes) in FLAGS.items() if kind not in takes],
)
def test_a_flag_the_kind_does_not_take_is_refused_by_name(kind: str, flag: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = runner.invoke(app, ["train-demo", "-o", str(out), *KINDS[kind], flag, FLAGS[flag][0]])
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), res.output
    assert flag in lines[0] and "drop it" in lines[0]
    assert not out.exists()


@pytest.mark.parametrize("kind", ["act", "diffusion", "smolvla"])
def test_the_lerobot_families_take_no_variant(kind: str, tmp_path: Path) -> None:
    res = runner.invoke(app, ["train-demo", "-o", str(tmp_path / "x"), *KINDS[kind], "--variant", "vision"])
    assert res.exit_code == 2 and "--variant is for --family pi" in res.output
    assert not (tmp_path / "x").exists()


def test_the_flags_a_kind_takes_reach_its_options() -> None:
    from hotloop.train.commands import _trainer
    from hotloop.train.options import from_flags

    chain = from_flags(_trainer("chain").options, seed=3, steps=5, episodes=None, box_noise_mm=2.0)
    assert (chain.seed, chain.steps, chain.box_noise_mm, chain.episodes) == (3, 5, 2.0, 500)  # type: ignore[attr-defined]
    act = from_flags(_trainer("act").options, seed=0, views=["wrist"], threads=None)
    assert act.views == ("wrist",) and act.threads == 1  # type: ignore[attr-defined]
    detector = from_flags(_trainer("detector").options, steps=7, rollouts=None, rollout_pipeline="detector:a")
    assert (detector.steps, detector.rollouts, detector.rollout_pipeline) == (7, 0, "detector:a")  # type: ignore[attr-defined]
