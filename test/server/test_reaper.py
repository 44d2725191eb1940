"""The reaper (server/reaper.py, started by watchdog.Reaper): vLLM's process group never outlives its
supervisor, however the supervisor ends."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.in_process_supervisor import InProcessSupervisor, in_a_long_backoff
from support.processes import free_port
from support.supervisor_process import (
    StartSupervisor,
    alive,
    fake_env,
    records,
    running_reaper,
    wait_for,
    write_config,
)

from cosmos_reasoner_ros.server import errors, watchdog


@pytest.mark.slow
def test_a_sigkilled_supervisor_takes_the_server_group_and_its_ready_file_with_it(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    """Before: a SIGKILLed supervisor (ros2 launch escalating, the OOM killer, the demo's killpg) left vLLM
    and its ready file behind, and the next supervisor on the port exited 4."""
    port = free_port()
    proc = start_supervisor(write_config(tmp_path, fake_vllm, port, stop_grace_s=2.0), fake_env(tmp_path))
    proc.read_until("READY ")
    server = records(tmp_path / "record.jsonl")[0]
    assert (tmp_path / "ready.json").exists()
    proc.proc.kill()  # SIGKILL: no handler, no finally
    proc.finish()
    wait_for(lambda: not alive(server["pid"]) and not alive(server["worker"]))
    wait_for(lambda: not (tmp_path / "ready.json").exists())
    # The next supervisor on the same port starts at once.
    again = start_supervisor(write_config(tmp_path, fake_vllm, port), fake_env(tmp_path))
    assert again.read_until("READY ") == f"READY http://127.0.0.1:{port}"
    assert again.stop() == errors.EXIT_OK


@pytest.mark.slow
def test_the_reaper_runs_before_the_first_server_starts(
    tmp_path: Path, fake_vllm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the reaper process was started after vLLM's, on the first guard(): a SIGKILL in between
    (a fork and exec of Python) left that vLLM unguarded."""
    reapers: list[int | None] = []
    popen = subprocess.Popen

    class Recording(popen):  # type: ignore[misc,valid-type]
        def __init__(self, args, *rest, **kwargs) -> None:  # type: ignore[no-untyped-def]
            if args and str(args[0]) == str(fake_vllm):
                reapers.append(run.supervisor._reaper.pid)  # running when vLLM is started
            super().__init__(args, *rest, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", Recording)
    with InProcessSupervisor(tmp_path, fake_vllm) as run:
        run.wait_line("READY ")
    assert reapers and reapers[0] is not None


@pytest.mark.slow
def test_a_reaper_killed_during_a_long_start_is_replaced_and_does_its_work(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    """Before: a dead reaper was noticed only once the server was ready: during a start (up to
    start_timeout_s, 30 min by default) a reaper killed by the OOM killer left vLLM unguarded."""
    config = write_config(tmp_path, fake_vllm, free_port(), start_timeout_s=600.0)
    proc = start_supervisor(config, fake_env(tmp_path, FAKE_VLLM_BEHAVIOUR="never_ready"))
    server = wait_for(lambda: records(tmp_path / "record.jsonl"))[0]
    first = wait_for(lambda: running_reaper(proc.proc.pid))
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: running_reaper(proc.proc.pid) not in (None, first))
    assert not any(line.startswith("READY") for line in proc.lines)  # still starting
    proc.proc.kill()
    proc.finish()
    wait_for(lambda: not alive(server["pid"]) and not alive(server["worker"]))


def test_a_reaper_started_again_guards_the_group_before_the_supervisor_writes_a_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CI: a supervisor killed just after it restarted a dead reaper, before it wrote the group to the new
    reaper's pipe, left vLLM running. The group now goes on the new reaper's command line: here no line is
    ever written to it, and the end of its pipe still stops the group and removes the ready file."""
    ready = tmp_path / "ready.json"
    ready.write_text(json.dumps({"supervisor": "1:2"}))
    with subprocess.Popen(
        [sys.executable, "-S", "-c", "import time; time.sleep(600)"], start_new_session=True
    ) as group:
        reaper = watchdog.Reaper(2.0, "1:2")
        try:
            reaper.guard(group.pid, str(ready))
            first = reaper.pid
            assert first is not None
            os.kill(first, signal.SIGKILL)
            wait_for(lambda: not alive(first))
            monkeypatch.setattr(watchdog.Reaper, "_send", staticmethod(lambda _proc, _line: None))
            reaper.check()  # restarted; nothing reaches its pipe from now on
            assert reaper.pid not in (None, first)
            reaper.close()  # the pipe ends, as when the supervisor dies
            assert group.wait(timeout=30) is not None
            assert not ready.exists()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group.pid, signal.SIGKILL)


def test_a_reaper_killed_between_restarts_is_replaced_within_seconds(tmp_path: Path, fake_vllm: Path) -> None:
    """Before: the reaper was looked at only while a server started or was watched; one killed during the
    checks and warm-up before READY or the back-off between restarts (here 600 s) stayed dead until then."""
    with in_a_long_backoff(tmp_path, fake_vllm) as run:
        first = run.supervisor._reaper.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: run.supervisor._reaper.pid not in (None, first), 30.0)
        run.stop()
    assert run.error is None


def _has_mark(pid: int, mark: str) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return True  # gone, or not readable yet: not known to be unmarked
    return f"{watchdog.OWNER_ENV}={mark}".encode() in environ


def test_a_server_started_before_the_reaper_heard_of_it_is_found_by_its_mark() -> None:
    """A supervisor SIGKILLed between a server's start and the line naming its group to the reaper: the
    server's processes carry the supervisor's mark (OWNER_ENV), and the reaper stops every group made of
    marked processes alone. A group of another supervisor's mark, or with an unmarked process in it, is
    left."""
    mark = f"{os.getpid()}:{time.monotonic_ns()}"
    # The leader starts one child: with the leader's environment, or with the one given as NAME=value args.
    leader_code = (
        "import subprocess, sys, time\n"
        "env = dict(a.split('=', 1) for a in sys.argv[1:]) if sys.argv[1:] else None\n"
        "subprocess.Popen([sys.executable, '-S', '-c', 'import time; time.sleep(600)'], env=env)\n"
        "time.sleep(600)"
    )

    def group(owner: str, child_env: list[str]) -> subprocess.Popen[bytes]:
        env = {**os.environ, watchdog.OWNER_ENV: owner} if owner else dict(os.environ)
        return subprocess.Popen(
            [sys.executable, "-S", "-c", leader_code, *child_env], env=env, start_new_session=True
        )

    ours = group(mark, [])  # the child inherits the mark
    other = group(mark + "0", [])  # another supervisor's
    mixed = group(mark, ["PATH=/usr/bin"])  # its child has an environment without the mark
    groups = (ours, other, mixed)
    try:
        wait_for(lambda: all(len(watchdog.group_members(g.pid)) == 2 for g in groups))
        # A child is in its group from its fork, with its parent's environment until its exec: wait for the
        # unmarked child's own environment, or the reaper may judge the group by that copy (found in CI: the
        # mixed group was stopped, -15).
        wait_for(lambda: any(not _has_mark(pid, mark) for pid in watchdog.group_members(mixed.pid)))
        reaper = watchdog.Reaper(2.0, mark)
        reaper.start()
        reaper.close()  # the pipe ends with no group ever named: the supervisor died at once
        assert ours.wait(timeout=30) is not None
        wait_for(lambda: not watchdog.group_members(ours.pid))
        assert other.poll() is None and mixed.poll() is None
        assert len(watchdog.group_members(other.pid)) == 2 and len(watchdog.group_members(mixed.pid)) == 2
    finally:
        for g in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(g.pid, signal.SIGKILL)
            g.wait()


def test_the_reaper_removes_only_the_ready_file_of_the_very_supervisor_that_died(tmp_path: Path) -> None:
    """Before: the reaper compared the pid alone: a new supervisor that got the dead one's pid lost its ready
    file to the old supervisor's reaper."""
    from cosmos_reasoner_ros.server import reaper

    ready = tmp_path / "ready.json"
    ready.write_text(json.dumps({"supervisor_pid": 4242, "supervisor": "4242:777"}))  # the new supervisor's
    reaper.remove_ready_file(str(ready), "4242:555")  # the dead one: same pid, another start time
    assert ready.exists()
    reaper.remove_ready_file(str(ready), "4242:777")
    assert not ready.exists()
