"""cosmos-reasoner-server: the vllm command line, settings, pre-start checks, and supervision of a stand-in
server process (readiness, log forwarding, restart with backoff, stopping the whole process group)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support.paths import ROOT
from support.scripted_server import ScriptedServer

from cosmos_reasoner_ros import server_supervisor as sup

# A stand-in for `vllm`: `serve MODEL ... --port P`; records its argv and pids, starts a worker child in its
# process group (like vLLM's engine core), then serves /health. FAKE_VLLM_* variables choose misbehaviours.
FAKE_VLLM = textwrap.dedent(
    """
    import http.server, json, os, signal, subprocess, sys, time
    argv = sys.argv[1:]
    port = int(argv[argv.index("--port") + 1])
    record = os.environ["FAKE_VLLM_RECORD"]
    worker = subprocess.Popen([sys.executable, "-S", "-c", "import time; time.sleep(600)"])
    with open(record, "a") as f:
        f.write(json.dumps({"argv": argv, "pid": os.getpid(), "worker": worker.pid,
                            "env": {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "TMPDIR",
                                    "VLLM_CACHE_ROOT", "FAKE_EXTRA",
                                    "_ROS_WHEELS_BOOTSTRAP_COMPLETE")}}) + "\\n")
    behaviour = os.environ.get("FAKE_VLLM_BEHAVIOUR", "ok")
    print("fake vllm starting on", port, flush=True)
    if behaviour == "exit":
        sys.exit(3)
    if behaviour == "ignore_term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if behaviour == "never_ready":
        time.sleep(600)
    time.sleep(float(os.environ.get("FAKE_VLLM_DELAY", "0")))

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
        def log_message(self, *args):
            pass

    print("fake vllm ready", flush=True)
    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
    """
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0): it has exited.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def wait_for(predicate, timeout_s: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def fake_vllm(tmp_path: Path) -> Path:
    script = tmp_path / "fake-vllm"
    # -S: no site packages (no ROS wheels' re-exec): the recorded pid is the process the supervisor started.
    script.write_text(f"#!{sys.executable} -S\n{FAKE_VLLM}")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path: Path) -> Iterator[None]:
    """Whatever a failing test leaves behind: the stand-in servers' process groups."""
    yield
    for record in records(tmp_path / "record.jsonl"):
        for pid in (record["pid"], record["worker"]):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


def records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class SupervisorProcess:
    """python -m cosmos_reasoner_ros.server_supervisor with a config file; a thread collects its output."""

    def __init__(self, config: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cosmos_reasoner_ros.server_supervisor", "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=ROOT,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def read_until(self, prefix: str, timeout_s: float = 20.0) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            if line is None:
                break
            self.lines.append(line)
            if line.startswith(prefix):
                return line
        raise AssertionError(f"no line starting with {prefix!r}; output:\n" + "\n".join(self.lines))

    def finish(self, timeout_s: float = 30.0) -> int:
        code = self.proc.wait(timeout=timeout_s)
        while (line := self._queue.get(timeout=5)) is not None:
            self.lines.append(line)
        return code


def write_config(tmp_path: Path, fake: Path, port: int, **settings) -> Path:
    base = {
        "mode": "qwen3vl",
        "model": str(tmp_path),
        "executable": [str(fake)],
        "port": port,
        "media_dir": str(tmp_path / "media"),
        "cache_dir": str(tmp_path / "cache"),
        "ready_file": str(tmp_path / "ready.json"),
        "health_period_s": 0.1,
        "restart_backoff_s": 0.2,
        "stop_grace_s": 3.0,
        "start_timeout_s": 30.0,
        "env": {"FAKE_EXTRA": "yes"},
    }
    base.update(settings)
    config = tmp_path / "server.yaml"
    config.write_text(yaml.safe_dump(base))
    return config


def fake_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env["FAKE_VLLM_RECORD"] = str(tmp_path / "record.jsonl")
    env["_ROS_WHEELS_BOOTSTRAP_COMPLETE"] = "1"
    env.update(extra)
    return env


# --- the command line and the settings ------------------------------------------------------------


def test_shipped_config_loads_and_documents_every_setting() -> None:
    settings = sup.load_settings()
    assert settings == sup.ServerSettings()  # the YAML states the defaults, nothing else
    text = sup.DEFAULT_CONFIG.read_text()
    keys = set(yaml.safe_load(text))
    names = {f.name for f in dataclasses.fields(sup.ServerSettings)}
    assert keys == names
    for name in names:  # each setting's line carries a comment
        line = next(line for line in text.splitlines() if line.startswith(f"{name}:"))
        assert "#" in line, name


def test_plugin_command_is_the_cookbook_command() -> None:
    settings = sup.ServerSettings(model="nvidia/Cosmos3-Nano", media_dir="/data/media", port=8000)
    cmd = sup.build_command(settings)
    assert cmd[:3] == ["vllm", "serve", "nvidia/Cosmos3-Nano"]
    hf = json.loads(cmd[cmd.index("--hf-overrides") + 1])
    assert hf == {"architectures": ["Cosmos3ReasonerForConditionalGeneration"]}
    assert cmd[cmd.index("--tensor-parallel-size") + 1] == "1"
    assert cmd[cmd.index("--mm-encoder-tp-mode") + 1] == "data"
    assert "--async-scheduling" in cmd
    assert cmd[cmd.index("--allowed-local-media-path") + 1] == "/data/media"
    assert json.loads(cmd[cmd.index("--media-io-kwargs") + 1]) == {"video": {"num_frames": -1}}
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--port") + 1] == "8000"
    assert "--enforce-eager" not in cmd and "--max-model-len" not in cmd


@pytest.mark.parametrize(
    ("mode", "architecture"),
    [("native", "Cosmos3ForConditionalGeneration"), ("qwen3vl", "Qwen3VLForConditionalGeneration")],
)
def test_modes_choose_the_architecture(mode: str, architecture: str) -> None:
    cmd = sup.build_command(sup.ServerSettings(mode=mode))
    assert json.loads(cmd[cmd.index("--hf-overrides") + 1]) == {"architectures": [architecture]}


def test_all_options_reach_the_command_in_order() -> None:
    settings = sup.ServerSettings(
        mode="native",
        model="/models/nano",
        served_model_name="cosmos",
        executable=("/venv/bin/python", "-m", "vllm.entrypoints.cli.main"),
        tensor_parallel_size=4,
        max_model_len=8192,
        enforce_eager=True,
        async_scheduling=False,
        trust_request_mm_kwargs=False,
        port=9001,
        extra_args=("--gpu-memory-utilization", "0.8"),
    )
    cmd = sup.build_command(settings)
    assert cmd[:5] == ["/venv/bin/python", "-m", "vllm.entrypoints.cli.main", "serve", "/models/nano"]
    assert cmd[cmd.index("--served-model-name") + 1] == "cosmos"
    assert cmd[cmd.index("--tensor-parallel-size") + 1] == "4"
    assert cmd[cmd.index("--max-model-len") + 1] == "8192"
    assert "--enforce-eager" in cmd
    assert "--async-scheduling" not in cmd and "--trust-request-mm-kwargs" not in cmd
    assert cmd[-2:] == ["--gpu-memory-utilization", "0.8"]  # extra arguments come last and win


def test_external_mode_builds_no_command() -> None:
    with pytest.raises(sup.SupervisorError):
        sup.build_command(sup.ServerSettings(mode="external", server_url="http://gpu:8000/v1"))
    assert sup.ServerSettings(mode="external", server_url="http://gpu:8000/v1").url == "http://gpu:8000"


@pytest.mark.parametrize(
    "overrides",
    [
        {"mode": "turbo"},
        {"port": "0"},
        {"gpus": "0,x"},
        {"tensor_parallel_size": "0"},
        {"mode": "external"},  # needs server_url
        {"no_such_setting": "1"},
        {"async_scheduling": "maybe"},
        {"media_io_kwargs": "[1, 2]"},
    ],
)
def test_invalid_settings_are_rejected_with_the_setting_named(overrides: dict[str, str]) -> None:
    with pytest.raises(sup.SupervisorError) as info:
        sup.load_settings(None, overrides)
    assert info.value.exit_code == sup.EXIT_CONFIG
    assert next(iter(overrides)) in str(info.value)


def test_command_line_flags_override_the_config(tmp_path: Path) -> None:
    args = sup.parse_args(
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
            "--set",
            "enforce_eager=true",
            "--set",
            'media_io_kwargs={"video": {"num_frames": 8}}',
            "--set",
            "extra_args=--seed 7",
        ]
    )
    settings = sup.settings_from_args(args)
    assert (settings.mode, settings.model, settings.port, settings.gpus) == ("native", "/m", 9100, "2,3")
    assert settings.tensor_parallel_size == 2 and settings.enforce_eager is True
    assert settings.media_io_kwargs == {"video": {"num_frames": 8}}
    assert settings.extra_args == ("--seed", "7")


def test_yaml_gpu_list_and_number_are_accepted() -> None:
    assert sup.settings_from_mapping({"gpus": [0, 1]}).gpus == "0,1"
    assert sup.settings_from_mapping({"gpus": 3}).gpus == "3"


def test_environment_of_the_server(tmp_path: Path) -> None:
    settings = sup.ServerSettings(
        gpus="1, 3",
        cache_dir=str(tmp_path / "c"),
        env={"VLLM_CPU_KVCACHE_SPACE": "2"},
        unset_env=("_ROS_WHEELS_BOOTSTRAP_COMPLETE", "LD_LIBRARY_PATH"),
    )
    env = sup.build_env(
        settings, {"_ROS_WHEELS_BOOTSTRAP_COMPLETE": "1", "LD_LIBRARY_PATH": "/opt/ros", "HOME": "/h"}
    )
    assert env["CUDA_VISIBLE_DEVICES"] == "1,3"
    assert env["TMPDIR"] == str(tmp_path / "c" / "tmp")
    assert env["VLLM_CACHE_ROOT"] == str(tmp_path / "c" / "vllm")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "c" / "inductor")
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2" and env["HOME"] == "/h"
    assert "_ROS_WHEELS_BOOTSTRAP_COMPLETE" not in env and "LD_LIBRARY_PATH" not in env


# --- checks before starting -----------------------------------------------------------------------


def test_missing_executable_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = sup.main(
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
    assert code == sup.EXIT_NO_EXECUTABLE
    assert "/nonexistent/vllm" in capsys.readouterr().err


def test_missing_model_path_is_reported(tmp_path: Path, fake_vllm: Path, capsys) -> None:
    code = sup.main(
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
    assert code == sup.EXIT_NO_MODEL
    assert "does not exist" in capsys.readouterr().err
    # A hub id is not a path: it passes this check.
    sup.prepare(
        sup.ServerSettings(
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
        code = sup.main(
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
    assert code == sup.EXIT_PORT_IN_USE
    assert f"port {port}" in capsys.readouterr().err
    assert not (tmp_path / "record.jsonl").exists()  # nothing was started


def test_media_dir_is_created_private(tmp_path: Path, fake_vllm: Path) -> None:
    media = tmp_path / "a" / "media"
    sup.prepare(
        sup.ServerSettings(
            model=str(tmp_path), executable=(str(fake_vllm),), port=free_port(), media_dir=str(media)
        )
    )
    assert media.is_dir() and stat.S_IMODE(media.stat().st_mode) == 0o700


# --- supervision of a stand-in server -----------------------------------------------------------------------


@pytest.mark.slow
def test_ready_restart_after_death_and_stop_of_the_whole_group(tmp_path: Path, fake_vllm: Path) -> None:
    port = free_port()
    proc = SupervisorProcess(write_config(tmp_path, fake_vllm, port, gpus="0,1"), fake_env(tmp_path))
    try:
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
        assert first["env"]["_ROS_WHEELS_BOOTSTRAP_COMPLETE"] is None
        assert os.getpgid(first["pid"]) == first["pid"]  # its own process group

        os.killpg(first["pid"], signal.SIGKILL)  # a crash of the server and its workers
        assert proc.read_until("READY ") == f"READY http://127.0.0.1:{port}"
        second = records(tmp_path / "record.jsonl")[1]
        assert second["pid"] != first["pid"]
        assert json.loads((tmp_path / "ready.json").read_text())["starts"] == 2
        assert any("restart 1/5" in line for line in proc.lines)

        proc.proc.send_signal(signal.SIGTERM)
        assert proc.finish() == sup.EXIT_OK
        assert not alive(second["pid"]) and not alive(second["worker"])  # the whole group is gone
        assert not (tmp_path / "ready.json").exists()
    finally:
        if proc.proc.poll() is None:
            proc.proc.kill()


@pytest.mark.slow
def test_sigint_stops_too_and_sigkill_follows_an_ignored_sigterm(tmp_path: Path, fake_vllm: Path) -> None:
    port = free_port()
    proc = SupervisorProcess(
        write_config(tmp_path, fake_vllm, port, stop_grace_s=1.0),
        fake_env(tmp_path, FAKE_VLLM_BEHAVIOUR="ignore_term"),
    )
    try:
        proc.read_until("READY ")
        server = records(tmp_path / "record.jsonl")[0]
        started = time.monotonic()
        proc.proc.send_signal(signal.SIGINT)
        assert proc.finish() == sup.EXIT_OK
        assert 0.9 < time.monotonic() - started < 15
        assert any("SIGKILL" in line for line in proc.lines)
        assert not alive(server["pid"]) and not alive(server["worker"])
    finally:
        if proc.proc.poll() is None:
            proc.proc.kill()


@pytest.mark.slow
def test_gives_up_after_bounded_restarts_with_growing_backoff(tmp_path: Path, fake_vllm: Path) -> None:
    config = write_config(tmp_path, fake_vllm, free_port(), max_restarts=3, restart_backoff_s=0.2)
    proc = SupervisorProcess(config, fake_env(tmp_path, FAKE_VLLM_BEHAVIOUR="exit"))
    started = time.monotonic()
    assert proc.finish() == sup.EXIT_GAVE_UP
    assert len(records(tmp_path / "record.jsonl")) == 4  # the first start and three restarts
    assert time.monotonic() - started >= 0.2 + 0.4 + 0.8  # backoff doubles
    assert any("giving up" in line for line in proc.lines)
    # Each dead server's worker was stopped with it (they would hold the port and memory).
    assert not any(alive(r["worker"]) for r in records(tmp_path / "record.jsonl"))


@pytest.mark.slow
def test_start_timeout_stops_the_server(tmp_path: Path, fake_vllm: Path) -> None:
    config = write_config(tmp_path, fake_vllm, free_port(), start_timeout_s=1.0)
    proc = SupervisorProcess(config, fake_env(tmp_path, FAKE_VLLM_BEHAVIOUR="never_ready"))
    assert proc.finish() == sup.EXIT_NOT_READY
    server = records(tmp_path / "record.jsonl")[0]
    assert not alive(server["pid"]) and not alive(server["worker"])
    assert any("start_timeout_s" in line for line in proc.lines)


def test_external_mode_waits_for_the_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ready = tmp_path / "ready.json"
    with ScriptedServer() as server:
        code = sup.main(["--mode", "external", "--server-url", server.base_url, "--ready-file", str(ready)])
    assert code == sup.EXIT_OK
    assert f"READY {server.url}" in capsys.readouterr().out.splitlines()
    assert json.loads(ready.read_text())["url"] == server.url


def test_external_mode_gives_up_when_nothing_answers(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    started = time.monotonic()
    code = sup.main(["--mode", "external", "--server-url", url, "--start-timeout-s", "0.5"])
    assert code == sup.EXIT_NOT_READY
    assert time.monotonic() - started < 10


def test_print_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert sup.main(["--print-command", "--mode", "native", "--port", "8123"]) == 0
    cmd = json.loads(capsys.readouterr().out)
    assert cmd[:3] == ["vllm", "serve", "nvidia/Cosmos3-Nano"] and cmd[cmd.index("--port") + 1] == "8123"
