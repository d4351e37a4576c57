"""`hotloop train-demo --family smolvla`: a small LeRobot SmolVLA trained from scratch on recorded
conveyor-pick episodes (both cameras, the state and the task prompt), written in LeRobot's checkpoint layout.

What is LeRobot's (policies/smolvla at commit 7427f318):
- the network and config.json of `SmolVLAConfig` (hotloop's `SmolVLAModel`, the same module names): a
  SigLIP-style vision tower with the pixel-shuffle connector, a Llama text stack, the action expert at 0.75
  of its width, cross-attention with self-attention every 2nd layer, the state as one prefix token;
- the samples: the observation at frame t and the actions t .. t + chunk_size - 1, indices past the episode
  end clamped to its last action (LeRobot's padding by copy);
- the loss (`VLAFlowMatching.forward` + `SmolVLAPolicy.forward`): time ~ Beta(1.5, 1) * 0.999 + 0.001,
  noise ~ N(0, 1), x_t = t noise + (1 - t) actions, target u_t = noise - actions, MSE against the velocity
  the expert predicts from the prefix (the same `prefix` + `denoise_step` sampling runs), averaged over the
  whole chunk. LeRobot's policy looks the padding mask up under "actions_id_pad" (sic) while its datasets
  name it "action_is_pad", so its copies past the episode end are never masked: the same here
  (`mask_padding` turns the mask on);
- the processors `make_smolvla_pre_post_processors` saves: newline, tokenizer (its folder saved inside the
  checkpoint), normaliser (VISUAL IDENTITY, STATE and ACTION MEAN_STD) with the dataset statistics computed
  as LeRobot computes them (`hotloop.train.lerobot_frames.episode_stats` / `aggregate`); training batches are
  normalised and tokenised by those very files.

What is this demo's own:
- every weight is trained from scratch (nothing may be downloaded): config.json says so
  (`load_vlm_weights`, `freeze_vision_encoder` and `train_expert_only` false), and the weights start from
  the recipe of hotloop's named SmolVLA targets (matrices N(0, 1/fan_in), norm scales near 1);
- the sizes: 64 px views (no resize), patch 16 and pixel shuffle 2 (4 tokens a view), a 2-layer vision
  tower 64 wide, 4 text layers 128 wide (4 heads, 2 key/value heads), a 96-wide expert: 1.24 M
  parameters; chunk 10 of which 5 run per inference, 10 flow steps; max_state_dim / max_action_dim equal
  to the state and action widths (no zero padding);
- the tokenizer: a word-level vocabulary of the dataset's prompts plus SmolVLM's special tokens, saved as
  transformers saves a fast tokenizer (SmolVLM2's 49,280-token vocabulary would be most of the model);
- the optimiser (`hotloop.train.loop`: AdamW, warm-up and cosine decay, clipping at 10 as LeRobot's preset)
  at a from-scratch learning rate.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hotloop.errors import ConfigError
from hotloop.lerobot import checkpoint_files
from hotloop.lerobot.checkpoint_files import config_header
from hotloop.train.demo_trainer import TRY_EVAL, DemoTrainer, ship_checkpoint
from hotloop.train.lerobot_frames import IMAGES_PREFIX
from hotloop.train.options import CameraDemoOptions
from hotloop.train.run import Folder

TOKENIZER_FOLDER = "tokenizer"
SPECIAL_TOKENS = ("<pad>", "<unk>", "<fake_token_around_image>", "<global-img>", "<image>")
VLM_NAME = "HuggingFaceTB/SmolVLM2-500M-Video-Instruct"  # config.json's; sizes come from vlm_config.json


@dataclass(frozen=True)
class TrainSmolVLADemoConfig(CameraDemoOptions):
    image_size: int = 64  # resize_imgs_with_padding (the recorded views are 64 px: no resize)
    # Patch 16 and pixel shuffle 2: 16 patches, 4 tokens a view. The state already holds the box pose and
    # velocity, and patch 8 (16 tokens a view) took about 2.5x as long per training step.
    patch: int = 16
    scale: int = 2
    vision_width: int = 64
    vision_mlp: int = 256
    vision_layers: int = 2
    vision_heads: int = 2
    text_width: int = 128
    text_mlp: int = 256
    text_layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 32
    chunk_size: int = 10
    n_action_steps: int = 5
    num_steps: int = 10
    max_length: int = 16  # tokenizer_max_length
    mask_padding: bool = False  # LeRobot's effective behaviour (see the module docstring)
    steps: int = 2500  # about 20 minutes at one thread on the shared 2-core machine
    lr: float = 5e-4
    weight_decay: float = 1e-10  # LeRobot's SmolVLA preset, as its clipping at 10 (the options' default)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check_positive("chunk_size", "n_action_steps", "num_steps")
        if self.n_action_steps > self.chunk_size:
            raise ConfigError(f"n_action_steps {self.n_action_steps} exceeds chunk_size {self.chunk_size}")
        grid = self.image_size // self.patch
        if self.image_size % self.patch or grid % self.scale:
            raise ConfigError(
                f"image_size {self.image_size} must be a multiple of patch {self.patch} and its grid of the "
                f"pixel-shuffle factor {self.scale}"
            )
        if self.heads % self.kv_heads:
            raise ConfigError(f"heads {self.heads} must be a multiple of kv_heads {self.kv_heads}")
        if int(self.text_width * 0.75) != self.text_width * 0.75:
            raise ConfigError(f"text_width {self.text_width} x 0.75 (the expert's width) must be whole")


# ---- the checkpoint's files ------------------------------------------------------------------------------


def vocabulary(prompts: list[str]) -> list[str]:
    """SmolVLM's special tokens, then every whitespace-separated word of the prompts, in first-seen order."""
    words = list(SPECIAL_TOKENS)
    for prompt in prompts:
        for word in prompt.split():
            if word not in words:
                words.append(word)
    return words


def write_tokenizer(folder: Path, words: list[str]) -> None:
    """A word-level fast tokenizer saved as transformers saves one (tokenizer.json + tokenizer_config.json):
    whitespace split (the preprocessor's trailing newline is dropped with it), no added BOS / EOS."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers, processors

    folder.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.post_processor = processors.TemplateProcessing(single="$A:0", pair="$A:0 $B:1", special_tokens=[])
    tok.save(str(folder / "tokenizer.json"))
    config = {
        "backend": "tokenizers", "tokenizer_class": "TokenizersBackend", "extra_special_tokens": [],
        "pad_token": "<pad>", "unk_token": "<unk>", "fake_image_token": "<fake_token_around_image>",
        "global_image_token": "<global-img>", "image_token": "<image>",
        "model_max_length": 1000000000000000019884624838656,
    }  # fmt: skip
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))


def features(
    cfg: TrainSmolVLADemoConfig, state_dim: int, action_dim: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(input_features, output_features) as config.json holds them (the raw 64 px views)."""
    inputs: dict[str, Any] = {"observation.state": {"type": "STATE", "shape": [state_dim]}}
    for view in cfg.views:
        inputs[IMAGES_PREFIX + view] = {"type": "VISUAL", "shape": [3, cfg.image_size, cfg.image_size]}
    return inputs, {"action": {"type": "ACTION", "shape": [action_dim]}}


NORM_MAP = {"VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"}  # SmolVLAConfig's default


def lerobot_config(cfg: TrainSmolVLADemoConfig, state_dim: int, action_dim: int) -> dict[str, Any]:
    """config.json as LeRobot's `SmolVLAConfig` writes it (every field `save_pretrained` writes)."""
    inputs, outputs = features(cfg, state_dim, action_dim)
    return {
        **config_header("smolvla", 1, inputs, outputs),
        "chunk_size": cfg.chunk_size, "n_action_steps": cfg.n_action_steps, "normalization_mapping": NORM_MAP,
        # No padding: the padded dimensions would only teach the expert to predict the noise there.
        "max_state_dim": state_dim, "max_action_dim": action_dim,
        "resize_imgs_with_padding": [cfg.image_size, cfg.image_size], "empty_cameras": 0,
        "adapt_to_pi_aloha": False, "use_delta_joint_actions_aloha": False,
        "tokenizer_max_length": cfg.max_length, "num_steps": cfg.num_steps, "use_cache": True,
        # Trained from scratch: nothing frozen, no pretrained VLM.
        "freeze_vision_encoder": False, "train_expert_only": False, "train_state_proj": True,
        "optimizer_lr": cfg.lr, "optimizer_betas": [0.9, 0.999], "optimizer_eps": 1e-08,
        "optimizer_weight_decay": cfg.weight_decay, "optimizer_grad_clip_norm": cfg.grad_clip,
        "scheduler_warmup_steps": cfg.warmup, "scheduler_decay_steps": cfg.steps,
        "scheduler_decay_lr": cfg.min_lr, "vlm_model_name": VLM_NAME, "load_vlm_weights": False,
        "add_image_special_tokens": False, "attention_mode": "cross_attn", "prefix_length": -1,
        "pad_language_to": "longest", "num_expert_layers": -1, "num_vlm_layers": cfg.text_layers,
        "self_attn_every_n_layers": 2, "expert_width_multiplier": 0.75, "min_period": 0.004,
        "max_period": 4.0, "rtc_config": None, "compile_model": False, "compile_mode": "max-autotune",
    }  # fmt: skip


def vlm_config(cfg: TrainSmolVLADemoConfig, vocab: int) -> dict[str, Any]:
    """vlm_config.json: the VLM values no tensor shows (transformers' SmolVLMConfig keys)."""
    return {
        "text_config": {
            "model_type": "llama", "vocab_size": vocab, "hidden_size": cfg.text_width,
            "intermediate_size": cfg.text_mlp, "num_hidden_layers": cfg.text_layers,
            "num_attention_heads": cfg.heads, "num_key_value_heads": cfg.kv_heads, "head_dim": cfg.head_dim,
            "rms_norm_eps": 1e-5, "hidden_act": "silu", "pad_token_id": 0,
        },
        "vision_config": {
            "hidden_size": cfg.vision_width, "intermediate_size": cfg.vision_mlp,
            "num_hidden_layers": cfg.vision_layers, "num_attention_heads": cfg.vision_heads, "num_channels": 3,
            "image_size": cfg.image_size, "patch_size": cfg.patch, "layer_norm_eps": 1e-6,
            "hidden_act": "gelu_pytorch_tanh",
        },
        "scale_factor": cfg.scale,
        "pad_token_id": 0,
    }  # fmt: skip


def write_processors(
    folder: Path, config_json: dict[str, Any], stats: dict[str, dict[str, np.ndarray]]
) -> None:
    """policy_preprocessor.json / policy_postprocessor.json and their statistics, as LeRobot's
    `make_smolvla_pre_post_processors(...).save_pretrained` writes them: the newline and tokenizer steps
    (naming the tokenizer folder saved beside them) before the device step."""
    tokenizer = {
        "max_length": config_json["tokenizer_max_length"], "task_key": "task", "padding_side": "right",
        "padding": config_json["pad_language_to"], "truncation": True, "tokenizer_name": TOKENIZER_FOLDER,
    }  # fmt: skip
    own_steps = [
        {"registry_name": "smolvla_new_line_processor", "config": {}},
        {
            "registry_name": "tokenizer_processor",
            "config": tokenizer,
            "artifacts": {"tokenizer_name": TOKENIZER_FOLDER},
        },
    ]
    checkpoint_files.write_processors(folder, config_json, stats, own_steps)


def save_checkpoint(folder: Path, model: Any) -> None:
    """model.safetensors with LeRobot's "model." keys; the unused lm_head is written (zeros) because LeRobot's
    strict load expects it: SmolVLA never emits tokens."""
    import torch

    from hotloop.io import save_tensors
    from hotloop.models.smolvla_config import LM_HEAD_KEY

    state = {f"model.{k}": v.detach().float().contiguous() for k, v in model.state_dict().items()}
    embed = model.vlm_with_expert.vlm.model.text_model.embed_tokens.weight
    state[f"model.{LM_HEAD_KEY}"] = torch.zeros_like(embed, dtype=torch.float32)
    save_tensors(state, str(folder / "model.safetensors"), metadata={"format": "pt"})


# ---- training --------------------------------------------------------------------------------------------


def sample_time(batch: int, gen: Any) -> Any:
    """LeRobot's `sample_time`: Beta(1.5, 1) * 0.999 + 0.001 (drawn by inverse CDF from `gen`: the Beta(a, 1)
    CDF is x^a)."""
    import torch

    u = torch.rand(batch, generator=gen)
    return u ** (1 / 1.5) * 0.999 + 0.001


def flow_matching_loss(
    model: Any,
    images: Any,
    image_masks: Any,
    lang: Any,
    lang_mask: Any,
    state: Any,
    actions: Any,
    gen: Any,
    is_pad: Any = None,
) -> Any:
    """LeRobot's SmolVLA training loss on a model-space batch: images (B, V, 3, H, W) in [-1, 1], normalised
    state (B, max_state_dim) and actions (B, chunk, max_action_dim). `is_pad` (B, chunk): masked out when
    given (LeRobot never receives it, see the module docstring)."""
    import torch
    import torch.nn.functional as F

    b = actions.shape[0]
    noise = torch.randn(actions.shape, generator=gen)
    t = sample_time(b, gen)
    x_t = t[:, None, None] * noise + (1 - t[:, None, None]) * actions
    u_t = noise - actions
    k, v, pad = model.prefix(model.vision(images), image_masks, lang, lang_mask, state)
    v_t = model.denoise_step(k, v, pad, x_t, t)
    losses = F.mse_loss(u_t, v_t, reduction="none")
    if is_pad is not None:
        losses = losses * (~is_pad)[:, :, None]
    return losses.mean()


def frame_prompts(dataset: Any) -> list[str]:
    """The prompt of every frame `training_frames` returns (successful episodes, in order)."""
    from hotloop.train.data import successful_episodes

    return [ep.task for ep in successful_episodes(dataset, images=False) for _ in ep.action]


def train_smolvla_demo(
    cfg: TrainSmolVLADemoConfig, out_dir: Folder, dataset_dir: Folder | None = None, progress: bool = True
) -> dict[str, Any]:
    """Train the demo SmolVLA on `dataset_dir` (or on episodes recorded into `out_dir/dataset`) and write the
    checkpoint folder `out_dir`."""
    import torch

    from hotloop.lerobot.processors import read_policy_processors
    from hotloop.train.data import check_finite, view_sizes
    from hotloop.train.lerobot_frames import training_frames
    from hotloop.train.run import TrainingRun, final

    run = TrainingRun.start(out_dir, cfg, progress)
    out = run.out
    dataset, recorded = run.dataset(dataset_dir, cfg)
    for view, shape in zip(cfg.views, view_sizes(dataset, cfg.views), strict=True):
        if shape != (cfg.image_size, cfg.image_size):
            raise ConfigError(
                f"the dataset's {view} view is {shape[0]}x{shape[1]} px; this demo trains on "
                f"{cfg.image_size}x{cfg.image_size} views (record them at that size)"
            )
    frames, stats, used = training_frames(dataset, cfg.views, cfg.chunk_size)
    prompts = frame_prompts(dataset)
    check_finite({"state": frames.state, "actions": frames.actions}, f"the dataset {dataset.root}")
    state_dim, action_dim = frames.state.shape[1], frames.actions.shape[2]
    config_json = lerobot_config(cfg, state_dim, action_dim)
    words = vocabulary(sorted(set(prompts)))
    (out / "config.json").write_text(json.dumps(config_json, indent=4))
    (out / "vlm_config.json").write_text(json.dumps(vlm_config(cfg, len(words)), indent=2))
    write_tokenizer(out / TOKENIZER_FOLDER, words)
    # The processors first: training normalises and tokenises through the very files the checkpoint ships.
    write_processors(out, config_json, stats)
    pre, _ = read_policy_processors(out)
    model = new_model(out, cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    n = len(frames.state)
    images, state, actions, is_pad = frames.tensors()
    ones = torch.ones(cfg.batch, len(cfg.views), dtype=torch.bool)

    def step_loss(step: int) -> dict[str, Any]:
        idx = torch.randint(0, n, (cfg.batch,), generator=gen)
        raw: dict[str, Any] = {"observation.state": state[idx], "action": actions[idx]}
        raw["task"] = [prompts[i] for i in idx.tolist()]
        batch = pre(raw)
        # VISUAL is IDENTITY: the model's images are the [0, 1] pixels mapped to [-1, 1] (prepare_images).
        pix = images[idx].permute(0, 1, 4, 2, 3).float() / 255 * 2 - 1  # (B, V, 3, H, W)
        loss = flow_matching_loss(
            model, pix, ones[: len(idx)], batch["observation.language.tokens"],
            batch["observation.language.attention_mask"], batch["observation.state"], batch["action"], gen,
            is_pad[idx] if cfg.mask_padding else None,
        )  # fmt: skip
        return {"loss": loss}

    losses = run.train(list(model.parameters()), step_loss, "train-demo smolvla")["loss"]
    model.eval()
    save_checkpoint(out, model)
    data = {"episodes_used": used, "frames": int(n), "recorded": recorded}
    finals = {"final_loss": final(losses)}
    own = {"family": "smolvla", "prompts": sorted(set(prompts))}
    summary = run.write_summary("train.json", cfg, dataset, model, run.training_summary(data, finals), **own)
    run.write_losses({"loss": losses}, losses, "SmolVLA demo training (flow-matching MSE)")
    return summary


def new_model(folder: Path, seed: int) -> Any:
    """A fresh SmolVLAModel of the folder's config.json + vlm_config.json (before model.safetensors exists),
    seeded with the recipe of hotloop's named SmolVLA targets; `load_smolvla` later checks the saved tensors
    against the same files."""
    import torch

    from hotloop.families.smolvla.targets import init_weights
    from hotloop.models.smolvla import SmolVLAModel

    model = SmolVLAModel(sizes_config(folder))
    return init_weights(model, torch.Generator().manual_seed(seed)).train()


def sizes_config(folder: Path) -> Any:
    """The SmolVLAConfig config.json + vlm_config.json describe, by `make_config`'s (LeRobot's) rules."""
    from hotloop.families.smolvla.targets import SmolVLASizes, make_config
    from hotloop.models.smolvla_tokenizer import TokenizerSettings

    c = json.loads((folder / "config.json").read_text())
    v = json.loads((folder / "vlm_config.json").read_text())
    t, vis = v["text_config"], v["vision_config"]
    state_dim = c["input_features"]["observation.state"]["shape"][0]
    action_dim = c["output_features"]["action"]["shape"][0]
    sizes = SmolVLASizes(
        t["hidden_size"], t["intermediate_size"], t["num_hidden_layers"], t["num_attention_heads"],
        t["num_key_value_heads"], t["head_dim"], t["vocab_size"], vis["hidden_size"], vis["intermediate_size"],
        vis["num_hidden_layers"], vis["num_attention_heads"], vis["image_size"], vis["patch_size"],
        v["scale_factor"], c["chunk_size"], c["num_steps"], c["max_state_dim"], c["max_action_dim"],
        state_dim, action_dim, c["tokenizer_max_length"],
    )  # fmt: skip
    cameras = tuple(k for k, f in c["input_features"].items() if f["type"] == "VISUAL")
    return dataclasses.replace(
        make_config("demo", sizes),
        camera_keys=cameras,
        n_action_steps=c["n_action_steps"],
        tokenizer=TokenizerSettings(TOKENIZER_FOLDER, c["tokenizer_max_length"], "longest", "right", True),
    )


TRAINER = DemoTrainer(
    TrainSmolVLADemoConfig, train_smolvla_demo, "demo:conveyor-smolvla", ship_checkpoint("smolvla"),
    finals=(("flow-matching loss", "final_loss"),), wrote=TRY_EVAL,
)  # fmt: skip

__all__ = [
    "TrainSmolVLADemoConfig",
    "flow_matching_loss",
    "lerobot_config",
    "TRAINER",
    "sample_time",
    "train_smolvla_demo",
]
