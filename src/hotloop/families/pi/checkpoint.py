"""Load and save pi0 / pi0.5 checkpoints in LeRobot's and openpi's PyTorch layouts.

The weight layout is data: `_PREFIX_MAP` rewrites checkpoint key prefixes to `PiModel` parameter names and
one generic loader applies it. Tensors are read through safetensors' memory map straight into the target
dtype; the model is built on the `meta` device and materialised with `load_state_dict(assign=True)`, so a
full-size bf16 checkpoint never needs twice its size in memory.

Layouts:
- LeRobot: `config.json` (`type` pi0/pi05, variant names) + `model.safetensors` with keys `model.<...>`.
  Normalisation stats live in separate processor files (`*normalizer_processor*.safetensors`, keys
  `observation.state.mean`, `action.q01`...), read when present.
- openpi PyTorch: `model.safetensors` with the same names without `model.` (older transformers spell
  `paligemma.language_model.model.*` and `paligemma.vision_tower.*`; both are accepted); stats in
  `assets/<robot>/norm_stats.json`. openpi's config lives in Python, so sizes come from tensor shapes.
- A sentencepiece tokenizer is loaded when the directory holds a `*.model` file; otherwise prompts are ids.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from safetensors import safe_open

from hotloop.errors import CheckpointError, ConfigError
from hotloop.families.pi.policy import NormStats, Stats
from hotloop.finite import check_finite_weights
from hotloop.io import save_tensors
from hotloop.models.checkpoint_meta import MAX_CHUNK, MAX_STEPS, MAX_TOKENS, Fields, read_json_object
from hotloop.models.configs import GEMMA_VARIANTS, GemmaConfig, PiConfig, VisionConfig
from hotloop.models.pi0 import PiModel

log = logging.getLogger(__name__)

_PG = "paligemma_with_expert.paligemma."
_VM = _PG + "model.vision_tower.vision_model."
# checkpoint prefix (LeRobot layout without "model.") -> PiModel prefix. Order matters: first match wins.
_PREFIX_MAP: tuple[tuple[str, str], ...] = (
    (_VM + "embeddings.patch_embedding.", "vision_tower.patch_embedding."),
    (_VM + "embeddings.position_embedding.", "vision_tower.position_embedding."),
    (_VM + "encoder.layers.", "vision_tower.layers."),
    (_VM + "post_layernorm.", "vision_tower.post_layernorm."),
    (_PG + "model.multi_modal_projector.linear.", "projector.linear."),
    (_PG + "model.language_model.embed_tokens.", "embed_tokens."),
    (_PG + "model.language_model.layers.", "vlm.layers."),
    (_PG + "model.language_model.norm.", "vlm.norm."),
    ("paligemma_with_expert.gemma_expert.model.layers.", "expert.layers."),
    ("paligemma_with_expert.gemma_expert.model.norm.", "expert.norm."),
    ("", ""),  # policy-level layers (action_in_proj, state_proj, time_mlp_in...) keep their names
)
# Older transformers (openpi's pinned 4.53 patch set and earlier) nest PaliGemma differently.
_LEGACY_SPELLINGS: tuple[tuple[str, str], ...] = (
    (_PG + "language_model.model.", _PG + "model.language_model."),
    (_PG + "language_model.lm_head.", _PG + "lm_head."),
    (_PG + "vision_tower.", _PG + "model.vision_tower."),
    (_PG + "multi_modal_projector.", _PG + "model.multi_modal_projector."),
)
_LM_HEAD = _PG + "lm_head.weight"
_EXPERT_LM_HEAD = "paligemma_with_expert.gemma_expert.lm_head.weight"
_EMBED = _PG + "model.language_model.embed_tokens.weight"


@dataclass
class LoadReport:
    """What happened while loading: everything a user needs to trust (or distrust) the result."""

    path: str = ""
    layout: str = ""
    notes: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    dtype_changes: dict[str, str] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)


@dataclass
class PiCheckpoint:
    model: PiModel
    config: PiConfig
    report: LoadReport
    norm_stats: NormStats | None = None
    tokenizer: Any = None  # sentencepiece.SentencePieceProcessor when the directory has a *.model file


def canonical_key(key: str) -> str:
    """Checkpoint key -> LeRobot layout without the `model.` prefix."""
    key = key.removeprefix("model.")
    for old, new in _LEGACY_SPELLINGS:
        if key.startswith(old):
            return new + key[len(old) :]
    return key


def to_param_name(canonical: str) -> str:
    for src, dst in _PREFIX_MAP:
        if canonical.startswith(src):
            return dst + canonical[len(src) :]
    raise AssertionError("unreachable: the last prefix rule matches everything")


def to_lerobot_key(param: str) -> str:
    for src, dst in _PREFIX_MAP:
        if dst and param.startswith(dst):
            return "model." + src + param[len(dst) :]
    return "model." + param


def _open(path: Path) -> Any:
    if not path.is_file():
        raise CheckpointError(
            f"missing file {path.name!r} in {path.parent}: a checkpoint needs model.safetensors"
        )
    try:
        return safe_open(str(path), framework="pt")
    except Exception as exc:  # safetensors raises SafetensorError / OSError on damaged headers
        raise CheckpointError(
            f"{path} is not a readable safetensors file (corrupt or truncated?): {exc}. Re-download or re-save it."
        ) from exc


def _shapes(handle: Any) -> dict[str, tuple[int, ...]]:
    return {canonical_key(k): tuple(handle.get_slice(k).get_shape()) for k in handle.keys()}  # noqa: SIM118


def _count(shapes: dict[str, tuple[int, ...]], prefix: str) -> int:
    idx = {int(k[len(prefix) :].split(".")[0]) for k in shapes if k.startswith(prefix)}
    return max(idx) + 1 if idx else 0


def config_from_checkpoint(
    folder: Path,
    shapes: dict[str, tuple[int, ...]],
    report: LoadReport,
    *,
    chunk_size: int | None = None,
    max_token_len: int | None = None,
    views: int | None = None,
) -> PiConfig:
    """Sizes from the tensor shapes; config.json's fields are checked against them, never trusted blindly.

    What the tensors show (widths, depths, MLP sizes, vocabulary, action/state dims, image size) comes from
    them; a config.json or tiny_arch.json that contradicts them is an error or a note. Head counts are
    not visible in shapes: they come from `hotloop_arch` (our own saves), `tiny_arch.json` (fixtures) or
    the variant tables. The chunk size changes the outputs and is not in the tensors either: it must come
    from an argument or config.json (`chunk_size` / openpi's `action_horizon`), never from a guess. Views
    and prompt length only bound the inputs (absent views and prompt padding are masked out), so a missing
    value falls back to the peers' default and a note says so.
    """
    config_path = folder / "config.json"
    has_config = config_path.is_file()
    meta = Fields(read_json_object(config_path) if has_config else {}, config_path)
    if not has_config:
        report.notes.append("no config.json: sizes taken from the tensor shapes")
    pi05 = "time_mlp_in.weight" in shapes
    kind = meta.string("type", ("pi0", "pi05"))
    if kind is not None and (kind == "pi05") != pi05:
        found = "pi05 (time_mlp_in)" if pi05 else "pi0 (state_proj, no time_mlp_in)"
        raise CheckpointError(
            f"{config_path}: field 'type' is {kind!r} but the tensors are a {found} model; fix the field"
        )
    arch = meta.obj("hotloop_arch", nullable=True)
    if arch is None and (folder / "tiny_arch.json").is_file():
        arch = Fields(read_json_object(folder / "tiny_arch.json"), folder / "tiny_arch.json")
        report.notes.append("head counts taken from tiny_arch.json")
    arch = arch or Fields({}, config_path, "hotloop_arch.")
    guessed: list[str] = []

    def check_stated(part: Fields, field: str, found: int) -> None:
        stated = part.integer(field)
        if stated is not None and stated != found:
            raise CheckpointError(
                f"{part.file}: field {part.name(field)!r} is {stated} but the tensors hold {found}: "
                "the file does not describe these weights; fix or delete it"
            )

    def gemma(kind: str, variant_key: str, prefix: str, width_key: str) -> GemmaConfig:
        default = GEMMA_VARIANTS["gemma_2b" if kind == "vlm" else "gemma_300m"]
        variant = meta.string(variant_key)
        base = GEMMA_VARIANTS.get(variant or "", default)
        a = arch.obj(kind) or Fields({}, arch.file, f"{arch.prefix}{kind}.")
        head_dim = a.integer("head_dim")
        if head_dim is None:
            head_dim = base.head_dim
            if variant not in GEMMA_VARIANTS:
                guessed.append(f"{kind} head_dim {head_dim}")
        q, kv = (
            shapes[prefix + "0.self_attn.q_proj.weight"][0],
            shapes[prefix + "0.self_attn.k_proj.weight"][0],
        )
        if q % head_dim or kv % head_dim:
            raise CheckpointError(
                f"{kind}: q/k projections ({q}/{kv} rows) are not multiples of head_dim {head_dim}"
            )
        derived = GemmaConfig(
            width=shapes[width_key][-1],
            depth=_count(shapes, prefix),
            mlp_dim=shapes[prefix + "0.mlp.gate_proj.weight"][0],
            num_heads=q // head_dim,
            num_kv_heads=kv // head_dim,
            head_dim=head_dim,
        )
        for field_name in ("width", "depth", "mlp_dim", "num_heads", "num_kv_heads"):
            check_stated(a, field_name, getattr(derived, field_name))
        if variant in GEMMA_VARIANTS and derived != base:
            report.notes.append(
                f"{variant_key}={variant!r} names {_dims(base)}, but the tensors hold {_dims(derived)}: "
                "using the tensor sizes"
            )
        elif variant is not None and variant not in GEMMA_VARIANTS and variant != CUSTOM_VARIANT:
            report.notes.append(f"{variant_key}={variant!r} is not a known variant: using the tensor sizes")
        return derived

    vm = _VM
    patch = shapes[vm + "embeddings.patch_embedding.weight"]
    tokens = shapes[vm + "embeddings.position_embedding.weight"][0]
    vwidth = patch[0]
    va = arch.obj("vision") or Fields({}, arch.file, f"{arch.prefix}vision.")
    vheads = va.integer("num_attention_heads")
    if vheads is None:
        vheads = 16 if vwidth == 1152 else max(1, vwidth // 64)
        guessed.append(f"vision heads {vheads}")
    vision_fields = {
        "hidden_size": vwidth,
        "num_hidden_layers": _count(shapes, vm + "encoder.layers."),
        "intermediate_size": shapes[vm + "encoder.layers.0.mlp.fc1.weight"][0],
        "patch_size": patch[2],
        "image_size": math.isqrt(tokens) * patch[2],
    }
    for field_name, size in vision_fields.items():
        check_stated(va, field_name, size)
    vlm = gemma(
        "vlm",
        "paligemma_variant",
        _PG + "model.language_model.layers.",
        _PG + "model.language_model.layers.0.self_attn.q_proj.weight",
    )
    expert = gemma(
        "expert",
        "action_expert_variant",
        "paligemma_with_expert.gemma_expert.model.layers.",
        "paligemma_with_expert.gemma_expert.model.layers.0.self_attn.q_proj.weight",
    )
    embed = shapes.get(_EMBED) or shapes.get(_LM_HEAD)
    if embed is None:
        raise CheckpointError("checkpoint has neither the token embedding nor paligemma.lm_head.weight")
    check_stated(arch, "vocab_size", embed[0])
    action_dim = shapes["action_in_proj.weight"][1]
    stated_action_dim = meta.integer("max_action_dim")
    if stated_action_dim is not None and stated_action_dim != action_dim:
        report.notes.append(
            f"config max_action_dim {stated_action_dim} differs from the tensors' {action_dim}: using {action_dim}"
        )
    stated_state_dim = meta.integer("max_state_dim")
    if pi05:
        state_dim = stated_state_dim or 32  # pi0.5 reads the state from the prompt: no tensor holds it
        if stated_state_dim is None:
            guessed.append("max_state_dim 32")
    else:
        state_dim = shapes["state_proj.weight"][1]
        if stated_state_dim is not None and stated_state_dim != state_dim:
            report.notes.append(
                f"config max_state_dim {stated_state_dim} differs from the tensors' {state_dim}: using {state_dim}"
            )

    features = meta.obj("input_features") or Fields({}, config_path, "input_features.")
    n_views = 0
    for name in features.data:
        feature = features.obj(name)
        if feature is not None and feature.string("type") == "VISUAL":
            n_views += 1
    n_views += meta.integer("empty_cameras", minimum=0) or 0
    stated_views = arch.integer("views", maximum=16) or n_views or None  # `--views`'s limit
    if views is None:
        views = stated_views or 1
        if stated_views is None:
            guessed.append("views 1")
    stated_tokens = meta.integer("tokenizer_max_length", maximum=MAX_TOKENS) or meta.integer(
        "max_token_len", maximum=MAX_TOKENS
    )
    if max_token_len is None:
        max_token_len = stated_tokens or (200 if pi05 else 48)
        if stated_tokens is None:
            guessed.append(f"max_token_len {max_token_len} (openpi's default)")
    stated_chunk = meta.integer("chunk_size", maximum=MAX_CHUNK) or meta.integer(
        "action_horizon", maximum=MAX_CHUNK
    )
    if chunk_size is None:
        if stated_chunk is None:
            where = (
                f"{config_path} has no field 'chunk_size'" if has_config else f"{folder} has no config.json"
            )
            raise CheckpointError(
                f"{where}, and the chunk size (actions per inference) is not stored in the tensors; "
                'pass chunk_size= to load_checkpoint or add "chunk_size" to config.json'
            )
        chunk_size = stated_chunk
    steps = meta.integer("num_inference_steps", maximum=MAX_STEPS)
    if steps is None:
        guessed.append("num_steps 10")
    if guessed:
        report.notes.append(
            "not stated in the checkpoint, so the defaults were used: "
            + ", ".join(guessed)
            + " (views= and max_token_len= of load_checkpoint set those two)"
        )
    try:
        cfg = PiConfig(
            vision=VisionConfig(
                image_size=vision_fields["image_size"],
                patch_size=vision_fields["patch_size"],
                width=vwidth,
                depth=vision_fields["num_hidden_layers"],
                mlp_dim=vision_fields["intermediate_size"],
                num_heads=vheads,
            ),
            vlm=vlm,
            expert=expert,
            pi05=pi05,
            vocab_size=embed[0],
            views=views,
            max_token_len=max_token_len,
            chunk_size=chunk_size,
            max_action_dim=action_dim,
            max_state_dim=state_dim,
            num_steps=steps or 10,
            min_period=meta.number("min_period") or 4e-3,
            max_period=meta.number("max_period") or 4.0,
        )
    except ConfigError as exc:
        raise CheckpointError(f"{folder} does not describe a valid pi0/pi0.5 model: {exc}") from None
    res = meta.numbers("image_resolution", length=2)
    if res is not None and res != [cfg.vision.image_size, cfg.vision.image_size]:
        report.notes.append(
            f"config image_resolution {[int(r) for r in res]} differs from the vision tower's "
            f"{cfg.vision.image_size}: using {cfg.vision.image_size}"
        )
    return cfg


def _dims(g: GemmaConfig) -> str:
    return f"width {g.width}, depth {g.depth}, mlp {g.mlp_dim}, heads {g.num_heads}x{g.head_dim}"


def load_weights(
    model: PiModel, path: str | Path, dtype: torch.dtype | None = None, report: LoadReport | None = None
) -> LoadReport:
    """Load `path/model.safetensors` into `model` (possibly on `meta`), strictly; returns the report.

    Raises CheckpointError listing every missing and unexpected key and every shape mismatch.
    """
    folder = Path(path)
    report = report if report is not None else LoadReport(path=str(folder))
    dtype = dtype or model.dtype
    handle = _open(folder / "model.safetensors")
    keys = list(handle.keys())
    report.layout = report.layout or ("lerobot" if any(k.startswith("model.") for k in keys) else "openpi")
    expected = {n: p for n, p in model.named_parameters()}
    state: dict[str, torch.Tensor] = {}
    by_param: dict[str, str] = {}
    for key in keys:
        canon = canonical_key(key)
        if canon == _EXPERT_LM_HEAD:
            report.ignored.append(key)  # the expert never emits tokens; LeRobot keeps the head unused
            continue
        if canon == _LM_HEAD:
            by_param.setdefault("embed_tokens.weight", key)
            continue
        name = to_param_name(canon)
        if name not in expected:
            report.unexpected.append(key)
            continue
        by_param[name] = key  # embed_tokens itself beats lm_head
    for name, param in expected.items():
        key = by_param.get(name)
        if key is None:
            report.missing.append(to_lerobot_key(name))
            continue
        if canonical_key(key) == _LM_HEAD:
            report.notes.append("token embedding taken from paligemma.lm_head.weight (tied in PaliGemma)")
        shape = tuple(handle.get_slice(key).get_shape())
        if shape != tuple(param.shape):
            report.mismatches.append(f"{key}: expected {tuple(param.shape)}, found {shape}")
            continue
        tensor = handle.get_tensor(key)
        if tensor.dtype != dtype:
            report.dtype_changes[key] = f"{tensor.dtype} -> {dtype}"
            tensor = tensor.to(dtype)
        state[name] = tensor
    if report.missing or report.unexpected or report.mismatches:
        parts = [f"checkpoint {folder} does not match the model:"]
        if report.missing:
            parts.append(f"missing keys ({len(report.missing)}): {', '.join(report.missing)}")
        if report.unexpected:
            parts.append(f"unexpected keys ({len(report.unexpected)}): {', '.join(report.unexpected)}")
        if report.mismatches:
            parts.append(f"shape mismatches ({len(report.mismatches)}): {'; '.join(report.mismatches)}")
        parts.append("check that the config (pi0 vs pi05, sizes) matches the checkpoint")
        raise CheckpointError("\n  ".join(parts))
    check_finite_weights(((by_param[n], t) for n, t in state.items()), folder / "model.safetensors")
    model.load_state_dict(state, strict=True, assign=True)
    if report.dtype_changes:
        kinds = sorted(set(report.dtype_changes.values()))
        report.notes.append(f"{len(report.dtype_changes)} tensors cast ({', '.join(kinds)})")
    return report


# Dtypes a checkpoint loads into. float16 is refused: the additive attention masks overflow to -inf in
# The variant name `save_checkpoint` writes for sizes that match no published variant: the tensors are the
# sizes by design, so loading it says nothing (an unknown name still gets a note).
CUSTOM_VARIANT = "custom"

# float16 and fully masked (padding) rows then turn the whole output into NaN.
LOAD_DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def resolve_dtype(dtype: torch.dtype | str) -> torch.dtype:
    """A supported torch dtype from a dtype or its name ("bfloat16", "torch.bfloat16")."""
    name = str(dtype).removeprefix("torch.") if isinstance(dtype, (str, torch.dtype)) else None
    if name in LOAD_DTYPES:
        return LOAD_DTYPES[name]
    why = " (pi0/pi0.5 produce NaN in float16)" if name in ("float16", "half") else ""
    raise ConfigError(
        f"dtype {dtype!r} is not supported{why}; use one of: {', '.join(LOAD_DTYPES)} "
        "(a torch.dtype or its name)"
    )


def resolve_device(device: str | torch.device) -> torch.device:
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(f"device {device!r} is not a device; use 'cpu' or 'cuda' (or 'cuda:N')") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {device!r} asked for, but no CUDA GPU is visible here; use 'cpu'")
    if dev.type not in ("cpu", "cuda"):
        raise ConfigError(f"device {device!r} is not supported; use 'cpu' or 'cuda'")
    return dev


def load_checkpoint(
    path: str | Path,
    dtype: torch.dtype | str = torch.float32,
    device: str | torch.device = "cpu",
    *,
    chunk_size: int | None = None,
    max_token_len: int | None = None,
    views: int | None = None,
) -> PiCheckpoint:
    """Build the model a checkpoint directory describes and load it (LeRobot or openpi layout).

    `chunk_size`, `max_token_len` and `views` are not stored in the tensors: they override config.json,
    and a checkpoint without a chunk size (openpi's bare `model.safetensors`) needs `chunk_size`.
    Everything decided without the checkpoint saying so is listed in `report.notes` (and logged).
    """
    torch_dtype = resolve_dtype(dtype)
    torch_device = resolve_device(device)
    for name, value in (("chunk_size", chunk_size), ("max_token_len", max_token_len), ("views", views)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfigError(f"{name} must be a positive integer (got {value!r})")
    folder = Path(path)
    if folder.is_file():
        raise CheckpointError(
            f"{folder} is a file; pass the checkpoint directory that holds it ({folder.parent}), "
            "with config.json and model.safetensors"
        )
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint directory {folder} does not exist")
    report = LoadReport(path=str(folder))
    handle = _open(folder / "model.safetensors")
    shapes = _shapes(handle)
    report.layout = "lerobot" if any(k.startswith("model.") for k in handle.keys()) else "openpi"  # noqa: SIM118
    try:
        config = config_from_checkpoint(
            folder, shapes, report, chunk_size=chunk_size, max_token_len=max_token_len, views=views
        )
    except (KeyError, IndexError) as exc:
        missing = exc.args[0] if isinstance(exc, KeyError) else "a layer 0 tensor of the expected rank"
        raise CheckpointError(
            f"{folder / 'model.safetensors'} lacks tensor {missing!r}: not a pi0/pi05 checkpoint"
        ) from exc
    from hotloop.models.meta_init import meta_device

    with meta_device():  # every value comes from the checkpoint: no initialisers
        model = PiModel(config).to(torch_dtype)
    load_weights(model, folder, torch_dtype, report)
    model = model.to(torch_device).eval()
    for note in report.notes:
        log.warning("%s: %s", folder, note)
    return PiCheckpoint(model, config, report, load_norm_stats(folder, config.pi05), load_tokenizer(folder))


_MODES: dict[str, Literal["mean_std", "quantiles", "identity"]] = {
    "MEAN_STD": "mean_std",
    "QUANTILES": "quantiles",
    "IDENTITY": "identity",
}
_NEEDS = {"mean_std": ("mean", "std"), "quantiles": ("q01", "q99"), "identity": ()}


def _mode(fields: Fields, key: str, default: Literal["mean_std", "quantiles", "identity"]) -> Any:
    value = fields.string(key)
    if value is None:
        return default
    if value.upper() not in _MODES:
        raise CheckpointError(
            f"{fields.file}: field {fields.name(key)!r} is {value!r}; use one of "
            f"{', '.join(m.lower() for m in _MODES)}"
        )
    return _MODES[value.upper()]


def _stats_from(fields: Fields | None, mode: str, what: str) -> Stats | None:
    """Stats from a JSON object; the pair `mode` needs must be there and all lists the same length."""
    if fields is None:
        return None
    arrays = {k: fields.numbers(k) for k in ("mean", "std", "q01", "q99")}
    lengths = {len(v) for v in arrays.values() if v is not None}
    if len(lengths) > 1:
        raise CheckpointError(
            f"{fields.file}: the {what} statistics have lists of different lengths "
            f"({', '.join(f'{k} {len(v)}' for k, v in arrays.items() if v is not None)})"
        )
    lacking = [k for k in _NEEDS[mode] if arrays[k] is None]
    if lacking:
        raise CheckpointError(
            f"{fields.file}: normalisation mode {mode!r} needs {' and '.join(map(fields.name, lacking))} "
            f"for {what}; add them or change the mode"
        )
    return Stats(**{k: None if v is None else np.asarray(v, dtype=np.float32) for k, v in arrays.items()})


def load_norm_stats(folder: Path, pi05: bool) -> NormStats | None:
    """openpi `norm_stats.json` (anywhere below the folder) or LeRobot's processor files.

    LeRobot splits them: `policy_preprocessor_step_*_normalizer_processor.safetensors` holds the inputs'
    (`observation.state.mean`...), `policy_postprocessor_step_*_unnormalizer_processor.safetensors` the
    actions'; all matching files are merged. The mode comes from config.json's `normalization_mapping`
    (STATE: MEAN_STD / QUANTILES / IDENTITY), else pi0 -> mean/std, pi0.5 -> quantiles as the peers default.
    """
    mode: Literal["mean_std", "quantiles", "identity"] = "quantiles" if pi05 else "mean_std"
    config = folder / "config.json"
    if config.is_file():
        mapping = Fields(read_json_object(config), config).obj("normalization_mapping")
        if mapping is not None:
            mode = _mode(mapping, "STATE", mode)
    for file in sorted(folder.rglob("norm_stats.json")):
        data = Fields(read_json_object(file), file).obj("norm_stats")
        if data is None:
            raise CheckpointError(f"{file} has no 'norm_stats' object; expected {{\"norm_stats\": {{...}}}}")
        mode = _mode(data, "mode", mode)
        return NormStats(
            state=_stats_from(data.obj("state", nullable=True), mode, "state"),
            actions=_stats_from(data.obj("actions", nullable=True), mode, "actions"),
            mode=mode,
        )
    flat: dict[str, Any] = {}
    for file in sorted(folder.glob("*normalizer_processor*.safetensors")):
        try:
            with safe_open(str(file), framework="np") as f:
                flat.update({k: np.asarray(f.get_tensor(k)).reshape(-1).tolist() for k in f.keys()})  # noqa: SIM118
        except Exception as exc:  # safetensors raises SafetensorError / OSError on damaged files
            raise CheckpointError(
                f"{file} is not a readable safetensors file (corrupt or truncated?): {exc}"
            ) from None
    if not flat:
        return None
    source = Fields(flat, folder / "*normalizer_processor*.safetensors")

    def pick(prefix: str, what: str) -> Stats | None:
        sub = {k[len(prefix) :]: v for k, v in flat.items() if k.startswith(prefix)}
        return _stats_from(Fields(sub, source.file, prefix), mode, what) if sub else None

    return NormStats(state=pick("observation.state.", "state"), actions=pick("action.", "actions"), mode=mode)


def load_tokenizer(folder: Path) -> Any:
    models = sorted(folder.glob("*.model"))
    if not models:
        return None
    try:
        import sentencepiece
    except ImportError as exc:
        raise CheckpointError(f"{models[0]} needs sentencepiece: pip install 'hotloop[tokenizer]'") from exc
    try:
        return sentencepiece.SentencePieceProcessor(model_file=str(models[0]))
    except (OSError, RuntimeError) as exc:
        raise CheckpointError(f"{models[0]} is not a sentencepiece model (corrupt?): {exc}") from None


def save_lerobot_checkpoint(
    model: PiModel, config: PiConfig, folder: str | Path, norm_stats: NormStats | None = None
) -> Path:
    """Write `config.json` + `model.safetensors` with LeRobot's published key names (and norm stats).

    The unused `gemma_expert.lm_head` is written as zeros and `paligemma.lm_head` as a copy of the token
    table so that LeRobot's strict load accepts the file. `hotloop_arch` in config.json records the exact
    sizes (head counts are not visible in tensor shapes).
    """
    out = Path(folder)
    if norm_stats is not None:  # checked before anything is written: JSON cannot hold NaN or infinity
        for which in ("state", "actions"):
            stats = getattr(norm_stats, which)
            for name, value in asdict(stats).items() if stats is not None else ():
                if value is not None and not np.isfinite(np.asarray(value, dtype=np.float64)).all():
                    raise ConfigError(f"norm_stats.{which}.{name} holds NaN or infinity; fix the statistics")
    out.mkdir(parents=True, exist_ok=True)
    tensors = {to_lerobot_key(n): p.detach().contiguous().cpu() for n, p in model.state_dict().items()}
    tensors["model." + _LM_HEAD] = tensors["model." + _EMBED].clone()
    tensors["model." + _EXPERT_LM_HEAD] = torch.zeros(
        config.vocab_size, config.expert.width, dtype=model.dtype
    )
    save_tensors(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    variants = {v: k for k, v in GEMMA_VARIANTS.items()}
    arch = asdict(config)
    meta = {
        "type": "pi05" if config.pi05 else "pi0",
        "paligemma_variant": variants.get(config.vlm, CUSTOM_VARIANT),
        "action_expert_variant": variants.get(config.expert, CUSTOM_VARIANT),
        "dtype": str(model.dtype).removeprefix("torch."),
        "chunk_size": config.chunk_size,
        "n_action_steps": config.chunk_size,
        "max_state_dim": config.max_state_dim,
        "max_action_dim": config.max_action_dim,
        "num_inference_steps": config.num_steps,
        "tokenizer_max_length": config.max_token_len,
        "image_resolution": [config.vision.image_size, config.vision.image_size],
        "min_period": config.min_period,
        "max_period": config.max_period,
        "input_features": {
            f"observation.images.cam{i}": {
                "type": "VISUAL",
                "shape": [3, config.vision.image_size, config.vision.image_size],
            }
            for i in range(config.views)
        },
        "hotloop_arch": {
            "vlm": arch["vlm"],
            "expert": arch["expert"],
            "vision": {"num_attention_heads": config.vision.num_heads},
            "views": config.views,
        },
    }
    (out / "config.json").write_text(json.dumps(meta, indent=2))
    if norm_stats is not None:

        def enc(s: Stats | None) -> dict[str, Any] | None:
            return (
                None
                if s is None
                else {k: (None if v is None else np.asarray(v).tolist()) for k, v in asdict(s).items()}
            )

        payload = {
            "norm_stats": {
                "state": enc(norm_stats.state),
                "actions": enc(norm_stats.actions),
                "mode": norm_stats.mode,
            }
        }
        (out / "norm_stats.json").write_text(json.dumps(payload))
    return out


__all__ = ["LoadReport", "PiCheckpoint", "load_checkpoint", "load_weights", "save_lerobot_checkpoint"]
