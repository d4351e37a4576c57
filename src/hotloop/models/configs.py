"""Frozen size configs for the pi0 / pi0.5 reference models and a named registry of them.

Sizes are data: a config never comes from a file name. `pi_configs()` builds a fresh registry each call
(no module-level mutable state); `get_pi_config(name)` is the one-line lookup.

Registered names:
- `pi0:full`, `pi05:full`: the published sizes (SigLIP So400m/14 at 224, Gemma 2B VLM, Gemma 300M expert).
- `pi05:small`: the same structure at CPU-benchmark scale, ~103 M parameters (see `_PI05_SMALL`).
- `pi0:tiny`, `pi05:tiny`: the parity-fixture sizes (< 1 M parameters), for tests.
- `pi05:nano`: ~1.0 M parameters, 64 px views (patch 8), for the trained conveyor demo policy.
- `pi05:mini`: 10.3 M parameters, 64 px views (patch 16), for the vision-only conveyor demo policy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hotloop.errors import ConfigError
from hotloop.registry import Registry


def _require_positive(obj: object, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(obj, name)
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"{type(obj).__name__}.{name} must be a positive integer (got {value!r})")


@dataclass(frozen=True)
class VisionConfig:
    """SigLIP vision tower (no pooling head: every patch token is used)."""

    image_size: int = 224
    patch_size: int = 14
    width: int = 1152
    depth: int = 27
    mlp_dim: int = 4304
    num_heads: int = 16
    eps: float = 1e-6

    def __post_init__(self) -> None:
        _require_positive(self, ("image_size", "patch_size", "width", "depth", "mlp_dim", "num_heads"))
        if self.image_size % self.patch_size:
            raise ConfigError(
                f"VisionConfig.image_size ({self.image_size}) must be a multiple of patch_size ({self.patch_size})"
            )
        if self.width % self.num_heads:
            raise ConfigError(
                f"VisionConfig.width ({self.width}) must be divisible by num_heads ({self.num_heads})"
            )

    @property
    def tokens_per_view(self) -> int:
        return (self.image_size // self.patch_size) ** 2


@dataclass(frozen=True)
class GemmaConfig:
    """One Gemma decoder stack (the VLM or the action expert)."""

    width: int = 2048
    depth: int = 18
    mlp_dim: int = 16384
    num_heads: int = 8
    num_kv_heads: int = 1
    head_dim: int = 256
    eps: float = 1e-6
    rope_base: float = 10000.0

    def __post_init__(self) -> None:
        _require_positive(self, ("width", "depth", "mlp_dim", "num_heads", "num_kv_heads", "head_dim"))
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(
                f"GemmaConfig.num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})"
            )
        if self.head_dim % 2:
            raise ConfigError(f"GemmaConfig.head_dim must be even for RoPE (got {self.head_dim})")


GEMMA_2B = GemmaConfig(width=2048, depth=18, mlp_dim=16384, num_heads=8, num_kv_heads=1, head_dim=256)
GEMMA_300M = GemmaConfig(width=1024, depth=18, mlp_dim=4096, num_heads=8, num_kv_heads=1, head_dim=256)
SIGLIP_SO400M_224 = VisionConfig()
PALIGEMMA_VOCAB = 257152
# LeRobot / openpi variant names as they appear in config.json.
GEMMA_VARIANTS: dict[str, GemmaConfig] = {"gemma_2b": GEMMA_2B, "gemma_300m": GEMMA_300M}


@dataclass(frozen=True)
class PiConfig:
    """A pi0 (`pi05=False`) or pi0.5 (`pi05=True`) policy.

    `views` camera images of `vision.image_size` each, `max_token_len` prompt tokens (pi0.5 carries the
    discretized state inside them), `chunk_size` actions of `max_action_dim` per chunk.
    `native_image_size`: after `vision-res:S` (`hotloop.models.pi_resolution`), the side the checkpoint was
    trained at, which observations keep coming at (`image_side`); the model resizes them to
    `vision.image_size` = S on the way in (`hotloop.models.pi0.fit_views`). None: no `vision-res`.
    """

    vision: VisionConfig = field(default_factory=VisionConfig)
    vlm: GemmaConfig = GEMMA_2B
    expert: GemmaConfig = GEMMA_300M
    pi05: bool = False
    vocab_size: int = PALIGEMMA_VOCAB
    views: int = 3
    max_token_len: int = 48
    chunk_size: int = 50
    max_action_dim: int = 32
    max_state_dim: int = 32
    num_steps: int = 10
    min_period: float = 4e-3
    max_period: float = 4.0
    native_image_size: int | None = None

    def __post_init__(self) -> None:
        if self.native_image_size is not None and not (
            isinstance(self.native_image_size, int) and self.native_image_size >= self.vision.image_size
        ):
            raise ConfigError(
                f"PiConfig.native_image_size must be an integer >= vision.image_size ({self.vision.image_size}); "
                f"got {self.native_image_size!r}"
            )
        _require_positive(
            self,
            (
                "vocab_size",
                "views",
                "max_token_len",
                "chunk_size",
                "max_action_dim",
                "max_state_dim",
                "num_steps",
            ),
        )
        # The two stacks are joined layer by layer: the expert's queries read the VLM's keys/values.
        for name in ("depth", "head_dim", "num_kv_heads"):
            if getattr(self.vlm, name) != getattr(self.expert, name):
                raise ConfigError(
                    f"PiConfig.expert.{name} ({getattr(self.expert, name)}) must equal PiConfig.vlm.{name} "
                    f"({getattr(self.vlm, name)}): the expert attends to the VLM's cache layer by layer"
                )
        if self.expert.width % 2:
            raise ConfigError(
                f"PiConfig.expert.width must be even for the sincos time embedding ({self.expert.width})"
            )

    @property
    def image_side(self) -> int:
        """The side of the images an observation carries: the checkpoint's own (the vision tower may take
        fewer pixels after `vision-res`, resizing them itself)."""
        return self.native_image_size or self.vision.image_size

    @property
    def prefix_len(self) -> int:
        return self.views * self.vision.tokens_per_view + self.max_token_len

    @property
    def suffix_len(self) -> int:
        return self.chunk_size + (0 if self.pi05 else 1)


_TINY_VISION = VisionConfig(image_size=56, patch_size=14, width=32, depth=2, mlp_dim=64, num_heads=2)
_TINY_VLM = GemmaConfig(width=64, depth=2, mlp_dim=128, num_heads=8, num_kv_heads=1, head_dim=16)
_TINY_EXPERT = GemmaConfig(width=32, depth=2, mlp_dim=64, num_heads=8, num_kv_heads=1, head_dim=16)

# pi05:small: 102.6 M parameters, 42 M of them the 65536 x 640 token table (which costs no compute).
# Vision: 224 px, patch 16 -> 196 tokens/view, width 384, 6 layers, MLP 1536, 6 heads (11.3 M).
# VLM: width 640, 6 layers, MLP 2560, 8 query heads x 80, 1 kv head. Expert: width 320, MLP 1280, same
# depth/heads (14.1 M). Prompt 200 tokens, chunk 50, 32 action dims, 10 steps.
# Measured fp32 eager, one inference, torch 2.13 CPU on the 2-core dev machine: ~0.40 s at 1 view
# (vision 34 ms, prefix 160 ms, denoise 180 ms) and ~0.56 s at 2 views.
_PI05_SMALL = PiConfig(
    vision=VisionConfig(image_size=224, patch_size=16, width=384, depth=6, mlp_dim=1536, num_heads=6),
    vlm=GemmaConfig(width=640, depth=6, mlp_dim=2560, num_heads=8, num_kv_heads=1, head_dim=80),
    expert=GemmaConfig(width=320, depth=6, mlp_dim=1280, num_heads=8, num_kv_heads=1, head_dim=80),
    pi05=True,
    vocab_size=65536,
    views=1,
    max_token_len=200,
    chunk_size=50,
)

# What the conveyor demo's policies (pi05:nano, pi05:mini) share: pi0.5, one view, the demo's 512-token
# vocabulary (prompt words and state bins), a 16-step chunk, 8 action and 16 state slots.
_CONVEYOR_DEMO: dict[str, Any] = dict(
    pi05=True, vocab_size=512, views=1, chunk_size=16, max_action_dim=8, max_state_dim=16
)

# pi05:nano: the trained demo policy, 1.02 M parameters. 64 px views with patch 8 -> 64 tokens/view.
# Measured on the 2-core dev machine: one 10-step inference ~21 ms (the prefix ~3 ms, each step ~1.7 ms);
# one flow_matching_loss forward+backward at batch 32 ~220 ms (one intra-op thread). Vocabulary 512: ids [0, 256) for prompt words, [256, 512) for the 256 state bins.
_PI05_NANO = PiConfig(
    vision=VisionConfig(image_size=64, patch_size=8, width=64, depth=2, mlp_dim=128, num_heads=2),
    vlm=GemmaConfig(width=128, depth=4, mlp_dim=256, num_heads=4, num_kv_heads=1, head_dim=32),
    expert=GemmaConfig(width=64, depth=4, mlp_dim=128, num_heads=4, num_kv_heads=1, head_dim=32),
    max_token_len=32,
    **_CONVEYOR_DEMO,
)

# pi05:mini: the vision-only demo policy (demo:conveyor-vision), 10.28 M parameters, large enough that
# compression has something to remove, small enough to train on two CPU cores. 64 px views with patch 16
# -> 16 tokens/view (the 16x16x3 patch kernel still places a 3-4 px box inside its patch); the state is
# only 4 numbers, so the prefix is ~23 tokens and training cost stays proportional to the weights.
_PI05_MINI = PiConfig(
    vision=VisionConfig(image_size=64, patch_size=16, width=192, depth=4, mlp_dim=768, num_heads=4),
    vlm=GemmaConfig(width=320, depth=4, mlp_dim=1280, num_heads=4, num_kv_heads=1, head_dim=64),
    expert=GemmaConfig(width=160, depth=4, mlp_dim=640, num_heads=4, num_kv_heads=1, head_dim=64),
    max_token_len=16,
    **_CONVEYOR_DEMO,
)


def pi_configs() -> Registry[PiConfig]:
    """A fresh registry of the named pi0 / pi0.5 configs."""
    reg: Registry[PiConfig] = Registry("pi config")
    reg.register("pi0:full", PiConfig(pi05=False, views=3, max_token_len=48))
    reg.register("pi05:full", PiConfig(pi05=True, views=3, max_token_len=200))
    reg.register("pi05:small", _PI05_SMALL)
    tiny = dict(
        vision=_TINY_VISION,
        vlm=_TINY_VLM,
        expert=_TINY_EXPERT,
        vocab_size=1024,
        views=1,
        max_token_len=12,
        chunk_size=10,
    )
    reg.register("pi0:tiny", PiConfig(pi05=False, **tiny))  # type: ignore[arg-type]
    reg.register("pi05:tiny", PiConfig(pi05=True, **tiny))  # type: ignore[arg-type]
    reg.register("pi05:nano", _PI05_NANO)
    reg.register("pi05:mini", _PI05_MINI)
    return reg


def get_pi_config(name: str) -> PiConfig:
    """Look up a named config; an unknown name raises UnknownNameError with a suggestion."""
    return pi_configs().get(name)
