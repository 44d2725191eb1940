"""Supervision of a stand-in server (server/supervisor.py): readiness, log forwarding, restart with backoff,
no restart after a usage error or a repeated start failure, external mode, and the stop of the whole group."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from support.in_process_supervisor import InProcessSupervisor, in_a_long_backoff
from support.processes import free_port
from support.scripted_server import ScriptedServer
from support.supervisor_process import (
    StartSupervisor,
    alive,
    fake_env,
    records,
    wait_for,
    write_config,
)

from cosmos_reasoner_ros.server import cli, errors, versions, watchdog


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
