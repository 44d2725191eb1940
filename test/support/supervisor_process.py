"""The supervisor (`python -m cosmos_reasoner_ros.server`) as a child process of a test, the stand-in servers'
records it leaves, and the conditions the server tests wait on."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from support.paths import ROOT


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0): it has exited.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


# Generous: a condition that holds on a quiet machine in a second can take far longer beside other work (the
# supervisor's start runs the grammar check and the warm-up before READY); only a failure waits this long.
WAIT_S = 120.0


def wait_for(predicate, timeout_s: float = WAIT_S):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out")


def records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class SupervisorProcess:
    """python -m cosmos_reasoner_ros.server with a config file; a thread collects stdout and stderr."""

    def __init__(self, config: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cosmos_reasoner_ros.server", "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**env, "PYTHONFAULTHANDLER": "1"},  # SIGABRT dumps every thread's stack (a hung stop)
            cwd=ROOT,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def read_until(self, prefix: str, timeout_s: float = WAIT_S) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            if line is None:
                break
            self.lines.append(line)
            if line.startswith(prefix):
                return line
        raise AssertionError(f"no line starting with {prefix!r}; output:\n" + "\n".join(self.lines))

    def finish(self, timeout_s: float = WAIT_S) -> int:
        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGABRT)  # its threads' stacks, through faulthandler, to the output
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
            with contextlib.suppress(queue.Empty):
                while (line := self._queue.get(timeout=5)) is not None:
                    self.lines.append(line)
            raise AssertionError(
                f"the supervisor did not exit within {timeout_s} s; output, then its stacks:\n"
                + "\n".join(self.lines)
            ) from None
        while (line := self._queue.get(timeout=5)) is not None:
            self.lines.append(line)
        return code

    def stop(self, timeout_s: float = WAIT_S) -> int:
        """SIGTERM, as ros2 launch and service managers stop it; its exit code."""
        self.proc.send_signal(signal.SIGTERM)
        return self.finish(timeout_s)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def write_config(tmp_path: Path, fake: Path, port: int, **overrides) -> Path:
    base = {
        "mode": "qwen3vl",
        "model": str(tmp_path),
        "executable": [str(fake)],
        "vllm_version": "0.26.0",
        "port": port,
        "media_dir": str(tmp_path / "media"),
        "cache_dir": str(tmp_path / "cache"),
        "ready_file": str(tmp_path / "ready.json"),
        "health_period_s": 0.1,
        "restart_backoff_s": 0.2,
        "stop_grace_s": 3.0,
        "start_timeout_s": 30.0,
        "env": {"FAKE_EXTRA": "yes"},
        # The grammar check's stand-in backends here are xgrammar's (server.yaml's default is guidance).
        "structured_outputs": {"backend": "xgrammar", "disable_any_whitespace": True},
    }
    base.update(overrides)
    config = tmp_path / "server.yaml"
    config.write_text(yaml.safe_dump(base))
    return config


def fake_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env["FAKE_VLLM_RECORD"] = str(tmp_path / "record.jsonl")
    env["_ROS_WHEELS_BOOTSTRAP_COMPLETE"] = "1"
    env.pop("COSMOS_REASONER_API_KEY", None)
    env.update(extra)
    return env


def recorded_pids(path: Path) -> list[int]:
    """Every process of the stand-in servers recorded in `path` (server, workers, engines, API servers)."""
    pids: list[int] = []
    for record in records(path):
        for key in ("pid", "worker"):
            if isinstance(record.get(key), int):
                pids.append(record[key])
        for key in ("engines", "workers", "api_servers"):
            pids.extend(p for p in record.get(key) or [] if isinstance(p, int))
    return pids


# What the server tests' `start_supervisor` fixture (test/server/conftest.py) gives: start(config, env).
StartSupervisor = Callable[[Path, dict[str, str]], "SupervisorProcess"]


def reaper_pid(supervisor_pid: int) -> int:
    """The reaper the supervisor started (a child of it in a session of its own)."""
    found = running_reaper(supervisor_pid)
    if found is None:
        raise AssertionError(f"no reaper among the children of {supervisor_pid}")
    return found


def running_reaper(supervisor_pid: int) -> int | None:
    # Children of every thread: the supervisor's loop (which starts the reaper) runs on a thread of its own.
    children: list[int] = []
    for task in Path(f"/proc/{supervisor_pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            children += map(int, (task / "children").read_text().split())
    for child in children:
        with contextlib.suppress(OSError):
            if b"reaper.py" in Path(f"/proc/{child}/cmdline").read_bytes() and alive(child):
                return child
    return None
