"""Test sessions side by side on one machine never share a ROS domain (support.processes.reserved_domain):
with localhost discovery the node of one answered the triggers and goals of the other."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from support.paths import TEST_DIR
from support.processes import (
    LONG_LIVED_VAR,
    SESSION_VAR,
    TEST_DOMAINS,
    processes_on_domain,
    reserved_domain,
    stop_left_alive,
)

OTHER_SESSION = """
import sys
sys.path.insert(0, sys.argv[1])
from support.processes import reserved_domain
with reserved_domain(int(sys.argv[2])) as domain:
    print(domain, flush=True)
    sys.stdin.read()  # held until the parent closes stdin
"""


def test_another_session_asking_for_the_same_domain_gets_another_one() -> None:
    with reserved_domain(40) as mine:
        others = [
            subprocess.Popen(
                [sys.executable, "-c", OTHER_SESSION, str(TEST_DIR), "40"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(3)
        ]
        try:
            theirs = []
            for other in others:  # one after the other: each holds its domain while the next asks
                assert other.stdout is not None
                theirs.append(other.stdout.readline().strip())
            domains = [mine, *theirs]
            assert len(set(domains)) == 4, domains
            assert all(1 <= int(d) <= TEST_DOMAINS for d in domains), domains
        finally:
            for other in others:
                other.communicate("", timeout=30)


def _sleeper(domain: str, *, session: str = "another", long_lived: bool = False) -> subprocess.Popen[bytes]:
    env = {"PATH": "/usr/bin:/bin", "ROS_DOMAIN_ID": domain, SESSION_VAR: session}
    if long_lived:
        env[LONG_LIVED_VAR] = "1"
    return subprocess.Popen(["sleep", "60"], env=env)


def test_what_a_session_left_on_its_domain_is_found_and_killed_and_others_are_left_alone() -> None:
    with reserved_domain(20) as domain:
        left = _sleeper(domain, session="mine")
        others = [_sleeper(domain, session="theirs"), _sleeper(domain, session="mine", long_lived=True)]
        try:
            assert processes_on_domain(domain, "mine") == [left.pid]
            assert set(processes_on_domain(domain)) == {left.pid, others[0].pid}
            killed = stop_left_alive(domain, "mine", grace_s=0.3)
            assert killed == [f"{left.pid}: sleep 60"]
            assert left.wait(timeout=10) == -signal.SIGKILL
            assert all(o.poll() is None for o in others)
            assert stop_left_alive(domain, "mine", grace_s=0.0) == []
        finally:
            for o in [left, *others]:
                o.kill()
                o.wait()


def test_a_domain_with_a_live_process_or_just_released_is_not_taken() -> None:
    with reserved_domain(10) as first:
        pass
    with reserved_domain(10) as second:
        assert second != first  # the one released longest ago, not the one just given back
    # A process started on every domain: none is free until they end.
    sleepers = [_sleeper(str(d)) for d in range(1, TEST_DOMAINS + 1)]
    try:
        with pytest.raises(RuntimeError, match="stayed held"), reserved_domain(10, timeout_s=0.5):
            pass
    finally:
        for s in sleepers:
            s.kill()
            s.wait()
    with reserved_domain(10) as domain:
        assert processes_on_domain(domain) == []
