"""A saved Hugging Face fast tokenizer, called the way LeRobot's tokenizer step calls it.

LeRobot's `TokenizerProcessorStep` runs `AutoTokenizer.from_pretrained(folder)(texts, max_length=...,
truncation=..., padding=..., padding_side=..., return_tensors="pt")` with transformers 5.4-5.5. For a
saved fast tokenizer that call is, underneath, the `tokenizers` library: transformers loads
`tokenizer.json` as it is, takes its settings from `tokenizer_config.json` (pad token, truncation side,
explicit `add_bos_token` / `add_eos_token`, `split_special_tokens`), sets the backend's truncation and
padding for the call (`set_truncation_and_padding`) and runs `encode_batch(texts, add_special_tokens=True)`.
For a model-specific `tokenizer_class` (e.g. GemmaTokenizer) transformers 5 rebuilds normaliser and
pre-tokeniser from the class and takes vocabulary, merges and post-processor from tokenizer.json; a file
that transformers 5 saved holds what that class built, so tokenizer.json as saved is what LeRobot runs.
This module does exactly that with `tokenizers` alone (transformers is not a dependency), and refuses the
layouts where transformers would do more than that: a missing / unreadable file, a named special token
the vocabulary lacks, or a `pad_to_multiple_of` (whose handling differs between transformers versions).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from hotloop.errors import CheckpointError, ConfigError
from hotloop.models.checkpoint_meta import Fields, read_json_object

Padding = Literal["longest", "max_length", "do_not_pad"]

# transformers' named special tokens (SpecialTokensMixin) that it adds to the backend when missing.
_NAMED_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


@dataclass
class HFTokenizer:
    """One loaded tokenizer folder; `encode` is LeRobot's `_tokenize_text`."""

    folder: Path
    backend: Any  # tokenizers.Tokenizer
    pad_token: str | None
    pad_id: int | None
    pad_type_id: int
    truncation_side: Literal["left", "right"]
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def encode(
        self,
        texts: Sequence[str],
        *,
        max_length: int,
        padding: Padding,
        padding_side: Literal["left", "right"],
        truncation: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(input ids int64 (B, L), attention mask bool (B, L)) as transformers returns them for this call.

        `padding` "longest" pads to the longest text of the batch, "max_length" to `max_length`;
        `truncation` cuts at `max_length` tokens (special tokens included) from `truncation_side`.
        """
        if padding != "do_not_pad" and self.pad_id is None:
            raise CheckpointError(
                f"{self.folder / 'tokenizer_config.json'}: the tokenizer has no pad token but padding "
                f"{padding!r} was asked for; set 'pad_token'"
            )
        with self._lock:  # the backend's padding / truncation settings are shared mutable state
            tok = self.backend
            if truncation:
                tok.enable_truncation(
                    max_length=max_length, stride=0, strategy="longest_first", direction=self.truncation_side
                )
            else:
                tok.no_truncation()
            if padding == "do_not_pad":
                tok.no_padding()
            else:
                tok.enable_padding(
                    direction=padding_side,
                    pad_id=self.pad_id,
                    pad_type_id=self.pad_type_id,
                    pad_token=self.pad_token,
                    length=max_length if padding == "max_length" else None,
                    pad_to_multiple_of=None,
                )
            encodings = tok.encode_batch(list(texts), add_special_tokens=True)
        lengths = {len(e.ids) for e in encodings}
        if len(lengths) > 1:  # transformers' return_tensors="pt" refuses ragged batches the same way
            raise ConfigError(
                f"the texts tokenize to different lengths {sorted(lengths)} and padding is {padding!r}: "
                "they cannot form one tensor"
            )
        ids = torch.tensor([e.ids for e in encodings], dtype=torch.int64)
        mask = torch.tensor([e.attention_mask for e in encodings], dtype=torch.int64).to(torch.bool)
        return ids, mask


def _token(fields: Fields, key: str) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, an AddedToken dict, or null."""
    value = fields.data.get(key)
    if value is None:
        return None
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    if isinstance(value, str):
        return value
    raise CheckpointError(
        f"{fields.file}: field {fields.name(key)!r} must be a token string or {{'content': ...}}; "
        "fix or delete the field"
    )


def _flag(fields: Fields, key: str) -> bool | None:
    value = fields.data.get(key)
    if value is None or isinstance(value, bool):
        return value
    raise CheckpointError(f"{fields.file}: field {fields.name(key)!r} must be true or false (got {value!r})")


def load_tokenizer(folder: Path) -> HFTokenizer:
    """The fast tokenizer saved in `folder` (tokenizer.json + tokenizer_config.json, as transformers'
    `save_pretrained` writes them); a missing, unreadable or unsupported one is a CheckpointError."""
    if not folder.is_dir():
        raise CheckpointError(f"tokenizer folder {folder} does not exist; the checkpoint is incomplete")
    tokenizer_json, config_json = folder / "tokenizer.json", folder / "tokenizer_config.json"
    for needed in (tokenizer_json, config_json):
        if not needed.is_file():
            raise CheckpointError(
                f"{needed} is missing; hotloop reads Hugging Face fast tokenizers (tokenizer.json + "
                "tokenizer_config.json as save_pretrained writes them)"
            )
    try:
        from tokenizers import Tokenizer
        from tokenizers.processors import TemplateProcessing
    except ImportError as exc:
        raise CheckpointError(f"{folder} needs the tokenizers library: pip install tokenizers") from exc
    try:
        backend = Tokenizer.from_file(str(tokenizer_json))
    except Exception as exc:  # the Rust side raises a bare Exception on bad JSON or an unknown model
        raise CheckpointError(f"{tokenizer_json} is not a readable tokenizers file: {exc}") from None
    config = Fields(read_json_object(config_json), config_json)

    for key in ("pad_to_multiple_of",):
        if config.data.get(key) is not None:
            raise CheckpointError(f"{config_json}: field {key!r} is set; hotloop pads without it")
    saved_padding = backend.padding or {}
    if saved_padding.get("pad_to_multiple_of") is not None:
        raise CheckpointError(f"{tokenizer_json}: padding.pad_to_multiple_of is set; hotloop pads without it")

    # transformers adds every named special token missing from the backend as a new token; a tokenizer
    # saved by transformers always holds them, so one that does not was written by hand: refused.
    added = {t.content for t in backend.get_added_tokens_decoder().values()}
    tokens = {k: _token(config, k) for k in _NAMED_TOKENS}
    extra = config.data.get("extra_special_tokens") or config.data.get("additional_special_tokens") or []
    named = [t for t in tokens.values() if t is not None]
    named += [str(t["content"]) if isinstance(t, dict) else str(t) for t in extra if isinstance(extra, list)]
    for token in named:
        if token not in added:
            raise CheckpointError(
                f"{config_json}: special token {token!r} is not among {tokenizer_json.name}'s added_tokens; "
                "re-save the tokenizer with transformers"
            )

    # The settings transformers 5 reads: explicit config values win over tokenizer.json's saved ones.
    saved_truncation = backend.truncation or {}
    side = config.string("truncation_side", ("left", "right")) or saved_truncation.get("direction", "right")
    pad_token = tokens["pad_token"] or saved_padding.get("pad_token")
    pad_id = backend.token_to_id(pad_token) if pad_token is not None else None
    pad_type_id = config.integer("pad_token_type_id", minimum=0)
    if pad_type_id is None:
        pad_type_id = int(saved_padding.get("pad_type_id", 0))
    split = _flag(config, "split_special_tokens")
    backend.encode_special_tokens = bool(split)

    add_bos, add_eos = _flag(config, "add_bos_token"), _flag(config, "add_eos_token")
    if add_bos is not None or add_eos is not None or backend.post_processor is None:
        # TokenizersBackend.update_post_processor: rebuilt from the flags when either is explicit.
        bos = tokens["bos_token"] if add_bos else None  # a flag without its token is dropped, as there
        eos = tokens["eos_token"] if add_eos else None
        single = f"{bos + ':0 ' if bos else ''}$A:0{' ' + eos + ':0' if eos else ''}"
        pair = f"{single}{' ' + bos + ':1' if bos else ''} $B:1{' ' + eos + ':1' if eos else ''}"
        specials = [(t, backend.token_to_id(t)) for t in (bos, eos) if t]
        backend.post_processor = TemplateProcessing(single=single, pair=pair, special_tokens=specials)
    return HFTokenizer(
        folder=folder,
        backend=backend,
        pad_token=pad_token,
        pad_id=pad_id,
        pad_type_id=pad_type_id,
        truncation_side="left" if side == "left" else "right",
    )


__all__ = ["HFTokenizer", "Padding", "load_tokenizer"]
