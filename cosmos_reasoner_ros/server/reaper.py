"""The reaper: a tiny process that ties vLLM's process group to its supervisor's life, however that ends.

The supervisor starts it once (`python -I -S reaper.py`: the standard library only, no site packages, so the
ROS wheels' loader does not re-execute it with their library path) in a session of its own, with a pipe on
its standard input whose writing end only the supervisor holds. The supervisor writes `group <pgid>
<ready file>` after each start of vLLM and `clear` after each stop; a reaper started again while a server runs
is given its group and ready file on the command line. A server started in the moment between its start and
that line is found by the mark every process of it carries in its environment (OWNER_ENV). When the pipe
reaches its end, the supervisor is gone: ended normally (it cleared the group first), or killed (SIGKILL, the
OOM killer, `ros2 launch` escalating): the reaper then stops the group it was last told of, and any group of
marked processes alone, SIGTERM (with SIGCONT, so that a stopped group sees it) and SIGKILL after the grace,
removes the ready file when it still names the dead supervisor (its pid and start time: the mark the
supervisor passed), and exits.

Why a pipe and not prctl(PR_SET_PDEATHSIG): the parent-death signal fires when the *thread* that started the
child ends, is lost across the ROS wheels' re-exec, needs `preexec_fn` (unsafe in a threaded program), and
reaches only the direct child, not vLLM's engine-core processes. The end of a pipe is seen by the kernel when
the last holder of its writing end dies, by any cause; vLLM stops its own workers the same way (its
multiproc executor's death pipe).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

GROUP_POLL_S = 0.1
# The supervisor's mark in the environment of every vLLM process it starts (watchdog.OWNER_ENV).
OWNER_ENV = "COSMOS_REASONER_SUPERVISOR"


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(pgid: int, grace_s: float, running: Callable[[int], bool] = group_alive) -> bool:
    """SIGTERM (and SIGCONT: a stopped process acts on SIGTERM only once it runs) to the group, SIGKILL to
    whatever is left of it after grace_s. `running(pgid)` says whether anything of the group is left (the
    supervisor, the parent of the group's leader, asks without reaping it: the leader's zombie keeps the
    group's id from being reused until the group is gone). True when the group ended within the grace."""
    for sig in (signal.SIGTERM, signal.SIGCONT):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return True
    deadline = time.monotonic() + grace_s
    while running(pgid):
        if time.monotonic() >= deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            return False
        time.sleep(GROUP_POLL_S)
    return True


def remove_ready_file(path: str, supervisor: str) -> None:
    """The ready file, only when it is still the dead supervisor's: its mark (`<pid>:<start ticks>`) names
    that very process; a new supervisor that got the same pid has another start time."""
    with contextlib.suppress(OSError, ValueError):
        record = json.loads(Path(path).read_text(encoding="utf-8"))
        if isinstance(record, dict) and record.get("supervisor") == supervisor:
            Path(path).unlink()


def marked_groups(supervisor: str) -> list[int]:
    """The process groups every live member of which carries this supervisor's mark in its environment: the
    servers it started (their workers inherit the mark), including one started in the moment before the
    supervisor could name its group to this reaper. A group with any other process in it is not one."""
    mark = f"{OWNER_ENV}={supervisor}".encode()
    groups: dict[int, bool] = {}  # pgid -> all members marked so far
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
            if fields[0] == "Z":
                continue
            pgid = int(fields[2])
            marked = mark in (entry / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to read
        groups[pgid] = groups.get(pgid, True) and marked
    own = os.getpgid(0)
    return sorted(g for g, all_marked in groups.items() if all_marked and g not in (own, 0))


def say(message: str) -> None:
    """To the supervisor's standard error, which may be gone with it (a closed pipe is no reason to stop)."""
    with contextlib.suppress(OSError, ValueError):
        print(f"[cosmos-reasoner-server reaper] {message}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    supervisor, grace_s = argv[0], float(argv[1])  # the supervisor's mark: `<pid>:<start ticks>`
    # Signals meant for the supervisor's terminal or launch do not reach this session; one sent to this
    # process alone must not leave vLLM unguarded: only the end of the pipe (or SIGKILL) ends the reaper.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    # The group to guard from the start (a reaper restarted while a server runs): on the command line, not
    # the pipe, so that a supervisor killed before it could write leaves a reaper that knows the group.
    pgid = int(argv[2]) if len(argv) > 2 else 0
    ready_file = argv[3] if len(argv) > 3 else ""
    for line in sys.stdin:
        words = line.split(maxsplit=2)
        if words and words[0] == "group" and len(words) >= 2:
            pgid = int(words[1])
            ready_file = words[2].strip() if len(words) > 2 else ""
        elif words and words[0] == "clear":
            pgid, ready_file = 0, ""
    if ready_file:  # first: nobody may take a server that is being stopped for ready
        remove_ready_file(ready_file, supervisor)
    pid = supervisor.partition(":")[0]
    if pgid > 0 and group_alive(pgid):
        say(f"supervisor pid {pid} ended without stopping vLLM: stopping its process group {pgid}")
        stop_group(pgid, grace_s)
    # A server started in the moment before its group reached this pipe carries the supervisor's mark.
    for group in marked_groups(supervisor):
        say(f"supervisor pid {pid} ended, its process group {group} still running: stopping it")
        stop_group(group, grace_s)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
