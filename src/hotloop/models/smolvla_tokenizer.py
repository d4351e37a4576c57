"""SmolVLA's prompt tokenizer, read from the folder LeRobot's preprocessor saved it to (no hub access).

LeRobot's preprocessor appends a newline to each task (`smolvla_new_line_processor`), then calls the
transformers fast tokenizer with the tokenizer step's `max_length`, `truncation`, `padding` and
`padding_side`. The same backend (`tokenizers`, from `tokenizer.json`) is configured here with those values, so
ids and masks match without transformers. The step's `tokenizer_name` is a folder relative to the checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from hotloop.errors import CheckpointError, ConfigError
from hotloop.models.checkpoint_meta import MAX_TOKENS, Fields, read_json_object
from hotloop.models.smolvlm_config import boolean, refuse


@dataclass(frozen=True)
class TokenizerSettings:
    """The preprocessor's tokenizer step (policy_preprocessor.json), or config.json's fields without one."""

    folder: str | None  # tokenizer folder relative to the checkpoint (tokenizer_name), None if unnamed
    max_length: int
    padding: str  # "longest" | "max_length"
    padding_side: str  # "right" | "left"
    truncation: bool
    task_key: str = "task"


def read_tokenizer_settings(folder: Path, meta: Fields) -> TokenizerSettings:
    """The tokenizer step of policy_preprocessor.json; config.json's tokenizer fields when there is none."""
    max_length = (
        meta.integer("tokenizer_max_length", maximum=MAX_TOKENS) or 48
    )  # LeRobot SmolVLAConfig defaults
    padding = meta.string("pad_language_to") or "longest"
    path = folder / "policy_preprocessor.json"
    settings = TokenizerSettings(None, max_length, padding, "right", True)
    where, pad_key = meta, "pad_language_to"
    steps = read_json_object(path).get("steps") if path.is_file() else []
    if not isinstance(steps, list):
        raise CheckpointError(f"{path}: field 'steps' must be a list of processor steps")
    for i, step in enumerate(steps):
        if isinstance(step, dict) and step.get("registry_name") == "tokenizer_processor":
            c = Fields(step.get("config") or {}, path, f"steps[{i}].config.")
            settings = TokenizerSettings(  # the step's own defaults (TokenizerProcessorStep) where absent
                folder=c.string("tokenizer_name"),
                max_length=c.integer("max_length", maximum=MAX_TOKENS) or 512,
                padding=c.string("padding") or "max_length",
                padding_side=c.string("padding_side") or "right",
                truncation=boolean(c, "truncation", True),
                task_key=c.string("task_key") or "task",
            )
            where, pad_key = c, "padding"
            break
    if settings.padding not in ("longest", "max_length"):
        raise refuse(where, pad_key, settings.padding, "hotloop pads to 'longest' or 'max_length'")
    if settings.padding_side not in ("right", "left"):
        raise refuse(where, "padding_side", settings.padding_side, "padding_side is 'right' or 'left'")
    return settings


FAKE_IMAGE_TOKEN = "<fake_token_around_image>"  # SmolVLM's processor defaults for these names
GLOBAL_IMAGE_TOKEN = "<global-img>"


def _token_name(value: Any) -> str | None:
    """A special token as tokenizer_config.json stores it: a string or an AddedToken dict."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


class SmolVLATokenizer:
    """tasks -> (token ids (B, L) int64, attention mask (B, L) bool), as LeRobot's preprocessor makes them."""

    def __init__(
        self, backend: Any, settings: TokenizerSettings, folder: Path, names: dict[str, Any]
    ) -> None:
        self.backend, self.settings, self.folder = backend, settings, folder
        ids = {k: backend.token_to_id(names[k]) if names[k] else None for k in ("pad", "fake", "global")}
        self.pad_token_id: int | None = ids["pad"]
        self.fake_image_token_id: int | None = ids["fake"]
        self.global_image_token_id: int | None = ids["global"]
        if self.pad_token_id is None:
            raise CheckpointError(
                f"tokenizer folder {folder}: no pad token in the vocabulary (pad_token {names['pad']!r} in "
                "tokenizer_config.json); the preprocessor pads prompts"
            )
        backend.no_padding()
        if settings.truncation:
            backend.enable_truncation(settings.max_length, direction=names["truncation_side"])
        else:
            backend.no_truncation()
        backend.enable_padding(
            direction=settings.padding_side,
            pad_id=self.pad_token_id,
            pad_token=names["pad"],
            length=settings.max_length if settings.padding == "max_length" else None,
        )

    def __call__(self, tasks: str | Sequence[str]) -> tuple[Tensor, Tensor]:
        texts = [tasks] if isinstance(tasks, str) else list(tasks)
        if not texts or not all(isinstance(t, str) for t in texts):
            raise ConfigError("tasks must be a string or a non-empty list of strings")
        texts = [t if t.endswith("\n") else f"{t}\n" for t in texts]
        enc = self.backend.encode_batch(texts, add_special_tokens=True)
        masks = torch.tensor([e.attention_mask for e in enc], dtype=torch.int64)
        longest = int(masks.sum(dim=1).max())
        if not self.settings.truncation and longest > self.settings.max_length:
            raise ConfigError(
                f"a prompt has {longest} tokens but the tokenizer step's max_length is {self.settings.max_length} "
                f"and its 'truncation' is false ({self.folder.parent / 'policy_preprocessor.json'}): shorten the task"
            )
        ids = torch.tensor([e.ids for e in enc], dtype=torch.int64)
        return ids, masks.bool()


def load_tokenizer(folder: Path) -> SmolVLATokenizer:
    """The tokenizer named by policy_preprocessor.json's tokenizer step, loaded from the checkpoint folder."""
    folder = Path(folder)
    config = folder / "config.json"
    meta = Fields(read_json_object(config) if config.is_file() else {}, config)
    pre = folder / "policy_preprocessor.json"
    if not pre.is_file():
        raise CheckpointError(
            f"{folder}: no policy_preprocessor.json, so no tokenizer folder is named; hotloop does not download "
            "tokenizers: save the checkpoint with LeRobot's processors"
        )
    settings = read_tokenizer_settings(folder, meta)
    if settings.folder is None:
        raise CheckpointError(f"{pre}: the tokenizer_processor step names no tokenizer_name folder")
    tdir = folder / settings.folder
    if not (tdir / "tokenizer.json").is_file():
        raise CheckpointError(
            f"tokenizer folder {tdir} (tokenizer_name {settings.folder!r} in {pre.name}) has no tokenizer.json; "
            "hotloop does not download tokenizers: copy the saved tokenizer there"
        )
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise CheckpointError(f"{tdir} needs the 'tokenizers' package: pip install tokenizers") from exc
    try:
        backend = Tokenizer.from_file(str(tdir / "tokenizer.json"))
    except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
        raise CheckpointError(
            f"tokenizer folder {tdir}: tokenizer.json is not a tokenizer (corrupt?): {exc}"
        ) from None
    tc = tdir / "tokenizer_config.json"
    tcfg = read_json_object(tc) if tc.is_file() else {}
    extra = tcfg.get("extra_special_tokens")
    extra = extra if isinstance(extra, dict) else {}  # transformers 5 may keep named specials there

    def named(key: str) -> str | None:
        return _token_name(tcfg.get(key)) or _token_name(extra.get(key))

    names = {
        "pad": named("pad_token"),
        "fake": named("fake_image_token") or FAKE_IMAGE_TOKEN,
        "global": named("global_image_token") or GLOBAL_IMAGE_TOKEN,
        "truncation_side": tcfg.get("truncation_side")
        if tcfg.get("truncation_side") in ("left", "right")
        else "right",
    }
    return SmolVLATokenizer(backend, settings, tdir, names)


__all__ = ["SmolVLATokenizer", "TokenizerSettings", "load_tokenizer", "read_tokenizer_settings"]
