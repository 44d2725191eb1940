"""Test sessions side by side on one machine never share a ROS domain (support.processes.reserved_domain):
with localhost discovery the node of one answered the triggers and goals of the other."""

from __future__ import annotations

import subprocess
import sys

from support.paths import TEST_DIR
from support.processes import TEST_DOMAINS, reserved_domain

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
