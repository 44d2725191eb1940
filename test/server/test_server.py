"""cosmos-reasoner-server: the flag table and the command each vLLM release gets, version detection, settings,
pre-start checks, and supervision of a stand-in server process (readiness, log forwarding, restart with
backoff, no restart after a usage error or a repeated start failure, stopping the whole process group)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support import vllm_tier
from support.fake_vllm import FAKE_VLLM, fake_dist
from support.in_process_supervisor import InProcessSupervisor, in_a_long_backoff
from support.processes import free_port
from support.scripted_server import ScriptedServer
from support.supervisor_process import (
    StartSupervisor,
    alive,
    fake_env,
    reaper_pid,
    records,
    running_reaper,
    wait_for,
    write_config,
)

from cosmos_reasoner_ros.server import cli, errors, settings, supervisor, versions, watchdog
from cosmos_reasoner_ros.server.settings import ServerSettings


def test_missing_executable_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(
        [
            "--mode",
            "qwen3vl",
            "--model",
            str(tmp_path),
            "--port",
            str(free_port()),
            "--set",
            "executable=/nonexistent/vllm",
            "--media-dir",
            str(tmp_path / "m"),
        ]
    )
    assert code == errors.EXIT_NO_EXECUTABLE
    assert "/nonexistent/vllm" in capsys.readouterr().err


def test_missing_model_path_is_reported(tmp_path: Path, fake_vllm: Path, capsys) -> None:
    code = cli.main(
        [
            "--mode",
            "qwen3vl",
            "--model",
            str(tmp_path / "nope"),
            "--port",
            str(free_port()),
            "--set",
            f"executable={fake_vllm}",
            "--media-dir",
            str(tmp_path / "m"),
        ]
    )
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
        code = cli.main(
            [
                "--mode",
                "qwen3vl",
                "--model",
                str(tmp_path),
                "--port",
                str(port),
                "--set",
                f"executable={fake_vllm}",
                "--media-dir",
                str(tmp_path / "m"),
            ]
        )
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
def test_a_refused_command_line_is_not_restarted(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    """The H200 failure: vLLM 0.26.0 refuses --trust-request-mm-kwargs with exit code 2. Built for a release
    that has the flag, the command is refused once and the supervisor stops with the server's message."""
    allowed = json.dumps(sorted(versions.RELEASES["0.26.0"].flags))
    config = write_config(tmp_path, fake_vllm, free_port(), vllm_version="0.32.0", max_restarts=5)
    proc = start_supervisor(config, fake_env(tmp_path, FAKE_VLLM_FLAGS=allowed))
    assert proc.finish() == errors.EXIT_SERVER_USAGE
    assert "unrecognized arguments: --trust-request-mm-kwargs" in proc.text
    assert "restart 1/" not in proc.text and not records(tmp_path / "record.jsonl")  # started once, refused


@pytest.mark.slow
def test_the_detected_release_gets_a_command_it_accepts(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    """The same stand-in, now detected as 0.26.0 through `--version`: no trust flag, and it serves."""
    allowed = json.dumps(sorted(versions.RELEASES["0.26.0"].flags))
    port = free_port()
    config = write_config(tmp_path, fake_vllm, port, vllm_version="auto")
    proc = start_supervisor(config, fake_env(tmp_path, FAKE_VLLM_FLAGS=allowed, FAKE_VLLM_VERSION="0.26.0"))
    assert proc.read_until("READY ") == f"READY http://127.0.0.1:{port}"
    assert "vLLM 0.26.0 (`" in proc.text and "flag table row 0.26.0" in proc.text
    assert "note: trust_request_mm_kwargs: not emitted" in proc.text
    assert "--trust-request-mm-kwargs" not in records(tmp_path / "record.jsonl")[0]["argv"]
    assert json.loads((tmp_path / "ready.json").read_text())["vllm_version"] == "0.26.0"
    assert proc.stop() == errors.EXIT_OK


@pytest.mark.slow
def test_the_same_failure_twice_before_health_is_not_restarted_again(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    config = write_config(tmp_path, fake_vllm, free_port(), max_restarts=5)
    proc = start_supervisor(config, fake_env(tmp_path, FAKE_VLLM_BEHAVIOUR="crash"))
    assert proc.finish() == errors.EXIT_SERVER_START_FAILED
    assert len(records(tmp_path / "record.jsonl")) == 2
    assert "no kernel image is available" in proc.lines[-1]  # the server's message, last
    assert "restart 1/5" in proc.text and "restart 2/5" not in proc.text


@pytest.mark.slow
def test_ready_restart_after_death_and_stop_of_the_whole_group(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    port = free_port()
    env = fake_env(tmp_path, COSMOS_REASONER_API_KEY="sk-never-logged")
    proc = start_supervisor(write_config(tmp_path, fake_vllm, port, gpus="0,1"), env)
    assert proc.read_until("READY ") == f"READY http://127.0.0.1:{port}"
    assert any(line == "[vllm] fake vllm ready" for line in proc.lines)  # forwarded with the prefix
    ready = json.loads((tmp_path / "ready.json").read_text())
    first = records(tmp_path / "record.jsonl")[0]
    assert ready["pid"] == first["pid"] and ready["starts"] == 1
    assert ready["base_url"] == f"http://127.0.0.1:{port}/v1"
    assert first["argv"][:2] == ["serve", str(tmp_path)]
    assert first["env"]["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert first["env"]["TMPDIR"] == str(tmp_path / "cache" / "tmp")
    assert first["env"]["FAKE_EXTRA"] == "yes"
    assert first["env"]["VLLM_API_KEY"] == "sk-never-logged"  # the key reached the server...
    assert first["env"]["_ROS_WHEELS_BOOTSTRAP_COMPLETE"] is None
    assert os.getpgid(first["pid"]) == first["pid"]  # its own process group

    os.killpg(first["pid"], signal.SIGKILL)  # a crash of the server and its workers
    assert proc.read_until("READY ") == f"READY http://127.0.0.1:{port}"
    second = records(tmp_path / "record.jsonl")[1]
    assert second["pid"] != first["pid"]
    assert json.loads((tmp_path / "ready.json").read_text())["starts"] == 2
    assert any("restart 1/5" in line for line in proc.lines)

    assert proc.stop() == errors.EXIT_OK
    assert not alive(second["pid"]) and not alive(second["worker"])  # the whole group is gone
    assert not (tmp_path / "ready.json").exists()
    assert "sk-never-logged" not in proc.text  # ...and never appeared in its log


@pytest.mark.slow
def test_sigint_stops_too_and_sigkill_follows_an_ignored_sigterm(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    port = free_port()
    proc = start_supervisor(
        write_config(tmp_path, fake_vllm, port, stop_grace_s=1.0),
        fake_env(tmp_path, FAKE_VLLM_BEHAVIOUR="ignore_term"),
    )
    proc.read_until("READY ")
    server = records(tmp_path / "record.jsonl")[0]
    started = time.monotonic()
    proc.proc.send_signal(signal.SIGINT)
    assert proc.finish() == errors.EXIT_OK
    assert time.monotonic() - started > 0.9  # SIGKILL only after stop_grace_s
    assert any("SIGKILL" in line for line in proc.lines)
    assert not alive(server["pid"]) and not alive(server["worker"])


@pytest.mark.slow
def test_gives_up_after_bounded_restarts_with_growing_backoff(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    config = write_config(tmp_path, fake_vllm, free_port(), max_restarts=3, restart_backoff_s=0.2)
    proc = start_supervisor(config, fake_env(tmp_path, FAKE_VLLM_BEHAVIOUR="exit"))
    started = time.monotonic()
    assert proc.finish() == errors.EXIT_GAVE_UP
    assert len(records(tmp_path / "record.jsonl")) == 4  # the first start and three restarts
    assert time.monotonic() - started >= 0.2 + 0.4 + 0.8  # backoff doubles
    assert any("giving up" in line for line in proc.lines)
    assert "engine died" in proc.lines[-1]  # with the last failure's message
    # Each dead server's worker was stopped with it (they would hold the port and memory).
    assert not any(alive(r["worker"]) for r in records(tmp_path / "record.jsonl"))


@pytest.mark.slow
def test_a_headless_host_is_watched_without_health_checks(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    """A secondary host of multi-node data parallelism has no API server: never READY, never timed out,
    restarted when it dies."""
    secondary = {
        "data_parallel_size": 4,
        "data_parallel_size_local": 2,
        "data_parallel_start_rank": 2,
        "headless": True,
        "start_timeout_s": 1.0,  # would stop a server that is not healthy in time: not this one
    }
    proc = start_supervisor(write_config(tmp_path, fake_vllm, free_port(), **secondary), fake_env(tmp_path))
    proc.read_until("[cosmos-reasoner-server] headless")
    first = wait_for(lambda: records(tmp_path / "record.jsonl"))[0]
    assert (
        "--headless" in first["argv"]
        and first["argv"][first["argv"].index("--data-parallel-start-rank") + 1] == "2"
    )
    time.sleep(2.0)  # past start_timeout_s
    assert proc.proc.poll() is None and not any(line.startswith("READY") for line in proc.lines)
    os.killpg(first["pid"], signal.SIGKILL)
    proc.read_until("[cosmos-reasoner-server] server exit code")
    wait_for(lambda: len(records(tmp_path / "record.jsonl")) == 2)
    assert proc.stop() == errors.EXIT_OK


@pytest.mark.slow
def test_start_timeout_stops_the_server(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    config = write_config(tmp_path, fake_vllm, free_port(), start_timeout_s=1.0)
    proc = start_supervisor(config, fake_env(tmp_path, FAKE_VLLM_BEHAVIOUR="never_ready"))
    assert proc.finish() == errors.EXIT_NOT_READY
    server = records(tmp_path / "record.jsonl")[0]
    assert not alive(server["pid"]) and not alive(server["worker"])
    assert any("start_timeout_s" in line for line in proc.lines)


def test_external_mode_waits_for_the_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ready = tmp_path / "ready.json"
    with ScriptedServer() as server:
        code = cli.main(["--mode", "external", "--server-url", server.base_url, "--ready-file", str(ready)])
    assert code == errors.EXIT_OK
    assert f"READY {server.url}" in capsys.readouterr().out.splitlines()
    assert json.loads(ready.read_text())["url"] == server.url


def test_external_mode_gives_up_when_nothing_answers() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    code = cli.main(["--mode", "external", "--server-url", url, "--start-timeout-s", "0.5"])
    assert code == errors.EXIT_NOT_READY  # how soon (goal: within 10 s): bench/time_bounds.py


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
        code = cli.main(
            [
                "--mode",
                "qwen3vl",
                "--model",
                str(tmp_path),
                "--port",
                str(port),
                "--vllm-version",
                "0.26.0",
                "--set",
                f"executable={fake_vllm}",
                "--media-dir",
                str(tmp_path / "m"),
            ]
        )
        assert code == errors.EXIT_PORT_IN_USE
        err = capsys.readouterr().err
        assert f"pid {holder.pid}" in err and "socket" in err  # who holds it, and its command
        assert holder.poll() is None  # not ours: left alone
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_a_frozen_server_is_killed_and_restarted_within_the_grace(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    """Before: vLLM stopped (SIGSTOP) with /health timing out for 30 s: nothing said, nothing restarted, the
    ready file kept. Now: past health_grace_s the group is killed and restarted, counted and said."""
    port = free_port()
    # A grace far above a /health check's own 5 s: a stand-in slow to answer on a busy machine is not
    # condemned before the test freezes it.
    config = write_config(tmp_path, fake_vllm, port, health_grace_s=10.0, stop_grace_s=1.0, max_restarts=3)
    proc = start_supervisor(config, fake_env(tmp_path))
    proc.read_until("READY ")
    frozen = records(tmp_path / "record.jsonl")[0]
    assert "did not answer /health" not in proc.text
    os.killpg(frozen["pid"], signal.SIGSTOP)
    line = proc.read_until("[cosmos-reasoner-server] server did not answer /health")
    assert "and is stopped (health_grace_s 10): frozen, killed" in line and "restart 1/3" in line
    assert proc.read_until("READY ") == f"READY http://127.0.0.1:{port}"
    assert not alive(frozen["pid"]) and not alive(frozen["worker"])
    ready = json.loads((tmp_path / "ready.json").read_text())
    assert ready["restarts"] == 1 and "/health" in ready["last_restart_reason"] and ready["starts"] == 2
    assert proc.stop() == errors.EXIT_OK


@pytest.mark.slow
def test_a_busy_server_is_not_taken_for_a_frozen_one(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    """Before: two failed /health checks over health_grace_s were "frozen", so a server whose event loop a
    long prefill starved (silent, but working) was killed with every request in flight. Now it is busy: said,
    left to work, and killed only past health_busy_grace_s."""
    port = free_port()
    config = write_config(
        tmp_path,
        fake_vllm,
        port,
        # Short graces, the busy one four times the other: the kill must come after the busy grace, not at
        # the grace; the fake burns a core until then (10 s and 40 s took this test 44 s on CI's 2 cores).
        health_grace_s=4.0,
        health_busy_grace_s=16.0,
        stop_grace_s=1.0,
        max_restarts=3,
    )
    proc = start_supervisor(config, fake_env(tmp_path, FAKE_VLLM_BEHAVIOUR="busy_on_usr1"))
    proc.read_until("READY ")
    busy = records(tmp_path / "record.jsonl")[0]
    os.kill(busy["pid"], signal.SIGUSR1)  # silent from now on, burning CPU
    line = proc.read_until(f"[cosmos-reasoner-server] the server (pid {busy['pid']})")
    assert "but is using CPU: busy, not frozen; waiting up to 16 s (health_busy_grace_s)" in line
    assert alive(busy["pid"]) and len(records(tmp_path / "record.jsonl")) == 1  # past the grace, alive
    line = proc.read_until("[cosmos-reasoner-server] server did not answer /health")
    assert "while using CPU (health_busy_grace_s 16): busy too long, killed; restart 1/3" in line
    silent = int(line.split("did not answer /health for ")[1].split(" s")[0])
    assert silent >= 16  # not at the grace (4 s): after the busy grace (printed rounded: 16.4 s is '16')
    assert proc.read_until("READY ") == f"READY http://127.0.0.1:{port}"
    assert proc.stop() == errors.EXIT_OK


def test_silence_is_frozen_only_without_progress() -> None:
    """watchdog.HealthWatch on made-up checks: silence with the group stopped, or using no CPU for the grace,
    is frozen; silence with CPU used is busy until the busy grace; unreadable activity falls back to
    silence alone."""
    from cosmos_reasoner_ros.server.watchdog import GroupActivity, HealthWatch

    def watch(activities: list[GroupActivity | None], busy_grace_s: float = 100.0) -> HealthWatch:
        health = HealthWatch(10.0, 0.0, busy_grace_s)
        for t, activity in enumerate(activities, start=1):
            health.observe(False, 5.0 * t, activity)  # a failed check every 5 s
        return health

    working = [GroupActivity(100 * t, 2, False) for t in range(1, 5)]  # CPU used between every check
    assert watch(working).busy(20.0) and not watch(working).frozen(20.0)
    assert "busy too long" in watch(working, busy_grace_s=15.0).frozen(20.0)
    working_long = [GroupActivity(100 * t, 2, False) for t in range(1, 201)]  # 1,000 s of checks
    assert not watch(working_long, busy_grace_s=0.0).frozen(1000.0)  # 0: a busy server is never killed
    stopped = [GroupActivity(100, 2, True)] * 4
    assert "is stopped" in watch(stopped).frozen(20.0)
    idle = [GroupActivity(100, 2, False)] * 4  # no CPU since the first check
    assert "used no CPU for 20 s" in watch(idle).frozen(20.0)
    worked_then_stuck = [GroupActivity(100, 2, False), GroupActivity(200, 2, False), *idle[:2]]
    assert not watch(worked_then_stuck).frozen(20.0)  # CPU used at 10 s: idle only 10 s
    assert watch(worked_then_stuck).frozen(25.0)
    unreadable: list[GroupActivity | None] = [None] * 4
    assert watch(unreadable).frozen(20.0).endswith("(health_grace_s 10): frozen")
    assert not watch(working).frozen(9.0) and not watch(stopped).frozen(10.0)  # within the grace


@pytest.mark.slow
def test_outside_kills_before_ready_are_restarts_not_the_same_failure_twice(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    """Before: two outside SIGKILLs before /health (the same output both times) ended the supervisor with
    exit 10 although max_restarts was 5. A death by a signal is a restart like any other."""
    port = free_port()
    proc = start_supervisor(
        write_config(tmp_path, fake_vllm, port, max_restarts=5), fake_env(tmp_path, FAKE_VLLM_DELAY="10")
    )
    for n in (1, 2):
        server = wait_for(
            lambda n=n: (
                len(records(tmp_path / "record.jsonl")) >= n and records(tmp_path / "record.jsonl")[n - 1]
            )
        )
        os.killpg(server["pid"], signal.SIGKILL)
        proc.read_until(f"[cosmos-reasoner-server] server exit code -9 (killed by SIGKILL); restart {n}/5")
    assert proc.read_until("READY ") == f"READY http://127.0.0.1:{port}"
    assert len(records(tmp_path / "record.jsonl")) == 3
    assert proc.stop() == errors.EXIT_OK


def test_an_empty_model_directory_is_refused_before_starting(tmp_path: Path, fake_vllm: Path, capsys) -> None:
    """Before: vLLM started on an empty directory and exited 10 a minute later quoting a pydantic web page."""
    empty = tmp_path / "empty"
    empty.mkdir()
    code = cli.main(
        [
            "--mode",
            "qwen3vl",
            "--model",
            str(empty),
            "--port",
            str(free_port()),
            "--vllm-version",
            "0.26.0",
            "--set",
            f"executable={fake_vllm}",
            "--media-dir",
            str(tmp_path / "m"),
        ]
    )
    assert code == errors.EXIT_NO_MODEL
    assert "no config.json" in capsys.readouterr().err
    assert not records(tmp_path / "record.jsonl")  # nothing started


def test_structured_tasks_come_from_the_catalog_and_the_tasks_file(tmp_path: Path) -> None:
    from cosmos_reasoner_ros.server.grammar_check import structured_tasks

    shipped = structured_tasks(ServerSettings())
    assert set(shipped) == {
        "trajectory",
        "grounding_2d",
        "region_captions",
        "temporal_localization",
        "temporal_localization_mmss",
        "timestamp_query",
        "plausibility",
        "drive_path",
    }
    assert shipped["trajectory"].reasoning and not shipped["grounding_2d"].reasoning
    user = tmp_path / "tasks.yaml"
    schema = {"type": "object", "properties": {"t": {"type": "string", "pattern": "^x{0,300}$"}}}
    user.write_text(yaml.safe_dump({"tasks": {"mine": {"template": "x", "json_schema": schema}}}))
    with pytest.raises(
        errors.ConfigError, match=r"tasks_file: task mine: json_schema.*repeat \{0,300\}.*#863"
    ):
        structured_tasks(ServerSettings(tasks_file=str(user)))
    chosen = structured_tasks(ServerSettings(structured_tasks=("grounding_2d",)))
    assert list(chosen) == ["grounding_2d"]
    with pytest.raises(errors.ConfigError, match="structured_tasks: caption: not a task with a json_schema"):
        structured_tasks(ServerSettings(structured_tasks=("caption",)))
    with pytest.raises(errors.ConfigError, match="does not exist"):
        structured_tasks(ServerSettings(tasks_file=str(tmp_path / "missing.yaml")))


@pytest.mark.slow
@pytest.mark.grammar
@pytest.mark.skipif(bool(vllm_tier.missing_reason()), reason=str(vllm_tier.missing_reason()))
def test_a_users_schema_vllms_backend_refuses_stops_the_start(
    tmp_path: Path, start_supervisor: StartSupervisor
) -> None:
    """The stand-in server in the vLLM environment's Python: the supervisor compiles the structured tasks
    with that environment's xgrammar (0.2.8) and vLLM's own front-end check before READY. A schema xgrammar
    does not support stops the start with exit code 2 naming the task; with backend auto vLLM hands it to
    llguidance."""
    fake = tmp_path / "fake-vllm"
    fake.write_text(f"#!{vllm_tier.vllm_python()} -S\n{FAKE_VLLM}")
    fake.chmod(0o755)
    (tmp_path / "config.json").write_text("{}")  # the model directory (tmp_path) is a checkpoint
    user = tmp_path / "tasks.yaml"
    schema = {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 5}}, "required": ["n"]}
    user.write_text(yaml.safe_dump({"tasks": {"counting": {"template": "How many?", "json_schema": schema}}}))
    xgrammar = {"backend": "xgrammar", "disable_any_whitespace": True}  # the default is guidance
    config = write_config(
        tmp_path, fake, free_port(), tasks_file=str(user), structured_outputs=xgrammar, start_timeout_s=120.0
    )
    proc = start_supervisor(config, fake_env(tmp_path))
    assert proc.finish(timeout_s=180) == errors.EXIT_CONFIG
    assert "vLLM 0.26.0 cannot use the structured output of these tasks" in proc.text
    assert "task counting: its json_schema refused by vLLM's front end with xgrammar 0.2.8" in proc.text
    assert "READY" not in proc.text and "task trajectory" not in proc.text
    config = write_config(
        tmp_path,
        fake,
        free_port(),
        tasks_file=str(user),
        structured_outputs={"backend": "auto"},
        start_timeout_s=120.0,
    )
    proc = start_supervisor(config, fake_env(tmp_path))
    proc.read_until("READY ", timeout_s=180)
    assert (
        "grammar check: the json_schema of trajectory" in proc.text and "counting compile with" in proc.text
    )
    assert proc.stop() == errors.EXIT_OK


@pytest.mark.slow
@pytest.mark.grammar
@pytest.mark.skipif(bool(vllm_tier.missing_reason()), reason=str(vllm_tier.missing_reason()))
def test_a_grammar_that_accepts_what_its_schema_refuses_is_reported(
    tmp_path: Path, start_supervisor: StartSupervisor
) -> None:
    """The start-up check matches each compiled grammar against answers generated from its schema and their
    mutations (grammar_fidelity.py), as vLLM 0.26.0 compiles it (xgrammar 0.2.8 of the vLLM environment, no
    free whitespace, ", " and ": "): a user's timestamp_query with the clock pattern as it shipped before is
    named with an example answer its schema refuses, and xgrammar's strings that take bytes not UTF-8; the
    start goes on. The shipped schemas hold with the shipped backend (guidance)."""
    fake = tmp_path / "fake-vllm"
    fake.write_text(f"#!{vllm_tier.vllm_python()} -S\n{FAKE_VLLM}")
    fake.chmod(0o755)
    (tmp_path / "config.json").write_text("{}")
    clock = "^([0-9]{1,2}:)?[0-9]{1,2}:[0-9]{1,2}([.][0-9]{1,3})?$"
    time_of_day = {
        "anyOf": [{"type": "number", "minimum": 0, "maximum": 86400}, {"type": "string", "pattern": clock}]
    }
    schema = {
        "type": "object",
        "properties": {"start": time_of_day, "end": time_of_day},
        "required": ["start", "end"],
        "additionalProperties": False,
    }
    user = tmp_path / "tasks.yaml"
    user.write_text(yaml.safe_dump({"tasks": {"timestamp_query": {"json_schema": schema}}}))
    xgrammar = {"backend": "xgrammar", "disable_any_whitespace": True}
    guidance = settings.ServerSettings().structured_outputs  # the shipped default
    for tasks_file, structured in ((str(user), xgrammar), ("", guidance)):
        config = write_config(
            tmp_path,
            fake,
            free_port(),
            tasks_file=tasks_file,
            structured_outputs=structured,
            start_timeout_s=120.0,
        )
        proc = start_supervisor(config, fake_env(tmp_path))
        proc.read_until("READY ", timeout_s=180)
        assert "grammar check: the json_schema of trajectory" in proc.text
        warned = [line for line in proc.text.splitlines() if "grammar check: WARNING" in line]
        if tasks_file:
            assert len(warned) == 2, warned
            clock, utf8 = sorted(warned, key=lambda line: "timestamp_query: xgrammar" not in line)
            assert (
                "task timestamp_query: xgrammar 0.2.8 (none whitespace) accepts answers its json_schema "
                "refuses" in clock
            )
            found = re.search(r"""e\.g\. '\{".*matches none of anyOf \(.* does not match""", clock)
            assert found, clock
            assert "as [0-9][0-9]?" in clock
            # Every xgrammar lets a surrogate's bytes into a free-text string: named once, with its tasks.
            assert (
                "xgrammar 0.2.8 lets the strings of trajectory, grounding_2d, temporal_localization" in utf8
            )
            assert "not UTF-8" in utf8 and "backend guidance refuses them" in utf8
        else:
            assert warned == [], warned
            assert "compile with llguidance" in proc.text
            assert "grammar check: the grammars accept the" in proc.text
        assert proc.stop() == errors.EXIT_OK


@pytest.mark.slow
def test_a_stop_during_the_backoff_signals_no_group_of_a_server_that_is_gone(
    tmp_path: Path, fake_vllm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: after a server's exit its reaped leader stayed the supervisor's server, and a stop during the
    backoff (up to restart_backoff_max_s) sent SIGTERM, SIGCONT and SIGKILL to its process group id, which
    may by then be another program's (pid_max 32768 on many Jetson images)."""
    with in_a_long_backoff(tmp_path, fake_vllm) as run:
        gone = records(tmp_path / "record.jsonl")[0]
        assert not alive(gone["pid"]) and not alive(gone["worker"])  # its workers went with it
        sent: list[tuple[int, int]] = []
        killpg = os.killpg
        monkeypatch.setattr(os, "killpg", lambda pgid, sig: (sent.append((pgid, sig)), killpg(pgid, sig))[1])
        run.stop()
    assert run.error is None
    assert [sig for pgid, sig in sent if pgid == gone["pid"]] == []


@pytest.mark.slow
@pytest.mark.parametrize("ending", ["exits", "freezes"])
def test_every_signal_goes_to_a_process_group_that_is_still_the_servers(
    tmp_path: Path, fake_vllm: Path, monkeypatch: pytest.MonkeyPatch, ending: str
) -> None:
    """Once a server's leader is reaped its group id may be given to another program: no signal may go to a
    group that has neither its leader's entry (a zombie keeps it) nor a member left. Before: after a frozen
    server was stopped and reaped, and after an exit, the group id was signalled again."""
    sent: list[tuple[int, int, bool]] = []  # (pgid, signal, the group id was still held)
    killpg = os.killpg

    def recording(pgid: int, sig: int) -> None:
        held = Path(f"/proc/{pgid}").exists() or bool(watchdog.group_members(pgid))
        sent.append((pgid, sig, held))
        killpg(pgid, sig)

    monkeypatch.setattr(os, "killpg", recording)
    behaviour = {"exits": {"FAKE_VLLM_BEHAVIOUR": "exit"}, "freezes": {}}[ending]
    with InProcessSupervisor(
        tmp_path, fake_vllm, health_grace_s=10.0, stop_grace_s=1.0, env=behaviour
    ) as run:
        if ending == "freezes":
            run.wait_line("READY ")
            os.killpg(records(tmp_path / "record.jsonl")[0]["pid"], signal.SIGSTOP)
        run.wait_line("[cosmos-reasoner-server] server ", 120.0)  # ... exit code 3 / did not answer; restart
        wait_for(lambda: len(records(tmp_path / "record.jsonl")) >= 2)  # restarted
    first = records(tmp_path / "record.jsonl")[0]["pid"]
    assert any(pgid == first for pgid, _, _ in sent)  # it was stopped through its group
    assert [(pgid, sig) for pgid, sig, held in sent if not held] == []


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


def test_group_members_are_the_live_processes_of_a_group() -> None:
    from cosmos_reasoner_ros.server import group_members

    leader = subprocess.Popen(
        [
            sys.executable,
            "-S",
            "-c",
            "import subprocess, sys, time\n"
            "c = subprocess.Popen([sys.executable, '-S', '-c', 'import time; time.sleep(600)'])\n"
            "print(c.pid, flush=True); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert leader.stdout is not None
        child = int(leader.stdout.readline())
        assert sorted(group_members(leader.pid)) == sorted([leader.pid, child])
        os.kill(child, signal.SIGKILL)  # a zombie: its parent never waits for it
        wait_for(lambda: group_members(leader.pid) == [leader.pid])  # zombies do not count
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()
        leader.stdout.close()
    assert group_members(leader.pid) == []


# A grammar backend for the probe (grammar_probe.py) on PYTHONPATH, ahead of any installed one: "slow" never
# finishes importing, "refusing" fails every compilation.
FAKE_XGRAMMAR = {
    "slow": "import time\ntime.sleep(600)\n",
    "refusing": textwrap.dedent(
        """
        class VocabType:
            RAW = 0
        class TokenizerInfo:
            def __init__(self, *args, **kwargs):
                pass
        class Grammar:
            @staticmethod
            def from_json_schema(schema):
                return None
        class GrammarCompiler:
            def __init__(self, *args, **kwargs):
                pass
            def compile_json_schema(self, schema, any_whitespace=True):
                raise RuntimeError("the fake backend compiles nothing")
        """
    ),
}


def fake_xgrammar(tmp_path: Path, kind: str) -> Path:
    site = tmp_path / f"xgrammar-{kind}"
    site.mkdir()
    (site / "xgrammar.py").write_text(FAKE_XGRAMMAR[kind])
    fake_dist(site, "xgrammar", "0.0.1")
    return site


def grammar_probe_of(supervisor_pid: int) -> int | None:
    """The grammar probe the supervisor started (from a thread of its: any of its tasks' children)."""
    for children in Path(f"/proc/{supervisor_pid}/task").glob("*/children"):
        for child in map(int, children.read_text().split()):
            with contextlib.suppress(OSError):
                if b"grammar_probe.py" in Path(f"/proc/{child}/cmdline").read_bytes():
                    return child
    return None


@pytest.mark.slow
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_the_grammar_probe_never_outlives_its_supervisor(
    tmp_path: Path, fake_vllm: Path, how: signal.Signals, start_supervisor: StartSupervisor
) -> None:
    """Before: the probe ran on a daemon thread through subprocess.run (up to 300 s): a SIGTERM or SIGKILL of
    the supervisor during the start left it running, a Python that imports vLLM, several hundred MB."""
    site = fake_xgrammar(tmp_path, "slow")
    config = write_config(
        tmp_path, fake_vllm, free_port(), start_timeout_s=600.0, env={"PYTHONPATH": str(site)}
    )
    proc = start_supervisor(config, fake_env(tmp_path, FAKE_VLLM_BEHAVIOUR="never_ready"))
    probe = wait_for(lambda: grammar_probe_of(proc.proc.pid))
    server = wait_for(lambda: records(tmp_path / "record.jsonl"))[0]
    proc.proc.send_signal(how)
    proc.finish()
    wait_for(lambda: not alive(probe))
    wait_for(lambda: not alive(server["pid"]))


@pytest.mark.slow
def test_a_schema_the_backend_cannot_compile_stops_the_start_before_the_server_is_healthy(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    """Before: the grammar check's verdict was collected only once /health answered: its exit 2 came after
    the model had loaded (minutes on a GPU; here: never, the server never becomes healthy)."""
    site = fake_xgrammar(tmp_path, "refusing")
    config = write_config(
        tmp_path, fake_vllm, free_port(), start_timeout_s=600.0, env={"PYTHONPATH": str(site)}
    )
    proc = start_supervisor(config, fake_env(tmp_path, FAKE_VLLM_BEHAVIOUR="never_ready"))
    assert proc.finish() == errors.EXIT_CONFIG, proc.text
    assert "vLLM 0.26.0 cannot use the structured output of these tasks" in proc.text
    assert "the fake backend compiles nothing" in proc.text and "READY" not in proc.text
    server = records(tmp_path / "record.jsonl")[0]
    assert not alive(server["pid"]) and not alive(server["worker"])


@pytest.mark.slow
def test_a_server_frozen_during_the_warm_up_is_not_announced_ready(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    """Before: only the process and the stop were checked after the warm-up: a server frozen during it (every
    warm-up request unanswered) was announced READY and its ready file written, to be killed
    health_grace_s later."""
    port = free_port()
    config = write_config(tmp_path, fake_vllm, port, warmup_timeout_s=3.0, start_timeout_s=600.0)
    env = fake_env(tmp_path, FAKE_VLLM_FREEZE_ON_POST=str(tmp_path / "frozen-once"))
    proc = start_supervisor(config, env)
    proc.read_until("[cosmos-reasoner-server] the server stopped answering /health during the checks", 120.0)
    assert not any(line.startswith("READY") for line in proc.lines)
    assert not (tmp_path / "ready.json").exists()
    server = records(tmp_path / "record.jsonl")[0]
    os.kill(server["pid"], signal.SIGCONT)  # it answers again: checked and warmed up again, then READY
    assert proc.read_until("READY ") == f"READY http://127.0.0.1:{port}"
    assert len(records(tmp_path / "record.jsonl")) == 1  # the same server, not a restart
    assert proc.stop() == errors.EXIT_OK


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
