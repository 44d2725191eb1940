"""The watch of one ready server, one check per health period: a process of its group stopped for longer than
health_grace_s; silent on /health for longer than that while making no progress; an engine core that makes no
progress while it has work (engines.py); or any of these while busy (using CPU) for longer than
health_busy_grace_s. The supervisor kills and restarts a server whose check names why it is frozen."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from . import engines, watchdog
from .http import health_ok_unless_stopped
from .settings import ServerSettings

__all__ = ["ServerWatch"]


class ServerWatch:
    """What the watch of one ready server (its process group `pgid`) remembers between checks."""

    def __init__(
        self, settings: ServerSettings, pgid: int, say: Callable[[str], None], stop: threading.Event
    ) -> None:
        s = self.settings = settings
        self._pgid, self._say, self._stop = pgid, say, stop
        now = time.monotonic()
        self.health = watchdog.HealthWatch(s.health_grace_s, now, s.health_busy_grace_s)
        self.stopped = watchdog.StoppedMembers(s.health_grace_s)
        self.engines = None if s.health_grace_s == 0 else engines.engine_checks(s, now, say)
        self.busy_said = False
        self.engines_said: set[int] = set()

    def check(self) -> str | None:
        """One check: why the server is frozen, '' while it is not, None on stop. An engine that made no
        progress while a process of the group is seen stopped (state T) has the stop named as its cause."""
        s = self.settings
        processes = watchdog.group_processes(self._pgid)
        activity = watchdog.activity_of(processes)
        self.stopped.observe(time.monotonic(), activity)
        why = self.stopped.frozen(time.monotonic())
        if why:
            return why
        # A frozen server accepts the connection and never answers: a check must not outlast the grace, nor
        # hold up a stop (the stop's budget is stop_grace_s for vLLM itself).
        ok = health_ok_unless_stopped(s.url, min(5.0, s.health_grace_s), self._stop)
        if ok is None:
            return None
        now = time.monotonic()
        self.health.observe(ok, now, activity)
        if ok:
            self.busy_said = False
        elif self.health.busy(now) and not self.busy_said:
            self.busy_said = True
            silent = self.health.silent_for(now)
            self._say(
                f"the server (pid {self._pgid}) did not answer /health for {silent:.0f} s{self._busy()}"
            )
        why = self.health.frozen(now)
        if why or not ok or self.engines is None:
            return why
        why = self._engines_frozen(now, processes if activity is not None else None)
        # An engine condemned while a process of the group is stopped: the stop is the cause given.
        return (self.stopped.seen(now) or why) if why else why

    def _engines_frozen(self, now: float, processes: list[watchdog.GroupProcess] | None) -> str:
        assert self.engines is not None
        self.engines.check(now, processes)
        busy = set(self.engines.watch.busy(now))
        for rank in sorted(busy - self.engines_said):
            quiet = self.engines.watch.quiet_for(rank, now)
            said = f"engine {rank} of the server (pid {self._pgid}) made no progress for {quiet:.0f} s"
            self._say(said + self._busy())
        self.engines_said = busy
        return self.engines.watch.frozen(now)

    def _busy(self) -> str:
        busy_grace = self.settings.health_busy_grace_s
        until = f"{busy_grace:g} s" if busy_grace else "it answers again"
        return f" but is using CPU: busy, not frozen; waiting up to {until} (health_busy_grace_s)"
