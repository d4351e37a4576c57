"""What `hotloop compile` writes for LeRobot's own loop (`hotloop.lerobot.plugin_files`): ART/config.json of
type "hotloop" and the checkpoint's processor files, verbatim and under the manifest's sha256; and the
artifact stays an artifact for hotloop's own commands. (The plugin reading them in LeRobot's venv:
tests/plugins/lerobot_policy_hotloop/.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import hotloop
from hotloop.cli import app
from hotloop.compile.artifact import sha256_file
from hotloop.errors import CheckpointError
from hotloop.lerobot.plugin_files import processor_files, write_plugin_files
from hotloop.lerobot.processors import read_policy_processors
from hotloop.targets import ARTIFACT_ENTRY, find_target

runner = CliRunner()
FAST = ["--iters", "2", "--warmup", "0", "--threads", "1", "--quiet", "--no-cache"]


@pytest.fixture(scope="module")
def act_art(fixtures_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("plugin-files") / "art"
    res = runner.invoke(
        app,
        ["compile", str(fixtures_dir / "lerobot-act-tiny"), "-o", str(out), "--backends", "eager,onnxruntime",
         "--precisions", "fp32", *FAST],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return out


def test_the_artifact_carries_what_lerobot_reads(act_art: Path, fixtures_dir: Path) -> None:
    ckpt = fixtures_dir / "lerobot-act-tiny"
    source = json.loads((ckpt / "config.json").read_text())
    config = json.loads((act_art / "config.json").read_text())
    assert config["type"] == "hotloop"
    assert config["source_type"] == "act" and config["source_checkpoint"] == str(ckpt.resolve())
    for key in (
        "input_features",
        "output_features",
        "chunk_size",
        "n_action_steps",
        "temporal_ensemble_coeff",
    ):
        assert config[key] == source[key], key
    assert config["hotloop_version"] == hotloop.__version__ and config["fallback"] == "none"
    copied = sorted(p.name for p in ckpt.glob("policy_*processor*"))
    assert len(copied) == 4  # two pipelines, each with its statistics
    listed = json.loads((act_art / "manifest.json").read_text())["files"]
    for name in [*copied, "config.json"]:
        assert listed[name] == sha256_file(act_art / name), name
    for name in copied:
        assert (act_art / name).read_bytes() == (ckpt / name).read_bytes(), name


def test_hotloop_commands_still_take_the_artifact(act_art: Path, fixtures_dir: Path, tmp_path: Path) -> None:
    """config.json beside manifest.json does not make the artifact a checkpoint folder."""
    assert find_target(str(act_art)) is ARTIFACT_ENTRY
    ckpt = fixtures_dir / "lerobot-act-tiny"
    js = tmp_path / "v.json"
    res = runner.invoke(
        app, ["verify", str(ckpt), "--reference", str(ckpt), "--artifact", str(act_art), "--json", str(js)]
    )
    assert res.exit_code == 0, res.output
    assert json.loads(js.read_text())["artifact"]["violation"] is None
    res = runner.invoke(app, ["bench", str(act_art), "--iters", "2", "--warmup", "0"])
    assert res.exit_code == 0, res.output


def test_folders_a_pipeline_names_as_artifacts_are_copied(fixtures_dir: Path) -> None:
    """LeRobot >= 0.5 saves SmolVLA's tokenizer as the tokenizer step's artifact folder."""
    files = [str(p) for p in processor_files(fixtures_dir / "lerobot-smolvla-tiny")]
    assert "tokenizer" in files and "policy_preprocessor.json" in files


def test_nothing_written_for_a_source_that_is_no_lerobot_checkpoint(
    tmp_path: Path, fixtures_dir: Path
) -> None:
    ckpt = str(fixtures_dir / "lerobot-act-tiny")
    assert write_plugin_files(tmp_path, "act", {"kind": "demo:conveyor"}) == []  # a named target
    assert write_plugin_files(tmp_path, "pi", {"checkpoint": ckpt}) == []  # a family the plugin does not run
    assert list(tmp_path.iterdir()) == []


def test_tokenizer_named_by_an_absolute_path_inside_the_checkpoint(
    fixtures_dir: Path, tmp_path: Path
) -> None:
    """LeRobot 0.4 writes `tokenizer_name` as the VLM was named: a local VLM saved inside the checkpoint
    is an absolute path there; one outside stays refused."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(fixtures_dir / "lerobot-smolvla-tiny", ckpt)
    pre = ckpt / "policy_preprocessor.json"
    data = json.loads(pre.read_text())
    step = next(s for s in data["steps"] if s["registry_name"] == "tokenizer_processor")
    del step["artifacts"]
    for where, ok in (
        (ckpt / "tokenizer", True),
        (fixtures_dir / "lerobot-smolvla-tiny" / "tokenizer", False),
    ):
        step["config"]["tokenizer_name"] = str(where.resolve())
        pre.write_text(json.dumps(data))
        if ok:
            read_policy_processors(ckpt)
        else:
            with pytest.raises(CheckpointError, match="must be a path inside"):
                read_policy_processors(ckpt)
