"""CPU time by test folder, for planning CI's sections (pytest plugin, on with COSMOS_REASONER_CPU_REPORT=1).

Each test's CPU is what its process used (user + system) plus what its waited-for children used meanwhile
(servers, nodes, builds: getrusage's RUSAGE_CHILDREN counts a child once it has been waited for, so a module's
server is counted at the teardown that waits for it). The summary lists folders by CPU seconds, with their
wall seconds: a folder whose CPU is far below its wall time mostly waits and shares the cores well. Then the
tests that used the most CPU (a module's shared server is counted in the test whose teardown stops it).
"""

from __future__ import annotations

import collections
import resource
import time
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Any

import pytest

_cpu: collections.Counter[str] = collections.Counter()
_wall: collections.Counter[str] = collections.Counter()
_test_cpu: collections.Counter[str] = collections.Counter()
_test_wall: collections.Counter[str] = collections.Counter()
_MOST = 25


def _now() -> tuple[float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime, time.monotonic()


def _folder(nodeid: str) -> str:
    path = PurePosixPath(nodeid.split("::", 1)[0])
    return str(path.parent) if path.parent.name != "test" else str(path)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Iterator[None]:
    cpu, wall = _now()
    yield
    cpu_after, wall_after = _now()
    _cpu[_folder(item.nodeid)] += cpu_after - cpu
    _wall[_folder(item.nodeid)] += wall_after - wall
    _test_cpu[item.nodeid] += cpu_after - cpu
    _test_wall[item.nodeid] += wall_after - wall


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _cpu:
        return
    total = sum(_cpu.values())
    terminalreporter.section(f"CPU by folder ({total:.0f} s of CPU in all)")
    for folder, cpu in _cpu.most_common():
        terminalreporter.write_line(f"{cpu:8.0f} s CPU {_wall[folder]:8.0f} s wall  {folder}")
    terminalreporter.section(f"the {_MOST} tests that used the most CPU")
    for nodeid, cpu in _test_cpu.most_common(_MOST):
        terminalreporter.write_line(f"{cpu:8.0f} s CPU {_test_wall[nodeid]:8.0f} s wall  {nodeid}")
