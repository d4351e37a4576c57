"""The answers most backends give the `Backend` protocol's queries alike (`BackendDefaults`)."""

from __future__ import annotations

import importlib
from typing import Any

import torch


class BackendDefaults:
    """The answers most backends give `Backend`'s queries alike; a backend overrides what differs. With
    `module` set, the backend is usable where that package imports (`install` says how to get it)."""

    module: str = ""
    install: str = "pip install 'hotloop[backends]'"

    def unavailable_reason(self) -> str | None:
        if self.module:
            try:
                importlib.import_module(self.module)
            except ImportError:
                return f"{self.module} is not installed ({self.install})"
        return None

    def precision_reason(self, precision: str) -> str | None:
        return None

    def graph_dtype(self, precision: str) -> torch.dtype:
        return torch.float32

    def required_features(self, precision: str, options: dict[str, Any] | None = None) -> list[str]:
        return []
