"""A named registry that rejects duplicates and answers an unknown name with "did you mean"."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

from hotloop.errors import ConfigError, UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to entries. Instances are built explicitly (no module-level mutable registries)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    @classmethod
    def of(cls, kind: str, entries: Iterable[tuple[str, T]]) -> Registry[T]:
        """A registry holding `entries` (name, entry) in order, each registered (so duplicates are refused)."""
        registry: Registry[T] = cls(kind)
        for name, entry in entries:
            registry.register(name, entry)
        return registry

    def register(self, name: str, entry: T) -> None:
        if name in self._entries:
            raise ConfigError(f"{self.kind} {name!r} is already registered; pick another name")
        self._entries[name] = entry

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(self.unknown_message(name)) from None

    def unknown_message(self, name: str) -> str:
        known = sorted(self._entries)
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        return f"unknown {self.kind} {name!r}.{hint} Known: {', '.join(known)}"

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def items(self) -> list[tuple[str, T]]:
        return [(n, self._entries[n]) for n in self.names()]
