"""health: the monitor reports changes once, survives a failing check, and stops."""

from __future__ import annotations

import itertools

from support.processes import wait_until

from cosmos_reasoner_ros.node.health import HealthMonitor


def test_changes_are_reported_once_and_the_model_discovered_when_healthy() -> None:
    answers = iter([False, False, True, True, False])
    changes: list[tuple[bool, str]] = []
    discovered = itertools.count()
    monitor = HealthMonitor(
        lambda: next(answers), lambda: f"m{next(discovered)}", 1.0, lambda h, e: changes.append((h, e))
    )
    for _ in range(5):
        monitor.poll()
    assert changes == [(False, "health check failed"), (True, ""), (False, "health check failed")]
    assert monitor.model == "m0"  # asked once


def test_a_raising_check_is_an_unhealthy_server_not_a_dead_thread() -> None:
    def check() -> bool:
        raise ConnectionError("refused")

    monitor = HealthMonitor(check, lambda: "m", 0.01)
    monitor.start()
    wait_until(lambda: monitor.healthy is False, 5, "unhealthy")
    assert "ConnectionError: refused" in monitor.error
    monitor.stop(2.0)
    assert not monitor._thread or not monitor._thread.is_alive()


def test_an_outage_of_a_server_that_was_up_is_counted_and_timed() -> None:
    """A server killed and restarted by its supervisor (crashed, or frozen past health_grace_s) shows in the
    node's diagnostics as an outage with its length (before: only 'unreachable', then 'healthy' again)."""
    now = [100.0]
    answers = iter([False, True, False, False, True])  # down at start (not an outage), up, down 7 s, up
    monitor = HealthMonitor(lambda: next(answers), lambda: "m", 1.0, clock=lambda: now[0])
    monitor.poll()
    assert monitor.outages == 0 and monitor.unreachable_for_s() == 0.0
    now[0] = 101.0
    monitor.poll()
    assert monitor.healthy and monitor.unreachable_for_s() == 0.0 and monitor.last_outage_s == 0.0
    for t in (110.0, 115.0):
        now[0] = t
        monitor.poll()
    assert monitor.outages == 1 and monitor.unreachable_for_s() == 5.0
    now[0] = 117.0
    monitor.poll()
    assert monitor.healthy and monitor.outages == 1 and monitor.last_outage_s == 7.0


def test_a_failing_report_does_not_end_the_watch() -> None:
    """A report that raised killed the thread (diagnostics then froze at the last state)."""
    answers = itertools.cycle([True, False])
    reports: list[bool] = []

    def on_change(healthy: bool, _error: str) -> None:
        reports.append(healthy)
        raise AttributeError("'ReasonerNode' object has no attribute 'core'")

    monitor = HealthMonitor(lambda: next(answers), lambda: "m", 0.01, on_change)
    monitor.start()
    wait_until(lambda: len(reports) >= 3, 10, "three reports from one thread")
    assert monitor._thread is not None and monitor._thread.is_alive()
    monitor.stop(2.0)
