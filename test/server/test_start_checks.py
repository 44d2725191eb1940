"""The checks before `vllm serve` starts (server/start_checks.py): the executable, the model, the media
directory, the port and what holds it (a stale server is replaced, anything else named and left alone)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.processes import free_port
from support.supervisor_process import (
    StartSupervisor,
    alive,
    fake_env,
    reaper_pid,
    records,
    wait_for,
    write_config,
)

from cosmos_reasoner_ros.server import cli, errors, supervisor, watchdog
from cosmos_reasoner_ros.server.settings import ServerSettings


def _serve(model: Path, port: int, executable: Path | str, media_dir: Path, *extra: str) -> int:
    """cosmos-reasoner-server in qwen3vl mode with this model, port, vllm executable and media directory."""
    return cli.main(
        [
            "--mode",
            "qwen3vl",
            "--model",
            str(model),
            "--port",
            str(port),
            *extra,
            "--set",
            f"executable={executable}",
            "--media-dir",
            str(media_dir),
        ]
    )


def test_missing_executable_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = _serve(tmp_path, free_port(), "/nonexistent/vllm", tmp_path / "m")
    assert code == errors.EXIT_NO_EXECUTABLE
    assert "/nonexistent/vllm" in capsys.readouterr().err


def test_missing_model_path_is_reported(tmp_path: Path, fake_vllm: Path, capsys) -> None:
    code = _serve(tmp_path / "nope", free_port(), fake_vllm, tmp_path / "m")
    assert code == errors.EXIT_NO_MODEL
    assert "does not exist" in capsys.readouterr().err
    # A hub id is not a path: it passes this check.
    supervisor.prepare(
        ServerSettings(
            model="nvidia/Cosmos3-Nano",
            executable=(str(fake_vllm),),
            port=free_port(),
            media_dir=str(tmp_path / "m2"),
        )
    )


def test_port_in_use_is_reported_before_starting(tmp_path: Path, fake_vllm: Path, capsys) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = _serve(tmp_path, port, fake_vllm, tmp_path / "m")
    assert code == errors.EXIT_PORT_IN_USE
    assert f"port {port}" in capsys.readouterr().err
    assert not (tmp_path / "record.jsonl").exists()  # nothing was started


def test_media_dir_is_created_private(tmp_path: Path, fake_vllm: Path) -> None:
    media = tmp_path / "a" / "media"
    supervisor.prepare(
        ServerSettings(
            model=str(tmp_path), executable=(str(fake_vllm),), port=free_port(), media_dir=str(media)
        )
    )
    assert media.is_dir() and stat.S_IMODE(media.stat().st_mode) == 0o700


@pytest.mark.slow
def test_a_server_left_on_the_port_by_a_dead_supervisor_is_replaced(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    """The reaper killed too (a supervisor from before it, a kill of every process of the user): the server
    and its ready file outlive their supervisor. The next start recognises both as stale and replaces them."""
    port = free_port()
    first = start_supervisor(write_config(tmp_path, fake_vllm, port), fake_env(tmp_path))
    first.read_until("READY ")
    os.kill(reaper_pid(first.proc.pid), signal.SIGKILL)
    first.proc.kill()
    first.finish()
    stale = records(tmp_path / "record.jsonl")[0]
    assert alive(stale["pid"]) and (tmp_path / "ready.json").exists()  # left behind, as before the reaper
    second = start_supervisor(write_config(tmp_path, fake_vllm, port), fake_env(tmp_path))
    assert second.read_until("READY ") == f"READY http://127.0.0.1:{port}"
    assert "removed the stale ready file" in second.text
    assert f"pid {stale['pid']}" in second.text and "no longer running" in second.text
    assert not alive(stale["pid"]) and not alive(stale["worker"])
    assert json.loads((tmp_path / "ready.json").read_text())["supervisor_pid"] == second.proc.pid
    assert second.stop() == errors.EXIT_OK


def test_a_port_held_by_something_else_is_named_in_the_error(
    tmp_path: Path, fake_vllm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-S",
            "-c",
            "import socket, time\nport = int(input())\ns = socket.socket()\n"
            "s.bind(('127.0.0.1', port)); s.listen(); print('ok', flush=True); time.sleep(600)",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    port = free_port()
    try:
        assert holder.stdin is not None and holder.stdout is not None
        holder.stdin.write(f"{port}\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "ok"
        code = _serve(tmp_path, port, fake_vllm, tmp_path / "m", "--vllm-version", "0.26.0")
        assert code == errors.EXIT_PORT_IN_USE
        err = capsys.readouterr().err
        assert f"pid {holder.pid}" in err and "socket" in err  # who holds it, and its command
        assert holder.poll() is None  # not ours: left alone
    finally:
        holder.kill()
        holder.wait()


def test_an_empty_model_directory_is_refused_before_starting(tmp_path: Path, fake_vllm: Path, capsys) -> None:
    """Before: vLLM started on an empty directory and exited 10 a minute later quoting a pydantic web page."""
    empty = tmp_path / "empty"
    empty.mkdir()
    code = _serve(empty, free_port(), fake_vllm, tmp_path / "m", "--vllm-version", "0.26.0")
    assert code == errors.EXIT_NO_MODEL
    assert "no config.json" in capsys.readouterr().err
    assert not records(tmp_path / "record.jsonl")  # nothing started


def _dead_pid() -> int:
    gone = subprocess.Popen([sys.executable, "-S", "-c", "pass"])
    gone.wait()
    return gone.pid


@contextlib.contextmanager
def _marked_listener(port: int, mark: str, leads: bool) -> Iterator[tuple[int, int]]:
    """A process listening on `port` with a supervisor's mark in its environment, in a session of its own:
    leading its process group, or as the child of an unmarked leader. Yields (leader pid, listener pid)."""
    listen = (
        "import socket, sys, time\ns = socket.socket()\ns.bind(('127.0.0.1', int(sys.argv[1])))\n"
        "s.listen()\nprint('ok', flush=True)\ntime.sleep(600)"
    )
    env = {**os.environ, watchdog.OWNER_ENV: mark}
    if leads:
        cmd = [sys.executable, "-S", "-c", listen, str(port)]
    else:  # an unmarked leader starts the marked listener (as a user's tool run from a vLLM shell might)
        spawn = (
            "import os, subprocess, sys, time\n"
            f"env = dict(os.environ, {watchdog.OWNER_ENV}=sys.argv[2])\n"
            "c = subprocess.Popen([sys.executable, '-S', '-c', sys.argv[1], sys.argv[3]], env=env)\n"
            "time.sleep(600)"
        )
        cmd = [sys.executable, "-S", "-c", spawn, listen, mark, str(port)]
        env.pop(watchdog.OWNER_ENV)
    leader = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert leader.stdout is not None and leader.stdout.readline().strip() == "ok"
        holder = wait_for(lambda: watchdog.port_holder(port))
        yield leader.pid, holder.pid
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()


@pytest.mark.parametrize(
    ("leads", "ticks", "refusal"),
    [
        (False, "12345", "is not led by a server of that supervisor"),
        (True, "0", "its mark has no start time"),
    ],
)
def test_a_stale_mark_alone_does_not_get_a_process_group_killed(
    tmp_path: Path, fake_vllm: Path, leads: bool, ticks: str, refusal: str, start_supervisor: StartSupervisor
) -> None:
    """Before: any listener whose environment carried the mark of a dead supervisor had its whole process
    group stopped. Every child of vLLM inherits the mark, so does anything a user starts from one; a mark
    without a start time matches any process with that pid."""
    port = free_port()
    with _marked_listener(port, f"{_dead_pid()}:{ticks}", leads) as (leader, listener):
        proc = start_supervisor(write_config(tmp_path, fake_vllm, port), fake_env(tmp_path))
        assert proc.finish() == errors.EXIT_PORT_IN_USE
        assert alive(leader) and alive(listener), proc.text
        assert f"by pid {listener} (" in proc.text and "its process group was left alone: " in proc.text
        assert refusal in proc.text
    assert not records(tmp_path / "record.jsonl")  # nothing was started
