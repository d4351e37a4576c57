from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hotloop.compile.calibration import CalibrationSpec, load_calibration, open_dataset
from hotloop.compile.sources import load_target
from hotloop.errors import ConfigError


def _calib(data: Path, **spec: object):  # type: ignore[no-untyped-def]
    model, adapter = load_target("pi05:tiny", open_dataset(data))
    return load_calibration(data, adapter, CalibrationSpec(**spec))  # type: ignore[arg-type]


def test_sampled_across_episodes_and_phases_and_hashed(recorded: Path) -> None:
    calib = _calib(recorded, count=12, phases=4)
    assert len(calib) == 12
    episodes = {e for e, _ in calib.frames}
    assert episodes == {0, 1, 2}  # every episode contributes
    ds = open_dataset(recorded)
    for ep in episodes:  # and from both halves of each episode (early and late task phases)
        length = ds.episodes[ep]["length"]
        frames = [f for e, f in calib.frames if e == ep]
        assert min(frames) < length / 2 <= max(frames)
    assert calib.obs.images.shape == (12, 1, 3, 56, 56)
    assert calib.actions.shape == (12, 10, 32)
    again = _calib(recorded, count=12, phases=4)
    assert again.sha256 == calib.sha256 and len(calib.sha256) == 64
    assert _calib(recorded, count=12, phases=4, seed=1).sha256 != calib.sha256
    assert calib.manifest_entry()["frames"] == 12


def test_a_held_out_set_never_takes_an_excluded_frame(recorded: Path) -> None:
    calib = _calib(recorded, count=12)
    held = _calib(recorded, count=8, seed=1, exclude=frozenset(calib.frames))
    assert len(held) == 8 and not set(held.frames) & set(calib.frames)
    everything = _calib(recorded, count=1000)
    with pytest.raises(ConfigError, match="no frames left to sample"):
        _calib(recorded, count=4, exclude=frozenset(everything.frames))


def test_the_recipe_judges_on_observations_it_did_not_train_on(recorded: Path, tmp_path: Path) -> None:
    """With --data, without it on a pi target, and on a demo target: the judged observations are
    not among those the steps calibrate, prune and distil on."""
    import torch

    from hotloop.compile.sources import policy_source
    from hotloop.compile.validate import parse_tolerance
    from hotloop.compress.recipe import RecipeConfig, load_inputs, parse_recipe
    from hotloop.targets import TargetOptions

    source = policy_source("pi05:tiny", TargetOptions(seed=0))
    for data in (recorded, None):
        config = RecipeConfig(
            "pi05:tiny", parse_recipe("steps:4"), parse_tolerance("cos:0.9"), tmp_path / "a", data=data,
            calibration_frames=6, eval_observations=3,
        )  # fmt: skip
        inputs = load_inputs(config, source)
        assert inputs.obs.batch == 6 and inputs.judged is not None and inputs.judged.batch == 3
        for j in range(3):
            for i in range(6):
                same = torch.equal(inputs.judged.images[j], inputs.obs.images[i]) and torch.equal(
                    inputs.judged.lang_tokens[j], inputs.obs.lang_tokens[i]
                )
                assert not same, (data, i, j)


def test_near_duplicates_are_dropped(recorded: Path) -> None:
    loose = _calib(recorded, count=1000, min_change=0.0)
    strict = _calib(recorded, count=1000, min_change=0.5)
    assert strict.dropped_duplicates > loose.dropped_duplicates == 0
    assert len(strict) < len(loose)
    assert len(set(loose.frames)) == len(loose.frames)


def test_bad_directories_fail_before_work(tmp_path: Path, recorded: Path) -> None:
    with pytest.raises(ConfigError, match="--data .* does not exist"):
        open_dataset(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="--data .* is empty"):
        open_dataset(tmp_path / "empty")
    broken = tmp_path / "broken"
    shutil.copytree(recorded, broken)
    (broken / "meta" / "info.json").write_text("{not json")
    with pytest.raises(ConfigError, match="--data.*not valid JSON"):
        open_dataset(broken)


def test_data_for_another_model_is_refused(recorded: Path) -> None:
    # demo:conveyor reads 10-dim states and 4-dim actions from a "top" camera: reshape the features.
    ds = open_dataset(recorded)
    ds.features["action"]["shape"] = [40]
    from hotloop.families.frames import check_fits

    _, adapter = load_target("pi05:tiny", ds)
    with pytest.raises(ConfigError, match="--data .* 40-dim actions.*another model"):
        check_fits(adapter, ds)
