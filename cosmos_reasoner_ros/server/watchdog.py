"""The supervisor as a watchdog: vLLM's process group never outlives its supervisor (the reaper process,
reaper.py), a server or ready file left by a supervisor that died is recognised (and stopped, or named in
the error), and a ready server that stops answering /health for longer than `health_grace_s` is declared
frozen, to be killed and restarted.

Ownership: every vLLM the supervisor starts carries `COSMOS_REASONER_SUPERVISOR=<pid>:<start ticks>` in its
environment (the supervisor's pid and its start time, so that a reused pid is not taken for it). A process
listening on the port is found through /proc (its socket's inode), and its environment says whose it is.
Linux only; elsewhere a busy port is refused as before, without naming its holder.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .reaper import group_alive, stop_group

__all__ = [
    "OWNER_ENV",
    "HealthWatch",
    "PortHolder",
    "Reaper",
    "group_alive",
    "owner_alive",
    "owner_mark",
    "port_holder",
    "stale_ready_file",
    "stop_group",
    "wait_port_free",
]

OWNER_ENV = "COSMOS_REASONER_SUPERVISOR"
_LISTEN = "0A"  # TCP state LISTEN in /proc/net/tcp
_SHOWN_CHARS = 160  # of a command line named in an error


def process_start_ticks(pid: int) -> int | None:
    """The start time of a process in clock ticks since boot (/proc/<pid>/stat field 22), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    try:
        return int(fields[19]) if fields[0] != "Z" else None
    except (IndexError, ValueError):
        return None


def owner_mark(pid: int | None = None) -> str:
    """`<pid>:<start ticks>` of a process (default: this one): whose a server is."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{process_start_ticks(pid) or 0}"


def owner_alive(mark: str) -> bool:
    """Whether the process a mark names still runs (the same process: same pid, same start time)."""
    pid_text, _, ticks_text = mark.partition(":")
    try:
        pid, ticks = int(pid_text), int(ticks_text or "0")
    except ValueError:
        return False
    now = process_start_ticks(pid)
    return now is not None and (ticks == 0 or now == ticks)


@dataclass(frozen=True)
class PortHolder:
    """A process listening on a port: its pid, process group, command line and, when a supervisor started
    it, that supervisor's mark and whether it still runs."""

    pid: int
    pgid: int
    command: str
    owner: str = ""
    owner_running: bool = False

    @property
    def stale(self) -> bool:
        """Started by a supervisor that is gone: nobody watches it, it only holds the port and memory."""
        return bool(self.owner) and not self.owner_running

    def describe(self) -> str:
        text = f"pid {self.pid} ({self.command})"
        if self.owner:
            supervisor = self.owner.partition(":")[0]
            state = "still running" if self.owner_running else "no longer running"
            text += f", started by cosmos-reasoner-server pid {supervisor}, {state}"
        return text


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                cols = line.split()
                if len(cols) > 9 and cols[3] == _LISTEN and int(cols[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(cols[9])
    return inodes


def port_holder(port: int) -> PortHolder | None:
    """The process listening on `port` (among those this user may inspect), or None."""
    inodes = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    if not inodes:
        return None
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fds = list((proc / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                if str(fd.readlink()) in inodes:
                    return _holder(int(proc.name))
    return None


def _holder(pid: int) -> PortHolder | None:
    try:
        pgid = os.getpgid(pid)
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    command = " ".join(a.decode(errors="replace") for a in argv if a)
    if len(command) > _SHOWN_CHARS:
        command = command[:_SHOWN_CHARS] + "..."
    prefix = OWNER_ENV.encode() + b"="
    owner = next((e[len(prefix) :].decode(errors="replace") for e in environ if e.startswith(prefix)), "")
    return PortHolder(pid, pgid, command, owner, owner_alive(owner) if owner else False)


def stale_ready_file(path: Path) -> str:
    """Why the ready file at `path` is stale (its supervisor is gone), or '' (absent, or its supervisor runs).
    A file that cannot be read as a ready file is stale too: nothing trustworthy can be in it."""
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        return ""
    except (OSError, ValueError):
        return "it is not a ready file"
    if not isinstance(record, dict):
        return "it is not a ready file"
    mark = str(record.get("supervisor") or record.get("supervisor_pid") or "")
    if mark and owner_alive(mark):
        return ""
    return f"its supervisor (pid {mark.partition(':')[0] or '?'}) is no longer running"


class Reaper:
    """The supervisor's end of the reaper process (reaper.py): started once, told of each process group,
    restarted when it is found dead (it is one SIGKILL away like any process)."""

    def __init__(self, grace_s: float) -> None:
        self._grace_s = grace_s
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()
        self._last = "clear"

    def _ensure(self) -> subprocess.Popen[str]:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    str(Path(__file__).with_name("reaper.py")),
                    str(os.getpid()),
                    f"{self._grace_s:g}",
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                text=True,
                start_new_session=True,  # no signal meant for the supervisor's group reaches it
                close_fds=True,
            )
            self._proc = proc
            if self._last != "clear":
                self._send(proc, self._last)
        return proc

    @staticmethod
    def _send(proc: subprocess.Popen[str], line: str) -> None:
        assert proc.stdin is not None
        try:
            proc.stdin.write(line + "\n")
            proc.stdin.flush()
        except OSError:
            pass  # it died: _ensure starts another one at the next call

    def guard(self, pgid: int, ready_file: str = "") -> None:
        """From now on, should the supervisor die, the reaper stops this group and removes the ready file."""
        with self._lock:
            self._last = f"group {pgid} {ready_file}".rstrip()
            self._send(self._ensure(), self._last)

    def clear(self) -> None:
        """The group is stopped: nothing to reap."""
        with self._lock:
            self._last = "clear"
            if self._proc is not None and self._proc.poll() is None:
                self._send(self._proc, "clear")

    def check(self) -> None:
        """Restart the reaper when it died, telling it the current group again."""
        with self._lock:
            if self._proc is not None and self._proc.poll() is not None:
                self._ensure()

    def close(self) -> None:
        """End the reaper (after clear(): it stops nothing)."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(OSError):
                assert proc.stdin is not None
                proc.stdin.close()
            try:
                proc.wait(timeout=self._grace_s + 5.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None


class HealthWatch:
    """Whether a ready server is frozen: no /health answer for longer than grace_s (0: never) and at least
    two failed checks in a row (a supervisor that itself stood still does not condemn a server on waking)."""

    def __init__(self, grace_s: float, now: float) -> None:
        self.grace_s = grace_s
        self.last_ok = now
        self.failures = 0

    def observe(self, ok: bool, now: float) -> None:
        if ok:
            self.last_ok, self.failures = now, 0
        else:
            self.failures += 1

    def silent_for(self, now: float) -> float:
        return now - self.last_ok

    def frozen(self, now: float) -> bool:
        return self.grace_s > 0 and self.failures >= 2 and self.silent_for(now) > self.grace_s


def wait_port_free(in_use: Callable[[], bool], timeout_s: float) -> bool:
    """Poll `in_use()` until it is false or timeout_s passes; True when the port is free."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not in_use():
            return True
        time.sleep(0.1)
    return not in_use()
