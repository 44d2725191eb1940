"""The server's health, watched off the executor: a thread polls its readiness (ReasonerClient.health: vLLM's
/health, or /v1/models on a server without that route) and discovers the model once, and reports each change,
so that callbacks and diagnostics only read the last known state. Outages are counted and timed: a server its
supervisor killed and restarted (a crash, or frozen past its health_grace_s) shows in the node's diagnostics
as an outage of that length."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["HealthMonitor"]

_log = logging.getLogger(__name__)


class HealthMonitor:
    """Polls `check()` (the client's readiness, whichever route the server has) every period_s on its own
    thread; `on_change(healthy, error)` on every change."""

    def __init__(
        self,
        check: Callable[[], bool],
        discover_model: Callable[[], str],
        period_s: float,
        on_change: Callable[[bool, str], None] | None = None,
        model: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not period_s > 0:
            raise ValueError(f"period_s must be > 0, got {period_s}")
        self._check = check
        self._discover = discover_model
        self._period = period_s
        self._on_change = on_change
        self.healthy: bool | None = None  # None: not checked yet
        self.error = ""
        self.model = model
        self.outages = 0  # times a healthy server became unreachable
        self.last_outage_s = 0.0  # [s] how long the last ended outage lasted
        self._down_since: float | None = None  # clock() when the server was first seen unreachable
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="reasoner-health", daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def poll(self) -> None:
        """One check now (the thread calls this every period)."""
        try:
            healthy = bool(self._check())
            error = "" if healthy else "health check failed"
            if healthy and not self.model:
                self.model = self._discover()
        except Exception as exc:  # a failing discovery is an unhealthy server, not a dead thread
            healthy, error = False, f"{type(exc).__name__}: {exc}"
        changed = healthy != self.healthy
        now = self._clock()
        if not healthy and self._down_since is None:
            self._down_since = now
            self.outages += self.healthy is True  # an outage is of a server that was up
        elif healthy and self._down_since is not None:
            if self.outages:
                self.last_outage_s = now - self._down_since
            self._down_since = None
        self.healthy, self.error = healthy, error
        if changed and self._on_change is not None:
            try:
                self._on_change(healthy, error)
            except Exception:  # a failing report must not end the watch (diagnostics would freeze)
                _log.exception("health: reporting the change failed")

    def unreachable_for_s(self) -> float:
        """[s] since the server was first seen unreachable in this outage; 0 while healthy."""
        return 0.0 if self._down_since is None else self._clock() - self._down_since

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.poll()
            self._stop.wait(self._period)
