"""Whether the node takes requests now, without ROS: open between a successful activate and deactivate (or
shutdown), closed for good once a shutdown began. One lock holds a trigger's check together with its
submission, and the opening and closing of the gate: a request taken while open is in the scheduler before a
close returns (and deactivate then shuts the scheduler down with it inside), and nothing is opened, or
started by an opening, once a shutdown began."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["RequestGate"]


class RequestGate:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = False
        self._stopping = False

    @property
    def open(self) -> bool:
        return self._open

    @property
    def stopping(self) -> bool:
        return self._stopping

    def prepare(self, work: Callable[[], None]) -> bool:
        """`work()` (build what an opening needs) unless a shutdown began; False then."""
        with self._lock:
            if self._stopping:
                return False
            work()
            return True

    def open_with(self, work: Callable[[], None]) -> bool:
        """`work()` (create the inputs) and open, unless a shutdown began; False then."""
        with self._lock:
            if self._stopping:
                return False
            work()
            self._open = True
            return True

    def close(self) -> None:
        """No request is taken from now on; one being taken is in the scheduler when this returns."""
        with self._lock:
            self._open = False

    def stop(self) -> bool:
        """Closed for good; True only for the first call (the one that shuts down)."""
        with self._lock:
            if self._stopping:
                return False
            self._stopping, self._open = True, False
            return True

    @contextmanager
    def taking(self) -> Iterator[bool]:
        """Held while a request is checked and submitted: whether the gate is open."""
        with self._lock:
            yield self._open
