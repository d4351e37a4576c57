"""A server run on an asyncio event loop of its own in a daemon thread (tests, benchmarks, embedding): `with`
waits until it listens (or raises why it could not) and stops it on leaving."""

from __future__ import annotations

import asyncio
import threading
from typing import Self


class LoopThread:
    """A subclass says how its servers start (`start`, on the loop), serve (`serve`, the thread's body once
    started) and stop (`stop`, from the caller's thread)."""

    def __init__(self, name: str, start_timeout_s: float) -> None:
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._start_timeout_s = start_timeout_s

    async def start(self) -> None:
        raise NotImplementedError

    def serve(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self.start())
        except BaseException as exc:
            self._error = exc
            self._started.set()
            return
        self._started.set()
        self.serve()
        self._loop.close()

    def __enter__(self) -> Self:
        self._thread.start()
        if not self._started.wait(self._start_timeout_s):
            raise RuntimeError(f"the server did not start within {self._start_timeout_s} s")
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._thread.join(timeout=10.0)
