"""A ResNet trunk (stem + four stages, to layer4) under torchvision's module names, built from a checkpoint.

LeRobot's ACT and Diffusion Policy run torchvision's ResNets; hotloop may not depend on torchvision, so
the trunk is written here with the same names (`conv1`, `bn1`, `layer1.0.conv1`, `layer1.0.downsample.0`
...), so a LeRobot state dict loads as is. Every convolution takes its channel counts from the
checkpoint's own tensors, never from a table of widths: checkpoints with narrowed or widened channels
(the parity fixtures narrow resnet18) load as they are. The backbone *name* fixes only what the tensors
cannot say: the block type and the blocks per stage.

Norm layers (all keep torchvision's parameter names):
- "frozen_bn": torchvision's `FrozenBatchNorm2d` (ACT): y = x * w / sqrt(var + eps) + (b - mean * scale);
- "batch_norm": `nn.BatchNorm2d` in eval mode;
- "group_norm": `nn.GroupNorm(channels // 16, channels)` (Diffusion Policy's `use_group_norm`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, cast

import torch
from torch import Tensor, nn

from hotloop.errors import CheckpointError

Norm = Literal["frozen_bn", "batch_norm", "group_norm"]
BlockKind = Literal["basic", "bottleneck"]
# torchvision's constructors: block type and blocks per stage (the only things a name fixes).
BACKBONES: dict[str, tuple[BlockKind, tuple[int, int, int, int]]] = {
    "resnet18": ("basic", (2, 2, 2, 2)),
    "resnet34": ("basic", (3, 4, 6, 3)),
    "resnet50": ("bottleneck", (3, 4, 6, 3)),
    "resnet101": ("bottleneck", (3, 4, 23, 3)),
    "resnet152": ("bottleneck", (3, 8, 36, 3)),
}
# Sequential(*children()[:-2]) spells the trunk by index (Diffusion Policy); torchvision names it.
SEQUENTIAL_NAMES = {"0": "conv1", "1": "bn1", "4": "layer1", "5": "layer2", "6": "layer3", "7": "layer4"}


@dataclass(frozen=True)
class ResNetConfig:
    """The trunk's structure; `shapes` (every conv / norm weight shape by torchvision name) fix the widths."""

    backbone: str
    norm: Norm
    dilate_last: bool = False  # replace_final_stride_with_dilation: layer4 keeps stride 1, dilation 2
    eps: float = 1e-5

    @property
    def block(self) -> BlockKind:
        return BACKBONES[self.backbone][0]

    @property
    def blocks_per_stage(self) -> tuple[int, int, int, int]:
        return BACKBONES[self.backbone][1]


def check_backbone(name: object, file: str, field: str = "vision_backbone") -> str:
    """The backbone name if hotloop builds it, else a CheckpointError naming the field and value."""
    if not isinstance(name, str) or name not in BACKBONES:
        raise CheckpointError(
            f"{file}: field {field!r} is {name!r}; hotloop runs the torchvision ResNets "
            f"{', '.join(BACKBONES)} (no other backbone is implemented, none is approximated)"
        )
    return name


class FrozenBatchNorm2d(nn.Module):
    """torchvision.ops.FrozenBatchNorm2d: batch norm with fixed statistics and affine terms (buffers)."""

    def __init__(self, channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        for name, fill in (("weight", 1.0), ("bias", 0.0), ("running_mean", 0.0), ("running_var", 1.0)):
            self.register_buffer(name, torch.full((channels,), fill))

    def forward(self, x: Tensor) -> Tensor:
        # The same operation order as torchvision, so results agree to the last bits.
        w = cast(Tensor, self.weight).reshape(1, -1, 1, 1)
        b = cast(Tensor, self.bias).reshape(1, -1, 1, 1)
        rv = cast(Tensor, self.running_var).reshape(1, -1, 1, 1)
        rm = cast(Tensor, self.running_mean).reshape(1, -1, 1, 1)
        scale = w * (rv + self.eps).rsqrt()
        return x * scale + (b - rm * scale)


def make_norm(kind: Norm, channels: int, eps: float = 1e-5) -> nn.Module:
    if kind == "frozen_bn":
        return FrozenBatchNorm2d(channels, eps)
    if kind == "batch_norm":
        return nn.BatchNorm2d(channels, eps=eps)
    groups = channels // 16
    if groups < 1:
        raise CheckpointError(
            f"a GroupNorm ResNet needs at least 16 channels per norm (channels // 16 groups); found {channels}"
        )
    return nn.GroupNorm(groups, channels, eps=eps)


class _Shapes:
    """Weight shapes by torchvision name, with an error naming the key when one is missing."""

    def __init__(self, shapes: Mapping[str, tuple[int, ...]], where: str) -> None:
        self.shapes, self.where = shapes, where

    def conv(self, name: str) -> tuple[int, int, int]:
        key = f"{name}.weight"
        shape = self.shapes.get(key)
        if shape is None or len(shape) != 4:
            raise CheckpointError(
                f"{self.where}: expected a conv weight {key!r} (out, in, k, k); "
                + ("it is missing" if shape is None else f"found shape {tuple(shape)}")
            )
        return int(shape[0]), int(shape[1]), int(shape[2])

    def has(self, name: str) -> bool:
        return f"{name}.weight" in self.shapes


def _conv(shapes: _Shapes, name: str, stride: int = 1, dilation: int = 1) -> nn.Conv2d:
    out_ch, in_ch, k = shapes.conv(name)
    padding = dilation * (k // 2)
    return nn.Conv2d(in_ch, out_ch, k, stride=stride, padding=padding, dilation=dilation, bias=False)


class Block(nn.Module):
    """torchvision's BasicBlock (two 3x3) or Bottleneck (1x1, 3x3 with the stride, 1x1), widths from tensors."""

    def __init__(
        self, cfg: ResNetConfig, shapes: _Shapes, name: str, stride: int, dilation: int, previous: int
    ) -> None:
        super().__init__()
        self.bottleneck = cfg.block == "bottleneck"
        self.relu = nn.ReLU(inplace=True)
        if self.bottleneck:
            self.conv1 = _conv(shapes, f"{name}.conv1")
            self.conv2 = _conv(shapes, f"{name}.conv2", stride, previous)
            self.conv3 = _conv(shapes, f"{name}.conv3")
            widths = [self.conv1.out_channels, self.conv2.out_channels, self.conv3.out_channels]
        else:
            self.conv1 = _conv(shapes, f"{name}.conv1", stride, previous)
            self.conv2 = _conv(shapes, f"{name}.conv2", 1, dilation)
            widths = [self.conv1.out_channels, self.conv2.out_channels]
        self.bn1 = make_norm(cfg.norm, widths[0], cfg.eps)
        self.bn2 = make_norm(cfg.norm, widths[1], cfg.eps)
        if self.bottleneck:
            self.bn3 = make_norm(cfg.norm, widths[2], cfg.eps)
        self.downsample: nn.Sequential | None = None
        if shapes.has(f"{name}.downsample.0"):
            out_ch, in_ch, _ = shapes.conv(f"{name}.downsample.0")
            self.downsample = nn.Sequential(
                nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False), make_norm(cfg.norm, out_ch, cfg.eps)
            )

    def forward(self, x: Tensor) -> Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.bottleneck:
            out = self.bn3(self.conv3(self.relu(out)))
        return cast(Tensor, self.relu(out + identity))


class ResNetTrunk(nn.Module):
    """conv1 / bn1 / relu / maxpool / layer1-4 (no avgpool, no fc): images (B, 3, H, W) -> (B, C, h, w)."""

    def __init__(self, cfg: ResNetConfig, shapes: Mapping[str, tuple[int, ...]], where: str) -> None:
        super().__init__()
        s = _Shapes(shapes, where)
        self.cfg = cfg
        if cfg.dilate_last and cfg.block == "basic":
            raise CheckpointError(
                f"{where}: replace_final_stride_with_dilation is true, but {cfg.backbone} has BasicBlocks, "
                "which torchvision (and so LeRobot) cannot dilate; set it false or use resnet50 and up"
            )
        out_ch, in_ch, k = s.conv("conv1")
        self.conv1 = nn.Conv2d(in_ch, out_ch, k, stride=2, padding=k // 2, bias=False)
        self.bn1 = make_norm(cfg.norm, out_ch, cfg.eps)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        dilation = 1
        for i, count in enumerate(cfg.blocks_per_stage):
            stride = 1 if i == 0 else 2
            previous = dilation
            if i == 3 and cfg.dilate_last:  # torchvision's replace_stride_with_dilation for layer4
                dilation, stride = dilation * 2, 1
            blocks = []
            for j in range(count):
                name = f"layer{i + 1}.{j}"
                if not s.has(f"{name}.conv1"):
                    raise CheckpointError(
                        f"{where}: {cfg.backbone} has {count} blocks in layer{i + 1}, but {name!r} is missing; "
                        "the checkpoint holds another depth than its backbone name says"
                    )
                first = j == 0
                blocks.append(
                    Block(cfg, s, name, stride if first else 1, dilation, previous if first else dilation)
                )
            if s.has(f"layer{i + 1}.{count}.conv1"):
                raise CheckpointError(
                    f"{where}: layer{i + 1} holds more than the {count} blocks of {cfg.backbone}; "
                    "the checkpoint holds another depth than its backbone name says"
                )
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))

    @property
    def out_channels(self) -> int:
        last = cast(Block, cast(nn.Sequential, self.layer4)[-1])
        return int((last.conv3 if last.bottleneck else last.conv2).out_channels)

    def forward(self, x: Tensor) -> Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for i in range(1, 5):
            x = getattr(self, f"layer{i}")(x)
        return x


def trunk_shapes(
    shapes: Mapping[str, tuple[int, ...]], prefix: str, sequential: bool = False
) -> dict[str, tuple[int, ...]]:
    """The shapes under `prefix` with the prefix removed, and index names (`0.`, `4.0.conv1`) turned into
    torchvision's (`conv1.`, `layer1.0.conv1`) when the trunk was saved as a Sequential."""
    out = {}
    for key, shape in shapes.items():
        if key.startswith(prefix):
            out[torchvision_name(key[len(prefix) :]) if sequential else key[len(prefix) :]] = tuple(shape)
    return out


def torchvision_name(key: str) -> str:
    """`4.0.conv1.weight` (Sequential index) -> `layer1.0.conv1.weight` (torchvision name)."""
    head, _, rest = key.partition(".")
    return SEQUENTIAL_NAMES.get(head, head) + ("." + rest if rest else "")


def sequential_name(key: str) -> str:
    """The inverse of `torchvision_name`."""
    head, _, rest = key.partition(".")
    inverse = {v: k for k, v in SEQUENTIAL_NAMES.items()}
    return inverse.get(head, head) + ("." + rest if rest else "")
