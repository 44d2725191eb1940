"""The server tests' supervisors: one fixture owns each one's life (start, stop, the checks made at stop)."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.fake_vllm import FAKE_VLLM
from support.supervisor_process import StartSupervisor, SupervisorProcess, alive, recorded_pids, wait_for

# A server group the supervisor stopped is gone at once, one its reaper took within a second or two; generous
# beside other work.
GONE_S = 30.0


@pytest.fixture
def fake_vllm(tmp_path: Path) -> Path:
    script = tmp_path / "fake-vllm"
    # -S: no site packages (no ROS wheels' re-exec): the recorded pid is the process the supervisor started.
    script.write_text(f"#!{sys.executable} -S\n{FAKE_VLLM}")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "config.json").write_text(
        "{}"
    )  # the model directory the tests name (tmp_path) is a checkpoint
    return script


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path: Path) -> Iterator[None]:
    """Whatever a failing test leaves behind: the stand-in servers' process groups."""
    yield
    for pid in recorded_pids(tmp_path / "record.jsonl"):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


@pytest.fixture
def start_supervisor(tmp_path: Path) -> Iterator[StartSupervisor]:
    """Starts supervisors (`start_supervisor(config, env)`) and owns their lives: at the test's end a
    supervisor still running is killed, and when every one had ended by itself, no process of the stand-in
    servers they started (recorded in tmp_path/record.jsonl) may be left; the rest is killed either way."""
    started: list[SupervisorProcess] = []

    def start(config: Path, env: dict[str, str]) -> SupervisorProcess:
        proc = SupervisorProcess(config, env)
        started.append(proc)
        return proc

    yield start
    ended_by_themselves = all(proc.proc.poll() is not None for proc in started)
    for proc in started:
        if proc.proc.poll() is None:
            proc.proc.kill()
        proc.proc.wait(timeout=30)
    record = tmp_path / "record.jsonl"
    try:
        if ended_by_themselves:
            try:
                wait_for(lambda: not any(alive(pid) for pid in recorded_pids(record)), GONE_S)
            except AssertionError:
                left = [pid for pid in recorded_pids(record) if alive(pid)]
                raise AssertionError(
                    f"stand-in server processes left after their supervisor ended: {left}"
                ) from None
    finally:
        for pid in recorded_pids(record):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
