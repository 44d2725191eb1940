"""`cosmos-reasoner-server`: builds the `vllm serve` command line from config/server.yaml and supervises it.

The server runs in its own process group with its log forwarded line by line; readiness (/health 200) is
printed as `READY <url>` and optionally written to a ready file; a server that dies is restarted with bounded
exponential backoff; SIGINT/SIGTERM stop the whole group (SIGTERM, then SIGKILL after a grace period).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TextIO

import yaml

from cosmos_reasoner_ros.errors import ReasonerError

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "config" / "server.yaml"
# Architecture each mode asks vLLM for (--hf-overrides); external starts nothing.
ARCHITECTURES = {
    "plugin": "Cosmos3ReasonerForConditionalGeneration",  # vLLM 0.19/0.21 with the vllm-cosmos3 plugin
    "native": "Cosmos3ForConditionalGeneration",  # newer vLLM, no plugin
    "qwen3vl": "Qwen3VLForConditionalGeneration",  # the tiny test checkpoint (or any Qwen3-VL model)
}
MODES = (*ARCHITECTURES, "external")

# Exit codes of main(): a launcher or script can tell the failures apart.
EXIT_OK = 0
EXIT_CONFIG = 2
EXIT_NO_EXECUTABLE = 3
EXIT_PORT_IN_USE = 4
EXIT_NO_MODEL = 5
EXIT_NOT_READY = 6
EXIT_GAVE_UP = 7


class SupervisorError(ReasonerError):
    """The server cannot be started or supervised; `exit_code` is what main() returns for it."""

    kind = "server_unavailable"

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class ServerSettings:
    """Every setting of config/server.yaml (documented there)."""

    mode: str = "plugin"
    model: str = "nvidia/Cosmos3-Nano"
    served_model_name: str = ""
    executable: tuple[str, ...] = ("vllm",)
    host: str = "127.0.0.1"
    port: int = 8000
    server_url: str = ""
    tensor_parallel_size: int = 1
    gpus: str = ""
    mm_encoder_tp_mode: str = "data"
    async_scheduling: bool = True
    media_dir: str = "/tmp/cosmos_reasoner/media"  # noqa: S108 (the node's default; created 0700)
    media_io_kwargs: dict[str, Any] = field(default_factory=lambda: {"video": {"num_frames": -1}})
    trust_request_mm_kwargs: bool = True
    max_model_len: int = 0
    enforce_eager: bool = False
    extra_args: tuple[str, ...] = ()
    cache_dir: str = ""
    env: dict[str, str] = field(default_factory=lambda: {"VLLM_NO_USAGE_STATS": "1"})
    unset_env: tuple[str, ...] = ("_ROS_WHEELS_BOOTSTRAP_COMPLETE",)
    start_timeout_s: float = 1800.0
    health_period_s: float = 1.0
    max_restarts: int = 5
    restart_backoff_s: float = 2.0
    restart_backoff_max_s: float = 60.0
    restart_reset_s: float = 600.0
    stop_grace_s: float = 20.0
    ready_file: str = ""
    log_prefix: str = "[vllm] "

    def __post_init__(self) -> None:
        problems = []
        if self.mode not in MODES:
            problems.append(f"mode: one of {', '.join(MODES)}, got {self.mode!r}")
        if not 0 < self.port < 65536:
            problems.append(f"port: 1-65535, got {self.port}")
        if self.tensor_parallel_size < 1:
            problems.append(f"tensor_parallel_size: >= 1, got {self.tensor_parallel_size}")
        if self.mode != "external" and not self.model:
            problems.append("model: a local checkpoint directory or a hub id is needed")
        if self.mode != "external" and not self.executable:
            problems.append("executable: empty")
        if self.mode == "external" and not self.server_url:
            problems.append("server_url: needed in mode external")
        if self.server_url and not self.server_url.startswith(("http://", "https://")):
            problems.append(f"server_url: must start with http:// or https://, got {self.server_url!r}")
        if min(self.start_timeout_s, self.health_period_s, self.stop_grace_s) <= 0 or self.max_restarts < 0:
            problems.append("start_timeout_s, health_period_s, stop_grace_s: > 0; max_restarts: >= 0")
        if self.gpus and not all(g.strip().isdigit() for g in self.gpus.split(",")):
            problems.append(f"gpus: comma-separated GPU ids such as 0,1, got {self.gpus!r}")
        if problems:
            raise SupervisorError("invalid server settings:\n  " + "\n  ".join(problems), EXIT_CONFIG)

    @property
    def url(self) -> str:
        """Root URL of the server (where /health lives)."""
        if self.server_url:
            url = self.server_url.rstrip("/")
            return url[: -len("/v1")] if url.endswith("/v1") else url
        return f"http://{self.host}:{self.port}"


def load_settings(path: Path | None = None, overrides: Mapping[str, Any] | None = None) -> ServerSettings:
    """Settings from a YAML file (default: the shipped config/server.yaml) with overrides applied on top."""
    data: dict[str, Any] = {}
    source = path or DEFAULT_CONFIG
    if source.exists():
        loaded = yaml.safe_load(source.read_text()) or {}
        if not isinstance(loaded, dict):
            raise SupervisorError(f"{source}: expected a mapping of settings", EXIT_CONFIG)
        data.update(loaded)
    elif path is not None:
        raise SupervisorError(f"config file {path} does not exist", EXIT_CONFIG)
    data.update(overrides or {})
    return settings_from_mapping(data)


def settings_from_mapping(data: Mapping[str, Any]) -> ServerSettings:
    """Typed settings from plain values (YAML or command line); unknown keys are an error."""
    known = {f.name: f for f in fields(ServerSettings)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise SupervisorError(f"unknown server settings: {', '.join(unknown)}", EXIT_CONFIG)
    defaults = ServerSettings()
    values: dict[str, Any] = {}
    for name, value in data.items():
        default = getattr(defaults, name)
        try:
            values[name] = _coerce(value, default)
        except (TypeError, ValueError) as exc:
            raise SupervisorError(f"setting {name}: {exc}", EXIT_CONFIG) from exc
    return ServerSettings(**values)


def _coerce(value: Any, default: Any) -> Any:
    if isinstance(default, bool):
        if isinstance(value, str):
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(f"expected true or false, got {value!r}")
            return value.lower() in ("true", "1", "yes")
        return bool(value)
    if isinstance(default, int):
        return int(value)
    if isinstance(default, float):
        return float(value)
    if isinstance(default, tuple):
        if isinstance(value, str):
            return tuple(value.split()) if value.strip() else ()
        return tuple(str(v) for v in value)
    if isinstance(default, dict):
        parsed = json.loads(value) if isinstance(value, str) else value
        if not isinstance(parsed, dict):
            raise ValueError(f"expected a mapping, got {value!r}")
        return dict(parsed)
    if isinstance(default, str):
        # YAML reads `gpus: 0` as an int and `gpus: [0, 1]` as a list.
        return ",".join(str(v) for v in value) if isinstance(value, list) else str(value)
    return value


def build_command(settings: ServerSettings) -> list[str]:
    """The `vllm serve` argument list for these settings (never a shell string)."""
    if settings.mode == "external":
        raise SupervisorError("mode external starts no server", EXIT_CONFIG)
    cmd = [*settings.executable, "serve", settings.model]
    if settings.served_model_name:
        cmd += ["--served-model-name", settings.served_model_name]
    cmd += ["--hf-overrides", json.dumps({"architectures": [ARCHITECTURES[settings.mode]]})]
    cmd += ["--tensor-parallel-size", str(settings.tensor_parallel_size)]
    if settings.mm_encoder_tp_mode:
        cmd += ["--mm-encoder-tp-mode", settings.mm_encoder_tp_mode]
    if settings.async_scheduling:
        cmd.append("--async-scheduling")
    if settings.media_dir:
        cmd += ["--allowed-local-media-path", str(Path(settings.media_dir).expanduser().resolve())]
    if settings.media_io_kwargs:
        cmd += ["--media-io-kwargs", json.dumps(settings.media_io_kwargs)]
    if settings.trust_request_mm_kwargs:
        cmd.append("--trust-request-mm-kwargs")
    if settings.max_model_len > 0:
        cmd += ["--max-model-len", str(settings.max_model_len)]
    if settings.enforce_eager:
        cmd.append("--enforce-eager")
    cmd += ["--host", settings.host, "--port", str(settings.port)]
    cmd += list(settings.extra_args)
    return cmd


def build_env(settings: ServerSettings, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment: the caller's minus unset_env, plus GPUs, caches and configured variables."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in settings.unset_env}
    if settings.gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(g.strip() for g in settings.gpus.split(","))
    if settings.cache_dir:
        # Compilation caches and temporary files in a directory the caller owns (not ~/.cache or /tmp).
        root = Path(settings.cache_dir).expanduser().resolve()
        env["TMPDIR"] = str(root / "tmp")
        env["VLLM_CACHE_ROOT"] = str(root / "vllm")
        env["TORCHINDUCTOR_CACHE_DIR"] = str(root / "inductor")
    env.update({k: str(v) for k, v in settings.env.items()})
    return env


def prepare(settings: ServerSettings) -> None:
    """Checks before starting (a clear message now, not a failing server minutes later); creates dirs."""
    exe = settings.executable[0]
    if shutil.which(exe) is None:
        hint = " (install vLLM, or set `executable` in config/server.yaml)" if exe == "vllm" else ""
        raise SupervisorError(f"the vLLM executable {exe!r} was not found{hint}", EXIT_NO_EXECUTABLE)
    if _looks_local(settings.model) and not Path(settings.model).expanduser().exists():
        raise SupervisorError(f"model path {settings.model} does not exist", EXIT_NO_MODEL)
    if port_in_use(settings.host, settings.port):
        raise SupervisorError(
            f"port {settings.port} on {settings.host} is already in use (another server? choose another port "
            "or use mode external with its URL)",
            EXIT_PORT_IN_USE,
        )
    if settings.media_dir:
        media = Path(settings.media_dir).expanduser()
        if not media.exists():
            # Only the node and the server need to read it: private to this user.
            media.mkdir(parents=True, mode=0o700)
    if settings.cache_dir:
        root = Path(settings.cache_dir).expanduser()
        for sub in ("tmp", "vllm", "inductor"):
            (root / sub).mkdir(parents=True, exist_ok=True)


def _looks_local(model: str) -> bool:
    # "org/name" is a hub id; a path starts with /, . or ~ (a relative local org/name is written ./org/name).
    return model.startswith(("/", ".", "~"))


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def health_ok(url: str, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout_s) as resp:  # noqa: S310 (http(s) URL checked)
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


class Supervisor:
    """Starts, watches, restarts and stops one vLLM server; `run()` blocks until stop() or a fatal failure."""

    def __init__(
        self,
        settings: ServerSettings,
        out: TextIO | None = None,
        on_ready: Callable[[str, int], None] | None = None,
    ) -> None:
        self.settings = settings
        self._out = out or sys.stdout
        self._on_ready = on_ready
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._out_lock = threading.Lock()
        self.starts = 0
        self._stop_reason = ""

    def say(self, message: str) -> None:
        with self._out_lock:
            self._out.write(f"[cosmos-reasoner-server] {message}\n")
            self._out.flush()

    def stop(self, reason: str = "") -> None:
        """Ask run() to stop the server and return. Safe in a signal handler: it takes no lock (the handler
        may interrupt this very thread while it holds the output lock)."""
        self._stop_reason = reason
        self._stop.set()

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def run(self) -> int:
        s = self.settings
        if s.mode == "external":
            return self._wait_external()
        prepare(s)
        failures = 0
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                proc = self._start()
                ready = self._wait_ready(proc)
                if ready:
                    self._watch(proc)
                if self._stop.is_set():
                    break
                code = proc.poll()
                self._clear_ready()
                if code is not None:
                    # The leader died, its workers (the engine core) may live on, holding the port and memory.
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                if not ready and code is None:
                    self.say(f"not healthy within start_timeout_s={s.start_timeout_s:.0f} s: stopping it")
                    self._terminate(proc)
                    return EXIT_NOT_READY
                if time.monotonic() - started >= s.restart_reset_s:
                    failures = 0
                failures += 1
                if failures > s.max_restarts:
                    self.say(f"the server exited with code {code} {failures} times in a row: giving up")
                    return EXIT_GAVE_UP
                delay = min(s.restart_backoff_s * 2 ** (failures - 1), s.restart_backoff_max_s)
                self.say(f"server exit code {code}; restart {failures}/{s.max_restarts} after {delay:.1f} s")
                if self._stop.wait(delay):
                    break
                if port_in_use(s.host, s.port):
                    self.say(f"port {s.port} is still taken after the server exited; waiting for it")
        finally:
            if self._stop.is_set():
                self.say(f"stopping{' on ' + self._stop_reason if self._stop_reason else ''}")
            if self._proc is not None:
                self._terminate(self._proc)
            self._clear_ready()
        return EXIT_OK

    def _start(self) -> subprocess.Popen[bytes]:
        cmd = build_command(self.settings)
        self.say("starting: " + " ".join(cmd))
        proc = subprocess.Popen(
            cmd,
            env=build_env(self.settings),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopping it also stops its workers
        )
        with self._lock:
            self._proc = proc
        self.starts += 1
        threading.Thread(target=self._forward, args=(proc,), name="vllm-log", daemon=True).start()
        return proc

    def _forward(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            with self._out_lock:
                self._out.write(f"{self.settings.log_prefix}{line}\n")
                self._out.flush()
        proc.stdout.close()

    def _wait_ready(self, proc: subprocess.Popen[bytes]) -> bool:
        """True once /health answers 200; False when the process exits, the time is up or stop() is called."""
        s = self.settings
        deadline = time.monotonic() + s.start_timeout_s
        started = time.monotonic()
        while time.monotonic() < deadline and not self._stop.is_set():
            if proc.poll() is not None:
                return False
            if health_ok(s.url):
                self._ready(proc.pid, time.monotonic() - started)
                return True
            self._stop.wait(s.health_period_s)
        return False

    def _watch(self, proc: subprocess.Popen[bytes]) -> None:
        """Until the server exits or stop(): a ready server is only restarted when its process dies."""
        while not self._stop.is_set() and proc.poll() is None:
            self._stop.wait(self.settings.health_period_s)

    def _ready(self, pid: int, elapsed_s: float) -> None:
        url = self.settings.url
        self.say(f"healthy after {elapsed_s:.1f} s (pid {pid})")
        if self.settings.ready_file:
            path = Path(self.settings.ready_file)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            record = {
                "url": url,
                "base_url": url + "/v1",
                "pid": pid,
                "starts": self.starts,
                "start_s": round(elapsed_s, 2),
                "supervisor_pid": os.getpid(),
            }
            tmp.write_text(json.dumps(record) + "\n")
            tmp.replace(path)  # atomic: a reader never sees half a file
        with self._out_lock:
            # Machine-readable: the demo and the tests wait for this line (printed after the ready file).
            self._out.write(f"READY {url}\n")
            self._out.flush()
        if self._on_ready is not None:
            self._on_ready(url, pid)

    def _clear_ready(self) -> None:
        if self.settings.ready_file:
            Path(self.settings.ready_file).unlink(missing_ok=True)

    def _terminate(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGTERM to the whole process group, SIGKILL after stop_grace_s; also reaps leftover workers."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=self.settings.stop_grace_s)
        except subprocess.TimeoutExpired:
            self.say(f"still running {self.settings.stop_grace_s:.0f} s after SIGTERM: SIGKILL")
        # Workers of the group may outlive the leader: never leave any behind.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def _wait_external(self) -> int:
        s = self.settings
        self.say(f"waiting up to {s.start_timeout_s:.0f} s for the external server {s.url}")
        deadline = time.monotonic() + s.start_timeout_s
        started = time.monotonic()
        while time.monotonic() < deadline and not self._stop.is_set():
            if health_ok(s.url):
                self._ready(0, time.monotonic() - started)
                return EXIT_OK
            self._stop.wait(s.health_period_s)
        if self._stop.is_set():
            return EXIT_OK
        self.say(f"the external server {s.url} did not answer /health within {s.start_timeout_s:.0f} s")
        return EXIT_NOT_READY


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="cosmos-reasoner-server",
        description="Start and supervise the vLLM server of the Cosmos 3 Reasoner (config/server.yaml).",
    )
    parser.add_argument("--config", type=Path, help="settings file (default: the shipped config/server.yaml)")
    parser.add_argument("--mode", choices=MODES)
    parser.add_argument("--model", help="checkpoint directory or hub id")
    parser.add_argument("--served-model-name")
    parser.add_argument("--port", type=int)
    parser.add_argument("--host")
    parser.add_argument("--server-url", help="mode external: the server to wait for")
    parser.add_argument("--tensor-parallel-size", type=int)
    parser.add_argument("--gpus", help="GPU ids for CUDA_VISIBLE_DEVICES, e.g. 0,1")
    parser.add_argument("--media-dir", help="--allowed-local-media-path, shared with the node")
    parser.add_argument("--ready-file", help="write {url, pid, ...} as JSON here once /health answers")
    parser.add_argument("--start-timeout-s", type=float)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other setting of server.yaml (repeatable; JSON for mappings)",
    )
    parser.add_argument("--print-command", action="store_true", help="print the vllm command and exit")
    return parser.parse_args(argv)


def settings_from_args(args: argparse.Namespace) -> ServerSettings:
    overrides: dict[str, Any] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise SupervisorError(f"--set expects KEY=VALUE, got {item!r}", EXIT_CONFIG)
        overrides[key.strip()] = value
    for name in (
        "mode",
        "model",
        "served_model_name",
        "port",
        "host",
        "server_url",
        "tensor_parallel_size",
        "gpus",
        "media_dir",
        "ready_file",
        "start_timeout_s",
    ):
        value = getattr(args, name)
        if value is not None and value != "":
            overrides[name] = value
    return load_settings(args.config, overrides)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        settings = settings_from_args(args)
        if args.print_command:
            print(json.dumps(build_command(settings)))
            return EXIT_OK
        supervisor = Supervisor(settings)

        def on_signal(signum: int, _frame: object) -> None:
            supervisor.stop(signal.Signals(signum).name)

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            return supervisor.run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    except SupervisorError as exc:
        print(f"cosmos-reasoner-server: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
