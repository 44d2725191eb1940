"""The watch of a ready server (server/serving_watch.py): a frozen server killed and restarted within the
grace, a busy one left to work until its own grace."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from support.processes import free_port
from support.supervisor_process import (
    StartSupervisor,
    alive,
    fake_env,
    records,
    write_config,
)

from cosmos_reasoner_ros.server import errors


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
