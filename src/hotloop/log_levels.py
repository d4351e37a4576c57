"""A logger held at ERROR for the length of a block: for code that notes the same harmless thing on every
call (a quantizer's hint, a loader's cast), which would otherwise repeat in every worker."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator


@contextlib.contextmanager
def errors_only(logger_name: str | None = None) -> Iterator[None]:
    """Raise `logger_name` (the root logger when None) to ERROR inside the block; its level is restored."""
    log = logging.getLogger(logger_name)
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)
