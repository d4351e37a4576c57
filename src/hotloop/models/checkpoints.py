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
from safetensors.torch import save_file

from hotloop.errors import CheckpointError
from hotloop.models.configs import GEMMA_VARIANTS, GemmaConfig, PiConfig, VisionConfig
from hotloop.models.pi0 import PiModel
from hotloop.models.pi_policy import NormStats, Stats

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


def config_from_checkpoint(folder: Path, shapes: dict[str, tuple[int, ...]], report: LoadReport) -> PiConfig:
    """Sizes from config.json (variant names, policy fields) checked against the tensor shapes.

    Where they disagree the tensors win and a note says so. Head counts are not visible in shapes: they
    come from `hotloop_arch` (our own saves), `tiny_arch.json` (fixtures) or the variant tables.
    """
    meta: dict[str, Any] = {}
    if (folder / "config.json").is_file():
        try:
            meta = json.loads((folder / "config.json").read_text())
        except json.JSONDecodeError as exc:
            raise CheckpointError(f"{folder / 'config.json'} is not valid JSON: {exc}") from exc
    pi05 = meta.get("type") == "pi05" or "time_mlp_in.weight" in shapes
    if "type" in meta and meta["type"] not in ("pi0", "pi05"):
        raise CheckpointError(f"{folder / 'config.json'} has type {meta['type']!r}; expected 'pi0' or 'pi05'")
    arch: dict[str, Any] = meta.get("hotloop_arch") or {}
    if not arch and (folder / "tiny_arch.json").is_file():
        arch = json.loads((folder / "tiny_arch.json").read_text())
        report.notes.append("head counts taken from tiny_arch.json")

    def gemma(kind: str, variant_key: str, prefix: str, width_key: str) -> GemmaConfig:
        base = GEMMA_VARIANTS.get(
            meta.get(variant_key, ""), GEMMA_VARIANTS["gemma_2b" if kind == "vlm" else "gemma_300m"]
        )
        a = arch.get(kind, {})
        head_dim = int(a.get("head_dim", base.head_dim))
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
        if meta.get(variant_key) in GEMMA_VARIANTS and derived != base:
            report.notes.append(
                f"{variant_key}={meta[variant_key]!r} names {_dims(base)}, but the tensors hold {_dims(derived)}: "
                "using the tensor sizes"
            )
        return derived

    vm = _VM
    patch = shapes[vm + "embeddings.patch_embedding.weight"]
    tokens = shapes[vm + "embeddings.position_embedding.weight"][0]
    vwidth = patch[0]
    va = arch.get("vision", {})
    vheads = int(va.get("num_attention_heads", 16 if vwidth == 1152 else max(1, vwidth // 64)))
    vision = VisionConfig(
        image_size=math.isqrt(tokens) * patch[2],
        patch_size=patch[2],
        width=vwidth,
        depth=_count(shapes, vm + "encoder.layers."),
        mlp_dim=shapes[vm + "encoder.layers.0.mlp.fc1.weight"][0],
        num_heads=vheads,
    )
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
    action_dim = shapes["action_in_proj.weight"][1]
    n_views = sum(1 for f in meta.get("input_features", {}).values() if f.get("type") == "VISUAL")
    n_views += int(meta.get("empty_cameras", 0))
    cfg = PiConfig(
        vision=vision,
        vlm=vlm,
        expert=expert,
        pi05=pi05,
        vocab_size=embed[0],
        views=int(arch.get("views", n_views or 1)),
        max_token_len=int(meta.get("tokenizer_max_length", meta.get("max_token_len", 200 if pi05 else 48))),
        chunk_size=int(meta.get("chunk_size", meta.get("action_horizon", 50))),
        max_action_dim=action_dim,
        max_state_dim=shapes["state_proj.weight"][1] if not pi05 else int(meta.get("max_state_dim", 32)),
        num_steps=int(meta.get("num_inference_steps", 10)),
        min_period=float(meta.get("min_period", 4e-3)),
        max_period=float(meta.get("max_period", 4.0)),
    )
    res = meta.get("image_resolution")
    if res and list(res) != [vision.image_size, vision.image_size]:
        report.notes.append(
            f"config image_resolution {res} differs from the vision tower's {vision.image_size}"
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
    model.load_state_dict(state, strict=True, assign=True)
    if report.dtype_changes:
        kinds = sorted(set(report.dtype_changes.values()))
        report.notes.append(f"{len(report.dtype_changes)} tensors cast ({', '.join(kinds)})")
    return report


def load_checkpoint(
    path: str | Path, dtype: torch.dtype = torch.float32, device: str = "cpu"
) -> PiCheckpoint:
    """Build the model a checkpoint directory describes and load it (LeRobot or openpi layout)."""
    folder = Path(path)
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint directory {folder} does not exist")
    report = LoadReport(path=str(folder))
    handle = _open(folder / "model.safetensors")
    shapes = _shapes(handle)
    report.layout = "lerobot" if any(k.startswith("model.") for k in handle.keys()) else "openpi"  # noqa: SIM118
    try:
        config = config_from_checkpoint(folder, shapes, report)
    except KeyError as exc:
        raise CheckpointError(
            f"{folder / 'model.safetensors'} lacks tensor {exc.args[0]!r}: not a pi0/pi05 checkpoint"
        ) from exc
    with torch.device("meta"):
        model = PiModel(config).to(dtype)
    load_weights(model, folder, dtype, report)
    model = model.to(device).eval()
    for note in report.notes:
        log.warning("%s: %s", folder, note)
    return PiCheckpoint(model, config, report, load_norm_stats(folder, config.pi05), load_tokenizer(folder))


def _stats_from(d: dict[str, Any]) -> Stats:
    def arr(name: str) -> np.ndarray | None:
        return None if d.get(name) is None else np.asarray(d[name], dtype=np.float32)

    return Stats(mean=arr("mean"), std=arr("std"), q01=arr("q01"), q99=arr("q99"))


def load_norm_stats(folder: Path, pi05: bool) -> NormStats | None:
    """openpi `norm_stats.json` (anywhere below the folder) or LeRobot's processor files.

    LeRobot splits them: `policy_preprocessor_step_*_normalizer_processor.safetensors` holds the inputs'
    (`observation.state.mean`...), `policy_postprocessor_step_*_unnormalizer_processor.safetensors` the
    actions'; all matching files are merged. The mode comes from config.json's `normalization_mapping`
    (STATE: MEAN_STD / QUANTILES / IDENTITY), else pi0 -> mean/std, pi0.5 -> quantiles as the peers default.
    """
    mode: Literal["mean_std", "quantiles", "identity"] = "quantiles" if pi05 else "mean_std"
    config = folder / "config.json"
    mapping = json.loads(config.read_text()).get("normalization_mapping", {}) if config.is_file() else {}
    mode = _MODES.get(str(mapping.get("STATE", "")).upper(), mode)
    for file in sorted(folder.rglob("norm_stats.json")):
        data = json.loads(file.read_text()).get("norm_stats", {})
        mode = _MODES.get(str(data.get("mode", "")).upper(), mode)
        state, actions = data.get("state"), data.get("actions")
        return NormStats(
            state=_stats_from(state) if state else None,
            actions=_stats_from(actions) if actions else None,
            mode=mode,
        )
    flat: dict[str, Any] = {}
    for file in sorted(folder.glob("*normalizer_processor*.safetensors")):
        with safe_open(str(file), framework="np") as f:
            flat.update({k: f.get_tensor(k) for k in f.keys()})  # noqa: SIM118
    if not flat:
        return None
    return NormStats(state=_pick(flat, "observation.state."), actions=_pick(flat, "action."), mode=mode)


_MODES: dict[str, Literal["mean_std", "quantiles", "identity"]] = {
    "MEAN_STD": "mean_std",
    "QUANTILES": "quantiles",
    "IDENTITY": "identity",
}


def _pick(flat: dict[str, Any], prefix: str) -> Stats | None:
    sub = {k[len(prefix) :]: v for k, v in flat.items() if k.startswith(prefix)}
    return _stats_from(sub) if sub else None


def load_tokenizer(folder: Path) -> Any:
    models = sorted(folder.glob("*.model"))
    if not models:
        return None
    try:
        import sentencepiece
    except ImportError as exc:
        raise CheckpointError(f"{models[0]} needs sentencepiece: pip install 'hotloop[tokenizer]'") from exc
    return sentencepiece.SentencePieceProcessor(model_file=str(models[0]))


def save_lerobot_checkpoint(
    model: PiModel, config: PiConfig, folder: str | Path, norm_stats: NormStats | None = None
) -> Path:
    """Write `config.json` + `model.safetensors` with LeRobot's published key names (and norm stats).

    The unused `gemma_expert.lm_head` is written as zeros and `paligemma.lm_head` as a copy of the token
    table so that LeRobot's strict load accepts the file. `hotloop_arch` in config.json records the exact
    sizes (head counts are not visible in tensor shapes).
    """
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {to_lerobot_key(n): p.detach().contiguous().cpu() for n, p in model.state_dict().items()}
    tensors["model." + _LM_HEAD] = tensors["model." + _EMBED].clone()
    tensors["model." + _EXPERT_LM_HEAD] = torch.zeros(
        config.vocab_size, config.expert.width, dtype=model.dtype
    )
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    variants = {v: k for k, v in GEMMA_VARIANTS.items()}
    arch = asdict(config)
    meta = {
        "type": "pi05" if config.pi05 else "pi0",
        "paligemma_variant": variants.get(config.vlm, "custom"),
        "action_expert_variant": variants.get(config.expert, "custom"),
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
