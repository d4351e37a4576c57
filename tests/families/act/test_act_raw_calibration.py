"""`hotloop compile CKPT --calibration DIR` where DIR holds raw LeRobot batches (.npz): frames read in
LeRobot's float layout and as camera uint8, through the checkpoint's own preprocessor, every fourth held
out, the plan judged on held-out frames; a folder that does not fit is refused naming it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from act_checkpoint_files import raw_observation, write_checkpoint
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.compile.calibration import judged_on_held_out, raw_calibration
from hotloop.compile.raw_batches import read_raw_batches
from hotloop.errors import ConfigError

runner = CliRunner()


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_checkpoint(tmp_path_factory.mktemp("act-raw") / "ckpt", seed=5)


def _frames(ckpt: Path, count: int, seed: int = 40) -> list[dict]:
    from hotloop.families.act.policy import load_policy

    return [raw_observation(load_policy(ckpt).config, seed + i) for i in range(count)]


def write_batches(folder: Path, frames: list[dict], per_file: int = 3) -> Path:
    """The frames as LeRobot raw batches: (K, 3, H, W) floats in [0, 1] and (K, S) states, `per_file` a file
    (the last file holds one frame unstacked, in a camera's (H, W, 3) uint8)."""
    folder.mkdir(parents=True, exist_ok=True)
    *stacked, last = frames
    for start in range(0, len(stacked), per_file):
        part = stacked[start : start + per_file]
        batch = {
            f"observation.images.{v}": np.stack(
                [f["images"][v].transpose(2, 0, 1) / 255.0 for f in part]
            ).astype(np.float32)
            for v in part[0]["images"]
        }
        batch["observation.state"] = np.stack([f["state"] for f in part])
        np.savez(folder / f"batch_{start:03d}.npz", **batch)
    np.savez(
        folder / "zz_single.npz",
        **{f"observation.images.{v}": img for v, img in last["images"].items()},
        **{"observation.state": last["state"]},
    )
    return folder


def test_raw_frames_are_the_policys_own_observations_with_every_fourth_held_out(
    ckpt: Path, tmp_path: Path
) -> None:
    from hotloop.compile.sources import policy_source
    from hotloop.families.act.policy import load_policy
    from hotloop.targets import TargetOptions

    frames = _frames(ckpt, 8)
    folder = write_batches(tmp_path / "raw", frames)
    raw = read_raw_batches(folder)
    assert len(raw.frames) == 8
    for got, want in zip(raw.frames, frames, strict=True):  # float [0, 1] and uint8 both give the pixels back
        for view, img in want["images"].items():
            pixels = got.images[view]  # LeRobot's floats stay floats (k / 255 here), a camera's uint8 stays
            np.testing.assert_array_equal(
                np.round(pixels * 255.0) if pixels.dtype.kind == "f" else pixels, img
            )
        np.testing.assert_array_equal(got.state, want["state"])
    source = policy_source(str(ckpt), TargetOptions())
    calib = raw_calibration(str(ckpt), source, folder, frames=100)
    assert [i for _, i in calib.frames] == [0, 1, 2, 4, 5, 6]  # 3 and 7 held out
    assert len(calib.held_out) == 2
    policy = load_policy(ckpt)
    for row, index in enumerate([0, 1, 2, 4, 5, 6]):
        want = policy.observation(frames[index])
        got = calib.batch([row])
        assert all(torch.equal(a, b) for a, b in zip(got.images, want.images, strict=True))
        assert torch.equal(got.state, want.state)
    judged = judged_on_held_out(source, calib)
    assert torch.equal(judged.obs.state, policy.observation(frames[3]).state)
    assert [torch.equal(o.state, policy.observation(frames[7]).state) for o, _ in judged.plan_checks] == [
        True
    ]
    assert raw_calibration(str(ckpt), source, folder, frames=4).manifest_entry()["frames"] == 4


def test_compile_calibrates_static_int8_on_raw_batches(ckpt: Path, tmp_path: Path) -> None:
    folder = write_batches(tmp_path / "raw", _frames(ckpt, 8))
    out, js = tmp_path / "art", tmp_path / "plan.json"
    res = runner.invoke(
        app,
        ["compile", str(ckpt), "-o", str(out), "--calibration", str(folder), "--backends", "onnxruntime",
         "--precisions", "fp32,int8", "--tolerance", "cos:0.9", "--iters", "2", "--warmup", "0",
         "--threads", "1", "--json", str(js), "--force"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "6 raw frames to calibrate, 2 held out" in res.output
    calibration = json.loads((out / "manifest.json").read_text())["compression"]["calibration"]
    assert calibration["frames"] == 6 and calibration["held_out"] == 2
    assert calibration["sha256"] == read_raw_batches(folder).sha256
    int8 = [c for c in json.loads(js.read_text())["candidates"] if c["precision"] == "int8"]
    assert int8 and all(c["status"] != "unavailable" for c in int8), int8


def test_raw_batches_that_do_not_fit_are_refused_naming_the_file(ckpt: Path, tmp_path: Path) -> None:
    frames = _frames(ckpt, 4)
    with pytest.raises(ConfigError, match="no .npz files"):
        read_raw_batches(tmp_path)
    bad = tmp_path / "range"
    bad.mkdir()
    np.savez(bad / "a.npz", **{"observation.images.top": np.full((3, 64, 64), 2.0, np.float32)})
    with pytest.raises(
        ConfigError, match=r"a\.npz\[0\] observation.images.top: image floats must lie in \[0, 1\]"
    ):
        read_raw_batches(bad)
    mixed = write_batches(tmp_path / "mixed", frames)
    np.savez(mixed / "zzz.npz", **{"observation.images.top": frames[0]["images"]["top"]})
    with pytest.raises(ConfigError, match=r"zzz\.npz\[0\]: views \['top'\], but"):
        read_raw_batches(mixed)
    narrow = tmp_path / "narrow"
    narrow.mkdir()
    np.savez(
        narrow / "a.npz",
        **{f"observation.images.{v}": img for v, img in frames[0]["images"].items()},
        **{"observation.state": frames[0]["state"][:4]},
    )
    np.savez(narrow / "b.npz", **{f"observation.images.{v}": img for v, img in frames[1]["images"].items()},
             **{"observation.state": frames[1]["state"][:4]})  # fmt: skip
    res = runner.invoke(
        app,
        ["compile", str(ckpt), "-o", str(tmp_path / "art"), "--calibration", str(narrow), "--backends",
         "onnxruntime", "--precisions", "fp32,int8", "--force"],
    )  # fmt: skip
    assert res.exit_code == 2
    assert f"--calibration {narrow} has 4-dim observation.state" in res.output
    assert not (tmp_path / "art").exists()


def test_a_reference_runs_raw_inputs_calibrate_as_the_preprocessor_maps_them(
    fixtures_dir: Path, tmp_path: Path
) -> None:
    """LeRobot's own raw batch (the ACT fixture's raw_inputs.npz) becomes exactly LeRobot's model-space
    inputs (its inputs.npz); a Diffusion batch with a history axis is refused, its latest step accepted."""
    from hotloop.compile.sources import policy_source
    from hotloop.targets import TargetOptions

    act = fixtures_dir / "lerobot-act-tiny"
    folder = tmp_path / "act"
    folder.mkdir()
    raw = dict(np.load(act / "raw_inputs.npz"))
    for i in range(4):  # 8 frames: 0-2 and 4-6 calibrate
        np.savez(folder / f"{i}.npz", **raw)
    calib = raw_calibration(str(act), policy_source(str(act), TargetOptions()), folder, frames=10)
    want = np.load(act / "inputs.npz")
    got = calib.batch([1])  # the second row of the first file
    for image, key in zip(got.images, ("observation.images.top", "observation.images.wrist"), strict=True):
        np.testing.assert_allclose(image[0].numpy(), want[key][1], atol=1e-6)
    np.testing.assert_allclose(got.state[0].numpy(), want["observation.state"][1], atol=1e-6)

    diffusion = fixtures_dir / "lerobot-diffusion-tiny"
    raw = dict(np.load(diffusion / "raw_inputs.npz"))
    history, latest = tmp_path / "history", tmp_path / "latest"
    history.mkdir()
    latest.mkdir()
    np.savez(history / "a.npz", **raw)
    with pytest.raises(ConfigError, match="a history of frames per sample"):
        read_raw_batches(history)
    for i in range(2):
        np.savez(latest / f"{i}.npz", **{k: v[:, -1] for k, v in raw.items()})
    source = policy_source(str(diffusion), TargetOptions())
    calib = raw_calibration(str(diffusion), source, latest, frames=10)
    assert (len(calib), len(calib.held_out)) == (3, 1)
