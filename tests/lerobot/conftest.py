"""Shared helpers for the LeRobot processor tests: fixture location, and processor files written in tmp_path
exactly as LeRobot's `DataProcessorPipeline._save_pretrained` writes them (commit 7427f318)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

# CI clones the repo with `../shared` beside it; locally that is /work/shared.
FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.skip(f"parity fixtures not found at {FIXTURES} (expected ../shared/fixtures beside the repo)")
    return FIXTURES


@pytest.fixture(autouse=True)
def _single_intra_op_thread() -> Iterator[None]:
    """One intra-op thread per test on the shared 2-core box; restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class LeRobotFiles:
    """Writers of LeRobot's on-disk layout."""

    @staticmethod
    def pipeline(
        folder: Path,
        name: str,
        steps: list[tuple[str, dict[str, Any], dict[str, torch.Tensor] | None]],
        artifacts: dict[int, dict[str, str]] | None = None,
    ) -> Path:
        """`<name>.json` + one `<name>_step_<i>_<registry>.safetensors` per step with state, as
        `get_config` / `state_dict` / `_save_pretrained` produce them (json.dump indent 2)."""
        folder.mkdir(parents=True, exist_ok=True)
        entries = []
        for i, (registry, config, state) in enumerate(steps):
            entry: dict[str, Any] = {"registry_name": registry, "config": config}
            if state:
                entry["state_file"] = f"{name}_step_{i}_{registry}.safetensors"
                save_file({k: v.contiguous() for k, v in state.items()}, str(folder / entry["state_file"]))
            if artifacts and i in artifacts:
                entry["artifacts"] = artifacts[i]
            entries.append(entry)
        path = folder / f"{name}.json"
        path.write_text(json.dumps({"name": name, "steps": entries}, indent=2))
        return path

    @staticmethod
    def normalizer_config(
        features: dict[str, tuple[str, list[int]]], norm_map: dict[str, str], eps: float = 1e-8
    ) -> dict[str, Any]:
        """_NormalizationMixin.get_config."""
        return {
            "eps": eps,
            "features": {k: {"type": t, "shape": s} for k, (t, s) in features.items()},
            "norm_map": norm_map,
        }

    @staticmethod
    def stats(per_feature: dict[str, dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        """_NormalizationMixin.state_dict: flat `<feature>.<stat>` keys."""
        return {f"{k}.{s}": v for k, sub in per_feature.items() for s, v in sub.items()}

    @staticmethod
    def tokenizer(
        folder: Path,
        words: list[str],
        config: dict[str, Any] | None = None,
        specials: tuple[str, ...] = ("<pad>", "<unk>", "<bos>", "<eos>"),
    ) -> Path:
        """A word-level fast tokenizer saved as transformers 5 saves one (tokenizer.json +
        tokenizer_config.json with tokenizer_class TokenizersBackend)."""
        from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers, processors

        folder.mkdir(parents=True, exist_ok=True)
        vocab = {t: i for i, t in enumerate(list(specials) + words)}
        tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
        tok.post_processor = processors.TemplateProcessing(single="$A:0", pair="$A:0 $B:1", special_tokens=[])
        tok.save(str(folder / "tokenizer.json"))
        base = {
            "backend": "tokenizers",
            "tokenizer_class": "TokenizersBackend",
            "pad_token": "<pad>",
            "unk_token": "<unk>",
            "model_max_length": 1000000000000000019884624838656,
        }
        (folder / "tokenizer_config.json").write_text(json.dumps({**base, **(config or {})}, indent=2))
        return folder


@pytest.fixture
def files() -> type[LeRobotFiles]:
    return LeRobotFiles
