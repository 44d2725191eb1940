"""The supervisor as a watchdog: vLLM's process group never outlives its supervisor (the reaper process,
reaper.py), a server or ready file left by a supervisor that died is recognised (and stopped, or named in
the error), and a ready server that stops answering /health for longer than `health_grace_s` while making no
progress (its process group stopped, or using no CPU) is declared frozen, to be killed and restarted; one
that keeps using CPU is busy, killed only after `health_busy_grace_s`.

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

from . import reaper
from .reaper import group_alive, stop_group

__all__ = [
    "OWNER_ENV",
    "GroupActivity",
    "GroupProcess",
    "HealthWatch",
    "PortHolder",
    "Reaper",
    "StoppedMembers",
    "activity_of",
    "group_activity",
    "group_alive",
    "group_members",
    "group_processes",
    "owner_alive",
    "owner_mark",
    "port_holder",
    "stale_ready_file",
    "stop_group",
    "wait_port_free",
]

OWNER_ENV = reaper.OWNER_ENV
_LISTEN = "0A"  # TCP state LISTEN in /proc/net/tcp
_SHOWN_CHARS = 160  # of a command line named in an error


def _stat_fields(pid: int | str) -> list[str] | None:
    """The fields of /proc/<pid>/stat from the state on (field 3), or None when the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    return stat[stat.rfind(")") + 2 :].split()


def process_start_ticks(pid: int) -> int | None:
    """The start time of a process in clock ticks since boot (/proc/<pid>/stat field 22), or None."""
    fields = _stat_fields(pid)
    try:
        return int(fields[19]) if fields and fields[0] != "Z" else None
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True)
class GroupProcess:
    """One live process of a server's group, as /proc shows it: vLLM names its processes by title
    (`VLLM::EngineCore_DP1`, `VLLM::APIServer_0`, `VLLM::Worker`), which replaces their command line."""

    pid: int
    ppid: int
    state: str  # /proc/<pid>/stat field 3: R, S, D, T (stopped), t (stopped by a tracer), ...
    cpu_ticks: int  # utime + stime, in clock ticks
    title: str  # the command line, its arguments joined by spaces (cut to _TITLE_CHARS)

    @property
    def stopped(self) -> bool:
        return self.state in ("T", "t")

    @property
    def name(self) -> str:
        """vLLM's title of the process (`VLLM::EngineCore_DP1`: the word with `::`), else its command line."""
        return next((word for word in self.title.split() if "::" in word), self.title[:60] or "?")


_TITLE_CHARS = 120


def group_processes(pgid: int) -> list[GroupProcess]:
    """The live processes (not zombies) of process group `pgid`, from /proc ([] where there is none)."""
    found = []
    with contextlib.suppress(OSError):
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            fields = _stat_fields(entry.name)
            with contextlib.suppress(IndexError, ValueError):
                if fields and fields[0] != "Z" and int(fields[2]) == pgid:
                    found.append(
                        GroupProcess(
                            int(entry.name),
                            int(fields[1]),
                            fields[0],
                            int(fields[11]) + int(fields[12]),  # utime, stime (fields 14 and 15)
                            _title(entry),
                        )
                    )
    return found


def _title(proc: Path) -> str:
    try:
        raw = (proc / "cmdline").read_bytes()[: _TITLE_CHARS * 2]
    except OSError:
        return ""
    return " ".join(a.decode(errors="replace") for a in raw.split(b"\0") if a)[:_TITLE_CHARS]


def group_members(pgid: int) -> list[int]:
    """The live processes (not zombies) of process group `pgid`, from /proc ([] where there is none)."""
    return [p.pid for p in group_processes(pgid)]


@dataclass(frozen=True)
class GroupActivity:
    """What a process group is doing: the CPU time its live members have used, whether they are all
    stopped (SIGSTOP, a debugger), and which of them are (one stopped engine core of several is enough to
    hang the requests vLLM hands it)."""

    cpu_ticks: int  # utime + stime of the live members, in clock ticks
    members: int
    stopped: bool
    stopped_members: tuple[GroupProcess, ...] = ()


def group_activity(pgid: int) -> GroupActivity | None:
    """The group's activity from /proc; None where /proc cannot tell (not Linux, no member readable)."""
    return activity_of(group_processes(pgid))


def activity_of(processes: list[GroupProcess]) -> GroupActivity | None:
    """The activity of a group's processes (group_processes); None for none."""
    if not processes:
        return None
    stopped = tuple(p for p in processes if p.stopped)
    return GroupActivity(
        sum(p.cpu_ticks for p in processes), len(processes), len(stopped) == len(processes), stopped
    )


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
    leader_owner: str = ""  # the mark of its process group's leader (its own when it leads the group)

    @property
    def stale(self) -> bool:
        """Started by a supervisor that is gone: nobody watches it, it only holds the port and memory."""
        return bool(self.owner) and not self.owner_running

    def group_refusal(self, own_pgid: int) -> str:
        """Why its process group must not be stopped ('' when it may). Every child of vLLM, and anything a
        user starts from one, inherits the mark: only a group that a marked process leads is a server's
        group, and a mark without a start time may name a reused pid."""
        if self.owner.partition(":")[2] in ("", "0"):
            return "its mark has no start time, so its supervisor cannot be told from a reused pid"
        if self.pgid == own_pgid:
            return "it is in this supervisor's own process group"
        if self.leader_owner != self.owner:
            return f"its process group {self.pgid} is not led by a server of that supervisor"
        return ""

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
    owner = _mark_in(environ)
    leader = owner
    if pgid != pid:
        try:
            leader = _mark_in(Path(f"/proc/{pgid}/environ").read_bytes().split(b"\0"))
        except OSError:
            leader = ""
    return PortHolder(pid, pgid, command, owner, owner_alive(owner) if owner else False, leader)


def _mark_in(environ: list[bytes]) -> str:
    prefix = OWNER_ENV.encode() + b"="
    return next((e[len(prefix) :].decode(errors="replace") for e in environ if e.startswith(prefix)), "")


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
    """The supervisor's end of the reaper process (reaper.py): started once, before the first server (so that
    telling it of a group is only a write to its pipe), told of each process group, restarted when it is
    found dead (it is one SIGKILL away like any process)."""

    def __init__(self, grace_s: float, owner: str) -> None:
        self._grace_s = grace_s
        self._owner = owner  # the supervisor's mark: the ready file is removed only when it is still its own
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()
        self._group: tuple[int, str] | None = None  # the group guarded and its ready file; None: clear

    def start(self) -> None:
        """Start the reaper process (again, when it died)."""
        with self._lock:
            self._ensure()

    def _ensure(self) -> subprocess.Popen[str]:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            # The current group on the command line: the new reaper guards it from its first instruction, even
            # when this supervisor dies before another line reaches the pipe.
            group = [str(self._group[0]), self._group[1]] if self._group is not None else []
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    str(Path(__file__).with_name("reaper.py")),
                    self._owner,
                    f"{self._grace_s:g}",
                    *group,
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                text=True,
                start_new_session=True,  # no signal meant for the supervisor's group reaches it
                close_fds=True,
            )
            self._proc = proc
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
            self._group = (pgid, ready_file)
            self._send(self._ensure(), f"group {pgid} {ready_file}".rstrip())

    def clear(self) -> None:
        """The group is stopped: nothing to reap."""
        with self._lock:
            self._group = None
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
    """Whether a ready server is frozen, or only busy. Silent means no /health answer for longer than grace_s
    (0: never frozen) and at least two failed checks in a row (a supervisor that itself stood still does not
    condemn a server on waking). A silent server is frozen when its process group is stopped or used no CPU
    for grace_s; one that keeps using CPU is busy (vLLM decodes video in the API server's event loop: a long
    prefill on a loaded CPU can starve /health), killed only once silent for longer than busy_grace_s
    (0: never). Where the group's activity cannot be read, silence alone is frozen."""

    def __init__(self, grace_s: float, now: float, busy_grace_s: float = 0.0) -> None:
        self.grace_s = grace_s
        self.busy_grace_s = busy_grace_s
        self.last_ok = now
        self.failures = 0
        self.last_progress = now  # the last check that found more CPU time used than the one before
        self.stopped = False
        self._cpu: int | None = None  # None: the activity could not be read at the last check

    def observe(self, ok: bool, now: float, activity: GroupActivity | None = None) -> None:
        if ok:
            self.last_ok, self.failures = now, 0
        else:
            self.failures += 1
        if activity is None:
            self._cpu, self.stopped = None, False
            return
        if self._cpu is not None and activity.cpu_ticks > self._cpu:
            self.last_progress = now
        self._cpu, self.stopped = activity.cpu_ticks, activity.stopped

    def silent_for(self, now: float) -> float:
        return now - self.last_ok

    def idle_for(self, now: float) -> float:
        """How long the server has been silent without using CPU."""
        return now - max(self.last_ok, self.last_progress)

    def silent(self, now: float) -> bool:
        return self.grace_s > 0 and self.failures >= 2 and self.silent_for(now) > self.grace_s

    def frozen(self, now: float) -> str:
        """Why the server counts as frozen ('' when it does not): to be killed and restarted."""
        if not self.silent(now):
            return ""
        silent = f"did not answer /health for {self.silent_for(now):.0f} s"
        if self._cpu is None:
            return f"{silent} (health_grace_s {self.grace_s:g}): frozen"
        if self.stopped:
            return f"{silent} and is stopped (health_grace_s {self.grace_s:g}): frozen"
        if self.idle_for(now) > self.grace_s:
            idle = self.idle_for(now)
            return f"{silent} and used no CPU for {idle:.0f} s (health_grace_s {self.grace_s:g}): frozen"
        if self.busy_grace_s > 0 and self.silent_for(now) > self.busy_grace_s:
            return f"{silent} while using CPU (health_busy_grace_s {self.busy_grace_s:g}): busy too long"
        return ""

    def busy(self, now: float) -> bool:
        """Silent past the grace but using CPU, not (yet) to be killed."""
        return self.silent(now) and not self.frozen(now)


class StoppedMembers:
    """Whether a process of the server's group has been stopped (state T: SIGSTOP, SIGTSTP, a tracer) for
    longer than grace_s, seen stopped at two checks in a row at least (a supervisor that itself stood still
    does not condemn a process on waking). /health does not tell: vLLM's API server answers it from its own
    state, so one engine core stopped among several, or the only one behind a running API server, hangs
    every request handed to it while /health stays 200. grace_s 0: never."""

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self._since: dict[tuple[int, str], tuple[float, int]] = {}  # (pid, title): (first seen, checks)
        self._last: dict[tuple[int, str], GroupProcess] = {}

    def observe(self, now: float, activity: GroupActivity | None) -> None:
        stopped = {(p.pid, p.title): p for p in (activity.stopped_members if activity else ())}
        self._since = {
            key: (self._since[key][0], self._since[key][1] + 1) if key in self._since else (now, 1)
            for key in stopped
        }
        self._last = stopped

    def frozen(self, now: float) -> str:
        """Why the server counts as frozen ('' when it does not): the process stopped longest, past the
        grace."""
        if self.grace_s <= 0:
            return ""
        return self._named(
            now,
            [
                key
                for key, (since, checks) in self._since.items()
                if checks >= 2 and now - since > self.grace_s
            ],
        )

    def seen(self, now: float) -> str:
        """The processes seen stopped at the last check, named as `frozen` names them, past the grace or not
        ('' when none): the cause to give when another rule condemns the server meanwhile. The rules race on a
        loaded machine (an engine stopped with work pending also makes no progress), and the stop is the more
        specific finding."""
        return self._named(now, list(self._since)) if self.grace_s > 0 else ""

    def _named(self, now: float, keys: list[tuple[int, str]]) -> str:
        overdue = [(now - self._since[key][0], key) for key in keys]
        if not overdue:
            return ""
        longest, key = max(overdue)
        process = self._last[key]
        others = f" (and {len(overdue) - 1} more)" if len(overdue) > 1 else ""
        return (
            f"has a process stopped (state {process.state}) for {longest:.0f} s: {process.name} "
            f"(pid {process.pid}){others} (health_grace_s {self.grace_s:g}): frozen"
        )


def wait_port_free(in_use: Callable[[], bool], timeout_s: float) -> bool:
    """Poll `in_use()` until it is false or timeout_s passes; True when the port is free."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not in_use():
            return True
        time.sleep(0.1)
    return not in_use()
