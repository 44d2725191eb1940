"""A thread-safe list of received ROS messages with a wait, for subscription callbacks in tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


class Collector:
    """Thread-safe list of received messages with a wait."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._cv = threading.Condition()

    def __call__(self, msg: Any) -> None:
        with self._cv:
            self.items.append(msg)
            self._cv.notify_all()

    def wait_for(self, predicate: Callable[[list[Any]], Any], timeout_s: float, what: str) -> Any:
        deadline = time.monotonic() + timeout_s
        with self._cv:
            while True:
                value = predicate(self.items)
                if value:
                    return value
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"timed out after {timeout_s} s waiting for {what}; got {len(self.items)}"
                    )
                self._cv.wait(min(left, 0.1))
