"""The watchdog's readings of a process group (server/watchdog.py): its live members, and silence on /health
told apart as frozen or busy."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from support.supervisor_process import (
    wait_for,
)


def test_silence_is_frozen_only_without_progress() -> None:
    """watchdog.HealthWatch on made-up checks: silence with the group stopped, or using no CPU for the grace,
    is frozen; silence with CPU used is busy until the busy grace; unreadable activity falls back to
    silence alone."""
    from cosmos_reasoner_ros.server.watchdog import GroupActivity, HealthWatch

    def watch(activities: list[GroupActivity | None], busy_grace_s: float = 100.0) -> HealthWatch:
        health = HealthWatch(10.0, 0.0, busy_grace_s)
        for t, activity in enumerate(activities, start=1):
            health.observe(False, 5.0 * t, activity)  # a failed check every 5 s
        return health

    working = [GroupActivity(100 * t, 2, False) for t in range(1, 5)]  # CPU used between every check
    assert watch(working).busy(20.0) and not watch(working).frozen(20.0)
    assert "busy too long" in watch(working, busy_grace_s=15.0).frozen(20.0)
    working_long = [GroupActivity(100 * t, 2, False) for t in range(1, 201)]  # 1,000 s of checks
    assert not watch(working_long, busy_grace_s=0.0).frozen(1000.0)  # 0: a busy server is never killed
    stopped = [GroupActivity(100, 2, True)] * 4
    assert "is stopped" in watch(stopped).frozen(20.0)
    idle = [GroupActivity(100, 2, False)] * 4  # no CPU since the first check
    assert "used no CPU for 20 s" in watch(idle).frozen(20.0)
    worked_then_stuck = [GroupActivity(100, 2, False), GroupActivity(200, 2, False), *idle[:2]]
    assert not watch(worked_then_stuck).frozen(20.0)  # CPU used at 10 s: idle only 10 s
    assert watch(worked_then_stuck).frozen(25.0)
    unreadable: list[GroupActivity | None] = [None] * 4
    assert watch(unreadable).frozen(20.0).endswith("(health_grace_s 10): frozen")
    assert not watch(working).frozen(9.0) and not watch(stopped).frozen(10.0)  # within the grace


def test_group_members_are_the_live_processes_of_a_group() -> None:
    from cosmos_reasoner_ros.server import group_members

    leader = subprocess.Popen(
        [
            sys.executable,
            "-S",
            "-c",
            "import subprocess, sys, time\n"
            "c = subprocess.Popen([sys.executable, '-S', '-c', 'import time; time.sleep(600)'])\n"
            "print(c.pid, flush=True); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert leader.stdout is not None
        child = int(leader.stdout.readline())
        assert sorted(group_members(leader.pid)) == sorted([leader.pid, child])
        os.kill(child, signal.SIGKILL)  # a zombie: its parent never waits for it
        wait_for(lambda: group_members(leader.pid) == [leader.pid])  # zombies do not count
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()
        leader.stdout.close()
    assert group_members(leader.pid) == []
