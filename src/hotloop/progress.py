"""Progress of long work: a live bar on a terminal, a few plain lines anywhere else.

A live bar redraws itself with carriage returns; piped into a log file that is one line per redraw,
thousands of them. Off a terminal this prints a plain line at each tenth of the work (and at least
every `every_s` seconds), so a log still shows that the job moves and how far it got.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import IO, Any


class Progress:
    def __init__(
        self,
        total: int,
        desc: str,
        unit: str = "it",
        *,
        enabled: bool = True,
        stream: IO[str] | None = None,
        every_s: float = 30.0,
    ) -> None:
        self.total = max(0, int(total))
        self.desc = desc
        self.unit = unit
        self.n = 0
        self.enabled = enabled
        self._stream = stream if stream is not None else sys.stderr
        self._every_s = every_s
        self._start = time.monotonic()
        self._last_line = self._start
        self._next_tenth = 1
        self._postfix = ""
        self._bar: Any = None
        if enabled and _is_terminal(self._stream):
            from tqdm import tqdm

            self._bar = tqdm(
                total=self.total, desc=desc, unit=unit, dynamic_ncols=True, leave=False, file=self._stream
            )

    def update(self, n: int = 1, postfix: str = "") -> None:
        self.n += n
        self._postfix = postfix or self._postfix
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(n)
            if postfix:
                self._bar.set_postfix_str(postfix)
            return
        now = time.monotonic()
        tenth = self.n * 10 // self.total if self.total else 10
        if tenth >= self._next_tenth or now - self._last_line >= self._every_s:
            self._next_tenth = tenth + 1
            self._last_line = now
            self._line()

    def _line(self) -> None:
        percent = f" ({100 * self.n // self.total}%)" if self.total else ""
        extra = f", {self._postfix}" if self._postfix else ""
        elapsed = time.monotonic() - self._start
        print(
            f"{self.desc}: {self.n}/{self.total} {self.unit}{percent}{extra}, {elapsed:.0f} s",
            file=self._stream,
            flush=True,
        )

    def write(self, line: str) -> None:
        """A line of its own above a live bar (which would overwrite a plain print), else printed."""
        if self._bar is not None:
            self._bar.write(line, file=self._stream)
        else:
            print(line, file=self._stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()  # leave=False: the bar disappears, an error printed next starts clean
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
