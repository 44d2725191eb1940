"""SIGINT and SIGTERM as a flag that a verb polls (play, record), instead of an exception raised wherever its
threads happen to be."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

__all__ = ["stop_signals"]


@contextlib.contextmanager
def stop_signals() -> Iterator[list[int]]:
    """SIGINT and SIGTERM append to the yielded list instead of raising (the caller polls it); the handlers
    are installed whatever the process inherited (a background job of a shell ignores SIGINT) and restored
    afterwards."""
    received: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        received.append(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
