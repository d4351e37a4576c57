"""A tiny SmolVLM saved by transformers in a local folder, for SmolVLA checkpoints made without the Hub.

LeRobot 0.4's SmolVLA builds its VLM with `AutoConfig.from_pretrained(vlm_model_name)` and reads two token
ids from `AutoProcessor.from_pretrained(vlm_model_name).tokenizer`; its preprocessor tokenises with
`AutoTokenizer.from_pretrained(vlm_model_name)`. A folder holding a `SmolVLMConfig`, an image processor and a
fast tokenizer, saved by transformers, answers all three with no download and nothing patched.

The tokenizer is word-level (as the parity fixtures' is): <pad> 0, <unk> 1, <fake_token_around_image> 2,
<global-img> 3, <image> 4, <end_of_utterance> 5, then `w6` ... `w511` with id = the number.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

VOCAB = 512
SPECIAL = {"<pad>": 0, "<unk>": 1, "<fake_token_around_image>": 2, "<global-img>": 3, "<image>": 4,
           "<end_of_utterance>": 5}  # fmt: skip
TEXT = {
    "model_type": "llama", "vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "hidden_act": "silu", "rms_norm_eps": 1e-5, "max_position_embeddings": 256, "rope_theta": 100000.0,
    "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False, "pad_token_id": 0,
}  # fmt: skip
VISION = {
    "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
    "num_channels": 3, "image_size": 48, "patch_size": 8, "hidden_act": "gelu_pytorch_tanh",
    "layer_norm_eps": 1e-6,
}  # fmt: skip


def tokenizer() -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(len(SPECIAL), VOCAB)} | SPECIAL
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="<unk>",
        pad_token="<pad>",
        extra_special_tokens={
            "fake_image_token": "<fake_token_around_image>",
            "image_token": "<image>",
            "global_image_token": "<global-img>",
            "end_of_utterance_token": "<end_of_utterance>",
        },
    )


def write_local_vlm(folder: Path) -> Path:
    from transformers import SmolVLMConfig, SmolVLMImageProcessor, SmolVLMProcessor, SmolVLMVideoProcessor

    folder.mkdir(parents=True, exist_ok=True)
    config = SmolVLMConfig(
        text_config=TEXT, vision_config=VISION, scale_factor=2, image_token_id=SPECIAL["<image>"],
        pad_token_id=0, tie_word_embeddings=False,
    )  # fmt: skip
    config.save_pretrained(folder)
    image_processor = SmolVLMImageProcessor(max_image_size={"longest_edge": VISION["image_size"]})
    processor = SmolVLMProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer(),
        video_processor=SmolVLMVideoProcessor(),
        image_seq_len=9,
    )
    processor.save_pretrained(folder)
    return folder


def vlm_config_for_hotloop(folder: Path) -> dict[str, Any]:
    """hotloop's vlm_config.json: the VLM's config.json plus the ids of its image tokens."""
    config = json.loads((folder / "config.json").read_text())
    return {
        **config,
        "fake_image_token_id": SPECIAL["<fake_token_around_image>"],
        "global_image_token_id": SPECIAL["<global-img>"],
    }
