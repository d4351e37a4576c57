"""Lets `import torchvision` succeed in `.venv-lerobot` (installed there by `make lerobot-venv` with a one-line .pth).

Why: LeRobot's ACT and Diffusion Policy import torchvision (ResNet, FrozenBatchNorm2d), and transformers imports it
whenever it is installed. The registry's torchvision 0.28.0 is a CUDA build whose C++ extension cannot load beside the
CPU torch wheel; torchvision itself runs without the extension except for two unguarded `register_fake` calls that
need the `torchvision::nms` / `torchvision::qnms` schemas to exist. Nothing LeRobot's policies run calls those ops.

What: a meta-path finder that, at the first `import torchvision`, removes itself, defines the two schemas (no
kernels) and lets the regular import proceed. Nothing else happens at interpreter start.
"""

from __future__ import annotations

import importlib.abc
import sys


class _DefineSchemasBeforeTorchvision(importlib.abc.MetaPathFinder):
    library = None  # the torch.library.Library must stay alive for its schemas to stay defined

    def find_spec(self, name, path=None, target=None):
        if name != "torchvision":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        import torch

        try:
            lib = torch.library.Library("torchvision", "DEF")
            lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            type(self).library = lib
        except RuntimeError:
            pass  # defined already (a working extension, or another shim)
        return None  # the regular finders import torchvision itself


if "torchvision" not in sys.modules and not any(
    isinstance(f, _DefineSchemasBeforeTorchvision) for f in sys.meta_path
):
    sys.meta_path.insert(0, _DefineSchemasBeforeTorchvision())
