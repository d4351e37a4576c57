"""SmolVLA's configuration, read from a LeRobot checkpoint folder: config.json checked against the tensors.

The VLM part (sizes from the tensors, the rest from `vlm_config.json` / tiny_arch.json / the named VLM's
published values) is read by `smolvlm_config`; this module adds the policy: the action expert (width from its
tensors, checked against `expert_width_multiplier` and LeRobot's MLP rule), which VLM layer self- or
cross-attends (`attention_mode`, `self_attn_every_n_layers`, `num_expert_layers`), cameras and empty slots,
image size, state/action padding, chunk, steps, time-embedding periods, image special tokens and the tokenizer
step. A field config.json leaves out takes LeRobot's SmolVLAConfig default (as draccus does); an option hotloop
cannot run faithfully is refused with a CheckpointError naming the file, the field and the value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hotloop.errors import CheckpointError
from hotloop.models.checkpoint_meta import MAX_CHUNK, MAX_FEATURE_DIM, MAX_STEPS, Fields, lerobot_config
from hotloop.models.smolvla_tokenizer import (
    TokenizerSettings,
    load_tokenizer,
    read_tokenizer_settings,
)
from hotloop.models.smolvlm import LlamaConfig, SmolVLMConfig
from hotloop.models.smolvlm_config import (
    KNOWN_VLMS,
    LM_HEAD_KEY,
    VLM_OVERRIDE_FILE,
    Shapes,
    boolean,
    read_shapes,
    read_vlm_config,
    refuse,
    vlm_overrides,
)

EMPTY_CAMERA_PREFIX = "observation.images.empty_camera_"
STATE_KEY = "observation.state"
ACTION_KEY = "action"
_TEXT = "vlm_with_expert.vlm.model.text_model."
_EXPERT = "vlm_with_expert.lm_expert."

# LeRobot's SmolVLAConfig defaults at 7427f318, for fields a config.json leaves out (draccus fills them so).
_DEFAULTS: dict[str, Any] = {
    "chunk_size": 50,
    "n_action_steps": 50,
    "max_state_dim": 32,
    "max_action_dim": 32,
    "resize_imgs_with_padding": [512, 512],
    "empty_cameras": 0,
    "tokenizer_max_length": 48,
    "num_steps": 10,
    "vlm_model_name": "HuggingFaceTB/SmolVLM2-500M-Video-Instruct",
    "add_image_special_tokens": False,
    "attention_mode": "cross_attn",
    "prefix_length": -1,
    "pad_language_to": "longest",
    "num_expert_layers": -1,
    "num_vlm_layers": 16,
    "self_attn_every_n_layers": 2,
    "expert_width_multiplier": 0.75,
    "min_period": 4e-3,
    "max_period": 4.0,
}


@dataclass(frozen=True)
class LayerPlan:
    """What VLM layer i is during denoising: its expert layer (None: skipped) and whether it cross-attends."""

    expert: int | None
    cross: bool


@dataclass(frozen=True)
class SmolVLAConfig:
    vlm: SmolVLMConfig
    expert: LlamaConfig
    layers: tuple[LayerPlan, ...]
    camera_keys: tuple[str, ...]  # real cameras, in config.json's input_features order
    empty_cameras: int
    image_size: tuple[int, int]  # (H, W) the vision tower is fed
    resize_with_pad: bool  # resize_imgs_with_padding is set (else images are fed at their own size)
    chunk_size: int
    n_action_steps: int
    max_state_dim: int
    max_action_dim: int
    state_dim: int
    action_dim: int
    num_steps: int
    min_period: float
    max_period: float
    attention_mode: str
    self_attn_every_n_layers: int
    image_start_ids: tuple[int, ...]  # (fake_image_token, global_image_token) with add_image_special_tokens
    image_end_ids: tuple[int, ...]  # (fake_image_token,) with add_image_special_tokens
    prefix_length: int
    tokenizer: TokenizerSettings
    vlm_source: str
    assumed: tuple[str, ...] = field(default=())  # every value taken as a default, for the load report
    # (H, W) the checkpoint was trained at, where the `vision-res` recipe step lowered `image_size`
    # (`hotloop.models.smolvla_resolution`): model-space images prepared at that size (the teacher's) are
    # resized to `image_size` on the way in. None: the checkpoint's own size.
    native_image_size: tuple[int, int] | None = None

    @property
    def views(self) -> int:
        return len(self.camera_keys) + self.empty_cameras

    @property
    def max_token_len(self) -> int:
        """Prompt slots a fixed-shape engine holds: the tokenizer step's max_length (what the runtime's
        `--prompt-tokens` is checked against, as for pi)."""
        return self.tokenizer.max_length

    @property
    def image_tokens_per_view(self) -> int:
        p, s = self.vlm.vision.patch_size, self.vlm.scale_factor
        return (self.image_size[0] // p) * (self.image_size[1] // p) // (s * s)

    @property
    def tokens_per_view(self) -> int:
        return len(self.image_start_ids) + self.image_tokens_per_view + len(self.image_end_ids)

    def prefix_len(self, lang_len: int) -> int:
        """Prefix length P for `lang_len` prompt tokens: views, prompt, one state token, then prefix_length."""
        return max(self.views * self.tokens_per_view + lang_len + 1, self.prefix_length)


def get_intermediate_size(hidden: int, ffn_dim_multiplier: int = 4, multiple_of: int = 256) -> int:
    """LeRobot's expert MLP width rule (smolvlm_with_expert.get_intermediate_size)."""
    hidden = int(2 * hidden / 3)
    hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def _expert_config(
    sh: Shapes, meta: Fields, text: LlamaConfig, mode: str, every: int
) -> tuple[LlamaConfig, int]:
    depth = sh.count(_EXPERT + "layers.")
    width = sh(_EXPERT + "norm.weight", 1)[0]
    mult = meta.number("expert_width_multiplier") or _DEFAULTS["expert_width_multiplier"]
    if int(text.width * mult) != width:
        raise refuse(
            meta,
            "expert_width_multiplier",
            mult,
            f"int({text.width} x {mult}) = {int(text.width * mult)} but the expert's tensors are {width} wide",
        )
    mlp = sh(_EXPERT + "layers.0.mlp.gate_proj.weight")[0]
    if mlp != get_intermediate_size(width):
        raise CheckpointError(
            f"{sh.file}: expert MLP width {mlp} is not LeRobot's get_intermediate_size({width}) = "
            f"{get_intermediate_size(width)}: not a SmolVLA expert"
        )
    q_out = sh(_EXPERT + "layers.0.self_attn.q_proj.weight")[0]
    kv_in: list[int] = []
    for j in range(depth):
        k_out, k_in = sh(f"{_EXPERT}layers.{j}.self_attn.k_proj.weight")
        # LeRobot reshapes k/v of expert layer j to read the VLM's kv width in cross mode, except every n-th.
        cross_shaped = "cross" in mode and not (every > 0 and j % every == 0)
        want = text.kv_width if cross_shaped else width
        if k_in != want or k_out != text.kv_width:
            raise CheckpointError(
                f"{sh.file}: tensor 'model.{_EXPERT}layers.{j}.self_attn.k_proj.weight' has shape {(k_out, k_in)}; "
                f"expected {(text.kv_width, want)} (attention_mode {mode!r}, self_attn_every_n_layers {every})"
            )
        kv_in.append(k_in)
    if q_out != text.num_heads * text.head_dim:
        raise CheckpointError(
            f"{sh.file}: expert q_proj has {q_out} rows; LeRobot's expert keeps the VLM's heads "
            f"({text.num_heads} x {text.head_dim} = {text.num_heads * text.head_dim})"
        )
    expert = LlamaConfig(
        width=width,
        mlp_dim=mlp,
        depth=depth,
        num_heads=text.num_heads,
        num_kv_heads=text.num_kv_heads,
        head_dim=text.head_dim,
        eps=text.eps,
        kv_in=tuple(kv_in),
        attention_bias=sh.has(_EXPERT + "layers.0.self_attn.q_proj.bias"),
        mlp_bias=sh.has(_EXPERT + "layers.0.mlp.gate_proj.bias"),
    )
    return expert, depth


def _layer_plan(
    meta: Fields, text: LlamaConfig, expert: LlamaConfig, mode: str, every: int
) -> tuple[LayerPlan, ...]:
    """LeRobot's get_model_layers + the self/cross choice of SmolVLMWithExpertModel.forward, per VLM layer."""
    n_vlm, n_exp = text.depth, expert.depth
    stated = meta.integer("num_expert_layers", minimum=-(2**31))
    if (stated is not None and stated > 0 and stated != n_exp) or (
        (stated is None or stated <= 0) and n_exp != n_vlm
    ):
        raise refuse(
            meta,
            "num_expert_layers",
            stated,
            f"the checkpoint holds {n_exp} expert layers for {n_vlm} VLM layers",
        )
    if n_vlm % n_exp:
        raise refuse(meta, "num_expert_layers", stated, f"{n_vlm} VLM layers are not a multiple of {n_exp}")
    step = n_vlm // n_exp
    plan = []
    for i in range(n_vlm):
        e = None if (i > 0 and i % step != 0) else i // step
        cross = "cross" in mode and not (every > 0 and i % every == 0)
        if e is None and not cross:
            raise refuse(
                meta,
                "self_attn_every_n_layers",
                every,
                f"VLM layer {i} has no expert layer ({n_exp} for {n_vlm}) but self-attends: LeRobot's forward fails there",
            )
        if e is not None and expert.kv_in[e] != (text.kv_width if cross else expert.width):
            raise refuse(
                meta,
                "self_attn_every_n_layers",
                every,
                f"VLM layer {i} {'cross' if cross else 'self'}-attends through expert layer {e}, whose k_proj reads "
                f"{expert.kv_in[e]} features: LeRobot's forward fails there",
            )
        plan.append(LayerPlan(e, cross))
    return tuple(plan)


def _features(meta: Fields, key: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    f = meta.obj(key)
    if f is None:
        raise CheckpointError(
            f"{meta.file}: field {key!r} is missing: SmolVLA needs its input/output features"
        )
    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    for name in f.data:
        feat = f.obj(name)
        kind = feat.string("type") if feat is not None else None
        shape = feat.numbers("shape") if feat is not None else None
        if (
            feat is None
            or kind is None
            or shape is None
            or any(s != int(s) or not 1 <= s <= MAX_FEATURE_DIM for s in shape)
        ):
            raise CheckpointError(
                f"{meta.file}: field '{key}.{name}' needs a 'type' and a 'shape' of integers from 1 to "
                f"{MAX_FEATURE_DIM}"
            )
        out[name] = (kind, tuple(int(s) for s in shape))
    return out


def read_smolvla_config(folder: Path) -> SmolVLAConfig:
    """The SmolVLA a LeRobot checkpoint folder describes; refuses what hotloop cannot run faithfully."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint directory {folder} does not exist")
    meta = lerobot_config(folder, "a SmolVLA checkpoint needs LeRobot's config")
    path = meta.file
    kind = meta.string("type")
    if kind != "smolvla":
        raise refuse(meta, "type", kind, "this loader runs LeRobot's 'smolvla' policy")
    for key in ("adapt_to_pi_aloha", "use_delta_joint_actions_aloha"):
        if boolean(meta, key, False):
            raise refuse(meta, key, True, "hotloop does not run the Aloha joint/gripper conversions")
    if not boolean(meta, "use_cache", True):
        raise refuse(meta, "use_cache", False, "LeRobot's cross-attention layers need the prefix KV cache")
    mode = meta.string("attention_mode") or _DEFAULTS["attention_mode"]
    if mode not in ("cross_attn", "self_attn"):
        raise refuse(meta, "attention_mode", mode, "hotloop runs 'cross_attn' or 'self_attn'")
    every = meta.integer("self_attn_every_n_layers", minimum=-(2**31))
    every = _DEFAULTS["self_attn_every_n_layers"] if every is None else every

    sh = Shapes(read_shapes(folder), folder / "model.safetensors")
    depth = sh.count(_TEXT + "layers.")
    n_vlm = meta.integer("num_vlm_layers", minimum=-(2**31))
    n_vlm = _DEFAULTS["num_vlm_layers"] if n_vlm is None else n_vlm
    ov, ov_name = vlm_overrides(folder)
    assumed: list[str] = []
    name = meta.string("vlm_model_name") or _DEFAULTS["vlm_model_name"]
    vlm, known, source = read_vlm_config(sh, ov, ov_name, name, depth, assumed)
    if n_vlm > 0 and depth != n_vlm:
        stated = ov.obj("text_config") if ov is not None else None
        total = stated.integer("num_hidden_layers") if stated is not None else None
        if not (total is not None and total == depth < n_vlm):
            raise refuse(meta, "num_vlm_layers", n_vlm, f"the checkpoint holds {depth} text layers")
    expert, _ = _expert_config(sh, meta, vlm.text, mode, every)
    layers = _layer_plan(meta, vlm.text, expert, mode, every)

    inputs, outputs = _features(meta, "input_features"), _features(meta, "output_features")
    empty = meta.integer("empty_cameras", minimum=0) or 0
    empty_keys = {f"{EMPTY_CAMERA_PREFIX}{i}" for i in range(empty)}
    cameras = tuple(k for k, (t, _) in inputs.items() if t == "VISUAL" and k not in empty_keys)
    if not cameras:
        raise CheckpointError(f"{path}: field 'input_features' has no VISUAL feature; SmolVLA needs a camera")
    if STATE_KEY not in inputs or ACTION_KEY not in outputs:
        raise CheckpointError(
            f"{path}: input_features needs {STATE_KEY!r} and output_features {ACTION_KEY!r}"
        )
    max_state = meta.integer("max_state_dim") or _DEFAULTS["max_state_dim"]
    max_action = meta.integer("max_action_dim") or _DEFAULTS["max_action_dim"]
    for key, want, what in (
        ("state_proj.weight", (vlm.text.width, max_state), "max_state_dim"),
        ("action_in_proj.weight", (expert.width, max_action), "max_action_dim"),
        ("action_out_proj.weight", (max_action, expert.width), "max_action_dim"),
        ("action_time_mlp_in.weight", (expert.width, 2 * expert.width), "expert width"),
        ("action_time_mlp_out.weight", (expert.width, expert.width), "expert width"),
    ):
        if sh(key) != want:
            raise CheckpointError(
                f"{sh.file}: tensor 'model.{key}' has shape {sh(key)}; expected {want} ({what} from {path.name})"
            )
    state_dim, action_dim = inputs[STATE_KEY][1][0], outputs[ACTION_KEY][1][0]
    if state_dim > max_state or action_dim > max_action:
        raise CheckpointError(
            f"{path}: state/action dims {state_dim}/{action_dim} exceed max_state_dim/max_action_dim "
            f"{max_state}/{max_action}"
        )
    chunk = meta.integer("chunk_size", maximum=MAX_CHUNK) or _DEFAULTS["chunk_size"]
    n_steps_exec = meta.integer("n_action_steps", maximum=MAX_CHUNK) or _DEFAULTS["n_action_steps"]
    if n_steps_exec > chunk:
        raise refuse(
            meta, "n_action_steps", n_steps_exec, f"LeRobot requires n_action_steps <= chunk_size {chunk}"
        )

    resize = (
        meta.numbers("resize_imgs_with_padding", 2) if "resize_imgs_with_padding" in meta else [512.0, 512.0]
    )
    if resize is not None:
        if any(r != int(r) or not 1 <= r <= MAX_FEATURE_DIM for r in resize):
            raise refuse(
                meta,
                "resize_imgs_with_padding",
                resize,
                f"it must be two integers from 1 to {MAX_FEATURE_DIM} [width, height]",
            )
        image_size = (int(resize[1]), int(resize[0]))  # LeRobot stores (width, height)
    else:
        sizes = {inputs[k][1][1:] for k in cameras}
        if len(sizes) != 1 or len(next(iter(sizes))) != 2:
            raise refuse(
                meta,
                "resize_imgs_with_padding",
                None,
                f"without it the cameras must share one size (got {sizes})",
            )
        image_size = next(iter(sizes))  # type: ignore[assignment]
    grid_h, grid_w = image_size[0] // vlm.vision.patch_size, image_size[1] // vlm.vision.patch_size
    if grid_h != grid_w or grid_h % vlm.scale_factor:
        raise refuse(
            meta,
            "resize_imgs_with_padding",
            resize,
            f"the {grid_h}x{grid_w} patch grid must be square and a multiple of the pixel-shuffle factor "
            f"{vlm.scale_factor} (transformers' connector)",
        )

    special = boolean(meta, "add_image_special_tokens", False)
    tok = read_tokenizer_settings(folder, meta)
    start_ids: tuple[int, ...] = ()
    end_ids: tuple[int, ...] = ()
    if special:
        fake, glob = _image_token_ids(folder, ov, tok, known, name)
        for tid in (fake, glob):
            if not 0 <= tid < vlm.vocab_size:
                raise CheckpointError(
                    f"{folder}: image special token id {tid} is outside the vocabulary [0, {vlm.vocab_size})"
                )
        start_ids, end_ids = (fake, glob), (fake,)

    steps = meta.integer("num_steps", maximum=MAX_STEPS) or _DEFAULTS["num_steps"]
    return SmolVLAConfig(
        vlm=vlm,
        expert=expert,
        layers=layers,
        camera_keys=cameras,
        empty_cameras=empty,
        image_size=image_size,
        resize_with_pad=resize is not None,
        chunk_size=chunk,
        n_action_steps=n_steps_exec,
        max_state_dim=max_state,
        max_action_dim=max_action,
        state_dim=state_dim,
        action_dim=action_dim,
        num_steps=steps,
        min_period=meta.number("min_period") or _DEFAULTS["min_period"],
        max_period=meta.number("max_period") or _DEFAULTS["max_period"],
        attention_mode=mode,
        self_attn_every_n_layers=every,
        image_start_ids=start_ids,
        image_end_ids=end_ids,
        prefix_length=meta.integer("prefix_length", minimum=-(2**31)) or -1,
        tokenizer=tok,
        vlm_source=source,
        assumed=tuple(assumed),
    )


def _image_token_ids(
    folder: Path, ov: Fields | None, tok: TokenizerSettings, known: dict[str, Any] | None, name: str
) -> tuple[int, int]:
    """(fake_image_token_id, global_image_token_id), which LeRobot reads from the VLM's processor."""
    if ov is not None and "fake_image_token_id" in ov and "global_image_token_id" in ov:
        return ov.integer("fake_image_token_id", minimum=0), ov.integer("global_image_token_id", minimum=0)  # type: ignore[return-value]
    if tok.folder is not None and (folder / tok.folder).is_dir():
        t = load_tokenizer(folder)
        if t.fake_image_token_id is not None and t.global_image_token_id is not None:
            return t.fake_image_token_id, t.global_image_token_id
    if known is not None:
        return known["fake_image_token_id"], known["global_image_token_id"]
    raise CheckpointError(
        f"{folder / 'config.json'}: field 'add_image_special_tokens' is true but no tokenizer folder names "
        f"'<fake_token_around_image>' / '<global-img>' and {name!r} has no known ids: set fake_image_token_id "
        f"and global_image_token_id in {VLM_OVERRIDE_FILE}"
    )


__all__ = [
    "KNOWN_VLMS",
    "LM_HEAD_KEY",
    "LayerPlan",
    "SmolVLAConfig",
    "TokenizerSettings",
    "VLM_OVERRIDE_FILE",
    "get_intermediate_size",
    "read_shapes",
    "read_smolvla_config",
    "read_tokenizer_settings",
]
