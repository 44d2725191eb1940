"""The command line of `cosmos-reasoner-server` (server/cli.py): flags over the config, --print-command, the
exit codes of a bad config, and its signal handling."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support.paths import ROOT
from support.processes import free_port
from support.serve_argv import value
from support.supervisor_process import (
    StartSupervisor,
    alive,
    fake_env,
    records,
    write_config,
)

from cosmos_reasoner_ros.server import cli, errors


def test_without_config_an_install_uses_its_installed_server_yaml(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """As pip installs it: no package.xml beside the modules, config in <prefix>/share/<package>/config."""
    from cosmos_reasoner_ros import package_files

    installed = tmp_path / "prefix" / "share" / "cosmos_reasoner_ros" / "config" / "server.yaml"
    installed.parent.mkdir(parents=True)
    installed.write_text("mode: native\nport: 8444\n")
    monkeypatch.setattr(package_files, "_SOURCE_ROOT", tmp_path / "site-packages")
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "prefix"))
    monkeypatch.setitem(sys.modules, "ament_index_python.packages", None)  # no ament index either
    chosen = cli.settings_from_args(cli.parse_args([]))
    assert (chosen.mode, chosen.port) == ("native", 8444)


def test_a_server_url_with_credentials_is_refused_without_showing_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = cli.main(["--mode", "external", "--server-url", "http://robot:s3cr3t@127.0.0.1:9/v1"])
    err = capsys.readouterr().err
    assert code == errors.EXIT_CONFIG and "server_url: must not contain credentials" in err
    assert "s3cr3t" not in err and "<redacted>@127.0.0.1:9" in err


def test_bad_supervision_numbers_exit_2_naming_them_without_a_traceback(tmp_path: Path) -> None:
    """As an integrator runs it: the command exits 2 at once, each bad number named, no traceback."""
    config = tmp_path / "server.yaml"
    config.write_text(
        "mode: qwen3vl\nmodel: /nonexistent\nhealth_period_s: .nan\nrestart_backoff_s: -1\n"
        "stop_grace_s: .inf\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "cosmos_reasoner_ros.server", "--config", str(config)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=fake_env(tmp_path),
        timeout=60,
    )
    assert done.returncode == errors.EXIT_CONFIG, done.stderr
    assert all(name in done.stderr for name in ("health_period_s", "restart_backoff_s", "stop_grace_s"))
    assert "Traceback" not in done.stderr


def test_command_line_flags_override_the_config() -> None:
    args = cli.parse_args(
        [
            "--mode",
            "native",
            "--model",
            "/m",
            "--port",
            "9100",
            "--gpus",
            "2,3",
            "--tensor-parallel-size",
            "2",
            "--cameras",
            "2",
            "--set",
            "enforce_eager=true",
            "--set",
            'media_io_kwargs={"video": {"num_frames": 8}}',
            "--set",
            "extra_args=--seed 7",
            "--set",
            'executable=["/venv/bin/python", "-m", "vllm.entrypoints.cli.main"]',
        ]
    )
    chosen = cli.settings_from_args(args)
    assert (chosen.mode, chosen.model, chosen.port, chosen.gpus) == ("native", "/m", 9100, "2,3")
    assert chosen.tensor_parallel_size == 2 and chosen.enforce_eager is True and chosen.cameras == 2
    assert chosen.media_io_kwargs == {"video": {"num_frames": 8}}
    assert chosen.extra_args == ("--seed", "7")
    # JSON for lists, as for mappings (a plain string is still split at spaces).
    assert chosen.executable == ("/venv/bin/python", "-m", "vllm.entrypoints.cli.main")


def test_print_command_shows_the_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        cli.main(["--print-command", "--mode", "native", "--port", "8123", "--vllm-version", "0.26.0"]) == 0
    )
    shown = json.loads(capsys.readouterr().out)
    assert (shown["vllm_version"], shown["flag_table_row"], shown["detected"]) == (
        "0.26.0",
        "0.26.0",
        "set by vllm_version",
    )
    cmd = shown["command"]
    assert cmd[:3] == ["vllm", "serve", "nvidia/Cosmos3-Nano"] and value(cmd, "--port") == "8123"


def test_the_old_module_path_still_runs_the_command_line() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cosmos_reasoner_ros.server",
            "--print-command",
            "--vllm-version",
            "0.21.0",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        },
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["vllm_version"] == "0.21.0"


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_repeated_signals_still_give_exit_code_0(
    tmp_path: Path, fake_vllm: Path, signum: int, start_supervisor: StartSupervisor
) -> None:
    """30 signals 20 ms apart, as from an impatient operator or a service manager: before, one arriving after
    the loop had put back the default action killed the supervisor (-15), where one signal gives 0."""
    port = free_port()
    proc = start_supervisor(write_config(tmp_path, fake_vllm, port), fake_env(tmp_path))
    assert proc.read_until("READY ") == f"READY http://127.0.0.1:{port}"
    server = records(tmp_path / "record.jsonl")[0]
    for _ in range(30):
        if proc.proc.poll() is not None:
            break
        proc.proc.send_signal(signum)
        time.sleep(0.02)
    assert proc.finish() == errors.EXIT_OK, proc.text
    assert not alive(server["pid"]) and not alive(server["worker"])
    assert "Traceback" not in proc.text


# What both signal scripts below run _serve with: run() waits on its stop Event without pause, as the
# supervisor's loops do.
_BUSY = """
import os, random, signal, sys, threading, time
from cosmos_reasoner_ros.server import cli

class Busy:
    def __init__(self):
        self.event = threading.Event()
    def stop(self, reason=""):
        self.event.set()
    def run(self):
        while not self.event.wait(0):
            pass
        return 0
"""


_STOP_STORM = _BUSY + textwrap.dedent(
    """

    def sigterm_soon():  # at a random moment once _serve's handler is there (a busy machine can delay it)
        while not callable(signal.getsignal(signal.SIGTERM)):
            time.sleep(0.0005)
        time.sleep(random.uniform(0.001, 0.005))
        os.kill(os.getpid(), signal.SIGTERM)

    for _ in range(int(sys.argv[1])):
        threading.Thread(target=sigterm_soon, daemon=True).start()
        assert cli._serve(Busy()) == 0
    print("stopped every time", flush=True)
    """
)


def test_sigterm_never_deadlocks_the_supervisors_stop() -> None:
    """A signal handler that sets an Event the main thread waits on can wait for itself for ever (the Event's
    lock held by the very thread it interrupted): the supervisor stopped by SIGTERM once hung so in CI, and
    the same loop on the main thread hung within 2,000 SIGTERMs here. cli._serve keeps run() off the main
    thread: 300 SIGTERMs at random moments all stop it."""
    proc = subprocess.run(
        [sys.executable, "-c", _STOP_STORM, "300"], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert proc.returncode == 0 and "stopped every time" in proc.stdout, proc.stdout + proc.stderr


_FLOOD = _BUSY + textwrap.dedent(
    """

    def flood():  # alternating SIGTERM and SIGINT as fast as they go, once _serve's handler is there
        while not callable(signal.getsignal(signal.SIGTERM)):
            time.sleep(0.0005)
        for i in range(3000):
            os.kill(os.getpid(), (signal.SIGTERM, signal.SIGINT)[i % 2])

    for _ in range(int(sys.argv[1])):
        sender = threading.Thread(target=flood, daemon=True)
        sender.start()
        assert cli._serve(Busy()) == 0
        sender.join()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # _serve left them ignored: the next round waits
    print("stopped every time", flush=True)
    """
)


def test_a_flood_of_signals_never_deadlocks_the_supervisor() -> None:
    """A handler runs inside another handler when signals come close together: one that set the supervisor's
    Event (a lock) waited for ever on the lock its interrupted self held. The handler only notes the signal
    now; 10 floods of 3000 alternating SIGTERM/SIGINT all stop it (before: a hang within a few floods)."""
    proc = subprocess.run(
        [sys.executable, "-c", _FLOOD, "10"], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert proc.returncode == 0 and "stopped every time" in proc.stdout, proc.stdout + proc.stderr
