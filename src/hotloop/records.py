"""The JSON form of a result record (a dataclass): its plain fields as they are, under their own names."""

from __future__ import annotations

import dataclasses
from typing import Any


def plain_fields(record: Any, *, until: str | None = None, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """`record`'s fields by name, in their order, the values as they are: up to and including `until`
    (None: all), but those in `skip`. A `to_dict` adds what is not stored plainly (nested records,
    properties, renamed keys) after them."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(record):
        if f.name not in skip:
            out[f.name] = getattr(record, f.name)
        if f.name == until:
            break
    return out
