"""Compression on `demo:conveyor-vision` reads what that policy reads: its own weights, top + wrist views and
its proprioceptive state - for the recipe's start observations, for calibration from recorded episodes
(`hotloop record --views top,wrist`), and a top-only recording is refused by name before any work."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.errors import ConfigError
from hotloop.targets import TargetOptions

TARGET = "demo:conveyor-vision"
runner = CliRunner()


@pytest.fixture(scope="module")
def vision_demo():  # type: ignore[no-untyped-def]
    from hotloop.demos.conveyor import build_demo

    return build_demo(TARGET, TargetOptions())


@pytest.fixture(scope="module")
def recorded_two_views(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("episodes") / "two-views"
    res = runner.invoke(
        app,
        [
            "record",
            "--task",
            "conveyor-pick",
            "--episodes",
            "2",
            "--views",
            "top,wrist",
            "-o",
            str(out),
            "--quiet",
        ],
    )
    assert res.exit_code == 0, res.output
    return out


def test_build_demo_gives_each_name_its_own_policy(vision_demo) -> None:  # type: ignore[no-untyped-def]
    from hotloop.demos.conveyor import build_demo

    state = build_demo("demo:conveyor", TargetOptions())
    assert vision_demo.views == ("top", "wrist") and vision_demo.pi.config.views == 2
    assert state.pi.config.views == 1
    n_vision = sum(p.numel() for p in vision_demo.pi.model.parameters())
    assert n_vision > 10 * sum(p.numel() for p in state.pi.model.parameters())


def test_recipe_start_observations_are_the_vision_policys_own(vision_demo) -> None:  # type: ignore[no-untyped-def]
    from hotloop.compile.validate import Tolerance
    from hotloop.compress.recipe import RecipeConfig, RecipeStep, load_inputs
    from hotloop.demos.conveyor_vision import make_demo_task

    config = RecipeConfig(
        TARGET, (RecipeStep("steps", "4"),), Tolerance(cos=0.99), Path("unused"), calibration_frames=2
    )
    from types import SimpleNamespace

    from hotloop.families import get_family

    # A demo target takes its start observations from its own task: the source lends only its family.
    inputs = load_inputs(config, source=SimpleNamespace(family=get_family("pi")))
    assert inputs.obs.images.shape[:2] == (2, 2)  # two observations, two views each
    env = make_demo_task(vision_demo.meta)
    raw, _ = env.reset(seed=1)  # the second start observation (seed + 1)
    env.close()
    expected = vision_demo.pi.observation(vision_demo.model_inputs(raw))
    torch.testing.assert_close(inputs.obs.images[1:2], expected.images)
    torch.testing.assert_close(inputs.obs.lang_tokens[1:2], expected.lang_tokens)


def test_calibration_from_a_two_view_recording(recorded_two_views: Path) -> None:
    from hotloop.compile.calibration import CalibrationSpec, load_calibration, open_dataset
    from hotloop.compile.sources import load_target

    dataset = open_dataset(recorded_two_views)
    assert sorted(dataset.image_keys) == ["top", "wrist"]
    _, adapter = load_target(TARGET, dataset)
    assert adapter.image_keys == ("top", "wrist")
    calib = load_calibration(recorded_two_views, adapter, CalibrationSpec(count=6, seed=0))
    assert calib.obs.images.shape[:2] == (len(calib), 2)
    top, wrist = calib.obs.images[:, 0], calib.obs.images[:, 1]
    assert not torch.equal(top, wrist)  # two different cameras, not one view twice
    assert np.isfinite(calib.actions.numpy()).all()


def test_a_top_only_recording_is_refused_for_the_vision_policy(recorded: Path) -> None:
    from hotloop.compile.calibration import open_dataset
    from hotloop.compile.sources import load_target
    from hotloop.families.frames import check_fits

    dataset = open_dataset(recorded)
    _, adapter = load_target(TARGET, dataset)
    with pytest.raises(ConfigError, match=r"--data .* needs \['top', 'wrist'\]"):
        check_fits(adapter, dataset)


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--task", "conveyor-pick", "--views", "top,side"], "--views must be distinct gantry camera views"),
        (["--task", "conveyor-pick", "--views", "top,top"], "--views must be distinct gantry camera views"),
        (["--task", "gym:CartPole-v1", "--views", "top"], "--views is for the built-in tasks"),
    ],
)
def test_record_views_bad_input_exits_2(extra: list[str], needle: str, tmp_path: Path) -> None:
    out = tmp_path / "never"
    res = runner.invoke(app, ["record", *extra, "--episodes", "1", "-o", str(out)])
    assert res.exit_code == 2 and needle in res.output, res.output
    assert not out.exists()
