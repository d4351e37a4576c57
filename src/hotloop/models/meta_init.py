"""Build a model on the `meta` device without running its parameter initialisers.

A model built only to receive a checkpoint's weights is built on `meta` (no memory, no values). Its
layers' initialisers still run there, and `normal_` on a meta tensor goes through `torch._refs`, whose
first call imports `torch._dynamo`: about 3 s of every fresh process that loads a policy (each
evaluation worker) on this machine, for values that a meta tensor does not even hold. Inside
`meta_device()` the initialisers of `torch.nn.init` and the in-place random fills of a meta tensor
return it untouched; shapes, dtypes and everything else are built as under `torch.device("meta")`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_FILLS = {torch.Tensor.normal_, torch.Tensor.uniform_}


class _SkipMetaInit(TorchFunctionMode):
    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        first = args[0] if args else kwargs.get("tensor")  # torch.nn.init passes it by name
        if (
            isinstance(first, torch.Tensor)
            and first.is_meta
            and (func in _FILLS or getattr(func, "__module__", None) == "torch.nn.init")
        ):
            return first  # a meta tensor holds no values: there is nothing to initialise
        return func(*args, **kwargs)


@contextmanager
def meta_device() -> Iterator[None]:
    """`torch.device("meta")`, without the initialisers (see the module's docstring)."""
    with torch.device("meta"), _SkipMetaInit():
        yield
