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
