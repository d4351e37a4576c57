"""Numbers and structure read from files are checked before they are used (docs/cli-rules.md, "Bounds"):
config.json sizes against a stated bound and the tensors before any allocation (every family), result
files read to a bounded size, resamples in bounded memory, JSON nested too deep, damaged baseline fields,
and `hotloop verify`'s reference and artifact. Each refusal is one line and exit 2."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from hotloop.cli import app

runner = CliRunner()
ASSETS = Path(__file__).resolve().parents[1] / "src" / "hotloop" / "assets"
FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"


def _one_line(args: list[str]) -> str:
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    return lines[0]


def _checkpoint(tmp_path: Path, family: str, **fields: Any) -> Path:
    folder = Path(shutil.copytree(ASSETS / f"demo_conveyor_{family}", tmp_path / family))
    config = json.loads((folder / "config.json").read_text())
    config.update(fields)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize(
    ("family", "fields", "named"),
    [
        ("act", {"chunk_size": 10**9}, "'chunk_size' must be an integer >= 1 and <= 1000"),
        ("act", {"chunk_size": 12}, "'chunk_size' is 12, but model.decoder_pos_embed.weight has shape (10, 64)"),
        ("act", {"n_heads": 10**9}, "'n_heads' must be an integer >= 1 and <= 1000000"),
        ("diffusion", {"num_train_timesteps": 10**9}, "'num_train_timesteps' must be an integer >= 1 and <= 10000"),
        ("diffusion", {"num_inference_steps": 10**7}, "'num_inference_steps' must be an integer >= 1 and <= 100"),
        ("diffusion", {"horizon": 10**9}, "'horizon' must be an integer >= 1 and <= 1000"),
        ("diffusion", {"crop_shape": [10**5, 10**5]}, "'crop_shape' is [100000, 100000]"),
        ("smolvla", {"chunk_size": 10**9}, "'chunk_size' must be an integer >= 1 and <= 1000"),
        ("smolvla", {"num_steps": 10**7}, "'num_steps' must be an integer >= 1 and <= 1000"),
        ("smolvla", {"tokenizer_max_length": 10**9}, "'tokenizer_max_length' must be an integer >= 1 and <= 100000"),
        ("smolvla", {"resize_imgs_with_padding": [10**5, 10**5]}, "two integers from 1 to 4096"),
    ],
)  # fmt: skip
def test_config_sizes_are_bounded_before_any_allocation(
    tmp_path: Path, family: str, fields: dict[str, Any], named: str
) -> None:
    folder = _checkpoint(tmp_path, family, **fields)
    assert named in _one_line(["bench", str(folder), "--iters", "1", "--warmup", "0", "--quiet"])


def test_a_camera_of_absurd_size_is_refused_for_every_camera_family(tmp_path: Path) -> None:
    for family in ("act", "diffusion", "smolvla"):
        config = json.loads((ASSETS / f"demo_conveyor_{family}" / "config.json").read_text())
        features = config["input_features"]
        features["observation.images.top"]["shape"] = [3, 10**5, 10**5]
        folder = _checkpoint(tmp_path, family, input_features=features)
        line = _one_line(["bench", str(folder), "--iters", "1", "--warmup", "0", "--quiet"])
        assert "observation.images.top" in line and "4096" in line


def test_pi_checkpoint_sizes_are_bounded(tmp_path: Path) -> None:
    import torch

    from hotloop.errors import CheckpointError
    from hotloop.families.pi.checkpoint import load_checkpoint, save_lerobot_checkpoint
    from hotloop.models.configs import get_pi_config
    from hotloop.models.pi0 import PiModel, init_weights

    model = init_weights(PiModel(get_pi_config("pi05:tiny")), torch.Generator().manual_seed(1)).eval()
    folder = save_lerobot_checkpoint(model, model.cfg, tmp_path / "ck")
    for field, value, bound in (("chunk_size", 10**9, 1000), ("num_inference_steps", 10**7, 1000),
                                ("tokenizer_max_length", 10**9, 100_000)):  # fmt: skip
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, field: value}))
        with pytest.raises(CheckpointError, match=f"'{field}' must be an integer >= 1 and <= {bound}"):
            load_checkpoint(folder)
        (folder / "config.json").write_text(json.dumps(config))


def test_result_files_are_read_to_a_bound(tmp_path: Path) -> None:
    assert "not a regular file" in _one_line(["compare", "/dev/zero", "/dev/zero"])
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    assert "nested too deep" in _one_line(["compare", str(deep), str(deep)])
    art = tmp_path / "art"
    art.mkdir()
    (art / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    for args in (["bench", str(art), "--iters", "1"], ["eval", str(art), "--episodes", "1"]):
        line = _one_line(args)
        assert "manifest.json" in line and "RecursionError" in line  # named, not raised


def _bench_json(tmp_path: Path) -> dict[str, Any]:
    out = tmp_path / "b.json"
    res = runner.invoke(
        app, ["bench", "toy:mlp", "--iters", "4", "--warmup", "1", "--quiet", "--json", str(out)]
    )
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text())


def test_damaged_baseline_fields_are_named(tmp_path: Path) -> None:
    good = _bench_json(tmp_path)
    (tmp_path / "new.json").write_text(json.dumps(good))
    for key, value, named in (
        ("stage_samples_ms", [1, 2], "field 'stage_samples_ms' is a list"),
        ("stage_samples_ms", {"total": ["a", "b"]}, "field 'stage_samples_ms.total'"),
        ("env", [1], "field 'env' is a list"),
        ("info", "x", "field 'info' is a str"),
    ):
        (tmp_path / "old.json").write_text(json.dumps({**good, key: value}))
        assert named in _one_line(["compare", str(tmp_path / "old.json"), str(tmp_path / "new.json")])
    run = {"target": "t", "task": "reach", "strategy": {}, "latency": {}, "per_episode": [{"seed": "x"}]}
    (tmp_path / "old.json").write_text(json.dumps(run))
    (tmp_path / "new.json").write_text(json.dumps({**run, "per_episode": []}))
    assert "per_episode[0].seed" in _one_line(
        ["compare", str(tmp_path / "old.json"), str(tmp_path / "new.json")]
    )


def test_resamples_of_a_million_samples_stay_in_bounded_memory() -> None:
    """scipy draws `batch` resamples at once; unbatched, 2000 of 1e6 samples asked ~16 GB (issue 38)."""
    from hotloop.measure import compare

    n = 1_000_000
    assert compare._batch(np.zeros(n)) * n * 8 <= compare.RESAMPLE_BYTES
    assert compare._batch(np.zeros(n), np.zeros(n)) == 4  # 2 x 1e6 float64 per resample: 16 MB each
    assert compare._batch(np.zeros(200)) == compare.N_RESAMPLES  # a normal run: drawn at once, as before


needs_fixtures = pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"parity fixtures not found at {FIXTURES}")


@needs_fixtures
def test_verify_names_garbage_reference_files_and_says_what_it_did_not_read(tmp_path: Path) -> None:
    ref = Path(shutil.copytree(FIXTURES / "lerobot-act-tiny", tmp_path / "ref"))
    with zipfile.ZipFile(ref / "inputs.npz", "w") as z:
        z.writestr("observation.state.npy", b"garbage")
    assert "key 'observation.state' is not a numeric" in _one_line(["verify", str(ref)])
    (ref / "inputs.npz").write_bytes(b"\0garbage" * 100)
    assert "inputs.npz: not a readable .npz archive" in _one_line(["verify", str(ref)])
    shutil.copy(FIXTURES / "lerobot-act-tiny" / "inputs.npz", ref / "inputs.npz")
    shutil.copy(ref / "actions.npy", ref / "action.npy")  # misspelt: not read, and said
    stages = dict(np.load(ref / "intermediates.npz"))
    np.savez(ref / "intermediates.npz", **stages, mystery_stage=np.zeros(3))
    res = runner.invoke(app, ["verify", str(ref), "--json", str(tmp_path / "v.json")])
    assert res.exit_code == 0, res.output
    notes = json.loads((tmp_path / "v.json").read_text())["notes"]
    assert any("not read: action.npy" in n for n in notes)
    assert any("not compared: mystery_stage" in n for n in notes)


@needs_fixtures
def test_verify_artifact_judges_at_the_users_tolerance_and_refuses_other_weights(tmp_path: Path) -> None:
    ckpt = FIXTURES / "lerobot-act-tiny"
    art = tmp_path / "art"
    args = ["compile", str(ckpt), "-o", str(art), "--budget-ms", "1e5", "--backends", "eager",
            "--precisions", "fp32", "--iters", "1", "--warmup", "0", "--threads", "1", "--quiet"]  # fmt: skip
    assert runner.invoke(app, args).exit_code == 0
    manifest = json.loads((art / "manifest.json").read_text())
    (art / "manifest.json").write_text(json.dumps({**manifest, "tolerance": "cos:0.000001"}))  # hand-edited
    js = tmp_path / "v.json"
    res = runner.invoke(app, ["verify", str(ckpt), "--artifact", str(art), "--json", str(js)])
    assert res.exit_code == 0, res.output
    judged = json.loads(js.read_text())["artifact"]
    assert judged["tolerance"] == "cos:0.995" and judged["artifact_tolerance"] == "cos:0.000001"
    assert "--artifact-tolerance cos:1.1" in _one_line(
        ["verify", str(ckpt), "--artifact", str(art), "--artifact-tolerance", "cos:1.1"]
    )
    other = Path(shutil.copytree(ckpt, tmp_path / "other"))
    from safetensors.torch import load_file, save_file

    weights = load_file(other / "model.safetensors")
    key = next(iter(weights))
    weights[key] = weights[key] + 1
    save_file(weights, str(other / "model.safetensors"))
    line = _one_line(["verify", str(other), "--artifact", str(art)])
    assert "was made from other weights than CKPT" in line
