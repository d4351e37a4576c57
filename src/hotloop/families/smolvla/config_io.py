"""SmolVLAConfig as JSON-ready data and back (an artifact's manifest stores it; `Engine.load` rebuilds the
model from it without the checkpoint folder)."""

from __future__ import annotations

import dataclasses
from typing import Any

from hotloop.errors import CheckpointError
from hotloop.models.smolvla_config import LayerPlan, SmolVLAConfig
from hotloop.models.smolvla_tokenizer import TokenizerSettings
from hotloop.models.smolvlm import LlamaConfig, SmolVLMConfig, SmolVLMVisionConfig

_TUPLES = ("camera_keys", "image_size", "image_start_ids", "image_end_ids", "assumed")


def config_to_dict(cfg: SmolVLAConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def _llama(data: dict[str, Any]) -> LlamaConfig:
    return LlamaConfig(**{**data, "kv_in": tuple(data["kv_in"])})


def config_from_dict(data: dict[str, Any]) -> SmolVLAConfig:
    """The inverse of `config_to_dict`; a manifest of another layout is a CheckpointError."""
    try:
        vlm = data["vlm"]
        fields = {k: v for k, v in data.items() if k not in ("vlm", "expert", "layers", "tokenizer")}
        native = fields.pop("native_image_size", None)  # absent from manifests before `vision-res`
        return SmolVLAConfig(
            vlm=SmolVLMConfig(
                vision=SmolVLMVisionConfig(**vlm["vision"]),
                text=_llama(vlm["text"]),
                scale_factor=int(vlm["scale_factor"]),
                vocab_size=int(vlm["vocab_size"]),
            ),
            expert=_llama(data["expert"]),
            layers=tuple(LayerPlan(**layer) for layer in data["layers"]),
            tokenizer=TokenizerSettings(**data["tokenizer"]),
            native_image_size=None if native is None else (int(native[0]), int(native[1])),
            **{k: tuple(v) if k in _TUPLES else v for k, v in fields.items()},  # type: ignore[arg-type]
        )
    except (KeyError, TypeError) as exc:
        raise CheckpointError(f"the manifest's SmolVLA config does not fit this hotloop ({exc})") from None
